"""``SpotWindowTrigger``: waits in the triggerer for a good spot start, or for the on-demand fallback.

Every ``poll_interval`` seconds it reads the spot price in force now (a recorded file, re-read each time, or
live EC2 through the Amazon provider, cached) and spot capacity (an availability trace, or "a spot price below
on-demand exists"), decides through :func:`~costaware.core.spot_window.decide`, and emits one event:
``{"status": "success", "decision": SpotDecision.to_xcom()}`` or
``{"status": "error", "message": ..., "retry": bool}``.
Reading prices happens in a worker thread (``asyncio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant

# The decision itself is pure and lives in core; it is re-exported here for existing imports.
from costaware.core.spot_window import (
    Observation,
    choose_zone,
    decide,
    forecast_min,
    label_decision,
    spot_capacity,
    wants_observation,
    window_decision,
)
from costaware.glue import DEFAULT_AWS_CONN_ID

__all__ = [
    "LIVE",
    "SpotWindowTrigger",
    "forecast_min",
    "forecast_starts",
    "forecast_window",
    "label_decision",
    "observe_market",
    "observe_spot",
    "observe_zones",
    "spot_history",
    "window_decision",
]

LIVE = "live"
_MICRO = Decimal("0.000001")


def spot_history(
    *,
    prices: str,
    instance_type: str,
    region: str,
    aws_conn_id: str | None,
    ttl_seconds: float,
    products: Sequence[str],
    now: datetime,
    history_days: int,
) -> Any:
    """The spot price history the forecast fits on: ``history_days`` of live EC2, or the recorded file.

    Live queries end at ``now`` rounded down to ``ttl_seconds``, so that looks within one period ask the
    same question and share the cached answer instead of paging through days of history at every poll.
    """
    from costaware.adapters import spot_prices

    if prices == LIVE:
        live = spot_prices.LiveSpotPrices(
            aws_conn_id=aws_conn_id, region_name=region, ttl_seconds=ttl_seconds
        )
        period = max(ttl_seconds, 1.0)
        end = datetime.fromtimestamp(now.timestamp() // period * period, tz=now.tzinfo)
        return live.history(
            [instance_type], start=end - timedelta(days=history_days), end=end, products=list(products)
        )
    return spot_prices.load_spot_history(prices, products=list(products))


def forecast_starts(
    history: Any,
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
    span = max(1, round(float(runtime_hours)))
    hourly: list[Decimal] = []
    for zone_name in zones:
        series = history.series(instance_type, region, zone_name)
        forecast = PriceForecast.fit(series, at=now, weeks=max(1, history_days // 7))
        zone_hourly = forecast.hourly_usd_per_hour(first, hours + span - 1)
        hourly = [min(a, b) for a, b in zip(hourly, zone_hourly, strict=True)] if hourly else zone_hourly
    return [
        [
            (first + timedelta(hours=i)).isoformat(),
            str((sum(hourly[i : i + span], Decimal(0)) / span).quantize(_MICRO)),
        ]
        for i in range(hours)
    ]


def observe_spot(
    *,
    prices: str,
    instance_type: str,
    region: str,
    availability_zone: str | None,
    aws_conn_id: str | None,
    ttl_seconds: float,
    products: Sequence[str],
    on_demand_usd_per_hour: Decimal,
    availability: str | None,
    availability_start: str | None,
    now: datetime,
) -> tuple[Decimal, bool, str]:
    """The spot price in force at ``now``, whether spot has capacity, and the price's source (blocking IO)."""
    from costaware.adapters import spot_prices

    if prices == LIVE:
        live = spot_prices.LiveSpotPrices(
            aws_conn_id=aws_conn_id, region_name=region, ttl_seconds=ttl_seconds
        )
        history = live.history([instance_type], products=products)
        source = f"live EC2 ({aws_conn_id})"
    else:
        history = spot_prices.load_spot_history(prices, products=products)
        source = f"recorded {prices}"
    price = spot_prices.current_spot_price(history, instance_type, region, availability_zone, now)
    trace_available: bool | None = None
    if availability:
        start = parse_instant(availability_start, name="availability_start") if availability_start else now
        trace_available = spot_prices.load_availability(availability, start=start).at(now)
    return price, spot_capacity(price, on_demand_usd_per_hour, trace_available), source


def observe_zones(
    *,
    zones: Sequence[str],
    availability: Mapping[str, str] | None,
    **observe: Any,
) -> Observation:
    """Observe every zone (blocking IO); keep the cheapest one with capacity (the first listed if none has).

    Args:
        zones: The job's zones, in order of preference on a tie.
        availability: ``zone -> availability trace path``; a zone without one counts as available when its
            spot price is below on-demand.
        **observe: The other arguments of :func:`observe_spot`.

    Returns:
        The chosen zone's price, capacity and price source, and the zone's name.
    """
    seen: dict[str, tuple[Decimal, bool]] = {}
    sources: dict[str, str] = {}
    for zone_name in zones:
        price, available, source = observe_spot(
            availability_zone=zone_name, availability=(availability or {}).get(zone_name), **observe
        )
        seen[zone_name], sources[zone_name] = (price, available), source
    chosen = choose_zone(seen) or zones[0]
    price, available = seen[chosen]
    return Observation(price, available, f"{sources[chosen]}, zone {chosen}", chosen)


def observe_market(
    *,
    availability_zones: Sequence[str] | None,
    zone_availability: Mapping[str, str] | None,
    availability_zone: str | None,
    availability: str | None,
    **common: Any,
) -> Observation:
    """One look at the market at ``now``: price, capacity, source and chosen zone (``""`` for one zone).

    Blocking IO.

    With ``availability_zones`` every zone is observed and the cheapest one with capacity is kept
    (:func:`observe_zones`); else the one ``availability_zone`` (or the region's cheapest zone).
    """
    if availability_zones:
        return observe_zones(zones=availability_zones, availability=zone_availability, **common)
    price, available, source = observe_spot(
        availability_zone=availability_zone, availability=availability, **common
    )
    return Observation(price, available, source)


def forecast_window(
    *,
    prices: str,
    instance_type: str,
    region: str,
    aws_conn_id: str | None,
    ttl_seconds: float,
    products: Sequence[str],
    zones: Sequence[str | None],
    now: datetime,
    latest_start: datetime,
    runtime_hours: Decimal,
    history_days: int,
) -> list[list[str]]:
    """:func:`forecast_starts` fitted on the history :func:`spot_history` reads (blocking IO).

    Reads nothing when no start is left before ``latest_start``.
    """
    if latest_start <= now:
        return []
    history = spot_history(
        prices=prices,
        instance_type=instance_type,
        region=region,
        aws_conn_id=aws_conn_id,
        ttl_seconds=ttl_seconds,
        products=products,
        now=now,
        history_days=history_days,
    )
    return forecast_starts(
        history,
        instance_type=instance_type,
        region=region,
        zones=zones,
        now=now,
        latest_start=latest_start,
        runtime_hours=runtime_hours,
        history_days=history_days,
    )


class SpotWindowTrigger(BaseTrigger):
    """Polls spot price and capacity until :func:`decide` says start (spot) or fall back (on-demand).

    See docs/spot-windows.md.

    Args:
        instance_type: EC2 instance type.
        region: Region of the price.
        availability_zone: Zone, or ``None`` for the region's cheapest zone.
        prices: ``"live"`` (EC2 through ``aws_conn_id``) or the path of a recorded price file.
        on_demand_usd_per_hour: On-demand price, as text.
        forecast_starts: ``[[iso_start, mean_usd_per_hour], ...]``: forecast mean price of a run per start.
        latest_start: ISO time after which only on-demand can meet the deadline.
        not_before: ISO time before which nothing starts, or ``None``.
        target_usd_per_hour: Start on spot at or below this price, as text, or ``None``.
        aws_conn_id: Airflow AWS connection for live prices.
        ttl_seconds: Cache time of live responses.
        products: Product descriptions to keep.
        availability: Path of a spot availability trace, or ``None``.
        availability_start: ISO time of the trace's first sample.
        poll_interval: Seconds between polls.
        availability_zones: Zones to choose from at each poll (the cheapest with capacity), or ``None``.
        zone_availability: ``zone -> availability trace path`` for ``availability_zones``.
    """

    def __init__(
        self,
        *,
        instance_type: str,
        region: str,
        availability_zone: str | None,
        prices: str,
        on_demand_usd_per_hour: str,
        forecast_starts: list[list[str]],
        latest_start: str,
        not_before: str | None = None,
        target_usd_per_hour: str | None = None,
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
        ttl_seconds: float = 300.0,
        products: list[str] | None = None,
        availability: str | None = None,
        availability_start: str | None = None,
        poll_interval: float = 60.0,
        availability_zones: list[str] | None = None,
        zone_availability: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.instance_type = instance_type
        self.region = region
        self.availability_zone = availability_zone
        self.prices = prices
        self.on_demand_usd_per_hour = on_demand_usd_per_hour
        self.forecast_starts = [list(pair) for pair in forecast_starts]
        self.latest_start = latest_start
        self.not_before = not_before
        self.target_usd_per_hour = target_usd_per_hour
        self.aws_conn_id = aws_conn_id
        self.ttl_seconds = ttl_seconds
        self.products = list(products or ["Linux/UNIX"])
        self.availability = availability
        self.availability_start = availability_start
        self.poll_interval = poll_interval
        self.availability_zones = list(availability_zones) if availability_zones else None
        self.zone_availability = dict(zone_availability) if zone_availability else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-primitive kwargs."""
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "instance_type": self.instance_type,
                "region": self.region,
                "availability_zone": self.availability_zone,
                "prices": self.prices,
                "on_demand_usd_per_hour": self.on_demand_usd_per_hour,
                "forecast_starts": self.forecast_starts,
                "latest_start": self.latest_start,
                "not_before": self.not_before,
                "target_usd_per_hour": self.target_usd_per_hour,
                "aws_conn_id": self.aws_conn_id,
                "ttl_seconds": self.ttl_seconds,
                "products": self.products,
                "availability": self.availability,
                "availability_start": self.availability_start,
                "poll_interval": self.poll_interval,
                "availability_zones": self.availability_zones,
                "zone_availability": self.zone_availability,
            },
        )

    def _observe(self, now: datetime, on_demand: Decimal) -> Observation:
        return observe_market(
            availability_zones=self.availability_zones,
            zone_availability=self.zone_availability,
            availability_zone=self.availability_zone,
            availability=self.availability,
            prices=self.prices,
            instance_type=self.instance_type,
            region=self.region,
            aws_conn_id=self.aws_conn_id,
            ttl_seconds=self.ttl_seconds,
            products=self.products,
            on_demand_usd_per_hour=on_demand,
            availability_start=self.availability_start,
            now=now,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until a decision, then yield one event."""
        try:
            latest_start = parse_instant(self.latest_start, name="latest_start")
            not_before = parse_instant(self.not_before, name="not_before") if self.not_before else None
            on_demand = Decimal(self.on_demand_usd_per_hour)
            target = Decimal(self.target_usd_per_hour) if self.target_usd_per_hour is not None else None
        except (CostawareError, ArithmeticError) as e:
            yield TriggerEvent({"status": "error", "message": str(e), "retry": False})
            return
        while True:
            now = utcnow()
            observation = Observation()
            if wants_observation(now, latest_start=latest_start, not_before=not_before):
                try:
                    observation = await asyncio.to_thread(self._observe, now, on_demand)
                except ConfigurationError as e:
                    yield TriggerEvent({"status": "error", "message": str(e), "retry": False})
                    return
                except Exception as e:  # transient (network, throttling): the task retries
                    self.log.warning("spot price poll failed: %s", e)
                    yield TriggerEvent(
                        {"status": "error", "message": f"spot price poll failed: {e}", "retry": True}
                    )
                    return
            decision = decide(
                now=now,
                observation=observation,
                on_demand_usd_per_hour=on_demand,
                forecast_starts=self.forecast_starts,
                target_usd_per_hour=target,
                latest_start=latest_start,
                not_before=not_before,
            )
            if decision is not None:
                yield TriggerEvent(
                    {"status": "success", "message": decision.reason, "decision": decision.to_xcom()}
                )
                return
            self.log.info(
                "waiting for a better spot start: price %s USD/hour, capacity %s, latest start %s",
                observation.usd_per_hour,
                observation.available,
                latest_start.isoformat(),
            )
            wake = (latest_start - now).total_seconds()
            if not_before is not None and now < not_before:
                wake = min(wake, (not_before - now).total_seconds())
            await asyncio.sleep(max(0.0, min(self.poll_interval, wake)))
