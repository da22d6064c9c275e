from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.forecast import PriceForecast, weighted_median
from costaware.core.series import PriceSeries

MONDAY = datetime(2021, 3, 1, tzinfo=timezone.utc)


def hourly(weeks: int, price: callable) -> PriceSeries:  # type: ignore[valid-type]
    points = [(MONDAY + timedelta(hours=h), str(price(h))) for h in range(weeks * 168)]
    return PriceSeries.from_points(points, name="hourly")


def test_constant_history_forecasts_the_constant() -> None:
    s = hourly(2, lambda h: "0.5")
    f = PriceForecast.fit(s, at=MONDAY + timedelta(weeks=2))
    assert f.hourly_usd_per_hour(MONDAY + timedelta(weeks=2), 48) == [Decimal("0.5")] * 48


def test_daily_cycle_is_learned() -> None:
    s = hourly(3, lambda h: 0.2 if h % 24 in (2, 3, 4) else 1.0)
    at = MONDAY + timedelta(weeks=3, hours=12)  # noon, price 1.0, equal to its profile: no persistence pull
    f = PriceForecast.fit(s, at=at)
    night = f.expected_usd_per_hour(MONDAY + timedelta(weeks=3, days=1, hours=3))
    day = f.expected_usd_per_hour(MONDAY + timedelta(weeks=3, days=1, hours=15))
    assert night == Decimal("0.2") and day == Decimal("1.0")
    cheapest = f.minimum_usd_per_hour(at, at + timedelta(hours=20), run_hours=3)
    assert cheapest == Decimal("0.2")  # a 3-hour run starting at 02:00


def test_recent_weeks_weigh_more() -> None:
    s = hourly(4, lambda h: 2.0 if h < 3 * 168 else 1.0)  # the last week is cheaper
    at = MONDAY + timedelta(weeks=4)
    recent = PriceForecast.fit(s, at=at, half_life_weeks=0.5, persistence_hours=0)
    flat = PriceForecast.fit(s, at=at, half_life_weeks=1000, persistence_hours=0)
    # A weighted median: the last week outweighs the three before it only when recency counts.
    assert recent.expected_usd_per_hour(at + timedelta(hours=5)) == Decimal(1)
    assert flat.expected_usd_per_hour(at + timedelta(hours=5)) == Decimal(2)


def test_a_price_spike_does_not_drag_the_hour_up_in_later_weeks() -> None:
    spike_hour = 3 * 168 + 18  # Thursday 18:00 of the last week: a $2,000/MWh-style hour
    s = hourly(4, lambda h: 2000.0 if h == spike_hour else 0.05)
    at = MONDAY + timedelta(weeks=4)
    f = PriceForecast.fit(s, at=at, persistence_hours=0)
    assert f.expected_usd_per_hour(at + timedelta(days=3, hours=18)) == Decimal("0.05")


@pytest.mark.parametrize(
    ("pairs", "median"),
    [
        ([(1.0, 1.0)], 1.0),
        ([(1.0, 1.0), (3.0, 1.0)], 2.0),
        ([(1.0, 1.0), (2.0, 1.0), (1000.0, 1.0)], 2.0),
        ([(5.0, 0.1), (1.0, 1.0), (2.0, 0.2)], 1.0),
        ([(5.0, 3.0), (1.0, 1.0), (2.0, 1.0)], 5.0),
    ],
)
def test_weighted_median(pairs: list[tuple[float, float]], median: float) -> None:
    assert weighted_median(pairs) == median


def test_persistence_pulls_towards_the_present_price_and_fades() -> None:
    points = [(MONDAY + timedelta(hours=h), "1.0") for h in range(2 * 168)]
    points.append((MONDAY + timedelta(weeks=2), "3.0"))  # a jump right now
    s = PriceSeries.from_points(points, name="jump")
    at = MONDAY + timedelta(weeks=2, minutes=30)
    f = PriceForecast.fit(s, at=at, persistence_hours=24)
    soon = f.expected_usd_per_hour(at)
    day_later = f.expected_usd_per_hour(at + timedelta(hours=24))
    assert soon > day_later > Decimal("1.0")
    assert day_later == pytest.approx(Decimal("1.0") + (soon - Decimal("1.0")) / 2, abs=Decimal("0.05"))


def test_forecast_never_reads_the_future() -> None:
    s = hourly(3, lambda h: 1.0 if h < 2 * 168 else 50.0)
    f = PriceForecast.fit(s, at=MONDAY + timedelta(weeks=2) - timedelta(seconds=1), persistence_hours=0)
    assert f.expected_usd_per_hour(MONDAY + timedelta(weeks=2, hours=5)) == Decimal("1.0")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"at": datetime(2021, 3, 20)}, ConfigurationError, "has no time zone"),
        ({"weeks": 0}, ConfigurationError, "weeks must be 1 or more, got 0"),
        ({"half_life_weeks": 0}, ConfigurationError, "half_life_weeks must be > 0"),
        ({"period_hours": 12}, ConfigurationError, "period_hours must be 24 .* or 168 .*, got 12"),
        ({"at": MONDAY - timedelta(days=1)}, PriceNotFoundError, "no price at"),
    ],
)
def test_bad_arguments(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        PriceForecast.fit(hourly(1, lambda h: 1), **{"at": MONDAY + timedelta(days=3), **kwargs})


def test_a_low_price_now_never_forecasts_a_negative_price() -> None:
    # The case that broke CI at 01:27 UTC: 1.00 USD/h with a cheap 0.50 hour at 03:00, 0.30 now. The additive
    # pull (0.30 - 1.00) took the 03:00 forecast to -0.169; the forecast now stops at the lowest price seen.
    points = [(MONDAY + timedelta(hours=h), "0.50" if h % 24 == 3 else "1.00") for h in range(4 * 168)]
    at = MONDAY + timedelta(weeks=4, hours=1, minutes=27)
    points.append((at - timedelta(minutes=1), "0.30"))
    f = PriceForecast.fit(PriceSeries.from_points(points, name="cheap-now"), at=at)
    three_am = f.expected_usd_per_hour(MONDAY + timedelta(weeks=4, hours=3))
    assert three_am == Decimal("0.3")
    assert f.minimum_usd_per_hour(at, at + timedelta(hours=10), run_hours=1) == Decimal("0.3")


# A few price levels far apart (as spot and power prices jump) make the pull large next to the profile.
prices = st.one_of(
    st.sampled_from([Decimal("0"), Decimal("0.3"), Decimal("0.5"), Decimal("1"), Decimal("50")]),
    st.decimals(min_value="0", max_value="50", places=4, allow_nan=False, allow_infinity=False),
)


@settings(max_examples=300, deadline=None)
@given(
    day=st.lists(prices, min_size=24, max_size=24),
    days=st.integers(min_value=1, max_value=21),
    now_price=prices,
    minutes_after=st.integers(min_value=0, max_value=600),
    persistence_hours=st.sampled_from([0.0, 1.0, 6.0, 24.0, 96.0]),
    ahead_hours=st.integers(min_value=0, max_value=200),
)
def test_forecast_stays_within_the_prices_seen(
    day: list[Decimal],
    days: int,
    now_price: Decimal,
    minutes_after: int,
    persistence_hours: float,
    ahead_hours: int,
) -> None:
    # A daily cycle repeated for some days, as real histories have, then any price now.
    history = day * days
    points = [(MONDAY + timedelta(hours=h), str(p)) for h, p in enumerate(history)]
    at = MONDAY + timedelta(hours=len(history), minutes=minutes_after)
    points.append((at, str(now_price)))
    f = PriceForecast.fit(
        PriceSeries.from_points(points, name="any"), at=at, persistence_hours=persistence_hours
    )
    seen = [*history, now_price]
    expected = f.expected_usd_per_hour(at + timedelta(hours=ahead_hours))
    assert expected >= 0
    assert min(seen) - Decimal("0.000001") <= expected <= max(seen) + Decimal("0.000001")
