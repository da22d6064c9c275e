"""A slot's hold on its own time: made before its trial's reservation, kept and grown while it waits.

Split from :mod:`.reservations`, which re-exports the public names (callers import them from there).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from costaware.core.budgets import Scope
from costaware.core.errors import BudgetExceededError, BudgetNotFoundError
from costaware.core.ledger import compute_cost, holder_dag_id
from costaware.core.money import format_usd, format_usd_exact
from costaware.core.tuning import usd_for_seconds
from costaware.training.tuning.gpu_hour_holds import budgets_without, gpu_hours_for
from costaware.training.tuning.slot_clock import utcnow
from costaware.training.tuning.wait_refusals import (
    RAISE_THAT_CAP,
    RAISE_THOSE_CAPS,
    SLOT_HOLD_SECONDS,
    SLOT_WAIT_MARGIN_SECONDS,
    HoldNotHeldAgain,
    WaitNotHeld,
)

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import Reservation
    from costaware.core.tuning import StudySpec

# Logged under the name these records had before reservations.py was split (logging configs filter on it).
log = logging.getLogger("costaware.training.tuning.reservations")


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
