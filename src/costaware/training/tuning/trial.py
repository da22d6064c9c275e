"""One trial slot: stop rules, a reservation of the trial's cost, rung-by-rung training, the result.

:func:`run_trial` runs in steps: :func:`_open_slot` (load the study, fail stale trials, apply the stop
rules), :func:`~.trial_reservation._reserve_trial` (estimate and reserve the trial's cost),
:func:`~.trial_steps._start_trial` (ask Optuna for parameters, or retrain those of the trial this holder
left running), :func:`~.trial_steps._train_rungs` (train rung by rung within the money reserved, pruned by
successive halving) and :func:`~.trial_steps._finish_trial` (tell Optuna, label the ledger entry, settle
outside Airflow). Outside Airflow the slot's time before its reservation is held and recorded by
:mod:`.slot_time`.

The study's load (``load_study``, ``stopped_before_load``), the reserve (``reserve_trial_cost``) and
:func:`_open_slot` are looked up here as the slot runs: tests and callers that patch them on this module
keep doing so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import optuna

from costaware.core.errors import BudgetExceededError
from costaware.core.ledger import utcnow
from costaware.core.tuning import StopReason, StudySpec, TrialEstimate, stop_reason
from costaware.training.tuning.arbitration import WaitingSlots
from costaware.training.tuning.fidelity import TrainerFactory
from costaware.training.tuning.reservations import (
    cover_gpu_hours,
    gpu_hours_for,
    record_skipped_slot,
    reserve_trial_cost,
    settle_trial,
)
from costaware.training.tuning.results import EntryOwner, SlotResult
from costaware.training.tuning.slot_time import (
    STUDY_LOAD_READS,
    _grow_slot_hold,
    _hold_slot_outside_airflow,
    _record_slot_error,
    _skipped_at_stop,
    _slot_not_held,
    _time_before_load,
    _time_so_far,
)
from costaware.training.tuning.study import (
    STARTED_ATTR,
    STOP_ATTR,
    fail_stale_trials,
    finished_trials,
    load_study,
    spec_of,
    started_trials,
    stop_of_loaded,
    stopped_before_load,
)
from costaware.training.tuning.trial_reservation import _reserve_trial, _stop
from costaware.training.tuning.trial_steps import (
    TAIL_SECONDS,
    OnLabel,
    _check_trainer_call,
    _fail_trial,
    _finish_trial,
    _is_trial_hold,
    _resumable,
    _Slot,
    _SlotTime,
    _start_trial,
    _train_rungs,
    _Training,
)

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import Reservation

__all__ = ["STUDY_LOAD_READS", "TAIL_SECONDS", "OnLabel", "run_trial"]

log = logging.getLogger(__name__)


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
        reserve=reserve_trial_cost,
        outside_airflow=settle_as is not None,
    )
    if isinstance(reserved, SlotResult):
        if settle_as is not None:  # in Airflow the cost listener bills the skipped try
            # The slot's hold as it now stands: one that expired during the wait was held again, anew, or,
            # refused that, is the expired one.
            hold_id = slot_time.hold_to_settle(ledger, holder, held=slot_hold is not None)
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
