"""What a Batch job's description (``DescribeJobs``, ``ListJobs``) says: its state, billed time, log lines.

Pure functions of the description, for :class:`~costaware.adapters.compute.batch.BatchBackend`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from costaware.adapters.compute.base import JobState, JobStatus
from costaware.adapters.compute.job_contract import (
    MISSING_LAUNCHER_ADVICE,
    RESUBMIT_EXIT_CODES,
    launcher_not_found,
)

_PENDING = {"SUBMITTED", "PENDING", "RUNNABLE", "STARTING"}


def status_from_description(
    job: Mapping[str, Any],
    market: str,
    instance_type: str,
    availability_zone: str = "",
    *,
    now_ms: int | None = None,
) -> JobStatus:
    """A ``JobStatus`` from ``DescribeJobs`` (pure); times, ``now_ms`` included, are epoch milliseconds.

    Batch lists an attempt only once it stopped. A job still running is also given the time since it
    started running (or since its last attempt stopped, the later) up to ``now_ms``: what a stop must bill
    it for at the most, where the time since the submit would also count its wait in the queue.
    """
    attempts = list(job.get("attempts") or [])
    seconds = sum(
        max(0, int(a["stoppedAt"]) - int(a["startedAt"])) / 1000
        for a in attempts
        if a.get("startedAt") is not None and a.get("stoppedAt") is not None
    )
    if not attempts and job.get("startedAt") is not None and job.get("stoppedAt") is not None:
        seconds = max(0, int(job["stoppedAt"]) - int(job["startedAt"])) / 1000
    status = str(job.get("status", ""))
    if status == "RUNNING" and job.get("startedAt") is not None and now_ms is not None:
        since = max([int(job["startedAt"]), *(int(a["stoppedAt"]) for a in attempts if a.get("stoppedAt"))])
        seconds += max(0, now_ms - since) / 1000
    last_reason = str(attempts[-1].get("statusReason", "")) if attempts else ""
    reason = str(job.get("statusReason") or last_reason or status)
    # The job's container is its last attempt's (all a ListJobs summary has).
    last_container = attempts[-1].get("container", {}) if attempts else job.get("container") or {}
    exit_code = last_container.get("exitCode")
    if status == "SUCCEEDED":
        state = JobState.SUCCEEDED
    elif status == "FAILED":
        reclaimed = last_reason.startswith("Host EC2") or reason.startswith("Host EC2")
        resubmit = exit_code is not None and int(exit_code) in RESUBMIT_EXIT_CODES
        state = JobState.INTERRUPTED if reclaimed or resubmit else JobState.FAILED
    elif status in _PENDING:
        state = JobState.PENDING
    else:
        state = JobState.RUNNING
    if state == JobState.FAILED:
        reason = _start_error(reason, last_reason, str(last_container.get("reason") or "")) or reason
    stops = [int(a["stoppedAt"]) for a in attempts if a.get("stoppedAt") is not None]
    if job.get("stoppedAt") is not None:
        stops.append(int(job["stoppedAt"]))
    # Only a job that is done has ended: a pending one (retried inside Batch) has an earlier attempt's stop.
    done = state in (JobState.SUCCEEDED, JobState.FAILED, JobState.INTERRUPTED)
    ended = max(stops) / 1000 if stops and done else None
    return JobStatus(
        job_id=str(job.get("jobId", "")),
        state=state,
        billable_seconds=float(seconds),
        market=market,
        instance_type=instance_type,
        reason=reason,
        exit_code=int(exit_code) if exit_code is not None else None,
        metrics={"batch_attempts": len(attempts)},
        ended_at=ended,
        availability_zone=availability_zone,
    )


#: ECS's reasons for a container it could not start or pull (the job's, its attempt's or its container's).
_START_ERRORS = ("CannotStartContainerError", "CannotPullContainerError")


#: Words of a pull failure that may pass (a registry's rate limit, a network that timed out), lower case.
_PASSING_PULL = (
    "toomanyrequests",
    "too many requests",
    "rate limit",
    "i/o timeout",  # not the bare word: an image may be named timeout-tuner
    "timed out",
    "deadline exceeded",
    "connection reset",
    "service unavailable",
)


#: Words of a pull failure that will not pass, lower case: they outweigh any of :data:`_PASSING_PULL` that
#: the image's own name may hold.
_LASTING_PULL = ("not found", "denied")


def _start_error(*reasons: str) -> str:
    """The first of ``reasons`` saying the container never started, with what to do; "" where none does.

    The job's reason was "Task failed to start", the container's (which names the missing launcher) unread,
    and no hint came with either: the other backends give the install hint.
    """
    said = next((text.strip() for text in reasons if text.strip().startswith(_START_ERRORS)), "")
    if not said:
        return ""
    pulled = said.lower()
    if (
        said.startswith("CannotPullContainerError")
        and not any(word in pulled for word in _LASTING_PULL)
        and any(word in pulled for word in _PASSING_PULL)
    ):
        # "check its URI and tag" sent the team to fix an image that is right.
        return (
            f"{said} (the image could not be pulled, which may pass: the registry limited its pulls or the "
            "network did not answer in time; clear the task to try again later, and for a registry's pull "
            "limit (Docker Hub) pull through an ECR pull-through cache or with a login; not retried)"
        )
    if said.startswith("CannotPullContainerError"):
        return (
            f"{said} (the image could not be pulled: check its URI and tag, and that the job definition's "
            "execution role may pull it; not retried)"
        )
    if launcher_not_found(said):
        return f"{said} ({MISSING_LAUNCHER_ADVICE})"
    return (
        f"{said} (the container never started, so it has no log lines: fix the image or the job definition)"
    )


def job_log_lines(job: Mapping[str, Any]) -> list[str]:
    """What Batch says of a job's attempts and its end (a Batch job's own output is in CloudWatch Logs).

    An attempt with no exit code never ran its container, or was not seen to end: that says so, where it
    said "exit None" (a job definition whose image cannot be pulled, or moto's server, which runs none).
    """
    lines = []
    for number, attempt in enumerate(job.get("attempts") or [], start=1):
        reason = attempt.get("statusReason") or "Batch gave no reason"
        code = (attempt.get("container") or {}).get("exitCode")
        ended = (
            f"exit {code}"
            if code is not None
            else "no exit code: its container never ran or was not seen to end (an image that could not "
            "be pulled, a stand-in such as moto's server that runs no container)"
        )
        lines.append(f"attempt {number}: {reason}; {ended}")
    lines.append(f"{job.get('status')}: {job.get('statusReason') or 'Batch gave no reason'}")
    return lines
