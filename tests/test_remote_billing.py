"""The direct bill of a remote attempt (``AttemptBilling``) beside a ledger row that may bill the same run."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from costaware import Ledger
from costaware.core.ledger import Kind, LedgerEntry


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        from services import fresh_postgres_database  # tests/support/

        url = fresh_postgres_database(request.getfixturevalue("postgres_url"))
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", url)
    return url


def _record_a_row_of_the_job_that_gives_no_end(ledger: Ledger, ident: dict[str, Any]) -> LedgerEntry:
    older = LedgerEntry(
        dag_id=ident["dag_id"], run_id=ident["run_id"], task_id=ident["task_id"], kind=Kind.COMPUTE,
        usd=Decimal("2"), quantity=Decimal("1"), unit="hour", unit_price_usd=Decimal("2"),
        price_source="remote:local", cause="success",
        note="attempt 1, job train-a1 on local, 3600.0 s billed: ok", entry_uid="attempt:older-no-end",
    )  # fmt: skip
    assert ledger.record(older)
    return older


#: The job's run: 1,800 s, ended 3 h before the bill (offset from now).
ENDED_JOB = {
    "job_id": "train-a1",
    "state": "succeeded",
    "market": "on_demand",
    "instance_type": "m5.large",
    "billable_seconds": 1800.0,
}


@pytest.fixture
def billed_ledger(any_ledger_url: str) -> Iterator[Ledger]:
    opened = Ledger.from_url(any_ledger_url)
    yield opened
    opened.dispose()


def test_a_direct_bill_beside_a_row_of_the_job_that_gives_no_end_is_kept_for_a_person_not_written(
    billed_ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A row of the job's name written by a version whose notes gave no end, an hour billed and written now,
    # 3 hours after this run of the job ended: it may be a new try's bill of this run (written late) or a
    # later run's. The drain keeps such a bill in spool/unsure for a person; the direct bill wrote it beside
    # the row, and the run could be billed twice.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    plan = RemotePlan.from_json(CAPTURED)
    ident = plan.identity
    older = _record_a_row_of_the_job_that_gives_no_end(billed_ledger, ident)
    # The task's hold (a spend gate's): a bill written pays from it, a bill kept for a person must not, or
    # the hold counted as spent what the ledger never held.
    from costaware.training.attempt_holds import task_holder

    billed_ledger.set_budget("project=churn", "month", "10")
    hold = billed_ledger.reserve("project=churn", "5.00", holder=task_holder(plan), run_id=ident["run_id"])
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand")
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    job = {**ENDED_JOB, "ended_at": time.time() - 3 * 3600}
    with caplog.at_level(logging.ERROR, logger="costaware.ledger_spool"):
        billed = billing._bill_attempt(state, job, None)
    assert [row["entry_uid"] for row in billed_ledger.entries(dag_id=ident["dag_id"])] == [older.entry_uid]
    (kept,) = (spool / "unsure").glob("*.json")
    data: dict[str, Any] = json.loads(kept.read_text())
    assert data["duplicate_check"]["job_id"] == "train-a1" and data["retrying"] is True
    assert data["entry"]["usd"] == "1.000000" and data["entry"]["reservation_id"] is None
    said = caplog.text
    assert f"the bill {kept.name} (job train-a1, $1.000000) was not written" in said
    assert older.entry_uid in said and f"Kept in {spool / 'unsure'}" in said and '"another_run": true' in said
    assert billed_ledger.open_holds_of(task_holder(plan)) == [hold]
    assert billed_ledger.paid_from([hold.id]).get(hold.id, Decimal(0)) == 0
    # The attempt still counts what it ran against max_usd.
    assert Decimal(billed.attempts[-1].usd) == Decimal("1")
    # Marked as another run's and moved back, as the log says, the drain writes it.
    from costaware.ledger_spool_drain import drain

    kept.write_text(json.dumps({**data, "another_run": True}))
    kept.replace(spool / kept.name)
    assert drain(spool, lambda conn_id: billed_ledger).written == 1
    assert len(billed_ledger.entries(dag_id=ident["dag_id"])) == 2


@pytest.mark.parametrize(
    ("unsure_is_a_file", "kept"),
    [
        (False, "kept in spool/unsure for a person (see the ERROR above)"),
        (True, "not written nor kept: logged for a person (see the ERROR above)"),
    ],
)
def test_a_kill_whose_bill_is_kept_for_a_person_says_so_not_that_it_billed_the_job(
    unsure_is_a_file: bool,
    kept: str,
    billed_ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Right after the ERROR that says the bill was not written, the kill said "stopped and billed ... $1".
    from attempt_states import CAPTURED  # tests/support/

    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    if unsure_is_a_file:
        spool = tmp_path / "airflow" / "costaware" / "spool"
        spool.mkdir(parents=True)
        (spool / "unsure").write_text("")
    plan = RemotePlan.from_json(CAPTURED)
    _record_a_row_of_the_job_that_gives_no_end(billed_ledger, plan.identity)
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand")
    trigger = RemoteTrainingJobTrigger(
        backend="local", backend_options={}, job_id="train-a1", state=state.to_json(), aws_conn_id=None
    )
    job = {**ENDED_JOB, "ended_at": time.time() - 3 * 3600}
    # The job had ended on its own: the kill's stop finds its end and bills it as it ended.
    monkeypatch.setattr(trigger, "_stop_job", lambda *args, **kwargs: (job, True, True))
    assert trigger.stop_and_bill(ask_state=False, wait_seconds=0) is None
    said = capsys.readouterr().out  # the trigger's log (Airflow's structlog)
    assert "stopped and billed" not in said
    assert f"its task was killed: job train-a1 stopped; its bill of $1.000000 (1800 s) {kept}" in said
    assert len(billed_ledger.entries(dag_id=plan.identity["dag_id"])) == 1


def test_a_kill_whose_bill_is_kept_for_a_person_settles_the_hold_and_its_drain_holds_nothing_again(
    billed_ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # 35ff9a06 left the task's hold open while its bill waited in spool/unsure. It did not cover the bill:
    # the listener's entry of the task's end settled it at its own $0.01, and a person's drain of the kept
    # bill (spooled for a retry) before that grew the finished task's hold again, $1.50 -> $2.00, for a
    # retry that never comes, with a WARNING to mark the task failed. Settled at the kill, nothing is held
    # again.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.ledger_spool import record_and_settle
    from costaware.ledger_spool_drain import drain
    from costaware.training.attempt_holds import task_holder
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    plan = RemotePlan.from_json({**CAPTURED, "tags": {"project": "churn"}})  # its bill counts in the budget
    ident = plan.identity
    _record_a_row_of_the_job_that_gives_no_end(billed_ledger, ident)
    billed_ledger.set_budget("project=churn", "month", "5")
    billed_ledger.reserve("project=churn", "1.50", holder=task_holder(plan), run_id=ident["run_id"])
    (before,) = billed_ledger.usage("project=churn")
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand")
    trigger = RemoteTrainingJobTrigger(
        backend="local", backend_options={}, job_id="train-a1", state=state.to_json(), aws_conn_id=None
    )
    job = {**ENDED_JOB, "ended_at": time.time() - 3 * 3600}
    monkeypatch.setattr(trigger, "_stop_job", lambda *args, **kwargs: (job, True, True))
    assert trigger.stop_and_bill(ask_state=False, wait_seconds=0) is None
    (kept,) = (spool / "unsure").glob("*.json")
    assert billed_ledger.open_holds_of(task_holder(plan)) == []
    # Marked another run's by a person and drained (its spool file says retrying): written once, and the
    # finished task holds nothing again.
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "another_run": True}))
    kept.replace(spool / kept.name)
    with caplog.at_level(logging.WARNING, logger="costaware.ledger_spool"):
        assert drain(spool, lambda conn_id: billed_ledger).written == 1
    assert billed_ledger.open_holds_of(task_holder(plan)) == []
    assert "retry" not in caplog.text
    # The task's end, as the cost listener writes it: its worker's own entry of the last try.
    worker = LedgerEntry(
        dag_id=ident["dag_id"], run_id=ident["run_id"], task_id=ident["task_id"],
        map_index=ident["map_index"], kind=Kind.COMPUTE, usd=Decimal("0.01"), tags={"project": "churn"},
        entry_uid="worker-try",
    )  # fmt: skip
    record_and_settle(billed_ledger, worker, retrying=False)
    (ended,) = billed_ledger.usage("project=churn")
    assert (ended.spent_usd, ended.reserved_usd) == (before.spent_usd + Decimal("1.01"), Decimal(0))


def test_a_drain_that_writes_an_entry_past_a_budgets_cap_says_so(
    billed_ledger: Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A bill that waited in the spool counted in no budget; others spent meanwhile. Written, the budget
    # read $2.50 spent of a $2 cap, and the drain said INFO "wrote spooled ledger entry" only.
    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain

    billed_ledger.set_budget("project=churn", "month", "2")
    tags = {"project": "churn"}
    spent = LedgerEntry(
        dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1.50"), tags=tags,
        entry_uid="spent-meanwhile",
    )  # fmt: skip
    assert billed_ledger.record(spent)
    waited = LedgerEntry(
        dag_id="d",
        run_id="r2",
        task_id="t",
        kind=Kind.COMPUTE,
        usd=Decimal("1"),
        tags=tags,
        entry_uid="waited",
    )
    spool = tmp_path / "spool"
    spool_entry(spool, waited, "costaware_ledger", retrying=False)
    with caplog.at_level(logging.WARNING, logger="costaware.ledger_spool"):
        assert drain(spool, lambda conn_id: billed_ledger).written == 1
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    (usage,) = billed_ledger.usage("project=churn")
    assert usage.spent_usd == Decimal("2.50")
    assert f"took budget {usage.name} past its cap: spent $2.50 of its cap $2.00" in said and "waited" in said


@pytest.mark.parametrize(
    ("spent_before", "held_for_it"),
    [
        ("2.50", None),  # the budget was past its cap before the entry: this entry did not pass it
        ("1.50", "1"),  # paid from its task's $1 hold: the budget counted it all along
    ],
)
def test_a_drain_says_nothing_of_a_cap_the_entry_it_writes_did_not_pass(
    billed_ledger: Ledger,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    spent_before: str,
    held_for_it: str | None,
) -> None:
    # The drain's WARNING fired wherever spent > cap after a write: of a budget already past its cap, and of
    # an entry its own hold paid, neither moved past the cap by the money that waited in the spool.
    from costaware.core.ledger import reservation_holder
    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain

    billed_ledger.set_budget("project=churn", "month", "2")
    tags = {"project": "churn"}
    if held_for_it is not None:
        billed_ledger.reserve("project=churn", held_for_it, holder=reservation_holder("d", "r2", "t", -1))
    spent = LedgerEntry(
        dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal(spent_before), tags=tags,
        entry_uid="spent-meanwhile",
    )  # fmt: skip
    assert billed_ledger.record(spent)
    waited = LedgerEntry(
        dag_id="d", run_id="r2", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1"), tags=tags,
        entry_uid="waited",
    )  # fmt: skip
    spool = tmp_path / "spool"
    spool_entry(spool, waited, "costaware_ledger", retrying=False)
    with caplog.at_level(logging.WARNING, logger="costaware.ledger_spool"):
        assert drain(spool, lambda conn_id: billed_ledger).written == 1
    (usage,) = billed_ledger.usage("project=churn")
    assert usage.spent_usd == Decimal(spent_before) + 1 > usage.cap_usd
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_kill_whose_bill_differs_from_the_one_kept_for_the_job_names_the_files_figure(
    billed_ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An earlier try kept the job's bill at $0.50 (priced otherwise); the kill bills the same attempt at $1
    # under the same uid: the file stays at $0.50, and the kill said "its bill of $1 ... kept in
    # spool/unsure".
    from attempt_states import CAPTURED  # tests/support/

    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    plan = RemotePlan.from_json(CAPTURED)
    _record_a_row_of_the_job_that_gives_no_end(billed_ledger, plan.identity)
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand")
    job = {**ENDED_JOB, "ended_at": time.time() - 3 * 3600}

    def kill() -> None:
        trigger = RemoteTrainingJobTrigger(
            backend="local", backend_options={}, job_id="train-a1", state=state.to_json(), aws_conn_id=None
        )
        monkeypatch.setattr(trigger, "_stop_job", lambda *args, **kwargs: (job, True, True))
        trigger.stop_and_bill(ask_state=False, wait_seconds=0)

    kill()
    (kept,) = (tmp_path / "airflow" / "costaware" / "spool" / "unsure").glob("*.json")
    earlier = json.loads(kept.read_text())
    earlier["entry"]["usd"] = "0.50"
    kept.write_text(json.dumps(earlier))
    capsys.readouterr()
    kill()
    assert json.loads(kept.read_text()) == earlier
    said = capsys.readouterr().out
    assert "kept in spool/unsure" not in said
    assert (
        "its bill of $1.000000 (1800 s) not kept: spool/unsure keeps this job's bill of $0.50 from an "
        "earlier try, logged for a person"
    ) in said


def test_a_kill_whose_bill_finds_the_kept_file_unreadable_does_not_say_it_kept_the_bill(
    billed_ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # spool/unsure/<uid>.json cut short: keep_unsure's ERROR said this bill was not kept (logged whole), and
    # the kill's WARNING right after it said "kept in spool/unsure", having read the file again and found
    # no figure to tell it differed.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    plan = RemotePlan.from_json(CAPTURED)
    _record_a_row_of_the_job_that_gives_no_end(billed_ledger, plan.identity)
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand")
    job = {**ENDED_JOB, "ended_at": time.time() - 3 * 3600}

    def kill() -> None:
        trigger = RemoteTrainingJobTrigger(
            backend="local", backend_options={}, job_id="train-a1", state=state.to_json(), aws_conn_id=None
        )
        monkeypatch.setattr(trigger, "_stop_job", lambda *args, **kwargs: (job, True, True))
        trigger.stop_and_bill(ask_state=False, wait_seconds=0)

    kill()
    (kept,) = (tmp_path / "airflow" / "costaware" / "spool" / "unsure").glob("*.json")
    cut_short = kept.read_text()[:40]
    kept.write_text(cut_short)
    capsys.readouterr()
    kill()
    assert kept.read_text() == cut_short
    said = capsys.readouterr().out
    assert "kept in spool/unsure" not in said
    assert "its bill of $1.000000 (1800 s) not written nor kept: logged for a person" in said


def test_a_drain_that_writes_an_entry_past_a_budgets_gpu_hour_cap_says_so(
    billed_ledger: Ledger, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The drain's WARNING read dollar caps only: under a $100 cap with a 10 GPU-hour cap, a spooled entry of
    # 4 GPU-hours ($1) took the budget from 8 to 12 GPU-hours, and was written with an INFO line alone.
    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain

    billed_ledger.set_budget("project=churn", "month", "100", cap_gpu_hours="10")
    tags = {"project": "churn"}
    spent = LedgerEntry(
        dag_id="d", run_id="r", task_id="t", kind=Kind.COMPUTE, usd=Decimal("2"), gpu_hours=Decimal("8"),
        tags=tags, entry_uid="spent-meanwhile",
    )  # fmt: skip
    assert billed_ledger.record(spent)
    waited = LedgerEntry(
        dag_id="d", run_id="r2", task_id="t", kind=Kind.COMPUTE, usd=Decimal("1"), gpu_hours=Decimal("4"),
        tags=tags, entry_uid="waited",
    )  # fmt: skip
    spool = tmp_path / "spool"
    spool_entry(spool, waited, "costaware_ledger", retrying=False)
    with caplog.at_level(logging.WARNING, logger="costaware.ledger_spool"):
        assert drain(spool, lambda conn_id: billed_ledger).written == 1
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    (usage,) = billed_ledger.usage("project=churn")
    assert usage.spent_gpu_hours == Decimal("12") and usage.spent_usd == Decimal("3")
    assert f"took budget {usage.name} past its GPU-hour cap: spent 12 GPU-hours of its 10" in said
    assert "waited" in said and "$" not in said.split("past its")[1].split(".")[0]


def test_a_drained_unsure_bill_is_recorded_once_and_never_grows_its_tasks_hold_back(
    billed_ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kept file says retrying (kept as a retry's bill is): drained after a person marked it another
    # run's, record_and_settle paid it from the task's open hold and grew that hold back by $1 for a retry
    # that never comes ($5 held -> $6 committed).
    from attempt_states import CAPTURED  # tests/support/

    from costaware.ledger_spool_drain import drain
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempt_holds import task_holder
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    plan = RemotePlan.from_json(CAPTURED)
    ident = plan.identity
    _record_a_row_of_the_job_that_gives_no_end(billed_ledger, ident)
    billed_ledger.set_budget("*", "month", "10")
    hold = billed_ledger.reserve("*", "5.00", holder=task_holder(plan), run_id=ident["run_id"])
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand")
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    billing._bill_attempt(state, {**ENDED_JOB, "ended_at": time.time() - 3 * 3600}, None)
    (kept,) = (spool / "unsure").glob("*.json")
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "another_run": True}))
    kept.replace(spool / kept.name)
    assert drain(spool, lambda conn_id: billed_ledger).written == 1
    (open_hold,) = billed_ledger.open_holds_of(task_holder(plan))
    assert (open_hold.id, open_hold.usd) == (hold.id, Decimal("5.00"))
    assert billed_ledger.paid_from([hold.id]).get(hold.id, Decimal(0)) == 0
    (usage,) = billed_ledger.usage("*")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal("3"), Decimal("5"))  # $2 older row + $1 bill


def _keep_a_bill_unsure(ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Path]:
    """A direct bill of $1 (tags project=churn) kept in spool/unsure beside a row that gives no end."""
    from attempt_states import CAPTURED  # tests/support/

    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    plan = RemotePlan.from_json({**CAPTURED, "tags": {"project": "churn"}})
    _record_a_row_of_the_job_that_gives_no_end(ledger, plan.identity)
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand")
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    billing._bill_attempt(state, {**ENDED_JOB, "ended_at": time.time() - 3 * 3600}, None)
    (kept,) = (tmp_path / "airflow" / "costaware" / "spool" / "unsure").glob("*.json")
    return billing.unsure_bill, kept


@pytest.mark.parametrize(
    ("held_by_others", "held_for_bill"),
    [
        ("0", "1.00"),  # room enough: the whole bill is held
        ("2.00", "0.50"),  # $0.50 left of the $2.50 cap: that much is held, and the cap is passed
        ("2.50", None),  # no room left: nothing is held, the cap is passed
    ],
)
def test_a_bill_kept_unsure_is_held_in_its_budgets_until_drained_and_then_counted_once(
    held_by_others: str,
    held_for_bill: str | None,
    billed_ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A bill kept in spool/unsure was counted by no budget until a person drained it: other runs spent its
    # room meanwhile, and the budget was passed by money spent long before.
    from costaware.core.ledger import utcnow
    from costaware.ledger_spool_drain import drain
    from costaware.spool_settle import UNSURE_HOLD_TTL, unsure_holder

    billed_ledger.set_budget("project=churn", "month", "2.50")
    if held_by_others != "0":
        billed_ledger.reserve("project=churn", held_by_others, holder="another/run/task/-1")
    with caplog.at_level(logging.WARNING, logger="costaware.ledger_spool"):
        unsure_bill, kept = _keep_a_bill_unsure(billed_ledger, tmp_path, monkeypatch)
    data = json.loads(kept.read_text())
    from costaware.core.ledger import entry_from_json

    entry = entry_from_json(data["entry"])
    holds = billed_ledger.open_holds_of(unsure_holder(entry))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if held_for_bill is None:
        assert holds == [] and unsure_bill.hold is None
    else:
        (hold,) = holds
        assert hold.usd == Decimal(held_for_bill) and unsure_bill.hold == hold
        assert hold.expires_at - utcnow() > UNSURE_HOLD_TTL - timedelta(minutes=5)
    (usage,) = billed_ledger.usage("project=churn")
    if held_for_bill == "1.00":
        assert warnings == []
    else:
        (said,) = warnings
        assert f"the bill {entry.entry_uid} kept in spool/unsure is $1.00 already spent" in said
        assert f"budget '{usage.name}' (cap $2.50" in said
    # Marked another run's and drained: paid from its hold, every dollar counted once.
    kept.write_text(json.dumps({**data, "another_run": True}))
    kept.replace(kept.parent.parent / kept.name)
    assert drain(kept.parent.parent, lambda conn_id: billed_ledger).written == 1
    (usage,) = billed_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal("1"), Decimal(held_by_others))
    assert billed_ledger.open_holds_of(unsure_holder(entry)) == []


def test_a_drain_that_keeps_a_spooled_bill_unsure_holds_it_in_its_budgets(
    billed_ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bill spooled while the ledger was down and kept unsure by the drain: the drain has the ledger, and
    # held nothing for it.
    from costaware.core.ledger import entry_from_json
    from costaware.ledger_spool_drain import drain
    from costaware.spool_settle import unsure_holder

    billed_ledger.set_budget("project=churn", "month", "10")
    unsure_bill, kept = _keep_a_bill_unsure(billed_ledger, tmp_path, monkeypatch)
    billed_ledger.release(unsure_bill.hold.id)  # as if kept with no hold: spooled while the ledger was down
    spool = kept.parent.parent
    kept.replace(spool / kept.name)
    assert drain(spool, lambda conn_id: billed_ledger).unsure == 1
    entry = entry_from_json(json.loads((spool / "unsure" / kept.name).read_text())["entry"])
    (hold,) = billed_ledger.open_holds_of(unsure_holder(entry))
    assert hold.usd == Decimal("1")
    (usage,) = billed_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal(0), Decimal("1"))


def test_a_bill_the_drain_keeps_unsure_dropped_as_its_hold_is_taken_leaves_no_hold(
    billed_ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The drain said "run `costaware spool drop <uid>`" before it took the hold: a drop in between found no
    # hold and removed the file, and the hold taken just after stayed 30 days with no file.
    from costaware import ledger_spool
    from costaware.cli import main
    from costaware.core.ledger import entry_from_json
    from costaware.ledger_spool_drain import drain
    from costaware.spool_settle import unsure_holder

    billed_ledger.set_budget("project=churn", "month", "10")
    unsure_bill, kept = _keep_a_bill_unsure(billed_ledger, tmp_path, monkeypatch)
    billed_ledger.release(unsure_bill.hold.id)  # as if kept with no hold: spooled while the ledger was down
    entry = entry_from_json(json.loads(kept.read_text())["entry"])
    spool = kept.parent.parent
    kept.replace(spool / kept.name)
    hold_unsure = ledger_spool.hold_unsure

    def dropped_first(held_in: Any, bill: Any) -> Any:
        assert main(["spool", "drop", bill.entry_uid]) == 0
        return hold_unsure(held_in, bill)

    monkeypatch.setattr(ledger_spool, "hold_unsure", dropped_first)
    assert drain(spool, lambda conn_id: billed_ledger).unsure == 1
    assert not (spool / "unsure" / kept.name).exists()
    assert billed_ledger.open_holds_of(unsure_holder(entry)) == []
    (usage,) = billed_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (Decimal(0), Decimal(0))


def _gpu_bill(uid: str) -> LedgerEntry:
    """A $1 bill of 2 GPU-hours (tags project=churn), as hold_unsure holds a kept one."""
    return LedgerEntry(
        dag_id="retrain", run_id="run1", task_id="train", kind=Kind.COMPUTE, usd=Decimal("1"),
        gpu_hours=Decimal("2"), tags={"project": "churn"}, entry_uid=uid,
    )  # fmt: skip


def test_a_kept_bill_with_gpu_hours_and_no_dollar_room_takes_no_hold_where_no_gpu_hour_cap(
    billed_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Its GPU-hour room fell back to its own GPU-hours where no budget caps them: a $0.00 hold was taken,
    # `spool show` read "held $0.00" and the WARNING "Held $0.00 of it".
    from costaware.spool_settle import hold_unsure, unsure_holder

    billed_ledger.set_budget("project=churn", "month", "2.50")
    billed_ledger.reserve("project=churn", "2.50", holder="another/run/task/-1")
    bill = _gpu_bill("attempt-gpu")
    with caplog.at_level(logging.WARNING, logger="costaware.ledger_spool"):
        assert hold_unsure(billed_ledger, bill) is None
    assert billed_ledger.open_holds_of(unsure_holder(bill)) == []
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "Nothing is held of it (its budgets have no room left)" in said and "Held $" not in said
    # Under a GPU-hour cap with room, its GPU-hours are held (no dollars left to hold).
    billed_ledger.set_budget("project=churn", "month", "2.50", cap_gpu_hours="10")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="costaware.ledger_spool"):
        hold = hold_unsure(billed_ledger, bill)
    assert hold is not None and (hold.usd, hold.gpu_hours) == (Decimal(0), Decimal(2))
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "Held $0.00 and 2 GPU-hours of it" in said


def test_a_kept_bills_warning_says_nothing_is_held_where_another_run_took_the_room_first(
    billed_ledger: Ledger, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The WARNING said "Held $0.50 of it" before the second reserve, which another run's hold refused.
    from costaware.spool_settle import hold_unsure, unsure_holder

    billed_ledger.set_budget("project=churn", "month", "2.50")
    billed_ledger.reserve("project=churn", "2.00", holder="another/run/task/-1")
    reserve = billed_ledger.reserve
    asked: list[Any] = []

    def another_run_first(*args: Any, **kwargs: Any) -> Any:
        asked.append(args[1])
        if len(asked) == 2:  # the room hold_unsure read is taken before its second ask
            reserve("project=churn", "0.50", holder="yet/another/run/-1")
        return reserve(*args, **kwargs)

    monkeypatch.setattr(billed_ledger, "reserve", another_run_first)
    bill = replace(_gpu_bill("attempt-raced"), gpu_hours=Decimal(0))
    with caplog.at_level(logging.WARNING, logger="costaware.ledger_spool"):
        assert hold_unsure(billed_ledger, bill) is None
    assert [Decimal(str(usd)) for usd in asked] == [Decimal("1"), Decimal("0.5")]
    assert billed_ledger.open_holds_of(unsure_holder(bill)) == []
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "Nothing is held of it (another run took the room left meanwhile)" in said and "Held $" not in said


def test_a_kept_bills_warning_names_the_gpu_hour_cap_it_passes_not_money_spent(
    billed_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Under a $100 cap with room, a 10 GPU-hour cap with 9 held: the bill's 2 GPU-hours pass the GPU-hour cap
    # alone, and the WARNING named the dollar cap ('cap $100.00, $0.00 spent') and "passed by money spent".
    from costaware.spool_settle import hold_unsure

    billed_ledger.set_budget("project=churn", "month", "100", cap_gpu_hours="10")
    billed_ledger.reserve("project=churn", "1", gpu_hours="9", holder="another/run/task/-1")
    bill = _gpu_bill("attempt-gpu-cap")
    with caplog.at_level(logging.WARNING, logger="costaware.ledger_spool"):
        hold = hold_unsure(billed_ledger, bill)
    assert hold is not None and (hold.usd, hold.gpu_hours) == (Decimal(1), Decimal(1))
    (said,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    (usage,) = billed_ledger.usage("project=churn")
    assert "is $1.00 and 2 GPU-hours already spent" in said
    assert f"budget '{usage.name}' (GPU-hour cap 10, 0 GPU-hours spent and 9 reserved)" in said
    assert "its GPU-hour cap is passed" in said and "--cap-gpu-hours" in said
    assert "money" not in said and "cap $100" not in said


@pytest.mark.parametrize(
    ("taken_by", "grown_back"),
    [
        (1, False),  # the killed try took the hold up: it is over, nothing grows back for it
        (2, True),  # a new try took it up before the drain, sizing it without the bill: grown back
        (None, True),  # no try said (a hold before revision 0004): grown back, as before
    ],
)
def test_a_drained_kill_bill_grows_the_hold_back_only_for_a_later_try_that_took_it_up(
    taken_by: int | None,
    grown_back: bool,
    billed_ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker kill's bill kept in the spool while the ledger was down (retrying, so that it never closes a
    # hold a new try may own) was drained as a retry's: paid from the killed try's hold and the hold grown
    # back by as much, money held for a retry that never comes until the run's end or the hold's TTL.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.core.errors import BillSpooledError
    from costaware.ledger_spool_drain import drain
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempt_holds import task_holder
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    plan = RemotePlan.from_json({**CAPTURED, "tags": {"project": "churn"}})
    assert plan.identity["try_number"] == 1  # the killed try
    billed_ledger.set_budget("project=churn", "month", "10")
    holder = task_holder(plan)
    hold = billed_ledger.reserve("project=churn", "5.00", holder=holder, run_id=plan.identity["run_id"])
    if taken_by is not None:
        assert billed_ledger.take_up_holds(holder, taken_by) == 1
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand")
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )

    def down(self: Any, entry: Any) -> Any:
        raise OSError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(Ledger, "record", down)
        with pytest.raises(BillSpooledError):
            billing._bill_attempt(state, ENDED_JOB, None, spool_unwritten=True)
    assert len(list(spool.glob("*.json"))) == 1

    for _ in range(2):  # written once, however often drained
        drain(spool, lambda conn_id: billed_ledger)
    (entry,) = [e for e in billed_ledger.entries() if e["reservation_id"] == hold.id]
    bill = Decimal(entry["usd"])
    assert bill > 0
    (held,) = billed_ledger.open_holds_of(holder)
    assert held.id == hold.id and held.usd == (Decimal("5.00") + bill if grown_back else Decimal("5.00"))
    (usage,) = billed_ledger.usage("project=churn")
    assert usage.spent_usd == bill
    assert usage.reserved_usd == (Decimal("5.00") if grown_back else Decimal("5.00") - bill)


def test_a_later_tries_take_up_is_never_lowered_by_an_earlier_ones(billed_ledger: Ledger) -> None:
    billed_ledger.set_budget("project=churn", "month", "10")
    billed_ledger.reserve("project=churn", "1.00", holder="d/r/train/-1", run_id="r")
    assert billed_ledger.take_up_holds("d/r/train/-1", 2) == 1
    assert billed_ledger.take_up_holds("d/r/train/-1", 1) == 0  # a late call of try 1
    assert billed_ledger.take_up_holds("d/r/train/-1", 3) == 1


def _egress_bill(
    ledger: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    ledger_url: str,
    *,
    usd_per_gb: str = "0.02",
    opened: Ledger | None = None,
    spool_reaches_the_ledger: bool = False,
) -> Any:
    """A bill of attempt 3 of job ``train-380335d228-a3`` run in us-west-2a (3 GB read across) by a run.

    ``usd_per_gb``: the plan's transfer price from us-east-1 to us-west-2. ``opened``: billed in this
    ledger, opened by the caller (`costaware jobs reconcile`'s ``--ledger-url``).
    ``spool_reaches_the_ledger``: ``opened`` as this machine's drain of ``costaware_ledger`` opens it (the
    run-end listener's).
    """
    from attempt_states import CAPTURED  # tests/support/

    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.training.plan.remote_plan import Placement

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    plan = RemotePlan.from_json(CAPTURED)  # local (a backend that reuses names), in us-east-1
    placement = Placement(zones=("us-east-1a", "us-west-2a"), usd_per_gb={"us-west-2": usd_per_gb})
    state = AttemptState(plan=replace(plan, placement=placement), spot_usd_per_hour="0.05", first_attempt=3)
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger",
        aws_conn_id=None,
        log=logging.getLogger(__name__),
        ledger=opened,
        spool_reaches_the_ledger=spool_reaches_the_ledger,
    )

    def bill(run_token: str, ended_at: float, **how: Any) -> list[dict[str, Any]]:
        running = state.submitted(
            job_id="train-380335d228-a3", market="spot", zone="us-west-2a", moved_bytes=3 * 2**30,
            run_token=run_token,
        )  # fmt: skip
        job = {"job_id": "train-380335d228-a3", "state": "interrupted", "market": "spot",
               "instance_type": "m5.large", "ended_at": ended_at, "billable_seconds": 120.0}  # fmt: skip
        billing._bill_attempt(running, job, None, **how)
        return sorted((e for e in ledger.entries() if e["cause"] == "zone_move"), key=lambda e: e["id"])

    return bill


def test_a_second_run_under_the_job_name_bills_its_own_egress_and_each_run_once(
    ledger: Ledger, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cleared task's new try runs `<stem>-a<attempt>` again with its own run token: its egress, keyed
    # `egress:<job name>` as the first run's was, was dropped by the ledger as that run's duplicate.
    bill = _egress_bill(ledger, monkeypatch, ledger_url)
    first, second = "a" * 32, "b" * 32
    (move,) = bill(first, time.time() - 3600)
    assert move["entry_uid"] == "egress:train-380335d228-a3"  # the name's key, as before
    assert len(bill(first, time.time() - 3600)) == 1  # the same run billed again (a retry following it)
    moves = bill(second, time.time())
    assert [(m["usd"], m["region"]) for m in moves] == [(Decimal("0.06"), "us-west-2")] * 2
    assert moves[0]["entry_uid"] == "egress:train-380335d228-a3"  # the first run's row keeps its key
    assert moves[1]["entry_uid"] != moves[0]["entry_uid"]
    assert [f", run {token}:" in m["note"] for m, token in zip(moves, (first, second), strict=True)] == [
        True,
        True,
    ]
    assert len(bill(second, time.time())) == 2  # the second run billed again: still its one row
    assert len(bill(first, time.time() - 3600)) == 2  # and the first run's


def test_a_runs_egress_under_the_name_written_with_no_run_mark_is_not_billed_again(
    ledger: Ledger, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written by the name's key with no mark of its run (before bills marked it, or its token unread): the
    # same run's retry, its token known now, must not read it as another run's and bill the egress twice.
    bill = _egress_bill(ledger, monkeypatch, ledger_url)
    (move,) = bill("", time.time())
    assert move["entry_uid"] == "egress:train-380335d228-a3" and ", run " not in move["note"]
    assert len(bill("a" * 32, time.time())) == 1


EGRESS_BY_NAME = "egress:train-380335d228-a3"
EGRESS_LOG = "costaware.ledger_spool_egress"


def test_an_earlier_runs_egress_with_no_run_mark_leaves_a_later_run_its_own_egress(
    billed_ledger: Ledger,
    any_ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Run A's egress row marks no run (an older release's, or A's token unread), written as A ended an hour
    # ago; run B (a cleared task's new try, 120 s long) began after it. B's egress took the name's key too and
    # the ledger dropped it as A's, logging nothing.
    from datetime import datetime, timezone

    import time_machine

    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url)
    earlier = time.time() - 3600
    with time_machine.travel(datetime.fromtimestamp(earlier, tz=timezone.utc), tick=True):
        (move,) = bill("", earlier)
    assert move["entry_uid"] == EGRESS_BY_NAME and ", run " not in move["note"]
    second = "b" * 32
    with caplog.at_level(logging.INFO, logger="costaware"):
        moves = bill(second, time.time())
    assert [m["usd"] for m in moves] == [Decimal("0.06")] * 2
    assert moves[0]["entry_uid"] == EGRESS_BY_NAME and moves[1]["entry_uid"] != EGRESS_BY_NAME
    assert f", run {second}:" in moves[1]["note"]
    assert not [r for r in caplog.records if r.name == EGRESS_LOG and r.levelno >= logging.WARNING]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="costaware"):
        assert len(bill(second, time.time())) == 2  # B's retry finds its own row: billed once
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == EGRESS_LOG]
    assert said == [
        (
            logging.INFO,
            f"costaware: the egress of job train-380335d228-a3, run {second}, is in the ledger already as "
            f"{moves[1]['entry_uid']}: not billed again",
        )
    ]


def test_an_egress_dropped_beside_a_row_that_may_be_another_runs_is_warned_of(
    billed_ledger: Ledger,
    any_ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An unmarked row written after this run began may be this run's (its token unread then): not billed
    # beside it, but said, as the drop was silent (only a written egress was logged).
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url)
    bill("", time.time())
    run = "b" * 32
    with caplog.at_level(logging.INFO, logger="costaware"):
        assert len(bill(run, time.time())) == 1
    (said,) = [
        r.getMessage() for r in caplog.records if r.name == EGRESS_LOG and r.levelno == logging.WARNING
    ]
    assert f"the egress of job train-380335d228-a3, run {run} ($0.06), is not billed" in said
    assert f"the ledger has {EGRESS_BY_NAME} already ($0.06, note 'attempt 3 moved" in said
    assert "record $0.06 of egress for it" in said


@pytest.mark.parametrize("backend_ahead_seconds", [0, 300, 599])
def test_a_runs_own_unmarked_egress_is_not_billed_again_with_the_backends_clock_ahead(
    backend_ahead_seconds: int, billed_ledger: Ledger, any_ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The row's time is the worker's clock, the run's start (its end less its billed 120 s) the backend's:
    # with the backend 10 minutes ahead, this run's own unmarked row looked older than the run, and its retry
    # billed the egress a second time under the run's key. Within the margin the row keeps the key.
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url)
    now = time.time()
    bill("", now)  # this run's egress, its token unread then
    assert len(bill("a" * 32, now + backend_ahead_seconds)) == 1


def test_an_egress_an_older_drain_wrote_under_the_runs_key_is_not_billed_again(
    billed_ledger: Ledger, any_ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A spooled egress waits under its run's key; an older release's drain (which knows nothing of egress)
    # writes it under that key as it is. A retry of the run looked only under the name's key, found nothing
    # and billed the egress again.
    from costaware.ledger_spool_egress import EgressRun, spool_uid

    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url)
    run, ended = "a" * 32, time.time()
    (move,) = bill(run, ended)
    by_run = spool_uid(EgressRun(job_name="train-380335d228-a3", run_token=run, started_at=None))
    assert by_run != EGRESS_BY_NAME
    from costaware.adapters.ledger.schema import entries

    with billed_ledger.engine.begin() as conn:  # as the older drain left it: under the run's key
        conn.execute(entries.update().where(entries.c.id == move["id"]).values(entry_uid=by_run))
    moves = bill(run, ended)
    assert [m["entry_uid"] for m in moves] == [by_run]


@pytest.mark.parametrize("direct_first", [False, True], ids=["drained", "written-directly-then-drained"])
def test_a_spooled_kill_bills_egress_is_spooled_with_it_and_billed_once(
    direct_first: bool,
    billed_ledger: Ledger,
    any_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A kill's bill the ledger could not take was spooled and BillSpooledError raised before the egress was
    # recorded; the drain wrote the attempt's entry alone: the cross-region bytes were never billed.
    from costaware.core.errors import BillSpooledError
    from costaware.ledger_spool_drain import drain

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url)
    billed_ledger.set_budget("project=churn", "month", "10")
    run, ended = "a" * 32, time.time()

    def down(self: Any, entry: Any) -> Any:
        raise OSError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(Ledger, "record", down)
        with pytest.raises(BillSpooledError):
            bill(run, ended, spool_unwritten=True)
    assert len(list(spool.glob("*.json"))) == 2  # the attempt's bill and its egress
    if direct_first:  # the ledger back, a retry following the job bills it before the drain
        assert len(bill(run, ended)) == 1
    for _ in range(2):  # written once, however often drained
        drain(spool, lambda conn_id: billed_ledger)
    (move,) = [e for e in billed_ledger.entries() if e["cause"] == "zone_move"]
    assert move["entry_uid"] == EGRESS_BY_NAME and move["usd"] == Decimal("0.06")
    assert f", run {run}:" in move["note"] and move["reservation_id"] is None  # alone, as written directly
    assert list(spool.glob("*.json")) == []


def test_a_normal_bills_egress_the_ledger_would_not_take_is_spooled_and_drained_from_no_hold(
    billed_ledger: Ledger,
    any_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The operator's own bill (no kill: spool_unwritten left False) wrote the attempt's entry, then the
    # ledger failed the egress write: it was logged and lost, as the attempt is recorded and billed no more
    # (the kill path spooled it). A `costaware spool drain` found nothing to write.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.ledger_spool_drain import drain
    from costaware.training.attempt_holds import task_holder
    from costaware.training.plan import RemotePlan

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url)
    billed_ledger.set_budget("project=churn", "month", "10")
    hold = billed_ledger.reserve("project=churn", "5", holder=task_holder(RemotePlan.from_json(CAPTURED)))
    written_alone = Ledger.record

    def egress_refused(self: Ledger, entry: Any) -> Any:
        if entry.kind == Kind.EGRESS:
            raise OSError("disk I/O error")
        return written_alone(self, entry)

    run, ended = "a" * 32, time.time()
    with monkeypatch.context() as patched:
        patched.setattr(Ledger, "record", egress_refused)
        assert bill(run, ended) == []  # the attempt billed, no exception: the egress alone not written
    (attempt_row,) = billed_ledger.entries()
    assert attempt_row["reservation_id"] == hold.id  # the attempt paid from the task's hold
    assert len(list(spool.glob("*.json"))) == 1  # its egress kept for the drain
    for _ in range(2):  # written once, however often drained
        drain(spool, lambda conn_id: billed_ledger)
    (move,) = [e for e in billed_ledger.entries() if e["cause"] == "zone_move"]
    assert move["entry_uid"] == EGRESS_BY_NAME and move["usd"] == Decimal("0.06")
    assert f", run {run}:" in move["note"]
    assert move["reservation_id"] is None  # alone, from no hold, as written directly
    (still_held,) = billed_ledger.open_holds_of(hold.holder or "")
    assert still_held.id == hold.id  # the egress neither settled nor paid from the task's hold
    assert list(spool.glob("*.json")) == []


def test_an_egress_that_cannot_be_worked_out_is_logged_never_raised_past_the_written_attempt(
    billed_ledger: Ledger,
    any_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A transfer price that is no number: working the egress out raised, its write's except block spooled
    # it, working it out again outside any try, and the error escaped with the attempt's entry written. The
    # bill raised (it logged before), and each retry, finding the attempt billed, raised the same way.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url, usd_per_gb="n/a")
    run, ended = "a" * 32, time.time()
    with caplog.at_level(logging.ERROR, logger=__name__):
        assert bill(run, ended) == []  # the attempt billed, no exception
        assert bill(run, ended) == []  # a retry following the job: the same
    (attempt_row,) = billed_ledger.entries()
    assert attempt_row["cause"] != "zone_move"
    assert list(spool.glob("*.json")) == []  # nothing to drain: it has no figure
    said = [r for r in caplog.records if r.name == __name__ and r.levelno == logging.ERROR]
    assert len(said) == 2
    assert said[0].getMessage() == (
        "could not work out the egress of attempt 3 (moved from us-east-1 to us-west-2a, 3221225472 B): "
        "it is neither billed nor kept in the spool (the attempt's own bill goes on without it): record it "
        "by hand (Ledger.record, kind egress, cause zone_move) at the transfer price to us-west-2 (the error "
        "follows)"
    )
    assert said[0].exc_info is not None and "n/a" not in said[0].getMessage()


def test_a_spooled_kill_bill_whose_egress_cannot_be_worked_out_still_says_it_was_spooled(
    billed_ledger: Ledger,
    any_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A kill's bill spooled, the ledger down: its egress, spooled with it, was worked out outside any try,
    # and its error replaced BillSpooledError: the kill read its bill as not kept, though it waits.
    from costaware.core.errors import BillSpooledError

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url, usd_per_gb="n/a")

    def down(self: Any, entry: Any) -> Any:
        raise OSError("disk I/O error")

    with monkeypatch.context() as patched, caplog.at_level(logging.ERROR, logger=__name__):
        patched.setattr(Ledger, "record", down)
        with pytest.raises(BillSpooledError) as spooled:
            bill("a" * 32, time.time(), spool_unwritten=True)
    assert [p.name for p in spool.glob("*.json")] == [Path(spooled.value.path).name]  # the attempt's alone
    (said,) = [r.getMessage() for r in caplog.records if r.name == __name__ and r.levelno == logging.ERROR]
    assert "could not work out the egress of attempt 3 (" in said
    assert "neither billed nor kept in the spool (the attempt's own bill goes on without it)" in said


def _egress_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger takes every entry but an egress (it fails: disk I/O error)."""
    written_alone = Ledger.record

    def egress_refused(self: Ledger, entry: Any) -> Any:
        if entry.kind == Kind.EGRESS:
            raise OSError("disk I/O error")
        return written_alone(self, entry)

    monkeypatch.setattr(Ledger, "record", egress_refused)


def test_an_egress_kept_in_the_spool_is_said_kept_there_not_lost(
    billed_ledger: Ledger,
    any_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Kept in the spool, the egress was said only as "ERROR could not record the egress of attempt 3" with
    # a traceback: read as money lost, though the next drain writes it.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url)
    with monkeypatch.context() as patched, caplog.at_level(logging.INFO, logger=__name__):
        _egress_refused(patched)
        bill("a" * 32, time.time())
    (kept,) = spool.glob("*.json")
    said = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == __name__ and "egress" in r.getMessage()
    ]
    assert said == [
        (
            logging.WARNING,
            f"could not record the egress of attempt 3 ($0.06): kept in the spool {kept}; the next drain (or "
            "`costaware spool drain`) writes it (OSError: disk I/O error)",
        )
    ]


def test_an_egress_the_spool_cannot_keep_either_is_logged_whole_as_an_error(
    billed_ledger: Ledger,
    any_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from costaware.core.ledger import entry_from_json
    from costaware.ledger_spool_drain import drain

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    spool = tmp_path / "airflow" / "costaware" / "spool"
    spool.parent.mkdir(parents=True)
    spool.write_text("")  # a file where the spool's folder goes: nothing can be kept in it
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url)
    with monkeypatch.context() as patched, caplog.at_level(logging.INFO, logger=__name__):
        _egress_refused(patched)
        bill("a" * 32, time.time())
    (said,) = [r for r in caplog.records if r.name == __name__ and "egress" in r.getMessage()]
    assert said.levelno == logging.ERROR
    message = said.getMessage()
    assert message.startswith(
        "could not record the egress of attempt 3 ($0.06: OSError: disk I/O error), nor keep it (entry "
        "egress:"
    )
    assert "in the spool either (FileExistsError: " in message
    assert "save the JSON that ends this line as egress:" in message
    # The JSON, saved as it says, is drained into the ledger: the egress is billed.
    record = json.loads(message[message.index(": {") + 2 :])
    assert entry_from_json(record["entry"]).usd == Decimal("0.06")
    spool.unlink()
    spool.mkdir()
    (spool / f"{record['entry']['entry_uid']}.json").write_text(json.dumps(record))
    assert drain(spool, lambda conn_id: billed_ledger).written == 1
    assert [e["usd"] for e in billed_ledger.entries() if e["cause"] == "zone_move"] == [Decimal("0.06")]


def test_an_egress_billed_in_a_ledger_the_caller_opened_is_logged_for_a_person_not_spooled_for_another(
    billed_ledger: Ledger,
    any_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # `costaware jobs reconcile --ledger-url` bills in the ledger it opened; an egress that ledger would not
    # take was spooled under the connection costaware_ledger, which this machine's drain reads as another
    # ledger (here COSTAWARE_LEDGER_URL's): `costaware spool drain` wrote it there, or it waited for good.
    from costaware.cli import main

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    spool = tmp_path / "airflow" / "costaware" / "spool"
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url, opened=billed_ledger)
    elsewhere = Ledger.from_url(f"sqlite:///{tmp_path / 'this-machines-default.db'}")
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{tmp_path / 'this-machines-default.db'}")
    with monkeypatch.context() as patched, caplog.at_level(logging.INFO, logger=__name__):
        _egress_refused(patched)
        assert bill("a" * 32, time.time()) == []
    assert main(["spool", "drain"]) == 0
    assert [e for e in elsewhere.entries() if e["cause"] == "zone_move"] == []
    elsewhere.dispose()
    assert list(spool.glob("*.json")) == []
    (said,) = [r for r in caplog.records if r.name == __name__ and "egress" in r.getMessage()]
    assert said.levelno == logging.ERROR
    message = said.getMessage()
    assert message.startswith(
        "could not record the egress of attempt 3 ($0.06) in the ledger given (OSError: disk I/O error): "
        "not kept in the spool, whose drain writes to the ledger connection 'costaware_ledger' names on "
        "this machine, which may be another; record it in the ledger given as the drain would, data being "
        "the JSON that ends this line: from costaware.core.ledger import entry_from_json; from "
        "costaware.ledger_spool_egress import EgressRun, egress_keyed, record_egress; run = "
        "EgressRun.from_json(data['egress_run']); record_egress(ledger, egress_keyed(ledger, "
        "entry_from_json(data['entry']), run), run) (keyed so that a row of the run already there is not "
        "billed twice): {"
    )
    # Recorded as it says, the egress is billed there, once.
    assert _recorded_as_logged(message, billed_ledger)
    (move,) = [e for e in billed_ledger.entries() if e["cause"] == "zone_move"]
    assert move["usd"] == Decimal("0.06") and move["reservation_id"] is None


def _recorded_as_logged(message: str, ledger: Ledger) -> bool:
    """Record the egress an ERROR logged for a person as the message says; whether it was written."""
    from costaware.core.ledger import entry_from_json
    from costaware.ledger_spool_egress import EgressRun, egress_keyed, record_egress

    data = json.loads(message[message.index(": {") + 2 :])
    run = EgressRun.from_json(data["egress_run"])
    return record_egress(ledger, egress_keyed(ledger, entry_from_json(data["entry"]), run), run)


def test_an_egress_logged_for_a_person_recorded_as_it_says_is_not_billed_beside_its_runs_row(
    billed_ledger: Ledger,
    any_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The by-hand ERROR gave the run's key and said Ledger.record(entry_from_json(...)): where an earlier
    # bill had written the run's egress under the job name's key, recorded that way it was billed twice.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    bill = _egress_bill(billed_ledger, monkeypatch, any_ledger_url, opened=billed_ledger)
    (first,) = bill("a" * 32, time.time())
    assert first["entry_uid"] == "egress:train-380335d228-a3"
    with monkeypatch.context() as patched, caplog.at_level(logging.INFO, logger=__name__):
        _egress_refused(patched)  # the write fails (disk I/O error) before the ledger sees its key
        bill("a" * 32, time.time())
    (said,) = [r for r in caplog.records if r.name == __name__ and r.levelno == logging.ERROR]
    assert not _recorded_as_logged(said.getMessage(), billed_ledger)
    (move,) = [e for e in billed_ledger.entries() if e["cause"] == "zone_move"]
    assert move["entry_uid"] == first["entry_uid"] and move["usd"] == Decimal("0.06")


def test_an_egress_refused_by_the_ledger_the_drain_opens_too_waits_in_the_spool_and_is_drained_once(
    billed_ledger: Ledger,
    any_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The run-end listener bills in workers_ledger(conn_id), the very ledger its drain (and `costaware spool
    # drain`) opens: an egress that ledger refused was logged for a person only, where the drain would
    # have written it.
    from costaware.ledger_spool import workers_ledger
    from costaware.ledger_spool_drain import drain

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    spool = tmp_path / "airflow" / "costaware" / "spool"
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", any_ledger_url)
    opened = workers_ledger("costaware_ledger")
    bill = _egress_bill(
        billed_ledger, monkeypatch, any_ledger_url, opened=opened, spool_reaches_the_ledger=True
    )
    with monkeypatch.context() as patched, caplog.at_level(logging.INFO, logger=__name__):
        _egress_refused(patched)
        assert bill("a" * 32, time.time()) == []
    opened.dispose()
    (kept,) = spool.glob("*.json")
    said = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == __name__ and "egress" in r.getMessage()
    ]
    assert [level for level, _ in said] == [logging.WARNING]
    assert f"kept in the spool {kept}" in said[0][1]
    assert drain(spool, workers_ledger).written == 1
    assert drain(spool, workers_ledger).written == 0  # drained once
    (move,) = [e for e in billed_ledger.entries() if e["cause"] == "zone_move"]
    assert move["usd"] == Decimal("0.06") and move["reservation_id"] is None
