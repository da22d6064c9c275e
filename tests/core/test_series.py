from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware.core.errors import ConfigurationError, InvalidPriceDataError, PriceNotFoundError
from costaware.core.series import AvailabilityTrace, PriceSeries

T0 = datetime(2021, 3, 1, tzinfo=timezone.utc)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def test_step_function_holds_until_the_next_record() -> None:
    s = PriceSeries.from_points([(at(0), "1.0"), (at(2), "3.0")], name="s")
    assert s.price_at(at(1.99)) == Decimal("1.0")
    assert s.price_at(at(2)) == Decimal("3.0")
    assert s.price_at(at(100)) == Decimal("3.0")
    assert s.cost_usd(at(1), at(3)) == Decimal("4.000000")  # 1 h at 1.0 + 1 h at 3.0
    assert s.mean_usd_per_hour(at(1), at(3)) == Decimal("2.000000")
    assert s.tick_means(at(1.5), timedelta(hours=1), 3) == pytest.approx([2.0, 3.0, 3.0])


def test_unsorted_records_are_sorted_and_said_so() -> None:
    s = PriceSeries.from_points([(at(2), "2"), (at(0), "1"), (at(1), "1.5")], name="s")
    assert [p for _, p in s.points] == [Decimal(1), Decimal("1.5"), Decimal(2)]
    assert s.notes == ("sorted 3 records by time (1 were out of order)",)


def test_exact_duplicates_are_dropped_and_conflicts_rejected() -> None:
    s = PriceSeries.from_points([(at(0), "1"), (at(0), "1.0"), (at(1), "2")], name="s")
    assert len(s) == 2 and "dropped 1 duplicate record(s)" in s.notes
    with pytest.raises(InvalidPriceDataError, match=r"two prices at 2021-03-01T00:00:00\+00:00: 1 and 2"):
        PriceSeries.from_points([(at(0), "1"), (at(0), "2")], name="s")


@pytest.mark.parametrize(
    ("points", "kwargs", "message"),
    [
        # It added "check the file and its filters", of series that came from no file.
        ([], {}, r"^price series 's' has no records: give it at least one \(time, price\) record$"),
        (
            [],
            {"value_name": "intensity"},
            r"^intensity series 's' has no records: give it at least one \(time, intensity\) record$",
        ),
        ([(datetime(2021, 3, 1), "1")], {}, "2021-03-01T00:00:00 has no time zone"),
        # As written, where Python prints it back otherwise: it was told as "2021-03-01T00:00:00".
        (
            [("2021-03-01 00:00", "1")],
            {},
            r"record 0: time '2021-03-01 00:00' has no time zone; write it with one, e.g. "
            "'2021-03-01T00:00:00Z'",
        ),
        ([("2021-03-01T00:00:00", "1")], {}, r"record 0: time 2021-03-01T00:00:00 has no time zone"),
        ([("yesterday", "1")], {}, "time 'yesterday' is not ISO-8601"),
        ([(T0, "abc")], {}, "price 'abc' is not a number"),
        ([(T0, "-1")], {}, r"price '-1' must be a finite number >= 0 \(USD per hour\)"),
        ([(T0, "NaN")], {}, r"price 'NaN' must be a finite number >= 0 \(USD per hour\)"),
        # The unit the file's values are in: the message named none.
        (
            [(T0, "-5")],
            {"value_name": "intensity"},
            r"intensity '-5' must be a finite number >= 0 \(gCO2e per kWh\)",
        ),
        (
            [(T0, "inf")],
            {"allow_negative": True, "unit": "USD per MWh"},
            r"price 'inf' must be a finite number \(USD per MWh\)",
        ),
        (
            [(at(0), "1"), (at(3), "1")],
            {"max_gap": timedelta(hours=1)},
            r"no price from .* \(3 h; records must be at most 1:00:00 apart\)",
        ),
    ],
)
def test_bad_series_are_rejected_with_the_value(points: list, kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidPriceDataError, match=message):
        PriceSeries.from_points(points, name="s", **kwargs)


@pytest.mark.parametrize(
    ("written", "hint"),
    [
        ("$3.06", " ('3.06'?)"),
        ("3.06/h", " ('3.06'?)"),
        ("3.06 USD", " ('3.06'?)"),
        ("3,06", " ('3.06'?)"),  # a decimal comma
        ("1,200", ""),  # thousands grouped, or a decimal comma: no guess
        ("abc", ""),
        # Another currency or unit: its bare number is not the USD-per-hour price ("306¢" is 100x).
        ("€3.06", ""),
        ("306¢", ""),
        ("3.06 EUR/h", ""),
    ],
)
def test_a_price_that_is_no_number_says_how_to_write_it(written: str, hint: str) -> None:
    # "price '$3.06' is not a number" said what was wrong, not what to write instead.
    with pytest.raises(InvalidPriceDataError) as raised:
        PriceSeries.from_points([(T0, written)], name="s")
    assert str(raised.value).endswith(
        f"price {written!r} is not a number: write the USD per hour as digits with a decimal point, without "
        f"a unit or currency sign{hint}"
    )


@pytest.mark.parametrize(
    ("written", "hint"),
    [
        ("120 g", " ('120'?)"),
        ("120 gCO2e/kWh", " ('120'?)"),
        ("0.35 kg", ""),  # kilograms: the bare number is a thousandth of the grams per kWh
        ("$120", ""),
    ],
)
def test_an_intensity_that_is_no_number_names_its_unit_and_guesses_only_from_it(
    written: str, hint: str
) -> None:
    # "intensity '0.35 kg'" was offered '0.35' as the gCO2e per kWh, and no message named the unit.
    with pytest.raises(InvalidPriceDataError) as raised:
        PriceSeries.from_points([(T0, written)], name="s", value_name="intensity")
    assert str(raised.value).endswith(
        f"intensity {written!r} is not a number: write the gCO2e per kWh as digits with a decimal point, "
        f"without a unit or currency sign{hint}"
    )


def test_a_record_time_that_is_no_iso_time_says_how_to_write_it() -> None:
    # "time '01/11/2026 00:00' is not ISO-8601" named the value, not the form a record takes.
    with pytest.raises(InvalidPriceDataError) as raised:
        PriceSeries.from_points([("01/11/2026 00:00", "1")], name="s")
    assert str(raised.value).endswith(
        "time '01/11/2026 00:00' is not ISO-8601: write it year first, with a time zone, e.g. "
        "'2026-01-31T06:00:00Z'"
    )


def test_negative_prices_only_when_allowed() -> None:
    s = PriceSeries.from_points([(at(0), "-10.5")], name="power", allow_negative=True)
    assert s.price_at(at(0)) == Decimal("-10.5")


def test_no_price_before_the_first_record() -> None:
    s = PriceSeries.from_points([(at(1), "1")], name="s")
    with pytest.raises(PriceNotFoundError, match="the series starts 2021-03-01T01:00:00"):
        s.price_at(at(0))
    with pytest.raises(PriceNotFoundError):
        s.until(at(0.5))
    assert len(s.until(at(1))) == 1


def test_pointwise_min_across_zones() -> None:
    a = PriceSeries.from_points([(at(0), "1"), (at(2), "3")], name="a")
    b = PriceSeries.from_points([(at(1), "2")], name="b")
    m = PriceSeries.pointwise_min([a, b], name="min")
    assert m.start == at(1)
    assert [(t, p) for t, p in m.points] == [(at(1), Decimal(1)), (at(2), Decimal(2))]


def test_availability_trace() -> None:
    trace = AvailabilityTrace([1, 0, 1], gap_seconds=600, start=T0, name="t")
    assert trace.ticks(T0, timedelta(minutes=10), 3) == [True, False, True]
    assert trace.at(T0 + timedelta(minutes=15)) is False
    assert trace.share_available == pytest.approx(2 / 3)
    with pytest.raises(PriceNotFoundError, match="covers 2021-03-01T00:00:00"):
        trace.ticks(T0, timedelta(minutes=10), 4)


@pytest.mark.parametrize(
    ("samples", "kwargs", "error", "message"),
    [
        ([], {}, InvalidPriceDataError, "is empty"),
        ([1, 2], {}, InvalidPriceDataError, "sample 1 is 2"),
        ([1], {"gap_seconds": 0}, InvalidPriceDataError, "gap_seconds must be > 0"),
        ([1], {"start": datetime(2021, 1, 1)}, ConfigurationError, "has no time zone"),
    ],
)
def test_bad_traces(samples: list, kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        AvailabilityTrace(samples, **{"gap_seconds": 600, "start": T0, "name": "t", **kwargs})
