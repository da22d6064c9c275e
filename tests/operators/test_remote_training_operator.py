"""RemoteTrainingOperator on the real local backend: deferral, ledger attempts, retries, bad input."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from remote_support import (
    context_for,
    drive,
    local_operator_args,
    m5_decision,
    reimported,
    training_pythonpath,
    write_data,
)

from costaware.adapters.compute.base import JobRequest, JobState, open_backend
from costaware.adapters.ledger import reservations
from costaware.adapters.ledger.efficiency import run_outcome
from costaware.adapters.model_store import ModelStore
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry, utcnow
from costaware.core.money import format_usd_exact
from costaware.core.spot_decision import SpotDecision
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.operators.remote_training_args import parse_decision
from costaware.triggers.remote_training import RemoteTrainingJobTrigger


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_data(tmp_path / "data")


def decision(market: str = "spot", **extra: str) -> dict[str, str]:
    return {**m5_decision(market), "estimated_usd": "0.05", **extra}


def operator(tmp: Path, **kwargs: Any) -> RemoteTrainingOperator:
    args: dict[str, Any] = {
        **local_operator_args(tmp),
        "trainer_params": {"epochs": 3, "batch_size": 512},
        "checkpoint_every_seconds": 1.0,
        "spot_decision": decision(),
        "poll_interval": 0.1,
        **kwargs,
    }
    return RemoteTrainingOperator(**args)


def test_trains_on_the_decided_market_defers_and_writes_one_entry_per_attempt(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    op = operator(tmp_path)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context_for())
    assert isinstance(deferred.value.trigger, RemoteTrainingJobTrigger)
    assert reimported(deferred.value.trigger).serialize() == deferred.value.trigger.serialize()
    result, deferrals = drive(operator(tmp_path), context_for())  # a retry: follows the same job
    assert deferrals == 1
    assert [p.name for p in (tmp_path / "jobs").iterdir()] == [result["attempts"][0]["job_id"]]
    assert ModelStore.open(str(tmp_path / "models")).get(result["version"]).mode == "full"
    (attempt,) = result["attempts"]
    assert attempt["market"] == "spot" and attempt["cause"] == "success" and attempt["billable_seconds"] > 0
    entries = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert len(entries) == 1
    assert entries[0]["market"] == "spot" and entries[0]["cause"] == "success"
    billed = Decimal(str(round(attempt["billable_seconds"], 3)))
    assert Decimal(str(entries[0]["usd"])) == (billed / 3600 * Decimal("0.1")).quantize(Decimal("0.000001"))
    assert result["usd"] == str(Decimal(str(entries[0]["usd"])))


def test_a_finished_training_records_its_outcome_and_how_to_reproduce_it(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    # The job ran the trainer; the worker records what the job's result says of it (runs show prints it).
    result, _ = drive(operator(tmp_path, deferrable=False), context_for())
    (outcome,) = run_outcome(ledger, "scheduled__2026-01-01")
    stored = ModelStore.open(str(tmp_path / "models")).get(result["version"])
    assert outcome.model_version == result["version"] and outcome.task_id == "train"
    assert (outcome.iterations, outcome.iteration_unit) == (3, "epochs")
    assert outcome.training_rows == result["rows"] > 0
    record = outcome.record
    assert record is not None and record.trainer == "sklearn-sgd"
    assert record.trainer_params == {"epochs": 3, "batch_size": 512} and record.seeds == {"seed": 0}
    assert record.data_fingerprint == stored.data_fingerprint != ""
    assert record.mode == "full" and "scikit-learn" in record.libraries and record.package_version


def test_settles_the_spend_gate_reservation_with_the_billed_total(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    ledger.set_budget("project=churn", "month", "10")
    reservation = ledger.reserve(
        "project=churn", "1.00", holder="remote_dag/scheduled__2026-01-01/train/-1", run_id="r"
    )
    result, _ = drive(operator(tmp_path, tags={"project": "churn"}, deferrable=False), context_for())
    assert ledger.open_reservations() == []
    with ledger.reading() as conn:
        found = reservations.reservation(conn, reservation.id)
    assert found.status == "settled" and found.settled_usd == Decimal(result["usd"])


def test_the_gate_reservation_counts_for_as_long_as_the_task_waits_for_its_job(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    # It expired after its 6 h while the deferred task still waited (up to a day without a deadline), and
    # a second reservation could then take the same money.
    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve(
        "project=churn", "1.00", holder="remote_dag/scheduled__2026-01-01/train/-1", run_id="r"
    )
    later = decision(
        deadline=(utcnow() + timedelta(hours=20)).isoformat(),
        latest_start=(utcnow() + timedelta(hours=19)).isoformat(),
    )
    train = operator(tmp_path, tags={"project": "churn"}, max_usd="5", spot_decision=later)
    with pytest.raises(TaskDeferred) as deferred:
        train.execute(context_for())
    assert deferred.value.timeout > timedelta(hours=20)
    (held,) = ledger.open_reservations()
    assert held.id == gate.id and held.usd == Decimal(5)
    assert held.expires_at - datetime.now(timezone.utc) > deferred.value.timeout  # the wait, and more
    drive(operator(tmp_path, tags={"project": "churn"}, max_usd="5", spot_decision=later), context_for())


def test_a_ledger_blip_before_a_wait_does_not_fail_the_task_while_its_job_runs(
    tmp_path: Path,
    data: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Keeping the hold for the wait needs the ledger; failing the task for it left the job running with no
    # task to watch it or bill it (with no retry left).
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.errors import LedgerUnavailableError

    def unreachable(self: Any, reservation_id: str, until: Any) -> Any:
        raise LedgerUnavailableError("cannot write the cost ledger at sqlite:///x: database is locked")

    ledger.set_budget("project=churn", "month", "10")
    ledger.reserve("project=churn", "1.00", holder="remote_dag/scheduled__2026-01-01/train/-1", run_id="r")
    with monkeypatch.context() as patched, pytest.raises(TaskDeferred):
        patched.setattr(Ledger, "extend", unreachable)
        operator(tmp_path, tags={"project": "churn"}, max_usd="5").execute(context_for())
    assert "could not keep the task's budget hold for the wait" in capsys.readouterr().out
    result, _ = drive(operator(tmp_path, tags={"project": "churn"}, max_usd="5"), context_for())
    assert [a["cause"] for a in result["attempts"]] == ["success"]


def test_the_worker_entry_of_each_try_carries_the_operators_tags(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    # The listener tagged the worker's own entry with the DAG's tags and the run's params only: a project
    # given in the operator's tags (its budget_scope's) left the worker's time out of that budget.
    from costaware.glue import pop_annotations

    context = context_for()
    with pytest.raises(TaskDeferred) as deferred:
        operator(tmp_path, tags={"project": "churn"}).execute(context)
    assert pop_annotations(context["ti"])["tags"] == {"project": "churn"}
    event = asyncio.run(reimported(deferred.value.trigger).run().__anext__()).payload
    operator(tmp_path, tags={"project": "churn"}).execute_complete(context, event=event)
    told = pop_annotations(context["ti"])
    assert told["tags"] == {"project": "churn"} and told["cause"] == "orchestration"


def test_the_spend_gate_reservation_grows_to_max_usd_so_the_budget_holds_the_cap(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve(
        "project=churn", "1.00", holder="remote_dag/scheduled__2026-01-01/train/-1", run_id="r"
    )
    op = operator(tmp_path, tags={"project": "churn"}, max_usd="5", deferrable=False)
    result, _ = drive(op, context_for())
    with ledger.reading() as conn:
        found = reservations.reservation(conn, gate.id)
    assert found.usd == Decimal(5) and found.settled_usd == Decimal(result["usd"])
    assert "raised the spend gate's reservation from $1.00 to max_usd $5.00" in capsys.readouterr().out


def test_a_try_says_it_took_the_spend_gate_hold_up_before_it_sizes_it(
    tmp_path: Path, data: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A killed try's bill drained from the spool grows the hold back only where a later try took it up
    # (sizing it without the bill): the ledger learns which try did from the try itself, before its read.
    from sqlalchemy import select

    from costaware.adapters.ledger import schema
    from costaware.training import attempt_holds

    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve(
        "project=churn", "1.00", holder="remote_dag/scheduled__2026-01-01/train/-1", run_id="r"
    )
    r = schema.reservations
    marked_at_read: list[Any] = []
    billed_by_earlier_tries = attempt_holds.billed_by_earlier_tries

    def read_after_the_mark(conn: Any, plan: Any) -> Any:
        with ledger.reading() as reading:
            marked_at_read.append(reading.execute(select(r.c.taken_by_try).where(r.c.id == gate.id)).scalar())
        return billed_by_earlier_tries(conn, plan)

    monkeypatch.setattr(attempt_holds, "billed_by_earlier_tries", read_after_the_mark)
    drive(
        operator(tmp_path, tags={"project": "churn"}, max_usd="5", deferrable=False),
        context_for(try_number=3),
    )
    assert marked_at_read == [3]


def test_max_usd_is_lowered_to_what_the_budget_holds_beside_the_spend_gate_reservation(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # $8.50 is held for another task; the gate reserved $1: this task may bill $1.50, not its $5 cap.
    ledger.set_budget("project=churn", "month", "10")
    ledger.reserve("project=churn", "8.50", holder="remote_dag/scheduled__2026-01-01/other/-1")
    gate = ledger.reserve(
        "project=churn", "1.00", holder="remote_dag/scheduled__2026-01-01/train/-1", run_id="r"
    )
    result, _ = drive(
        operator(tmp_path, tags={"project": "churn"}, max_usd="5", deferrable=False), context_for()
    )
    out = capsys.readouterr().out
    assert "max_usd $5.00 is lowered to $1.50: the spend gate reserved $1.00" in out
    assert "$1.50 is left of max_usd" in out  # the attempt's stop is set from the lowered cap
    with ledger.reading() as conn:
        found = reservations.reservation(conn, gate.id)
    assert found.usd == Decimal("1.5") and found.settled_usd == Decimal(result["usd"])
    (usage,) = ledger.usage("project=churn")
    assert usage.reserved_usd + usage.spent_usd <= Decimal(10)


def test_a_retry_holds_max_usd_again_where_its_failed_try_settled_the_gate_reservation(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # The listener settled the gate's reservation when the first try failed: the retry held nothing.
    ledger.set_budget("project=churn", "month", "10")
    holder = "remote_dag/scheduled__2026-01-01/train/-1"
    first = ledger.reserve(
        "project=churn", "1.00", gpu_hours="0.5", holder=holder, run_id="r", ttl=timedelta(hours=48)
    )
    ledger.settle(first.id, "0.01")
    op = operator(tmp_path, tags={"project": "churn"}, max_usd="5", deferrable=False)
    result, _ = drive(op, context_for())
    assert "a retry: holding max_usd again in project=churn" in capsys.readouterr().out
    again = ledger.latest_reservation(holder)
    assert again.id != first.id and again.usd == Decimal(5)
    assert again.status == "settled" and again.settled_usd == Decimal(result["usd"])
    # The gate's GPU-hours and its reservation_ttl are held again, not the defaults.
    assert again.gpu_hours == first.gpu_hours and again.expires_at - again.created_at == timedelta(hours=48)


def test_a_retry_with_no_cap_holds_its_estimate_again(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its failed (or killed in the worker) try settled the gate's hold: with no max_usd the retry ran with
    # nothing held, unseen by the budgets it shares with other tasks.
    ledger.set_budget("project=churn", "month", "10")
    first = ledger.reserve("project=churn", "1.00", holder=GATE_HOLDER, run_id="r")
    ledger.settle(first.id, "0.01")
    result, _ = drive(operator(tmp_path, tags={"project": "churn"}, deferrable=False), context_for())
    assert "a retry: holding $0.05 again in project=churn, the estimate" in capsys.readouterr().out
    again = ledger.latest_reservation(GATE_HOLDER)
    assert again.id != first.id and again.usd == Decimal("0.05")  # the decision's estimate
    assert again.status == "settled" and again.settled_usd == Decimal(result["usd"])


def test_a_retry_under_budget_scope_with_no_cap_holds_its_estimate_less_what_was_billed(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    ledger.set_budget("project=churn", "month", "10")

    def one_try(number: int) -> Decimal:
        op = operator(tmp_path, tags={"project": "churn"}, budget_scope="project=churn", deferrable=False)
        return Decimal(drive(op, context_for(try_number=number))[0]["usd"])

    billed = one_try(1)
    assert ledger.latest_reservation(GATE_HOLDER).usd == Decimal("0.05")  # the decision's estimate
    assert one_try(2) == billed  # a retry: the same job followed, billed once
    assert ledger.latest_reservation(GATE_HOLDER).usd == Decimal("0.05") - billed


def test_a_retry_says_it_follows_the_earlier_tries_job_and_bills_it_once(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # A retry's log read like a fresh start: "attempt 1: job ..." with a limit of its own, then the
    # attempt's end again, as if it were submitted and billed twice (the ledger had it once).
    first, _ = drive(operator(tmp_path, max_usd="5", deferrable=False), context_for())
    capsys.readouterr()
    again, _ = drive(operator(tmp_path, max_usd="5", deferrable=False), context_for(try_number=2))
    out = capsys.readouterr().out
    job = first["attempts"][0]["job_id"]
    assert f"attempt 1: following job {job} on local" in out and "which an earlier try submitted" in out
    assert "is stopped after" not in out
    assert f"attempt 1 (job {job}) was billed already, ${first['usd']}: counted again here" in out
    assert again["usd"] == first["usd"] and len(ledger.entries(dag_id="remote_dag")) == 1


def test_a_retry_whose_budget_is_past_its_cap_starts_no_new_attempt(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # The retry could hold nothing, and ran with all of max_usd and nothing held: new paid attempts on a
    # budget already past its cap.
    ledger.set_budget("project=churn", "month", "10")
    holder = "remote_dag/scheduled__2026-01-01/train/-1"
    first = ledger.reserve("project=churn", "1.00", holder=holder, run_id="r")
    ledger.settle(first.id, "0.01")
    ledger.reserve("project=churn", "12", holder="other", approved_by="lead")  # an approved overage
    op = operator(tmp_path, tags={"project": "churn"}, max_usd="5", deferrable=False)
    with pytest.raises(AirflowFailException, match="max_usd") as failed:
        drive(op, context_for())
    assert "a retry: the budgets have no room" in capsys.readouterr().out
    assert "the budgets have no room for this retry (budget 'project=churn/month" in str(failed.value)
    assert "raise the budget (or approve at the gate) and clear the task; nothing was started" in str(
        failed.value
    )
    assert not (tmp_path / "jobs").exists() or list((tmp_path / "jobs").iterdir()) == []  # none started
    assert [e for e in ledger.entries() if e["task_id"] == "train"] == []


#: The holder a spend gate reserves under for the task ``train`` of :func:`context_for`'s run.
GATE_HOLDER = "remote_dag/scheduled__2026-01-01/train/-1"


def _gated_budget(ledger: Any) -> None:
    """A $10 monthly budget of project=churn, with a spend gate's $1 reservation for the task."""
    ledger.set_budget("project=churn", "month", "10")
    ledger.reserve("project=churn", "1.00", holder=GATE_HOLDER, run_id="r")


def _try_capped_at_5(tmp_path: Path) -> dict[str, Any]:
    """One try of the task tagged project=churn with max_usd $5, run to its end in the worker."""
    result, _ = drive(
        operator(tmp_path, tags={"project": "churn"}, max_usd="5", deferrable=False), context_for()
    )
    return result


def test_a_retry_holds_only_what_is_left_of_max_usd_after_what_its_earlier_tries_billed(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # The retry follows the first try's jobs again, so their cost counts against max_usd in it once more:
    # holding all of max_usd again would hold that cost twice, and lower the cap where the budget is tight.
    _gated_budget(ledger)
    billed = Decimal(_try_capped_at_5(tmp_path)["usd"])
    assert billed > 0 and ledger.open_reservations() == []
    # Another task holds all but half of what the first try billed beyond a fresh $5: $5 would not fit.
    ledger.reserve("project=churn", Decimal(5) - (billed / 2).quantize(Decimal("0.000001")), holder="other")
    capsys.readouterr()
    again = _try_capped_at_5(tmp_path)
    out = capsys.readouterr().out
    assert "is lowered" not in out
    said = (
        f"from $0.00 to {format_usd_exact(Decimal(5) - billed)}, max_usd less the {format_usd_exact(billed)}"
    )
    assert f"{said} earlier tries billed" in out
    assert Decimal(again["usd"]) == billed  # the same job followed, billed once
    retry = ledger.latest_reservation(GATE_HOLDER)
    assert retry.usd == Decimal(5) - billed and retry.settled_usd == billed
    (usage,) = ledger.usage("project=churn")
    assert usage.spent_usd == billed


def test_a_retry_whose_earlier_job_is_gone_counts_its_cost_against_max_usd(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # A job the backend no longer has is submitted again, not followed, so its first run is not in the
    # retry's state: the retry ran under all of max_usd again and held it, and the tries together could
    # bill the cap plus what the lost run cost.
    import shutil

    _gated_budget(ledger)
    billed = Decimal(_try_capped_at_5(tmp_path)["usd"])
    shutil.rmtree(tmp_path / "jobs")  # the backend forgot the job (another machine, a deleted pod)
    capsys.readouterr()
    # The retry's summary counts the lost run too: what its own attempts billed is the rest.
    again = Decimal(_try_capped_at_5(tmp_path)["usd"]) - billed
    out = capsys.readouterr().out
    lowered = format_usd_exact(Decimal(5) - billed)
    said = f"a retry: earlier tries billed {format_usd_exact(billed)} for runs it does not follow again"
    assert said in out
    assert f"so its attempts may bill {lowered}, to keep the tries within max_usd $5.00 together" in out
    retry = ledger.latest_reservation(GATE_HOLDER)
    assert retry.usd == Decimal(5) - billed and retry.settled_usd == again
    # The job run again under the lost one's name is a second run: both are in the ledger (keyed by the
    # job's name alone, the second was taken for the first and its cost dropped).
    runs = [row for row in ledger.entries(dag_id="remote_dag") if row["price_source"] == "remote:local"]
    assert len(runs) == 2 and len({row["entry_uid"] for row in runs}) == 2
    (usage,) = ledger.usage("project=churn")
    assert usage.spent_usd == sum(row["usd"] for row in runs) == billed + again


def test_a_retry_whose_lost_run_spent_the_cap_starts_nothing(tmp_path: Path, data: Path, ledger: Any) -> None:
    import shutil

    from sqlalchemy import update

    from costaware.adapters.ledger import schema

    _try_capped_at_5(tmp_path)
    shutil.rmtree(tmp_path / "jobs")
    with ledger.transaction() as conn:  # the lost run had billed all but a hundredth of a cent of the cap
        conn.execute(update(schema.entries).values(usd_micros=4_999_900))
    with pytest.raises(AirflowFailException) as failed:
        _try_capped_at_5(tmp_path)
    said = str(failed.value)
    assert "max_usd $0.0001 buys less than 60 s" in said
    lost = "what is left of max_usd $5.00 after the $4.9999 earlier tries billed for runs this try does not"
    assert lost in said
    assert "nothing was started" in said
    assert not (tmp_path / "jobs").exists() or list((tmp_path / "jobs").iterdir()) == []
    assert [row["usd"] for row in ledger.entries(dag_id="remote_dag")] == [Decimal("4.9999")]


def test_an_attempt_an_older_costaware_recorded_by_its_name_alone_is_not_recorded_again(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    from sqlalchemy import update

    from costaware.adapters.ledger import schema
    from costaware.training.remote import attempt_key, attempt_uid

    first, _ = drive(operator(tmp_path, deferrable=False), context_for())
    (row,) = ledger.entries(dag_id="remote_dag")
    job = first["attempts"][0]["job_id"]
    identity = {"dag_id": "remote_dag", "run_id": row["run_id"], "task_id": "train"}
    with ledger.transaction() as conn:  # as an older costaware keyed it
        conn.execute(
            update(schema.entries).values(entry_uid=attempt_uid(attempt_key(identity, job, legacy=True)))
        )
    again, _ = drive(operator(tmp_path, deferrable=False), context_for())  # a retry follows the same job
    assert len(ledger.entries(dag_id="remote_dag")) == 1 and Decimal(again["usd"]) == row["usd"]


def test_a_retry_of_an_approved_overage_holds_the_approved_amount_again_and_runs(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # The approval stands for the retry of the same task: refusing it would leave the job its failed try
    # started unwatched, and holding nothing let it run with all of max_usd unheld.
    from costaware.adapters.ledger.audit import audit_log

    ledger.set_budget("project=churn", "month", "1")
    holder = "remote_dag/scheduled__2026-01-01/train/-1"
    first = ledger.reserve("project=churn", "2", holder=holder, run_id="r", approved_by="lead")
    ledger.settle(first.id, "2", entry=LedgerEntry(
        dag_id="remote_dag", run_id="r", task_id="train", kind=Kind.COMPUTE, usd=Decimal(2),
        tags={"project": "churn"}, reservation_id=first.id,
    ))  # fmt: skip
    op = operator(tmp_path, tags={"project": "churn"}, max_usd="5", deferrable=False)
    result, _ = drive(op, context_for())
    assert result["attempts"][-1]["cause"] == "success"
    assert "max_usd $5.00 is lowered to $2.00" in capsys.readouterr().out  # what was approved
    again = ledger.latest_reservation(holder)
    assert again.id != first.id and again.usd == Decimal(2) and again.status == "settled"
    retry_approval = audit_log(ledger, action="approval")[-1]
    assert retry_approval.actor == "lead" and retry_approval.details["retry_of"] == first.id


def test_a_budget_with_no_room_for_one_attempt_beside_the_gate_starts_nothing_and_says_so(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    # The cap's own message would have said "raise max_usd": the budget is what is short.
    ledger.set_budget("project=churn", "month", "0.003")
    holder = "remote_dag/scheduled__2026-01-01/train/-1"
    gate = ledger.reserve("project=churn", "0.001", holder=holder, run_id="r")
    op = operator(tmp_path, tags={"project": "churn"}, max_usd="5", deferrable=False)
    with pytest.raises(
        AirflowFailException,
        match=r"'project=churn/month' had room for \$0.003 for this task beside the spend gate's "
        r"reservation, less than the \$0.00472\d* an attempt needs at \$0.10/hour; nothing was started: "
        r"raise the budget",
    ):
        drive(op, context_for())
    assert not (tmp_path / "jobs").exists()
    with ledger.reading() as conn:
        assert reservations.reservation(conn, gate.id).status == "settled"


def test_an_on_demand_start_the_window_chose_says_so_in_its_ledger_note(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    said = decision("on_demand", reason="spot price 0.5 above the maximum 0.4")
    result, _ = drive(operator(tmp_path, spot_decision=said, deferrable=False), context_for())
    (attempt,) = result["attempts"]
    why = "the spot window's decision: spot price 0.5 above the maximum 0.4"
    assert attempt["market_reason"] == why
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert entry["note"].endswith(f"; on-demand: {why}")


def test_a_log_that_cannot_be_read_does_not_hide_the_failure(
    tmp_path: Path, data: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On Batch or SageMaker a throttled describe raised in place of the failure: a retryable AWS error
    # instead of "failed: ... not retried", and the retry followed the job to fail again.
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import ComputeBackendError

    def throttled(self: LocalBackend, job_id: str, tail: int = 20) -> str:
        raise ComputeBackendError("ThrottlingException: Rate exceeded")

    monkeypatch.setattr(LocalBackend, "logs", throttled)
    op = operator(tmp_path, feature_columns=["x1", "nope"], deferrable=False)
    with pytest.raises(AirflowFailException, match=r"failed: bad training spec or input") as failed:
        drive(op, context_for())
    assert "its log could not be read (ComputeBackendError: ThrottlingException" in str(failed.value)


def test_code_error_fails_the_task_with_its_reason_and_records_the_attempt(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    op = operator(tmp_path, feature_columns=["x1", "nope"], deferrable=False)
    with pytest.raises(AirflowFailException, match=r"training job .*-a1 failed: bad training spec or input"):
        drive(op, context_for())
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert entry["cause"] == "code_error" and entry["outcome"] == "failed"
    assert not (tmp_path / "models").exists() or ModelStore.open(str(tmp_path / "models")).versions() == []


def test_a_result_the_job_cannot_write_fails_the_task_once_and_keeps_the_one_version_it_stored(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    # The job stored its model and cleared its checkpoints, then could not write result.json: exit 74 had the
    # attempt submitted again, which trained from step 0 (billed twice) and stored a second version.
    jobspec = tmp_path / "jobspec"
    (jobspec / "result.json").mkdir(parents=True)  # a folder where the result file should go: lasting
    op = operator(tmp_path, spec_uri=str(jobspec / "spec.json"), deferrable=False)
    with pytest.raises(AirflowFailException) as failed:
        drive(op, context_for())
    (version,) = ModelStore.open(str(tmp_path / "models")).versions()
    message = str(failed.value)
    assert f"failed: result not written: model version {version.version!r} was stored" in message
    assert str(jobspec / "result.json") in message and "nothing was registered" not in message
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]  # one attempt, billed once
    assert entry["outcome"] == "failed" and Decimal(str(entry["usd"])) > 0
    assert len(list((tmp_path / "jobs").iterdir())) == 1


def test_a_task_cleared_after_a_code_error_runs_a_new_attempt(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # The usual fix-then-clear: the retry followed the failed job by its name, saw it failed, and failed
    # again at once without running anything, on every clear.
    with pytest.raises(AirflowFailException, match="bad training spec or input"):
        drive(operator(tmp_path, feature_columns=["x1", "nope"], deferrable=False), context_for())
    result, _ = drive(operator(tmp_path, deferrable=False), context_for(try_number=2))
    (attempt,) = result["attempts"]
    assert attempt["attempt"] == 2 and attempt["cause"] == "success"
    assert (
        "failed (code error), so this retry does not follow the earlier attempts" in capsys.readouterr().out
    )
    causes = sorted(e["cause"] for e in ledger.entries() if e["task_id"] == "train")
    assert causes == ["code_error", "success"]  # each attempt billed once


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"objective": "carbn"}, "objective 'carbn'"),
        # Written out empty, market "" was on-demand, unsaid; a zone as the region failed the run.
        ({"market": ""}, "market is '': leave it out to take the spot window decision's"),
        ({"instance_type": ""}, "instance_type is ''"),
        ({"region": "us-east-1a"}, "region 'us-east-1a' is a zone: region takes regions"),
        ({"objective": "cost+carbon", "pause_on_price": True}, "needs carbon_usd_per_tonne"),
        ({"objective": "carbon", "pause_on_price": True, "carbon": "gb"}, "did you mean 'GB'"),
        # The pause rule is all the objective steers here: without it, nothing was carbon-aware, unsaid.
        (
            {"objective": "carbon"},
            "objective='carbon' steers only the pause rule here, and pause_on_price is off",
        ),
        # Each of these started a job (billed) or failed the task start with a raw ValueError.
        ({"seed": "abc"}, "seed must be a whole number, got 'abc'"),
        ({"trainer": " "}, "trainer is ' ': name a trainer"),
        (
            {"model_store": "s4://b/models"},
            r"model_store 's4://b/models' has the scheme 's4', .* did you mean s3",
        ),
    ],
)
def test_settings_written_out_fail_when_the_dag_is_parsed(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    # Found after rendering, they failed the task once the spend gate had reserved its money.
    with pytest.raises(ConfigurationError, match=message):
        operator(tmp_path, **kwargs)
    assert operator(tmp_path, objective="{{ params.objective }}") is not None  # checked once rendered


@pytest.mark.parametrize("written", [" ", "None", "null", " null "])
def test_a_spec_uri_written_out_as_not_given_is_left_out_as_the_run_reads_it(
    tmp_path: Path, written: str
) -> None:
    # The run reads it as not given (the spec goes next to the checkpoints); the parse refused it as a
    # template that "rendered to ' ': its template names nothing", which it neither was nor rendered.
    assert operator(tmp_path, spec_uri=written).spec_uri == written


def test_a_spec_uri_written_out_as_none_runs_with_the_spec_next_to_the_checkpoints(
    tmp_path: Path, data: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result, _ = drive(operator(tmp_path, spec_uri="None", deferrable=False), context_for())
    assert ModelStore.open(str(tmp_path / "models")).get(result["version"]).mode == "full"
    assert not (tmp_path / "None").exists()  # never read as a relative file named None


@pytest.mark.parametrize("written", ["None", "null", " None "])
def test_a_grid_zone_written_out_as_not_given_is_read_at_parse_as_the_plan_reads_it(
    tmp_path: Path, written: str
) -> None:
    # The plan reads it as the region's zone; the parse refused it beside 'cost', and looked it up as a
    # zone named 'None' beside 'carbon'.
    assert operator(tmp_path, objective="cost", carbon=written) is not None
    assert operator(tmp_path, objective="carbon", pause_on_price=True, carbon=written) is not None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "mainframe"}, "unknown compute backend 'mainframe': use one of local, sagemaker"),
        ({"market": "cheap"}, "market 'cheap' is not one of spot, on_demand"),
        ({"spot_decision": decision("on_demand"), "market": "spot"}, "no spot price is known"),
        # Billed at its starting price with only a warning after the paid attempt, before.
        (
            {"prices": "lve"},
            "prices 'lve' is neither 'live' (EC2's spot price history through aws_conn_id) nor a file "
            "(did you mean 'live'?)",
        ),
        ({"prices": "/nope/prices.json"}, "prices '/nope/prices.json' is neither 'live'"),
    ],
)
def test_bad_input_fails_before_anything_runs_or_is_written(
    tmp_path: Path, data: Path, ledger: Any, kwargs: dict[str, Any], message: str
) -> None:
    # A backend or market written out is refused when the DAG is parsed (test_remote_training_command);
    # here they come as a template renders them, set on the operator before it runs.
    rendered = {
        k: kwargs.pop(k) for k in ("backend", "market") if k in kwargs and "spot_decision" not in kwargs
    }
    op = operator(tmp_path, **kwargs)
    for name, value in rendered.items():
        setattr(op, {"market": "job_market"}.get(name, name), value)
    with pytest.raises(AirflowFailException) as e:
        op.execute(context_for())
    assert message in str(e.value)
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "ckpt").exists()
    assert ledger.entries() == []


def test_prices_sagemaker_never_reads_are_not_checked(tmp_path: Path) -> None:
    # SageMaker bills its own ml.* prices: a prices file matters there only to pause on the price.
    op = operator(tmp_path, prices="/nope/prices.json")
    op.backend = "sagemaker"
    assert op._checked_prices() == "/nope/prices.json"
    op.pause_on_price = True
    with pytest.raises(ConfigurationError, match=r"prices '/nope/prices\.json' is neither 'live'"):
        op._checked_prices()
    op.backend, op.pause_on_price, op.prices = "local", False, " live "
    assert op._checked_prices() == "live"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trainer": "xgbost"}, r"unknown trainer 'xgbost' \(did you mean 'xgboost'\?\)"),
        (
            {"trainer": "lightgbm", "trainer_params": {"num_boost_rounds": "{{ params.rounds }}"}},
            r"trainer_params 'num_boost_rounds' is not an option of trainer 'lightgbm' \(did you mean "
            "'num_boost_round'",
        ),
        ({"policy": "always_warm"}, r"unknown retrain policy 'always_warm' \(did you mean 'always-warm'"),
        (
            {"trainer": "{{ params.trainer }}"},
            "trainer '{{ params.trainer }}' is a template, but trainer is not",
        ),
        ({"policy": "{{ params.policy }}"}, "policy '{{ params.policy }}' is a template, but policy is not"),
    ],
)
def test_a_misspelt_trainer_or_policy_is_refused_at_parse_not_in_a_started_job(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    # The job would have found it only after it started, on a billed machine.
    with pytest.raises(ConfigurationError, match=f"RemoteTrainingOperator 'train': {message}"):
        operator(tmp_path, **kwargs)
    assert not (tmp_path / "jobs").exists()


def test_decision_is_read_from_xcom_in_any_rendering() -> None:
    written = decision()
    parsed = parse_decision(str(written))  # what a Jinja template of the XCom renders to
    assert parsed is not None and parsed == SpotDecision.from_xcom(written)
    assert parsed.market == "spot" and parsed.usd_per_hour == Decimal(written["usd_per_hour"])
    assert parse_decision('{"market": "on_demand"}') == SpotDecision(market="on_demand", usd_per_hour=None)
    assert parse_decision("") is None and parse_decision("None") is None  # no decision: the arguments say it
    with pytest.raises(ConfigurationError, match="neither JSON nor a dict"):
        parse_decision("spot please")
    with pytest.raises(ConfigurationError, match="market"):
        parse_decision('{"market": "cheap"}')


def test_spot_job_without_capacity_falls_back_to_on_demand_at_the_latest_start(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    capacity = tmp_path / "capacity"
    capacity.write_text("0")
    now = utcnow()
    op = operator(
        tmp_path,
        latest_start=(now + timedelta(seconds=2)).isoformat(),
        backend_options={
            "root": str(tmp_path / "jobs"),
            "env": {"PYTHONPATH": training_pythonpath()},
            "capacity_file": str(capacity),
        },
    )
    result, deferrals = drive(op, context_for())
    assert deferrals == 2
    first, second = result["attempts"]
    assert (first["market"], first["cause"], first["billable_seconds"]) == ("spot", "capacity_wait", 0.0)
    assert (second["market"], second["cause"]) == ("on_demand", "success")
    assert first["market_reason"] == ""
    assert second["market_reason"].startswith("no spot capacity by the latest safe start ")
    entries = sorted((e for e in ledger.entries() if e["task_id"] == "train"), key=lambda e: e["cause"])
    assert [e["cause"] for e in entries] == ["capacity_wait", "success"]
    # The ledger says why this attempt was billed at the on-demand price.
    assert "on-demand: no spot capacity by the latest safe start" in entries[1]["note"]
    assert "on-demand:" not in entries[0]["note"]


def test_a_spot_decision_past_its_latest_safe_start_runs_attempt_1_on_demand(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # A past deadline: attempt 1 was submitted on spot, stopped at its first poll and billed as "no spot
    # capacity by the latest safe start", then attempt 2 ran on on-demand.
    late = decision(deadline="2025-01-01T01:00:00+00:00", latest_start="2025-01-01T00:50:00+00:00")
    result, deferrals = drive(operator(tmp_path, spot_decision=late), context_for())
    assert deferrals == 1
    (only,) = result["attempts"]
    assert (only["market"], only["cause"]) == ("on_demand", "success")
    why = (
        "the latest safe start 2025-01-01T00:50:00+00:00 for the deadline 2025-01-01T01:00:00+00:00 "
        "had passed"
    )
    assert only["market_reason"].startswith(why)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train" and e["cause"] != "orchestration"]
    assert entry["market"] == "on_demand" and f"on-demand: {why}" in entry["note"]
    assert f"attempt 1 on on-demand: {why}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("spot_task_id", "wired", "message"),
    [
        (
            "spot_windw",
            True,
            "spot_task_id 'spot_windw' names no task of DAG 'remote_dag': did you mean 'spot_window'",
        ),
        (
            "xyz",
            True,
            "spot_task_id 'xyz' names no task of DAG 'remote_dag': its tasks are spot_window, train",
        ),
        (
            "spot_window",
            False,
            "task 'spot_window' left no spot decision in XCom: it is not upstream of 'train', so it need not "
            "have run first; set spot_window >> train",
        ),
        ("spot_window", True, "task 'spot_window' left no spot decision in XCom: check spot_task_id"),
    ],
)
def test_a_spot_task_id_that_left_no_decision_says_whether_it_is_misspelt_or_not_upstream(
    tmp_path: Path, ledger: Any, spot_task_id: str, wired: bool, message: str
) -> None:
    # "check spot_task_id" alone left the typo, or the missing `>>`, to be found by hand.
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("remote_dag", schedule=None) as dag:
        window = EmptyOperator(task_id="spot_window")
        train = operator(tmp_path, spot_decision=None, spot_task_id=spot_task_id)
        if wired:
            window >> train
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        train.execute({**context_for(), "dag": dag, "task": train})
    assert not (tmp_path / "jobs").exists()
    assert [e for e in ledger.entries() if e["task_id"] == "train"] == []


def test_local_backend_submit_is_idempotent_by_job_name(tmp_path: Path) -> None:
    backend = open_backend("local", {"root": str(tmp_path / "jobs")})
    request = JobRequest(
        job_name="t-1", spec_uri=str(tmp_path / "missing.json"), market="on_demand", instance_type="m5.large"
    )
    assert backend.submit(request) == backend.submit(request) == "t-1"
    assert len(list((tmp_path / "jobs").iterdir())) == 1
    for _ in range(600):
        status = backend.poll("t-1")
        if status.state.done:
            break
        time.sleep(0.1)
    assert status.state == JobState.FAILED and status.exit_code == 2
    assert "does not exist" in status.reason and "missing.json" in backend.logs("t-1")


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        ({"max_runtime_seconds": 3}, r"stopped at its time limit \(max_runtime_seconds\) after 3\.0 s"),
        ({"max_runtime_seconds": 3, "stop_after_seconds": 3}, r"stopped at its max_usd limit after 3\.0 s"),
    ],
    ids=["time-limit", "max-usd-first"],
)
def test_local_backend_stops_a_job_at_its_time_limit(
    tmp_path: Path, limits: dict[str, int], reason: str
) -> None:
    # SageMaker, Batch and Kubernetes end a job at its time limit; the local backend (the default) ran it on,
    # billed, after the task's wait for it had timed out.
    import sys

    pytest.importorskip("costaware_runtime.launcher", reason="pip install -e ./runtime (costaware-run)")
    from remote_support import TRAINING

    seen = tmp_path / "seen.jsonl"
    backend = open_backend("local", {"root": str(tmp_path / "jobs"), "env": {"OWN_TRAIN_LOG": str(seen)}})
    request = JobRequest(
        job_name="t-3",
        spec_uri="",
        market="on_demand",
        instance_type="m5.large",
        checkpoint_uri=str(tmp_path / "ckpt"),
        model_store=str(tmp_path / "models"),
        output_uri=str(tmp_path / "out"),
        result_uri=str(tmp_path / "result.json"),
        user_command=(sys.executable, str(TRAINING / "own_train.py"), "wait-for-notice"),
        grace_seconds=5,
        **limits,
    )
    backend.submit(request)
    try:
        for _ in range(600):
            status = backend.poll("t-3")
            if status.state.done:
                break
            time.sleep(0.1)
    finally:
        backend.signal("t-3", signal.SIGKILL)  # never left running by a failure here
    assert status.state == JobState.INTERRUPTED, status  # stopped as a notice stops it: it checkpointed
    assert status.exit_code == 75
    assert re.match(reason, status.reason)
    assert 3 <= status.billable_seconds < 30


def test_local_backend_submit_closes_its_copy_of_the_supervisor_log(tmp_path: Path) -> None:
    # It was left to the garbage collector: a ResourceWarning per submit in the long-running worker.
    import gc
    import warnings

    backend = open_backend("local", {"root": str(tmp_path / "jobs")})
    request = JobRequest(
        job_name="t-2", spec_uri=str(tmp_path / "missing.json"), market="on_demand", instance_type="m5.large"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        backend.submit(request)
        gc.collect()
    assert not [w for w in caught if "supervisor.log" in str(w.message)]


def test_listener_prices_the_worker_not_the_training(tmp_path: Path, data: Path, ledger: Any) -> None:
    from types import SimpleNamespace

    from costaware.plugins.listener import CostListener

    op = operator(tmp_path, spot_decision=decision(instance_type="p3.2xlarge"), deferrable=False)
    context = context_for()
    ti = context["ti"]
    ti.task, ti.start_date, ti.end_date = op, None, None
    ti.get_template_context = lambda: {"params": {}}
    context["ti"] = SimpleNamespace(**vars(ti))
    CostListener().on_task_instance_running(None, context["ti"])
    result, _ = drive(op, context)
    CostListener().on_task_instance_success(None, context["ti"])
    rows = {e["cause"]: e for e in ledger.entries() if e["task_id"] == "train"}
    assert set(rows) == {"success", "orchestration"}
    assert rows["success"]["instance_type"] == "p3.2xlarge" and rows["success"]["market"] == "spot"
    worker = rows["orchestration"]
    assert worker["instance_type"] != "p3.2xlarge" and worker["market"] == "on_demand"
    assert Decimal(str(rows["success"]["usd"])) == Decimal(result["usd"])


@pytest.mark.parametrize(
    ("backend", "options", "label"),
    [
        ("batch", {"spot_queue": "s", "on_demand_queue": "o", "job_definition": "d"}, "AWS Batch"),
        ("kubernetes", {"image": "costaware:1"}, "Kubernetes"),
        (
            "sagemaker",
            {"role_arn": "arn:aws:iam::1:role/r", "image_uri": "i", "output_s3_uri": "s3://o"},
            "SageMaker",
        ),
    ],
)
@pytest.mark.parametrize("local", ["checkpoint_store", "model_store"])
def test_remote_backends_refuse_local_stores_before_anything_is_written_or_submitted(
    tmp_path: Path, ledger: Any, backend: str, options: dict[str, Any], label: str, local: str
) -> None:
    stores = {
        "checkpoint_store": "s3://ml/ckpt",
        "model_store": "s3://ml/models",
        local: str(tmp_path / local),
    }
    # As each backend names it: an ml.* type on Batch or Kubernetes is refused as the DAG is parsed.
    instance_type = "ml.m5.xlarge" if backend == "sagemaker" else "m5.xlarge"
    op = operator(tmp_path, backend=backend, backend_options=options, instance_type=instance_type, **stores)
    with pytest.raises(AirflowFailException) as e:
        op.execute(context_for())
    assert str(e.value).startswith(
        f"{label} jobs need an s3:// {local}, got {str(tmp_path / local)!r}: the job runs on another machine"
    )
    assert f"set {local} to an s3://bucket/prefix" in str(e.value)
    assert not (tmp_path / local).exists() and ledger.entries() == []


def test_a_configuration_error_while_polling_fails_the_task_without_retry(
    tmp_path: Path, moto_aws_conn: str
) -> None:
    state = {"attempts": [], "current": {"attempt": 1, "job_id": "j", "market": "spot"}}
    queues = {"spot_queue": "s", "on_demand_queue": "o", "job_definition": "d", "aws_conn_id": moto_aws_conn}
    cases = [
        ({**queues, "spot_queue": ""}, AirflowFailException, "Batch backend needs spot_queue"),
        (queues, AirflowException, "Batch job 'j' does not exist"),  # may be eventual consistency: retried
    ]
    for options, raised, message in cases:
        trigger = RemoteTrainingJobTrigger(
            backend="batch", backend_options=options, job_id="j", state=state, poll_interval=0.01
        )
        event = asyncio.run(reimported(trigger).run().__anext__()).payload
        assert event["status"] == "error" and event["configuration"] is (raised is AirflowFailException)
        with pytest.raises(raised, match=message) as e:
            operator(tmp_path).execute_complete(context_for(), event=event)
        assert type(e.value) is raised


def test_budget_scope_with_nothing_to_hold_is_refused_when_the_dag_is_parsed(tmp_path: Path) -> None:
    # Neither max_usd nor a decision: the budgets were never told of the job until it billed.
    with pytest.raises(
        ConfigurationError, match=r"budget_scope='project=churn' holds max_usd .* give max_usd"
    ):
        operator(
            tmp_path,
            spot_decision=None,
            market="spot",
            instance_type="m5.large",
            budget_scope="project=churn",
        )
    with pytest.raises(Exception, match="budget_scope is empty"):  # blank was skipped: nothing held
        operator(tmp_path, max_usd="5", budget_scope=" ")


def test_a_decision_without_an_estimate_and_no_cap_starts_nothing_under_budget_scope(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    ledger.set_budget("project=churn", "month", "10")
    unestimated = m5_decision()  # a decision written by hand, without estimated_usd
    op = operator(
        tmp_path, tags={"project": "churn"}, budget_scope="project=churn", spot_decision=unestimated
    )
    with pytest.raises(AirflowFailException, match=r"this task has neither .* nothing was started"):
        op.execute(context_for())
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())
    assert ledger.open_reservations() == []


def test_budget_scope_is_templated_and_holds_in_the_rendered_scope(
    tmp_path: Path, data: Path, ledger: Any
) -> None:
    # It was not a template field: the literal '{{ ... }}' reached the tag check at run time.
    ledger.set_budget("project=churn", "month", "10")
    op = operator(
        tmp_path,
        tags={"project": "churn"},
        budget_scope="project={{ params.project }}",
        max_usd="2",
        deferrable=False,
    )
    context = {**context_for(), "params": {"project": "churn"}}
    op.render_template_fields(context)
    drive(op, context)
    hold = ledger.latest_reservation(GATE_HOLDER)
    assert str(hold.scope) == "project=churn" and hold.usd == Decimal("2")


def test_stores_pyarrow_opens_pass_the_scheme_check(tmp_path: Path) -> None:
    # fsspec alone does not know abfss:// or viewfs://, which the stores open through pyarrow.
    for store in ("abfss://models@acct.dfs.core.windows.net/churn", "viewfs://cluster/models", "gs://b/m"):
        assert operator(tmp_path, model_store=store).model_store == store


@pytest.mark.parametrize("refuses", ["__init__", "submit"])
def test_a_backend_that_refuses_its_options_before_any_job_releases_the_tasks_hold(
    tmp_path: Path, data: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, refuses: str
) -> None:
    # The backend is opened (and its job checked) after the task's money is held: refused there, the task
    # failed for good and its $5 stayed held, the reservation open until its reservation_ttl (6 h).
    from costaware.adapters.compute.local import LocalBackend

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise ConfigurationError("backend option x must be a whole number from 1 to 9, got 0")

    ledger.set_budget("project=churn", "month", "10")
    monkeypatch.setattr(LocalBackend, refuses, refuse)
    op = operator(tmp_path, tags={"project": "churn"}, budget_scope="project=churn", max_usd="5")
    with pytest.raises(AirflowFailException, match="backend option x must be a whole number"):
        op.execute(context_for())
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())  # no job
    assert ledger.open_reservations() == []
    hold = ledger.latest_reservation(GATE_HOLDER)
    assert (hold.usd, hold.status, hold.settled_usd) == (Decimal("5"), "settled", Decimal(0))


@pytest.mark.parametrize(("max_tries", "status"), [(0, "settled"), (1, "open")])
def test_a_transient_submit_failure_on_the_last_try_releases_the_tasks_hold(
    tmp_path: Path, data: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, max_tries: int, status: str
) -> None:
    # A retryable failure before any job (the backend's API down at the submit) on the task's last try is
    # for good too: no retry follows and no job bills against the hold, which stayed open until its
    # reservation_ttl (6 h), blocking the budget. With a retry left it is kept: the retry holds on it.
    from costaware.adapters.compute.local import LocalBackend

    def down(self: Any, request: Any) -> Any:
        raise OSError("the backend's API is down")

    ledger.set_budget("project=churn", "month", "10")
    monkeypatch.setattr(LocalBackend, "submit", down)
    op = operator(tmp_path, tags={"project": "churn"}, budget_scope="project=churn", max_usd="5")
    context = context_for()
    context["ti"].max_tries = max_tries
    with pytest.raises(OSError, match="the backend's API is down"):
        op.execute(context)
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())  # no job
    hold = ledger.latest_reservation(GATE_HOLDER)
    assert (hold.usd, hold.status) == (Decimal("5"), status)
    if status == "settled":
        assert hold.settled_usd == Decimal(0) and ledger.open_reservations() == []


def test_a_retry_refused_past_max_attempts_releases_the_hold_its_failed_try_left(
    tmp_path: Path, data: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Try 1 billed attempt 1 and failed before it settled (the ledger down): its hold stays open for the
    # retry. The backend lost attempt 1's job, so the retry would start attempt 2, past max_attempts=1: it
    # failed for good before any job with that hold left open until its reservation_ttl (6 h).
    import shutil

    from costaware.remote_billing import AttemptBilling

    settle = AttemptBilling._settle

    def down(self: Any, state: Any) -> None:
        raise OSError("ledger is down")

    ledger.set_budget("project=churn", "month", "10")
    args = {"tags": {"project": "churn"}, "budget_scope": "project=churn", "max_usd": "5", "max_attempts": 1}
    monkeypatch.setattr(AttemptBilling, "_settle", down)
    with pytest.raises(OSError, match="ledger is down"):
        drive(operator(tmp_path, deferrable=False, **args), context_for())
    assert ledger.latest_reservation(GATE_HOLDER).status == "open"  # kept for the retry
    monkeypatch.setattr(AttemptBilling, "_settle", settle)
    shutil.rmtree(tmp_path / "jobs")
    with pytest.raises(AirflowFailException, match="past max_attempts=1: raise max_attempts"):
        drive(operator(tmp_path, deferrable=False, **args), context_for(try_number=2))
    assert not (tmp_path / "jobs").exists()
    assert ledger.open_reservations() == []
    assert ledger.latest_reservation(GATE_HOLDER).status == "settled"


def test_a_hold_that_cannot_be_settled_after_a_refused_submit_is_named_and_the_refusal_reported(
    tmp_path: Path,
    data: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from costaware.adapters.compute.local import LocalBackend
    from costaware.remote_billing import AttemptBilling

    def refuse(self: Any, request: Any) -> Any:
        raise ConfigurationError("backend option x must be a whole number from 1 to 9, got 0")

    def unreachable(self: Any, state: Any) -> None:
        raise OSError("ledger is down")

    ledger.set_budget("project=churn", "month", "10")
    monkeypatch.setattr(LocalBackend, "submit", refuse)
    monkeypatch.setattr(AttemptBilling, "_settle", unreachable)
    op = operator(tmp_path, tags={"project": "churn"}, budget_scope="project=churn", max_usd="5")
    with pytest.raises(AirflowFailException, match="backend option x must be a whole number"):
        op.execute(context_for())
    assert (
        "could not settle the task's budget hold (ledger is down): it is held until its time limit "
        f"(reservation_ttl); give it back with `costaware budget release --holder {GATE_HOLDER}`"
    ) in capsys.readouterr().out
    assert ledger.latest_reservation(GATE_HOLDER).status == "open"


def test_a_submit_that_made_its_job_and_failed_keeps_the_hold_where_the_job_cannot_be_looked_up(
    tmp_path: Path, data: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review finding on 966d0bdd: the job created, the submit then refused, and the look-up down: the $5
    # hold was settled at $0 while the job ran on, unwatched and unbilled (a budget could be overspent).
    from costaware.adapters.compute.local import LocalBackend

    submit = LocalBackend.submit

    def made_then_refused(self: Any, request: Any) -> Any:
        submit(self, request)
        raise ConfigurationError("backend option x must be a whole number from 1 to 9, got 0")

    def lookup_down(self: Any, name: str) -> Any:
        raise OSError("the backend's API is down")

    ledger.set_budget("project=churn", "month", "10")
    monkeypatch.setattr(LocalBackend, "submit", made_then_refused)
    monkeypatch.setattr(LocalBackend, "find", lookup_down)
    op = operator(tmp_path, tags={"project": "churn"}, budget_scope="project=churn", max_usd="5")
    with pytest.raises(AirflowFailException, match="backend option x must be a whole number"):
        op.execute(context_for())
    assert any((tmp_path / "jobs").iterdir())  # the job was made
    hold = ledger.latest_reservation(GATE_HOLDER)
    assert (hold.usd, hold.status) == (Decimal("5"), "open")
