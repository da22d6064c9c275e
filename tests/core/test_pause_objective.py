"""The pause rule on an objective: spot price alone, carbon, or both, on the bundled GB intensity."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware.adapters.carbon_data import bundled_carbon
from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError
from costaware.core.spot_forecast import objective_starts
from costaware.core.spot_window import pause_decision

# 2023-03-09 15:00 UTC the GB grid is at 233 gCO2e/kWh; a 2-hour run later that evening averages ~122.
NOW = datetime(2023, 3, 9, 15, tzinfo=timezone.utc)
LATEST = NOW + timedelta(hours=8)
POWER_KW = 5.0
REMAINING = Decimal(2)
# A flat spot price: on price alone nothing is gained by pausing.
PRICE_STARTS = [[(NOW + timedelta(hours=h)).isoformat(), "0.500000"] for h in range(1, 9)]


def decide(objective: Objective) -> str | None:
    starts = objective_starts(
        PRICE_STARTS,
        bundled_carbon("GB") if objective.needs_carbon else None,
        objective=objective,
        power_kw=POWER_KW,
        runtime_hours=REMAINING,
    )
    return pause_decision(
        now=NOW,
        usd_per_hour=Decimal("0.50"),
        forecast_starts=starts,
        latest_resume=LATEST,
        remaining_hours=REMAINING,
        restart_overhead_minutes=5,
        objective=objective,
        power_kw=POWER_KW,
        g_co2e_per_kwh=float(bundled_carbon("GB").price_at(NOW)),
    )


def test_carbon_pauses_where_cost_runs_on() -> None:
    assert decide(Objective()) is None
    reason = decide(Objective("carbon"))
    assert reason is not None and "kg CO2e/hour now" in reason and "233.33 gCO2e/kWh" in reason


def test_cost_plus_carbon_at_price_zero_is_cost_and_at_a_high_price_pauses() -> None:
    assert decide(Objective.parse("cost+carbon", 0)) is None
    assert (
        objective_starts(
            PRICE_STARTS,
            bundled_carbon("GB"),
            objective=Objective.parse("cost+carbon", "0"),
            power_kw=POWER_KW,
            runtime_hours=REMAINING,
        )
        == PRICE_STARTS
    )
    # 5 kW x 111 g less per kWh = 0.56 kg/h: at 1000 USD/t worth 0.56 USD/h against a 0.50 USD/h price.
    assert decide(Objective.parse("cost+carbon", 1000)) is not None


def test_cost_objective_is_the_rule_of_today() -> None:
    args = {
        "now": NOW,
        "usd_per_hour": Decimal("0.70"),
        "forecast_starts": PRICE_STARTS,
        "latest_resume": LATEST,
        "remaining_hours": REMAINING,
        "restart_overhead_minutes": 5,
    }
    assert pause_decision(**args) == pause_decision(**args, objective=Objective())  # type: ignore[arg-type]


def test_a_carbon_objective_without_the_intensity_now_is_named() -> None:
    with pytest.raises(ConfigurationError, match="objective 'carbon' needs the grid carbon intensity"):
        pause_decision(
            now=NOW,
            usd_per_hour=Decimal("0.50"),
            forecast_starts=PRICE_STARTS,
            latest_resume=LATEST,
            remaining_hours=REMAINING,
            restart_overhead_minutes=5,
            objective=Objective("carbon"),
            power_kw=POWER_KW,
        )


def test_a_watch_of_todays_form_is_cost_and_reads_nothing() -> None:
    from costaware.adapters.spot_market import watch_objective

    now = datetime.now(timezone.utc)
    reads = {"now": now, "latest_start": now + timedelta(hours=10), "runtime_hours": Decimal(3)}
    cost = watch_objective({}, instance_type="no-such-type", region="mars-1", **reads)
    assert cost == (Objective(), None, 0.0)
    objective, intensity, power = watch_objective(
        {"objective": "carbon", "carbon": "GB"}, instance_type="p3.2xlarge", region="us-east-1", **reads
    )
    assert objective.name == "carbon" and intensity is not None and power > 0


def test_price_watch_keeps_the_objective_and_old_states_still_load() -> None:
    from costaware.training.plan import PriceWatch

    old = {"prices": "live", "runtime_hours": "2"}
    assert PriceWatch.from_json(old).objective == "cost"
    plain = PriceWatch(prices="live", runtime_hours="2")
    assert "objective" not in plain.to_json()  # today's states stay as they were
    watch = PriceWatch(
        prices="live", runtime_hours="2", objective="cost+carbon", carbon_usd_per_tonne=80.0, carbon="GB"
    )
    assert PriceWatch.from_json(watch.to_json()) == watch


def test_the_plan_passes_the_objective_to_the_price_watch_and_names_a_bad_one() -> None:
    from costaware.core.spot_decision import SpotDecision
    from costaware.training.plan import PlanArguments
    from costaware.training.plan.arguments import watch_plan

    decision = SpotDecision(market="spot", usd_per_hour=Decimal("0.5"), expected_runtime_hours=Decimal(2))
    args = PlanArguments(
        pause_on_price=True, prices="live", objective="cost+carbon", carbon_usd_per_tonne="90", carbon="GB"
    )
    watch = watch_plan(args, decision, deadline=LATEST, region="eu-west-2")
    assert watch is not None
    assert (watch.objective, watch.carbon_usd_per_tonne, watch.carbon) == ("cost+carbon", 90.0, "GB")
    plain = watch_plan(
        PlanArguments(pause_on_price=True, prices="live"), decision, deadline=LATEST, region="x"
    )
    assert plain is not None and plain.objective == "cost"
    bad = PlanArguments(pause_on_price=True, prices="live", objective="cost+carbon")
    with pytest.raises(ConfigurationError, match="needs carbon_usd_per_tonne"):
        watch_plan(bad, decision, deadline=LATEST, region="eu-west-2")
