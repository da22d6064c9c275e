"""Replay scheduling policies over recorded prices and spot capacity; compare them with the oracle.

:func:`simulate` runs every policy over every job and sums what each paid. The parts, in the order a job
flows through them:

* :mod:`~costaware.core.simulate.jobs`: the jobs file's rows, and each job rounded onto the tick grid;
* :mod:`~costaware.core.simulate.market`: the job's prices, capacity and forecasts, tick by tick;
* :mod:`~costaware.core.simulate.replay`: one job under one policy, and the rules of a tick;
* :mod:`~costaware.core.simulate.report`: totals per policy and their ratios to the oracle and on-demand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from costaware.core.errors import ConfigurationError
from costaware.core.policies import OraclePolicy, policy_class
from costaware.core.simulate.jobs import Job, TickPlan
from costaware.core.simulate.market import MarketData, TickMarket, market_for, zoned_tick_market
from costaware.core.simulate.replay import JobOutcome, run_job
from costaware.core.simulate.report import BASELINE, ORACLE, PolicySummary, SimulationReport, summarize

DEFAULT_TICK = timedelta(minutes=10)
DEFAULT_POLICIES = ("on_demand_now", "spot_now", "cheapest_window", "deadline_aware", "oracle")

__all__ = [
    "BASELINE",
    "DEFAULT_POLICIES",
    "DEFAULT_TICK",
    "ORACLE",
    "Job",
    "JobOutcome",
    "MarketData",
    "PolicySummary",
    "SimulationReport",
    "TickMarket",
    "TickPlan",
    "market_for",
    "run_job",
    "simulate",
    "summarize",
    "zoned_tick_market",
]


def simulate(
    jobs: Sequence[Job],
    data: MarketData,
    policies: Sequence[str] = DEFAULT_POLICIES,
    *,
    tick: timedelta | None = None,
    restart_guard: bool = False,
) -> SimulationReport:
    """Replay ``policies`` over ``jobs``; the oracle and ``on_demand_now`` always run, for the ratios.

    Args:
        jobs: Jobs with unique names.
        data: Prices, capacity, forecast settings, and the carbon intensity and objective (the oracle and
            every policy minimise the objective; outcomes track USD and kg CO2e beside it).
        policies: Policy names to report, in order (see ``costaware.core.policies.POLICIES``).
        tick: Grid spacing; default the finest availability trace's spacing (the zones' too), else 10
            minutes. Where a tick spans several samples of a trace, a policy is told the capacity at the
            tick's start, and a spot tick whose capacity goes inside it is paid and preempted at its end.
        restart_guard: Replay the restart-thrash guard (a job whose zones all churn faster than it can
            checkpoint runs on on-demand to the end), as the live operator does; False to measure without it.

    Raises:
        ConfigurationError: no jobs, duplicate job names, an unknown policy, or a job that cannot fit.
        PriceNotFoundError: a job without prices, or a carbon series not covering a job's hours.
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
        # The finest trace's spacing, the zones' traces included (they fell back to 10 minutes).
        traces = [data.availability] if data.availability else []
        traces += list((data.zone_availability or {}).values())
        tick = timedelta(seconds=min(t.gap_seconds for t in traces)) if traces else DEFAULT_TICK
    if tick <= timedelta(0):
        raise ConfigurationError(f"tick must be a positive duration, got {tick}")
    outcomes: list[JobOutcome] = []
    for job in jobs:
        plan = TickPlan.of(job, tick)
        market = market_for(job, data, plan, tick)
        for cls in classes.values():
            policy = cls()
            outcome = run_job(
                policy, market, plan, job=job.name, priority=job.priority, restart_guard=restart_guard
            )
            # finished_hours is ticks x tick hours, a float: 0.30000000000000004 on a 0.3 h deadline is on
            # time.
            if outcome.met_deadline and outcome.finished_hours > float(job.deadline_hours) + 1e-9:
                # Only a best-effort job is past its deadline without a miss: late. A miss is not also late
                # (it was counted under both before).
                outcome = replace(outcome, late=True)
            # The oracle's replay must cost what its solver promised; anything else is a simulator bug.
            if (
                isinstance(policy, OraclePolicy)
                and policy.optimal_usd is not None
                and abs(float(outcome.objective_value) - policy.optimal_usd)
                > 1e-4 + 1e-9 * abs(policy.optimal_usd)
            ):
                raise AssertionError(
                    f"oracle replay of {job.name!r} cost {outcome.objective_value}, solver said "
                    f"{policy.optimal_usd}"
                )
            outcomes.append(outcome)
    return SimulationReport(summarize(outcomes, wanted), outcomes, objective=data.objective)
