"""The checkpoint interval of a spot training from its interruption rate: Young/Daly, bounded.

Young's first-order optimum (J. W. Young, 1974; J. T. Daly, 2006) of the time between checkpoints is
``sqrt(2 * save_seconds * mean_seconds_between_interruptions)``: it balances the time spent saving against
the work an interruption loses (half an interval on average). It holds when a save is short against the
time between interruptions, so the result is kept in a band:

* not below :data:`MIN_SAVE_MULTIPLE` saves (saving then takes at most a tenth of the run) nor below
  :data:`MIN_INTERVAL_SECONDS` (the first-order formula is off when saves come that often);
* not above the expected runtime (an interval longer than the run saves nothing by time) nor above
  :data:`MAX_INTERVAL_SECONDS` (what a hard kill without notice, e.g. a host failure, may lose).

The mean time between interruptions comes from the AWS Spot Instance Advisor's interruption band over the
training's expected runtime (:func:`seconds_between_interruptions`) or from the run lengths of the attempts
preempted so far (:func:`observed_seconds_between_interruptions`), counting only the interruptions that lost
work: one the job saved on (a notice, and the checkpoint committed before it stopped) loses none, whatever the
interval. The cost of a save is :data:`DEFAULT_SAVE_SECONDS` until one was measured, then the median of the
measured saves (:func:`measured_save_seconds`). Pure functions: no IO.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from costaware.core.errors import ConfigurationError

#: The word that asks for this rule instead of a number of seconds.
AUTO = "auto"
#: What one save is assumed to cost before any save was measured.
DEFAULT_SAVE_SECONDS = 30.0
#: The interval is at least this many saves.
MIN_SAVE_MULTIPLE = 10.0
#: ... and at least this long.
MIN_INTERVAL_SECONDS = 60.0
#: ... and at most this long, whatever the interruption rate.
MAX_INTERVAL_SECONDS = 3600.0
#: The interval of an on-demand attempt: no interruption rate to weigh, only pauses and host failures.
ON_DEMAND_INTERVAL_SECONDS = 300.0
HOURS_PER_MONTH = 730.0
#: The conservative (upper) end of each advisor band: the share of instances interrupted over the month.
#: ``>20%`` has no upper end; one half is assumed.
BAND_UPPER_SHARE = {"<5%": 0.05, "5-10%": 0.10, "10-15%": 0.15, "15-20%": 0.20, ">20%": 0.50}


@dataclass(frozen=True, slots=True)
class CheckpointInterval:
    """The chosen interval, the formula's value before bounds, and why (for the log)."""

    seconds: float
    optimum_seconds: float
    bound: str | None
    reason: str


def is_auto(value: object) -> bool:
    """Whether ``value`` asks for the automatic interval (``"auto"``, any case, spaces around allowed)."""
    return isinstance(value, str) and value.strip().lower() == AUTO


def seconds_between_interruptions(band: str, exposure_seconds: float | None = None) -> float:
    """Mean seconds between interruptions for the advisor's band, at the band's upper end.

    The advisor's band is the share ``p`` of the type's spot instances that Spot reclaimed over the trailing
    month. An instance is exposed for as long as it runs, and ours runs as long as the training:
    ``exposure_seconds``, its expected runtime (at most the month). With interruptions a Poisson process of
    rate ``r``, ``p = 1 - exp(-r * exposure)``, so the mean time between them is ``exposure / -ln(1 - p)``:
    for a 6 h training, ``"<5%"`` (p = 0.05) gives about 117 hours, ``">20%"`` (p = 0.5 assumed) about 8.7.
    Without an expected runtime the exposure is the whole month, the lowest rate the band allows:
    ``"<5%"`` about 14,200 hours, ``">20%"`` about 1,050, which puts every band above the interval's cap.

    Raises:
        ConfigurationError: a band the advisor does not use, or an exposure that is not seconds > 0.
    """
    share = BAND_UPPER_SHARE.get(band.strip())
    if share is None:
        raise ConfigurationError(
            f"unknown spot advisor interruption band {band!r}: expected one of {', '.join(BAND_UPPER_SHARE)}"
        )
    return mean_seconds_between_interruptions(share, exposure_seconds)


def mean_seconds_between_interruptions(share: float, exposure_seconds: float | None = None) -> float:
    """``exposure / -ln(1 - share)``: the Poisson mean when ``share`` of instances exposed that long were hit.

    The exposure is at most the advisor's month; None: the month. Shared by the checkpoint interval (a band's
    upper end) and right-sizing (a range's mid-point).

    Raises:
        ConfigurationError: an exposure that is not seconds > 0.
    """
    month = HOURS_PER_MONTH * 3600
    if exposure_seconds is None:
        exposure = month
    elif _number(exposure_seconds) and math.isfinite(exposure_seconds) and exposure_seconds > 0:
        exposure = min(float(exposure_seconds), month)
    else:
        raise ConfigurationError(
            f"the exposure to interruptions must be seconds > 0 or None, got {exposure_seconds!r}"
        )
    return exposure / -math.log(1 - share)


def check_run_seconds(run_seconds: Sequence[float]) -> None:
    """Check the run lengths of preempted attempts: at least one, each seconds >= 0.

    Raises:
        ConfigurationError: no run lengths, or one that is not a finite number >= 0 (named).
    """
    if not run_seconds:
        raise ConfigurationError("no preempted attempt to measure the time between interruptions from")
    for seconds in run_seconds:
        if not _number(seconds) or not math.isfinite(seconds) or seconds < 0:
            raise ConfigurationError(f"an attempt's run length must be seconds >= 0, got {seconds!r}")


def observed_seconds_between_interruptions(run_seconds: Sequence[float], lossy: int | None = None) -> float:
    """Mean run time between the interruptions that lost work, from the attempts that were preempted.

    Each attempt ran that long before its interruption. ``lossy`` counts the interruptions among them that
    lost the work done since the last periodic save (a hard kill, a notice the job did not save on); None:
    all of them. An interruption the job saved on (the notice's checkpoint committed) loses nothing the
    interval decides, so its run counts as time without one: Young/Daly weighs the rate of losses.

    Raises:
        ConfigurationError: no run lengths, one that is not a number >= 0, or ``lossy`` not in
            ``1..len(run_seconds)``.
    """
    check_run_seconds(run_seconds)
    count = len(run_seconds) if lossy is None else lossy
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(run_seconds):
        raise ConfigurationError(
            f"lossy must count 1 to {len(run_seconds)} of the preempted attempts, got {lossy!r}"
        )
    # An attempt preempted at once still stands for an interruption: at least one second each.
    return max(sum(run_seconds) / count, 1.0)


def measured_save_seconds(samples: Sequence[float]) -> float:
    """The cost of one save from the measured ones: their median (at least 1 ms).

    Young/Daly weighs the typical save. The median, not the mean or the max, so that one outlier (the first
    save of a process paying for imports and a cold cache, one slow write to a throttled store) does not
    move the interval; a save cost off by a factor ``f`` moves the optimum by ``sqrt(f)`` only.

    Raises:
        ConfigurationError: no samples, or one that is not seconds >= 0.
    """
    if not samples:
        raise ConfigurationError("no measured save to take the save cost from")
    for seconds in samples:
        if not _number(seconds) or not math.isfinite(seconds) or seconds < 0:
            raise ConfigurationError(f"a measured save must be seconds >= 0, got {seconds!r}")
    # A save measured at 0 s (a coarse clock) still costs something; the rule needs a cost > 0.
    return max(float(statistics.median(samples)), 0.001)


def checkpoint_interval(
    *,
    save_seconds: float,
    seconds_between_interruptions: float,
    expected_runtime_seconds: float | None = None,
) -> CheckpointInterval:
    """Young/Daly's interval ``sqrt(2 * save * mtbi)``, kept in the band the module docstring states.

    Args:
        save_seconds: What one save costs (> 0).
        seconds_between_interruptions: Mean time between interruptions (> 0; ``math.inf``: none expected).
        expected_runtime_seconds: How long the training is expected to run, or None (unknown).

    Raises:
        ConfigurationError: a value that is not a positive number; the message names it.
    """
    if not _number(save_seconds) or not math.isfinite(save_seconds) or save_seconds <= 0:
        raise ConfigurationError(f"save_seconds must be a number > 0, got {save_seconds!r}")
    if not _number(seconds_between_interruptions) or not seconds_between_interruptions > 0:
        raise ConfigurationError(
            f"seconds_between_interruptions must be a number > 0, got {seconds_between_interruptions!r}"
        )
    if expected_runtime_seconds is not None and (
        not _number(expected_runtime_seconds)
        or not math.isfinite(expected_runtime_seconds)
        or expected_runtime_seconds <= 0
    ):
        raise ConfigurationError(
            f"expected_runtime_seconds must be a number > 0 or None, got {expected_runtime_seconds!r}"
        )
    optimum = math.sqrt(2 * save_seconds * seconds_between_interruptions)
    lower = max(MIN_INTERVAL_SECONDS, MIN_SAVE_MULTIPLE * save_seconds)
    upper, upper_why = MAX_INTERVAL_SECONDS, f"the {MAX_INTERVAL_SECONDS:.0f} s cap"
    if expected_runtime_seconds is not None and expected_runtime_seconds < upper:
        upper, upper_why = expected_runtime_seconds, "the expected runtime"
    # The lower bound wins over the upper one: saving more often than that costs more than it keeps.
    if optimum > upper and upper >= lower:
        seconds, bound = upper, upper_why
    elif optimum < lower or upper < lower:
        seconds, bound = (
            lower,
            f"the floor of max({MIN_INTERVAL_SECONDS:.0f} s, {MIN_SAVE_MULTIPLE:.0f} saves)",
        )
    else:
        seconds, bound = optimum, None
    reason = (
        f"sqrt(2 x {save_seconds:g} s save x {seconds_between_interruptions:.0f} s between interruptions)"
        f" = {optimum:.0f} s" + (f", bounded to {bound}: {seconds:.0f} s" if bound else "")
    )
    return CheckpointInterval(seconds=seconds, optimum_seconds=optimum, bound=bound, reason=reason)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
