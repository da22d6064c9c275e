"""The plan of a remote training: what every attempt needs, fixed when the task starts.

``RemoteTrainingOperator`` renders its arguments, reads the spot window's decision and calls
:func:`make_plan`; the :class:`RemotePlan` it returns travels inside the
:class:`~costaware.training.attempts.AttemptState` between the operator and its trigger, as JSON
(``costaware.training.pauses`` turns it into what a pause needs). No Airflow and no IO here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.series import parse_instant
from costaware.core.spot_decision import SpotDecision
from costaware.core.spot_window import check_priority

#: Backends whose jobs run on AWS and reach it through the task's AWS connection.
AWS_BACKENDS = ("sagemaker", "batch")
#: The grace period of a plan written before it was part of the plan.
_DEFAULT_GRACE_SECONDS = 110.0


def blank(value: Any) -> Any:
    """``value``, or None when a template rendered it empty (``""``, ``"None"``)."""
    return None if value in (None, "", "None") else value


def positive_hours(value: Any, *, name: str, why: str) -> Decimal:
    """``value`` as a number of hours > 0.

    Raises:
        ConfigurationError: anything else; the message says ``why`` it is needed.
    """
    try:
        hours = Decimal(str(value))
    except ArithmeticError:
        hours = Decimal(0)
    if value in (None, "") or not hours.is_finite() or hours <= 0:
        raise ConfigurationError(f"{why} needs the expected runtime, got {value!r}: pass {name} (hours > 0)")
    return hours


@dataclass(frozen=True, slots=True)
class PriceWatch:
    """What pausing a spot attempt on its price needs (``pause_on_price``).

    Args:
        prices: ``"live"`` or the path of a recorded spot price file.
        availability: A spot capacity trace for resumes, or None.
        availability_zone: The zone of the decision, or None (the region's cheapest).
        runtime_hours: The training's expected runtime, a decimal string.
        priority: ``critical``, ``normal`` or ``best_effort``.
        restart_overhead_minutes: What a restart from a checkpoint costs.
        history_days: Days of price history the forecast fits on.
        aws_conn_id: The AWS connection of live prices.
        region: The region of the prices.
    """

    prices: str
    runtime_hours: str
    priority: str = "normal"
    restart_overhead_minutes: float = 5.0
    history_days: int = 14
    availability: str | None = None
    availability_zone: str | None = None
    aws_conn_id: str | None = None
    region: str = "us-east-1"

    def to_json(self) -> dict[str, Any]:
        return {
            "prices": self.prices,
            "availability": self.availability,
            "availability_zone": self.availability_zone,
            "runtime_hours": self.runtime_hours,
            "priority": self.priority,
            "restart_overhead_minutes": self.restart_overhead_minutes,
            "history_days": self.history_days,
            "aws_conn_id": self.aws_conn_id,
            "region": self.region,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PriceWatch:
        return cls(
            prices=str(data["prices"]),
            availability=data.get("availability") or None,
            availability_zone=data.get("availability_zone") or None,
            runtime_hours=str(data["runtime_hours"]),
            priority=str(data.get("priority") or "normal"),
            restart_overhead_minutes=float(data.get("restart_overhead_minutes", 5.0)),
            history_days=int(data.get("history_days", 14)),
            aws_conn_id=data.get("aws_conn_id"),
            region=str(data.get("region") or "us-east-1"),
        )


@dataclass(frozen=True, slots=True)
class Billing:
    """Where a spot attempt finds the prices in force over its run (it is billed at their mean)."""

    prices: str
    availability_zone: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"prices": self.prices, "availability_zone": self.availability_zone}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Billing:
        return cls(prices=str(data["prices"]), availability_zone=data.get("availability_zone") or None)


@dataclass(frozen=True, slots=True)
class RemotePlan:
    """Everything the attempts of one remote training share, fixed when the task starts.

    Args:
        backend: ``local``, ``sagemaker``, ``batch`` or ``kubernetes``.
        backend_options: The backend's options (JSON primitives).
        identity: ``dag_id``, ``run_id``, ``task_id``, ``try_number``, ``map_index`` of the task.
        base_name: Stem of the attempts' job names, stable across Airflow retries.
        instance_type: What every attempt runs on.
        region: Where.
        on_demand_usd_per_hour: The on-demand price, a decimal string.
        first_market: The market of attempt 1.
        checkpoint_uri: The checkpoint prefix of this training.
        model_store: The model store the model version goes to.
        spec_uri: The built-in trainer's spec ("" for a command).
        result_uri: Where the built-in job writes its summary ("" for a command).
        image: The command's container image, or None.
        grace_seconds: SIGTERM to SIGKILL of a command.
        job_env: Extra environment of every job (the S3 endpoint).
        deadline: When the model must be ready, or None.
        tags: The ledger tags of every attempt.
        estimated_usd: The spot decision's estimate (reserved when no spend gate did), or None.
        checkpoint_every_seconds: The training's checkpoint interval (the most a stop loses), or None.
        watch: Pausing on the price, or None.
        billing: Billing a spot attempt at the mean price over its run, or None (its starting price).
    """

    backend: str
    instance_type: str
    region: str
    on_demand_usd_per_hour: str
    first_market: str
    identity: Mapping[str, Any] = field(default_factory=dict)
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    base_name: str = ""
    checkpoint_uri: str = ""
    model_store: str = ""
    spec_uri: str = ""
    result_uri: str = ""
    image: str | None = None
    grace_seconds: float = _DEFAULT_GRACE_SECONDS
    job_env: Mapping[str, str] = field(default_factory=dict)
    deadline: datetime | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    estimated_usd: str | None = None
    checkpoint_every_seconds: float | None = 300.0
    watch: PriceWatch | None = None
    billing: Billing | None = None

    def to_json(self) -> dict[str, Any]:
        """The plan's keys of the state dict the operator and its trigger carry (JSON primitives)."""
        return {
            "backend": self.backend,
            "backend_options": dict(self.backend_options),
            "identity": dict(self.identity),
            "base_name": self.base_name,
            "spec_uri": self.spec_uri,
            "result_uri": self.result_uri,
            "image": self.image,
            "grace_seconds": self.grace_seconds,
            "checkpoint_uri": self.checkpoint_uri,
            "model_store": self.model_store,
            "job_env": dict(self.job_env),
            "instance_type": self.instance_type,
            "region": self.region,
            "on_demand_usd_per_hour": self.on_demand_usd_per_hour,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "tags": dict(self.tags),
            "estimated_usd": self.estimated_usd,
            "first_market": self.first_market,
            "checkpoint_every_seconds": self.checkpoint_every_seconds,
            "watch": self.watch.to_json() if self.watch else None,
            "billing": self.billing.to_json() if self.billing else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RemotePlan:
        """Read :meth:`to_json`'s keys, also from a state an older version wrote (missing keys default)."""
        deadline = data.get("deadline")
        watch = data.get("watch")
        billing = data.get("billing")
        estimated = data.get("estimated_usd")
        return cls(
            backend=str(data["backend"]),
            backend_options=dict(data.get("backend_options") or {}),
            identity=dict(data.get("identity") or {}),
            base_name=str(data.get("base_name") or ""),
            spec_uri=str(data.get("spec_uri") or ""),
            result_uri=str(data.get("result_uri") or ""),
            image=data.get("image") or None,
            grace_seconds=float(data.get("grace_seconds") or _DEFAULT_GRACE_SECONDS),
            checkpoint_uri=str(data.get("checkpoint_uri") or ""),
            model_store=str(data.get("model_store") or ""),
            job_env={str(k): str(v) for k, v in dict(data.get("job_env") or {}).items()},
            instance_type=str(data["instance_type"]),
            region=str(data.get("region") or "us-east-1"),
            on_demand_usd_per_hour=str(data["on_demand_usd_per_hour"]),
            deadline=parse_instant(deadline, name="deadline") if deadline else None,
            tags={str(k): str(v) for k, v in dict(data.get("tags") or {}).items()},
            estimated_usd=str(estimated) if estimated is not None else None,
            first_market=str(data.get("first_market") or "on_demand"),
            # A state written before the interval was in the plan: count no work as kept (from above).
            checkpoint_every_seconds=_optional_float(data.get("checkpoint_every_seconds")),
            watch=PriceWatch.from_json(watch) if watch else None,
            billing=Billing.from_json(billing) if billing else None,
        )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class PlanArguments:
    """The operator's rendered arguments that the plan depends on (None: not given, use the decision's).

    Money and times come as the text a template renders; :func:`make_plan` checks and converts them.
    """

    backend: str = "local"
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    market: str | None = None
    instance_type: str | None = None
    region: str | None = None
    spot_usd_per_hour: Any = None
    on_demand_usd_per_hour: Any = None
    deadline: Any = None
    latest_start: Any = None
    image: str | None = None
    grace_seconds: float = _DEFAULT_GRACE_SECONDS
    checkpoint_every_seconds: float | None = 300.0
    aws_conn_id: str | None = None
    pause_on_price: bool = False
    prices: str | None = None
    availability: str | None = None
    expected_runtime_hours: Any = None
    priority: str | None = None
    restart_overhead_minutes: float = 5.0
    history_days: int = 14


@dataclass(frozen=True, slots=True)
class Start:
    """What :func:`make_plan` decides besides the plan: the first spot price and the latest spot start."""

    plan: RemotePlan
    spot_usd_per_hour: str | None
    latest_start: datetime | None


def make_plan(
    args: PlanArguments,
    decision: SpotDecision | None,
    *,
    identity: Mapping[str, Any],
    base_name: str,
    checkpoint_uri: str,
    model_store: str,
    spec_uri: str,
    result_uri: str,
    job_env: Mapping[str, str],
    tags: Mapping[str, str],
    list_price: Callable[[str, str], Any] | None = None,
) -> Start:
    """The plan from the operator's arguments, each falling back to the spot window's ``decision``.

    Args:
        args: The rendered arguments.
        decision: The spot window decision (``SpotWindowSensor``'s XCom, read), or None.
        identity: The task's identity.
        base_name: The job name stem.
        checkpoint_uri: This training's checkpoint prefix.
        model_store: Where the model version goes.
        spec_uri: The built-in trainer's spec ("" for a command).
        result_uri: Where the built-in job writes its summary.
        job_env: Extra environment of every job.
        tags: The ledger tags.
        list_price: ``(instance_type, region) -> on-demand USD/hour``, asked when neither the arguments nor
            the decision give the on-demand price (the caller reads its price list).

    Raises:
        ConfigurationError: an argument that is missing or wrong; the message names it.
    """
    from costaware.adapters.compute.base import BACKENDS, MARKETS

    backend = str(args.backend)
    if backend not in BACKENDS:
        raise ConfigurationError(f"unknown compute backend {backend!r}: use one of {', '.join(BACKENDS)}")
    options = dict(args.backend_options)
    if backend in AWS_BACKENDS and args.aws_conn_id and "aws_conn_id" not in options:
        options["aws_conn_id"] = args.aws_conn_id
    decision = decision or SpotDecision.from_xcom({})  # none: a bare on-demand decision with no job facts
    market = str(blank(args.market) or decision.market or "on_demand")
    if market not in MARKETS:
        raise ConfigurationError(f"market {market!r} is not one of {', '.join(MARKETS)}")
    instance_type = blank(args.instance_type) or decision.instance_type
    if not instance_type:
        raise ConfigurationError("no instance type: pass instance_type or a spot decision that has one")
    region = str(blank(args.region) or decision.region or "us-east-1")
    on_demand = blank(args.on_demand_usd_per_hour)
    if on_demand is None:
        on_demand = decision.on_demand_usd_per_hour
    if on_demand is None and list_price is not None:
        on_demand = list_price(str(instance_type), region)
    if on_demand is None:
        raise ConfigurationError(
            f"no on-demand price of {instance_type} in {region}: pass on_demand_usd_per_hour"
        )
    spot = blank(args.spot_usd_per_hour)
    if spot is None and decision.market == "spot":
        spot = decision.usd_per_hour
    if market == "spot" and spot is None:
        raise ConfigurationError(
            "market is spot but no spot price is known: pass spot_usd_per_hour or a spot decision"
        )
    deadline_given = blank(args.deadline)
    latest_given = blank(args.latest_start)
    deadline = parse_instant(deadline_given, name="deadline") if deadline_given else decision.deadline
    latest = parse_instant(latest_given, name="latest_start") if latest_given else decision.latest_start
    estimated = decision.estimated_usd
    plan = RemotePlan(
        backend=backend,
        backend_options=options,
        identity=dict(identity),
        base_name=base_name,
        spec_uri=spec_uri,
        result_uri=result_uri,
        image=blank(args.image),
        grace_seconds=float(args.grace_seconds),
        checkpoint_uri=checkpoint_uri,
        model_store=model_store,
        job_env=dict(job_env),
        instance_type=str(instance_type),
        region=region,
        on_demand_usd_per_hour=str(on_demand),
        deadline=deadline,
        tags=dict(tags),
        estimated_usd=str(estimated) if estimated else None,
        first_market=market,
        checkpoint_every_seconds=args.checkpoint_every_seconds,
        watch=watch_plan(args, decision, deadline=deadline, region=region),
        billing=billing_plan(args, decision, backend=backend),
    )
    return Start(plan=plan, spot_usd_per_hour=str(spot) if spot is not None else None, latest_start=latest)


def billing_plan(args: PlanArguments, decision: SpotDecision, *, backend: str) -> Billing | None:
    """Where spot attempts find the price in force over their run; None: bill the starting price.

    Given ``prices``, a spot attempt is billed at the time-weighted mean of the EC2 spot price over its
    run, as EC2 bills it. SageMaker bills its own ``ml.*`` spot prices, which no EC2 series has.
    """
    prices = blank(args.prices)
    if not prices or backend == "sagemaker":
        return None
    return Billing(prices=str(prices), availability_zone=decision.availability_zone or None)


def watch_plan(
    args: PlanArguments, decision: SpotDecision, *, deadline: datetime | None, region: str
) -> PriceWatch | None:
    """What pausing on the price needs, or None when ``pause_on_price`` is off.

    Raises:
        ConfigurationError: pausing without prices, an expected runtime or a deadline.
    """
    if not args.pause_on_price:
        return None
    prices = blank(args.prices)
    if not prices:
        raise ConfigurationError(
            "pause_on_price needs spot prices: pass prices='live' or the path of a recorded price file"
        )
    runtime = positive_hours(
        blank(args.expected_runtime_hours) or decision.expected_runtime_hours,
        name="expected_runtime_hours or a spot decision that has one",
        why="pause_on_price",
    )
    if deadline is None:
        raise ConfigurationError(
            "pause_on_price needs a deadline (a pause must still finish in time): pass deadline or a "
            "spot decision that has one"
        )
    return PriceWatch(
        prices=str(prices),
        availability=blank(args.availability),
        availability_zone=decision.availability_zone or None,
        runtime_hours=str(runtime),
        priority=check_priority(blank(args.priority) or decision.priority or "normal"),
        restart_overhead_minutes=float(args.restart_overhead_minutes),
        history_days=int(args.history_days),
        aws_conn_id=args.aws_conn_id,
        region=region,
    )


def job_seconds_left(plan: RemotePlan, now: datetime) -> int:
    """The longest an attempt may run (and wait for spot): until the deadline, a day without one, >= 60 s."""
    budget = int((plan.deadline - now).total_seconds()) if plan.deadline else 86400
    return max(60, budget)
