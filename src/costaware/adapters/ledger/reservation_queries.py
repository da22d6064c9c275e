"""Read-only questions about reservations: which are open, what they hold and paid, which one to settle.

Split from :mod:`.reservations`, which re-exports every name (callers import them from there).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal

from sqlalchemy import and_, func, select

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.budgets import budget_from_row
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.adapters.ledger.reservation_rows import HeldFor, hold_for, open_holds_of, paid_in, reservation
from costaware.core.budgets import Scope
from costaware.core.ledger import Reservation, utcnow
from costaware.core.money import parse_gpu_hours, parse_usd


def open_reservations(ledger: LedgerDatabase, *, holder_prefix: str | None = None) -> list[Reservation]:
    """Open, unexpired reservations (optionally those whose holder starts with a prefix)."""
    r = schema.reservations
    query = select(r.c.id).where(r.c.status == "open", r.c.expires_at > utcnow())
    if holder_prefix:
        query = query.where(r.c.holder.startswith(holder_prefix, autoescape=True))
    with ledger.reading() as conn:
        ids = [row[0] for row in conn.execute(query.order_by(r.c.created_at, r.c.id))]
        return [reservation(conn, rid) for rid in ids]


def hold_ends(ledger: LedgerDatabase, budget_label: str) -> tuple[datetime, datetime] | None:
    """When the first and the last open, unexpired hold in the budget ``scope/period`` expire (one query).

    None: no hold of it is open.
    """
    scope, _, period = budget_label.rpartition("/")
    t, h = schema.budgets, schema.holds
    query = (
        select(func.min(h.c.expires_at), func.max(h.c.expires_at))
        .select_from(h.join(t, t.c.id == h.c.budget_id))
        .where(t.c.scope == scope, t.c.period == period, h.c.open.is_(True), h.c.expires_at > utcnow())
    )
    with ledger.reading() as conn:
        first, last = conn.execute(query).one()
    return None if first is None or last is None else (first, last)


def hold_periods(ledger: LedgerDatabase, reservation_id: str) -> dict[str, str]:
    """The period key each budget ``reservation_id`` holds money in counts it under, by the budget's label.

    A per-run budget's key names the run and DAG the hold was reserved for (``run@<dag>/<run>``), whatever
    its holder's form: a holder outside Airflow's ``dag/run/task/map_index`` (a trial's own) names none.
    """
    h, b = schema.holds, schema.budgets
    query = (
        select(b, h.c.period_key)
        .select_from(h.join(b, b.c.id == h.c.budget_id))
        .where(h.c.reservation_id == reservation_id)
        .order_by(b.c.id)
    )
    with ledger.reading() as conn:
        rows = conn.execute(query).mappings().all()
    return {budget_from_row(row).label: row["period_key"] for row in rows}


def paid_from(
    ledger: LedgerDatabase, reservation_ids: list[str], *, gpu_hours: bool = False
) -> dict[str, Decimal]:
    """What the entries paid from each reservation cost so far (estimates aside); ids with none are left out.

    A budget counts an open hold less this: a training's attempts are billed while its hold stays open.
    ``gpu_hours``: the GPU-hours they paid instead of the dollars.
    """
    with ledger.reading() as conn:
        paid = paid_in(conn, reservation_ids)
    return {rid: usd_and_gpu_hours[1 if gpu_hours else 0] for rid, usd_and_gpu_hours in paid.items()}


def reservation_to_settle(
    ledger: LedgerDatabase, holder: str, tags: Mapping[str, str] | None = None
) -> Reservation | None:
    """The reservation a finished task's cost settles: its open one, else one released for it meanwhile.

    A hold ``replaced`` by a newer one of the holder is never it: its money went to the newer hold. Of two
    open holds of one holder (two gates in scopes no budget shares), the one whose scope covers the entry's
    ``tags`` comes first, then the oldest, as ``reserve`` and the gate's trigger take it (the newest was
    taken: the entry settled the other gate's hold, outside its scope, and left its own held).
    """
    r = schema.reservations
    released = and_(r.c.holder == holder, r.c.status == "released")
    newest_released_first = select(r.c.id).where(released).order_by(r.c.created_at.desc(), r.c.id)
    with ledger.reading() as conn:
        for found in (
            open_holds_of(conn, holder, utcnow()),
            [reservation(conn, rid) for rid in conn.execute(newest_released_first).scalars()],
        ):
            if found:
                covering = (hold for hold in found if tags is not None and hold.scope.matches(tags))
                return next(covering, found[0])
    return None


def open_holds(ledger: LedgerDatabase, holder: str) -> list[Reservation]:
    """The open, unexpired reservations of exactly ``holder``, oldest first; see ``Ledger.open_holds_of``."""
    with ledger.reading() as conn:
        return open_holds_of(conn, holder, utcnow())


def held_for(
    ledger: LedgerDatabase, holder: str, scope: str | Scope, usd: object, gpu_hours: object
) -> HeldFor:
    """The open hold of ``holder`` a reserve for ``usd`` in ``scope`` keeps or replaces (:func:`hold_for`)."""
    wanted = Scope.given(scope, what="reservation scope")
    amount = parse_usd(usd, name="reservation amount")
    gpu = parse_gpu_hours(gpu_hours, name="reserved GPU-hours")
    with ledger.reading() as conn:
        return hold_for(conn, holder, utcnow(), wanted, amount, gpu)


def latest_of(ledger: LedgerDatabase, holder: str) -> Reservation | None:
    """The newest reservation made for ``holder``, whatever its status (None: never one)."""
    r = schema.reservations
    query = select(r.c.id).where(r.c.holder == holder).order_by(r.c.created_at.desc()).limit(1)
    with ledger.reading() as conn:
        found = conn.execute(query).first()
        return None if found is None else reservation(conn, found[0])
