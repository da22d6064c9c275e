"""Releasing a reservation: its money given back unspent, and what that freed in each budget.

Split from :mod:`.reservations`, which re-exports :func:`release`, :func:`release_hold` and
:class:`Released` (callers import them from there).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Connection, FromClause, func, select, text

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.budgets import applicable, held_in
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.adapters.ledger.reservation_rows import close_holds, reservation
from costaware.core.budgets import Budget, PeriodWindow, is_run_key, run_of_key
from costaware.core.errors import BudgetNotFoundError
from costaware.core.ledger import Reservation, utcnow
from costaware.core.money import from_micros


def release(ledger: LedgerDatabase, reservation_id: str) -> Reservation:
    """Give a reservation's money back unspent (the task was skipped or never ran)."""
    return release_hold(ledger, reservation_id).reservation


@dataclass(frozen=True)
class Released:
    """What one :func:`release_hold` did, read in the transaction that released the hold.

    ``released_here``: this call closed it; False where it was closed already (settled, released, replaced
    or expired, a moment before by another process too), which frees nothing. ``paid_usd``: what the
    entries paid from it. ``freed_by_budget``: what each budget it counted in got back, by label (none
    where it was not released here or not asked for; nothing in a budget where it had expired or was paid
    in full there).
    """

    reservation: Reservation
    released_here: bool
    paid_usd: Decimal
    freed_by_budget: dict[str, Decimal]


def release_hold(ledger: LedgerDatabase, reservation_id: str, *, by_budget: bool = False) -> Released:
    """Release ``reservation_id`` where it is still open (a compare-and-set), saying what that freed.

    The figures are read in the release's own transaction, after the hold's row was set released: read
    before it, in another, an entry paid from the hold in between was left out of them, and a hold another
    process released a moment before was said released here. ``by_budget``: read ``freed_by_budget`` too
    (left empty otherwise: a release that only frees must not fail on a budget that cannot be read).

    Raises:
        ReservationNotFoundError: the ledger holds no reservation ``reservation_id``.
    """
    r = schema.reservations
    with ledger.transaction() as conn:
        released_here = bool(
            conn.execute(
                r.update()
                .where(r.c.id == reservation_id, r.c.status == "open")
                .values(status="released", settled_at=utcnow(), settled_usd_micros=None)
            ).rowcount
        )
        current = reservation(conn, reservation_id)
        if not released_here:
            return Released(current, False, Decimal(0), {})
        paid_usd, freed = _paid_and_freed(conn, current, by_budget=by_budget, is_sqlite=ledger.is_sqlite)
        close_holds(conn, reservation_id)  # the row is released already
        return Released(current, True, paid_usd, freed)


def _paid_and_freed(
    conn: Connection, hold: Reservation, *, by_budget: bool, is_sqlite: bool
) -> tuple[Decimal, dict[str, Decimal]]:
    """What entries paid from ``hold``, and (``by_budget``) what releasing it gives each budget back.

    Read in one statement: a record takes no lock the release waits for, so under PostgreSQL's READ
    COMMITTED a payment committed between two reads was in one figure and not the other (a $4 hold read
    $1 freed and $4 paid). Its holds must still count (closed after this): what each budget has reserved
    in it is what the release gives that budget back, the hold less the entries of that budget's own scope
    paid from it, nothing where it expired.
    """
    e = schema.entries
    paid = (
        select(func.coalesce(func.sum(e.c.usd_micros), 0))
        .where(e.c.reservation_id == hold.id, e.c.estimated.is_(False))
        .cte("paid")
    )
    counted = _budgets_counting(conn, hold, is_sqlite=is_sqlite) if by_budget else []
    held = {
        budget.label: held_in(budget_id, budget, window, now, only=hold.id).cte(f"held_{n}")
        for n, (budget_id, budget, window, now) in enumerate(counted)
    }
    read_together: FromClause = paid
    for cte in held.values():
        read_together = read_together.join(cte, text("1 = 1"))
    columns = [paid.c[0], *(cte.c[0] for cte in held.values())]
    paid_micros, *held_micros = conn.execute(select(*columns).select_from(read_together)).one()
    freed = {label: from_micros(micros) for label, micros in zip(held, held_micros, strict=True)}
    return from_micros(paid_micros), freed


def _budgets_counting(
    conn: Connection, hold: Reservation, *, is_sqlite: bool
) -> list[tuple[int, Budget, PeriodWindow, datetime]]:
    """The budgets ``hold`` counts in now, each with its window and the instant it is read at.

    Its per-run budgets are read for the run its holds are keyed by: read from the holder, a holder not
    in Airflow's ``dag/run/task/map_index`` form (a trial run outside Airflow) named no run. A budget gone
    since counts nothing.
    """
    h = schema.holds
    keys = conn.execute(select(h.c.period_key).where(h.c.reservation_id == hold.id)).scalars().all()
    run_keys = [key for key in keys if is_run_key(key)]
    dag_id, run_id = run_of_key(run_keys[0]) if run_keys else (None, None)
    now = utcnow()
    try:
        covering = applicable(conn, hold.scope, run_id, is_sqlite=is_sqlite, at=now, dag_id=dag_id)
    except BudgetNotFoundError:
        return []
    return [
        (budget_id, budget, window, now)
        for budget_id, budget, window in covering
        if budget.label in hold.budgets
    ]
