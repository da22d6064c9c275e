"""``RemoteTrainingOperator``'s arguments as the DAG writes them out, checked when the DAG is parsed.

A value written out that the task would refuse once rendered shows as an import error, not as a task that
fails when it starts (after a spend gate may have reserved its money). A template, an ``XComArg`` or a
``dag.param`` is resolved only as the task runs, and checked then. ``RemotePlanArguments``
(``remote_training_args.py``, which these were split from) calls them as it keeps the arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError
from costaware.core.series import parse_instant
from costaware.glue import as_bool
from costaware.operators.rendered_values import JOB_ENV_OPTIONS
from costaware.operators.templating import is_literal, is_written_out
from costaware.training.plan import blank


def check_written_job_env(backend: str, backend_options: Mapping[str, Any]) -> None:
    """The job's environment option (local ``env``, SageMaker ``environment``) as the DAG writes it out.

    Checked when the DAG is parsed, so that a list of pairs or a ``"NAME=value"`` string shows as an import
    error, not as a task that fails when it starts. Airflow renders a template (``"{{ params.env }}"``),
    an ``XComArg`` or a ``dag.param`` as the task runs: the option is checked then, once rendered. A dict
    stays a dict when rendered (its values may be templates: a SageMaker value is checked here only where
    it is written out), and so does a list, a number or text with no template.

    Raises:
        ConfigurationError: the option, or a SageMaker value written out, is of a kind the backend refuses.
    """
    from costaware.adapters.compute.base import container_environment, local_job_env

    name = JOB_ENV_OPTIONS.get(backend)
    if name is None:
        return
    value = backend_options.get(name)
    written_out = isinstance(value, Mapping | list | tuple | set | frozenset | int | float | Decimal) or (
        isinstance(value, str) and is_literal(value)
    )
    if not written_out:
        return  # None (no variables), or resolved as the task runs
    if backend == "local":
        local_job_env(value)
    elif isinstance(value, Mapping):
        # Airflow renders the values, never the names: a value it resolves is checked once rendered.
        container_environment({key: item for key, item in value.items() if is_literal(item)})
    else:
        container_environment(value)


def check_written_job_tags(backend: str, backend_options: Mapping[str, Any]) -> None:
    """SageMaker's and Batch's ``tags``, Kubernetes' ``node_selector``, as the DAG writes them out.

    Like :func:`check_written_job_env`, checked when the DAG is parsed: text, a list, a number, a key AWS
    or Kubernetes refuses or too many tags show as an import error, not as a task that fails when it
    starts. A template, an ``XComArg`` or a ``dag.param`` is checked once rendered; of a dict, the keys are
    checked here (Airflow never renders them) and a value it renders stands in as ``''`` until then.

    Raises:
        ConfigurationError: the option, a key or a value written out, or the number of tags, the backend's
            service refuses.
    """
    from costaware.adapters.compute.base import job_tags, node_selector_labels

    if backend in ("sagemaker", "batch"):
        name, check = "tags", lambda labels: job_tags(labels, backend)
    elif backend == "kubernetes":
        name, check = "node_selector", node_selector_labels
    else:
        return
    labels = backend_options.get(name)
    if isinstance(labels, Mapping):
        check({key: value if is_literal(value) else "" for key, value in labels.items()})
    elif isinstance(labels, list | tuple | set | frozenset | int | float | Decimal) or (
        isinstance(labels, str) and is_literal(labels)
    ):
        check(labels)


def check_written_capacity_labels(backend: str, backend_options: Mapping[str, Any]) -> None:
    """Kubernetes' ``capacity_label`` and ``capacity_values`` as the DAG writes them out, checked at parse.

    They go into every pod's nodeSelector: one that is no label failed every run as its task started. A
    template, an ``XComArg`` or a ``dag.param`` (or a dict holding one) is checked once rendered.

    Raises:
        ConfigurationError: a label key or a value per market, written out, that Kubernetes refuses.
    """
    from costaware.adapters.compute.base import capacity_label_key, capacity_label_values

    if backend != "kubernetes":
        return
    if "capacity_label" in backend_options and is_literal(backend_options["capacity_label"]):
        capacity_label_key(backend_options["capacity_label"])
    if is_written_out(backend_options.get("capacity_values")):
        capacity_label_values(backend_options.get("capacity_values"))


def check_written_instants(deadline: Any, latest_start: Any) -> None:
    """Check a deadline and latest start written out in the DAG now, as the plan reads them once rendered.

    A naive or mistyped time passed the parse and failed the task only when it ran, after a spend gate had
    reserved its money (the spot window sensor refuses the same values as the DAG is parsed).

    Raises:
        ConfigurationError: a time that is not ISO-8601 or has no time zone, or a latest start after the
            deadline, named.
    """
    instants = {
        name: parse_instant(value, name=name)
        for name, value in (("deadline", deadline), ("latest_start", latest_start))
        if blank(value) is not None and (is_literal(value) or isinstance(value, datetime))
    }
    if len(instants) == 2 and instants["latest_start"] > instants["deadline"]:
        raise ConfigurationError(
            f"latest_start {instants['latest_start'].isoformat()} is after the deadline "
            f"{instants['deadline'].isoformat()}: the last moment to start on-demand must come before the "
            "deadline"
        )


def check_written_objective(objective: Any, usd_per_tonne: Any, carbon: Any, pause_on_price: Any) -> None:
    """The objective's settings as written out, checked when the DAG is parsed.

    Found after rendering, "carbn" failed the task once the spend gate had reserved its money.

    Raises:
        ConfigurationError: an unknown objective, ``cost+carbon`` without its price, a grid zone or file
            the pause rule could not read, or a carbon objective with ``pause_on_price`` off (the pause rule
            is all it steers here: the start is the spot window's).
    """
    from costaware.adapters.spot_market import check_carbon_source

    if not is_literal(objective) or not (usd_per_tonne in (None, "") or is_literal(usd_per_tonne)):
        return
    parsed = Objective.parse(objective, usd_per_tonne)
    parsed.check_settings_used(usd_per_tonne, carbon if is_literal(carbon) else None)
    if not parsed.needs_carbon:
        return
    if is_literal(pause_on_price) and not as_bool(pause_on_price, "pause_on_price"):
        raise ConfigurationError(
            f"objective={objective!r} steers only the pause rule here, and pause_on_price is off: set "
            "pause_on_price=True, or give the objective to the SpotWindowSensor that chooses the start"
        )
    if is_literal(carbon) and blank(carbon) is not None:  # "None" or "null": the region's zone, as the plan
        check_carbon_source(str(carbon), region=None, objective=parsed)
