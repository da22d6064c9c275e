"""The remote training's price watch pauses on its objective: the trigger passes it to the pause rule."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from costaware.core.carbon import Objective
from costaware.triggers.remote_training import price_event

NOW = datetime(2023, 3, 9, 12, tzinfo=timezone.utc)
WATCH = {
    "mode": "pause",
    "latest_resume": (NOW + timedelta(hours=10)).isoformat(),
    "remaining_hours": "2",
    "restart_overhead_minutes": 5.0,
    "priority": "normal",
    "on_demand_usd_per_hour": "3.00",
}


def event(objective: Objective | None, starts: list[list[str]], g_co2e_per_kwh: float | None) -> object:
    return price_event(
        WATCH,
        {"k": "v"},
        now=NOW,
        usd_per_hour=Decimal("1.00"),
        available=True,
        source="recorded",
        forecast_starts=starts,
        objective=objective,
        power_kw=0.5,
        g_co2e_per_kwh=g_co2e_per_kwh,
    )


def test_a_dirty_hour_pauses_on_carbon_where_a_flat_price_runs_on() -> None:
    later = (NOW + timedelta(hours=3)).isoformat()
    # The price is flat: on cost the job runs on.
    assert event(None, [[later, "1.00"]], None) is None
    assert event(Objective.parse("cost"), [[later, "1.00"]], None) is None
    # On carbon the value now is 0.5 kW x 400 g/kWh = 0.2 kg/h against 0.05 kg/h three hours later.
    paused = event(Objective.parse("carbon"), [[later, "0.05"]], 400.0)
    assert isinstance(paused, dict) and paused["pause"] and paused["state"] == {"k": "v"}
