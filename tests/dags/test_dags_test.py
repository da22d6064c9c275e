"""`airflow dags test` of the example DAG in a fresh Airflow home, replaying two days like `make demo`."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from services import RETRAIN_TASKS, migrated_airflow_env, run_command, set_monthly_cap

from costaware import Ledger

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TASKS = RETRAIN_TASKS
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return migrated_airflow_env(tmp_path_factory.mktemp("airflow-home"), ROOT / "dags")


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_command(env, *args)


def _dags_test(env: dict[str, str], day: str, conf: dict[str, str] | None = None) -> tuple[str, list[dict]]:  # type: ignore[type-arg]
    run = _run(env, "airflow", "dags", "test", "cost_aware_retrain", day, "-c", json.dumps(conf or {}))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    ledger = Ledger.from_url(env["COSTAWARE_LEDGER_URL"])
    rows = ledger.entries(dag_id="cost_aware_retrain", run_id=ledger.last_run_id("cost_aware_retrain"))
    ledger.dispose()
    return output, rows


def test_two_days_full_then_warm_spot_and_a_cache_hit(airflow_env: dict[str, str]) -> None:
    set_monthly_cap(airflow_env, "25")

    output, rows = _dags_test(airflow_env, "2013-02-01")
    actual = [r for r in rows if not r["estimated"]]
    assert {r["task_id"] for r in actual} == TASKS  # every task try is priced
    # Every entry carries the run's allocation tags, the spot window's estimate included.
    assert all(r["tags"]["project"] == "flight-delays" and r["tags"]["team"] == "ml-platform" for r in rows)
    assert "retrain mode: full; reason: no champion yet" in output
    assert "computed features in" in output
    retrain = next(r for r in actual if r["task_id"] == "retrain")
    assert (retrain["instance_type"], retrain["market"]) == ("c5.4xlarge", "on_demand")
    assert retrain["reservation_id"] is not None  # the spend gate's reservation, settled by the listener

    deadline = (datetime.now(timezone.utc) + timedelta(hours=2)).isoformat()
    output, rows = _dags_test(
        airflow_env, "2013-02-02", {"spot_deadline": deadline, "spot_max_usd_per_hour": "0.40"}
    )
    assert "retrain mode: warm; reason: warm start:" in output
    assert "decision: spot at" in output
    retrain = next(r for r in rows if r["task_id"] == "retrain" and not r["estimated"])
    assert retrain["market"] == "spot" and retrain["on_demand_usd"] > retrain["usd"]

    output, rows = _dags_test(airflow_env, "2013-02-02")
    assert "reused features computed by cost_aware_retrain/" in output
    assert any(r["outcome"] == "cache_hit" and r["estimated"] for r in rows)

    ledger = Ledger.from_url(airflow_env["COSTAWARE_LEDGER_URL"])
    (usage,) = ledger.usage("project=flight-delays")
    assert usage.reserved_usd == 0 and usage.spent_usd > 0
    report = _run(airflow_env, "costaware", "report", "--dag-id", "cost_aware_retrain", "--last-run")
    lines = report.stdout.splitlines()
    assert any(line.startswith("TOTAL") for line in lines)
    for name in TASKS:
        assert any(line.startswith(name) for line in lines), report.stdout

    # Three runs measured: utilization of every task, and the oversized training is flagged (issue 14). Its
    # saving is its seconds a run times 31 runs a month: about $0.005 at the 1 s the demo's training takes
    # on a fast machine, under the default $0.01 floor (hidden there, shown on a loaded one): floor off.
    efficiency = _run(
        airflow_env,
        "costaware",
        "report",
        "--efficiency",
        "--dag-id",
        "cost_aware_retrain",
        "--format",
        "json",
        "--min-saving-usd",
        "0",
    )
    assert efficiency.returncode == 0, efficiency.stderr
    found = json.loads(efficiency.stdout)
    assert {t["task_id"] for t in found["tasks"]} == TASKS and all(t["tries"] == 3 for t in found["tasks"])
    train = next(t for t in found["tasks"] if t["task_id"] == "retrain")
    assert 0 < train["cpu_utilization"] < 0.5 and train["peak_memory_gib"] > 0.05
    advice = next(a for a in found["advice"] if a["task_id"] == "retrain")
    assert advice["current_instance_type"] == "c5.4xlarge" and float(advice["monthly_saving_usd"]) > 0
    assert advice["frequency_basis"] == "from the DAG's schedule" and advice["runs_per_month"] >= 28
    last = ledger.last_run_id("cost_aware_retrain")
    assert last is not None
    shown = _run(airflow_env, "costaware", "runs", "show", last)
    assert shown.returncode == 0, shown.stderr
    assert "roc_auc: " in shown.stdout and "promoted: " in shown.stdout and "run total: $" in shown.stdout
    assert "data_fingerprint: " in shown.stdout and 'seeds: {"seed": 0}' in shown.stdout


def test_a_budget_override_beyond_the_cap_is_refused_before_training(airflow_env: dict[str, str]) -> None:
    # A person raises the training budget in the trigger form past what the project's budget has left.
    set_monthly_cap(airflow_env, "25")
    run = _run(
        airflow_env,
        "airflow",
        "dags",
        "test",
        "cost_aware_retrain",
        "2013-02-03",
        "-c",
        json.dumps({"train_budget_usd": 500}),
    )
    output = run.stdout + run.stderr
    # A short summary, not one long line and a chained traceback through the ledger.
    assert "Budget refused task 'retrain': it needs an estimated $500.00" in output
    assert "  budget:   project=flight-delays/month (" in output and "  need:     $500.00" in output
    assert "  to do:    it is more than the whole cap, so no new period makes room: raise the cap" in output
    assert "The above exception was the direct cause" not in output
    ledger = Ledger.from_url(airflow_env["COSTAWARE_LEDGER_URL"])
    rows = ledger.entries(dag_id="cost_aware_retrain", run_id=ledger.last_run_id("cost_aware_retrain"))
    assert "retrain" not in {r["task_id"] for r in rows}  # no training was paid for
    assert {r["task_id"]: r["outcome"] for r in rows}["spend_gate"] == "failed"
    assert all(r.status != "open" for r in ledger.open_reservations())


def test_a_run_failing_between_the_spend_gate_and_training_holds_no_money(
    airflow_env: dict[str, str],
) -> None:
    # The gate reserves for `retrain`; then `spot_window` fails (no recorded spot prices for m5.large, which
    # the gate's price check accepts), so `retrain` never runs. Its money must not stay reserved for 6 h.
    set_monthly_cap(airflow_env, "25")
    deadline = (datetime.now(timezone.utc) + timedelta(hours=3)).isoformat()
    conf = {"train_instance_type": "m5.large", "spot_deadline": deadline}
    run = _run(
        airflow_env, "airflow", "dags", "test", "cost_aware_retrain", "2013-02-05", "-c", json.dumps(conf)
    )
    output = run.stdout + run.stderr
    ledger = Ledger.from_url(airflow_env["COSTAWARE_LEDGER_URL"])
    run_id = ledger.last_run_id("cost_aware_retrain")
    rows = {r["task_id"]: r["outcome"] for r in ledger.entries(dag_id="cost_aware_retrain", run_id=run_id)}
    assert rows.get("spend_gate") == "success" and rows.get("spot_window") == "failed", output[-3000:]
    assert "retrain" not in rows
    assert "costaware: released $0.05 reserved in project=flight-delays/month" in output
    shown = _run(
        airflow_env, "costaware", "budget", "show", "--scope", "project=flight-delays", "--format", "json"
    )
    (usage,) = json.loads(shown.stdout[shown.stdout.index("[") :])
    assert usage["reserved_usd"] == "0.000000"
    assert not [r for r in ledger.open_reservations() if r.holder and f"/{run_id}/" in r.holder]


def test_a_typo_in_the_instance_type_fails_at_the_gate_before_any_money_is_reserved(
    airflow_env: dict[str, str],
) -> None:
    set_monthly_cap(airflow_env, "25")
    conf = {"train_instance_type": "m5.lrage"}
    run = _run(
        airflow_env, "airflow", "dags", "test", "cost_aware_retrain", "2013-02-06", "-c", json.dumps(conf)
    )
    output = run.stdout + run.stderr
    assert "did you mean m5.large" in output
    ledger = Ledger.from_url(airflow_env["COSTAWARE_LEDGER_URL"])
    run_id = ledger.last_run_id("cost_aware_retrain")
    rows = {r["task_id"]: r["outcome"] for r in ledger.entries(dag_id="cost_aware_retrain", run_id=run_id)}
    assert rows.get("spend_gate") == "failed" and "spot_window" not in rows
    assert ledger.usage("project=flight-delays")[0].reserved_usd == 0
