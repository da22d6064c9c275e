"""A carbon decision values a start now as each later start: the mean over the hours its run covers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware.adapters.spot_market import intensity_of_run
from costaware.core.carbon import Objective
from costaware.core.series import PriceSeries
from costaware.core.spot_decision import SpotDecision
from costaware.core.spot_forecast import objective_starts
from costaware.core.spot_window import Observation, decide_on_objective, pause_decision

T0 = datetime(2026, 3, 2, 22, tzinfo=timezone.utc)
#: A clean hour now, two dirty ones after it, then a steady middle: a 3-hour run now averages ~367.
HOURLY = [100, 500, 500, *([300] * 20)]
SERIES = PriceSeries.from_points(
    [(T0 + timedelta(hours=h), Decimal(v)) for h, v in enumerate(HOURLY)], name="made-up grid"
)
CARBON = Objective("carbon")
RUN = Decimal(3)


def later_starts(now: datetime, runtime: Decimal, count: int = 8) -> list[list[str]]:
    """The forecast of each whole-hour start after ``now``, on a flat spot price (carbon alone differs)."""
    first = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    prices = [[(first + timedelta(hours=h)).isoformat(), "0.500000"] for h in range(count)]
    return objective_starts(prices, SERIES, objective=CARBON, power_kw=1.0, runtime_hours=runtime)


def decide_now(now: datetime, latest_start: datetime) -> SpotDecision | None:
    return decide_on_objective(
        now=now,
        observation=Observation(Decimal("0.50"), True, "recorded"),
        on_demand_usd_per_hour=Decimal("3.06"),
        forecast_starts=later_starts(now, RUN),
        target_value_per_hour=None,
        latest_start=latest_start,
        not_before=None,
        objective=CARBON,
        power_kw=1.0,
        g_co2e_per_kwh=intensity_of_run(SERIES, now, RUN),
        runtime_hours=RUN,
    )


def test_a_clean_hour_before_dirty_ones_does_not_start_the_run_now() -> None:
    # Valued at the instant, now (100 g/kWh) beat every later start (300 at best) and the run started on a
    # 3 hours averaging ~367. Over the run it is ~367: the start at T0+3h (300) is waited for.
    assert intensity_of_run(SERIES, T0, RUN) == pytest.approx((100 + 500 + 500) / 3)
    assert decide_now(T0, T0 + timedelta(hours=6)) is None


def test_a_start_forced_now_records_the_emissions_of_the_hours_it_runs() -> None:
    decision = decide_now(T0, T0)  # no later start is left: it starts now
    assert decision is not None
    assert decision.kg_co2e == Decimal(repr(round(1.0 * 3 * (100 + 500 + 500) / 3 / 1000, 3)))


@pytest.mark.parametrize("minutes", [0, 20, 45])
def test_now_and_a_later_start_at_the_same_hours_are_valued_alike(minutes: int) -> None:
    # The run from T0+1h+minutes covers 3 hours, the first and last in part: each hour weighed by its share.
    now = T0 + timedelta(hours=1, minutes=minutes)
    share = minutes / 60
    expected = (500 * (1 - share) + 500 + 300 + 300 * share) / 3
    assert intensity_of_run(SERIES, now, RUN) == pytest.approx(expected)
    if minutes == 0:  # a whole hour: the forecast's own start at that hour, in kg CO2e/hour at 1 kW
        start_at_now = objective_starts(
            [[now.isoformat(), "0.5"]], SERIES, objective=CARBON, power_kw=1.0, runtime_hours=RUN
        )
        assert Decimal(start_at_now[0][1]) == Decimal(repr(expected / 1000)).quantize(Decimal("0.000001"))


def test_the_pause_watch_values_running_on_over_the_work_left() -> None:
    # Running from T0 with 3 h left meets ~367 g/kWh, not 100: against resuming at 300 (and a restart) a
    # best-effort job pauses; valued at the instant it ran on.
    def pause(g: float | None) -> str | None:
        return pause_decision(
            now=T0,
            usd_per_hour=Decimal("0.50"),
            forecast_starts=later_starts(T0, RUN),
            latest_resume=T0 + timedelta(hours=8),
            remaining_hours=RUN,
            restart_overhead_minutes=5,
            priority="best_effort",
            objective=CARBON,
            power_kw=1.0,
            g_co2e_per_kwh=g,
        )

    assert pause(intensity_of_run(SERIES, T0, RUN)) is not None
    assert pause(100.0) is None  # the instant's value: the clean hour hid the dirty ones


def test_a_later_start_of_a_part_hour_run_is_valued_over_its_runtime_as_now_is() -> None:
    # A 1.5-hour run was valued at later starts over round(1.5) = 2 whole hours, but over 1.5 from now.
    start = T0 + timedelta(hours=2)
    later = objective_starts(
        [[start.isoformat(), "0.5"]], SERIES, objective=CARBON, power_kw=1.0, runtime_hours=Decimal("1.5")
    )
    expected = (500 + 300 * 0.5) / 1.5
    assert intensity_of_run(SERIES, start, Decimal("1.5")) == pytest.approx(expected)
    assert Decimal(later[0][1]) == Decimal(repr(expected / 1000)).quantize(Decimal("0.000001"))
