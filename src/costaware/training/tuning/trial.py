"""One trial slot: stop rules, a reservation of the trial's cost, rung-by-rung training, the result.

:func:`run_trial` runs in steps, each a function here: :func:`_open_slot` (load the study, fail stale
trials, apply the stop rules), :func:`_reserve_trial` (estimate and reserve the trial's cost),
:func:`_start_trial` (ask Optuna for parameters, or retrain those of the trial this holder left running),
:func:`_train_rungs` (train rung by rung within the money reserved, pruned by successive halving) and
:func:`_finish_trial` (tell Optuna, label the ledger entry, settle outside Airflow).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import optuna

from costaware.core.budgets import RAISE_THE_GPU_HOUR_CAP, cap_advice_in
from costaware.core.errors import BudgetExceededError, ConfigurationError, check_keywords
from costaware.core.ledger import utcnow
from costaware.core.money import format_usd, format_usd_exact
from costaware.core.tuning import (
    StopReason,
    StudySpec,
    TrialEstimate,
    TrialState,
    estimate_trial_seconds,
    seconds_for_usd,
    stop_reason,
    trial_label,
    usd_for_seconds,
    wall_clock_left,
)
from costaware.training.tuning.arbitration import WaitingSlots
from costaware.training.tuning.fidelity import FidelityModel, TrainerFactory
from costaware.training.tuning.optuna_glue import distributions, pruning_note
from costaware.training.tuning.reservations import (
    RAISE_THAT_CAP,
    SLOT_WAIT_MARGIN_SECONDS,
    HoldNotHeldAgain,
    SlotYields,
    WaitNotHeld,
    budgets_without,
    cover_gpu_hours,
    gpu_hours_for,
    hold_slot_time,
    keep_slot_hold_after_load,
    record_skipped_slot,
    reserve_trial_cost,
    settle_trial,
    slot_may_wait,
)
from costaware.training.tuning.results import EntryOwner, SlotResult, TrialResult
from costaware.training.tuning.study import (
    STARTED_ATTR,
    STOP_ATTR,
    TRIAL_ATTR,
    fail_stale_trials,
    finish_failed,
    finished_trials,
    load_study,
    spec_of,
    started_trials,
    stop_of_loaded,
    stopped_before_load,
    trial_info,
    trial_timings,
)

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import Reservation

log = logging.getLogger(__name__)

#: Seconds kept back from a trial's reserved time for what follows training (tell, ledger write).
TAIL_SECONDS = 0.5

OnLabel = Callable[[str, dict[str, str], str], None]

#: Outside Airflow, the slot's hold before the load counts it as this many reads of the study's settings:
#: a study's trials and attributes are a few reads of the same store.
STUDY_LOAD_READS = 10


@dataclass(slots=True)
class _Slot:
    """What the steps of one slot share."""

    study: optuna.study.Study
    spec: StudySpec
    trials: list[optuna.trial.FrozenTrial]
    started_at: datetime
    resumed: optuna.trial.FrozenTrial | None
    started: float
    meter: Callable[[], float]
    #: When the reservation was granted; what came before it is reserved as it is, not as overhead.
    reserved_at: float = 0.0


@dataclass(slots=True)
class _Training:
    """How the rungs went: the results, the time spent training, and how it ended.

    ``bookkeeping`` is the slowest call to the study store so far (ask, report, prune check): on a store
    shared by busy slots (SQLite has one writer) it waits for locks and is not negligible, so every rung
    leaves room for one more such call and for the final tell.
    """

    rungs: list[tuple[int, float]] = field(default_factory=list)
    train_seconds: float = 0.0
    bookkeeping: float = 0.0
    marginal: float | None = None
    state: TrialState = TrialState.PROMOTED
    decision: str = ""

    @property
    def fidelity(self) -> int:
        return self.rungs[-1][0] if self.rungs else 0

    @property
    def final(self) -> float | None:
        return self.rungs[-1][1] if self.rungs else None


def run_trial(
    *,
    storage_url: str,
    ledger: Ledger,
    study_name: str,
    trainer: TrainerFactory,
    trainer_kwargs: Mapping[str, Any] | None = None,
    holder: str,
    slot: int,
    run_id: str | None = None,
    settle_as: EntryOwner | None = None,
    on_label: OnLabel | None = None,
    meter: Callable[[], float] = time.monotonic,
    wait_poll_seconds: float = 1.0,
    keep_for_retry_seconds: float = 0.0,
    seconds_already_used: float = 0.0,
    slot_hold: str | None = None,
    slot_usd_per_hour: Decimal | None = None,
    bill_tags: Mapping[str, str] | None = None,
    loaded: tuple[optuna.study.Study, StudySpec] | None = None,
) -> SlotResult:
    """Run one trial of the study in this slot, within the money it reserves.

    Args:
        storage_url: Optuna RDB storage URL of the study.
        ledger: The ledger that holds the study's budget.
        study_name: The study (created by :func:`~costaware.training.tuning.study.create_study`).
        trainer: ``trainer(params, **trainer_kwargs)`` returns a :class:`FidelityModel`.
        trainer_kwargs: Extra keyword arguments for ``trainer`` (data paths, ...).
        holder: Reservation holder, unique per task instance (Airflow: ``dag/run/task/map_index``); a retry
            with the same holder trains the parameters of the trial its earlier try left running again, from
            the first rung, as a new trial (that one fails), paid from the same hold while it is open (else it
            reserves anew: see docs/tuning.md, "Preemption").
        slot: Slot number; seeds the sampler, with ``holder``.
        run_id: DAG run id, for budgets with period ``run``.
        settle_as: Settle the reservation here with a compute entry owned by this (outside Airflow); the
            slot's time before it (the load, a wait for money) is held as ``slot_hold`` is, at the study's
            price. In Airflow leave it None: the cost listener prices the task try and settles the
            reservation.
        on_label: Called with (trial label, ledger tags, note) when the trial starts and when it ends
            (Airflow: ``annotate_task``), so the listener's entry carries the trial and its decision.
        meter: The clock that measures the trial (seconds); time.monotonic by default.
        wait_poll_seconds: When the reservation is refused while other trials of the study hold money that
            may come back, ask again this often until they settled (then a refusal stops the study).
        keep_for_retry_seconds: Keep the trial's hold this much longer than its lease, for a retry of its
            task to find it again (Airflow: the task's retry delay, where it has a retry left; 0: none).
        seconds_already_used: What the caller's try has run before this call (Airflow: since the task try
            began), paid from the trial's reservation as the cost listener bills the whole try.
        slot_hold: The id of ``holder``'s hold on the slot's time before the trial's reservation
            (:func:`~costaware.training.tuning.reservations.hold_slot_time`): the trial's reservation
            replaces it as it is granted; a slot that runs no trial leaves it to the try's bill.
        slot_usd_per_hour: The price the try's bill is charged at (Airflow: the worker's): while the slot
            waits for other trials' money, ``slot_hold`` grows at it to pay the wait (None: not grown).
        bill_tags: Tags the try's bill carries beside the study's scope (Airflow: the run's tags, which the
            listener adds): the trial's reservation holds in every budget over both, as the bill counts in
            them all.
        loaded: The study as the caller loaded it, ``load_study(storage_url, study_name, slot, holder)``
            (Airflow: to label the try), used as it is: loaded again, the slot's time before its reservation
            held two loads where ``study_load_seconds`` held one.

    Returns:
        The slot's result; ``ran=False`` with the stop reason when the study is over, or with
        ``goes_on=True`` where the slot ran no trial while the study goes on (a slot run later may find
        room): it gave way to another slot refused beside it, which waited first, or its own time could
        not be held while the study's holds are open (outside Airflow; in Airflow only where those holds
        are other slots' on their own time, which come back as their tries are billed).

    Raises:
        ConfigurationError: the study does not exist, ``trainer`` cannot be called with ``trainer_kwargs``,
            or its ``check_inputs`` refused them (before anything is reserved).
        Exception: whatever the trainer raised (the trial is marked failed first).
    """
    _check_trainer_call(trainer, trainer_kwargs or {})
    # The slot's clock starts where its bill starts: the caller's time before this call is paid from the
    # reservation too (a slow study store or task start once pushed a try past its hold and a study past
    # max_usd).
    started = meter() - max(seconds_already_used, 0.0)
    slot_time = _SlotTime()
    try:
        try:
            reached = _until_reserved(
                storage_url=storage_url,
                ledger=ledger,
                study_name=study_name,
                holder=holder,
                slot=slot,
                run_id=run_id,
                settle_as=settle_as,
                meter=meter,
                started=started,
                seconds_already_used=seconds_already_used,
                wait_poll_seconds=wait_poll_seconds,
                keep_for_retry_seconds=keep_for_retry_seconds,
                slot_hold=slot_hold,
                slot_usd_per_hour=slot_usd_per_hour,
                bill_tags=bill_tags,
                loaded=loaded,
                slot_time=slot_time,
            )
        except BaseException as e:
            # Ctrl-C or a driver's sys.exit during the wait too: left open, the hold kept the study's money
            # from other slots until it expired, and the slot's time was recorded nowhere.
            if settle_as is not None:  # in Airflow the cost listener bills the failed try with its hold
                _record_slot_error(ledger, holder, slot_time, meter() - started, settle_as, e)
            raise
        if isinstance(reached, SlotResult):
            return reached
        s, reservation, estimate = reached
        tick = meter()
        try:
            trial, info, tags = _start_trial(s, reservation, holder, slot, on_label)
            training = _Training(bookkeeping=meter() - tick)
        except Exception as e:
            if settle_as is not None:  # in Airflow the cost listener settles the hold with the try
                tags = s.spec.budget_scope.as_dict()
                seconds = meter() - s.started
                settle_trial(
                    ledger, s.spec, reservation.id, seconds, settle_as, "start", tags, "failed", str(e)
                )
            raise
    finally:
        # No longer waiting: its record goes, with those of holds that ended. Once the slot's entry or its
        # trial's lease on the reservation is recorded, and best effort: an error here failed a slot whose
        # money was granted, nothing recorded. In Airflow a hold left open (a slot that gave way) is closed
        # by the cost listener as it bills the try: its record stays till then, telling it from a trial's.
        if slot_time.waits is not None:
            slot_time.waits.forget(ledger, keep_own_while_open=settle_as is None)
    try:
        model = trainer(dict(trial.params), **dict(trainer_kwargs or {}))
        _train_rungs(s, trial, model, reservation, estimate, training)
    except Exception as e:
        _fail_trial(s, ledger, trial, reservation, tags, training.fidelity, e, on_label, settle_as)
        raise
    return _finish_trial(s, ledger, trial, info, tags, training, reservation, estimate, on_label, settle_as)


@dataclass(slots=True)
class _SlotTime:
    """Outside Airflow, what the slot's time before its trial's reservation is recorded with."""

    #: The study's settings once read: the price of the slot's entry.
    spec: StudySpec | None = None
    #: The slot holds its time (found again by its holder: a wait may have held it anew).
    held: bool = False
    #: Its entry is recorded (a skipped slot's): nothing is left to record.
    recorded: bool = False
    #: Its record among the study's waiting slots, once the study is open (forgotten when it stops waiting).
    waits: WaitingSlots | None = None
    #: The hold a wait for money found unable to pay for it and could not hold again (expired, say): the
    #: skipped entry settles against it, said to have been tried.
    not_held_again: str | None = None


def _until_reserved(
    *,
    storage_url: str,
    ledger: Ledger,
    study_name: str,
    holder: str,
    slot: int,
    run_id: str | None,
    settle_as: EntryOwner | None,
    meter: Callable[[], float],
    started: float,
    seconds_already_used: float,
    wait_poll_seconds: float,
    keep_for_retry_seconds: float,
    slot_hold: str | None,
    slot_usd_per_hour: Decimal | None,
    bill_tags: Mapping[str, str] | None,
    loaded: tuple[optuna.study.Study, StudySpec] | None,
    slot_time: _SlotTime,
) -> tuple[_Slot, Reservation, TrialEstimate] | SlotResult:
    """The slot up to its trial's reservation: hold its time (outside Airflow), open the study, reserve.

    ``slot_time`` says as it goes what the caller records the slot's time with where this raises.
    """
    attrs: dict[str, Any] | None = None
    if settle_as is not None and slot_hold is None:
        # Outside Airflow the slot's time is held before the study's trials are loaded (its price and scope
        # are one read away): held after the load, a load that ran long was spent before it was held. That
        # read gives the study's stop too: a slot that finds it stopped records the read, nothing held (held,
        # the hold and its settle cost it ten times that read, on each call of a driver after the stop).
        if loaded is None:
            early = stopped_before_load(storage_url, study_name, holder)
            if isinstance(early, tuple):
                return _skipped_at_stop(ledger, *early, meter() - started, settle_as, slot_time)
            attrs = early
            ahead = spec_of(study_name, attrs)
        else:
            ahead = loaded[1]
            # Given the study loaded, its stop too is looked for before anything is held.
            stop = stop_of_loaded(loaded[0], holder)
            if stop is not None:
                return _skipped_at_stop(ledger, ahead, stop, meter() - started, settle_as, slot_time)
        slot_time.spec = ahead
        seconds = meter() - started
        # Loading the trials is a few reads of the store that just answered one: estimated from that read
        # (the time since this call began, the caller's before it left out).
        read_seconds = seconds - max(seconds_already_used, 0.0)
        load_seconds = 0.0 if loaded is not None else STUDY_LOAD_READS * max(read_seconds, 0.0)
        try:
            held = _hold_slot_outside_airflow(ahead, ledger, holder, run_id, slot, seconds, load_seconds)
        except BudgetExceededError as e:
            if loaded is not None:
                stopped, study = loaded[0].user_attrs.get(STOP_ATTR), loaded[0]

                def the_study() -> optuna.study.Study:
                    return study

            else:
                # Loaded only to record the study's stop, with the attributes read above.
                stopped = (attrs or {}).get(STOP_ATTR)

                def the_study() -> optuna.study.Study:
                    return load_study(storage_url, study_name, slot, holder, attrs=attrs)[0]

            what = _time_before_load(ahead, seconds, read_seconds, load_seconds)
            outcome = _slot_not_held(the_study, stopped, ahead, ledger, slot, seconds, what, e)
            record_skipped_slot(ledger, ahead, meter() - started, settle_as, outcome.reason)
            slot_time.recorded = True
            return outcome
        slot_hold = None if held is None else held.id
        slot_usd_per_hour = ahead.usd_per_hour if held is not None else None
        slot_time.held = held is not None

    def record_slot_hold(study: optuna.study.Study) -> None:
        # As soon as the study is open, before its trials load: recorded only as the slot first asked (after
        # the load, the estimate), a slot refused while this one still loaded took its hold for a trial's,
        # waited on it, and both stopped the study with its money unspent.
        slot_time.waits = WaitingSlots(study, holder, wait_poll_seconds)
        if slot_hold is not None:
            slot_time.waits.mark(slot_hold)

    spec, opened = _open_slot(
        storage_url, study_name, holder, slot, meter, started, loaded, attrs, on_open=record_slot_hold
    )
    if settle_as is not None:
        slot_time.spec, slot_time.held = spec, slot_hold is not None
    if isinstance(opened, SlotResult):
        if settle_as is not None:
            record_skipped_slot(ledger, spec, meter() - started, settle_as, opened.reason, slot_hold)
            slot_time.recorded = True
        return opened
    s = opened
    if slot_hold is not None and _is_trial_hold(s.trials, holder, slot_hold):
        # Where the run's tags hold the study's scope (a DAG tagged study:s1) the slot's hold and the trial's
        # are over the same tags, and the hold found for the slot was an earlier try's trial hold (the study
        # records it on that try's trial). Replaced, the retry asked the whole estimate again; left to
        # reserve, which finds it by its holder, it pays the retry less what the earlier try spent.
        slot_hold = None
        slot_time.held = False
    if settle_as is not None and slot_hold is not None:
        # A load longer than its estimate: held as long as it ran before anything more is done.
        seconds = s.meter() - started
        try:
            kept = _grow_slot_hold(ledger, slot_hold, spec, seconds, slot, run_id)
            if kept is not None:
                slot_hold = kept
                if spec.gpus > 0:
                    slot_hold = cover_gpu_hours(
                        ledger, slot_hold, gpu_hours_for(seconds, spec.gpus), slot, run_id
                    )
        except BudgetExceededError as e:
            what = _time_so_far(spec, seconds)
            outcome = _slot_not_held(
                lambda: s.study, s.study.user_attrs.get(STOP_ATTR), spec, ledger, slot, seconds, what, e
            )
            record_skipped_slot(
                ledger,
                spec,
                meter() - started,
                settle_as,
                outcome.reason,
                slot_hold,
                tried_to_hold_again=True,
            )
            slot_time.recorded = True
            return outcome
        if kept is None:
            slot_hold, slot_usd_per_hour = None, None
            slot_time.held = False
    waits = slot_time.waits
    if waits is None:  # _open_slot calls on_open as the study opens, before any slot of it is returned
        raise RuntimeError(
            f"slot {slot} of study '{study_name}' opened the study without recording its hold among the "
            "waiting slots (on_open was not called): a bug in costaware, please report it"
        )
    if slot_hold is None:
        if waits.marked is not None:
            # A trial's hold after all (an earlier try's), or none left: not a slot's hold to tell others of.
            waits.forget(ledger)
    else:
        waits.mark(slot_hold)  # a hold that expired during the load was held again, under a new id
    reserved = _reserve_trial(
        s,
        ledger,
        holder,
        run_id,
        slot,
        wait_poll_seconds,
        keep_for_retry_seconds,
        slot_hold,
        slot_usd_per_hour,
        bill_tags,
        waits,
        slot_time,
        outside_airflow=settle_as is not None,
    )
    if isinstance(reserved, SlotResult):
        if settle_as is not None:  # in Airflow the cost listener bills the skipped try
            # The slot's hold as it now stands: one that expired during the wait was held again, anew, or,
            # refused that, is the expired one (which reservation_to_settle no longer finds).
            if slot_time.not_held_again is not None:
                hold_id: str | None = slot_time.not_held_again
            else:
                now_held = ledger.reservation_to_settle(holder) if slot_hold is not None else None
                hold_id = None if now_held is None else now_held.id
            record_skipped_slot(
                ledger,
                spec,
                meter() - started,
                settle_as,
                reserved.reason,
                hold_id,
                tried_to_hold_again=slot_time.not_held_again is not None,
            )
            slot_time.recorded = True
        return reserved
    return s, *reserved


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
        # Its hold as it now stands (a wait holds it anew), or the trial's reservation granted as it raised.
        hold = ledger.reservation_to_settle(holder) if slot_time.held else None
        record_skipped_slot(
            ledger,
            slot_time.spec,
            seconds,
            owner,
            why,
            None if hold is None else hold.id,
            label="open",
            outcome="failed",
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


def _check_trainer_call(trainer: TrainerFactory, trainer_kwargs: Mapping[str, Any]) -> None:
    """Refuse ``trainer_kwargs`` that ``trainer(params, **trainer_kwargs)`` cannot take, or its inputs refuse.

    A misspelt keyword failed every trial as a TypeError after its money was reserved, retried by Airflow
    (5 minutes apart by default), the run six failed trials later. Data the trainer cannot score (a
    validation label of one class) failed every trial after each slot had reserved and trained a rung: the
    trainer's ``check_inputs`` says so before anything is reserved.
    """
    import inspect

    check = getattr(trainer, "check_inputs", None)
    try:
        signature = inspect.signature(trainer)
    except (TypeError, ValueError):
        signature = None  # a callable whose signature cannot be read: its own call says
    name = getattr(trainer, "__qualname__", repr(trainer))
    # A misspelt key ('lable') first, by name: the bind below says only that 'label' is missing.
    check_keywords(trainer, trainer_kwargs, field="trainer_kwargs", of=f"trainer {name}", positional=1)
    try:
        if signature is not None:
            signature.bind({}, **dict(trainer_kwargs))
    except TypeError as e:
        raise ConfigurationError(
            f"trainer {name}{signature} cannot be called with trainer_kwargs {sorted(trainer_kwargs)}: {e}"
        ) from e
    if callable(check):
        check(**dict(trainer_kwargs))


def _open_slot(
    storage_url: str,
    study_name: str,
    holder: str,
    slot: int,
    meter: Callable[[], float],
    started: float,
    loaded: tuple[optuna.study.Study, StudySpec] | None = None,
    attrs: dict[str, Any] | None = None,
    *,
    on_open: Callable[[optuna.study.Study], None] | None = None,
) -> tuple[StudySpec, _Slot | SlotResult]:
    """Load the study (unless ``loaded``), fail its stale trials, apply the stop rules (unless resumed).

    ``attrs``: the study's attributes as :func:`stopped_before_load` gave them (not stopped for ``holder``):
    loaded with them, not read again. ``on_open``: called with the study once it is open, before its trials
    are read (a far store: minutes).
    """
    if loaded is None and attrs is not None:
        loaded = load_study(storage_url, study_name, slot, holder, attrs=attrs)
    if loaded is None:
        early = stopped_before_load(storage_url, study_name, holder)
        if isinstance(early, tuple):  # its stop read first: the slot's time up to it is what it records
            spec, stop = early
            return spec, SlotResult(ran=False, reason=stop["message"], stop=StopReason(stop["reason"]))
        loaded = load_study(storage_url, study_name, slot, holder, attrs=early)
    study, spec = loaded
    if on_open is not None:
        on_open(study)
    trials = study.get_trials(deepcopy=False)
    if fail_stale_trials(study, trials=trials):
        trials = study.get_trials(deepcopy=False)
    study_attrs = study.user_attrs
    started_at = datetime.fromisoformat(study_attrs[STARTED_ATTR])
    resumed = _resumable(trials, holder)
    if resumed is None:
        stopped = study_attrs.get(STOP_ATTR)
        if stopped:
            return spec, SlotResult(ran=False, reason=stopped["message"], stop=StopReason(stopped["reason"]))
        why = stop_reason(
            spec.caps,
            direction=spec.direction,
            trials_started=len(started_trials(trials)),
            finished=finished_trials(trials),
            started_at=started_at,
            now=utcnow(),
        )
        if why is not None:
            return spec, _stop(study, *why)
    return spec, _Slot(study, spec, trials, started_at, resumed, started, meter)


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
    outside_airflow: bool = False,
) -> tuple[Reservation, TrialEstimate] | SlotResult:
    """Estimate the trial's full-fidelity cost and reserve it; a refusal stops the study for good.

    Outside Airflow a slot whose wait for money cannot be held in the study's budget stops waiting without
    stopping the study (``goes_on``): that money is held by trials in flight, and what they give back pays
    later slots. The slot's hold, recorded in the study as it opened (``waits``), is renewed before and after
    each ask, so that other slots refused beside it do not take it for a trial's money that may come back
    (the caller forgets it once the slot's trial or entry is recorded; see
    :class:`~costaware.training.tuning.arbitration.WaitingSlots`). ``slot_time``: told of a hold the wait
    could not hold again, which the caller's skipped entry settles against.
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
        reservation = reserve_trial_cost(
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


def _start_trial(
    s: _Slot, reservation: Reservation, holder: str, slot: int, on_label: OnLabel | None
) -> tuple[optuna.trial.Trial, dict[str, Any], dict[str, str]]:
    """Ask Optuna for the trial's parameters (or retrain this holder's trial's) and record the lease on it."""
    trial = _retrain(s.study, s.resumed) if s.resumed is not None else s.study.ask(distributions(s.spec))
    try:
        return _lease(s, trial, reservation, holder, slot, on_label)
    except Exception:
        # Made, its lease unwritten (a locked SQLite storage): left RUNNING, no stale rule would ever end it,
        # and it counted against max_trials for good.
        with contextlib.suppress(Exception):
            s.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        raise


def _retrain(study: optuna.study.Study, left: optuna.trial.FrozenTrial) -> optuna.trial.Trial:
    """A new trial with the parameters of ``left`` (left running by this holder's earlier try), which fails.

    The retry trains from the first rung again. On ``left`` Optuna ignores a report of a rung the earlier try
    reported (it only warns), so the pruner and the summary's ranking read the dead try's values beside the
    retry's last one (0.9 and 0.95 before it died, then 0.7 at full fidelity: scored 0.45, not 0.7). The
    money is the holder's hold, not the trial's: the retry pays from it, less what the earlier try paid.
    """
    # Created RUNNING with its parameters in one write: a trial enqueued instead could be taken by another
    # slot's ask.
    template = optuna.trial.create_trial(
        state=optuna.trial.TrialState.RUNNING, params=left.params, distributions=left.distributions
    )
    trial_id = study._storage.create_new_trial(study._study_id, template_trial=template)
    trial = optuna.trial.Trial(study, trial_id)
    try:
        why = f"its task was retried: trial #{trial.number} trains its parameters again from the first rung"
        finish_failed(study, left, why, left.last_step or 0)
    except Exception:
        # Left running, it is this holder's still: the next try takes it over again.
        with contextlib.suppress(Exception):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        raise
    log.info("trial %d of a failed try is trained again as trial %d", left.number, trial.number)
    return trial


def _lease(
    s: _Slot,
    trial: optuna.trial.Trial,
    reservation: Reservation,
    holder: str,
    slot: int,
    on_label: OnLabel | None,
) -> tuple[optuna.trial.Trial, dict[str, Any], dict[str, str]]:
    """Record on ``trial`` who holds it, with which reservation, until when."""
    info = {
        **({"retry_of": s.resumed.number} if s.resumed is not None else {}),  # the trial its failed try left
        "holder": holder,
        "slot": slot,
        "reservation": reservation.id,
        "lease_until": reservation.expires_at.isoformat(),
        "state": TrialState.RUNNING.value,
    }
    trial.set_user_attr(TRIAL_ATTR, info)
    tags = s.spec.budget_scope.as_dict()
    if on_label is not None:
        on_label(trial_label(trial.number, TrialState.RUNNING, 0), {**tags, "trial_state": "running"}, "")
    return trial, info, tags


def _train_rungs(
    s: _Slot,
    trial: optuna.trial.Trial,
    model: FidelityModel,
    reservation: Reservation,
    estimate: TrialEstimate,
    t: _Training,
) -> None:
    """Train rung by rung into ``t``; stop when pruned, trained in full, or before outrunning the money.

    ``t`` belongs to the caller so that it still knows the rungs reached when the trainer raises.
    """
    spec, meter, started = s.spec, s.meter, s.started
    # Money decides how long the trial may train: what it reserved, less a tail for telling and settling.
    reserved, bought_with = _reserved_seconds(reservation, spec)
    limit = reserved - min(TAIL_SECONDS, spec.slack_seconds)
    wall_left = wall_clock_left(spec.caps, s.started_at, utcnow())
    by_wall_clock = wall_left is not None and (meter() - started) + wall_left < limit
    if wall_left is not None:
        limit = min(limit, (meter() - started) + wall_left)
    previous = 0
    for rung in spec.schedule.rungs:
        # This trial's own speed (its last later rung, else its first); before any rung, the study's.
        if t.marginal is not None:
            rate = t.marginal
        else:
            rate = t.train_seconds / previous if previous else (estimate.seconds_per_unit or 0.0)
        # A busy worker runs a rung slower than the trial's speed so far: the same safety factor as the
        # reservation's estimate keeps a slow rung from running past what was reserved.
        needed = (rate * (rung - previous) + 2 * t.bookkeeping) * spec.safety_factor
        if (meter() - started) + needed > limit:
            t.state = TrialState.CUT
            t.decision = (
                # The study's wall clock, not the money, decided: say which.
                f"cut before {rung}: the study's max_wall_seconds ({spec.caps.max_wall_seconds:g} s) "
                f"leaves this trial {limit:.1f} s, {meter() - started:.1f} s are used and the next rung "
                f"needs about {needed:.1f} s"
                if by_wall_clock
                else f"cut before {rung}: its reservation of {bought_with} buys "
                f"{reserved:.1f} s, {meter() - started:.1f} s "
                "are used and the next rung "
                f"needs about {needed:.1f} s"
            )
            break
        guessed = not rate  # no speed known yet: the reservation is fallback_trial_seconds' guess
        tick = meter()
        value = float(model.advance(rung))
        spent = meter() - tick
        t.train_seconds += spent
        if not math.isfinite(value):
            # A diverged configuration (a learning rate too high): failed, not "trained in full, nan", which
            # Optuna refused and the summary counted as promoted.
            t.state = TrialState.FAILED
            t.decision = f"failed at {rung}: its metric is {value}, not a number (the training diverged?)"
            break
        used = meter() - started
        if used > reserved and guessed:
            log.warning(
                "rung %d took %.2f s and the trial has used %.2f s, past the %.2f s its reservation of %s "
                "buys: no speed was known yet, so the reservation was fallback_trial_seconds' guess; raise "
                "fallback_trial_seconds to what a trial takes. A rung is not interrupted, so what it ran "
                "over is billed and can take the study past its cap",
                rung,
                spent,
                used,
                reserved,
                bought_with,
            )
        elif used > reserved:
            log.warning(
                "rung %d took %.2f s and the trial has used %.2f s, past the %.2f s its reservation of %s "
                "buys (training ran more than safety_factor %g times slower than its speed so far): a rung "
                "is not interrupted, so what it ran over is billed and can take the study past its cap",
                rung,
                spent,
                used,
                reserved,
                bought_with,
                spec.safety_factor,
            )
        if previous:
            t.marginal = spent / (rung - previous)
        previous = rung
        t.rungs.append((rung, value))
        tick = meter()
        trial.report(value, rung)
        if rung == spec.schedule.max_resource:
            t.decision = f"promoted to {rung}: trained in full, {value:.4f}"
            break
        prune = trial.should_prune()
        t.bookkeeping = max(t.bookkeeping, meter() - tick)
        if prune:
            t.state = TrialState.PRUNED
            t.decision = pruning_note(s.study, trial) or f"pruned at {rung} with {value:.4f}"
            break


def _reserved_seconds(reservation: Reservation, spec: StudySpec) -> tuple[float, str]:
    """How long the trial may run on what it reserved, and what bought that time (for the notes).

    Its dollars at the study's price. On free compute (``usd_per_hour`` 0: owned GPUs) dollars buy no end:
    the GPU-hours it reserved, at the study's GPUs, bound it instead, so that ``max_gpu_hours`` holds (the
    trial trained on past what the cap held). With neither a price nor GPUs nothing it reserved bounds it:
    ``max_trials`` and ``max_wall_seconds`` do.
    """
    if spec.usd_per_hour > 0 or spec.gpus <= 0:
        return seconds_for_usd(reservation.usd, spec.usd_per_hour), format_usd(reservation.usd)
    return float(reservation.gpu_hours * 3600 / spec.gpus), f"{reservation.gpu_hours} GPU-hours"


def _fail_trial(
    s: _Slot,
    ledger: Ledger,
    trial: optuna.trial.Trial,
    reservation: Reservation,
    tags: dict[str, str],
    fidelity: int,
    error: Exception,
    on_label: OnLabel | None,
    settle_as: EntryOwner | None,
) -> None:
    """The trainer raised at ``fidelity``: mark the trial failed, label the entry, settle outside Airflow."""
    finish_failed(s.study, trial, f"{type(error).__name__}: {error}"[:300], fidelity)
    label = trial_label(trial.number, TrialState.FAILED, fidelity)
    if on_label is not None:
        on_label(label, {**tags, "trial_state": "failed", "fidelity": str(fidelity)}, str(error)[:300])
    if settle_as is not None:
        seconds = s.meter() - s.started
        settle_trial(ledger, s.spec, reservation.id, seconds, settle_as, label, tags, "failed", str(error))


def _finish_trial(
    s: _Slot,
    ledger: Ledger,
    trial: optuna.trial.Trial,
    info: dict[str, Any],
    tags: dict[str, str],
    t: _Training,
    reservation: Reservation,
    estimate: TrialEstimate,
    on_label: OnLabel | None,
    settle_as: EntryOwner | None,
) -> SlotResult:
    """Tell Optuna how the trial ended, label its ledger entry, settle outside Airflow; the slot's result."""
    meter, started = s.meter, s.started
    info.update(
        state=t.state.value,
        fidelity=t.fidelity,
        decision=t.decision,
        train_seconds=round(t.train_seconds, 4),
        # From the grant on: a wait for money is one slot's bad luck, not every later trial's overhead.
        overhead_seconds=round(meter() - s.reserved_at - t.train_seconds, 4),
        seconds_before_reservation=round(s.reserved_at - started, 4),
        marginal_seconds_per_unit=t.marginal,
    )
    trial.set_user_attr(TRIAL_ATTR, info)
    if t.state is TrialState.PROMOTED and t.final is not None:
        s.study.tell(trial, t.final)
    elif t.state is TrialState.FAILED:
        s.study.tell(trial, state=optuna.trial.TrialState.FAIL)
    else:
        s.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    label = trial_label(trial.number, t.state, t.fidelity)
    note = " ".join(f"{r}:{v:.4f}" for r, v in t.rungs) + f"; {t.decision}"
    entry_tags = {**tags, "trial_state": t.state.value, "fidelity": str(t.fidelity)}
    if on_label is not None:
        on_label(label, entry_tags, note)
    settled = None
    if settle_as is not None:
        settled = settle_trial(
            ledger, s.spec, reservation.id, meter() - started, settle_as, label, entry_tags, "success", note
        )
    log.info("trial %s (%s): %s", label, dict(trial.params), t.decision)
    return SlotResult(
        ran=True,
        trial=TrialResult(
            number=trial.number,
            label=label,
            state=t.state,
            value=t.final,
            fidelity=t.fidelity,
            rungs=tuple(t.rungs),
            decision=t.decision,
            params=dict(trial.params),
            seconds=meter() - started,
            train_seconds=t.train_seconds,
            reserved_usd=reservation.usd,
            reservation_id=reservation.id,
            resumed=s.resumed is not None,
            estimate=estimate.source,
            settled_usd=settled,
        ),
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


def _is_trial_hold(trials: list[optuna.trial.FrozenTrial], holder: str, reservation_id: str) -> bool:
    """Whether a trial of ``holder`` (an earlier try's) was granted the reservation ``reservation_id``."""
    return any(
        trial_info(trial).get("holder") == holder and trial_info(trial).get("reservation") == reservation_id
        for trial in trials
    )


def _resumable(trials: list[optuna.trial.FrozenTrial], holder: str) -> optuna.trial.FrozenTrial | None:
    for trial in trials:
        if trial.state == optuna.trial.TrialState.RUNNING and trial_info(trial).get("holder") == holder:
            return trial
    return None
