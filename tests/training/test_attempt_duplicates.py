"""Whether a remote attempt's bill was billed already: which ledger rows of the job's name are this run."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from costaware.training.attempt_duplicates import (
    DuplicateCheck,
    billed_already,
    earliest_run_start,
    run_began_before,
)
from costaware.training.remote import attempt_entry, attempt_key, attempt_uid

TASK = {"dag_id": "d", "run_id": "r", "task_id": "train", "map_index": -1}
KILLED_AT = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def billed(job_id: str, ended: datetime, seconds: float) -> Any:
    """The bill of a ``local`` job that ran ``seconds`` up to ``ended``, as the bill writes it."""
    return attempt_entry(
        identity=TASK,
        attempt=1,
        job={
            "job_id": job_id,
            "ended_at": ended.timestamp(),
            "billable_seconds": seconds,
            "instance_type": "m5.large",
            "market": "spot",
            "state": "interrupted",
        },
        usd_per_hour=Decimal("1.00"),
        on_demand_usd_per_hour=None,
        region="us-east-1",
        backend="local",
        tags={},
    )


def test_a_kill_of_an_earlier_run_that_billed_the_same_time_is_not_a_later_run_s_bill(ledger: Any) -> None:
    # A kill billed the job's first run (keyed by its name); a cleared task's new try resubmitted it under the
    # same name hours later, and that run billed exactly as long. The rule 'the same time billed under the
    # name is this run' asked nothing of when the row's run was: the later run's bill was taken as billed.
    kill = billed("train-a1", KILLED_AT, 1800)
    kill = replace(
        kill,
        entry_uid=attempt_uid(attempt_key(TASK, "train-a1", legacy=True)),
        cause="killed",
        incurred_at=KILLED_AT,
    )
    assert ledger.record(kill)
    later_end = KILLED_AT + timedelta(hours=3)
    later = billed("train-a1", later_end, 1800)
    assert later.quantity == kill.quantity
    check = DuplicateCheck(
        entry_uid=later.entry_uid,
        quantity=str(later.quantity),
        job_id="train-a1",
        ended_at=later_end.timestamp(),
        billable_seconds=1800,
        instances=1,
        backend="local",
        identity=TASK,
        keyed_by_name=False,
    )
    assert billed_already(ledger, check) is None
    # The kill's own run seen ended (its retry's bill under its end's key): billed already, by the kill.
    same = replace(
        check, entry_uid=billed("train-a1", KILLED_AT, 1800).entry_uid, ended_at=KILLED_AT.timestamp()
    )
    assert billed_already(ledger, same) == kill.usd


def test_the_job_end_survives_a_note_cut_to_its_limit() -> None:
    # The note was cut whole at 500 characters: a long job name and a reason of one long token (a stack
    # trace without spaces, a base64 blob) cut it at the last space, just after the end, and the end read
    # from the note (how a drain tells this run from a later one under the same name) was gone.
    from costaware.core.ledger import MAX_NOTE_CHARS
    from costaware.training.remote import end_of_attempt_note, job_of_attempt_note

    job_id = "train-" + "x" * 194
    entry = attempt_entry(
        identity=TASK,
        attempt=1,
        job={
            "job_id": job_id,
            "ended_at": KILLED_AT.timestamp(),
            "billable_seconds": 60,
            "instance_type": "m5.large",
            "market": "spot",
            "state": "failed",
            "reason": "E" * 600,
        },
        usd_per_hour=Decimal("1.00"),
        on_demand_usd_per_hour=None,
        region="us-east-1",
        backend="local",
        tags={},
    )
    assert len(entry.note) == MAX_NOTE_CHARS and entry.note.endswith("…")
    assert end_of_attempt_note(entry.note) == KILLED_AT and job_of_attempt_note(entry.note) == job_id


def _check(job_id: str, ended: datetime, seconds: float, submitted: datetime | None) -> DuplicateCheck:
    """The duplicate check of the bill of a ``local`` run of ``job_id`` submitted at ``submitted``."""
    return DuplicateCheck(
        entry_uid=billed(job_id, ended, seconds).entry_uid,
        quantity=str(billed(job_id, ended, seconds).quantity),
        job_id=job_id,
        ended_at=ended.timestamp(),
        billable_seconds=seconds,
        instances=1,
        backend="local",
        identity=TASK,
        keyed_by_name=False,
        submitted_at=None if submitted is None else submitted.timestamp(),
        stop_seconds=30.0,
    )


def test_an_earlier_runs_bill_written_after_this_runs_submit_is_not_this_runs(ledger: Any) -> None:
    # A cleared task's new try submitted the job under the name an earlier run had; that run's bill, keyed
    # ended=none (its backend lost it: 30 minutes billed to its writing), was written 12 s after the submit.
    # The kill's bill of this 4 s run read it as its own and wrote nothing: the run went unbilled.
    submitted = KILLED_AT
    lost = billed("train-a1", submitted, 1800)
    lost = replace(
        lost,
        entry_uid=attempt_uid(attempt_key(TASK, "train-a1", None)),
        note="attempt 1, job train-a1 on local, 1800.0 s billed: lost",
        cause="preempted",
        incurred_at=submitted + timedelta(seconds=12),
    )
    assert ledger.record(lost)
    this_end = submitted + timedelta(seconds=14)
    assert billed_already(ledger, _check("train-a1", this_end, 4, submitted)) is None
    # Without the submit (a check spooled before it was kept) the rule before it stands.
    assert billed_already(ledger, _check("train-a1", this_end, 4, None)) == lost.usd


def test_this_runs_own_kill_bill_is_still_its_bill_with_the_submit_known(ledger: Any) -> None:
    # The kill billed this run to the end of its stop period, keyed by its name; the new try that saw the
    # run end bills it again under its end's key: billed already, whatever the submit rule says.
    submitted = KILLED_AT
    latest_end = submitted + timedelta(seconds=600 + 30)
    kill = replace(
        billed("train-a1", latest_end, 630),
        entry_uid=attempt_uid(attempt_key(TASK, "train-a1", legacy=True)),
        cause="killed",
        incurred_at=submitted + timedelta(seconds=600),
    )
    assert ledger.record(kill)
    real_end = submitted + timedelta(seconds=610)
    assert billed_already(ledger, _check("train-a1", real_end, 610, submitted)) == kill.usd
    # A backend clock 30 s behind the worker's moves the run's start before the submit: still this run.
    skewed_end = latest_end - timedelta(seconds=30)
    row = {"unit": "hour", "quantity": kill.quantity, "note": billed("train-a1", skewed_end, 630).note}
    assert not run_began_before(row | {"incurred_at": kill.incurred_at}, submitted, instances=1)
    # An earlier run that began more than the skew before the submit is one.
    assert run_began_before(row | {"quantity": Decimal("0.5")}, submitted, instances=1)


def test_a_followed_jobs_run_began_at_its_creation_not_at_this_trys_re_attach() -> None:
    # A retry following an earlier try's job stamps its re-attach as the submit: the run began before it,
    # and that try's bill of the same run (a kill racing the re-attach) read as an earlier run's.
    from costaware.training.attempt_records import Current

    created = KILLED_AT - timedelta(hours=1)
    followed = {"job": {"job_id": "train-a1"}, "seen_at": KILLED_AT.isoformat()}
    current = Current(attempt=1, job_id="train-a1", market="spot", submitted_at=KILLED_AT.isoformat())
    assert earliest_run_start(current) == KILLED_AT
    assert (
        earliest_run_start(replace(current, followed=followed | {"created_at": created.isoformat()}))
        == created
    )
    assert earliest_run_start(replace(current, followed=followed)) is None  # no creation: not known
    assert earliest_run_start(replace(current, submitted_at=None)) is None


def test_a_check_spooled_before_the_submit_was_kept_reads_without_it() -> None:
    data = _check("train-a1", KILLED_AT, 60, KILLED_AT).to_json()
    older = {k: v for k, v in data.items() if k not in ("submitted_at", "stop_seconds")}
    check = DuplicateCheck.from_json(older)
    assert check.submitted_at is None and check.stop_seconds == 0.0
    assert DuplicateCheck.from_json(data).submitted_at == KILLED_AT.timestamp()
