"""Budget-capped multi-fidelity tuning on Optuna: a study in an RDB, trials reserve money before they run.

One study lives in an Optuna RDB storage (by default the ledger's own database) and its budget lives in the
ledger, so trial slots on any number of workers share both:

* :func:`create_study` stores the study's settings with the study and sets its ledger budget
  (scope ``study=<name>`` plus the caller's tags, period ``total``).
* :func:`run_trial` runs one trial: stop rules, then a reservation of the trial's estimated full-fidelity
  cost (``Ledger.reserve``, atomic in the database), then ask/report/tell rung by rung, pruned by
  successive halving, and never past its reservation (a trial whose next rung would not fit in the money
  it reserved is cut). When the reservation is refused the study stops for good.
* :func:`summarize_study` fails trials left ``RUNNING`` by killed workers and reports the best trial,
  the stop reasons and cost per trial and per successful trial from the ledger.

Optuna's heartbeat does not cover ask/tell, so a trial's lease is its reservation: a trial still
``RUNNING`` after its reservation expired belonged to a worker that died; the next slot marks it failed.
A retry of the same task (same reservation holder) resumes the trial instead.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from costaware.core.errors import BudgetExceededError, ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry, Market, utcnow
from costaware.core.money import format_usd
from costaware.core.tuning import (
    FinishedTrial,
    StopReason,
    StudySpec,
    TrialState,
    TrialTiming,
    estimate_trial_seconds,
    promotable,
    seconds_for_usd,
    stop_reason,
    trial_costs,
    trial_label,
    usd_for_seconds,
    wall_clock_left,
)

if TYPE_CHECKING:
    import optuna

    from costaware.adapters.ledger_store import Ledger
    from costaware.core.ledger import BudgetUsage, Reservation

log = logging.getLogger(__name__)

SPEC_ATTR = "costaware_spec"
STARTED_ATTR = "costaware_started_at"
STOP_ATTR = "costaware_stop"
TRIAL_ATTR = "costaware"
#: Seconds kept back from a trial's reserved time for what follows training (tell, ledger write).
TAIL_SECONDS = 0.5
_STORAGES: dict[str, optuna.storages.RDBStorage] = {}
_STORAGES_LOCK = threading.Lock()


class FidelityModel(Protocol):
    """A model a trial trains in steps: ``advance(r)`` trains up to resource ``r`` and returns its score."""

    def advance(self, resource: int) -> float: ...


TrainerFactory = Callable[..., FidelityModel]


@dataclass(frozen=True, slots=True)
class TrialResult:
    """One trial as it ended in this slot."""

    number: int
    label: str
    state: TrialState
    value: float | None
    fidelity: int
    rungs: tuple[tuple[int, float], ...]
    decision: str
    params: dict[str, Any]
    seconds: float
    train_seconds: float
    reserved_usd: Decimal
    reservation_id: str
    resumed: bool
    estimate: str
    settled_usd: Decimal | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "label": self.label,
            "state": self.state.value,
            "value": self.value,
            "fidelity": self.fidelity,
            "rungs": [list(r) for r in self.rungs],
            "decision": self.decision,
            "params": self.params,
            "seconds": round(self.seconds, 3),
            "train_seconds": round(self.train_seconds, 3),
            "reserved_usd": str(self.reserved_usd),
            "reservation_id": self.reservation_id,
            "resumed": self.resumed,
            "estimate": self.estimate,
            "settled_usd": None if self.settled_usd is None else str(self.settled_usd),
        }


@dataclass(frozen=True, slots=True)
class SlotResult:
    """What a trial slot did: ran a trial, or found the study stopped (and why)."""

    ran: bool
    reason: str = ""
    stop: StopReason | None = None
    trial: TrialResult | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "ran": self.ran,
            "reason": self.reason,
            "stop": None if self.stop is None else self.stop.value,
            "trial": None if self.trial is None else self.trial.to_json(),
        }


@dataclass(frozen=True, slots=True)
class EntryOwner:
    """Who a trial's ledger entry belongs to when the trial settles its own reservation (outside Airflow)."""

    dag_id: str
    run_id: str
    task_id: str = "trial"
    map_index: int = -1
    extra_tags: Mapping[str, str] = field(default_factory=dict)


# -- storage, sampler, pruner --------------------------------------------------------------------------


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """An Optuna RDB storage at ``url``, opened once per process (SQLite waits for the write lock)."""
    import optuna

    key = url
    with _STORAGES_LOCK:
        if key in _STORAGES:
            return _STORAGES[key]
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 60}
    elif url.startswith("postgres"):
        if url.startswith(("postgres://", "postgresql://")):
            url = "postgresql+psycopg2://" + url.split("://", 1)[1]
        kwargs["connect_args"] = {"connect_timeout": 10}
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    with _STORAGES_LOCK:
        return _STORAGES.setdefault(key, storage)


def make_sampler(spec: StudySpec, slot: int) -> optuna.samplers.BaseSampler:
    """The study's sampler, seeded per slot so parallel slots do not propose the same parameters."""
    import optuna

    seed = spec.seed * 1_000_003 + slot
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """Successive halving at the study's rungs, Optuna's Hyperband over them, or no pruning."""
    import optuna

    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=spec.schedule.rungs[0],
            max_resource=spec.schedule.max_resource,
            reduction_factor=spec.schedule.reduction_factor,
        )
    if spec.pruner == "none":
        return optuna.pruners.NopPruner()
    return _rung_pruner(spec)


def _rung_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    import optuna

    class RungSuccessiveHalvingPruner(optuna.pruners.BasePruner):
        """Asynchronous successive halving at given rungs: the top ``1/eta`` at each rung move up."""

        def __init__(self, rungs: tuple[int, ...], reduction_factor: int, direction: str) -> None:
            self.rungs = rungs[:-1]  # the last rung ends the trial; nothing is pruned there
            self.reduction_factor = reduction_factor
            self.direction = direction
            self.last_note = ""

        def prune(self, study: optuna.study.Study, trial: optuna.trial.FrozenTrial) -> bool:
            step = trial.last_step
            if step is None or step not in self.rungs:
                return False
            value = trial.intermediate_values[step]
            others = study.get_trials(
                deepcopy=False,
                states=(
                    optuna.trial.TrialState.COMPLETE,
                    optuna.trial.TrialState.PRUNED,
                    optuna.trial.TrialState.RUNNING,
                ),
            )
            competing = [
                t.intermediate_values[step]
                for t in others
                if t.number != trial.number and step in t.intermediate_values
            ]
            keep = promotable(value, competing, self.reduction_factor, self.direction)
            self.last_note = (
                f"{'promoted' if keep else 'pruned'} at {step}: {value:.4f} is "
                f"{'' if keep else 'not '}in the top 1/{self.reduction_factor} of {len(competing) + 1} "
                "result(s) at this rung"
            )
            return not keep

    return RungSuccessiveHalvingPruner(spec.schedule.rungs, spec.schedule.reduction_factor, spec.direction)


def _distributions(spec: StudySpec) -> dict[str, optuna.distributions.BaseDistribution]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, optuna.distributions.BaseDistribution] = {}
    for p in spec.search_space:
        if p.kind == "categorical":
            out[p.name] = CategoricalDistribution(list(p.choices))
        elif p.kind == "int":
            assert p.low is not None and p.high is not None
            out[p.name] = IntDistribution(int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
        else:
            assert p.low is not None and p.high is not None
            out[p.name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
    return out


# -- plan ------------------------------------------------------------------------------------------------


def create_study(storage_url: str, ledger: Ledger, spec: StudySpec) -> dict[str, Any]:
    """Create (or reopen) the study and set its ledger budget; returns the plan as JSON.

    Reopening a study with the same name keeps its trials and start time: a second DAG run continues it.
    The study's budget is ``max_usd`` (and ``max_gpu_hours``) over scope ``study=<name>`` plus the
    spec's tags, for all time; every trial reserves from it and from any wider budget that covers it.
    """
    import optuna

    storage = open_storage(storage_url)
    study = optuna.create_study(
        study_name=spec.study_name,
        storage=storage,
        direction=(
            optuna.study.StudyDirection.MAXIMIZE
            if spec.direction == "maximize"
            else optuna.study.StudyDirection.MINIMIZE
        ),
        load_if_exists=True,
    )
    attrs = study.user_attrs
    if STARTED_ATTR not in attrs:
        study.set_user_attr(STARTED_ATTR, utcnow().isoformat())
    study.set_user_attr(SPEC_ATTR, spec.to_json())
    ledger.set_budget(spec.budget_scope, "total", spec.caps.max_usd, cap_gpu_hours=spec.caps.max_gpu_hours)
    started = len(_started(study.get_trials(deepcopy=False)))
    slots = max(spec.caps.max_trials - started, 0)
    log.info(
        "study %s: %d trial slot(s), cap %s, rungs %s (about %.1f of %d per trial with successive halving)",
        spec.study_name,
        slots,
        format_usd(spec.caps.max_usd),
        spec.schedule.rungs,
        spec.schedule.expected_resource_per_trial(),
        spec.schedule.max_resource,
    )
    return {
        "study_name": spec.study_name,
        "slots": list(range(slots)),
        "trials_already_started": started,
        "rungs": list(spec.schedule.rungs),
        "max_usd": str(spec.caps.max_usd),
    }


def load_study(storage_url: str, study_name: str, slot: int = 0) -> tuple[optuna.study.Study, StudySpec]:
    """The study with the sampler and pruner its stored settings name.

    Raises:
        ConfigurationError: no study of that name in the storage, or it was not created by costaware.
    """
    import optuna

    storage = open_storage(storage_url)
    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError as e:
        raise ConfigurationError(
            f"no tuning study named {study_name!r} in the study storage: run the plan task "
            "(TuningStudyCreateOperator) first"
        ) from e
    raw = storage.get_study_user_attrs(study_id).get(SPEC_ATTR)
    if raw is None:
        raise ConfigurationError(
            f"study {study_name!r} has no costaware settings: create it with create_study"
        )
    spec = StudySpec.from_json(raw)
    study = optuna.load_study(
        study_name=study_name, storage=storage, sampler=make_sampler(spec, slot), pruner=make_pruner(spec)
    )
    return study, spec


def _started(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    import optuna

    states = (
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
        optuna.trial.TrialState.RUNNING,
    )
    return [t for t in trials if t.state in states]


def _finished(trials: list[optuna.trial.FrozenTrial]) -> list[FinishedTrial]:
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    done = [t for t in trials if t.state in states]
    done.sort(key=lambda t: (t.datetime_complete or utcnow(), t.number))
    return [
        FinishedTrial(TrialState(_info(t).get("state", "pruned")), t.value)
        if t.state == optuna.trial.TrialState.PRUNED
        else FinishedTrial(TrialState.PROMOTED, t.value)
        for t in done
    ]


def _timings(trials: list[optuna.trial.FrozenTrial]) -> list[TrialTiming]:
    out = []
    for t in _started(trials):
        info = _info(t)
        if "train_seconds" in info:
            out.append(
                TrialTiming(
                    int(info["fidelity"]),
                    float(info["train_seconds"]),
                    float(info.get("overhead_seconds", 0.0)),
                    info.get("marginal_seconds_per_unit"),
                )
            )
    return out


def fail_stale_trials(
    study: optuna.study.Study,
    *,
    now: datetime | None = None,
    holder_prefix: str | None = None,
    trials: list[optuna.trial.FrozenTrial] | None = None,
) -> list[int]:
    """Mark failed the ``RUNNING`` trials whose lease expired (or, with ``holder_prefix``, held by it).

    Returns the numbers of the trials failed here. Safe against another process doing the same.
    """
    import optuna

    now = now or utcnow()
    failed = []
    if trials is None:
        trials = study.get_trials(deepcopy=False)
    for trial in [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]:
        info = _info(trial)
        lease = info.get("lease_until")
        expired = lease is not None and datetime.fromisoformat(lease) <= now
        held = holder_prefix is not None and str(info.get("holder", "")).startswith(holder_prefix)
        if not (expired or held):
            continue
        reason = "its lease expired (the worker was killed)" if expired else "its task ended without telling"
        try:
            info.update(state=TrialState.FAILED.value, decision=f"failed: {reason}")
            study._storage.set_trial_user_attr(trial._trial_id, TRIAL_ATTR, info)
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        except RuntimeError:  # another process finished it between our read and write
            continue
        log.warning("trial %d of study %s marked failed: %s", trial.number, study.study_name, reason)
        failed.append(trial.number)
    return failed


def _stop(study: optuna.study.Study, reason: StopReason, message: str) -> SlotResult:
    if STOP_ATTR not in study.user_attrs:  # the first stop reason is the one kept
        study.set_user_attr(
            STOP_ATTR, {"reason": reason.value, "message": message, "at": utcnow().isoformat()}
        )
    log.info("study %s stops: %s (%s)", study.study_name, reason.value, message)
    return SlotResult(ran=False, reason=message, stop=reason)


# -- one trial -------------------------------------------------------------------------------------------


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
    on_label: Callable[[str, dict[str, str], str], None] | None = None,
    meter: Callable[[], float] = time.monotonic,
    wait_poll_seconds: float = 1.0,
) -> SlotResult:
    """Run one trial of the study in this slot, within the money it reserves.

    Args:
        storage_url: Optuna RDB storage URL of the study.
        ledger: The ledger that holds the study's budget.
        study_name: The study (created by :func:`create_study`).
        trainer: ``trainer(params, **trainer_kwargs)`` returns a :class:`FidelityModel`.
        trainer_kwargs: Extra keyword arguments for ``trainer`` (data paths, ...).
        holder: Reservation holder, unique per task instance (Airflow: ``dag/run/task/map_index``); a retry
            with the same holder resumes the trial its earlier try left running.
        slot: Slot number; seeds the sampler.
        run_id: DAG run id, for budgets with period ``run``.
        settle_as: Settle the reservation here with a compute entry owned by this (outside Airflow). In
            Airflow leave it None: the cost listener prices the task try and settles the reservation.
        on_label: Called with (trial label, ledger tags, note) when the trial starts and when it ends
            (Airflow: ``annotate_task``), so the listener's entry carries the trial and its decision.
        meter: The clock that measures the trial (seconds); time.monotonic by default.
        wait_poll_seconds: When the reservation is refused while other trials of the study hold money that
            may come back, ask again this often until they settled (then a refusal stops the study).

    Returns:
        The slot's result; ``ran=False`` with the stop reason when the study is over.

    Raises:
        ConfigurationError: the study does not exist.
        Exception: whatever the trainer raised (the trial is marked failed first).
    """
    import optuna

    started = meter()
    study, spec = load_study(storage_url, study_name, slot)
    trials = study.get_trials(deepcopy=False)
    if fail_stale_trials(study, trials=trials):
        trials = study.get_trials(deepcopy=False)
    study_attrs = study.user_attrs
    started_at = datetime.fromisoformat(study_attrs[STARTED_ATTR])
    resumed = _resumable(trials, holder)
    if resumed is None:
        stopped = study_attrs.get(STOP_ATTR)
        if stopped:
            return SlotResult(ran=False, reason=stopped["message"], stop=StopReason(stopped["reason"]))
        why = stop_reason(
            spec.caps,
            direction=spec.direction,
            trials_started=len(_started(trials)),
            finished=_finished(trials),
            started_at=started_at,
            now=utcnow(),
        )
        if why is not None:
            return _stop(study, *why)

    estimate = estimate_trial_seconds(
        _timings(trials), spec.schedule.max_resource, spec.fallback_trial_seconds, spec.safety_factor
    )
    seconds = estimate.seconds + spec.slack_seconds
    usd = usd_for_seconds(seconds, spec.usd_per_hour)
    gpu_hours = (Decimal(str(seconds)) / 3600 * spec.gpus).quantize(Decimal("0.000001"))
    try:
        reservation = _reserve(ledger, spec, usd, gpu_hours, seconds, holder, run_id, slot, wait_poll_seconds)
    except BudgetExceededError as e:
        if resumed is not None:
            _finish_failed(study, resumed, "no budget left to resume it")
        return _stop(study, StopReason.BUDGET, str(e))

    if resumed is not None:
        trial = optuna.trial.Trial(study, resumed._trial_id)
    else:
        trial = study.ask(_distributions(spec))
    info = {
        **(_info(resumed) if resumed is not None else {}),
        "holder": holder,
        "slot": slot,
        "reservation": reservation.id,
        "lease_until": reservation.expires_at.isoformat(),
        "state": TrialState.RUNNING.value,
    }
    trial.set_user_attr(TRIAL_ATTR, info)
    tags = spec.budget_scope.as_dict()
    if on_label is not None:
        on_label(trial_label(trial.number, TrialState.RUNNING, 0), {**tags, "trial_state": "running"}, "")

    # Money decides how long the trial may train: what it reserved, less a tail for telling and settling.
    limit = seconds_for_usd(reservation.usd, spec.usd_per_hour) - min(TAIL_SECONDS, spec.slack_seconds)
    wall_left = wall_clock_left(spec.caps, started_at, utcnow())
    if wall_left is not None:
        limit = min(limit, (meter() - started) + wall_left)
    rungs: list[tuple[int, float]] = []
    train_seconds: float = 0.0
    marginal: float | None = None
    state, decision = TrialState.PROMOTED, ""
    try:
        model = trainer(dict(trial.params), **dict(trainer_kwargs or {}))
        previous = 0
        for rung in spec.schedule.rungs:
            # This trial's own speed (its last later rung, else its first); before any rung, the study's.
            if marginal is not None:
                rate = marginal
            else:
                rate = train_seconds / previous if previous else (estimate.seconds_per_unit or 0.0)
            # A busy worker runs a rung slower than the trial's speed so far: the same safety factor as the
            # reservation's estimate keeps a slow rung from running past what was reserved.
            needed = rate * (rung - previous) * spec.safety_factor
            if (meter() - started) + needed > limit:
                state = TrialState.CUT
                decision = (
                    f"cut before {rung}: its reservation of {format_usd(reservation.usd)} buys "
                    f"{seconds_for_usd(reservation.usd, spec.usd_per_hour):.1f} s, {meter() - started:.1f} s "
                    "are used and the next rung "
                    f"needs about {needed:.1f} s"
                )
                break
            tick = meter()
            value = float(model.advance(rung))
            spent = meter() - tick
            train_seconds += spent
            if previous:
                marginal = spent / (rung - previous)
            previous = rung
            rungs.append((rung, value))
            trial.report(value, rung)
            if rung == spec.schedule.max_resource:
                decision = f"promoted to {rung}: trained in full, {value:.4f}"
                break
            if trial.should_prune():
                state = TrialState.PRUNED
                decision = getattr(study.pruner, "last_note", "") or f"pruned at {rung} with {value:.4f}"
                break
    except Exception as e:
        fidelity = rungs[-1][0] if rungs else 0
        _finish_failed(study, trial, f"{type(e).__name__}: {e}"[:300], fidelity)
        label = trial_label(trial.number, TrialState.FAILED, fidelity)
        if on_label is not None:
            on_label(label, {**tags, "trial_state": "failed", "fidelity": str(fidelity)}, str(e)[:300])
        if settle_as is not None:
            _settle(ledger, spec, reservation.id, meter() - started, settle_as, label, tags, "failed", str(e))
        raise

    fidelity = rungs[-1][0] if rungs else 0
    final = rungs[-1][1] if rungs else None
    info.update(
        state=state.value,
        fidelity=fidelity,
        decision=decision,
        train_seconds=round(train_seconds, 4),
        overhead_seconds=round(meter() - started - train_seconds, 4),
        marginal_seconds_per_unit=marginal,
    )
    trial.set_user_attr(TRIAL_ATTR, info)
    if state is TrialState.PROMOTED and final is not None:
        study.tell(trial, final)
    else:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    label = trial_label(trial.number, state, fidelity)
    note = " ".join(f"{r}:{v:.4f}" for r, v in rungs) + f"; {decision}"
    entry_tags = {**tags, "trial_state": state.value, "fidelity": str(fidelity)}
    if on_label is not None:
        on_label(label, entry_tags, note)
    settled = None
    if settle_as is not None:
        settled = _settle(
            ledger, spec, reservation.id, meter() - started, settle_as, label, entry_tags, "success", note
        )
    log.info("trial %s (%s): %s", label, dict(trial.params), decision)
    return SlotResult(
        ran=True,
        trial=TrialResult(
            number=trial.number,
            label=label,
            state=state,
            value=final,
            fidelity=fidelity,
            rungs=tuple(rungs),
            decision=decision,
            params=dict(trial.params),
            seconds=meter() - started,
            train_seconds=train_seconds,
            reserved_usd=reservation.usd,
            reservation_id=reservation.id,
            resumed=resumed is not None,
            estimate=estimate.source,
            settled_usd=settled,
        ),
    )


def _reserve(
    ledger: Ledger,
    spec: StudySpec,
    usd: Decimal,
    gpu_hours: Decimal,
    seconds: float,
    holder: str,
    run_id: str | None,
    slot: int,
    poll_seconds: float,
) -> Reservation:
    """Reserve the trial's estimate; while refused only because other trials hold money, wait for them.

    Other trials' reservations are mostly returned when they settle (pruned trials spend a fraction of
    their estimate), so a refusal stops the study only when nothing else of the study is in flight, or
    the money already spent leaves no room for this trial. Waiting ends when those reservations expire.
    """
    deadline = time.monotonic() + max(2 * seconds, 60.0)
    while True:
        try:
            return ledger.reserve(
                spec.budget_scope,
                usd,
                gpu_hours=gpu_hours,
                holder=holder,
                run_id=run_id,
                ttl=timedelta(seconds=max(2 * seconds, 60.0)),
                purpose=f"trial slot {slot} of study '{spec.study_name}'",
            )
        except BudgetExceededError:
            own = _study_usage(ledger, spec)
            if own is None or own.reserved_usd <= 0 or own.spent_usd + usd > own.cap_usd:
                raise
            if time.monotonic() >= deadline:
                raise
            log.info("slot %d waits for %s reserved by running trials", slot, format_usd(own.reserved_usd))
            time.sleep(poll_seconds)


def _study_usage(ledger: Ledger, spec: StudySpec) -> BudgetUsage | None:
    """Where the study's own budget stands (other budgets may cover the study too)."""
    label = f"{spec.budget_scope}/"
    return next((u for u in ledger.usage(spec.budget_scope) if u.label.startswith(label)), None)


def _resumable(trials: list[optuna.trial.FrozenTrial], holder: str) -> optuna.trial.FrozenTrial | None:
    import optuna

    for trial in trials:
        if trial.state == optuna.trial.TrialState.RUNNING and _info(trial).get("holder") == holder:
            return trial
    return None


def _info(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """What costaware keeps on a trial (one user attribute: one write per update)."""
    return dict(trial.user_attrs.get(TRIAL_ATTR) or {})


def _finish_failed(study: optuna.study.Study, trial: Any, reason: str, fidelity: int = 0) -> None:
    import optuna

    storage, trial_id = study._storage, trial._trial_id
    info = _info(storage.get_trial(trial_id))
    info.update(state=TrialState.FAILED.value, decision=f"failed: {reason}", fidelity=fidelity)
    storage.set_trial_user_attr(trial_id, TRIAL_ATTR, info)
    study.tell(trial.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)


def _settle(
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
    from costaware.core.ledger import compute_cost

    hours, usd = compute_cost(seconds, spec.usd_per_hour)
    entry = LedgerEntry(
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
        note=note[:500],
        reservation_id=reservation_id,
    )
    ledger.settle(reservation_id, usd, entry=entry)
    return usd


# -- summary ---------------------------------------------------------------------------------------------


def summarize_study(
    storage_url: str, ledger: Ledger, study_name: str, *, holder_prefix: str | None = None
) -> dict[str, Any]:
    """Close the study's loose ends and describe it: best trial, trials by state, stop reason, costs.

    Trials still ``RUNNING`` whose lease expired, or held by ``holder_prefix`` (this DAG run's slots, all
    finished by the time the summary runs), are marked failed first: none is left running.
    """
    import optuna

    study, spec = load_study(storage_url, study_name)
    failed_now = fail_stale_trials(study, holder_prefix=holder_prefix)
    trials = study.get_trials(deepcopy=False)
    rows = []
    for t in trials:
        info = _info(t)
        state = info.get("state") or (
            "failed" if t.state == optuna.trial.TrialState.FAIL else t.state.name.lower()
        )
        rows.append(
            {
                "number": t.number,
                "state": state,
                "fidelity": info.get("fidelity", t.last_step or 0),
                "value": t.value if t.value is not None else _last_value(t),
                "decision": info.get("decision", ""),
                "params": t.params,
            }
        )
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = None
    if complete:
        chosen = study.best_trial
        best = {"number": chosen.number, "value": chosen.value, "params": chosen.params}
    report = ledger.report(group_by="trial", scope=spec.budget_scope)
    per_label = [(r.group, r.usd) for r in report if r.group != "(none)"]
    costs = trial_costs([(_state_of_label(label), usd) for label, usd in per_label])
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    stopped = study.user_attrs.get(STOP_ATTR)
    usage = next(
        (u for u in ledger.usage(spec.budget_scope) if u.label.startswith(f"{spec.budget_scope}/")), None
    )
    return {
        "study_name": study_name,
        "best": best,
        "trials": sorted(rows, key=lambda r: r["number"]),
        "states": counts,
        "failed_now": failed_now,
        "stop": stopped,
        "spent_usd": str(costs.total_usd),
        "cap_usd": str(spec.caps.max_usd),
        "reserved_usd": None if usage is None else str(usage.reserved_usd),
        "cost_per_trial_usd": None if costs.per_trial_usd is None else str(costs.per_trial_usd),
        "cost_per_successful_trial_usd": None
        if costs.per_successful_trial_usd is None
        else str(costs.per_successful_trial_usd),
        "successful_trials": costs.successful,
        "cost_by_trial": [{"trial": label, "usd": str(usd)} for label, usd in per_label],
    }


def _last_value(trial: optuna.trial.FrozenTrial) -> float | None:
    step = trial.last_step
    return None if step is None else float(trial.intermediate_values[step])


def _state_of_label(label: str) -> TrialState:
    word = label.rpartition(" ")[2].partition("@")[0]
    try:
        return TrialState(word)
    except ValueError:
        return TrialState.FAILED


# -- a ready-made trainer: gradient boosting with boosting rounds as the fidelity -----------------------


class BoostingFidelityModel:
    """scikit-learn ``HistGradientBoostingClassifier`` trained round by round; scored by validation ROC AUC.

    ``advance(n)`` continues boosting (warm start) up to ``n`` rounds in total, so a promoted trial pays only
    for the rounds it adds. Columns of pandas ``category`` dtype are treated as categorical.

    Args:
        params: ``HistGradientBoostingClassifier`` parameters (``learning_rate``, ``max_leaf_nodes``, ...).
        train: Training frame with the features and the label.
        valid: Validation frame (same columns).
        label: Name of the 0/1 label column.
        random_state: Seed of the booster.
    """

    def __init__(
        self, params: Mapping[str, Any], train: Any, valid: Any, label: str, random_state: int = 0
    ) -> None:
        from sklearn.ensemble import HistGradientBoostingClassifier

        features = [c for c in train.columns if c != label]
        self._x, self._y = train[features], train[label]
        self._vx, self._vy = valid[features], valid[label]
        self.model = HistGradientBoostingClassifier(
            **dict(params), early_stopping=False, warm_start=True, random_state=random_state
        )

    def advance(self, resource: int) -> float:
        from sklearn.metrics import roc_auc_score

        if resource < 1:
            raise ConfigurationError(f"boosting rounds must be >= 1, got {resource}")
        self.model.set_params(max_iter=int(resource))
        self.model.fit(self._x, self._y)
        return float(roc_auc_score(self._vy, self.model.predict_proba(self._vx)[:, 1]))


def boosting_trainer(
    params: Mapping[str, Any], *, train_path: str, valid_path: str, label: str, random_state: int = 0
) -> BoostingFidelityModel:
    """A :class:`BoostingFidelityModel` over two Parquet files; string columns become categorical."""
    import pandas as pd

    train, valid = pd.read_parquet(train_path), pd.read_parquet(valid_path)
    for column in train.columns:
        if column != label and not pd.api.types.is_numeric_dtype(train[column]):
            categories = sorted(set(train[column].dropna()) | set(valid[column].dropna()))
            train[column] = pd.Categorical(train[column], categories=categories)
            valid[column] = pd.Categorical(valid[column], categories=categories)
    return BoostingFidelityModel(params, train, valid, label, random_state)


def is_finite(value: float | None) -> bool:
    """Whether a trial value is a real number (not None, NaN or infinite)."""
    return value is not None and math.isfinite(value)
