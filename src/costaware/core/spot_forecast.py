"""Forecast mean spot price of a run for each start left in a window: a pure function over price series.

The history comes from ``costaware.adapters.spot_market`` (a recorded file or live EC2); this module only
fits :class:`~costaware.core.forecast.PriceForecast` on its series and averages the hours a run would cover.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from math import ceil
from typing import Protocol

from costaware.core.carbon import Objective
from costaware.core.money import MICRO_USD
from costaware.core.series import PriceSeries, parse_instant


class SeriesSource(Protocol):
    """Anything that gives the price series of one instance type in one zone (a spot price history)."""

    def series(self, instance_type: str, region: str, availability_zone: str | None = None) -> PriceSeries:
        """The series of ``instance_type`` in ``availability_zone`` (None: the region's cheapest zone)."""
        ...


def forecast_starts(
    history: SeriesSource,
    *,
    instance_type: str,
    region: str,
    zones: Sequence[str | None],
    now: datetime,
    latest_start: datetime,
    runtime_hours: Decimal,
    history_days: int,
) -> list[list[str]]:
    """Forecast mean price of a run of ``runtime_hours`` starting at each whole hour up to ``latest_start``.

    The mean is over the run's exact length (:func:`run_mean_usd`; at least a minute, :func:`run_hours`), a
    last part hour weighed by the part of it the run covers, as :func:`objective_starts` averages intensity.

    With several zones a run may start in any of them: each hour's forecast is the cheapest zone's.
    Returns ``[[iso start, mean USD/hour], ...]``, empty when no whole hour is left before ``latest_start``.
    """
    from costaware.core.forecast import PriceForecast

    if latest_start <= now:
        return []
    first = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    hours = int((latest_start - first) / timedelta(hours=1)) + 1
    if hours <= 0:
        return []
    run = Decimal(repr(run_hours(runtime_hours)))
    hourly: list[Decimal] = []
    for zone_name in zones:
        series = history.series(instance_type, region, zone_name)
        forecast = PriceForecast.fit(series, at=now, weeks=max(1, history_days // 7))
        zone_hourly = forecast.hourly_usd_per_hour(first, hours + ceil(run) - 1)
        hourly = [min(a, b) for a, b in zip(hourly, zone_hourly, strict=True)] if hourly else zone_hourly
    return [
        [(first + timedelta(hours=i)).isoformat(), str(run_mean_usd(hourly, i, run).quantize(MICRO_USD))]
        for i in range(hours)
    ]


def run_mean_usd(hourly: Sequence[Decimal], start: int, hours: Decimal) -> Decimal:
    """:func:`run_mean` of hourly prices, in decimals, for a run of ``hours`` from the whole hour ``start``.

    The price of a later start is averaged over the run's own length, as its intensity is: over round(2.5)
    = 2 whole hours a run into a dear hour looked as cheap as the two before it, and a ``cost+carbon`` value
    added a price and an intensity of different runs. A whole number of hours averages as it always did.
    """
    whole = int(hours)
    part = hours - whole
    total = sum(hourly[start : start + whole], Decimal(0))
    if part:
        total += hourly[start + whole] * part
    return total / hours


#: A series at least this long is a year of records: read for another year, it stands in for it.
_A_YEAR = timedelta(days=360)


def same_hour_in(instant: datetime, year: int) -> datetime:
    """``instant`` moved to ``year`` (29 February to the 28th)."""
    day = 28 if (instant.month, instant.day) == (2, 29) else instant.day
    return instant.replace(year=year, day=day)


def hourly_series(series: PriceSeries, start: datetime, hours: int, *, weeks: int = 4) -> list[float]:
    """The mean of ``series`` in each of ``hours`` hours from ``start`` (a price, or an intensity).

    Where the series covers the hours (a recorded file, or a forecast file), its values. Outside it, a year
    of records (the bundled 2023 intensity read for 2026) gives each hour its value at the same date and hour
    within it (a year from July: March from its second calendar year), a typical-year estimate as the
    ledger's emissions use: season and hour of day carry most of a grid's variation (the hour-of-day profile
    of the year's last weeks, December's, chose the same hour every night of every later season). A shorter
    series: the hour-of-day profile of its last ``weeks`` weeks
    (:class:`~costaware.core.forecast.PriceForecast` fitted at its last record).
    """
    end = start + timedelta(hours=hours)
    if series.start <= start and end <= series.last + timedelta(hours=1):
        return [
            float(series.mean_usd_per_hour(start + timedelta(hours=i), start + timedelta(hours=i + 1)))
            for i in range(hours)
        ]
    from costaware.core.forecast import PriceForecast

    forecast = PriceForecast.fit(series, at=series.last, weeks=weeks)
    profile = [float(v) for v in forecast.hourly_usd_per_hour(start, hours)]
    if series.last - series.start < _A_YEAR:
        return profile
    after = series.last + timedelta(hours=1)
    values = []
    for i, fallback in enumerate(profile):
        hour = start + timedelta(hours=i)
        # A year of records starting in July spans two calendar years: March is in the second one.
        years = (series.start.year, series.start.year + 1)
        shifted = next(
            (t for t in [hour, *(same_hour_in(hour, y) for y in years)] if series.start <= t < after), None
        )
        if shifted is None:
            values.append(fallback)
        else:
            values.append(float(series.mean_usd_per_hour(shifted, shifted + timedelta(hours=1))))
    return values


def objective_starts(
    price_starts: Sequence[Sequence[str]],
    intensity: PriceSeries | None,
    *,
    objective: Objective,
    power_kw: float,
    runtime_hours: Decimal,
) -> list[list[str]]:
    """:func:`forecast_starts` (mean USD/hour per start) as the objective's mean hourly value per start.

    Each start's value is the objective's (:meth:`~costaware.core.carbon.Objective.hourly_value`) for its
    forecast mean price, ``power_kw`` and the mean intensity of the hours the run would cover (from
    :func:`hourly_series`, by :func:`run_mean`: the start now is valued alike by :func:`intensity_from`).
    ``cost`` gives the starts back as they are.
    """
    if not objective.needs_carbon or not price_starts:
        return [list(s) for s in price_starts]
    if intensity is None:
        objective.hourly_value(0.0, power_kw, None)  # raises, naming the objective
        return []
    first = parse_instant(price_starts[0][0], name="forecast start")
    hours = run_hours(runtime_hours)
    hourly = hourly_series(intensity, first, len(price_starts) + ceil(hours) - 1)
    out: list[list[str]] = []
    for i, (at, usd) in enumerate(price_starts):
        g = run_mean(hourly, i, hours)
        value = objective.hourly_value(float(usd), power_kw, g)
        out.append([at, str(Decimal(repr(value)).quantize(MICRO_USD))])
    return out


def run_hours(runtime_hours: Decimal | float) -> float:
    """The hours a run's intensity is averaged over: its runtime, at least one minute (a resume's 0.01 h)."""
    return max(float(runtime_hours), 1 / 60)


def read_until(last_start: datetime, runtime_hours: Decimal | float) -> datetime:
    """Where the hours valued for runs starting up to ``last_start`` end: what an intensity must cover.

    :func:`objective_starts` and :func:`intensity_from` read ``ceil(run_hours)`` whole hours from each start;
    ``carbon_intensity(until=...)`` follows an import that far, not a year.
    """
    return last_start + timedelta(hours=ceil(run_hours(runtime_hours)))


def run_mean(hourly: Sequence[float], offset_hours: float, hours: float) -> float:
    """The mean of ``hourly`` (one value an hour) over ``[offset_hours, offset_hours + hours)`` of its hours.

    What a run of ``hours`` starting ``offset_hours`` after the first hour meets, a last part hour weighed by
    the part of it the run covers. Every start of a decision is valued by it (:func:`objective_starts` the
    later ones, :func:`intensity_from` the start now), so no start can look cleaner for being averaged
    differently.
    """
    end = offset_hours + hours
    total = 0.0
    for i in range(int(offset_hours), ceil(end)):
        total += hourly[i] * (min(i + 1, end) - max(i, offset_hours))
    return total / hours


def intensity_from(intensity: PriceSeries, now: datetime, runtime_hours: Decimal | float) -> float:
    """The mean grid intensity (gCO2e/kWh) over ``[now, now + runtime_hours)``: a run started now.

    The hours are counted from ``now`` (a half-hourly file's half hours fall where they are, not in clock
    hours), valued as :func:`objective_starts` values each later start (:func:`hourly_series`, then
    :func:`run_mean`). The intensity of the instant made a clean hour followed by dirty ones look clean, and
    a decision started a run too early on it.
    """
    hours = run_hours(runtime_hours)
    return run_mean(hourly_series(intensity, now, ceil(hours)), 0, hours)
