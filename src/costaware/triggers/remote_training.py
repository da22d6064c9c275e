"""``RemoteTrainingJobTrigger``: polls a compute backend in the triggerer until a training job ends.

Every ``poll_interval`` seconds it asks the backend for the job's status (in a worker thread, never on the
event loop) and emits one event when the job ended, or when a spot job still waits for capacity at
``fallback_at`` (the latest safe start: the operator moves it to on-demand):
``{"status": "success", "job": {...JobStatus...}, "state": {...}, "fallback": bool}`` or
``{"status": "error", "message": ..., "state": {...}, "configuration": bool}`` (``configuration``: a
configuration error, which a retry cannot fix). ``state`` is the operator's attempt state, echoed
so the operator resumes from the event alone.

With a ``price_watch`` it also reads the spot price at each poll (see :func:`watch_event`):

* ``"mode": "pause"``: while the job runs on spot, an event with ``"pause": reason`` when
  :func:`~costaware.core.spot_window.pause_decision` says the price rose well above the rest of the window
  (the operator stops the job; it resumes from its checkpoint);
* ``"mode": "resume"`` (no job: the training is paused): an event with ``"resume": decision`` (a
  ``SpotDecision.to_xcom()``) when :func:`~costaware.core.spot_window.decide` says start again, on spot or,
  once the latest resume has come, on-demand.

Where a person kills the waiting task (marks it failed or succeeded, or clears it), Airflow calls the
trigger's ``on_kill``: it stops the job and bills what it ran, and settles the task's hold
(:meth:`RemoteTrainingJobTrigger.stop_and_bill`); no task is left to do it. A triggerer restart calls no
``on_kill``: the job runs on, and the trigger goes on watching it (a stop at the cap it had sent is read
back from the task's wait state XCom, ``WAIT_STATE_XCOM_KEY``, and not sent again). Nor does a deferral
timeout: Airflow 3.3.2's scheduler sets the task past its ``trigger_timeout`` scheduled for its ``__fail__``
resume, and its triggerer, cancelling the trigger past that deadline, calls no ``on_kill`` (whatever the
cancel's cause). The resume fails the try (``RemoteTrainingOperator.resume_execution``): with a retry left,
the retry follows the job by its name and bills it; on the last try the resume stops and bills it, from the
state in ``WAIT_STATE_XCOM_KEY``. A person's mark-failed or mark-success of the deferred task after that
deadline, before the scheduler's timeout check, gets no ``on_kill`` and no resume either: on a cancel past
the deadline from Airflow's trigger assignment (a person's action, the timeout check or a hand-over to
another triggerer all send it), the trigger asks the task's state and stops and bills the job itself where
the task ended (:meth:`RemoteTrainingJobTrigger._stop_and_bill_if_the_task_ended`). A task ended after the
scheduler's timeout check, before its resume or retry runs (a person's mark, its DAG run marked failed or
timed out), has its job stopped and billed from that XCom by the run-end listener, or by ``costaware jobs
reconcile`` (:mod:`costaware.remote_reconcile`).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from costaware.core.carbon import Objective
from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant
from costaware.glue import DEFAULT_AWS_CONN_ID
from costaware.triggers import MAX_POLL_ERRORS

#: How long a kill waits for the stopped job to end before it bills the job to the end of its grace period.
#: Airflow 3.3 stops awaiting ``on_kill`` after about a second (it cancels the trigger again at its next
#: loop): the work runs in a thread, which finishes on its own.
KILL_WAIT_SECONDS = 20.0
#: How long a Ctrl-C (or SIGTERM) of `airflow dags test` waits for a stop and bill under way before it goes
#: through: the stop's own wait and as long again for the backend's and the ledger's calls around it.
BILL_PATIENCE_SECONDS = 2 * KILL_WAIT_SECONDS
#: How long after its submit a job the backend does not know counts as gone (before: not listed yet).
NOT_LISTED_GRACE_SECONDS = 600.0
#: The backends whose "no such job" is final for a job seen before: it was deleted (a pod a drain deleted),
#: and a stop of it is a 404 that does nothing. Elsewhere a listing may lag (Batch's
#: DescribeJobs is eventually consistent): a job seen and then not listed is "not listed yet" for
#: ``NOT_LISTED_GRACE_SECONDS`` after it was last seen, and stopped when billed as gone (it may run on).
GONE_IS_FINAL_BACKENDS = frozenset({"kubernetes"})
#: The shortest wait before the poll that sends a stop at the cap: a backend's billed time that lags a
#: little behind the wall clock brings the job a second short of it, not a poll after poll at once.
MIN_CAP_STOP_WAIT_SECONDS = 1.0
#: How soon a stop at the cap that fell due and was not sent (it failed, the price was unknown, the poll
#: failed) is asked again; doubled per such retry in a row up to ``CAP_STOP_RETRY_MAX_SECONDS``. Asked at
#: the next ``poll_interval``, the job ran up to that long past the cap; a stop refused for good (no
#: permission) is not asked every few seconds for the rest of the job.
CAP_STOP_RETRY_SECONDS = 5.0
CAP_STOP_RETRY_MAX_SECONDS = 60.0
#: The states of a task that will not run again: a kill that leaves one settles the task's hold.
ENDED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
#: The states of a task no person ended: its trigger moved to another triggerer, or its worker is going
#: away (shutdown, ``execution_timeout``); the job runs on for the task, or its retry, to follow.
WAITING_STATES = frozenset({"deferred", "running"})
#: The message of Airflow 3.3's cancel of a trigger its triggerer no longer holds in the trigger
#: assignment: a person's action on its task (a mark or a clear), the scheduler's timeout check, or a
#: hand-over to another triggerer (a triggerer's shutdown sends none).
#: ``airflow.jobs.triggerer_job_runner._USER_ACTION_CANCEL_MSG``, copied (a private name).
AIRFLOW_USER_ACTION_CANCEL = "__airflow_user_action__"
#: The XCom (of the waiting try) holding the attempt state a deferred wait watches. Airflow resumes a wait
#: that timed out (or whose trigger failed) with nothing of the deferral but the error: this is how that
#: resume finds the job to stop and bill. The wait keeps a stop at the cap it sent there too.
WAIT_STATE_XCOM_KEY = "costaware_wait_state"
#: The wait state's key of the task's AWS connection, which the task's serialized definition does not keep
#: (not a template field): a run-end listener and ``costaware jobs reconcile`` stop and bill with it.
WAIT_STATE_AWS_CONN_KEY = "aws_conn_id"
#: The state's ``current`` key of a stop at the cap this wait sent: ``{"job_id", "sent_at"}``, with the
#: job's ``job`` status and ``seen_at`` as last seen before it. Kept (see ``_keep_cap_stop``) so that a
#: wait re-created by a triggerer restart stops the job once and bills it to its grace period's end.
CAP_STOP_KEY = "cap_stop"


def job_event(
    status: Any, state: Mapping[str, Any], *, fallback_at: datetime | None, now: datetime
) -> dict[str, Any] | None:
    """The event for a poll result, or None to keep waiting (pure)."""
    from costaware.adapters.compute.base import JobState

    if status.state.done:
        return {"status": "success", "job": status.to_dict(), "state": dict(state), "fallback": False}
    waiting_for_spot = status.state == JobState.PENDING and status.market == "spot"
    if waiting_for_spot and fallback_at is not None and now >= fallback_at:
        return {"status": "success", "job": status.to_dict(), "state": dict(state), "fallback": True}
    return None


def stopped_job_status(stopped: Mapping[str, Any], *, now: datetime, instances: int = 1) -> Any:
    """The end of a job the operator stopped (a pause) that its backend no longer knows (a deleted pod).

    It ended by ``now`` at the latest: billed as the status seen before the stop plus the time since on its
    ``instances``, which is at most one poll more than it ran, never less (pure).
    """
    from costaware.adapters.compute.base import JobStatus

    return _ended_by_now(
        JobStatus.from_dict(stopped["job"]),
        parse_instant(stopped["seen_at"], name="seen_at"),
        now=now,
        instances=instances,
        reason="stopped for a pause; the backend no longer has the job, so it is billed up to now",
    )


def _ended_by_now(seen: Any, seen_at: datetime, *, now: datetime, instances: int, reason: str) -> Any:
    """``seen`` (a ``JobStatus``) interrupted by ``now``: its billed time and the time since on ``instances``.

    Never less than it ran, at most one poll more (pure).
    """
    from dataclasses import replace

    from costaware.adapters.compute.base import JobState

    since = max(0.0, (now - seen_at).total_seconds())
    return replace(
        seen,
        state=JobState.INTERRUPTED,
        billable_seconds=seen.billable_seconds + since * instances,
        ended_at=now.timestamp(),
        reason=reason,
    )


def vanished_job_status(
    job_id: str,
    state: Mapping[str, Any],
    *,
    last_seen: tuple[Any, datetime] | None,
    now: datetime,
    instances: int = 1,
    listed_grace: float = NOT_LISTED_GRACE_SECONDS,
    backend: str,
    watched_since: datetime | None = None,
) -> Any:
    """The end of a job its backend no longer has though nobody here stopped it, or None: not gone yet.

    A Kubernetes drain or spot reclaim deletes the bare pod (its node too), so the exit 75 is never seen:
    the pod's 404 is the interruption. It is billed as the status last seen plus the time since on its
    ``instances`` (seen waiting: from then); never seen (the triggerer restarted), from the attempt's
    submit, which may count time it queued: never less than it ran. A job an earlier try submitted that the
    wait never saw is billed from its status when this try found it (what it ran before then included).
    A job never seen is "not listed yet" (a backend's eventual consistency) until ``listed_grace`` seconds
    after its submit; on a ``backend`` whose listing may lag (not in :data:`GONE_IS_FINAL_BACKENDS`: one
    DescribeJobs may miss a Batch job it listed before), a job seen is too, until ``listed_grace`` seconds
    after it was last seen. There, a wait that has not seen the job itself (``last_seen`` None: rebuilt
    by another triggerer from its deferral, which knew nothing of its polls) counts it not listed yet until
    ``listed_grace`` seconds after its own first poll, ``watched_since``: one DescribeJobs that missed it
    would otherwise bill, stop and resubmit a job seen running a minute before (pure).
    """
    from costaware.adapters.compute.base import JobState, JobStatus

    watched_for = (now - watched_since).total_seconds() if watched_since is not None else listed_grace
    if last_seen is None and backend not in GONE_IS_FINAL_BACKENDS and watched_for < listed_grace:
        return None
    current = state.get("current") or {}
    followed = current.get("followed")
    ended = ended_when_found(state, last_seen)
    if ended is not None:
        return ended  # it had ended before this try found it: billed to its end, as its backend ended it
    if last_seen is None and followed:
        found_at = parse_instant(followed["seen_at"], name="seen_at")
        last_seen = (JobStatus.from_dict(followed["job"]), found_at)
    if last_seen is not None:  # waiting when seen: it can have run since then at the most
        seen, seen_at = last_seen
        unlisted_for = max(0.0, (now - seen_at).total_seconds())
        if backend in GONE_IS_FINAL_BACKENDS:
            reason = "the backend no longer has the job (a drain or a reclaim deleted it): billed up to now"
        elif unlisted_for < listed_grace:
            return None
        else:
            reason = (
                f"{backend} has not listed the job in the {unlisted_for:.0f} s since it was last seen, at "
                f"{seen_at.isoformat()}: taken as gone, billed up to now"
            )
        return _seen_run(seen, _ended_by_now(seen, seen_at, now=now, instances=instances, reason=reason))
    submitted = current.get("submitted_at")
    if not submitted:
        return None
    submitted_at = parse_instant(submitted, name="submitted_at")
    if max(0.0, (now - submitted_at).total_seconds()) < listed_grace:
        return None
    # Never seen: as a job seen at its submit with nothing billed, the most it can have run.
    unseen = JobStatus(
        job_id=job_id, state=JobState.RUNNING, market=str(current.get("market") or ""), instance_type=""
    )
    reason = (
        "the backend no longer has the job, and it was not seen here: billed from its submit up to now, "
        "the most it can have run"
    )
    return _seen_run(unseen, _ended_by_now(unseen, submitted_at, now=now, instances=instances, reason=reason))


def ended_when_found(state: Mapping[str, Any], last_seen: tuple[Any, datetime] | None) -> Any:
    """The status of the followed job (an earlier try's) where it had ended when found, and none seen since.

    Found by its name after it ended (its polls failed then), it is billed to the end its backend gave,
    and nothing runs on to stop or bill past it. None otherwise (pure).
    """
    from costaware.adapters.compute.base import JobStatus

    followed = (state.get("current") or {}).get("followed")
    if last_seen is not None or not followed:
        return None
    found = JobStatus.from_dict(followed["job"])
    return found if found.state.done and found.ended_at is not None else None


def _seen_run(seen: Any, gone: Any) -> Any:
    """``gone`` (billed the most it may have run) with what ``seen`` surely ran: not a stop at the cap (pure).

    Its bill may reach the stop that ``max_usd`` set though nothing stopped it there: recorded as stopped
    at the cap, a reclaimed job was no preemption to the ledger, the zone choice or the restart guard. A
    ``seen`` whose billed time is an estimate (a followed job never read: the time since its start or
    creation, an upper bound) was seen to run nothing.
    """
    from dataclasses import replace

    from costaware.adapters.compute.base import ESTIMATED_SECONDS, SEEN_BILLABLE_SECONDS

    ran = 0.0 if seen.metrics.get(ESTIMATED_SECONDS) else seen.billable_seconds
    return replace(gone, metrics={**gone.metrics, SEEN_BILLABLE_SECONDS: ran})


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
    (of the ``objective``'s hourly value, with the instance's ``power_kw`` and the intensity now, when it is
    not ``cost``).
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
    watch: Mapping[str, Any], state: Mapping[str, Any], *, now: datetime
) -> dict[str, Any] | None:
    """Read the spot price and capacity now, fit the forecast now (blocking IO), apply :func:`price_event`.

    The forecast is fitted at each look, on the same history the price comes from: a rise that the forecast
    expects to last (its persistence term) is not worth a pause, one that the rest of the window outlasts
    is. Past the latest resume nothing is read: a paused job restarts on on-demand whatever spot costs.
    """
    from costaware.adapters.spot_market import (
        forecast_window,
        intensity_at,
        observe_market,
        watch_objective,
    )

    latest_resume = parse_instant(watch["latest_resume"], name="latest_resume")
    if now >= latest_resume:
        return price_event(
            watch, state, now=now, usd_per_hour=None, available=False, source="", forecast_starts=[]
        )
    observe = watch["observe"]
    objective, intensity, power_kw = watch_objective(
        watch, instance_type=observe["instance_type"], region=observe["region"]
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
        runtime_hours=max(Decimal(watch["remaining_hours"]), Decimal("0.01")),
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
        g_co2e_per_kwh=intensity_at(intensity, now),
    )


class RemoteTrainingJobTrigger(BaseTrigger):
    """Fires when a training job on a compute backend ended (or must fall back, pause or resume).

    See docs/remote-training.md.

    Args:
        backend: Backend name (``local``, ``sagemaker``, ``batch``, ``kubernetes``).
        backend_options: Its options, JSON primitives.
        job_id: The job to watch; ``None`` while the training is paused (then ``price_watch`` is required).
        state: The operator's attempt state, ``costaware.training.attempts.AttemptState.to_json()``, echoed
            in the event.
        fallback_at: ISO time after which a spot job still pending is reported for fallback (None: never).
        poll_interval: Seconds between polls.
        price_watch: Pause or resume on the spot price (see the module docstring), or ``None``.
        ledger_conn_id: The cost ledger a killed task's job is billed in (the operator's).
        aws_conn_id: The AWS connection of the recorded spot prices it is billed at (the operator's).
    """

    def __init__(
        self,
        backend: str,
        backend_options: dict[str, Any],
        job_id: str | None,
        state: dict[str, Any],
        fallback_at: str | None = None,
        poll_interval: float = 30.0,
        price_watch: dict[str, Any] | None = None,
        ledger_conn_id: str = "costaware_ledger",
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
    ) -> None:
        super().__init__()
        if job_id is None and price_watch is None:
            raise ValueError("a trigger without a job to watch needs a price_watch to resume on")
        self.backend = backend
        self.backend_options = dict(backend_options)
        self.job_id = job_id
        self.state = dict(state)
        self.fallback_at = fallback_at
        self.poll_interval = poll_interval
        self.price_watch = dict(price_watch) if price_watch else None
        self.ledger_conn_id = ledger_conn_id
        self.aws_conn_id = aws_conn_id
        self._last = ""
        self._poll_errors = 0
        #: The job's latest status and when it was seen: what a job deleted under us is billed from.
        self._last_seen: tuple[Any, datetime] | None = None
        #: This wait's first poll: a job it never saw is not listed yet until NOT_LISTED_GRACE_SECONDS after.
        self._first_poll_at: datetime | None = None
        #: Per job seen on another type than planned: how long it may run there under max_usd (None: no
        #: bound), as last logged (worked out at each poll, logged when it moves); and the job stopped for
        #: it (stopped once).
        self._other_type_limit: tuple[str, int | None] | None = None
        self._stopped_for_cap: str | None = None
        #: The poll under way, and the one that sent the stop at the cap: a job gone after that stop is
        #: billed to its grace period's end after it.
        self._polled_at: datetime | None = None
        self._cap_stopped_at: datetime | None = None
        #: The job's status seen before a stop at the cap that the wait this one replaces sent.
        self._cap_stop_seen: tuple[Any, datetime] | None = None
        #: How many more seconds of running the job has, at the last poll, before a stop at the cap is due
        #: (None: none is due): the next poll comes then, not up to a ``poll_interval`` later.
        self._cap_stop_due_in: float | None = None
        #: Retries in a row of a stop at the cap that was due and not sent (see ``CAP_STOP_RETRY_SECONDS``).
        self._cap_stop_retries = 0
        #: When the failed polls in a row began (see :meth:`poll_tolerant`), and whether the last poll failed.
        self._failing_since: datetime | None = None
        self._last_poll_failed = False
        #: Set when the triggerer cancels this wait. A cancel cannot stop a poll's thread (asyncio.to_thread):
        #: one still in a backend call went on to stop the job at the cap and write its state over the wait
        #: state XCom the task's new try had kept since. Whoever follows the job now (the new wait, the
        #: task's resume or new try, the kill's stop_and_bill) acts on it instead.
        self._cancelled = threading.Event()

    @property
    def training(self) -> str:
        """The training this wait is part of: its jobs' name stem (``RemotePlan.base_name``)."""
        return str(self.state.get("base_name") or "")  # the plan's keys are at the state's top

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "backend": self.backend,
                "backend_options": self.backend_options,
                "job_id": self.job_id,
                "state": self.state,
                "fallback_at": self.fallback_at,
                "poll_interval": self.poll_interval,
                "price_watch": self.price_watch,
                "ledger_conn_id": self.ledger_conn_id,
                "aws_conn_id": self.aws_conn_id,
            },
        )

    def poll_once(self, now: datetime) -> dict[str, Any] | None:
        """One look (blocking IO): the event to emit, or None to keep waiting.

        The operator's synchronous wait (``deferrable=False``) calls this too, so both modes decide alike.
        """
        from costaware.adapters.compute.base import JobState, billed_instances, open_backend
        from costaware.core.errors import JobNotFoundError

        if self.job_id is None:
            assert self.price_watch is not None  # checked in __init__
            return watch_event(self.price_watch, self.state, now=now)
        due_before, self._cap_stop_due_in = self._cap_stop_due_in, None  # worked out again from this poll
        self._polled_at = now
        if self._first_poll_at is None:
            self._first_poll_at = now
            self._restore_cap_stop()
        try:
            status = open_backend(self.backend, self.backend_options).poll(self.job_id)
        except JobNotFoundError:
            count = billed_instances(self.backend_options)
            stopped = (self.state.get("current") or {}).get("stopped")
            if stopped:
                status = stopped_job_status(stopped, now=now, instances=count)
            else:
                current = self.state.get("current") or {}
                status = vanished_job_status(
                    self.job_id,
                    self.state,
                    last_seen=self._last_seen,
                    now=now,
                    instances=count,
                    backend=self.backend,
                    watched_since=self._first_poll_at,
                )
                if status is None:
                    seen = self._last_seen is not None or current.get("followed")
                    if not seen and not current.get("submitted_at"):
                        raise  # no submit time to tell "not listed yet" from gone: a failure, polled again
                    # Not listed yet (a backend's eventual consistency): no failure. Counted as one, five
                    # polls failed the wait long before NOT_LISTED_GRACE_SECONDS could bill it as gone.
                    said = "not listed on %s now, after it was seen" if seen else "not listed on %s yet"
                    self.log.info(f"job %s is {said}: polled again", self.job_id, self.backend)
                    self._stop_unlisted_at_cap(due_before)
                    return None
                if self._stopped_for_cap == self.job_id and self._cap_stopped_at is not None:
                    status = self._gone_after_cap_stop(status, now=now, instances=count)
                elif ended_when_found(self.state, self._last_seen) is not None:
                    self.log.warning("job %s on %s: %s; gone since", self.job_id, self.backend, status.reason)
                else:
                    self.log.warning("job %s on %s: %s", self.job_id, self.backend, status.reason)
                    status = self._billed_as_gone(status, stop_sent=self._stop_unlisted(now, status))
        except Exception:
            self._keep_cap_stop_due(due_before)  # a poll that failed sends no stop: asked again soon
            self._last_poll_failed = True
            raise
        else:
            self._last_seen = (status, now)
            if self._last_poll_failed:
                # The backoff was for polls that failed, not for a refused stop: a stop this poll finds
                # due (and may be refused) is asked again from the shortest wait, not a minute later.
                self._last_poll_failed, self._cap_stop_retries = False, 0
        fallback_at = parse_instant(self.fallback_at, name="fallback_at") if self.fallback_at else None
        event = job_event(status, self.state, fallback_at=fallback_at, now=now)
        if event is not None:
            return event
        if status.state.value != self._last:
            self.log.info("job %s on %s: %s", self.job_id, self.backend, status.state.value)
            self._last = status.state.value
        if status.state == JobState.RUNNING and status.instance_type:
            self._stop_within_cap_on_other_type(status)
        self._stop_followed_job_at_cap(status)  # waiting to start too, where nothing is left
        if self.price_watch and status.state == JobState.RUNNING and status.market == "spot":
            try:
                paused = watch_event(self.price_watch, self.state, now=now)
            except Exception as e:  # a price feed that fails must not stop the watch over the training
                # The error's own "the task is retried" is not so here: the watch reads again next poll.
                self.log.warning(
                    "cannot read the spot price (%s: %s); the job runs on, and the price is read again at "
                    "the next poll",
                    type(e).__name__,
                    str(e).removesuffix("; the task is retried"),
                )
                return None
            if paused is not None:
                return {**paused, "job": status.to_dict(), "seen_at": now.isoformat()}
        return None

    def _stop_unlisted(self, now: datetime, status: Any) -> bool | None:
        """Stop a job billed as gone, best effort, before its attempt is resubmitted.

        A Batch or SageMaker job the backend does not list may exist after all (a listing that lags: Batch's
        DescribeJobs is eventually consistent, a job seen once may drop out of it): it would run on beside
        the resubmitted attempt, billed to nobody. Only where the backend's "no such job" is final for a job
        seen before (:data:`GONE_IS_FINAL_BACKENDS`: a deleted pod) is there nothing left to stop.
        The copies of its submit whose stop failed at the last poll (``status``'s ``COPY_SECONDS_LEFT``) are
        stopped too: nothing polls the job, which stopped them again, after this.
        Returns whether the job's own stop went through (None: nothing to stop).
        """
        from costaware.adapters.compute.base import COPY_SECONDS_LEFT, open_backend

        if self._polled_after_cancel("stopped as not listed"):
            return None
        followed = (self.state.get("current") or {}).get("followed")
        seen_at = self._last_seen[1].isoformat() if self._last_seen else followed and followed["seen_at"]
        if seen_at and self.backend in GONE_IS_FINAL_BACKENDS:
            self.log.info(
                "job %s on %s was seen at %s and is gone now: nothing to stop",
                self.job_id,
                self.backend,
                seen_at,
            )
            return None
        if self._last_seen is not None:
            unlisted = f"has not listed since it was seen at {seen_at}"
        elif seen_at:
            unlisted = f"has not listed since this try found it (an earlier try's job) at {seen_at}"
        else:
            submitted = (self.state.get("current") or {}).get("submitted_at")
            since = (now - parse_instant(submitted, name="submitted_at")).total_seconds() if submitted else 0
            unlisted = f"has not listed in the {since:.0f} s since its submit"
        self.log.warning(
            "stopping job %s, which %s %s, in case it exists after all: it is billed to the end of its "
            "grace period after the stop",
            self.job_id,
            self.backend,
            unlisted,
        )
        backend = open_backend(self.backend, self.backend_options)
        for copy_id in (status.metrics.get(COPY_SECONDS_LEFT) or {}).get("unstopped") or []:
            try:
                backend.stop(str(copy_id))
            except Exception as e:
                self.log.warning(
                    "stopping job %s, a copy of %s's submit, failed (%s: %s): stop it by hand; it is billed "
                    "to its time limit",
                    copy_id,
                    self.job_id,
                    type(e).__name__,
                    e,
                )
        try:
            backend.stop(str(self.job_id))
        except Exception as e:
            self.log.warning(
                "stopping job %s, which %s does not list, failed (%s: %s); if it exists after all, stop it "
                "by hand: it is billed to its time limit",
                self.job_id,
                self.backend,
                type(e).__name__,
                e,
            )
            return False
        return True

    def _billed_as_gone(self, status: Any, *, stop_sent: bool | None) -> Any:
        """``status`` (billed up to now) of a job billed as gone that may run on, billed to its latest end.

        A job its backend does not list may exist after all (:meth:`_stop_unlisted`): stopped, it runs to
        the end of its grace period (or the backend's own kill); where the stop failed, to its time limit,
        with nothing to watch it. Where nothing was stopped (:data:`GONE_IS_FINAL_BACKENDS`), as it is.
        """
        from dataclasses import replace

        from costaware.adapters.compute.base import billed_instances, with_copies_run_out
        from costaware.training.attempt_effects import MIN_CAPPED_SECONDS, stop_seconds
        from costaware.training.attempts import AttemptState

        if stop_sent is None or self.backend in GONE_IS_FINAL_BACKENDS:
            return status
        if ended_when_found(self.state, self._last_seen) is not None:
            return status  # it had ended when this try found it: nothing ran on after its end
        # Nothing polls it again: its copies are billed what they may still run (a failed stop's time limit).
        if not self.state.get("backend"):  # a state without its plan (not the operator's): nothing to size by
            return with_copies_run_out(status)
        state = AttemptState.from_json(self.state)
        if state.current is None:
            return with_copies_run_out(status)
        count = billed_instances(self.backend_options)
        grace = stop_seconds(state)
        # The time limit binds the job itself: its copies' seconds (billed with it) come on top.
        copy_seconds = float(status.metrics.get("batch_copy_seconds") or 0.0)
        current = state.current
        if stop_sent:
            own = status.billable_seconds - copy_seconds + count * grace
            more = f"; stopped, billed {grace:.0f} s more, its grace period after the stop"
            if current.stop_after_seconds is not None and not current.stop_by_poll and not current.followed:
                # The limit max_usd left, which its submit gave it and its backend holds (Batch's is 60 s at
                # the least): billed up to the poll that took it as gone, it was billed past that (the cap).
                held_limit = max(MIN_CAPPED_SECONDS, current.stop_after_seconds)
                held = count * (float(held_limit) + grace)
                if own > held:
                    own = held
                    more += f", within its time limit ({held_limit} s)"
            return with_copies_run_out(
                replace(status, billable_seconds=own + copy_seconds, reason=status.reason + more)
            )
        limit = self._time_limit_held(state, count)
        own = max(status.billable_seconds - copy_seconds, count * (limit + grace))
        more = f"; its stop failed: billed to its time limit ({limit:.0f} s) and grace period ({grace:.0f} s)"
        return with_copies_run_out(
            replace(status, billable_seconds=own + copy_seconds, reason=status.reason + more)
        )

    def _time_limit_held(self, state: Any, count: int) -> float:
        """The time limit ``state``'s running job was given at its submit, as near as can be told (s).

        What ``max_usd`` left binds it where the backend holds that (not a stop by a poll). ``count``: its
        billed instances. A followed job's from its creation, else its start as found (at most its queue
        later: then no upper bound).
        """
        from costaware.training.plan.arguments import job_seconds_left

        assert state.current is not None
        submitted = state.current.submitted_at
        start = parse_instant(submitted, name="submitted_at") if submitted else utcnow()
        followed = state.current.followed
        if followed:
            # An earlier try's job: submitted then, not at this try's re-attach (from there, a spot job's
            # limit to the deadline was short by its whole earlier run). Where the backend gave no creation
            # time, from its start as found, at most its queue later.
            if followed.get("created_at"):
                start = parse_instant(followed["created_at"], name="created_at")
            else:
                ran = float(followed["job"].get("billable_seconds") or 0) / count
                start = parse_instant(followed["seen_at"], name="seen_at") - timedelta(seconds=ran)
        limit = float(job_seconds_left(state.plan, start, state.current.market))
        if state.current.stop_after_seconds is not None and not state.current.stop_by_poll:
            limit = min(limit, float(state.current.stop_after_seconds))
        return limit

    def _gone_after_cap_stop(self, status: Any, *, now: datetime, instances: int) -> Any:
        """``status`` (billed as gone up to ``now``) of a job this wait stopped at the cap before it went.

        The stop went through: it ran to its grace period's end after the stop at the latest, and ended
        stopped by ``max_usd`` as the cap's other stops do (billed up to now, it was an interruption billed
        up to ``NOT_LISTED_GRACE_SECONDS`` past the stop).
        """
        from dataclasses import replace

        from costaware.adapters.compute.base import with_copies_run_out
        from costaware.training.attempt_effects import stop_seconds
        from costaware.training.attempts import AttemptState

        stopped_at = self._cap_stopped_at
        last_seen = self._last_seen or self._cap_stop_seen  # a re-created wait: as seen at the stop
        if last_seen is None or stopped_at is None:
            return with_copies_run_out(status)
        seen, seen_at = last_seen
        end = now
        if self.state.get("backend") and self.state.get("current"):  # a plan to size the grace period by
            end = min(now, stopped_at + timedelta(seconds=stop_seconds(AttemptState.from_json(self.state))))
        billed = seen.billable_seconds + instances * max(0.0, (end - seen_at).total_seconds())
        reason = (
            f"stopped at what was left of max_usd at {stopped_at.isoformat()}; {self.backend} has not listed "
            "it since: billed to the end of its grace period after the stop"
        )
        self.log.warning("job %s on %s: %s", self.job_id, self.backend, reason)
        ended = replace(status, billable_seconds=billed, ended_at=end.timestamp(), reason=reason)
        return with_copies_run_out(ended)

    def next_poll_in(self) -> float:
        """Seconds to wait before the next poll: ``poll_interval``, or less where a stop at the cap falls due.

        A stop at what is left of ``max_usd`` (a followed job's, a dearer type's) sent at the first poll
        after it fell due let the job run up to one ``poll_interval`` past it, billed past the cap.
        """
        if self._cap_stop_due_in is None:
            return self.poll_interval
        return min(self.poll_interval, max(MIN_CAP_STOP_WAIT_SECONDS, self._cap_stop_due_in))

    def _cap_stop_due_after(self, seconds: float) -> None:
        """A stop at the cap falls due after ``seconds`` more of running (the sooner of two is kept)."""
        due = self._cap_stop_due_in
        self._cap_stop_due_in = seconds if due is None else min(due, seconds)

    def _send_cap_stop(self, job_id: str, *, stop_after_seconds: int | None = None) -> bool:
        """Send the stop at the cap (SIGTERM: it checkpoints); False, asked again soon, where it failed.

        Once sent, the job's end is recorded as stopped by ``max_usd`` after ``stop_after_seconds`` of
        running (None: as the state says), and the stop is kept where a re-created wait reads it
        (:meth:`_keep_cap_stop`).
        """
        if self._polled_after_cancel("stopped at the cap"):
            return False
        from costaware.adapters.compute.base import open_backend

        # A cancel during the stop call cannot stop it: the stop is then kept only where the task's wait
        # state is still this wait's (:meth:`_xcom_holds_this_wait`).
        try:
            open_backend(self.backend, self.backend_options).stop(job_id)
        except Exception as e:
            self._retry_cap_stop()
            self.log.warning(
                "stopping job %s failed (%s): asked again in %g s", job_id, e, self.next_poll_in()
            )
            return False
        self._stopped_for_cap, self._cap_stop_retries = job_id, 0
        self._cap_stopped_at = self._polled_at
        current = dict(self.state.get("current") or {})
        if stop_after_seconds is not None:
            current["stop_after_seconds"] = stop_after_seconds
        sent_at = self._cap_stopped_at or utcnow()
        current[CAP_STOP_KEY] = {"job_id": job_id, "sent_at": sent_at.isoformat()}
        if self._last_seen is not None:
            seen, seen_at = self._last_seen
            current[CAP_STOP_KEY].update(job=seen.to_dict(), seen_at=seen_at.isoformat())
        self.state = {**self.state, "current": current}
        self._keep_cap_stop()
        return True

    def _polled_after_cancel(self, what: str) -> bool:
        """Whether this wait was cancelled while its poll ran: then the job is not ``what`` by it."""
        if not self._cancelled.is_set():
            return False
        self.log.info(
            "the wait for job %s was cancelled during its poll: the job is not %s by it (whoever follows "
            "the job now does that)",
            self.job_id,
            what,
        )
        return True

    def _wait_state_xcom(self) -> dict[str, Any] | None:
        """Where this wait's task keeps its wait state (the operator's XCom), or None: no task (tests)."""
        ti = getattr(self, "task_instance", None)
        if ti is None or not getattr(ti, "task_id", None):
            return None
        map_index = ti.map_index if ti.map_index is not None else -1
        return {
            "key": WAIT_STATE_XCOM_KEY,
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "map_index": map_index,
        }

    def _keep_cap_stop(self) -> None:
        """Keep the state with the stop at the cap sent where a re-created wait reads it (blocking IO).

        A triggerer restart re-creates the wait from its deferral's arguments, which knew nothing of the
        stop: it sent the stop again (a second SIGTERM to a local job), and billed a job gone after it as
        gone, up to ``NOT_LISTED_GRACE_SECONDS`` past its grace period. The operator's wait state XCom
        (which a deferral timeout reads too) carries it; a failure only warns.
        """
        where = self._wait_state_xcom()
        if where is None:
            return
        try:
            from airflow.sdk.execution_time.xcom import XCom

            if self._cancelled.is_set() and not self._xcom_holds_this_wait(XCom.get_one(**where)):
                return
            key = where.pop("key")
            XCom.set(key, {**self.state, WAIT_STATE_AWS_CONN_KEY: self.aws_conn_id}, **where)
        except Exception as e:
            self.log.warning(
                "could not keep the stop at the cap of job %s in XCom (%s: %s): a triggerer restart would "
                "send it again",
                self.job_id,
                type(e).__name__,
                e,
            )

    def _xcom_holds_this_wait(self, kept: Any) -> bool:
        """Whether the kept wait state is still this wait's attempt and job (see :meth:`_send_cap_stop`).

        A wait cancelled while its stop at the cap was under way keeps the stop only there: a triggerer
        handing it over leaves the XCom as it was, and the new wait must know of the stop; a new try of the
        task (a clear, a retry) keeps its own state there, which the old try's would overwrite: a timeout
        of the new try's wait then stopped and billed the old job and left the new one running unbilled.
        """
        kept_current = kept.get("current") if isinstance(kept, Mapping) else None
        current = self.state.get("current") or {}
        if isinstance(kept_current, Mapping) and all(
            kept_current.get(name) == current.get(name) for name in ("attempt", "job_id")
        ):
            return True
        self.log.info(
            "the wait for job %s was cancelled while its stop at the cap was sent: the stop went through, "
            "but the task's wait state now is another wait's (job %s), which is left as it is",
            self.job_id,
            kept_current.get("job_id") if isinstance(kept_current, Mapping) else None,
        )
        return False

    def _restore_cap_stop(self) -> None:
        """Take over a stop at the cap that the wait this one replaces sent (see :meth:`_keep_cap_stop`)."""
        where = self._wait_state_xcom()
        if where is None or self.job_id is None:
            return
        try:
            from airflow.sdk.execution_time.xcom import XCom

            kept = XCom.get_one(**where)
        except Exception as e:
            self.log.warning(
                "cannot read the wait's kept state (%s: %s): none taken over", type(e).__name__, e
            )
            return
        kept_current = (kept or {}).get("current") if isinstance(kept, Mapping) else None
        current = self.state.get("current") or {}
        if not isinstance(kept_current, Mapping) or not isinstance(kept_current.get(CAP_STOP_KEY), Mapping):
            return
        same_attempt = kept_current.get("attempt") == current.get("attempt")
        sent = kept_current[CAP_STOP_KEY]
        if not same_attempt or kept_current.get("job_id") != self.job_id or sent.get("job_id") != self.job_id:
            return  # an earlier wait's, of another job
        from costaware.adapters.compute.base import JobStatus

        self.state = {**self.state, "current": dict(kept_current)}
        self._stopped_for_cap = self.job_id
        self._cap_stopped_at = parse_instant(sent["sent_at"], name="sent_at")
        if sent.get("job") and sent.get("seen_at"):
            self._cap_stop_seen = (
                JobStatus.from_dict(sent["job"]),
                parse_instant(sent["seen_at"], name="seen_at"),
            )
        self.log.info(
            "job %s was stopped at what was left of max_usd at %s, before this wait took over: not "
            "stopped again",
            self.job_id,
            sent["sent_at"],
        )

    def _retry_cap_stop(self) -> None:
        """A stop at the cap was due (or may be) and was not sent: the next poll comes soon to ask again."""
        self._cap_stop_retries += 1
        wait = CAP_STOP_RETRY_SECONDS * 2 ** (self._cap_stop_retries - 1)
        self._cap_stop_due_after(min(CAP_STOP_RETRY_MAX_SECONDS, wait))

    def _keep_cap_stop_due(self, due_before: float | None) -> None:
        """A poll gave no status to weigh the cap on: the stop due at the last poll stays due.

        The wait slept up to it (or a ``poll_interval``): what is left of it after that, or a retry soon.
        """
        if due_before is None:
            return
        left = due_before - self.poll_interval
        if left > CAP_STOP_RETRY_SECONDS:
            self._cap_stop_due_after(left)
        else:
            self._retry_cap_stop()

    def _stop_unlisted_at_cap(self, due_before: float | None) -> None:
        """Send the stop at the cap that falls due while the job is not listed (a listing that lags).

        Kept due and never sent, the job ran on for up to ``NOT_LISTED_GRACE_SECONDS`` past ``max_usd``:
        a stop goes by the job's id (Batch's TerminateJob), whether or not DescribeJobs lists it now.
        """
        job_id = str(self.job_id)
        if due_before is None or self._stopped_for_cap == job_id:
            return
        if due_before - self.poll_interval > CAP_STOP_RETRY_SECONDS:
            self._keep_cap_stop_due(due_before)  # not due yet: the wait sleeps up to it
            return
        self.log.warning(
            "job %s, not listed on %s now, has run what is left of max_usd: stopping it by its id",
            job_id,
            self.backend,
        )
        # Its end is recorded as stopped by max_usd, as the stop the poll sends (a dearer type's limit).
        stop_after = None
        other = self._other_type_limit
        if other is not None and other[0] == job_id and other[1] is not None:
            current = self.state.get("current") or {}
            held = current.get("stop_after_seconds") if current.get("stop_by_poll") else None
            stop_after = other[1] if held is None else min(int(held), other[1])
        self._send_cap_stop(job_id, stop_after_seconds=stop_after)

    def poll_tolerant(self, now: datetime) -> dict[str, Any] | None:
        """:meth:`poll_once`; a passing failure is polled again, up to ``MAX_POLL_ERRORS`` in a row.

        A passing failure: a network error, throttling, a job not listed yet. The job runs on while the poll
        fails; a task failed for it would leave the job unwatched and, with no retry left, unbilled. A
        configuration error fails at once: polling again would fail the same way. Where a stop at the cap is
        due, the failed polls come seconds apart (``CAP_STOP_RETRY_SECONDS``): they fail the wait only once
        they have also failed for ``MAX_POLL_ERRORS - 1`` poll intervals (75 s of throttling failed it, the
        job left running unwatched past the cap).
        """
        from costaware.core.errors import ConfigurationError

        try:
            event = self.poll_once(now)
        except ConfigurationError:
            raise
        except Exception as e:
            if self._poll_errors == 0:
                self._failing_since = now
            self._poll_errors += 1
            failing_for = (now - (self._failing_since or now)).total_seconds()
            polled_sooner = self._cap_stop_due_in is not None  # a due cap stop asks again soon
            lasted = failing_for >= (MAX_POLL_ERRORS - 1) * self.poll_interval
            if self._poll_errors >= MAX_POLL_ERRORS and (lasted or not polled_sooner):
                raise
            self.log.warning(
                "polling job %s on %s failed (%s: %s), %d time(s) in a row: polling again in %g s",
                self.job_id,
                self.backend,
                type(e).__name__,
                e,
                self._poll_errors,
                self.next_poll_in(),
            )
            return None
        self._poll_errors = 0
        return event

    def _stop_followed_job_at_cap(self, status: Any) -> None:
        """Stop a job an earlier try submitted once it has run what is left of ``max_usd`` now.

        Its backend holds the time limit that try gave it, sized at the cap of then: the budgets may have
        lowered the cap since (a retry holds only what they have room for). The operator worked out what is
        left when it followed the job (``stop_after_seconds``, ``stop_by_poll``); the job is stopped there
        (SIGTERM: it checkpoints), and it ends recorded as stopped by ``max_usd``. Where what is left buys
        less than ``MIN_CAPPED_SECONDS`` (the budgets had no room for the retry), it is stopped at once in
        any state: one still waiting for capacity would otherwise boot and run into its grace period first.
        """
        from costaware.adapters.compute.base import JobState, billed_instances
        from costaware.training.attempt_effects import MIN_CAPPED_SECONDS

        current = self.state.get("current") or {}
        limit = current.get("stop_after_seconds")
        job_id = str(status.job_id or self.job_id)
        if not current.get("stop_by_poll") or limit is None or self._stopped_for_cap == job_id:
            return
        no_room = float(limit) < MIN_CAPPED_SECONDS
        ran = float(status.billable_seconds) / billed_instances(self.backend_options)
        if not no_room:
            if status.state != JobState.RUNNING:
                return  # waiting to start: it runs (and is billed) nothing yet
            if ran < float(limit):
                self._cap_stop_due_after(float(limit) - ran)
                return
        if no_room and status.state != JobState.RUNNING:
            self.log.warning(
                "job %s, which an earlier try submitted, is %s and what is left of max_usd buys no run: "
                "stopping it before it starts",
                job_id,
                status.state.value,
            )
        else:
            self.log.warning(
                "job %s, which an earlier try submitted, has run %.0f s, what is left of max_usd now buys: "
                "stopping it (it checkpoints in its grace period)",
                job_id,
                ran,
            )
        # Stopped short of its limit (nothing left to run on): its end is recorded as stopped by max_usd,
        # not as a preemption that a new attempt would follow.
        self._send_cap_stop(job_id, stop_after_seconds=int(ran) if ran < float(limit) else None)

    def _stop_within_cap_on_other_type(self, status: Any) -> None:
        """Stop a job that runs on a dearer type than planned once it has run what ``max_usd`` buys there.

        Batch (a compute environment's choice) and Kubernetes (a node pool's) may run a job on another type
        than the plan's. Its stop was sized at the planned type's price, and it is billed at the type it ran
        on: on one 4 times dearer, it billed 4 times what was left of ``max_usd``. The time it may run is
        worked out again at that type's price (its grace period before the cap, as at the submit), and the
        job is stopped there (SIGTERM: it checkpoints); it ends recorded as stopped by ``max_usd``.
        """
        from costaware.core.errors import LEDGER_UNREADABLE
        from costaware.core.money import format_usd_exact
        from costaware.remote_billing import KilledTrainingBilling
        from costaware.training.attempt_effects import cap_rate, capped_seconds, instances, money_left
        from costaware.training.attempts import AttemptState

        job_id = str(status.job_id or self.job_id)
        planned = str(self.state.get("instance_type") or "").removeprefix("ml.")
        if self._stopped_for_cap == job_id or self.state.get("max_usd") is None or not planned:
            return  # stopped already, no cap, or no plan in the state (nothing to weigh it against)
        if status.instance_type.removeprefix("ml.") == planned:
            return
        state = AttemptState.from_json(self.state)
        plan, current = state.plan, state.current
        if current is None:
            return
        # Worked out at each poll: a Batch job's billed seconds hold its copies', each priced at its type, so
        # the ratio moves as the job runs on (kept from the first poll, a copy on the planned type let the
        # job run 1.6 times what max_usd buys).
        billing = KilledTrainingBilling(
            ledger_conn_id=self.ledger_conn_id, aws_conn_id=self.aws_conn_id, log=self.log
        )
        try:
            scale = billing._ran_on_scale(plan, status.to_dict(), raise_unavailable=True, say=False)
            on_demand = billing._on_demand_in(plan, current.zone, raise_unavailable=True, say=False)
        except LEDGER_UNREADABLE as e:
            # Read as the plan's price, the job would never be stopped, and its bill (the ledger back by
            # then) would come at the dearer price, past max_usd: asked again at the next poll.
            self._retry_cap_stop()
            self.log.warning(
                "price of %s unknown for now (%s): asked again in %g s", job_id, e, self.next_poll_in()
            )
            return
        rate = cap_rate(state, current.market, on_demand) * scale
        limit = capped_seconds(state, rate) if scale > 1 else None  # a cheaper type stays within it
        said = self._other_type_limit
        self._other_type_limit = (job_id, limit)
        moved = said is None or said[0] != job_id or abs((said[1] or 0) - (limit or 0)) >= 60
        if limit is not None and moved:  # said once, and again where the copies moved it a minute
            self.log.warning(
                "job %s runs on %s, not the planned %s: %s is left of max_usd at %s/hour there, so it is "
                "stopped after %d s of running",
                job_id,
                status.instance_type,
                plan.instance_type,
                format_usd_exact(money_left(state) or Decimal(0)),
                format_usd_exact(rate),
                limit,
            )
        if limit is None:
            return
        if float(status.billable_seconds) / instances(plan) < limit:
            self._cap_stop_retries = 0  # its price is known again
            self._cap_stop_due_after(limit - float(status.billable_seconds) / instances(plan))
            return
        self.log.warning(
            "job %s on %s has run %.0f s, what max_usd buys there: stopping it (it checkpoints in its grace "
            "period)",
            job_id,
            status.instance_type,
            float(status.billable_seconds) / instances(plan),
        )
        # Its end is then recorded as stopped by max_usd (the stop it ran into), not as a preemption.
        self._send_cap_stop(job_id, stop_after_seconds=limit)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        delivered = False
        # `airflow dags test` keeps the task's SIGTERM handler (its on_kill) bound while it runs this inline:
        # it may end the wait (see inline_wait_running), never the handing over of an event already taken.
        inline = in_dags_test()
        if inline:
            _INLINE_WAITS.running += 1
        try:
            if inline and take_kill_outside_inline_wait(self.training):
                # Its SIGTERM came between the deferral and this wait: ended now, as one during the wait.
                self.log.warning(
                    "SIGTERM before the inline wait: stopping job %s and billing it", self.job_id
                )
                with self._interrupts_wait_for_the_bill():
                    self.stop_and_bill()
                raise KeyboardInterrupt
            async for event in self._watch():
                delivered = True
                if inline:
                    inline = False
                    _INLINE_WAITS.running -= 1
                yield event
        except asyncio.CancelledError as cancel:
            self._cancelled.set()
            # A triggerer cancels a trigger it hands to another (the job is watched on), but `airflow dags
            # test` runs it inline and cancels it on Ctrl-C: nobody would watch or bill the job after. Its
            # inline run also cancels the trigger once it has taken the event: the operator handles the job
            # from there (stopping and billing it as killed logged a kill and settled the hold too early).
            if in_dags_test() and not delivered:
                self.log.warning("interrupted: stopping job %s and billing it, as for a kill", self.job_id)
                with self._interrupts_wait_for_the_bill():
                    self.stop_and_bill()
            elif self._cancelled_by_trigger_assignment_past_the_deadline(cancel):
                await asyncio.to_thread(self._stop_and_bill_if_the_task_ended)
            raise
        finally:
            if inline:
                _INLINE_WAITS.running -= 1

    @contextmanager
    def _interrupts_wait_for_the_bill(self, clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
        """A second Ctrl-C (or SIGTERM) of `airflow dags test` waits for the stop and bill under way.

        It raised in the middle of it: the hold was settled (``stop_and_bill``'s ``finally``) and the
        stopped job never billed. The stop takes at most ``KILL_WAIT_SECONDS``, but the backend's calls and
        the ledger's writes around it have no bound of their own: a signal after ``BILL_PATIENCE_SECONDS``
        goes through, saying what is left unbilled, so that a hung backend or ledger never leaves the
        command stoppable only by SIGKILL. Only the main thread can set a handler, and the inline trigger
        runs there; elsewhere nothing changes.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        started = clock()
        handled = (signal.SIGINT, signal.SIGTERM)
        previous: dict[int, Any] = {}

        def wait_for_the_bill(signum: int, frame: object) -> None:
            name = signal.Signals(signum).name
            waited = clock() - started
            if waited < BILL_PATIENCE_SECONDS:
                self.log.warning(
                    "%s: still stopping and billing job %s, which takes at most %.0f s: wait for it (a "
                    "signal after %.0f s ends it unbilled)",
                    name,
                    self.job_id,
                    KILL_WAIT_SECONDS,
                    BILL_PATIENCE_SECONDS,
                )
                return
            for number, handler in previous.items():
                signal.signal(number, handler)
            self.log.error(
                "%s after %.0f s of stopping and billing job %s on %r: given up; the job may run on and is "
                "not billed, and the task's budget hold stays held (to its expiry, or until a new try takes "
                "it over): stop it on the backend, then clear the task (its new try follows the job by its "
                "name, bills it and settles the hold)",
                name,
                waited,
                self.job_id,
                self.backend,
            )
            raise KeyboardInterrupt

        previous.update({signum: signal.signal(signum, wait_for_the_bill) for signum in handled})
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    async def _watch(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                event = await asyncio.to_thread(self.poll_tolerant, utcnow())
            except Exception as e:
                from costaware.core.errors import ConfigurationError

                yield TriggerEvent(
                    {
                        "status": "error",
                        "message": f"{type(e).__name__}: {e}",
                        "state": self.state,
                        # the operator fails the task without retry: polling again would fail the same way
                        "configuration": isinstance(e, ConfigurationError),
                    }
                )
                return
            if event is not None:
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.next_poll_in())

    def _cancelled_by_trigger_assignment_past_the_deadline(self, cancel: asyncio.CancelledError) -> bool:
        """Whether this is a cancel past the deadline from Airflow's trigger assignment, with no ``on_kill``.

        Airflow 3.3.2's triggerer sends one message for every trigger it no longer holds: a person's
        action (a mark or a clear), the scheduler's timeout check, a hand-over to another triggerer. It
        calls ``on_kill`` for it only before the task's ``trigger_timeout``, which it sets on the trigger as
        ``timeout_after``; past it, it re-raises without calling it. Which of them it was, only the task's
        state tells (:meth:`_stop_and_bill_if_the_task_ended`).
        """
        if not (cancel.args and cancel.args[0] == AIRFLOW_USER_ACTION_CANCEL):
            return False
        deadline = getattr(self, "timeout_after", None)
        if not isinstance(deadline, datetime):
            return False
        now = utcnow()
        return (deadline if deadline.tzinfo else deadline.replace(tzinfo=now.tzinfo)) < now

    def _stop_and_bill_if_the_task_ended(self) -> None:
        """A cancel past the wait's deadline: stop and bill the job only where the task ended.

        Airflow calls no ``on_kill`` then: a task marked failed or succeeded after the deadline, before the
        scheduler's timeout check, left its job running, unbilled, with no resume to stop it. The task
        that timed out is on its way to its ``__fail__`` resume (scheduled, queued, running) or its retry,
        which follow the job, and one handed to another triggerer still waits; a state that cannot be read
        is taken as one of these, far the likelier, and the job is named for a person to check. An ended
        task may also be one its last try's resume failed, slower than the triggerer: that resume billed
        the job already, and it is found, not billed again.
        """
        verdict = self._task_verdict(unreadable="unknown")
        if verdict == "unknown" and self.job_id is not None:
            self.log.warning(
                "job %s on %s may run on unbilled if the task was ended: check it and stop it by hand",
                self.job_id,
                self.backend,
            )
            return
        if verdict != "ended":
            self.log.info(
                "the wait for job %s was cancelled past its deadline: the task's resume, or its new try, "
                "follows the job",
                self.job_id,
            )
            return
        self.log.warning(
            "the task ended past its wait's deadline (a person's mark, or its last try's resume), when "
            "Airflow calls no on_kill: stopping job %s and billing it, as for a kill",
            self.job_id,
        )
        self.stop_and_bill(ask_state=False)

    async def on_kill(self) -> None:
        """A person killed the waiting task: stop its job and bill it (see :meth:`stop_and_bill`)."""
        await asyncio.to_thread(self.stop_and_bill)

    def stop_and_bill(
        self,
        *,
        wait_seconds: float = KILL_WAIT_SECONDS,
        poll_seconds: float = 1.0,
        ask_state: bool = True,
        cause: str = "killed",
        why: str = "its task was killed",
        ledger: Any = None,
        bill_refused: bool = False,
    ) -> str | None:
        """Stop the job of a task a person killed, bill what it ran, and settle the task's hold (blocking IO).

        The operator would have billed the attempt when the job ended and settled the hold when the
        training ended; once the task is killed nothing would, and the job would run on, unbilled (a
        clear's new try follows the job by name, but a task marked failed or succeeded has none). The job
        is asked to stop (SIGTERM first: it checkpoints) and billed as it ended; where it has not ended
        within ``wait_seconds``, to the end of its grace period, the latest the backend lets it run. A paused
        training has no job: its hold is settled only. A cleared task's hold is left to its new try.

        With ``ask_state``, Airflow's state of the task says what happened: ended (marked failed or success,
        or its run gone), cleared (it runs again), or still waiting, where no person ended it (a new try
        already follows the job): then the job runs on. Where the state cannot be read (outside Airflow),
        the task is taken as ended.

        ``cause`` and ``why`` say why the job was stopped in its entry (a task failing for good with its job
        still running, no retry left to follow it, uses this too: ``unwatched``). ``ledger``: the ledger to
        bill in, opened by the caller (``costaware jobs reconcile``'s), instead of ``ledger_conn_id``'s.

        Returns None, or why the backend refused the stop of a job then not seen to end: it may run on, so
        nothing is billed (billed to its grace period, it ran on unbilled past it) and the task's hold stays
        held; the error in the log says to stop it by hand, and ``costaware jobs reconcile`` lists it still.
        ``bill_refused``: bill it to its grace period all the same (a wait in the worker, which keeps no wait
        state for a reconcile to find the job by: unbilled, it would never be).
        """
        from costaware.core.errors import StopRefused
        from costaware.remote_billing import KilledTrainingBilling
        from costaware.training.attempts import AttemptState

        verdict = self._task_verdict() if ask_state else "ended"
        if verdict == "waiting":
            self.log.info("the task still waits (no person ended it): job %s runs on", self.job_id)
            return None
        refused: str | None = None
        state = AttemptState.from_json(self.state)
        billing = KilledTrainingBilling(
            ledger_conn_id=self.ledger_conn_id, aws_conn_id=self.aws_conn_id, log=self.log, ledger=ledger
        )
        try:
            if self.job_id is not None and state.current is not None:
                job, ended, own_end = self._stop_job(
                    state,
                    wait_seconds=wait_seconds,
                    poll_seconds=poll_seconds,
                    why=why,
                    bill_refused=bill_refused,
                )
                if job is not None:
                    # A job that had ended on its own before the kill keeps its own cause, as does a success.
                    own_cause = None if own_end or job["state"] == "succeeded" else cause
                    # Billed now, whatever the ledger says of another type's price: nothing bills it later.
                    state = billing._bill_attempt(
                        state, job, own_cause, keyed_by_name=not ended, price_unread_raises=False
                    )
                    self.log.warning(
                        "%s: job %s stopped and billed, %.0f s for $%s",
                        why,
                        self.job_id,
                        float(job["billable_seconds"]),
                        state.attempts[-1].usd,
                    )
        except StopRefused as e:
            verdict, refused = "refused", str(e)
            self.log.error(
                "job %s not billed: the stop was refused (%s): stop job %s on %s by hand; the task's budget "
                "hold stays held, and `costaware jobs reconcile` bills the job once it has ended",
                self.job_id,
                refused,
                self.job_id,
                self.backend,
            )
        except KeyboardInterrupt:
            # Given up (a hung backend or ledger, see _interrupts_wait_for_the_bill): the job may train on
            # unbilled, so its money stays held; settled here, it was freed while the job spent it.
            verdict = "given up"
            raise
        finally:
            if verdict == "given up":
                self.log.warning(
                    "job %s not billed: the task's budget hold stays held until it expires or a new try "
                    "takes it over",
                    self.job_id,
                )
            elif verdict == "refused":
                pass  # the job may run on: its money stays held (said above)
            elif verdict == "cleared":
                # Its new try took over the task's hold (it may have started already) and settles it with
                # all the attempts, this one included, when it ends.
                self.log.info("the task was cleared: its new try keeps the task's budget hold")
            else:
                billing._settle(state)
        return refused

    def _task_verdict(self, *, unreadable: str = "ended") -> str:
        """``ended``, ``cleared`` or ``waiting``: what Airflow says of the killed task now (see above).

        ``unreadable``: the verdict where the state cannot be read (no task instance: outside Airflow);
        ``unknown`` leaves it to the caller to say what follows.
        """
        ti = getattr(self, "task_instance", None)
        if ti is None:
            return unreadable
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            states = RuntimeTaskInstance.get_task_states(
                dag_id=ti.dag_id, map_index=ti.map_index, task_ids=[ti.task_id], run_ids=[ti.run_id]
            )
        except Exception as e:  # for a kill, the hold is settled: the safe side for a task that ended
            taken_as = "" if unreadable == "unknown" else f": taken as {unreadable}"
            self.log.warning("cannot read the killed task's state (%s)%s", e, taken_as)
            return unreadable
        run = states.get(ti.run_id) or {}
        key = ti.task_id if ti.map_index is None or ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
        if key not in run:
            return "ended"  # its run was deleted
        state = run[key]
        value = str(getattr(state, "value", state))
        if value in ENDED_STATES:
            return "ended"
        return "waiting" if value in WAITING_STATES else "cleared"

    def _stop_job(
        self,
        state: Any,
        *,
        wait_seconds: float,
        poll_seconds: float,
        why: str = "its task was killed",
        bill_refused: bool = False,
    ) -> tuple[dict[str, Any] | None, bool, bool]:
        """Stop the job, wait for its end: its last status, whether that is its end, whether it ended first.

        The third says the job had ended on its own before the stop (it keeps its own cause). A job not seen
        to end within ``wait_seconds`` (still running, gone from the backend, or not answering) is billed to
        the end of its grace period from the stop, the latest the backend lets it run: its billed time so far
        (from the backend's own start time) and the time since, or, where the backend gave none (no start
        time, or no answer), the time since its submit. That is not its end: the entry is keyed by the job's
        name.
        """
        from dataclasses import replace

        from costaware.adapters.compute.base import (
            JobState,
            JobStatus,
            billed_instances,
            open_backend,
            with_copies_run_out,
        )
        from costaware.core.errors import ComputeBackendError, JobNotFoundError, StopRefused
        from costaware.training.attempt_effects import stop_seconds

        assert self.job_id is not None and state.current is not None
        backend = open_backend(self.backend, self.backend_options)
        count = billed_instances(self.backend_options)  # billed seconds count every instance
        stopped = state.current.stopped
        seen_at = utcnow()
        unpriced = False  # the backend gave no billed time for the run (its poll failed, or 0 s running)
        status = JobStatus(
            job_id=self.job_id, state=JobState.RUNNING, market=state.current.market, instance_type=""
        )
        try:
            status = backend.poll(self.job_id)
        except JobNotFoundError:
            # Gone before we stopped it (a drain deleted the pod): billed from its last status.
            if not stopped:
                stop_sent = True
                try:
                    # Or not listed yet (a Batch job just submitted): it may start still, so stopped all
                    # the same (a pod already gone is nothing to stop).
                    backend.stop(self.job_id)
                except Exception as e:
                    stop_sent = False
                    self.log.warning(
                        "stopping job %s, which the backend does not list, failed: %s", self.job_id, e
                    )
                vanished = vanished_job_status(
                    self.job_id,
                    state.to_json(),
                    last_seen=self._last_seen,  # from its submit, it was billed time it may have queued
                    now=utcnow(),
                    instances=count,
                    listed_grace=0,
                    backend=self.backend,
                )
                if vanished is None:  # no submit time (an older state): nothing to bill it from
                    self.log.warning("the task was killed; job %s is gone, nothing is billed", self.job_id)
                    return None, True, True
                if self.backend not in GONE_IS_FINAL_BACKENDS:
                    # A listing that lags (one DescribeJobs missed it): it may run on after the kill, to
                    # its grace period's end, or its time limit where the stop failed. Keyed by name, as a
                    # cleared try that follows it bills it once.
                    vanished = self._billed_as_gone(vanished, stop_sent=stop_sent)
                    self.log.warning("%s: job %s: %s", why, self.job_id, vanished.reason)
                    return dict(vanished.to_dict()), False, False
                self.log.warning("the task was killed; job %s: %s", self.job_id, vanished.reason)
                return dict(vanished.to_dict()), True, True  # ended on its own: an interruption
            gone = stopped_job_status(stopped, now=utcnow(), instances=count)
            return dict(gone.to_dict()), True, False
        except ComputeBackendError as e:  # not answering now: stop it all the same, billed to its latest end
            self.log.warning("polling job %s failed (%s): stopping it all the same", self.job_id, e)
            unpriced = True
        else:
            if status.state.done:
                return dict(status.to_dict()), True, not stopped
        self.log.warning("%s: stopping job %s on %s", why, self.job_id, self.backend)
        stopped_at = utcnow()
        refused: Exception | None = None
        try:
            backend.stop(self.job_id)
        except Exception as e:  # refused (it ended meanwhile: SageMaker's "in status Stopped") or failed
            refused = e
            self.log.warning("stopping job %s failed (%s): waiting for its end all the same", self.job_id, e)
        give_up = time.monotonic() + wait_seconds
        gone = False
        while time.monotonic() < give_up:
            time.sleep(poll_seconds)
            try:
                polled = backend.poll(self.job_id)
            except JobNotFoundError:  # a deleted pod: it ended by now, when exactly is not known
                gone = True
                break
            except ComputeBackendError as e:  # a passing failure: look again
                self.log.warning("polling the stopped job %s failed: %s", self.job_id, e)
                continue
            status, seen_at, unpriced = polled, utcnow(), False
            if status.state.done:
                return dict(status.to_dict()), True, False
        if refused is not None and not gone and not bill_refused:
            # Not stopped, not seen to end: billed to its grace period, it would run on unbilled past it.
            raise StopRefused(f"{type(refused).__name__}: {refused}")
        # The backend's own kill comes at stop_seconds (SageMaker's 120 s, the pod's grace + 10 s).
        latest_end = utcnow() if gone else stopped_at + timedelta(seconds=stop_seconds(state))
        billable = status.billable_seconds
        if status.state != JobState.PENDING:
            billable += count * max(0.0, (latest_end - seen_at).total_seconds())
            submitted = state.current.submitted_at
            if submitted and (unpriced or status.billable_seconds == 0):
                # A backend that gave no start time for the run, or did not answer: from this try's submit,
                # which may count time the job queued.
                since = latest_end - parse_instant(submitted, name="submitted_at")
                since_submit = count * since.total_seconds()
                if state.current.followed:  # an earlier try's job: what it ran before this try found it too
                    since_submit += float(state.current.followed["job"].get("billable_seconds") or 0)
                billable = max(billable, since_submit)
        if gone:
            reason = f"stopped when {why}; the backend no longer has it, billed up to then"
        elif status.state == JobState.PENDING and billable == 0:
            reason = f"stopped when {why}, while it waited to start: it never ran"
        else:
            reason = (
                f"stopped when {why}; not ended after {wait_seconds:.0f} s, billed to "
                f"{stop_seconds(state):.0f} s after the stop (its grace period, or the backend's own kill if "
                "later), the latest it can run"
            )
        ended = replace(
            status,
            billable_seconds=billable,
            state=JobState.INTERRUPTED,
            ended_at=latest_end.timestamp(),
            instance_type=status.instance_type or state.plan.instance_type,
            reason=reason,
        )
        # Not polled to its end: what its copies still run (a Batch copy whose stop failed: to its limit).
        return dict(with_copies_run_out(ended).to_dict()), False, False


class _InlineWaits:
    """The waits `airflow dags test` runs inline in this process (one at a time, in its main thread)."""

    def __init__(self) -> None:
        self.running = 0
        #: The trainings (``RemoteTrainingJobTrigger.training``) whose task got a SIGTERM while deferred,
        #: outside its inline wait: the wait about to start, or the resume about to bill its event.
        self.killed_outside: set[str] = set()


_INLINE_WAITS = _InlineWaits()


def note_kill_outside_inline_wait(training: str) -> None:
    """A SIGTERM came while ``training``'s task was deferred in `airflow dags test`, but no wait ran."""
    _INLINE_WAITS.killed_outside.add(training)


def take_kill_outside_inline_wait(training: str) -> bool:
    """Whether ``training`` was killed outside its inline wait (see above); the kill is handled once."""
    killed = training in _INLINE_WAITS.killed_outside
    _INLINE_WAITS.killed_outside.discard(training)
    return killed


def inline_wait_running() -> bool:
    """Whether `airflow dags test` runs a trigger's wait inline now, and has taken no event from it yet.

    A KeyboardInterrupt then cancels the wait, and the trigger stops and bills its job. Once the wait has
    delivered its event (its job ended, say), the task's resumed run bills the job: a KeyboardInterrupt
    before that run starts ended the command with the attempt unbilled and its hold open.
    """
    return _INLINE_WAITS.running > 0


def in_dags_test() -> bool:
    """Whether this runs in `airflow dags test` (its in-process supervisor), not a worker or a triggerer.

    There a Ctrl-C is a person's: a worker's supervisor also forwards a SIGINT (the worker shut down with
    Ctrl-C), a triggerer cancels a trigger to hand it to another.
    """
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:  # another Airflow: no inline run known
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)
