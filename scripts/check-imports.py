#!/usr/bin/env python3
"""No import circles in any crate: between the top-level modules (folders and
files under src/), nor between sibling files of one folder.

A module names another through `crate::a::b`, `super::b` or `self::b` outside
comments; a folder's mod.rs and its children are one unit (the parent declares
them), so their references to each other do not count. Test-only files
(tests.rs, interleavings.rs) and `#[cfg(test)] mod tests { .. }` bodies are
left out: a test may reach anywhere. A lower layer that must reach a higher
one does so through hooks the higher one sets at start-up (the preload's
cache, pressure and threads hooks), which this check keeps honest.
"""
import os
import re
import sys

CRATES = ["prezero", "prezero-service", "prezero-capi", "prezero-preload", "prezero-cli"]
PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z_0-9]*)+)")
GROUP = re.compile(r"\b((?:crate|super|self)(?:::[a-z_][a-z_0-9]*)*)::\{([^{}]*)\}")


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
    text = open(path, encoding="utf-8").read()
    cut = text.find("#[cfg(test)]\nmod tests {")
    if cut >= 0:
        text = text[:cut]
    return re.sub(r"//[^\n]*", "", text)


def references(mod, text):
    """Every module path the text names, resolved against `mod`."""
    names = [p.split("::") for p in PATH.findall(text)]
    for base, inner in GROUP.findall(text):
        for item in inner.split(","):
            item = item.strip().split(" as ")[0]
            if re.fullmatch(r"[a-z_][a-z_0-9]*(::[a-z_][a-z_0-9]*)*", item):
                names.append(base.split("::") + item.split("::"))
    for segs in names:
        if segs[0] == "crate":
            yield tuple(segs[1:])
        elif segs[0] == "super":
            n = 0
            while n < len(segs) and segs[n] == "super":
                n += 1
            yield mod[: max(0, len(mod) - n)] + tuple(segs[n:])
        else:
            yield mod + tuple(segs[1:])


def resolve(mods, path):
    for k in range(len(path), -1, -1):
        if path[:k] in mods:
            return path[:k]
    return None


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


def check(src):
    mods = modules(src)
    files = {}
    for mod, (path, _) in mods.items():
        if mod and mod[-1] in ("tests", "interleavings"):
            continue
        deps = set()
        for ref in references(mod, code(path)):
            target = resolve(mods, ref)
            if target is not None and target != mod:
                deps.add(target)
        files[mod] = deps
    problems = []
    # Top-level modules: a file or folder directly under src/.
    top = {}
    for mod, deps in files.items():
        if not mod:
            continue
        top.setdefault(mod[0], set()).update(d[0] for d in deps if d and d[0] != mod[0])
    for comp in cycles(top):
        problems.append("modules " + " -> ".join(comp))
    # Sibling files of one folder (a folder's mod.rs and its children are one unit).
    siblings = {}
    for mod, deps in files.items():
        for d in deps:
            if len(d) == len(mod) and d[:-1] == mod[:-1] and mods[mod][0] != mods[d][0]:
                if not mods[mod][1] and not mods[d][1]:
                    siblings.setdefault(mod, set()).add(d)
    for comp in cycles(siblings):
        problems.append("files " + " -> ".join("::".join(c) for c in comp))
    return problems


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad = False
    for crate in CRATES:
        for problem in check(os.path.join(root, crate, "src")):
            print(f"{crate}: import circle between {problem}")
            bad = True
    if bad:
        sys.exit(1)
    print("no import circles in " + ", ".join(CRATES))


if __name__ == "__main__":
    main()
