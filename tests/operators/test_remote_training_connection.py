"""Remote training whose S3 endpoint and credentials exist only in the Airflow AWS connection (issue 23, R1).

The worker has no AWS keys and no endpoint in its environment: the spec write, the result read and the job's
stores must all go through ``aws_conn_id``, and the job (which gets only the spec URI plus the environment
the backend passes) must read its spec from the same endpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from remote_support import aws_client, context_for, make_batch_queues, reimported, write_data

from costaware.adapters.compute.batch import WORK_DIR
from costaware.adapters.model_store import ModelStore
from costaware.operators.remote_training import RemoteTrainingOperator

#: Credentials only the connection has; the job gets its own (its role's) from its environment.
CONN_KEYS = {"login": "conn-only-key", "password": "conn-only-secret"}
ROLE_KEYS = {"AWS_ACCESS_KEY_ID": "job-role-key", "AWS_SECRET_ACCESS_KEY": "job-role-secret"}
UNSET = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_SAGEMAKER",
    "AWS_ENDPOINT_URL_BATCH",
    "COSTAWARE_S3_ENDPOINT_URL",
)


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


@pytest.fixture
def bucket(moto_endpoint: str) -> str:
    """A bucket of this test's own on moto (the server lives for the whole session)."""
    name = f"r1-{uuid.uuid4().hex[:12]}"
    aws_client("s3", moto_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture
def connection_only(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The connection ``conn_only_aws`` (moto's endpoint and keys) and a worker environment without either."""
    for key in UNSET:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance profile to fall back on either
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    conn = {
        "conn_type": "aws",
        **CONN_KEYS,
        "extra": {"region_name": "us-east-1", "endpoint_url": moto_endpoint},
    }
    monkeypatch.setenv("AIRFLOW_CONN_CONN_ONLY_AWS", json.dumps(conn))
    return "conn_only_aws"


def operator(
    tmp: Path, bucket: str, conn_id: str, backend: str, options: dict[str, Any], **kwargs: Any
) -> Any:
    return RemoteTrainingOperator(
        task_id="train",
        data_path=str(write_data(tmp / "data")),
        label_column="y",
        feature_columns=["x1", "x2", "c"],
        model_store=f"s3://{bucket}/models",
        checkpoint_store=f"s3://{bucket}/checkpoints",
        trainer_params={"epochs": 2, "batch_size": 512},
        backend=backend,
        backend_options=options,
        market="on_demand",
        on_demand_usd_per_hour="0.23",
        aws_conn_id=conn_id,
        poll_interval=0.1,
        **kwargs,
    )


def run_container(
    command: list[str], environment: dict[str, str], work: Path
) -> subprocess.CompletedProcess[str]:
    """Run a job's command the way its container would: its own role's keys, the environment it was given.

    The command runs as given (``costaware-run ... -- python -m ...``, from this interpreter's environment);
    the container's local folders (``WORK_DIR``) are moved under ``work``.
    """
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), "AWS_REGION": "us-east-1"}
    moved = {name: value.replace(WORK_DIR, str(work)) for name, value in environment.items()}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", **ROLE_KEYS, **moved})
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


def resume(op: Any, deferred: TaskDeferred, context: dict[str, Any]) -> Any:
    """The triggerer's run of the deferral, then the operator's ``execute_complete``."""

    async def first() -> Any:
        return await asyncio.wait_for(reimported(deferred.trigger).run().__anext__(), 60)

    return getattr(op, deferred.method_name)(context, event=asyncio.run(first()).payload)


def test_batch_job_reads_its_spec_and_the_task_its_result_through_the_connection(
    connection_only: str, bucket: str, moto_endpoint: str, tmp_path: Path, ledger: Any
) -> None:
    queues = make_batch_queues(moto_endpoint)
    options = {**queues, "aws_conn_id": connection_only}
    op = operator(tmp_path, bucket, connection_only, "batch", options, instance_type="m5.large")
    context = context_for()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    job_id = deferred.value.trigger.job_id
    (job,) = aws_client("batch", moto_endpoint).describe_jobs(jobs=[job_id])["jobs"]
    # moto marks the job SUCCEEDED without running it: run what the container would, as Batch hands it over
    container = job["container"]
    environment = {e["name"]: e["value"] for e in container["environment"]}
    assert environment["COSTAWARE_S3_ENDPOINT_URL"] == moto_endpoint
    assert CONN_KEYS["login"] not in json.dumps(job)  # the connection's keys never reach the job
    assert container["command"][:3] == ["costaware-run", "--no-outputs", "--"]  # the job contract's launcher
    ran = run_container(container["command"], environment, tmp_path / "container")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "costaware-run: done (the job stored its model itself)" in ran.stderr

    result = resume(op, deferred.value, context)
    store = ModelStore.open(
        f"s3://{bucket}/models", endpoint_url=moto_endpoint, access_key="testing", secret_key="testing"
    )
    assert store.get(result["version"]).mode == "full"
    assert result["attempts"][0]["cause"] == "success" and result["backend"] == "batch"
    assert json.loads(ran.stdout.strip().splitlines()[-1])["version"] == result["version"]
    spec_key = f"checkpoints/_jobs/{container['command'][-1].split('/_jobs/', 1)[1]}"
    spec = json.loads(aws_client("s3", moto_endpoint).get_object(Bucket=bucket, Key=spec_key)["Body"].read())
    assert spec["storage_options"] == {"endpoint_url": moto_endpoint, "region": "us-east-1"}


def test_a_finished_job_without_its_result_fails_with_its_own_message(
    connection_only: str, bucket: str, tmp_path: Path, ledger: Any
) -> None:
    options = {
        "role_arn": "arn:aws:iam::123456789012:role/train",
        "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/costaware:1",
        "output_s3_uri": f"s3://{bucket}/out",
    }
    op = operator(tmp_path, bucket, connection_only, "sagemaker", options, instance_type="ml.m5.xlarge")
    context = context_for()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)  # the spec is written through the connection
    # moto completes the training job at once, without running the container: there is no result.
    with pytest.raises(AirflowFailException) as failed:
        resume(op, deferred.value, context)
    message = str(failed.value)
    assert "training job 'train-" in message and "ended successfully but its result" in message
    assert f"s3://{bucket}/checkpoints/_jobs/" in message and "result.json" in message
    assert "check that aws_conn_id reaches the job's S3 endpoint" in message
    assert "write the spec first" not in message
    # ... and that the job ran nothing: the store and the endpoint were right (it said only to check them)
    assert "The sagemaker backend reported job 'train-" in message
    assert "succeeded after 0 s billed: it ran nothing there" in message
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]  # the billed attempt is recorded
    # ... as what it was: the task failed for it, so no success (the money bought no model).
    assert (entry["cause"], entry["outcome"]) == ("code_error", "failed")
    assert f"succeeded but left no result at s3://{bucket}/checkpoints/_jobs/" in entry["note"]
