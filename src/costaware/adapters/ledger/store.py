"""``Ledger`` (``costaware.Ledger``): the cost ledger and budgets in a SQL database (SQLite or PostgreSQL).

A thin front: each method is one call into the module that owns the concept (``entries``, ``budgets``,
``reservations``, ``reports``); the connection and its transactions are ``engine.LedgerDatabase``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from costaware.adapters.ledger import (
    budgets,
    entries,
    migrate,
    regrowth,
    reports,
    reservation_settle,
    reservations,
)
from costaware.adapters.ledger.engine import LedgerDatabase, ledger_engine
from costaware.adapters.ledger.reservations import DEFAULT_RESERVATION_TTL
from costaware.core.budgets import Budget, Period, Scope
from costaware.core.ledger import BudgetUsage, LedgerEntry, ReportRow, Reservation
from costaware.settings import ledger_url

__all__ = ["Ledger"]


class Ledger(LedgerDatabase):
    """Cost entries, budgets and reservations in one database.

    Use ``Ledger.from_url("postgresql+psycopg2://...")`` or ``Ledger.from_url("sqlite:///ledger.db")``;
    the schema is created and versioned on first use.
    """

    # -- set-up -----------------------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str | None = None, *, create: bool = True, url_from: str | None = None) -> Ledger:
        """Open (and by default create) the ledger at ``url`` (default: ``costaware.settings.ledger_url()``).

        ``url_from``: where the URL was set, named by the error when it cannot be reached (see
        :class:`~costaware.adapters.ledger.engine.LedgerDatabase`).

        Raises:
            ConfigurationError: the URL is malformed or names a database costaware does not support.
            LedgerUnavailableError: the database cannot be reached.
        """
        ledger = cls(ledger_engine(url or ledger_url()), url_from=url_from)
        if create:
            ledger.create_schema()
        return ledger

    def create_schema(self) -> None:
        """Create missing tables and upgrade the schema to this release's; safe from many processes at once.

        Raises:
            ConfigurationError: a newer costaware wrote the ledger.
        """
        migrate.upgrade(self)

    # -- entries ----------------------------------------------------------------------------------

    def record(self, entry: LedgerEntry) -> bool:
        """Add one entry; recording the same ``entry_uid`` twice adds it once. Returns whether it was new."""
        with self.transaction() as conn:
            return entries.insert_entry(conn, entry)

    def entries(
        self, *, dag_id: str | None = None, run_id: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Raw entries, newest first, money as ``Decimal``."""
        return entries.entries(self, dag_id=dag_id, run_id=run_id, limit=limit)

    def entries_by_uid(self, uids: list[str]) -> list[dict[str, Any]]:
        """The entries with these ``entry_uid`` values (what recording one of them again would find)."""
        return entries.entries_by_uid(self, uids)

    def last_run_id(self, dag_id: str) -> str | None:
        """The run of ``dag_id`` with the most recent entry."""
        return entries.last_run_id(self, dag_id)

    # -- budgets ----------------------------------------------------------------------------------

    def set_budget(
        self,
        scope: str | Scope,
        period: str | Period,
        cap_usd: object,
        *,
        cap_gpu_hours: object | None = None,
        timezone: str = "UTC",
        actor: str = "costaware",
    ) -> Budget:
        """Create or replace the budget of (scope, period). Invalid input raises ``InvalidBudgetError``.

        The change goes to the audit trail in the same transaction: ``actor``, the old cap and the new one.
        """
        budget = Budget.create(scope, period, cap_usd, cap_gpu_hours, timezone)
        return budgets.set_budget(self, budget, actor=actor)

    def budgets(self) -> list[Budget]:
        return budgets.list_budgets(self)

    def delete_budget(
        self, scope: str | Scope, period: str | Period, *, actor: str = "costaware"
    ) -> Budget | None:
        """Delete the budget of (scope, period); the deleted budget, or None when there was none.

        Audited under ``actor``. The spend it counted stays in the ledger.

        Raises:
            ConfigurationError: an open reservation still holds money in it.
        """
        return budgets.delete_budget(self, scope, period, actor=actor)

    def usage(
        self,
        scope: str | Scope,
        *,
        at: datetime | None = None,
        run_id: str | None = None,
        dag_id: str | None = None,
        without: str | None = None,
    ) -> list[BudgetUsage]:
        """Where each budget that applies to ``scope`` stands now (or at ``at``).

        A per-run budget counts the run ``run_id`` of DAG ``dag_id`` (of any DAG without ``dag_id``).
        ``without``: the id of a reservation left out of what is reserved, as if given back: the room a
        ``reserve`` that replaces it (``replacing=``, or a holder's hold it replaces) is checked against.
        What entries paid from it stays spent.

        Raises:
            BudgetNotFoundError: no budget applies to the scope.
            ReservationNotFoundError: the ledger holds no reservation ``without`` (a typo, another ledger's).
        """
        return budgets.usage(self, scope, at=at, run_id=run_id, dag_id=dag_id, without=without)

    # -- reservations -----------------------------------------------------------------------------

    def reserve(
        self,
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
        """Set ``usd`` aside in every budget that covers ``scope``, or raise if any cap would be passed.

        With ``approved_by`` (a person who approved the overage) the caps are not checked, and the approval
        (who, ``approval`` details, the amount and each budget's standing) goes to the audit trail in the
        same transaction as the reservation.

        Atomic across processes: two workers racing for the last dollars cannot both get them.
        With ``holder`` set (e.g. ``dag/run/task/map_index``), asking again while that holder's
        reservation is open returns the same reservation, so a retried sensor does not reserve twice; two
        reserves of one holder at once (two gates of a task, in scopes no budget shares) take turns on the
        holder (a PostgreSQL advisory lock, SQLite's write lock), so the second finds the first one's hold.
        With ``replace_unlike`` too, that open reservation is returned only when it is in ``scope`` and still
        holds at least ``usd`` and ``gpu_hours`` (what entries paid from it aside, see ``unpaid``); otherwise
        it is replaced: released and a new one reserved in one transaction, the caps checked without the old
        one (a refusal keeps the old one as it was). A gate cleared and run again with a higher estimate, or
        another scope, or after a failed try billed part of the hold, otherwise passed holding less than it
        asked, or in budgets it never checked. One returned then counts until ``ttl`` from now at least
        (never shortened): kept with its old end, it lapsed minutes after the gate passed.
        A per-run budget holds it in the run ``run_id`` of DAG ``dag_id`` (give both: run ids such as
        ``scheduled__<date>`` repeat across DAGs).

        ``replacing``: the id of an open reservation of the same ``holder`` that this one takes the place
        of (a small hold for time spent before the amount was known): closed as ``replaced`` in the same
        transaction when this one is granted (never the hold a later bill settles: its money is in this one),
        left as it was when it is refused.

        Raises:
            BudgetExceededError: a covering budget has too little left; the message names it.
            BudgetNotFoundError: no budget covers ``scope``.
            ConfigurationError: ``replacing`` is another holder's reservation.
            ReservationNotFoundError: the ledger holds no reservation ``replacing``.
        """
        return reservations.reserve(
            self,
            scope,
            usd,
            gpu_hours=gpu_hours,
            holder=holder,
            run_id=run_id,
            dag_id=dag_id,
            ttl=ttl,
            purpose=purpose,
            approved_by=approved_by,
            approval=approval,
            replacing=replacing,
            replace_unlike=replace_unlike,
        )

    def grow(self, reservation_id: str, usd: object) -> Reservation:
        """Raise an open reservation toward ``usd`` as far as its budgets have room (never lower it).

        E.g. a task's ``max_usd`` above what its spend gate reserved: the reservation grows to the cap
        where the budgets hold it, else by what they have left, so the budgets still hold all the task may
        spend. It does not grow where a budget set after it was made covers its scope (it holds nothing
        there, so that budget would not count the growth). Returns the reservation as it now stands; compare
        its ``usd`` with what was asked.
        """
        return regrowth.grow(self, reservation_id, usd)

    def take_up_holds(self, holder: str, try_number: int) -> int:
        """Say that try ``try_number`` of ``holder``'s task took its open holds up; how many it marked.

        Call it before sizing the hold from what the ledger shows billed: a late bill of that same try then
        grows the hold back no more (:meth:`record_and_regrow`), one of an earlier try still does.
        """
        return regrowth.take_up(self, holder, try_number)

    def record_and_regrow(self, entry: LedgerEntry) -> regrowth.Regrowth:
        """Record ``entry`` paid from its open hold, and grow the hold back by what it paid, at once.

        For a try that failed and will be retried: one transaction under the budgets' locks, so no other
        run can reserve the room the entry freed before the hold takes it back; grown as :meth:`grow`
        grows, never past a cap. Returns whether the entry was new (written again, it grows nothing), the
        amount the hold was to grow to, the hold as it now stands (compare its ``usd``), why it was not
        grown at all where that was not the budgets' room (a budget set after it, a time zone changed), and
        what it had left unpaid before the entry (read in the same transaction), and whether it had expired
        (past its ttl: not grown, it counts nothing).
        """
        return regrowth.record_and_regrow(self, entry)

    def settle(
        self,
        reservation_id: str,
        actual_usd: object,
        *,
        entry: LedgerEntry | None = None,
        already_recorded: bool = False,
    ) -> Reservation:
        """Close a reservation with what was actually spent; ``entry`` (the actual cost) is recorded with it.

        Spend is the sum of the entries: without ``entry`` nothing counts against the budgets, so leave it
        out only when the cost was recorded already. A non-zero ``actual_usd`` with no ``entry``, where no
        entry was recorded with the hold's ``reservation_id`` either, logs a warning unless
        ``already_recorded`` says the cost is in the ledger. A second call changes nothing of the
        reservation, but its ``entry`` is recorded: it is money spent (a second live try of the task). To
        retry a settle that may have succeeded, pass the same entry (its ``entry_uid``): the ledger keeps one
        of each. A hold ``replaced`` by a newer one of its holder stays so (its money is in the newer one):
        ``entry`` is recorded, and a WARNING names the hold to settle instead.
        """
        return reservations.settle(
            self, reservation_id, actual_usd, entry=entry, already_recorded=already_recorded
        )

    def settle_with_entry(self, reservation_id: str, entry: LedgerEntry) -> bool:
        """:meth:`settle` the hold with ``entry`` (its ``usd`` what was spent); returns whether it was new.

        False: the ledger had the entry's ``entry_uid`` already and keeps that row; the hold is settled all
        the same. Told by the write itself, in the settle's transaction: a look-up before it could be
        answered wrong by another process writing the same entry in between.
        """
        settled = reservation_settle.settle_telling(self, reservation_id, entry.usd, entry=entry)
        return settled.entry_new

    def extend(self, reservation_id: str, until: datetime) -> Reservation:
        """Keep an open reservation counting until ``until``: a task that outlives its hold's time limit.

        A remote training waits for its job for hours, deferred; a hold that expired meanwhile would stop
        counting while the job still bills. Never shortens one; an expired one stays expired.
        """
        return reservations.extend(self, reservation_id, until)

    def release(self, reservation_id: str) -> Reservation:
        """Give a reservation's money back unspent (the task was skipped or never ran)."""
        return reservations.release(self, reservation_id)

    def release_hold(self, reservation_id: str, *, by_budget: bool = False) -> reservations.Released:
        """Release a reservation where it is still open, saying what that did (one transaction).

        Whether this call closed it (not one settled, released or replaced a moment before), what entries
        paid from it, and (``by_budget``) what each budget it counted in got back, read in the release's own
        transaction.

        Raises:
            ReservationNotFoundError: the ledger holds no reservation of that id.
        """
        return reservations.release_hold(self, reservation_id, by_budget=by_budget)

    def open_reservations(self, *, holder_prefix: str | None = None) -> list[Reservation]:
        """Open, unexpired reservations (optionally those whose holder starts with a prefix)."""
        return reservations.open_reservations(self, holder_prefix=holder_prefix)

    def open_holds_of(self, holder: str) -> list[Reservation]:
        """The open, unexpired reservations of exactly ``holder`` (not one it prefixes), oldest first."""
        return reservations.open_holds(self, holder)

    def held_for(
        self, holder: str, scope: str | Scope, usd: object, gpu_hours: object = 0
    ) -> reservations.HeldFor:
        """The open hold of ``holder`` a ``reserve(scope, usd, ..., replace_unlike=True)`` keeps or replaces.

        Of its open holds, oldest first, the first in ``scope`` still holding at least ``usd`` and
        ``gpu_hours`` unpaid (``as_asked``: kept), else the oldest (replaced); ``hold`` None: it has none.
        """
        return reservations.held_for(self, holder, scope, usd, gpu_hours)

    def hold_ends(self, budget_label: str) -> tuple[datetime, datetime] | None:
        """When the first and the last open hold in budget ``budget_label`` (``scope/period``) expire.

        None: no hold of it is open. One query, whatever else the ledger holds.
        """
        return reservations.hold_ends(self, budget_label)

    def hold_periods(self, reservation_id: str) -> dict[str, str]:
        """The period key each budget a reservation holds money in counts it under, by the budget's label.

        A per-run budget's key (``run@<dag>/<run>``) names the run and DAG it was reserved for.
        """
        return reservations.hold_periods(self, reservation_id)

    def paid_from(self, reservation_ids: list[str], *, gpu_hours: bool = False) -> dict[str, Decimal]:
        """What the entries paid from each reservation cost so far (ids with none are left out).

        ``gpu_hours``: the GPU-hours they paid instead of the dollars.
        """
        return reservations.paid_from(self, reservation_ids, gpu_hours=gpu_hours)

    def unpaid(self, reservation_id: str) -> tuple[Decimal, Decimal]:
        """What a reservation still holds, in USD and GPU-hours: its amount less what entries paid from it.

        A budget counts an open hold so, and a spend gate run again keeps its task's hold only where this
        is at least what it asks.
        """
        with self.reading() as conn:
            return reservations.unpaid(conn, reservations.reservation(conn, reservation_id))

    def reservation_to_settle(self, holder: str, tags: Mapping[str, str] | None = None) -> Reservation | None:
        """The reservation a finished task's cost settles: its open one, else one released for it meanwhile.

        A run can end, and give back what its tasks still hold, between a task reporting success and its
        listener recording the cost (the scheduler and the worker race); the cost still belongs to that
        reservation. Settling a released reservation records the cost and keeps nothing held. A hold
        ``replaced`` by a newer one (``reserve(replacing=...)``) is never it. ``tags``: the entry's, whose
        scope's hold comes first where the holder has more than one open.
        """
        return reservations.reservation_to_settle(self, holder, tags)

    def latest_reservation(self, holder: str) -> Reservation | None:
        """The newest reservation made for ``holder``, if any: open, settled, released, replaced or expired.

        E.g. a retried task finds the scope its spend gate reserved in, after its failed try settled it.
        """
        return reservations.latest_of(self, holder)

    def expire_stale(self) -> int:
        """Mark open reservations past their TTL as expired (they no longer count); return how many."""
        return reservations.expire_stale(self)

    # -- reporting --------------------------------------------------------------------------------

    def spent(
        self,
        scope: str | Scope = "*",
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        run_id: str | None = None,
    ) -> Decimal:
        """Actual USD spent by entries in ``scope`` from ``since`` (inclusive) to ``until`` (exclusive)."""
        return reports.spent(self, scope, since=since, until=until, run_id=run_id)

    def report(
        self,
        *,
        group_by: str = "task",
        since: datetime | None = None,
        until: datetime | None = None,
        dag_id: str | None = None,
        run_id: str | None = None,
        scope: str | Scope = "*",
        dag_ids: frozenset[str] | None = None,
    ) -> list[ReportRow]:
        """Spend per group, most expensive first.

        Args:
            group_by: ``dag``, ``task``, ``run``, ``trial``, ``kind``, ``market``, ``cause``, ``outcome``
                or ``tag:<name>``.
            since: Entries incurred at or after this instant.
            until: Entries incurred before this instant.
            dag_id: Only this DAG.
            run_id: Only this DAG run.
            scope: Only entries with these tags, e.g. ``project=churn``.
            dag_ids: Only these DAGs (those the asking user may read).
        """
        return reports.report(
            self,
            group_by=group_by,
            since=since,
            until=until,
            dag_id=dag_id,
            run_id=run_id,
            scope=scope,
            dag_ids=dag_ids,
        )
