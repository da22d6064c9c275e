"""From the operator's rendered arguments and the spot window's decision to the plan (:func:`make_plan`).

Each argument falls back to the decision's value; a missing or wrong one fails here with its name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from costaware.core.carbon import Objective
from costaware.core.checkpoint_interval import is_auto
from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.core.money import parse_usd
from costaware.core.series import parse_instant
from costaware.core.spot_decision import SpotDecision
from costaware.core.spot_window import check_priority, given_priority
from costaware.training.plan.interval import planned_interval
from costaware.training.plan.remote_plan import (
    DEFAULT_GRACE_SECONDS,
    Billing,
    Placement,
    PriceWatch,
    RemotePlan,
)

#: Backends whose jobs run on AWS and reach it through the task's AWS connection.
AWS_BACKENDS = ("sagemaker", "batch")


def positive_hours(value: Any, *, name: str, why: str) -> Decimal:
    """``value`` as a number of hours > 0.

    Raises:
        ConfigurationError: anything else; the message says ``why`` it is needed.
    """
    hours = _hours(value)
    if hours is None:
        raise ConfigurationError(f"{why} needs the expected runtime, got {value!r}: pass {name} (hours > 0)")
    return hours


def _check_hours(value: Any, *, name: str) -> None:
    """Refuse ``value`` unless it is a number of hours > 0; the message names it."""
    if _hours(value) is None:
        raise ConfigurationError(f"{name} must be a number of hours > 0 such as '2.5', got {value!r}")


def _hours(value: Any) -> Decimal | None:
    """``value`` (a number or the text a template renders) as hours when it is a finite number > 0."""
    try:
        hours = Decimal(str(value).strip())
    except ArithmeticError:
        return None
    return hours if hours.is_finite() and hours > 0 else None


def _positive_price(value: Any, name: str) -> Decimal:
    """A price an attempt is billed at: more than $0 an hour.

    A $0 price billed nothing, and let max_usd cap nothing: every attempt ran uncapped.
    """
    price = parse_usd(value, name=name)
    if price <= 0:
        raise ConfigurationError(
            f"{name} must be more than $0 an hour, got {value!r}: attempts are billed and capped at it"
        )
    return price


def _latest_start_for(deadline: datetime, decision: SpotDecision, runtime_hours: Any) -> datetime:
    """The last moment to start on-demand for a ``deadline`` given without ``latest_start``.

    The spot decision's lead (its deadline less its latest start) where it has one, else the expected
    runtime. Without either there was no fallback at all: a spot attempt waited for capacity past the
    deadline, for ever.

    Raises:
        ConfigurationError: neither says how long the job runs.
    """
    if decision.deadline is not None and decision.latest_start is not None:
        return deadline - (decision.deadline - decision.latest_start)
    if runtime_hours is not None:
        _check_hours(runtime_hours, name="expected_runtime_hours")  # -1 read "given without" before
    hours = _hours(runtime_hours) if runtime_hours is not None else None
    if hours is None and decision.expected_runtime_hours is not None:
        hours = _hours(decision.expected_runtime_hours)
    if hours is None:
        raise ConfigurationError(
            f"deadline {deadline.isoformat()} is given without latest_start: give latest_start (the last "
            "moment an on-demand start still meets the deadline) or expected_runtime_hours, so that a spot "
            "attempt falls back to on-demand in time"
        )
    return deadline - timedelta(hours=float(hours))


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
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    checkpoint_every_seconds: float | str | None = 300.0
    aws_conn_id: str | None = None
    pause_on_price: bool = False
    prices: str | None = None
    availability: str | Mapping[str, str] | None = None
    expected_runtime_hours: Any = None
    priority: str | None = None
    restart_overhead_minutes: float = 5.0
    history_days: int = 14
    availability_zones: tuple[str, ...] = ()
    allowed_regions: tuple[str, ...] = ()
    restart_guard: bool = False
    objective: str = "cost"
    carbon_usd_per_tonne: Any = None
    carbon: str | None = None


@dataclass(frozen=True, slots=True)
class Start:
    """What :func:`make_plan` decides besides the plan: the first spot price and the latest spot start.

    ``checkpoint_reason`` says how ``checkpoint_every_seconds="auto"`` was resolved (None: not asked for).
    """

    plan: RemotePlan
    spot_usd_per_hour: str | None
    latest_start: datetime | None
    checkpoint_reason: str | None = None


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
    interruption_band: Callable[[str, str], str] | None = None,
    transfer_price: Callable[[str, str], Any] | None = None,
    data_bytes: Callable[[], int] | None = None,
    now: datetime | None = None,
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
        interruption_band: ``(instance_type, region) -> spot advisor band``, asked for
            ``checkpoint_every_seconds="auto"`` on spot (see ``plan.interval.planned_interval``).
        transfer_price: ``(from_region, to_region) -> USD/GB``, asked for each region of
            ``availability_zones`` other than the plan's (raises ``PriceNotFoundError``).
        data_bytes: ``() -> bytes`` of the training data, asked when a zone is in another region.
        now: The task's start: the first sample of the zones' capacity traces.

    Raises:
        ConfigurationError: an argument that is missing or wrong; the message names it.
    """
    from costaware.adapters.compute.base import check_backend, check_market, require_zone_placement

    backend = check_backend(str(args.backend))
    options = dict(args.backend_options)
    if backend in AWS_BACKENDS and args.aws_conn_id and "aws_conn_id" not in options:
        options["aws_conn_id"] = args.aws_conn_id
    # Zones the backend cannot place a job in (or, on Batch, a zone without its spot queue) fail here,
    # before any job, not at the first preemption's move.
    require_zone_placement(backend, tuple(args.availability_zones), options)
    decision = decision or SpotDecision.from_xcom({})  # none: a bare on-demand decision with no job facts
    market = check_market(str(blank(args.market) or decision.market or "on_demand"))
    instance_type = blank(args.instance_type) or decision.instance_type
    if not instance_type:
        raise ConfigurationError("no instance type: pass instance_type or a spot decision that has one")
    region = str(blank(args.region) or decision.region or "us-east-1")
    # Checked whether or not pausing reads them: each attempt is billed at these prices, a bad one must fail
    # here, before a job runs, not when its ledger entry is written (or be billed as a negative cost).
    given_priority(args.priority)
    # The window's prices are its own instance type's in its region: another type or region given here is
    # priced on its own (an m5.xlarge was billed at the window's c5.4xlarge $0.68/hour).
    other_job = (decision.instance_type is not None and instance_type != decision.instance_type) or (
        decision.region is not None and region != decision.region
    )
    on_demand = blank(args.on_demand_usd_per_hour)
    if on_demand is None and not other_job:
        on_demand = decision.on_demand_usd_per_hour
    if on_demand is None and list_price is not None:
        on_demand = list_price(str(instance_type), region)
    if on_demand is None:
        raise ConfigurationError(
            f"no on-demand price of {instance_type} in {region}: pass on_demand_usd_per_hour"
        )
    on_demand = _positive_price(on_demand, "on_demand_usd_per_hour")
    spot = blank(args.spot_usd_per_hour)
    if spot is None and decision.market == "spot" and not other_job:
        spot = decision.usd_per_hour
    if spot is not None:
        spot = _positive_price(spot, "spot_usd_per_hour")
    if market == "spot" and spot is None and other_job and decision.usd_per_hour is not None:
        raise ConfigurationError(
            f"market is spot but the spot window's price ${decision.usd_per_hour}/hour is for "
            f"{decision.instance_type} in {decision.region}, not {instance_type} in {region}: pass "
            f"spot_usd_per_hour for {instance_type}, or give the SpotWindowSensor that instance type"
        )
    if market == "spot" and spot is None:
        raise ConfigurationError(
            "market is spot but no spot price is known: pass spot_usd_per_hour or a spot decision"
        )
    deadline_given = blank(args.deadline)
    latest_given = blank(args.latest_start)
    deadline = parse_instant(deadline_given, name="deadline") if deadline_given else decision.deadline
    latest = parse_instant(latest_given, name="latest_start") if latest_given else decision.latest_start
    if deadline_given and not latest_given and deadline is not None:
        latest = _latest_start_for(deadline, decision, blank(args.expected_runtime_hours))
    if deadline is not None and latest is not None and latest > deadline:
        raise ConfigurationError(
            f"latest_start {latest.isoformat()} is after the deadline {deadline.isoformat()}: the last "
            "moment to start on-demand must come before the deadline"
        )
    first_market_reason = _decided_on_demand(args, decision)
    if market == "spot" and latest is not None and now is not None and now >= latest:
        # Submitted on spot, attempt 1 was stopped at its first poll for on-demand, and billed as "no spot
        # capacity by the latest safe start": past that start only on-demand can still meet the deadline.
        market = "on_demand"
        by = f" for the deadline {deadline.isoformat()}" if deadline is not None else ""
        first_market_reason = (
            f"the latest safe start {latest.isoformat()}{by} had passed when the task started: "
            "only on-demand can still finish in time"
        )
    estimated = decision.estimated_usd
    theirs = decision.on_demand_usd_per_hour
    if estimated and other_job and theirs:
        # The window estimated its own type's run. A dearer type or region costs more by the ratio of their
        # on-demand prices, if it runs as long; a cheaper one may run longer (fewer vCPUs), so the hold
        # never drops below the window's estimate.
        scaled = (Decimal(str(estimated)) * on_demand / Decimal(str(theirs))).quantize(Decimal("0.000001"))
        estimated = max(Decimal(str(estimated)), scaled)
    # Read here only for "auto": otherwise it belongs to pause_on_price, whose check names itself.
    runtime = (
        blank(args.expected_runtime_hours) or decision.expected_runtime_hours
        if is_auto(args.checkpoint_every_seconds)
        else None
    )
    every_seconds, checkpoint_reason = planned_interval(
        args.checkpoint_every_seconds,
        market=market,
        instance_type=str(instance_type),
        region=region,
        expected_runtime_hours=(
            float(
                positive_hours(runtime, name="expected_runtime_hours", why="checkpoint_every_seconds='auto'")
            )
            if runtime is not None
            else None
        ),
        interruption_band=interruption_band,
    )
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
        first_market_reason=first_market_reason,
        checkpoint_every_seconds=every_seconds,
        watch=watch_plan(args, decision, deadline=deadline, region=region),
        billing=billing_plan(args, decision, backend=backend),
        placement=placement_plan(
            args,
            decision,
            backend=backend,
            region=region,
            runtime_hours=blank(args.expected_runtime_hours) or decision.expected_runtime_hours,
            transfer_price=transfer_price,
            data_bytes=data_bytes,
            now=now,
        ),
    )
    # Given but read by none of the above (no pausing, no "auto"): the zone ranking reads it later.
    if blank(args.expected_runtime_hours) is not None:
        _check_hours(args.expected_runtime_hours, name="expected_runtime_hours")
    return Start(
        plan=plan,
        spot_usd_per_hour=str(spot) if spot is not None else None,
        latest_start=latest,
        checkpoint_reason=checkpoint_reason,
    )


def placement_plan(
    args: PlanArguments,
    decision: SpotDecision,
    *,
    backend: str,
    region: str,
    runtime_hours: Any,
    transfer_price: Callable[[str, str], Any] | None,
    data_bytes: Callable[[], int] | None,
    now: datetime | None = None,
) -> Placement:
    """The allowed zones of the spot attempts and what choosing among them needs.

    Raises:
        ConfigurationError: zones on a backend that cannot place by zone, a zone of a region
            ``allowed_regions`` forbids, a trace of a zone that is not listed, a move whose transfer price is
            unknown; the message names the value.
    """
    from costaware.core.zone_choice import region_of

    zones = tuple(args.availability_zones)  # the backend can place them: checked by make_plan
    allowed = set(args.allowed_regions)
    for zone in zones:
        zone_region = region_of(zone, region)
        if allowed and zone_region not in allowed:
            raise ConfigurationError(
                f"availability zone {zone!r} is in region {zone_region}, which allowed_regions "
                f"({', '.join(sorted(allowed))}) forbids: remove the zone or allow its region"
            )
    traces = dict(args.availability) if isinstance(args.availability, Mapping) else {}
    unknown = sorted(set(traces) - set(zones))
    if unknown:
        raise ConfigurationError(
            f"availability maps zones {', '.join(unknown)} that availability_zones does not list "
            f"({', '.join(zones) or 'none'}): list them, or give one trace path"
        )
    chosen = decision.availability_zone or ""
    first = chosen if chosen in zones or not zones else zones[0]
    usd_per_gb: dict[str, str] = {}
    size = 0
    for other in sorted({region_of(z, region) for z in zones} - {region}):
        if transfer_price is None:
            raise ConfigurationError(f"zone of {other}: no transfer price to weigh a move from {region}")
        usd_per_gb[other] = str(transfer_price(region, other))
        if data_bytes is not None and not size:
            size = int(data_bytes())
    runtime = str(runtime_hours) if runtime_hours not in (None, "") else None
    return Placement(
        zones=zones,
        first_zone=first,
        zone_availability={str(k): str(v) for k, v in traces.items()},
        restart_overhead_seconds=float(args.restart_overhead_minutes) * 60,
        guard=bool(args.restart_guard),
        runtime_hours=runtime,
        usd_per_gb=usd_per_gb,
        data_bytes=size,
        availability_start=now.isoformat() if traces and now else None,
    )


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
    # Everything missing is said at once: one failed run, not one for each setting.
    missing = []
    prices = blank(args.prices)
    if not prices:
        missing.append("spot prices: pass prices='live' or the path of a recorded price file")
    given_runtime = blank(args.expected_runtime_hours) or decision.expected_runtime_hours
    runtime = _hours(given_runtime)
    if runtime is None:
        missing.append(
            f"the expected runtime, got {given_runtime!r}: pass expected_runtime_hours or a spot decision "
            "that has one (hours > 0)"
        )
    if deadline is None:
        missing.append(
            "a deadline (a pause must still finish in time): pass deadline or a spot decision that has one"
        )
    if missing:
        raise ConfigurationError("pause_on_price needs " + "; and ".join(missing))
    assert prices and runtime is not None  # for the type checker: a missing one raised above
    objective = Objective.parse(blank(args.objective), blank(args.carbon_usd_per_tonne))
    return PriceWatch(
        objective=objective.name,
        carbon_usd_per_tonne=objective.carbon_usd_per_tonne if objective.name == "cost+carbon" else None,
        carbon=str(blank(args.carbon)) if blank(args.carbon) else None,
        prices=str(prices),
        availability=watched_trace(args.availability, decision.availability_zone),
        availability_zone=decision.availability_zone or None,
        runtime_hours=str(runtime),
        priority=check_priority(blank(args.priority) or decision.priority or "normal"),
        restart_overhead_minutes=float(args.restart_overhead_minutes),
        history_days=int(args.history_days),
        aws_conn_id=args.aws_conn_id,
        region=region,
    )


def watched_trace(availability: str | Mapping[str, str] | None, zone: str | None) -> str | None:
    """The capacity trace a price watch resumes on: the one given, or of the decision's zone in a map."""
    if isinstance(availability, Mapping):
        return availability.get(zone or "") or next(iter(availability.values()), None)
    chosen = blank(availability)
    return str(chosen) if chosen is not None else None


#: An attempt's time limit without a deadline, and the least an on-demand attempt gets.
DAY_SECONDS = 86_400
#: The most any attempt is given: SageMaker's default quota on MaxRuntimeInSeconds (5 days); a later
#: deadline would be refused by AWS as a whole request.
MAX_JOB_SECONDS = 5 * DAY_SECONDS


def job_seconds_left(plan: RemotePlan, now: datetime, market: str = "spot") -> int:
    """The longest an attempt may run (and, on spot, wait for capacity).

    A spot attempt: until the deadline (then the on-demand fallback takes over), a day without one, at least
    60 s. An on-demand attempt, and any attempt once the deadline has passed: at least a day. Cut at the
    deadline, the fallback would lose all its work and bill it again on every retry (a past deadline gave
    SageMaker, Batch and Kubernetes jobs 60 s). Never more than :data:`MAX_JOB_SECONDS`.
    """
    left = int((plan.deadline - now).total_seconds()) if plan.deadline else DAY_SECONDS
    if market != "spot" or left <= 0:
        left = max(left, DAY_SECONDS)
    return min(MAX_JOB_SECONDS, max(60, left))


def wait_limit(plan: RemotePlan, now: datetime, market: str | None) -> timedelta:
    """How long the operator's wait on an attempt on ``market`` may last (None: paused, no job).

    An hour past the deadline (a day without one), and never less than the attempt's own time limit
    (:func:`job_seconds_left` from now, its submit) plus its grace period and an hour for the queue and the
    polls: a wait that timed out first failed the task with the paid job running on, unwatched and unbilled
    (an on-demand fallback near the deadline gets a day).
    """
    by_deadline = max(plan.deadline - now, timedelta(0)) + timedelta(hours=1) if plan.deadline else None
    if market is None:
        return by_deadline or timedelta(seconds=DAY_SECONDS)
    job = timedelta(seconds=job_seconds_left(plan, now, market) + float(plan.grace_seconds)) + timedelta(
        hours=1
    )
    return max(by_deadline or job, job)


def _decided_on_demand(args: PlanArguments, decision: SpotDecision) -> str:
    """Why attempt 1 runs on on-demand when the spot window decided so (no market given: the decision's).

    "" when the market was given, or on-demand is the default: nothing chose it over spot.
    """
    if blank(args.market) or decision.market != "on_demand" or not decision.reason:
        return ""
    return f"the spot window's decision: {decision.reason}"
