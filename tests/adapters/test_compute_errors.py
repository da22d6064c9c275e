"""Remote backends fail fast on what a retry cannot fix: AWS errors by code, stores a job cannot reach."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError
from remote_support import aws_client, make_batch_queues

from costaware.adapters.compute import batch, kubernetes, sagemaker
from costaware.adapters.compute.aws_errors import aws_error, is_configuration_error
from costaware.adapters.compute.base import JobRequest, open_backend
from costaware.core.errors import ComputeBackendError, ConfigurationError

ROLE = "arn:aws:iam::123456789012:role/train"


def client_error(code: str, status: int, message: str = "refused") -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "SubmitJob")


@pytest.mark.parametrize(
    ("code", "status", "configuration"),
    [
        ("ValidationException", 400, True),
        ("AccessDenied", 403, True),
        ("AccessDeniedException", 403, True),
        ("ResourceNotFound", 404, True),
        ("ResourceNotFoundException", 400, True),
        ("ClientException", 400, True),  # Batch: unknown job queue or job definition
        ("InvalidParameterValue", 400, True),
        ("UnrecognizedClientException", 403, True),
        ("SomeNewRefusal", 400, True),  # any other 4xx is a refusal of the request as sent
        ("Throttling", 400, False),
        ("ThrottlingException", 400, False),
        ("TooManyRequestsException", 429, False),
        ("RequestLimitExceeded", 503, False),
        ("RequestLimitExceeded", 400, False),
        ("ResourceLimitExceeded", 400, False),
        ("ExpiredTokenException", 400, False),
        # botocore's own throttling codes: read as refusals, a throttled poll failed the task for good
        ("LimitExceededException", 400, False),
        ("BandwidthLimitExceeded", 400, False),
        ("TransactionInProgressException", 400, False),
        ("PriorRequestNotComplete", 400, False),
        ("EC2ThrottledException", 400, False),
        ("SomeNewThrottle", 429, False),  # too many requests, whatever the code
        ("ServerException", 500, False),  # Batch's 5xx
        ("InternalFailure", 500, False),
        ("ServiceUnavailable", 503, False),
        ("ValidationException", 500, False),  # a 5xx is the server's, whatever its code says
    ],
)
def test_aws_errors_by_code(code: str, status: int, configuration: bool) -> None:
    error = client_error(code, status)
    assert is_configuration_error(error) is configuration
    mapped = aws_error(error, "cannot submit Batch job 'j' to job queue 'q'", "check spot_queue")
    assert isinstance(mapped, ConfigurationError if configuration else ComputeBackendError)
    assert not (configuration and isinstance(mapped, ComputeBackendError))
    assert str(mapped).startswith(f"cannot submit Batch job 'j' to job queue 'q': {code}: refused; ")
    ending = "check spot_queue" if configuration else "the task is retried"
    if code.startswith("ExpiredToken"):
        ending = "a session token written into the AWS connection must be replaced, or every retry fails " + (
            "the same way"
        )
    assert str(mapped).endswith(ending)


def test_client_side_validation_is_configuration_and_connection_trouble_is_retried() -> None:
    invalid_role = ParamValidationError(report="Invalid length for parameter RoleArn, value: 10")
    assert isinstance(aws_error(invalid_role, "cannot create", "check role_arn"), ConfigurationError)
    unreachable = EndpointConnectionError(endpoint_url="https://batch.us-east-1.amazonaws.com")
    mapped = aws_error(unreachable, "cannot submit", "check")
    assert isinstance(mapped, ComputeBackendError) and "EndpointConnectionError" in str(mapped)


def request(market: str = "on_demand", **kwargs: Any) -> JobRequest:
    args: dict[str, Any] = {
        "job_name": f"train-0123456789-a1-{market.replace('_', '')}",
        "spec_uri": "s3://ml/jobs/spec.json",
        "market": market,
        "instance_type": "m5.large",
        "checkpoint_uri": "s3://ml/ckpt/dag/train/run",
        "model_store": "s3://ml/models",
        **kwargs,
    }
    return JobRequest(**args)


def test_batch_submit_to_a_queue_that_does_not_exist_fails_without_retry(aws: str) -> None:
    queues = make_batch_queues(aws)
    backend = open_backend("batch", {**queues, "on_demand_queue": "no-such-queue", "aws_conn_id": "moto_aws"})
    with pytest.raises(ConfigurationError) as e:
        backend.submit(request("on_demand"))
    message = str(e.value)
    # Found by the look-up of an earlier submit, which reads every queue: named with its own option.
    assert "in job queue 'no-such-queue'" in message and "ClientException" in message
    assert "check on_demand_queue in backend_options" in message
    assert not isinstance(e.value, ComputeBackendError)
    listed = aws_client("batch", aws).list_jobs(jobQueue=queues["spot_queue"])["jobSummaryList"]
    assert listed == []


def test_sagemaker_invalid_role_arn_fails_without_retry(aws: str) -> None:
    backend = open_backend(
        "sagemaker",
        {
            "role_arn": "not-a-role",
            "image_uri": "img",
            "output_s3_uri": "s3://ml/out",
            "aws_conn_id": "moto_aws",
        },
    )
    with pytest.raises(ConfigurationError, match=r"with role 'not-a-role'.*check role_arn, image_uri") as e:
        backend.submit(request(instance_type="ml.m5.xlarge"))
    assert not isinstance(e.value, ComputeBackendError)


def test_sagemaker_unknown_job_is_not_found_not_an_error(aws: str) -> None:
    backend = open_backend(
        "sagemaker",
        {"role_arn": ROLE, "image_uri": "i", "output_s3_uri": "s3://o", "aws_conn_id": "moto_aws"},
    )
    assert backend._describe("never-submitted") is None  # type: ignore[attr-defined]  # submit's idempotence


# -- stores a remote job cannot reach --------------------------------------------------------------------


def _sagemaker(r: JobRequest) -> Any:
    return sagemaker.training_job_request(r, role_arn=ROLE, image_uri="i", output_s3_uri="s3://o")


def _batch(r: JobRequest) -> Any:
    return batch.submit_job_request(r, spot_queue="s", on_demand_queue="o", job_definition="d")


def _kubernetes(r: JobRequest) -> Any:
    return kubernetes.render_pod(r, image="costaware:1")


@pytest.mark.parametrize(
    ("build", "label"),
    [(_sagemaker, "SageMaker"), (_batch, "AWS Batch"), (_kubernetes, "Kubernetes")],
    ids=["sagemaker", "batch", "kubernetes"],
)
@pytest.mark.parametrize(
    ("field", "what", "value"),
    [
        ("checkpoint_uri", "checkpoint_store", "/airflow/costaware/checkpoints/d/t/r"),
        ("model_store", "model_store", "/airflow/costaware/models"),
        ("model_store", "model_store", "file:///models"),
        ("spec_uri", "spec_uri", "/airflow/jobs/spec.json"),
    ],
)
def test_remote_backends_refuse_a_store_their_job_cannot_reach(
    build: Any, label: str, field: str, what: str, value: str
) -> None:
    instance_type = "ml.m5.xlarge" if label == "SageMaker" else "m5.xlarge"
    with pytest.raises(ConfigurationError) as e:
        build(request(instance_type=instance_type, **{field: value}))
    assert str(e.value) == (
        f"{label} jobs need an s3:// {what}, got {value!r}: the job runs on another machine, which cannot "
        f"reach it; set {what} to an s3://bucket/prefix that the job's role can read and write"
    )
    build(request(instance_type=instance_type))  # the same request on S3 is fine


@pytest.mark.parametrize(("build", "label"), [(_batch, "AWS Batch"), (_kubernetes, "Kubernetes")])
def test_a_sagemaker_instance_type_is_refused_on_the_backends_that_run_on_ec2(build: Any, label: str) -> None:
    # A pod held to node.kubernetes.io/instance-type=ml.m5.xlarge waited unscheduled for a day; a Batch job
    # ran on whatever its compute environment chose; both were priced at SageMaker's ml.* rate.
    with pytest.raises(
        ConfigurationError,
        match=rf"instance type 'ml.m5.xlarge' is a SageMaker type, but {label} runs on EC2 instances: give "
        r"'m5.xlarge', or use the sagemaker backend",
    ):
        build(request(instance_type="ml.m5.xlarge"))
    build(request(instance_type="m5.xlarge"))


def test_batch_refuses_a_local_store_before_submitting(aws: str) -> None:
    queues = make_batch_queues(aws)
    backend = open_backend("batch", {**queues, "aws_conn_id": "moto_aws"})
    with pytest.raises(ConfigurationError, match="AWS Batch jobs need an s3:// model_store, got '/models'"):
        backend.submit(request(model_store="/models"))
    assert aws_client("batch", aws).list_jobs(jobQueue=queues["on_demand_queue"])["jobSummaryList"] == []


def test_a_required_backend_option_left_out_is_named() -> None:
    # It read as a Python signature error: "__init__() missing 1 required keyword-only argument: 'role_arn'".
    from costaware.adapters.compute.base import check_backend_options
    from costaware.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="the sagemaker backend needs backend_options 'role_arn'"):
        check_backend_options("sagemaker", {"output_s3_uri": "s3://ml-team/out"})
    check_backend_options("local", {})  # every option of the local backend has a default


def test_every_code_botocore_retries_as_a_throttle_is_retried_here() -> None:
    # botocore gives up on a throttle after its own retries: the task must retry too, not fail for good.
    from botocore.retries.standard import ThrottledRetryableChecker

    for code in ThrottledRetryableChecker._THROTTLED_ERROR_CODES:
        assert not is_configuration_error(client_error(code, 400)), code
