"""A trial's money: reserve its estimated cost from the study's budget, settle it with a compute entry.

:func:`reserve_trial_cost` reserves it, waiting while other trials hold money that may come back. Split out
and re-exported here (callers import them from this module): the refusals that stop a wait
(:mod:`.wait_refusals`), a slot's hold on its own time (:mod:`.slot_holds`) and on its GPU-hours
(:mod:`.gpu_hour_holds`), which slot waits first and which yields (:mod:`.slot_yield`), and a slot's
entries (:mod:`.slot_entries`). The moved holds read this module's ``utcnow`` (:mod:`.slot_clock`), so
that patching it here moves a slot's wait and its holds on one clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from costaware.core.budgets import Scope
from costaware.core.errors import BudgetExceededError
from costaware.core.ledger import holder_dag_id, utcnow
from costaware.core.money import format_usd
from costaware.core.tuning import MAX_KEEP_FOR_RETRY_SECONDS, StudySpec, usd_for_seconds
from costaware.training.tuning.gpu_hour_holds import budgets_without as budgets_without
from costaware.training.tuning.gpu_hour_holds import cover_gpu_hours as cover_gpu_hours
from costaware.training.tuning.gpu_hour_holds import gpu_hours_for as gpu_hours_for
from costaware.training.tuning.gpu_hour_holds import hold_wait_gpu_hours as hold_wait_gpu_hours
from costaware.training.tuning.slot_entries import record_skipped_slot as record_skipped_slot
from costaware.training.tuning.slot_entries import settle_trial as settle_trial
from costaware.training.tuning.slot_holds import _keep_slot_hold as _keep_slot_hold
from costaware.training.tuning.slot_holds import _unpaid
from costaware.training.tuning.slot_holds import hold_slot_time as hold_slot_time
from costaware.training.tuning.slot_holds import keep_slot_hold_after_load as keep_slot_hold_after_load
from costaware.training.tuning.slot_yield import _gives_way_unheld, _wait_first_or_yield
from costaware.training.tuning.slot_yield import other_slot_waits as other_slot_waits
from costaware.training.tuning.slot_yield import slot_may_wait as slot_may_wait
from costaware.training.tuning.slot_yield import trials_only as trials_only
from costaware.training.tuning.wait_refusals import RAISE_THAT_CAP as RAISE_THAT_CAP
from costaware.training.tuning.wait_refusals import RAISE_THOSE_CAPS as RAISE_THOSE_CAPS
from costaware.training.tuning.wait_refusals import SLOT_HOLD_SECONDS as SLOT_HOLD_SECONDS
from costaware.training.tuning.wait_refusals import SLOT_WAIT_MARGIN_SECONDS as SLOT_WAIT_MARGIN_SECONDS
from costaware.training.tuning.wait_refusals import HoldNotHeldAgain as HoldNotHeldAgain
from costaware.training.tuning.wait_refusals import RecordedSpare as RecordedSpare
from costaware.training.tuning.wait_refusals import SlotYields as SlotYields
from costaware.training.tuning.wait_refusals import WaitNotHeld as WaitNotHeld
from costaware.training.tuning.wait_refusals import _has_room_now, _may_come_back

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import BudgetUsage, Reservation

log = logging.getLogger(__name__)

#: The longest a slot past its own lease sleeps between two asks (see _pause_until_first_hold_ends).
LATE_POLL_SECONDS = 30.0


class MarkWaiting(Protocol):
    """Records a waiting slot's hold for the other slots (:meth:`~.arbitration.WaitingSlots.mark`)."""

    def __call__(
        self, hold_id: str, spare_gpu_hours: Decimal | None = None, *, spare_due_seconds: float | None = None
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class WaitingRecords:
    """Readers of the waiting slots' records (:class:`~.arbitration.WaitingSlots`), asked at each refusal.

    ``places``: when each waiting slot (this one too) first recorded its wait, by its hold's id.
    ``spares``: the GPU-hours other waiting slots' holds hold past their need and margin, and when each is
    given up, by hold id.
    """

    places: Callable[[], Mapping[str, datetime]]
    spares: Callable[[], Mapping[str, RecordedSpare]]


def reserve_trial_cost(
    ledger: Ledger,
    spec: StudySpec,
    seconds_needed: Callable[[], float],
    holder: str,
    run_id: str | None,
    slot: int,
    poll_seconds: float,
    keep_for_retry_seconds: float = 0.0,
    replacing: str | None = None,
    bill_tags: Mapping[str, str] | None = None,
    slot_usd_per_hour: Decimal | None = None,
    slot_seconds_so_far: float = 0.0,
    slot_seconds: Callable[[], float] | None = None,
    slot_wait_margin_seconds: float = SLOT_WAIT_MARGIN_SECONDS,
    outside_airflow: bool = False,
    mark_waiting: MarkWaiting | None = None,
    waiting_holds: Callable[[], Collection[str]] | None = None,
    waiting_records: WaitingRecords | None = None,
) -> Reservation:
    """Reserve the trial's cost; while refused only because other trials hold money, wait for them.

    ``bill_tags``: tags the trial's bill carries beside the study's scope (in Airflow the run's, which the
    cost listener adds, the study's winning a tag both name): the reservation holds in every budget over
    them too. Held over the study's scope only, a budget over a DAG tag the scope lacks (``team:ml``)
    counted the trial's spend with nothing held in it.

    ``replacing``: the slot's hold for its time before this reservation (:func:`hold_slot_time`), given
    back as the trial's reservation is granted (which holds that time too) and kept while it is refused,
    so that the slot's bill is paid from it: before each wait it is kept counting past that wait by
    :data:`SLOT_HOLD_SECONDS` (a wait of up to an hour outlived its 600 s, others reserved its money, and a
    refused slot's try was billed with nothing held), and grown to pay the try's time to the end of that
    wait and ``slot_wait_margin_seconds`` more (what follows the last hold: the ask, the stop, the bill) at
    ``slot_usd_per_hour``, the price its bill is charged at (Airflow: the worker's), counted from
    ``slot_seconds_so_far`` (what the try ran before this call) in real time, or read from
    ``slot_seconds`` where given (outside Airflow: the slot's time so far on the clock its entry is
    measured by). Only extended, a slot that waited past its
    ``study_load_seconds`` was billed past its hold ($0.0203 on a $0.02 cap). Where a budget the hold is in
    has no room for that, the slot stops waiting (a refusal naming that budget) while its hold still pays
    for its time. None: the hold is not grown.
    ``outside_airflow``: there is no try and no bill (a skipped entry records the slot's time), and the
    refusal says so.
    ``mark_waiting``: called with the id of the slot's hold before and after each ask and before each wait,
    so that other slots tell it from a trial's (the caller records it first, before the study's trials
    load: a slot refused while this one loaded took it for a trial's); ``waiting_holds``: the ids other
    slots so marked. A slot's hold is spent by its slot, not given back as a trial's is: refused only for
    such holds, the slot that first waited waits and the others give way (:class:`SlotYields`).
    Counted as trials' money, two slots started together waited for each other, their holds grew until the
    study's money was gone, and neither ran a trial. ``waiting_records``: its ``places``, when each waiting
    slot (this one too) first recorded its wait, by its hold's id: where each slot has one, the first to
    wait is the one whose place is first, not whose hold was made first (a hold held again is made anew);
    its ``spares``, the GPU-hours other waiting slots' holds hold past their need (headroom, outside
    Airflow), by hold id, and when each is given up (that slot's next poll): a slot whose trial fits once
    they are given up, its need counted as it will ask a pause after that poll, waits instead of giving
    way (a trim later than its poll gives back the GPU time it is late by too), and
    a waiting slot that sees other slots wait trims its hold to its need (its margin never more than the one
    its recorded spare was worked out with, and the spare recorded past its need at the next poll after the
    longest pause it may take, so the whole spare comes back at that poll's trim; where the asks between the
    two polls grew its need more, the trim takes its margin down to give the whole spare back).

    The hold lasts 2 x the trial's time (at least 60 s), plus ``keep_for_retry_seconds``: how long Airflow
    waits before the task's retry, where it has one left. A failed or killed try leaves its hold open,
    paid in part, and the retry finds it again by its holder; a hold gone by then made the retry reserve
    the whole estimate anew, and stopped the study where the budget had room only for what was left. A hold
    found again is kept as long again from now, so that the retry's own trial has its whole lease.

    ``seconds_needed`` is asked again before each attempt: the slot is paid while it waits, and that time
    is settled with the trial, so each attempt reserves it too (a trial granted after a long wait would
    otherwise be charged past what it reserved, and the study past its cap).

    Other trials' reservations are mostly returned when they settle (pruned trials spend a fraction of
    their estimate), so a refusal stops the study only when nothing else of the study is in flight, or
    what was already spent leaves no room for this trial (dollars, and GPU-hours under ``max_gpu_hours``),
    or a budget over ``bill_tags`` too short for it holds none of the study's money.
    Waiting ends when those reservations expire: at the end of this slot's own lease (2 x its time, at least
    60 s) or of the study's last open hold, whichever is later, at most
    :data:`~costaware.core.tuning.MAX_KEEP_FOR_RETRY_SECONDS` past the former. A hold kept for a retry
    outlives the slot's own lease; a slot that gave up at its own lease stopped the study for good, where
    the hold's end would have made room.
    """
    scope = spec.budget_scope if not bill_tags else Scope.of({**bill_tags, **spec.budget_scope.as_dict()})
    seconds = seconds_needed()
    # Real time, not the trial's meter: what is waited for is other trials' holds, whose ttl the ledger
    # counts in real time.
    waiting_since = time.monotonic()
    own_wait = max(2 * seconds, 60.0)
    asked_again = False
    # The pause the spare last recorded was counted at (its margin: 10 of them); None: none recorded.
    spare_poll_seconds: float | None = None
    # The spare last recorded, which other slots may wait for: the next trim gives it back whole, its margin
    # taken down where needed. Counting the last poll's ask time into the spare instead guesses the next
    # ask's (a lock wait of 0 s, then 3 s, still broke the promise); the trim knows its need as it gives back.
    spare_recorded = Decimal(0)
    # When (on the monotonic clock) the next poll is due, whose trim gives the spare back: where asks make
    # that trim late, the others' needs grew meanwhile, and it gives back that GPU time too.
    spare_due_at: float | None = None
    while True:
        usd = usd_for_seconds(seconds, spec.usd_per_hour)
        gpu_hours = gpu_hours_for(seconds, spec.gpus)
        lease = timedelta(seconds=max(2 * seconds, 60.0) + keep_for_retry_seconds)
        asked_at = utcnow()
        if mark_waiting is not None and replacing is not None:
            # Renewed before each ask and after it (the caller recorded it as the study opened, before the
            # load): renewed only before each wait, the record of a slot whose ask waited for the ledger's
            # lock (SQLite's 60 s) lapsed, and the others took its hold for a trial's.
            mark_waiting(replacing)
        try:
            held = ledger.reserve(
                scope,
                usd,
                gpu_hours=gpu_hours,
                holder=holder,
                run_id=run_id,
                dag_id=holder_dag_id(holder),  # Airflow's holder: the trial task's DAG
                ttl=lease,
                purpose=f"trial slot {slot} of study '{spec.study_name}'",
                replacing=replacing,
            )
            # An earlier try's hold, found by its holder, ends where that try's lease did: extended (never
            # shortened, so a hold made just now is left as it is).
            held = ledger.extend(held.id, asked_at + lease)
            return _unpaid(ledger, held, usd)
        except BudgetExceededError:
            if mark_waiting is not None and replacing is not None:
                mark_waiting(replacing)
            # Without the slot's own hold, which the reserve gave back as it checked: taken for a trial in
            # flight, a slot whose hold was the study's only one waited an hour for it, renewing it.
            waits = other_slot_waits(ledger, waiting_holds() if waiting_holds else (), without=replacing)
            own = study_usage(ledger, spec, without=replacing)
            if own is None or not _may_come_back(own, usd, gpu_hours):
                if own is not None and not asked_again and _has_room_now(own, usd, gpu_hours):
                    # The last hold in flight settled between the refused ask and this read: read as money
                    # spent, the slot stopped the study with that money free. Asked again at once (once:
                    # refused again, another budget is short and the refusal stands).
                    asked_again = True
                    continue
                raise
            asked_again = False
            slots_only = not _may_come_back(trials_only(own, waits), usd, gpu_hours)
            if slots_only:
                # Only other slots' holds on their own time stand in the way: a slot's hold is spent by its
                # slot, not given back. Each counted the other's as a trial's: two slots started together
                # waited for each other until their holds had the study's money. One waits, for the others
                # to give theirs up; they run no trial and leave the study going on.
                places = waiting_records.places() if waiting_records else {}
                spares = waiting_records.spares() if waiting_records else {}
                # Its next ask after the spare's trim comes a pause after it at most.
                within_lease = time.monotonic() - waiting_since < own_wait
                next_pause = poll_seconds if within_lease else max(LATE_POLL_SECONDS, poll_seconds)

                def need_after(ahead: float, pause_after: float = next_pause) -> tuple[Decimal, Decimal]:
                    then = max(seconds_needed() + ahead + pause_after, 0.0)
                    return usd_for_seconds(then, spec.usd_per_hour), gpu_hours_for(then, spec.gpus)

                _wait_first_or_yield(
                    ledger, own, replacing, waits, slot, usd, gpu_hours, places, spares, need_after
                )
            if bill_tags and not _other_budgets_may_come_back(
                ledger, spec, scope, holder, run_id, replacing, usd, gpu_hours
            ):
                raise
            waited = time.monotonic() - waiting_since
            pause = poll_seconds
            if waited >= own_wait:
                ends = ledger.hold_ends(own.label)
                if ends is None or waited >= own_wait + MAX_KEEP_FOR_RETRY_SECONDS:
                    raise
                pause = _pause_until_first_hold_ends(ends[0], poll_seconds)
            log.info(
                "slot %d waits for %s and %s GPU-hours held by running trials (or kept for their retry)",
                slot,
                format_usd(own.reserved_usd),
                own.reserved_gpu_hours,
            )
            if replacing is not None:
                if slot_seconds is not None:
                    try_seconds = slot_seconds()
                else:
                    try_seconds = slot_seconds_so_far + (time.monotonic() - waiting_since)
                # A hold that expired is held again under a new id, which the trial's reservation replaces.
                try:
                    replacing = _keep_slot_hold(
                        ledger,
                        replacing,
                        slot,
                        pause,
                        try_seconds,
                        slot_usd_per_hour,
                        slot_wait_margin_seconds,
                        run_id=run_id,
                        outside_airflow=outside_airflow,
                    )
                except WaitNotHeld as e:
                    if outside_airflow or not slots_only:
                        raise
                    # Only other slots' holds stand in the way, given back as those slots end (in Airflow
                    # as the listener bills their tries): the study's money is not spent, it goes on.
                    raise _gives_way_unheld(e, slot) from e
                spare_gpu_hours = None
                if outside_airflow and spec.gpus > 0:
                    # The slot's entry bills GPU-hours at the study's GPUs: held as its dollars are.
                    wait_gpu_hours = gpu_hours_for(try_seconds + pause + slot_wait_margin_seconds, spec.gpus)
                    others_wait = any(own.label in r.budgets for r in waits)
                    # Others may wait for the spare as recorded, past the margin of that pause. Its own lease
                    # over, the pause grew to 30 s: trimmed with 10 of those (300 s), the hold kept part of
                    # the spare, and a slot whose trial fit once the spare was given up gave way.
                    margin_poll = pause if spare_poll_seconds is None else min(pause, spare_poll_seconds)
                    give_back = spare_recorded
                    if spare_recorded > 0 and spare_due_at is not None:
                        give_back += gpu_hours_for(time.monotonic() - spare_due_at, spec.gpus)
                    replacing, spare_gpu_hours = hold_wait_gpu_hours(
                        ledger,
                        replacing,
                        wait_gpu_hours,
                        slot,
                        run_id,
                        spec.gpus,
                        others_wait=others_wait,
                        poll_seconds=margin_poll,
                        spare_recorded=give_back,
                    )
                    # The trim comes at the next poll, whose need is longer by that poll's pause: the spare is
                    # recorded past the longest pause the slot may take (30 s once its own lease is over),
                    # which only this slot knows. Recorded past this poll's need, a slot whose trial fit once
                    # it was given up waited for it, got back part of it, and gave way.
                    next_pause_gpu_hours = gpu_hours_for(max(LATE_POLL_SECONDS, poll_seconds), spec.gpus)
                    spare_gpu_hours = max(spare_gpu_hours - next_pause_gpu_hours, Decimal(0))
                    spare_poll_seconds = margin_poll if spare_gpu_hours > 0 else None
                    spare_recorded = spare_gpu_hours
                    spare_due_at = time.monotonic() + pause if spare_gpu_hours > 0 else None
                if mark_waiting is not None:
                    due_in = pause if spare_gpu_hours else None
                    mark_waiting(replacing, spare_gpu_hours, spare_due_seconds=due_in)
            time.sleep(pause)
            seconds = seconds_needed()


def _pause_until_first_hold_ends(first_end: datetime, poll_seconds: float) -> float:
    """How long a slot past its own lease sleeps: until the study's first open hold expires, within bounds.

    It waits for holds kept past their trial (for a retry, hours at most), which end when their retry
    settles them or when they expire: asked every ``poll_seconds`` (a query of its own, and the reserve's)
    for up to an hour, such a slot kept the ledger busy for nothing. ``LATE_POLL_SECONDS`` at most: a
    settle frees the money before the expiry.
    """
    until_expiry = (first_end - utcnow()).total_seconds()
    return min(max(until_expiry, poll_seconds), max(LATE_POLL_SECONDS, poll_seconds))


def _other_budgets_may_come_back(
    ledger: Ledger,
    spec: StudySpec,
    scope: Scope,
    holder: str,
    run_id: str | None,
    replacing: str | None,
    usd: Decimal,
    gpu_hours: Decimal,
) -> bool:
    """Whether each budget over the run's tags too short for the trial may make room as the study's holds end.

    Only the study's own budget was looked at: refused by a budget over a DAG tag (``team=ml``) spent to its
    cap by others, with nothing of the study's held in it, a slot polled for an hour while another trial of
    the study ran, paid all the while from a budget already at its cap.
    """
    from costaware.core.budgets import check_cap

    own_label = f"{spec.budget_scope}/"
    # Read without the slot's own hold, which the reserve gives back as it grants the trial's: what that
    # hold has unpaid in each budget counts as room, what its earlier try paid from it stays spent. Its
    # whole amount counted back, a slot whose hold that try had paid in part waited, billed past the cap.
    others = [
        u
        for u in ledger.usage(scope, run_id=run_id, dag_id=holder_dag_id(holder), without=replacing)
        if not u.label.startswith(own_label)
    ]
    short = []
    for usage in others:
        try:
            check_cap(usage, usd, gpu_hours, "the trial")
        except BudgetExceededError:
            short.append(usage)
    if not short:
        return True
    study_tags = set(spec.budget_scope.as_dict().items())
    study_holds = [
        r
        for r in ledger.open_reservations()
        if r.holder != holder and study_tags <= set(r.scope.as_dict().items())
    ]
    return all(
        _may_come_back(usage, usd, gpu_hours) and any(usage.label in r.budgets for r in study_holds)
        for usage in short
    )


def study_usage(ledger: Ledger, spec: StudySpec, *, without: str | None = None) -> BudgetUsage | None:
    """Where the study's own budget stands (other budgets may cover the study too).

    ``without``: a reservation left out of what it holds (see ``Ledger.usage``).
    """
    label = f"{spec.budget_scope}/"
    standing = ledger.usage(spec.budget_scope, without=without)
    return next((u for u in standing if u.label.startswith(label)), None)
