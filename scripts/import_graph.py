"""The import graph of ``src/costaware``: its cycles and its imports against the layers.

Run: ``.venv/bin/python scripts/import_graph.py [--json]``.

Every ``import costaware...`` counts, also one inside a function (a lazy import still ties two modules). A
cycle is a group of modules that import each other, directly or around a loop. Layers, lowest first:
``core`` <- ``adapters`` <- ``training`` <- the Airflow glue (operators, sensors, triggers, hooks, timetables,
notifications and the top-level modules) <- ``plugins``; an import of a higher layer is an upward import.
The ``cli`` package sits with the glue; ``extras`` and ``importing`` (optional-import helpers) with ``core``;
``settings`` (the configuration every layer above core reads) with ``adapters``. Exits 0: the figures are
for reading; ``tests/test_layers.py`` fails on any cycle or upward import.

It reads ``runtime/src/costaware_runtime`` too, the slim runtime installed into training images without the
provider: there the figures also list each import of a package the runtime must never import (``costaware``,
``airflow``), lazy ones included, which ``tests/runtime/test_runtime_isolation.py`` fails on.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "costaware"
RUNTIME_SRC = Path(__file__).resolve().parents[1] / "runtime" / "src" / "costaware_runtime"
#: Packages a package must never import, at any depth: the runtime is a distribution of its own, installed in
#: a training image without the provider or Airflow (an import of either failed there, in a lazy one at run).
FOREIGN = {"costaware_runtime": ("costaware", "airflow")}
#: Rank of each top-level package or module; the rest of costaware (glue.py, cli*.py, ...) ranks as the glue.
#: ``extras`` and ``importing`` (optional-import helpers, no Airflow) rank with ``core``, ``settings`` with
#: ``adapters`` (it reads the environment, so pure ``core`` must not import it), and so ``settings_home``.
LAYERS = {
    "extras": 0,
    "importing": 0,
    "core": 0,
    "settings": 1,
    "settings_home": 1,  # $AIRFLOW_HOME's expansion, split from settings
    "adapters": 1,
    "training": 2,
    "plugins": 4,
}
GLUE = 3


def module_name(path: Path, root: Path) -> str:
    """``costaware.adapters.ledger.store`` for ``<root>/adapters/ledger/store.py``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([root.name, *parts])


def imports_of(path: Path, package: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports (``from a import b`` counts as ``a.b`` if a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        for name in names:
            if name.split(".")[0] != package:
                continue
            while name and name not in known:  # a name imported from a module: the module
                name = name.rpartition(".")[0]
            if name and name != package:
                found.add(name)
                break  # ``from a import b``: b if it is a module, else a
    return found


def foreign_imports(root: Path, forbidden: Iterable[str]) -> list[tuple[str, str]]:
    """``(module, imported)`` for each import under ``root`` of a package in ``forbidden`` (or under one)."""
    tops = set(forbidden)
    found: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            found |= {(module_name(path, root), name) for name in names if name.split(".")[0] in tops}
    return sorted(found)


def graph(root: Path) -> dict[str, set[str]]:
    """``module -> the package's modules it imports`` for every module under ``root``."""
    paths = sorted(root.rglob("*.py"))
    known = {module_name(path, root) for path in paths}
    edges = {module_name(path, root): imports_of(path, root.name, known) for path in paths}
    for name, targets in edges.items():
        targets.discard(name)
        # A package's __init__ is not the module: drop edges to a parent package (they are re-exports).
        edges[name] = {t for t in targets if not name.startswith(t + ".")}
    return edges


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found, key=lambda group: (-len(group), group))


def layer(module: str) -> int:
    """The rank of ``module``'s layer (see :data:`LAYERS`)."""
    parts = module.split(".")
    return LAYERS.get(parts[1], GLUE) if len(parts) > 1 else GLUE


def upward(edges: Mapping[str, Iterable[str]]) -> list[tuple[str, str]]:
    """``(module, imported)`` pairs where a lower layer imports a higher one."""
    return sorted((a, b) for a, targets in edges.items() for b in targets if layer(b) > layer(a))


def main(argv: list[str] | None = None) -> int:
    """Print the cycles, the upward and forbidden imports and the modules over 400 lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--root",
        type=Path,
        action="append",
        help="a package folder, may be given again (default src/costaware and runtime/src/costaware_runtime)",
    )
    args = parser.parse_args(argv)
    roots: list[Path] = args.root or [SRC, RUNTIME_SRC]
    edges: dict[str, set[str]] = {}
    foreign: list[tuple[str, str]] = []
    sizes: list[tuple[str, int]] = []
    for root in roots:
        edges |= graph(root)
        foreign += foreign_imports(root, FOREIGN.get(root.name, ()))
        sizes += [(module_name(p, root), len(p.read_text().splitlines())) for p in root.rglob("*.py")]
    found, up = cycles(edges), upward(edges)
    large = sorted(((name, lines) for name, lines in sizes if lines > 400), key=lambda item: -item[1])
    if args.json:
        report = {"cycles": found, "upward": up, "foreign": foreign, "modules_over_400_lines": large}
        print(json.dumps(report))
        return 0
    print(f"{len(edges)} modules, {sum(len(t) for t in edges.values())} imports between them")
    print(f"{len(found)} import cycle(s):")
    for group in found:
        print("  " + " <-> ".join(group))
    print(f"{len(up)} upward import(s) (layers: core < adapters < training < glue < plugins):")
    for source, target in up:
        print(f"  {source} -> {target}")
    forbidden = "; ".join(f"{package} never imports {', '.join(names)}" for package, names in FOREIGN.items())
    print(f"{len(foreign)} forbidden import(s) ({forbidden}):")
    for source, target in foreign:
        print(f"  {source} -> {target}")
    print(f"{len(large)} module(s) over 400 lines:")
    for name, lines in large:
        print(f"  {lines:5d} {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
