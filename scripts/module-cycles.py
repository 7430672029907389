#!/usr/bin/env python3
"""Fails when a crate of the workspace has a module cycle: module A uses module B (through
`crate::B` or `super::B`) while B, directly or through others, uses A. A module and its own
submodules are one unit here (a parent declares its children and a child may use its
parent's items); cycles between sibling modules, at any depth, are reported with the path.

Usage: scripts/module-cycles.py [CRATE_DIR ...]   (default: every crate of the workspace)
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def modules(src: pathlib.Path):
    """Module path (tuple) -> source file, for every `.rs` file under `src`."""
    found = {}
    for path in src.rglob("*.rs"):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts == ["main"] and (src / "lib.rs").exists():
            continue  # a binary over the library: a crate of its own
        if parts in (["lib"], ["main"]):
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        found[tuple(parts)] = path
    return found


def code(text: str) -> str:
    """The text without comments (doc comments name paths that are not uses)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def paths(text: str):
    """Every `crate::...` and `super::...` path in the code, expanding `use` groups."""
    out = []
    for m in re.finditer(r"\b(crate|super)((?:::\w+)*)(::\{)?", text):
        head = [m.group(1)] + [p for p in m.group(2).split("::") if p]
        if m.group(3):
            depth, i = 1, m.end()
            while i < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            inner = text[m.end():i - 1]
            for item in re.split(r",(?![^{]*\})", inner):
                item = item.strip()
                first = re.match(r"\w+", item)
                if first and first.group(0) != "self":
                    out.append(head + [first.group(0)])
                else:
                    out.append(head)
        else:
            out.append(head)
    return out


def reexports(root_text: str, known):
    """Names the crate root re-exports from its modules (`pub use module::Name;`), so that
    `crate::Name` is seen as a use of the module that defines it."""
    names = {}
    for path in paths(code(root_text).replace("use ", "use crate::")):
        if len(path) >= 3 and path[0] == "crate" and (path[1],) in known:
            names[path[-1]] = path[1:]
    return names


def resolve(module, path, known, names):
    """The module a path names: the longest known module prefix of its absolute form."""
    if path[0] == "crate":
        absolute = path[1:]
        if len(absolute) == 1 and absolute[0] in names:
            absolute = names[absolute[0]]
    else:
        base = list(module)
        rest = path
        while rest and rest[0] == "super":
            base = base[:-1]
            rest = rest[1:]
        absolute = base + rest
    for n in range(len(absolute), -1, -1):
        if tuple(absolute[:n]) in known:
            return tuple(absolute[:n])
    return ()


def related(a, b):
    """Whether one module contains the other."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def cycles(src: pathlib.Path):
    known = modules(src)
    names = reexports(known[()].read_text(), known) if () in known else {}
    graph = {m: set() for m in known}
    for module, file in known.items():
        for path in paths(code(file.read_text())):
            target = resolve(module, path, known, names)
            if target and not related(module, target):
                graph[module].add(target)
    # Tarjan's strongly connected components.
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(scc)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return sccs, graph


def main():
    dirs = [pathlib.Path(a) for a in sys.argv[1:]] or sorted(
        [ROOT] + [p for p in (ROOT / "crates").iterdir() if (p / "src").is_dir()]
    )
    failed = False
    for crate in dirs:
        sccs, graph = cycles(crate / "src")
        for scc in sccs:
            failed = True
            names = ["::".join(m) for m in sorted(scc)]
            edges = [
                f"{'::'.join(a)} -> {'::'.join(b)}"
                for a in sorted(scc)
                for b in sorted(graph[a])
                if b in scc
            ]
            print(f"{crate.name}: module cycle among {', '.join(names)} ({'; '.join(edges)})")
    if failed:
        sys.exit(1)
    print(f"no module cycle in {len(dirs)} crates")


if __name__ == "__main__":
    main()
