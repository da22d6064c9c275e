"""Expected price for each hour ahead, from the price history known now.

The model is deliberately simple, so a person can check it by hand:

1. **Hour-of-day profile.** Take the last ``weeks`` weeks of history before the forecast time ``at``, cut it
   into whole hours and take each hour's time-weighted mean price. Each hour of the day (in ``timezone``;
   ``period_hours=168`` makes it hour of the week, Monday 00:00 first) gets the **weighted median** of its
   observations, weight ``0.5 ** (age_weeks / half_life_weeks)``, so recent days count more: yesterday twice
   as much as the same hour a week earlier with the default half-life of one week. A median, not a mean: one
   $2,000/MWh hour does not drag the expected price of that hour on every later day up with it (it moves the
   median at most to the next observation). Four weeks give 28 observations per hour of the day, enough for a
   median; an hour-of-week slot would have four, and its recency-weighted median would be little more than
   "the same hour last week". A slot with no observation takes the weighted median of all hours.
2. **Persistence.** Prices move slowly, so the present says more about the next hours than the profile does:
   the gap between the price in force at ``at`` and the profile's value for that hour is added to the forecast
   and fades with a half-life of ``persistence_hours``.

3. **Bounds.** The forecast stays within the range of prices seen: the lowest and highest hourly mean of the
   history and the price in force at ``at``. The additive pull alone can leave that range (a price of 0.30
   now, in an hour whose profile is 1.00, pulls a cheap 0.50 hour 0.70 down, to a negative price); a
   forecast below anything ever observed would make a sensor wait for a price that cannot come.

So ``expected(t) = clamp(profile[slot(t)] + (price(at) - profile[slot(at)]) * 0.5 ** (h / half_life))``
where ``h`` is the number of hours from ``at`` to ``t``, ``half_life`` is ``persistence_hours`` and ``clamp``
bounds the value to the observed range.

A daily electricity cycle shows up in the profile; a spot price that drifts shows up in the persistence term.
The forecast never looks at prices after ``at``. Values are computed with floats (thousands of hours per fit)
and returned as ``Decimal`` rounded to a micro-dollar by the public ``*_usd*`` methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from costaware.core.errors import ConfigurationError
from costaware.core.series import PriceSeries
from costaware.core.windows import require_aware, zone

HOURS_PER_WEEK = 168
_HOUR = timedelta(hours=1)
_MICRO = Decimal("0.000001")


def _slot(instant: datetime, tz: ZoneInfo) -> int:
    local = instant.astimezone(tz)
    return local.weekday() * 24 + local.hour


def weighted_median(pairs: Sequence[tuple[float, float]]) -> float:
    """The value with half of the total weight on each side (the two middle values' mean on an exact tie).

    One huge value moves it no further than to the next observation, where it would drag a mean anywhere.

    Args:
        pairs: ``(value, weight)`` with weights > 0; not empty.
    """
    ordered = sorted(pairs)
    half = sum(w for _, w in ordered) / 2
    running = 0.0
    for i, (value, weight) in enumerate(ordered):
        running += weight
        if running > half * (1 + 1e-12):
            return value
        if running >= half * (1 - 1e-12) and i + 1 < len(ordered):
            return (value + ordered[i + 1][0]) / 2
    return ordered[-1][0]


def _usd(value: float) -> Decimal:
    return Decimal(repr(value)).quantize(_MICRO)


@dataclass(frozen=True, slots=True)
class PriceForecast:
    """A fitted forecast; build it with :meth:`fit`.

    Attributes:
        profile: Expected USD/hour per hour of the week (168 values, Monday 00:00 first, in ``timezone``; a
            daily profile repeats each day).
        now_usd_per_hour: The price in force at ``fitted_at``.
        fitted_at: The forecast time; no price after it was used.
        persistence_hours: Half-life of the present price's pull on the forecast.
        timezone: Zone of the hour-of-week slots.
        observed_hours: Hours of history that went into the profile.
        floor_usd_per_hour: Lowest price observed (hourly means and the price now); no forecast is lower.
        ceiling_usd_per_hour: Highest price observed; no forecast is higher.
    """

    profile: tuple[float, ...]
    now_usd_per_hour: float
    fitted_at: datetime
    persistence_hours: float
    timezone: str
    observed_hours: int
    floor_usd_per_hour: float
    ceiling_usd_per_hour: float

    @classmethod
    def fit(
        cls,
        series: PriceSeries,
        *,
        at: datetime,
        weeks: int = 4,
        half_life_weeks: float = 1.0,
        persistence_hours: float = 24.0,
        timezone: str = "UTC",
        period_hours: int = 24,
    ) -> PriceForecast:
        """Fit the profile on the ``weeks`` weeks of ``series`` before ``at``.

        Args:
            series: Price history (records after ``at`` are ignored).
            at: Forecast time (aware).
            weeks: How many weeks of history the profile uses.
            half_life_weeks: Age, in weeks, at which an observation's weight halves.
            persistence_hours: Half-life, in hours, of the present price's pull (0 turns it off).
            timezone: Zone of the hour slots (local time for electricity's daily cycle).
            period_hours: 24 for an hour-of-day profile (the default), 168 for hour-of-week.

        Raises:
            ConfigurationError: a naive ``at`` or a non-positive ``weeks``/``half_life_weeks``.
            PriceNotFoundError: ``series`` has no price at or before ``at``.
        """
        at = require_aware(at, name="forecast time")
        if weeks < 1:
            raise ConfigurationError(f"weeks must be 1 or more, got {weeks!r}")
        if period_hours not in (24, HOURS_PER_WEEK):
            raise ConfigurationError(
                f"period_hours must be 24 (hour of day) or 168 (hour of week), got {period_hours!r}"
            )
        if half_life_weeks <= 0 or persistence_hours < 0:
            raise ConfigurationError(
                f"half_life_weeks must be > 0 and persistence_hours >= 0, got {half_life_weeks!r} and "
                f"{persistence_hours!r}"
            )
        tz = zone(timezone)
        now_price = float(series.price_at(at))
        first = max(series.start, at - timedelta(weeks=weeks))
        first = first.replace(minute=0, second=0, microsecond=0)
        if first < series.start:
            first += _HOUR
        hours = int((at - first) / _HOUR)
        samples: list[list[tuple[float, float]]] = [[] for _ in range(period_hours)]
        means: list[float] = []
        if hours > 0:
            means = series.tick_means(first, _HOUR, hours)
            for i, price in enumerate(means):
                start = first + i * _HOUR
                age_weeks = (at - start) / timedelta(weeks=1)
                slot = _slot(start, tz) % period_hours
                samples[slot].append((price, 0.5 ** (age_weeks / half_life_weeks)))
        every = [pair for slot in samples for pair in slot]
        overall = weighted_median(every) if every else now_price
        cycle = [weighted_median(slot) if slot else overall for slot in samples]
        profile = tuple(cycle[h % period_hours] for h in range(HOURS_PER_WEEK))
        observed = [*means, now_price]
        return cls(
            profile, now_price, at, persistence_hours, timezone, max(hours, 0), min(observed), max(observed)
        )

    def _expected(self, instant: datetime, tz: ZoneInfo, pull: float) -> float:
        expected = self.profile[_slot(instant, tz)]
        if self.persistence_hours > 0:
            ahead = max((instant - self.fitted_at) / _HOUR, 0.0)
            expected += pull * float(0.5 ** (ahead / self.persistence_hours))
        return min(max(expected, self.floor_usd_per_hour), self.ceiling_usd_per_hour)

    def ticks(self, start: datetime, tick: timedelta, count: int) -> list[float]:
        """Expected USD/hour at the start of each of ``count`` ticks from ``start`` (floats: simulator)."""
        tz = zone(self.timezone)
        pull = self.now_usd_per_hour - self.profile[_slot(self.fitted_at, tz)]
        return [self._expected(start + i * tick, tz, pull) for i in range(count)]

    def expected_usd_per_hour(self, instant: datetime) -> Decimal:
        """Expected price at ``instant``."""
        instant = require_aware(instant, name="instant")
        return _usd(self.ticks(instant, _HOUR, 1)[0])

    def hourly_usd_per_hour(self, start: datetime, hours: int) -> list[Decimal]:
        """Expected price of each of ``hours`` hours from ``start``."""
        return [_usd(v) for v in self.ticks(require_aware(start, name="start"), _HOUR, hours)]

    def minimum_usd_per_hour(self, start: datetime, end: datetime, *, run_hours: float = 0.0) -> Decimal:
        """The lowest expected mean price of a run of ``run_hours`` starting on the hour in ``[start, end]``.

        With ``run_hours=0`` this is the lowest expected hourly price in ``[start, end]``.

        Raises:
            ConfigurationError: ``end`` before ``start``.
        """
        start, end = require_aware(start, name="start"), require_aware(end, name="end")
        if end < start:
            raise ConfigurationError(f"end {end.isoformat()} is before start {start.isoformat()}")
        starts = int((end - start) / _HOUR) + 1
        span = max(1, round(run_hours))
        values = self.ticks(start, _HOUR, starts + span - 1)
        best = min(sum(values[i : i + span]) / span for i in range(starts))
        return _usd(best)
