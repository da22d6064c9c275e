"""Time checks and windows shared by the carbon sources (:mod:`.carbon_recorded`, :mod:`.carbon_live`).

Also where a recorded series ends (:func:`recorded_end`) and how series are joined end to end.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from costaware.core.errors import ConfigurationError
from costaware.core.series import PriceSeries

_HOUR = timedelta(hours=1)


def _utc(instant: datetime, name: str) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ConfigurationError(f"{name} {instant.isoformat()} has no time zone; give it in UTC")
    return instant.astimezone(timezone.utc)


def _hours(hours: int) -> int:
    if not isinstance(hours, int) or hours < 1:
        raise ConfigurationError(f"hours must be a whole number >= 1, got {hours!r}")
    return hours


def _window(series: PriceSeries, start: datetime, end: datetime, *, name: str) -> PriceSeries:
    """The records in force over ``[start, end)`` (the one at or before ``start`` first)."""
    points = series.points
    first = max(i for i, (at, _) in enumerate(points) if at <= start)
    kept = [(at, value) for at, value in points[first:] if at < end]
    return PriceSeries.from_points(kept, name=name)


class _OneRecord(PriceSeries):
    """A one-record file's series, with the step its zone's other files tell (its own is unknown)."""

    __slots__ = ("step",)

    def __init__(self, one: PriceSeries, step: timedelta) -> None:
        super().__init__([one.start], [one.points[0][1]], name=one.name, notes=one.notes)
        self.step = step


def recorded_end(series: PriceSeries) -> datetime:
    """Where a recorded series ends: its last record plus its own step there.

    The step is the time from the record before the last (a one-record file's, the one
    :meth:`RecordedCarbon.zone_files` found it, :class:`_OneRecord`; else an hour): a half-hourly file
    ending 01:30 was taken as covering up to 02:30, supplying half an hour nobody recorded. The last step,
    not the shortest: an import merged from a half-hourly month and an hourly one ends hourly.
    """
    times = series.points[-2:]
    if len(times) == 2:
        return series.last + (times[1][0] - times[0][0])
    return series.last + (series.step if isinstance(series, _OneRecord) else _HOUR)


def _joined(candidates: Sequence[PriceSeries], start: datetime, end: datetime) -> PriceSeries | None:
    """``[start, end)`` from several series end to end (an imported 2024 file after the bundled 2023 year).

    Each hour comes from the first series, in ``candidates``' order, that covers it (up to its last record
    plus its own step, :func:`recorded_end`); None when an hour of the window is in none of them.
    """
    part = _joined_part(candidates, start, end)
    return part[0] if part is not None and part[1] == end else None


def _joined_part(
    candidates: Sequence[PriceSeries], start: datetime, end: datetime
) -> tuple[PriceSeries, datetime] | None:
    """The part of ``[start, end)`` from ``start`` that ``candidates`` cover end to end, and where it stops.

    As :func:`_joined` joins them, up to the first instant none covers; None where none covers ``start``.
    """
    points: list[tuple[datetime, Decimal]] = []
    used: list[str] = []
    ends = [recorded_end(s) for s in candidates]
    at = start
    while at < end:
        covering = [i for i, s in enumerate(candidates) if s.start <= at < ends[i]]
        if not covering:
            break
        first = covering[0]
        series = candidates[first]
        # Up to where it ends, or where a series before it in the order begins.
        until = min([end, ends[first]] + [s.start for s in candidates[:first] if at < s.start])
        part = _window(series, at, until, name=series.name).points
        points += [(max(t, at), value) for t, value in part]
        if series.name not in used:
            used.append(series.name)
        at = until
    if not points:
        return None
    return PriceSeries.from_points(points, name=f"{' + '.join(used)}, recorded"), at
