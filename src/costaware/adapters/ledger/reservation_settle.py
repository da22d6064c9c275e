"""Settling a reservation: closing it with what was spent, and the warnings a settle gives.

Split from :mod:`.reservations`, which re-exports :func:`settle` (callers import it from there).
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import NamedTuple

from sqlalchemy import Connection, func, select

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.budgets import budget_from_row, budget_usage
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.adapters.ledger.entries import insert_entry
from costaware.adapters.ledger.reservation_rows import close, locked_reservation, reservation
from costaware.core.budgets import is_run_key, period_window, run_of_key
from costaware.core.ledger import LedgerEntry, Reservation, utcnow
from costaware.core.money import format_usd_exact, parse_usd

# The logger settle's warnings were given under before the split: log filters, alerts and the tests that
# read them (caplog) name it.
log = logging.getLogger("costaware.adapters.ledger.reservations")


class Settled(NamedTuple):
    """What :func:`settle_telling` did: the reservation as it now stands, and whether ``entry`` was new."""

    reservation: Reservation
    entry_new: bool  # False: no entry given, or the ledger had its entry_uid already (and keeps that row)


def settle(
    ledger: LedgerDatabase,
    reservation_id: str,
    actual_usd: object,
    *,
    entry: LedgerEntry | None = None,
    already_recorded: bool = False,
) -> Reservation:
    """Close a reservation with what was spent, recording ``entry``; a second call changes nothing.

    ``already_recorded``: the cost was recorded before (no entry given, none paid from the hold), so no
    warning that the budgets count nothing of ``actual_usd``.
    """
    return settle_telling(
        ledger, reservation_id, actual_usd, entry=entry, already_recorded=already_recorded
    ).reservation


def settle_telling(
    ledger: LedgerDatabase,
    reservation_id: str,
    actual_usd: object,
    *,
    entry: LedgerEntry | None = None,
    already_recorded: bool = False,
) -> Settled:
    """:func:`settle`, telling also whether ``entry`` was new to the ledger (read from its own insert)."""
    actual = parse_usd(actual_usd, name="actual cost")
    entry_new = False
    with ledger.transaction() as conn:
        current = reservation(conn, reservation_id)
        if entry is not None and not current.scope.matches(entry.tags):
            # Accepted (the money was spent), but said: the budgets the hold was in do not count this entry.
            log.warning(
                "settling the hold %s of %s with an entry tagged %s, outside that scope: the budgets it held "
                "in (%s) do not count its %s",
                reservation_id,
                current.scope,
                entry.tags or "with nothing",
                ", ".join(current.budgets),
                format_usd_exact(entry.usd),
            )
        if entry is not None:
            # Recorded even when the reservation is settled already (a second live try of the task, a
            # settlement racing this one): the entry is the money, the reservation only its hold.
            entry_new = insert_entry(conn, entry)
        # Its status read again with its row locked, after the entry (record_and_regrow's order, entry then
        # row): read once above, a release that committed in between on PostgreSQL was settled over as if
        # the hold were open, and a budget it left past its cap went without the error below.
        current = locked_reservation(conn, reservation_id, is_sqlite=ledger.is_sqlite)
        if entry is not None and current.status == "released":
            _say_budgets_passed_after_release(conn, current, entry)
        if current.status == "settled":
            return Settled(current, entry_new)
        # A replaced hold too: settled with no entry, its cost was counted nowhere, and nothing said so.
        if entry is None and actual > 0 and not already_recorded:
            _say_nothing_counted(conn, current, actual)
        if current.status != "replaced":
            close(conn, reservation_id, "settled", actual)
        standing = reservation(conn, reservation_id)
        if standing.status == "replaced":  # before this, or by a gate at once (close leaves it so)
            _say_replaced(conn, standing, actual, entry_given=entry is not None)
        return Settled(standing, entry_new)


def _say_replaced(conn: Connection, replaced: Reservation, actual: Decimal, *, entry_given: bool) -> None:
    """Warn where a settle names a hold a newer one of its holder replaced: it stays ``replaced``.

    Its money is in the newer hold (``reserve(replacing=...)``): settled, it read as the task's settlement
    while the hold that counts stayed open, and nothing said so. ``entry_given``: settle recorded an entry.
    """
    taker = _hold_with_the_money_of(conn, replaced)
    recorded = " (the entry given is recorded all the same)" if entry_given else ""
    if taker is not None and taker.status == "open" and taker.expires_at > utcnow():
        log.warning(
            "the hold %s of %s was replaced by %s, which holds its money: it stays replaced, not settled "
            "with %s%s. To close the task's hold, settle %s instead (Ledger.reservation_to_settle(%r) finds "
            "it)",
            replaced.id,
            replaced.holder,
            taker.id,
            format_usd_exact(actual),
            recorded,
            taker.id,
            replaced.holder,
        )
        return
    # Named whatever its status, a settled or expired hold read as the one to settle (or another hold of
    # the holder, made later, that never held this money).
    if taker is None:
        ended = "a hold the ledger no longer finds"
    else:
        ended = f"{taker.id}, {'expired' if taker.status == 'open' else taker.status} since"
    log.warning(
        "the hold %s of %s was replaced by %s: it stays replaced, not settled with %s%s, and no open hold "
        "holds its money now: there is none to settle for it",
        replaced.id,
        replaced.holder,
        ended,
        format_usd_exact(actual),
        recorded,
    )


def _hold_with_the_money_of(conn: Connection, replaced: Reservation) -> Reservation | None:
    """The hold that holds ``replaced``'s money now: the one that replaced it, or, replaced in turn, its own.

    The one that replaced it is its holder's newest made after it and by the time it was replaced (a
    reserve makes it, then closes the old one, in one transaction); a hold made later is another one.
    """
    r = schema.reservations
    current, seen = replaced, {replaced.id}
    while current.status == "replaced":
        replaced_at = conn.execute(select(r.c.settled_at).where(r.c.id == current.id)).scalar()
        query = select(r.c.id).where(
            r.c.holder == current.holder, r.c.id.not_in(seen), r.c.created_at >= current.created_at
        )
        if replaced_at is not None:
            query = query.where(r.c.created_at <= replaced_at)
        found = conn.execute(query.order_by(r.c.created_at.desc(), r.c.id.desc()).limit(1)).scalar()
        if found is None:
            return None
        current = reservation(conn, found)
        seen.add(current.id)
    return current


def _say_nothing_counted(conn: Connection, current: Reservation, actual: Decimal) -> None:
    """Warn where a hold settles a cost that no entry paid from it: the budgets count none of it.

    Spend is the sum of the entries, not the amount given to ``settle``: ``settle(r.id, "3.95")`` alone
    closed the hold and the $3.95 was missing from every budget without a word. An entry recorded with the
    hold's ``reservation_id`` (a data-locality gate's) was paid from it: nothing to say then.
    """
    e = schema.entries
    paid = conn.execute(
        select(func.count()).where(e.c.reservation_id == current.id, e.c.estimated.is_(False))
    ).scalar_one()
    if paid:
        return
    log.warning(
        "%s %s of %s with %s but no entry, and no entry was recorded with its reservation_id: the budgets "
        "count nothing of it. To count the cost, pass entry= to settle (or record the entry with "
        "reservation_id=%r); where it was recorded already, pass already_recorded=True",
        # Not "settled": a replaced hold stays so.
        "asked to settle the replaced hold" if current.status == "replaced" else "settled the hold",
        current.id,
        current.holder,
        format_usd_exact(actual),
        current.id,
    )


def _say_budgets_passed_after_release(conn: Connection, current: Reservation, entry: LedgerEntry) -> None:
    """Log an error where a cost settled against a released hold has put a budget past its cap.

    Its task billed after the hold was given back (a `costaware budget release --force` of a task that
    still ran): the money had been free for others meanwhile, and a $5 budget read -$3.00 left without a
    word. The entry is recorded all the same: the money was spent.
    """
    h, b = schema.holds, schema.budgets
    held = dict(
        conn.execute(select(h.c.budget_id, h.c.period_key).where(h.c.reservation_id == current.id)).all()
    )
    now = utcnow()
    over = []
    for row in conn.execute(select(b).where(b.c.id.in_(sorted(held))).order_by(b.c.id)).mappings():
        budget, key = budget_from_row(row), held[row["id"]]
        dag_id, run_id = run_of_key(key) if is_run_key(key) else (None, None)
        window = period_window(budget.period, now, budget.timezone, run_id, dag_id)
        usage = budget_usage(conn, row["id"], budget, window, now)
        if usage.left_usd < 0:
            by, cap = format_usd_exact(-usage.left_usd), format_usd_exact(usage.cap_usd)
            over.append(f"{usage.name} is {by} over its cap {cap}")
    if over:
        log.error(
            "the hold %s of %s had been released (`costaware budget release`, or its run's end) when its "
            "task's cost of %s was settled: recorded, and %s (`costaware audit --action hold_release` says "
            "who released it by hand)",
            current.id,
            current.holder or current.scope,
            format_usd_exact(entry.usd),
            "; ".join(over),
        )
