"""``SpotWindowTrigger``: waits in the triggerer for a good spot start, or for the on-demand fallback.

Every ``poll_interval`` seconds it reads the spot price in force now (a recorded file, re-read each time, or
live EC2 through the Amazon provider, cached) and spot capacity (an availability trace, or "a spot price below
on-demand exists"), applies :func:`window_decision`, and emits one event:
``{"status": "success", "decision": {...}}`` or ``{"status": "error", "message": ..., "retry": bool}``.
Reading prices happens in a worker thread (``asyncio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.ledger import utcnow
from costaware.core.policies.cheapest_window import start_rule
from costaware.core.series import parse_instant
from costaware.glue import DEFAULT_AWS_CONN_ID

LIVE = "live"


def forecast_min(
    forecast_starts: Sequence[Sequence[str]], *, after: datetime, until: datetime
) -> Decimal | None:
    """Lowest forecast mean price of the starts in ``(after, until]``; ``None`` when none is left."""
    values = [
        Decimal(v) for at, v in forecast_starts if after < parse_instant(at, name="forecast start") <= until
    ]
    return min(values) if values else None


def window_decision(
    *,
    now: datetime,
    usd_per_hour: Decimal | None,
    available: bool,
    on_demand_usd_per_hour: Decimal,
    forecast_starts: Sequence[Sequence[str]],
    target_usd_per_hour: Decimal | None,
    latest_start: datetime,
    not_before: datetime | None,
) -> dict[str, str] | None:
    """Start on spot, fall back to on-demand, or ``None`` to keep waiting (pure; money in and out as text).

    The order: past ``latest_start`` -> on-demand (waiting longer would miss the deadline); before
    ``not_before`` -> wait; spot with capacity, cheaper than on-demand, and passing the start rule (at or
    below the target or the forecast minimum of the rest of the window) -> spot; else wait.
    """
    if now >= latest_start:
        return {
            "market": "on_demand",
            "usd_per_hour": str(on_demand_usd_per_hour),
            "reason": (
                f"waiting longer would miss the deadline: latest safe start {latest_start.isoformat()}"
            ),
        }
    if not_before is not None and now < not_before:
        return None
    if usd_per_hour is None or not available or usd_per_hour >= on_demand_usd_per_hour:
        return None
    reason = start_rule(
        usd_per_hour, forecast_min(forecast_starts, after=now, until=latest_start), target_usd_per_hour
    )
    if reason is None:
        return None
    return {
        "market": "spot",
        "usd_per_hour": str(usd_per_hour),
        "reason": f"spot capacity available; {reason}",
    }


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
    if availability:
        start = parse_instant(availability_start, name="availability_start") if availability_start else now
        trace = spot_prices.load_availability(availability, start=start)
        available = trace.at(now)
    else:
        # Without a capacity trace, a spot price at or above on-demand is taken as "no useful capacity".
        available = price < on_demand_usd_per_hour
    return price, available, source


def label_decision(decision: dict[str, str], source: str) -> None:
    """Name where the decision's price came from: a short ``price_source`` and the full ``price_detail``."""
    spot = decision["market"] == "spot"
    decision["price_source"] = (
        ("live-ec2" if source.startswith("live") else "recorded") if spot else "on-demand-list"
    )
    decision["price_detail"] = source


class SpotWindowTrigger(BaseTrigger):
    """Polls spot price and capacity until :func:`window_decision` says start (spot) or fall back (on-demand).

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
            },
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
            price: Decimal | None = None
            available, source = False, ""
            if now < latest_start and (not_before is None or now >= not_before):
                try:
                    price, available, source = await asyncio.to_thread(
                        observe_spot,
                        prices=self.prices,
                        instance_type=self.instance_type,
                        region=self.region,
                        availability_zone=self.availability_zone,
                        aws_conn_id=self.aws_conn_id,
                        ttl_seconds=self.ttl_seconds,
                        products=self.products,
                        on_demand_usd_per_hour=on_demand,
                        availability=self.availability,
                        availability_start=self.availability_start,
                        now=now,
                    )
                except ConfigurationError as e:
                    yield TriggerEvent({"status": "error", "message": str(e), "retry": False})
                    return
                except Exception as e:  # transient (network, throttling): the task retries
                    self.log.warning("spot price poll failed: %s", e)
                    yield TriggerEvent(
                        {"status": "error", "message": f"spot price poll failed: {e}", "retry": True}
                    )
                    return
            decision = window_decision(
                now=now,
                usd_per_hour=price,
                available=available,
                on_demand_usd_per_hour=on_demand,
                forecast_starts=self.forecast_starts,
                target_usd_per_hour=target,
                latest_start=latest_start,
                not_before=not_before,
            )
            if decision is not None:
                decision["decided_at"] = now.isoformat()
                label_decision(decision, source)
                yield TriggerEvent({"status": "success", "message": decision["reason"], "decision": decision})
                return
            self.log.info(
                "waiting for a better spot start: price %s USD/hour, capacity %s, latest start %s",
                price,
                available,
                latest_start.isoformat(),
            )
            wake = (latest_start - now).total_seconds()
            if not_before is not None and now < not_before:
                wake = min(wake, (not_before - now).total_seconds())
            await asyncio.sleep(max(0.0, min(self.poll_interval, wake)))
