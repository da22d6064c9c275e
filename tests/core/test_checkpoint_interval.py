"""The checkpoint interval rule: Young/Daly, its bounds, the advisor bands and observed run lengths."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from costaware.core.checkpoint_interval import (
    MAX_INTERVAL_SECONDS,
    checkpoint_interval,
    is_auto,
    measured_save_seconds,
    observed_seconds_between_interruptions,
    seconds_between_interruptions,
)
from costaware.core.errors import ConfigurationError


@pytest.mark.parametrize(
    ("save", "mtbi", "runtime", "seconds", "bound"),
    [
        # inside the band: the formula itself
        (30.0, 15_000.0, None, math.sqrt(2 * 30 * 15_000), None),
        (10.0, 5_000.0, 7_200.0, math.sqrt(2 * 10 * 5_000), None),
        # above the cap, or above a shorter expected runtime
        (30.0, 1e9, None, MAX_INTERVAL_SECONDS, "the 3600 s cap"),
        (30.0, 1e9, 1_800.0, 1_800.0, "the expected runtime"),
        (30.0, math.inf, None, MAX_INTERVAL_SECONDS, "the 3600 s cap"),
        # below the floor: 60 s, or ten saves
        (1.0, 100.0, None, 60.0, "the floor of max(60 s, 10 saves)"),
        (30.0, 600.0, None, 300.0, "the floor of max(60 s, 10 saves)"),
        # a runtime shorter than the floor: the floor wins
        (30.0, 1e9, 100.0, 300.0, "the floor of max(60 s, 10 saves)"),
    ],
)
def test_interval_is_young_daly_within_its_bounds(
    save: float, mtbi: float, runtime: float | None, seconds: float, bound: str | None
) -> None:
    chosen = checkpoint_interval(
        save_seconds=save, seconds_between_interruptions=mtbi, expected_runtime_seconds=runtime
    )
    assert chosen.seconds == pytest.approx(seconds)
    assert chosen.bound == bound
    assert chosen.optimum_seconds == pytest.approx(math.sqrt(2 * save * mtbi))
    assert f"{save:g} s save" in chosen.reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"save_seconds": 0.0}, "save_seconds must be a number > 0, got 0.0"),
        ({"save_seconds": -5}, "save_seconds must be a number > 0, got -5"),
        ({"save_seconds": math.nan}, "save_seconds must be a number > 0, got nan"),
        ({"save_seconds": True}, "save_seconds must be a number > 0, got True"),
        ({"seconds_between_interruptions": 0}, "seconds_between_interruptions must be a number > 0, got 0"),
        ({"seconds_between_interruptions": "5"}, "seconds_between_interruptions must be a number > 0"),
        (
            {"expected_runtime_seconds": -1.0},
            "expected_runtime_seconds must be a number > 0 or None, got -1.0",
        ),
        ({"expected_runtime_seconds": math.inf}, "expected_runtime_seconds must be a number > 0 or None"),
    ],
)
def test_bad_inputs_are_refused_by_name(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"save_seconds": 30.0, "seconds_between_interruptions": 1e4, **kwargs}
    with pytest.raises(ConfigurationError, match="^" + re.escape(message)):
        checkpoint_interval(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("band", "hours"),
    [("<5%", 14_232.0), ("5-10%", 6_929.0), ("10-15%", 4_492.0), ("15-20%", 3_271.0), (">20%", 1_053.0)],
)
def test_advisor_band_without_a_runtime_spreads_its_share_over_the_month(band: str, hours: float) -> None:
    assert seconds_between_interruptions(f" {band} ") / 3600 == pytest.approx(hours, rel=1e-3)


@pytest.mark.parametrize(
    ("band", "runtime_hours", "hours"),
    [
        # exposure / -ln(1 - p): the band's share of instances, interrupted over how long this one runs.
        ("<5%", 6.0, 116.97),
        (">20%", 6.0, 8.656),
        (">20%", 1.0, 1.4427),
        # An instance cannot be exposed longer than the month the advisor counts over.
        (">20%", 10_000.0, 1_053.0),
    ],
)
def test_advisor_band_over_the_expected_runtime(band: str, runtime_hours: float, hours: float) -> None:
    mean = seconds_between_interruptions(band, runtime_hours * 3600)
    assert mean / 3600 == pytest.approx(hours, rel=1e-3)


@pytest.mark.parametrize("exposure", [0.0, -5.0, math.inf, math.nan, True, "6"])
def test_an_exposure_that_is_not_seconds_is_refused_by_value(exposure: Any) -> None:
    message = "the exposure to interruptions must be seconds > 0 or None, got"
    with pytest.raises(ConfigurationError, match=message):
        seconds_between_interruptions(">20%", exposure)


def test_unknown_band_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown spot advisor interruption band '4'.*<5%, 5-10%"):
        seconds_between_interruptions("4")


@pytest.mark.parametrize(("runs", "mean"), [([600.0], 600.0), ([600.0, 1200.0], 900.0), ([0.0, 0.0], 1.0)])
def test_observed_mean_is_the_mean_preempted_run(runs: list[float], mean: float) -> None:
    assert observed_seconds_between_interruptions(runs) == mean


@pytest.mark.parametrize(
    ("runs", "lossy", "mean"), [([600.0, 1200.0], 1, 1800.0), ([600.0, 1200.0], 2, 900.0)]
)
def test_observed_mean_counts_only_the_interruptions_that_lost_work(
    runs: list[float], lossy: int, mean: float
) -> None:
    assert observed_seconds_between_interruptions(runs, lossy) == mean


@pytest.mark.parametrize(
    ("runs", "lossy", "message"),
    [
        ([], None, "no preempted attempt"),
        ([60.0, -1.0], None, "got -1.0"),
        ([math.nan], None, "got nan"),
        ([60.0], 0, "lossy must count 1 to 1 of the preempted attempts, got 0"),
        ([60.0, 60.0], 3, "lossy must count 1 to 2 of the preempted attempts, got 3"),
        ([60.0], True, "got True"),
    ],
)
def test_observed_bad_run_lengths_are_refused(runs: list[float], lossy: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        observed_seconds_between_interruptions(runs, lossy)


@pytest.mark.parametrize(
    ("value", "auto"), [("auto", True), (" AUTO ", True), ("300", False), (300, False), (None, False)]
)
def test_is_auto(value: object, auto: bool) -> None:
    assert is_auto(value) is auto


@pytest.mark.parametrize(
    ("samples", "seconds"),
    [
        ([240.0], 240.0),
        ([2.0, 4.0], 3.0),
        # one slow outlier (the first save of a process, a throttled write) does not move it
        ([1.0, 100.0, 3.0], 3.0),
        ([0.0], 0.001),  # a coarse clock's 0 s save still costs something
    ],
)
def test_the_save_cost_is_the_median_measured_save(samples: list[float], seconds: float) -> None:
    assert measured_save_seconds(samples) == seconds


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ([], "no measured save to take the save cost from"),
        ([1.0, -1.0], "a measured save must be seconds >= 0, got -1.0"),
        ([math.inf], "a measured save must be seconds >= 0, got inf"),
        (["2"], "a measured save must be seconds >= 0, got '2'"),
    ],
)
def test_bad_measured_saves_are_refused(samples: list[object], message: str) -> None:
    with pytest.raises(ConfigurationError, match="^" + re.escape(message)):
        measured_save_seconds(samples)  # type: ignore[arg-type]
