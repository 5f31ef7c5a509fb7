#!/usr/bin/env python3
"""Each crate's imports: no circle between its top-level modules (folders and
files under src/), nor between sibling files of one folder; and where the crate
root's docs draw the modules as layers, every import goes down that table.

A module names another through `crate::a::b`, `super::b` or `self::b` outside
comments, or a `use` tree. A name that arrives through a `use` (a re-export
such as the library's `pub use error::Error`, then `crate::Error` elsewhere)
counts as naming the module that defines it: the `use` chain is followed, so
a re-export hides no edge. A folder's mod.rs and its children are one unit
(the parent declares them), so their references to each other do not count.
Test-only files (tests.rs, interleavings.rs) and `#[cfg(test)] mod tests { .. }`
bodies are left out: a test may reach anywhere.

The layer table is the ```text block after the sentence LAYERS in the crate
root's `//!` docs, one row per layer, highest first: the row's modules (`x/` a
folder, `x.rs` a file, comma-separated), two or more spaces, then what they
import: modules, `y and below` (y's layer and every lower one), `all below`, or
`nothing`; words in parentheses are notes. An import must go to a lower layer
and be one its row lists. A lower layer reaches a higher one only through hooks
it defines and the higher one sets at start-up (the preload's cache, pressure
and threads hooks): the higher one names the hook, the lower one never names
the higher, so a hook is a downward edge and needs no exception here.

`--self-test` plants a circle through a re-export and an upward import in a
fake crate and checks that both are caught.
"""
import bisect
import os
import re
import sys
import tempfile

CRATES = ["prezero-sys", "prezero", "prezero-service", "prezero-capi", "prezero-preload", "prezero-cli"]
LAYERS = "The modules are layers, each importing only those below it"
PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z_0-9]*)+)")
USE = re.compile(r"\buse\s+([^;]*);")
TOKEN = re.compile(r"::|[{},*]|[A-Za-z_][A-Za-z_0-9]*")
MODULE = re.compile(r"\b([a-z_][a-z_0-9]*)(/|\.rs)(\s+and below)?")
TEST_ONLY = ("tests", "interleavings")


def modules(src):
    """Module path (tuple) -> (file, whether it is a folder's mod.rs/lib.rs)."""
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            parts = tuple(os.path.relpath(path, src)[:-3].split(os.sep))
            folder = parts[-1] in ("mod", "lib", "main")
            if folder:
                parts = parts[:-1]
            out[parts] = (path, folder)
    return out


def code(path):
    """The file without its unit tests and comments; lines keep their numbers."""
    text = open(path, encoding="utf-8").read()
    cut = text.find("#[cfg(test)]\nmod tests {")
    if cut >= 0:
        text = text[:cut]
    return re.sub(r"//[^\n]*", "", text)


def use_leaves(tree, offset):
    """(offset, segments, alias) of each leaf of a `use` tree: `a::{b, c::d as e}`
    gives a::b and a::c::d (as e), so a group's members each count."""
    toks = [(m.group(), offset + m.start()) for m in TOKEN.finditer(tree)] + [(";", 0)]
    out = []

    def one(i, prefix):
        path = list(prefix)
        while True:
            tok, pos = toks[i]
            if tok == "{":
                i += 1
                while toks[i][0] not in ("}", ";"):
                    i = one(i, path)
                    i += toks[i][0] == ","
                return i + 1
            if tok == "*":
                out.append((pos, path + ["*"], None))
                return i + 1
            if tok != "::":
                path.append(tok)
            i += 1
            if toks[i][0] == "::":
                i += 1
                continue
            alias = toks[i + 1][0] if toks[i][0] == "as" else None
            if path and path[-1] == "self":
                path.pop()
            out.append((pos, path, alias))
            return i + 2 if alias else i

    one(0, [])
    return out


def absolute(mods, mod, segs):
    """A path as written in `mod`, from the crate root; None if it leaves the
    crate (std, another crate) or is empty."""
    if not segs:
        return None
    if segs[0] == "crate":
        return tuple(segs[1:])
    if segs[0] == "super":
        n = 0
        while n < len(segs) and segs[n] == "super":
            n += 1
        return mod[: max(0, len(mod) - n)] + tuple(segs[n:])
    if segs[0] == "self":
        return mod + tuple(segs[1:])
    # Edition 2018: a bare path in a `use` starts at a child module or another crate.
    return mod + tuple(segs) if mod + (segs[0],) in mods else None


def references(mods, mod, text):
    """(line, path from the root, name) of every path the text names, and of
    each leaf of its `use` trees, whose name (the alias or the last segment)
    the module then holds; None for a path outside a `use`."""
    lines = [m.start() for m in re.finditer("\n", text)]
    out = [(m.start(), m.group(1).split("::"), None) for m in PATH.finditer(text)]
    for m in USE.finditer(text):
        for pos, segs, alias in use_leaves(m.group(1), m.start(1)):
            out.append((pos, segs, alias or (segs[-1] if segs else None)))
    for pos, segs, name in sorted(out, key=lambda r: r[0]):
        path = absolute(mods, mod, segs)
        if path is not None:
            yield bisect.bisect(lines, pos) + 1, path, name


class Crate:
    """One crate's modules and the names each brings in with `use`."""

    def __init__(self, src):
        self.mods = modules(src)
        self.text = {m: code(p) for m, (p, _) in self.mods.items()}
        self.uses, self.globs, self.refs = {}, {}, {}
        for mod, text in self.text.items():
            self.refs[mod] = list(references(self.mods, mod, text))
            for _, path, name in self.refs[mod]:
                if name == "*":
                    self.globs.setdefault(mod, []).append(path[:-1])
                elif name not in (None, "_"):
                    self.uses.setdefault((mod, name), path)

    def module_of(self, path):
        """The longest prefix of `path` that is a module."""
        for k in range(len(path), -1, -1):
            if path[:k] in self.mods:
                return path[:k]
        return ()

    def defines(self, mod, name):
        """Whether `mod`'s own code defines `name` (for `use x::*`)."""
        item = r"\b(?:fn|struct|enum|union|trait|type|const|static|mod)\s+" + re.escape(name) + r"\b"
        return re.search(item, self.text.get(mod, "")) is not None

    def defining(self, path):
        """The module that defines what `path` names, following `use` chains
        (re-exports and globs) through the crate."""
        seen = set()
        while path not in seen:
            seen.add(path)
            base = self.module_of(path)
            rest = path[len(base):]
            if not rest:
                return base
            nxt = self.uses.get((base, rest[0]))
            if nxt is None and not self.defines(base, rest[0]):
                for g in self.globs.get(base, ()):
                    g = self.module_of(g)
                    if g != base and ((g, rest[0]) in self.uses or self.defines(g, rest[0])):
                        nxt = g + (rest[0],)
                        break
            if nxt is None or nxt == path:
                return base
            path = tuple(nxt) + rest[1:]
        return self.module_of(path)

    def edges(self):
        """Module -> {module it names: (file, line) of the first naming}."""
        out = {}
        for mod, refs in self.refs.items():
            if mod and mod[-1] in TEST_ONLY:
                continue
            deps = out.setdefault(mod, {})
            for line, path, _ in refs:
                target = self.defining(path)
                if target != mod and target not in deps:
                    deps[target] = (self.mods[mod][0], line)
        return out


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def table(root_file):
    """The layer table of the crate root's docs: [(modules, what they import)],
    highest layer first; None if the docs draw none."""
    docs = "\n".join(l[3:].strip() for l in open(root_file, encoding="utf-8") if l.startswith("//!"))
    at = docs.find(LAYERS)
    if at < 0:
        return None
    block = re.search(r"```text\n(.*?)```", docs[at:], re.S)
    rows = []
    for line in block.group(1).splitlines() if block else []:
        left, _, right = line.strip().partition("  ")
        names = [m.group(1) for m in MODULE.finditer(left)]
        if names:
            rows.append((names, re.sub(r"\([^)]*\)", "", right)))
    return rows


def layer_problems(crate, rows, tops, top_edges):
    """The table's own mistakes, then each import that goes up it or that its
    row does not list."""
    rank = {n: len(rows) - i for i, (names, _) in enumerate(rows) for n in names}
    problems = [f"{crate}: {m} is not in the layer table" for m in sorted(tops - set(rank))]
    problems += [f"{crate}: the layer table names {n}, which is not a module" for n in sorted(set(rank) - tops)]
    allowed = {}
    for names, right in rows:
        below = {n for n in rank if rank[n] < rank[names[0]]}
        ok = set(below) if "all below" in right else set()
        for m in MODULE.finditer(right):
            if m.group(3):  # `y and below`
                ok.update(n for n in rank if rank[n] <= rank.get(m.group(1), 0))
            else:
                ok.add(m.group(1))
        for n in sorted(ok - below):
            problems.append(f"{crate}: the layer table lets {names[0]} import {n}, which is not below it")
        allowed.update((n, ok) for n in names)
    for (a, b), (path, line) in sorted(top_edges.items()):
        if a not in rank or b not in rank:
            continue
        if rank[a] <= rank[b]:
            problems.append(f"{crate}: {a} -> {b} ({path}:{line}) breaks the layer order: "
                            f"{a} is layer {rank[a]}, {b} is layer {rank[b]}")
        elif b not in allowed[a]:
            problems.append(f"{crate}: {a} -> {b} ({path}:{line}) is not among the imports "
                            f"of {a}'s row of the layer table")
    return problems


def check(crate, src):
    """Every problem of one crate's imports, one line each."""
    c = Crate(src)
    files = c.edges()
    problems = []
    # Top-level modules: a file or folder directly under src/.
    tops = {m[0] for m in c.mods if m and m[0] not in TEST_ONLY}
    top, top_edges = {}, {}
    for mod, deps in files.items():
        for d, where in deps.items():
            if mod and d and d[0] != mod[0]:
                top.setdefault(mod[0], set()).add(d[0])
                top_edges.setdefault((mod[0], d[0]), where)
    for comp in cycles(top):
        problems.append(f"{crate}: import circle between modules " + " -> ".join(comp))
    # Sibling files of one folder (a folder's mod.rs and its children are one unit).
    siblings = {}
    for mod, deps in files.items():
        for d in deps:
            if len(d) == len(mod) and d[:-1] == mod[:-1] and c.mods[mod][0] != c.mods[d][0]:
                if not c.mods[mod][1] and not c.mods[d][1]:
                    siblings.setdefault(mod, set()).add(d)
    for comp in cycles(siblings):
        problems.append(f"{crate}: import circle between files " + " -> ".join("::".join(x) for x in comp))
    rows = table(c.mods[()][0]) if () in c.mods else None
    if rows is not None:
        problems += layer_problems(crate, rows, tops, top_edges)
    return problems


FAKE = {
    # A circle only a re-export shows: a names b's Thing as `crate::Thing`.
    "circle/src/lib.rs": "mod a;\nmod b;\npub use b::Thing;\n",
    "circle/src/a.rs": "pub struct A;\npub fn f(_: crate::Thing) {}\n",
    "circle/src/b.rs": "pub struct Thing(pub crate::a::A);\n",
    # An upward import, again through a re-export (`crate::Top` is high's).
    "layers/src/lib.rs": "//! The layers.\n//!\n//! " + LAYERS + ":\n//!\n//! ```text\n"
    "//! high.rs            low.rs\n//! mid.rs, low.rs      nothing\n//! ```\n"
    "mod high;\nmod low;\nmod mid;\npub use high::Top;\n",
    "layers/src/high.rs": "pub struct Top;\n",
    "layers/src/mid.rs": "pub struct Mid;\n",
    "layers/src/low.rs": "pub struct Low;\npub fn g(_: crate::Top) {}\n",
}
EXPECTED = [
    "circle: import circle between modules a -> b", "circle: import circle between files a -> b",
    "layers: low -> high (", "breaks the layer order: low is layer 1, high is layer 2",
]


def self_test():
    """Plant the two faults the checker exists for and check both are caught,
    and that the fake crates report nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in FAKE.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, name)), exist_ok=True)
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        found = check("circle", os.path.join(tmp, "circle/src"))
        found += check("layers", os.path.join(tmp, "layers/src"))
    missed = [e for e in EXPECTED if not any(e in p for p in found)]
    extra = [p for p in found if not any(e in p for e in EXPECTED)]
    for p in found:
        print("self-test found: " + p)
    if missed or extra or len(found) != 3:
        print(f"check-imports self-test FAILED: missed {missed}, unexpected {extra}")
        sys.exit(1)
    print("check-imports self-test: the planted circle and upward import are both caught")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    # From the repository's root, so each file:line reads as a path in it.
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    problems = []
    for crate in CRATES:
        problems += check(crate, os.path.join(crate, "src"))
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print("no import circle, and every layer table kept, in " + ", ".join(CRATES))


if __name__ == "__main__":
    main()
