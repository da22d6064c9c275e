"""Where data lives: the region of an S3 bucket, a local path or a declared URI, and the bytes to move."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from costaware.adapters.input_data import total_bytes
from costaware.adapters.object_store import S3Options, parse_uri, s3_client
from costaware.adapters.object_store.location import s3_spelling
from costaware.core.errors import ConfigurationError

log = logging.getLogger(__name__)

#: What GetBucketLocation answers for buckets of the two oldest regions.
_LEGACY_LOCATIONS = {None: "us-east-1", "": "us-east-1", "EU": "eu-west-1"}


@dataclass(frozen=True, slots=True)
class DataPlacement:
    """Where one input lives and how big it is.

    Attributes:
        uri: The input.
        region: Its region.
        bytes: Its size.
        files: Number of files or objects.
        how: How the region was found: ``head_bucket``, ``get_bucket_location``, ``worker`` or ``declared``.
    """

    uri: str
    region: str
    bytes: int
    files: int
    how: str


def bucket_region(bucket: str, options: S3Options | None = None, *, client: Any = None) -> tuple[str, str]:
    """(region, how) of an S3 bucket: HeadBucket's ``x-amz-bucket-region``, else GetBucketLocation.

    HeadBucket answers with the region header even when it redirects (301) or is denied (403), so it
    works from any client region; GetBucketLocation is the fallback for stores that omit the header.

    Raises:
        ConfigurationError: the bucket does not exist.
    """
    from botocore.exceptions import ClientError

    client = client or s3_client(options)
    try:
        response = client.head_bucket(Bucket=bucket)
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    except ClientError as e:
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        headers = e.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        if status == 404:
            raise ConfigurationError(
                f"bucket {bucket!r} does not exist (HeadBucket answered 404): check the input URI"
            ) from e
    region = headers.get("x-amz-bucket-region")
    if region:
        return str(region), "head_bucket"
    location = client.get_bucket_location(Bucket=bucket).get("LocationConstraint")
    return _LEGACY_LOCATIONS.get(location, location), "get_bucket_location"


def _declared(uri: str, declared: Mapping[str, str]) -> str | None:
    """The region declared for the longest prefix of ``uri`` in ``declared`` (trailing ``/`` or not)."""
    bare = uri.rstrip("/")
    matches = [p for p in declared if bare == p.rstrip("/") or bare.startswith(p.rstrip("/") + "/")]
    return declared[max(matches, key=len)] if matches else None


def locate(
    uri: str,
    *,
    worker_region: str | None,
    declared: Mapping[str, str] | None = None,
    declared_bytes: Mapping[str, int] | None = None,
    options: S3Options | None = None,
) -> DataPlacement:
    """Find the region and size of one input.

    Args:
        uri: A local path, ``s3://`` URI, or any other URI whose region is declared.
        worker_region: The region local paths live in (the worker's configured region).
        declared: Regions by URI prefix; they win over lookups (e.g. for buckets you may not HeadBucket).
        declared_bytes: Sizes by URI, for inputs that cannot be listed (other schemes).
        options: How to reach S3.

    Raises:
        ConfigurationError: a local path without ``worker_region``, or another URI without a declared
            region or size.
    """
    declared = declared or {}
    region = _declared(uri, declared)
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme in ("", "file", "s3"):
        location = parse_uri(uri, what="input")
        size, files = total_bytes(uri, options)
        if region is not None:
            return DataPlacement(location.uri, region, size, files, "declared")
        if location.scheme == "s3":
            region, how = bucket_region(location.bucket, options)
            return DataPlacement(location.uri, region, size, files, how)
        if not worker_region:
            raise ConfigurationError(
                f"input {uri!r} is a local path but no worker region is configured: pass worker_region= or "
                "set COSTAWARE_WORKER_REGION"
            )
        return DataPlacement(location.uri, worker_region, size, files, "worker")
    # "gs://x/flights/" declared for "gs://x/flights": told to declare what was declared.
    sizes = {str(k).rstrip("/"): v for k, v in (declared_bytes or {}).items()}
    uri = uri.rstrip("/")
    meant = s3_spelling(uri)
    if meant and (region is None or uri not in sizes):
        raise ConfigurationError(f"input {uri!r} is an S3 location spelt another way: write it {meant!r}")
    if region is None or uri not in sizes:
        raise ConfigurationError(
            f"input {uri!r} is neither a local path nor s3://: declare its region in declared_regions="
            f"{{'{uri}': '<region>'}} and its size in declared_bytes={{'{uri}': <bytes>}}"
        )
    given = sizes[uri]
    text = str(given).strip()
    if isinstance(given, bool) or not (isinstance(given, int) or text.isdigit()) or int(text) < 0:
        # A negative size priced the transfer below zero and wrote a negative egress entry.
        raise ConfigurationError(
            f"declared_bytes of {uri!r} is {given!r}: give its size as a whole number of bytes >= 0"
        )
    return DataPlacement(uri, region, int(text), 1, "declared")


#: AWS bills data transfer per GB of 2**30 bytes.
BYTES_PER_BILLED_GB = Decimal(2**30)


@dataclass(frozen=True, slots=True)
class EgressEstimate:
    """What moving one input to the compute region would cost.

    Attributes:
        placement: Where the input lives.
        compute_region: Where it would be read.
        usd_per_gb: The transfer price between the two regions.
        usd: ``bytes / 2**30 * usd_per_gb``, to the micro-dollar.
    """

    placement: DataPlacement
    compute_region: str
    usd_per_gb: Decimal
    usd: Decimal

    @property
    def cross_region(self) -> bool:
        """Whether the data lives in another region than the compute."""
        return self.placement.region != self.compute_region


def estimate_egress(
    placement: DataPlacement, compute_region: str, usd_per_gb: Callable[[str, str], Decimal]
) -> EgressEstimate:
    """Egress USD of reading ``placement`` from ``compute_region``.

    Args:
        placement: The input.
        compute_region: Where the compute runs.
        usd_per_gb: The price look-up, e.g. ``PriceCatalog.transfer_usd_per_gb`` (raises
            ``PriceNotFoundError`` for unknown pairs).
    """
    price = usd_per_gb(placement.region, compute_region)
    usd = (Decimal(placement.bytes) / BYTES_PER_BILLED_GB * price).quantize(Decimal("0.000001"))
    return EgressEstimate(placement, compute_region, price, usd)
