"""Which slot waits: the holds on slots' own time, recorded in the study for the slots refused beside them.

In the ledger a slot's hold (a load, a wait for money) and a trial's look alike; only a trial's may come back
to a waiting slot: a slot's is spent by that slot. The slot that first recorded its wait waits (a hold held
again keeps its place), the others give way
(:func:`~costaware.training.tuning.reservations.reserve_trial_cost`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from costaware.core.ledger import utcnow
from costaware.training.tuning.reservations import LATE_POLL_SECONDS
from costaware.training.tuning.wait_refusals import RecordedSpare

if TYPE_CHECKING:
    import optuna

    from costaware.adapters.ledger.store import Ledger

log = logging.getLogger(__name__)

#: Study system attribute (one per holder) naming the hold on a waiting slot's own time.
WAITING_SLOT_ATTR = "costaware:waiting_slot:"
#: How long past the end of its next wait a slot's record counts unless the slot renews it: a slot that died
#: waiting (OOM, a lost worker) stops counting this long after the wait it last renewed the record for.
SLOT_RECORD_GRACE_SECONDS = 60.0
#: The least time between two writes of a slot's record, renewed before and after each ask and before each
#: wait (three writes a second at a 1 s poll): each renewal leaves it counting at least its longest wait and
#: the grace less this, 80 s at the default, longer than an ask kept waiting for SQLite's lock (60 s).
SLOT_RECORD_RENEWED_EVERY_SECONDS = 10.0


@dataclass(slots=True)
class WaitingSlots:
    """The records of waiting slots' holds in the study: this holder's, written and renewed, and the others'.

    One attribute per holder (per slot number, two DAG runs of one study at once overwrote each other's). A
    record counts while its hold is open and its slot renews it: before and after each ask and before each
    wait, to the end of the longest wait (``max(LATE_POLL_SECONDS, poll_seconds)``) plus
    :data:`SLOT_RECORD_GRACE_SECONDS`, so that a slot that died leaves a record counted 90 s at most past its
    last renewal (at the default poll), not for its hold's ttl (600 s at least), while slots behind it gave
    way. Records are dated and read by one clock for all workers (:func:`records_clock`). A slot's hold
    not (yet) recorded, or whose record lapsed, counts as a trial's: its money comes back when the hold
    ends. :meth:`forget` deletes the slot's record as it stops waiting, and the records of holds no longer
    open: one per holder, kept, they grew with the study without bound.
    """

    study: optuna.study.Study
    holder: str
    poll_seconds: float = 1.0
    marked: str | None = None
    #: On :attr:`clock`: when the record last written stops counting unless renewed.
    counts_until: datetime | None = None
    #: On this worker's clock: when the record was last written (how long ago is all that is asked of it).
    written_at: datetime | None = None
    #: The clock records are dated and read by (None: :func:`records_clock` of the study's storage).
    clock: Callable[[], datetime] | None = None
    #: On :attr:`clock`: when this slot first recorded its wait, kept while its hold is held again under a
    #: new id (see :meth:`places`).
    since: datetime | None = None
    #: GPU-hours the recorded hold holds past the slot's need, which it gives up while others wait.
    spare_gpu_hours: Decimal = Decimal(0)
    #: On :attr:`clock`: when the slot's next poll is due, whose trim gives that spare back.
    spare_due: datetime | None = None

    @property
    def _key(self) -> str:
        return f"{WAITING_SLOT_ATTR}{self.holder}"

    @property
    def _renewed_for(self) -> timedelta:
        """How long a record counts from its renewal: the longest wait before the next, and the grace."""
        return timedelta(seconds=max(LATE_POLL_SECONDS, self.poll_seconds) + SLOT_RECORD_GRACE_SECONDS)

    def mark(
        self, hold_id: str, spare_gpu_hours: Decimal | None = None, *, spare_due_seconds: float | None = None
    ) -> None:
        """Record ``hold_id`` as this slot's, or renew its record (once per renewal interval at most).

        Written once per :data:`SLOT_RECORD_RENEWED_EVERY_SECONDS` at most, not at each call, unless its
        spare changed or was given a new time. ``spare_gpu_hours``: the GPU-hours the hold holds past the
        slot's need (see :meth:`spares`); None: as last recorded for the same hold, none for a new one.
        ``spare_due_seconds``: from now to the slot's next poll, whose trim gives that spare back (recorded
        as a time; None: as last recorded for the same hold).
        """
        here = utcnow()
        if spare_gpu_hours is None:
            spare_gpu_hours = self.spare_gpu_hours if hold_id == self.marked else Decimal(0)
        renewed_every = timedelta(seconds=SLOT_RECORD_RENEWED_EVERY_SECONDS)
        recent = self.written_at is not None and here - self.written_at < renewed_every
        unchanged = hold_id == self.marked and spare_gpu_hours == self.spare_gpu_hours
        if unchanged and spare_due_seconds is None and recent:
            return
        now = self._now()
        since = self.since or now
        counts_until = now + self._renewed_for
        if spare_due_seconds is not None:
            spare_due: datetime | None = now + timedelta(seconds=spare_due_seconds)
        else:
            spare_due = self.spare_due if hold_id == self.marked else None
        record = {
            "holder": self.holder,
            "hold": hold_id,
            "counts_until": counts_until.isoformat(),
            "since": since.isoformat(),
            "spare_gpu_hours": str(spare_gpu_hours),
        }
        if spare_due is not None:
            record["spare_due_at"] = spare_due.isoformat()
        self._write(record)
        self.marked, self.counts_until, self.written_at, self.since = hold_id, counts_until, here, since
        self.spare_gpu_hours, self.spare_due = spare_gpu_hours, spare_due

    def _write(self, record: dict[str, Any]) -> None:
        """Write this slot's record, once more where another slot's :meth:`forget` deleted it meanwhile."""
        from optuna.exceptions import StorageInternalError
        from sqlalchemy.orm.exc import StaleDataError

        try:
            self.study._storage.set_study_system_attr(self.study._study_id, self._key, record)
        except StorageInternalError as e:
            if not isinstance(e.__cause__, StaleDataError):
                raise
            # Its old record (its hold ended) was deleted between Optuna's read of the row and its update,
            # which found no row and failed the waiting slot: written again, the row is inserted.
            self.study._storage.set_study_system_attr(self.study._study_id, self._key, record)

    def others(self) -> set[str]:
        """The holds other slots recorded and still renew (a record with no renewal time counts as is)."""
        return {str(value["hold"]) for value in self._counted() if value.get("holder") != self.holder}

    def places(self) -> dict[str, datetime]:
        """When each counted record's slot (this one's too) first recorded its wait, by the hold it holds now.

        A slot's hold held again (expired, or for more GPU-hours) is a new reservation made now: ordered by
        the hold's own time, a slot that waited first lost its place to slots that came after it, and gave
        way to them. A record written before places were recorded has none.
        """
        places = {}
        for value in self._counted():
            try:
                places[str(value["hold"])] = datetime.fromisoformat(str(value["since"]))
            except (KeyError, ValueError):
                continue
        return places

    def spares(self) -> dict[str, RecordedSpare]:
        """The GPU-hours other slots' counted holds hold past their need, by hold id (none recorded: 0).

        A waiting slot outside Airflow holds headroom past its need so that it is held again rarely; it gives
        it up while other slots wait, at its next poll. A slot whose trial fits once that spare is given up
        waits for it; each spare says when that poll is due, from now (see :class:`RecordedSpare`).
        """
        now = self._now()
        spares = {}
        for value in self._counted(now):
            if value.get("holder") == self.holder:
                continue
            try:
                gpu_hours = Decimal(str(value.get("spare_gpu_hours", "0")))
                due = value.get("spare_due_at")
                due_in = 0.0 if due is None else (datetime.fromisoformat(str(due)) - now).total_seconds()
            except (InvalidOperation, ValueError):
                continue
            spares[str(value["hold"])] = RecordedSpare(gpu_hours, due_in)
        return spares

    def _counted(self, now: datetime | None = None) -> list[dict[str, Any]]:
        """The records that count: a hold named, renewed in time (a record with no renewal time counts).

        ``now``: on :attr:`clock`, where the caller read it already (on PostgreSQL each read is a query).
        """
        now = self._now() if now is None else now
        counted = []
        for key, value in self._records().items():
            if not value.get("hold"):
                continue
            until = _counts_until(key, value)
            if until is not None and until <= now:
                continue  # its slot stopped renewing it: died, or stopped waiting
            counted.append(value)
        return counted

    def forget(self, ledger: Ledger, *, keep_own_while_open: bool = False) -> int:
        """Delete this slot's record (it no longer waits) and those whose hold is no longer open; their count.

        ``keep_own_while_open``: this slot's record stays while its hold is open (in Airflow the cost listener
        closes it as it bills the try, after the slot returned). Deleted at once, a slot that gave way left
        its hold open with no record: the slot that waited first took it for a trial's money that may come
        back, grew its own hold to wait for it and stopped the study. Kept, it lapses by itself or goes with
        a later :meth:`forget` once the hold is closed.
        A record is deleted only as it was read: a slot that recorded a new hold meanwhile keeps its record.
        Best effort, after the slot's trial or entry is recorded: an error here (a read refused, Optuna's
        private table renamed) failed a slot whose trial's money was granted, its reservation left open and
        no entry recorded. It is logged and the records are left: none counts past its ``counts_until``,
        nor once its hold ends.
        """
        try:
            records = self._records()
            if not records:
                return 0
            open_ids = {r.id for r in ledger.open_reservations()}
            gone = {
                key: value
                for key, value in records.items()
                if (key == self._key and not keep_own_while_open) or str(value.get("hold")) not in open_ids
            }
            return sum(_delete_if_unchanged(self.study, key, value) for key, value in gone.items())
        except Exception as e:
            log.warning(
                "study record %s of a slot no longer waiting (and those of holds that ended) was left in the "
                "study, where it stops counting by itself: %s: %s",
                self._key,
                type(e).__name__,
                e,
            )
            return 0
        finally:
            self.marked = self.counts_until = self.written_at = self.since = None
            self.spare_gpu_hours, self.spare_due = Decimal(0), None

    def _now(self) -> datetime:
        if self.clock is None:
            self.clock = records_clock(self.study)
        return self.clock()

    def _records(self) -> dict[str, dict[str, Any]]:
        attrs = self.study._storage.get_study_system_attrs(self.study._study_id)
        return {
            key: value
            for key, value in attrs.items()
            if key.startswith(WAITING_SLOT_ATTR) and isinstance(value, dict)
        }


def records_clock(study: optuna.study.Study) -> Callable[[], datetime]:
    """The clock waiting slots' records are dated and read by: the study database's, one clock for all.

    Dated by each worker's own clock, a worker ~30 s behind the others wrote records that they read as
    lapsed while its slot still renewed them (and one ahead read theirs so): the two waited for each other.
    A PostgreSQL storage is asked its time (``SELECT CURRENT_TIMESTAMP``, a round trip per write and per
    read of the records). SQLite runs in the worker's own process, its ``CURRENT_TIMESTAMP`` the worker's
    clock: the workers that share a SQLite file share one host's clock, read here without a query.
    """
    from optuna.storages import RDBStorage

    storage = getattr(study._storage, "_backend", study._storage)  # under optuna's cache
    if not isinstance(storage, RDBStorage) or storage.engine.dialect.name != "postgresql":
        return _this_workers_clock
    engine = storage.engine

    def database_clock() -> datetime:
        from sqlalchemy import text

        with engine.connect() as connection:
            now: datetime = connection.execute(text("SELECT CURRENT_TIMESTAMP")).scalar_one()
        return now.astimezone(UTC)

    return database_clock


def _this_workers_clock() -> datetime:
    return utcnow()


def _counts_until(key: str, record: dict[str, Any]) -> datetime | None:
    """When ``record`` stops counting unless renewed; None: written before records were renewed."""
    raw = record.get("counts_until")
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(str(raw))
    except ValueError:
        log.warning("study record %s has an unreadable counts_until %r: it counts as renewed", key, raw)
        return None


def _delete_if_unchanged(study: optuna.study.Study, key: str, record: dict[str, Any]) -> bool:
    """Delete the study's system attribute ``key`` if it still holds ``record``; whether it did.

    Optuna's storages have no delete for an attribute: the row is deleted in the RDB storage's own session.
    A delete refused (a lock held too long) is logged: the record counts nothing once its hold ends, and the
    next slot that stops waiting deletes it.
    """
    from optuna.storages import RDBStorage
    from sqlalchemy.exc import SQLAlchemyError

    storage = getattr(study._storage, "_backend", study._storage)  # under optuna's cache
    if not isinstance(storage, RDBStorage):
        return False  # another storage keeps its records: they count nothing once their holds end
    try:
        from optuna.storages._rdb import models  # optuna's own table, not part of its public API
    except ImportError as e:
        log.warning("study record %s of a slot no longer waiting was left in the study: %s", key, e)
        return False
    table = models.StudySystemAttributeModel
    session = storage.scoped_session()
    try:
        deleted = (
            session.query(table)
            .filter(table.study_id == study._study_id)
            .filter(table.key == key)
            .filter(table.value_json == json.dumps(record))
            .delete(synchronize_session=False)
        )
        session.commit()
    except SQLAlchemyError as e:
        session.rollback()
        log.warning("study record %s of a slot no longer waiting was left in the study: %s", key, e)
        return False
    finally:
        session.close()
    return bool(deleted)
