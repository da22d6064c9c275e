"""`airflow dags test` of the own-training example: a plain PyTorch script retrained through costaware."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from services import migrated_airflow_env, run_command

from costaware import Ledger

ROOT = Path(__file__).resolve().parents[2]


def test_own_training_parses_fast_with_its_tasks() -> None:
    started = time.perf_counter()
    bag = DagBag(dag_folder=str(ROOT / "dags" / "own_training.py"))
    assert time.perf_counter() - started < 5  # the file imports neither torch nor the runtime
    assert not bag.import_errors
    dag = bag.dags["own_training"]
    assert set(dag.task_ids) == {"prepare", "spend_gate", "spot_window", "train", "promote"}
    assert dag.get_task("promote").metric == "rmse"
    # One way to AWS, the SDK's default chain, as docs/own-training.md says: promote read the model store
    # through the aws_default connection, which may name other keys or another endpoint than train's.
    assert {t.task_id: t.aws_conn_id for t in dag.tasks if hasattr(t, "aws_conn_id")} == {
        "spot_window": None,
        "train": None,
        "promote": None,
    }


def test_the_example_script_imports_nothing_of_the_provider() -> None:
    import ast

    tree = ast.parse((ROOT / "examples" / "own_training" / "train_delay.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {
        str(node.module).split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    }
    allowed = {"__future__", "argparse", "json", "math", "sys", "tempfile", "time", "pathlib", "numpy"}
    assert imported <= allowed | {"torch", "costaware_runtime"}, imported


@pytest.mark.slow
def test_dags_test_trains_the_script_and_promotes_on_its_rmse(tmp_path: Path) -> None:
    env = migrated_airflow_env(tmp_path / "home", ROOT / "dags")
    budget = run_command(
        env, "costaware", "budget", "set", "--scope", "project=flight-delays", "--period", "month",
        "--cap-usd", "25",
    )  # fmt: skip
    assert budget.returncode == 0, budget.stderr
    conf = json.dumps({"epochs": 2})
    run = run_command(env, "airflow", "dags", "test", "own_training", "2013-02-01", "-c", conf)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "holdout" in output and "rmse" in output
    assert "checkpoint_every_seconds='auto'" in output  # the interval it chose, and why
    ledger = Ledger.from_url(env["COSTAWARE_LEDGER_URL"])
    rows = ledger.entries(dag_id="own_training")
    ledger.dispose()
    train = {r["cause"]: r for r in rows if r["task_id"] == "train" and not r["estimated"]}
    assert set(train) == {"success", "orchestration"}
    assert train["success"]["price_source"] == "remote:local" and train["success"]["usd"] > 0
    promote = [r for r in rows if r["task_id"] == "promote"]
    assert promote and promote[0]["outcome"] == "success"
