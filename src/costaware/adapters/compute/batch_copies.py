"""The copies of a Batch submit that botocore sent again: found, terminated and billed with the job.

Batch takes a second job of a name it has; each copy ran a job nobody watched. :class:`BatchJobCopies`
terminates them, and :func:`with_copies` bills the time each ran with the job it copies.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from costaware.adapters.compute.base import COPY_SECONDS_BY_TYPE, COPY_SECONDS_LEFT, JobState, JobStatus
from costaware.adapters.compute.batch_status import status_from_description

#: The batch backend's logger, whichever of its modules logs: log settings and filters name it.
log = logging.getLogger("costaware.adapters.compute.batch")

#: ECS's default wait from SIGTERM to SIGKILL (``ECS_CONTAINER_STOP_TIMEOUT``) on a Batch compute environment.
ECS_STOP_TIMEOUT_SECONDS = 30.0


#: The tag :meth:`BatchBackend._end_duplicates` puts on a copy before its stop: the id of the job it copies.
#: Batch sets a terminated job's reason only once it has stopped; the tag shows at once.
COPY_OF_TAG = "costaware:copy-of"


def copy_reason(job_name: str, job_id: str) -> str:
    """The reason of the stop of a copy of ``job_id``'s submit: how a poll of ``job_id`` finds it to bill."""
    return f"a second submit of costaware job {job_name} (it runs as {job_id})"


def _attempt_limit_seconds(job: Mapping[str, Any]) -> float | None:
    """A job's ``attemptDurationSeconds`` as DescribeJobs shows it (None: not shown)."""
    limit = (job.get("timeout") or {}).get("attemptDurationSeconds")
    return float(limit) if limit is not None else None


def with_copies(
    status: JobStatus,
    copies: Sequence[Mapping[str, Any]],
    *,
    now_ms: int,
    stop_timeout_seconds: float = ECS_STOP_TIMEOUT_SECONDS,
    unstopped: Collection[str] = (),
    attempt_limit_seconds: float | None = None,
) -> JobStatus:
    """``status`` billed with the time its submit's ``copies`` ran before their stop (pure).

    Batch bills each copy as the job it is, on the same queue (market): their seconds are the job's, said
    in its reason and counted in its metrics, per the instance type each ran on (``container.instanceType``,
    else the job's) in ``COPY_SECONDS_BY_TYPE``. A copy not stopped yet when the job has ended is billed
    for the longest it can still run, as nothing looks at it again: ``stop_timeout_seconds`` past ``now_ms``
    when its stop was sent at this poll, and its whole attempt limit (its ``attemptDurationSeconds``, else
    ``attempt_limit_seconds``, the job's) and the stop timeout when it is in ``unstopped`` (the ids whose
    stop failed at this poll). While the job runs, that time to come is kept apart (``COPY_SECONDS_LEFT``):
    a wait that stops the job and bills it without a poll of its end (a kill) bills it then.
    """
    if not copies:
        return status
    by_type: dict[str, float] = {}
    left_by_type: dict[str, float] = {}
    running_on: list[str] = []
    for copy in copies:
        ran_on = str((copy.get("container") or {}).get("instanceType") or status.instance_type)
        seen = status_from_description(copy, status.market, ran_on, now_ms=now_ms)
        billed = seen.billable_seconds
        left = 0.0
        if not seen.state.done:
            # ECS gives a stopped copy its stop timeout from the SIGTERM to the SIGKILL; one whose stop
            # failed runs on (or starts) until its time limit.
            limit = _attempt_limit_seconds(copy) or attempt_limit_seconds
            if str(copy.get("jobId", "")) in unstopped and limit is not None:
                left = max(billed, limit) + stop_timeout_seconds - billed
                running_on.append(str(copy.get("jobId", "")))
            elif seen.state == JobState.RUNNING:
                left = stop_timeout_seconds
        if status.state.done:  # the job's end is its last poll and its bill: nothing looks at a copy again
            billed += left
        elif left:
            left_by_type[ran_on] = left_by_type.get(ran_on, 0.0) + left
        by_type[ran_on] = by_type.get(ran_on, 0.0) + billed
    seconds = sum(by_type.values())
    reason = (
        f"{status.reason}; billed with {len(copies)} {'copy' if len(copies) == 1 else 'copies'} "
        f"of its submit, stopped after {seconds:g} s in all"
    )
    if running_on and status.state.done:
        reason += f" ({', '.join(running_on)} could not be stopped: billed to its time limit)"
    metrics = {
        **status.metrics,
        "batch_copies": len(copies),
        "batch_copy_seconds": seconds,
        COPY_SECONDS_BY_TYPE: by_type,
    }
    if left_by_type:
        metrics[COPY_SECONDS_LEFT] = {"seconds_by_type": left_by_type, "unstopped": running_on}
    return replace(status, billable_seconds=status.billable_seconds + seconds, reason=reason, metrics=metrics)


class BatchJobCopies:
    """The copy handling of :class:`~costaware.adapters.compute.batch.BatchBackend` (a mixin)."""

    if TYPE_CHECKING:

        @property
        def client(self) -> Any: ...

    def _end_duplicates(self, job_name: str, queue: str, job_id: str) -> None:
        """Terminate the other jobs named ``job_name`` in ``queue``: copies made by the submit of ``job_id``.

        Batch does not refuse a second job of a name, and botocore sends a ``SubmitJob`` whose answer came
        too late (a read timeout) again: each copy ran a job nobody watched, stopped or billed. Best effort:
        the job taken is ``job_id`` either way.
        """
        try:
            copies = self._other_jobs_named(job_name, queue, job_id)
        except Exception as e:
            log.warning(
                "cannot look for copies of Batch job %s (%s) in queue %s: %s", job_name, job_id, queue, e
            )
            return
        for copy in copies:
            self._mark_copy(copy, job_id)
        # Each stop is sent after its tag: a poll stops again (and bills) a tagged copy whose stop failed.
        unstopped = self._stop_copies(job_id, [{"jobId": copy, "jobName": job_name} for copy in copies])
        if copies:
            log.warning(
                "Batch took the submit of job %s more than once (its answer came late and was sent again): "
                "terminated the copies %s; it runs as %s. The time they ran is billed with it",
                job_name,
                ", ".join(c for c in copies if c not in unstopped) or "(none yet)",
                job_id,
            )

    def _mark_copy(self, copy: str, job_id: str) -> None:
        """Tag ``copy`` as a copy of ``job_id``: while it shuts down its stop's reason is not set yet.

        A copy still terminating at the job's last poll was billed to nobody. Best effort (it needs
        ``batch:TagResource``): without the tag, the copy counts once its reason shows.
        """
        try:
            (described,) = self.client.describe_jobs(jobs=[copy]).get("jobs", [])
            self.client.tag_resource(resourceArn=described["jobArn"], tags={COPY_OF_TAG: job_id})
        except Exception as e:
            log.warning(
                "cannot tag Batch job %s as a copy of %s (%s): it is billed with %s once its stop shows",
                copy,
                job_id,
                e,
                job_id,
            )

    def _other_jobs_named(self, job_name: str, queue: str, job_id: str) -> list[str]:
        """The ids of the jobs named ``job_name`` in ``queue`` other than ``job_id``."""
        named = [{"name": "JOB_NAME", "values": [job_name]}]
        summaries = self.client.list_jobs(jobQueue=queue, filters=named).get("jobSummaryList", [])
        return [str(s["jobId"]) for s in summaries if s.get("jobName") == job_name and s["jobId"] != job_id]

    def _copies(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The copies of ``job``'s submit that :meth:`_end_duplicates` terminated (their tag or reason says).

        Each ran (and was paid for) until its stop: the job's bill holds their time, and one still shutting
        down (its reason not set yet) its time up to now. Another run's job under the same name (a task
        cleared after its job was lost) has no such tag or reason, and is not counted.
        """
        name, job_id = str(job.get("jobName", "")), str(job.get("jobId", ""))
        others = self._other_jobs_named(name, str(job.get("jobQueue", "")), job_id) if name else []
        found: list[dict[str, Any]] = []
        for start in range(0, len(others), 100):  # DescribeJobs takes 100 ids at most
            found.extend(self.client.describe_jobs(jobs=others[start : start + 100]).get("jobs", []))
        return [
            c
            for c in found
            if c.get("statusReason") == copy_reason(name, job_id)
            or (c.get("tags") or {}).get(COPY_OF_TAG) == job_id
        ]

    def _stop_copies(self, job_id: str, copies: Sequence[Mapping[str, Any]]) -> list[str]:
        """Send the stop again to each copy not stopped yet; returns the ids whose stop failed.

        :meth:`_end_duplicates` tags a copy before its stop: a stop that failed there (throttling, no
        ``batch:TerminateJob``) left a copy running, paid for, until its time limit. A stop is idempotent.
        """
        failed = []
        for copy in copies:
            if str(copy.get("status", "")) in ("SUCCEEDED", "FAILED"):
                continue
            copy_id, reason = str(copy.get("jobId", "")), copy_reason(str(copy.get("jobName", "")), job_id)
            if copy.get("statusReason") == reason:
                # Its stop went through (the reason shows): shutting down, billed to its stop timeout. Sent
                # again and throttled, it counted as unstopped, billed to its whole time limit.
                continue
            try:
                self.client.terminate_job(jobId=copy_id, reason=reason)
            except Exception as e:
                failed.append(copy_id)
                log.warning(
                    "cannot stop Batch job %s, a copy of %s's submit (%s): it runs on and is billed with %s; "
                    "the next poll tries again. Check the connection's batch:TerminateJob permission, or "
                    "stop it yourself: aws batch terminate-job --job-id %s --reason 'copy of %s'",
                    copy_id,
                    job_id,
                    e,
                    job_id,
                    copy_id,
                    job_id,
                )
        return failed
