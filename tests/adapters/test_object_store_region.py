"""The pyarrow S3 filesystem (large writes, input reads) takes the region boto3 takes."""

from __future__ import annotations

import pytest

from costaware.adapters.object_store.clients import S3Options, s3_client, s3_filesystem


def test_the_arrow_filesystem_takes_the_region_boto3_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    # "us-east-1" stood in for a missing region: a worker in eu-west-1 wrote large files and read inputs in
    # another region than its boto3 client did.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert s3_filesystem(S3Options()).region == "eu-west-1"
    assert s3_client(S3Options()).meta.region_name == "eu-west-1"
    assert s3_filesystem(S3Options(region="ap-south-1")).region == "ap-south-1"
