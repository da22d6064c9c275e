"""Imports point one way, and no module imports itself around a loop.

Layers, lowest first: ``core`` <- ``adapters`` (and ``settings``) <- ``training`` <- the Airflow glue
(operators, sensors, triggers, hooks, timetables, notifications, the CLI, ``glue.py``) <- ``plugins``.
The graph is ``scripts/import_graph.py``'s, built from the source, so a lazy import inside a function
counts too; run the script to see the figures.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import costaware

SRC = Path(costaware.__file__).parent
SCRIPT = SRC.parents[1] / "scripts" / "import_graph.py"

# Within the glue layer: package -> packages it must not import (costaware.<name>, at any depth). An operator
# or sensor imports the trigger it defers to; a trigger never imports an operator or sensor.
FORBIDDEN = {
    "operators": ("plugins", "cli"),
    "sensors": ("plugins", "cli"),
    "triggers": ("plugins", "cli", "operators", "sensors"),
    "hooks": ("plugins", "cli", "operators", "sensors", "triggers"),
    "timetables": ("plugins", "cli", "operators", "sensors", "triggers"),
    "notifications": ("plugins", "cli", "operators", "sensors", "triggers"),
    "cli": ("plugins", "operators", "sensors", "triggers", "timetables"),
    # glue.py is shared by triggers, hooks and the CLI: through it they would import operators.
    "glue": ("plugins", "cli", "operators", "sensors", "triggers", "timetables", "notifications"),
}


def _graph_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GRAPH = _graph_script()
EDGES = GRAPH.graph(SRC)


def test_every_package_has_a_layer() -> None:
    packages = {name.split(".")[1] for name in EDGES if "." in name}
    for package in ("core", "adapters", "training", "operators", "cli", "plugins", "settings"):
        assert package in packages
    assert GRAPH.layer("costaware.training.runner") == 2
    assert GRAPH.layer("costaware.cli") == GRAPH.layer("costaware.operators.promote") == GRAPH.GLUE


def test_no_import_points_up_a_layer() -> None:
    up = GRAPH.upward(EDGES)
    assert not up, "upward imports:\n" + "\n".join(f"{a} -> {b}" for a, b in up)


def test_no_import_cycle() -> None:
    found = GRAPH.cycles(EDGES)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(group) for group in found)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_glue_packages_import_one_way(package: str) -> None:
    bad = [
        f"{module} imports {target}"
        for module, targets in EDGES.items()
        if module.split(".")[1:2] == [package]
        for target in targets
        if target.split(".")[1] in FORBIDDEN[package]
    ]
    assert not bad, "\n".join(bad)


def test_the_checks_see_a_lazy_upward_import(tmp_path: Path) -> None:
    root = tmp_path / "costaware"
    for name, text in {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/a.py": "def f():\n    from costaware.operators.b import x\n",
        "operators/__init__.py": "",
        "operators/b.py": "from costaware.core import a\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    edges = GRAPH.graph(root)
    assert GRAPH.upward(edges) == [("costaware.core.a", "costaware.operators.b")]
    assert GRAPH.cycles(edges) == [["costaware.core.a", "costaware.operators.b"]]


def test_glue_imports_no_airflow_at_import_time() -> None:
    code = "import sys, costaware.glue, costaware.settings; print('airflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
