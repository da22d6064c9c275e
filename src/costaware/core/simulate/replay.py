"""Replay one job under one policy, tick by tick: the rules every policy is measured by.

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

Costs are summed as floats inside the tick loop (millions of ticks per benchmark) and become ``Decimal`` USD,
rounded to the micro-dollar, when they leave :func:`run_job`.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from costaware.core.policies import Action, Hindsight, Policy, Situation
from costaware.core.policies.rules import checkpointed
from costaware.core.simulate.jobs import TickPlan
from costaware.core.simulate.market import TickMarket, cheapest_zone

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
                zone = cheapest_zone(zones, t)  # where a (re)start would go: fail over on preemption
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
