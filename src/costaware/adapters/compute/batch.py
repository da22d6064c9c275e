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

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from costaware.adapters.compute.aws_errors import aws_error
from costaware.adapters.compute.base import (
    FoundJob,
    JobRequest,
    JobStatus,
    check_aws_zone,
    job_tags,
    require_ec2_instance_type,
    require_object_store,
    whole_number,
)

# The request building, the status mapping and the copies of a resent submit live in modules of their own;
# every name stays importable from here, where tests, docs and other modules name it.
from costaware.adapters.compute.batch_copies import (
    COPY_OF_TAG,
    ECS_STOP_TIMEOUT_SECONDS,
    BatchJobCopies,
    _attempt_limit_seconds,
    copy_reason,
    with_copies,
)
from costaware.adapters.compute.batch_status import (
    job_log_lines,
    status_from_description,
)
from costaware.adapters.compute.batch_submit import (
    WORK_DIR,
    BatchJobDefinitions,
    _same_queue,
    cut_grace,
    queue_for,
    submit_job_request,
)
from costaware.adapters.compute.job_contract import LAUNCHER_MARGIN_SECONDS, seconds_above_zero
from costaware.core.errors import ComputeBackendError, ConfigurationError, JobNotFoundError

log = logging.getLogger(__name__)

__all__ = [
    "COPY_OF_TAG",
    "ECS_STOP_TIMEOUT_SECONDS",
    "WORK_DIR",
    "BatchBackend",
    "copy_reason",
    "cut_grace",
    "job_log_lines",
    "queue_for",
    "status_from_description",
    "submit_job_request",
    "with_copies",
]


def _checked_stop_timeout(value: object) -> float:
    """``stop_timeout_seconds`` as a finite number of seconds > 0.

    Raises:
        ConfigurationError: anything else, with the value ("inf" sized every max_usd cap's stop as endless,
            so no attempt could start; "nan" hid the warning of a cut grace period).
    """
    seconds = seconds_above_zero(value)
    if seconds is None:
        raise ConfigurationError(
            f"stop_timeout_seconds must be a number of seconds > 0 (the compute environment's "
            f"ECS_CONTAINER_STOP_TIMEOUT), got {value!r}"
        )
    return seconds


def check_number_options(options: Mapping[str, Any]) -> tuple[int, float]:
    """``reclaim_retries`` (0-9) and ``stop_timeout_seconds`` of ``options``, checked.

    The task's start asks it (``check_backend_options``), before any money, and each submit; a poll of a
    running job reads ``stop_timeout_seconds`` leniently, so that one an older release took stays watched.

    Raises:
        ConfigurationError: either of them out of range or no number, naming it and its value.
    """
    # A templated option arrives as text ("2"); True is no count (it read as 1).
    retries = whole_number(options.get("reclaim_retries", 0), "reclaim_retries", low=0, high=9)
    return retries, _checked_stop_timeout(options.get("stop_timeout_seconds", ECS_STOP_TIMEOUT_SECONDS))


class BatchBackend(BatchJobCopies, BatchJobDefinitions):
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
    def check_option_values(options: Mapping[str, Any]) -> None:
        """:func:`check_number_options`, asked by ``check_backend_options`` at the task's start."""
        check_number_options(options)

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
        # Kept as written, checked at the submit: a stop or find never reads them, a poll reads only
        # stop_timeout_seconds and falls back to ECS's default (see open_backend and _polled_stop_timeout).
        self.tags, self.reclaim_retries = tags, reclaim_retries
        self.stop_timeout_seconds = stop_timeout_seconds
        self.work_dir = work_dir
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

    def submit(self, request: JobRequest) -> str:
        tags = job_tags(self.tags, "batch")  # before any request to AWS, as the checks below
        require_object_store(request, "batch")
        require_ec2_instance_type(request, "batch")
        reclaim_retries, stop_timeout_seconds = check_number_options(
            {"reclaim_retries": self.reclaim_retries, "stop_timeout_seconds": self.stop_timeout_seconds}
        )
        if reclaim_retries:
            log.warning(
                "backend option reclaim_retries=%d is not used: Batch gives each of its own retries the "
                "whole time limit again, so 1 + %d attempts could run %d times max_runtime; the operator "
                "resubmits a reclaimed job from its checkpoint with the time that is left (max_attempts "
                "bounds them). Drop reclaim_retries from backend_options",
                reclaim_retries,
                reclaim_retries,
                1 + reclaim_retries,
            )
        cut = cut_grace(request.grace_seconds, stop_timeout_seconds)
        if cut is not None:
            log.warning(
                "preemption_grace_seconds %g does not fit the %g s ECS gives a Batch container from "
                "SIGTERM to SIGKILL: the job's command gets %g s to save, and the launcher %g s more to push "
                "it. For longer, raise ECS_CONTAINER_STOP_TIMEOUT on the compute environment's instances and "
                "set backend_options stop_timeout_seconds to it",
                request.grace_seconds,
                stop_timeout_seconds,
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
                tags=tags,
                work_dir=self.work_dir,
                spot_queues=self.spot_queues,
                stop_timeout_seconds=stop_timeout_seconds,
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
            stop_timeout_seconds=self._polled_stop_timeout(),
            unstopped=unstopped,
            attempt_limit_seconds=_attempt_limit_seconds(job),
        )

    def _polled_stop_timeout(self) -> float:
        """``stop_timeout_seconds``, or ECS's default where it is no number of seconds.

        A job an older release submitted with a value it took is still polled and billed; the stop of its
        copies then counts ECS's default.
        """
        try:
            return _checked_stop_timeout(self.stop_timeout_seconds)
        except ConfigurationError:
            return ECS_STOP_TIMEOUT_SECONDS

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
