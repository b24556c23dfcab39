"""Find import cycles between the project's own modules, function-local imports included (run by `make lint`).

import-linter checks the contracts between packages, but it cannot see a circle inside one package, and a
function-local import (the usual way to hide a circle from Python) is still a circle in the design. This reads
every .py file under the root with `ast` (nothing is imported or executed), turns each `import`/`from ... import`
anywhere in a file (module level, inside functions, under `if TYPE_CHECKING:`) into an edge to the project module it
names, and reports every strongly connected component of that graph as one or more cycles, each with the file:line
of every import on it.

An edge goes to the most specific project module the statement names: `from a.b import c` is an edge to `a.b.c`
when that is a module of the tree, otherwise to `a.b` (the name is defined in a/b.py or a/b/__init__.py); `import
a.b.c` is an edge to `a.b.c`. Importing a submodule also runs its parents' __init__, but those implicit edges are
left out: a package whose __init__ re-exports its submodules is not a circle a reader has to untangle.

Usage: python tools/import_cycles.py [ROOT]   (exit 1 and one paragraph per cycle when there is one)
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# folders that hold no project source: virtual environments, caches, build output, node packages, run artifacts
SKIPPED = {"__pycache__", "node_modules", "build", "dist", "site", "runs"}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str  # the importing file, relative to the root
    line: int


def source_files(root: Path) -> Iterator[Path]:
    """Every .py file under root, skipping hidden folders (.venv, .git, caches) and SKIPPED ones."""
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry.name in SKIPPED:
            continue
        if entry.is_dir():
            yield from source_files(entry)
        elif entry.suffix == ".py":
            yield entry


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest prefix of the dotted name that is a module of the tree."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            target = _resolve(alias.name, modules)
            if target:
                yield target
        return
    base = node.module or ""
    if node.level:  # relative: from the module's own package, one level up per extra dot
        package = module.split(".") if is_package else module.split(".")[:-1]
        keep = len(package) - (node.level - 1)
        if keep < 0:
            return
        base = ".".join([*package[:keep], *([base] if base else [])])
    for alias in node.names:
        full = f"{base}.{alias.name}" if base else alias.name
        target = full if full in modules else _resolve(base, modules) if base else None
        if target:
            yield target


def import_graph(root: Path) -> dict[str, list[Edge]]:
    """module -> its edges to other modules of the tree (self-imports dropped)."""
    files = {module_name(root, path): path for path in source_files(root)}
    modules = set(files)
    graph: dict[str, list[Edge]] = {name: [] for name in files}
    for name, path in files.items():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError) as err:
            raise SystemExit(f"error: cannot parse {path.relative_to(root)}: {err}") from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _imported(node, name, path.name == "__init__.py", modules):
                    if target != name:
                        graph[name].append(Edge(name, target, str(path.relative_to(root)), node.lineno))
    return graph


def strongly_connected(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """Tarjan's components with more than one module, each sorted, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[Edge]]] = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for edge in edges:
                if edge.target not in index:
                    index[edge.target] = low[edge.target] = counter
                    counter += 1
                    stack.append(edge.target)
                    on_stack.add(edge.target)
                    work.append((edge.target, iter(graph[edge.target])))
                    break
                if edge.target in on_stack:
                    low[node] = min(low[node], index[edge.target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def _shortest_cycle(graph: dict[str, list[Edge]], start: str, members: set[str]) -> list[Edge]:
    """The shortest path of edges from start back to start inside the component (breadth first)."""
    came: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for edge in sorted(graph[node], key=lambda e: (e.target, e.line)):
            if edge.target not in members or edge.target in came:
                continue
            came[edge.target] = edge
            if edge.target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, came[path[0].source])
                return path
            queue.append(edge.target)
    raise AssertionError(f"{start} is in a component but on no cycle")  # cannot happen for a real component


def find_cycles(root: Path) -> list[list[Edge]]:
    """Cycles covering every module of every component: for each module not yet on a reported cycle of its
    component, the shortest cycle through it."""
    graph = import_graph(root)
    cycles: list[list[Edge]] = []
    for component in strongly_connected(graph):
        members, covered = set(component), set()
        for module in component:
            if module in covered:
                continue
            cycle = _shortest_cycle(graph, module, members)
            covered.update(edge.source for edge in cycle)
            cycles.append(cycle)
    return cycles


def describe(cycle: list[Edge]) -> str:
    chain = " -> ".join([cycle[0].source, *(edge.target for edge in cycle)])
    lines = [f"import cycle: {chain}"]
    lines += [f"  {edge.path}:{edge.line} imports {edge.target}" for edge in cycle]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", nargs="?", type=Path, default=ROOT, help="the tree to check (default: this repository)")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"root {args.root} is not a folder")
    cycles = find_cycles(args.root.resolve())
    for cycle in cycles:
        print(describe(cycle))
    if cycles:
        print(f"{len(cycles)} import cycle(s); break each by moving what both sides need into a module of its own")
        return 1
    print("no import cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
