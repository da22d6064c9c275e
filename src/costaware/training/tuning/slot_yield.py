"""Wait first or yield: which of the slots refused only for each other's holds waits, and who gives way.

Split from :mod:`.reservations`, which re-exports the public names (callers import them from there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from costaware.core.money import format_gpu_hours, format_usd_exact
from costaware.training.tuning.wait_refusals import (
    RAISE_THAT_CAP,
    RAISE_THOSE_CAPS,
    RecordedSpare,
    SlotYields,
    WaitNotHeld,
    _has_room_now,
    _may_come_back,
)

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import BudgetUsage, Reservation
    from costaware.core.tuning import StudySpec

# Logged under the name these records had before reservations.py was split (logging configs filter on it).
log = logging.getLogger("costaware.training.tuning.reservations")


def other_slot_waits(ledger: Ledger, hold_ids: Collection[str], *, without: str | None) -> list[Reservation]:
    """The open holds among ``hold_ids`` (other slots' holds on their own time), less the hold ``without``."""
    ids = set(hold_ids) - {without}
    if not ids:
        return []
    return [r for r in ledger.open_reservations() if r.id in ids]


def trials_only(usage: BudgetUsage, waits: list[Reservation]) -> BudgetUsage:
    """``usage`` with other slots' holds on their own time (``waits``) left out: what trials hold in it."""
    from dataclasses import replace

    counted = [r for r in waits if usage.label in r.budgets]
    if not counted:
        return usage
    return replace(
        usage,
        reserved_usd=max(usage.reserved_usd - sum((r.usd for r in counted), Decimal(0)), Decimal(0)),
        reserved_gpu_hours=max(
            usage.reserved_gpu_hours - sum((r.gpu_hours for r in counted), Decimal(0)), Decimal(0)
        ),
    )


def _gives_way_unheld(refusal: WaitNotHeld, slot: int) -> SlotYields:
    """The first slot to wait, in Airflow, whose wait for other slots' holds alone cannot be held: it yields.

    Stopped for good, the study kept its money unspent: those holds are given back as their slots end.
    """
    why = str(refusal).removeprefix(f"slot {slot} stops waiting for the study's money: ")
    for advice in (RAISE_THAT_CAP, RAISE_THOSE_CAPS):
        why = why.split(f": {advice}")[0]
    return SlotYields(
        f"slot {slot} runs no trial and gives way: only other slots' holds on their own time (no trial's, "
        f"given back as those slots end) stand between its trial and the study's money, and its wait for "
        f"them cannot be held: {why}; the study goes on: run fewer trials at once (max_active_trials) so "
        "that slots wait less",
        scope=refusal.scope,
        spent_usd=refusal.spent_usd,
        cap_usd=refusal.cap_usd,
        needed_usd=refusal.needed_usd,
        renews=refusal.renews,
    )


def _wait_first_or_yield(
    ledger: Ledger,
    own: BudgetUsage,
    hold_id: str | None,
    waits: list[Reservation],
    slot: int,
    usd: Decimal,
    gpu_hours: Decimal,
    places: Mapping[str, datetime] | None = None,
    spares: Mapping[str, RecordedSpare] | None = None,
    need_after: Callable[[float], tuple[Decimal, Decimal]] | None = None,
) -> None:
    """Return if this slot's hold (``hold_id``) is the first of the waiting slots' (``waits``), else yield.

    The first keeps waiting: the others give their holds up at their next ask, settled at what they ran.
    ``places``: when each slot first recorded its wait, by hold id; used where every hold compared has one
    (one clock), else the holds' own times are. ``spares``: GPU-hours the other slots' holds hold past their
    need and margin (the margin is kept, :func:`hold_wait_gpu_hours`), by hold id, and when each is given
    up: where the trial fits once they are given up, the slot waits for the first to trim its hold instead
    of giving way. ``need_after``: the trial's dollars and GPU-hours as the slot will ask for them a number
    of seconds from now, at its first ask after the last of those trims (None: ``usd`` and ``gpu_hours``).

    Raises:
        SlotYields: another slot waited first (first recorded its wait, else its hold was made first).
    """
    others = [r for r in waits if own.label in r.budgets]
    if not others or hold_id is None:  # no other slot's wait, or no hold of its own to order by: it waits
        return
    mine = next((r for r in ledger.open_reservations() if r.id == hold_id), None)
    if mine is None:  # as for a trial
        return
    compared = [mine, *others]
    if places and all(r.id in places for r in compared):
        first = min(compared, key=lambda r: (places[r.id], r.created_at, r.id))
    else:
        first = min(compared, key=lambda r: (r.created_at, r.id))
    if first.id == mine.id:
        return
    given_up = [s for r in others if (s := (spares or {}).get(r.id)) is not None and s.gpu_hours > 0]
    spare = sum((s.gpu_hours for s in given_up), Decimal(0))
    if spare > 0:
        # The spare comes back at the trim, and this slot's need grows until it asks after it: compared
        # with its need now, a slot whose trial fitted by a second waited for the spare and gave way anyway.
        due_in = max(s.due_in_seconds for s in given_up)
        usd_then, gpu_hours_then = (usd, gpu_hours)
        if need_after is not None:
            # A late trim (due_in < 0) gives back the GPU time it is late by, never dollars: the dollars are
            # counted as due now at the earliest, or a slot the dollars refuse waited for a GPU spare.
            usd_then = need_after(max(due_in, 0.0))[0]
            gpu_hours_then = need_after(due_in)[1]
        if _has_room_now(
            replace(own, reserved_gpu_hours=own.reserved_gpu_hours - spare), usd_then, gpu_hours_then
        ):
            log.info(
                "slot %d waits: its trial fits once the other waiting slots give up the %s GPU-hours their "
                "holds hold past their need and margin",
                slot,
                format_gpu_hours(spare),
            )
            return
    raise SlotYields(
        f"slot {slot} runs no trial and gives way: budget '{own.label}' has "
        f"{_room_said(own, others, usd, gpu_hours)}; the slot that waited first ({first.holder}) goes on "
        "waiting, and the study goes on: run fewer trials at once (max_active_trials) so that slots wait "
        "less",
        scope=own.label,
        spent_usd=str(own.spent_usd + own.reserved_usd),
        cap_usd=str(own.cap_usd),
        needed_usd=str(usd),
    )


def _room_said(own: BudgetUsage, others: list[Reservation], usd: Decimal, gpu_hours: Decimal) -> str:
    """The room a yielding slot's trial lacks in ``own``, in the unit that refused it (dollars first).

    The ledger refuses dollars before GPU-hours: where the dollars fit, GPU-hours refused the trial. Said in
    dollars alone, a refusal on free compute read "$1.00 of room ... for the $0.00 its trial needs".
    """
    usd_fits = own.spent_usd + own.reserved_usd + usd <= own.cap_usd
    cap_gpu_hours, left_gpu_hours = own.cap_gpu_hours, own.left_gpu_hours  # both None without a cap
    if usd_fits and cap_gpu_hours is not None and left_gpu_hours is not None:
        left = max(left_gpu_hours, Decimal(0))
        held = sum((r.gpu_hours for r in others), Decimal(0))
        cap, spent = format_gpu_hours(cap_gpu_hours), format_gpu_hours(own.spent_gpu_hours)
        reserved = format_gpu_hours(own.reserved_gpu_hours)
        return (
            f"{format_gpu_hours(left)} GPU-hours of room (cap {cap}, spent {spent}, held for others "
            f"{reserved}, {format_gpu_hours(held)} of it by other slots waiting for money, no trial's) "
            f"for the {format_gpu_hours(gpu_hours)} GPU-hours its trial needs"
        )
    held_usd = sum((r.usd for r in others), Decimal(0))
    return (
        f"{format_usd_exact(max(own.left_usd, Decimal(0)))} of room (cap {format_usd_exact(own.cap_usd)}, "
        f"spent {format_usd_exact(own.spent_usd)}, held for others {format_usd_exact(own.reserved_usd)}, "
        f"{format_usd_exact(held_usd)} of it by other slots waiting for money, no trial's) for the "
        f"{format_usd_exact(usd)} its trial needs"
    )


def slot_may_wait(ledger: Ledger, spec: StudySpec, refused_by: str, usd: Decimal) -> bool:
    """Whether a slot refused its hold by budget ``refused_by`` may find room later (outside Airflow).

    As a refused trial may wait (:func:`reserve_trial_cost`): holds are open in the study's own budget (a
    trial's may come back, a waiting slot's may yet run a trial or free what it held past its time), and
    what is spent in the refusing one leaves room for ``usd``. Otherwise the study's money is spent.
    """
    label = f"{spec.budget_scope}/"
    standing = ledger.usage(spec.budget_scope)
    own = next((u for u in standing if u.label.startswith(label)), None)
    if own is None:
        return False
    refuser = next(
        (u for u in standing if refused_by == u.label or refused_by.startswith(f"{u.label} ")), own
    )
    zero = Decimal(0)
    return _may_come_back(own, usd, zero) and _may_come_back(refuser, usd, zero)
