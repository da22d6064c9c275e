"""Imports point one way: the Airflow glue never reaches into plugins/, core and adapters never into
the Airflow layer. Checked on the source, so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import costaware

SRC = Path(costaware.__file__).parent

# package -> packages it must not import (costaware.<name>, at any depth)
FORBIDDEN = {
    "operators": ("plugins", "cli"),
    "sensors": ("plugins", "cli"),
    "triggers": ("plugins", "cli"),
    "hooks": ("plugins", "cli", "operators", "sensors", "triggers"),
    "timetables": ("plugins", "cli", "operators", "sensors", "triggers"),
    "adapters": ("plugins", "cli", "operators", "sensors", "triggers", "hooks", "timetables"),
    "core": ("plugins", "cli", "operators", "sensors", "triggers", "hooks", "timetables", "adapters", "glue"),
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package: str) -> None:
    files = sorted((SRC / package).rglob("*.py"))
    assert files
    bad = []
    for path in files:
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "costaware" and len(parts) > 1 and parts[1] in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(SRC)} imports {name}")
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from costaware.plugins.listener import annotate_task\n")
    assert "costaware.plugins.listener" in _imports(module)


def test_glue_imports_no_airflow_at_import_time() -> None:
    import subprocess
    import sys

    code = "import sys, costaware.glue; print('airflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
