"""Where a :class:`~.spot_window.SpotWindowSensor` looks at the market, and its decision's record.

:class:`SpotWindowMarket`, the sensor's base, reads prices and capacity (the forecast of later starts, a look
now, the trigger's kwargs) and completes, records and returns the decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator

from costaware.adapters.spot_market import (
    forecast_window,
    intensity_of_run,
    observe_market,
    window_carbon_intensity,
)
from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.core.series import parse_instant
from costaware.core.spot_window import Observation, SpotDecision, decide_on_objective, wants_observation
from costaware.operators.rendered_values import parse_zones
from costaware.sensors.spot_window_run import try_number

if TYPE_CHECKING:
    from datetime import datetime

    from airflow.sdk import Context

    from costaware.hooks.ledger import CostLedgerHook


class SpotWindowMarket(BaseSensorOperator):
    """The market looks, the forecast and the decision's ledger entry of a spot window sensor.

    Its arguments are ``SpotWindowSensor``'s, set by its ``__init__`` (see there).

    See docs/spot-windows.md.
    """

    instance_type: str
    region: str
    expected_runtime_hours: float | str | Decimal
    availability_zone: str | None
    prices: str
    target_usd_per_hour: float | str | Decimal | None
    on_demand_usd_per_hour: float | str | Decimal | None
    history_days: int
    aws_conn_id: str | None
    cache_seconds: float
    products: list[str]
    availability: str | dict[str, str] | None
    availability_start: str | None
    availability_zones: Sequence[str] | str | None
    ledger_conn_id: str
    record_decision: bool
    tags: dict[str, str]

    # -- the market -----------------------------------------------------------------------------------

    def _zone(self) -> str | None:
        """The rendered ``availability_zone``; None when not given (a template of an unset param: "None")."""
        zone = blank(self.availability_zone)
        return None if zone is None else str(zone)

    @cached_property
    def ledger_hook(self) -> CostLedgerHook:
        """The cost ledger hook (built on first use, not at parse time)."""
        from costaware.hooks.ledger import CostLedgerHook

        return CostLedgerHook(ledger_conn_id=self.ledger_conn_id)

    def _forecast_starts(
        self, now: datetime, latest_start: datetime, runtime: Decimal, carbon: dict[str, Any]
    ) -> list[list[str]]:
        """Forecast mean price (or objective value) of a run per whole-hour start up to the latest start."""
        objective = _objective(carbon)
        return forecast_window(
            prices=self.prices,
            instance_type=self.instance_type,
            region=self.region,
            aws_conn_id=self.aws_conn_id,
            ttl_seconds=self.cache_seconds,
            products=self.products,
            zones=self._zones() or [self._zone()],
            now=now,
            latest_start=latest_start,
            runtime_hours=runtime,
            history_days=self.history_days,
            objective=objective,
            intensity=window_carbon_intensity(
                carbon.get("carbon"),
                region=self.region,
                objective=objective,
                latest_start=latest_start,
                runtime_hours=runtime,
                at=now,
            ),
            power_kw=float(carbon.get("power_kw", 0.0)),
        )

    def _decide_now(self, plan: dict[str, Any], now: datetime) -> SpotDecision | None:
        latest_start = parse_instant(plan["latest_start"], name="latest_start")
        not_before = parse_instant(plan["not_before"], name="not_before") if plan["not_before"] else None
        on_demand = Decimal(plan["on_demand_usd_per_hour"])
        observation = Observation()
        if wants_observation(now, latest_start=latest_start, not_before=not_before):
            observation = observe_market(now=now, on_demand_usd_per_hour=on_demand, **self._observe_kwargs())
        objective = _objective(plan)
        runtime = Decimal(plan["runtime_hours"])
        # As far as the plan reads it (and the trigger): an import starting past two weeks was read by the
        # plan and not by the poke, which valued a run now otherwise.
        intensity = window_carbon_intensity(
            plan.get("carbon"),
            region=self.region,
            objective=objective,
            latest_start=latest_start,
            runtime_hours=runtime,
            at=now,
        )
        return decide_on_objective(
            now=now,
            observation=observation,
            on_demand_usd_per_hour=on_demand,
            forecast_starts=plan["forecast_starts"],
            target_value_per_hour=Decimal(plan["target_usd_per_hour"])
            if plan["target_usd_per_hour"]
            else None,
            latest_start=latest_start,
            not_before=not_before,
            objective=objective,
            power_kw=float(plan.get("power_kw", 0.0)),
            g_co2e_per_kwh=intensity_of_run(intensity, now, runtime),
            runtime_hours=runtime,
        )

    def _zones(self) -> list[str] | None:
        """The rendered ``availability_zones`` as a list of zone names, or None when not set."""
        return list(parse_zones(self.availability_zones)) or None

    def _observe_kwargs(self) -> dict[str, Any]:
        """Where prices and capacity come from: the trigger's kwargs and :func:`observe_market`'s."""
        zone_traces: dict[str, str] | None = None
        availability = self.availability
        zones = self._zones()
        if isinstance(availability, dict):
            if not zones:
                raise ConfigurationError(
                    f"availability maps zones to traces ({', '.join(availability)}) but availability_zones "
                    "is not set; list the zones, or give one trace path"
                )
            zone_traces, availability = {str(k): str(v) for k, v in availability.items()}, None
            unlisted = [zone for zone in zone_traces if zone not in zones]
            if unlisted:
                # A misspelt zone ("us-east-1x" for "us-east-1b") was ignored, and the zone meant was judged
                # by its price alone, with no word said.
                import difflib

                close = sorted({m for z in unlisted for m in difflib.get_close_matches(z, zones, n=1)})
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise ConfigurationError(
                    f"availability maps zone(s) {', '.join(map(repr, unlisted))}{hint} that "
                    f"availability_zones ({', '.join(zones)}) does not list; key each trace by one of them"
                )
        elif availability and zones and len(zones) == 1:
            # One zone, one trace: that zone's (it was refused as "lists 1 zones").
            zone_traces, availability = {zones[0]: str(availability)}, None
        elif availability and zones:
            raise ConfigurationError(
                f"availability {availability!r} is one trace but availability_zones lists "
                f"{len(zones)} zones; map each zone to its trace, e.g. "
                "{'us-east-1a': 'a.json', 'us-east-1b': 'b.json'}"
            )
        return {
            "availability_zones": zones,
            "zone_availability": zone_traces,
            "availability_zone": self._zone(),
            "availability": availability,
            "prices": self.prices,
            "instance_type": self.instance_type,
            "region": self.region,
            "aws_conn_id": self.aws_conn_id,
            "ttl_seconds": self.cache_seconds,
            "products": self.products,
            "availability_start": self.availability_start,
        }

    # -- the decision's record ------------------------------------------------------------------------

    def _finish(self, context: Context, plan: dict[str, Any], decision: SpotDecision) -> dict[str, str]:
        """Complete the decision with the job, record it, and return its XCom."""
        result = decision.for_job(
            instance_type=self.instance_type,
            region=self.region,
            priority=plan.get("priority", "normal"),
            on_demand_usd_per_hour=Decimal(plan["on_demand_usd_per_hour"]),
            expected_runtime_hours=Decimal(plan["runtime_hours"]),
            latest_start=parse_instant(plan["latest_start"], name="latest_start"),
            deadline=parse_instant(plan["deadline"], name="deadline"),
            availability_zone=self._zone(),
        )
        self.log.info("decision: %s at %s USD/hour: %s", result.market, result.usd_per_hour, result.reason)
        if self.record_decision:
            self._record(context, result)
        return result.to_xcom()

    def _record(self, context: Context, result: SpotDecision) -> None:
        from costaware.core.spot_estimate import decision_entry
        from costaware.glue import run_tags

        ti = context.get("ti")
        entry = decision_entry(
            result,
            dag_id=str(getattr(ti, "dag_id", None) or self.dag_id),
            run_id=str(getattr(ti, "run_id", None) or context.get("run_id") or "manual"),
            task_id=self.task_id,
            try_number=try_number(context),
            map_index=int(getattr(ti, "map_index", -1) if getattr(ti, "map_index", None) is not None else -1),
            instance_type=self.instance_type,
            region=self.region,
            tags=run_tags(self, context, self.tags),
        )
        self.ledger_hook.get_conn().record(entry)


def _objective(plan: dict[str, Any]) -> Objective:
    """The plan's objective (``cost`` when it has none: a plan of today's form)."""
    return Objective(plan.get("objective") or "cost", float(plan.get("carbon_usd_per_tonne") or 0.0))
