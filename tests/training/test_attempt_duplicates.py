"""Whether a remote attempt's bill was billed already: which ledger rows of the job's name are this run."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from costaware.training.attempt_duplicates import DuplicateCheck, billed_already, stop_bill_keyed
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


def _marked(entry: Any, run_token: str, **changes: Any) -> Any:
    """``entry`` whose note marks the run ``run_token`` (as a bill of a backend that reuses names does)."""
    head, reason = entry.note.split(": ", 1)
    return replace(entry, note=f"{head}, run {run_token}: {reason}", **changes)


def _check_of(entry: Any, ended: datetime, seconds: float, run_token: str, **changes: Any) -> DuplicateCheck:
    """The duplicate check of ``entry``, the bill of a ``local`` run marked ``run_token``."""
    check = DuplicateCheck(
        entry_uid=entry.entry_uid,
        quantity=str(entry.quantity),
        job_id="train-a1",
        ended_at=ended.timestamp(),
        billable_seconds=seconds,
        instances=1,
        backend="local",
        identity=TASK,
        keyed_by_name=False,
        run_token=run_token,
    )
    return replace(check, **changes)


def test_a_bill_marking_another_run_of_the_name_is_not_this_runs(ledger: Any) -> None:
    # A cleared task's new try took the name (the job's folder or pod gone); the earlier run's kill billed
    # it, keyed by the name, after the new submit. Its times read as this run's (it ran as long and ended
    # as this one began): by them alone it was this run's bill, and this run went unbilled.
    kill = _marked(
        billed("train-a1", KILLED_AT, 600),
        "a" * 32,
        entry_uid=attempt_uid(attempt_key(TASK, "train-a1", legacy=True)),
        cause="killed",
        incurred_at=KILLED_AT + timedelta(seconds=5),
    )
    assert ledger.record(kill)
    this_end = KILLED_AT + timedelta(seconds=600)
    this = _marked(billed("train-a1", this_end, 600), "b" * 32)
    assert billed_already(ledger, _check_of(this, this_end, 600, "b" * 32)) is None
    # The kill's own run seen ended by a retry following it: billed already, by its mark.
    own = _marked(billed("train-a1", KILLED_AT, 590), "a" * 32)
    assert billed_already(ledger, _check_of(own, KILLED_AT, 590, "a" * 32)) == kill.usd
    # A check that marks no run (spooled by an older release): the rule of times, as before.
    assert billed_already(ledger, _check_of(this, this_end, 600, "")) == kill.usd


def test_a_bill_marking_this_run_is_its_bill_whatever_its_times_say(ledger: Any) -> None:
    # The reverted rule's failure: a run's own kill bill whose billed time passes its span (copies billed in
    # parallel) or whose end comes from a clock ahead of the worker's read as another run's, and the run was
    # billed twice. The mark is the same for both bills of the run: billed once.
    latest_end = KILLED_AT + timedelta(seconds=630)
    kill = _marked(
        billed("train-a1", latest_end, 5000),
        "a" * 32,
        entry_uid=attempt_uid(attempt_key(TASK, "train-a1", legacy=True)),
        cause="killed",
        incurred_at=KILLED_AT,
    )
    assert ledger.record(kill)
    skewed_end = KILLED_AT + timedelta(hours=2)  # the backend's clock two hours ahead
    seen = _marked(billed("train-a1", skewed_end, 60), "a" * 32)
    assert billed_already(ledger, _check_of(seen, skewed_end, 60, "a" * 32)) == kill.usd
    # Without the mark, that row reads as another run's by its times.
    assert billed_already(ledger, _check_of(seen, skewed_end, 60, "")) is None


def test_a_second_runs_stop_bill_is_keyed_by_its_run_where_another_run_holds_the_names_key(
    ledger: Any,
) -> None:
    name_key = attempt_uid(attempt_key(TASK, "train-a1", legacy=True))
    first = _marked(billed("train-a1", KILLED_AT, 600), "a" * 32, entry_uid=name_key, cause="killed")
    second = _marked(billed("train-a1", KILLED_AT + timedelta(hours=3), 300), "b" * 32, entry_uid=name_key)
    check = _check_of(second, KILLED_AT + timedelta(hours=3), 300, "b" * 32, keyed_by_name=True)
    # The name's key is free: kept (a new try of an older release finds the bill under it).
    assert stop_bill_keyed(ledger, second, check) == (second, check)
    assert ledger.record(first)
    assert billed_already(ledger, check) is None
    keyed, keyed_check = stop_bill_keyed(ledger, second, check)
    by_run = attempt_uid(attempt_key(TASK, "train-a1", legacy=True, run_token="b" * 32))
    assert keyed.entry_uid == keyed_check.entry_uid == by_run
    assert ledger.record(keyed)
    # Billed again (a kill repeated, its spooled copy drained): found under its run's key.
    assert billed_already(ledger, check) == keyed.usd
    # A row under the name's key that marks no run (an older release's) may be this run: left as it was.
    older = replace(first, note=billed("train-a1", KILLED_AT, 600).note, entry_uid=name_key)
    assert stop_bill_keyed(_Rows([older]), second, check) == (second, check)


def _stop_bill(ended: datetime, seconds: float, run_token: str, **changes: Any) -> Any:
    """A stop's bill of a ``local`` run marked ``run_token``: keyed by the name, its note gives no end."""
    entry = billed("train-a1", ended, seconds)
    head, reason = entry.note.split(": ", 1)
    note = f"{head.split(', ended ')[0]}: {reason}"
    return _marked(
        replace(entry, note=note),
        run_token,
        entry_uid=attempt_uid(attempt_key(TASK, "train-a1", legacy=True)),
        cause="killed",
        incurred_at=ended,
        **changes,
    )


def test_a_second_runs_stop_bill_keyed_by_its_run_is_found_by_a_check_that_marks_no_run(ledger: Any) -> None:
    # Run 1 killed, billed under the name's key; a cleared task's new try ran run 2 under the same name, and
    # its kill bill went under the name + run key (the name's key held by run 1). A retry that bills run 2's
    # end with no mark of the run (its token read failed; a check of an older release) looked under the
    # name's key only, found run 1's row (another run, by its times), and billed run 2 a second time.
    first = _stop_bill(KILLED_AT, 600, "a" * 32)
    assert ledger.record(first)
    second_killed_at = KILLED_AT + timedelta(hours=1, seconds=900)
    second = _stop_bill(second_killed_at, 930, "b" * 32)
    check = _check_of(second, second_killed_at, 930, "b" * 32, keyed_by_name=True, ended_at=None)
    keyed, _ = stop_bill_keyed(ledger, second, check)
    assert keyed.entry_uid != first.entry_uid
    assert ledger.record(keyed)
    second_end = second_killed_at + timedelta(seconds=30)
    end_bill = billed("train-a1", second_end, 930)
    assert billed_already(ledger, _check_of(end_bill, second_end, 930, "b" * 32)) == keyed.usd
    assert billed_already(ledger, _check_of(end_bill, second_end, 930, "")) == keyed.usd
    # Run 1's own end billed with no mark: its row under the name's key, not run 2's.
    first_end = billed("train-a1", KILLED_AT + timedelta(seconds=20), 620)
    assert (
        billed_already(ledger, _check_of(first_end, KILLED_AT + timedelta(seconds=20), 620, "")) == first.usd
    )
    # A later run 3 of the name, with no mark: neither run's bill.
    third_end = second_end + timedelta(hours=2)
    third = billed("train-a1", third_end, 930)
    assert billed_already(ledger, _check_of(third, third_end, 930, "")) is None


class _Rows:
    """A ledger holding ``rows`` for :func:`stop_bill_keyed`'s one read."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def entries_by_uid(self, uids: list[str]) -> list[dict[str, Any]]:
        return [{"entry_uid": r.entry_uid, "note": r.note} for r in self._rows if r.entry_uid in uids]


def test_a_check_spooled_by_an_older_release_marks_no_run() -> None:
    data = _check_of(billed("train-a1", KILLED_AT, 60), KILLED_AT, 60, "a" * 32).to_json()
    older = {k: v for k, v in data.items() if k != "run_token"}
    assert DuplicateCheck.from_json(older).run_token == ""
    assert DuplicateCheck.from_json(data).run_token == "a" * 32


def test_the_note_gives_its_run_and_its_end_both() -> None:
    from costaware.training.remote import end_of_attempt_note, run_of_attempt_note

    entry = attempt_entry(
        identity=TASK,
        attempt=1,
        job={
            "job_id": "train-a1",
            "ended_at": KILLED_AT.timestamp(),
            "billable_seconds": 60,
            "instance_type": "m5.large",
            "market": "spot",
            "state": "failed",
            "reason": "run out: of memory",
        },
        usd_per_hour=Decimal("1.00"),
        on_demand_usd_per_hour=None,
        region="us-east-1",
        backend="kubernetes",
        tags={},
        run_token="6b1f3c7e-0d4a-4c55-9a1e-2f0c8d7b9e10",
    )
    assert end_of_attempt_note(entry.note) == KILLED_AT
    assert run_of_attempt_note(entry.note) == "6b1f3c7e-0d4a-4c55-9a1e-2f0c8d7b9e10"
    assert run_of_attempt_note(billed("train-a1", KILLED_AT, 60).note) == ""
