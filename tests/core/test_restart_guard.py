"""The restart-thrash guard: a table of run lengths against restart overhead plus checkpoint interval."""

from __future__ import annotations

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.restart_guard import RestartThrashGuard

CASES = [
    # (id, runs, overhead, interval, thrash, threshold)
    ("no attempts", [], 300.0, 600.0, False, 900.0),
    ("one short attempt", [120.0], 300.0, 600.0, False, 900.0),
    ("two short runs", [120.0, 95.0], 300.0, 600.0, True, 900.0),
    ("only the last two count", [5000.0, 120.0, 95.0], 300.0, 600.0, True, 900.0),
    ("one run made progress", [120.0, 950.0], 300.0, 600.0, False, 900.0),
    ("a run at the threshold kept its first checkpoint", [900.0, 95.0], 300.0, 600.0, False, 900.0),
    ("no checkpoints: every preempted run kept nothing", [4000.0, 5000.0], 300.0, None, True, None),
    ("interval 0 is no checkpoints", [4000.0, 5000.0], 300.0, 0.0, True, None),
    ("no checkpoints, one run", [4000.0], 300.0, None, False, None),
    ("no overhead", [50.0, 50.0], 0.0, 60.0, True, 60.0),
]


@pytest.mark.parametrize(
    ("runs", "overhead", "interval", "thrash", "threshold"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_judge(
    runs: list[float], overhead: float, interval: float | None, thrash: bool, threshold: float | None
) -> None:
    verdict = RestartThrashGuard().judge(
        runs, restart_overhead_seconds=overhead, checkpoint_every_seconds=interval
    )
    assert verdict.thrash is thrash
    assert verdict.threshold_seconds == threshold
    assert verdict.runs_seconds == tuple(runs[-2:])


def test_the_reason_names_the_runs_and_the_bound() -> None:
    verdict = RestartThrashGuard().judge(
        [120.0, 95.0], restart_overhead_seconds=300.0, checkpoint_every_seconds=600.0
    )
    assert verdict.reason == "restart thrash: last runs 120 s, 95 s < overhead 300 s + interval 600 s"


def test_a_window_of_one_judges_the_last_run() -> None:
    guard = RestartThrashGuard(window=1)
    assert guard.judge([100.0], restart_overhead_seconds=300.0, checkpoint_every_seconds=600.0).thrash


@pytest.mark.parametrize("window", [0, -1, 1.5, True, "2"])
def test_a_bad_window_is_refused_by_value(window: object) -> None:
    with pytest.raises(ConfigurationError, match=f"window={window!r} is not"):
        RestartThrashGuard(window=window)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("runs", "overhead", "interval", "named"),
    [
        ([-1.0], 300.0, 600.0, "run length=-1.0"),
        ([float("nan")], 300.0, 600.0, "run length=nan"),
        ([10.0], -5.0, 600.0, "restart_overhead_seconds=-5.0"),
        ([10.0], 300.0, float("inf"), "checkpoint_every_seconds=inf"),
    ],
)
def test_bad_figures_are_refused_by_value(
    runs: list[float], overhead: float, interval: float, named: str
) -> None:
    with pytest.raises(ConfigurationError, match=named):
        RestartThrashGuard().judge(runs, restart_overhead_seconds=overhead, checkpoint_every_seconds=interval)
