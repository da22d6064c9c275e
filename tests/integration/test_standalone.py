"""The example DAG under a real `airflow standalone`, and a spend gate that waits in the real triggerer."""

from __future__ import annotations

import time
import urllib.error

import pytest
from airflow_server import AirflowServer
from services import RETRAIN_TASKS, ledger_task_ids

from costaware import Ledger

pytestmark = pytest.mark.slow


def test_retrain_dag_triggered_through_the_api(server: tuple[AirflowServer, Ledger]) -> None:
    airflow, ledger = server
    ledger.set_budget("project=flight-delays", "month", "25")
    airflow.wait_for_dag("cost_aware_retrain")
    run_id = airflow.trigger("cost_aware_retrain", {"replay_date": "2013-03-01"})
    assert airflow.wait_for_run("cost_aware_retrain", run_id) == "success", airflow.failure_report(
        "cost_aware_retrain", run_id
    )
    tasks = ledger_task_ids(ledger, "cost_aware_retrain", run_id, expected=RETRAIN_TASKS)
    assert tasks == RETRAIN_TASKS


def test_spend_gate_waits_in_the_triggerer_until_the_cap_is_raised(
    server: tuple[AirflowServer, Ledger],
) -> None:
    airflow, ledger = server
    ledger.set_budget("project=wait-test", "month", "0")
    airflow.wait_for_dag("budget_wait")
    run_id = airflow.trigger("budget_wait")
    airflow.wait_for_task_state("budget_wait", run_id, "spend_gate", "deferred")
    waiting = [r for r in ledger.open_reservations() if str(r.scope) == "project=wait-test"]
    assert waiting == []  # nothing reserved while the budget is short
    airflow.wait_for_defer_exit("budget_wait", run_id, "spend_gate")
    ledger.set_budget("project=wait-test", "month", "5")
    assert airflow.wait_for_run("budget_wait", run_id) == "success", airflow.failure_report(
        "budget_wait", run_id
    )
    # The run reads "success" a moment before the listener writes its last task's entry: read until there.
    assert "train" in ledger_task_ids(ledger, "budget_wait", run_id, expected=frozenset({"train"}))
    trigger_logs = list(airflow.home.glob("logs/dag_id=budget_wait/**/task_id=spend_gate/*trigger*"))
    assert trigger_logs and any("has room" in p.read_text() for p in trigger_logs)
    (usage,) = ledger.usage("project=wait-test")
    assert usage.reserved_usd == 0 and usage.spent_usd >= 0  # the gate's reservation was settled by 'train'
    train = [r for r in ledger.entries(dag_id="budget_wait", run_id=run_id) if r["task_id"] == "train"]
    assert train and train[0]["reservation_id"] is not None


@pytest.mark.parametrize(
    ("conf", "field"),
    [
        ({"train_budget_usd": "lots"}, "train_budget_usd"),
        ({"train_instance_type": "not a type"}, "train_instance_type"),
        # A tag value the ledger cannot store is refused before the run starts (it lost the run's costs).
        ({"owner": "Doe, Jane"}, "owner"),
        ({"team": "a=b"}, "team"),
        ({"train_budget_usd": 5_000_000}, "train_budget_usd"),
    ],
)
def test_trigger_form_params_are_validated(
    server: tuple[AirflowServer, Ledger], conf: dict[str, str], field: str
) -> None:
    airflow, _ = server
    airflow.wait_for_dag("cost_aware_retrain")
    with pytest.raises(urllib.error.HTTPError) as refused:
        airflow.call("POST", "/api/v2/dags/cost_aware_retrain/dagRuns", {"logical_date": None, "conf": conf})
    assert refused.value.code in (400, 422)
    assert field in refused.value.read().decode()


def test_a_run_marked_failed_by_a_person_gives_its_reservations_back(
    server: tuple[AirflowServer, Ledger],
) -> None:
    # The api-server runs the run-end listener when a person marks a run failed: money held for the run's
    # consumer (here `train`, behind a gate that is still waiting) is released at once, not after its TTL.
    airflow, ledger = server
    ledger.set_budget("project=wait-test", "month", "0")
    ledger.set_budget("project=mark-test", "total", "10")
    airflow.wait_for_dag("budget_wait")
    run_id = airflow.trigger("budget_wait")
    airflow.wait_for_task_state("budget_wait", run_id, "spend_gate", "deferred")
    held = ledger.reserve("project=mark-test", "1", holder=f"budget_wait/{run_id}/train/-1")
    airflow.call("PATCH", f"/api/v2/dags/budget_wait/dagRuns/{run_id}", {"state": "failed"})
    deadline = time.monotonic() + 60
    while any(r.id == held.id for r in ledger.open_reservations()):
        assert time.monotonic() < deadline, "the reservation is still held after the run was marked failed"
        time.sleep(1)
    assert ledger.usage("project=mark-test")[0].reserved_usd == 0
    # The gate's request no longer reads "waiting" on the Cost page: its run ended.
    from datetime import datetime, timezone

    from costaware.adapters.ledger.gate_requests import gate_requests

    def gate_status() -> str:
        since = datetime(2000, 1, 1, tzinfo=timezone.utc)
        (gate,) = [g for g in gate_requests(ledger, since=since, dag_id="budget_wait") if g.run_id == run_id]
        return gate.status

    while gate_status() != "run_ended":
        assert time.monotonic() < deadline, f"the gate still reads {gate_status()!r} after its run ended"
        time.sleep(1)
