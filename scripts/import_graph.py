"""The import graph of ``harness/``: modules, arrows between them, floors and cycles.

Reads every ``import`` and ``from ... import`` in ``harness/**/*.py`` (function-level imports
included: they are dependencies all the same) and counts the arrows from one harness module to
another. A module's floor is the length of the longest chain of arrows below it (a module that
imports no other harness module is on floor 0); the depth is the number of floors. A cycle is
any group of modules that import each other, directly or not.

    .venv/bin/python scripts/import_graph.py                 # this checkout
    .venv/bin/python scripts/import_graph.py --root /tmp/old # another one (git worktree add)
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, current: str, is_package: bool) -> Iterable[str]:
    """Every module name this file imports (relative imports resolved)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = current.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            # `from harness.records import attempt` imports the module harness.records.attempt
            yield from (f"{base}.{alias.name}" for alias in node.names)


def graph(root: Path) -> dict[str, set[str]]:
    files = sorted((root / "harness").rglob("*.py"))
    modules = {module_name(root, f): f for f in files}
    modules.pop("harness", None)  # the package itself: no code of its own
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        for target in imported(tree, name, path.name == "__init__.py"):
            # The deepest known module the name refers to (a name imported from a module is
            # not a module of its own).
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target != "harness":
                edges[name].add(target)
    # A package's __init__ that only documents itself is no floor of its own.
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def floors(edges: dict[str, set[str]]) -> dict[str, int]:
    floor: dict[str, int] = {}

    def visit(node: str, seen: frozenset[str]) -> int:
        if node in floor:
            return floor[node]
        below = [visit(c, seen | {node}) for c in edges[node] if c not in seen]
        floor[node] = 1 + max(below) if below else 0
        return floor[node]

    for node in edges:
        visit(node, frozenset())
    return floor


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="checkout to read (default: this one)")
    args = parser.parse_args()
    edges = graph(args.root)
    top = sorted(p.name for p in (args.root / "harness").iterdir()
                 if (p.suffix == ".py" and p.name != "__init__.py")
                 or (p.is_dir() and (p / "__init__.py").exists()))
    floor = floors(edges)
    loops = cycles(edges)
    print(f"checkout: {args.root}")
    print(f"entries directly in harness/ (modules and packages): {len(top)}: {', '.join(top)}")
    print(f"modules: {len(edges)}; arrows between them: {sum(len(v) for v in edges.values())}")
    print(f"floors: {max(floor.values()) + 1}; cycles: {len(loops)}")
    for group in loops:
        print("  cycle: " + " <-> ".join(group))
    # The same graph seen from the top: each module counted as the entry of harness/ it is in.
    entry = {m: ".".join(m.split(".")[:2]) for m in edges}
    coarse: dict[str, set[str]] = {e: set() for e in entry.values()}
    for m, targets in edges.items():
        coarse[entry[m]] |= {entry[t] for t in targets if entry[t] != entry[m]}
    coarse_floor = floors(coarse)
    print(f"between the entries of harness/: {sum(len(v) for v in coarse.values())} arrows, "
          f"{max(coarse_floor.values()) + 1} floors, {len(cycles(coarse))} cycles")
    for e in sorted(coarse, key=lambda e: (-coarse_floor[e], e)):
        below = ", ".join(sorted(t.removeprefix("harness.") for t in coarse[e])) or "-"
        print(f"  floor {coarse_floor[e]:>2}  {e.removeprefix('harness.'):<11} imports {below}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
