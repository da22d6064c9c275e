"""A team's own command with S3 stores on moto: the contract through the AWS connection, and a result that
is missing or malformed (issue 24, items 1 and 6)."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from remote_support import TRAINING, aws_client, context_for, drive, reimported

from costaware.adapters.model_store import ModelStore
from costaware.operators.remote_training import RemoteTrainingOperator

pytest.importorskip("costaware_runtime.launcher", reason="pip install -e ./runtime (costaware-run)")

ROLE = "arn:aws:iam::123456789012:role/train"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/team-train:7"


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


@pytest.fixture
def bucket(moto_endpoint: str, moto_aws_conn: str) -> str:
    """A bucket of this test's own on moto, and the connection ``moto_aws`` that reaches it."""
    name = f"own-{uuid.uuid4().hex[:12]}"
    aws_client("s3", moto_endpoint).create_bucket(Bucket=name)
    return name


def models(bucket: str, endpoint: str) -> ModelStore:
    return ModelStore.open(
        f"s3://{bucket}/models", endpoint_url=endpoint, access_key="testing", secret_key="testing"
    )


def operator(bucket: str, **kwargs: Any) -> RemoteTrainingOperator:
    args: dict[str, Any] = {
        "task_id": "train",
        "command": ["python", "train.py"],
        "image": IMAGE,
        "model_store": f"s3://{bucket}/models",
        "checkpoint_store": f"s3://{bucket}/checkpoints",
        "backend": "sagemaker",
        "backend_options": {"role_arn": ROLE, "output_s3_uri": f"s3://{bucket}/out"},
        "market": "on_demand",
        "instance_type": "ml.m5.xlarge",
        "on_demand_usd_per_hour": "0.23",
        "aws_conn_id": "moto_aws",
        "poll_interval": 0.1,
        **kwargs,
    }
    return RemoteTrainingOperator(**args)


def resume(op: Any, deferred: TaskDeferred, context: dict[str, Any]) -> Any:
    async def first() -> Any:
        return await asyncio.wait_for(reimported(deferred.trigger).run().__anext__(), 60)

    return getattr(op, deferred.method_name)(context, event=asyncio.run(first()).payload)


def test_a_job_that_left_no_result_fails_naming_it_and_registers_nothing(
    bucket: str, moto_endpoint: str, ledger: Any
) -> None:
    op, context = operator(bucket), context_for()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    job = deferred.value.trigger.job_id
    # moto completes the training job at once without running the container: there is no result.
    with pytest.raises(AirflowFailException) as failed:
        resume(op, deferred.value, context)
    message = str(failed.value)
    assert f"training job {job!r} exited 0 but its result 's3://{bucket}/models/_staging/" in message
    assert "/attempt-1/result.json' is not there" in message and "under costaware-run" in message
    assert "nothing was registered" in message
    assert f"The sagemaker backend reported job {job!r} succeeded after 0 s billed: it ran nothing" in message
    assert models(bucket, moto_endpoint).version_ids() == []
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]  # the attempt is billed
    # ... as what it was: the task failed for it, so no success (the money bought no model).
    assert (entry["cause"], entry["outcome"]) == ("code_error", "failed")
    assert f"exited 0 but left no result at s3://{bucket}/models/_staging/" in entry["note"]


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ({"metrics": {}}, "has no metrics"),
        # an OverflowError before: not a config error, so a retry read the same file again
        ({"metrics": {"rmse": 10**400}}, "has metric 'rmse' = an int of 401 digits"),
        ("not json", "is not JSON"),
        (
            {"metrics": {"rmse": 3.0}, "output_uri": "s3://x/y", "files": 1, "bytes": 1, "attempt": 1},
            "names output_uri",
        ),
    ],
)
def test_a_malformed_result_fails_naming_it_and_registers_nothing(
    bucket: str, moto_endpoint: str, ledger: Any, result: Any, message: str
) -> None:
    op, context = operator(bucket), context_for()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    base = deferred.value.trigger.job_id.rsplit("-a", 1)[0]
    body = result if isinstance(result, str) else json.dumps(result)
    key = f"models/_staging/{base}/attempt-1/result.json"
    aws_client("s3", moto_endpoint).put_object(Bucket=bucket, Key=key, Body=body.encode())
    with pytest.raises(AirflowFailException, match=message) as failed:
        resume(op, deferred.value, context)
    assert f"result 's3://{bucket}/{key}' of training job" in str(failed.value)
    assert "nothing was registered" in str(failed.value)
    assert models(bucket, moto_endpoint).version_ids() == []


def test_a_command_on_s3_stores_resumes_and_registers_through_the_connection(
    bucket: str, moto_endpoint: str, ledger: Any, tmp_path: Path
) -> None:
    """The local backend with S3 stores: the launcher syncs checkpoints and uploads outputs to moto."""
    op = operator(
        bucket,
        command=[sys.executable, str(TRAINING / "own_train.py"), "preempt-once"],
        image=None,
        backend="local",
        backend_options={
            "root": str(tmp_path / "jobs"),
            # the job's own credentials (its role's, on AWS); the endpoint comes from the connection
            "env": {
                "OWN_TRAIN_LOG": str(tmp_path / "seen.jsonl"),
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1",
            },
        },
        market="spot",
        spot_usd_per_hour="0.05",
        instance_type="m5.large",
        deferrable=False,
    )
    result, _ = drive(op, context_for())
    starts = [json.loads(line)["start"] for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert starts == [0, 3]  # attempt 2 restored attempt 1's checkpoint from S3
    assert [a["cause"] for a in result["attempts"]] == ["preemption", "success"]
    store = models(bucket, moto_endpoint)
    version = store.get(result["version"])
    assert version.model_format == "files" and version.metrics == result["metrics"]
    listed = sorted(f["path"] for f in store.version_files(version))
    assert listed == ["config/steps.json", "model.txt"]
    keys = [o["Key"] for o in aws_client("s3", moto_endpoint).list_objects_v2(Bucket=bucket)["Contents"]]
    # Attempt 2 restored attempt 1's checkpoint from S3 (above); with the model stored, the run's checkpoints
    # are deleted there too, through the connection (pyarrow leaves an empty marker of the parent "folder").
    assert not [k for k in keys if k.startswith("checkpoints/remote_dag/train/") and not k.endswith("/")]
