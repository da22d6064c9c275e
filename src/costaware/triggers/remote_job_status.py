"""What a remote training job's poll comes to: the wait's event, and the end of a job its backend lost.

Pure functions of :class:`~costaware.triggers.remote_training.RemoteTrainingJobTrigger`'s polls (and of its
kill's stop): a job that ended or must fall back, a job stopped for a pause that its backend no longer has,
and a job gone though nobody here stopped it (billed the most it may have run); and an earlier try's stop
of a job, as its ledger entry says (:func:`earlier_stop_cause`, which reads the ledger).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from costaware.core.series import parse_instant

#: How long after its submit a job the backend does not know counts as gone (before: not listed yet).
NOT_LISTED_GRACE_SECONDS = 600.0
#: The backends whose "no such job" is final for a job seen before: it was deleted (a pod a drain deleted),
#: and a stop of it is a 404 that does nothing. Elsewhere a listing may lag (Batch's
#: DescribeJobs is eventually consistent): a job seen and then not listed is "not listed yet" for
#: ``NOT_LISTED_GRACE_SECONDS`` after it was last seen, and stopped when billed as gone (it may run on).
GONE_IS_FINAL_BACKENDS = frozenset({"kubernetes"})


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
    ended = ended_when_found(state, last_seen)
    if ended is not None:
        return ended  # it had ended before this try found it: billed to its end, as its backend ended it
    last_seen = seen_or_followed(state, last_seen)
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


def seen_or_followed(state: Mapping[str, Any], last_seen: tuple[Any, datetime] | None) -> Any:
    """``last_seen``, else the followed job (an earlier try's) as this try found it, as (status, when)."""
    from costaware.adapters.compute.base import JobStatus

    followed = (state.get("current") or {}).get("followed")
    if last_seen is None and followed:
        return JobStatus.from_dict(followed["job"]), parse_instant(followed["seen_at"], name="seen_at")
    return last_seen


def stop_requested_at(status: Any) -> datetime | None:
    """When the job of ``status`` was asked to stop, as its backend says (``STOP_REQUESTED_AT``), or None."""
    from datetime import timezone

    from costaware.adapters.compute.base import STOP_REQUESTED_AT

    asked = status.metrics.get(STOP_REQUESTED_AT)
    return datetime.fromtimestamp(float(asked), timezone.utc) if asked is not None else None


def earlier_stop_cause(
    ledger_hook: Any,
    identity: Mapping[str, Any],
    job_id: str,
    *,
    ended_at: float | None,
    log: Any,
    otherwise: str,
    run_token: str = "",
) -> str | None:
    """The cause (``killed``, ``unwatched``) of an earlier try's stop entry of ``job_id``, else None (IO).

    A kill bills the job it stops under the job's name while it is still stopping (under its name and
    run where another run held the name's key), else under the end it saw (``ended_at``: looked up too
    where given). Given the run's token (``Current.run_token``), an entry whose note marks another run of
    the name is not its stop. A ledger that cannot be read says nothing: a warning says what the job's
    end is recorded as then (``otherwise``).
    """
    from costaware.training.attempt_duplicates import STOP_CAUSES
    from costaware.training.remote import attempt_key, attempt_uid, other_run

    keys = [attempt_uid(attempt_key(identity, job_id, legacy=True))]
    if run_token:
        keys.append(attempt_uid(attempt_key(identity, job_id, legacy=True, run_token=run_token)))
    if ended_at is not None:
        keys.append(attempt_uid(attempt_key(identity, job_id, ended_at)))
    try:
        rows = ledger_hook.get_conn().entries_by_uid(keys)
    except Exception as e:
        log.warning(
            "cannot read whether an earlier try stopped job %s (%s: %s): its end is recorded %s",
            job_id,
            type(e).__name__,
            e,
            otherwise,
        )
        return None
    return next(
        (
            str(row["cause"])
            for row in rows
            if row["cause"] in STOP_CAUSES and not other_run(run_token, str(row["note"] or ""))
        ),
        None,
    )


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
