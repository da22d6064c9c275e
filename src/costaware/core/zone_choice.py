"""Where the next spot attempt runs: the allowed zone of least expected cost, and the restart-thrash guard.

One rule for ``RemoteTrainingOperator`` (after a preemption or a pause) and for the simulator (each spot
(re)start of a job that lists ``zones``), so that a replay decides as the live path does. No IO, no clock.

**Restart-thrash guard.** An attempt keeps work only once it has paid its restart overhead (start, restore
the newest checkpoint) and then committed a newer checkpoint, on its interval or on its preemption notice.
Where that is known (the live operator reads the newest pushed step before and after each attempt, see
``PreemptedRun.kept_work``) it decides: a run that committed a newer step got past its restart,
whatever the configured overhead estimates. Where it is not, the run's length does: a run shorter than
``restart overhead + checkpoint interval`` kept nothing, and without timed checkpoints no run kept anything.
When the last ``guard_window`` preempted spot runs in a zone each kept nothing, the zone's capacity churns
faster than the job can checkpoint, and another attempt there is likely to waste its run too: the zone is
left out. When every allowed zone is left out, the next attempt runs on on-demand. The simulator judges by
length alone, which in its model (periodic checkpoints, no save on the notice) is exact.

**Expected cost.** Each remaining zone is ranked by what the rest of the work is expected to cost there: its
spot price times the billed time, plus the move (the egress of the data and the checkpoint to another region;
0 in the same region). Billed time is one restart overhead (any next attempt restarts) plus the work left,
stretched by the zone's observed churn: a run of ``M`` seconds keeps about ``M - overhead - interval / 2`` of
work (``M - overhead`` when it saved on its notice: the share of the zone's runs that did, where the live
operator knows it, takes the ``interval / 2`` off), so ``R`` seconds of work bill ``R * M / kept``. A zone
where nothing was preempted yet is taken at its price: that is how a job tries a new zone. ``M`` is the mean
of this training's preempted runs there and one more run, the one a zone not yet seen is taken at (a restart
and the rest of the work): the estimate of a mean run length under a prior worth one run (a Gamma prior on the
zone's interruption rate), never below the observed mean (near the end of the work the prior's run is the
shorter). Without it one short run, often a restart caught by the end of the capacity it started in, priced a
zone at "no progress" for good, and the job never went back to learn otherwise: in the two-zone preemption
benchmark a v100_8 job left a zone with 84 % spot capacity after one such run and paid 18 preemptions in one
with 70 %. Ties keep the current zone (a move is never free of risk), then the order the zones were given in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from costaware.core.errors import ConfigurationError

#: How the restart-thrash guard's reason begins (a run's ``market_reason``; benchmarks look for it).
THRASH_REASON = "restart thrash"

#: An AWS zone name: its region, then a letter (``us-west-2a``), or a Local Zone (``us-west-2-lax-1a``).
_AWS_ZONE = re.compile(r"^([a-z]{2}(?:-[a-z]+)+-\d+)(?:-[a-z]+-\d+)?[a-z]$")

#: Preempted runs in a row that must each have kept nothing before a zone counts as thrashing.
DEFAULT_GUARD_WINDOW = 2


@dataclass(frozen=True, slots=True)
class PreemptedRun:
    """One preempted spot attempt of this training, as the rules weigh it.

    Args:
        seconds: How long it ran (billed).
        kept_work: Whether it committed a newer checkpoint than it restored; None: unknown, judged by its
            length (the simulator, SageMaker, a state from before steps were read).
        saved_on_notice: Whether it saved on its preemption notice and so lost only its restart; False
            also when unknown (it lost the work since its last periodic checkpoint).
    """

    seconds: float
    kept_work: bool | None = None
    saved_on_notice: bool = False


@dataclass(frozen=True, slots=True)
class ZoneView:
    """What is known of one allowed zone when the next attempt is placed.

    Args:
        zone: The zone's name (``us-west-2a``).
        spot_usd_per_hour: Its spot price now.
        has_capacity: Whether it has spot capacity now; None when unknown (a live job learns it by waiting).
        preempted_runs: This training's preempted spot attempts there, oldest first.
        move_usd: What running there adds once: the egress of the data and the checkpoint from the region
            they are in (0 in the same region).
    """

    zone: str
    spot_usd_per_hour: float
    has_capacity: bool | None = None
    preempted_runs: tuple[PreemptedRun, ...] = ()
    move_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class ZoneChoice:
    """Where the next attempt goes.

    Args:
        zone: The zone, or None: every allowed zone thrashes, run on on-demand.
        reason: One line that says why, with the figures (for the task log).
        thrashing: The zones the guard left out.
        expected_usd: The chosen zone's expected cost of the rest of the work, or None for on-demand.
    """

    zone: str | None
    reason: str
    thrashing: tuple[str, ...] = ()
    expected_usd: float | None = None


def region_of(zone: str, default: str) -> str:
    """The AWS region of ``zone``, or ``default`` for a name that is not an AWS zone (a Kubernetes label)."""
    match = _AWS_ZONE.match(zone)
    return match.group(1) if match else default


def thrashing(
    runs: Sequence[PreemptedRun],
    *,
    restart_overhead_seconds: float,
    checkpoint_every_seconds: float | None,
    window: int = DEFAULT_GUARD_WINDOW,
) -> bool:
    """Whether each of the last ``window`` preempted runs kept nothing (see the module docstring).

    A run is judged by its ``kept_work`` where that is known, else by its length.
    """
    recent = list(runs)[-window:]
    if len(recent) < window:
        return False
    threshold = restart_overhead_seconds + (checkpoint_every_seconds or math.inf)
    return all(not r.kept_work if r.kept_work is not None else r.seconds < threshold for r in recent)


def expected_usd(
    view: ZoneView,
    *,
    remaining_seconds: float,
    restart_overhead_seconds: float,
    checkpoint_every_seconds: float | None,
) -> float:
    """The expected cost of the rest of the work in ``view``'s zone (``inf`` when a run keeps nothing)."""
    billed = restart_overhead_seconds + remaining_seconds
    runs = [r.seconds for r in view.preempted_runs]
    if runs and remaining_seconds > 0:
        observed = sum(runs) / len(runs)
        # The prior's run, one that finishes the work, only ever lengthens the estimate: near the end of the
        # work it is shorter than runs that kept work, and must not price their zone out.
        mean_run = max(observed, (sum(runs) + billed) / (len(runs) + 1))
        # The share of runs that lost work past their restart.
        unsaved = 1 - sum(r.saved_on_notice for r in view.preempted_runs) / len(runs)
        lost = restart_overhead_seconds + unsaved * (checkpoint_every_seconds or mean_run) / 2
        kept = mean_run - lost
        if kept <= 0:
            return math.inf
        billed = restart_overhead_seconds + remaining_seconds * mean_run / kept
    return view.spot_usd_per_hour * billed / 3600 + view.move_usd


def choose_zone(
    views: Sequence[ZoneView],
    *,
    current: str | None,
    remaining_seconds: float,
    restart_overhead_seconds: float,
    checkpoint_every_seconds: float | None,
    guard_window: int | None = DEFAULT_GUARD_WINDOW,
) -> ZoneChoice:
    """The zone of the next spot attempt, or on-demand when the guard leaves no zone.

    Args:
        views: The allowed zones (a zone of a region the DAG forbids is never among them).
        current: The zone of the attempt that ended, or None.
        remaining_seconds: Work left (seconds of training).
        restart_overhead_seconds: What a restart from a checkpoint costs before training goes on.
        checkpoint_every_seconds: The checkpoint interval; None or 0: no timed checkpoints.
        guard_window: Preempted runs in a row that make a zone thrash; None turns the guard off.

    Returns:
        The choice: among the zones the guard keeps, those with capacity (all of them when none is known
        to have any: the attempt waits there), the lowest expected cost.

    Raises:
        ConfigurationError: No zones, a negative or non-finite figure, or a guard window below 1 (named).
    """
    if not views:
        raise ConfigurationError("no zones to choose from: give at least one allowed zone")
    _check_seconds("remaining_seconds", remaining_seconds)
    _check_seconds("restart_overhead_seconds", restart_overhead_seconds)
    if checkpoint_every_seconds is not None:
        _check_seconds("checkpoint_every_seconds", checkpoint_every_seconds)
    if guard_window is not None and (isinstance(guard_window, bool) or guard_window < 1):
        raise ConfigurationError(f"guard_window={guard_window!r} must be a whole number >= 1, or None (off)")
    for view in views:
        if not 0 <= view.spot_usd_per_hour < math.inf or not 0 <= view.move_usd < math.inf:
            raise ConfigurationError(
                f"zone {view.zone!r}: spot price {view.spot_usd_per_hour!r} and move cost {view.move_usd!r} "
                "must be finite USD >= 0"
            )
    left_out = tuple(
        v.zone
        for v in views
        if guard_window is not None
        and thrashing(
            v.preempted_runs,
            restart_overhead_seconds=restart_overhead_seconds,
            checkpoint_every_seconds=checkpoint_every_seconds,
            window=guard_window,
        )
    )
    kept = [v for v in views if v.zone not in left_out]
    if not kept:
        window = guard_window or DEFAULT_GUARD_WINDOW  # set: a zone was left out
        known = [r.kept_work is not None for v in views for r in v.preempted_runs[-window:]]
        if checkpoint_every_seconds:
            by_length = (
                f"were shorter than restart overhead {restart_overhead_seconds:g} s + checkpoint interval "
                f"{checkpoint_every_seconds:g} s"
            )
        else:
            by_length = "kept nothing: without timed checkpoints a preempted run keeps no work"
        if len(known) == window * len(views) and all(known):
            why = "ended before committing a checkpoint of their own"
        elif any(known):
            why = f"ended before committing a checkpoint of their own or, where that is unknown, {by_length}"
        else:
            why = by_length
        return ZoneChoice(
            zone=None,
            reason=(
                f"{THRASH_REASON} in {', '.join(left_out)}: the last {guard_window} preempted runs in each "
                f"{why}; on-demand instead of resubmitting into the churn"
            ),
            thrashing=left_out,
        )
    with_capacity = [v for v in kept if v.has_capacity is not False] or kept
    costs = {
        v.zone: expected_usd(
            v,
            remaining_seconds=remaining_seconds,
            restart_overhead_seconds=restart_overhead_seconds,
            checkpoint_every_seconds=checkpoint_every_seconds,
        )
        for v in with_capacity
    }
    order = {v.zone: i for i, v in enumerate(with_capacity)}
    best = min(with_capacity, key=lambda v: (costs[v.zone], v.zone != current, order[v.zone]))
    figures = ", ".join(f"{z} {_usd(c)}" for z, c in costs.items())
    why = "stays" if best.zone == current else "moves"
    reason = f"zone {best.zone}: the next attempt {why} there (expected USD of the rest: {figures})"
    if left_out:
        reason += f"; {THRASH_REASON} left out {', '.join(left_out)}"
    return ZoneChoice(zone=best.zone, reason=reason, thrashing=left_out, expected_usd=costs[best.zone])


def _usd(value: float) -> str:
    return "no progress" if math.isinf(value) else f"{value:.4f}"


def _check_seconds(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ConfigurationError(f"{name}={value!r} is not a finite number of seconds >= 0")
