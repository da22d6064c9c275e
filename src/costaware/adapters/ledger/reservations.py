"""Reservations: money set aside in every covering budget before a task runs, settled or released after.

A reservation checks and holds its amount inside one write transaction that holds the lock (SQLite's
database lock, PostgreSQL's row locks on the covering budgets), so two workers racing for the last dollars
cannot both get them; one with a holder takes the holder's advisory lock first on PostgreSQL, so two of one
holder in scopes no budget shares cannot both make a hold. Each (reservation, budget) pair is a row of
``costaware_holds``: a budget's usage is a sum over its open holds.

A reservation row's primitives (read, lock, close, what was paid from it) are in :mod:`.reservation_rows`,
the read-only questions (open holds, the one to settle) in :mod:`.reservation_queries`, ``settle`` and its
warnings in :mod:`.reservation_settle`, ``release`` and ``release_hold`` in :mod:`.reservation_freeing`:
every name is importable from here, where callers import it.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, select

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.audit import append_audit
from costaware.adapters.ledger.budgets import applicable, budget_usage
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.adapters.ledger.reservation_freeing import Released as Released
from costaware.adapters.ledger.reservation_freeing import release as release
from costaware.adapters.ledger.reservation_freeing import release_hold as release_hold
from costaware.adapters.ledger.reservation_queries import held_for as held_for
from costaware.adapters.ledger.reservation_queries import hold_ends as hold_ends
from costaware.adapters.ledger.reservation_queries import hold_periods as hold_periods
from costaware.adapters.ledger.reservation_queries import latest_of as latest_of
from costaware.adapters.ledger.reservation_queries import open_holds as open_holds
from costaware.adapters.ledger.reservation_queries import open_reservations as open_reservations
from costaware.adapters.ledger.reservation_queries import paid_from as paid_from
from costaware.adapters.ledger.reservation_queries import reservation_to_settle as reservation_to_settle
from costaware.adapters.ledger.reservation_rows import HeldFor as HeldFor
from costaware.adapters.ledger.reservation_rows import close as close
from costaware.adapters.ledger.reservation_rows import close_holds as close_holds
from costaware.adapters.ledger.reservation_rows import hold_for as hold_for
from costaware.adapters.ledger.reservation_rows import locked_reservation as locked_reservation
from costaware.adapters.ledger.reservation_rows import open_holds_of as open_holds_of
from costaware.adapters.ledger.reservation_rows import paid as paid
from costaware.adapters.ledger.reservation_rows import paid_in as paid_in
from costaware.adapters.ledger.reservation_rows import reservation as reservation
from costaware.adapters.ledger.reservation_rows import unpaid as unpaid
from costaware.adapters.ledger.reservation_settle import settle as settle
from costaware.core.budgets import Scope, check_cap
from costaware.core.errors import BudgetExceededError, ConfigurationError, ReservationNotFoundError
from costaware.core.ledger import Reservation, utcnow
from costaware.core.money import format_usd_exact, parse_gpu_hours, parse_usd, to_micros

log = logging.getLogger(__name__)

DEFAULT_RESERVATION_TTL = timedelta(hours=6)


def reserve(
    ledger: LedgerDatabase,
    scope: str | Scope,
    usd: object,
    *,
    gpu_hours: object = 0,
    holder: str | None = None,
    run_id: str | None = None,
    dag_id: str | None = None,
    ttl: timedelta = DEFAULT_RESERVATION_TTL,
    purpose: str = "the next task",
    approved_by: str | None = None,
    approval: dict[str, Any] | None = None,
    replacing: str | None = None,
    replace_unlike: bool = False,
) -> Reservation:
    """Set ``usd`` aside in every budget that covers ``scope``; see ``Ledger.reserve``."""
    wanted = Scope.given(scope, what="reservation scope")
    amount = parse_usd(usd, name="reservation amount")
    gpu = parse_gpu_hours(gpu_hours, name="reserved GPU-hours")
    if ttl <= timedelta(0):
        raise ConfigurationError(f"reservation ttl must be positive, got {ttl}")
    now = utcnow()
    try:
        expires_at = now + ttl
    except OverflowError:  # said as the ttl it is, not Python's "date value out of range"
        raise ConfigurationError(
            f"reservation ttl {ttl} would end after the year 9999: give a shorter one (the default is "
            f"{DEFAULT_RESERVATION_TTL}; `Ledger.extend` keeps a hold counting longer)"
        ) from None
    r, h = schema.reservations, schema.holds

    def held_already(conn: Connection) -> HeldFor:
        """The holder's open hold this reserve looks at; ``as_asked``: it is returned as it stands."""
        if not holder:
            return HeldFor(None, False)
        if not replace_unlike:
            # Unless asked to replace it, the holder's (oldest) open hold is returned, whatever it holds.
            held = open_holds_of(conn, holder, now, but=replacing)
            return HeldFor(held[0], True) if held else HeldFor(None, False)
        return hold_for(conn, holder, now, wanted, amount, gpu, but=replacing)

    def returned(conn: Connection, existing: Reservation) -> Reservation:
        # Kept for a gate run again, it holds for the ttl asked now: with its old end it passed at 03:59
        # holding until 04:00, and its task ran with nothing held.
        return _held_until(conn, existing, expires_at, now) if replace_unlike else existing

    with ledger.transaction() as conn:
        if holder:
            # Before looking for the holder's open hold, and held to the commit: two gates of one task in
            # scopes no budget shares lock no budget row in common, so on PostgreSQL both read "none" and
            # each wrote a hold. The second now waits here and finds the first one's.
            ledger.advisory_lock(conn, holder_lock_key(holder))
        existing, kept = held_already(conn)
        if existing is not None and kept:
            return returned(conn, existing)
        # The periods at the reservation's own instant: a hold made at a period's last moment is keyed as
        # its created_at says (grow finds its window from it).
        covering = applicable(
            conn, wanted, run_id, is_sqlite=ledger.is_sqlite, lock=True, at=now, dag_id=dag_id
        )
        if replacing is not None:
            # Given back in this transaction: a refusal below rolls it back, so the money it held for time
            # already spent stays held until that time is billed.
            _release_replaced(conn, replacing, holder)
        if existing is not None:
            # Given back in this transaction, so the caps below are checked without it; a refusal rolls
            # the release back with the rest, and the hold stays as it was. "replaced", not "released": a
            # bill after the new hold lapsed must not be settled against this one.
            close(conn, existing.id, "replaced", None)
        standing = []
        refusals: list[tuple[Any, BudgetExceededError]] = []
        for budget_id, budget, window in covering:
            usage = budget_usage(conn, budget_id, budget, window, now)
            if approved_by is None:
                try:
                    check_cap(usage, amount, gpu, purpose)
                except BudgetExceededError as e:
                    refusals.append((usage, e))
            standing.append(usage)
        if refusals:
            raise _all_refusals(refusals)
        reservation_id = uuid.uuid4().hex
        if approved_by is not None:
            append_audit(
                conn,
                actor=approved_by,
                action="approval",
                target=holder or str(wanted),
                details={
                    **(approval or {}),
                    "reservation_id": reservation_id,
                    "usd": str(amount),
                    "budgets": [
                        {
                            "budget": u.label,
                            "cap_usd": str(u.cap_usd),
                            "committed_usd": str(u.spent_usd + u.reserved_usd),
                        }
                        for u in standing
                    ],
                },
            )
        labels = [b.label for _, b, _ in covering]
        conn.execute(
            r.insert().values(
                id=reservation_id,
                scope=str(wanted),
                holder=holder,
                usd_micros=to_micros(amount),
                gpu_hours_micros=to_micros(gpu),
                status="open",
                created_at=now,
                expires_at=expires_at,
                budgets=labels,
            )
        )
        conn.execute(
            h.insert(),
            [
                {
                    "reservation_id": reservation_id,
                    "budget_id": budget_id,
                    "period_key": window.key,
                    "usd_micros": to_micros(amount),
                    "gpu_hours_micros": to_micros(gpu),
                    "expires_at": expires_at,
                    "open": True,
                }
                for budget_id, _, window in covering
            ],
        )
        names = ", ".join(f"{b.label} ({w.key})" for _, b, w in covering)  # as BudgetUsage.name
        log.info("reserved %s in %s for %s", format_usd_exact(amount), names, purpose)
        if existing is not None:
            log.info(
                "it replaces the open hold %s of %s (%s in %s): it has less than asked left unpaid, or is in "
                "another scope",
                existing.id,
                holder,
                format_usd_exact(existing.usd),
                existing.scope,
            )
        return reservation(conn, reservation_id)


def holder_lock_key(holder: str) -> int:
    """The advisory lock key of ``holder``: the same in every process (Python's ``hash`` of a str is not).

    A signed 64-bit integer, PostgreSQL's ``bigint``. Two holders sharing a key only wait for each other.
    """
    digest = hashlib.blake2b(holder.encode(), digest_size=8, person=b"costaware-hold").digest()
    return int.from_bytes(digest, "big", signed=True)


def _held_until(conn: Connection, held: Reservation, until: datetime, now: datetime) -> Reservation:
    """``held`` counting until ``until`` where it ended sooner (never shortened), in the open transaction.

    One closed or ended by ``now`` is returned as it stands: counting its money again would take it back
    without a cap check.
    """
    if held.status != "open" or held.expires_at <= now or until <= held.expires_at:
        return held
    r, h = schema.reservations, schema.holds
    conn.execute(
        r.update()
        .where(r.c.id == held.id, r.c.status == "open", r.c.expires_at > now)
        .values(expires_at=until)
    )
    still_open = and_(h.c.reservation_id == held.id, h.c.open.is_(True))
    conn.execute(h.update().where(still_open).values(expires_at=until))
    return reservation(conn, held.id)


def _release_replaced(conn: Connection, replacing: str, holder: str | None) -> None:
    """Close the hold a new reservation of the same holder replaces (closed already: nothing to do).

    Raises:
        ConfigurationError: ``replacing`` is another holder's: its money is not this reservation's to free.
        ReservationNotFoundError: the ledger never held ``replacing`` (a typo, another ledger's id): the new
            reservation would hold its money beside the one meant, counted twice.
    """
    try:
        replaced = reservation(conn, replacing)
    except ReservationNotFoundError:
        raise ReservationNotFoundError(
            f"reservation {replacing!r}, which the new one of {holder!r} would replace, is not in this "
            "ledger: give the id this ledger's reserve returned for that holder's hold, or reserve without "
            "replacing"
        ) from None
    if replaced.holder != holder:
        raise ConfigurationError(
            f"reservation {replacing} is held by {replaced.holder!r}, not {holder!r}: a reservation replaces "
            "only a hold of its own holder; reserve without replacing it"
        )
    # A status of its own: reservation_to_settle takes a released hold for a bill that came after its release,
    # and took this one, whose money the new hold carries, for a trial that outran its lease (a false ERROR).
    close(conn, replacing, "replaced", None)


def _all_refusals(refusals: list[tuple[Any, BudgetExceededError]]) -> BudgetExceededError:
    """The first budget's refusal, naming the others the amount would pass too.

    Naming only the first, a person raised its cap, ran again, and was refused by the next.
    """
    first = refusals[0][1]
    if len(refusals) == 1:
        return first
    others = ", ".join(f"'{usage.name}'" for usage, _ in refusals[1:])
    also = f"it would pass {others} too: raise those caps as well"
    return BudgetExceededError(
        f"{first}; {also}",
        # A wait ends only when every refusing budget can renew.
        renews=all(e.renews for _, e in refusals),
        scope=first.scope,
        spent_usd=first.spent_usd,
        cap_usd=first.cap_usd,
        needed_usd=first.needed_usd,
        summary=f"{first.summary}\n  also:     {also}",
    )


def extend(ledger: LedgerDatabase, reservation_id: str, until: datetime) -> Reservation:
    """Keep an open reservation counting until ``until`` (never shortened); see ``Ledger.extend``.

    One that has expired already is returned as it stands: its money stopped counting, and counting it
    again would take it back without a cap check.
    """
    with ledger.transaction() as conn:
        return _held_until(conn, reservation(conn, reservation_id), until, utcnow())


def expire_stale(ledger: LedgerDatabase) -> int:
    """Mark open reservations past their TTL as expired (they no longer count); return how many."""
    r, h = schema.reservations, schema.holds
    now = utcnow()
    with ledger.transaction() as conn:
        stale = [
            row[0] for row in conn.execute(select(r.c.id).where(r.c.status == "open", r.c.expires_at <= now))
        ]
        if stale:
            # Checked again as each row is written: on PostgreSQL a settlement, release or extension that
            # committed after the read above was overwritten (a settled hold became 'expired', an extended
            # one stopped counting while its job still billed).
            still_stale = and_(r.c.id.in_(stale), r.c.status == "open", r.c.expires_at <= now)
            expired = conn.execute(r.update().where(still_stale).values(status="expired").returning(r.c.id))
            stale = [row[0] for row in expired]
        if stale:
            conn.execute(h.update().where(h.c.reservation_id.in_(stale)).values(open=False))
    if stale:
        log.warning("expired %d reservation(s) left open past their TTL", len(stale))
    return len(stale)
