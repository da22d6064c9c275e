"""The simulator places each spot (re)start by ``choose_zone`` and replays the restart-thrash guard."""

from __future__ import annotations

import pytest

from costaware.core.policies import policy_class
from costaware.core.simulate import TickMarket, TickPlan, run_job, summarize, zoned_tick_market
from costaware.core.simulate.replay import _ZoneRule
from costaware.core.zone_choice import PreemptedRun, ZoneView, choose_zone

DT = 1 / 6  # 10-minute ticks
TICK_SECONDS = DT * 3600


def single(available: list[bool], spot: float = 1.0, on_demand: float = 3.0) -> TickMarket:
    n = len(available)
    return TickMarket(
        on_demand=[on_demand] * n,
        on_demand_forecast=[on_demand] * n,
        spot=[spot] * n,
        spot_forecast=[spot] * n,
        available=available,
    )


def test_a_zoned_job_leaves_a_churning_zone_for_a_steady_one() -> None:
    n = 60
    churny = ([0.5] * n, [True, True, False] * (n // 3))  # cheaper; each run ends before a checkpoint
    steady = ([0.8] * n, [True] * n)
    plan = TickPlan(DT, 8, 40, 1, 3)  # a run keeps work only after overhead + checkpoint: 4 ticks
    outcome = run_job(policy_class("spot_now")(), zoned_tick_market([churny, steady], [3.0] * n), plan)
    # One short run in the cheap zone (it kept nothing) makes it dearer than the steady one: the restart goes
    # to the steady zone.
    assert outcome.preemptions == 1 and not outcome.guard_fired
    assert outcome.spot_hours == pytest.approx(outcome.run_hours) and outcome.met_deadline
    # 2 ticks in the churny zone, then overhead + all 8 ticks of work (nothing was kept) in the steady one.
    assert float(outcome.usd) == pytest.approx(DT * (2 * 0.5 + 9 * 0.8))


def _restart_zone(a_run_ticks: int, b_price: float) -> tuple[int, TickMarket, TickPlan]:
    """A job preempted once in zone a (the cheaper) after ``a_run_ticks``; both zones regain capacity after
    a tick without any. Returns the zone ``choose_zone`` picks for the restart, the market and the plan."""
    n = 80
    a_capacity = [True] * a_run_ticks + [False] + [True] * (n - a_run_ticks - 1)
    b_capacity = [True] * a_run_ticks + [False] + [True] * (n - a_run_ticks - 1)
    plan = TickPlan(DT, 12, 60, 1, 2)
    market = zoned_tick_market([([0.5] * n, a_capacity), ([b_price] * n, b_capacity)], [3.0] * n)
    kept = (a_run_ticks - plan.overhead) // plan.checkpoint * plan.checkpoint
    choice = choose_zone(
        [
            ZoneView("a", 0.5, True, (PreemptedRun(a_run_ticks * TICK_SECONDS),)),
            ZoneView("b", b_price, True),
        ],
        current="a",
        remaining_seconds=(plan.work - kept) * TICK_SECONDS,
        restart_overhead_seconds=plan.overhead * TICK_SECONDS,
        checkpoint_every_seconds=plan.checkpoint * TICK_SECONDS,
    )
    return (0 if choice.zone == "a" else 1), market, plan


@pytest.mark.parametrize(
    ("a_run_ticks", "b_price", "expected"),
    [
        (4, 0.6, 1),  # a is cheaper, but its one run kept half of what it billed: b is cheaper to finish in
        (4, 1.2, 0),  # ... unless b's price is more than twice as high
        (10, 0.8, 0),  # a longer run in a: its churn costs less than b's higher price
        (10, 0.55, 1),  # ... unless b is nearly as cheap
    ],
)
def test_the_restart_goes_where_choose_zone_says(a_run_ticks: int, b_price: float, expected: int) -> None:
    zone, market, plan = _restart_zone(a_run_ticks, b_price)
    assert zone == expected  # the case is the one meant
    outcome = run_job(policy_class("spot_now")(), market, plan)
    kept = (a_run_ticks - plan.overhead) // plan.checkpoint * plan.checkpoint
    after = (0.5, b_price)[zone] * (plan.overhead + plan.work - kept)
    assert outcome.preemptions == 1
    assert float(outcome.usd) == pytest.approx(DT * (0.5 * a_run_ticks + after))


@pytest.mark.parametrize(
    ("prices", "capacity", "current"),
    [
        ([1.0, 0.5, 0.7], [True, True, True], -1),
        ([1.0, 0.5, 0.7], [True, False, True], 0),
        ([0.5, 0.5], [True, True], -1),  # a tie: the first
        ([0.5, 0.5], [True, True], 1),  # a tie: the current one
        ([0.5, 0.5, 0.4], [True, True, False], 1),
        ([0.9, 0.6], [False, False], 0),  # none has capacity: all of them, the cheapest
        ([0.6, 0.6], [False, False], 1),
    ],
)
def test_the_fast_path_before_any_preemption_is_choose_zone(
    prices: list[float], capacity: list[bool], current: int
) -> None:
    plan = TickPlan(DT, 7, 30, 2, 3)
    rule = _ZoneRule(plan, len(prices), guard=True)
    views = [ZoneView(str(i), p, ok) for i, (p, ok) in enumerate(zip(prices, capacity, strict=True))]
    expected = choose_zone(
        views,
        current=str(current) if current >= 0 else None,
        remaining_seconds=5 * rule.tick_seconds,
        restart_overhead_seconds=rule.overhead_seconds,
        checkpoint_every_seconds=rule.checkpoint_seconds,
    )
    assert str(rule.choose(prices, capacity, current=current, remaining_ticks=5)) == expected.zone


CHURN = [True, True, False] * 40  # runs of 20 minutes: shorter than 10 min overhead + 30 min checkpoints


@pytest.mark.parametrize("policy", ["deadline_aware", "spot_now"])
def test_the_guard_sends_a_churning_single_zone_job_to_on_demand(policy: str) -> None:
    plan = TickPlan(DT, 12, 60, 1, 3)
    guarded = run_job(policy_class(policy)(), single(CHURN), plan, restart_guard=True)
    unguarded = run_job(policy_class(policy)(), single(CHURN), plan)
    assert guarded.guard_fired and guarded.preemptions == 2 and guarded.met_deadline
    assert not unguarded.guard_fired and unguarded.preemptions > 2
    # After the second short run, on-demand to the end: overhead + all the work (nothing was kept).
    assert guarded.run_hours == pytest.approx(DT * (guarded.spot_hours / DT + plan.overhead + plan.work))
    assert guarded.usd < unguarded.usd


def test_the_guarded_job_pays_two_short_runs_then_on_demand_to_the_end() -> None:
    plan = TickPlan(DT, 12, 60, 1, 3)
    outcome = run_job(policy_class("spot_now")(), single(CHURN), plan, restart_guard=True)
    assert outcome.guard_fired and outcome.preemptions == 2 and outcome.met_deadline
    assert float(outcome.usd) == pytest.approx(DT * (4 * 1.0 + 13 * 3.0))


def test_runs_long_enough_to_keep_work_do_not_fire_the_guard() -> None:
    plan = TickPlan(DT, 12, 60, 1, 3)
    calm = ([True] * 5 + [False]) * 20  # runs of 50 minutes reach a checkpoint
    outcome = run_job(policy_class("spot_now")(), single(calm), plan, restart_guard=True)
    assert outcome.preemptions >= 2 and not outcome.guard_fired


def test_without_checkpoints_any_two_preempted_runs_fire_the_guard() -> None:
    plan = TickPlan(DT, 12, 60, 1, 0)
    calm = ([True] * 5 + [False]) * 20
    outcome = run_job(policy_class("spot_now")(), single(calm), plan, restart_guard=True)
    assert outcome.guard_fired and outcome.preemptions == 2


def test_a_zoned_job_is_guarded_only_when_every_zone_churns() -> None:
    n = 90
    plan = TickPlan(DT, 12, 70, 1, 3)
    both = zoned_tick_market([([0.5] * n, CHURN[:n]), ([0.6] * n, CHURN[:n])], [3.0] * n)
    outcome = run_job(policy_class("spot_now")(), both, plan, restart_guard=True)
    # Each zone's first short run makes it dearer than the other; the guard needs two runs in each zone.
    assert outcome.guard_fired and outcome.preemptions == 4 and outcome.met_deadline
    off = run_job(policy_class("spot_now")(), both, plan)
    assert not off.guard_fired and off.preemptions > 4


def test_the_oracle_is_never_guarded() -> None:
    plan = TickPlan(DT, 12, 60, 1, 3)
    outcome = run_job(policy_class("oracle")(), single(CHURN), plan, restart_guard=True)
    assert not outcome.guard_fired


def test_the_report_counts_the_jobs_the_guard_sent_to_on_demand() -> None:
    plan = TickPlan(DT, 12, 60, 1, 3)
    calm = ([True] * 5 + [False]) * 20
    outcomes = [
        run_job(policy_class("spot_now")(), single(CHURN), plan, job="churn", restart_guard=True),
        run_job(policy_class("spot_now")(), single(calm), plan, job="calm", restart_guard=True),
        run_job(policy_class("oracle")(), single(CHURN), plan, job="churn"),
        run_job(policy_class("on_demand_now")(), single(CHURN), plan, job="churn"),
    ]
    summary = summarize(outcomes, ["spot_now", "oracle"])
    assert summary["spot_now"].restart_guard_fired == 1 and summary["oracle"].restart_guard_fired == 0
    assert summary["spot_now"].to_json()["restart_guard_fired"] == 1
