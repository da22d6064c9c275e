"""Replay scheduling policies over recorded prices and spot capacity; compare them with the oracle.

Time is cut into ticks (10 minutes, or the availability trace's spacing) from each job's submit time. At every
tick:

1. a job that ran on spot in the last tick and has lost capacity now is preempted: its work falls back to the
   last checkpoint (``checkpoint_minutes`` of work apart; 0 means no checkpoints);
2. the policy says ``WAIT``, ``SPOT`` or ``ON_DEMAND`` (past the deadline the simulator forces on-demand and
   counts a miss); spot without capacity is a wait;
3. a running tick costs its price; after each (re)start the first ``restart_overhead_minutes`` make no
   progress. Stopping on purpose keeps the work.

Priority classes: a ``critical`` job is never paused once running and keeps room for one preemption; a
``best_effort`` job's deadline is soft, the hard one is ``runtime_hours`` later (finishing between the two
counts as ``late``, not as a miss). The oracle gets the same hard deadline, so it stays a lower bound.

A job that lists ``zones`` runs zone by zone: each (re)start on spot goes to the cheapest zone with capacity
then, the job stays there while it runs, and a preemption in that zone (losing work back to the checkpoint)
lets the next start fail over to another zone. The oracle plans on the collapsed market (the cheapest zone
with capacity at each tick, as if moving were free), which keeps it a lower bound.

Prices are per-tick means of the step-function series. Jobs with ``power_kw`` run on the team's own hardware:
their "on-demand" price is the hourly electricity price times the power draw, and they have no spot market.

Costs are summed as floats inside the tick loop (millions of ticks per benchmark) and become ``Decimal`` USD,
rounded to the micro-dollar, when they leave :func:`run_job`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.forecast import PriceForecast
from costaware.core.policies import Action, Hindsight, OraclePolicy, Policy, Situation, policy_class
from costaware.core.policies.rules import checkpointed
from costaware.core.series import AvailabilityTrace, PriceSeries

DEFAULT_TICK = timedelta(minutes=10)
DEFAULT_POLICIES = ("on_demand_now", "spot_now", "cheapest_window", "deadline_aware", "oracle")
BASELINE = "on_demand_now"
ORACLE = "oracle"
_MICRO = Decimal("0.000001")
_JOB_FIELDS = (
    "name",
    "instance_type",
    "region",
    "submit_time",
    "runtime_hours",
    "deadline_hours",
    "checkpoint_minutes",
    "restart_overhead_minutes",
)


def _number(job: str, column: str, value: object, *, positive: bool = False) -> Decimal:
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        number = Decimal("NaN")
    if not number.is_finite() or number < 0 or (positive and number == 0):
        need = "a number > 0" if positive else "a number >= 0"
        raise ConfigurationError(f"job {job!r}: {column} must be {need}, got {value!r}")
    return number


@dataclass(frozen=True, slots=True)
class Job:
    """One retrain to schedule.

    Attributes:
        name: Unique name.
        instance_type: EC2 instance type (ignored for pricing when ``power_kw`` is set).
        region: Region of the prices to use.
        submit_time: When the job may start (aware).
        runtime_hours: Work needed, uninterrupted.
        deadline_hours: Hours after ``submit_time`` by which the job must be done.
        checkpoint_minutes: Minutes of work between checkpoints (0: none).
        restart_overhead_minutes: Minutes lost at each (re)start.
        power_kw: Power draw on the team's own hardware; set for electricity-priced jobs.
        availability_zone: Use this zone's spot price; by default the region's cheapest zone at each instant.
        priority: ``critical`` (never paused, keeps room for one preemption), ``normal`` or ``best_effort``
            (its deadline is soft: it may finish up to ``runtime_hours`` after it, and that is not a miss).
        zones: Several zones to run in: each (re)start goes to the cheapest zone with capacity, and a job
            preempted in one zone fails over to another (each zone has its own prices and capacity trace).
    """

    name: str
    instance_type: str
    region: str
    submit_time: datetime
    runtime_hours: Decimal
    deadline_hours: Decimal
    checkpoint_minutes: Decimal = Decimal(30)
    restart_overhead_minutes: Decimal = Decimal(0)
    power_kw: Decimal | None = None
    availability_zone: str | None = None
    priority: str = "normal"
    zones: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from costaware.core.spot_window import check_priority

        object.__setattr__(self, "priority", check_priority(self.priority))
        if self.zones and self.availability_zone:
            raise ConfigurationError(
                f"job {self.name!r} sets both availability_zone {self.availability_zone!r} and zones "
                f"{'|'.join(self.zones)}; give one zone or a list of zones"
            )
        if self.submit_time.tzinfo is None or self.submit_time.utcoffset() is None:
            raise ConfigurationError(
                f"job {self.name!r}: submit_time {self.submit_time.isoformat()} has no time zone; "
                f"write it with one, e.g. '{self.submit_time.isoformat()}Z'"
            )
        overhead_hours = self.restart_overhead_minutes / 60
        if self.deadline_hours < self.runtime_hours + overhead_hours:
            raise ConfigurationError(
                f"job {self.name!r}: deadline_hours {self.deadline_hours} is shorter than runtime_hours "
                f"{self.runtime_hours} plus the restart overhead ({self.restart_overhead_minutes} min); "
                "no schedule can meet it"
            )

    @classmethod
    def from_mapping(cls, row: Mapping[str, object]) -> Job:
        """A job from one row of a jobs file (CSV strings or JSON values).

        Raises:
            ConfigurationError: a missing column or a bad value; the message names the job and the value.
        """
        name = str(row.get("name") or "").strip() or "<unnamed>"
        missing = [c for c in _JOB_FIELDS if row.get(c) in (None, "")]
        if missing:
            raise ConfigurationError(
                f"job {name!r} lacks {', '.join(missing)}; every job needs {', '.join(_JOB_FIELDS)}"
            )
        raw_time = str(row["submit_time"]).strip()
        try:
            submit = datetime.fromisoformat(raw_time.replace("Z", "+00:00"))
        except ValueError as e:
            raise ConfigurationError(f"job {name!r}: submit_time {raw_time!r} is not an ISO-8601 time") from e
        power = row.get("power_kw")
        zone = str(row.get("availability_zone") or "").strip() or None
        priority = str(row.get("priority") or "").strip() or "normal"
        raw_zones = row.get("zones") or ()
        zones = tuple(
            z.strip()
            for z in (raw_zones.split("|") if isinstance(raw_zones, str) else map(str, raw_zones))  # type: ignore[call-overload]
            if z.strip()
        )
        from costaware.core.spot_window import PRIORITIES

        if priority.lower().replace("-", "_") not in PRIORITIES:
            raise ConfigurationError(
                f"job {name!r}: priority {priority!r} is unknown; choose one of {', '.join(PRIORITIES)}"
            )
        return cls(
            name=name,
            instance_type=str(row["instance_type"]).strip(),
            region=str(row["region"]).strip(),
            submit_time=submit,
            runtime_hours=_number(name, "runtime_hours", row["runtime_hours"], positive=True),
            deadline_hours=_number(name, "deadline_hours", row["deadline_hours"], positive=True),
            checkpoint_minutes=_number(name, "checkpoint_minutes", row["checkpoint_minutes"]),
            restart_overhead_minutes=_number(
                name, "restart_overhead_minutes", row["restart_overhead_minutes"]
            ),
            power_kw=None if power in (None, "") else _number(name, "power_kw", power, positive=True),
            availability_zone=zone,
            priority=priority,
            zones=zones,
        )


@dataclass(frozen=True, slots=True)
class TickPlan:
    """A job in ticks: work, deadline, restart overhead and checkpoint spacing."""

    tick_hours: float
    work: int
    deadline: int
    overhead: int
    checkpoint: int

    @classmethod
    def of(cls, job: Job, tick: timedelta) -> TickPlan:
        """Round a job onto the tick grid: work and overhead up, deadline down (never optimistic).

        Raises:
            ConfigurationError: after rounding, work plus overhead no longer fits before the deadline.
        """
        minutes = Decimal(tick.total_seconds()) / 60
        work = math.ceil(job.runtime_hours * 60 / minutes)
        overhead = math.ceil(job.restart_overhead_minutes / minutes)
        hard_hours = job.deadline_hours + (job.runtime_hours if job.priority == "best_effort" else 0)
        deadline = math.floor(hard_hours * 60 / minutes)
        checkpoint = max(1, round(job.checkpoint_minutes / minutes)) if job.checkpoint_minutes > 0 else 0
        if work + overhead > deadline:
            raise ConfigurationError(
                f"job {job.name!r}: on a {minutes}-minute grid it needs {work + overhead} ticks but its "
                f"deadline is {deadline} ticks away; raise deadline_hours"
            )
        return cls(tick.total_seconds() / 3600, work, deadline, overhead, checkpoint)

    @property
    def horizon(self) -> int:
        """Ticks of prices needed: up to the deadline, plus a forced on-demand finish after it."""
        return self.deadline + self.work + self.overhead + 1


@dataclass(frozen=True, slots=True)
class TickMarket:
    """One job's prices per tick: on-demand (or own power), spot and its capacity, and their forecasts.

    With ``zones`` (per zone: spot prices and capacity), ``spot`` and ``available`` are the cheapest zone with
    capacity at each tick and whether any zone has capacity: the market the oracle plans on, as if a job
    could move between zones for free (so it stays a lower bound); the other policies run zone by zone.
    """

    on_demand: Sequence[float]
    on_demand_forecast: Sequence[float]
    spot: Sequence[float] | None = None
    spot_forecast: Sequence[float] | None = None
    available: Sequence[bool] | None = None
    local: bool = False
    available_before: Sequence[bool] | None = None
    zones: tuple[tuple[Sequence[float], Sequence[bool]], ...] | None = None


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What one policy did with one job."""

    job: str
    policy: str
    usd: Decimal
    met_deadline: bool
    preemptions: int
    run_hours: float
    spot_hours: float
    finished_hours: float
    late: bool = False


def run_job(
    policy: Policy, market: TickMarket, plan: TickPlan, *, job: str = "job", priority: str = "normal"
) -> JobOutcome:
    """Replay one job under one policy (see the module docstring for the rules)."""
    dt = plan.tick_hours
    hindsight = Hindsight(market.spot, market.available, market.on_demand) if policy.clairvoyant else None
    progress, running, overhead_left = 0, Action.WAIT, 0
    cost, preemptions, run_ticks, spot_ticks, t = 0.0, 0, 0, 0, 0
    has_spot = market.spot is not None
    zones = None if policy.clairvoyant else market.zones
    zone = -1  # the zone the job runs in on spot, or the cheapest one with capacity while it does not
    while progress < plan.work:
        available = has_spot and (market.available is None or market.available[t])
        spot_price = market.spot[t] if market.spot is not None else None
        if zones and running is Action.SPOT and not zones[zone][1][t]:
            available = False  # the job's own zone lost capacity: a preemption, even if others have some
        if running is Action.SPOT and not available:
            progress = checkpointed(progress, plan.checkpoint)
            running, overhead_left = Action.WAIT, 0
            preemptions += 1
        if zones:
            if running is not Action.SPOT:
                zone = _cheapest_zone(zones, t)  # where a (re)start would go: fail over on preemption
            available = zone >= 0 and zones[zone][1][t]
            spot_price = zones[zone][0][t] if zone >= 0 else spot_price
        if t >= plan.deadline:
            action = Action.ON_DEMAND
        else:
            action = policy.decide(
                Situation(
                    tick=t,
                    tick_hours=dt,
                    work_ticks=plan.work,
                    deadline_tick=plan.deadline,
                    overhead_ticks=plan.overhead,
                    checkpoint_ticks=plan.checkpoint,
                    progress=progress,
                    running=running,
                    overhead_left=overhead_left,
                    spot_usd_per_hour=spot_price,
                    spot_available=available,
                    on_demand_usd_per_hour=market.on_demand[t],
                    spot_forecast=market.spot_forecast,
                    on_demand_forecast=market.on_demand_forecast,
                    hindsight=hindsight,
                    availability_history=market.available_before,
                    priority=priority,
                )
            )
        if action is Action.SPOT and not available:
            action = Action.WAIT
        if action is Action.WAIT:
            running, overhead_left = Action.WAIT, 0
        else:
            if action is running:
                if overhead_left:
                    overhead_left -= 1
                else:
                    progress += 1
            else:
                running = action
                if plan.overhead:
                    overhead_left = plan.overhead - 1
                else:
                    progress += 1
            if action is Action.SPOT:
                assert spot_price is not None  # available implies a spot market
                cost += spot_price * dt
                spot_ticks += 1
            else:
                cost += market.on_demand[t] * dt
            run_ticks += 1
        t += 1
    return JobOutcome(
        job=job,
        policy=policy.name,
        usd=Decimal(repr(cost)).quantize(_MICRO),
        met_deadline=t <= plan.deadline,
        preemptions=preemptions,
        run_hours=run_ticks * dt,
        spot_hours=spot_ticks * dt,
        finished_hours=t * dt,
    )


def _cheapest_zone(zones: Sequence[tuple[Sequence[float], Sequence[bool]]], t: int) -> int:
    """Index of the cheapest zone with capacity at tick ``t`` (the first on a tie), or -1 when none has."""
    best = -1
    for i, (prices, available) in enumerate(zones):
        if available[t] and (best < 0 or prices[t] < zones[best][0][t]):
            best = i
    return best


@dataclass(frozen=True)
class MarketData:
    """Where a simulation gets prices; the adapters build it from files.

    Attributes:
        on_demand_usd_per_hour: ``(instance_type, region) -> USD/hour``; raises ``PriceNotFoundError``.
        spot_series: ``(instance_type, region, zone or None) -> PriceSeries``; raises ``PriceNotFoundError``.
        electricity_usd_per_mwh: Hourly power prices for jobs with ``power_kw``.
        availability: Spot capacity trace, already placed in time.
        forecast_weeks: Weeks of history the forecasts use.
        zone_availability: ``zone -> capacity trace`` for jobs that list ``zones`` (a zone without one is
            always available).
    """

    on_demand_usd_per_hour: Callable[[str, str], Decimal]
    spot_series: Callable[[str, str, str | None], PriceSeries] | None = None
    electricity_usd_per_mwh: PriceSeries | None = None
    availability: AvailabilityTrace | None = None
    forecast_weeks: int = 4
    zone_availability: Mapping[str, AvailabilityTrace] | None = None


def market_for(job: Job, data: MarketData, plan: TickPlan, tick: timedelta) -> TickMarket:
    """Per-tick prices and forecasts of one job (forecasts use only history before its submit time).

    Raises:
        PriceNotFoundError: no price for the job's instance type, region or time span.
        ConfigurationError: a ``power_kw`` job without electricity prices.
    """
    start, count = job.submit_time, plan.horizon
    if job.power_kw is not None:
        if data.electricity_usd_per_mwh is None:
            raise ConfigurationError(
                f"job {job.name!r} sets power_kw but no electricity prices were given; pass an electricity "
                "CSV (timestamp_utc,usd_per_mwh) as --prices"
            )
        per_hour = data.electricity_usd_per_mwh.scaled(job.power_kw / 1000, name=f"power for {job.name}")
        fitted = PriceForecast.fit(per_hour, at=start, weeks=data.forecast_weeks)
        return TickMarket(
            on_demand=per_hour.tick_means(start, tick, count),
            on_demand_forecast=fitted.ticks(start, tick, count),
            local=True,
        )
    on_demand = float(data.on_demand_usd_per_hour(job.instance_type, job.region))
    if data.spot_series is None:
        raise ConfigurationError(f"job {job.name!r} needs spot prices: pass a spot price history as --prices")
    if job.zones:
        return _zoned_market(job, data, plan, tick, on_demand)
    series = data.spot_series(job.instance_type, job.region, job.availability_zone)
    if series.start > start:
        raise PriceNotFoundError(
            f"job {job.name!r} is submitted at {start.isoformat()}, before the first {series.name} price "
            f"({series.start.isoformat()})"
        )
    fitted = PriceForecast.fit(series, at=start, weeks=data.forecast_weeks)
    available = data.availability.ticks(start, tick, count) if data.availability is not None else None
    before = _before(data.availability, start, tick) if data.availability is not None else None
    return TickMarket(
        on_demand=[on_demand] * count,
        on_demand_forecast=[on_demand] * count,
        spot=series.tick_means(start, tick, count),
        spot_forecast=fitted.ticks(start, tick, count),
        available=available,
        available_before=before,
    )


def _before(trace: AvailabilityTrace, start: datetime, tick: timedelta) -> list[bool] | None:
    """The capacity seen before ``start`` (up to a week), for policies that learn the capacity process."""
    seen = min(int((start - trace.start) / tick), int(timedelta(weeks=1) / tick))
    return trace.ticks(start - seen * tick, tick, seen) if seen > 0 else None


def _zoned_market(
    job: Job, data: MarketData, plan: TickPlan, tick: timedelta, on_demand: float
) -> TickMarket:
    """A market per zone, and the collapsed market (cheapest zone with capacity) the oracle plans on."""
    start, count = job.submit_time, plan.horizon
    assert data.spot_series is not None  # checked by the caller
    traces = data.zone_availability or {}
    per_zone: list[tuple[Sequence[float], Sequence[bool]]] = []
    forecasts: list[list[float]] = []
    histories: list[list[bool]] = []
    for name in job.zones:
        series = data.spot_series(job.instance_type, job.region, name)
        if series.start > start:
            raise PriceNotFoundError(
                f"job {job.name!r} is submitted at {start.isoformat()}, before the first {series.name} price "
                f"({series.start.isoformat()})"
            )
        trace = traces.get(name)
        available = trace.ticks(start, tick, count) if trace is not None else [True] * count
        per_zone.append((series.tick_means(start, tick, count), available))
        forecasts.append(
            PriceForecast.fit(series, at=start, weeks=data.forecast_weeks).ticks(start, tick, count)
        )
        if trace is not None:
            histories.append(_before(trace, start, tick) or [])
    length = min((len(h) for h in histories), default=0)
    before = [any(h[len(h) - length + i] for h in histories) for i in range(length)] if length else None
    return zoned_tick_market(
        per_zone,
        [on_demand] * count,
        spot_forecast=[min(values) for values in zip(*forecasts, strict=True)],
        available_before=before,
    )


def zoned_tick_market(
    per_zone: Sequence[tuple[Sequence[float], Sequence[bool]]],
    on_demand: Sequence[float],
    *,
    spot_forecast: Sequence[float] | None = None,
    available_before: Sequence[bool] | None = None,
) -> TickMarket:
    """A market over several zones (per zone: spot prices and capacity per tick), with its collapsed view."""
    count = len(on_demand)
    cheapest = [_cheapest_zone(per_zone, t) for t in range(count)]
    spot = [per_zone[z][0][t] if z >= 0 else min(p[t] for p, _ in per_zone) for t, z in enumerate(cheapest)]
    return TickMarket(
        on_demand=on_demand,
        on_demand_forecast=on_demand,
        spot=spot,
        spot_forecast=spot_forecast if spot_forecast is not None else spot,
        available=[z >= 0 for z in cheapest],
        available_before=available_before,
        zones=tuple((list(p), list(a)) for p, a in per_zone),
    )


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """Totals of one policy over all jobs; ratios are ``None`` when the reference costs nothing."""

    policy: str
    jobs: int
    usd: Decimal
    vs_oracle: Decimal | None
    vs_on_demand: Decimal | None
    deadline_misses: int
    preemptions: int
    spot_share: float
    late: int = 0

    def to_json(self) -> dict[str, object]:
        """The ``--format json`` shape of one policy."""
        return {
            "usd": float(self.usd.quantize(Decimal("0.01"))),
            "vs_oracle": None if self.vs_oracle is None else float(self.vs_oracle),
            "vs_on_demand": None if self.vs_on_demand is None else float(self.vs_on_demand),
            "deadline_misses": self.deadline_misses,
            "preemptions": self.preemptions,
            "spot_share": round(self.spot_share, 4),
            "late": self.late,
        }


@dataclass(frozen=True)
class SimulationReport:
    """Per-policy totals (in the order asked) and every job's outcome."""

    summaries: dict[str, PolicySummary]
    outcomes: list[JobOutcome] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """``{"policies": {"<name>": {"usd": ..., "vs_oracle": ..., ...}}}``."""
        return {"policies": {name: s.to_json() for name, s in self.summaries.items()}}


def _ratio(value: Decimal, reference: Decimal) -> Decimal | None:
    return None if reference == 0 else (value / reference).quantize(Decimal("0.0001"))


def summarize(outcomes: Iterable[JobOutcome], policies: Sequence[str]) -> dict[str, PolicySummary]:
    """Totals per policy; ratios compare total USD with the oracle's and ``on_demand_now``'s totals."""
    by_policy: dict[str, list[JobOutcome]] = {}
    for outcome in outcomes:
        by_policy.setdefault(outcome.policy, []).append(outcome)
    totals = {name: sum((o.usd for o in rows), Decimal(0)) for name, rows in by_policy.items()}
    summaries: dict[str, PolicySummary] = {}
    for name in policies:
        rows = by_policy.get(name, [])
        run_hours = sum(o.run_hours for o in rows)
        summaries[name] = PolicySummary(
            policy=name,
            jobs=len(rows),
            usd=totals.get(name, Decimal(0)),
            vs_oracle=_ratio(totals.get(name, Decimal(0)), totals[ORACLE]) if ORACLE in totals else None,
            vs_on_demand=_ratio(totals.get(name, Decimal(0)), totals[BASELINE])
            if BASELINE in totals
            else None,
            deadline_misses=sum(1 for o in rows if not o.met_deadline),
            preemptions=sum(o.preemptions for o in rows),
            spot_share=sum(o.spot_hours for o in rows) / run_hours if run_hours else 0.0,
            late=sum(1 for o in rows if o.late),
        )
    return summaries


def simulate(
    jobs: Sequence[Job],
    data: MarketData,
    policies: Sequence[str] = DEFAULT_POLICIES,
    *,
    tick: timedelta | None = None,
) -> SimulationReport:
    """Replay ``policies`` over ``jobs``; the oracle and ``on_demand_now`` always run, for the ratios.

    Args:
        jobs: Jobs with unique names.
        data: Prices, capacity and forecast settings.
        policies: Policy names to report, in order (see ``costaware.core.policies.POLICIES``).
        tick: Grid spacing; default the availability trace's spacing, else 10 minutes.

    Raises:
        ConfigurationError: no jobs, duplicate job names, an unknown policy, or a job that cannot fit.
        PriceNotFoundError: a job without prices.
    """
    if not jobs:
        raise ConfigurationError("no jobs to simulate; the jobs file has no rows")
    names = [j.name for j in jobs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigurationError(f"job names must be unique; repeated: {', '.join(duplicates)}")
    wanted = list(dict.fromkeys(policies))
    classes = {name: policy_class(name) for name in dict.fromkeys([*wanted, BASELINE, ORACLE])}
    if tick is None:
        tick = timedelta(seconds=data.availability.gap_seconds) if data.availability else DEFAULT_TICK
    outcomes: list[JobOutcome] = []
    for job in jobs:
        plan = TickPlan.of(job, tick)
        market = market_for(job, data, plan, tick)
        for cls in classes.values():
            policy = cls()
            outcome = run_job(policy, market, plan, job=job.name, priority=job.priority)
            if outcome.finished_hours > float(job.deadline_hours):
                # Only a best-effort job can get here without a miss: past its soft deadline.
                outcome = replace(outcome, late=True)
            # The oracle's replay must cost what its solver promised; anything else is a simulator bug.
            if (
                isinstance(policy, OraclePolicy)
                and policy.optimal_usd is not None
                and abs(float(outcome.usd) - policy.optimal_usd) > 1e-4 + 1e-9 * abs(policy.optimal_usd)
            ):
                raise AssertionError(
                    f"oracle replay of {job.name!r} cost {outcome.usd}, solver said {policy.optimal_usd}"
                )
            outcomes.append(outcome)
    return SimulationReport(summarize(outcomes, wanted), outcomes)
