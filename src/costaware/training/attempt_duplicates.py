"""Whether a remote attempt's entry was billed already, by an earlier try, under another key.

The direct bill (``AttemptBilling``) asks before it writes; a bill kept in the spool while the ledger was
down asks again as it is drained (:mod:`costaware.ledger_spool`): the ledger's key alone finds only an
entry under the same key, and a job a cleared task's new try billed under its end's key was counted twice.
Where the backend reuses a job's name (``local``, ``kubernetes``), each run's bills carry the backend's mark
of the run (its token): the same mark is the same run, another mark another run, whatever the bills' times
say (worked back from billed hours, they misread copies billed in parallel and a backend's clock). Bills
without a mark (older releases, other backends) are told apart by their times, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

#: The causes of an entry a stop billed before its job ended (to its grace period's end, keyed by its name).
STOP_CAUSES = ("killed", "unwatched")


@dataclass(frozen=True, slots=True)
class DuplicateCheck:
    """What tells that an attempt's entry is billed already: the entry, its job and its task (JSON-able)."""

    entry_uid: str
    quantity: str
    job_id: str
    #: The job's end (epoch seconds; None: not known yet) and its billed seconds, all instances together.
    ended_at: float | None
    billable_seconds: float
    instances: int
    backend: str
    #: The task's ``dag_id``, ``run_id``, ``task_id`` and ``map_index``.
    identity: dict[str, Any]
    #: The entry is keyed by the job's name alone (a stop billed the job before it ended).
    keyed_by_name: bool
    #: The backend's mark of the run billed (``Current.run_token``): a row of the name whose note marks
    #: another run is never this run's bill; "" where not known (a check spooled by an older release).
    run_token: str = ""

    @classmethod
    def of(
        cls,
        entry: Any,
        job: Mapping[str, Any],
        *,
        plan: Any,
        instances: int,
        keyed_by_name: bool,
        run_token: str = "",
    ) -> DuplicateCheck:
        """The check of ``entry``, the bill of ``job`` under ``plan`` (a ``RemotePlan``)."""
        ident = plan.identity
        ended = job.get("ended_at")
        return cls(
            entry_uid=str(entry.entry_uid),
            quantity=str(entry.quantity),
            job_id=str(job["job_id"]),
            ended_at=None if ended is None else float(ended),
            billable_seconds=float(job["billable_seconds"]),
            instances=instances,
            backend=str(plan.backend),
            identity={
                "dag_id": str(ident["dag_id"]),
                "run_id": str(ident["run_id"]),
                "task_id": str(ident["task_id"]),
                "map_index": int(ident.get("map_index", -1)),
            },
            keyed_by_name=keyed_by_name,
            run_token=run_token,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DuplicateCheck:
        # A check spooled by an older release lacks the fields added since (their defaults: not known).
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


def billed_already(ledger: Any, check: DuplicateCheck) -> Decimal | None:
    """What the ledger holds for the attempt ``check`` describes, billed by this try or an earlier one.

    None where nothing: the entry is to be written. Raises what the ledger's reads raise.
    """
    from costaware.training.remote import attempt_key, attempt_uid, other_run, same_run

    ident = check.identity
    # Keyed by the job's name alone before its end was part of the key: such an entry is this run when
    # it billed the same time (a different run under the same name bills its own), or when a kill
    # billed it before it ended (``keyed_by_name``).
    legacy = attempt_uid(attempt_key(ident, check.job_id, legacy=True))
    # A stop's bill of this run where another run of the name held the name's key (stop_bill_keyed).
    by_run = attempt_uid(attempt_key(ident, check.job_id, legacy=True, run_token=check.run_token))
    # An ended job that a version before a backend gave its end (a Failed pod whose container never
    # ended, SageMaker's poll) billed up to then, keyed 'ended=none': this run where it began before.
    unended = attempt_uid(attempt_key(ident, check.job_id, None)) if check.ended_at is not None else None
    uids = dict.fromkeys([check.entry_uid, legacy, by_run, *([unended] if unended else [])])
    # A row whose note marks another run of the job's name is that run's bill, whatever its times say.
    rows = [r for r in ledger.entries_by_uid(list(uids)) if not other_run(check.run_token, _note(r))]
    if not check.run_token:
        rows += _stop_bills_keyed_by_run(ledger, check)
    quantity = Decimal(check.quantity)
    stored = next(
        (
            row["usd"]
            for row in rows
            if row["entry_uid"] == check.entry_uid
            # Marked with this run: billed by another path of this run (a kill, a retry following it).
            or same_run(check.run_token, _note(row))
            or (row["quantity"] == quantity and _same_time_run(check, row))
            # Billed by a stop before it ended (its task killed, or failing for good): this run.
            or (row["cause"] in STOP_CAUSES and _same_run(check, row))
            or (row["entry_uid"] == unended and _same_run(check, row))
        ),
        None,
    )
    if stored is None and check.keyed_by_name:
        stored = _this_run_recorded(ledger, check)
    return None if stored is None else Decimal(stored)


def stop_bill_keyed(ledger: Any, entry: Any, check: DuplicateCheck) -> tuple[Any, DuplicateCheck]:
    """``entry`` and ``check`` keyed by the job's name and run where another run holds the name's key.

    A stop bills a job before it ended under the name's key (``keyed_by_name``); a cleared task's new try
    runs the job again under that name, and its stop's bill had the same key: dropped by the ledger, the
    second run went unbilled. Only where the row under the name's key marks another run: one that marks
    none (an older release's) is left to the key as before, never billed beside what may be this run.
    Raises what the ledger's reads raise.
    """
    from dataclasses import replace

    from costaware.training.remote import attempt_key, attempt_uid, other_run

    if not (check.keyed_by_name and check.run_token):
        return entry, check
    held = ledger.entries_by_uid([entry.entry_uid])
    if not held or not all(other_run(check.run_token, _note(row)) for row in held):
        return entry, check
    uid = attempt_uid(attempt_key(check.identity, check.job_id, legacy=True, run_token=check.run_token))
    return replace(entry, entry_uid=uid), replace(check, entry_uid=uid)


def _stop_bills_keyed_by_run(ledger: Any, check: DuplicateCheck) -> list[Mapping[str, Any]]:
    """The task's stop bills of the job keyed by its name and run (:func:`stop_bill_keyed`).

    A check that marks no run (its token read failed, or spooled by an older release) cannot derive their
    key: they were keyed by the name alone before, and are read by the same rules of times as those.
    Raises what the ledger's reads raise.
    """
    from costaware.training.remote import (
        NAME_REUSING_BACKENDS,
        attempt_key,
        attempt_uid,
        job_of_attempt_note,
        run_of_attempt_note,
    )

    if check.backend not in NAME_REUSING_BACKENDS:
        return []  # only a backend that reuses names marks its runs
    ident = check.identity
    found = []
    for row in ledger.entries(dag_id=ident["dag_id"], run_id=ident["run_id"]):
        note = _note(row)
        token = run_of_attempt_note(note)
        if (
            token
            and row["task_id"] == ident["task_id"]
            and int(row["map_index"]) == int(ident["map_index"])
            and job_of_attempt_note(note) == check.job_id
            and row["entry_uid"]
            == attempt_uid(attempt_key(ident, check.job_id, legacy=True, run_token=token))
        ):
            found.append(row)
    return found


def _note(row: Mapping[str, Any]) -> str:
    return str(row.get("note") or "")


def _this_run_recorded(ledger: Any, check: DuplicateCheck) -> Decimal | None:
    """What an entry of this run of the job already billed, under its end's key, else None.

    A kill that bills a job still stopping can race a cleared task's new try, which saw the job end and
    recorded it under its end: an entry of that job recorded after this run began is this run.
    """
    from costaware.training.remote import job_of_attempt_note, other_run, same_run

    ident = check.identity
    for row in ledger.entries(dag_id=ident["dag_id"], run_id=ident["run_id"]):
        ours = (
            row["task_id"] == ident["task_id"]
            and int(row["map_index"]) == int(ident["map_index"])
            and str(row["price_source"] or "").startswith("remote:")
            and not row["estimated"]
            and job_of_attempt_note(_note(row)) == check.job_id
            and not other_run(check.run_token, _note(row))
        )
        if ours and (same_run(check.run_token, _note(row)) or _same_run(check, row)):
            return Decimal(row["usd"])
    return None


def row_of_unknown_run(ledger: Any, check: DuplicateCheck) -> Mapping[str, Any] | None:
    """A row of this task that bills the job's name and may be this run or a later one: None where none.

    One whose note gives no end (written before notes gave it, or cut) and that was written after this run
    began reads as a later run only by its writing (see :func:`_row_run_started_before_stop`); a new try
    that billed this run hours after it ended reads the same. The drain keeps the bill for a person then:
    written, the run may be billed twice; dropped, a later run's bill would stand for this one.
    Raises what the ledger's reads raise.
    """
    from costaware.training.remote import end_of_attempt_note, job_of_attempt_note, other_run

    if check.backend == "sagemaker" or check.ended_at is None:
        return None  # names never reused; a run with no end is never matched to a row (billed on its own)
    ident = check.identity
    for row in ledger.entries(dag_id=ident["dag_id"], run_id=ident["run_id"]):
        note = str(row["note"] or "")
        unknown = (
            row["task_id"] == ident["task_id"]
            and int(row["map_index"]) == int(ident["map_index"])
            and str(row["price_source"] or "").startswith("remote:")
            and not row["estimated"]
            and row["entry_uid"] != check.entry_uid
            and job_of_attempt_note(note) == check.job_id
            and end_of_attempt_note(note) is None
            and row.get("unit") == "hour"
            and not other_run(check.run_token, note)  # another run's, as its mark says: not unknown
        )
        if (
            unknown
            and _started_before(check, row["incurred_at"])
            and not _row_run_started_before_stop(check, row)
        ):
            return dict(row)
    return None


def _same_run(check: DuplicateCheck, row: Mapping[str, Any]) -> bool:
    """Whether the ledger ``row`` of the job's name bills the run ``check`` describes, not another run.

    The row's run is this run where this run began before the row was written (not one started after it)
    and the row's run began before this run's stop. The second matters at a spool's drain hours later: a
    cleared task's new try resubmits the job under the same name, and that later run's bill is not this
    run's (dropped for it, the killed run went unbilled).
    """
    return _started_before(check, row["incurred_at"]) and _row_run_started_before_stop(check, row)


def _same_time_run(check: DuplicateCheck, row: Mapping[str, Any]) -> bool:
    """Whether ``row``, which billed the same time as this run under the job's name, bills this run.

    Where known to be another: a row written before this run began (a kill of an earlier run under the
    same name can bill the same time), or one whose note gives an end that puts its run after this run's
    stop. A row without that end is this run (the rule's rows are mostly those keyed by the name alone,
    from a version whose notes gave none: their writing, hours after the end, would read as a later run),
    and so is any row where this run's end is unknown.
    """
    from costaware.training.remote import end_of_attempt_note

    if check.ended_at is None:
        return True
    if not _started_before(check, row["incurred_at"]):
        return False
    return end_of_attempt_note(str(row.get("note") or "")) is None or _row_run_started_before_stop(check, row)


def _row_run_started_before_stop(check: DuplicateCheck, row: Mapping[str, Any]) -> bool:
    """Whether the run ``row`` bills began before this run's stop (``check.ended_at``).

    Its start is taken as its job's end less its billed hours (per instance, as this job's plan runs them).
    The end is the one the row's note gives; a row whose note gives none (written before notes gave it, or
    by a stop before the end) takes its writing instead: no earlier than the true start, since a run is
    billed at or after its end, but a new try that bills this run more than its length after it ended (the
    task cleared hours later) would read as a later run and the run be billed twice. SageMaker never reuses
    a name (and bills a managed spot job less than it ran): its rows are this run.
    """
    from costaware.training.remote import aware_utc, end_of_attempt_note

    if check.backend == "sagemaker":
        return True
    if check.ended_at is None or row.get("unit") != "hour":
        return False
    moment = end_of_attempt_note(str(row.get("note") or "")) or row["incurred_at"]
    started = aware_utc(moment) - timedelta(hours=float(row["quantity"]) / check.instances)
    return bool(started <= datetime.fromtimestamp(check.ended_at, tz=timezone.utc))


def _started_before(check: DuplicateCheck, moment: datetime) -> bool:
    """Whether the job's run began before ``moment``: the run a kill billed then, not one started after.

    A backend that lost the stopped job takes a new one under the same name; that run starts after the
    kill's entry and is billed on its own. On SageMaker, whose names are never reused, it is the same run
    (its start worked back from a managed spot job's billed time, which is less than it ran, could fall
    after the kill); elsewhere a job that gives no end is taken as another.
    """
    from costaware.training.remote import aware_utc

    if check.backend == "sagemaker":
        return True
    if check.ended_at is None:
        return False
    # Billed seconds count every instance.
    started = datetime.fromtimestamp(check.ended_at, tz=timezone.utc) - timedelta(
        seconds=check.billable_seconds / check.instances
    )
    return started < aware_utc(moment)
