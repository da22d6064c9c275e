"""``SpotWindowTrigger``: waits in the triggerer for a good spot start, or for the on-demand fallback.

Every ``poll_interval`` seconds it reads the spot price in force now (a recorded file, re-read each time, or
live EC2 through the Amazon provider, cached) and spot capacity (an availability trace, or "a spot price below
on-demand exists"), decides through :func:`~costaware.core.spot_window.decide`, and emits one event:
``{"status": "success", "decision": SpotDecision.to_xcom()}`` or
``{"status": "error", "message": ..., "retry": bool}``.
Reading prices (``costaware.adapters.spot_market``) happens in a worker thread (``asyncio.to_thread``),
never on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from decimal import Decimal
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

# The market reads (adapters.spot_market) and the forecast (core.spot_forecast) moved out of this module;
# the names it exported before stay importable from here for DAGs and code that use them.
from costaware.adapters.spot_market import (
    LIVE,
    forecast_window,
    intensity_of_run,
    observe_market,
    observe_spot,
    observe_zones,
    spot_history,
    window_carbon_intensity,
)
from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant
from costaware.core.spot_forecast import forecast_starts
from costaware.core.spot_window import (
    Observation,
    decide_on_objective,
    forecast_min,
    label_decision,
    wants_observation,
    window_decision,
)
from costaware.glue import DEFAULT_AWS_CONN_ID
from costaware.triggers import MAX_POLL_ERRORS

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
        objective: ``cost`` (default), ``carbon`` or ``cost+carbon``; with a carbon objective
            ``forecast_starts`` and ``target_usd_per_hour`` hold its hourly value (see ``SpotWindowSensor``).
        carbon_usd_per_tonne: Carbon price of ``cost+carbon``.
        carbon: A bundled grid zone or a recorded carbon intensity CSV; None: the grid zone of ``region``.
        power_kw: The instance's power at full load (carbon objectives).
        runtime_hours: The expected run, for the decision's kg CO2e (carbon objectives).
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
        objective: str = "cost",
        carbon_usd_per_tonne: float | None = None,
        carbon: str | None = None,
        power_kw: float = 0.0,
        runtime_hours: str | None = None,
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
        self.objective = objective
        self.carbon_usd_per_tonne = carbon_usd_per_tonne
        self.carbon = carbon
        self.power_kw = power_kw
        self.runtime_hours = runtime_hours

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and JSON-primitive kwargs (the objective's only when set: as before for cost)."""
        carbon: dict[str, Any] = {}
        if self.objective != "cost":
            carbon = {
                "objective": self.objective,
                "carbon_usd_per_tonne": self.carbon_usd_per_tonne,
                "carbon": self.carbon,
                "power_kw": self.power_kw,
                "runtime_hours": self.runtime_hours,
            }
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            carbon
            | {
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
            objective = Objective.parse(self.objective, self.carbon_usd_per_tonne)
            runtime = Decimal(self.runtime_hours or 0)
            # Read once, off the event loop (a file; the bundled series is cached), as far as the sensor's
            # plan and poke read it: an import followed a year was read differently (PL, a file 14-366 days
            # ahead), and a run now was started here that the poke would have waited on.
            intensity = await asyncio.to_thread(
                window_carbon_intensity,
                self.carbon,
                region=self.region,
                objective=objective,
                latest_start=latest_start,
                runtime_hours=runtime,
            )
        except (CostawareError, ArithmeticError) as e:
            yield TriggerEvent({"status": "error", "message": str(e), "retry": False})
            return
        errors = 0  # failed price polls in a row
        while True:
            now = utcnow()
            observation = Observation()
            if wants_observation(now, latest_start=latest_start, not_before=not_before):
                try:
                    observation = await asyncio.to_thread(self._observe, now, on_demand)
                except ConfigurationError as e:
                    yield TriggerEvent({"status": "error", "message": str(e), "retry": False})
                    return
                except Exception as e:  # transient (network, throttling): read again, then the task retries
                    errors += 1
                    if errors >= MAX_POLL_ERRORS:
                        yield TriggerEvent(
                            {"status": "error", "message": f"spot price poll failed: {e}", "retry": True}
                        )
                        return
                    self.log.warning(
                        "spot price poll failed (%s), %d time(s) in a row: polling again in %g s",
                        e,
                        errors,
                        self.poll_interval,
                    )
                    # No later than the latest start: its on-demand decision does not wait for a poll.
                    await asyncio.sleep(
                        max(0.0, min(self.poll_interval, (latest_start - now).total_seconds()))
                    )
                    continue
                errors = 0
            try:
                decision = decide_on_objective(
                    now=now,
                    observation=observation,
                    on_demand_usd_per_hour=on_demand,
                    forecast_starts=self.forecast_starts,
                    target_value_per_hour=target,
                    latest_start=latest_start,
                    not_before=not_before,
                    objective=objective,
                    power_kw=float(self.power_kw),
                    g_co2e_per_kwh=intensity_of_run(intensity, now, runtime),
                    runtime_hours=runtime,
                )
            except ConfigurationError as e:
                yield TriggerEvent({"status": "error", "message": str(e), "retry": False})
                return
            if decision is not None:
                yield TriggerEvent(
                    {"status": "success", "message": decision.reason, "decision": decision.to_xcom()}
                )
                return
            if not_before is not None and now < not_before:
                # Nothing was looked at yet: "price None, capacity False" read as "no spot capacity".
                self.log.info(
                    "waiting for the window to open at %s (latest start %s)",
                    not_before.isoformat(),
                    latest_start.isoformat(),
                )
            else:
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
