"""SageMaker and Batch backends: request shapes and status handling against moto's server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from remote_support import aws_client, make_batch_queues
from services import late_first_answer

from costaware.adapters.compute import batch, sagemaker
from costaware.adapters.compute.base import (
    ComputeBackend,
    JobRequest,
    JobState,
    check_backend_options,
    open_backend,
)
from costaware.core.errors import ConfigurationError

ROLE = "arn:aws:iam::123456789012:role/train"


def request(market: str = "spot", **kwargs: Any) -> JobRequest:
    args: dict[str, Any] = {
        "job_name": f"train-0123456789-a1-{market.replace('_', '')}",
        "spec_uri": "s3://ml/jobs/spec.json",
        "market": market,
        "instance_type": "ml.m5.xlarge",
        "checkpoint_uri": "s3://ml/ckpt/dag/train/run",
        "max_runtime_seconds": 3600,
        "max_wait_seconds": 7200,
        **kwargs,
    }
    return JobRequest(**args)


# -- SageMaker -------------------------------------------------------------------------------------------


def sagemaker_backend() -> ComputeBackend:
    return open_backend(
        "sagemaker",
        {
            "role_arn": ROLE,
            "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/costaware:1",
            "output_s3_uri": "s3://ml/out",
            "aws_conn_id": "moto_aws",
        },
    )


def test_sagemaker_spot_request_shape() -> None:
    config = sagemaker.training_job_request(
        request(max_wait_seconds=1800), role_arn=ROLE, image_uri="img", output_s3_uri="s3://ml/out"
    )
    assert config["EnableManagedSpotTraining"] is True
    # MaxWait covers wait + run and may not be below MaxRuntime
    assert config["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 3600}
    assert config["CheckpointConfig"] == {
        "S3Uri": "s3://ml/ckpt/dag/train/run",
        "LocalPath": "/opt/ml/checkpoints",
    }
    algo = config["AlgorithmSpecification"]
    # The built-in trainers run under the launcher too; SageMaker syncs the checkpoint folder itself.
    assert algo["ContainerEntrypoint"] == ["costaware-run", "--no-sync", "--no-outputs", "--"]
    assert algo["ContainerArguments"] == [
        "python",
        "-m",
        "costaware.training.entrypoint",
        "--spec",
        "s3://ml/jobs/spec.json",
    ]
    assert config["Environment"] == {
        "COSTAWARE_CHECKPOINT_DIR": "/opt/ml/checkpoints",
        "COSTAWARE_CHECKPOINT_URI": "s3://ml/ckpt/dag/train/run",
        "COSTAWARE_METRICS_PATH": "/opt/ml/costaware/metrics.json",
        "COSTAWARE_ATTEMPT": "1",
        "COSTAWARE_MARKET": "spot",
        "COSTAWARE_GRACE_SECONDS": "110",
    }
    on_demand = sagemaker.training_job_request(
        request("on_demand"), role_arn=ROLE, image_uri="img", output_s3_uri="s3://ml/out"
    )
    assert "EnableManagedSpotTraining" not in on_demand
    assert "MaxWaitTimeInSeconds" not in on_demand["StoppingCondition"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"instance_type": "m5.xlarge"}, "must be an ml.* type"),
        (
            {"checkpoint_uri": "/local/ckpt"},
            "SageMaker jobs need an s3:// checkpoint_store, got '/local/ckpt'",
        ),
    ],
)
def test_sagemaker_bad_requests(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        sagemaker.training_job_request(
            request(**kwargs), role_arn=ROLE, image_uri="i", output_s3_uri="s3://o"
        )


def test_sagemaker_submit_is_idempotent_and_polls_through_moto(aws: str) -> None:
    backend = sagemaker_backend()
    spot = request()
    assert backend.submit(spot) == backend.submit(spot) == spot.job_name
    described = aws_client("sagemaker", aws).describe_training_job(TrainingJobName=spot.job_name)
    assert described["EnableManagedSpotTraining"] is True
    assert described["CheckpointConfig"]["S3Uri"] == "s3://ml/ckpt/dag/train/run"
    assert described["StoppingCondition"]["MaxWaitTimeInSeconds"] == 7200
    status = backend.poll(spot.job_name)
    # moto completes training jobs at once and reports no BillableTimeInSeconds
    assert (status.state, status.market, status.instance_type) == (JobState.SUCCEEDED, "spot", "ml.m5.xlarge")
    assert status.billable_seconds == 0.0


@pytest.mark.parametrize(
    ("description", "state", "seconds"),
    [
        ({"TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting"}, JobState.PENDING, 0.0),
        ({"TrainingJobStatus": "InProgress", "SecondaryStatus": "Training"}, JobState.RUNNING, 0.0),
        ({"TrainingJobStatus": "InProgress", "SecondaryStatus": "Interrupted"}, JobState.RUNNING, 0.0),
        (
            {"TrainingJobStatus": "Completed", "SecondaryStatus": "Completed", "BillableTimeInSeconds": 300},
            JobState.SUCCEEDED,
            600.0,
        ),
        (
            {"TrainingJobStatus": "Failed", "SecondaryStatus": "MaxWaitTimeExceeded"},
            JobState.INTERRUPTED,
            0.0,
        ),
        (
            {"TrainingJobStatus": "Failed", "SecondaryStatus": "Failed", "FailureReason": "x"},
            JobState.FAILED,
            0.0,
        ),
        ({"TrainingJobStatus": "Stopped", "SecondaryStatus": "Stopped"}, JobState.INTERRUPTED, 0.0),
    ],
)
def test_sagemaker_status_mapping(description: dict[str, Any], state: JobState, seconds: float) -> None:
    job = {"TrainingJobName": "j", "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2}}
    status = sagemaker.status_from_description({**job, **description})
    assert (status.state, status.billable_seconds) == (state, seconds)


def test_a_running_sagemaker_job_is_given_the_time_since_its_training_started() -> None:
    # SageMaker reports no billable time until a job ends: a stop billed it from the submit, its wait for
    # capacity included, or (on an Airflow retry) from the retry's own submit, hours short.
    from datetime import datetime, timezone

    started = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    job = {
        "TrainingJobName": "j",
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2},
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training",
        "TrainingStartTime": started,
    }
    now = started.timestamp() + 600
    assert sagemaker.status_from_description(job, now=now).billable_seconds == 1200.0  # 2 instances
    stopping = {**job, "TrainingJobStatus": "Stopping", "SecondaryStatus": "Stopping"}
    assert sagemaker.status_from_description(stopping, now=now).billable_seconds == 1200.0
    waiting = {**job, "SecondaryStatus": "Starting"}  # not started on its instances: nothing billed yet
    assert sagemaker.status_from_description(waiting, now=now).billable_seconds == 0.0
    ended = {**job, "TrainingJobStatus": "Completed", "BillableTimeInSeconds": 300}  # AWS's own figure
    assert sagemaker.status_from_description(ended, now=now).billable_seconds == 600.0
    as_text = {**job, "TrainingStartTime": "2026-01-01T12:00:00"}  # no zone: UTC, as AWS keeps it
    assert sagemaker.status_from_description(as_text, now=now).billable_seconds == 1200.0
    unreadable = {**job, "TrainingStartTime": "soon"}  # no figure rather than a failed stop
    assert sagemaker.status_from_description(unreadable, now=now).billable_seconds == 0.0


def test_an_ended_sagemaker_job_without_billable_time_is_billed_from_its_start_to_its_end() -> None:
    # moto (and an ended job AWS leaves the field out of) reports no BillableTimeInSeconds: billed 0 s.
    from datetime import datetime, timedelta, timezone

    started = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    job = {
        "TrainingJobName": "j",
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2},
        "TrainingStartTime": started,
        "TrainingEndTime": started + timedelta(seconds=300),
    }
    for ended in ("Completed", "Stopped", "Failed"):
        status = sagemaker.status_from_description({**job, "TrainingJobStatus": ended}, now=0.0)
        assert status.billable_seconds == 600.0, ended  # 2 instances
    reported = {**job, "TrainingJobStatus": "Completed", "BillableTimeInSeconds": 100}  # spot: AWS's figure
    assert sagemaker.status_from_description(reported).billable_seconds == 200.0
    never_trained = {k: v for k, v in job.items() if k != "TrainingStartTime"}
    assert (
        sagemaker.status_from_description({**never_trained, "TrainingJobStatus": "Failed"}).billable_seconds
        == 0
    )
    # A success trained: with no start either, it was billed 0 s; from its creation, the most it ran.
    created = {**never_trained, "CreationTime": started - timedelta(seconds=60)}
    completed = sagemaker.status_from_description({**created, "TrainingJobStatus": "Completed"})
    assert completed.billable_seconds == 2 * 360
    no_end = {k: v for k, v in created.items() if k != "TrainingEndTime"}
    modified = {
        **no_end,
        "TrainingJobStatus": "Completed",
        "LastModifiedTime": started + timedelta(seconds=40),
    }
    assert sagemaker.status_from_description(modified).billable_seconds == 2 * 100
    failed = sagemaker.status_from_description({**created, "TrainingJobStatus": "Failed"})
    assert failed.billable_seconds == 0  # may never have trained (no capacity): nothing billed


def test_time_added_to_a_multi_instance_jobs_billed_seconds_counts_every_instance() -> None:
    # A SageMaker job's billed seconds are instance-seconds: the time since a stopped job was last seen
    # (billed up to now when the backend lost it) was added once, a quarter of it on 4 instances.
    from datetime import datetime, timedelta, timezone

    from costaware.adapters.compute.base import billed_instances
    from costaware.triggers.remote_training import stopped_job_status

    seen_at = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    seen = {"job_id": "j", "state": "running", "billable_seconds": 400.0, "market": "spot"}
    stopped = {"job": seen, "seen_at": seen_at.isoformat()}
    count = billed_instances({"instance_count": 4})
    ended = stopped_job_status(stopped, now=seen_at + timedelta(seconds=30), instances=count)
    assert (count, ended.billable_seconds) == (4, 400.0 + 4 * 30)
    assert billed_instances({}) == billed_instances({"instance_count": None}) == 1


# -- Batch -----------------------------------------------------------------------------------------------


@pytest.fixture
def batch_queues(aws: str) -> dict[str, str]:
    """A SPOT and an EC2 compute environment with a queue each, and a job definition, on moto (no Docker)."""
    return make_batch_queues(aws)


@pytest.mark.parametrize("stop_after", [None, 900])
def test_batch_retries_nothing_itself_so_no_job_outruns_its_time_limit(stop_after: int | None) -> None:
    # Each Batch attempt gets the whole attemptDurationSeconds again: with reclaim_retries=2 a job limited
    # to 900 s could run 2700 s. Under max_usd or not, the operator resubmits with the time that is left.
    limited = request(max_runtime_seconds=900, stop_after_seconds=stop_after, instance_type="m5.large")
    body = batch.submit_job_request(limited, spot_queue="spot-q", on_demand_queue="od-q", job_definition="t")
    # Set, not left out: the job definition's own retryStrategy would apply.
    assert body["retryStrategy"] == {"attempts": 1}
    assert body["timeout"] == {"attemptDurationSeconds": 900}


def test_reclaim_retries_still_load_and_are_said_to_be_unused_at_each_submit(
    aws: str, batch_queues: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    backend = open_backend("batch", {**batch_queues, "aws_conn_id": "moto_aws", "reclaim_retries": 2})
    with caplog.at_level(logging.WARNING):
        backend.submit(request(instance_type="m5.large", max_runtime_seconds=900))
    assert "reclaim_retries=2 is not used" in caplog.text and "3 times max_runtime" in caplog.text


def test_batch_request_shape() -> None:
    body = batch.submit_job_request(
        request(instance_type="m5.large"), spot_queue="spot-q", on_demand_queue="od-q", job_definition="train"
    )
    assert body["jobQueue"] == "spot-q"
    assert body["containerOverrides"]["command"] == [
        "costaware-run",
        "--no-outputs",
        "--",
        "python",
        "-m",
        "costaware.training.entrypoint",
        "--spec",
        "s3://ml/jobs/spec.json",
    ]
    assert {"name": "COSTAWARE_CHECKPOINT_URI", "value": "s3://ml/ckpt/dag/train/run"} in body[
        "containerOverrides"
    ]["environment"]
    od = batch.submit_job_request(
        request("on_demand", instance_type="m5.large"),
        spot_queue="s",
        on_demand_queue="od-q",
        job_definition="t",
    )
    assert od["jobQueue"] == "od-q"


def test_batch_missing_queue_names_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="Batch backend needs spot_queue, on_demand_queue: set them"):
        open_backend("batch", {"job_definition": "train"})


def test_batch_reclaim_retries_are_read_as_a_templated_count_and_a_bad_one_named() -> None:
    # A template renders "2", refused; True was taken as one retry. Refused at the task's start (before its
    # money) and at the submit (before any request), not where a running job's backend is opened.
    queues = {"spot_queue": "s", "on_demand_queue": "o", "job_definition": "d"}
    check_backend_options("batch", {**queues, "reclaim_retries": "2"})
    assert batch.check_number_options({"reclaim_retries": "2"}) == (2, 30)
    for bad in (True, "two", 10, -1):
        given = {**queues, "reclaim_retries": bad}
        for refuse in (
            lambda given=given: check_backend_options("batch", given),
            lambda given=given: open_backend("batch", given).submit(request(instance_type="m5.large")),
        ):
            with pytest.raises(
                ConfigurationError, match=rf"reclaim_retries must be a whole number from 0 to 9, got {bad!r}"
            ):
                refuse()


def test_batch_submit_poll_and_idempotence_through_moto(aws: str, batch_queues: dict[str, str]) -> None:
    backend = open_backend("batch", {**batch_queues, "aws_conn_id": "moto_aws"})
    spot = request(instance_type="m5.large")
    job_id = backend.submit(spot)
    assert backend.submit(spot) == job_id  # a retry finds the job by name
    submitted = aws_client("batch", aws).describe_jobs(jobs=[job_id])["jobs"][0]
    assert submitted["jobQueue"].endswith(batch_queues["spot_queue"])
    status = backend.poll(job_id)
    # moto's batch_simple runs the job at once and marks it SUCCEEDED
    assert (status.state, status.market, status.instance_type) == (JobState.SUCCEEDED, "spot", "m5.large")
    assert status.billable_seconds >= 0
    od = backend.submit(request("on_demand", instance_type="m5.large"))
    assert od != job_id and backend.poll(od).market == "on_demand"


def test_a_missing_spot_queue_is_named_on_an_on_demand_submit(aws: str, batch_queues: dict[str, str]) -> None:
    # The look-up of an earlier submit reads every queue: a missing spot queue was blamed on the on-demand
    # queue the request was for ("check on_demand_queue").
    backend = open_backend(
        "batch", {**batch_queues, "spot_queue": "no-such-queue", "aws_conn_id": "moto_aws"}
    )
    with pytest.raises(ConfigurationError) as refused:
        backend.submit(request("on_demand", instance_type="m5.large"))
    message = str(refused.value)
    assert "in job queue 'no-such-queue'" in message and "check spot_queue in backend_options" in message
    assert "on_demand_queue" not in message


@pytest.mark.parametrize(
    ("grace", "stop_timeout", "given"), [(110, 30, "20"), (110, 120, "110"), (5, 8, "1")]
)
def test_the_launchers_grace_period_ends_before_ecs_kills_the_container(
    grace: float, stop_timeout: float, given: str
) -> None:
    # The launcher was told 110 s while ECS kills the container 30 s after SIGTERM: its save and its last
    # push were cut. It ends 10 s before the kill, as on Kubernetes, to push what it saved.
    from costaware.adapters.compute.job_contract import GRACE_SECONDS

    body = batch.submit_job_request(
        request(instance_type="m5.large", grace_seconds=grace),
        spot_queue="spot-q",
        on_demand_queue="od-q",
        job_definition="train",
        stop_timeout_seconds=stop_timeout,
    )
    env = {e["name"]: e["value"] for e in body["containerOverrides"]["environment"]}
    assert env[GRACE_SECONDS] == given


def test_a_grace_period_longer_than_the_ecs_stop_timeout_is_said_at_submit(
    aws: str, batch_queues: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # ECS kills a Batch container 30 s after SIGTERM by default: a 110 s grace would have its save cut.
    backend = open_backend("batch", {**batch_queues, "aws_conn_id": "moto_aws"})
    with caplog.at_level(logging.WARNING):
        backend.submit(request(instance_type="m5.large", grace_seconds=110))
    assert (
        "preemption_grace_seconds 110 does not fit the 30 s ECS gives a Batch container from SIGTERM to "
        "SIGKILL: the job's command gets 20 s to save, and the launcher 10 s more to push it"
    ) in caplog.text
    caplog.clear()
    raised = open_backend("batch", {**batch_queues, "aws_conn_id": "moto_aws", "stop_timeout_seconds": 120})
    with caplog.at_level(logging.WARNING):
        raised.submit(request("on_demand", instance_type="m5.large", grace_seconds=110))
    assert "ECS gives" not in caplog.text


@pytest.mark.parametrize(
    ("job", "seconds"),
    [
        ({"status": "RUNNING", "startedAt": 40_000}, 60.0),
        ({"status": "RUNNABLE", "startedAt": 40_000}, 0.0),  # waiting in the queue: not running
        # Retried inside Batch after a reclaim: the stopped attempt, then the run since it stopped.
        (
            {
                "status": "RUNNING",
                "startedAt": 1_000,
                "attempts": [{"startedAt": 1_000, "stoppedAt": 31_000, "statusReason": "Host EC2 ..."}],
            },
            30.0 + 69.0,
        ),
    ],
)
def test_a_running_batch_job_is_given_the_time_since_it_started_running(
    job: dict[str, Any], seconds: float
) -> None:
    # Batch lists an attempt only once it stopped: a stop billed a running job from its submit instead.
    status = batch.status_from_description({"jobId": "j", **job}, "spot", "m5.large", now_ms=100_000)
    assert status.billable_seconds == seconds


@pytest.mark.parametrize(
    ("job", "state", "seconds"),
    [
        ({"status": "RUNNABLE"}, JobState.PENDING, 0.0),
        ({"status": "RUNNING"}, JobState.RUNNING, 0.0),
        (
            {
                "status": "FAILED",
                "attempts": [
                    {
                        "startedAt": 1000,
                        "stoppedAt": 61000,
                        "statusReason": "Host EC2 (instance i-1) terminated.",
                    },
                    {
                        "startedAt": 70000,
                        "stoppedAt": 100000,
                        "statusReason": "Host EC2 (instance i-2) terminated.",
                    },
                ],
            },
            JobState.INTERRUPTED,
            90.0,
        ),
        (
            {
                "status": "FAILED",
                "attempts": [{"startedAt": 0, "stoppedAt": 5000, "container": {"exitCode": 2}}],
            },
            JobState.FAILED,
            5.0,
        ),
        ({"status": "SUCCEEDED", "startedAt": 0, "stoppedAt": 2500}, JobState.SUCCEEDED, 2.5),
    ],
)
def test_batch_status_mapping(job: dict[str, Any], state: JobState, seconds: float) -> None:
    status = batch.status_from_description({"jobId": "j", **job}, "spot", "m5.large")
    assert (status.state, status.billable_seconds) == (state, seconds)
    # When it stopped (the last attempt's end, epoch seconds): what the price over its run is read up to.
    stops = [a["stoppedAt"] for a in [*job.get("attempts", []), job] if "stoppedAt" in a]
    assert status.ended_at == (max(stops) / 1000 if stops else None)


def test_stopping_a_sagemaker_job_that_already_ended_is_nothing_to_do(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AWS refuses StopTrainingJob on an ended job (ValidationException "... is in status Completed"): read
    # as a configuration error, it failed the task for good after a training that succeeded.
    from botocore.stub import Stubber

    backend = sagemaker_backend()
    client = backend.client  # type: ignore[attr-defined]
    monkeypatch.setattr(type(backend), "client", property(lambda self: client))
    with Stubber(client) as stub:
        stub.add_client_error(
            "stop_training_job",
            service_error_code="ValidationException",
            service_message="The request was rejected because the training job is in status Completed.",
            http_status_code=400,
        )
        backend.stop("j")  # no error
        stub.add_client_error(
            "stop_training_job", service_error_code="AccessDeniedException", http_status_code=403
        )
        with pytest.raises(ConfigurationError, match="sagemaker:StopTrainingJob"):
            backend.stop("j")


def test_a_sagemaker_job_waiting_again_after_an_interruption_is_billed_from_its_first_start() -> None:
    # Pending again after a spot interruption, it read 0 s: the on-demand fallback stopped it unbilled.
    from datetime import datetime, timezone

    started = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    job = {
        "TrainingJobName": "j",
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1},
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Starting",
        "TrainingStartTime": started,
        "SecondaryStatusTransitions": [
            {"Status": "Training"},
            {"Status": "Interrupted"},
            {"Status": "Starting"},
        ],
    }
    status = sagemaker.status_from_description(job, now=started.timestamp() + 3 * 3600)
    assert (status.state, status.billable_seconds) == (JobState.PENDING, 10800.0)


@pytest.mark.parametrize(
    "reason",
    [
        "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML "
        "instance type.",
        "InternalServerError: We encountered an internal error. Please try again.",
    ],
)
def test_a_sagemaker_job_that_failed_on_aws_side_may_run_again(reason: str) -> None:
    # Read as a code error, it failed the task for good at the on-demand fallback, when capacity is short.
    job = {
        "TrainingJobName": "j",
        "TrainingJobStatus": "Failed",
        "SecondaryStatus": "Failed",
        "FailureReason": reason,
    }
    assert sagemaker.status_from_description(job).state == JobState.INTERRUPTED


@pytest.mark.parametrize(
    ("reason", "state", "exit_code"),
    [
        ("AlgorithmError: , exit code: 74", JobState.INTERRUPTED, 74),  # a store the launcher could not reach
        ("AlgorithmError: , exit code: 75", JobState.INTERRUPTED, 75),
        ("AlgorithmError: Exit Code: 127", JobState.FAILED, 127),  # an older job's spelling
        ("AlgorithmError: , exit code: 1", JobState.FAILED, 1),
        ("AlgorithmError: framework error: Traceback ...", JobState.FAILED, None),
    ],
)
def test_a_sagemaker_jobs_exit_code_is_read_as_the_job_contract_says(
    reason: str, state: JobState, exit_code: int | None
) -> None:
    # Read as none, a launcher's exit 74 failed the task for good where Batch and Kubernetes resubmit it,
    # and a failed task's message had no hint of what its exit code means (127: command not found).
    job = {"TrainingJobName": "j", "TrainingJobStatus": "Failed", "SecondaryStatus": "Failed"}
    status = sagemaker.status_from_description({**job, "FailureReason": reason})
    assert (status.state, status.exit_code) == (state, exit_code)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"instance_count": "two"}, "instance_count must be a whole number from 1 to 1000, got 'two'"),
        ({"volume_size_gb": -5}, "volume_size_gb must be a whole number from 1 to 16384, got -5"),
        ({"instance_count": 1.5}, r"instance_count must be a whole number from 1 to 1000, got 1\.5"),
    ],
)
def test_sagemaker_number_options_are_checked_naming_them(
    aws: str, options: dict[str, Any], message: str
) -> None:
    # A bare "invalid literal for int()" at the first bill, or nothing until AWS refused the job. Refused at
    # the task's start (before its money) and at the submit, not where a running job's backend is opened.
    base = {"role_arn": ROLE, "output_s3_uri": "s3://ml/out", "image_uri": "i", "aws_conn_id": "moto_aws"}
    given, refused = {**base, **options}, request(job_name="train-0123456789-a1-size")
    for refuse in (
        lambda: check_backend_options("sagemaker", given),
        lambda: open_backend("sagemaker", given).submit(refused),
    ):
        with pytest.raises(ConfigurationError, match=message):
            refuse()
    assert sagemaker_backend().find(refused.job_name) is None  # nothing was submitted
    # A template renders "2", or 1.0 for one instance (the spot tuning DAG takes it): whole numbers all the
    # same.
    for count, taken in (("2", 2), (1.0, 1)):
        check_backend_options("sagemaker", {**base, "instance_count": count, "volume_size_gb": "50"})
        assert sagemaker.job_size({"instance_count": count, "volume_size_gb": "50"}) == (taken, 50)


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        (
            "EPOCHS=5",
            "backend_options['environment'] of the sagemaker backend must be a dict of variable name to "
            "string value, such as {'PYTHONPATH': '/opt/ml/code'}: got the str 'EPOCHS=5'",
        ),
        (
            [("EPOCHS", "5")],
            "backend_options['environment'] of the sagemaker backend must be a dict of variable name to "
            "string value, such as {'PYTHONPATH': '/opt/ml/code'}: got the list [('EPOCHS', '5')]",
        ),
        (
            {"EPOCHS": 5},
            "backend_options['environment'] of the sagemaker backend gives 'EPOCHS' the int 5: SageMaker "
            "takes only string values; write it as '5'",
        ),
        (
            {7: "x"},
            "backend_options['environment'] of the sagemaker backend names a variable with the int 7: "
            "SageMaker takes only string names; write it as '7'",
        ),
        (
            {"DEBUG": None},
            "backend_options['environment'] of the sagemaker backend gives 'DEBUG' None: SageMaker takes "
            "only string values; leave the variable out to have it unset, or give it a string",
        ),
        (
            {"DEBUG": False},
            "backend_options['environment'] of the sagemaker backend gives 'DEBUG' the bool False: SageMaker "
            "takes only string values; write it as the text the job reads, such as 'true' or 'false'",
        ),
    ],
)
def test_a_sagemaker_environment_that_is_no_dict_of_strings_is_refused_before_any_job(
    aws: str, environment: object, message: str
) -> None:
    # Text was a bare ValueError from dict() once the task had reserved its money, a list of pairs went
    # through as it came, and a number was refused by botocore only at the create.
    from costaware.adapters.compute.base import check_backend_options

    refused = request(job_name="train-0123456789-a1-environment")
    options = {
        "role_arn": ROLE,
        "image_uri": "i",
        "output_s3_uri": "s3://ml/out",
        "aws_conn_id": "moto_aws",
        "environment": environment,
    }
    for where, refuse in {
        "options check": lambda: check_backend_options("sagemaker", options),
        "backend": lambda: open_backend("sagemaker", options).submit(refused),
    }.items():
        with pytest.raises(ConfigurationError) as caught:
            refuse()
        assert str(caught.value) == message, where
    assert sagemaker_backend().find(refused.job_name) is None  # nothing was submitted


def test_a_sagemaker_job_an_older_release_submitted_with_environment_pairs_can_still_be_polled_and_stopped(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # dict() took a list of pairs before the environment was checked. The triggers build a running job's
    # backend from the options as written to poll, stop or find it: refused there, such a job ran on
    # unstopped and unbilled. Only a new submit of them is refused.
    from botocore.stub import Stubber

    running = request(job_name="train-0123456789-a1-pairs")
    assert sagemaker_backend().submit(running) == running.job_name  # as the older release submitted it
    options = {
        "role_arn": ROLE,
        "image_uri": "i",
        "output_s3_uri": "s3://ml/out",
        "aws_conn_id": "moto_aws",
        "environment": [["PYTHONPATH", "/x"]],
    }
    backend = open_backend("sagemaker", options)
    assert backend.poll(running.job_name).state is JobState.SUCCEEDED
    found = backend.find(running.job_name)
    assert found is not None and found.job_id == running.job_name
    refused = request(job_name="train-0123456789-a1-pairs-new")
    with pytest.raises(ConfigurationError) as caught:
        backend.submit(refused)
    assert str(caught.value) == (
        "backend_options['environment'] of the sagemaker backend must be a dict of variable name to string "
        "value, such as {'PYTHONPATH': '/opt/ml/code'}: got the list [['PYTHONPATH', '/x']]"
    )
    assert backend.find(refused.job_name) is None  # nothing was submitted
    client = backend.client  # type: ignore[attr-defined]
    monkeypatch.setattr(type(backend), "client", property(lambda self: client))
    with Stubber(client) as stub:  # moto's server has no StopTrainingJob
        stub.add_response("stop_training_job", {}, {"TrainingJobName": running.job_name})
        backend.stop(running.job_name)
        stub.assert_no_pending_responses()


def test_a_sagemaker_environment_of_strings_reaches_the_job(aws: str) -> None:
    options = {
        "role_arn": ROLE,
        "image_uri": "i",
        "output_s3_uri": "s3://ml/out",
        "aws_conn_id": "moto_aws",
        "environment": {"EPOCHS": "5"},
    }
    backend = open_backend("sagemaker", options)
    config = sagemaker.training_job_request(
        request(), role_arn=ROLE, image_uri="i", output_s3_uri="s3://ml/out", environment=backend.environment
    )
    assert config["Environment"]["EPOCHS"] == "5"  # moto's server keeps no Environment to describe
    assert backend.submit(request()) == request().job_name


def test_a_sagemaker_create_whose_job_was_taken_after_all_returns_that_job(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The create's answer was lost and botocore sent it again: SageMaker refused the name as taken
    # (ResourceInUse), read as a bad request that failed the task for good and stopped its job.
    from datetime import datetime

    from botocore.stub import Stubber

    backend = sagemaker_backend()
    client = backend.client  # type: ignore[attr-defined]
    monkeypatch.setattr(type(backend), "client", property(lambda self: client))
    spot = request()
    taken = {
        "TrainingJobName": spot.job_name,
        "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{spot.job_name}",
        "AlgorithmSpecification": {"TrainingInputMode": "File"},
        "ModelArtifacts": {"S3ModelArtifacts": "s3://ml/out"},
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Starting",
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "StoppingCondition": {},
        "CreationTime": datetime(2026, 1, 1),
    }

    def not_found(stub: Stubber) -> None:
        stub.add_client_error(
            "describe_training_job",
            service_error_code="ValidationException",
            service_message="Requested resource not found.",
        )

    with Stubber(client) as stub:
        not_found(stub)
        stub.add_client_error(
            "create_training_job",
            service_error_code="ResourceInUse",
            service_message="a training job with this name already exists",
        )
        stub.add_response("describe_training_job", taken)
        assert backend.submit(spot) == spot.job_name
        # A create refused for what it asks, with no job taken, still fails without retry.
        not_found(stub)
        stub.add_client_error(
            "create_training_job", service_error_code="ValidationException", service_message="bad role"
        )
        not_found(stub)
        with pytest.raises(ConfigurationError, match="ValidationException: bad role"):
            backend.submit(spot)


def slow_connection(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> str:
    """The AWS connection ``slow_aws`` to ``endpoint`` with a one-second read timeout; returns its id."""
    conn = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {
            "region_name": "us-east-1",
            "endpoint_url": endpoint,
            "config_kwargs": {
                "read_timeout": 1,
                "connect_timeout": 1,
                "retries": {"mode": "standard", "total_max_attempts": 3},
            },
        },
    }
    monkeypatch.setenv("AIRFLOW_CONN_SLOW_AWS", json.dumps(conn))
    return "slow_aws"


def test_a_batch_submit_whose_every_answer_was_lost_leaves_one_job_to_its_retry(
    aws: str, batch_queues: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Each SubmitJob botocore sent was taken, none answered in time: the submit failed (retried), and the
    # retry followed one of the jobs while the others ran on, unwatched and unbilled.
    from costaware.core.errors import ComputeBackendError

    spot = request(instance_type="m5.large")
    with late_first_answer(aws, "/v1/submitjob", seconds=2, times=100) as proxy:
        slow = open_backend("batch", {**batch_queues, "aws_conn_id": slow_connection(monkeypatch, proxy)})
        with pytest.raises(ComputeBackendError, match="cannot submit Batch job"):
            slow.submit(spot)
    client = aws_client("batch", aws)
    named = [{"name": "JOB_NAME", "values": [spot.job_name]}]
    taken = client.list_jobs(jobQueue=batch_queues["spot_queue"], filters=named)["jobSummaryList"]
    assert len(taken) == 3  # the call and botocore's two retries of it
    backend = open_backend("batch", {**batch_queues, "aws_conn_id": "moto_aws"})
    with caplog.at_level(logging.WARNING):
        followed = backend.submit(spot)  # the Airflow retry
    assert followed == max(taken, key=lambda job: job["createdAt"])["jobId"]
    others = [job["jobId"] for job in taken if job["jobId"] != followed]
    reasons = {job["statusReason"] for job in client.describe_jobs(jobs=others)["jobs"]}
    assert reasons == {f"a second submit of costaware job {spot.job_name} (it runs as {followed})"}
    assert f"terminated the copies {', '.join(others)}" in caplog.text or all(
        o in caplog.text for o in others
    )


def test_a_batch_submit_botocore_sent_again_leaves_one_job_running(
    aws: str, batch_queues: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Batch takes a second job of the same name: the submit whose answer came after the read timeout, sent
    # again by botocore, ran a second job nobody watched, stopped or billed.
    spot = request(instance_type="m5.large")
    with late_first_answer(aws, "/v1/submitjob", seconds=3) as proxy:
        backend = open_backend("batch", {**batch_queues, "aws_conn_id": slow_connection(monkeypatch, proxy)})
        with caplog.at_level(logging.WARNING):
            job_id = backend.submit(spot)
    client = aws_client("batch", aws)
    named = [{"name": "JOB_NAME", "values": [spot.job_name]}]
    jobs = client.list_jobs(jobQueue=batch_queues["spot_queue"], filters=named)["jobSummaryList"]
    copies = [job["jobId"] for job in jobs if job["jobId"] != job_id]
    assert len(copies) == 1  # the submit reached Batch twice
    # moto ends its jobs at once: the stop shows in the reason it keeps (AWS ignores a stop of an ended job).
    stopped = client.describe_jobs(jobs=copies)["jobs"][0]
    assert (
        stopped["statusReason"] == f"a second submit of costaware job {spot.job_name} (it runs as {job_id})"
    )
    assert f"terminated the copies {copies[0]}; it runs as {job_id}" in caplog.text


@pytest.mark.parametrize("value", ["nan", "inf", -30, 0, "thirty"])
def test_a_batch_stop_timeout_that_is_no_number_of_seconds_is_named(value: object) -> None:
    # "inf" sized the stop of every max_usd cap as endless, and no attempt could start; "nan" hid the
    # warning of a grace period ECS cuts. Refused at the task's start and at the submit.
    queues = {"spot_queue": "s", "on_demand_queue": "o", "job_definition": "d"}
    given = {**queues, "stop_timeout_seconds": value}
    for refuse in (
        lambda: check_backend_options("batch", given),
        lambda: open_backend("batch", given).submit(request(instance_type="m5.large")),
    ):
        with pytest.raises(
            ConfigurationError, match=rf"stop_timeout_seconds must be a number of seconds > 0 .*got {value!r}"
        ):
            refuse()
    check_backend_options("batch", {**queues, "stop_timeout_seconds": "110"})
    assert batch.check_number_options({"stop_timeout_seconds": "110"}) == (0, 110)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"reclaim_retries": 10},
            "backend option reclaim_retries must be a whole number from 0 to 9, got 10",
        ),
        (
            {"stop_timeout_seconds": "inf"},
            "stop_timeout_seconds must be a number of seconds > 0 (the compute environment's "
            "ECS_CONTAINER_STOP_TIMEOUT), got 'inf'",
        ),
    ],
)
def test_a_batch_job_an_older_release_submitted_with_numbers_it_took_can_still_be_polled_and_stopped(
    aws: str, batch_queues: dict[str, str], options: dict[str, Any], message: str
) -> None:
    # The triggers build a running job's backend from its options as written to poll, stop or find it:
    # refused there, such a job ran on unstopped and unbilled. Only a new submit of them is refused.
    running = request(instance_type="m5.large", job_name="train-0123456789-a1-numbers")
    job_id = open_backend("batch", {**batch_queues, "aws_conn_id": "moto_aws"}).submit(running)
    given = {**batch_queues, "aws_conn_id": "moto_aws", **options}
    backend = open_backend("batch", given)
    assert backend.poll(job_id).market == "spot"
    found = backend.find(running.job_name)
    assert found is not None and found.job_id == job_id
    backend.stop(job_id)
    refused = request(instance_type="m5.large", job_name="train-0123456789-a1-numbers-new")
    for where, refuse in {
        "options check": lambda: check_backend_options("batch", given),
        "backend": lambda: backend.submit(refused),
    }.items():
        with pytest.raises(ConfigurationError) as caught:
            refuse()
        assert str(caught.value) == message, where
    assert backend.find(refused.job_name) is None  # nothing was submitted


def test_a_sagemaker_job_an_older_release_submitted_with_a_size_it_took_can_still_be_polled_and_stopped(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # int() took 1.5 instances as one; the triggers open a running job's backend from its options as written.
    from botocore.stub import Stubber

    running = request(job_name="train-0123456789-a1-size-old")
    assert sagemaker_backend().submit(running) == running.job_name  # as the older release submitted it
    options = {"role_arn": ROLE, "image_uri": "i", "output_s3_uri": "s3://ml/out", "aws_conn_id": "moto_aws"}
    backend = open_backend("sagemaker", {**options, "instance_count": 1.5})
    assert backend.poll(running.job_name).state is JobState.SUCCEEDED
    found = backend.find(running.job_name)
    assert found is not None and found.job_id == running.job_name
    refused = request(job_name="train-0123456789-a1-size-new")
    with pytest.raises(ConfigurationError) as caught:
        backend.submit(refused)
    assert str(caught.value) == "backend option instance_count must be a whole number from 1 to 1000, got 1.5"
    assert backend.find(refused.job_name) is None  # nothing was submitted
    client = backend.client  # type: ignore[attr-defined]
    monkeypatch.setattr(type(backend), "client", property(lambda self: client))
    with Stubber(client) as stub:  # moto's server has no StopTrainingJob
        stub.add_response("stop_training_job", {}, {"TrainingJobName": running.job_name})
        backend.stop(running.job_name)
        stub.assert_no_pending_responses()


def test_a_batch_job_that_never_ran_its_container_says_so_in_its_log_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # moto's server, without Docker, ends every job FAILED with no reason and no exit code: the task failed
    # with "last log lines: attempt 1:  exit None", which said nothing of why.
    backend = open_backend(
        "batch", {"spot_queue": "s", "on_demand_queue": "o", "job_definition": "d", "aws_conn_id": "moto_aws"}
    )
    never_ran = {"status": "FAILED", "attempts": [{"container": {"taskArn": "t"}, "startedAt": 1}]}
    ran = {
        "status": "FAILED",
        "statusReason": "Essential container in task exited",
        "attempts": [{"container": {"exitCode": 1}, "statusReason": "Essential container in task exited"}],
    }
    jobs = {"never-ran": never_ran, "ran": ran}
    monkeypatch.setattr(type(backend), "_describe", lambda self, job_id: jobs[job_id])
    assert backend.logs("never-ran").splitlines() == [
        "attempt 1: Batch gave no reason; no exit code: its container never ran or was not seen to end (an "
        "image that could not be pulled, a stand-in such as moto's server that runs no container)",
        "FAILED: Batch gave no reason",
    ]
    assert backend.logs("ran").splitlines() == [
        "attempt 1: Essential container in task exited; exit 1",
        "FAILED: Essential container in task exited",
    ]


def test_the_copies_a_resent_submit_left_are_billed_with_the_job(
    aws: str, batch_queues: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The copies were terminated, but the seconds each ran before its stop were billed to nobody.
    spot = request(instance_type="m5.large")
    with late_first_answer(aws, "/v1/submitjob", seconds=3) as proxy:
        backend = open_backend("batch", {**batch_queues, "aws_conn_id": slow_connection(monkeypatch, proxy)})
        job_id = backend.submit(spot)
    # Another run's job of the same name, stopped for another reason, is not this job's copy.
    client = aws_client("batch", aws)
    queue, definition = batch_queues["spot_queue"], batch_queues["job_definition"]
    other = client.submit_job(jobName=spot.job_name, jobQueue=queue, jobDefinition=definition)["jobId"]
    client.terminate_job(jobId=other, reason="stopped by costaware (see the Airflow task log)")
    status = open_backend("batch", {**batch_queues, "aws_conn_id": "moto_aws"}).poll(job_id)
    assert status.metrics["batch_copies"] == 1
    assert "billed with 1 copy of its submit" in status.reason
    # The copy is tagged as one before its stop: on AWS the stop's reason shows only once it has stopped.
    named = client.list_jobs(jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [spot.job_name]}])
    ids = [j["jobId"] for j in named["jobSummaryList"] if j["jobId"] not in (job_id, other)]
    (copy,) = client.describe_jobs(jobs=ids)["jobs"]
    assert copy["tags"][batch.COPY_OF_TAG] == job_id


def test_a_copy_still_shutting_down_is_billed_with_the_jobs_last_poll(
    aws: str, batch_queues: dict[str, str]
) -> None:
    # On AWS a terminated copy's reason shows only once it has stopped: a copy still shutting down at the
    # job's last poll was counted at no later poll, billed to nobody. Its tag, set before its stop, counts.
    spot = request(instance_type="m5.large")
    options = {**batch_queues, "aws_conn_id": "moto_aws"}
    job_id = open_backend("batch", options).submit(spot)
    client = aws_client("batch", aws)
    queue, definition = batch_queues["spot_queue"], batch_queues["job_definition"]
    # What Batch shows of a copy between its tag and its stopped state: the tag, no reason yet.
    shutting_down = client.submit_job(
        jobName=spot.job_name, jobQueue=queue, jobDefinition=definition, tags={batch.COPY_OF_TAG: job_id}
    )["jobId"]
    assert client.describe_jobs(jobs=[shutting_down])["jobs"][0].get("statusReason") is None
    # A copy of another job is not this job's.
    client.submit_job(
        jobName=spot.job_name, jobQueue=queue, jobDefinition=definition, tags={batch.COPY_OF_TAG: "other"}
    )
    status = open_backend("batch", options).poll(job_id)
    assert status.metrics["batch_copies"] == 1 and "billed with 1 copy of its submit" in status.reason


def test_a_copys_run_is_added_to_the_jobs_billed_seconds() -> None:
    job = {"jobId": "j", "status": "SUCCEEDED", "attempts": [{"startedAt": 0, "stoppedAt": 600_000}]}
    status = batch.status_from_description(job, "spot", "m5.large")
    stopped_copy = {"jobId": "c", "status": "FAILED", "attempts": [{"startedAt": 1_000, "stoppedAt": 46_000}]}
    running_copy = {"jobId": "d", "status": "RUNNING", "startedAt": 2_000}
    billed = batch.with_copies(status, [stopped_copy, running_copy], now_ms=12_000)
    # The running copy of an ended job: up to now and ECS's default stop timeout (30 s) more.
    assert billed.billable_seconds == 600 + 45 + 10 + 30
    assert billed.metrics == {
        "batch_attempts": 1,
        "batch_copies": 2,
        "batch_copy_seconds": 85,
        "batch_copy_seconds_by_type": {"m5.large": 85},
    }
    # A copy the compute environment placed on another type: its seconds are priced at that type.
    elsewhere = {**stopped_copy, "container": {"instanceType": "m5.2xlarge"}}
    billed = batch.with_copies(status, [elsewhere, running_copy], now_ms=12_000)
    assert billed.metrics["batch_copy_seconds_by_type"] == {"m5.2xlarge": 45, "m5.large": 40}
    assert (billed.state, billed.ended_at) == (status.state, status.ended_at)  # the job's own end
    assert batch.with_copies(status, [], now_ms=12_000) == status


def test_a_copy_still_shutting_down_at_the_jobs_end_is_billed_to_its_stop_timeout() -> None:
    # The job's last poll is its bill: a copy still shutting down then (terminated, not stopped yet) was
    # billed up to that poll, though ECS lets it run until its stop timeout after the SIGTERM.
    job = {"jobId": "j", "status": "SUCCEEDED", "attempts": [{"startedAt": 0, "stoppedAt": 600_000}]}
    ended = batch.status_from_description(job, "spot", "m5.large")
    running_copy = {"jobId": "d", "status": "RUNNING", "startedAt": 2_000}
    billed = batch.with_copies(ended, [running_copy], now_ms=12_000, stop_timeout_seconds=30)
    assert billed.billable_seconds == 600 + 10 + 30
    assert billed.metrics["batch_copy_seconds_by_type"] == {"m5.large": 40}
    # While the job runs, a later poll bills the copy again: up to that poll only.
    running = batch.status_from_description({**job, "status": "RUNNING"}, "spot", "m5.large")
    assert batch.with_copies(running, [running_copy], now_ms=12_000).metrics["batch_copy_seconds"] == 10
    # A copy Batch shows stopped is billed to its stop.
    stopped_copy = {"jobId": "c", "status": "FAILED", "attempts": [{"startedAt": 1_000, "stoppedAt": 46_000}]}
    assert batch.with_copies(ended, [stopped_copy], now_ms=60_000).metrics["batch_copy_seconds"] == 45


def test_a_batch_job_not_listed_right_after_its_submit_is_polled_again(
    aws: str, batch_queues: dict[str, str]
) -> None:
    # DescribeJobs may not list a job just submitted: read as an error, five such polls failed the wait
    # with the job running on, unwatched.
    from datetime import datetime, timedelta, timezone

    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS, RemoteTrainingJobTrigger

    options = {**batch_queues, "aws_conn_id": "moto_aws"}
    with pytest.raises(JobNotFoundError, match="Batch job 'not-yet' does not exist"):
        open_backend("batch", options).poll("not-yet")
    submitted = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    current = {"attempt": 1, "job_id": "not-yet", "market": "spot", "submitted_at": submitted.isoformat()}
    watch = RemoteTrainingJobTrigger(
        backend="batch",
        backend_options=options,
        job_id="not-yet",
        state={"attempts": [], "current": current},
        poll_interval=0.01,
    )
    for seconds in (5, 30, 60, 120, 240, 480):
        assert watch.poll_tolerant(submitted + timedelta(seconds=seconds)) is None
    assert watch._poll_errors == 0
    # Bounded: never listed 10 minutes after its submit (and the wait's first poll), it is billed as gone,
    # from its submit.
    event = watch.poll_once(submitted + timedelta(seconds=5 + NOT_LISTED_GRACE_SECONDS))
    assert event is not None and event["job"]["state"] == "interrupted"


def test_a_batch_job_billed_as_never_listed_is_stopped_before_its_attempt_is_resubmitted(
    aws: str, batch_queues: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job DescribeJobs lagged on for 10 minutes was billed as gone and resubmitted without a stop: when it
    # existed after all, it ran on beside the new attempt, billed to nobody.
    from datetime import datetime, timedelta, timezone

    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS, RemoteTrainingJobTrigger

    options = {**batch_queues, "aws_conn_id": "moto_aws"}
    job_id = open_backend("batch", options).submit(request(instance_type="m5.large"))

    def lagging(self: batch.BatchBackend, job: str) -> Any:
        raise JobNotFoundError(f"Batch job {job!r} does not exist (DescribeJobs does not list it)")

    monkeypatch.setattr(batch.BatchBackend, "_describe", lagging)
    submitted = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    current = {"attempt": 1, "job_id": job_id, "market": "spot", "submitted_at": submitted.isoformat()}
    watch = RemoteTrainingJobTrigger(
        backend="batch", backend_options=options, job_id=job_id, state={"attempts": [], "current": current}
    )
    assert watch.poll_once(submitted + timedelta(seconds=60)) is None  # not listed yet: nothing stopped
    assert aws_client("batch", aws).describe_jobs(jobs=[job_id])["jobs"][0].get("statusReason") is None
    event = watch.poll_once(submitted + timedelta(seconds=60 + NOT_LISTED_GRACE_SECONDS))
    assert event is not None and event["job"]["state"] == "interrupted"
    described = aws_client("batch", aws).describe_jobs(jobs=[job_id])["jobs"][0]
    assert described["statusReason"] == "stopped by costaware (see the Airflow task log)"


def test_a_stop_of_a_job_never_listed_that_fails_still_bills_it_and_says_so(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Best effort: a stop refused (no such job after all) must not fail the wait over a job billed as gone.
    from datetime import datetime, timedelta, timezone

    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import ComputeBackendError, JobNotFoundError
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS, RemoteTrainingJobTrigger

    def gone(self: LocalBackend, job_id: str) -> Any:
        raise JobNotFoundError("not listed")

    def refused(self: LocalBackend, job_id: str) -> None:
        raise ComputeBackendError(f"no job {job_id!r}")

    monkeypatch.setattr(LocalBackend, "poll", gone)
    monkeypatch.setattr(LocalBackend, "stop", refused)
    submitted = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    current = {"attempt": 1, "job_id": "j", "market": "spot", "submitted_at": submitted.isoformat()}
    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options={"root": str(tmp_path)}, job_id="j", state={"current": current}
    )
    first = submitted + timedelta(seconds=NOT_LISTED_GRACE_SECONDS + 1)
    assert watch.poll_once(first) is None  # its own first poll: not listed yet for a grace from then
    event = watch.poll_once(first + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None and event["job"]["state"] == "interrupted"
    said = capsys.readouterr().out
    assert "stopping job j, which local does not list, failed (ComputeBackendError: no job 'j')" in said


def test_a_sagemaker_job_not_listed_is_not_listed_yet_for_the_wait(aws: str) -> None:
    # As on Batch: an error, five polls of a job just created that DescribeTrainingJob did not find yet
    # failed the wait with the job running on.
    from costaware.core.errors import JobNotFoundError

    with pytest.raises(JobNotFoundError, match="SageMaker training job 'not-yet' does not exist"):
        sagemaker_backend().poll("not-yet")


def test_a_copy_whose_stop_failed_is_stopped_again_at_each_poll_and_billed_to_its_time_limit(
    aws: str, batch_queues: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # _end_duplicates tags a copy, then stops it: a stop that failed (throttling, no batch:TerminateJob) left
    # the copy running to its attemptDurationSeconds, stopped by nobody, billed only to the job's end + 30 s.
    import time_machine
    from botocore.exceptions import ClientError

    spot = request(instance_type="m5.large")
    backend = open_backend("batch", {**batch_queues, "aws_conn_id": "moto_aws"})
    job_id = backend.submit(spot)
    client = aws_client("batch", aws)
    queue, definition = batch_queues["spot_queue"], batch_queues["job_definition"]
    copy_id = client.submit_job(jobName=spot.job_name, jobQueue=queue, jobDefinition=definition)["jobId"]
    stops: list[str] = []
    refused = {"now": False}

    def terminate(params: dict[str, Any], **_: Any) -> None:
        stops.append(params["jobId"])
        if refused["now"]:
            error = {"Code": "ThrottlingException", "Message": "Rate exceeded"}
            raise ClientError({"Error": error}, "TerminateJob")

    client.meta.events.register("before-parameter-build.batch.TerminateJob", terminate)
    monkeypatch.setattr(type(backend), "client", property(lambda self: client))
    now_ms = 1_796_083_200_000  # 2026-12-01T00:00:00Z, the polls' clock
    limit = {"attemptDurationSeconds": 3600}
    job = {
        "jobId": job_id,
        "jobName": spot.job_name,
        "jobQueue": queue,
        "status": "RUNNING",
        "startedAt": now_ms - 600_000,
        "timeout": limit,
        "tags": {"costaware:market": "spot"},
    }
    # What Batch shows of a copy whose stop failed: tagged, still running, no reason.
    copy = {
        "jobId": copy_id,
        "jobName": spot.job_name,
        "jobQueue": queue,
        "status": "RUNNING",
        "startedAt": now_ms - 100_000,
        "timeout": limit,
        "tags": {batch.COPY_OF_TAG: job_id},
    }
    monkeypatch.setattr(type(backend), "_describe", lambda self, _: job)
    monkeypatch.setattr(type(backend), "_copies", lambda self, _: [copy])

    with time_machine.travel(now_ms / 1000, tick=False):
        refused["now"] = True
        backend.poll(job_id)
        assert stops == [copy_id]  # sent again at each poll while the job runs
        job.update(status="SUCCEEDED", attempts=[{"startedAt": now_ms - 600_000, "stoppedAt": now_ms}])
        ended = backend.poll(job_id)
        assert stops == [copy_id, copy_id]
        # Nothing looks at it again and it may run to its time limit: billed all of it and the stop timeout.
        assert ended.metrics["batch_copy_seconds"] == 3600 + 30
        assert f"{copy_id} could not be stopped: billed to its time limit" in ended.reason
        # A stop that went through at the last poll: billed up to it and ECS's stop timeout.
        refused["now"] = False
        ended = backend.poll(job_id)
    assert ended.metrics["batch_copy_seconds"] == 100 + 30
    assert "could not be stopped" not in ended.reason


def test_a_copy_whose_stop_failed_at_the_jobs_end_is_billed_to_its_time_limit() -> None:
    job = {"jobId": "j", "status": "SUCCEEDED", "attempts": [{"startedAt": 0, "stoppedAt": 600_000}]}
    ended = batch.status_from_description(job, "spot", "m5.large")
    running_copy = {"jobId": "d", "status": "RUNNING", "startedAt": 2_000}
    queued_copy = {"jobId": "q", "status": "RUNNABLE"}
    billed = batch.with_copies(
        ended, [running_copy, queued_copy], now_ms=12_000, unstopped=["d", "q"], attempt_limit_seconds=900
    )
    # Each may run (or start and run) its whole limit: the job's where the copy's own is not shown.
    assert billed.metrics["batch_copy_seconds"] == 2 * (900 + 30)
    timed = {**running_copy, "timeout": {"attemptDurationSeconds": 120}}
    billed = batch.with_copies(ended, [timed], now_ms=12_000, unstopped=["d"], attempt_limit_seconds=900)
    assert billed.metrics["batch_copy_seconds"] == 120 + 30
    # A stopped copy queued at the job's end never runs: nothing more.
    assert batch.with_copies(ended, [queued_copy], now_ms=12_000).metrics["batch_copy_seconds"] == 0


def test_a_copy_whose_stop_failed_while_the_job_runs_keeps_its_limit_for_a_bill_with_no_last_poll() -> None:
    # A kill bills the job's last poll while it runs: the copy whose stop failed was billed only what it had
    # run (600 s) though it runs on to its time limit (7200 s).
    from costaware.adapters.compute.base import COPY_SECONDS_LEFT, with_copies_run_out

    job = {"jobId": "j", "status": "RUNNING", "startedAt": 0}
    running = batch.status_from_description(job, "spot", "m5.large", now_ms=1_000_000)
    copy = {
        "jobId": "c1",
        "status": "RUNNING",
        "startedAt": 400_000,
        "timeout": {"attemptDurationSeconds": 7200},
    }
    polled = batch.with_copies(running, [copy], now_ms=1_000_000, unstopped=["c1"], stop_timeout_seconds=30)
    assert polled.billable_seconds == 1000 + 600  # a poll while it runs: up to now
    assert polled.metrics[COPY_SECONDS_LEFT] == {
        "seconds_by_type": {"m5.large": 7200 + 30 - 600},
        "unstopped": ["c1"],
    }
    billed = with_copies_run_out(polled)
    assert billed.billable_seconds == 1000 + 7200 + 30
    assert billed.metrics["batch_copy_seconds"] == 7200 + 30
    assert "c1 could not be stopped: billed to its time limit" in billed.reason
    assert with_copies_run_out(running) == running  # no copies: as it is


def test_a_copy_already_stopped_is_not_sent_its_stop_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sent again at the job's last poll and throttled, a copy already terminated (its reason says so, still
    # shutting down) counted as unstopped: billed to its whole time limit (7200 s for 40 s run).
    from botocore.exceptions import ClientError

    sent: list[str] = []

    class Client:
        def terminate_job(self, jobId: str, reason: str) -> None:
            sent.append(jobId)
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "TerminateJob"
            )

    backend = batch.BatchBackend(spot_queue="s", on_demand_queue="o", job_definition="d")
    monkeypatch.setattr(batch.BatchBackend, "client", property(lambda self: Client()))
    stopped = {
        "jobId": "c1",
        "jobName": "n",
        "status": "RUNNING",
        "statusReason": batch.copy_reason("n", "j"),
    }
    unstopped = {"jobId": "c2", "jobName": "n", "status": "RUNNING", "tags": {batch.COPY_OF_TAG: "j"}}
    assert backend._stop_copies("j", [stopped, unstopped]) == ["c2"]
    assert sent == ["c2"]


def test_a_sagemaker_job_found_by_its_name_says_when_it_was_created_and_started(aws: str) -> None:
    # A retry that cannot poll the job it follows bills it from these, not from its own re-attach.
    backend = sagemaker_backend()
    spot = request()
    backend.submit(spot)
    described = aws_client("sagemaker", aws).describe_training_job(TrainingJobName=spot.job_name)
    found = backend.find(spot.job_name)
    assert found is not None and found.job_id == spot.job_name
    assert found.created_at == described["CreationTime"].timestamp()
    started = described.get("TrainingStartTime")
    assert found.started_at == (started.timestamp() if started else None)
    assert found.running_since == (found.started_at or found.created_at)
    assert found.market == "spot"  # as submitted: a retry that cannot read it bills it there
    assert found.status == backend.poll(spot.job_name)  # read as a poll reads it: the retry follows it so
    assert backend.find("no-such-job") is None


def test_a_batch_job_found_by_its_name_says_when_it_was_created_and_started(
    aws: str, batch_queues: dict[str, str]
) -> None:
    backend = open_backend("batch", {**batch_queues, "aws_conn_id": "moto_aws"})
    spot = request(instance_type="m5.large")
    job_id = backend.submit(spot)
    described = aws_client("batch", aws).describe_jobs(jobs=[job_id])["jobs"][0]
    found = backend.find(spot.job_name)
    assert found is not None and found.job_id == job_id
    assert found.created_at == described["createdAt"] / 1000  # epoch ms in Batch's answers
    started = described.get("startedAt")
    assert found.started_at == (started / 1000 if started else None)
    assert found.market == "spot"  # its queue's: a retry that cannot read it bills it there
    assert backend.find("no-such-job") is None


@pytest.mark.parametrize(
    ("status", "reason", "exit_code", "state"),
    [
        ("SUCCEEDED", "Essential container in task exited", 0, JobState.SUCCEEDED),
        ("FAILED", "Host EC2 (instance i-1) terminated.", None, JobState.INTERRUPTED),
        ("FAILED", "Essential container in task exited", 75, JobState.INTERRUPTED),
        ("FAILED", "Essential container in task exited", 1, JobState.FAILED),
    ],
)
def test_a_batch_job_found_by_its_name_after_it_ended_says_when_and_how_from_its_listing(
    monkeypatch: pytest.MonkeyPatch, status: str, reason: str, exit_code: int | None, state: JobState
) -> None:
    # The job's name is the same on every try and clear: one that ended days ago was billed up to now. Its
    # ListJobs summary says how and when it ended, as DescribeJobs would.
    summary = {
        "jobId": "j1",
        "jobName": "n",
        "status": status,
        "statusReason": reason,
        "createdAt": 1_700_000_000_000,
        "startedAt": 1_700_000_100_000,
        "stoppedAt": 1_700_003_700_000,
        **({"container": {"exitCode": exit_code}} if exit_code is not None else {}),
    }
    backend = open_backend("batch", {"spot_queue": "q", "on_demand_queue": "o", "job_definition": "d"})
    monkeypatch.setattr(batch.BatchBackend, "_found_in", lambda self, name: ("j1", "q", summary))
    found = backend.find("n")
    described = batch.status_from_description(summary, "spot", "m5.large")
    assert found is not None and (found.end_state, found.ended_at) == (state, 1_700_003_700.0)
    assert (described.state, described.ended_at) == (found.end_state, found.ended_at)  # a poll's end
    assert found.market == "spot"  # found in the spot queue
    running = {**summary, "status": "RUNNING"}
    monkeypatch.setattr(batch.BatchBackend, "_found_in", lambda self, name: ("j1", "o", running))
    found = backend.find("n")
    assert found is not None and (found.end_state, found.ended_at) == (None, None)
    assert found.market == "on_demand"


def test_an_ended_sagemaker_job_is_keyed_by_the_same_end_whether_found_or_polled(aws: str) -> None:
    # Its poll gave no end, its find one: a job found unread by a retry (keyed by its end) and then billed
    # from a poll (keyed "ended=none"), or the other way round, got two ledger entries.
    from costaware.training.remote import attempt_key

    backend = sagemaker_backend()
    spot = request()
    backend.submit(spot)  # moto completes it at once
    described = aws_client("sagemaker", aws).describe_training_job(TrainingJobName=spot.job_name)
    found, polled = backend.find(spot.job_name), backend.poll(spot.job_name)
    assert found is not None and found.ended_at == described["TrainingEndTime"].timestamp()
    assert polled.ended_at == found.ended_at
    identity = {"dag_id": "dag", "run_id": "run", "task_id": "train"}
    assert attempt_key(identity, spot.job_name, polled.ended_at) == attempt_key(
        identity, spot.job_name, found.ended_at
    )


def test_a_sagemaker_job_found_by_its_name_after_it_ended_says_when_and_how(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import datetime, timezone

    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    job = {
        "TrainingJobName": "n",
        "TrainingJobStatus": "Stopped",
        "CreationTime": at,
        "TrainingStartTime": at.replace(minute=5),
        "TrainingEndTime": at.replace(hour=1),
    }
    monkeypatch.setattr(sagemaker.SageMakerBackend, "_describe", lambda self, name: job)
    backend = sagemaker.SageMakerBackend.__new__(sagemaker.SageMakerBackend)
    found = sagemaker.SageMakerBackend.find(backend, "n")
    assert found is not None and found.end_state == JobState.INTERRUPTED
    assert found.ended_at == at.replace(hour=1).timestamp()
    job.update(TrainingJobStatus="InProgress", TrainingEndTime=None)
    found = sagemaker.SageMakerBackend.find(backend, "n")
    assert found is not None and (found.end_state, found.ended_at) == (None, None)


_NO_LAUNCHER = (
    "CannotStartContainerError: Error response from daemon: failed to create shim task: OCI runtime create "
    'failed: runc create failed: unable to start container process: exec: "costaware-run": executable file '
    "not found in $PATH: unknown"
)
_NO_IMAGE = (
    "CannotPullContainerError: pull image manifest has been retried 5 time(s): failed to resolve ref "
    "1234.dkr.ecr.us-east-1.amazonaws.com/train:v9: not found"
)

_RATE_LIMITED = (
    "CannotPullContainerError: inspect image has been retried 1 time(s): httpReaderSeeker: failed open: "
    "unexpected status code https://registry-1.docker.io/v2/library/python/manifests/sha256:ab12: 429 "
    "Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit."
)
_PULL_TIMEOUT = (
    "CannotPullContainerError: Error response from daemon: Get "
    "https://1234.dkr.ecr.us-east-1.amazonaws.com/v2/: net/http: request canceled while waiting for "
    "connection: dial tcp 10.0.0.1:443: i/o timeout"
)

_NAMED_LIKE_A_TIMEOUT = (
    "CannotPullContainerError: pull image manifest has been retried 5 time(s): failed to resolve ref "
    "1234.dkr.ecr.us-east-1.amazonaws.com/timeout-tuner:v2: not found"
)
_DENIED_AFTER_A_TIMEOUT = (
    "CannotPullContainerError: pull image manifest has been retried 5 time(s): 1234.dkr.ecr.us-east-1."
    "amazonaws.com/train:v9: request timed out once, then: denied: User is not authorized to pull"
)


@pytest.mark.parametrize(
    ("job_reason", "container_reason", "reason"),
    [
        # The job said "Task failed to start"; its container's reason, naming the missing launcher, unread.
        (
            "Task failed to start",
            _NO_LAUNCHER,
            f"{_NO_LAUNCHER} (the image has no costaware-run: install costaware-runtime[s3] in it, as "
            "runtime/Dockerfile.train.example does)",
        ),
        (
            _NO_IMAGE,
            "",
            f"{_NO_IMAGE} (the image could not be pulled: check its URI and tag, and that the job "
            "definition's execution role may pull it; not retried)",
        ),
        # A pull limit or a network timeout was told to check the image's URI and tag, which are right.
        (
            _RATE_LIMITED,
            "",
            f"{_RATE_LIMITED} (the image could not be pulled, which may pass: the registry limited its pulls "
            "or the network did not answer in time; clear the task to try again later, and for a registry's "
            "pull limit (Docker Hub) pull through an ECR pull-through cache or with a login; not retried)",
        ),
        (
            "Task failed to start",
            _PULL_TIMEOUT,
            f"{_PULL_TIMEOUT} (the image could not be pulled, which may pass: the registry limited its pulls "
            "or the network did not answer in time; clear the task to try again later, and for a registry's "
            "pull limit (Docker Hub) pull through an ECR pull-through cache or with a login; not retried)",
        ),
        # An image named like a passing failure was told it "may pass": it will not be found the next time.
        (
            _NAMED_LIKE_A_TIMEOUT,
            "",
            f"{_NAMED_LIKE_A_TIMEOUT} (the image could not be pulled: check its URI and tag, and that the "
            "job definition's execution role may pull it; not retried)",
        ),
        (
            _DENIED_AFTER_A_TIMEOUT,
            "",
            f"{_DENIED_AFTER_A_TIMEOUT} (the image could not be pulled: check its URI and tag, and that the "
            "job definition's execution role may pull it; not retried)",
        ),
        (
            "Task failed to start",
            "CannotStartContainerError: failed to mount /data",
            "CannotStartContainerError: failed to mount /data (the container never started, so it has no log "
            "lines: fix the image or the job definition)",
        ),
    ],
)
def test_a_batch_container_that_never_started_says_what_to_fix(
    job_reason: str, container_reason: str, reason: str
) -> None:
    # moto runs no container: the description is the one Batch gives for such a job.
    attempt = {"startedAt": 1_000, "stoppedAt": 2_000, "statusReason": "Task failed to start"}
    if container_reason:
        attempt["container"] = {"reason": container_reason}  # type: ignore[assignment]
    described = {"jobId": "j1", "status": "FAILED", "statusReason": job_reason, "attempts": [attempt]}
    status = batch.status_from_description(described, "spot", "m5.large")
    assert (status.state, status.exit_code, status.reason) == (JobState.FAILED, None, reason)


def test_a_stopping_sagemaker_job_says_when_its_stop_was_asked() -> None:
    # A wait re-created by a triggerer restart that cannot read its kept state sent its stop at the cap again
    # (the backend said nothing of the first): StopTrainingJob's time is in the job's own description.
    from datetime import datetime, timezone

    from costaware.adapters.compute.base import STOP_REQUESTED_AT

    started = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    asked = datetime(2026, 1, 1, 12, 10, tzinfo=timezone.utc)
    job = {
        "TrainingJobName": "j",
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1},
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training",
        "TrainingStartTime": started,
        "LastModifiedTime": asked,
    }
    now = asked.timestamp() + 30
    assert STOP_REQUESTED_AT not in sagemaker.status_from_description(job, now=now).metrics
    transitions = [{"Status": "Training", "StartTime": started}, {"Status": "Stopping", "StartTime": asked}]
    stopping = {**job, "TrainingJobStatus": "Stopping", "SecondaryStatus": "Stopping"}
    described = {**stopping, "SecondaryStatusTransitions": transitions, "LastModifiedTime": now}
    read = sagemaker.status_from_description(described, now=now)
    assert read.metrics[STOP_REQUESTED_AT] == asked.timestamp()
    # No transition listed: its last change, the stop.
    read = sagemaker.status_from_description(stopping, now=now)
    assert read.metrics[STOP_REQUESTED_AT] == asked.timestamp()
