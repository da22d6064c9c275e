"""The bill of a budgeted search (:mod:`costaware.training.search`): what it used, settled rung by rung.

Each settlement bills the time since the previous one and brings what was billed up to the time used so far
rounded up to the micro-dollar, so the rounding is carried, never dropped; the search's own bookkeeping (its
setup before the first rung, :meth:`SearchBilling.bill_setup`, and the time after the last rung,
:meth:`SearchBilling.settle_tail`) is paid from a hold of its own, reserved when the search starts
(:meth:`SearchBilling.hold_bookkeeping`), so that no rung can spend the money it needs. A measured hold
(``slack_seconds=None``) is reserved once the setup ran, at its time x ``safety_factor``, and grown after
each rung's bill to the bookkeeping measured between rungs (:meth:`SearchBilling.grow_hold`); where the
budgets cannot hold that, the stop names the one with the least left
(:meth:`SearchBilling.raise_the_tightest`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from costaware.core.errors import BudgetExceededError
from costaware.core.ledger import Kind, LedgerEntry, Market, Reservation, clipped_note, compute_cost, utcnow
from costaware.core.money import MICRO_USD, format_usd_exact
from costaware.core.tuning import usd_for_seconds

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.budgets import Scope
    from costaware.core.ledger import BudgetUsage

#: How long the bookkeeping hold counts; before a rung it is renewed where less than an hour is left.
BOOKKEEPING_HOLD_TTL = timedelta(hours=6)
BOOKKEEPING_HOLD_RENEWED_WITHIN = timedelta(hours=1)


def tightest_budget(ledger: Ledger, budget_scope: Scope, run: str, dag_id: str) -> BudgetUsage | None:
    """The budget over ``budget_scope`` with the least left, read in the search's run ``run`` of ``dag_id``.

    Raises:
        BudgetNotFoundError: no budget covers the scope (before the search's own is set).
    """
    standing = ledger.usage(budget_scope, run_id=run, dag_id=dag_id)
    return min(standing, key=lambda u: u.left_usd, default=None)


class SearchBilling:
    """The search's settled time and money so far, and the settlements that bring them up to date.

    Args:
        ledger: Where the reservations are settled and the compute entries written.
        budget_scope: The search's budget (the tail's reservation is taken from it).
        tags: The ledger tags of every entry.
        usd_per_hour: Price of one second of this process, per hour.
        owner: ``(dag_id, task_id)`` of the ledger entries.
        run: The search's run id in the ledger.
        meter: The clock that measures what the search uses.
        started: ``meter()`` when the search started (the first settlement bills from then).
        measured: The hold is measured (``slack_seconds=None``), not a given number of seconds.
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        budget_scope: Scope,
        tags: Mapping[str, str],
        usd_per_hour: Decimal,
        owner: tuple[str, str],
        run: str,
        meter: Callable[[], float],
        started: float,
        measured: bool = False,
    ) -> None:
        self.ledger = ledger
        self.budget_scope = budget_scope
        self.tags = dict(tags)
        self.usd_per_hour = usd_per_hour
        self.owner = owner
        self.run = run
        self.meter = meter
        self.last_bill = started
        self.billed_seconds = 0.0  # the time settled so far, and what it was settled with
        self.billed_usd = Decimal(0)
        #: The money set aside for the bookkeeping (None: none could be reserved, or settled).
        self.hold: Reservation | None = None
        #: What the hold has paid already (the setup), while it stays open for the time after the last rung.
        self.hold_paid = Decimal(0)
        self._measured = measured

    @property
    def measured(self) -> bool:
        """The hold is measured (``slack_seconds=None``): sized from the bookkeeping's time, grown with it."""
        return self._measured

    @property
    def held_usd(self) -> Decimal:
        """What the bookkeeping hold still sets aside (no rung may spend it)."""
        return max(self.hold.usd - self.hold_paid, Decimal(0)) if self.hold is not None else Decimal(0)

    def hold_bookkeeping(self, seconds: float) -> str:
        """Reserve ``seconds`` of the search's own bookkeeping before any rung; returns the refusal, or "".

        Reserved only at the end, the time after the last rung found the cap spent by the rungs and was billed
        past it. Held from the start, every rung is reserved from what is left beside it.
        """
        usd = (
            self.measured_hold_usd(seconds) if self.measured else usd_for_seconds(seconds, self.usd_per_hour)
        )
        what = f"measured, {seconds:.3f} s" if self.measured else f"slack_seconds={seconds:g}"
        try:
            self.hold = self.ledger.reserve(
                self.budget_scope,
                usd,
                holder=f"search/{self.run}/tail",
                run_id=self.run,
                dag_id=self.owner[0],
                ttl=BOOKKEEPING_HOLD_TTL,
                purpose=f"the search's own bookkeeping ({what})",
            )
        except BudgetExceededError as e:
            return f"no rung was run: {e}"
        return ""

    def measured_hold_usd(self, seconds: float) -> Decimal:
        """What a measured hold of ``seconds`` sets aside: at least a micro-dollar (a meter at rest)."""
        return max(usd_for_seconds(seconds, self.usd_per_hour), MICRO_USD)

    def grow_hold(self, seconds: float) -> str:
        """Grow the hold, from what the budgets have left, to set aside ``seconds``; returns "" or the stop.

        The bookkeeping between rungs (Optuna's ask and tell, the ledger's writes) is what the time after the
        last rung takes too: where it slows down, a hold measured on the faster setup would leave that time
        unpaid, spent by the rungs. Where the budgets cannot hold it, the stop says so: no rung is run.
        """
        needed = usd_for_seconds(seconds, self.usd_per_hour)
        if self.hold is None or self.held_usd >= needed:
            return ""
        self.hold = self.ledger.grow(self.hold.id, self.hold_paid + needed)
        if self.held_usd >= needed:
            return ""
        return (
            f"no rung was run that would leave the search's own bookkeeping unpaid: measured between rungs "
            f"x safety_factor it now takes {seconds:.3f} s ({format_usd_exact(needed)}), and the budgets "
            f"could hold only {format_usd_exact(self.held_usd)} for it; {self.raise_the_tightest()}"
        )

    def tightest(self) -> BudgetUsage | None:
        """The budget over the search with the least left: its own, or a project's over its scope.

        Read in the search's run, as its holds are taken: a budget of period ``run`` over the scope caps
        each search, and read without the run it was left out (a spend past it read as within the cap).
        """
        return tightest_budget(self.ledger, self.budget_scope, self.run, self.owner[0])

    def is_own(self, usage: BudgetUsage) -> bool:
        """Is ``usage`` the search's own budget (set from ``cap_usd``, deleted when the search ends)?"""
        return usage.label.startswith(f"{self.budget_scope}/")

    def the_budget_passed(self, tightest: BudgetUsage | None = None) -> str:
        """The budget the spend passed, as said: "the cap" (the search's own), or the project's named.

        ``tightest``: that budget where the caller read it already (:meth:`past_cap`), else it is read.
        """
        tightest = tightest or self.tightest()
        if tightest is None or self.is_own(tightest):
            return "the cap"
        return f"budget '{tightest.name}' over the search's scope"

    def raise_the_tightest(self) -> str:
        """What to raise where the money ran out: ``cap_usd``, or the project's budget that has less left.

        A project budget over the scope that refused the hold is not raised by a larger ``cap_usd``.
        """
        tightest = self.tightest()
        if tightest is None or self.is_own(tightest):
            return "raise cap_usd"
        return (
            f"budget '{tightest.name}' over the search's scope has {format_usd_exact(tightest.left_usd)} "
            "left: raise it with `costaware budget set`"
        )

    def reserve_rung(self, number: int, rung: int, seconds: float) -> tuple[str, int, int]:
        """Reserve ``seconds`` for rung ``rung`` of trial ``number``: ``(its reservation, number, rung)``.

        Raises:
            BudgetExceededError: a budget over the search's scope has too little left.
        """
        reservation = self.ledger.reserve(
            self.budget_scope,
            usd_for_seconds(seconds, self.usd_per_hour),
            holder=f"search/{self.run}/{number}/{rung}",
            run_id=self.run,  # a per-run budget caps one search
            dag_id=self.owner[0],
            ttl=timedelta(seconds=max(2 * seconds, 60.0)),
            purpose=f"rung {rung} of trial {number}",
        )
        return (reservation.id, number, rung)

    def bill_setup(self, now: float) -> None:
        """Bill the time before the first rung (the budget, the study, the first proposal) from the hold.

        Reserved with the first rung, it made that reservation more than the least cap named leaves beside
        the hold, so a search given that cap ran no rung. Paid from the hold, which stays open for the rest.
        """
        if self.hold is None or now <= self.last_bill:
            return  # no time used (a meter that moves only as models train)
        self.bill(self.hold.id, "setup", "the search's setup before its first rung", now, settle=False)

    def past_cap(self) -> tuple[Decimal, str]:
        """How far the spend is past the tightest budget over the search (0 or less: within them all).

        With that budget as :meth:`the_budget_passed` says it: one read of the budgets serves both.
        """
        tightest = self.tightest()
        return (-tightest.left_usd if tightest else Decimal(0)), self.the_budget_passed(tightest)

    def keep_hold(self) -> None:
        """Keep the bookkeeping hold counting for as long as the search runs (it may run for days)."""
        if self.hold is not None and self.hold.expires_at - utcnow() < BOOKKEEPING_HOLD_RENEWED_WITHIN:
            self.hold = self.ledger.extend(self.hold.id, utcnow() + BOOKKEEPING_HOLD_TTL)

    def owed(self, now: float) -> Decimal:
        """What settles the time up to ``now``: the total to date rounded up, less what was settled."""
        return (
            usd_for_seconds(self.billed_seconds + (now - self.last_bill), self.usd_per_hour) - self.billed_usd
        )

    def bill(
        self,
        reservation_id: str | None,
        label: str,
        note: str,
        now: float | None = None,
        *,
        outcome: str = "success",
        settle: bool = True,
    ) -> float:
        """Settle the reservation with the seconds used since the last settlement; returns them.

        ``outcome`` is ``failed`` for a rung that raised or scored no number: its time is billed all the
        same, under the outcome reports and the docs give failed work.

        The USD brings the search's settled total up to all the time used so far, rounded up to the
        micro-dollar: rounding each settlement on its own would drop up to half a micro-dollar every time,
        as much as a short rung costs. With no reservation (none could be taken) the entry is recorded
        alone: the time was used, and a bill left out is money that no budget sees. ``settle`` False: the
        entry is paid from the reservation, which stays open.
        """
        now = self.meter() if now is None else now
        seconds = now - self.last_bill
        usd = self.owed(now)
        hours, _ = compute_cost(seconds, self.usd_per_hour)
        entry = LedgerEntry(
            dag_id=self.owner[0],
            run_id=self.run,
            task_id=self.owner[1],
            trial=label,
            kind=Kind.COMPUTE,
            usd=usd,
            instance_type="local",
            region="local",
            market=Market.ON_DEMAND,
            quantity=hours,
            unit_price_usd=self.usd_per_hour,
            tags=dict(self.tags),
            outcome=outcome,
            price_source="given",
            note=clipped_note(note),
            reservation_id=reservation_id,
        )
        if reservation_id is None or not settle:
            self.ledger.record(entry)
            if reservation_id is not None and self.hold is not None and reservation_id == self.hold.id:
                self.hold_paid += usd  # paid from the hold, which stays open for the time after the last rung
        else:
            # The hold's total: what it paid before (the setup) and now.
            paid_before = self.hold_paid if self.hold is not None and reservation_id == self.hold.id else 0
            self.ledger.settle(reservation_id, usd + paid_before, entry=entry)
        # Moved on once written: a write that failed leaves these seconds to the next bill.
        self.billed_seconds += seconds
        self.billed_usd += usd
        self.last_bill = now
        return seconds

    def settle_tail(
        self, stop: str, *, label: str = "tail", what: str = "bookkeeping after the last rung"
    ) -> str:
        """Settle the time after the last rung on the bookkeeping hold; returns the stop note.

        ``label`` and ``what`` name the entry: a search refused once its setup ran bills that setup so.

        A tail longer than the hold grows it as far as the cap has room. Only what is past both (the
        bookkeeping ran longer than ``slack_seconds`` and the cap was spent to the micro-dollar) is billed
        past the cap, as a rung that ran long is, and the stop note says so: the time was used, and a bill
        left out is money that no budget sees. With no hold (none could be reserved), the tail is reserved
        now, else recorded past the cap.
        """
        now = self.meter()
        usd = self.owed(now)
        hold = self.hold
        if hold is not None:
            if usd <= 0:  # the rounding carried so far covers it
                if self.hold_paid > 0:  # the setup's entry counts already
                    self.ledger.settle(hold.id, self.hold_paid, already_recorded=True)
                else:
                    self.ledger.release(hold.id)
                self.hold = None
                return stop
            if usd > self.held_usd:
                self.hold = hold = self.ledger.grow(hold.id, self.hold_paid + usd)
            beyond_hold = usd > self.held_usd
            past_hold = usd - self.held_usd  # what the hold, grown as far as there was room, did not pay
            seconds = self.bill(hold.id, label, what, now)
            self.hold = None
            # Said from the budget as settled: a setup longer than slack_seconds left the hold "overdrawn"
            # and read as past the cap where the cap still had room.
            # The budget passed: the search's own (its cap), or a project's over its scope, named.
            over, passed = self.past_cap()
            if over <= 0:
                return stop
            if beyond_hold and self.measured:
                # Only what these seconds took past the hold is theirs: a first making or a rung billed past
                # its reservation before them passed the budget already (its warning says by how much).
                theirs = min(over, past_hold)
                in_all = format_usd_exact(over)
                earlier = f"; the spend is {in_all} past {passed} in all (the warnings name the rest)"
                return (
                    f"{stop}; the last {seconds:.3f} s ({what}) were billed past {passed} by "
                    f"{format_usd_exact(theirs)}: they took longer than the hold measured for them, and "
                    f"{passed} had no room left; give slack_seconds where the bookkeeping's time swings"
                    f"{earlier if over > theirs else ''}"
                )
            if beyond_hold:
                return (
                    f"{stop}; the last {seconds:.3f} s (bookkeeping after the last rung) were billed past "
                    f"{passed} by {format_usd_exact(over)}: they took longer than slack_seconds, "
                    f"and {passed} had no room left; raise slack_seconds"
                )
            # Within its hold, yet a rung that ran past its reservation may have spent the hold's money.
            return (
                f"{stop}; the spend is {format_usd_exact(over)} past {passed}: a rung ran past its "
                "reservation into the money held for the bookkeeping (the warnings name it)"
            )
        if usd <= 0:
            return stop
        try:
            reservation = self.ledger.reserve(
                self.budget_scope,
                usd,
                holder=f"search/{self.run}/tail",
                run_id=self.run,
                dag_id=self.owner[0],
                purpose="bookkeeping after the last rung",
            )
        except BudgetExceededError:
            seconds = self.bill(None, label, f"{what} (past the cap)", now)
            passed = self.the_budget_passed()
            return (
                f"{stop}; the last {seconds:.3f} s ({what}) were billed past {passed}: nothing was left to "
                f"reserve them ({format_usd_exact(usd)})"
            )
        self.bill(reservation.id, label, what, now)
        return stop
