"""``SpotWindowSensor``: in the off-peak window, wait for the best spot start; fall back to on-demand in time.

Its decision, a :class:`~costaware.core.spot_window.SpotDecision`, is the task's XCom as
``{"market", "usd_per_hour", "reason", ...}`` (money as text, :meth:`~SpotDecision.to_xcom`) and an estimated
compute entry in the cost ledger; the training task downstream reads ``market`` to choose spot or on-demand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from costaware.adapters.compute.base import check_aws_zone
from costaware.adapters.spot_market import (
    LIVE,
    carbon_intensity,
    check_prices,
    forecast_window,
    instance_power_kw,
    intensity_of_run,
    observe_market,
)
from costaware.core import spot_window as rules
from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant
from costaware.core.spot_window import (
    Observation,
    SpotDecision,
    decide_on_objective,
    given_priority,
    wants_observation,
)
from costaware.glue import (
    DEFAULT_AWS_CONN_ID,
    DEFAULT_LEDGER_CONN_ID,
    airflow_errors,
    check_tags,
    parse_decimal,
)
from costaware.operators.remote_training_args import parse_zones
from costaware.operators.templating import is_literal
from costaware.sensors.spot_window_arguments import (
    check_target_fits,
    check_written,
    parse_overhead_and_history,
    price,
)
from costaware.sensors.spot_window_run import (
    late_deadline_remedy,
    past_window,
    record_rescheduled_wait,
    run_type_of,
    starts_in_window,
    try_key,
    try_number,
    try_started,
    waited_at_a_rescheduled_poke,
)
from costaware.triggers.spot_window import SpotWindowTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.hooks.ledger import CostLedgerHook


class SpotWindowSensor(BaseSensorOperator):
    """Waits for a good spot start; falls back to on-demand when waiting longer would miss the deadline.

    See docs/spot-windows.md.

    It starts on spot when spot has capacity and its price is at or below ``target_usd_per_hour`` or the
    lowest forecast mean price of any later start in the window (an hour-of-week profile of the price history,
    see ``costaware.core.forecast``). At ``deadline - expected_runtime_hours - restart_overhead_minutes`` it
    stops waiting and chooses on-demand. With ``deferrable=True`` it waits in the triggerer.

    Args:
        instance_type: EC2 instance type (templated).
        region: AWS region (templated).
        expected_runtime_hours: Expected training time (templated).
        availability_zone: Zone whose price to use; default the region's cheapest zone (templated).
        prices: ``"live"`` for EC2 ``DescribeSpotPriceHistory`` through ``aws_conn_id``, or the path of a
            recorded price file (JSON or CSV) (templated; one rendered empty, ``None`` or ``null`` is
            ``"live"``).
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
        self.instance_type = instance_type
        self.region = region
        self.expected_runtime_hours = expected_runtime_hours
        if is_literal(availability_zone) and blank(availability_zone) is not None:
            check_aws_zone(str(availability_zone))  # a typo would otherwise match no zone's prices
        self.availability_zone = availability_zone
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

    def _zone(self) -> str | None:
        """The rendered ``availability_zone``; None when not given (a template of an unset param: "None")."""
        zone = blank(self.availability_zone)
        return None if zone is None else str(zone)

    @cached_property
    def ledger_hook(self) -> CostLedgerHook:
        """The cost ledger hook (built on first use, not at parse time)."""
        from costaware.hooks.ledger import CostLedgerHook

        return CostLedgerHook(ledger_conn_id=self.ledger_conn_id)

    # -- planning -------------------------------------------------------------------------------------

    def _plan(
        self, context: Context, now: datetime, *, forecast: bool = True, say: bool = True
    ) -> dict[str, Any]:
        """Everything the decision needs, as JSON primitives (they also become the trigger's kwargs).

        ``say=False`` rebuilds the plan of a wait that is over: what it would say of the run's deadline was
        said when the wait began (now past the latest start, it would warn of an on-demand start as if due
        to a deadline too near).
        """
        if self._zone() is not None:
            check_aws_zone(str(self.availability_zone))  # rendered: checked before any decision uses it
        # Checked now: a run that decides at once never reads the file. A rendered "None" or " " is not
        # given, as RemoteTrainingOperator in the same DAG reads it: live prices (and priority normal).
        self.prices = check_prices(blank(self.prices) or LIVE)
        runtime = parse_decimal(self.expected_runtime_hours, name="expected_runtime_hours", positive=True)
        deadline_value = (
            self.deadline if blank(self.deadline) is not None else context.get("data_interval_end")
        )
        if deadline_value is None:
            # A run started by hand or through the API without a logical date has no data interval: with
            # no deadline either, decide now. No slack is left to absorb a spot interruption, so the
            # deadline-aware rule picks on-demand; give a deadline to let such a run use spot.
            deadline = now + timedelta(hours=float(runtime), minutes=self.restart_overhead_minutes)
            self.log.info(
                "no deadline and no data interval (a manual run): deciding now, deadline %s", deadline
            )
        else:
            deadline = parse_instant(deadline_value, name="deadline")
        given_deadline = blank(self.deadline) is not None
        asked = not is_literal(self._deadline_written)
        if say and asked and not given_deadline and self._warn_once("deadline not given", context):
            # Asked for by a template, then dropped at INFO: a manual run went on-demand at once unwarned.
            self.log.warning(
                "deadline %r rendered %r, which is not given (blank, None or null): %s; give the param a "
                "value for a deadline of this run's own",
                self._deadline_written,
                self.deadline,
                "the run's data interval end is the deadline"
                if deadline_value is not None
                else "with no data interval either, the decision is taken now, with no slack for spot",
            )
        start_value = blank(self.earliest_start)
        window_start = start_value is None
        start_value = start_value or context.get("data_interval_start")
        not_before = parse_instant(start_value, name="earliest_start") if start_value else None
        priority = given_priority(self.priority)
        latest = rules.latest_start(
            deadline=deadline,
            runtime_hours=runtime,
            restart_overhead_minutes=self.restart_overhead_minutes,
            priority=priority,
        )
        if not window_start and not_before is not None and not_before > latest:
            # Waiting for earliest_start would miss the deadline; starting before it would break it.
            raise ConfigurationError(
                f"earliest_start {not_before.isoformat()} is after {latest.isoformat()}, the latest start "
                f"that the deadline {deadline.isoformat()} allows for {runtime} hour(s) of work: move "
                "earliest_start earlier or the deadline later"
            )
        if given_deadline and window_start and not_before is not None and not_before > latest:
            # A deadline given for this run (the trigger form's) wins over the run's window: waiting for
            # the window to open would miss it.
            if say and self._warn_once("deadline before the window", context):
                self.log.warning(
                    "the deadline %s leaves no time to wait for the run's window to open (%s): not waiting "
                    "for the window",
                    deadline.isoformat(),
                    not_before.isoformat(),
                )
            not_before = None
        # A deadline argument already past was chosen for this run: its warning says to give a later one.
        window_over = None if given_deadline or not say else past_window(context, now)
        first_look = self._first_look(context, now)
        # A poke_interval longer than the slack after the latest start pokes first too late for on-demand to
        # finish by the deadline: no plan (judged by the deadline alone, a poke an hour before a 1-hour
        # run's deadline was "as planned"). best_effort's latest start is its deadline, which it may finish
        # after (a soft deadline).
        in_time = now + timedelta(hours=float(runtime)) <= deadline or priority == "best_effort"
        # Begun before the latest start is not enough: a try put off at its start never looked until now.
        waited = say and first_look < latest <= now and self._looked_earlier(context)
        if say:
            self._market_looks.add(try_key(context))
        if waited and in_time:
            # This try looked before its latest start and waited for spot until it: the wait's planned end.
            # Judged by now alone, the poke reaching it was warned of a deadline "too near" (past the window's
            # end, of "a late start") as if the try had had no time to wait.
            self.log.info(
                "the wait for spot (since %s) reached the latest start %s: on-demand starts now, as planned",
                first_look.isoformat(),
                latest.isoformat(),
            )
        elif waited:
            self.log.warning(
                "the first poke after the latest start %s came at %s, too late for %s hour(s) of on-demand "
                "work to finish by the deadline %s (the wait for spot began at %s). Give the sensor a "
                "poke_interval (now %g s) shorter than its restart_overhead_minutes (%s), or deferrable=True "
                "(its trigger starts on-demand at the latest start)",
                latest.isoformat(),
                now.isoformat(),
                runtime,
                deadline.isoformat(),
                first_look.isoformat(),
                self.poke_interval,
                self.restart_overhead_minutes,
            )
        elif say and first_look < latest <= now:
            # Its first reschedule is a put-off start, not a look: it had no wait, nor a deadline too near.
            self.log.warning(
                "this try (try %s) started at %s, before its latest start %s, but the worker could not "
                "load the DAG and put its start off ([workers] missing_dag_retries): it first looked at the "
                "market now, after the latest start, so on-demand starts now with no wait for spot. Make the "
                "DAG load on the workers at once (its import time, a DAG bundle not yet there), or give the "
                "sensor a later deadline%s",
                try_number(context),
                first_look.isoformat(),
                latest.isoformat(),
                "" if in_time else f"; it cannot finish by the deadline {deadline.isoformat()} now",
            )
        elif (
            window_over is not None and window_over.run_started is not None and first_look >= window_over.end
        ):
            # The run started inside its window on time; this task began only after the window ended (its
            # upstream tasks, a slot in Airflow's queue, a retry). Not a catch-up: a window too tight. Judged
            # by the try's start: a try that had waited in the window was told it started at its last poke.
            self.log.warning(
                "a late start: the run started at %s, inside its window, but this task (try %s) started at "
                "%s, after the window ended at %s (it waited for the tasks before it, for a worker, pool or "
                "parallelism slot in Airflow's queue, or it is a retry), so its deadline %s is past and "
                "on-demand starts now. To keep such runs on spot, leave the window room for the tasks "
                "before this one, give the pool or parallelism more slots, or give the sensor a deadline "
                "later than the window's end",
                window_over.run_started.isoformat(),
                try_number(context),
                first_look.isoformat(),
                window_over.end.isoformat(),
                deadline.isoformat(),
            )
        elif window_over is not None and window_over.run_started is None:
            # A catch-up or backfill run: its window is over, so a deadline counted from it is past as a
            # rule, not by mistake. It still trains, at once, on the market that cannot be interrupted: a
            # deadline already missed leaves no room to wait for spot.
            self.log.info(
                "a catch-up run: its data interval ended at %s and its deadline %s is past, so on-demand "
                "starts now (catchup=False leaves past windows out; a deadline argument later than now by "
                "the expected runtime and restart overhead lets such a run wait for spot)",
                window_over.end.isoformat(),
                deadline.isoformat(),
            )
        elif say and latest <= now:
            # The latest start, not the runtime alone, is what the decision reads: a deadline within the
            # runtime plus restart overhead went on-demand unwarned, and a best_effort run (latest start =
            # deadline) was told "on-demand starts now" while it waited for spot.
            self.log.warning(
                "the deadline %s (%s) is %s: no time is left to wait for spot or absorb an interruption, "
                "so on-demand starts now. To let this run use spot, %s.",
                deadline.isoformat(),
                "the deadline argument" if given_deadline else "the end of the run's data interval",
                "already past"
                if deadline <= now
                else (
                    f"too near: the latest start it allows for {runtime} hour(s) of work, "
                    f"{self.restart_overhead_minutes:g} minute(s) of restart overhead and priority "
                    f"{priority!r} was {latest.isoformat()}"
                ),
                late_deadline_remedy(
                    given_deadline=given_deadline,
                    run_type=run_type_of(context),
                    started_in_window=starts_in_window(context),
                ),
            )
        # A template of an unset param renders "None" (or "null" with tojson): unset, as for the deadline.
        if blank(self.on_demand_usd_per_hour) is not None:
            on_demand = price(self.on_demand_usd_per_hour, "on_demand_usd_per_hour", positive=True)
        else:
            from costaware.adapters.price_source import list_price

            on_demand = list_price(self.ledger_hook.get_conn(), self.instance_type, self.region)
        target = None
        if blank(self.target_usd_per_hour) is not None:
            target = str(price(self.target_usd_per_hour, "target_usd_per_hour"))
        objective = Objective.parse(self.objective, self.carbon_usd_per_tonne)
        check_target_fits(target, objective)
        carbon: dict[str, Any] = {}
        if objective.needs_carbon:
            # Only for carbon objectives: the plan and trigger kwargs of today's DAGs stay as they were.
            carbon = {
                "objective": objective.name,
                "carbon_usd_per_tonne": objective.carbon_usd_per_tonne,
                # Not given (a template of an unset param: "None", "null"): the region's zone, as the
                # remote training's plan reads it; "None" was looked up as a grid zone of that name.
                "carbon": blank(self.carbon),
                "power_kw": instance_power_kw(self.instance_type, self.region),
            }
        return carbon | {
            "runtime_hours": str(runtime),
            "deadline": deadline.isoformat(),
            "latest_start": latest.isoformat(),
            "priority": priority,
            "not_before": not_before.isoformat() if not_before else None,
            "on_demand_usd_per_hour": str(on_demand),
            "target_usd_per_hour": target,
            "forecast_starts": self._forecast_starts(now, latest, runtime, carbon) if forecast else [],
        }

    def _first_look(self, context: Context, now: datetime) -> datetime:
        """When this try first looked at the market: what the warnings of its deadline are judged by.

        A latest start already past then leaves the try no wait for spot, so warns; one reached later is
        the end of its wait. Poke mode remembers its first poke; reschedule mode loads the task anew at each
        poke, so a later poke's try began at its first reschedule (see :func:`try_started`).
        """
        tried = try_key(context)
        if tried not in self._first_looks:
            earlier = try_started(context) if context.get("task_reschedule_count") else None
            self._first_looks[tried] = min(earlier, now) if earlier is not None else now
        return self._first_looks[tried]

    def _looked_earlier(self, context: Context) -> bool:
        """Whether this try looked at the market at an earlier poke (deferrable: its look is its first).

        Poke mode pokes this task object again; reschedule mode loads it anew at each poke, and a poke that
        waited recorded it in the task state store (``task_reschedule_count`` also counts put-off starts).
        """
        if try_key(context) in self._market_looks:
            return True
        if self.reschedule and not self.deferrable:
            return waited_at_a_rescheduled_poke(context, self.log)
        return False

    def _warn_once(self, warning: str, context: Context) -> bool:
        """Whether ``warning``, about the run's arguments, is due: once a try, not at every poke.

        Poke mode pokes the same task again; reschedule mode runs execute anew, with a freshly loaded task, at
        every poke, and each poke that waited (after saying its warnings) records it in the task state store.
        ``task_reschedule_count`` is no such record: it also counts starts put off because the worker could
        not load the DAG (``[workers] missing_dag_retries``), and a try put off at its start was never warned.
        """
        pokes_rescheduled = self.reschedule and not self.deferrable
        said = (try_key(context), warning)
        if said in self._warned or (pokes_rescheduled and waited_at_a_rescheduled_poke(context, self.log)):
            return False
        self._warned.add(said)
        return True

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
            intensity=carbon_intensity(carbon.get("carbon"), region=self.region, objective=objective, at=now),
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
        intensity = carbon_intensity(plan.get("carbon"), region=self.region, objective=objective, at=now)
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
            g_co2e_per_kwh=intensity_of_run(intensity, now, Decimal(plan["runtime_hours"])),
            runtime_hours=Decimal(plan["runtime_hours"]),
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
