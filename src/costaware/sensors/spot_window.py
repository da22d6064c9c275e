"""``SpotWindowSensor``: in the off-peak window, wait for the best spot start; fall back to on-demand in time.

Its decision, a :class:`~costaware.core.spot_window.SpotDecision`, is the task's XCom as
``{"market", "usd_per_hour", "reason", ...}`` (money as text, :meth:`~SpotDecision.to_xcom`) and an estimated
compute entry in the cost ledger; the training task downstream reads ``market`` to choose spot or on-demand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from airflow.sdk import PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from costaware.adapters.compute.base import check_aws_zone
from costaware.adapters.spot_market import LIVE
from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant
from costaware.core.spot_window import SpotDecision, given_priority
from costaware.glue import DEFAULT_AWS_CONN_ID, DEFAULT_LEDGER_CONN_ID, airflow_errors, check_tags
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.operators.rendered_values import parse_zones
from costaware.operators.templating import is_literal
from costaware.sensors.spot_window_arguments import (
    check_instance_type_written,
    check_written,
    instance_type_not_bundled,
    parse_overhead_and_history,
    prices_file_missing_here,
)

# The sensor's bases: the market looks and the decision's record (spot_window_market), the plan and its
# warnings (spot_window_plan). _objective, moved there, stays importable from here.
from costaware.sensors.spot_window_market import _objective as _objective
from costaware.sensors.spot_window_plan import SpotWindowPlanning
from costaware.sensors.spot_window_run import record_rescheduled_wait
from costaware.triggers.spot_window import SpotWindowTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class SpotWindowSensor(WarnsOfDroppedDefaultArgs, SpotWindowPlanning):
    """Waits for a good spot start; falls back to on-demand when waiting longer would miss the deadline.

    See docs/spot-windows.md.

    It starts on spot when spot has capacity and its price is at or below ``target_usd_per_hour`` or the
    lowest forecast mean price of any later start in the window (an hour-of-week profile of the price history,
    see ``costaware.core.forecast``). At ``deadline - expected_runtime_hours - restart_overhead_minutes`` it
    stops waiting and chooses on-demand. With ``deferrable=True`` it waits in the triggerer.

    Args:
        instance_type: EC2 instance type (templated; written out, one the bundled price list lacks is
            warned of when the DAG is parsed, as a likely typo: the run prices it from the price cache,
            live prices, then that list, unless ``on_demand_usd_per_hour`` is given; blanks around it are
            refused, written out when the DAG is parsed, rendered when the task runs).
        region: AWS region (templated).
        expected_runtime_hours: Expected training time (templated).
        availability_zone: Zone whose price to use; default the region's cheapest zone (templated).
        prices: ``"live"`` for EC2 ``DescribeSpotPriceHistory`` through ``aws_conn_id``, or the path of a
            recorded price file (JSON or CSV) (templated; one rendered empty, ``None`` or ``null`` is
            ``"live"``; a file written out that the DAG processor does not have is warned of when the DAG is
            parsed, and refused when the task runs if the worker does not have it either).
        deadline: When training must be done, ISO text or datetime; default the run's ``data_interval_end``
            (with ``OffPeakTimetable``, the end of the window) (templated).
        earliest_start: Nothing starts before this; default the run's ``data_interval_start`` (templated).
        target_usd_per_hour: Start on spot at once at or below this price (templated).
        on_demand_usd_per_hour: On-demand price; default the bundled AWS price list (templated).
        restart_overhead_minutes: Time to (re)start training, kept free before the deadline (0 to 5256000).
        history_days: Days of live price history for the forecast (a whole 7 to 3650).
        aws_conn_id: Airflow AWS connection for live prices.
        cache_seconds: How long live price responses are reused.
        products: Spot product descriptions to keep (default Linux/UNIX).
        availability: Path of a spot availability trace, for replays and tests (templated).
        availability_start: ISO time of the trace's first sample (templated).
        availability_zones: Several zones to choose from: at each look the cheapest zone with capacity is
            taken, and the decision names it in ``availability_zone`` (templated; a list or ``"a,b"``).
            With it, ``availability`` may map each zone to its trace path.
        priority: ``"critical"`` (falls back to on-demand while a preemption can still be absorbed),
            ``"normal"`` or ``"best_effort"`` (the deadline is soft: waits for spot until the deadline
            itself) (templated, e.g. ``"{{ params.priority }}"``; one rendered empty, ``None`` or ``null``
            is ``"normal"``).
        ledger_conn_id: Connection of the cost ledger.
        record_decision: Write the decision to the ledger as an estimated compute entry.
        tags: Allocation tags of the ledger entry (team, project, owner, ...).
        deferrable: Wait in the triggerer instead of a worker slot.
        objective: What the start minimises: ``cost`` (default: the spot price), ``carbon`` (kg CO2e) or
            ``cost+carbon`` (USD plus the carbon price of the emissions) (templated; checked after rendering).
            With a carbon objective the forecast, ``target_usd_per_hour`` and the start rule work on the
            objective's hourly value: the spot price + the carbon price x the grid intensity x the instance's
            power at full load (bundled power model); spot must still be below on-demand. ``carbon`` alone
            ranks by kg CO2e and takes no ``target_usd_per_hour``. A start now is valued, as each later
            start, at the mean intensity over the hours its run covers. The decision records ``objective``
            and the run's expected ``kg_co2e``.
        carbon_usd_per_tonne: Carbon price of ``cost+carbon``, USD per tonne CO2e (templated).
        carbon: Where the grid intensity comes from: a bundled grid zone (``"GB"``) or a recorded carbon
            intensity CSV path; default the grid zone of ``region`` (templated).
    """

    template_fields: Sequence[str] = (
        "instance_type",
        "region",
        "availability_zone",
        "expected_runtime_hours",
        "prices",
        "deadline",
        "earliest_start",
        "target_usd_per_hour",
        "on_demand_usd_per_hour",
        "availability",
        "availability_start",
        "availability_zones",
        "priority",
        "objective",
        "carbon_usd_per_tonne",
        "carbon",
        "ledger_conn_id",
    )
    ui_color = "#fff4d6"

    def __init__(
        self,
        *,
        instance_type: str,
        region: str,
        expected_runtime_hours: float | str | Decimal,
        availability_zone: str | None = None,
        prices: str = LIVE,
        deadline: str | datetime | None = None,
        earliest_start: str | datetime | None = None,
        target_usd_per_hour: float | str | Decimal | None = None,
        on_demand_usd_per_hour: float | str | Decimal | None = None,
        restart_overhead_minutes: float = 10.0,
        history_days: int = 28,
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
        cache_seconds: float = 300.0,
        products: Sequence[str] = ("Linux/UNIX",),
        availability: str | dict[str, str] | None = None,
        availability_start: str | None = None,
        availability_zones: Sequence[str] | str | None = None,
        priority: str = "normal",
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        record_decision: bool = True,
        tags: dict[str, str] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        objective: str = "cost",
        carbon_usd_per_tonne: float | str | None = None,
        carbon: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        overhead, days = parse_overhead_and_history(restart_overhead_minutes, history_days)
        check_written(
            expected_runtime_hours=expected_runtime_hours,
            deadline=deadline,
            earliest_start=earliest_start,
            target_usd_per_hour=target_usd_per_hour,
            on_demand_usd_per_hour=on_demand_usd_per_hour,
            objective=objective,
            carbon_usd_per_tonne=carbon_usd_per_tonne,
        )
        check_instance_type_written(instance_type)
        unlisted = instance_type_not_bundled(instance_type, on_demand_usd_per_hour)
        if unlisted:
            self.log.warning("%s", unlisted)
        self.instance_type = instance_type
        self.region = region
        self.expected_runtime_hours = expected_runtime_hours
        if is_literal(availability_zone) and blank(availability_zone) is not None:
            check_aws_zone(str(availability_zone))  # a typo would otherwise match no zone's prices
        self.availability_zone = availability_zone
        missing_here = prices_file_missing_here(prices)
        if missing_here:
            self.log.warning("%s", missing_here)
        self.prices = prices
        self.deadline = deadline
        # As written: a template of it that renders not given ("{{ params.deadline }}" unset) is warned.
        self._deadline_written = deadline
        # Keyed by try_key (run, map index, try): dags test shares these between runs (see try_key).
        self._warned: set[tuple[tuple[str, int, int], str]] = set()  # argument warnings said (_warn_once)
        self._first_looks: dict[tuple[str, int, int], datetime] = {}  # a try's first look (_first_look)
        self._market_looks: set[tuple[str, int, int]] = set()  # the tries this task object looked in
        self.earliest_start = earliest_start
        self.target_usd_per_hour = target_usd_per_hour
        self.on_demand_usd_per_hour = on_demand_usd_per_hour
        self.restart_overhead_minutes = float(overhead)
        self.history_days = int(days)
        self.aws_conn_id = aws_conn_id
        self.cache_seconds = cache_seconds
        self.products = list(products)
        self.availability = availability
        self.availability_start = availability_start
        # A list, or text: "us-east-1a,us-east-1b" or what a template renders. Read after rendering
        # (_zones); a value written out is checked now, when the DAG is parsed.
        if is_literal(availability_zones):
            parse_zones(availability_zones)
        self.availability_zones = availability_zones
        if is_literal(priority):
            given_priority(priority)
        self.priority = priority
        self.ledger_conn_id = ledger_conn_id
        self.record_decision = record_decision
        self.tags = check_tags(tags or {}, owner=f"{type(self).__name__} {self.task_id!r}")
        self.deferrable = deferrable
        self.objective = objective
        self.carbon_usd_per_tonne = carbon_usd_per_tonne
        self.carbon = carbon
        self._check_places_written()

    def _check_places_written(self) -> None:
        """The region, zone and grid as written out, checked when the DAG is parsed (templates: at run time).

        Raises:
            ConfigurationError: a zone given as the region, a zone of another region, or a grid zone or file
                the decision could not read (a region with no grid, for a carbon objective).
        """
        from costaware.adapters.compute.base import check_aws_regions
        from costaware.adapters.spot_market import check_carbon_source
        from costaware.core.zone_choice import region_of

        for name in ("instance_type", "region", "expected_runtime_hours"):  # a deadline "": the run's end
            value = getattr(self, name)
            if isinstance(value, str) and not value.strip():  # written out empty: it failed the run
                raise ConfigurationError(f"{name} is '': give one (an unset variable or param, most likely)")
        region = self.region if is_literal(self.region) and self.region else None
        if region is not None:
            check_aws_regions([str(region)], name="region")
        zone = self.availability_zone if is_literal(self.availability_zone) else None
        listed = list(parse_zones(self.availability_zones)) if is_literal(self.availability_zones) else []
        for name, value in [("availability_zone", zone)] + [("availability_zones", z) for z in listed]:
            # Each zone listed too: one of another region passed, and failed the run as "no spot prices".
            if region is not None and value and region_of(str(value), "") != region:
                raise ConfigurationError(
                    f"{name} {value!r} is not in region {region!r}: give a zone of {region} (e.g. "
                    f"'{region}a'), or the zone's region"
                )
        literal = all(is_literal(v) for v in (self.objective, self.carbon_usd_per_tonne, self.carbon))
        # As the run reads it: carbon written "None" or "null" is the region's zone, not a zone so named.
        carbon = blank(self.carbon)
        if literal and (carbon or region is not None):
            objective = Objective.parse(self.objective, self.carbon_usd_per_tonne)
            objective.check_settings_used(carbon=carbon)
            check_carbon_source(carbon, region=region, objective=objective)

    # -- Airflow entry points -------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        """Decide at once if possible; else defer to the trigger (or poke, when not deferrable)."""
        if not self.deferrable:
            return super().execute(context)
        now = utcnow()
        with airflow_errors():
            plan = self._plan(context, now)
            decision = self._decide_now(plan, now)
            if decision is not None:
                return self._finish(context, plan, decision)
        latest_start = parse_instant(plan["latest_start"], name="latest_start")
        self._keep_gated_holds(context, latest_start)
        self.log.info("deferring: waiting for a spot start until %s at the latest", plan["latest_start"])
        self.defer(
            trigger=self._trigger(plan),
            method_name="execute_complete",
            kwargs={"plan": plan},
            timeout=max(latest_start - now, timedelta(0)) + timedelta(minutes=15),
        )

    def _keep_gated_holds(self, context: Context, latest_start: datetime) -> None:
        """While waiting, keep the spend gate's hold of the task waited for counting past the latest start.

        See :mod:`costaware.sensors.gated_holds`: a hold of the gate's ``reservation_ttl`` lapsed during a
        night's wait for spot, and another run took its money before the task billed.
        """
        from costaware.sensors.gated_holds import keep_gated_holds

        keep_gated_holds(self, context, latest_start)

    def _trigger(self, plan: Mapping[str, Any]) -> SpotWindowTrigger:
        """The trigger that waits out ``plan`` in the triggerer, polling every ``poke_interval``."""
        return SpotWindowTrigger(
            on_demand_usd_per_hour=plan["on_demand_usd_per_hour"],
            forecast_starts=plan["forecast_starts"],
            latest_start=plan["latest_start"],
            not_before=plan["not_before"],
            target_usd_per_hour=plan["target_usd_per_hour"],
            poll_interval=self.poke_interval,
            **self._observe_kwargs(),
            **{k: plan[k] for k in ("objective", "carbon_usd_per_tonne", "carbon", "power_kw") if k in plan},
            **({"runtime_hours": plan["runtime_hours"]} if "objective" in plan else {}),
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """One look at price and capacity (non-deferrable mode)."""
        now = utcnow()
        with airflow_errors():
            plan = self._plan(context, now)
            decision = self._decide_now(plan, now)
            if decision is None:
                self._keep_gated_holds(context, parse_instant(plan["latest_start"], name="latest_start"))
                if self.reschedule:
                    record_rescheduled_wait(context, now, self.log)
                return False
            return PokeReturnValue(is_done=True, xcom_value=self._finish(context, plan, decision))

    def execute_complete(
        self, context: Context, event: dict[str, Any] | None = None, plan: dict[str, Any] | None = None
    ) -> dict[str, str]:
        """Resume after the trigger: record and return its decision, or fail with its message."""
        if not event:
            raise AirflowException(f"spot window trigger ended without a decision: {event!r}")
        if plan is None:
            # `airflow dags test` resumes with the event alone; the plan (but its forecast, not needed
            # any more) follows from the task's arguments and the run, so it is rebuilt.
            with airflow_errors():
                plan = self._plan(context, utcnow(), forecast=False, say=False)
        if event.get("status") != "success":
            message = f"spot window wait failed: {event.get('message')}"
            if event.get("retry"):
                raise AirflowException(message)
            raise AirflowFailException(message)
        with airflow_errors():
            return self._finish(context, plan, SpotDecision.from_xcom(event["decision"]))
