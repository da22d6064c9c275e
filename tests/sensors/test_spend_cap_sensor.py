from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred
from contexts import task_context

from costaware import Ledger
from costaware.adapters.ledger import schema
from costaware.core.errors import ConfigurationError, LedgerUnavailableError
from costaware.sensors.spend_cap import SpendCapSensor
from costaware.triggers.budget import BudgetAvailableTrigger


@pytest.fixture
def env_ledger(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "10")
    return ledger


def context(run_id: str = "manual__1") -> dict[str, Any]:
    return task_context("spend_gate", run_id=run_id)


def sensor(**kwargs: Any) -> SpendCapSensor:
    args: dict[str, Any] = {
        "task_id": "spend_gate",
        "scope": "project=churn",
        "estimated_usd": "4",
        "for_task_id": "train",
        "poke_interval": 0.01,
        "timeout": 5,
    }
    args.update(kwargs)
    return SpendCapSensor(**args)


def test_poke_reserves_for_the_downstream_task(env_ledger: Ledger) -> None:
    result = sensor(deferrable=False).poke(context())
    assert result and result.is_done  # type: ignore[union-attr]
    payload = result.xcom_value  # type: ignore[union-attr]
    assert payload["usd"] == "4.000000" and payload["for_task_id"] == "train"
    (reservation,) = env_ledger.open_reservations()
    assert reservation.holder == "retrain/manual__1/train/-1"
    # A retried sensor gets the same reservation back instead of reserving twice.
    again = sensor(deferrable=False).poke(context())
    assert again.xcom_value["reservation_id"] == payload["reservation_id"]  # type: ignore[union-attr]
    assert env_ledger.usage("project=churn")[0].reserved_usd == 4


def test_a_gate_run_again_holds_what_it_asks_now_not_its_earlier_hold(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # Cleared and run again with a higher estimate while its task's hold was open, the gate passed with
    # the earlier $4 held, and its log said "Reserved $6.00".
    sensor(deferrable=False, estimated_usd="4").poke(context())
    capsys.readouterr()
    again = sensor(deferrable=False, estimated_usd="6").poke(context())
    assert again.xcom_value["usd"] == "6.000000"  # type: ignore[union-attr]
    assert env_ledger.usage("project=churn")[0].reserved_usd == 6
    assert "Reserved $6.00 for task 'train'" in capsys.readouterr().out
    # A lower estimate keeps the bigger hold, and the log says what is held.
    lower = sensor(deferrable=False, estimated_usd="2").poke(context())
    assert lower.xcom_value["usd"] == "6.000000"  # type: ignore[union-attr]
    out = capsys.readouterr().out
    assert "Reserved $6.00 for task 'train'" in out and "its open hold, above the $2.00 asked" in out


def _try_paid(usd: str, try_number: int) -> Any:
    from decimal import Decimal

    from costaware.core.ledger import LedgerEntry

    return LedgerEntry(
        dag_id="retrain",
        run_id="manual__1",
        task_id="train",
        kind="compute",
        usd=Decimal(usd),
        try_number=try_number,
        tags={"project": "churn"},
    )


def test_a_gate_run_again_weighs_what_its_tasks_hold_has_not_paid(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    from costaware.ledger_spool import record_and_settle

    # Try 1 failed after paying $5 of the $6 hold, which stays open for try 2, grown back for the retry as
    # far as the $10 cap allows ($4 of the $5): $5 is held unpaid. The gate, cleared and run again for $6,
    # weighs that $5, not the hold's $10: it is refused (the cap has $5 without the hold) and the hold kept.
    # Counting the hold's amount, it was kept as holding $6 and try 2's $6 passed the cap.
    first = sensor(deferrable=False, estimated_usd="6").poke(context())
    record_and_settle(env_ledger, _try_paid("5", 1), retrying=True)
    capsys.readouterr()
    assert sensor(deferrable=False, estimated_usd="6").poke(context()) is False  # $5 left, needs $6
    assert "Reserved" not in capsys.readouterr().out
    (still,) = [r for r in env_ledger.open_reservations() if r.holder == "retrain/manual__1/train/-1"]
    assert still.id == first.xcom_value["reservation_id"]  # type: ignore[union-attr]
    usage = env_ledger.usage("project=churn")[0]
    assert usage.spent_usd + usage.reserved_usd == 10


def test_a_gate_run_again_says_what_its_tasks_hold_still_holds(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    from costaware.ledger_spool import record_and_settle

    # Grown to a max_usd of $9, $3 of it paid by try 1 and grown back as far as the $10 cap allows: $7 is
    # still held, more than the $4 asked, and the hold is kept; its log and XCom said $10.
    first = sensor(deferrable=False).poke(context())
    env_ledger.grow(first.xcom_value["reservation_id"], "9")  # type: ignore[union-attr]
    record_and_settle(env_ledger, _try_paid("3", 1), retrying=True)
    capsys.readouterr()
    again = sensor(deferrable=False).poke(context())
    assert again.xcom_value["reservation_id"] == first.xcom_value["reservation_id"]  # type: ignore[union-attr]
    assert again.xcom_value["usd"] == "7.000000"  # type: ignore[union-attr]
    out = capsys.readouterr().out
    assert "Reserved $7.00 for task 'train'" in out
    assert "its open hold, above the $4.00 asked ($10.00 held, $3.00 of it paid already)" in out


def test_a_gate_run_again_holds_for_its_reservation_ttl_from_now(env_ledger: Ledger) -> None:
    from datetime import datetime, timedelta, timezone

    import time_machine

    # Cleared and run again at 03:59, the gate passed with its task's hold of 22:00 as it was: it lapsed
    # at 04:00 (reservation_ttl 6 h), and the task ran with nothing held.
    start = datetime(2026, 12, 1, 22, 0, tzinfo=timezone.utc)
    with time_machine.travel(start, tick=False) as clock:
        first = sensor(deferrable=False).poke(context())
        clock.move_to(start + timedelta(hours=5, minutes=59))
        again = sensor(deferrable=False).poke(context())
        assert again.xcom_value["reservation_id"] == first.xcom_value["reservation_id"]  # type: ignore[union-attr]
        clock.move_to(start + timedelta(hours=6, minutes=1))
        (held,) = env_ledger.open_reservations()
        assert held.expires_at == start + timedelta(hours=11, minutes=59)
        assert env_ledger.usage("project=churn")[0].reserved_usd == 4


def test_a_gate_run_again_in_another_scope_checks_that_scope(env_ledger: Ledger) -> None:
    # It passed in a budget it never checked ($4 against project=fraud's $1 cap), holding in project=churn.
    env_ledger.set_budget("project=fraud", "month", "1")
    sensor(deferrable=False).poke(context())
    assert sensor(deferrable=False, scope="project=fraud").poke(context()) is False  # waits for room
    with pytest.raises(AirflowFailException, match="budget 'project=fraud/month"):
        sensor(scope="project=fraud", on_exceeded="fail").execute(context())
    assert env_ledger.usage("project=churn")[0].reserved_usd == 4  # the earlier hold stands meanwhile
    env_ledger.set_budget("project=fraud", "month", "5")
    moved = sensor(deferrable=False, scope="project=fraud").poke(context())
    assert moved.xcom_value["scope"] == "project=fraud"  # type: ignore[union-attr]
    assert moved.xcom_value["budgets"] == ["project=fraud/month"]  # type: ignore[union-attr]
    assert env_ledger.usage("project=churn")[0].reserved_usd == 0
    assert env_ledger.usage("project=fraud")[0].reserved_usd == 4


def test_poke_waits_while_the_budget_is_short(env_ledger: Ledger, capsys: pytest.CaptureFixture[str]) -> None:
    assert sensor(estimated_usd="11", deferrable=False).poke(context()) is False
    assert env_ledger.open_reservations() == []
    # $11 against a $10 cap: a new period never makes room, and the wait says so.
    assert "it is more than the whole cap, so no new period makes room" in capsys.readouterr().out
    trigger = BudgetAvailableTrigger(scope="project=churn", usd="11", gpu_hours="0", run_id="manual__1")
    assert "(more than its whole cap: only a higher cap makes room)" in str(trigger._shortfall())
    env_ledger.reserve("project=churn", "8")
    assert sensor(estimated_usd="4", deferrable=False).poke(context("manual__2")) is False
    assert "whole cap" not in capsys.readouterr().out  # room comes back when the reservation settles


def test_skip_and_fail_policies_name_the_budget(env_ledger: Ledger) -> None:
    with pytest.raises(AirflowSkipException, match=r"project=churn/month \(\d{4}-\d{2}\)' has \$10.00 left"):
        sensor(estimated_usd="11", on_exceeded="skip").execute(context())
    with pytest.raises(
        AirflowFailException, match=r"budget 'project=churn/month \(\d{4}-\d{2}\)' refused 'train'"
    ):
        sensor(estimated_usd="11", on_exceeded="fail").execute(context())
    assert env_ledger.open_reservations() == []


def test_a_refusal_is_a_short_summary_in_the_log_not_a_chained_traceback(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    env_ledger.record(_spent("0.001655"))
    with pytest.raises(AirflowFailException) as refused:
        sensor(estimated_usd="11", on_exceeded="fail").execute(context())
    assert refused.value.__cause__ is None and refused.value.__suppress_context__  # no ledger internals
    assert len(str(refused.value)) < 100
    out = capsys.readouterr().out
    lines = out[out.index("Budget refused") :].splitlines()[:8]
    assert all(len(line) < 80 for line in lines[1:7])
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert fields["budget"].startswith("project=churn/month (") and fields["budget"].endswith(")")
    assert (fields["cap"], fields["spent"], fields["reserved"]) == ("$10.00", "$0.001655", "$0.00")
    assert (fields["left"], fields["need"]) == ("$9.998345", "$11.00")  # not "$10.00 left" next to it
    assert fields["to do"].startswith("it is more than the whole cap, so no new period makes room: raise")


def _spent(usd: str) -> Any:
    from decimal import Decimal

    from costaware.core.ledger import Kind, LedgerEntry

    return LedgerEntry(
        dag_id="retrain",
        run_id="earlier",
        task_id="train",
        kind=Kind.COMPUTE,
        usd=Decimal(usd),
        tags={"project": "churn"},
    )


@pytest.mark.parametrize(
    ("compute", "message"),
    [
        ({"instance_type": "m5.lrage", "region": "us-east-1"}, "did you mean m5.large"),
        ({"instance_type": "m5.large", "region": "us-esat-1"}, "us-esat-1"),
        # Without region: the worker's (us-east-1 by default), so a typo is named ("set region too" hid it).
        ({"instance_type": "c5.4xlarg"}, "unknown instance type 'c5.4xlarg'.*did you mean"),
        ({"market": "spotty"}, "unknown market 'spotty'"),
    ],
)
def test_compute_that_cannot_be_priced_fails_before_anything_is_reserved(
    env_ledger: Ledger, compute: dict[str, str], message: str
) -> None:
    with pytest.raises(AirflowFailException, match=message):
        sensor(deferrable=False, **compute).poke(context())
    assert env_ledger.open_reservations() == []
    assert env_ledger.usage("project=churn")[0].reserved_usd == 0


def test_known_compute_passes_the_early_check(env_ledger: Ledger) -> None:
    gate = sensor(deferrable=False, instance_type="c5.4xlarge", region="us-east-1", market="spot")
    assert gate.poke(context()).xcom_value["usd"] == "4.000000"  # type: ignore[union-attr]


def test_compute_with_spaces_around_it_is_checked_as_the_bill_reads_it(env_ledger: Ledger) -> None:
    # The bill strips them (try_pricing.compute_of): the gate failed on "unknown instance type
    # ' m5.large '; did you mean m5.large", the type it named.
    gate = sensor(deferrable=False, instance_type=" m5.large ", region=" us-east-1\n", market=" spot ")
    assert gate.poke(context()).xcom_value["usd"] == "4.000000"  # type: ignore[union-attr]


# "{{ params.market }}" and the like with the param unset render "None", " " (a form) or "null" (| tojson):
# the gate refused " " and "null" (unknown market ' ', unknown instance type 'null', unknown region 'null')
# that the bill reads as not given.
@pytest.mark.parametrize(
    "rendered",
    [
        {"market": " "},
        {"market": "None "},
        {"instance_type": "null"},
        {"instance_type": " "},
        {"region": "null"},
    ],
)
def test_compute_rendered_not_given_passes_the_early_check(
    env_ledger: Ledger, rendered: dict[str, str]
) -> None:
    gate = sensor(deferrable=False, instance_type="c5.4xlarge", region="us-east-1", market="spot")
    for name, value in rendered.items():
        setattr(gate, name, value)  # as rendered
    assert gate.poke(context()).xcom_value["usd"] == "4.000000"  # type: ignore[union-attr]


def test_refusals_and_waits_are_noted_for_the_cost_page(env_ledger: Ledger) -> None:
    from datetime import datetime, timedelta, timezone

    from costaware.adapters.ledger.gate_requests import gate_requests

    with pytest.raises(AirflowFailException):
        sensor(estimated_usd="11", on_exceeded="fail").execute(context("run-refused"))
    assert sensor(estimated_usd="12", deferrable=False).poke(context("run-waiting")) is False
    assert sensor(estimated_usd="12", deferrable=False).poke(context("run-waiting")) is False  # same row
    assert sensor(estimated_usd="1", deferrable=False).poke(context("run-at-once"))  # not noted
    since = datetime.now(timezone.utc) - timedelta(hours=1)
    found = {r.run_id: r for r in gate_requests(env_ledger, since=since)}
    assert set(found) == {"run-refused", "run-waiting"}
    refused, waiting = found["run-refused"], found["run-waiting"]
    assert (refused.status, str(refused.usd), refused.for_task_id) == ("refused", "11.000000", "train")
    assert refused.budget.startswith("project=churn/month (") and "$10.00 left" in refused.message
    assert (waiting.status, str(waiting.usd)) == ("waiting", "12.000000")

    env_ledger.set_budget("project=churn", "month", "30")
    assert sensor(estimated_usd="12", deferrable=False).poke(context("run-waiting"))
    (after,) = [r for r in gate_requests(env_ledger, since=since) if r.run_id == "run-waiting"]
    assert after.status == "reserved" and after.budget == waiting.budget and after.usd == waiting.usd


@pytest.mark.parametrize(
    ("usd", "message"),
    [
        ("-3", "zero or more"),
        ("nan", "finite"),
        ("lots", "'lots'"),
        ("0.0000001", "rounds to \\$0.00 in the ledger"),
    ],
)
def test_bad_estimate_fails_without_retry_and_reserves_nothing(
    env_ledger: Ledger, usd: str, message: str
) -> None:
    gate = sensor(deferrable=False)
    gate.estimated_usd = usd  # as a template renders it
    with pytest.raises(AirflowFailException, match=message):
        gate.poke(context())
    assert env_ledger.open_reservations() == []
    if usd != "0.0000001":  # written out, it fails as the DAG is parsed (it passed, and failed the run)
        with pytest.raises(ConfigurationError, match=message):
            sensor(estimated_usd=usd, deferrable=False)


@pytest.mark.parametrize("hours", ["-1", "$4"])
def test_gpu_hours_are_checked_as_gpu_hours_not_usd(hours: str) -> None:
    # "estimated_gpu_hours must be zero or more USD", and "$4" was taken for 4 GPU-hours.
    with pytest.raises(
        ConfigurationError, match=f"estimated_gpu_hours must be a number of GPU-hours .*'\\{hours}'"
    ):
        sensor(estimated_gpu_hours=hours, deferrable=False)


def test_unknown_on_exceeded_is_rejected_at_parse_time() -> None:
    with pytest.raises(ValueError, match="on_exceeded='later'"):
        sensor(on_exceeded="later")


def test_unreachable_ledger_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "postgresql://nobody@127.0.0.1:1/ledger")
    with pytest.raises(LedgerUnavailableError, match="nothing was recorded or reserved"):
        sensor(deferrable=False).poke(context())


def test_reschedule_mode_pokes_the_same_way(env_ledger: Ledger) -> None:
    gate = sensor(deferrable=False, mode="reschedule")
    assert gate.poke(context()).xcom_value["usd"] == "4.000000"  # type: ignore[union-attr]


def test_deferral_waits_for_a_raised_cap_then_reserves(env_ledger: Ledger) -> None:
    gate = sensor(estimated_usd="$12", deferrable=True)  # the trigger once crashed on the "$"
    with pytest.raises(TaskDeferred) as deferred:
        gate.execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, BudgetAvailableTrigger)
    assert deferred.value.method_name == "execute_complete"

    async def first_event() -> Any:
        events = trigger.run()
        waiting = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0.2)
        assert not waiting.done()  # still short: the trigger keeps waiting
        await asyncio.to_thread(env_ledger.set_budget, "project=churn", "month", "20")
        return await asyncio.wait_for(waiting, timeout=10)

    event = asyncio.run(first_event())
    assert event.payload["status"] == "success"
    result = gate.execute_complete(context(), event=event.payload)
    assert result["usd"] == "12.000000"
    assert env_ledger.usage("project=churn")[0].reserved_usd == 12


def test_a_deferred_gate_run_again_waits_only_for_the_room_its_own_hold_does_not_give(
    env_ledger: Ledger,
) -> None:
    # The trigger counted the gate's own $4 hold as taken: with the other run's $5 given back, $6 fit once
    # the hold was replaced, yet the wait went on until the sensor's timeout.
    sensor(deferrable=False).poke(context())
    other = env_ledger.reserve("project=churn", "5", holder="retrain/other/train/-1")
    gate = sensor(estimated_usd="6", deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        gate.execute(context())  # $6 needs $5 of room beside the other run's $5 hold: $1 + $4
    trigger = deferred.value.trigger
    assert "has $5.00 left, need $6.00" in str(trigger._shortfall())  # $1 free + its own $4
    env_ledger.release(other.id)
    assert trigger._shortfall() is None  # $10 with its own hold replaced (it read "$5.00 left")
    event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), timeout=10))
    assert gate.execute_complete(context(), event=event.payload)["usd"] == "6.000000"
    assert env_ledger.usage("project=churn")[0].reserved_usd == 6


def test_a_deferred_gate_counts_back_what_its_own_hold_holds_in_the_budget_not_what_every_entry_paid(
    env_ledger: Ledger,
) -> None:
    from decimal import Decimal

    from costaware.core.ledger import LedgerEntry

    # Try 1 billed $3 from its task's $4 hold under tags outside the budget's scope (a task that is not a
    # costaware operator, tagged otherwise as it ran): the budget neither counts the $3 nor takes it off
    # the hold. The trigger added back the $1 every entry left unpaid, where the reserve replacing the hold
    # gives back the $4 the budget counts: it read $3 left for the $6 that fit, and waited until timeout.
    sensor(deferrable=False).poke(context())
    (hold,) = env_ledger.open_reservations()
    billed = {"usd": Decimal(3), "tags": {"project": "fraud"}, "reservation_id": hold.id}
    env_ledger.record(
        LedgerEntry(dag_id="retrain", run_id="manual__1", task_id="train", kind="compute", **billed)
    )
    other = env_ledger.reserve("project=churn", "5", holder="retrain/other/train/-1")
    gate = sensor(estimated_usd="6", deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        gate.execute(context())  # $10 less the other run's $5: $5 without its own hold
    trigger = deferred.value.trigger
    assert "has $5.00 left, need $6.00" in str(trigger._shortfall())
    env_ledger.release(other.id)
    env_ledger.reserve("project=churn", "4", holder="retrain/third/train/-1")
    assert trigger._shortfall() is None  # $6 without its hold, as the reserve reads it
    event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), timeout=10))
    assert gate.execute_complete(context(), event=event.payload)["usd"] == "6.000000"


def test_a_deferred_gate_resumes_once_its_tasks_hold_holds_what_it_asks(env_ledger: Ledger) -> None:
    # The task's hold grew to $6 (a max_usd) while the gate, run again for $6, waited, and an approved
    # overage then took the budget past its cap: the resume keeps that hold as it stands, yet the trigger
    # read the budget without it ($3 left) and waited until the sensor's timeout.
    sensor(deferrable=False).poke(context())
    (hold,) = env_ledger.open_reservations()
    other = env_ledger.reserve("project=churn", "5", holder="retrain/other/train/-1")
    gate = sensor(estimated_usd="6", deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        gate.execute(context())
    trigger = deferred.value.trigger
    env_ledger.release(other.id)
    assert env_ledger.grow(hold.id, "6").usd == 6
    env_ledger.reserve("project=churn", "7", holder="retrain/approved/train/-1", approved_by="alice")
    assert trigger._shortfall() is None
    event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), timeout=10))
    result = gate.execute_complete(context(), event=event.payload)
    assert result["usd"] == "6.000000" and result["reservation_id"] == hold.id


def test_a_dict_scope_waits_and_is_noted_as_the_scope_it_is(env_ledger: Ledger) -> None:
    # As dags/budgeted_tuning.py writes it: the trigger got "{'project': 'churn'}" and its wait failed with
    # InvalidBudgetError, and the Cost page row held the dict's text.
    from datetime import datetime, timezone

    from costaware.adapters.ledger.gate_requests import gate_requests

    gate = sensor(scope={"project": "churn"}, estimated_usd="12", deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        gate.execute(context())
    trigger = deferred.value.trigger
    assert trigger.scope == "project=churn"
    env_ledger.set_budget("project=churn", "month", "20")
    event = asyncio.run(asyncio.wait_for(trigger.run().__anext__(), timeout=10))
    assert event.payload["status"] == "success"
    (noted,) = gate_requests(env_ledger, since=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert noted.scope == "project=churn"


def test_resume_defers_again_when_someone_else_took_the_money(env_ledger: Ledger) -> None:
    env_ledger.reserve("project=churn", "8")
    with pytest.raises(TaskDeferred):
        sensor().execute_complete(context(), event={"status": "success", "message": "room"})


def test_lost_races_do_not_wait_past_the_sensors_timeout(env_ledger: Ledger) -> None:
    # Each resume that found the room taken waited a whole timeout again: lost races kept it waiting on.
    from datetime import datetime, timedelta, timezone

    import time_machine
    from airflow.sdk.exceptions import AirflowSensorTimeout

    start = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    room = {"status": "success", "message": "room"}
    with time_machine.travel(start, tick=False) as clock:
        env_ledger.reserve("project=churn", "8")  # another run holds the room
        with pytest.raises(TaskDeferred) as first:
            sensor(timeout=5, deferrable=True).execute(context())
        assert first.value.timeout == timedelta(seconds=5)
        carried = first.value.kwargs or {}
        clock.move_to(start + timedelta(seconds=3))
        with pytest.raises(TaskDeferred) as again:
            sensor(timeout=5).execute_complete(context(), event=room, **carried)
        assert again.value.timeout == timedelta(seconds=2)  # what is left, not 5 s again
        assert again.value.kwargs == carried
        clock.move_to(start + timedelta(seconds=6))
        with pytest.raises(AirflowSensorTimeout, match=r"had no room left for 'train' when the sensor's"):
            sensor(timeout=5).execute_complete(context(), event=room, **carried)
        # soft_fail skips it, as it does the trigger's own timeout.
        with pytest.raises(AirflowSkipException):
            sensor(timeout=5, soft_fail=True).resume_execution(
                "execute_complete", {"event": room, **carried}, context()
            )
        assert [r.usd for r in env_ledger.open_reservations()] == [8]  # nothing reserved for train


def test_trigger_error_event_fails_the_task(env_ledger: Ledger) -> None:
    with pytest.raises(Exception, match="budget wait failed: boom"):
        sensor().execute_complete(context(), event={"status": "error", "message": "boom"})


def test_trigger_reports_a_missing_budget_as_error(env_ledger: Ledger) -> None:
    trigger = BudgetAvailableTrigger(scope="project=fraud", usd="1", poll_interval=0.01)
    event = asyncio.run(trigger.run().__anext__())  # type: ignore[attr-defined]
    assert event.payload["status"] == "error"
    assert "no budget covers scope 'project=fraud'" in event.payload["message"]


@pytest.mark.parametrize("failures", [2, 5])
def test_trigger_reads_the_budgets_again_after_a_passing_failure(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, failures: int
) -> None:
    # A wait of days for next month's budget failed its run at one ledger connection blip.
    from costaware.core.errors import LedgerUnavailableError
    from costaware.triggers import MAX_POLL_ERRORS

    calls: list[int] = []
    real = BudgetAvailableTrigger._shortfall

    def blip(self: BudgetAvailableTrigger) -> Any:
        calls.append(1)
        if len(calls) <= failures:
            raise LedgerUnavailableError("server closed the connection unexpectedly")
        return real(self)

    monkeypatch.setattr(BudgetAvailableTrigger, "_shortfall", blip)
    trigger = BudgetAvailableTrigger(scope="project=churn", usd="1", poll_interval=0.01)
    event = asyncio.run(trigger.run().__anext__())  # type: ignore[attr-defined]
    if failures < MAX_POLL_ERRORS:
        assert event.payload["status"] == "success" and len(calls) == failures + 1
    else:
        assert event.payload["status"] == "error" and len(calls) == MAX_POLL_ERRORS
        assert "server closed the connection" in event.payload["message"]


def test_trigger_round_trips_by_class_path_without_dags_on_the_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    classpath, kwargs = BudgetAvailableTrigger(scope="project=churn", usd="4.2", run_id="r").serialize()
    code = (
        "import json, sys\n"
        "from airflow._shared.module_loading import import_string  # what the triggerer uses\n"
        f"cls = import_string({classpath!r})\n"
        f"trigger = cls(**json.loads({json.dumps(json.dumps(kwargs))}))\n"
        "print(json.dumps(trigger.serialize()[1], sort_keys=True))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == kwargs
    assert all(isinstance(v, (str, float, int, type(None))) for v in kwargs.values())


def test_nothing_is_reserved_without_a_budget(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    with pytest.raises(AirflowFailException, match="no budget covers scope 'project=churn'"):
        sensor(deferrable=False).poke(context())
    ledger = Ledger.from_url(ledger_url)
    with ledger.engine.connect() as conn:
        assert conn.execute(schema.reservations.select()).first() is None
    # The Cost page lists it among the gates that did not get their money (it showed only a failed try).
    from datetime import datetime, timezone

    from costaware.adapters.ledger.gate_requests import gate_requests

    (noted,) = gate_requests(ledger, since=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert noted.status == "refused" and "no budget covers scope 'project=churn'" in noted.message


def test_a_missing_budget_names_a_ledger_connection_the_command_does_not_read(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk import Connection

    from costaware.hooks.ledger import CostLedgerHook

    # The connection kept in Airflow's metadata database (the UI, `airflow connections add`), not in the
    # environment: `costaware budget set` wrote its budget to the SQLite file instead, and the refusal said
    # only "set one with `costaware budget set`".
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    path = ledger_url.removeprefix("sqlite:///")
    connection = Connection(conn_id="costaware_ledger", conn_type="sqlite", host=path)
    monkeypatch.setattr(CostLedgerHook, "get_connection", classmethod(lambda cls, conn_id: connection))
    with pytest.raises(AirflowFailException) as refused:
        sensor(deferrable=False).poke(context())
    assert "no budget covers scope 'project=churn'" in str(refused.value)
    assert (
        f"This gate read the ledger of connection 'costaware_ledger' ({ledger_url}), which the `costaware` "
        "command reads only where it sees that connection (AIRFLOW_CONN_COSTAWARE_LEDGER, or the metadata "
        "database of this deployment's AIRFLOW_HOME): elsewhere give it --ledger-url"
    ) in str(refused.value)
    # Set in the environment, the command reads it too: nothing to add.
    monkeypatch.setenv("AIRFLOW_CONN_COSTAWARE_LEDGER", f"sqlite:///{path}")
    with pytest.raises(AirflowFailException) as refused:
        sensor(deferrable=False).poke(context("manual__2"))
    assert "This gate read" not in str(refused.value)


def test_the_reservation_log_names_the_budget_like_the_page(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    sensor(estimated_usd="0.001655", deferrable=False).poke(context())
    (usage,) = env_ledger.usage("project=churn")
    out = capsys.readouterr().out
    assert f"Reserved $0.001655 for task 'train' in {usage.name} (reservation" in out
    assert f"reserved $0.001655 in {usage.name} for task 'train'" in caplog.text  # the ledger's own line


def test_a_scope_only_the_catch_all_budget_covers_is_warned_about(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    env_ledger.set_budget("*", "month", "1000")
    sensor(scope="project=chrun", deferrable=False).poke(context())  # a typo: the catch-all takes it
    assert (
        "scope 'project=chrun' has no budget of its own: only the catch-all */month"
        in capsys.readouterr().out
    )
    sensor(scope="project=churn", deferrable=False).poke(context("manual__2"))  # its own budget, and *
    assert "no budget of its own" not in capsys.readouterr().out


def test_a_scope_the_target_task_is_not_tagged_with_is_refused_before_reserving(
    env_ledger: Ledger, tmp_path: Path
) -> None:
    # The gate reserved, the task's entries carried no project tag, and the budget was never charged.
    from airflow.sdk import DAG, Param

    from costaware.operators.remote_training import RemoteTrainingOperator

    def gate_of(run: str, own: dict[str, str] | None = None, **dag_args: Any) -> SpendCapSensor:
        with DAG("retrain", schedule=None, **dag_args):
            gate = sensor(deferrable=False, estimated_usd="1")
            RemoteTrainingOperator(
                task_id="train",
                command=["true"],
                instance_type="m5.large",
                model_store=str(tmp_path / run),
                tags=own or {},
            )
        return gate

    with pytest.raises(
        AirflowFailException,
        match=r"spend gate 'spend_gate' reserves in scope 'project=churn', but task 'train' records its cost "
        r"not tagged 'project' \(its tags: none\)",
    ):
        gate_of("a").poke(context())
    with pytest.raises(AirflowFailException, match=r"records its cost tagged project='fraud'"):
        gate_of("b", tags=["project:fraud"]).poke(context())
    assert env_ledger.open_reservations() == []
    # Tagged by the DAG, by the run's param, or by the target operator's own tags: reserved.
    assert gate_of("c", tags=["project:churn"]).poke(context("manual__1"))
    by_param = gate_of("d", params={"project": Param("churn")})
    assert by_param.poke({**context("manual__2"), "params": {"project": "churn"}})
    assert gate_of("e", own={"project": "churn"}).poke(context("manual__3"))
    assert len(env_ledger.open_reservations()) == 3
    # A templated tag (the operator renders its tags) is read as it will run: with the run's params.
    templated = gate_of("f", own={"project": "{{ params.project }}"}, params={"project": Param("churn")})
    assert templated.poke({**context("manual__4"), "params": {"project": "churn"}})
    with pytest.raises(AirflowFailException, match=r"records its cost tagged project='fraud'"):
        templated.poke({**context("manual__5"), "params": {"project": "fraud"}})


def test_a_task_the_listener_bills_is_only_warned_about_an_untagged_scope(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its cost may be tagged while it runs (annotate_task), which the gate cannot see: it warns, and reserves.
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("retrain", schedule=None):
        gate = sensor(deferrable=False, estimated_usd="1")
        EmptyOperator(task_id="train")
    assert gate.poke(context())
    assert "records its cost not tagged 'project'" in capsys.readouterr().out
    assert len(env_ledger.open_reservations()) == 1


def test_a_scope_of_an_unset_param_is_refused_without_advice_to_tag_the_dag_with_none(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # "project={{ params.project }}" with the param null: the gate first warned "Tag the DAG 'project:None'
    # or give the run param project='None'", the value it then refused.
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("retrain", schedule=None):
        gate = sensor(deferrable=False, estimated_usd="1", scope="project={{ params.project }}")
        EmptyOperator(task_id="train")
    gate.scope = "project=None"  # as rendered with the param null
    with pytest.raises(AirflowFailException, match=r"tag 'project' has value 'None', which says it was"):
        gate.poke(context())
    out = capsys.readouterr().out
    assert "project:None" not in out and "project='None'" not in out
    assert env_ledger.open_reservations() == []


def test_a_misspelt_for_task_id_is_refused_before_anything_is_reserved(env_ledger: Ledger) -> None:
    # The money was held for a task that never runs until the reservation expired (6 hours by default).
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("retrain", schedule=None):
        gate = sensor(deferrable=False, estimated_usd="1", for_task_id="trian")
        EmptyOperator(task_id="train")
    with pytest.raises(
        AirflowFailException,
        match=r"for_task_id 'trian' is not a task of DAG 'retrain' \(did you mean 'train'\?\); nothing was",
    ):
        gate.poke(context())
    assert env_ledger.open_reservations() == []


def test_a_for_task_id_given_the_operator_is_refused_when_the_dag_is_parsed() -> None:
    # for_task_id=train was taken, then refused at run time: "for_task_id <Task(EmptyOperator): train> is not
    # a task of DAG 'retrain'".
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("retrain", schedule=None):
        train = EmptyOperator(task_id="train")
        with pytest.raises(ValueError, match=r"for_task_id=<Task\(EmptyOperator\): train>: give its id, "):
            sensor(deferrable=False, for_task_id=train)
        with pytest.raises(ValueError, match=r"for_task_id=\['train'\]: give the task's id as text"):
            sensor(task_id="gate_2", deferrable=False, for_task_id=["train"])

        # What renders to the id is taken: a task's XCom (the task it picks), as a template is.
        from airflow.sdk import task

        @task
        def pick() -> str:
            return "train"

        picked = sensor(task_id="gate_3", deferrable=False, for_task_id=pick())
        assert picked.for_task_id is not None


@pytest.mark.parametrize("scope", ["", "  ", None])
def test_a_scope_that_rendered_empty_is_refused_not_read_as_every_run(env_ledger: Ledger, scope: Any) -> None:
    env_ledger.set_budget("*", "month", "100")  # a global budget the empty scope used to reserve from
    gate = sensor(deferrable=False)
    gate.scope = scope  # as a template renders it
    with pytest.raises(AirflowFailException, match="reservation scope is empty: give the tags it counts"):
        gate.poke(context())
    assert env_ledger.open_reservations() == []
    with pytest.raises(ValueError, match="scope is empty: give the tags it counts"):  # written out: at parse
        sensor(scope=scope, deferrable=False)
    with pytest.raises(ValueError, match=r"budget scope is empty: .* or '\*' for every run"):
        env_ledger.set_budget(scope, "month", "5")
    assert {str(b.scope) for b in env_ledger.budgets()} == {"*", "project=churn"}


def test_a_gate_before_a_mapped_task_is_refused_before_anything_is_reserved(env_ledger: Ledger) -> None:
    # The gate reserved under map index -1; each mapped try settles under its own (0, 1, ...), and a mapped
    # RemoteTrainingOperator looked for its hold there: the estimate counted in the budget until the run
    # ended, beside what the tries billed, and the operator's max_usd was never held.
    from airflow.sdk import DAG, task

    @task
    def train(shard: int) -> int:
        return shard

    with DAG("retrain", schedule=None):
        gate = sensor(deferrable=False, estimated_usd="1", for_task_id=None)
        gate >> train.expand(shard=[0, 1])
    with pytest.raises(
        AirflowFailException,
        match=r"spend gate 'spend_gate' is not mapped and its task 'train' is mapped \(\.expand\): .* "
        r"put the gate and the task in one mapped task group .*; nothing was reserved",
    ):
        gate.poke(context())
    assert env_ledger.open_reservations() == []


@pytest.mark.parametrize(
    ("gate_id", "map_index", "said"),
    [
        (
            "spend_gate",
            -1,
            "is not mapped and its task 'per_shard.train' is in mapped task group 'per_shard'",
        ),
        ("per_shard.spend_gate", 0, "is in mapped task group 'per_shard' and its task 'train' is not mapped"),
    ],
)
def test_a_gate_mapped_apart_from_its_task_is_refused(
    env_ledger: Ledger, gate_id: str, map_index: int, said: str
) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, task_group

    gate_in_group = gate_id.startswith("per_shard.")
    with DAG("retrain", schedule=None) as dag:

        @task_group
        def per_shard(shard: int) -> None:
            if gate_in_group:
                sensor(deferrable=False, estimated_usd="1", for_task_id="train")
            else:
                EmptyOperator(task_id="train")

        per_shard.expand(shard=[0, 1])
        if gate_in_group:
            EmptyOperator(task_id="train")
        else:
            sensor(deferrable=False, estimated_usd="1", for_task_id="per_shard.train")
    with pytest.raises(AirflowFailException, match=re.escape(f"spend gate {gate_id!r} {said}: ")):
        dag.task_dict[gate_id].poke(task_context(gate_id, map_index=map_index))
    assert env_ledger.open_reservations() == []


def test_a_mapped_gate_is_refused() -> None:
    # Each of its instances reserved under its own map index for an unmapped task (settled under -1).
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from costaware.sensors.spend_cap import check_same_instances

    with DAG("retrain", schedule=None) as dag:
        gates = SpendCapSensor.partial(task_id="spend_gate", estimated_usd="1").expand(
            scope=["project=churn", "project=fraud"]
        )
        gates >> EmptyOperator(task_id="train")
    with pytest.raises(
        ConfigurationError,
        match=r"spend gate 'spend_gate' is mapped \(\.expand\) and its task 'train' is not",
    ):
        check_same_instances(dag.task_dict["spend_gate"], dag.task_dict["train"])


def test_a_gate_in_the_mapped_task_group_of_its_task_reserves_for_the_task_of_its_map_index(
    env_ledger: Ledger,
) -> None:
    # Tasks of one mapped task group share their map indexes: the try of 'per_shard.train' at index 1
    # settles (and a RemoteTrainingOperator there grows) the hold of the gate at index 1.
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, task_group

    from costaware.core.ledger import reservation_holder

    with DAG("retrain", schedule=None) as dag:

        @task_group
        def per_shard(shard: int) -> None:
            sensor(deferrable=False, estimated_usd="1", for_task_id=None) >> EmptyOperator(task_id="train")

        per_shard.expand(shard=[0, 1])
    gate = dag.task_dict["per_shard.spend_gate"]
    assert gate.poke(task_context("per_shard.spend_gate", map_index=1))
    (held,) = env_ledger.open_reservations()
    assert held.holder == reservation_holder("retrain", "manual__1", "per_shard.train", 1)


@pytest.mark.parametrize("own_tags", [False, True])
def test_a_scope_tag_the_ledger_can_never_store_is_refused_before_reserving(
    env_ledger: Ledger, tmp_path: Path, own_tags: bool
) -> None:
    # project='churn,team=x' from a plain param: the listener recorded the cost without the tag, the gate
    # only warned and reserved, and the budget was never charged.
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, Param

    from costaware.operators.remote_training import RemoteTrainingOperator

    with DAG("retrain", schedule=None, params={"project": Param("churn")}):
        gate = sensor(deferrable=False, estimated_usd="1")
        if own_tags:
            RemoteTrainingOperator(
                task_id="train", command=["true"], instance_type="m5.large", model_store=str(tmp_path)
            )
        else:
            EmptyOperator(task_id="train")
    with pytest.raises(
        AirflowFailException,
        match=r"reserves in scope 'project=churn' for task 'train', but tag 'project' has value "
        r"'churn,team=x': it must be non-empty, without ',' or '='.*never be charged\. Nothing was reserved: "
        r"trigger the run again with another project value, and declare the param 'project' with "
        r"costaware\.params\.tag_param",
    ):
        gate.poke({**context(), "params": {"project": "churn,team=x"}})
    assert env_ledger.open_reservations() == []
    # A value the ledger stores is still only warned about for a task the listener bills.
    if not own_tags:
        assert gate.poke({**context("manual__2"), "params": {"project": "fraud"}})


def test_a_deferred_gate_weighs_the_hold_its_reserve_keeps_where_the_task_has_two(env_ledger: Ledger) -> None:
    # Two open holds of one task (two gates in scopes no budget shares, at once on PostgreSQL): the trigger
    # weighed the oldest, the reserve whichever came first, and one held what is asked: the trigger waited
    # for room the reserve, keeping that hold, never needed.
    env_ledger.set_budget("team=ml", "month", "10")
    holder = "retrain/manual__1/train/-1"
    env_ledger.reserve("team=ml", "2", holder=holder)
    as_asked = env_ledger.reserve("project=churn", "5")
    r = schema.reservations
    with env_ledger.transaction() as conn:
        conn.execute(r.update().where(r.c.id == as_asked.id).values(holder=holder))
    env_ledger.reserve("project=churn", "3", holder="retrain/other/train/-1")  # $2 left in project=churn
    trigger = BudgetAvailableTrigger(scope="project=churn", usd="5", run_id="manual__1", holder=holder)

    assert trigger._shortfall() is None
    assert env_ledger.reserve("project=churn", "5", holder=holder, replace_unlike=True).id == as_asked.id


def test_a_wait_on_a_cap_passed_already_says_nothing_is_left_and_by_how_much(env_ledger: Ledger) -> None:
    # The caps lowered below what is held: the wait said "has -1 GPU-hours left" (and "-$3.00 left").
    env_ledger.set_budget("project=churn", "month", "10", cap_gpu_hours="2")
    env_ledger.reserve("project=churn", "8", gpu_hours="2")
    env_ledger.set_budget("project=churn", "month", "10", cap_gpu_hours="1")
    trigger = BudgetAvailableTrigger(scope="project=churn", usd="1", gpu_hours="0.5", run_id="manual__1")
    said = str(trigger._shortfall())
    assert "has no GPU-hours left of 1 (it is 1 GPU-hours over its cap), need 0.5" in said, said
    env_ledger.set_budget("project=churn", "month", "5", cap_gpu_hours="1")
    said = str(trigger._shortfall())
    assert "has nothing left (it is $3.00 over its cap), need $1.00" in said, said  # as check_cap says it
