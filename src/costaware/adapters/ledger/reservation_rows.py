"""Reservation rows: one read as it stands (or locked), what entries paid from it, and closing it.

The primitives :mod:`.reservations` and :mod:`.reservation_queries` build on; split from
:mod:`.reservations`, which re-exports every name (callers import them from there).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from sqlalchemy import Connection, func, select

from costaware.adapters.ledger import schema
from costaware.core.budgets import Scope
from costaware.core.errors import ReservationNotFoundError
from costaware.core.ledger import Reservation, utcnow
from costaware.core.money import from_micros, to_micros


class HeldFor(NamedTuple):
    """The open hold of a holder a reserve takes (None: it has none), and whether it holds what is asked."""

    hold: Reservation | None
    as_asked: bool


def hold_for(
    conn: Connection,
    holder: str,
    now: datetime,
    scope: Scope,
    usd: Decimal,
    gpu_hours: Decimal,
    *,
    but: str | None = None,
) -> HeldFor:
    """The open hold of ``holder`` a reserve for ``usd`` and ``gpu_hours`` in ``scope`` keeps, or replaces.

    Of its open holds, oldest first, the first that holds what is asked (kept); else the oldest (replaced).
    A hold holds what is asked where it is in ``scope`` and still holds at least ``usd`` and ``gpu_hours``
    (more is kept). What it still holds is what it has not paid: a try that failed after billing $5 of a
    $6 hold left $1 held, and a gate run again for $6 that got it back let the next try pass the cap. More
    than one open hold: two gates of one task in scopes no budget shares, at once on PostgreSQL, before
    reserve took the holder's lock. The rule ``reserve(replace_unlike=True)`` and a spend gate's trigger
    share. ``but``: a hold of the holder's the new one replaces, which is not returned for it.
    """
    held = open_holds_of(conn, holder, now, but=but)
    for hold in held:
        if hold.scope == scope:
            unpaid_usd, unpaid_gpu_hours = unpaid(conn, hold)
            if unpaid_usd >= usd and unpaid_gpu_hours >= gpu_hours:
                return HeldFor(hold, True)
    return HeldFor(held[0] if held else None, False)


def open_holds_of(
    conn: Connection, holder: str, now: datetime, *, but: str | None = None
) -> list[Reservation]:
    """The open, unexpired reservations of exactly ``holder`` (not one it prefixes), oldest first.

    Oldest: by created_at, then id, as ``open_reservations`` lists them. ``but``: a reservation left out.
    """
    r = schema.reservations
    query = select(r.c.id).where(r.c.holder == holder, r.c.status == "open", r.c.expires_at > now)
    if but is not None:
        query = query.where(r.c.id != but)
    return [reservation(conn, rid) for rid in conn.execute(query.order_by(r.c.created_at, r.c.id)).scalars()]


def unpaid(conn: Connection, held: Reservation) -> tuple[Decimal, Decimal]:
    """What ``held`` still holds, in USD and GPU-hours: its amount less what entries paid from it (not < 0).

    A budget counts an open hold so (``budget_usage``, of the entries in its scope): a training's attempts
    are billed while its hold stays open.
    """
    paid_usd, paid_gpu_hours = paid(conn, held.id)
    return max(held.usd - paid_usd, Decimal(0)), max(held.gpu_hours - paid_gpu_hours, Decimal(0))


def paid(conn: Connection, reservation_id: str, *, but_entry: str | None = None) -> tuple[Decimal, Decimal]:
    """What the (actual, not estimated) entries paid from ``reservation_id``, in USD and GPU-hours.

    ``but_entry``: the ``entry_uid`` of one entry left out (what was paid before it).
    """
    paid = paid_in(conn, [reservation_id], but_entry=but_entry)
    return paid.get(reservation_id, (Decimal(0), Decimal(0)))


def paid_in(
    conn: Connection, reservation_ids: list[str], *, but_entry: str | None = None
) -> dict[str, tuple[Decimal, Decimal]]:
    """What the entries paid from each reservation so far (estimates aside), in USD and GPU-hours.

    Ids with none are left out; ``but_entry`` as :func:`paid`.
    """
    e = schema.entries
    query = (
        select(e.c.reservation_id, func.sum(e.c.usd_micros), func.sum(e.c.gpu_hours_micros))
        .where(e.c.reservation_id.in_(reservation_ids), e.c.estimated.is_(False))
        .group_by(e.c.reservation_id)
    )
    if but_entry is not None:
        query = query.where(e.c.entry_uid != but_entry)
    return {
        str(rid): (from_micros(usd or 0), from_micros(gpu_hours or 0))
        for rid, usd, gpu_hours in conn.execute(query)
    }


def close(conn: Connection, reservation_id: str, status: str, actual: Decimal | None) -> None:
    """Mark a reservation settled, released or replaced and stop its holds counting.

    A release (or a replacement) changes an open reservation only, and a settlement never overwrites
    another or a replacement: on PostgreSQL a release and a settlement of one reservation at once would
    otherwise both read it open, and the release, written last, would drop the settled amount.
    """
    r = schema.reservations
    # Nor a replaced one: its money is in the hold that replaced it, which is the one to settle.
    still = (
        r.c.status == "open"
        if status in ("released", "replaced")
        else r.c.status.not_in(("settled", "replaced"))
    )
    conn.execute(
        r.update()
        .where(r.c.id == reservation_id, still)
        .values(
            status=status,
            settled_at=utcnow(),
            settled_usd_micros=None if actual is None else to_micros(actual),
        )
    )
    close_holds(conn, reservation_id)


def close_holds(conn: Connection, reservation_id: str) -> None:
    """Stop the holds of ``reservation_id`` counting in their budgets."""
    h = schema.holds
    conn.execute(h.update().where(h.c.reservation_id == reservation_id).values(open=False))


def locked_reservation(conn: Connection, reservation_id: str, *, is_sqlite: bool) -> Reservation:
    """One reservation as it stands, its row locked to the commit (SQLite's write lock holds it already).

    Raises:
        ReservationNotFoundError: the ledger holds no reservation of that id.
    """
    if not is_sqlite:
        r = schema.reservations
        conn.execute(select(r.c.id).where(r.c.id == reservation_id).with_for_update()).all()
    return reservation(conn, reservation_id)


def reservation(conn: Connection, reservation_id: str) -> Reservation:
    """One reservation as it stands.

    Raises:
        ReservationNotFoundError: the ledger holds no reservation of that id.
    """
    row = (
        conn.execute(select(schema.reservations).where(schema.reservations.c.id == reservation_id))
        .mappings()
        .first()
    )
    if row is None:
        raise ReservationNotFoundError(f"the ledger holds no reservation {reservation_id!r}")
    return Reservation(
        id=row["id"],
        scope=Scope.parse(row["scope"]),
        usd=from_micros(row["usd_micros"]),
        gpu_hours=from_micros(row["gpu_hours_micros"]),
        holder=row["holder"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        status=row["status"],
        budgets=tuple(row["budgets"]),
        settled_usd=None if row["settled_usd_micros"] is None else from_micros(row["settled_usd_micros"]),
    )
