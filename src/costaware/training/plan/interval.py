"""``checkpoint_every_seconds="auto"``: the plan's interval from the spot advisor's interruption band.

The rule is :func:`costaware.core.checkpoint_interval.checkpoint_interval`; this module finds its inputs
for a plan: the band of the instance type in the region (the bundled advisor table, read by the caller),
the assumed cost of a save (nothing is measured before the first attempt), and the expected runtime when
the operator was given one; and, before each later spot attempt, from the run lengths of the attempts
preempted so far and the saves the attempts measured (:func:`observed_interval`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

from costaware.core.checkpoint_interval import (
    BAND_UPPER_SHARE,
    DEFAULT_SAVE_SECONDS,
    HOURS_PER_MONTH,
    ON_DEMAND_INTERVAL_SECONDS,
    check_run_seconds,
    checkpoint_interval,
    is_auto,
    measured_save_seconds,
    observed_seconds_between_interruptions,
    seconds_between_interruptions,
)
from costaware.core.errors import ConfigurationError, PriceNotFoundError

#: The band assumed when the advisor has no entry for the type (e.g. SageMaker's ``ml.*`` types).
UNKNOWN_BAND = ">20%"


def planned_interval(
    every_seconds: Any,
    *,
    market: str,
    instance_type: str,
    region: str,
    expected_runtime_hours: float | None,
    interruption_band: Callable[[str, str], str] | None,
) -> tuple[Any, str | None]:
    """The plan's interval and, for ``"auto"``, why (None when the argument was a number or None).

    A spot start takes Young/Daly's interval for the advisor's band of ``instance_type`` in ``region``
    (the most conservative band when the advisor has no entry) over the expected runtime (how long the
    instance is exposed to interruptions; without one, the advisor's month) with a save of
    :data:`~costaware.core.checkpoint_interval.DEFAULT_SAVE_SECONDS`. An on-demand start has no
    interruption rate to weigh: it takes ``ON_DEMAND_INTERVAL_SECONDS`` (what a pause or a host failure
    may lose).

    Args:
        every_seconds: The rendered ``checkpoint_every_seconds``.
        market: The first attempt's market.
        instance_type: What the training runs on.
        region: Where it runs.
        expected_runtime_hours: The expected runtime, or None.
        interruption_band: ``(instance_type, region) -> advisor band`` such as ``"<5%"``; raises
            ``PriceNotFoundError`` for a type the advisor does not know. None: no advisor table.

    Raises:
        ConfigurationError: an advisor band the rule does not know.
    """
    if not is_auto(every_seconds):
        return every_seconds, None  # as given: the plan kept numbers as they came before "auto"
    if market != "spot":
        return ON_DEMAND_INTERVAL_SECONDS, (
            f"checkpoint_every_seconds='auto' on {market}: {ON_DEMAND_INTERVAL_SECONDS:.0f} s, no spot "
            "interruption rate to weigh (a pause checkpoints on SIGTERM; this bounds a host failure's loss)"
        )
    band, source = UNKNOWN_BAND, f"no spot advisor entry for {instance_type} in {region}, assumed"
    if interruption_band is not None:
        with contextlib.suppress(PriceNotFoundError):
            band, source = (
                interruption_band(instance_type, region),
                f"spot advisor band of {instance_type} in {region}",
            )
    runtime_seconds = expected_runtime_hours * 3600 if expected_runtime_hours else None
    mtbi = seconds_between_interruptions(band, runtime_seconds)
    chosen = checkpoint_interval(
        save_seconds=DEFAULT_SAVE_SECONDS,
        seconds_between_interruptions=mtbi,
        expected_runtime_seconds=runtime_seconds,
    )
    share = BAND_UPPER_SHARE[band.strip()]
    # The band is a share of instances, so it becomes a rate over how long this one runs.
    exposure = (
        f"over the {expected_runtime_hours:g} h expected runtime"
        if runtime_seconds is not None and runtime_seconds < HOURS_PER_MONTH * 3600
        else "over a month, no shorter expected runtime given"
    )
    return chosen.seconds, (
        f"checkpoint_every_seconds='auto': {chosen.seconds:.0f} s. {source} {band}, taken as {share:.0%} of "
        f"instances interrupted {exposure}: a mean {mtbi / 3600:.1f} h between interruptions; save cost "
        f"{DEFAULT_SAVE_SECONDS:g} s assumed (none measured yet): {chosen.reason}"
    )


#: How many of the latest preempted attempts the observed mean runs over.
RECENT_PREEMPTIONS = 3


def observed_interval(
    preempted_run_seconds: Sequence[float],
    *,
    planned_seconds: float,
    save_seconds: Sequence[float] = (),
    saved_on_notice: Sequence[bool] = (),
    restart_overhead_seconds: float = 0.0,
) -> tuple[float, str] | None:
    """The interval of the next spot attempt from the run lengths of the latest preempted ones, or None.

    Each preempted attempt ran that long before its interruption; its first ``restart_overhead_seconds``
    went to starting (the process, the restore), so only the rest was training that an interruption could
    lose. Over the latest :data:`RECENT_PREEMPTIONS`, the time between interruptions is their training time
    over the interruptions that lost work: an attempt that saved on its notice (it exited 75 and, where the
    operator could read it, committed a newer step than it restored) lost none, whatever the interval, and
    neither did one stopped while it was still starting
    (nothing trained since the checkpoint it restored); both count as time without a loss. When none of
    them lost work the next attempt takes the planned interval. The cost of a save is the median of
    ``save_seconds`` (:func:`~costaware.core.checkpoint_interval.measured_save_seconds`),
    :data:`~costaware.core.checkpoint_interval.DEFAULT_SAVE_SECONDS` while none was measured. The result
    only shortens the plan's interval (``planned_seconds``, from the advisor's band): the plan keeps that
    one, so the work-left estimate, which counts one interval lost per stop, stays an estimate from above.

    Args:
        preempted_run_seconds: How long the preempted attempts ran, oldest first (none: None).
        planned_seconds: The interval the plan started with.
        save_seconds: Wall seconds of the saves the attempts measured so far, oldest first (the launcher's
            ``LATEST.json`` keeps the latest few).
        saved_on_notice: Per preempted attempt (the same order), whether it saved on its notice; empty:
            none did (every interruption lost the work since the last periodic save).
        restart_overhead_seconds: What a restart costs before training goes on (the operator's
            ``restart_overhead_minutes``); 0: every second of a run was training.

    Raises:
        ConfigurationError: a run length, a measured save or the restart overhead that is not seconds
            >= 0, or ``saved_on_notice`` of another length than the run lengths.
    """
    runs = list(preempted_run_seconds)
    saved = list(saved_on_notice) or [False] * len(runs)
    if len(saved) != len(runs):
        raise ConfigurationError(
            f"saved_on_notice has {len(saved)} value(s) for {len(runs)} preempted attempt(s): give one each"
        )
    recent, recent_saved = runs[-RECENT_PREEMPTIONS:], saved[-RECENT_PREEMPTIONS:]
    if not recent:
        return None
    check_run_seconds(recent)
    overhead = restart_overhead_seconds
    if isinstance(overhead, bool) or not isinstance(overhead, int | float) or not 0 <= overhead < math.inf:
        raise ConfigurationError(f"the restart overhead must be seconds >= 0, got {overhead!r}")
    training = [max(0.0, run - overhead) for run in recent]
    starting = sum(1 for s, t in zip(recent_saved, training, strict=True) if not s and t == 0)
    lossy = sum(1 for s, t in zip(recent_saved, training, strict=True) if not s and t > 0)
    listed = ", ".join(f"{s:.0f}" for s in recent) + " s"
    if overhead:
        trained = ", ".join(f"{t:.0f}" for t in training)
        listed += f" (of which {trained} s training, after a {overhead:.0f} s restart each)"
    if not lossy:
        return planned_seconds, (
            f"checkpoint_every_seconds='auto': {planned_seconds:.0f} s for the next attempt, the planned "
            f"interval. The last {len(recent)} preempted attempt(s) ran {listed} and each saved on its "
            "notice or was stopped while starting: no interruption lost work the interval could have kept"
        )
    mtbi = observed_seconds_between_interruptions(training, lossy)
    if save_seconds:
        save = measured_save_seconds(save_seconds)
        measured = ", ".join(f"{s:.3g}" for s in save_seconds)
        save_why = (
            f"save cost {save:.3g} s measured (median of the last {len(save_seconds)} save(s): {measured} s)"
        )
    else:
        save, save_why = (
            DEFAULT_SAVE_SECONDS,
            f"save cost {DEFAULT_SAVE_SECONDS:g} s assumed (none measured yet)",
        )
    chosen = checkpoint_interval(save_seconds=save, seconds_between_interruptions=mtbi)
    seconds = min(chosen.seconds, planned_seconds)
    spared = [
        f"{len(recent) - lossy - starting} saved on the notice" if len(recent) - lossy - starting else "",
        f"{starting} stopped while starting" if starting else "",
    ]
    losses = (
        f"{lossy} of them lost work ({', '.join(w for w in spared if w)})"
        if lossy < len(recent)
        else "each lost the work since its last save"
    )
    return seconds, (
        f"checkpoint_every_seconds='auto': {seconds:.0f} s for the next attempt. The last {len(recent)} "
        f"preempted attempt(s) ran {listed} and {losses}: a mean {mtbi:.0f} s between losses, "
        f"{save_why}: {chosen.reason}"
        + (f"; kept at the planned {planned_seconds:.0f} s" if seconds < chosen.seconds else "")
    )
