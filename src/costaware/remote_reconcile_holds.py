"""Freeing the hold of a task that ended: only its unpaid part, said alike by a run's end and a reconcile.

Split from :mod:`costaware.remote_reconcile`, which re-exports both names.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any


@dataclass(frozen=True)
class FreedHold:
    """What :func:`free_paid_hold` did with a hold, or would do with it (``dry_run``).

    ``closed_here``: it released the hold, freeing ``freed_usd`` (the unpaid part; the ``paid_usd`` its
    entries paid from it stays spent); False where a settle, release or new hold closed it a moment before
    (``status`` says which; nothing freed). A dry run's ``freed_usd`` is what releasing it would free.
    """

    paid_usd: Decimal
    freed_usd: Decimal
    reservation: Any  # as the release left it; a dry run's as it was read, still open
    closed_here: bool
    dry_run: bool = False

    @property
    def status(self) -> str:
        return str(self.reservation.status)

    def said(self, why: str, *, paid_by: str = "its entries") -> str:
        """What freeing the hold did, in words, then ``why``: a run's end and ``jobs reconcile`` say it alike.

        A dry run says the same in the conditional (``would release ...``), so that the two cannot drift.
        ``paid_by``: who paid what stays spent (``its job's entries``).
        """
        from costaware.core.money import format_usd_exact

        hold = self.reservation
        if self.dry_run:
            released, stays = "would release", "would stay"
        elif not self.closed_here:
            return f"the hold of {hold.holder} was {self.status} meanwhile: nothing freed ({why})"
        else:
            released, stays = "released", "stays"
        budgets = ", ".join(hold.budgets)
        freed = format_usd_exact(self.freed_usd)
        if self.paid_usd > 0:  # part of it spent: only the rest is freed
            return (
                f"{released} the hold of {hold.holder} in {budgets}, freeing {freed} (the "
                f"{format_usd_exact(self.paid_usd)} {paid_by} paid from it {stays} spent): {why}"
            )
        return f"{released} {freed} reserved in {budgets} for {hold.holder}: {why}"


def free_paid_hold(ledger: Any, hold: Any, *, dry_run: bool = False) -> FreedHold:
    """Release the open ``hold`` whose consumer ended, saying what it frees: only its unpaid part.

    ``dry_run``: release nothing, and say what releasing it would free.

    Released, not settled at what its entries paid so far: an entry still on its way (the spool, a late
    listener) then finds the hold, pays from it and is said over its cap where it is; a hold settled at the
    part paid so far took no later entry, recorded alone and silently past the cap. The entries paid from
    it count as spent either way. A hold a settle, release or new hold closed meanwhile is left as it is,
    and said so: the release is a compare-and-set, and what was paid is read in its transaction.
    """
    if dry_run:  # what the release would do: read only
        paid_usd = ledger.paid_from([hold.id]).get(hold.id, Decimal(0))
        return FreedHold(
            paid_usd, max(hold.usd - paid_usd, Decimal(0)), hold, closed_here=False, dry_run=True
        )
    released = ledger.release_hold(hold.id)
    if not released.released_here:
        return FreedHold(Decimal(0), Decimal(0), released.reservation, closed_here=False)
    # Its amount as released (a grow since it was listed counts), less what was paid: as Ledger.unpaid says.
    unpaid_usd = max(released.reservation.usd - released.paid_usd, Decimal(0))
    return FreedHold(released.paid_usd, unpaid_usd, released.reservation, closed_here=True)
