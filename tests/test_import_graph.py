"""``scripts/import_graph.py`` finds import cycles (lazy imports included) and imports against the layers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "import_graph.py"


def load() -> object:
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "costaware" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "costaware"


def test_a_lazy_cycle_and_an_upward_import_are_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = write(
        tmp_path,
        {
            "__init__.py": "",
            "core/__init__.py": "",
            "core/money.py": "from costaware.core.rates import RATE\n",
            "core/rates.py": "def f():\n    from costaware.core import money\n",  # lazy, still a cycle
            "adapters/__init__.py": "",
            "adapters/store.py": "from costaware.glue import helper\nfrom costaware.core.money import x\n",
            "glue.py": "import costaware.adapters.store\n",
            "extras.py": "",
            "training/__init__.py": "",
            "training/fit.py": "from costaware.extras import optional\n",  # a helper: not upward
        },
    )
    graph = load()
    assert graph.main(["--json", "--root", str(package)]) == 0  # type: ignore[attr-defined]
    report = json.loads(capsys.readouterr().out)
    assert sorted(report["cycles"]) == [
        ["costaware.adapters.store", "costaware.glue"],
        ["costaware.core.money", "costaware.core.rates"],
    ]
    assert report["upward"] == [["costaware.adapters.store", "costaware.glue"]]


def test_it_runs_on_the_package() -> None:
    graph = load()
    edges = graph.graph(SCRIPT.parents[1] / "src" / "costaware")  # type: ignore[attr-defined]
    # A lazy import (in RemoteTrainingOperator's wait) is an edge.
    assert "costaware.training.attempts" in edges["costaware.operators.remote_training_wait"]


RUNTIME_FILES = {
    "__init__.py": "import boto3\n",  # an optional dependency: allowed
    "sync.py": "from costaware_runtime import stores\n",
    "stores.py": "def f():\n    import airflow.sdk\n",  # lazy, still forbidden
    "launcher.py": "def g():\n    from costaware.core.money import usd\n    import costaware_runtime.sync\n",
}


def write_runtime(root: Path) -> Path:
    for name, text in RUNTIME_FILES.items():
        path = root / "costaware_runtime" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "costaware_runtime"


def test_the_runtime_is_scanned_by_default_and_its_imports_of_the_provider_or_airflow_are_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The script read src/costaware alone: runtime/src was never scanned, and nothing found a (lazy) import
    # of costaware or airflow there, which fails in a training image that has the runtime alone.
    graph = load()
    runtime = write_runtime(tmp_path)
    monkeypatch.setattr(graph, "RUNTIME_SRC", runtime, raising=False)
    monkeypatch.setattr(graph, "SRC", write(tmp_path, {"__init__.py": "", "core/__init__.py": ""}))
    assert graph.main(["--json"]) == 0  # type: ignore[attr-defined]
    report = json.loads(capsys.readouterr().out)
    assert report["foreign"] == [
        ["costaware_runtime.launcher", "costaware.core.money"],
        ["costaware_runtime.stores", "airflow.sdk"],
    ]
    assert report["cycles"] == [] and report["upward"] == []
    assert graph.main([]) == 0  # type: ignore[attr-defined]
    said = capsys.readouterr().out
    assert "2 forbidden import(s) (costaware_runtime never imports costaware, airflow):" in said
    assert "  costaware_runtime.stores -> airflow.sdk\n" in said


#: The runtime's cycle left, for a reason: S3Store.check reads the credential waits from ``stores``, where
#: users (and a test) set them on the module.
RUNTIME_CYCLES_LEFT = [["costaware_runtime._s3_store", "costaware_runtime.stores"]]


def test_the_runtime_has_no_cycle_but_those_left_for_a_reason() -> None:
    # checkpoints imported sync (its restore and push) and sync, like _step_folders, imported checkpoints
    # back for the marker: the marker lives in _marker now, which imports neither. _command_line imported
    # launcher's Launcher for main, which launcher re-exported: launcher.main now hands it the Launcher.
    graph = load()
    found = graph.cycles(graph.graph(graph.RUNTIME_SRC))  # type: ignore[attr-defined]
    assert sorted(found) == RUNTIME_CYCLES_LEFT
