"""``RemoteTrainingOperator``'s plan arguments: where, on what and on which market the training runs.

Like ``training_args.py`` for the built-in trainer's arguments: Airflow renders templates in operator
attributes, so the arguments stay attributes of the operator (and show in its Rendered Template view);
:meth:`RemotePlanArguments._plan_arguments` turns the rendered ones into one
:class:`~costaware.training.plan.PlanArguments`, and :meth:`RemotePlanArguments._decision` reads the
``SpotWindowSensor`` decision each of them falls back to. ``make_plan`` then fixes the plan. What is
checked as the DAG writes it out, when the DAG is parsed, is in ``remote_training_parse_checks.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.adapters.compute.base import (
    backend_class,
    check_aws_regions,
    check_backend,
    check_market,
    check_zone,
    zone_check,
)
from costaware.adapters.compute.job_contract import check_grace_seconds
from costaware.adapters.spot_market import check_prices
from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError, check_keywords
from costaware.core.spot_window import given_priority
from costaware.glue import as_bool, check_tags
from costaware.operators.remote_instance_type import check_written_instance_type
from costaware.operators.remote_training_parse_checks import (
    check_written_capacity_labels,
    check_written_instants,
    check_written_job_env,
    check_written_job_tags,
    check_written_objective,
)

# Moved to rendered_values (read by the spot window sensor too); importable from here as before.
from costaware.operators.rendered_values import parse_decision as parse_decision
from costaware.operators.rendered_values import parse_mapping as parse_mapping
from costaware.operators.rendered_values import parse_names as parse_names
from costaware.operators.rendered_values import parse_zones as parse_zones
from costaware.operators.rendered_values import rendered_text_dicts, text_renderer
from costaware.operators.templating import is_literal
from costaware.training.plan import blank

if TYPE_CHECKING:
    from costaware.core.spot_decision import SpotDecision
    from costaware.training.plan import PlanArguments


def backend_grace_seconds(
    value: object, backend: str, backend_options: Mapping[str, Any] | str | None
) -> float:
    """``preemption_grace_seconds`` as rendered, or blank: the default of ``backend`` with its options.

    110 s (inside AWS's 120 s spot notice); on Batch, ECS's ``stop_timeout_seconds`` (30 s unless raised)
    less the launcher's margin, what the submit gives the command anyway: 110 s there was cut, with a
    warning at every submit.

    Raises:
        ConfigurationError: a value that is no number of seconds > 0, named.
    """
    from costaware.adapters.compute.job_contract import DEFAULT_GRACE_SECONDS, launcher_grace_seconds

    if blank(value) is not None:
        return check_grace_seconds(value)
    if backend != "batch":
        return DEFAULT_GRACE_SECONDS
    from costaware.adapters.compute.batch import ECS_STOP_TIMEOUT_SECONDS

    options = parse_mapping(backend_options, name="backend_options")
    try:
        stop = float(options.get("stop_timeout_seconds", ECS_STOP_TIMEOUT_SECONDS))
    except (TypeError, ValueError):
        return DEFAULT_GRACE_SECONDS  # the backend names the bad option, before any submit
    if not math.isfinite(stop) or stop <= 0:
        return DEFAULT_GRACE_SECONDS
    return launcher_grace_seconds(stop)


class RemotePlanArguments:
    """A mixin of ``RemoteTrainingOperator``: the plan's arguments and the spot decision they fall back to."""

    task_id: str
    image: str | None
    preemption_grace_seconds: float | str | None
    backend: str
    backend_options: Mapping[str, Any] | str
    _backend_options_written: Mapping[str, Any] | str
    spot_decision: Any
    spot_task_id: str | None
    job_market: str | None
    job_instance_type: str | None
    _instance_type_written: str | None
    _backend_written: str
    job_region: str | None
    spot_usd_per_hour: str | None
    on_demand_usd_per_hour: str | None
    deadline: str | None
    latest_start: str | None
    checkpoint_every_seconds: float | str | None
    tags: dict[str, str]
    aws_conn_id: str | None
    pause_on_price: bool | str
    prices: str | None
    availability: str | Mapping[str, str] | None
    expected_runtime_hours: str | float | None
    priority: str | None
    restart_overhead_minutes: float
    history_days: int
    availability_zones: Sequence[str] | str | None
    allowed_regions: Sequence[str] | str | None
    restart_guard: bool | str
    objective: str
    carbon_usd_per_tonne: float | str | None
    carbon: str | None

    if TYPE_CHECKING:

        @property
        def log(self) -> Any: ...

        def get_dag(self) -> Any: ...

    def _keep_plan_arguments(
        self,
        *,
        image: str | None,
        preemption_grace_seconds: float | str | None,
        backend: str,
        backend_options: Mapping[str, Any] | str | None,
        spot_decision: Any,
        spot_task_id: str | None,
        market: str | None,
        instance_type: str | None,
        region: str | None,
        spot_usd_per_hour: str | None,
        on_demand_usd_per_hour: str | None,
        deadline: str | None,
        latest_start: str | None,
        tags: Mapping[str, str] | None,
        aws_conn_id: str | None,
        pause_on_price: bool | str,
        prices: str | None,
        availability: str | Mapping[str, str] | None,
        expected_runtime_hours: str | float | None,
        priority: str | None,
        restart_overhead_minutes: float,
        history_days: int,
        availability_zones: Sequence[str] | str | None = None,
        allowed_regions: Sequence[str] | str | None = None,
        restart_guard: bool | str = False,
        objective: str = "cost",
        carbon_usd_per_tonne: float | str | None = None,
        carbon: str | None = None,
    ) -> None:
        """Keep the arguments; check what needs no rendering (the message names the argument)."""
        self.image = image
        # Templated: a value written out is checked now, when the DAG is parsed; blank is the backend's.
        self.preemption_grace_seconds = preemption_grace_seconds
        if is_literal(preemption_grace_seconds) and blank(preemption_grace_seconds) is not None:
            self.preemption_grace_seconds = check_grace_seconds(preemption_grace_seconds)
        # Templated, checked again by the plan; a value written out is checked now, when the DAG is parsed.
        if is_literal(backend):
            check_backend(backend)
        # Written out empty, they were read as unset: market "" as on-demand, unsaid. Left out: unset.
        for name, value in (("market", market), ("instance_type", instance_type), ("region", region)):
            if isinstance(value, str) and not value.strip():
                raise ConfigurationError(
                    f"{type(self).__name__} {self.task_id!r}: {name} is '': leave it out to take the spot "
                    "window decision's, or give one"
                )
        if is_literal(market) and blank(market) is not None:
            check_market(market)
        unlisted_type = check_written_instance_type(instance_type, backend, on_demand_usd_per_hour)
        if unlisted_type:
            self.log.warning("%s %r: %s", type(self).__name__, self.task_id, unlisted_type)
        if is_literal(region) and region is not None:
            check_aws_regions([str(region)], name="region")  # "us-east-1a" (a zone) or "us east 1"
        if is_literal(priority):
            given_priority(priority)
        self.backend = backend
        if not isinstance(backend_options, str | Mapping | None):
            raise ConfigurationError(
                f"{type(self).__name__} {self.task_id!r}: backend_options must be a dict of option to value "
                f"(or the JSON text of one), got {backend_options!r}"
            )
        self.backend_options = (
            backend_options if isinstance(backend_options, str) else dict(backend_options or {})
        )
        # Rendering sets a new value: this one tells which options were templates (rendered_text_dicts).
        self._backend_options_written = self.backend_options
        if is_literal(backend) and isinstance(backend_options, Mapping):
            # A misspelt option written out ('spot_queu') failed only when the task started, after the
            # spend gate and the spot window; the options the backend needs are checked then, once rendered.
            check_keywords(
                backend_class(str(backend or "local")),
                [str(name) for name in backend_options],
                field="backend_options",
                of=f"the {backend or 'local'} backend",
            )
            check_written_job_env(str(backend or "local"), backend_options)
            check_written_job_tags(str(backend or "local"), backend_options)
            check_written_capacity_labels(str(backend or "local"), backend_options)
        if instance_type is None and spot_decision is None and not spot_task_id:
            # Nothing could name it once rendered: say so as the DAG is parsed, not when the task starts.
            raise ConfigurationError(
                f"{type(self).__name__} {self.task_id!r} has no instance type: pass instance_type, or "
                "spot_task_id (or spot_decision) naming a spot window decision, which has one"
            )
        self.spot_decision = spot_decision
        self.spot_task_id = spot_task_id
        # Not named instance_type/market/region/usd_per_hour: the cost listener reads those attributes to
        # price the worker's own time, and the worker only waits here; the training is billed per attempt.
        self.job_market = market
        self.job_instance_type = instance_type
        # As written: a template of either is checked once rendered (_check_rendered_instance_type).
        self._instance_type_written = instance_type
        self._backend_written = backend
        self.job_region = region
        self.spot_usd_per_hour = spot_usd_per_hour
        self.on_demand_usd_per_hour = on_demand_usd_per_hour
        check_written_instants(deadline, latest_start)
        self.deadline = deadline
        # As written: a template of it that renders not given ("{{ params.deadline }}" unset) is warned.
        self._deadline_written = deadline
        self.latest_start = latest_start
        self.tags = check_tags(tags or {}, owner=f"{type(self).__name__} {self.task_id!r}")
        self.aws_conn_id = aws_conn_id
        self.pause_on_price = pause_on_price
        self.prices = prices
        self.availability = availability
        self.expected_runtime_hours = expected_runtime_hours
        self.priority = priority
        if (
            isinstance(restart_overhead_minutes, bool)
            or not isinstance(restart_overhead_minutes, int | float | Decimal)
            or not 0 <= restart_overhead_minutes < math.inf
        ):
            raise ConfigurationError(
                f"restart_overhead_minutes must be a number of minutes >= 0, got {restart_overhead_minutes!r}"
            )
        self.restart_overhead_minutes = restart_overhead_minutes
        if not isinstance(history_days, int) or history_days < 1:
            raise ConfigurationError(f"history_days must be an integer >= 1, got {history_days!r}")
        self.history_days = history_days
        # Templated, so checked again after rendering; a value written out is checked now, when the DAG is
        # parsed, instead of failing the task after the spend gate reserved its money.
        if is_literal(availability_zones):
            # As the backend checks its zones; a backend known only after rendering: any zone label for now.
            parse_zones(availability_zones, check=zone_check(backend) if is_literal(backend) else check_zone)
        if is_literal(allowed_regions):
            check_aws_regions(parse_names(allowed_regions, name="allowed_regions"))
        if is_literal(restart_guard):
            as_bool(restart_guard, "restart_guard")
        self.availability_zones = availability_zones
        self.allowed_regions = allowed_regions
        self.restart_guard = restart_guard
        self.objective = objective
        self.carbon_usd_per_tonne = carbon_usd_per_tonne
        self.carbon = carbon
        check_written_objective(objective, carbon_usd_per_tonne, carbon, pause_on_price)

    def _decision(self, context: Mapping[str, Any]) -> SpotDecision | None:
        """The spot window decision: ``spot_task_id``'s XCom, else the rendered ``spot_decision``, or None.

        Raises:
            ConfigurationError: ``spot_task_id`` left no XCom, or the decision cannot be read.
        """
        if self.spot_task_id:
            ti = context.get("ti")
            pulled = ti.xcom_pull(task_ids=self.spot_task_id) if ti is not None else None
            if pulled is None:
                raise ConfigurationError(self._no_decision_message(context))
            return parse_decision(pulled)
        return parse_decision(self.spot_decision)

    def _no_decision_message(self, context: Mapping[str, Any]) -> str:
        """Why ``spot_task_id`` left no decision, as far as the DAG tells: a misspelt or unwired task.

        "check spot_task_id" alone left a typo ("spot_windw") or a sensor not upstream to be found by hand.
        """
        import difflib

        wanted = str(self.spot_task_id)
        dag, task = context.get("dag"), context.get("task")
        if dag is not None and wanted not in dag.task_ids:
            close = difflib.get_close_matches(wanted, dag.task_ids, n=1)
            tasks = ", ".join(sorted(dag.task_ids))
            hint = f"did you mean {close[0]!r}?" if close else f"its tasks are {tasks}"
            return f"spot_task_id {wanted!r} names no task of DAG {dag.dag_id!r}: {hint}"
        if task is not None and wanted not in task.get_flat_relative_ids(upstream=True):
            return (
                f"task {wanted!r} left no spot decision in XCom: it is not upstream of {self.task_id!r}, so "
                f"it need not have run first; set {wanted} >> {self.task_id}"
            )
        return f"task {wanted!r} left no spot decision in XCom: check spot_task_id"

    def _checked_prices(self) -> str | None:
        """The rendered ``prices``, checked now where something reads them.

        A file that is not there would only show in a warning after a paid attempt. SageMaker bills its own
        prices and reads these only to pause.
        """
        prices = blank(self.prices)
        if prices is None:
            return None
        if str(self.backend) == "sagemaker" and not as_bool(self.pause_on_price, "pause_on_price"):
            return str(prices)
        return check_prices(prices)

    def _plan_arguments(self, context: Mapping[str, Any]) -> PlanArguments:
        """The rendered arguments as one value (after Airflow rendered the templates with ``context``)."""
        from costaware.training.plan import PlanArguments

        # The zones are checked as the backend checks them, by the plan (require_zone_placement).
        regions = parse_names(self.allowed_regions, name="allowed_regions")
        check_aws_regions(regions)
        return PlanArguments(
            backend=str(self.backend),
            backend_options=rendered_text_dicts(
                str(self.backend),
                self._backend_options_written,
                parse_mapping(self.backend_options, name="backend_options"),
                text_renderer(self.get_dag(), context),
            ),
            market=self.job_market,
            instance_type=self.job_instance_type,
            region=self.job_region,
            spot_usd_per_hour=self.spot_usd_per_hour,
            on_demand_usd_per_hour=self.on_demand_usd_per_hour,
            deadline=self.deadline,
            latest_start=self.latest_start,
            image=self.image,
            grace_seconds=backend_grace_seconds(
                self.preemption_grace_seconds, str(self.backend), self.backend_options
            ),
            checkpoint_every_seconds=self.checkpoint_every_seconds,
            aws_conn_id=self.aws_conn_id,
            pause_on_price=as_bool(self.pause_on_price, "pause_on_price"),
            prices=self._checked_prices(),
            availability=self.availability,
            expected_runtime_hours=self.expected_runtime_hours,
            priority=self.priority,
            restart_overhead_minutes=self.restart_overhead_minutes,
            history_days=self.history_days,
            availability_zones=parse_names(self.availability_zones, name="availability_zones"),
            allowed_regions=regions,
            restart_guard=as_bool(self.restart_guard, "restart_guard"),
            # Checked here, after rendering: a bad objective fails the task whether or not it pauses.
            objective=Objective.parse(self.objective, self.carbon_usd_per_tonne).name,
            carbon_usd_per_tonne=self.carbon_usd_per_tonne,
            carbon=self.carbon,
        )
