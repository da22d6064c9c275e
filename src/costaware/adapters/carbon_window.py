"""Time checks and windows shared by the carbon sources (:mod:`.carbon_recorded`, :mod:`.carbon_live`)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

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
