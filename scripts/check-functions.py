#!/usr/bin/env python3
"""No Rust function in the workspace's crates is over 100 lines, from its `fn`
line to its closing brace: a longer one does more than one thing, and its parts
want names. Lists every offender as `path:line name length` and fails.

Test code is left out: `tests/` folders, items under `#[cfg(test)]` or
`#[test]` (a `mod tests { .. }` block, or a file such a `mod tests;` names),
`fuzz/` (its own workspace) and `target/`. Braces are matched over the code
alone, with comments, strings (raw ones too) and chars blanked first; a
lifetime or label (`'a`) is not a char.
"""
import os
import re
import sys

LIMIT = 100
SKIP_DIRS = {"tests", "fuzz", "target", ".git"}
FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z_0-9]*)")
TEST_ATTR = re.compile(r"#\[(?:cfg\(test\)|test)\]")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z_0-9]*)\s*;")


def blank(text):
    """The text with every comment, string and char replaced by spaces (newlines kept)."""
    out = list(text)
    n = len(text)

    def wipe(start, end):
        for k in range(start, min(end, n)):
            if out[k] != "\n":
                out[k] = " "

    i = 0
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        ident_before = i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")
        if c == "/" and nxt == "/":
            end = text.find("\n", i)
            end = n if end < 0 else end
            wipe(i, end)
            i = end
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif not ident_before and (m := re.match(r'(?:b|c)?r(#*)"', text[i:])):
            close = '"' + m.group(1)
            end = text.find(close, i + m.end())
            end = n if end < 0 else end + len(close)
            wipe(i, end)
            i = end
        elif c == '"' or (not ident_before and c in "bc" and nxt == '"'):
            j = i + (1 if c == '"' else 2)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'" or (not ident_before and c == "b" and nxt == "'"):
            q = i if c == "'" else i + 1
            if q + 1 < n and text[q + 1] == "\\":
                # An escaped char: '\n', '\'', '\u{..}'.
                j = q + 3
                while j < n and text[j] != "'":
                    j += 1
                wipe(i, j + 1)
                i = j + 1
            elif q + 2 < n and text[q + 2] == "'":
                wipe(i, q + 3)
                i = q + 3
            else:
                # A lifetime or a label.
                i = q + 1
        else:
            i += 1
    return "".join(out)


def body(code, start):
    """(open, close) offsets of the block of the item starting at `start`, or None if it has none."""
    depth = 0
    for j in range(start, len(code)):
        ch = code[j]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch == ";":
            return None
        elif depth == 0 and ch == "{":
            level = 0
            for k in range(j, len(code)):
                if code[k] == "{":
                    level += 1
                elif code[k] == "}":
                    level -= 1
                    if level == 0:
                        return j, k
            return None
    return None


def test_module_files(path, code):
    """Files of the modules this file declares under `#[cfg(test)]` (`mod tests;`)."""
    here = os.path.dirname(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    folder = here if stem in ("mod", "lib", "main") else os.path.join(here, stem)
    found = set()
    for name in TEST_MOD.findall(code):
        found.add(os.path.normpath(os.path.join(folder, name + ".rs")))
        found.add(os.path.normpath(os.path.join(folder, name)))
    return found


def rust_files(root):
    for member in sorted(os.listdir(root)):
        crate = os.path.join(root, member)
        if member in SKIP_DIRS or not os.path.isfile(os.path.join(crate, "Cargo.toml")):
            continue
        for dirpath, dirs, files in os.walk(crate):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for f in sorted(files):
                if f.endswith(".rs"):
                    yield os.path.normpath(os.path.join(dirpath, f))


def offenders(root):
    files = list(rust_files(root))
    codes = {f: blank(open(f, encoding="utf-8").read()) for f in files}
    test_paths = set()
    for f, code in codes.items():
        test_paths |= test_module_files(f, code)
    for f in files:
        if f in test_paths or any(f.startswith(p + os.sep) for p in test_paths):
            continue
        code = codes[f]
        test_spans = []
        for m in TEST_ATTR.finditer(code):
            span = body(code, m.end())
            if span:
                test_spans.append(span)
        for m in FN.finditer(code):
            if any(a <= m.start() <= b for a, b in test_spans):
                continue
            span = body(code, m.end())
            if not span:
                continue
            first = code.count("\n", 0, m.start()) + 1
            length = code.count("\n", m.start(), span[1]) + 1
            if length > LIMIT:
                yield os.path.relpath(f, root), first, m.group(1), length


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    found = sorted(offenders(root), key=lambda o: -o[3])
    if found:
        print(f"functions over {LIMIT} lines (split them by responsibility):")
        for path, line, name, length in found:
            print(f"{path}:{line} {name} {length}")
        return 1
    print(f"no function (outside tests) is over {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
