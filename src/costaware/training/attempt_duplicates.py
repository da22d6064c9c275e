"""Whether a remote attempt's entry was billed already, by an earlier try, under another key.

The direct bill (``AttemptBilling``) asks before it writes; a bill kept in the spool while the ledger was
down asks again as it is drained (:mod:`costaware.ledger_spool`): the ledger's key alone finds only an
entry under the same key, and a job a cleared task's new try billed under its end's key was counted twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

#: The causes of an entry a stop billed before its job ended (to its grace period's end, keyed by its name).
STOP_CAUSES = ("killed", "unwatched")

#: How much earlier than this run's submit a row's run may seem to begin and still be this run: the end
#: comes from the backend's clock, the submit from the worker's (and the note keeps the end to the
#: millisecond, the quantity the hours to the micro-hour). An earlier run under the job's name that began
#: this little before the submit is read as this run: it was stopped, and the task cleared and run again,
#: within the minute.
SUBMIT_CLOCK_SKEW = timedelta(seconds=60)


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
    #: The earliest this run can have begun (epoch seconds, see :func:`earliest_run_start`; None: not
    #: known, as in a check spooled before it was kept): a row of the job's name whose run began before it
    #: is an earlier run under that name, never this run's bill.
    submitted_at: float | None = None
    #: How long a stop lets the job run on (``stop_seconds``): a row whose note gives no end is read from
    #: its writing, which a stop that billed the job to the end of that time came before.
    stop_seconds: float = 0.0

    @classmethod
    def of(
        cls,
        entry: Any,
        job: Mapping[str, Any],
        *,
        plan: Any,
        instances: int,
        keyed_by_name: bool,
        submitted_at: datetime | None = None,
        stop_seconds: float = 0.0,
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
            submitted_at=None if submitted_at is None else submitted_at.timestamp(),
            stop_seconds=float(stop_seconds),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DuplicateCheck:
        # A check spooled by an earlier version lacks the fields added since: their defaults.
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


def earliest_run_start(current: Any) -> datetime | None:
    """The earliest the run of ``current`` (an ``AttemptState``'s running attempt) can have begun, else None.

    Its submit; for a job an earlier try submitted and this try follows, the backend's creation of it (this
    try's submit is its re-attach, after the run began). None where neither is known (an older state, a
    followed job whose backend gave no creation time).
    """
    from costaware.core.series import parse_instant

    if current is None:
        return None
    if current.followed is not None:
        created = current.followed.get("created_at")
        return parse_instant(created, name="created_at") if created else None
    return parse_instant(current.submitted_at, name="submitted_at") if current.submitted_at else None


def run_began_before(
    row: Mapping[str, Any], moment: datetime, *, instances: int, stop_seconds: float = 0.0
) -> bool:
    """Whether the run the ledger ``row`` bills began before ``moment`` (a submit), less the clock skew.

    Its start is its end less its billed hours per instance. The end is its note's, else its writing: a
    stop that billed the job before it ended billed it ``stop_seconds`` past that writing (else its start
    read that much early, and this run's own bill as an earlier run's). A row that bills no hours tells no
    start: not before.
    """
    from costaware.training.remote import aware_utc, end_of_attempt_note

    if row.get("unit") != "hour":
        return False
    ended = end_of_attempt_note(str(row.get("note") or ""))
    if ended is None:
        ended = aware_utc(row["incurred_at"]) + timedelta(seconds=stop_seconds)
    began = ended - timedelta(hours=float(row["quantity"] or 0) / instances)
    return began < aware_utc(moment) - SUBMIT_CLOCK_SKEW


def billed_already(ledger: Any, check: DuplicateCheck) -> Decimal | None:
    """What the ledger holds for the attempt ``check`` describes, billed by this try or an earlier one.

    None where nothing: the entry is to be written. Raises what the ledger's reads raise.
    """
    from costaware.training.remote import attempt_key, attempt_uid

    ident = check.identity
    # Keyed by the job's name alone before its end was part of the key: such an entry is this run when
    # it billed the same time (a different run under the same name bills its own), or when a kill
    # billed it before it ended (``keyed_by_name``).
    legacy = attempt_uid(attempt_key(ident, check.job_id, legacy=True))
    # An ended job that a version before a backend gave its end (a Failed pod whose container never
    # ended, SageMaker's poll) billed up to then, keyed 'ended=none': this run where it began before.
    unended = attempt_uid(attempt_key(ident, check.job_id, None)) if check.ended_at is not None else None
    rows = ledger.entries_by_uid([check.entry_uid, legacy, *([unended] if unended else [])])
    quantity = Decimal(check.quantity)
    stored = next(
        (
            row["usd"]
            for row in rows
            if row["entry_uid"] == check.entry_uid
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


def _this_run_recorded(ledger: Any, check: DuplicateCheck) -> Decimal | None:
    """What an entry of this run of the job already billed, under its end's key, else None.

    A kill that bills a job still stopping can race a cleared task's new try, which saw the job end and
    recorded it under its end: an entry of that job recorded after this run began is this run.
    """
    from costaware.training.remote import job_of_attempt_note

    ident = check.identity
    for row in ledger.entries(dag_id=ident["dag_id"], run_id=ident["run_id"]):
        ours = (
            row["task_id"] == ident["task_id"]
            and int(row["map_index"]) == int(ident["map_index"])
            and str(row["price_source"] or "").startswith("remote:")
            and not row["estimated"]
        )
        if ours and job_of_attempt_note(str(row["note"] or "")) == check.job_id and _same_run(check, row):
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
    from costaware.training.remote import end_of_attempt_note, job_of_attempt_note

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
    return (
        _started_before(check, row["incurred_at"])
        and _row_run_started_before_stop(check, row)
        and not _row_run_started_before_submit(check, row)
    )


def _row_run_started_before_submit(check: DuplicateCheck, row: Mapping[str, Any]) -> bool:
    """Whether the run ``row`` bills began before this run's submit: an earlier run under the job's name.

    A cleared task's new try submits its job under the name an earlier try's run had, and that run's bill
    (its kill's, or one keyed ``ended=none`` where its backend lost it) may be written after this run
    began: read as this run's, this run was never billed. SageMaker never reuses a name (and its managed
    spot rows bill less than ran, which moves their start later, never earlier): its rows are this run.
    """
    if check.backend == "sagemaker" or check.submitted_at is None:
        return False
    submitted = datetime.fromtimestamp(check.submitted_at, tz=timezone.utc)
    return run_began_before(row, submitted, instances=check.instances, stop_seconds=check.stop_seconds)


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
    if not _started_before(check, row["incurred_at"]) or _row_run_started_before_submit(check, row):
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
