"""How a :class:`~costaware.sensors.spot_window.SpotWindowSensor` plans its wait, and what it warns of.

:class:`SpotWindowPlanning` builds the plan (deadline, latest start, window, prices, objective) from the
rendered arguments and the run, and says once a try why a run goes on-demand at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from costaware.adapters.compute.base import check_aws_zone
from costaware.adapters.spot_market import LIVE, check_prices, instance_power_kw
from costaware.core import spot_window as rules
from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.core.series import parse_instant
from costaware.core.spot_window import given_priority
from costaware.glue import parse_decimal
from costaware.operators.templating import is_literal
from costaware.sensors.spot_window_arguments import check_target_fits, price, rendered_instance_type
from costaware.sensors.spot_window_market import SpotWindowMarket
from costaware.sensors.spot_window_run import (
    late_deadline_remedy,
    past_window,
    run_type_of,
    starts_in_window,
    try_key,
    try_number,
    try_started,
    waited_at_a_rescheduled_poke,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class SpotWindowPlanning(SpotWindowMarket):
    """The plan of a spot window sensor's wait, and its warnings of the run's deadline, once a try.

    Its arguments are ``SpotWindowSensor``'s, set by its ``__init__`` (see there).

    See docs/spot-windows.md.
    """

    deadline: str | datetime | None
    earliest_start: str | datetime | None
    restart_overhead_minutes: float
    priority: str
    objective: str
    carbon_usd_per_tonne: float | str | None
    carbon: str | None
    deferrable: bool
    _deadline_written: str | datetime | None
    _warned: set[tuple[tuple[str, int, int], str]]
    _first_looks: dict[tuple[str, int, int], datetime]
    _market_looks: set[tuple[str, int, int]]
    # This poke's read of the task state store's record of an earlier rescheduled wait (None: not read yet).
    _waited_read: bool | None = None

    # -- planning -------------------------------------------------------------------------------------

    def _plan(
        self, context: Context, now: datetime, *, forecast: bool = True, say: bool = True
    ) -> dict[str, Any]:
        """Everything the decision needs, as JSON primitives (they also become the trigger's kwargs).

        ``say=False`` rebuilds the plan of a wait that is over: what it would say of the run's deadline was
        said when the wait began (now past the latest start, it would warn of an on-demand start as if due
        to a deadline too near).
        """
        self._waited_read = None  # read at most once a poke: each read is a call to the API server
        # Before any price is looked up under it (a rendered " g5.xlarge" failed as an unknown type).
        rendered_instance_type(self.instance_type)
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
            return self._waited_at_a_rescheduled_poke(context)
        return False

    def _waited_at_a_rescheduled_poke(self, context: Context) -> bool:
        """:func:`waited_at_a_rescheduled_poke`, read once a poke (``_plan`` forgets it at each poke).

        A poke asked it for each warning due and for the wait's end: up to three reads of one key.
        """
        if self._waited_read is None:
            self._waited_read = waited_at_a_rescheduled_poke(context, self.log)
        return self._waited_read

    def _warn_once(self, warning: str, context: Context) -> bool:
        """Whether ``warning``, about the run's arguments, is due: once a try, not at every poke.

        Poke mode pokes the same task again; reschedule mode runs execute anew, with a freshly loaded task, at
        every poke, and each poke that waited (after saying its warnings) records it in the task state store.
        ``task_reschedule_count`` is no such record: it also counts starts put off because the worker could
        not load the DAG (``[workers] missing_dag_retries``), and a try put off at its start was never warned.
        """
        pokes_rescheduled = self.reschedule and not self.deferrable
        said = (try_key(context), warning)
        if said in self._warned or (pokes_rescheduled and self._waited_at_a_rescheduled_poke(context)):
            return False
        self._warned.add(said)
        return True
