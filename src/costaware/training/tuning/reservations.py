"""A trial's money: reserve its estimated cost from the study's budget, settle it with a compute entry."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol, Self

from costaware.core.budgets import Scope
from costaware.core.errors import BudgetExceededError, BudgetNotFoundError
from costaware.core.ledger import Kind, LedgerEntry, Market, clipped_note, compute_cost, holder_dag_id, utcnow
from costaware.core.money import format_usd, format_usd_exact
from costaware.core.tuning import MAX_KEEP_FOR_RETRY_SECONDS, StudySpec, usd_for_seconds
from costaware.training.tuning.results import EntryOwner

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import BudgetUsage, Reservation

log = logging.getLogger(__name__)

#: The longest a slot past its own lease sleeps between two asks (see _pause_until_first_hold_ends).
LATE_POLL_SECONDS = 30.0
#: The least a slot's hold (:func:`hold_slot_time`) counts past what it is for: the cost listener settles it
#: with the try's bill after the try ends.
SLOT_HOLD_SECONDS = 600.0
#: Seconds of the try's time a waiting slot's hold pays past its next wait: the ask after it, and the try's
#: end once it gives up (the cost listener bills the whole try).
SLOT_WAIT_MARGIN_SECONDS = 30.0
#: What a slot that stops waiting is told to do about the budget its wait could not be held in.
RAISE_THAT_CAP = "raise that budget's cap with `costaware budget set`"
#: The same, where several budgets are short.
RAISE_THOSE_CAPS = "raise those budgets' caps with `costaware budget set`"


class MarkWaiting(Protocol):
    """Records a waiting slot's hold for the other slots (:meth:`~.arbitration.WaitingSlots.mark`)."""

    def __call__(self, hold_id: str, spare_gpu_hours: Decimal | None = None) -> None: ...


class WaitNotHeld(BudgetExceededError):
    """A waiting slot's hold could not be grown to pay its next wait: it stops waiting."""

    @classmethod
    def after(cls, refusal: BudgetExceededError, message: str) -> Self:
        """The slot's stop, said by ``message``, where the ledger refused what it asked (``refusal``)."""
        return cls(
            message,
            scope=refusal.scope,
            spent_usd=refusal.spent_usd,
            cap_usd=refusal.cap_usd,
            needed_usd=refusal.needed_usd,
            renews=refusal.renews,
        )


class HoldNotHeldAgain(WaitNotHeld):
    """Raised when a waiting slot's hold could not pay for its wait and holding it again was refused."""

    #: That hold (expired, or not grown): the slot's skipped entry is settled against it.
    hold_id: str = ""


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
    waiting_places: Callable[[], Mapping[str, datetime]] | None = None,
    waiting_spares: Callable[[], Mapping[str, Decimal]] | None = None,
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
    such holds, the slot whose hold was made first waits and the others give way (:class:`SlotYields`).
    Counted as trials' money, two slots started together waited for each other, their holds grew until the
    study's money was gone, and neither ran a trial. ``waiting_places``: when each waiting slot (this one
    too) first recorded its wait, by its hold's id; where each slot has one, the first to wait is the one
    whose place is first, not whose hold was made first (a hold held again is made anew).
    ``waiting_spares``: the GPU-hours other waiting slots' holds hold past their need (headroom, outside
    Airflow), by hold id: a slot whose trial fits once they are given up waits instead of giving way, and
    a waiting slot that sees other slots wait trims its hold to its need.

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
                places = waiting_places() if waiting_places else {}
                spares = waiting_spares() if waiting_spares else {}
                _wait_first_or_yield(ledger, own, replacing, waits, slot, usd, gpu_hours, places, spares)
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
                    replacing, spare_gpu_hours = hold_wait_gpu_hours(
                        ledger, replacing, wait_gpu_hours, slot, run_id, spec.gpus, others_wait=others_wait
                    )
                if mark_waiting is not None:
                    mark_waiting(replacing, spare_gpu_hours)
            time.sleep(pause)
            seconds = seconds_needed()


def hold_wait_gpu_hours(
    ledger: Ledger,
    hold_id: str,
    wait_gpu_hours: Decimal,
    slot: int,
    run_id: str | None,
    gpus: Decimal,
    *,
    others_wait: bool,
) -> tuple[str, Decimal]:
    """Make a waiting slot's hold pay the GPU-hours of its time to the end of its next wait (outside Airflow).

    Returns the id of the hold that does and the GPU-hours it holds past them (its spare). Alone, it holds
    the GPU-hours of a hold's ttl more, as far as its budgets have room (held again only every few hundred
    polls). While other slots wait (``others_wait``) it holds its need alone and gives up any spare: kept,
    a second slot whose trial fit beside this slot's need gave way to it, the study's GPU-hours unspent.

    Raises:
        WaitNotHeld: a budget the hold is in has no room for ``wait_gpu_hours``.
    """
    headroom = Decimal(0) if others_wait else gpu_hours_for(SLOT_HOLD_SECONDS, gpus)
    try:
        kept = cover_gpu_hours(
            ledger, hold_id, wait_gpu_hours, slot, run_id, headroom=headroom, trim=others_wait
        )
    except BudgetExceededError as e:
        raise WaitNotHeld.after(
            e,
            f"slot {slot} stops waiting for the study's money: its time to the end of its "
            f"next wait uses {wait_gpu_hours} GPU-hours, and holding them was refused: {e}",
        ) from e
    return kept, max(ledger.unpaid(kept)[1] - wait_gpu_hours, Decimal(0))


def _keep_slot_hold(
    ledger: Ledger,
    hold_id: str,
    slot: int,
    pause: float,
    try_seconds: float,
    usd_per_hour: Decimal | None,
    margin_seconds: float = SLOT_WAIT_MARGIN_SECONDS,
    *,
    run_id: str | None = None,
    outside_airflow: bool = False,
) -> str:
    """Keep a waiting slot's hold counting past its next wait and, at ``usd_per_hour``, paying for it.

    Returns the id of the hold that now pays for the slot's time: ``hold_id``, or a new hold of the same
    holder where ``hold_id`` had expired (a study load that outran its ttl): an expired hold counts
    nothing, cannot be extended or grown, and the slot's bill would have been recorded with nothing held.

    Raises:
        WaitNotHeld: a budget the hold is in has no room for the try's time to the end of the wait.
    """
    until = utcnow() + timedelta(seconds=pause + SLOT_HOLD_SECONDS)
    held = ledger.extend(hold_id, until)
    if held.status not in ("open", "expired"):  # settled, released or replaced: not the slot's to keep
        return hold_id
    expired = held.lapsed(utcnow())
    if usd_per_hour is None and not expired:
        return hold_id
    paid = ledger.paid_from([hold_id]).get(hold_id, Decimal(0))
    seconds = try_seconds + pause + margin_seconds
    # Without a price the hold is not grown: held again, it holds what it had left.
    left = max(held.usd - paid, Decimal(0))
    usd = compute_cost(seconds, usd_per_hour)[1] if usd_per_hour is not None else left
    # Outside Airflow there is no try and no bill: the slot's time is recorded as a skipped entry.
    if outside_airflow:
        what = (
            f"its time (loading the study, waiting for money) to the end of its next wait ({seconds:.0f} s "
            f"at the study's ${usd_per_hour}/h, the price its skipped entry is recorded at)"
        )
    else:
        what = (
            f"its try's time to the end of its next wait ({seconds:.0f} s at ${usd_per_hour}/h, the price "
            "its bill is charged at)"
        )
    if expired:
        ended = held.expires_at.isoformat(timespec="seconds")
        cause = (
            f"slot {slot}'s hold on its time (reservation {hold_id}) expired at {ended}, before its wait for "
            "the study's money: "
        )
        if outside_airflow:
            cause += (
                "the ledger was not asked again within its ttl (10 times the slot's time before it, at least "
                "600 s)"
            )
        else:
            cause += (
                "loading the study took longer than the hold counted (10 times the time before it, at least "
                "600 s); set study_load_seconds near what loading the study takes"
            )
        return _hold_slot_again(ledger, held, slot, seconds, usd, usd_per_hour, until, run_id, cause)
    # What an earlier try of the task paid from the hold is not this try's to spend.
    need = paid + usd
    if held.usd >= need:
        return hold_id
    held = ledger.grow(hold_id, need)
    if held.usd >= need:
        return hold_id
    # Read without the hold, whose unpaid money would be this try's: only a budget with less room than the
    # try's time is short. The hold's size was given as the room of every budget it is in, and the first
    # of them named, though a budget of $5 over a team tag had plenty.
    short = [u for u in budgets_without(ledger, held, run_id) if u.left_usd < usd]
    if not short:
        # Room made since the grow: another hold settled (a slot giving way to this one), not a budget
        # changed: grown now, it is not held again under a warning about a budget set since it was made.
        held = ledger.grow(hold_id, need)
        if held.usd >= need:
            return hold_id
        if paid > held.usd:
            # Its entries paid past it (a bill it was not grown for): that overage is spent in its budgets
            # already, so growing it to pay the wait beside them asks that much more than their room. The
            # wait alone fits: held on its own, the money ends right.
            over = format_usd_exact(paid - held.usd)
            cause = (
                f"slot {slot}'s hold on its time (reservation {hold_id}) was paid {format_usd_exact(paid)} "
                f"by its entries, more than the {format_usd_exact(held.usd)} it holds grown as far as its "
                f"budgets' room allows: the {over} paid past it is spent in them already, so it cannot "
                f"also hold the {format_usd_exact(usd)} of its next wait"
            )
            return _hold_slot_again(ledger, held, slot, seconds, usd, usd_per_hour, until, run_id, cause)
        # Not grown for another reason: a budget set since it was made, a budget's moved period.
        cause = (
            f"slot {slot}'s hold on its time (reservation {hold_id}) could not be grown to "
            f"{format_usd_exact(need)} though its budgets have room (a budget set since it was made holds "
            "nothing of it, or a budget's period no longer matches it)"
        )
        return _hold_slot_again(ledger, held, slot, seconds, usd, usd_per_hour, until, run_id, cause)
    rooms = "; ".join(
        f"budget '{u.label}' has {format_usd_exact(max(u.left_usd, Decimal(0)))} of room (cap "
        f"{format_usd_exact(u.cap_usd)}, spent {format_usd_exact(u.spent_usd)}, held for others "
        f"{format_usd_exact(u.reserved_usd)})"
        for u in short
    )
    earlier = f", beside the {format_usd_exact(paid)} an earlier try paid from its hold" if paid > 0 else ""
    raise WaitNotHeld(
        f"slot {slot} stops waiting for the study's money: {what} needs {format_usd_exact(usd)} "
        f"held{earlier}; {rooms}: "
        f"{RAISE_THAT_CAP if len(short) == 1 else RAISE_THOSE_CAPS}, or run fewer trials at once "
        "(max_active_trials) so that slots wait less",
        scope=short[0].label,
        spent_usd=str(short[0].spent_usd + short[0].reserved_usd),
        cap_usd=str(short[0].cap_usd),
        needed_usd=str(usd),
        # As check_cap: a total budget, or a need above a budget's whole cap, is never made room by a new
        # period (an on_exceeded='skip' run of skipped slots only is failed, not left to wait for one).
        renews=all(u.period_key != "total" and usd <= u.cap_usd for u in short),
    )


def _hold_slot_again(
    ledger: Ledger,
    old: Reservation,
    slot: int,
    seconds: float,
    usd: Decimal,
    usd_per_hour: Decimal | None,
    until: datetime,
    run_id: str | None,
    cause: str,
) -> str:
    """Hold a waiting slot's time again in place of its hold, which ``cause`` says could not pay for it.

    ``old``: that hold (expired, or not grown for a reason other than room); returns the new hold's id.

    Raises:
        HoldNotHeldAgain: a budget over the hold's scope has no room for it (named by the ledger's refusal),
            or none covers it now.
    """
    log.warning("%s: held again for its time to the end of its next wait", cause)
    price = "" if usd_per_hour is None else f" at ${usd_per_hour}/h"
    try:
        again = ledger.reserve(
            old.scope,
            usd,
            holder=old.holder,
            run_id=run_id,
            dag_id=holder_dag_id(old.holder) if old.holder else None,
            ttl=until - utcnow(),
            purpose=f"slot {slot}'s time to the end of its next wait ({seconds:.0f} s{price}), held again",
            replacing=old.id,  # closed as "replaced": the bill settles the new hold, not it
        )
    except BudgetNotFoundError as e:
        # The budgets the hold was in were deleted since: the ledger's "set one" read as if none had been set.
        gone = HoldNotHeldAgain(
            f"slot {slot} stops waiting for the study's money: {cause}, and it cannot be held again: "
            f"{_gone(old.budgets)}",
            scope=old.budgets[0] if old.budgets else str(old.scope),
            needed_usd=str(usd),
            renews=False,
        )
        gone.hold_id = old.id
        raise gone from e
    except BudgetExceededError as e:
        refused = HoldNotHeldAgain.after(
            e,
            f"slot {slot} stops waiting for the study's money: {cause}, and holding it again was refused: "
            f"{e}",
        )
        refused.hold_id = old.id
        raise refused from e
    return again.id


def _gone(labels: Collection[str]) -> str:
    """What to do about deleted budgets (``labels``, ``scope/period``) that a slot's hold was in."""
    named = " and ".join(f"'{label}'" for label in labels) or "(none recorded)"
    commands = "; ".join(
        f"`costaware budget set --scope '{scope}' --period {period} --cap-usd <USD>`"
        for scope, period in (label.rsplit("/", 1) for label in labels if "/" in label)
    )
    todo = commands or "`costaware budget set`"
    return (
        f"budget {named} it was held in was deleted since, and none covers its scope now; its time is "
        f"recorded as it ran, past no cap. To bound the study's spend, set it again ({todo}; a study's own "
        "budget is set again from max_usd by its next run's plan) and run the slot again"
    )


def hold_slot_time(
    ledger: Ledger,
    tags: Mapping[str, str],
    usd: Decimal,
    *,
    holder: str,
    run_id: str | None,
    dag_id: str | None,
    seconds: float,
    purpose: str,
    gpu_hours: Decimal = Decimal(0),
) -> Reservation | None:
    """Hold a slot's time before its trial's reservation in every budget over ``tags``; None: none to hold.

    ``gpu_hours``: what that time uses of a ``max_gpu_hours`` cap (outside Airflow, the study's GPUs).

    A slot loads its study (a far store: seconds to minutes) before it knows the trial's estimate; refused
    then, that time was billed to the try's ``tags`` with nothing held, past a project budget with little
    left. Held by ``holder``, the try's bill settles it; a granted trial's reservation replaces it
    (:func:`reserve_trial_cost`). An open hold of ``holder`` over other tags is an earlier try's trial
    hold, which pays for this try as it did (None); one over ``tags`` is an earlier try's slot hold, kept
    and grown back toward ``usd`` less what that try paid, or, where ``tags`` hold the study's scope, its
    trial hold over the same tags, which :func:`~costaware.training.tuning.trial.run_trial` tells apart by
    the reservation the study records on that try's trial.

    Raises:
        BudgetExceededError: a budget over ``tags`` cannot hold even this.
    """
    scope = Scope.given(dict(tags), what="the try's tags")
    # Longer than the load is let to take: an expired hold no longer pays the bill it was for.
    ttl = timedelta(seconds=max(10 * seconds, SLOT_HOLD_SECONDS))
    asked_at = utcnow()
    try:
        held = ledger.reserve(
            scope,
            usd,
            gpu_hours=gpu_hours,
            holder=holder,
            run_id=run_id,
            dag_id=dag_id,
            ttl=ttl,
            purpose=purpose,
        )
    except BudgetNotFoundError:
        return None  # no budget counts the try's bill: nothing to overspend
    if held.scope != scope:
        return None
    # An earlier try's slot hold, found again, ends where that try's did (50 s left for a 60 s load): kept as
    # long as a new one from now (never shortened).
    held = ledger.extend(held.id, asked_at + ttl)
    return _unpaid(ledger, held, usd)


def keep_slot_hold_after_load(
    ledger: Ledger, hold_id: str, spec: StudySpec, slot: int, run_id: str | None, seconds: float
) -> str | None:
    """Keep the slot's hold on its time counting once the study is loaded (outside Airflow).

    Returns the id of the hold that now counts the slot's time: ``hold_id``, kept :data:`SLOT_HOLD_SECONDS`
    from now, or a new hold of its holder for the slot's ``seconds`` so far at the study's price (and
    GPUs) where ``hold_id`` expired during the load (one longer than the hold's ttl: ten times the read
    before it, at least :data:`SLOT_HOLD_SECONDS`). An expired hold counts nothing and is not grown: grown,
    it read as "a budget set since it was made" and the slot stopped the study for good. None: the budgets
    it was held in were deleted since, and none covers its scope now (nothing to overspend, as
    :func:`hold_slot_time` finds).

    Raises:
        BudgetExceededError: a budget over the hold's scope has no room to hold it again.
    """
    held = ledger.extend(hold_id, utcnow() + timedelta(seconds=SLOT_HOLD_SECONDS))
    if held.status not in ("open", "expired"):  # settled, released or replaced: not the slot's to keep
        return hold_id
    if held.status == "open" and held.expires_at > utcnow():
        return hold_id
    log.warning(
        "slot %d's hold on its time (reservation %s) expired at %s, while the study loaded (the slot's "
        "%.0f s so far, past the ttl it was held for: ten times the read of the study's settings before "
        "it, at least %.0f s): held again for that time; keep the study store close to the workers",
        slot,
        hold_id,
        held.expires_at.isoformat(timespec="seconds"),
        seconds,
        SLOT_HOLD_SECONDS,
    )
    try:
        again = ledger.reserve(
            held.scope,
            usd_for_seconds(seconds, spec.usd_per_hour),
            gpu_hours=gpu_hours_for(seconds, spec.gpus),
            holder=held.holder,
            run_id=run_id,
            dag_id=holder_dag_id(held.holder) if held.holder else None,
            ttl=timedelta(seconds=SLOT_HOLD_SECONDS),
            purpose=(
                f"slot {slot} of study '{spec.study_name}': its time so far ({seconds:.0f} s, loading the "
                f"study at the study's ${spec.usd_per_hour}/h), held again: its hold expired during the load"
            ),
            replacing=hold_id,  # closed as "replaced": the slot's entry settles the new hold
        )
    except BudgetNotFoundError:
        return None
    return again.id


def gpu_hours_for(seconds: float, gpus: Decimal) -> Decimal:
    """GPU-hours of ``seconds`` on ``gpus``, rounded up to the micro-GPU-hour (never short)."""
    exact = Decimal(str(max(seconds, 0.0))) / 3600 * gpus
    return exact.quantize(Decimal("0.000001"), rounding="ROUND_CEILING")


def cover_gpu_hours(
    ledger: Ledger,
    hold_id: str,
    gpu_hours: Decimal,
    slot: int | None,
    run_id: str | None,
    *,
    headroom: Decimal = Decimal(0),
    trim: bool = False,
) -> str:
    """Make the slot's hold ``hold_id`` hold ``gpu_hours`` unpaid; returns the id of the hold that does.

    The ledger grows a hold's dollars only: on free compute (a price of 0) a slot's hold held no GPU-hours
    and its wait and entry were spent past a ``max_gpu_hours`` cap. Where it holds fewer, it is held again
    with them (same dollars, same holder), the old one closed as replaced. ``headroom``: GPU-hours held past
    ``gpu_hours`` as far as its budgets have room, so that a wait that asks a little more at each poll holds
    it again rarely (held exactly, a 1 s poll replaced it each second: thousands of rows an hour). It takes
    at most half the room past ``gpu_hours``: taking it all near a ``max_gpu_hours`` cap, it left another
    slot no room for a hold of its own time, and that slot went on at once, neither waiting nor arbitrating.
    ``trim``: a hold holding more than ``gpu_hours`` and ``headroom`` is held again with them alone.

    Raises:
        BudgetExceededError: a budget over the hold's scope has no room for them (named by the ledger).
    """
    held = next((r for r in ledger.open_reservations() if r.id == hold_id), None)
    if held is None:  # settled, released or expired: not the slot's to hold again here
        return hold_id
    unpaid_usd, unpaid_gpu_hours = ledger.unpaid(hold_id)
    if unpaid_gpu_hours >= gpu_hours and not (trim and unpaid_gpu_hours > gpu_hours + headroom):
        return hold_id
    asked = gpu_hours
    if headroom > 0:
        room = _gpu_hour_room(ledger, held, run_id)
        spare = headroom if room is None else min(headroom, _half_micros(room - gpu_hours))
        asked = gpu_hours + max(spare, Decimal(0))
    who = "the slot" if slot is None else f"slot {slot}"
    again = ledger.reserve(
        held.scope,
        unpaid_usd,
        gpu_hours=asked,
        holder=held.holder,
        run_id=run_id,
        dag_id=holder_dag_id(held.holder) if held.holder else None,
        ttl=max(held.expires_at - utcnow(), timedelta(seconds=SLOT_HOLD_SECONDS)),
        purpose=f"{who}'s time, held again for {asked} GPU-hours",
        replacing=hold_id,  # closed as "replaced": the entry settles the new hold
    )
    return again.id


def _half_micros(gpu_hours: Decimal) -> Decimal:
    """Half of ``gpu_hours``, rounded down to the micro-GPU-hour the ledger counts (never past the room)."""
    return (gpu_hours / 2).quantize(Decimal("0.000001"), rounding="ROUND_FLOOR")


def _gpu_hour_room(ledger: Ledger, held: Reservation, run_id: str | None) -> Decimal | None:
    """The fewest GPU-hours left in a budget ``held`` is in, with it given back; None: none caps them."""
    rooms = [
        u.cap_gpu_hours - u.spent_gpu_hours - u.reserved_gpu_hours
        for u in budgets_without(ledger, held, run_id)
        if u.cap_gpu_hours is not None
    ]
    return min(rooms, default=None)


def budgets_without(ledger: Ledger, held: Reservation, run_id: str | None) -> list[BudgetUsage]:
    """Where each budget ``held`` is in stands without it: what it has unpaid counts as room.

    Read for the holder's run and DAG, as the hold's own budgets were found when it was made.
    """
    dag_id = holder_dag_id(held.holder) if held.holder else None
    standing = ledger.usage(held.scope, run_id=run_id, dag_id=dag_id, without=held.id)
    return [u for u in standing if u.label in held.budgets]


def _pause_until_first_hold_ends(first_end: datetime, poll_seconds: float) -> float:
    """How long a slot past its own lease sleeps: until the study's first open hold expires, within bounds.

    It waits for holds kept past their trial (for a retry, hours at most), which end when their retry
    settles them or when they expire: asked every ``poll_seconds`` (a query of its own, and the reserve's)
    for up to an hour, such a slot kept the ledger busy for nothing. ``LATE_POLL_SECONDS`` at most: a
    settle frees the money before the expiry.
    """
    until_expiry = (first_end - utcnow()).total_seconds()
    return min(max(until_expiry, poll_seconds), max(LATE_POLL_SECONDS, poll_seconds))


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


class SlotYields(WaitNotHeld):
    """A slot refused only for other slots' holds on their own time gives way to the first of them to wait."""


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
    spares: Mapping[str, Decimal] | None = None,
) -> None:
    """Return if this slot's hold (``hold_id``) is the first of the waiting slots' (``waits``), else yield.

    The first keeps waiting: the others give their holds up at their next ask, settled at what they ran.
    ``places``: when each slot first recorded its wait, by hold id; used where every hold compared has one
    (one clock), else the holds' own times are. ``spares``: GPU-hours the other slots' holds hold past their
    need, by hold id: where the trial fits once they are given up, the slot waits for the first to trim its
    hold (:func:`hold_wait_gpu_hours`) instead of giving way.

    Raises:
        SlotYields: another slot's hold was made first.
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
    spare = sum(((spares or {}).get(r.id, Decimal(0)) for r in others), Decimal(0))
    if spare > 0 and _has_room_now(
        replace(own, reserved_gpu_hours=own.reserved_gpu_hours - spare), usd, gpu_hours
    ):
        log.info(
            "slot %d waits: its trial fits once the other waiting slots give up the %s GPU-hours their holds "
            "hold past their need",
            slot,
            _gpu_hours_said(spare),
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
    if usd_fits and own.cap_gpu_hours is not None:
        left = max(own.cap_gpu_hours - own.spent_gpu_hours - own.reserved_gpu_hours, Decimal(0))
        held = sum((r.gpu_hours for r in others), Decimal(0))
        cap, spent = _gpu_hours_said(own.cap_gpu_hours), _gpu_hours_said(own.spent_gpu_hours)
        reserved = _gpu_hours_said(own.reserved_gpu_hours)
        return (
            f"{_gpu_hours_said(left)} GPU-hours of room (cap {cap}, spent {spent}, held for others "
            f"{reserved}, {_gpu_hours_said(held)} of it by other slots waiting for money, no trial's) "
            f"for the {_gpu_hours_said(gpu_hours)} GPU-hours its trial needs"
        )
    held_usd = sum((r.usd for r in others), Decimal(0))
    return (
        f"{format_usd_exact(max(own.left_usd, Decimal(0)))} of room (cap {format_usd_exact(own.cap_usd)}, "
        f"spent {format_usd_exact(own.spent_usd)}, held for others {format_usd_exact(own.reserved_usd)}, "
        f"{format_usd_exact(held_usd)} of it by other slots waiting for money, no trial's) for the "
        f"{format_usd_exact(usd)} its trial needs"
    )


def _gpu_hours_said(gpu_hours: Decimal) -> str:
    """GPU-hours to the micro-GPU-hour the ledger counts (0.500000, not 0.5000000000)."""
    return str(gpu_hours.quantize(Decimal("0.000001")))


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


def _may_come_back(own: BudgetUsage, usd: Decimal, gpu_hours: Decimal) -> bool:
    """Whether a budget (the study's) may make room: holds are open in it, and what is spent leaves room.

    GPU-hours count as dollars do: on free compute (a price of 0) trials hold GPU-hours and no dollars, and a
    slot refused while they ran stopped the study for good.
    """
    in_flight = own.reserved_usd > 0 or own.reserved_gpu_hours > 0
    gpu_room = own.cap_gpu_hours is None or own.spent_gpu_hours + gpu_hours <= own.cap_gpu_hours
    return in_flight and own.spent_usd + usd <= own.cap_usd and gpu_room


def _has_room_now(own: BudgetUsage, usd: Decimal, gpu_hours: Decimal) -> bool:
    """Whether a budget (the study's) has room for ``usd`` and ``gpu_hours`` beside its spend and holds."""
    gpu_room = (
        own.cap_gpu_hours is None
        or own.spent_gpu_hours + own.reserved_gpu_hours + gpu_hours <= own.cap_gpu_hours
    )
    return own.spent_usd + own.reserved_usd + usd <= own.cap_usd and gpu_room


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


def _unpaid(ledger: Ledger, held: Reservation, usd: Decimal) -> Reservation:
    """``held`` as this try may spend it: less what an earlier try of the task paid from it.

    A try put up for retry leaves its hold open, paid in part; the retry gets that hold back from
    ``reserve``. Trained as if the whole of it were free, the trial spent past the study's cap. The hold is
    grown back toward what this try needs where the budgets have room (``grow`` never passes a cap). Its
    GPU-hours are not grown: what the earlier try paid of them is taken off (they bound a trial on free
    compute, where the dollars bound nothing).
    """
    from dataclasses import replace

    paid = ledger.paid_from([held.id]).get(held.id, Decimal(0))
    paid_gpu_hours = Decimal(0)
    if held.gpu_hours > 0:
        paid_gpu_hours = ledger.paid_from([held.id], gpu_hours=True).get(held.id, Decimal(0))
    if paid <= 0 and paid_gpu_hours <= 0:
        return held
    grown = ledger.grow(held.id, paid + usd) if paid > 0 else held
    log.info(
        "the trial's hold was paid %s and %s GPU-hours by an earlier try: %s and %s GPU-hours of it are left",
        format_usd(paid),
        paid_gpu_hours,
        format_usd(grown.usd - paid),
        max(grown.gpu_hours - paid_gpu_hours, Decimal(0)),
    )
    return replace(
        grown,
        usd=max(grown.usd - paid, Decimal(0)),
        gpu_hours=max(grown.gpu_hours - paid_gpu_hours, Decimal(0)),
    )


def study_usage(ledger: Ledger, spec: StudySpec, *, without: str | None = None) -> BudgetUsage | None:
    """Where the study's own budget stands (other budgets may cover the study too).

    ``without``: a reservation left out of what it holds (see ``Ledger.usage``).
    """
    label = f"{spec.budget_scope}/"
    standing = ledger.usage(spec.budget_scope, without=without)
    return next((u for u in standing if u.label.startswith(label)), None)


def settle_trial(
    ledger: Ledger,
    spec: StudySpec,
    reservation_id: str,
    seconds: float,
    owner: EntryOwner,
    label: str,
    tags: Mapping[str, str],
    outcome: str,
    note: str,
) -> Decimal:
    """Settle the trial's reservation with one compute entry owned by ``owner`` (outside Airflow)."""
    entry = _slot_entry(
        spec,
        seconds,
        owner,
        label=label,
        tags=tags,
        outcome=outcome,
        note=note,
        reservation_id=reservation_id,
    )
    ledger.settle(reservation_id, entry.usd, entry=entry)
    return entry.usd


def record_skipped_slot(
    ledger: Ledger,
    spec: StudySpec,
    seconds: float,
    owner: EntryOwner,
    why: str,
    hold: str | None = None,
    *,
    label: str = "skipped",
    outcome: str = "skipped",
    tried_to_hold_again: bool = False,
) -> Decimal:
    """Record the time a slot that ran no trial took to decide (outside Airflow); returns its cost.

    In Airflow the listener bills a skipped try; here loading the study and waiting for money ran on the
    machine the study pays for too, and nothing else records it. ``hold``: the slot's hold on that time
    (:func:`hold_slot_time`), settled with the entry. ``label`` and ``outcome``: the entry's (a slot that
    raised before its trial's reservation: ``open``, ``failed``). ``tried_to_hold_again``: the caller tried
    to hold the slot's time again and the budgets refused (said only then, of a hold found expired).
    """
    tags = spec.budget_scope.as_dict()
    entry = _slot_entry(
        spec, seconds, owner, label=label, tags=tags, outcome=outcome, note=why, reservation_id=hold
    )
    if hold is None:
        ledger.record(entry)
        return entry.usd
    # The tail since the hold was last grown (the refusal, this entry's write): held before it is billed.
    if entry.gpu_hours > 0:
        try:
            hold = cover_gpu_hours(ledger, hold, entry.gpu_hours, None, owner.run_id)
            entry = replace(entry, reservation_id=hold)
        except BudgetExceededError as e:
            log.warning("slot's skipped entry of %s GPU-hours is past its hold: %s", entry.gpu_hours, e)
    paid = ledger.paid_from([hold]).get(hold, Decimal(0))
    unpaid_before, _ = ledger.unpaid(hold)
    asked_at = utcnow()
    held = ledger.grow(hold, paid + entry.usd)
    # Lapsed by the time the grow used: before it was asked, or lapsed now and not grown at all (a grow
    # that raised it found it open). Read after the grow alone, a hold grown in full just before its end
    # was said to hold none of it; judged by "grown in full" instead, a hold that already held the entry
    # and ran out as the grow was asked was returned as it stood and nothing was said.
    grown = held.usd - paid > unpaid_before
    if held.lapsed(asked_at) or (not grown and held.lapsed(utcnow())):
        # Expired (a load past its ttl) and not held again: it holds nothing, whatever room its budgets have.
        # "Could not be held again" only where the caller tried: a slot that found its study stopped after
        # a long load never did.
        why_expired = (
            "and could not be held again" if tried_to_hold_again else "before the entry was recorded"
        )
        log.warning(
            "slot's skipped entry of %s (%.1f s at the study's $%s/h) is settled against its hold %s, which "
            "expired at %s %s: it held none of it; the time was spent and is recorded",
            format_usd_exact(entry.usd),
            seconds,
            spec.usd_per_hour,
            hold,
            held.expires_at.isoformat(timespec="seconds"),
            why_expired,
        )
    elif held.status == "open" and held.usd < paid + entry.usd:
        log.warning(
            "slot's skipped entry of %s (%.1f s at the study's $%s/h) is %s more than its hold %s has left: "
            "the budgets it is in had no room for the rest; the time was spent and is recorded",
            format_usd_exact(entry.usd),
            seconds,
            spec.usd_per_hour,
            format_usd_exact(paid + entry.usd - held.usd),
            hold,
        )
    ledger.settle(hold, entry.usd, entry=entry)
    return entry.usd


def _slot_entry(
    spec: StudySpec,
    seconds: float,
    owner: EntryOwner,
    *,
    label: str,
    tags: Mapping[str, str],
    outcome: str,
    note: str,
    reservation_id: str | None = None,
) -> LedgerEntry:
    """The compute entry of ``seconds`` a slot ran at the study's price, owned by ``owner``."""
    hours, usd = compute_cost(seconds, spec.usd_per_hour)
    return LedgerEntry(
        dag_id=owner.dag_id,
        run_id=owner.run_id,
        task_id=owner.task_id,
        map_index=owner.map_index,
        trial=label,
        kind=Kind.COMPUTE,
        usd=usd,
        instance_type=spec.instance_type,
        region=spec.region,
        market=Market.parse(spec.market),
        quantity=hours,
        unit_price_usd=spec.usd_per_hour,
        gpu_hours=(hours * spec.gpus).quantize(Decimal("0.000001")),
        tags={**dict(tags), **dict(owner.extra_tags)},
        outcome=outcome,
        price_source="given",
        note=clipped_note(note),
        reservation_id=reservation_id,
    )
