"""Whether a remote attempt's bill was billed already: which ledger rows of the job's name are this run."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from costaware.training.attempt_duplicates import DuplicateCheck, billed_already
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
