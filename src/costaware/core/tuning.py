"""Budget-capped multi-fidelity tuning, the pure part: search space, rungs, promotion, caps, stop rules.

The Optuna glue lives in ``costaware.training.tuning``; this module decides, from plain facts, which trials
move up a rung, when a study stops and what a trial is expected to cost. Money caps are not checked here:
they are ledger reservations, atomic in the database (``Ledger.reserve``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any

from costaware.core.budgets import Scope
from costaware.core.errors import ConfigurationError
from costaware.core.money import parse_usd

DIRECTIONS = ("maximize", "minimize")
PARAM_KINDS = ("float", "int", "categorical")


class TrialState(str, Enum):
    """How a trial ended, as the ledger and the summary show it."""

    PROMOTED = "promoted"  # trained to the last rung (full fidelity) and scored
    PRUNED = "pruned"  # stopped at a rung by successive halving
    CUT = "cut"  # stopped before a rung because its reserved money or the study's wall clock ran out
    FAILED = "failed"  # the trainer raised, or the trial's lease expired (a killed worker)
    RUNNING = "running"


class StopReason(str, Enum):
    """Why a study stopped asking for new trials."""

    BUDGET = "budget"  # the next trial's estimated cost could not be reserved (USD or GPU-hours)
    MAX_TRIALS = "max_trials"
    WALL_CLOCK = "wall_clock"
    PLATEAU = "plateau"


# -- search space ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One hyperparameter: a float or int range (optionally log-scaled or stepped) or a list of choices."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def to_json(self) -> dict[str, Any]:
        if self.kind == "categorical":
            return {"type": "categorical", "choices": list(self.choices)}
        out: dict[str, Any] = {"type": self.kind, "low": self.low, "high": self.high, "log": self.log}
        if self.step is not None:
            out["step"] = self.step
        return out


def parse_search_space(space: Mapping[str, Mapping[str, Any]]) -> tuple[ParamSpec, ...]:
    """Validate a JSON search space.

    For example ``{"learning_rate": {"type": "float", "low": 0.01, "high": 0.3, "log": true},
    "max_leaf_nodes": {"type": "categorical", "choices": [15, 31, 63]}}``.

    Raises:
        ConfigurationError: the space is empty, a type is unknown, a range is empty or a log range
            includes zero, or a categorical has no choices; the message names the parameter.
    """
    if not isinstance(space, Mapping) or not space:
        raise ConfigurationError(
            f"search_space must be a non-empty mapping of parameter name to spec, got {space!r}"
        )
    specs = []
    for name, raw in space.items():
        if not isinstance(raw, Mapping):
            raise ConfigurationError(
                f"search space entry {name!r} must be a mapping such as "
                f"{{'type': 'float', 'low': 0.01, 'high': 0.3}}, got {raw!r}"
            )
        kind = str(raw.get("type", "")).lower()
        if kind not in PARAM_KINDS:
            raise ConfigurationError(
                f"search space entry {name!r} has type {raw.get('type')!r}: "
                f"use one of {', '.join(PARAM_KINDS)}"
            )
        if kind == "categorical":
            choices = tuple(raw.get("choices") or ())
            if not choices:
                raise ConfigurationError(f"categorical parameter {name!r} needs a non-empty 'choices' list")
            specs.append(ParamSpec(str(name), kind, choices=choices))
            continue
        try:
            low, high = float(raw["low"]), float(raw["high"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigurationError(
                f"{kind} parameter {name!r} needs numeric 'low' and 'high', got {dict(raw)!r}"
            ) from e
        log = bool(raw.get("log", False))
        step = None if raw.get("step") is None else float(raw["step"])
        if not (math.isfinite(low) and math.isfinite(high)) or low > high:
            raise ConfigurationError(
                f"parameter {name!r} has an empty range [{low}, {high}]: need low <= high"
            )
        if log and low <= 0:
            raise ConfigurationError(f"parameter {name!r} is log-scaled, so low must be > 0, got {low}")
        if step is not None and (step <= 0 or log):
            raise ConfigurationError(
                f"parameter {name!r} has step {step}: a step must be > 0 and cannot be combined with log"
            )
        if kind == "int" and (low != int(low) or high != int(high)):
            raise ConfigurationError(f"int parameter {name!r} needs whole bounds, got [{low}, {high}]")
        specs.append(ParamSpec(str(name), kind, low, high, log, step))
    return tuple(specs)


# -- rungs and promotion -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RungSchedule:
    """The fidelities (epochs, boosting rounds, data percent) at which trials are compared.

    ``RungSchedule.geometric(3, 15, 2, max_rungs=2)`` is ``(3, 15)``: every trial trains 3 epochs, the top
    half is promoted to 15. ``RungSchedule.geometric(10, 160, 2)`` is ``(10, 20, 40, 80, 160)``.
    """

    rungs: tuple[int, ...]
    reduction_factor: int = 2

    def __post_init__(self) -> None:
        if not self.rungs or any(r < 1 for r in self.rungs):
            raise ConfigurationError(f"rungs must be whole resources >= 1, got {self.rungs!r}")
        if list(self.rungs) != sorted(set(self.rungs)):
            raise ConfigurationError(f"rungs must be strictly increasing, got {self.rungs!r}")
        if self.reduction_factor < 2:
            raise ConfigurationError(
                f"reduction_factor must be >= 2 (the top 1/eta move up), got {self.reduction_factor}"
            )

    @classmethod
    def geometric(
        cls, min_resource: int, max_resource: int, reduction_factor: int = 2, max_rungs: int | None = None
    ) -> RungSchedule:
        """Rungs ``min * eta^k`` below ``max``, then ``max``; with ``max_rungs`` the first ones and ``max``.

        Raises:
            ConfigurationError: ``min_resource`` < 1, ``max_resource`` < ``min_resource``,
                ``reduction_factor`` < 2 or ``max_rungs`` < 1.
        """
        if min_resource < 1 or max_resource < min_resource:
            raise ConfigurationError(
                f"need 1 <= min_resource <= max_resource, got min_resource={min_resource}, "
                f"max_resource={max_resource}"
            )
        if reduction_factor < 2:
            raise ConfigurationError(f"reduction_factor must be >= 2, got {reduction_factor}")
        if max_rungs is not None and max_rungs < 1:
            raise ConfigurationError(f"max_rungs must be >= 1, got {max_rungs}")
        rungs = []
        resource = min_resource
        while resource < max_resource:
            rungs.append(resource)
            resource *= reduction_factor
        if max_rungs is not None:
            rungs = rungs[: max_rungs - 1]
        return cls((*rungs, max_resource), reduction_factor)

    @property
    def max_resource(self) -> int:
        return self.rungs[-1]

    def expected_resource_per_trial(self) -> float:
        """Mean resource a trial uses when the top ``1/eta`` move up at every rung (the plan's cost unit)."""
        total, previous, surviving = 0.0, 0, 1.0
        for rung in self.rungs:
            total += (rung - previous) * surviving
            previous, surviving = rung, surviving / self.reduction_factor
        return total


def promotable(value: float, competing: Sequence[float], reduction_factor: int, direction: str) -> bool:
    """Asynchronous successive halving: is ``value`` in the top ``1/eta`` of the results at its rung?

    ``competing`` holds the other trials' results at the same rung. With fewer than ``eta`` results in all,
    only the best so far moves up (ASHA cannot wait for the rest). NaN never moves up.
    """
    if math.isnan(value):
        return False
    ordered = sorted([v for v in competing if not math.isnan(v)] + [value], reverse=direction == "maximize")
    keep = max(len(ordered) // reduction_factor, 1)
    cutoff = ordered[keep - 1]
    return value >= cutoff if direction == "maximize" else value <= cutoff


# -- caps and stop rules -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TuningCaps:
    """What a study may use: USD and GPU-hours (enforced by ledger reservations), trials, wall clock, plateau.

    ``plateau_trials=K`` stops the study once K trials in a row finished without improving the best fully
    trained value by at least ``plateau_min_delta``.
    """

    max_usd: Decimal
    max_trials: int
    max_gpu_hours: Decimal | None = None
    max_wall_seconds: float | None = None
    plateau_trials: int | None = None
    plateau_min_delta: float = 0.0

    @classmethod
    def create(
        cls,
        *,
        max_usd: object,
        max_trials: object,
        max_gpu_hours: object | None = None,
        max_wall_seconds: object | None = None,
        plateau_trials: object | None = None,
        plateau_min_delta: object = 0.0,
    ) -> TuningCaps:
        """Caps from user input (strings from templates are fine), with errors that name the bad value."""
        usd = parse_usd(max_usd, name="max_usd")
        if usd <= 0:
            raise ConfigurationError(f"max_usd must be more than $0, got {max_usd!r}: no trial could run")
        gpu = None if max_gpu_hours in (None, "") else parse_usd(max_gpu_hours, name="max_gpu_hours")
        trials = _whole(max_trials, "max_trials", minimum=1)
        wall = None if max_wall_seconds in (None, "") else _positive(max_wall_seconds, "max_wall_seconds")
        plateau = (
            None if plateau_trials in (None, "") else _whole(plateau_trials, "plateau_trials", minimum=1)
        )
        delta = _positive(plateau_min_delta, "plateau_min_delta", allow_zero=True)
        return cls(usd, trials, gpu, wall, plateau, delta)

    def to_json(self) -> dict[str, Any]:
        return {
            "max_usd": str(self.max_usd),
            "max_trials": self.max_trials,
            "max_gpu_hours": None if self.max_gpu_hours is None else str(self.max_gpu_hours),
            "max_wall_seconds": self.max_wall_seconds,
            "plateau_trials": self.plateau_trials,
            "plateau_min_delta": self.plateau_min_delta,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TuningCaps:
        return cls.create(**data)


def _whole(value: object, name: str, *, minimum: int) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise ConfigurationError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return number


def _positive(value: object, name: str, *, allow_zero: bool = False) -> float:
    try:
        number = float(str(value).strip()) if not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(f"{name} must be a number {bound}, got {value!r}")
    return number


@dataclass(frozen=True, slots=True)
class FinishedTrial:
    """A trial that ended, in the order trials ended: its state and, when fully trained, its value."""

    state: TrialState
    value: float | None = None


def trials_since_improvement(finished: Sequence[FinishedTrial], direction: str, min_delta: float) -> int:
    """How many trials ended since the best fully trained value last improved by ``min_delta`` or more.

    Before the first fully trained trial there is nothing to improve on, so the count stays 0.
    """
    best: float | None = None
    since = 0
    for trial in finished:
        value = trial.value
        if trial.state is TrialState.PROMOTED and value is not None and not math.isnan(value):
            gain = math.inf if best is None else (value - best if direction == "maximize" else best - value)
            if gain >= min_delta and gain > 0:
                best, since = value, 0
                continue
            if gain > 0:
                best = value  # better, but not by enough to count as progress
        if best is not None:
            since += 1
    return since


def stop_reason(
    caps: TuningCaps,
    *,
    direction: str,
    trials_started: int,
    finished: Sequence[FinishedTrial],
    started_at: datetime,
    now: datetime,
) -> tuple[StopReason, str] | None:
    """Whether the study must stop before asking for another trial, and why (money is checked by the ledger).

    Args:
        caps: The study's caps.
        direction: ``maximize`` or ``minimize``.
        trials_started: Trials asked so far that did not fail (running, pruned, cut or promoted).
        finished: Ended trials in the order they ended.
        started_at: When the study was created (aware).
        now: The current instant (aware).
    """
    if trials_started >= caps.max_trials:
        return StopReason.MAX_TRIALS, f"{trials_started} trials started, max_trials is {caps.max_trials}"
    if caps.max_wall_seconds is not None:
        elapsed = (now - started_at).total_seconds()
        if elapsed >= caps.max_wall_seconds:
            return (
                StopReason.WALL_CLOCK,
                f"the study has run {elapsed:.0f} s, max_wall_seconds is {caps.max_wall_seconds:.0f}",
            )
    if caps.plateau_trials is not None:
        since = trials_since_improvement(finished, direction, caps.plateau_min_delta)
        if since >= caps.plateau_trials:
            return (
                StopReason.PLATEAU,
                f"the best value has not improved by {caps.plateau_min_delta} for {since} trials "
                f"(plateau_trials={caps.plateau_trials})",
            )
    return None


def wall_clock_left(caps: TuningCaps, started_at: datetime, now: datetime) -> float | None:
    """Seconds until the study's wall-clock cap (None: no cap)."""
    if caps.max_wall_seconds is None:
        return None
    end = started_at + timedelta(seconds=caps.max_wall_seconds)
    return max((end - now).total_seconds(), 0.0)


# -- cost estimates ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrialTiming:
    """What one finished trial took: the resource it reached, seconds spent training, seconds of overhead.

    ``marginal_seconds_per_unit`` is the speed of its last rung after the first (seconds of that rung over
    the resource it added): free of the fixed cost every fit pays, so it is the best guide to a full run.
    """

    resource: int
    train_seconds: float
    overhead_seconds: float
    marginal_seconds_per_unit: float | None = None


@dataclass(frozen=True, slots=True)
class TrialEstimate:
    """Seconds to reserve for one trial at full fidelity, the training rate behind it, and its source."""

    seconds: float
    seconds_per_unit: float | None
    source: str


def estimate_trial_seconds(
    timings: Sequence[TrialTiming], max_resource: int, fallback_seconds: float, safety_factor: float = 1.5
) -> TrialEstimate:
    """Seconds to reserve for one trial trained to ``max_resource``.

    From finished trials: the slowest marginal seconds per unit of resource seen at a rung after the first
    (hyperparameters change speed, so the slowest is the safe one; before any trial passed its first rung,
    the slowest first rung at the highest fidelity seen) times ``max_resource``, plus the largest overhead
    seen, times ``safety_factor``. Before any trial finished: ``fallback_seconds`` (the user's estimate);
    when trials ended before their first rung, their overhead plus ``fallback_seconds``, times
    ``safety_factor``.
    """
    if safety_factor < 1:
        raise ConfigurationError(f"safety_factor must be >= 1, got {safety_factor}")
    usable = [t for t in timings if t.resource > 0 and t.train_seconds >= 0]
    if not usable:
        if not timings:
            return TrialEstimate(fallback_seconds, None, "fallback (no finished trial yet)")
        # Trials cut before their first rung: their overhead is known, training speed is not.
        overhead = max(t.overhead_seconds for t in timings)
        return TrialEstimate(
            (overhead + fallback_seconds) * safety_factor,
            None,
            f"fallback plus {overhead:.2f} s overhead seen (no trial reached a rung yet)",
        )
    overhead = max(t.overhead_seconds for t in timings)
    marginal = [t.marginal_seconds_per_unit for t in usable if t.marginal_seconds_per_unit is not None]
    if marginal:
        # The slowest later rung seen, whatever fidelity its trial reached: slow configurations count
        # even when they were pruned or cut.
        rate, basis = max(marginal), f"slowest later rung of {len(marginal)} trial(s)"
    else:
        # Only first rungs seen: their fixed costs (binning, scoring) make this an overestimate.
        top = max(t.resource for t in usable)
        rate = max(t.train_seconds / t.resource for t in usable if t.resource == top)
        basis = f"first rungs only, at {top}"
    seconds = (overhead + rate * max_resource) * safety_factor
    return TrialEstimate(seconds, rate, f"{rate:.4f} s per unit ({basis}), {overhead:.2f} s overhead")


def usd_for_seconds(seconds: float, usd_per_hour: Decimal) -> Decimal:
    """USD of ``seconds`` at ``usd_per_hour``, rounded up to the micro-dollar (never short)."""
    exact = Decimal(str(seconds)) * usd_per_hour / Decimal(3600)
    return exact.quantize(Decimal("0.000001"), rounding="ROUND_CEILING")


def seconds_for_usd(usd: Decimal, usd_per_hour: Decimal) -> float:
    """How many seconds ``usd`` buys at ``usd_per_hour`` (infinite when the compute is free)."""
    if usd_per_hour <= 0:
        return math.inf
    return float(usd * Decimal(3600) / usd_per_hour)


def trial_label(number: int, state: TrialState, fidelity: int) -> str:
    """The ledger's ``trial`` value: ``#7 pruned@3``, so a report grouped by trial shows each decision."""
    return f"#{number} {state.value}@{fidelity}"


# -- the study's settings ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StudySpec:
    """Everything a trial slot needs to run a trial; stored with the study so every worker reads the same.

    Each trial reserves its estimated full-fidelity seconds (see :func:`estimate_trial_seconds`) plus
    ``slack_seconds`` for what follows training and a busy worker's scheduling noise; what it does not use
    returns to the budget when it settles.
    """

    study_name: str
    direction: str
    search_space: tuple[ParamSpec, ...]
    schedule: RungSchedule
    caps: TuningCaps
    pruner: str = "successive_halving"
    sampler: str = "tpe"
    seed: int = 0
    scope: Mapping[str, str] = field(default_factory=dict)
    instance_type: str = "m5.large"
    region: str = "us-east-1"
    market: str = "on_demand"
    usd_per_hour: Decimal = Decimal("0.096")
    gpus: Decimal = Decimal(0)
    fallback_trial_seconds: float = 600.0
    safety_factor: float = 1.5
    slack_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ConfigurationError(
                f"direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}"
            )
        if self.pruner not in PRUNERS:
            raise ConfigurationError(f"pruner must be one of {', '.join(PRUNERS)}, got {self.pruner!r}")
        if self.sampler not in SAMPLERS:
            raise ConfigurationError(f"sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        if not self.study_name or any(c in self.study_name for c in ",="):
            raise ConfigurationError(
                f"study_name {self.study_name!r} must be non-empty, without ',' or '=' (it is a ledger tag)"
            )
        if not self.usd_per_hour.is_finite() or self.usd_per_hour < 0:
            raise ConfigurationError(f"usd_per_hour must be >= 0, got {self.usd_per_hour}")
        if self.fallback_trial_seconds <= 0 or not math.isfinite(self.fallback_trial_seconds):
            raise ConfigurationError(
                f"fallback_trial_seconds must be > 0 (the cost estimate before any trial finished), "
                f"got {self.fallback_trial_seconds}"
            )
        if self.safety_factor < 1:
            raise ConfigurationError(f"safety_factor must be >= 1, got {self.safety_factor}")
        if not (self.slack_seconds >= 0 and math.isfinite(self.slack_seconds)):
            raise ConfigurationError(f"slack_seconds must be >= 0, got {self.slack_seconds}")

    @property
    def budget_scope(self) -> Scope:
        """The ledger scope of the study's own budget: its tags plus ``study=<name>``."""
        return Scope.of({**dict(self.scope), "study": self.study_name})

    def to_json(self) -> dict[str, Any]:
        return {
            "study_name": self.study_name,
            "direction": self.direction,
            "search_space": {p.name: p.to_json() for p in self.search_space},
            "rungs": list(self.schedule.rungs),
            "reduction_factor": self.schedule.reduction_factor,
            "caps": self.caps.to_json(),
            "pruner": self.pruner,
            "sampler": self.sampler,
            "seed": self.seed,
            "scope": dict(self.scope),
            "instance_type": self.instance_type,
            "region": self.region,
            "market": self.market,
            "usd_per_hour": str(self.usd_per_hour),
            "gpus": str(self.gpus),
            "fallback_trial_seconds": self.fallback_trial_seconds,
            "safety_factor": self.safety_factor,
            "slack_seconds": self.slack_seconds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StudySpec:
        values = dict(data)
        return cls(
            study_name=str(values["study_name"]),
            direction=str(values["direction"]),
            search_space=parse_search_space(values["search_space"]),
            schedule=RungSchedule(tuple(int(r) for r in values["rungs"]), int(values["reduction_factor"])),
            caps=TuningCaps.from_json(values["caps"]),
            pruner=str(values["pruner"]),
            sampler=str(values["sampler"]),
            seed=int(values["seed"]),
            scope=dict(values.get("scope") or {}),
            instance_type=str(values["instance_type"]),
            region=str(values["region"]),
            market=str(values["market"]),
            usd_per_hour=Decimal(str(values["usd_per_hour"])),
            gpus=Decimal(str(values.get("gpus", "0"))),
            fallback_trial_seconds=float(values["fallback_trial_seconds"]),
            safety_factor=float(values["safety_factor"]),
            slack_seconds=float(values.get("slack_seconds", 2.0)),
        )


PRUNERS = ("successive_halving", "hyperband", "none")
SAMPLERS = ("tpe", "random")


@dataclass(frozen=True, slots=True)
class TrialCosts:
    """Cost per trial and per successful (fully trained) trial of a study."""

    trials: int
    successful: int
    total_usd: Decimal
    per_trial_usd: Decimal | None
    per_successful_trial_usd: Decimal | None


def trial_costs(costs: Sequence[tuple[TrialState, Decimal]]) -> TrialCosts:
    """Sum each trial's cost; per successful trial divides everything spent by the trials fully trained."""
    total = sum((usd for _, usd in costs), Decimal(0))
    successful = sum(1 for state, _ in costs if state is TrialState.PROMOTED)
    micro = Decimal("0.000001")
    return TrialCosts(
        trials=len(costs),
        successful=successful,
        total_usd=total,
        per_trial_usd=(total / len(costs)).quantize(micro) if costs else None,
        per_successful_trial_usd=(total / successful).quantize(micro) if successful else None,
    )
