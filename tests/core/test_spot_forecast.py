"""The hourly series a decision weighs: the records where they cover the hours, else a typical year."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware.core.series import PriceSeries
from costaware.core.spot_forecast import hourly_series


def _year_of_months(start: datetime) -> PriceSeries:
    """A year of hourly records from ``start`` whose value is the month: March's hours are all 3."""
    hours = [start + timedelta(hours=h) for h in range(366 * 24)]
    return PriceSeries.from_points([(t, Decimal(t.month)) for t in hours], name="months")


@pytest.mark.parametrize(
    ("year_from", "day", "month"),
    [
        # a year starting in July spans two calendar years: March is in the second (it got June's profile)
        (datetime(2023, 7, 1, tzinfo=timezone.utc), datetime(2026, 3, 10, tzinfo=timezone.utc), 3),
        (datetime(2023, 7, 1, tzinfo=timezone.utc), datetime(2026, 9, 10, tzinfo=timezone.utc), 9),
        (
            datetime(2023, 7, 1, tzinfo=timezone.utc),
            datetime(2022, 2, 1, tzinfo=timezone.utc),
            2,
        ),  # before it
        (datetime(2023, 1, 1, tzinfo=timezone.utc), datetime(2026, 11, 24, tzinfo=timezone.utc), 11),
    ],
)
def test_a_year_of_records_stands_in_for_the_same_date_of_another_year(
    year_from: datetime, day: datetime, month: int
) -> None:
    assert hourly_series(_year_of_months(year_from), day, 3) == [float(month)] * 3
