from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.windows import WindowSchedule, local_to_utc, parse_days, parse_window, zone

NY = zone("America/New_York")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("text", "start", "end", "crosses"),
    [("22:00-06:00", 1320, 1800, True), ("09:30-17:00", 570, 1020, False), ("00:00-24:00", 0, 1440, False)],
)
def test_parse_window(text: str, start: int, end: int, crosses: bool) -> None:
    window = parse_window(text)
    assert (window.start_minute, window.end_minute, window.crosses_midnight) == (start, end, crosses)
    assert window.text == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("25:00-03:00", "'25:00' cannot exist"),
        ("22:60-03:00", "'22:60' cannot exist"),
        ("24:00-03:00", "'24:00' cannot exist"),
        ("10:00-10:00", "opens and closes at the same time"),
        ("10:00", "must look like 'HH:MM-HH:MM'"),
        ("ab:00-03:00", "'ab:00' is not a time of day"),
    ],
)
def test_impossible_windows_name_the_value(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_window(text)


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("mon-fri", {0, 1, 2, 3, 4}),
        ("sat,sun", {5, 6}),
        ("fri-mon", {4, 5, 6, 0}),
        ("daily", set(range(7))),
        (["Monday", "wed"], {0, 2}),
        ("thurs-saturday", {3, 4, 5}),
        # Spaces around the dash, as a window takes them ("22:00 - 06:00"): it was "not a day".
        ("mon - fri", {0, 1, 2, 3, 4}),
        ("fri -mon, wed", {4, 5, 6, 0, 2}),
    ],
)
def test_parse_days(text: str | list[str], days: set[int]) -> None:
    assert parse_days(text) == frozenset(days)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mon-frx", "'mon-frx' is not a day"),
        ("", "selects no day"),
        ("monkey", "'monkey' is not a day"),  # its first three letters are a day's: not enough
        ("sunshine", "'sunshine' is not a day"),
    ],
)
def test_bad_days(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_days(text)


@pytest.mark.parametrize(
    ("day", "minute", "expected"),
    [
        (date(2025, 6, 1), 22 * 60, "2025-06-02T02:00:00"),  # EDT
        (date(2025, 3, 9), 150, "2025-03-09T07:00:00"),  # 02:30 does not exist: the 03:00 EDT jump
        (date(2025, 11, 2), 90, "2025-11-02T05:30:00"),  # 01:30 happens twice: the first (EDT)
        (date(2025, 3, 8), 24 * 60 + 6 * 60, "2025-03-09T10:00:00"),  # next day's 06:00, already EDT
    ],
)
def test_local_to_utc_across_dst(day: date, minute: int, expected: str) -> None:
    assert local_to_utc(day, minute, NY) == utc(expected)


def test_spring_forward_and_fall_back_window_lengths() -> None:
    schedule = WindowSchedule.parse("22:00-06:00", "daily", "America/New_York")
    spring = schedule.next_window(utc("2025-03-08T12:00:00"))
    fall = schedule.next_window(utc("2025-11-01T12:00:00"))
    assert spring.hours == 7 and fall.hours == 9
    assert schedule.window_at(utc("2025-03-09T09:59:00")) == spring
    assert schedule.window_at(utc("2025-03-09T10:00:00")) is None


def test_window_that_vanishes_on_spring_night_is_skipped() -> None:
    schedule = WindowSchedule.parse("02:00-02:30", "daily", "America/New_York")
    windows = schedule.windows_between(utc("2025-03-08T00:00:00"), utc("2025-03-11T00:00:00"))
    local_days = [w.start.astimezone(NY).date() for w in windows]
    assert local_days == [date(2025, 3, 8), date(2025, 3, 10)]


def test_previous_and_next_windows_on_weekdays() -> None:
    schedule = WindowSchedule.parse(["22:00-06:00"], "mon-fri", "UTC")
    saturday_noon = utc("2025-06-07T12:00:00")
    assert schedule.previous_window(saturday_noon).start == utc("2025-06-06T22:00:00")  # Friday's
    assert schedule.next_window(saturday_noon).start == utc("2025-06-09T22:00:00")  # Monday's
    assert schedule.next_window(utc("2025-06-10T01:00:00"), include_open=True).start == utc(
        "2025-06-09T22:00:00"
    )


def test_overlapping_windows_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="'05:00-07:00' and '22:00-06:00' overlap"):
        WindowSchedule.parse(["22:00-06:00", "05:00-07:00"])


def test_naive_times_are_rejected() -> None:
    schedule = WindowSchedule.parse("22:00-06:00")
    with pytest.raises(ConfigurationError, match="2025-01-01T00:00:00 has no time zone"):
        schedule.next_window(datetime(2025, 1, 1))


def test_describe() -> None:
    schedule = WindowSchedule.parse(["22:00-06:00"], "mon-fri", "Europe/Berlin")
    assert schedule.describe() == "22:00-06:00 mon-fri (Europe/Berlin)"
    assert all(
        w.hours == 8 for w in schedule.windows_between(utc("2025-01-01T00:00:00"), utc("2025-01-08T00:00:00"))
    )
    assert (
        len(
            schedule.windows_between(
                utc("2025-01-01T00:00:00"), utc("2025-01-01T00:00:00") + timedelta(days=7)
            )
        )
        == 5
    )
