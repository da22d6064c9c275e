"""What a trial is expected to cost before it runs, and what the trials of a study did cost.

A trial reserves money before it trains; the estimate comes from the trials that finished (their slowest
rate, so a slow configuration is never under-reserved) or, before any did, from the user's own guess.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from costaware.core.errors import ConfigurationError
from costaware.core.tuning.trials import TrialState

#: The longest a trial's hold is kept for its task's retry, past its lease: a dead trial's hold blocks the
#: study's budget that long at most (a retry that comes later reserves anew), and a slot waiting for the
#: study's holds waits that long at most past its own wait.
MAX_KEEP_FOR_RETRY_SECONDS = 3600.0


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
