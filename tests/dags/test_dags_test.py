"""`airflow dags test` of the example DAG in a fresh Airflow home: it runs, and every task is priced."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from costaware import Ledger

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow-home")
    env = os.environ.copy()
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "COSTAWARE_LEDGER_URL": f"sqlite:///{home / 'ledger.db'}",
        }
    )
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True)
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]], env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_retrain_dag_runs_and_every_task_is_in_the_ledger(airflow_env: dict[str, str]) -> None:
    assert (
        _run(
            airflow_env,
            "costaware",
            "budget",
            "set",
            "--scope",
            "project=flight-delays",
            "--period",
            "month",
            "--cap-usd",
            "25",
        ).returncode
        == 0
    )
    run = _run(airflow_env, "airflow", "dags", "test", "cost_aware_retrain", "2013-02-01")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "candidate AUC" in run.stdout + run.stderr

    ledger = Ledger.from_url(airflow_env["COSTAWARE_LEDGER_URL"])
    run_id = ledger.last_run_id("cost_aware_retrain")
    rows = ledger.entries(dag_id="cost_aware_retrain", run_id=run_id)
    assert sorted(r["task_id"] for r in rows) == [
        "build_features",
        "evaluate_and_promote",
        "land_new_data",
        "spend_gate",
        "train",
    ]
    assert all(r["kind"] == "compute" and r["outcome"] == "success" for r in rows)
    assert all(r["tags"]["project"] == "flight-delays" and r["tags"]["team"] == "ml-platform" for r in rows)
    (usage,) = ledger.usage("project=flight-delays")
    assert usage.reserved_usd == 0  # the listener settled the gate's reservation for 'train'
    train = next(r for r in rows if r["task_id"] == "train")
    assert train["reservation_id"] is not None

    report = _run(airflow_env, "costaware", "report", "--dag-id", "cost_aware_retrain", "--last-run")
    assert report.returncode == 0
    lines = report.stdout.splitlines()
    assert any(line.startswith("TOTAL") for line in lines)
    for task in ("land_new_data", "build_features", "spend_gate", "train", "evaluate_and_promote"):
        assert any(line.startswith(task) for line in lines), report.stdout


@pytest.mark.slow
def test_run_fails_before_training_when_the_budget_is_spent(airflow_env: dict[str, str]) -> None:
    assert (
        _run(
            airflow_env,
            "costaware",
            "budget",
            "set",
            "--scope",
            "project=flight-delays",
            "--period",
            "month",
            "--cap-usd",
            "0",
        ).returncode
        == 0
    )
    run = _run(airflow_env, "airflow", "dags", "test", "cost_aware_retrain", "2013-02-02")
    output = run.stdout + run.stderr
    assert "budget 'project=flight-delays/" in output and "needs an estimated $0.05" in output
    ledger = Ledger.from_url(airflow_env["COSTAWARE_LEDGER_URL"])
    rows = ledger.entries(dag_id="cost_aware_retrain", run_id=ledger.last_run_id("cost_aware_retrain"))
    assert "train" not in {r["task_id"] for r in rows}  # no training was paid for
    assert {r["task_id"]: r["outcome"] for r in rows}["spend_gate"] == "failed"
