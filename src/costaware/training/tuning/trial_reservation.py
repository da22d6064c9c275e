"""A trial slot's reservation of its trial's cost, and what a refusal tells the user to raise.

:func:`_reserve_trial` estimates the trial's cost and reserves it (waiting while other trials hold money
that may come back); a refusal by the study's own budget is told in the study's terms (max_usd,
max_gpu_hours, set by the plan) and stops the study (:func:`_stop`) or leaves it going on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING

import optuna

from costaware.core.budgets import RAISE_THE_GPU_HOUR_CAP, cap_advice_in
from costaware.core.errors import BudgetExceededError
from costaware.core.ledger import utcnow
from costaware.core.money import format_usd
from costaware.core.tuning import StopReason, StudySpec, TrialEstimate, estimate_trial_seconds
from costaware.training.tuning.reservations import (
    RAISE_THAT_CAP,
    SLOT_WAIT_MARGIN_SECONDS,
    HoldNotHeldAgain,
    SlotYields,
    WaitingRecords,
    WaitNotHeld,
)
from costaware.training.tuning.results import SlotResult
from costaware.training.tuning.study import STOP_ATTR, finish_failed, trial_timings
from costaware.training.tuning.trial_steps import _Slot, _SlotTime

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import Reservation
    from costaware.training.tuning.arbitration import WaitingSlots

# The slot's records keep the logger they had before trial.py was split (logging configs filter on it).
log = logging.getLogger("costaware.training.tuning.trial")


def _reserve_trial(
    s: _Slot,
    ledger: Ledger,
    holder: str,
    run_id: str | None,
    slot: int,
    wait_poll_seconds: float,
    keep_for_retry_seconds: float,
    slot_hold: str | None,
    slot_usd_per_hour: Decimal | None,
    bill_tags: Mapping[str, str] | None,
    waits: WaitingSlots,
    slot_time: _SlotTime,
    *,
    reserve: Callable[..., Reservation],
    outside_airflow: bool = False,
) -> tuple[Reservation, TrialEstimate] | SlotResult:
    """Estimate the trial's full-fidelity cost and reserve it; a refusal stops the study for good.

    Outside Airflow a slot whose wait for money cannot be held in the study's budget stops waiting without
    stopping the study (``goes_on``): that money is held by trials in flight, and what they give back pays
    later slots. The slot's hold, recorded in the study as it opened (``waits``), is renewed before and after
    each ask, so that other slots refused beside it do not take it for a trial's money that may come back
    (the caller forgets it once the slot's trial or entry is recorded; see
    :class:`~costaware.training.tuning.arbitration.WaitingSlots`). ``slot_time``: told of a hold the wait
    could not hold again, which the caller's skipped entry settles against. ``reserve``:
    :func:`~costaware.training.tuning.reservations.reserve_trial_cost` as the caller looks it up (patched on
    :mod:`.trial` by tests and callers).
    """
    spec = s.spec
    estimate = estimate_trial_seconds(
        trial_timings(s.trials), spec.schedule.max_resource, spec.fallback_trial_seconds, spec.safety_factor
    )

    # The slot's clock runs from its start: what it already used (loading the study, waiting for money)
    # is settled with the trial, so it is reserved with the estimate.
    def seconds_needed() -> float:
        return (s.meter() - s.started) + estimate.seconds + spec.slack_seconds

    try:
        reservation = reserve(
            ledger,
            spec,
            seconds_needed,
            holder,
            run_id,
            slot,
            wait_poll_seconds,
            keep_for_retry_seconds,
            replacing=slot_hold,
            bill_tags=bill_tags,
            slot_usd_per_hour=slot_usd_per_hour,
            slot_seconds_so_far=s.meter() - s.started,
            # Outside Airflow the slot's entry is measured by its meter, not by the try's real time.
            slot_seconds=(lambda: s.meter() - s.started) if outside_airflow else None,
            # Outside Airflow the slot's own entry follows its last hold at once (the refusal, the entry's
            # write: what slack_seconds pays for); in Airflow the bill comes at the try's end.
            slot_wait_margin_seconds=spec.slack_seconds if outside_airflow else SLOT_WAIT_MARGIN_SECONDS,
            outside_airflow=outside_airflow,
            mark_waiting=waits.mark,
            waiting_holds=waits.others,
            waiting_records=WaitingRecords(places=waits.places, spares=waits.spares),
        )
    except BudgetExceededError as e:
        if isinstance(e, HoldNotHeldAgain):
            slot_time.not_held_again = e.hold_id
        if s.resumed is not None:
            finish_failed(s.study, s.resumed, "no budget left to resume it")
        message = str(e)
        # The study's own budget (named "<scope>/<period> (...)"), set by the plan from max_usd: raised by
        # max_usd, not by `costaware budget set` (the plan would set it back).
        raise_max_usd = (
            f"the study's budget is its max_usd ({format_usd(spec.caps.max_usd)}): raise max_usd"
            f"{_estimate_advice(estimate, spec.fallback_trial_seconds)} and run the DAG again "
            f"{_rerun_advice(spec.study_name, run_id)}"
        )
        if isinstance(e, SlotYields):  # in Airflow too: the slot that waited first may still run a trial
            log.info("study %s: slot %d runs no trial: %s", spec.study_name, slot, e)
            return SlotResult(ran=False, reason=str(e), stop=StopReason.BUDGET, goes_on=True)
        if isinstance(e, WaitNotHeld):
            # The wait's time, not the trial's estimate, found no room: fallback_trial_seconds is no help.
            raise_max_usd = (
                f"the study's budget is its max_usd ({format_usd(spec.caps.max_usd)}): raise max_usd"
            )
            if not outside_airflow:  # the study stops: a new run goes on with it
                raise_max_usd += f" and run the DAG again {_rerun_advice(spec.study_name, run_id)}"
        own = e.scope.startswith(f"{spec.budget_scope}/")
        if own and RAISE_THE_GPU_HOUR_CAP in message:
            # Refused GPU-hours, not dollars: told to raise max_usd, a slot on free compute changed nothing.
            rerun = (
                ""
                if outside_airflow and isinstance(e, WaitNotHeld)
                else f" and run the DAG again {_rerun_advice(spec.study_name, run_id)}"
            )
            raise_max_usd = f"{_raise_max_gpu_hours(spec)}{rerun}"
        if own:
            message = _in_study_caps(message, raise_max_usd=raise_max_usd, raise_max_gpu_hours=raise_max_usd)
        named = f"'{spec.budget_scope}/" in message and raise_max_usd not in message
        if named and (not own or isinstance(e, WaitNotHeld)):
            # Another budget refused first and named the study's too, or a slot's wait found several short
            # (raise those budgets' caps): the plan sets the study's from max_usd each run.
            message = f"{message}; {raise_max_usd}"
        if outside_airflow and isinstance(e, WaitNotHeld):
            log.info("study %s: slot %d runs no trial: %s", spec.study_name, slot, message)
            return SlotResult(ran=False, reason=message, stop=StopReason.BUDGET, goes_on=True)
        # A total budget, or a trial above a budget's whole cap: no new period makes room for it, ever.
        return _stop(s.study, StopReason.BUDGET, message, renews=e.renews)
    s.reserved_at = s.meter()
    return reservation, estimate


def _estimate_advice(estimate: TrialEstimate, fallback_trial_seconds: float) -> str:
    """Where the refused estimate came from, and the setting that changes it."""
    if estimate.seconds_per_unit is not None:
        return f" (the estimate comes from the study's finished trials: {estimate.source})"
    # Until a trial has reached a rung the estimate is the user's guess, 600 s unless set.
    return (
        f", or set fallback_trial_seconds (now {fallback_trial_seconds:g} s: what one trial at max_resource "
        "is assumed to take until one has finished, the estimate's source) to what a trial takes,"
    )


def _rerun_advice(study_name: str, run_id: str | None) -> str:
    """Whether a new run goes on with this study: not when its name holds this run's id."""
    if run_id and run_id in study_name:
        # study_name="delays-{{ run_id }}": every run is a study of its own.
        return (
            f"(the study_name {study_name!r} holds this run's id, so the next run starts a new study; "
            "give a fixed study_name to go on with one)"
        )
    return f"(a run with study_name {study_name!r} goes on with this study)"


def _in_study_caps(message: str, *, raise_max_usd: str, raise_max_gpu_hours: str) -> str:
    """A refusal by the study's own budget (``message``), told to raise the study's caps instead of it.

    The plan sets that budget from max_usd and max_gpu_hours at each run: `costaware budget set` on it
    would be set back. The ledger's advice (raise the cap, or the GPU-hour cap) and a waiting slot's (raise
    the budget its wait was held in) are replaced with ``raise_max_usd`` and ``raise_max_gpu_hours``.
    """
    message = message.replace(RAISE_THE_GPU_HOUR_CAP, raise_max_gpu_hours)
    # A slot that stopped waiting for money is told to raise the budget its wait was held in.
    advice = RAISE_THAT_CAP if RAISE_THAT_CAP in message else cap_advice_in(message)
    return message.replace(advice, raise_max_usd)


def _raise_max_gpu_hours(spec: StudySpec) -> str:
    """What a slot refused GPU-hours by the study's own budget is told: its GPU-hour cap is max_gpu_hours."""
    return (
        f"raise the study's max_gpu_hours ({spec.caps.max_gpu_hours}: the GPU-hour cap the plan sets on the "
        "study's budget)"
    )


def _stop(study: optuna.study.Study, reason: StopReason, message: str, *, renews: bool = True) -> SlotResult:
    """Record why the study stops (the first reason of a DAG run is kept).

    ``renews``: a budget's next period may make room (False: the need is more than its whole cap).
    """
    if not study.user_attrs.get(STOP_ATTR):  # the first stop reason of a DAG run is the one kept
        stop = {"reason": reason.value, "message": message, "at": utcnow().isoformat()}
        study.set_user_attr(STOP_ATTR, stop if renews else {**stop, "renews": False})
    log.info("study %s stops: %s (%s)", study.study_name, reason.value, message)
    return SlotResult(ran=False, reason=message, stop=reason)
