"""The remote training's pause watch on carbon values running on over the work left, as it values a resume."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from spot_history import now, write_history

from costaware.triggers.remote_price_watch import watch_event

pytestmark = pytest.mark.usefixtures("clock")


def watch(tmp_path: Path, carbon: Path, mode: str) -> dict[str, Any]:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00", cheap_hour_utc=(now().hour + 12) % 24)
    return {
        "objective": "carbon",
        "carbon": str(carbon),
        "mode": mode,
        "observe": {
            "availability_zones": None,
            "zone_availability": None,
            "availability_zone": None,
            "availability": None,
            "prices": str(prices),
            "instance_type": "p3.2xlarge",
            "region": "us-east-1",
            "aws_conn_id": None,
            "ttl_seconds": 300.0,
            "products": ["Linux/UNIX"],
            "availability_start": None,
        },
        "on_demand_usd_per_hour": "3.06",
        "history_days": 28,
        "latest_resume": (now() + timedelta(hours=10)).isoformat(),
        "remaining_hours": "3",
        "restart_overhead_minutes": 5.0,
        "priority": "best_effort",
    }


def test_a_clean_hour_before_dirty_ones_does_not_keep_a_job_running_through_them(tmp_path: Path) -> None:
    # Now 100 gCO2e/kWh, the next two hours 500, then 300: the 3 hours left, run on from now, average
    # 333-400 against 300 for a resume in 3 hours (and a 5-minute restart). Valued at the instant (100),
    # running on looked cleanest, and the job ran on through the dirty hours.
    carbon = tmp_path / "made-up.csv"
    hour = now().replace(minute=0, second=0)
    lines = ["timestamp_utc,g_co2eq_per_kwh_lca\n"]
    for h in range(-48, 49):
        value = {0: 100, 1: 500, 2: 500}.get(h, 300)
        lines.append(f"{(hour + timedelta(hours=h)).strftime('%Y-%m-%dT%H:%M:%SZ')},{value}\n")
    carbon.write_text("".join(lines))
    paused = watch_event(watch(tmp_path, carbon, "pause"), {"k": "v"}, now=now())
    assert paused is not None and "kg CO2e/hour now" in paused["pause"]
    # A paused job is not resumed into the dirty hours either: it waits for the start at 300.
    assert watch_event(watch(tmp_path, carbon, "resume"), {"k": "v"}, now=now()) is None
