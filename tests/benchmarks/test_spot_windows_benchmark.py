"""The spot-window benchmark's --zones-only: the two-zone mode alone, on the jobs of a whole run."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import spot_windows

pytestmark = pytest.mark.skipif(
    not (spot_windows.SHARED / "aws_spot_price_history").exists(), reason="shared data not found"
)


def _draw_earlier_groups(rng: random.Random, *, run: bool) -> None:
    """The groups main() runs before the two-zone mode, one night (or job) each."""
    spot_windows.spot_group(1, 1, rng, run=run)
    spot_windows.trace_group(1, rng, run=run)
    spot_windows.power_group(1, rng, run=run)
    spot_windows.markov_group(1, rng, run=run)


def test_groups_that_do_not_run_draw_the_same_jobs_as_a_whole_run() -> None:
    # --zones-only skips the earlier groups' simulations; the two-zone mode's jobs come from the same seeded
    # stream after them, so they are a whole run's jobs only if the skipped groups still draw every number.
    whole, zones_only = random.Random(20210301), random.Random(20210301)
    _draw_earlier_groups(whole, run=True)
    _draw_earlier_groups(zones_only, run=False)
    assert zones_only.getstate() == whole.getstate()
    assert spot_windows.power_group(1, random.Random(1), run=False) == {}  # nothing was run
