"""Outside Airflow, a trial slot's time before its trial's reservation: held, grown, recorded.

Outside Airflow no listener bills the slot's try: its time (loading the study, waiting for money) is held
before the study's load (:func:`_hold_slot_outside_airflow`), grown after it (:func:`_grow_slot_hold`), and
recorded as a skipped entry where the slot runs no trial (:func:`_slot_not_held`, :func:`_skipped_at_stop`,
:func:`_record_slot_error`); :class:`~.trial_steps._SlotTime` says as the slot goes what that entry is
recorded with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import optuna

from costaware.core.errors import BudgetExceededError
from costaware.core.money import format_usd, format_usd_exact
from costaware.core.tuning import StopReason, StudySpec, usd_for_seconds
from costaware.training.tuning.reservations import (
    budgets_without,
    gpu_hours_for,
    hold_slot_time,
    keep_slot_hold_after_load,
    record_skipped_slot,
    slot_may_wait,
)
from costaware.training.tuning.results import EntryOwner, SlotResult
from costaware.training.tuning.trial_reservation import _in_study_caps, _raise_max_gpu_hours, _stop
from costaware.training.tuning.trial_steps import _SlotTime

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import Reservation

# The slot's records keep the logger they had before trial.py was split (logging configs filter on it).
log = logging.getLogger("costaware.training.tuning.trial")


#: Outside Airflow, the slot's hold before the load counts it as this many reads of the study's settings:
#: a study's trials and attributes are a few reads of the same store.
STUDY_LOAD_READS = 10


def _skipped_at_stop(
    ledger: Ledger,
    spec: StudySpec,
    stop: Mapping[str, Any],
    seconds: float,
    owner: EntryOwner,
    slot_time: _SlotTime,
) -> SlotResult:
    """The slot found the study's recorded ``stop`` before holding anything: its ``seconds`` are recorded."""
    message = stop["message"]
    record_skipped_slot(ledger, spec, seconds, owner, message)
    slot_time.recorded = True
    return SlotResult(ran=False, reason=message, stop=StopReason(stop["reason"]))


def _record_slot_error(
    ledger: Ledger, holder: str, slot_time: _SlotTime, seconds: float, owner: EntryOwner, error: BaseException
) -> None:
    """Record the slot's time against its hold where it raised before its trial's reservation (no Airflow).

    Left open, the hold kept the study's money from other slots until it expired ($0.55 of a $1 study for
    600 s after a study store went away mid-load), and the time it paid for was recorded nowhere. What the
    slot's own raise says wins: a ledger that cannot record this is logged, not raised.
    """
    if slot_time.spec is None or slot_time.recorded:
        return
    why = f"the slot raised before its trial's reservation: {type(error).__name__}: {error}"
    try:
        # Its hold as it now stands, or the trial's reservation granted as it raised, or the expired one.
        hold_id = slot_time.hold_to_settle(ledger, holder, held=slot_time.held)
        record_skipped_slot(
            ledger,
            slot_time.spec,
            seconds,
            owner,
            why,
            hold_id,
            label="open",
            outcome="failed",
            tried_to_hold_again=slot_time.not_held_again is not None,
        )
    except Exception:
        log.exception("slot of %s: its %.1f s before it raised could not be recorded", holder, seconds)


def _time_before_load(spec: StudySpec, seconds: float, read_seconds: float, load_seconds: float) -> str:
    """What the slot's hold before the study's load asked for (its time so far and the load's estimate)."""
    total = seconds + load_seconds
    so_far = f"its time so far ({_s(seconds)} s"
    if seconds > read_seconds:  # the caller's time before this call
        so_far += f", {_s(seconds - read_seconds)} s of it before this call"
    return (
        f"{so_far}, up to reading the study's settings) and loading the study's trials (estimated at "
        f"{_s(load_seconds)} s, {STUDY_LOAD_READS} times that read), {_s(total)} s at the study's "
        f"${spec.usd_per_hour}/h: {_held_for(spec, total)}"
    )


def _time_so_far(spec: StudySpec, seconds: float) -> str:
    """What the slot's hold after the study's load asked for: its time so far."""
    return (
        f"its time so far ({_s(seconds)} s, reading and loading the study) at the study's "
        f"${spec.usd_per_hour}/h: {_held_for(spec, seconds)}"
    )


def _held_for(spec: StudySpec, seconds: float) -> str:
    """The money of ``seconds`` at the study's price, and its GPU-hours on a study with GPUs."""
    usd = format_usd_exact(usd_for_seconds(seconds, spec.usd_per_hour))
    if spec.gpus <= 0:
        return usd
    gpus = f"{spec.gpus:g} GPU" if spec.gpus == 1 else f"{spec.gpus:g} GPUs"
    return f"{usd} and {gpu_hours_for(seconds, spec.gpus)} GPU-hours on its {gpus}"


def _s(seconds: float) -> str:
    """Seconds as a reader wants them: 0.002, 1, 700 (not 0.0 for a read of 2 ms)."""
    return f"{round(seconds, 3):g}"


def _hold_slot_outside_airflow(
    spec: StudySpec,
    ledger: Ledger,
    holder: str,
    run_id: str | None,
    slot: int,
    seconds: float,
    load_seconds: float,
) -> Reservation | None:
    """Hold the slot's time so far and the load's estimate (``load_seconds``) at the study's price.

    Outside Airflow: a wait for other trials' money grows it step by step before each sleep, and the
    trial's reservation replaces it (:func:`reserve_trial_cost`); a slot that runs no trial settles its entry
    against it. Without it, a slot refused after a 2-minute wait at $36/h beside another trial's $0.99 of a
    $1 study recorded $1.20 spent. Held once the study was loaded, a long load was spent before it was held
    ($0.0458 recorded against $0.03 held at $360/h): it is held before the load, with an estimate of it,
    and grown after it where the load ran longer (:func:`_grow_slot_hold`). None: no budget counts the
    study's scope.

    Raises:
        BudgetExceededError: a budget over the study's scope cannot hold it.
    """
    from costaware.core.ledger import holder_dag_id

    return hold_slot_time(
        ledger,
        spec.budget_scope.as_dict(),
        usd_for_seconds(seconds + load_seconds, spec.usd_per_hour),
        gpu_hours=gpu_hours_for(seconds + load_seconds, spec.gpus),
        holder=holder,
        run_id=run_id,
        dag_id=holder_dag_id(holder),
        seconds=seconds + load_seconds,
        purpose=(
            f"slot {slot} of study '{spec.study_name}' before its trial's reservation (loading the study "
            f"and waiting for money, at the study's ${spec.usd_per_hour}/h)"
        ),
    )


def _grow_slot_hold(
    ledger: Ledger, hold_id: str, spec: StudySpec, seconds: float, slot: int, run_id: str | None
) -> str | None:
    """Grow the slot's hold to its time so far (``seconds`` at the study's price) unpaid (outside Airflow).

    Returns the id of the hold that now holds it: ``hold_id``, or a new one where ``hold_id`` expired during
    the load (see :func:`~costaware.training.tuning.reservations.keep_slot_hold_after_load`; not grown,
    it read as "a budget set since it was made" and the slot stopped the study for good). None: the budgets
    it was held in were deleted since, and no budget counts the slot's time now.

    Raises:
        BudgetExceededError: a budget the hold is in has no room for it (named, as a refused reserve does).
    """
    from costaware.core.budgets import check_cap

    usd = usd_for_seconds(seconds, spec.usd_per_hour)
    paid = ledger.paid_from([hold_id]).get(hold_id, Decimal(0))
    held = ledger.grow(hold_id, paid + usd)
    if held.usd >= paid + usd:
        return hold_id
    # Looked at only where it was not grown: the common load keeps its one ledger call.
    kept = keep_slot_hold_after_load(ledger, hold_id, spec, slot, run_id, seconds)
    if kept != hold_id:
        return kept
    for usage in budgets_without(ledger, held, run_id):
        check_cap(usage, usd, Decimal(0), f"slot {slot}'s time so far")
    # Every budget has room, yet it was not grown (a budget set since it was made): no hold covers the rest.
    raise BudgetExceededError(
        f"slot {slot}'s hold on its time (reservation {hold_id}) could not be grown to {format_usd(usd)}: a "
        "budget set since it was made holds nothing of it; run the slot again",
        scope=held.budgets[0] if held.budgets else "",
        spent_usd=str(held.usd),
        cap_usd=str(held.usd),
        needed_usd=str(usd),
    )


def _slot_not_held(
    the_study: Callable[[], optuna.study.Study],
    stopped: Mapping[str, Any] | None,
    spec: StudySpec,
    ledger: Ledger,
    slot: int,
    seconds: float,
    what: str,
    e: BudgetExceededError,
) -> SlotResult:
    """The slot runs no trial, its time so far (``seconds``, described by ``what``) refused a hold.

    Outside Airflow. The study goes on (``goes_on``) while its trials hold money that may come back, else its
    money is spent and the slot stops it, as a refused trial's reservation does (``the_study`` gives the
    study to record the stop in: loaded only then). A study stopped already (``stopped``, its recorded stop)
    says why it did.
    """
    if stopped:
        return SlotResult(ran=False, reason=stopped["message"], stop=StopReason(stopped["reason"]))
    message = str(e)
    if e.scope.startswith(f"{spec.budget_scope}/"):  # the study's own budget: its caps are the study's
        message = _in_study_caps(
            message,
            raise_max_usd=f"raise the study's max_usd ({format_usd(spec.caps.max_usd)})",
            raise_max_gpu_hours=_raise_max_gpu_hours(spec),
        )
    reason = f"study {spec.study_name}: slot {slot} runs no trial: {what}, cannot be held: {message}"
    if not slot_may_wait(ledger, spec, e.scope, usd_for_seconds(seconds, spec.usd_per_hour)):
        # Nothing of the study's trials may come back: its money is spent, and a driver that runs slots
        # until the study stops paid a load past the cap with each.
        return _stop(the_study(), StopReason.BUDGET, reason, renews=e.renews)
    # Not the study's stop: what is held may come back to a slot run later.
    return SlotResult(ran=False, reason=reason, stop=StopReason.BUDGET, goes_on=True)
