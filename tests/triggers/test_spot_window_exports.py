"""The spot window trigger module keeps exporting the market reads and forecasts that moved out of it.

Reading the market moved to ``costaware.adapters.spot_market`` and the forecast of each start to
``costaware.core.spot_forecast``; DAGs, tests and older code import them from the trigger module still.
"""

from __future__ import annotations

import pytest

from costaware.adapters import spot_market
from costaware.core import spot_forecast
from costaware.triggers import spot_window as trigger_module


@pytest.mark.parametrize(
    "name", ["LIVE", "spot_history", "observe_spot", "observe_zones", "observe_market", "forecast_window"]
)
def test_market_reads_are_the_adapters_own(name: str) -> None:
    assert getattr(trigger_module, name) is getattr(spot_market, name)
    assert name in trigger_module.__all__


def test_forecast_starts_is_the_core_one() -> None:
    assert trigger_module.forecast_starts is spot_forecast.forecast_starts


def test_the_trigger_keeps_its_class_path() -> None:
    classpath, _ = trigger_module.SpotWindowTrigger(
        instance_type="m5.large",
        region="us-east-1",
        availability_zone=None,
        prices="live",
        on_demand_usd_per_hour="0.096",
        forecast_starts=[],
        latest_start="2026-01-01T00:00:00+00:00",
    ).serialize()
    assert classpath == "costaware.triggers.spot_window.SpotWindowTrigger"
