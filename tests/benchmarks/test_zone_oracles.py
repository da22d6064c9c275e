"""The multi-zone benchmarks' oracles: exact (a move is a new start) and at most the free-moves bound."""

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
