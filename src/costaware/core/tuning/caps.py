"""What a study may use, and the rules that stop it before it asks for another trial.

USD and GPU-hour caps are enforced by ledger reservations, atomic in the database (``Ledger.reserve``); the
rules here are the ones that need no money: trials started, wall clock, and a plateau of the best value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.money import MICRO_USD, parse_usd
from costaware.core.tuning.trials import FinishedTrial, TrialState


class StopReason(str, Enum):
    """Why a study stopped asking for new trials."""

    BUDGET = "budget"  # the next trial's estimated cost could not be reserved (USD or GPU-hours)
    MAX_TRIALS = "max_trials"
    WALL_CLOCK = "wall_clock"
    PLATEAU = "plateau"


@dataclass(frozen=True, slots=True)
class TuningCaps:
    """What a study may use: USD and GPU-hours (enforced by ledger reservations), trials, wall clock, plateau.

    ``plateau_trials=K`` stops the study once K trials in a row finished without improving the best fully
    trained value by at least ``plateau_min_delta``, measured from the best at its last such improvement.
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
        # Negatives pass the parse so that they get the one message 0 gets (not "zero or more").
        usd = parse_usd(max_usd, name="max_usd", allow_negative=True)
        if usd <= 0:
            raise ConfigurationError(f"max_usd must be more than $0, got {max_usd!r}: no trial could run")
        if usd < MICRO_USD:
            # The study's budget would be stored as $0: refused here, before the study is written, not by
            # the ledger after it.
            raise ConfigurationError(
                f"max_usd {max_usd!r} is below the ledger's smallest amount, $0.000001: give at least that"
            )
        # GPU-hours, not dollars: "two" read "must be a number of USD", and "$1" was taken.
        gpu = (
            None
            if max_gpu_hours in (None, "")
            else Decimal(str(positive_number(max_gpu_hours, "max_gpu_hours", allow_zero=True)))
        )
        trials = _whole(max_trials, "max_trials", minimum=1)
        wall = (
            None if max_wall_seconds in (None, "") else positive_number(max_wall_seconds, "max_wall_seconds")
        )
        plateau = (
            None if plateau_trials in (None, "") else _whole(plateau_trials, "plateau_trials", minimum=1)
        )
        delta = positive_number(plateau_min_delta, "plateau_min_delta", allow_zero=True)
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


def positive_number(value: object, name: str, *, allow_zero: bool = False, unit: str = "") -> float:
    """``value`` (or its rendered text) as a finite number > 0, or >= 0 with ``allow_zero``.

    ``unit`` (``"minutes"``) is named in the message: "a number of minutes > 0".

    Raises:
        ConfigurationError: anything else, naming ``name``.
    """
    try:
        number = float(str(value).strip()) if not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        number_of = f"a number of {unit}" if unit else "a number"
        raise ConfigurationError(f"{name} must be {number_of} {bound}, got {value!r}")
    return number


def trials_since_improvement(finished: Sequence[FinishedTrial], direction: str, min_delta: float) -> int:
    """How many trials ended since the best fully trained value last improved by ``min_delta`` or more.

    The value measured from is the best as of that last improvement (as Keras' ``EarlyStopping``): smaller
    gains do not move it, so steady progress of less than ``min_delta`` a trial adds up and counts once it
    reaches ``min_delta``. Before the first fully trained trial there is nothing to improve on, so the count
    stays 0.
    """
    anchor: float | None = None
    since = 0
    for trial in finished:
        value = trial.value
        if trial.state is TrialState.PROMOTED and value is not None and not math.isnan(value):
            gain = (
                math.inf
                if anchor is None
                else (value - anchor if direction == "maximize" else anchor - value)
            )
            if gain >= min_delta and gain > 0:
                anchor, since = value, 0
                continue
        if anchor is not None:
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
                f"the study has run {elapsed:.0f} s in this DAG run, max_wall_seconds is "
                f"{caps.max_wall_seconds:.0f}",
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
