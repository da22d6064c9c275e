"""The runtime is its own slim distribution: standard library only, no Airflow, no costaware provider."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
PROVIDER_INSTALL_MB = 965  # the whole provider with Airflow, measured for issue 24
MODULES = [
    "costaware_runtime",
    "costaware_runtime.launcher",
    "costaware_runtime.torch",
    "costaware_runtime.huggingface",
    "costaware_runtime.boosting",
]
HEAVY = ["airflow", "costaware", "boto3", "botocore", "torch", "transformers", "xgboost", "lightgbm", "numpy"]


def test_importing_every_module_loads_no_framework() -> None:
    code = f"import importlib, json, sys; [importlib.import_module(m) for m in {MODULES!r}]; " + (
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_no_module_imports_the_provider_or_airflow_even_lazily() -> None:
    # The check above imports the modules: an import inside a function (of costaware, for a helper) passed it
    # and failed only when that function ran, in a training image without the provider.
    spec = importlib.util.spec_from_file_location(
        "import_graph", RUNTIME.parent / "scripts" / "import_graph.py"
    )
    assert spec is not None and spec.loader is not None
    graph = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graph)
    source = RUNTIME / "src" / "costaware_runtime"
    assert graph.foreign_imports(source, ("costaware", "airflow")) == []


def folder_mb(folder: Path) -> float:
    return sum(path.lstat().st_size for path in folder.rglob("*")) / 1e6


@pytest.mark.slow
def test_a_fresh_virtualenv_installs_only_the_runtime(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    environ = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(RUNTIME)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr

    probe = (
        "import importlib.util, json, costaware_runtime, costaware_runtime.launcher\n"
        "from costaware_runtime.stores import open_store\n"
        "try:\n"
        "    open_store('s3://bucket/x').check()\n"
        "except costaware_runtime.ContractError as e:\n"
        "    hint = str(e)\n"
        "print(json.dumps({'version': costaware_runtime.__version__, 'hint': hint,\n"
        "    'airflow': importlib.util.find_spec('airflow') is not None,\n"
        "    'costaware': importlib.util.find_spec('costaware') is not None}))\n"
    )
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=environ, check=True)
    found = json.loads(done.stdout)
    assert found["version"] == "0.1.10"
    assert found["airflow"] is False and found["costaware"] is False
    assert "needs boto3, which is not installed: pip install 'costaware-runtime[s3]'" in found["hint"]
    version = subprocess.run(
        [str(env_dir / "bin" / "costaware-run"), "--version"], capture_output=True, text=True, env=environ
    )
    assert version.stdout.strip() == "costaware-runtime 0.1.10"

    size_mb = folder_mb(env_dir)
    package_kb = folder_mb(next(env_dir.glob("lib/python*/site-packages/costaware_runtime"))) * 1000
    print(f"\nfresh venv with costaware-runtime: {size_mb:.1f} MB (the package itself: {package_kb:.0f} kB)")
    assert size_mb < 0.1 * PROVIDER_INSTALL_MB


def test_the_provider_requires_the_runtime_version_it_ships_with() -> None:
    """The provider imports the runtime's newest code (``check_writes`` came in 0.1.6, its ``refused`` of a
    mount that cannot rename in 0.1.7): a lower floor lets an upgrade keep an older runtime, and every
    remote-training DAG then fails to import."""
    import costaware_runtime
    import tomllib

    root = Path(__file__).resolve().parents[2]
    requirements = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    runtime = next(line for line in requirements if line.startswith("costaware-runtime"))
    assert f">={costaware_runtime.__version__}," in runtime, (
        f"pyproject.toml requires {runtime!r}, but the runtime in this repository is "
        f"{costaware_runtime.__version__}: raise the floor to it"
    )
