"""The ``sagemaker`` backend: SageMaker training jobs through the Amazon provider's ``SageMakerHook``.

Spot is SageMaker managed spot training: ``EnableManagedSpotTraining`` with ``StoppingCondition.
MaxWaitTimeInSeconds`` (derived from the deadline; at least ``MaxRuntimeInSeconds``) and ``CheckpointConfig``
(the checkpoint prefix, synced with ``/opt/ml/checkpoints``). Every job runs under the launcher,
``ContainerEntrypoint=["costaware-run", "--no-sync", "--"]`` with the command as ``ContainerArguments``
(SageMaker syncs ``/opt/ml/checkpoints`` itself, so the launcher does not) and the job contract's variables
in ``Environment``. The built-in trainers' command is ``python -m costaware.training.entrypoint --spec URI``
(after ``--no-outputs``), so their image needs ``airflow-provider-costaware`` (which brings
``costaware-runtime``) and the trainer's libraries; a user command's image (``image=`` of the operator, else
``image_uri``) needs only ``costaware-runtime[s3]`` and the team's code. Billed seconds are
``BillableTimeInSeconds`` x ``InstanceCount`` (what AWS charges: spot savings and interruptions are already
in it, so a spot job's are priced at the on-demand ``ml.*`` rate).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from costaware.adapters.compute.aws_errors import aws_error, error_code
from costaware.adapters.compute.base import (
    BILLED_AT_ON_DEMAND,
    STOP_REQUESTED_AT,
    TRAINED_RUNS_SECONDS,
    TRAINING_NOW,
    FoundJob,
    JobRequest,
    JobState,
    JobStatus,
    container_environment,
    job_tags,
    require_object_store,
    whole_number,
)
from costaware.adapters.compute.job_contract import RESUBMIT_EXIT_CODES
from costaware.core.errors import ConfigurationError, JobNotFoundError

#: SecondaryStatus values that mean "waiting for (spot) capacity", not running yet.
_PENDING = {"Starting", "Pending", "LaunchingMLInstances", "PreparingTrainingStack"}
#: How a ``FailureReason`` starts when the job failed for want of capacity or on SageMaker's side.
AWS_SIDE_FAILURES = ("CapacityError", "InternalServerError")
#: The container's exit code in a ``FailureReason``: ``AlgorithmError: , exit code: 74`` (``Exit Code: 1``
#: in older jobs).
_EXIT_CODE = re.compile(r"exit code:\s*(-?\d+)", re.IGNORECASE)
#: The folder SageMaker syncs with ``CheckpointConfig.S3Uri``.
CHECKPOINT_DIR = "/opt/ml/checkpoints"
#: Where a user command's output folder and metrics file live: on the training volume, not the image's disk.
WORK_DIR = "/opt/ml/costaware"


def training_job_request(
    request: JobRequest,
    *,
    role_arn: str,
    image_uri: str,
    output_s3_uri: str,
    instance_count: int = 1,
    volume_size_gb: int = 30,
    environment: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``CreateTrainingJob`` request of one attempt (pure).

    The image is the request's (``image=`` of the operator) or ``image_uri``. A request with an
    ``availability_zone`` is refused: SageMaker chooses the zone of a training job itself.
    """
    if request.availability_zone:
        raise ConfigurationError(
            f"SageMaker training job {request.job_name!r} asks for zone {request.availability_zone!r}, but "
            "SageMaker chooses the zone itself and its API has no zone placement: use the batch or "
            "kubernetes backend to place attempts by zone, or leave the zone unset"
        )
    if not request.instance_type.startswith("ml."):
        raise ConfigurationError(
            f"SageMaker instance type {request.instance_type!r} must be an ml.* type (e.g. ml.m5.xlarge)"
        )
    image = request.image or image_uri
    if not image:
        raise ConfigurationError(
            f"SageMaker training job {request.job_name!r} has no image: pass image= to the operator or set "
            "image_uri in backend_options"
        )
    command = request.command(no_sync=True)
    split = command.index("--") + 1  # the launcher and its options, then the job's command
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": int(request.max_runtime_seconds)}
    config: dict[str, Any] = {
        "TrainingJobName": request.job_name,
        "RoleArn": role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": image,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": command[:split],
            "ContainerArguments": command[split:],
        },
        "OutputDataConfig": {"S3OutputPath": output_s3_uri},
        "ResourceConfig": {
            "InstanceType": request.instance_type,
            "InstanceCount": int(instance_count),
            "VolumeSizeInGB": int(volume_size_gb),
        },
        "StoppingCondition": stopping,
        "Environment": {
            **container_environment(environment),
            **request.environment(work_dir=WORK_DIR, checkpoint_dir=CHECKPOINT_DIR),
        },
        "Tags": [{"Key": k, "Value": v} for k, v in sorted(dict(tags or {}).items())],
    }
    require_object_store(request, "sagemaker")
    if request.checkpoint_uri:
        config["CheckpointConfig"] = {"S3Uri": request.checkpoint_uri, "LocalPath": CHECKPOINT_DIR}
    if request.market == "spot":
        config["EnableManagedSpotTraining"] = True
        wait = max(
            int(request.max_wait_seconds or request.max_runtime_seconds), stopping["MaxRuntimeInSeconds"]
        )
        stopping["MaxWaitTimeInSeconds"] = wait
    return config


def status_from_description(job: Mapping[str, Any], *, now: float | None = None) -> JobStatus:
    """A ``JobStatus`` from ``DescribeTrainingJob`` (pure; ``now``: epoch seconds).

    SageMaker reports ``BillableTimeInSeconds`` only once a job ended. A job still running is given the
    time since its ``TrainingStartTime`` (the start of billing) up to ``now``: what a stop must bill it for
    at the most, where the time since the submit would also count its wait for capacity.
    """
    status = str(job.get("TrainingJobStatus", ""))
    secondary = str(job.get("SecondaryStatus", ""))
    count = int(job.get("ResourceConfig", {}).get("InstanceCount", 1) or 1)
    billable = job.get("BillableTimeInSeconds")
    seconds = float(billable) * count if billable is not None else 0.0
    started = _epoch_seconds(job.get("TrainingStartTime"))
    restarts = [
        t
        for t in job.get("SecondaryStatusTransitions", [])
        if t.get("Status") in ("Interrupted", "Restarting")
    ]
    # A managed-spot job waiting for capacity again after an interruption (Starting, Pending) trained
    # before: billed from its first start on, as a running one is (a stop billed it 0 s).
    running = status in ("InProgress", "Stopping") and (secondary not in _PENDING or bool(restarts))
    found = _EXIT_CODE.search(str(job.get("FailureReason") or "")) if status == "Failed" else None
    exit_code = int(found.group(1)) if found else None
    if billable is None and running and started is not None and now is not None:
        seconds = max(0.0, now - started) * count
    ended = _epoch_seconds(job.get("TrainingEndTime"))
    if billable is None and not running and started is not None and ended is not None:
        # An ended job that trained but reports no billable time (as moto's do): billed from its start to
        # its end, an upper bound (managed spot bills less), never 0 s.
        seconds = max(0.0, ended - started) * count
    if billable is None and status == "Completed" and started is None:
        # A job that succeeded trained, though SageMaker gave neither its billable time nor its start: from
        # its creation, the most it can have run (its wait for capacity too), never 0 s.
        created = _epoch_seconds(job.get("CreationTime"))
        last = ended if ended is not None else _epoch_seconds(job.get("LastModifiedTime"))
        if created is not None and last is not None:
            seconds = max(0.0, last - created) * count
    stop_requested: dict[str, Any] = {}
    if status == "Stopping":
        # When StopTrainingJob was asked (its transition's start, else the job's last change): a re-created
        # wait sends its stop at the cap no second time.
        stopping = [t for t in job.get("SecondaryStatusTransitions", []) if t.get("Status") == "Stopping"]
        at = _epoch_seconds(stopping[-1].get("StartTime")) if stopping else None
        at = at if at is not None else _epoch_seconds(job.get("LastModifiedTime"))
        if at is not None:
            stop_requested[STOP_REQUESTED_AT] = at
    if status == "Completed":
        state = JobState.SUCCEEDED
    elif status in ("Stopped", "Stopping") or secondary == "MaxWaitTimeExceeded":
        state = JobState.INTERRUPTED if status != "Stopping" else JobState.RUNNING
    elif status == "Failed":
        # No capacity, or SageMaker's own fault: not the training's, and a new job may run (it was a code
        # error, failed for good, at the on-demand fallback near the deadline, when capacity is short). So
        # may a launcher's resubmit exit code (74: a store it could not reach), as on Batch and Kubernetes.
        theirs = secondary == "MaxWaitTimeExceeded" or str(job.get("FailureReason") or "").startswith(
            AWS_SIDE_FAILURES
        )
        resubmit = exit_code is not None and exit_code in RESUBMIT_EXIT_CODES
        state = JobState.INTERRUPTED if theirs or resubmit else JobState.FAILED
    elif secondary in _PENDING:
        state = JobState.PENDING
    else:
        state = JobState.RUNNING
    return JobStatus(
        job_id=str(job.get("TrainingJobName", "")),
        state=state,
        billable_seconds=seconds,
        market="spot" if job.get("EnableManagedSpotTraining") else "on_demand",
        instance_type=str(job.get("ResourceConfig", {}).get("InstanceType", "")),
        reason=str(job.get("FailureReason") or secondary or status),
        exit_code=exit_code,
        # Its end, as find reads it: the same end keys its ledger entry (given by one and not the other, a
        # job found unread by a retry and billed from a poll too was billed twice).
        ended_at=ended if state.done else None,
        metrics={
            "training_seconds": job.get("TrainingTimeInSeconds"),
            "spot_interruptions": len(restarts),
            # AWS's figure for managed spot already holds the saving (saving = 1 - billable / training
            # time): it is priced at the on-demand ml.* rate. The time since the start (billable not given
            # yet) is wall clock, priced at the spot rate.
            BILLED_AT_ON_DEMAND: billable is not None,
            # What on-demand would have billed for the same run: its whole training time.
            **(
                {"on_demand_seconds": float(job["TrainingTimeInSeconds"]) * count}
                if billable is not None and job.get("TrainingTimeInSeconds") is not None
                else {}
            ),
            **stop_requested,
            **_trained_runs(job, now=None if state.done else now),
        },
    )


def _trained_runs(job: Mapping[str, Any], *, now: float | None) -> dict[str, Any]:
    """``TRAINED_RUNS_SECONDS`` of the job's ``Training`` transitions, or nothing where one has no end.

    A managed-spot job's time since its ``TrainingStartTime`` also counts its waits for capacity after each
    interruption and the restarts: taken as run time, it said far less work was left than was. A job not
    ended (``now`` given) also gets ``TRAINING_NOW``: whether its last transition is ``Training``.
    """
    transitions = list(job.get("SecondaryStatusTransitions") or [])
    runs: list[float] = []
    for index, transition in enumerate(transitions):
        if transition.get("Status") != "Training":
            continue
        began = _epoch_seconds(transition.get("StartTime"))
        ended = _epoch_seconds(transition.get("EndTime"))
        if ended is None and index + 1 < len(transitions):
            ended = _epoch_seconds(transitions[index + 1].get("StartTime"))
        ended = now if ended is None else ended
        if began is None or ended is None:
            return {}  # not known exactly: the billable seconds stand
        runs.append(max(0.0, ended - began))
    if not runs:
        return {}
    if now is None:
        return {TRAINED_RUNS_SECONDS: runs}
    return {TRAINED_RUNS_SECONDS: runs, TRAINING_NOW: transitions[-1].get("Status") == "Training"}


def _epoch_seconds(value: Any) -> float | None:
    """A time of ``DescribeTrainingJob`` in epoch seconds (boto3 gives a datetime), None where unreadable.

    A time without a zone is UTC, as AWS keeps it.
    """
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()


def job_size(options: Mapping[str, Any]) -> tuple[int, int]:
    """``instance_count`` and ``volume_size_gb`` of ``options`` (defaults 1 and 30) as whole numbers.

    The task's start asks it (``check_backend_options``), before any money, and each submit; opening a
    running job's backend to poll, find or stop it does not, as none of these read them.

    Raises:
        ConfigurationError: either outside 1-1000 instances or 1-16384 GB, naming it and its value.
    """
    return (
        whole_number(options.get("instance_count", 1), "instance_count", low=1, high=1000),
        whole_number(options.get("volume_size_gb", 30), "volume_size_gb", low=1, high=16384),
    )


class SageMakerBackend:
    """Training jobs on SageMaker.

    Args:
        role_arn: Execution role of the training jobs.
        image_uri: Image with costaware and the trainer's libraries (a user command's ``image=`` wins).
        output_s3_uri: ``OutputDataConfig.S3OutputPath``.
        aws_conn_id: Airflow AWS connection (None: the default chain).
        region_name: Region (default the connection's).
        instance_count: Instances per job.
        volume_size_gb: EBS volume per instance.
        environment: Extra environment of the container.
        tags: Tags of the training jobs.
    """

    name = "sagemaker"
    #: SageMaker's CreateTrainingJob takes no zone: a request with ``availability_zone`` is refused.
    places_zones = False

    @staticmethod
    def check_option_values(options: Mapping[str, Any]) -> None:
        """:func:`job_size`, asked by ``check_backend_options`` at the task's start."""
        job_size(options)

    def __init__(
        self,
        *,
        role_arn: str,
        output_s3_uri: str,
        image_uri: str = "",
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        instance_count: int = 1,
        volume_size_gb: int = 30,
        environment: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        # image_uri may come per job instead (the operator's image=): training_job_request checks it
        for name, value in (("role_arn", role_arn), ("output_s3_uri", output_s3_uri)):
            if not value:
                raise ConfigurationError(f"SageMaker backend needs {name}: set it in backend_options")
        self.role_arn, self.image_uri, self.output_s3_uri = role_arn, image_uri, output_s3_uri
        self.aws_conn_id, self.region_name = aws_conn_id, region_name
        # All four kept as written, checked at the submit: a poll or stop never reads them (see open_backend).
        self.instance_count, self.volume_size_gb = instance_count, volume_size_gb
        self.environment, self.tags = environment, tags

    @property
    def client(self) -> Any:
        from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

        return SageMakerHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn

    def _describe(self, job_id: str) -> dict[str, Any] | None:
        """The job's description, or None when SageMaker has no job of that name."""
        try:
            job: dict[str, Any] = self.client.describe_training_job(TrainingJobName=job_id)
        except Exception as e:
            code, _ = error_code(e)
            text = str(e).lower()
            if code == "ValidationException" and ("could not find" in text or "not found" in text):
                return None
            raise aws_error(
                e,
                f"cannot describe SageMaker training job {job_id!r}",
                "check aws_conn_id, region_name and the connection's permissions "
                "(sagemaker:DescribeTrainingJob)",
            ) from e
        return job

    def submit(self, request: JobRequest) -> str:
        instance_count, volume_size_gb = job_size(
            {"instance_count": self.instance_count, "volume_size_gb": self.volume_size_gb}
        )
        config = training_job_request(
            request,
            role_arn=self.role_arn,
            image_uri=self.image_uri,
            output_s3_uri=self.output_s3_uri,
            instance_count=instance_count,
            volume_size_gb=volume_size_gb,
            environment=self.environment,
            tags=job_tags(self.tags, "sagemaker"),
        )
        if self._describe(request.job_name) is not None:
            return request.job_name  # submitted before (an Airflow retry)
        image = config["AlgorithmSpecification"]["TrainingImage"]
        try:
            self.client.create_training_job(**config)
        except Exception as e:
            if self._created_after_all(request.job_name):
                # The create reached SageMaker but its answer was lost, and botocore's own retry of it was
                # refused as ResourceInUse: read as a bad request, it failed the task for good and stopped
                # the job it had started.
                return request.job_name
            raise aws_error(
                e,
                f"cannot create SageMaker training job {request.job_name!r} with role {self.role_arn!r}, "
                f"image {image!r} on {request.instance_type!r}",
                "check role_arn, image_uri and output_s3_uri in backend_options, the instance type and the "
                "connection's permissions (sagemaker:CreateTrainingJob, iam:PassRole)",
            ) from e
        return request.job_name

    def _created_after_all(self, job_name: str) -> bool:
        """Whether a create that raised took its job anyway (best effort: False where it cannot tell)."""
        try:
            return self._describe(job_name) is not None
        except Exception:
            return False

    def find(self, job_name: str) -> FoundJob | None:
        job = self._describe(job_name)
        if job is None:
            return None
        status = status_from_description(job, now=time.time())  # as poll reads it: the retry's follow
        ended = status.ended_at is not None
        return FoundJob(
            job_id=job_name,
            started_at=_epoch_seconds(job.get("TrainingStartTime")),
            created_at=_epoch_seconds(job.get("CreationTime")),
            ended_at=status.ended_at,
            end_state=status.state if ended else None,
            market=status.market,  # EnableManagedSpotTraining
            status=status,
        )

    def poll(self, job_id: str) -> JobStatus:
        job = self._describe(job_id)
        if job is None:
            # As on Batch: right after its create a job may not be listed yet; the wait polls again for a
            # while after the submit (then bills it as gone), where an error failed it after five polls.
            raise JobNotFoundError(f"SageMaker training job {job_id!r} does not exist")
        return status_from_description(job, now=time.time())

    def stop(self, job_id: str) -> None:
        try:
            self.client.stop_training_job(TrainingJobName=job_id)
        except Exception as e:
            code, _ = error_code(e)
            if code == "ValidationException" and "status" in str(e):
                # "... is in status Completed": it ended before the stop reached it, nothing to stop (it
                # failed the task for good, after a training that succeeded).
                return
            raise aws_error(
                e,
                f"cannot stop SageMaker training job {job_id!r}",
                "check the connection's permissions (sagemaker:StopTrainingJob)",
            ) from e

    def logs(self, job_id: str, tail: int = 20) -> str:
        job = self._describe(job_id) or {}
        lines = [
            f"{t.get('Status')}: {t.get('StatusMessage', '')}"
            for t in job.get("SecondaryStatusTransitions", [])
        ]
        if job.get("FailureReason"):
            lines.append(f"FailureReason: {job['FailureReason']}")
        return "\n".join(lines[-tail:])
