"""The spot price forecast of a later start averages the run's own length, as its carbon intensity does."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from costaware.core.series import PriceSeries
from costaware.core.spot_forecast import forecast_starts
from costaware.core.spot_window import pause_decision

NOW = datetime(2026, 3, 2, 9, tzinfo=timezone.utc)
#: Every day: 0.50 USD/h at 12:00 and 13:00 UTC, 3.00 at 14:00, 1.00 otherwise (the price now too).
DAILY = {12: Decimal("0.50"), 13: Decimal("0.50"), 14: Decimal("3.00")}


class FourWeeks:
    def series(self, instance_type: str, region: str, availability_zone: str | None = None) -> PriceSeries:
        start = NOW - timedelta(weeks=4)
        hours = [start + timedelta(hours=h) for h in range(4 * 7 * 24 + 1)]
        return PriceSeries.from_points(
            [(t, DAILY.get(t.hour, Decimal("1.00"))) for t in hours], name="spot m5.large us-east-1a"
        )


def starts(runtime_hours: str) -> dict[int, Decimal]:
    forecast = forecast_starts(
        FourWeeks(),
        instance_type="m5.large",
        region="us-east-1",
        zones=["us-east-1a"],
        now=NOW,
        latest_start=NOW + timedelta(hours=8),
        runtime_hours=Decimal(runtime_hours),
        history_days=28,
    )
    return {datetime.fromisoformat(at).hour: Decimal(usd) for at, usd in forecast}


def test_a_part_hour_run_is_forecast_over_its_runtime_not_round_whole_hours() -> None:
    # 2.5 hours from 12:00 pay 0.50, 0.50 and half an hour of 3.00: 1.00 a hour. Over round(2.5) = 2 whole
    # hours it was 0.50, the dear half hour left out.
    part = starts("2.5")
    assert part[12] == Decimal("1.000000")
    assert part[11] == Decimal("0.700000")  # 1.00, 0.50, half of 0.50
    assert min(part.values()) == Decimal("0.700000")
    assert starts("2")[12] == Decimal("0.500000")  # whole hours average as they did


def test_a_job_is_not_paused_for_a_later_start_that_only_looks_cheap_for_a_dropped_part_hour() -> None:
    # Running on 2.5 h at 0.65 (1.625 USD) is cheaper than the best later start, 0.70 x (2.5 h + a 5-minute
    # restart) = 1.808; valued at 0.50 for leaving out its dear half hour, it paused the job.
    reason = pause_decision(
        now=NOW,
        usd_per_hour=Decimal("0.65"),
        forecast_starts=[[NOW.replace(hour=h).isoformat(), str(v)] for h, v in starts("2.5").items()],
        latest_resume=NOW + timedelta(hours=8),
        remaining_hours=Decimal("2.5"),
        restart_overhead_minutes=5.0,
        priority="best_effort",
    )
    assert reason is None
