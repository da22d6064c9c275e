"""The spot price watch of a remote training's wait: pause a job on spot, or resume a paused training.

See :class:`~costaware.triggers.remote_training.RemoteTrainingJobTrigger`'s ``price_watch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.carbon import Objective
from costaware.core.series import parse_instant


def price_event(
    watch: Mapping[str, Any],
    state: Mapping[str, Any],
    *,
    now: datetime,
    usd_per_hour: Decimal | None,
    available: bool,
    source: str,
    forecast_starts: list[list[str]],
    objective: Objective | None = None,
    power_kw: float = 0.0,
    g_co2e_per_kwh: float | None = None,
) -> dict[str, Any] | None:
    """Pause or resume event for the spot price seen at ``now``, or None to go on as is (pure).

    ``forecast_starts`` is the forecast of a run of the remaining work per later start, fitted at ``now``
    (of the ``objective``'s hourly value, with the instance's ``power_kw`` and ``g_co2e_per_kwh``, the mean
    intensity over the remaining work from ``now``, when it is not ``cost``).
    """
    from costaware.core.spot_window import Observation, decide_on_objective, pause_decision

    latest_resume = parse_instant(watch["latest_resume"], name="latest_resume")
    if watch["mode"] == "pause":
        if usd_per_hour is None:
            return None
        reason = pause_decision(
            now=now,
            usd_per_hour=usd_per_hour,
            forecast_starts=forecast_starts,
            latest_resume=latest_resume,
            remaining_hours=Decimal(watch["remaining_hours"]),
            run_on_hours=Decimal(watch.get("run_on_hours", watch["remaining_hours"])),
            restart_overhead_minutes=float(watch["restart_overhead_minutes"]),
            priority=str(watch["priority"]),
            objective=objective,
            power_kw=power_kw,
            g_co2e_per_kwh=g_co2e_per_kwh,
        )
        return None if reason is None else {"status": "success", "pause": reason, "state": dict(state)}
    objective = objective or Objective()
    # Only a carbon objective weighs the run's length; a sensor's resume watch on cost carries none.
    runtime = Decimal(watch["remaining_hours"]) if objective.needs_carbon else Decimal(0)
    decision = decide_on_objective(  # on ``cost`` it is ``decide`` itself
        now=now,
        observation=Observation(usd_per_hour, available, source),
        on_demand_usd_per_hour=Decimal(watch["on_demand_usd_per_hour"]),
        forecast_starts=forecast_starts,
        target_value_per_hour=None,
        latest_start=latest_resume,
        not_before=None,
        objective=objective,
        power_kw=power_kw,
        g_co2e_per_kwh=g_co2e_per_kwh,
        runtime_hours=max(runtime, Decimal("0.01")),
    )
    if decision is None:
        return None
    return {"status": "success", "resume": decision.to_xcom(), "state": dict(state)}


def watch_event(
    watch: Mapping[str, Any],
    state: Mapping[str, Any],
    *,
    now: datetime,
    running: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Read the spot price and capacity now, fit the forecast now (blocking IO), apply :func:`price_event`.

    The forecast is fitted at each look, on the same history the price comes from: a rise that the forecast
    expects to last (its persistence term) is not worth a pause, one that the rest of the window outlasts
    is. Past the latest resume nothing is read: a paused job restarts on on-demand whatever spot costs.

    ``running``: the status of the job a pause watch watches, as polled now. Its work left and latest
    resume are then those of the work left now (:func:`pause_watch_now`), not the watch's of its submit.
    """
    from costaware.adapters.spot_market import (
        forecast_window,
        intensity_of_run,
        observe_market,
        watch_objective,
    )

    if running is not None and watch["mode"] == "pause":
        watch = {**watch, **pause_watch_now(state, running)}
    latest_resume = parse_instant(watch["latest_resume"], name="latest_resume")
    if now >= latest_resume:
        return price_event(
            watch, state, now=now, usd_per_hour=None, available=False, source="", forecast_starts=[]
        )
    observe = watch["observe"]
    remaining = max(Decimal(watch["remaining_hours"]), Decimal("0.01"))
    # Running on is valued over what it leaves to run (a resume over what a pause leaves).
    run_on = max(Decimal(watch.get("run_on_hours", watch["remaining_hours"])), Decimal("0.01"))
    objective, intensity, power_kw = watch_objective(
        watch,
        instance_type=observe["instance_type"],
        region=observe["region"],
        now=now,
        # Read as far as both runs it values: one per later start, and running on from now (a pause's).
        latest_start=latest_resume,
        runtime_hours=max(remaining, run_on),
    )
    seen = observe_market(now=now, on_demand_usd_per_hour=Decimal(watch["on_demand_usd_per_hour"]), **observe)
    starts = forecast_window(
        prices=observe["prices"],
        instance_type=observe["instance_type"],
        region=observe["region"],
        aws_conn_id=observe["aws_conn_id"],
        ttl_seconds=observe["ttl_seconds"],
        products=observe["products"],
        zones=[observe["availability_zone"]],
        now=now,
        latest_start=latest_resume,
        runtime_hours=remaining,
        history_days=int(watch["history_days"]),
        objective=objective,
        intensity=intensity,
        power_kw=power_kw,
    )
    return price_event(
        watch,
        state,
        now=now,
        usd_per_hour=seen.usd_per_hour,
        available=seen.available,
        source=seen.source,
        forecast_starts=starts,
        objective=objective,
        power_kw=power_kw,
        # Over the run from now: running on's (to pause), a resume's (to resume), as a later start is.
        g_co2e_per_kwh=intensity_of_run(intensity, now, run_on if watch["mode"] == "pause" else remaining),
    )


def pause_watch_now(state: Mapping[str, Any], running: Mapping[str, Any]) -> dict[str, str]:
    """The pause watch's ``remaining_hours``, ``run_on_hours`` and ``latest_resume`` while ``running`` runs.

    The work left is the training's less what that job has run (its status now): what a pause now would
    leave, from above (a stop loses up to one checkpoint interval); the latest resume is the latest restart
    that still finishes it by the deadline. ``RemoteTrainingOperator`` works out both alike after a pause.
    ``run_on_hours`` is what running on leaves: the same less the checkpoint interval a stop alone loses
    (not while it is not training, ``TRAINING_NOW`` False: it restarts from its checkpoint as after a stop).
    The watch's own are those of the job's submit, when it had run 0 s: valued over them, running on late in
    a job was scored over hours past its real end (a clean last half hour before dirty ones was paused), and
    a job past its submit's latest resume never paused, though a resume could still meet the deadline.
    That later latest resume needs the job's run time known exactly (``TRAINED_RUNS_SECONDS``): a
    managed-spot job's time since its first start also counts its waits for capacity, and a resume taken
    from it missed the deadline.
    """
    from costaware.training.attempts import AttemptState
    from costaware.training.pauses import deadline_work_left, latest_resume, work_left

    attempts = AttemptState.from_json(state)
    left = work_left(attempts, ended=running)
    # Its billed seconds may count time it did not train (a Batch retry's or copy's, a pod's wait): the
    # deadline counts only exact runs, so the latest resume never comes later than the submit's.
    latest = latest_resume(attempts, deadline_work_left(attempts, ended=running))
    # Running on loses no checkpoint interval: valued over the work after a stop, it was over-charged and
    # a job minutes from its end paused.
    run_on = work_left(attempts, ended=running, running_on=True)
    return {"remaining_hours": str(left), "run_on_hours": str(run_on), "latest_resume": latest.isoformat()}
