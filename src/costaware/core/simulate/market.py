"""Each job's market, tick by tick: on-demand (or own power), spot and its capacity, and their forecasts.

Prices are per-tick means of the step-function series; forecasts see only history before the job's submit
time. Jobs with ``power_kw`` run on the team's own hardware: their "on-demand" price is the hourly electricity
price times the power draw, and they have no spot market. A job that lists ``zones`` gets a market per zone,
plus the collapsed market (the cheapest zone with capacity at each tick, as if moving were free), which
clairvoyant diagnostics read; the oracle plans zone by zone (a move is a new start).

**Objective** (``MarketData.objective``, default ``cost``): with a grid carbon intensity series
(``MarketData.carbon_g_per_kwh``, gCO2e/kWh), every per-tick value the policies and the oracle see (on-demand,
spot and their forecasts) becomes the objective's hourly value (``Objective.hourly_value``: USD, kg CO2e, or
USD plus the carbon price of the emissions), so every policy minimises the objective unchanged. The real USD
and kg CO2e per hour of each tick are kept beside it (``usd_on_demand``, ``usd_spot``, ``kg_per_hour``) for
the outcome's ``usd`` and ``kg_co2e``. A job's power is its ``power_kw``, else its instance type's at full
load (``MarketData.power_kw_of``). Under ``cost`` with a carbon series the values stay USD and only the
emissions are added.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.forecast import PriceForecast
from costaware.core.series import AvailabilityTrace, PriceSeries
from costaware.core.simulate.jobs import Job, TickPlan


@dataclass(frozen=True, slots=True)
class TickMarket:
    """One job's prices per tick: on-demand (or own power), spot and its capacity, and their forecasts.

    With ``zones`` (per zone: spot prices and capacity), ``spot`` and ``available`` are the cheapest zone with
    capacity at each tick and whether any zone has capacity, as if a job could move between zones for free
    (the view a clairvoyant policy that does not plan zones gets); the oracle and the other policies run zone
    by zone. Policies decide on the ``*_now`` values (the price at the tick's start); ticks are billed at the
    means.
    ``zone_history`` is each zone's capacity before submit (None for a zone without a trace), which a policy
    gets for the zone its job is placed in; ``available_before`` is capacity in any zone.
    """

    on_demand: Sequence[float]
    on_demand_forecast: Sequence[float]
    spot: Sequence[float] | None = None
    spot_forecast: Sequence[float] | None = None
    available: Sequence[bool] | None = None
    local: bool = False
    available_before: Sequence[bool] | None = None
    zones: tuple[tuple[Sequence[float], Sequence[bool]], ...] | None = None
    zone_history: tuple[Sequence[bool] | None, ...] | None = None
    usd_on_demand: Sequence[float] | None = None
    usd_spot: Sequence[float] | None = None
    kg_per_hour: Sequence[float] | None = None
    usd_known: bool = True
    #: The values in force at each tick's start: what a policy deciding then can know (the fields above are
    #: tick means, which the ticks are billed by and which read minutes ahead). None: as the means.
    on_demand_now: Sequence[float] | None = None
    spot_now: Sequence[float] | None = None
    zones_now: tuple[Sequence[float], ...] | None = None
    #: The real USD/hour at each tick's start, when the values above are another objective's.
    usd_on_demand_now: Sequence[float] | None = None
    usd_spot_now: Sequence[float] | None = None
    #: Under ``carbon`` or ``cost+carbon``: the part of the values above that the grid's intensity makes
    #: (``Objective.hourly_value`` at 0 USD/hour), at each tick's start and forecast per tick. A decision
    #: values a run starting now over its ticks with them, as each later start is valued (live:
    #: ``spot_forecast.intensity_from``). None under ``cost``.
    carbon_now: Sequence[float] | None = None
    carbon_forecast: Sequence[float] | None = None
    #: Capacity at each tick's start (per zone: ``zones_at_start``), what a policy deciding then can know,
    #: where a tick spans several trace samples: ``available`` (and the zones') is then capacity through the
    #: whole tick, which reads minutes ahead. None: as ``available`` (a tick no longer than the spacing).
    available_at_start: Sequence[bool] | None = None
    zones_at_start: tuple[Sequence[bool], ...] | None = None


def cheapest_zone(zones: Sequence[tuple[Sequence[float], Sequence[bool]]], t: int) -> int:
    """Index of the cheapest zone with capacity at tick ``t`` (the first on a tie), or -1 when none has."""
    best = -1
    for i, (prices, available) in enumerate(zones):
        if available[t] and (best < 0 or prices[t] < zones[best][0][t]):
            best = i
    return best


@dataclass(frozen=True)
class MarketData:
    """Where a simulation gets prices; the adapters build it from files.

    Attributes:
        on_demand_usd_per_hour: ``(instance_type, region) -> USD/hour``; raises ``PriceNotFoundError``.
        spot_series: ``(instance_type, region, zone or None) -> PriceSeries``; raises ``PriceNotFoundError``.
        electricity_usd_per_mwh: Hourly power prices for jobs with ``power_kw``.
        availability: Spot capacity trace, already placed in time.
        forecast_weeks: Weeks of history the forecasts use.
        zone_availability: ``zone -> capacity trace`` for jobs that list ``zones`` (a zone without one is
            always available).
        carbon_g_per_kwh: Hourly grid carbon intensity (gCO2e/kWh) of the grid every job draws from.
        objective: What the policies and the oracle minimise (default ``cost``).
        power_kw_of: ``(instance_type, region) -> kW`` at full load, for jobs without ``power_kw`` when a
            carbon series is given.
    """

    on_demand_usd_per_hour: Callable[[str, str], Decimal]
    spot_series: Callable[[str, str, str | None], PriceSeries] | None = None
    electricity_usd_per_mwh: PriceSeries | None = None
    availability: AvailabilityTrace | None = None
    forecast_weeks: int = 4
    zone_availability: Mapping[str, AvailabilityTrace] | None = None
    carbon_g_per_kwh: PriceSeries | None = None
    objective: Objective = field(default_factory=Objective)
    power_kw_of: Callable[[str, str], float] | None = None


def market_for(job: Job, data: MarketData, plan: TickPlan, tick: timedelta) -> TickMarket:
    """Per-tick values and forecasts of one job (forecasts use only history before its submit time).

    Raises:
        PriceNotFoundError: no price for the job's instance type, region or time span, or a carbon series
            that does not cover the job's hours.
        ConfigurationError: a ``power_kw`` job without electricity prices (under ``cost`` or
            ``cost+carbon``), an objective needing carbon without a carbon series, or a job with ``zones``
            under an objective other than ``cost``.
    """
    if data.carbon_g_per_kwh is None:
        if data.objective.needs_carbon:
            raise ConfigurationError(
                f"objective {data.objective.name!r} needs the grid's carbon intensity; pass a carbon "
                "intensity CSV (timestamp_utc,g_co2eq_per_kwh_lca) as --carbon"
            )
        return _cost_market(job, data, plan, tick)
    return _carbon_market(job, data, plan, tick, data.carbon_g_per_kwh)


def _check_covers(job: Job, series: PriceSeries, start: datetime, end: datetime, what: str) -> None:
    """Refuse a job whose hours (its deadline plus a forced finish) an hourly series does not cover.

    Raises:
        PriceNotFoundError: the job, its hours and what the series covers.
    """
    covers_until = series.last + timedelta(hours=1)
    if start < series.start or end > covers_until:
        raise PriceNotFoundError(
            f"job {job.name!r} runs from {start.isoformat()} up to {end.isoformat()} (its deadline plus a "
            f"forced finish), outside {series.name}, which covers {series.start.isoformat()} to "
            f"{covers_until.isoformat()}; give {what} covering the jobs' hours"
        )


def _carbon_market(
    job: Job, data: MarketData, plan: TickPlan, tick: timedelta, carbon: PriceSeries
) -> TickMarket:
    """The cost market with the objective's values, the real USD and the kg CO2e per hour of every tick."""
    objective, start, count = data.objective, job.submit_time, plan.horizon
    _check_covers(job, carbon, start, start + count * tick, "a carbon file")
    kw = _power_kw(job, data)
    if objective.name == "carbon" and _no_prices(job, data):
        # Emissions only: an instance type still has its catalog's on-demand price; own power has none.
        own = job.power_kw is not None
        usd = 0.0 if own else float(data.on_demand_usd_per_hour(job.instance_type, job.region))
        base = TickMarket(on_demand=[usd] * count, on_demand_forecast=[usd] * count, local=True)
        usd_known = not own
    else:
        base = _cost_market(job, data, plan, tick)
        usd_known = True
    if base.zones is not None and objective.needs_carbon:
        raise ConfigurationError(
            f"job {job.name!r} lists zones {'|'.join(job.zones)}; the multi-zone replay works on cost only, "
            f"not on objective {objective.name!r}: drop --zones or use --objective cost"
        )
    grams = carbon.tick_means(start, tick, count)
    kg = [kw * g / 1000 for g in grams]
    if not objective.needs_carbon:
        return replace(base, kg_per_hour=kg)
    grams_forecast = PriceForecast.fit(carbon, at=start, weeks=data.forecast_weeks).ticks(start, tick, count)

    def values(usd: Sequence[float], g: Sequence[float]) -> list[float]:
        return [objective.hourly_value(u, kw, x) for u, x in zip(usd, g, strict=True)]

    spot = base.spot
    # The values at each tick's start, for the decisions (the intensity then, as the prices then).
    grams_now = carbon.tick_starts(start, tick, count)
    on_demand_now = base.on_demand_now if base.on_demand_now is not None else base.on_demand
    return replace(
        base,
        on_demand=values(base.on_demand, grams),
        on_demand_forecast=values(base.on_demand_forecast, grams_forecast),
        spot=None if spot is None else values(spot, grams),
        spot_forecast=None if base.spot_forecast is None else values(base.spot_forecast, grams_forecast),
        usd_on_demand=base.on_demand,
        usd_spot=spot,
        kg_per_hour=kg,
        usd_known=usd_known,
        on_demand_now=values(on_demand_now, grams_now),
        spot_now=None if base.spot_now is None else values(base.spot_now, grams_now),
        usd_on_demand_now=on_demand_now,
        usd_spot_now=base.spot_now,
        carbon_now=values([0.0] * count, grams_now),
        carbon_forecast=values([0.0] * count, grams_forecast),
    )


def _no_prices(job: Job, data: MarketData) -> bool:
    """Whether the job has no market to price it (allowed under the ``carbon`` objective only)."""
    if job.power_kw is not None:
        return data.electricity_usd_per_mwh is None
    return data.spot_series is None


def _power_kw(job: Job, data: MarketData) -> float:
    if job.power_kw is not None:
        return float(job.power_kw)
    if data.power_kw_of is None:
        raise ConfigurationError(
            f"job {job.name!r} has no power_kw and no power model was given for instance type "
            f"{job.instance_type!r}; add a power_kw column to the jobs file"
        )
    return data.power_kw_of(job.instance_type, job.region)


def _cost_market(job: Job, data: MarketData, plan: TickPlan, tick: timedelta) -> TickMarket:
    """Per-tick USD prices and forecasts of one job."""
    start, count = job.submit_time, plan.horizon
    if job.power_kw is not None:
        if data.electricity_usd_per_mwh is None:
            raise ConfigurationError(
                f"job {job.name!r} sets power_kw but no electricity prices were given; pass an electricity "
                "CSV (timestamp_utc,usd_per_mwh) as --prices"
            )
        prices = data.electricity_usd_per_mwh
        # An hourly market, unlike spot's change-only records: outside it, a held price is no price (the
        # replay read its first or last hour for every hour, and said nothing).
        _check_covers(job, prices, start, start + count * tick, "an electricity file")
        per_hour = prices.scaled(job.power_kw / 1000, name=f"power for {job.name}")
        fitted = PriceForecast.fit(per_hour, at=start, weeks=data.forecast_weeks)
        return TickMarket(
            on_demand=per_hour.tick_means(start, tick, count),
            on_demand_forecast=fitted.ticks(start, tick, count),
            local=True,
            on_demand_now=per_hour.tick_starts(start, tick, count),
        )
    on_demand = float(data.on_demand_usd_per_hour(job.instance_type, job.region))
    if data.spot_series is None:
        raise ConfigurationError(f"job {job.name!r} needs spot prices: pass a spot price history as --prices")
    if job.zones:
        return _zoned_market(job, data, plan, tick, on_demand)
    series = data.spot_series(job.instance_type, job.region, job.availability_zone)
    if series.start > start:
        raise PriceNotFoundError(
            f"job {job.name!r} is submitted at {start.isoformat()}, before the first {series.name} price "
            f"({series.start.isoformat()})"
        )
    fitted = PriceForecast.fit(series, at=start, weeks=data.forecast_weeks)
    trace = data.availability
    available = trace.ticks(start, tick, count) if trace is not None else None
    before = _before(trace, start, tick) if trace is not None else None
    return TickMarket(
        on_demand=[on_demand] * count,
        on_demand_forecast=[on_demand] * count,
        spot=series.tick_means(start, tick, count),
        spot_forecast=fitted.ticks(start, tick, count),
        available=available,
        available_before=before,
        spot_now=series.tick_starts(start, tick, count),
        available_at_start=_at_start(trace, start, tick, count) if trace is not None else None,
    )


def _at_start(trace: AvailabilityTrace, start: datetime, tick: timedelta, count: int) -> list[bool] | None:
    """Capacity at each tick's start where a tick spans several samples; None where ``ticks`` reads it."""
    if tick.total_seconds() <= trace.gap_seconds:
        return None
    return [trace.at(start + i * tick) for i in range(count)]


def _before(trace: AvailabilityTrace, start: datetime, tick: timedelta) -> list[bool] | None:
    """The capacity seen before ``start`` (up to a week), for policies that learn the capacity process."""
    seen = min(int((start - trace.start) / tick), int(timedelta(weeks=1) / tick))
    return trace.ticks(start - seen * tick, tick, seen) if seen > 0 else None


def _zoned_market(
    job: Job, data: MarketData, plan: TickPlan, tick: timedelta, on_demand: float
) -> TickMarket:
    """A market per zone, and the collapsed market (cheapest zone with capacity at each tick)."""
    start, count = job.submit_time, plan.horizon
    assert data.spot_series is not None  # checked by the caller
    traces = data.zone_availability or {}
    # A zone without a trace counts as always available: right only when no capacity was given at all. A
    # one-zone trace, or traces for some zones, left the rest full and reported spot that never was.
    untraced = [z for z in job.zones if z not in traces]
    if untraced and (traces or data.availability is not None):
        given = ", ".join(sorted(traces)) if traces else "one --availability trace, for a job in one zone"
        raise ConfigurationError(
            f"job {job.name!r} runs in zones {'|'.join(job.zones)} but {', '.join(untraced)} "
            f"{'has' if len(untraced) == 1 else 'have'} no availability trace (given: {given}); give each "
            "zone its trace (--zones ZONE=TRACE,ZONE=TRACE), or leave availability out for every zone"
        )
    per_zone: list[tuple[Sequence[float], Sequence[bool]]] = []
    forecasts: list[list[float]] = []
    histories: list[list[bool]] = []
    zone_history: list[Sequence[bool] | None] = []
    zones_now: list[Sequence[float]] = []
    at_start: list[Sequence[bool]] = []
    for name in job.zones:
        series = data.spot_series(job.instance_type, job.region, name)
        if series.start > start:
            raise PriceNotFoundError(
                f"job {job.name!r} is submitted at {start.isoformat()}, before the first {series.name} price "
                f"({series.start.isoformat()})"
            )
        trace = traces.get(name)
        available = trace.ticks(start, tick, count) if trace is not None else [True] * count
        per_zone.append((series.tick_means(start, tick, count), available))
        opened = _at_start(trace, start, tick, count) if trace is not None else None
        at_start.append(available if opened is None else opened)
        zones_now.append(series.tick_starts(start, tick, count))
        forecasts.append(
            PriceForecast.fit(series, at=start, weeks=data.forecast_weeks).ticks(start, tick, count)
        )
        seen = _before(trace, start, tick) if trace is not None else None
        zone_history.append(seen)
        if trace is not None:
            histories.append(seen or [])
    length = min((len(h) for h in histories), default=0)
    before = [any(h[len(h) - length + i] for h in histories) for i in range(length)] if length else None
    coarse = any(opened is not available for opened, (_, available) in zip(at_start, per_zone, strict=True))
    return replace(
        zoned_tick_market(
            per_zone,
            [on_demand] * count,
            spot_forecast=[min(values) for values in zip(*forecasts, strict=True)],
            available_before=before,
            zone_history=tuple(zone_history),
            zones_at_start=at_start if coarse else None,
        ),
        zones_now=tuple(zones_now),
    )


def zoned_tick_market(
    per_zone: Sequence[tuple[Sequence[float], Sequence[bool]]],
    on_demand: Sequence[float],
    *,
    spot_forecast: Sequence[float] | None = None,
    available_before: Sequence[bool] | None = None,
    zone_history: Sequence[Sequence[bool] | None] | None = None,
    zones_at_start: Sequence[Sequence[bool]] | None = None,
) -> TickMarket:
    """A market over several zones (per zone: spot prices and capacity per tick), with its collapsed view.

    ``zones_at_start``: each zone's capacity at each tick's start, where it differs from the whole tick's.
    """
    count = len(on_demand)
    cheapest = [cheapest_zone(per_zone, t) for t in range(count)]
    opened = None if zones_at_start is None else [any(z[t] for z in zones_at_start) for t in range(count)]
    spot = [per_zone[z][0][t] if z >= 0 else min(p[t] for p, _ in per_zone) for t, z in enumerate(cheapest)]
    return TickMarket(
        on_demand=on_demand,
        on_demand_forecast=on_demand,
        spot=spot,
        spot_forecast=spot_forecast if spot_forecast is not None else spot,
        available=[z >= 0 for z in cheapest],
        available_before=available_before,
        zones=tuple((list(p), list(a)) for p, a in per_zone),
        zone_history=None if zone_history is None else tuple(zone_history),
        available_at_start=opened,
        zones_at_start=None if zones_at_start is None else tuple(list(z) for z in zones_at_start),
    )
