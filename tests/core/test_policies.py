from __future__ import annotations

import dataclasses
import itertools
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.core.errors import ConfigurationError
from costaware.core.policies import (
    POLICIES,
    Action,
    AvailabilityAwarePolicy,
    CheapestWindowPolicy,
    OraclePolicy,
    Policy,
    Situation,
    policy_class,
)
from costaware.core.policies.cheapest_window import pause_rule, start_rule
from costaware.core.policies.rules import checkpointed
from costaware.core.simulate import JobOutcome, TickMarket, TickPlan, run_job, zoned_tick_market

DT = 1 / 6


def market(spot: list[float] | None, available: list[bool] | None, on_demand: list[float]) -> TickMarket:
    forecast = [sum(spot) / len(spot)] * len(spot) if spot else None
    return TickMarket(
        on_demand=on_demand,
        on_demand_forecast=on_demand,
        spot=spot,
        spot_forecast=forecast,
        available=available,
        local=spot is None,
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[TickMarket, TickPlan, str]:
    work = draw(st.integers(1, 6))
    overhead = draw(st.integers(0, 2))
    deadline = work + overhead + draw(st.integers(0, 8))
    checkpoint = draw(st.integers(0, 4))
    horizon = deadline + work + overhead + 1
    local = draw(st.booleans())
    prices = st.floats(0.05, 3.0, allow_nan=False)
    on_demand = draw(st.lists(prices, min_size=horizon, max_size=horizon)) if local else [2.0] * horizon
    spot = None if local else draw(st.lists(st.floats(0.1, 2.5), min_size=horizon, max_size=horizon))
    available = None if local else draw(st.lists(st.booleans(), min_size=horizon, max_size=horizon))
    before = None if local else draw(st.lists(st.booleans(), max_size=30))
    priority = draw(st.sampled_from(["critical", "normal", "best_effort"]))
    # A tick spanning several trace samples: capacity at its start, which may go inside it.
    coarse = available is not None and draw(st.booleans())
    at_start = [a or draw(st.booleans()) for a in available] if coarse and available is not None else None
    m = market(spot, available, on_demand)
    m = dataclasses.replace(m, available_before=before, available_at_start=at_start)
    return m, TickPlan(DT, work, deadline, overhead, checkpoint), priority


SAFE = ("deadline_aware", "availability_aware", "cheapest_window", "cheapest_window_pausing", "on_demand_now")


@settings(max_examples=300, deadline=None, database=None)
@given(scenarios())
def test_no_policy_beats_the_oracle(case: tuple[TickMarket, TickPlan, str]) -> None:
    m, plan, priority = case
    oracle = OraclePolicy()
    best = run_job(oracle, m, plan, priority=priority)
    assert best.met_deadline
    assert float(best.usd) == pytest.approx(oracle.optimal_usd, abs=2e-6)  # the replay costs what was solved
    for name, cls in POLICIES.items():
        outcome = run_job(cls(), m, plan, priority=priority)
        if outcome.met_deadline:
            assert outcome.usd >= best.usd - Decimal("0.000002"), name
        if name in SAFE:
            assert outcome.met_deadline, name  # the safe policies never miss a feasible deadline


def brute_force(m: TickMarket, plan: TickPlan) -> float:
    """Cheapest sequence of actions, each spot tick in one of the market's zones if it has several, that
    finishes in time, by trying them all (tiny cases only)."""

    class Fixed(OraclePolicy):
        def __init__(self, steps: tuple[tuple[Action, int], ...]) -> None:
            super().__init__()
            self._plan = [a for a, _ in steps]
            self._zones = [z for _, z in steps]

    zones = range(len(m.zones)) if m.zones else [-1]
    choices = [(Action.WAIT, -1), (Action.ON_DEMAND, -1)] + [(Action.SPOT, z) for z in zones]
    best = float("inf")
    for steps in itertools.product(choices, repeat=plan.deadline):
        outcome = run_job(Fixed(steps), m, plan)
        if outcome.met_deadline:
            best = min(best, float(outcome.usd))
    return best


@settings(max_examples=40, deadline=None, database=None)
@given(
    st.lists(st.floats(0.1, 2.5), min_size=12, max_size=12),
    st.lists(st.booleans(), min_size=12, max_size=12),
    st.integers(1, 3),
    st.integers(0, 1),
    st.integers(0, 2),
)
def test_oracle_matches_brute_force(
    spot: list[float], available: list[bool], work: int, overhead: int, checkpoint: int
) -> None:
    plan = TickPlan(DT, work, min(6, work + overhead + 2), overhead, checkpoint)
    m = market(spot, available, [2.0] * 12)
    oracle = OraclePolicy()
    run_job(oracle, m, plan)
    assert oracle.optimal_usd == pytest.approx(brute_force(m, plan), abs=2e-6)  # usd is rounded to 1e-6


@settings(max_examples=40, deadline=None, database=None)
@given(
    st.lists(st.floats(0.1, 2.5), min_size=12, max_size=12),
    st.lists(st.tuples(st.booleans(), st.booleans()), min_size=12, max_size=12),
    st.integers(1, 3),
    st.integers(0, 1),
    st.integers(1, 2),
)
def test_oracle_matches_brute_force_where_capacity_goes_inside_a_tick(
    spot: list[float], capacity: list[tuple[bool, bool]], work: int, overhead: int, checkpoint: int
) -> None:
    # Per tick: capacity at its start, and whether it holds through the tick (never without the first).
    plan = TickPlan(DT, work, min(6, work + overhead + 2), overhead, checkpoint)
    at_start = [opened for opened, _ in capacity]
    through = [opened and held for opened, held in capacity]
    m = dataclasses.replace(market(spot, through, [2.0] * 12), available_at_start=at_start)
    oracle = OraclePolicy()
    run_job(oracle, m, plan)
    assert oracle.optimal_usd == pytest.approx(brute_force(m, plan), abs=2e-6)


def test_deadline_aware_switches_to_on_demand_when_spot_is_gone() -> None:
    n = 30
    m = market([0.5] * n, [True] * 3 + [False] * (n - 3), [2.0] * n)
    outcome = run_job(policy_class("deadline_aware")(), m, TickPlan(DT, 6, 12, 1, 2))
    assert outcome.met_deadline and outcome.preemptions == 1
    assert 0 < outcome.spot_hours < outcome.run_hours


def test_spot_now_misses_when_capacity_never_returns() -> None:
    n = 30
    m = market([0.5] * n, [True] * 2 + [False] * (n - 2), [2.0] * n)
    outcome = run_job(policy_class("spot_now")(), m, TickPlan(DT, 6, 10, 0, 3))
    assert not outcome.met_deadline


def test_cheapest_window_waits_for_the_forecast_dip() -> None:
    spot = [1.0] * 6 + [0.3] * 10 + [1.0] * 20
    m = TickMarket(on_demand=[2.0] * 36, on_demand_forecast=[2.0] * 36, spot=spot, spot_forecast=spot)
    outcome = run_job(CheapestWindowPolicy(), m, TickPlan(DT, 4, 24, 0, 2))
    assert float(outcome.usd) == pytest.approx(4 * 0.3 * DT)


def _spike(priority: str) -> dict[str, JobOutcome]:
    """A spot price that starts cheap, spikes to just under on-demand for 2 h, then falls back."""
    spot = [0.5] * 4 + [1.8] * 12 + [0.5] * 30
    n = len(spot)
    m = TickMarket(
        on_demand=[2.0] * n, on_demand_forecast=[2.0] * n, spot=spot, spot_forecast=[0.5] * n, available=None
    )
    plan = TickPlan(DT, 8, 40, 1, 2)
    return {name: run_job(policy_class(name)(), m, plan, priority=priority) for name in POLICIES}


def test_cheapest_window_pausing_pauses_through_a_spike_and_resumes_when_it_ends() -> None:
    outcomes = _spike("normal")
    paused, plain = outcomes["cheapest_window_pausing"], outcomes["cheapest_window"]
    assert paused.met_deadline and paused.preemptions == 0
    # Started at 0.5 (1 restart tick + 3 work ticks), paused through the spike (it did not run at 1.8), then
    # resumed at 0.5 paying the restart again: 5 more work ticks and 1 restart tick.
    assert float(paused.usd) == pytest.approx((4 + 6) * 0.5 * DT, abs=1e-6)
    assert paused.spot_hours == pytest.approx(10 * DT) and paused.finished_hours == pytest.approx(22 * DT)
    assert float(plain.usd) > float(paused.usd) * 2  # without pausing it ran on through the spike
    assert float(outcomes["oracle"].usd) <= float(paused.usd)


@pytest.mark.parametrize("priority", ["critical"])
def test_a_critical_job_is_never_paused(priority: str) -> None:
    outcomes = _spike(priority)
    assert outcomes["cheapest_window_pausing"].usd == outcomes["cheapest_window"].usd


def test_pausing_through_an_unforeseen_power_spike() -> None:
    power = [0.2] * 3 + [3.0] * 6 + [0.2] * 30
    n = len(power)
    # The forecast did not see the spike coming: only the price in force tells.
    m = TickMarket(on_demand=power, on_demand_forecast=[0.2] * n, spot=None, spot_forecast=None, local=True)
    plan = TickPlan(DT, 6, 30, 1, 1)
    plain = run_job(policy_class("cheapest_window")(), m, plan)
    paused = run_job(policy_class("cheapest_window_pausing")(), m, plan)
    # Plain: a restart and 2 work ticks at 0.2, then 4 work ticks at 3.0. Pausing: the same start, a pause
    # through the spike, then a second restart and the 4 work ticks at 0.2.
    assert float(plain.usd) == pytest.approx((3 * 0.2 + 4 * 3.0) * DT, abs=1e-6)
    assert float(paused.usd) == pytest.approx(8 * 0.2 * DT, abs=1e-6)
    assert paused.met_deadline and paused.finished_hours == pytest.approx(14 * DT)


def test_local_power_policies_shift_to_cheap_hours() -> None:
    power = [1.0] * 4 + [0.2] * 4 + [1.0] * 20
    m = market(None, None, power)
    plan = TickPlan(DT, 3, 12, 0, 1)
    costs = {name: float(run_job(POLICIES[name](), m, plan).usd) for name in POLICIES}
    assert costs["on_demand_now"] == pytest.approx(3 * DT)
    assert (
        costs["cheapest_window"] == costs["deadline_aware"] == costs["oracle"] == pytest.approx(3 * 0.2 * DT)
    )


@pytest.mark.parametrize(
    ("now", "forecast_min", "target", "starts"),
    [
        (1.0, 0.9, None, False),
        (0.9, 0.9, None, True),
        (1.0, None, None, True),
        (1.0, 0.5, 1.2, True),
        # Power paid to be drawn (DE-LU went below zero): an equal price is at the minimum there too.
        (-5.0, -5.0, None, True),
        (-4.0, -5.0, None, False),
        (-6.0, -5.0, None, True),
        (-5.0, 0.0, -5.0, True),
    ],
)
def test_start_rule(now: float, forecast_min: float | None, target: float | None, starts: bool) -> None:
    assert (start_rule(now, forecast_min, target) is not None) is starts


@pytest.mark.parametrize(
    ("keep", "pause", "priority", "pauses"),
    [
        (13.0, 10.0, "normal", True),  # 30 % dearer than pausing: past the 20 % margin
        (11.0, 10.0, "normal", False),
        (10.0, 10.0, "best_effort", False),
        (10.01, 10.0, "best_effort", True),
        (50.0, 10.0, "critical", False),
        # Negative prices: -11 is cheaper than -10, and -9 only 10 % dearer; both read as a pause before.
        (-11.0, -10.0, "normal", False),
        (-9.0, -10.0, "normal", False),
        (-7.9, -10.0, "normal", True),
    ],
)
def test_pause_rule(keep: float, pause: float, priority: str, pauses: bool) -> None:
    assert pause_rule(keep, pause, priority) is pauses


@pytest.mark.parametrize(("progress", "every", "kept"), [(7, 3, 6), (7, 0, 0), (6, 3, 6), (2, 5, 0)])
def test_checkpointed(progress: int, every: int, kept: int) -> None:
    assert checkpointed(progress, every) == kept


def test_unknown_policy_and_bad_arguments() -> None:
    with pytest.raises(ConfigurationError, match="unknown policy 'greedy'; choose from on_demand_now"):
        policy_class("greedy")
    with pytest.raises(ConfigurationError, match="target_usd_per_hour must be >= 0, got -1"):
        CheapestWindowPolicy(target_usd_per_hour=-1)


def test_oracle_rejects_an_impossible_deadline() -> None:
    from costaware.core.policies import Hindsight, Situation
    from costaware.core.policies.oracle import solve

    s = Situation(0, DT, 5, 4, 0, 0, 0, Action.WAIT, 0, None, False, 1.0, None, [1.0] * 10)
    with pytest.raises(ConfigurationError, match=r"needs 5 ticks .* deadline is 4 ticks away"):
        solve(s, Hindsight(None, None, [1.0] * 10))


def actions(policy: Policy, m: TickMarket, plan: TickPlan, priority: str = "normal") -> str:
    """The policy's action per tick, one letter each (w, s, o)."""
    taken: list[str] = []
    decide = policy.decide

    def record(s: Situation) -> Action:
        action = decide(s)
        taken.append(action.value[0])
        return action

    policy.decide = record  # type: ignore[method-assign]
    run_job(policy, m, plan, priority=priority)
    return "".join(taken)


def test_availability_aware_pauses_through_a_power_spike_and_resumes() -> None:
    # Power: two cheap ticks, a 50x spike for three, four cheap ones, then dear; six ticks of work, one
    # restart tick. Best: start now, pause through the spike, resume (paying the restart again).
    power = [0.1] * 2 + [5.0] * 3 + [0.1] * 4 + [1.0] * 20
    m = market(None, None, power)
    plan = TickPlan(DT, 6, 14, 1, 1)
    taken = actions(policy_class("availability_aware")(), m, plan)
    assert taken.startswith("oo") and taken[2:5] == "www"  # started, paused through the spike
    assert taken[5:].startswith("ooo")  # resumed, paying the restart tick again
    outcome = run_job(policy_class("availability_aware")(), m, plan)
    oracle = run_job(OraclePolicy(), m, plan)
    assert outcome.met_deadline and float(outcome.usd) == pytest.approx(float(oracle.usd))
    # A critical job is never paused once it runs.
    assert "w" not in actions(policy_class("availability_aware")(), m, plan, "critical").lstrip("w")


def test_availability_aware_waits_out_capacity_that_just_came_back() -> None:
    # The history says: capacity that has just returned is gone within a tick; capacity that held for a
    # few ticks lasts. The policy skips a fresh blip and starts on the stable run.
    history = ([True, False] * 3 + [True] * 20 + [False] * 4) * 10
    available = [True, False, True, False] + [True] * 40
    n = len(available)
    m = TickMarket(
        on_demand=[3.0] * n,
        on_demand_forecast=[3.0] * n,
        spot=[1.0] * n,
        spot_forecast=[1.0] * n,
        available=available,
        available_before=history,
    )
    plan = TickPlan(DT, 6, 30, 1, 2)
    greedy = run_job(policy_class("deadline_aware")(), m, plan)
    learnt = run_job(policy_class("availability_aware")(), m, plan)
    assert learnt.met_deadline and learnt.preemptions == 0 < greedy.preemptions
    assert learnt.usd < greedy.usd


def test_availability_aware_waits_rather_than_paying_on_demand_early() -> None:
    # The history says capacity comes back only for one-tick blips, too short to keep any work: the model
    # finds on-demand now and on-demand later equally dear. It waits until the latest safe start, which keeps
    # the chance that capacity returns for longer than the model believes (before: on-demand from tick 0).
    history = ([True] + [False] * 20) * 8
    n = 40
    m = TickMarket(
        on_demand=[3.0] * n,
        on_demand_forecast=[3.0] * n,
        spot=[1.0] * n,
        spot_forecast=[1.0] * n,
        available=[False] * n,
        available_before=history,
    )
    plan = TickPlan(DT, 6, 30, 1, 3)
    latest_start = plan.deadline - plan.work - plan.overhead
    assert actions(policy_class("availability_aware")(), m, plan) == "w" * latest_start + "o" * 7
    assert run_job(policy_class("availability_aware")(), m, plan).met_deadline


def test_critical_jobs_turn_to_on_demand_earlier() -> None:
    n = 40
    m = market([0.5] * n, [False] * n, [2.0] * n)  # spot never has capacity
    plan = TickPlan(DT, 6, 14, 1, 3)
    normal = actions(policy_class("deadline_aware")(), m, plan)
    critical = actions(policy_class("deadline_aware")(), m, plan, "critical")
    assert normal.index("o") == 14 - 6 - 1  # waits while the slack lasts
    assert critical.index("o") == normal.index("o") - 4  # keeps a checkpoint and a restart in reserve


def _pauses(name: str, m: TickMarket, plan: TickPlan, priority: str) -> list[int]:
    """Ticks at which the policy stopped a running job of its own accord (not a preemption)."""
    policy = policy_class(name)()
    decide = policy.decide
    stops: list[int] = []

    def record(s: Situation) -> Action:
        action = decide(s)
        if s.running is not Action.WAIT and action is Action.WAIT:
            stops.append(s.tick)
        return action

    policy.decide = record  # type: ignore[method-assign]
    outcome = run_job(policy, m, plan, priority=priority)
    assert outcome.met_deadline
    return stops


@pytest.mark.parametrize(
    "name", ["deadline_aware", "cheapest_window", "cheapest_window_pausing", "availability_aware"]
)
def test_no_policy_pauses_a_running_critical_job(name: str) -> None:
    n = 60
    # Power whose price in force spikes, unforeseen, right after the start; spot that turns dearer than
    # on-demand for a while with capacity all along. Either tempts a running job to stop and resume later.
    power = [0.1] * 2 + [3.0] * 6 + [0.2] * (n - 8)
    power_market = TickMarket(on_demand=power, on_demand_forecast=[0.2] * n, local=True, on_demand_now=power)
    spot = [1.0] * 3 + [5.0] * 4 + [1.0] * (n - 7)
    spot_market = TickMarket(
        on_demand=[3.0] * n,
        on_demand_forecast=[3.0] * n,
        spot=spot,
        spot_forecast=[1.0] * n,
        available=[True] * n,
        spot_now=spot,
    )
    plan = TickPlan(DT, 6, 30, 1, 2)
    for m in (power_market, spot_market):
        assert _pauses(name, m, plan, "critical") == []
    # The same markets do make the greedy rule stop a normal job: the scenario tests a real temptation.
    assert all(_pauses("deadline_aware", m, plan, "normal") for m in (power_market, spot_market))


@st.composite
def zoned_scenarios(draw: st.DrawFn) -> tuple[TickMarket, TickPlan]:
    work = draw(st.integers(1, 6))
    overhead = draw(st.integers(0, 2))
    deadline = work + overhead + draw(st.integers(0, 8))
    horizon = deadline + work + overhead + 1
    per_zone = [
        (
            draw(st.lists(st.floats(0.1, 2.5), min_size=horizon, max_size=horizon)),
            draw(st.lists(st.booleans(), min_size=horizon, max_size=horizon)),
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    plan = TickPlan(DT, work, deadline, overhead, draw(st.integers(0, 4)))
    return zoned_tick_market(per_zone, [2.0] * horizon), plan


@settings(max_examples=200, deadline=None, database=None)
@given(zoned_scenarios())
def test_with_several_zones_no_policy_beats_the_oracle(case: tuple[TickMarket, TickPlan]) -> None:
    m, plan = case
    best = run_job(OraclePolicy(), m, plan)
    assert best.met_deadline
    for name, cls in POLICIES.items():
        outcome = run_job(cls(), m, plan)
        if outcome.met_deadline:
            assert outcome.usd >= best.usd - Decimal("0.000002"), name
        if name in SAFE:
            assert outcome.met_deadline, name


def test_a_preempted_job_fails_over_to_another_zone() -> None:
    n = 40
    zone_a = ([0.5] * n, [True] * 4 + [False] * (n - 4))  # cheaper, but its capacity goes after 4 ticks
    zone_b = ([0.8] * n, [True] * n)
    plan = TickPlan(DT, 8, 14, 1, 2)
    two = run_job(policy_class("deadline_aware")(), zoned_tick_market([zone_a, zone_b], [3.0] * n), plan)
    one = run_job(policy_class("deadline_aware")(), zoned_tick_market([zone_a], [3.0] * n), plan)
    assert two.preemptions == 1 and two.spot_hours == pytest.approx(two.run_hours)  # all on spot: a then b
    assert two.met_deadline and one.met_deadline and two.usd < one.usd  # one zone ends on on-demand


@settings(max_examples=40, deadline=None, database=None)
@given(
    st.lists(
        st.tuples(st.floats(0.1, 2.5), st.booleans(), st.floats(0.1, 2.5), st.booleans()),
        min_size=8,
        max_size=8,
    ),
    st.integers(1, 2),
    st.integers(0, 1),
    st.integers(0, 2),
)
def test_the_zoned_oracle_matches_brute_force(
    ticks: list[tuple[float, bool, float, bool]], work: int, overhead: int, checkpoint: int
) -> None:
    a = ([p for p, _, _, _ in ticks], [ok for _, ok, _, _ in ticks])
    b = ([p for _, _, p, _ in ticks], [ok for _, _, _, ok in ticks])
    m = zoned_tick_market([a, b], [2.0] * len(ticks))
    plan = TickPlan(DT, work, min(5, work + overhead + 2), overhead, checkpoint)
    oracle = OraclePolicy()
    outcome = run_job(oracle, m, plan)
    assert float(outcome.usd) == pytest.approx(oracle.optimal_usd, abs=2e-6)  # the replay follows the plan
    assert oracle.optimal_usd == pytest.approx(brute_force(m, plan), abs=2e-6)


def test_the_zoned_oracle_pays_a_restart_to_move_and_is_preempted_in_its_own_zone() -> None:
    from costaware.core.policies.base import Hindsight
    from costaware.core.policies.oracle import solve

    n = 12
    # Zone a is cheap for 3 ticks then loses capacity; zone b is dearer and always there.
    zone_a = ([0.5] * n, [True] * 3 + [False] * (n - 3))
    zone_b = ([1.0] * n, [True] * n)
    m = zoned_tick_market([zone_a, zone_b], [3.0] * n)
    plan = TickPlan(DT, 6, 9, 1, 1)
    oracle = OraclePolicy()
    outcome = run_job(oracle, m, plan)
    # 3 ticks in a (1 of overhead, 2 of work, checkpointed each tick), then a new start in b: 1 + 4 ticks.
    assert float(outcome.usd) == pytest.approx(DT * (3 * 0.5 + 5 * 1.0))
    assert [oracle.zone_at(t) for t in range(8)] == [0, 0, 0, 1, 1, 1, 1, 1]
    assert outcome.preemptions == 1  # a's drop preempts it (b has capacity); its checkpoint keeps the work
    # On the collapsed market the move is free (no second restart): a looser lower bound.
    situation = Situation(
        tick=0,
        tick_hours=DT,
        work_ticks=6,
        deadline_tick=9,
        overhead_ticks=1,
        checkpoint_ticks=1,
        progress=0,
        running=Action.WAIT,
        overhead_left=0,
        spot_usd_per_hour=0.5,
        spot_available=True,
        on_demand_usd_per_hour=3.0,
        spot_forecast=m.spot_forecast,
        on_demand_forecast=m.on_demand,
    )
    collapsed, _ = solve(situation, Hindsight(m.spot, m.available, m.on_demand))
    assert collapsed == pytest.approx(DT * (3 * 0.5 + 4 * 1.0))
    assert collapsed < oracle.optimal_usd


def _ticked(split: int, history: list[bool], available: list[bool]) -> tuple[TickMarket, TickPlan]:
    """A 10-minute scenario sampled ``split`` times finer: every tick and every sample repeated."""

    def finer(values: list[bool]) -> list[bool]:
        return [v for v in values for _ in range(split)]

    n = len(available) * split
    m = TickMarket(
        on_demand=[3.0] * n,
        on_demand_forecast=[3.0] * n,
        spot=[1.0] * n,
        spot_forecast=[1.0] * n,
        available=finer(available),
        available_before=finer(history),
    )
    return m, TickPlan(DT / split, 6 * split, 30 * split, split, 2 * split)


def test_availability_aware_decides_the_same_at_any_tick_length() -> None:
    # A week of history: blips of capacity that vanish, then runs that last, then (the last 2.5 days) capacity
    # throughout. Its constants (a week of history, a two-hour age cap, a replan every two hours) are
    # durations: at 5- and 3.3-minute ticks it sees the same week and takes the same decisions, tick for tick,
    # as at 10 minutes. Counted in ticks, it kept only 3.5 days of history at 5 minutes and resumed later.
    history = ([True, False] * 3 + [True] * 20 + [False] * 4) * 17 + [True] * (1008 - 17 * 30)
    available = [True, False, True, False] + [True] * 40
    every_10_minutes = actions(policy_class("availability_aware")(), *_ticked(1, history, available))
    assert every_10_minutes.startswith("sw") and every_10_minutes.endswith("s" * 7)  # preempted, then resumed
    for split in (2, 3):
        finer = actions(policy_class("availability_aware")(), *_ticked(split, history, available))
        assert finer == "".join(a * split for a in every_10_minutes), split


@pytest.mark.parametrize("replan", [timedelta(0), 12])
def test_availability_aware_replan_is_a_positive_duration(replan: object) -> None:
    with pytest.raises(
        ConfigurationError, match=rf"replan must be a positive timedelta.*got {re.escape(repr(replan))}$"
    ):
        AvailabilityAwarePolicy(replan=replan)  # type: ignore[arg-type]
