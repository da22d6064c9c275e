"""Bucket regions from moto's S3 server, and egress estimates from the bundled transfer prices."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path

import boto3
import pytest

from costaware.adapters.object_store import S3Options
from costaware.adapters.price_files import bundled_catalog
from costaware.adapters.regions import DataPlacement, bucket_region, estimate_egress, locate
from costaware.core.errors import ConfigurationError, PriceNotFoundError


def options(endpoint: str) -> S3Options:
    return S3Options(access_key="testing", secret_key="testing", region="us-east-1", endpoint_url=endpoint)


def bucket_in(endpoint: str, region: str) -> str:
    name = f"data-{uuid.uuid4().hex[:10]}"
    client = boto3.client("s3", **options(endpoint).boto3_kwargs())
    extra = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    client.create_bucket(Bucket=name, **extra)
    client.put_object(Bucket=name, Key="flights/a.parquet", Body=b"x" * 2048)
    return name


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1", "ap-southeast-2"])
def test_bucket_region(moto_endpoint: str, region: str) -> None:
    bucket = bucket_in(moto_endpoint, region)
    assert bucket_region(bucket, options(moto_endpoint)) == (region, "head_bucket")
    placement = locate(f"s3://{bucket}/flights", worker_region=None, options=options(moto_endpoint))
    assert placement == DataPlacement(f"s3://{bucket}/flights", region, 2048, 1, "head_bucket")


class _NoHeaderClient:
    """A real client whose HeadBucket answers lack the region header, as some S3-compatible stores do."""

    def __init__(self, client: object) -> None:
        self._client = client

    def head_bucket(self, **kwargs: object) -> dict[str, object]:
        self._client.head_bucket(**kwargs)  # type: ignore[attr-defined]
        return {"ResponseMetadata": {"HTTPHeaders": {}}}

    def get_bucket_location(self, **kwargs: object) -> object:
        return self._client.get_bucket_location(**kwargs)  # type: ignore[attr-defined]


def test_get_bucket_location_fallback(moto_endpoint: str) -> None:
    client = boto3.client("s3", **options(moto_endpoint).boto3_kwargs())
    eu = bucket_in(moto_endpoint, "eu-west-1")
    us = bucket_in(moto_endpoint, "us-east-1")
    assert bucket_region(eu, client=_NoHeaderClient(client)) == ("eu-west-1", "get_bucket_location")
    assert bucket_region(us, client=_NoHeaderClient(client)) == ("us-east-1", "get_bucket_location")


def test_missing_bucket(moto_endpoint: str) -> None:
    with pytest.raises(ConfigurationError, match="bucket 'no-such-bucket-x1' does not exist"):
        bucket_region("no-such-bucket-x1", options(moto_endpoint))


def test_local_and_declared_regions(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_bytes(b"1" * 300)
    assert locate(str(tmp_path), worker_region="us-west-2").region == "us-west-2"
    declared = locate(str(tmp_path), worker_region="us-west-2", declared={str(tmp_path): "eu-central-1"})
    assert (declared.region, declared.how, declared.bytes) == ("eu-central-1", "declared", 300)
    other = locate(
        "bigquery://proj/ds/table",
        worker_region=None,
        declared={"bigquery://proj": "us-east-1"},
        declared_bytes={"bigquery://proj/ds/table": 5 * 2**30},
    )
    assert (other.region, other.bytes) == ("us-east-1", 5 * 2**30)
    with pytest.raises(ConfigurationError, match="no worker region is configured"):
        locate(str(tmp_path), worker_region=None)
    with pytest.raises(ConfigurationError, match="declare its region in declared_regions"):
        locate("bigquery://proj/ds/table", worker_region=None)


@pytest.mark.parametrize("size", [-536870912000, 1.5, "lots", True])
def test_a_declared_size_that_is_not_bytes_is_refused(size: object) -> None:
    # A negative size priced the transfer at -$10 and wrote a negative egress entry.
    uri = "https://x.example/data"
    with pytest.raises(ConfigurationError, match=r"declared_bytes of 'https://x.example/data' is .*: give"):
        locate(uri, worker_region=None, declared={uri: "eu-west-1"}, declared_bytes={uri: size})


def test_estimate_egress_prices_bytes_times_transfer_price() -> None:
    catalog = bundled_catalog()
    placement = DataPlacement("s3://b/k", "eu-west-1", 10 * 2**30, 1, "head_bucket")
    estimate = estimate_egress(placement, "us-east-1", catalog.transfer_usd_per_gb)
    price = catalog.transfer_usd_per_gb("eu-west-1", "us-east-1")
    assert price > 0 and estimate.usd == (price * 10).quantize(Decimal("0.000001"))
    assert estimate.cross_region
    same = estimate_egress(placement, "eu-west-1", catalog.transfer_usd_per_gb)
    assert (same.usd, same.cross_region) == (Decimal(0), False)
    with pytest.raises(PriceNotFoundError):
        estimate_egress(placement, "mars-north-1", catalog.transfer_usd_per_gb)
