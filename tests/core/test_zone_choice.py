"""The zone of the next spot attempt and the restart-thrash guard (core.zone_choice)."""

from __future__ import annotations

import math

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.zone_choice import PreemptedRun, ZoneView, choose_zone, expected_usd, thrashing

FIGURES = {"remaining_seconds": 3600.0, "restart_overhead_seconds": 300.0, "checkpoint_every_seconds": 600.0}


def runs(
    *seconds: float, kept: tuple[bool | None, ...] = (), saved: tuple[bool, ...] = ()
) -> tuple[PreemptedRun, ...]:
    """Preempted runs of these lengths; ``kept`` / ``saved`` per run (empty: unknown / not saved)."""
    kept = kept or (None,) * len(seconds)
    saved = saved or (False,) * len(seconds)
    return tuple(PreemptedRun(s, k, v) for s, k, v in zip(seconds, kept, saved, strict=True))


def test_with_no_preemption_seen_the_cheapest_zone_with_capacity_wins() -> None:
    views = [
        ZoneView("us-west-2a", 1.0, has_capacity=True),
        ZoneView("us-west-2b", 0.8, has_capacity=False),
        ZoneView("us-west-2c", 0.9, has_capacity=True),
    ]
    choice = choose_zone(views, current="us-west-2a", **FIGURES)
    assert choice.zone == "us-west-2c"
    assert "moves" in choice.reason and "us-west-2c 0.9750" in choice.reason
    assert choice.expected_usd == pytest.approx(0.9 * 3900 / 3600)


def test_a_tie_keeps_the_current_zone() -> None:
    views = [ZoneView("a", 1.0), ZoneView("b", 1.0)]
    assert choose_zone(views, current="b", **FIGURES).zone == "b"
    assert choose_zone(views, current=None, **FIGURES).zone == "a"


def test_observed_churn_makes_a_cheaper_zone_dearer() -> None:
    # The mean run, with the prior's run of 300 + 3,600 s: 11,300 / 4 = 2,825 s, of which 2,825 - 300 - 300 =
    # 2,225 s are kept: 3,600 s of work bill 3,600 x 2,825 / 2,225 s there, plus the restart.
    churn = ZoneView("a", 0.5, preempted_runs=runs(1200.0, 1200.0, 5000.0))
    assert expected_usd(churn, **FIGURES) == pytest.approx(0.5 * (300 + 3600 * 2825 / 2225) / 3600)
    calm = ZoneView("b", 0.8)
    choice = choose_zone([churn, calm], current="a", **FIGURES)
    assert choice.zone == "a"  # 0.5 x ~1.45 h < 0.8 x 1.08 h: churn priced in, still cheaper
    costly = ZoneView("a", 0.7, preempted_runs=runs(1000.0, 5000.0))
    assert choose_zone([costly, calm], current="a", **FIGURES).zone == "b"


def test_runs_that_keep_nothing_make_a_zone_infinitely_expensive_once_they_outweigh_the_prior() -> None:
    # Runs of 200 s keep nothing (300 s restart + half a 600 s interval); the prior's run of 3,900 s keeps the
    # mean above 600 s for up to eight of them.
    assert math.isinf(expected_usd(ZoneView("a", 0.1, preempted_runs=runs(*(200.0,) * 9)), **FIGURES))
    assert not math.isinf(expected_usd(ZoneView("a", 0.1, preempted_runs=runs(*(200.0,) * 8)), **FIGURES))


def test_one_short_run_does_not_rule_a_zone_out_for_good() -> None:
    # A restart caught by the end of its capacity: one 400 s run in a. Alone it would price a at "no
    # progress"; with the prior's run a stays a candidate, and its longer history wins over b's churn.
    unlucky = ZoneView("a", 1.0, preempted_runs=runs(400.0))
    churning = ZoneView("b", 1.0, preempted_runs=runs(700.0, 900.0, 800.0, 1000.0))
    assert not math.isinf(expected_usd(unlucky, **FIGURES))
    assert choose_zone([unlucky, churning], current="b", guard_window=None, **FIGURES).zone == "a"


def test_the_guard_leaves_out_a_zone_whose_last_runs_kept_nothing() -> None:
    assert thrashing(runs(100.0, 800.0), restart_overhead_seconds=300, checkpoint_every_seconds=600)
    assert not thrashing(runs(100.0, 900.0), restart_overhead_seconds=300, checkpoint_every_seconds=600)
    assert not thrashing(runs(100.0), restart_overhead_seconds=300, checkpoint_every_seconds=600)
    # Without timed checkpoints no preempted run keeps anything.
    assert thrashing(runs(9e9, 9e9), restart_overhead_seconds=300, checkpoint_every_seconds=None)
    views = [ZoneView("a", 0.1, preempted_runs=runs(100.0, 200.0)), ZoneView("b", 0.9)]
    choice = choose_zone(views, current="a", **FIGURES)
    assert choice.zone == "b" and choice.thrashing == ("a",)
    assert "restart thrash left out a" in choice.reason


def test_when_every_zone_thrashes_the_next_attempt_is_on_demand() -> None:
    views = [ZoneView("a", 0.1, preempted_runs=runs(100.0, 200.0))]
    choice = choose_zone(views, current="a", **FIGURES)
    assert choice.zone is None and choice.expected_usd is None
    assert "restart thrash in a" in choice.reason and "shorter than restart overhead 300 s" in choice.reason
    # With the guard off the zone is still chosen (the expected cost says it keeps nothing).
    assert choose_zone(views, current="a", guard_window=None, **FIGURES).zone == "a"


def test_with_no_capacity_anywhere_the_attempt_waits_in_the_best_zone() -> None:
    views = [ZoneView("a", 1.0, has_capacity=False), ZoneView("b", 0.5, has_capacity=False)]
    assert choose_zone(views, current="a", **FIGURES).zone == "b"


def test_a_move_to_another_region_pays_its_egress() -> None:
    views = [ZoneView("us-west-2a", 1.0), ZoneView("us-east-1a", 0.9, move_usd=0.5)]
    assert choose_zone(views, current="us-west-2a", **FIGURES).zone == "us-west-2a"


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"remaining_seconds": -1.0}, "remaining_seconds=-1.0"),
        ({"restart_overhead_seconds": math.nan}, "restart_overhead_seconds=nan"),
        ({"checkpoint_every_seconds": math.inf}, "checkpoint_every_seconds=inf"),
        ({"guard_window": 0}, "guard_window=0"),
    ],
)
def test_bad_figures_are_refused_by_name(kwargs: dict[str, float], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named.replace("(", r"\(")):
        choose_zone([ZoneView("a", 1.0)], current=None, **{**FIGURES, **kwargs})


def test_no_zones_or_a_bad_price_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="no zones"):
        choose_zone([], current=None, **FIGURES)
    with pytest.raises(ConfigurationError, match="zone 'a': spot price -1"):
        choose_zone([ZoneView("a", -1.0)], current=None, **FIGURES)


def test_near_the_end_of_the_work_the_prior_never_shortens_the_observed_runs() -> None:
    # 1 s of work left: the prior's run (301 s) is shorter than the 890 s run seen, which kept 290 s.
    view = ZoneView("a", 1.0, preempted_runs=runs(890.0))
    near_end = {**FIGURES, "remaining_seconds": 1.0}
    assert expected_usd(view, **near_end) == pytest.approx((300 + 1.0 * 890 / 290) / 3600)


def test_without_timed_checkpoints_the_on_demand_reason_says_what_kept_nothing() -> None:
    views = [ZoneView("a", 0.1, preempted_runs=runs(9e3, 9e3))]
    figures = {**FIGURES, "checkpoint_every_seconds": None}
    reason = choose_zone(views, current="a", **figures).reason  # type: ignore[arg-type]
    assert "the last 2 preempted runs in each kept nothing: without timed checkpoints" in reason
    assert "shorter than no timed" not in reason


def test_what_a_run_kept_decides_over_its_length_where_it_is_known() -> None:
    figures = {"restart_overhead_seconds": 300, "checkpoint_every_seconds": 600}
    # Long runs that committed nothing of their own (restored, then cut before the next save) thrash ...
    assert thrashing(runs(5000.0, 5000.0, kept=(False, False)), **figures)
    # ... and short runs that saved on their notice do not, with timed checkpoints or without.
    assert not thrashing(runs(100.0, 200.0, kept=(True, True)), **figures)
    assert not thrashing(
        runs(100.0, 200.0, kept=(True, True)), restart_overhead_seconds=300, checkpoint_every_seconds=None
    )
    # An unknown run is judged by its length: a short one and a known loss are two runs that kept nothing.
    assert thrashing(runs(100.0, 5000.0, kept=(None, False)), **figures)
    assert not thrashing(runs(5000.0, 100.0, kept=(None, False)), **figures)


def test_the_on_demand_reason_says_the_runs_committed_nothing_when_that_is_known() -> None:
    views = [ZoneView("a", 0.1, preempted_runs=runs(9e3, 9e3, kept=(False, False)))]
    reason = choose_zone(views, current="a", **FIGURES).reason
    assert "the last 2 preempted runs in each ended before committing a checkpoint of their own" in reason
    assert "shorter" not in reason
    mixed = [ZoneView("a", 0.1, preempted_runs=runs(100.0, 9e3, kept=(None, False)))]
    reason = choose_zone(mixed, current="a", **FIGURES).reason
    assert "of their own or, where that is unknown, were shorter than restart overhead 300 s" in reason
    # A job that saves on its notice keeps its zone however short its runs.
    saved = [ZoneView("a", 0.1, preempted_runs=runs(100.0, 200.0, kept=(True, True)))]
    assert choose_zone(saved, current="a", **FIGURES).zone == "a"


def test_runs_that_saved_on_their_notice_lost_only_their_restart() -> None:
    # Runs of 900 s: by default each keeps 900 - 300 - 600 / 2 = 300 s; saved on the notice, 600 s.
    lossy = ZoneView("a", 1.0, preempted_runs=runs(900.0, 900.0, 900.0))
    saved = ZoneView("a", 1.0, preempted_runs=runs(900.0, 900.0, 900.0, saved=(True, True, True)))
    half = ZoneView("a", 1.0, preempted_runs=runs(900.0, 900.0, 900.0, saved=(True, False, True)))
    mean_run = (2700 + 3900) / 4  # the prior's run of a restart and the work: 1,650 s
    assert expected_usd(lossy, **FIGURES) == pytest.approx((300 + 3600 * mean_run / (mean_run - 600)) / 3600)
    assert expected_usd(saved, **FIGURES) == pytest.approx((300 + 3600 * mean_run / (mean_run - 300)) / 3600)
    assert expected_usd(saved, **FIGURES) < expected_usd(half, **FIGURES) < expected_usd(lossy, **FIGURES)
    # Without timed checkpoints a run that saved on its notice still kept its run past the restart.
    no_interval = {**FIGURES, "checkpoint_every_seconds": None}
    assert math.isinf(expected_usd(ZoneView("a", 1.0, preempted_runs=runs(*(400.0,) * 20)), **no_interval))
    notice_only = ZoneView("a", 1.0, preempted_runs=runs(*(400.0,) * 20, saved=(True,) * 20))
    assert not math.isinf(expected_usd(notice_only, **no_interval))  # type: ignore[arg-type]
