"""Growing an open reservation: toward a task's cap (``grow``), or back for a retry (``record_and_regrow``).

Locked as a reservation is (the covering budgets, then the reservation's row), so a growth never passes a
cap, and never changes a hold closed meanwhile. Whether a late bill grows its hold back depends on the try
that took the hold up (``take_up``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Connection, and_, or_, select

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.budgets import applicable, budget_from_row, budget_usage
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.adapters.ledger.entries import insert_entry
from costaware.adapters.ledger.reservations import holder_lock_key, locked_reservation, paid, reservation
from costaware.core.budgets import is_run_key, period_window, run_of_key
from costaware.core.errors import BudgetNotFoundError, ConfigurationError
from costaware.core.ledger import LedgerEntry, Reservation, holder_run_id, utcnow
from costaware.core.money import format_usd_exact, parse_usd, to_micros

log = logging.getLogger(__name__)


def grow(ledger: LedgerDatabase, reservation_id: str, usd: object) -> Reservation:
    """Raise an open reservation toward ``usd``, as far as every budget it holds money in has room.

    It is never lowered, and a budget is never passed: where one has less room, the reservation grows only
    by that much (a budget already past its cap, by an approved overage, gives none; so does one whose
    period no longer matches the hold's, e.g. after its time zone changed; and it does not grow at all where a
    budget set since covers its scope, as it holds nothing there). Locked as :func:`reserve` is,
    the reservation read again under the lock, so two growths at once, or a growth beside a settlement,
    cannot pass a cap or change a closed reservation. A reservation that is no longer open is returned as
    it stands.
    """
    target = parse_usd(usd, name="reservation amount")
    with ledger.transaction() as conn:
        return _grow_in(conn, ledger, reservation_id, target, utcnow())[0]


class Regrowth(NamedTuple):
    """What :func:`record_and_regrow` did: the entry, and the hold grown back for the retry."""

    new: bool  # the entry was not in the ledger (written again, it pays, and grows, nothing more)
    target: Decimal  # what the hold was to grow to
    held: Reservation  # the hold as it now stands (compare its ``usd`` with ``target``)
    why_not_grown: str | None  # why it was not grown at all, other than the budgets' room
    unpaid_before: Decimal  # what the hold had left unpaid before the entry, read under the locks
    expired: bool  # past its ttl as the entry was written: not grown, it counts nothing in its budgets
    gpu_hours_target: Decimal  # the GPU-hours it was to grow to (compare the hold's ``gpu_hours``)
    unpaid_gpu_hours_before: Decimal  # the GPU-hours it had left unpaid before the entry


def take_up(ledger: LedgerDatabase, holder: str, try_number: int) -> int:
    """Say that try ``try_number`` of ``holder``'s task took its open holds up; how many it marked.

    A try that sizes its hold from what the ledger shows its earlier tries billed calls it before that read:
    a bill of an earlier try written after it (a kill's, drained from the spool) is then not in what it
    sized, and grows the hold back (:func:`record_and_regrow`); one written before it is read. A bill of the
    try that took the hold grows nothing back: that try is over, and the next sizes the hold itself. Never
    lowered: a late call of an earlier try leaves a later try's mark.
    """
    r, h = schema.reservations, schema.holds
    to_mark = and_(
        r.c.holder == holder,
        r.c.status == "open",
        or_(r.c.taken_by_try.is_(None), r.c.taken_by_try < try_number),
    )
    with ledger.transaction() as conn:
        # Reserve's order: the holder's lock, its budgets in id order, then its rows (in id order here).
        # One UPDATE alone locked the rows as it met them: a reserve replacing one of two open holds of the
        # holder locked that one's row and then wanted the other's, which the UPDATE had locked while it
        # waited for the first: a deadlock PostgreSQL ended by aborting one. The holder's lock also keeps a
        # hold made meanwhile (its budgets not locked here) out of the UPDATE.
        ledger.advisory_lock(conn, holder_lock_key(holder))
        if not ledger.is_sqlite:  # SQLite's write lock already holds everything
            marked = select(r.c.id).where(to_mark)
            _lock_budgets_of(conn, h.c.reservation_id.in_(marked))
            conn.execute(marked.order_by(r.c.id).with_for_update()).all()
        return conn.execute(r.update().where(to_mark).values(taken_by_try=try_number)).rowcount


def record_and_regrow(ledger: LedgerDatabase, entry: LedgerEntry) -> Regrowth:
    """Record ``entry`` paid from its open hold and grow the hold back by what it paid, in one transaction.

    Grown back in dollars and GPU-hours alike, each as far as its cap has room. Not grown where the try
    that took the hold up (:func:`take_up`) is the entry's own: a killed try's bill drained late grew back a
    hold no try would use, held until the run's end or its TTL (``target`` is then what the hold holds).

    A retried task's hold (``entry.reservation_id``): written apart, another run could reserve the room the
    entry freed before the hold took it back. Under the budgets' locks, as :func:`grow`, never past a cap.

    Raises:
        ConfigurationError: ``entry`` names no hold (``reservation_id`` None).
    """
    if entry.reservation_id is None:
        raise ConfigurationError(
            f"entry {entry.entry_uid} has no reservation_id, so it pays from no hold to grow back: give it "
            "the id of its task's open hold, or record it with Ledger.record"
        )
    with ledger.transaction() as conn:
        # Budgets, entry, then the hold's row: reserve's order (budgets, hold) and settle's (entry, hold).
        # With the hold's row locked before the entry, a settle writing the same entry at once held the
        # entry's key and waited for the row while this waited for the key: PostgreSQL aborted one.
        if not ledger.is_sqlite:  # SQLite's write lock already holds everything
            _lock_budgets_of(conn, schema.holds.c.reservation_id == entry.reservation_id)
        new = insert_entry(conn, entry)
        held = locked_reservation(conn, entry.reservation_id, is_sqlite=ledger.is_sqlite)
        paid_now, paid_gpu_hours_now = paid(conn, held.id)
        paid_before, paid_gpu_hours_before = (
            paid(conn, held.id, but_entry=entry.entry_uid) if new else (paid_now, paid_gpu_hours_now)
        )
        unpaid_before = max(held.usd - paid_before, Decimal(0))
        # Back to what it had unpaid before the entry: all it paid, even past the hold, plus that.
        target = paid_now + unpaid_before if new else held.usd
        # In GPU-hours too: grown back in dollars only, a try that paid its hold's GPU-hours left the retry
        # none held, another run took them, and the retry's GPU-hours passed the budget's GPU-hour cap.
        unpaid_gpu_hours_before = max(held.gpu_hours - paid_gpu_hours_before, Decimal(0))
        gpu_hours_target = paid_gpu_hours_now + unpaid_gpu_hours_before if new else held.gpu_hours
        if new and _taken_by_try(conn, held.id) == entry.try_number:
            log.info(
                "reservation %s paid %s of entry %s and is not grown back: try %s, which took it up, is over "
                "(the next try sizes it with the entry in the ledger)",
                held.id,
                format_usd_exact(entry.usd),
                entry.entry_uid,
                entry.try_number,
            )
            return Regrowth(
                new,
                held.usd,
                held,
                None,
                unpaid_before,
                False,
                held.gpu_hours,
                unpaid_gpu_hours_before,
            )
        # One instant for the growth and the verdict: read apart, a hold grown just before its ttl read as
        # expired (not grown) a moment later, and the warning said the retry had nothing held.
        now = utcnow()
        grown, why_not_grown = _grow_in(conn, ledger, held.id, target, now, gpu_hours_target)
        expired = grown.status == "open" and grown.expires_at <= now
        return Regrowth(
            new,
            target,
            grown,
            why_not_grown,
            unpaid_before,
            expired,
            gpu_hours_target,
            unpaid_gpu_hours_before,
        )


def _taken_by_try(conn: Connection, reservation_id: str) -> int | None:
    """The try that took ``reservation_id`` up (:func:`take_up`); None: none said."""
    r = schema.reservations
    return conn.execute(select(r.c.taken_by_try).where(r.c.id == reservation_id)).scalar()


def _lock_budgets_of(conn: Connection, holds: ColumnElement[bool]) -> None:
    """Lock (PostgreSQL) the budgets the ``holds`` rows hold money in, in id order (reserve's)."""
    h, b = schema.holds, schema.budgets
    budget_ids = select(h.c.budget_id).where(holds)
    conn.execute(select(b.c.id).where(b.c.id.in_(budget_ids)).order_by(b.c.id).with_for_update()).all()


def _grow_in(
    conn: Connection,
    ledger: LedgerDatabase,
    reservation_id: str,
    target: Decimal,
    now: datetime,
    gpu_hours_target: Decimal | None = None,
) -> tuple[Reservation, str | None]:
    """:func:`grow` in the caller's transaction at ``now`` (locking again what the caller locked is a no-op).

    ``gpu_hours_target``: the GPU-hours to grow toward as well, as far as each budget's GPU-hour cap has
    room (None: they stay as they are).

    The budgets are locked before the reservation's row (reserve's order); a caller that writes an entry
    of it in the same transaction writes it between the two (settle's order: entry, then row).

    Returns the reservation as it stands, and why it was not grown at all where the budgets' room was not
    the reason (None otherwise).
    """
    r, h, b = schema.reservations, schema.holds, schema.budgets
    held = dict(
        conn.execute(select(h.c.budget_id, h.c.period_key).where(h.c.reservation_id == reservation_id)).all()
    )
    budgets_query = select(b).where(b.c.id.in_(sorted(held))).order_by(b.c.id)  # id order, as reserve
    if not ledger.is_sqlite:  # SQLite's write lock already holds everything
        budgets_query = budgets_query.with_for_update()
    rows = conn.execute(budgets_query).mappings().all()
    # The reservation row, locked after the budgets (reserve's order), as it stands under the locks.
    current = locked_reservation(conn, reservation_id, is_sqlite=ledger.is_sqlite)
    gpu_hours_target = current.gpu_hours if gpu_hours_target is None else gpu_hours_target
    if (
        current.status != "open"
        or current.expires_at <= now
        or (current.usd >= target and current.gpu_hours >= gpu_hours_target)
    ):
        return current, None
    unheld = _budgets_set_since(conn, ledger, current, held)
    if unheld:
        # Set after the reservation: the hold is not in it, so it would count none of the growth, and
        # the growth was granted past its cap (a $10 budget over '*' beside a $500 hold).
        why = (
            f"budget(s) {', '.join(unheld)} cover its scope {current.scope} and were set after it was made, "
            "so it holds nothing in them"
        )
        log.warning("reservation %s not raised: %s", reservation_id, why)
        return current, why
    increase = max(target - current.usd, Decimal(0))
    gpu_hours_increase = max(gpu_hours_target - current.gpu_hours, Decimal(0))
    for row in rows:
        budget, key = budget_from_row(row), held[row["id"]]
        dag_id, run_id = run_of_key(key) if is_run_key(key) else (None, None)
        window = period_window(budget.period, current.created_at, budget.timezone, run_id, dag_id)
        if window.key != key:
            # The hold counts in a period this window would not sum it in: its room is unknown here.
            why = (
                f"its hold in {budget.label} is for period {key}, the budget's period of its start is now "
                f"{window.key} (as after a change of its time zone)"
            )
            log.warning("reservation %s not raised: %s", reservation_id, why)
            return current, why
        usages = [budget_usage(conn, row["id"], budget, window, now)]
        today = period_window(budget.period, now, budget.timezone, run_id, dag_id)
        if today.key != window.key:
            # A hold of an earlier day or month counts in today's too (its cost lands when settled):
            # today's room bounds the growth as well, or it passed today's cap.
            usages.append(budget_usage(conn, row["id"], budget, today, now))
        for usage in usages:
            increase = min(increase, max(usage.left_usd, Decimal(0)))
            if usage.cap_gpu_hours is not None:
                gpu_hours_left = usage.cap_gpu_hours - usage.spent_gpu_hours - usage.reserved_gpu_hours
                gpu_hours_increase = min(gpu_hours_increase, max(gpu_hours_left, Decimal(0)))
    if increase <= 0 and gpu_hours_increase <= 0:
        return current, None
    grown = {
        "usd_micros": to_micros(current.usd + increase),
        "gpu_hours_micros": to_micros(current.gpu_hours + gpu_hours_increase),
    }
    conn.execute(r.update().where(r.c.id == reservation_id, r.c.status == "open").values(**grown))
    conn.execute(h.update().where(h.c.reservation_id == reservation_id, h.c.open.is_(True)).values(**grown))
    log.info(
        "raised reservation %s from %s to %s%s",
        reservation_id,
        format_usd_exact(current.usd),
        format_usd_exact(current.usd + increase),
        f" and {current.gpu_hours + gpu_hours_increase} GPU-hours" if gpu_hours_increase > 0 else "",
    )
    return reservation(conn, reservation_id), None


def _budgets_set_since(
    conn: Connection, ledger: LedgerDatabase, current: Reservation, held: dict[Any, str]
) -> list[str]:
    """Labels of the budgets covering ``current``'s scope that it holds nothing in (set after it was made)."""
    run_keys = [run_of_key(key) for key in held.values() if is_run_key(key)]
    dag_id, run_id = run_keys[0] if run_keys else (None, holder_run_id(current.holder))
    try:
        covering = applicable(
            conn, current.scope, run_id, is_sqlite=ledger.is_sqlite, at=current.created_at, dag_id=dag_id
        )
    except BudgetNotFoundError:  # none left: nothing to pass
        return []
    return [budget.label for budget_id, budget, _ in covering if budget_id not in held]
