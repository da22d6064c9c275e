"""The simulator on carbon: the objective's values in the replay, the carbon oracle, USD and kg tracked."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.policies import Action, Situation
from costaware.core.policies.cheapest_window import CheapestWindowPausingPolicy
from costaware.core.series import PriceSeries
from costaware.core.simulate import Job, MarketData, TickPlan, market_for, simulate

T0 = datetime(2023, 3, 1, tzinfo=timezone.utc)
POLICIES = ("on_demand_now", "cheapest_window", "deadline_aware", "oracle")


def hourly(pattern: list[float], *, days: int = 14, name: str = "s") -> PriceSeries:
    points = [(T0 + timedelta(hours=h), str(pattern[h % len(pattern)])) for h in range(24 * days)]
    return PriceSeries.from_points(points, name=name)


#: Electricity is cheap at night (hours 0-5), dear by day; the grid is clean by day (solar), dirty at night.
ELECTRICITY = hourly([20.0] * 6 + [100.0] * 18, name="usd/MWh")
CARBON = hourly([600.0] * 10 + [100.0] * 6 + [600.0] * 8, name="g/kWh")


def power_job(name: str = "j", day: int = 8, **kwargs: object) -> Job:
    fields: dict[str, object] = {
        "name": name,
        "instance_type": "on-prem",
        "region": "on-prem",
        "submit_time": T0 + timedelta(days=day),
        "runtime_hours": Decimal(3),
        "deadline_hours": Decimal(20),
        "checkpoint_minutes": Decimal(30),
        "restart_overhead_minutes": Decimal(0),
        "power_kw": Decimal(10),
    }
    fields.update(kwargs)
    return Job(**fields)  # type: ignore[arg-type]


def market(objective: Objective, *, prices: PriceSeries | None = ELECTRICITY, **kwargs: object) -> MarketData:
    return MarketData(
        on_demand_usd_per_hour=lambda t, r: Decimal("3.06"),
        electricity_usd_per_mwh=prices,
        carbon_g_per_kwh=CARBON,
        objective=objective,
        **kwargs,  # type: ignore[arg-type]
    )


def test_the_replay_sees_the_objectives_hourly_value() -> None:
    job = power_job()
    plan = TickPlan.of(job, timedelta(hours=1))
    objective = Objective.parse("cost+carbon", 100)
    tick = market_for(job, market(objective), plan, timedelta(hours=1))
    # Hour 0 of the day: 20 USD/MWh x 10 kW = 0.2 USD/h, 600 g x 10 kW = 6 kg/h, 100 USD/t -> +0.6 USD/h.
    assert tick.on_demand[0] == pytest.approx(0.2 + 0.6)
    assert tick.usd_on_demand is not None and tick.usd_on_demand[0] == pytest.approx(0.2)
    assert tick.kg_per_hour is not None and tick.kg_per_hour[0] == pytest.approx(6.0)
    carbon = market_for(job, market(Objective("carbon")), plan, timedelta(hours=1))
    assert carbon.on_demand[10] == pytest.approx(1.0)  # 100 g x 10 kW
    cost = market_for(job, market(Objective()), plan, timedelta(hours=1))
    assert cost.on_demand[0] == pytest.approx(0.2) and cost.usd_on_demand is None  # cost: USD as before
    assert cost.kg_per_hour is not None  # emissions still tracked


def test_the_carbon_oracle_minimises_emissions_and_usd_and_kg_are_tracked() -> None:
    jobs = [power_job(f"j{i}", day=8 + i) for i in range(3)]
    carbon = simulate(jobs, market(Objective("carbon")), POLICIES)
    cost = simulate(jobs, market(Objective()), POLICIES)
    oracle, baseline = carbon.summaries["oracle"], carbon.summaries["on_demand_now"]
    assert oracle.kg_co2e is not None and baseline.kg_co2e is not None
    # Clean hours 10-15 fit the 3 h of work: 3 h x 10 kW x 100 g = 3 kg a job; at submit, 600 g: 18 kg.
    assert oracle.kg_co2e == Decimal("9")
    assert baseline.kg_co2e == Decimal("54")
    assert oracle.value == oracle.kg_co2e and oracle.vs_oracle == 1
    assert baseline.vs_oracle == Decimal(6)
    for summary in carbon.summaries.values():  # no schedule emits less than the carbon oracle
        assert summary.kg_co2e is not None and summary.kg_co2e >= oracle.kg_co2e
        assert summary.deadline_misses == 0
    # USD is the real bill (by day electricity is dear): the carbon oracle pays more than the cost oracle.
    assert oracle.usd == Decimal("9")  # 3 h x 10 kW x 100 USD/MWh = 3 USD a job
    assert cost.summaries["oracle"].usd == Decimal("1.8")  # at night, 20 USD/MWh
    assert cost.summaries["oracle"].kg_co2e == Decimal("54")  # the cheap night is dirty
    assert cost.summaries["oracle"].value is None  # cost: ratios on USD, as before
    assert carbon.to_json()["objective"] == {"name": "carbon", "unit": "kg CO2e", "carbon_usd_per_tonne": 0.0}
    row = carbon.to_json()["policies"]["oracle"]  # type: ignore[index]
    assert row["kg_co2e"] == 9.0 and row["usd"] == 9.0 and row["objective_value"] == 9.0


def test_cost_plus_carbon_moves_with_the_carbon_price() -> None:
    jobs = [power_job(f"j{i}", day=8 + i) for i in range(3)]
    cheap = simulate(jobs, market(Objective.parse("cost+carbon", 0)), POLICIES).summaries["oracle"]
    dear = simulate(jobs, market(Objective.parse("cost+carbon", 1000)), POLICIES).summaries["oracle"]
    assert cheap.usd < dear.usd
    assert cheap.kg_co2e is not None and dear.kg_co2e is not None and dear.kg_co2e < cheap.kg_co2e
    assert dear.value == dear.usd + dear.kg_co2e  # 1000 USD/t = 1 USD/kg


def test_carbon_without_prices_runs_with_usd_unknown() -> None:
    report = simulate([power_job()], market(Objective("carbon"), prices=None), POLICIES)
    oracle = report.summaries["oracle"]
    assert oracle.kg_co2e == Decimal("3") and not oracle.usd_known
    assert report.to_json()["policies"]["oracle"]["usd"] is None  # type: ignore[index]


def test_an_instance_type_job_draws_its_power_models_power() -> None:
    job = power_job(power_kw=None, instance_type="p3.2xlarge", region="us-east-1")
    data = market(Objective("carbon"), power_kw_of=lambda t, r: 2.0)
    report = simulate([job], data, POLICIES)
    assert report.summaries["oracle"].kg_co2e == Decimal("0.6")  # 3 h x 2 kW x 100 g
    assert report.summaries["oracle"].usd == Decimal("9.180000")  # on-demand 3.06 x 3 h


def test_errors_name_the_value() -> None:
    with pytest.raises(ConfigurationError, match="'green'"):
        Objective.parse("green")
    with pytest.raises(ConfigurationError, match="carbon_usd_per_tonne"):
        Objective.parse("cost+carbon")
    no_carbon = MarketData(
        on_demand_usd_per_hour=lambda t, r: Decimal(1),
        electricity_usd_per_mwh=ELECTRICITY,
        objective=Objective("carbon"),
    )
    with pytest.raises(ConfigurationError, match=r"objective 'carbon' needs .*--carbon"):
        simulate([power_job()], no_carbon, POLICIES)
    with pytest.raises(PriceNotFoundError, match=r"job 'late'.*2023-03-21.*outside g/kWh, which covers"):
        simulate([power_job("late", day=20)], market(Objective("carbon")), POLICIES)
    with pytest.raises(ConfigurationError, match="no power_kw"):
        simulate(
            [power_job(power_kw=None, instance_type="p3.2xlarge", region="us-east-1")],
            market(Objective("carbon")),
            POLICIES,
        )
    with pytest.raises(ConfigurationError, match=r"job 'j' sets power_kw but no electricity prices"):
        simulate([power_job()], market(Objective.parse("cost+carbon", 50), prices=None), POLICIES)


def test_the_default_objective_changes_nothing() -> None:
    jobs = [power_job(f"j{i}", day=8 + i) for i in range(3)]
    plain = MarketData(on_demand_usd_per_hour=lambda t, r: Decimal(1), electricity_usd_per_mwh=ELECTRICITY)
    before = simulate(jobs, plain, POLICIES)
    assert "objective" not in before.to_json()
    assert all("kg_co2e" not in row for row in before.to_json()["policies"].values())  # type: ignore[attr-defined]
    with_carbon = simulate(jobs, market(Objective()), POLICIES)
    for name, summary in before.summaries.items():
        assert with_carbon.summaries[name].usd == summary.usd
        assert with_carbon.summaries[name].vs_oracle == summary.vs_oracle


#: One clean hour (10:00) before two dirty ones, 300 g/kWh the rest of the day: a 3-hour run started at
#: 10:00 averages ~367, more than any run from 13:00 (300).
CLEAN_THEN_DIRTY = hourly([300.0] * 10 + [100.0, 500.0, 500.0] + [300.0] * 11, name="g/kWh")


def spot_job(objective_day: int = 8) -> Job:
    return Job(
        name="spot",
        instance_type="p3.2xlarge",
        region="us-east-1",
        submit_time=T0 + timedelta(days=objective_day, hours=10),
        runtime_hours=Decimal(3),
        deadline_hours=Decimal(12),
        checkpoint_minutes=Decimal(30),
        restart_overhead_minutes=Decimal(0),
    )


@pytest.mark.parametrize("objective", [Objective("carbon"), Objective.parse("cost+carbon", 1000)])
def test_a_spot_replay_values_a_start_now_over_the_run_as_live(objective: Objective) -> None:
    # Valued at the instant (100 g/kWh), the start at 10:00 beat every later run (300 at best) and the job
    # ran into the dirty hours: 1.1 kg. Over its run, as the live sensor values it (~367), it waits for 13:00.
    flat_spot = hourly([0.5], name="spot")
    data = MarketData(
        on_demand_usd_per_hour=lambda t, r: Decimal("3.06"),
        spot_series=lambda t, r, z: flat_spot,
        carbon_g_per_kwh=CLEAN_THEN_DIRTY,
        objective=objective,
        power_kw_of=lambda t, r: 1.0,
    )
    window = simulate([spot_job()], data, ("cheapest_window",)).summaries["cheapest_window"]
    assert window.kg_co2e == Decimal("0.9")  # 3 h x 1 kW x 300 g, from 13:00
    assert window.deadline_misses == 0


def test_a_spot_replay_weighs_running_on_over_the_work_left_as_live() -> None:
    # kg CO2e per hour (objective carbon): clean for 4 ticks, dirty for 12, clean again; 8 ticks of work.
    kg = [0.1] * 4 + [0.9] * 12 + [0.1] * 30
    policy = CheapestWindowPausingPolicy(target_usd_per_hour=1.0)

    def at(tick: int, running: Action) -> Situation:
        return Situation(
            tick=tick,
            tick_hours=1 / 6,
            work_ticks=8,
            deadline_tick=40,
            overhead_ticks=1,
            checkpoint_ticks=2,
            progress=0,
            running=running,
            overhead_left=0,
            spot_usd_per_hour=kg[tick],
            spot_available=True,
            on_demand_usd_per_hour=3.0,
            spot_forecast=kg,
            on_demand_forecast=[3.0] * len(kg),
            carbon_now=kg[tick],
            carbon_forecast=kg,
        )

    assert policy.decide(at(0, Action.WAIT)) is Action.SPOT  # the target starts it
    # Valued at the clean instant, running on matched the clean window (0.1) and the job ran on into the
    # dirty ticks; over the 8 ticks of work left (mostly dirty), as the live pause watch values it, it pauses.
    assert policy.decide(at(1, Action.SPOT)) is Action.WAIT
