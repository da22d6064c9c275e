"""The preemption benchmark: the multi-zone oracle (exact: a move is a new start) and --intervals medians."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import preemption


def test_the_two_zone_oracle_pays_a_restart_to_move_where_the_union_of_the_traces_does_not() -> None:
    """Zone a has capacity for the first 4 ticks, zone b from tick 4 on: their union never drops. Moving
    from a to b is a new start (one more tick of restart overhead) in the exact oracle; the union, as if
    moving were free, does not pay it."""
    a = [True] * 4 + [False] * 16
    b = [False] * 4 + [True] * 16
    union = [x or y for x, y in zip(a, b, strict=True)]
    common = {
        "work_seconds": 8.0,
        "overhead_seconds": 1.0,
        "every": 1.0,
        "tick_seconds": 1.0,
        "deadline_seconds": 10.0,  # no time to wait for zone b: it must start in a
    }
    spot = float(preemption.PRICES["spot"]) / 3600  # one tick of one second
    free = preemption.oracle_usd(union, **common)
    exact = preemption.oracle_usd(union, zone_traces=[a, b], **common)
    assert free == pytest.approx(spot * (1 + 8))  # one start, eight ticks of work
    assert exact == pytest.approx(spot * (1 + 8 + 1))  # and a second start in zone b
    # One zone alone is the single-zone oracle of its own trace.
    assert preemption.oracle_usd(b, zone_traces=[b], **common) == pytest.approx(
        preemption.oracle_usd(b, **common)
    )


def test_an_intervals_cell_over_its_repeats_is_its_median_run_and_any_miss_counts() -> None:
    def run(usd: str, missed: bool = False) -> dict:  # type: ignore[type-arg]
        return {"run": {"usd": usd, "missed": missed}, "wall": 1.0}

    cell = preemption._median_run([run("0.30"), run("0.10", missed=True), run("0.20")])
    assert cell["usd"] == pytest.approx(0.20) and cell["usd_runs"] == [0.30, 0.10, 0.20]
    assert cell["missed"]  # one repeat missed its deadline: the cell did
    assert preemption._median_run([run("0.10"), run("0.40")])["usd"] == pytest.approx(0.40)  # upper median


def test_the_scaled_rule_converts_every_duration_it_hands_the_auto_rule_including_the_restart() -> None:
    import math

    from costaware.training.plan import interval as plan_interval

    original = plan_interval.observed_interval
    # Compressed: a run killed 0.2 s in, inside the 0.25 s restart (no training lost), and one 6 s long.
    with preemption.ScaledRule(1200.0) as rule:
        seconds, reason = plan_interval.observed_interval(
            [0.2, 6.0], planned_seconds=3.0, saved_on_notice=[False, False], restart_overhead_seconds=0.25
        )
    assert plan_interval.observed_interval is original  # put back on leaving
    # At real scale: 6,900 s of training before the one loss, sqrt(2 x 30 x 6900) = 643 s; / 1200 back.
    assert seconds == pytest.approx(math.sqrt(2 * 30 * 6900) / 1200)
    assert "1 stopped while starting" in reason and rule.chosen == [("observed", seconds)]
