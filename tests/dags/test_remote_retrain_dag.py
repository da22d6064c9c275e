"""`airflow dags test` of the remote retrain example DAG on the local backend, in a fresh Airflow home."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from services import migrated_airflow_env, run_command

from costaware import Ledger

ROOT = Path(__file__).resolve().parents[2]


def test_remote_retrain_parses_fast_with_its_tasks() -> None:
    started = time.perf_counter()
    bag = DagBag(dag_folder=str(ROOT / "dags" / "remote_retrain.py"))
    assert time.perf_counter() - started < 5  # generous: the file itself imports no training code
    assert not bag.import_errors
    dag = bag.dags["remote_retrain"]
    assert set(dag.task_ids) == {
        "land_new_data",
        "features",
        "spend_gate",
        "spot_window",
        "retrain",
        "promote",
    }


@pytest.mark.slow
def test_dags_test_trains_on_the_local_backend_with_one_entry_per_attempt(tmp_path: Path) -> None:
    env = migrated_airflow_env(tmp_path / "home", ROOT / "dags")
    budget = run_command(
        env,
        "costaware",
        "budget",
        "set",
        "--scope",
        "project=flight-delays",
        "--period",
        "month",
        "--cap-usd",
        "25",
    )
    assert budget.returncode == 0, budget.stderr
    run = run_command(env, "airflow", "dags", "test", "remote_retrain", "2013-02-01")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    assert "after 1 attempt(s)" in output and "candidate promoted" in output
    ledger = Ledger.from_url(env["COSTAWARE_LEDGER_URL"])
    rows = ledger.entries(dag_id="remote_retrain")
    ledger.dispose()
    retrain = {r["cause"]: r for r in rows if r["task_id"] == "retrain" and not r["estimated"]}
    assert set(retrain) == {"success", "orchestration"}
    assert retrain["success"]["price_source"] == "remote:local" and retrain["success"]["usd"] > 0
