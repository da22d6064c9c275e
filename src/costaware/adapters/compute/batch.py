"""The ``batch`` backend: AWS Batch jobs through the Amazon provider's ``BatchClientHook``.

Spot and on-demand are two job queues (names configured; their compute environments are SPOT and EC2). To
place spot attempts by zone, ``spot_queues`` names one spot queue per zone, each on a SPOT compute
environment whose subnets are all in that zone (Batch has no zone field on a job); a spot request with an
``availability_zone`` goes to that zone's queue. On-demand requests ignore the zone: there is one on-demand
queue.
Every job gets ``retryStrategy.attempts = 1`` (over any retry strategy of the job definition): Batch gives
each of its attempts the whole ``attemptDurationSeconds`` again, so its own retry of a reclaim could run a job
for several times its time limit; the operator resubmits it instead, from its checkpoint, with the time that
is left. Billed seconds are the sum over the job's attempts of ``stoppedAt - startedAt``. A job that ended
FAILED because of a host reclaim (its last attempt's reason starts with ``Host EC2``) or with a resubmit
exit code of the job contract (75, 77, 74) is ``interrupted``: the operator resubmits it from the checkpoint.
Batch takes a second job of a name it has: the copies of a submit that botocore sent again (its answer came
after the read timeout) are terminated once it returns, or by the retry that follows the newest of them where
the submit failed; the time each ran before its stop is billed with the job (a poll finds them by the reason
of their stop).

Every job runs under the launcher: the container override ``command = ["costaware-run", "--", *command]``
(the built-in trainers: ``costaware-run --no-outputs -- python -m costaware.training.entrypoint --spec
URI``) with the job contract's variables in ``environment``. Batch cannot override a job's image at submit,
so an ``image`` (the operator's ``image=``) runs through a copy of ``job_definition`` that differs from it
only in its image, ``<job_definition>-image-<hash>``: an active one is reused, else it is registered (the
connection needs ``batch:RegisterJobDefinition``); ``job_definition`` itself is never changed. Without
``image`` the job definition's own image runs.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from costaware.adapters.compute.aws_errors import aws_error
from costaware.adapters.compute.base import (
    COPY_SECONDS_BY_TYPE,
    COPY_SECONDS_LEFT,
    FoundJob,
    JobRequest,
    JobState,
    JobStatus,
    check_aws_zone,
    require_ec2_instance_type,
    require_object_store,
    whole_number,
)
from costaware.adapters.compute.job_contract import (
    GRACE_SECONDS,
    LAUNCHER_MARGIN_SECONDS,
    MISSING_LAUNCHER_ADVICE,
    RESUBMIT_EXIT_CODES,
    launcher_grace_seconds,
    launcher_not_found,
)
from costaware.core.errors import ComputeBackendError, ConfigurationError, JobNotFoundError

log = logging.getLogger(__name__)

#: ECS's default wait from SIGTERM to SIGKILL (``ECS_CONTAINER_STOP_TIMEOUT``) on a Batch compute environment.
ECS_STOP_TIMEOUT_SECONDS = 30.0

_PENDING = {"SUBMITTED", "PENDING", "RUNNABLE", "STARTING"}
#: Where a user command's local folders live in the container (writable in any image).
WORK_DIR = "/tmp/costaware"
#: Fields of a job definition that a new revision for another image keeps as they are.
_REVISION_FIELDS = (
    "type",
    "parameters",
    "schedulingPriority",
    "retryStrategy",
    "propagateTags",
    "timeout",
    "tags",
    "platformCapabilities",
)


def submit_job_request(
    request: JobRequest,
    *,
    spot_queue: str,
    on_demand_queue: str,
    job_definition: str,
    tags: Mapping[str, str] | None = None,
    work_dir: str = WORK_DIR,
    spot_queues: Mapping[str, str] | None = None,
    stop_timeout_seconds: float | None = None,
) -> dict[str, Any]:
    """The ``SubmitJob`` request of one attempt (pure); ``job_definition`` is the revision that runs it.

    A spot request with an ``availability_zone`` goes to ``spot_queues[zone]``; an on-demand one to
    ``on_demand_queue`` whatever its zone. Given ECS's ``stop_timeout_seconds`` (SIGTERM to SIGKILL of the
    container), the launcher's grace period ends ``LAUNCHER_MARGIN_SECONDS`` before it, as on Kubernetes:
    the launcher then still pushes the last checkpoint, which a longer grace period had ECS kill mid-push.
    """
    require_object_store(request, "batch")
    require_ec2_instance_type(request, "batch")
    queue = queue_for(
        request, spot_queue=spot_queue, on_demand_queue=on_demand_queue, spot_queues=spot_queues
    )
    environment = request.environment(work_dir=work_dir)
    cut = None if stop_timeout_seconds is None else cut_grace(request.grace_seconds, stop_timeout_seconds)
    if cut is not None:
        environment[GRACE_SECONDS] = f"{cut:g}"
    return {
        "jobName": request.job_name,
        "jobQueue": queue,
        "jobDefinition": job_definition,
        "containerOverrides": {
            "command": request.command(),
            "environment": [{"name": k, "value": v} for k, v in sorted(environment.items())],
        },
        # One attempt: each Batch attempt gets the whole attemptDurationSeconds (and max_usd's stop) again,
        # so a retry inside Batch could run past both; the operator resubmits with what is left. Set here,
        # as the job definition's own retryStrategy would apply otherwise.
        "retryStrategy": {"attempts": 1},
        "timeout": {"attemptDurationSeconds": max(60, int(request.max_runtime_seconds))},
        "tags": {
            **dict(tags or {}),
            "costaware:market": request.market,
            "costaware:instance": request.instance_type,
        },
    }


def cut_grace(grace_seconds: float, stop_timeout_seconds: float) -> float | None:
    """The launcher's grace period where ECS's stop timeout is too short for ``grace_seconds``; else None."""
    if grace_seconds <= stop_timeout_seconds - LAUNCHER_MARGIN_SECONDS:
        return None
    return launcher_grace_seconds(stop_timeout_seconds)


def queue_for(
    request: JobRequest,
    *,
    spot_queue: str,
    on_demand_queue: str,
    spot_queues: Mapping[str, str] | None = None,
) -> str:
    """The job queue of ``request`` (pure): on-demand, spot, or the spot queue of its zone.

    Raises:
        ConfigurationError: a spot request with a zone and no ``spot_queues``, or a zone not in them.
    """
    if request.market != "spot":
        return on_demand_queue  # one on-demand queue: the zone is not placed
    zone = request.availability_zone
    if not zone:
        return spot_queue
    if not spot_queues:
        raise ConfigurationError(
            f"Batch job {request.job_name!r} asks for zone {zone!r} but the backend has no spot_queues: "
            "configure one spot job queue per zone in backend_options, spot_queues={zone: queue}, each on a "
            "SPOT compute environment with subnets in that zone only"
        )
    if zone not in spot_queues:
        raise ConfigurationError(
            f"Batch job {request.job_name!r} asks for zone {zone!r}, which spot_queues does not have (it has "
            f"{', '.join(map(repr, sorted(spot_queues)))}): add a queue for {zone!r} or choose one of those"
        )
    return str(spot_queues[zone])


def _same_queue(described: str, name: str) -> bool:
    """Whether a job's ``jobQueue`` (an ARN) is the configured queue ``name`` (a name or an ARN)."""
    return bool(name) and (described == name or described.endswith(f"/{name}"))


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


class BatchBackend:
    """Jobs on AWS Batch.

    Args:
        spot_queue: Job queue on a SPOT compute environment.
        on_demand_queue: Job queue on an EC2 (on-demand) compute environment.
        job_definition: Job definition (name, ``name:revision`` or ARN) whose image has costaware and the
            trainer's libraries; a user command's ``image=`` runs in a revision of it with that image.
        aws_conn_id: Airflow AWS connection (None: the default chain).
        region_name: Region (default the connection's).
        reclaim_retries: Not used (kept so that DAGs that set it still load; a value above 0 is warned of at
            each submit): Batch's own retries each got the whole time limit again, so the operator
            resubmits a reclaimed job instead.
        tags: Tags of the jobs.
        work_dir: Writable folder of the container for the job's checkpoint, output and metrics.
        spot_queues: Zone -> job queue on a SPOT compute environment whose subnets are in that zone only:
            where a spot request with an ``availability_zone`` goes. On-demand requests ignore the zone.
        stop_timeout_seconds: How long the compute environment's ECS agent waits from SIGTERM to SIGKILL
            (``ECS_CONTAINER_STOP_TIMEOUT``, 30 s unless raised): a grace period longer than it is cut, and
            each submit says so.
    """

    name = "batch"
    places_zones = True

    @staticmethod
    def check_zones(options: Mapping[str, Any], zones: Sequence[str]) -> None:
        """Every allowed zone has its spot queue: refused before any job, not when an attempt moves there.

        A zone without one failed the task at the move, after a preemption had been paid for.

        Raises:
            ConfigurationError: a zone ``spot_queues`` does not list, named with the zones it has.
        """
        queues = options.get("spot_queues") or {}
        if not isinstance(queues, Mapping):
            return  # the backend's own option check names the type
        missing = [zone for zone in zones if zone not in queues]
        if missing:
            raise ConfigurationError(
                f"availability_zones {', '.join(map(repr, missing))} have no queue in backend_options "
                f"spot_queues (it has {', '.join(map(repr, sorted(queues))) or 'none'}): add a spot queue "
                "for each zone, or allow only the zones that have one"
            )

    def __init__(
        self,
        *,
        spot_queue: str = "",
        on_demand_queue: str = "",
        job_definition: str = "",
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        reclaim_retries: int = 0,
        tags: Mapping[str, str] | None = None,
        work_dir: str = WORK_DIR,
        spot_queues: Mapping[str, str] | None = None,
        stop_timeout_seconds: float = ECS_STOP_TIMEOUT_SECONDS,
    ) -> None:
        missing = [
            n
            for n, v in (
                ("spot_queue", spot_queue),
                ("on_demand_queue", on_demand_queue),
                ("job_definition", job_definition),
            )
            if not v
        ]
        if missing:
            raise ConfigurationError(
                f"Batch backend needs {', '.join(missing)}: set them in backend_options (the job queues of "
                "a SPOT and an EC2 compute environment, and the job definition)"
            )
        self.spot_queue, self.on_demand_queue, self.job_definition = (
            spot_queue,
            on_demand_queue,
            job_definition,
        )
        self.aws_conn_id, self.region_name = aws_conn_id, region_name
        # A templated option arrives as text ("2"); True is no count (it read as 1).
        self.reclaim_retries = whole_number(reclaim_retries, "reclaim_retries", low=0, high=9)
        self.tags = dict(tags or {})
        self.work_dir = work_dir
        try:
            self.stop_timeout_seconds = float(stop_timeout_seconds)
        except (TypeError, ValueError):
            self.stop_timeout_seconds = math.nan
        # "inf" sized every max_usd cap's stop as endless (no attempt could start); "nan" hid the warning.
        if not math.isfinite(self.stop_timeout_seconds) or self.stop_timeout_seconds <= 0:
            raise ConfigurationError(
                f"stop_timeout_seconds must be a number of seconds > 0 (the compute environment's "
                f"ECS_CONTAINER_STOP_TIMEOUT), got {stop_timeout_seconds!r}"
            )
        self.spot_queues = {check_aws_zone(str(z)): str(q) for z, q in dict(spot_queues or {}).items()}
        empty = sorted(z for z, q in self.spot_queues.items() if not q)
        if empty:
            raise ConfigurationError(
                f"spot_queues has no job queue for zone(s) {', '.join(map(repr, empty))}: name a queue on a "
                "SPOT compute environment with subnets in that zone, or drop the zone"
            )

    def queue_zone(self, queue: str) -> str:
        """The zone of ``queue`` (a job's ``jobQueue``) in ``spot_queues``; empty for any other queue."""
        return next((z for z, q in self.spot_queues.items() if _same_queue(queue, q)), "")

    @property
    def client(self) -> Any:
        from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

        return BatchClientHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).client

    def find(self, job_name: str) -> FoundJob | None:
        found = self._found_in(job_name)
        if found is None:
            return None
        queue, summary = found[1], found[2]
        # ListJobs' summary holds createdAt, startedAt and, once it ended, status and stoppedAt (epoch ms):
        # no DescribeJobs needed for them. Read as DescribeJobs' job is, its end is the one a poll gives.
        started, created = summary.get("startedAt"), summary.get("createdAt")
        ended = status_from_description(summary, "", "")
        return FoundJob(
            job_id=str(summary["jobId"]),
            started_at=int(started) / 1000 if started else None,
            created_at=int(created) / 1000 if created else None,
            ended_at=ended.ended_at,
            end_state=ended.state if ended.ended_at is not None else None,
            market=self._market_of_queue(queue),
        )

    def _market_of_queue(self, queue: str) -> str:
        """The market of the jobs of ``queue`` (one of ours), ``""`` where it serves both."""
        spot = queue == self.spot_queue or queue in self.spot_queues.values()
        on_demand = queue == self.on_demand_queue
        if spot == on_demand:
            return ""
        return "spot" if spot else "on_demand"

    def _found_in(self, job_name: str) -> tuple[str, str, dict[str, Any]] | None:
        """The id, queue and ``ListJobs`` summary of the job submitted under ``job_name`` before, or None.

        The newest where Batch took several (see :meth:`_end_duplicates`).

        Raises:
            ConfigurationError, ComputeBackendError: a queue could not be read, named with its option (a
                missing spot queue was blamed on the on-demand queue the request was for).
        """
        # Each queue once, with the option that names it.
        options = {self.spot_queue: "spot_queue", self.on_demand_queue: "on_demand_queue"}
        options.update({q: f"spot_queues[{zone!r}]" for zone, q in self.spot_queues.items()})
        for queue, option in options.items():
            try:
                response = self.client.list_jobs(
                    jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [job_name]}]
                )
            except Exception as e:
                raise aws_error(
                    e,
                    f"cannot look for Batch job {job_name!r} in job queue {queue!r}",
                    f"check {option} in backend_options (it must exist in region "
                    f"{self.region_name or 'of the connection'}) and the connection's permissions",
                ) from e
            named = [j for j in response.get("jobSummaryList", []) if j.get("jobName") == job_name]
            if named:
                newest = max(named, key=lambda j: int(j.get("createdAt") or 0))
                return str(newest["jobId"]), queue, dict(newest)
        return None

    def _active(self, name: str) -> list[dict[str, Any]]:
        revisions: list[dict[str, Any]] = []
        for page in self.client.get_paginator("describe_job_definitions").paginate(
            jobDefinitionName=name, status="ACTIVE"
        ):
            revisions.extend(page.get("jobDefinitions", []))
        return revisions

    def definition_for(self, image: str) -> str:
        """The job definition that runs ``image``: ``job_definition``, or a copy of it with that image.

        The copy is a job definition of its own, ``<name>-image-<hash of the image>``, so that the latest
        revision of ``job_definition`` (what a job naming it without a revision runs) never changes. A copy
        that matches ``job_definition`` with ``image`` is reused; otherwise a revision of the copy is
        registered.

        Raises:
            ConfigurationError: ``job_definition`` has no active revision, or is not a container job.
        """
        name, _, wanted = self.job_definition.rpartition("/")[2].partition(":")
        revisions = self._active(name)
        chosen = [d for d in revisions if str(d.get("revision")) == wanted] if wanted else revisions
        if not chosen:
            raise ConfigurationError(
                f"Batch job definition {self.job_definition!r} has no active revision in region "
                f"{self.region_name or 'of the connection'}: register it, or fix job_definition"
            )
        base = max(chosen, key=lambda d: int(d.get("revision", 0)))
        properties = dict(base.get("containerProperties") or {})
        if not properties:
            raise ConfigurationError(
                f"Batch job definition {self.job_definition!r} is not a container job: image= works only "
                "with containerProperties; name the image in the job definition instead"
            )
        if properties.get("image") == image:
            return str(base["jobDefinitionArn"])
        wanted_properties = {**properties, "image": image}
        copy = f"{name}-image-{hashlib.sha256(image.encode()).hexdigest()[:12]}"[-128:]
        for other in sorted(self._active(copy), key=lambda d: -int(d.get("revision", 0))):
            if dict(other.get("containerProperties") or {}) == wanted_properties:
                return str(other["jobDefinitionArn"])  # registered for this image before
        kept = {k: base[k] for k in _REVISION_FIELDS if base.get(k) not in (None, {}, [])}
        registered = self.client.register_job_definition(
            jobDefinitionName=copy, containerProperties=wanted_properties, **kept
        )
        return str(registered["jobDefinitionArn"])

    def submit(self, request: JobRequest) -> str:
        require_object_store(request, "batch")  # before any request to AWS
        require_ec2_instance_type(request, "batch")
        if self.reclaim_retries:
            log.warning(
                "backend option reclaim_retries=%d is not used: Batch gives each of its own retries the "
                "whole time limit again, so 1 + %d attempts could run %d times max_runtime; the operator "
                "resubmits a reclaimed job from its checkpoint with the time that is left (max_attempts "
                "bounds them). Drop reclaim_retries from backend_options",
                self.reclaim_retries,
                self.reclaim_retries,
                1 + self.reclaim_retries,
            )
        cut = cut_grace(request.grace_seconds, self.stop_timeout_seconds)
        if cut is not None:
            log.warning(
                "preemption_grace_seconds %g does not fit the %g s ECS gives a Batch container from "
                "SIGTERM to SIGKILL: the job's command gets %g s to save, and the launcher %g s more to push "
                "it. For longer, raise ECS_CONTAINER_STOP_TIMEOUT on the compute environment's instances and "
                "set backend_options stop_timeout_seconds to it",
                request.grace_seconds,
                self.stop_timeout_seconds,
                cut,
                LAUNCHER_MARGIN_SECONDS,
            )
        queue = queue_for(  # a zone without a queue fails before any request to AWS too
            request,
            spot_queue=self.spot_queue,
            on_demand_queue=self.on_demand_queue,
            spot_queues=self.spot_queues,
        )
        definition = self.job_definition
        try:
            found = self._found_in(request.job_name)
            if found is not None:  # submitted before (an Airflow retry)
                # A submit that failed after botocore had sent it more than once left several jobs.
                self._end_duplicates(request.job_name, found[1], found[0])
                return found[0]
            if request.image:
                definition = self.definition_for(request.image)
            body = submit_job_request(
                request,
                spot_queue=self.spot_queue,
                on_demand_queue=self.on_demand_queue,
                job_definition=definition,
                tags=self.tags,
                work_dir=self.work_dir,
                spot_queues=self.spot_queues,
                stop_timeout_seconds=self.stop_timeout_seconds,
            )
            job_id = str(self.client.submit_job(**body)["jobId"])
        except (ConfigurationError, ComputeBackendError):
            raise  # said already: a queue _found_in could not read, named with its option
        except Exception as e:
            market = "spot_queue" if request.market == "spot" else "on_demand_queue"
            if request.market == "spot" and request.availability_zone:
                market = f"spot_queues[{request.availability_zone!r}]"
            raise aws_error(
                e,
                f"cannot submit Batch job {request.job_name!r} to job queue {queue!r} with job "
                f"definition {definition!r}" + (f" for image {request.image!r}" if request.image else ""),
                f"check {market} and job_definition in backend_options (they must exist in region "
                f"{self.region_name or 'of the connection'}) and the connection's permissions",
            ) from e
        self._end_duplicates(request.job_name, queue, job_id)
        return job_id

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

    def _describe(self, job_id: str) -> dict[str, Any]:
        try:
            jobs = self.client.describe_jobs(jobs=[job_id]).get("jobs", [])
        except Exception as e:
            raise aws_error(
                e,
                f"cannot describe Batch job {job_id!r}",
                "check aws_conn_id, region_name and the connection's permissions (batch:DescribeJobs)",
            ) from e
        if not jobs:
            # Right after a submit DescribeJobs may not list the job yet (eventual consistency): the wait
            # polls again for a while after its submit (then bills it as gone), where an error failed it.
            raise JobNotFoundError(f"Batch job {job_id!r} does not exist (DescribeJobs does not list it)")
        job: dict[str, Any] = jobs[0]
        return job

    def poll(self, job_id: str) -> JobStatus:
        job = self._describe(job_id)
        tags = job.get("tags") or {}
        queue = str(job.get("jobQueue", ""))
        zone = self.queue_zone(queue)
        on_spot = bool(zone) or _same_queue(queue, self.spot_queue)
        market = str(tags.get("costaware:market") or ("spot" if on_spot else "on_demand"))
        instance_type = str(
            job.get("container", {}).get("instanceType") or tags.get("costaware:instance", "")
        )
        now_ms = int(time.time() * 1000)
        status = status_from_description(job, market, instance_type, zone, now_ms=now_ms)
        try:
            copies = self._copies(job)
        except Exception as e:  # the job's own status stands; the next poll looks for its copies again
            log.warning("cannot look for copies of Batch job %s to bill with it: %s", job_id, e)
            return status
        unstopped = self._stop_copies(job_id, copies)
        return with_copies(
            status,
            copies,
            now_ms=now_ms,
            stop_timeout_seconds=self.stop_timeout_seconds,
            unstopped=unstopped,
            attempt_limit_seconds=_attempt_limit_seconds(job),
        )

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

    def stop(self, job_id: str) -> None:
        try:
            # One reason for every stop (a pause, a kill, the deadline fallback): it said "deadline fallback".
            self.client.terminate_job(jobId=job_id, reason="stopped by costaware (see the Airflow task log)")
        except Exception as e:
            raise aws_error(
                e,
                f"cannot stop Batch job {job_id!r}",
                "check the connection's permissions (batch:TerminateJob)",
            ) from e

    def logs(self, job_id: str, tail: int = 20) -> str:
        return "\n".join(job_log_lines(self._describe(job_id))[-tail:])


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
