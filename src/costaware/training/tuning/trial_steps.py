"""A trial slot's steps once its money is reserved: start the trial, train it rung by rung, tell how it ended.

:func:`_start_trial` (ask Optuna for parameters, or retrain those of the trial this holder left running),
:func:`_train_rungs` (train rung by rung within the money reserved, pruned by successive halving) and
:func:`_finish_trial` (tell Optuna, label the ledger entry, settle outside Airflow), with what they share
(:class:`_Slot`, :class:`_Training`, and :class:`_SlotTime` of the slot's time before); :mod:`.trial` runs
them.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import optuna

from costaware.core.errors import ConfigurationError, check_keywords
from costaware.core.ledger import utcnow
from costaware.core.money import format_usd
from costaware.core.tuning import (
    StudySpec,
    TrialEstimate,
    TrialState,
    seconds_for_usd,
    trial_label,
    wall_clock_left,
)
from costaware.training.tuning.arbitration import WaitingSlots
from costaware.training.tuning.fidelity import FidelityModel, TrainerFactory
from costaware.training.tuning.optuna_glue import (
    TRIAL_ATTR,
    distributions,
    give_up_rung_places,
    optuna_rung_records,
    pruning_note,
)
from costaware.training.tuning.reservations import settle_trial
from costaware.training.tuning.results import EntryOwner, SlotResult, TrialResult
from costaware.training.tuning.study import finish_failed, trial_info

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import Reservation

# The slot's records keep the logger they had before trial.py was split (logging configs filter on it).
log = logging.getLogger("costaware.training.tuning.trial")


#: Seconds kept back from a trial's reserved time for what follows training (tell, ledger write).
TAIL_SECONDS = 0.5


OnLabel = Callable[[str, dict[str, str], str], None]


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
    #: The rungs Optuna's own successive halving (Hyperband's) recorded the trial at at its last decision.
    optuna_rungs: frozenset[str] = frozenset()

    @property
    def fidelity(self) -> int:
        return self.rungs[-1][0] if self.rungs else 0

    @property
    def final(self) -> float | None:
        return self.rungs[-1][1] if self.rungs else None


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

    def hold_to_settle(self, ledger: Ledger, holder: str, *, held: bool) -> str | None:
        """The hold the slot's skipped entry settles, or None.

        The slot's as it now stands (``held``: it holds its time; a wait may have held it anew), or, refused
        being held again, the expired one, which ``reservation_to_settle`` no longer finds (asked, the entry
        went against no hold and that hold stayed open).
        """
        if self.not_held_again is not None:
            return self.not_held_again
        hold = ledger.reservation_to_settle(holder) if held else None
        return None if hold is None else hold.id


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
            if t.optuna_rungs:
                # Right after the rung it last passed: that place goes to the next best (as in
                # RungSuccessiveHalvingPruner), not kept by a trial that cannot go on from it.
                give_up_rung_places(s.study, trial, sorted(t.optuna_rungs))
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
        # Optuna's Hyperband records the rungs a trial passes with the trial: those of this decision are given
        # up if the trial is cut before the next rung (the study's own pruner reads the cut from its state).
        recorded = optuna_rung_records(s.study, trial) if spec.pruner == "hyperband" else frozenset()
        prune = trial.should_prune()
        if spec.pruner == "hyperband":
            t.optuna_rungs = optuna_rung_records(s.study, trial) - recorded
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
