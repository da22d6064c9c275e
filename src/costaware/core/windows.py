"""Allowed time windows ("22:00-06:00" on "mon-fri" in "America/New_York") and DST-correct window math.

A schedule is a set of daily windows in one time zone, open on some days of the week. The day of a window is
the local day on which it *opens*: "22:00-06:00" on "mon-fri" opens Friday 22:00 and closes Saturday 06:00.

Wall-clock times are turned into instants by one rule that holds across daylight-saving changes: a window
opens (or closes) at the first instant at which the local clock shows that time or later. So on the night the
clocks spring forward (02:00 -> 03:00), "02:30" means 03:00 local, the instant the clock jumps past 02:30; on
the night they fall back, "01:30" means the first 01:30 (before the clocks go back). A window that shrinks to
nothing on such a night ("02:00-02:30" on spring-forward night) does not open that night.

Pure: stdlib only; every instant returned is a timezone-aware UTC ``datetime``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MINUTES_PER_DAY = 24 * 60
_CLOCK = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*$")


@dataclass(frozen=True, slots=True)
class DailyWindow:
    """One daily window in local wall-clock minutes after midnight; ``end_minute`` may pass 1440."""

    start_minute: int
    end_minute: int

    @property
    def text(self) -> str:
        """The window as ``"HH:MM-HH:MM"``."""
        return f"{_clock(self.start_minute)}-{_clock(self.end_minute % MINUTES_PER_DAY or self.end_minute)}"

    @property
    def crosses_midnight(self) -> bool:
        """Whether the window closes on the day after it opens."""
        return self.end_minute > MINUTES_PER_DAY


@dataclass(frozen=True, slots=True)
class Window:
    """One occurrence of a window: ``[start, end)`` in UTC."""

    start: datetime
    end: datetime

    @property
    def hours(self) -> float:
        """Length in hours (real elapsed time, so 7 or 9 on DST nights for an 8-hour clock window)."""
        return (self.end - self.start).total_seconds() / 3600

    def __contains__(self, instant: object) -> bool:
        return isinstance(instant, datetime) and self.start <= instant < self.end


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _parse_clock(text: str, *, whole: str, allow_24: bool) -> int:
    match = _CLOCK.match(text)
    if match is None:
        raise ConfigurationError(
            f"window {whole!r}: {text.strip()!r} is not a time of day; write it as HH:MM, e.g. '22:00'"
        )
    hour, minute = int(match.group(1)), int(match.group(2))
    if minute > 59 or hour > 24 or (hour == 24 and (minute or not allow_24)):
        raise ConfigurationError(
            f"window {whole!r}: {text.strip()!r} cannot exist on a clock; hours run 00-23 "
            "(24:00 only as an end), minutes 00-59"
        )
    return hour * 60 + minute


def parse_window(text: str) -> DailyWindow:
    """Parse ``"HH:MM-HH:MM"``; an end at or before the start means the window closes the next day.

    Raises:
        ConfigurationError: not two times, a time that cannot exist ("25:00"), or a window of zero length.
    """
    if not isinstance(text, str) or text.count("-") != 1:
        raise ConfigurationError(f"window {text!r} must look like 'HH:MM-HH:MM', e.g. '22:00-06:00'")
    left, right = text.split("-")
    start = _parse_clock(left, whole=text, allow_24=False)
    end = _parse_clock(right, whole=text, allow_24=True)
    if end == start:
        raise ConfigurationError(
            f"window {text!r} opens and closes at the same time; for a whole day write '00:00-24:00'"
        )
    if end < start:
        end += MINUTES_PER_DAY
    return DailyWindow(start, end)


#: Day names in full: a token names a day when it is the start of one, three letters at least ("thurs").
_FULL_DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def _is_day(token: str) -> bool:
    """Whether ``token`` names a day: ``mon``, ``monday``, ``thurs``; not ``monkey`` or ``sunshine``."""
    return len(token) >= 3 and any(full.startswith(token) for full in _FULL_DAY_NAMES)


def parse_days(text: str | Sequence[str]) -> frozenset[int]:
    """Parse days of the week: ``"mon-fri"``, ``"mon,wed,fri"``, ``"fri-mon"``, ``"daily"`` or a list.

    Returns:
        Weekday numbers, Monday = 0.

    Raises:
        ConfigurationError: an unknown day name or an empty selection.
    """
    parts = [text] if isinstance(text, str) else list(text)
    tokens = [t.strip().lower() for part in parts for t in str(part).split(",") if t.strip()]
    if not tokens:
        raise ConfigurationError(f"days {text!r} selects no day; use e.g. 'mon-fri' or 'daily'")
    days: set[int] = set()
    for token in tokens:
        if token in ("daily", "*", "all", "mon-sun"):
            days.update(range(7))
            continue
        # "mon - fri" was refused as no day, while its window beside it, "22:00 - 06:00", was read.
        ends = [end.strip() for end in token.split("-")]
        if len(ends) > 2 or not all(_is_day(e) for e in ends):
            raise ConfigurationError(
                f"days {text!r}: {token!r} is not a day or a range of days; "
                "use names like 'mon', 'mon-fri', 'sat,sun'"
            )
        first, last = DAY_NAMES.index(ends[0][:3]), DAY_NAMES.index(ends[-1][:3])
        day = first
        days.add(day)
        while day != last:  # ranges wrap around the week: "fri-mon" is fri, sat, sun, mon
            day = (day + 1) % 7
            days.add(day)
    return frozenset(days)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``.

    Raises:
        ConfigurationError: unknown zone name.
    """
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ConfigurationError(
            f"unknown time zone {name!r}{zone_name_hint(str(name))}; use an IANA name such as "
            "'America/New_York' or 'UTC'"
        ) from e


#: A fixed offset as people type it (``UTC+1``, ``GMT-05:00``, or bare as an ISO time writes it: ``+01:00``),
#: which the tz database does not name so.
_TYPED_OFFSET = re.compile(r"(?i)^(?:(?:UTC|GMT)\s*)?([+-])\s*(\d{1,2})(?::?(\d{2}))?$")
#: The tz database's fixed offsets, whose sign is POSIX's: ``Etc/GMT+1`` is one hour *behind* UTC.
_POSIX_OFFSET = re.compile(r"(?i)^(?:Etc/)?GMT([+-])(\d{1,2})$")


def _etc_gmt_name(sign: str, hours: str) -> str:
    """The tz database's name of UTC``<sign><hours>``: ``Etc/GMT-1`` for UTC+1 (POSIX's inverted sign)."""
    return f"Etc/GMT{'-' if sign == '+' else '+'}{int(hours)}"


def _offset_hint(sign: str, hours: str, minutes: str | None) -> str:
    """`` (UTC+1 is the IANA zone 'Etc/GMT-1' ...)`` for a typed fixed offset."""
    typed = f"UTC{sign}{int(hours):02d}:{minutes or '00'}"
    inverted = _etc_gmt_name(sign, hours)
    if not int(minutes or 0) and not int(hours):
        return f" ({typed} is the IANA zone 'UTC')"
    if int(minutes or 0) or inverted not in _available_zones():
        return f" (no IANA zone is a fixed {typed}: give the region's, which follows its summer time too)"
    return (
        f" ({typed} is the IANA zone {inverted!r}: the Etc/GMT names invert the sign; or give the region's, "
        "e.g. 'Europe/Berlin', which follows its summer time too)"
    )


def _available_zones() -> set[str]:
    from zoneinfo import available_timezones

    return available_timezones()


def inverted_offset_note(name: str) -> str | None:
    """What an ``Etc/GMT+1``-style zone means (UTC-01:00: POSIX's inverted sign), or None for other zones.

    Accepted as it is a valid zone, but most who type ``Etc/GMT+1`` mean UTC+1: their day starts two hours
    off.
    """
    found = _POSIX_OFFSET.match(str(name).strip())
    if found is None or int(found.group(2)) == 0:
        return None
    sign, hours = found.groups()
    actual = f"UTC{'-' if sign == '+' else '+'}{int(hours):02d}:00"
    meant = _etc_gmt_name(sign, hours)
    return (
        f"time zone {name!r} is {actual} (the Etc/GMT names invert the sign, POSIX style); for "
        f"UTC{sign}{int(hours):02d}:00 give {meant!r}"
    )


def zone_name_hint(name: str) -> str:
    """`` (did you mean 'America/New_York'?)`` for a misspelt zone ("America/NewYork"), else "".

    Read only on the error path: listing the zones reads the tz database's folder.
    """
    import difflib
    from zoneinfo import available_timezones

    offset = _TYPED_OFFSET.match(name.strip())
    if offset is not None:
        return _offset_hint(*offset.groups())
    known = sorted(available_timezones())
    by_case = {zone.lower(): zone for zone in known}
    close = [by_case[name.lower()]] if name.lower() in by_case else []
    close = close or difflib.get_close_matches(name, known, n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""


def require_aware(instant: datetime, *, name: str = "time") -> datetime:
    """Return ``instant`` in UTC, or raise when it has no time zone (naive times are ambiguous)."""
    if not isinstance(instant, datetime):
        raise ConfigurationError(f"{name} must be a datetime, got {type(instant).__name__} {instant!r}")
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ConfigurationError(
            f"{name} {instant.isoformat()} has no time zone; pass an aware datetime, e.g. with tzinfo=UTC"
        )
    return instant.astimezone(timezone.utc)


def local_to_utc(day: date, minute_of_day: int, tz: ZoneInfo) -> datetime:
    """The first instant at which the clock in ``tz`` shows ``day`` + ``minute_of_day`` minutes or later.

    ``minute_of_day`` may pass 1440 (it then falls on a later day). Ambiguous local times (clocks going back)
    give their first occurrence; local times that do not exist (clocks going forward) give the instant of the
    jump, the first one whose wall clock is past them.
    """
    wall = datetime.combine(day, time()) + timedelta(minutes=minute_of_day)
    for fold in (0, 1):  # fold=0 is the earlier reading of an ambiguous time
        as_utc = wall.replace(tzinfo=tz, fold=fold).astimezone(timezone.utc)
        if as_utc.astimezone(tz).replace(tzinfo=None) == wall:
            return as_utc
    # In a gap: search between the two readings for the first instant whose wall clock is >= ``wall``.
    low = wall.replace(tzinfo=tz, fold=1).astimezone(timezone.utc)
    high = wall.replace(tzinfo=tz, fold=0).astimezone(timezone.utc)
    low, high = min(low, high), max(low, high)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(tz).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return high.replace(microsecond=0)


@dataclass(frozen=True, slots=True)
class WindowSchedule:
    """Daily windows in one time zone, open on some days of the week.

    Build with :meth:`parse`; ask for occurrences with :meth:`next_window`, :meth:`window_at`,
    :meth:`previous_window` and :meth:`windows_between`.
    """

    windows: tuple[DailyWindow, ...]
    days: frozenset[int]
    timezone: str

    @classmethod
    def parse(
        cls, windows: str | Sequence[str], days: str | Sequence[str] = "daily", timezone: str = "UTC"
    ) -> WindowSchedule:
        """Validate and build a schedule.

        Args:
            windows: One window or a list, each ``"HH:MM-HH:MM"`` in local time.
            days: The days on which windows open (see :func:`parse_days`).
            timezone: IANA time zone of the wall-clock times.

        Raises:
            ConfigurationError: a malformed or impossible window, overlapping windows, an unknown day or zone.
        """
        texts = [windows] if isinstance(windows, str) else list(windows)
        if not texts:
            raise ConfigurationError("windows is empty; give at least one, e.g. ['22:00-06:00']")
        parsed = sorted((parse_window(t) for t in texts), key=lambda w: w.start_minute)
        for i, first in enumerate(parsed):
            for second in parsed[i + 1 :]:
                if _overlap(first, second):
                    raise ConfigurationError(
                        f"windows {first.text!r} and {second.text!r} overlap; merge them into one window"
                    )
        zone(timezone)
        return cls(tuple(parsed), parse_days(days), timezone)

    @property
    def tz(self) -> ZoneInfo:
        """The schedule's time zone."""
        return zone(self.timezone)

    def describe(self) -> str:
        """Readable text, e.g. ``"22:00-06:00 mon-fri (America/New_York)"``."""
        return f"{', '.join(w.text for w in self.windows)} {describe_days(self.days)} ({self.timezone})"

    def _occurrences_from(self, local_day: date) -> Iterator[Window]:
        """Occurrences opening on ``local_day`` and after, in order of opening (skips empty DST nights)."""
        tz = self.tz
        day = local_day
        while True:
            if day.weekday() in self.days:
                for w in self.windows:
                    start = local_to_utc(day, w.start_minute, tz)
                    end = local_to_utc(day, w.end_minute, tz)
                    if end > start:
                        yield Window(start, end)
            day += timedelta(days=1)

    def _occurrences_back_from(self, local_day: date) -> Iterator[Window]:
        tz = self.tz
        day = local_day
        while True:
            if day.weekday() in self.days:
                for w in reversed(self.windows):
                    start = local_to_utc(day, w.start_minute, tz)
                    end = local_to_utc(day, w.end_minute, tz)
                    if end > start:
                        yield Window(start, end)
            day -= timedelta(days=1)

    def next_window(self, after: datetime, *, include_open: bool = False) -> Window:
        """The first occurrence opening at or after ``after``; with ``include_open``, one still open then."""
        after = require_aware(after, name="after")
        first_day = after.astimezone(self.tz).date() - timedelta(days=2)
        for window in self._occurrences_from(first_day):
            if window.start >= after or (include_open and window.end > after):
                return window
        raise AssertionError("unreachable: the occurrence generator is infinite")  # pragma: no cover

    def window_at(self, instant: datetime) -> Window | None:
        """The occurrence open at ``instant``, if any."""
        instant = require_aware(instant, name="instant")
        window = self.next_window(instant, include_open=True)
        return window if instant in window else None

    def previous_window(self, before: datetime) -> Window:
        """The last occurrence that closed at or before ``before``."""
        before = require_aware(before, name="before")
        last_day = before.astimezone(self.tz).date() + timedelta(days=1)
        for window in self._occurrences_back_from(last_day):
            if window.end <= before:
                return window
        raise AssertionError("unreachable: the occurrence generator is infinite")  # pragma: no cover

    def windows_between(self, start: datetime, end: datetime) -> list[Window]:
        """Occurrences that open in ``[start, end)``."""
        start, end = require_aware(start, name="start"), require_aware(end, name="end")
        found: list[Window] = []
        for window in self._occurrences_from(start.astimezone(self.tz).date() - timedelta(days=2)):
            if window.start >= end:
                return found
            if window.start >= start:
                found.append(window)
        raise AssertionError("unreachable")  # pragma: no cover


def _overlap(first: DailyWindow, second: DailyWindow) -> bool:
    for shift in (-MINUTES_PER_DAY, 0, MINUTES_PER_DAY):
        start, end = second.start_minute + shift, second.end_minute + shift
        if start < first.end_minute and first.start_minute < end:
            return True
    return False


def describe_days(days: frozenset[int]) -> str:
    """``"daily"``, ``"mon-fri"``, ``"sat,sun"`` or a comma list of names."""
    if len(days) == 7:
        return "daily"
    ordered = sorted(days)
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
        return f"{DAY_NAMES[ordered[0]]}-{DAY_NAMES[ordered[-1]]}"
    return ",".join(DAY_NAMES[d] for d in ordered)


def power_hourly_values(
    *,
    objective: Objective,
    power_kw: float,
    electricity_usd_per_mwh: Sequence[float] | None,
    g_co2e_per_kwh: Sequence[float] | None,
    hours: int,
) -> list[float]:
    """The objective's value of each of ``hours`` hours of a machine drawing ``power_kw`` (pure).

    Per hour: electricity price x power (0 without prices) + carbon price x intensity x power, in the
    objective's unit (:meth:`~costaware.core.carbon.Objective.hourly_value`).

    Raises:
        ConfigurationError: the objective needs an intensity and none was given.
    """
    values: list[float] = []
    for i in range(hours):
        usd = float(electricity_usd_per_mwh[i]) * power_kw / 1000 if electricity_usd_per_mwh else 0.0
        intensity = float(g_co2e_per_kwh[i]) if g_co2e_per_kwh is not None else None
        values.append(objective.hourly_value(usd, power_kw, intensity))
    return values


def cheapest_start(window: Window, run_hours: float, hourly_values: Sequence[float]) -> datetime:
    """The whole-hour start inside ``window`` of the run of ``run_hours`` with the lowest summed value.

    ``hourly_values[i]`` is the value of the hour from ``window.start + i`` hours. A run that does not fit in
    the window starts when it opens; ties go to the earliest start (pure).
    """
    span = max(1, math.ceil(run_hours))
    starts = int(window.hours) - span + 1
    if starts <= 1 or len(hourly_values) < span:
        return window.start
    count = min(starts, len(hourly_values) - span + 1)
    # Rounded so float noise does not move a tie off the earliest start.
    best = min(range(count), key=lambda i: (round(sum(hourly_values[i : i + span]), 9), i))
    return window.start + timedelta(hours=best)
