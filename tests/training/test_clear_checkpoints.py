"""Deleting a finished training's checkpoints on S3 (moto's server on 127.0.0.1): objects and open uploads."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import boto3
import pytest
from attempt_states import CAPTURED  # tests/support/

from costaware.adapters.object_store import s3 as s3_module
from costaware.training.attempt_effects import clear_checkpoints
from costaware.training.plan import RemotePlan


@pytest.fixture
def bucket_with_a_killed_push(moto_endpoint: str) -> tuple[Any, str, dict[str, str]]:
    """A bucket with a run's checkpoints, an upload a killed push left open under them, and another run's."""
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="runs/7/checkpoints/LATEST.json", Body=b"{}")
    s3.put_object(Bucket=bucket, Key="runs/7/checkpoints/step-5-ab12/checkpoint-5/state.bin", Body=b"w")
    for key in ("runs/7/checkpoints/step-9-cd34/checkpoint-9/state.bin", "runs/8/checkpoints/step-1/x.bin"):
        upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * 1024)
    options = {
        "endpoint_url": moto_endpoint,
        "region": "us-east-1",
        "access_key": "testing",
        "secret_key": "testing",
    }
    return s3, bucket, options


def open_uploads(s3: Any, bucket: str) -> list[str]:
    return sorted(upload["Key"] for upload in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []))


def test_clearing_aborts_the_open_uploads_under_the_checkpoints_too(
    bucket_with_a_killed_push: tuple[Any, str, dict[str, str]],
) -> None:
    # The objects went, the upload a killed push left open stayed: its parts billed, and no listing shows it.
    s3, bucket, options = bucket_with_a_killed_push
    plan = replace(RemotePlan.from_json(CAPTURED), checkpoint_uri=f"s3://{bucket}/runs/7/checkpoints")
    assert clear_checkpoints(plan, options) is True
    assert s3.list_objects_v2(Bucket=bucket, Prefix="runs/7/checkpoints").get("Contents", []) == []
    assert open_uploads(s3, bucket) == ["runs/8/checkpoints/step-1/x.bin"]  # another run's is not its own


def test_without_the_list_permission_the_objects_still_go_and_the_log_says_what_to_allow(
    bucket_with_a_killed_push: tuple[Any, str, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from botocore.exceptions import ClientError

    s3, bucket, options = bucket_with_a_killed_push
    made = s3_module.s3_client

    def refusing_client(*args: Any, **kwargs: Any) -> Any:
        client = made(*args, **kwargs)

        def denied(**_: object) -> object:
            raise ClientError(
                {"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "ListMultipartUploads"
            )

        client.list_multipart_uploads = denied
        return client

    monkeypatch.setattr(s3_module, "s3_client", refusing_client)
    plan = replace(RemotePlan.from_json(CAPTURED), checkpoint_uri=f"s3://{bucket}/runs/7/checkpoints")
    assert clear_checkpoints(plan, options) is True
    assert s3.list_objects_v2(Bucket=bucket, Prefix="runs/7/checkpoints").get("Contents", []) == []
    assert len(open_uploads(s3, bucket)) == 2  # none could be found
    assert (
        f"s3://{bucket}/runs/7/checkpoints refused s3:ListBucketMultipartUploads" in caplog.text
        and "AbortIncompleteMultipartUpload" in caplog.text
    )
