"""Pausing a remote training on its spot price: pure functions of its plan and its attempts so far.

The work left after the attempts (:func:`work_left`; :func:`deadline_work_left` for a deadline), the latest
restart that still meets the deadline with it (:func:`latest_resume`), and the ``price_watch`` that
``RemoteTrainingJobTrigger`` polls with (:func:`price_watch`). ``RemoteTrainingOperator`` calls them between
trigger events. No Airflow and no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.spot_window import latest_start
from costaware.training.attempts import AttemptState, remaining_hours
from costaware.training.plan import PriceWatch


def _watch(state: AttemptState) -> PriceWatch:
    if state.plan.watch is None:
        raise ValueError("the plan has no price watch: pause_on_price is off")
    return state.plan.watch


def work_left(
    state: AttemptState,
    ended: Mapping[str, Any] | None = None,
    *,
    running_on: bool = False,
    exact_only: bool = False,
) -> Decimal:
    """Hours of training left (from above), counting the job status ``ended`` that is not yet recorded.

    ``running_on``: left if the job of ``ended`` runs on, not after its stop (no checkpoint interval lost).
    ``exact_only``: count only runs their backend knew exactly (see :func:`deadline_work_left`).
    """
    watch = _watch(state)
    return remaining_hours(
        state,
        runtime_hours=Decimal(watch.runtime_hours),
        restart_overhead_minutes=watch.restart_overhead_minutes,
        checkpoint_every_seconds=state.plan.checkpoint_every_seconds,
        ended=ended,
        running_on=running_on,
        exact_only=exact_only,
    )


def deadline_work_left(state: AttemptState, ended: Mapping[str, Any] | None = None) -> Decimal:
    """Hours left for the deadline: as :func:`work_left`, counting only runs their backend knew exactly.

    Never less than the work truly left: a job without exact runs (Batch, Kubernetes, a SageMaker job
    without ``Training`` transitions) is billed for time it did not train (a submit's copies, the queue
    before a retry), so its work counts nothing here and the latest resume after it is never later than
    the one before it (its submit's).
    """
    return work_left(state, ended, exact_only=True)


def latest_resume(state: AttemptState, remaining: Decimal) -> datetime:
    """The latest restart that still finishes ``remaining`` hours by the deadline, by the job's priority."""
    watch = _watch(state)
    if state.plan.deadline is None:
        raise ValueError("a price watch needs a deadline")
    return latest_start(
        deadline=state.plan.deadline,
        runtime_hours=remaining,
        restart_overhead_minutes=watch.restart_overhead_minutes,
        priority=watch.priority,
    )


def price_watch(state: AttemptState, mode: str, *, poll_interval: float) -> dict[str, Any]:
    """The trigger's ``price_watch`` for ``mode`` ``pause`` or ``resume`` (JSON primitives).

    Where prices come from, the work left and the latest resume; see ``costaware.triggers.remote_training``.
    """
    plan, watch = state.plan, _watch(state)
    remaining = work_left(state)
    observe = {
        "availability_zones": None,
        "zone_availability": None,
        "availability_zone": watch.availability_zone,
        "availability": watch.availability,
        "prices": watch.prices,
        "instance_type": plan.instance_type,
        "region": watch.region,
        "aws_conn_id": watch.aws_conn_id,
        # Live prices: the price in force is re-read at most every 5 minutes and the history behind the
        # forecast as often (spot prices change a few times a day at most).
        "ttl_seconds": max(float(poll_interval), 300.0),
        "products": ["Linux/UNIX"],
        "availability_start": None,
    }
    # The objective's keys are read by the trigger's pause rule (core.spot_window.pause_decision).
    return watch.objective_keys() | {
        "mode": mode,
        "observe": observe,
        "on_demand_usd_per_hour": plan.on_demand_usd_per_hour,
        "history_days": watch.history_days,
        "latest_resume": latest_resume(state, deadline_work_left(state)).isoformat(),
        "remaining_hours": str(remaining),
        "restart_overhead_minutes": watch.restart_overhead_minutes,
        "priority": watch.priority,
    }
