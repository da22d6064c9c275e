"""The side effects that the steps of :func:`~costaware.training.attempts.next_step` name, without Airflow.

``RemoteTrainingOperator`` performs each step with these: the job request of a submit, the ledger entry of
an attempt that ended, the money an attempt may still spend under ``max_usd`` and the seconds a stop takes,
and the cleanup of the checkpoints once the model version is stored. The task's budget holds (reserved,
held again on a retry, settled with the attempts' total) are :mod:`costaware.training.attempt_holds`'.
Logging and the mapping of failures to task outcomes stay with the operator.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.core.errors import ConfigurationError
from costaware.training.attempts import Attempt, AttemptState, trained_runs
from costaware.training.plan import RemotePlan, job_seconds_left

if TYPE_CHECKING:
    from costaware.adapters.compute.base import JobRequest
    from costaware.core.ledger import LedgerEntry


log = logging.getLogger(__name__)

#: The least an attempt is started for under ``max_usd``: a shorter one could not even load its data.
MIN_CAPPED_SECONDS = 60


def instances(plan: RemotePlan) -> int:
    """How many instances one attempt bills (SageMaker's ``instance_count``; 1 elsewhere)."""
    from costaware.adapters.compute.base import billed_instances

    return billed_instances(plan.backend_options)


def cap_rate(state: AttemptState, market: str, on_demand_usd_per_hour: Decimal | None = None) -> Decimal:
    """The USD/hour that bounds an attempt on ``market`` under ``max_usd``, all its instances together.

    Its price, except for a spot attempt billed at the mean price in force over its run (``prices``
    given): that price may rise while it runs, so the on-demand price bounds it (AWS interrupts spot
    there by default, and the bill is clamped to it); and SageMaker managed spot, billed at on-demand.
    ``on_demand_usd_per_hour``: of the attempt's zone's region, where it is another than the plan's.
    """
    plan = state.plan
    on_demand = on_demand_usd_per_hour or Decimal(plan.on_demand_usd_per_hour)
    # SageMaker bills managed spot as billable seconds at the on-demand rate, and the billable seconds can
    # come up to the run's own: only the on-demand rate keeps max_usd a hard cap there.
    if (
        market == "spot"
        and not plan.billing
        and plan.backend != "sagemaker"
        and state.spot_usd_per_hour is not None
    ):
        rate = Decimal(state.spot_usd_per_hour)
    else:
        rate = on_demand
    return rate * instances(plan)


def money_left(state: AttemptState) -> Decimal | None:
    """What is left of ``max_usd`` after the attempts recorded so far (None: no cap)."""
    if state.plan.max_usd is None:
        return None
    return Decimal(state.plan.max_usd) - total_usd(state)


def capped_seconds(state: AttemptState, rate: Decimal) -> int | None:
    """How long the next attempt may run at ``rate`` (:func:`cap_rate`) before its stop notice (``max_usd``).

    What is left of the cap buys some seconds at ``rate``; the notice comes a grace period
    (``preemption_grace_seconds``) earlier, so that the attempt ends, its last save included, within them.
    None: no cap.
    """
    left = money_left(state)
    if left is None or rate <= 0:
        return None
    buys = left * 3600 / rate
    return max(0, int(buys - Decimal(str(stop_seconds(state)))))  # rounded down: it ends before the cap


#: SageMaker's time from the SIGTERM at MaxRuntimeInSeconds to the end of the job, whatever the grace.
SAGEMAKER_STOP_SECONDS = 120.0


def stop_seconds(state: AttemptState) -> float:
    """The most a job runs past its time limit: its grace period, or the backend's own kill delay if longer.

    Kubernetes kills at the pod's ``terminationGracePeriodSeconds`` (a command's grace + 10 s), SageMaker
    120 s after its SIGTERM, Batch at its ``stop_timeout_seconds``: the grace alone let a capped attempt
    bill up to two minutes past ``max_usd``.
    """
    plan = state.plan
    return backend_stop_seconds(
        plan.backend, float(plan.grace_seconds), plan.backend_options, is_command=bool(state.command)
    )


def _pod_grace(written: Any, whole_number: Any) -> int:
    """``termination_grace_seconds`` as a stop is sized on; a pod made before ea3be43c, at its most.

    Up to ea3be43c a pod took any number in (0, 120) and ran with int() of it (119.5 as 119): its
    stop is sized on the next whole second up (never less than it ran with), with a warning.
    """
    try:
        return int(whole_number(written, "termination_grace_seconds", low=1, high=119))
    except ConfigurationError:
        if isinstance(written, bool) or not isinstance(written, (int, float)) or not 0 < written < 120:
            raise
    log.warning(
        "termination_grace_seconds %r is no whole number from 1 to 119: its pod, made by an older costaware, "
        "is stopped and billed with %d s",
        written,
        math.ceil(written),
    )
    return math.ceil(written)


def backend_stop_seconds(
    backend: str | None,
    grace_seconds: float,
    options: Mapping[str, Any] | None = None,
    *,
    is_command: bool = True,
) -> float:
    """:func:`stop_seconds` of a job on ``backend`` with ``options``, before any attempt exists.

    ``backend`` None (not known yet): the most of any backend with its default options, e.g. for a cap
    sized before the backend is chosen.
    """
    from costaware.adapters.compute.base import BACKENDS, whole_number
    from costaware.adapters.compute.batch import ECS_STOP_TIMEOUT_SECONDS
    from costaware.adapters.compute.kubernetes import TERMINATION_GRACE_SECONDS, pod_grace_seconds

    if backend is None:
        return max(backend_stop_seconds(name, grace_seconds, is_command=is_command) for name in BACKENDS)
    grace = float(grace_seconds)
    options = options or {}
    if backend == "kubernetes":
        pod = pod_grace_seconds(
            grace,
            is_command=is_command,
            termination_grace_seconds=_pod_grace(
                options.get("termination_grace_seconds", TERMINATION_GRACE_SECONDS), whole_number
            ),
        )
        return max(grace, float(pod))
    if backend == "sagemaker":
        return max(grace, SAGEMAKER_STOP_SECONDS)
    if backend == "batch":
        return max(grace, float(options.get("stop_timeout_seconds", ECS_STOP_TIMEOUT_SECONDS)))
    return grace


def least_cap_usd(rate: Decimal, grace_seconds: float) -> Decimal:
    """The least left of ``max_usd`` that starts an attempt at ``rate``.

    ``MIN_CAPPED_SECONDS`` beyond its grace period: below it :func:`capped_seconds` gives less, and nothing
    is started.
    """
    return rate * Decimal(str(MIN_CAPPED_SECONDS + grace_seconds)) / 3600


def least_cap_usd_said(rate: Decimal, grace_seconds: float) -> Decimal:
    """:func:`least_cap_usd` rounded up to the micro-dollar, as a message names it: that much starts one."""
    return least_cap_usd(rate, grace_seconds).quantize(Decimal("0.000001"), rounding="ROUND_CEILING")


def cap_spent_message(
    state: AttemptState,
    market: str,
    rate: Decimal,
    *,
    newest_step: int | None = None,
    instance_type: str | None = None,
) -> str:
    """Why the next attempt is not started: what is left of ``max_usd`` buys less than a minute.

    ``newest_step``: the step of the newest checkpoint pushed (``NO_CHECKPOINT``: none; None: not known), so
    that the message says whether clearing the task resumes or starts over. ``instance_type``: the type
    ``rate`` is of, where not the plan's (a dearer one the backend ran the last attempt on).
    """
    from costaware.core.money import format_usd_exact
    from costaware.training.attempts import NO_CHECKPOINT

    plan = state.plan
    cap, billed = Decimal(plan.max_usd or 0), total_usd(state)
    buys = (
        f"less than {MIN_CAPPED_SECONDS} s on {market} {instance_type or plan.instance_type} at "
        f"{format_usd_exact(rate)}/hour "
        f"beyond its {plan.grace_seconds:g} s grace period"
    )
    if not state.attempts:
        least = least_cap_usd_said(rate, stop_seconds(state))
        todo = plan.max_usd_note or f"raise max_usd to at least {format_usd_exact(least)}"
        return f"max_usd {format_usd_exact(cap)} buys {buys}: {todo}; nothing was started"
    # Where the budgets lowered the cap, raising max_usd does nothing: the note says what does.
    todo = plan.max_usd_note or "raise max_usd and clear the task"
    if newest_step == NO_CHECKPOINT:
        kept = f"no checkpoint was pushed to {plan.checkpoint_uri}: {todo} to train again from the start"
    else:
        step = "" if newest_step is None else f" (step {newest_step})"
        kept = f"the newest checkpoint{step} stays at {plan.checkpoint_uri}: {todo} to resume from it"
    # A cap lowered below what was billed (a retry the budgets have no room for) leaves nothing, not less.
    leaves = (
        f"which leaves {format_usd_exact(cap - billed)}, {buys}"
        if billed <= cap
        else f"{format_usd_exact(billed - cap)} more than it"
    )
    return (
        f"max_usd {format_usd_exact(cap)} cannot start another attempt: {len(state.attempts)} attempt(s) "
        f"billed {format_usd_exact(billed)}, {leaves}; nothing was registered, and {kept}"
    )


def job_request(
    state: AttemptState,
    market: str,
    now: datetime,
    *,
    zone: str = "",
    checkpoint_every_seconds: float | None = None,
    stop_after_seconds: int | None = None,
) -> JobRequest:
    """The next attempt's request on ``market`` in ``zone``: stable job name, the plan's stores, time left.

    ``checkpoint_every_seconds``: the attempt's interval when re-tuned for it (``"auto"``); default: the
    plan's. ``stop_after_seconds``: what is left of ``max_usd`` (:func:`capped_seconds`); it also bounds
    the backend's runtime limit.
    """
    from costaware.adapters.compute.base import JobRequest
    from costaware.adapters.compute.job_contract import attempt_uris
    from costaware.training.remote import job_name

    plan = state.plan
    attempt = state.next_attempt
    seconds = job_seconds_left(plan, now, market)
    runtime = seconds if stop_after_seconds is None else max(1, min(seconds, stop_after_seconds))
    output_uri, result_uri = attempt_uris(plan.model_store, plan.base_name, attempt)
    return JobRequest(
        job_name=job_name(plan.base_name, attempt),
        spec_uri=plan.spec_uri,
        market=market,
        instance_type=plan.instance_type,
        checkpoint_uri=plan.checkpoint_uri,
        model_store=plan.model_store,
        max_runtime_seconds=runtime,
        max_wait_seconds=seconds if market == "spot" else None,
        env=dict(plan.job_env),
        user_command=state.command or (),
        image=plan.image or "",
        output_uri=output_uri if state.command else "",
        result_uri=result_uri if state.command else "",
        attempt=attempt,
        grace_seconds=plan.grace_seconds,
        availability_zone=zone,
        checkpoint_every_seconds=(
            plan.checkpoint_every_seconds if checkpoint_every_seconds is None else checkpoint_every_seconds
        ),
        stop_after_seconds=stop_after_seconds,
    )


def billed_attempt(
    state: AttemptState,
    job: Mapping[str, Any],
    cause: str | None,
    usd_per_hour: Decimal,
    *,
    committed_step: int | None = None,
    on_demand_usd_per_hour: Decimal | None = None,
) -> tuple[LedgerEntry, Attempt]:
    """The ledger entry of the running attempt that ended as ``job``, and the attempt as the state keeps it.

    ``committed_step``: the newest pushed checkpoint's step once the job ended, where it was read (see
    :meth:`Attempt.kept_work`; the step it restored was read at its submit). ``on_demand_usd_per_hour``: the
    on-demand price of the attempt's own region, where it moved to another than the plan's (its savings are
    against that); None: the plan's.

    Raises:
        ValueError: no attempt is running.
    """
    from costaware.core.zone_choice import region_of
    from costaware.training.remote import attempt_entry

    plan, current = state.plan, state.current
    if current is None:
        raise ValueError("no attempt is running: only a running attempt ends")
    entry = attempt_entry(
        identity=plan.identity,
        attempt=current.attempt,
        job=job,
        usd_per_hour=usd_per_hour,
        on_demand_usd_per_hour=on_demand_usd_per_hour or Decimal(plan.on_demand_usd_per_hour),
        region=region_of(current.zone, plan.region) if current.zone else plan.region,
        backend=plan.backend,
        tags=plan.tags,
        cause=cause,
        gpus=instance_gpus(str(job["instance_type"]) or plan.instance_type, plan.region),
        market_reason=current.market_reason,
        run_token=current.run_token,
    )
    attempt = Attempt(
        attempt=current.attempt,
        job_id=str(job["job_id"]),
        market=str(job["market"]),
        instance_type=str(job["instance_type"]),
        billable_seconds=job["billable_seconds"],
        usd=str(entry.usd),
        cause=str(entry.cause),
        reason=str(job.get("reason") or ""),
        zone=current.zone,
        exit_code=int(job["exit_code"]) if job.get("exit_code") is not None else None,
        restored_step=current.restored_step,
        committed_step=committed_step,
        market_reason=current.market_reason,
        trained_runs_seconds=trained_runs(job),
    )
    return entry, attempt


def instance_gpus(instance_type: str, region: str) -> Decimal:
    """GPUs of an instance type in the bundled catalog (an ``ml.`` type as its EC2 twin); 0 when unknown."""
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.errors import PriceNotFoundError

    name = instance_type.removeprefix("ml.")
    try:
        return Decimal(bundled_catalog().offer(name, region).gpus)
    except (PriceNotFoundError, ValueError):
        return Decimal(0)


def total_usd(state: AttemptState) -> Decimal:
    """What the attempts recorded so far cost together."""
    return sum((Decimal(a.usd) for a in state.attempts), Decimal(0))


def summary_figures(state: AttemptState) -> tuple[int, Decimal]:
    """How many attempts the task made and what they billed, over all its tries (its summary's figures).

    A retry that goes on after earlier tries' attempts (the backend lost one) holds only its own in
    :attr:`AttemptState.attempts`; the earlier ones count by number and by :attr:`AttemptState.earlier_usd`.
    """
    earlier = Decimal(state.earlier_usd or 0)
    return state.first_attempt - 1 + len(state.attempts), total_usd(state) + earlier


def clear_checkpoints(plan: RemotePlan, storage_options: Mapping[str, Any]) -> bool:
    """Delete the training's checkpoints (no other run resumes them); False when the URI names no folder.

    On S3 the unfinished multipart uploads under it are aborted too (a push killed mid-file left one, its
    parts billed while open, and no object listing shows it): best effort, since the objects are gone
    either way; credentials that may not list or abort them get a warning naming the permission and the
    bucket lifecycle rule that aborts them instead.

    Raises:
        OSError: the store could not delete them.
    """
    from costaware.adapters.blob_dir import BlobDir
    from costaware.adapters.object_store.clients import S3Options
    from costaware.adapters.object_store.location import parse_uri
    from costaware.adapters.object_store.s3 import abort_open_uploads

    parent, _, leaf = plan.checkpoint_uri.rstrip("/").rpartition("/")
    if not parent or not leaf:
        return False
    BlobDir.from_uri(parent, create=False, what="checkpoint_store", **storage_options).delete(leaf)
    if plan.checkpoint_uri.startswith("s3://"):
        location = parse_uri(plan.checkpoint_uri, what="checkpoint_uri")
        try:
            aborted = abort_open_uploads(location, S3Options(**storage_options))
        except OSError as e:
            log.warning("deleted the checkpoints, but their unfinished uploads may stay open: %s", e)
        else:
            if aborted:
                log.info("aborted %d unfinished uploads under %s", len(aborted), plan.checkpoint_uri)
    return True
