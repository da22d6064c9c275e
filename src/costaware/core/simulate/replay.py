"""Replay one job under one policy, tick by tick: the rules every policy is measured by.

Time is cut into ticks (10 minutes, or the availability trace's spacing) from each job's submit time. At every
tick:

1. a job that ran on spot in the last tick and has lost capacity now is preempted: its work falls back to the
   last checkpoint (``checkpoint_minutes`` of work apart; 0 means no checkpoints). Where a tick spans several
   samples of the trace, capacity "now" is the sample at the tick's start (what a decision then can know), and
   a spot tick whose capacity goes inside it is paid and preempted at its end, as if at the next tick's start;
2. the policy says ``WAIT``, ``SPOT`` or ``ON_DEMAND`` (past the deadline the simulator forces on-demand and
   counts a miss); spot without capacity is a wait;
3. a running tick costs its price; after each (re)start the first ``restart_overhead_minutes`` make no
   progress. Stopping on purpose keeps the work.

Priority classes: a ``critical`` job is never paused once running and keeps room for one preemption; a
``best_effort`` job's deadline is soft, the hard one is ``runtime_hours`` later (finishing between the two
counts as ``late``, not as a miss). The oracle gets the same hard deadline, so it stays a lower bound.

A job that lists ``zones`` runs zone by zone, by the rule the live operator uses
(:func:`costaware.core.zone_choice.choose_zone`): while it is not running on spot, a (re)start would go to
the zone with the least expected cost of the rest of the work, among those with capacity then (its price,
stretched by how short this job's preempted runs there were; a zone without a preempted run is taken at its
price, so before the first preemption that is the cheapest zone with capacity, the current one on a tie). The
job stays in its zone while it runs; a preemption there (losing work back to the checkpoint) lets the next
start fail over to another zone. The oracle plans zone by zone under the same rules (it may move while
running, as a new start that pays the overhead), so it is the exact multi-zone optimum and a lower bound.

**Restart-thrash guard** (``restart_guard=True``, every non-clairvoyant job with a spot market): right after
a preemption, when the last two preempted runs in every zone of the job each kept nothing (shorter than the
restart overhead plus the checkpoint interval), ``choose_zone`` leaves no zone and the job runs on on-demand
to the end, as the live operator submits its next attempt on on-demand. ``JobOutcome.guard_fired`` records it.

Under an objective other than ``cost`` (see :mod:`~costaware.core.simulate.market`) the market's prices are
the objective's hourly values: every policy and the oracle minimise them, and ``JobOutcome.value`` is their
sum; ``usd`` and ``kg_co2e`` are summed beside it from the real USD and kg CO2e per hour of each running tick.

Costs are summed as floats inside the tick loop (millions of ticks per benchmark) and become ``Decimal`` USD,
rounded to the micro-dollar, when they leave :func:`run_job`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from costaware.core.policies import Action, Hindsight, Policy, Situation
from costaware.core.policies.rules import checkpointed
from costaware.core.simulate.jobs import TickPlan
from costaware.core.simulate.market import TickMarket
from costaware.core.zone_choice import DEFAULT_GUARD_WINDOW, PreemptedRun, ZoneView, choose_zone

_MICRO = Decimal("0.000001")


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
    guard_fired: bool = False
    #: The objective's total (kg CO2e, or USD with the carbon price) when it is not ``cost``; else None.
    value: Decimal | None = None
    #: Emissions, when a carbon intensity series was given; else None (unknown, never 0).
    kg_co2e: Decimal | None = None
    #: False when the job had no prices (the ``carbon`` objective without them): ``usd`` is then 0, unknown.
    usd_known: bool = True

    @property
    def objective_value(self) -> Decimal:
        """What the policy minimised: ``value``, or ``usd`` under the ``cost`` objective."""
        return self.usd if self.value is None else self.value


class _ZoneRule:
    """``choose_zone`` over a job's zones at one tick, with the job's preempted runs per zone.

    Zones are named by their index (the simulator's zones of one job share a region: no move cost). Until some
    zone has a preempted run, every zone is taken at its price and the guard has nothing to leave out, so the
    choice is computed here with ``expected_usd``'s arithmetic and ``choose_zone``'s tie order (the current
    zone, then the first): the benchmark replays millions of ticks.
    """

    def __init__(self, plan: TickPlan, zones: int, *, guard: bool) -> None:
        self.tick_seconds = plan.tick_hours * 3600
        self.overhead_seconds = plan.overhead * self.tick_seconds
        self.checkpoint_seconds = plan.checkpoint * self.tick_seconds if plan.checkpoint else None
        self.window = DEFAULT_GUARD_WINDOW if guard else None
        self.runs: list[list[PreemptedRun]] = [[] for _ in range(zones)]
        self.preempted = False

    def record(self, zone: int, ticks: int) -> None:
        """A spot run of ``ticks`` in ``zone`` was preempted."""
        # Judged by its length: the simulator's jobs checkpoint on their interval only.
        self.runs[zone].append(PreemptedRun(ticks * self.tick_seconds))
        self.preempted = True

    def choose(
        self, prices: Sequence[float], capacity: Sequence[bool], *, current: int, remaining_ticks: int
    ) -> int:
        """The zone of the next spot attempt (an index), or -1: the guard left none, run on on-demand."""
        remaining = remaining_ticks * self.tick_seconds
        if not self.preempted:
            billed = self.overhead_seconds + remaining
            candidates = [i for i, ok in enumerate(capacity) if ok] or range(len(prices))
            return min(candidates, key=lambda i: (prices[i] * billed / 3600, i != current, i))
        choice = choose_zone(
            [
                ZoneView(str(i), price, bool(ok), tuple(self.runs[i]))
                for i, (price, ok) in enumerate(zip(prices, capacity, strict=True))
            ],
            current=str(current) if current >= 0 else None,
            remaining_seconds=remaining,
            restart_overhead_seconds=self.overhead_seconds,
            checkpoint_every_seconds=self.checkpoint_seconds,
            guard_window=self.window,
        )
        return -1 if choice.zone is None else int(choice.zone)


def run_job(
    policy: Policy,
    market: TickMarket,
    plan: TickPlan,
    *,
    job: str = "job",
    priority: str = "normal",
    restart_guard: bool = False,
) -> JobOutcome:
    """Replay one job under one policy (see the module docstring for the rules).

    Args:
        policy: A fresh policy instance.
        market: The job's prices and capacity per tick.
        plan: The job on the tick grid.
        job: Its name, for the outcome.
        priority: Its priority class.
        restart_guard: Whether the restart-thrash guard may pin the job to on-demand (off: ``choose_zone``'s
            ``guard_window=None``).
    """
    dt = plan.tick_hours
    # A clairvoyant policy that plans zones (the oracle) runs zone by zone as its plan says; another runs a
    # zoned job on the collapsed market.
    planned_zones = bool(market.zones) and policy.clairvoyant and policy.plans_zones
    hindsight = (
        Hindsight(
            market.spot,
            market.available,
            market.on_demand,
            market.zones if planned_zones else None,
            available_at_start=market.available_at_start,
            zones_at_start=market.zones_at_start if planned_zones else None,
        )
        if policy.clairvoyant
        else None
    )
    progress, running, overhead_left = 0, Action.WAIT, 0
    cost, preemptions, run_ticks, spot_ticks, t = 0.0, 0, 0, 0, 0
    has_spot = market.spot is not None
    zones = market.zones if planned_zones or not policy.clairvoyant else None
    rule = None
    if has_spot and not policy.clairvoyant:
        rule = _ZoneRule(plan, len(zones) if zones else 1, guard=restart_guard)
    # Decisions read the prices at each tick's start; ticks are billed at their means (see the market).
    prices = (list(market.zones_now) if market.zones_now else [p for p, _ in zones]) if zones else []
    # Capacity at each tick's start decides and preempts; a spot tick without it to the end is cut (below).
    capacity = (
        (list(market.zones_at_start) if market.zones_at_start else [a for _, a in zones]) if zones else []
    )
    opened = market.available_at_start if market.available_at_start is not None else market.available
    spot_now = market.spot_now if market.spot_now is not None else market.spot
    on_demand_now = market.on_demand_now if market.on_demand_now is not None else market.on_demand
    zone = -1  # the zone the job runs in on spot, or where a (re)start would go while it does not
    run_zone, run_start = -1, 0  # the zone and first tick of the job's last spot run
    pinned = False  # the guard sent the job to on-demand for the rest of its run
    history = market.available_before
    # Real USD and kg CO2e per hour, when the prices above are another objective's values (see the market).
    valued = market.usd_on_demand is not None
    usd_on_demand = market.usd_on_demand if market.usd_on_demand is not None else market.on_demand
    usd_spot = market.usd_spot if market.usd_spot is not None else market.spot
    kg_per_hour = market.kg_per_hour
    usd, kg = 0.0, 0.0
    cut = False  # the last tick's spot run lost its capacity inside the tick
    while progress < plan.work:
        available = has_spot and (opened is None or opened[t])
        spot_price = spot_now[t] if spot_now is not None else None
        if zones and running is Action.SPOT and not capacity[zone][t]:
            available = False  # the job's own zone lost capacity: a preemption, even if others have some
        preempted = running is Action.SPOT and not available
        lost, cut = preempted or cut, False
        if preempted:
            progress = checkpointed(progress, plan.checkpoint)
            running, overhead_left = Action.WAIT, 0
            preemptions += 1
            if rule is not None:  # None for the oracle, which plans its preemptions knowingly
                rule.record(max(run_zone, 0), t - run_start)
        # (A zone-planning oracle's tick is placed after decide(): its plan is solved on the first tick.)
        if zones and not pinned and not planned_zones:
            assert rule is not None  # zones are kept for non-clairvoyant policies only
            if running is not Action.SPOT:
                zone = rule.choose(
                    [p[t] for p in prices],
                    [a[t] for a in capacity],
                    current=run_zone,
                    remaining_ticks=plan.work - progress,
                )
                pinned = zone < 0
            available = zone >= 0 and capacity[zone][t]
            spot_price = prices[zone][t] if zone >= 0 else spot_price
            if market.zone_history is not None and zone >= 0 and market.zone_history[zone] is not None:
                history = market.zone_history[zone]
            # else: a market without per-zone history (zoned_tick_market without zone_history, or a zone
            # without a trace) gives the collapsed one: capacity in any zone before submit.
        elif lost and rule is not None and rule.window is not None and spot_price is not None:
            # One zone: the rule can only keep it or leave it out (the guard).
            pinned = rule.choose([spot_price], [False], current=0, remaining_ticks=plan.work - progress) < 0
        if pinned:
            action = (
                Action.ON_DEMAND
            )  # as live: the next attempt is submitted on on-demand and runs to the end
        elif t >= plan.deadline:
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
                    on_demand_usd_per_hour=on_demand_now[t],
                    spot_forecast=market.spot_forecast,
                    on_demand_forecast=market.on_demand_forecast,
                    hindsight=hindsight,
                    availability_history=history,
                    priority=priority,
                    usd_spot_now=market.usd_spot_now[t] if market.usd_spot_now is not None else None,
                    usd_on_demand_now=(
                        market.usd_on_demand_now[t] if market.usd_on_demand_now is not None else None
                    ),
                    carbon_now=market.carbon_now[t] if market.carbon_now is not None else None,
                    carbon_forecast=market.carbon_forecast,
                )
            )
        moved = False  # the plan runs this spot tick in another zone than the last: a new start
        if planned_zones and action is Action.SPOT:
            assert zones is not None
            wanted = policy.zone_at(t)
            moved = running is Action.SPOT and wanted != zone
            zone = wanted
            available = capacity[zone][t]
        if action is Action.SPOT and not available:
            action = Action.WAIT
        if action is Action.WAIT:
            running, overhead_left = Action.WAIT, 0
        else:
            if action is running and not moved:
                if overhead_left:
                    overhead_left -= 1
                else:
                    progress += 1
            else:
                if action is Action.SPOT:
                    run_zone, run_start = max(zone, 0), t
                running = action
                if plan.overhead:
                    overhead_left = plan.overhead - 1
                else:
                    progress += 1
            if action is Action.SPOT:
                assert market.spot is not None  # available implies a spot market
                cost += (zones[zone][0][t] if zones and zone >= 0 else market.spot[t]) * dt
                spot_ticks += 1
                if valued:
                    assert usd_spot is not None  # a spot market keeps its USD beside the values
                    usd += usd_spot[t] * dt
            else:
                cost += market.on_demand[t] * dt
                if valued:
                    usd += usd_on_demand[t] * dt
            if kg_per_hour is not None:
                kg += kg_per_hour[t] * dt
            run_ticks += 1
            whole = (
                zones[zone][1][t] if zones and zone >= 0 else market.available is None or market.available[t]
            )
            if action is Action.SPOT and not whole and progress < plan.work:
                # Capacity was there at the tick's start and went inside it (a tick spanning several trace
                # samples): preempted at the tick's end, as at the next tick's start (a finished job is done).
                progress = checkpointed(progress, plan.checkpoint)
                running, overhead_left, cut = Action.WAIT, 0, True
                preemptions += 1
                if rule is not None:
                    rule.record(max(run_zone, 0), t + 1 - run_start)
        t += 1
    return JobOutcome(
        job=job,
        policy=policy.name,
        usd=Decimal(repr(usd if valued else cost)).quantize(_MICRO),
        met_deadline=t <= plan.deadline,
        preemptions=preemptions,
        run_hours=run_ticks * dt,
        spot_hours=spot_ticks * dt,
        finished_hours=t * dt,
        guard_fired=pinned,
        value=Decimal(repr(cost)).quantize(_MICRO) if valued else None,
        kg_co2e=None if kg_per_hour is None else Decimal(repr(kg)).quantize(_MICRO),
        usd_known=market.usd_known,
    )
