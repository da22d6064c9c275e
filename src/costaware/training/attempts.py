"""The attempts of a remote training as a pure state machine: what to do next after each trigger event.

``RemoteTrainingOperator`` and ``RemoteTrainingJobTrigger`` carry an :class:`AttemptState` (as the JSON
dict of :meth:`AttemptState.to_json`); on each trigger event the operator turns it into an :data:`Event`,
asks :func:`next_step` what to do, and performs the side effects the step names (stop a job, record the
ended attempt in the ledger, submit, read the result, raise). No Airflow, no SDK and no IO here.

:func:`next_step` and its rules are here; the records of one attempt are in :mod:`.attempt_records`, the
state in :mod:`.attempt_state`, the events and steps in :mod:`.attempt_events`. Every name stays importable
from here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from costaware.adapters.compute.base import billed_instances
from costaware.adapters.compute.job_contract import exit_hint
from costaware.training.attempt_events import Event as Event
from costaware.training.attempt_events import Fail as Fail
from costaware.training.attempt_events import Finish as Finish
from costaware.training.attempt_events import JobEnded as JobEnded
from costaware.training.attempt_events import Pause as Pause
from costaware.training.attempt_events import PriceBack as PriceBack
from costaware.training.attempt_events import PriceRose as PriceRose
from costaware.training.attempt_events import Resume as Resume
from costaware.training.attempt_events import Step as Step
from costaware.training.attempt_events import Submit as Submit
from costaware.training.attempt_events import WaitForPrice as WaitForPrice
from costaware.training.attempt_events import event_from_trigger as event_from_trigger
from costaware.training.attempt_records import EARLIER_STOP_KEY as EARLIER_STOP_KEY
from costaware.training.attempt_records import NO_CHECKPOINT as NO_CHECKPOINT
from costaware.training.attempt_records import Attempt as Attempt
from costaware.training.attempt_records import Current as Current
from costaware.training.attempt_records import trained_runs as trained_runs
from costaware.training.attempt_state import AttemptState as AttemptState
from costaware.training.attempt_state import remaining_hours as remaining_hours
from costaware.training.remote import CAUSES, RUNTIME_LIMIT_REASONS, attempt_cause, next_market


def _within_attempts(state: AttemptState, step: Submit | Resume, max_attempts: int) -> Step:
    """``step``, or a failure when its attempt would be one more than ``max_attempts``."""
    attempt = state.next_attempt + (1 if step.record_cause else 0)
    if attempt <= max_attempts:
        return step
    causes = Counter(a.cause for a in state.attempts)
    if step.record_cause:
        causes[step.record_cause] += 1
    counted = ", ".join(f"{cause.replace('_', ' ')}: {n}" for cause, n in causes.most_common())
    # Only a job that met spot can avoid its interruptions by starting on on-demand.
    on_spot = step.market == "spot" or any(a.market == "spot" for a in state.attempts)
    advice = "raise max_attempts or start it on on-demand" if on_spot else "raise max_attempts"
    if causes["max_usd"]:
        # Spot billed at the price in force is bounded at on-demand: each stop leaves money over, and the
        # attempts get shorter until max_attempts, not the cap, ends them.
        advice = (
            "raise max_usd: the cap stopped its attempts short each time (a spot attempt billed at the price "
            f"in force is bounded at on-demand), or {advice}"
        )
    return Fail(
        message=(
            f"training was interrupted {attempt - 1} times ({counted}), max_attempts={max_attempts} "
            f"reached: {advice}"
        ),
        record_cause=step.record_cause,
        stop_first=step.stop_first,
    )


def _store_unreachable_again(state: AttemptState, job: Mapping[str, Any]) -> Fail:
    """The second attempt in a row that could not reach a store: a setting to fix, not bad luck.

    Each attempt is a billed job; a store that refused two in a row (a missing bucket or folder, a role
    that may not write it) refuses the next ones too, so they are not bought.
    """
    plan = state.plan
    return Fail(
        message=(
            f"training job {job['job_id']} could not reach a store, the second attempt in a row to fail so "
            f"({job.get('reason') or 'no reason given'}): check that model_store {plan.model_store!r} and "
            f"the checkpoint location {plan.checkpoint_uri!r} can be created and written by the job (its "
            "role or service account on a cloud backend), or, if the reason is a push cut short by a "
            "preemption notice, that a checkpoint uploads within preemption_grace_seconds; then clear the "
            "task; nothing was registered"
        ),
        job_id=str(job["job_id"]),
        record_cause="store_error",
    )


def _failure(state: AttemptState, job: Mapping[str, Any], cause: str) -> Fail:
    hint = ""
    if state.command:
        # No exit code (a Batch container that could not be pulled) has no hint: "...; ; nothing was" read
        # as a part left out.
        said = exit_hint(job.get("exit_code"), str(job.get("reason") or ""))
        hint = f"{'; ' + said if said else ''}; nothing was registered"
    return Fail(
        message=f"training job {job['job_id']} failed: {job.get('reason') or 'no reason given'}{hint}",
        job_id=str(job["job_id"]),
        record_cause=cause,
    )


def next_step(
    state: AttemptState,
    event: Event,
    now: datetime,
    *,
    max_attempts: int,
    latest_resume: datetime | None,
) -> Step:
    """What to do after ``event``.

    Args:
        state: The state before the event.
        event: What the trigger saw.
        now: The time of the decision.
        max_attempts: Attempts at most, interruptions included.
        latest_resume: After a pause, the latest resume that still meets the deadline, counting the work
            of the attempt that ended (None: no limit).

    Returns:
        The step; its ``stop_first`` and ``record_cause`` come before it.
    """
    if isinstance(event, PriceBack):
        decided = event.decision
        price = str(decided.usd_per_hour) if decided.market == "spot" else None
        resume = Resume(market=decided.market, usd_per_hour=price, reason=decided.reason)
        return _within_attempts(state, resume, max_attempts)
    if isinstance(event, PriceRose):
        return Pause(reason=event.reason, job=dict(event.job), seen_at=event.seen_at or now.isoformat())
    job = event.job
    ended = str(job["state"])
    if state.current is not None and state.current.pausing and ended != "succeeded":
        # The stop this operator asked for, not a reclaim: the job checkpointed on SIGTERM.
        if latest_resume is not None and now >= latest_resume:
            submit = Submit(
                market="on_demand",
                cause_of_previous="paused",
                record_cause="paused",
                market_reason="paused by a price rise, no slack left for a later spot start",
            )
            return _within_attempts(state, submit, max_attempts)
        return WaitForPrice(record_cause="paused")
    if event.fallback:
        submit = Submit(
            market="on_demand",
            cause_of_previous="capacity_wait",
            record_cause="capacity_wait",
            stop_first=True,
            market_reason=f"no spot capacity by the latest safe start {_instant(state.latest_start)}",
        )
        return _within_attempts(state, submit, max_attempts)
    cause = attempt_cause(job) or CAUSES.get(ended, "code_error")
    capped = (
        ended != "succeeded"
        and state.current is not None
        and state.current.stopped_by_cap(job, instances=billed_instances(state.plan.backend_options))
    )
    # A followed job an earlier try stopped (its kill) ended by that stop, as its ledger entry says: so
    # recorded whether the wait took the stop as its own at the cap or saw the job end on its notice.
    earlier_stop = state.current.earlier_stop() if state.current is not None else None
    if capped:
        # Stopped at what was left of the cap (the next submit says whether more is left), unless the stop
        # the wait took as its own was an earlier try's (its kill's).
        cause = earlier_stop or "max_usd"
    elif earlier_stop and cause == "preemption":
        cause = earlier_stop
    deadline_stop = not capped and _stopped_at_the_deadline(state, job, now)
    if deadline_stop:
        # A spot attempt's limit is the time to the deadline: Batch and Kubernetes end it "failed", which
        # was a code error that failed the task for good where the on-demand fallback was due.
        cause = "deadline"
    if ended == "succeeded":
        return Finish(record_cause=cause)
    if ended == "failed" and not capped and not deadline_stop:
        return _failure(state, job, cause)
    if cause == "store_error" and state.attempts and state.attempts[-1].cause == "store_error":
        return _store_unreachable_again(state, job)
    market = next_market(previous=str(job["market"]), now=now, latest_start=state.latest_start)
    if deadline_stop:
        market = "on_demand"  # the deadline has passed: the fallback, not another spot attempt
    why = ""
    if deadline_stop:
        why = f"the spot attempt ran until the deadline {_instant(state.plan.deadline)}"
    elif market == "on_demand" and job["market"] == "spot":
        why = f"{cause.replace('_', ' ')} past the latest safe start {_instant(state.latest_start)}"
    elif market == "on_demand" and state.current is not None:
        why = state.current.market_reason  # on-demand stays on-demand, for the reason it went there
    submit = Submit(market=market, cause_of_previous=cause, record_cause=cause, market_reason=why)
    return _within_attempts(state, submit, max_attempts)


def _stopped_at_the_deadline(state: AttemptState, job: Mapping[str, Any], now: datetime) -> bool:
    """Whether ``job``, a spot attempt, was ended by the runtime limit its deadline set (not by ``max_usd``).

    A spot attempt's limit is the time to the deadline (``job_seconds_left``), at most 5 days: one that
    ended on its limit well before the deadline ran into that maximum, not the deadline.
    """
    if state.plan.deadline is None or job.get("market") != "spot":
        return False  # without a deadline, and on-demand, the limit is a day or more: not the deadline's
    if now < state.plan.deadline - timedelta(minutes=1):
        return False
    if job.get("state") not in ("interrupted", "failed"):
        return False
    reason = str(job.get("reason") or "")
    return any(said in reason for said in RUNTIME_LIMIT_REASONS)


def _instant(moment: datetime | None) -> str:
    return moment.isoformat(timespec="seconds") if moment else "(none)"
