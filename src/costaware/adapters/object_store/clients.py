"""How to reach a location: S3 credentials, and the boto3 client or pyarrow filesystem for it.

The Airflow layer builds :class:`S3Options` from an AWS connection (``costaware.hooks.aws``), so nothing
here imports airflow; boto3 and pyarrow are imported where they are used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from costaware.adapters.object_store.location import Location

if TYPE_CHECKING:
    import pyarrow.fs


@dataclass(frozen=True, slots=True)
class S3Options:
    """How to reach S3: credentials, region and endpoint (``None`` uses boto3's default chain).

    Attributes:
        access_key: AWS access key id.
        secret_key: AWS secret access key.
        session_token: Session token of temporary credentials.
        region: Region of the client (a bucket's own region is looked up where it matters).
        endpoint_url: Endpoint such as ``http://127.0.0.1:5000`` for moto or MinIO.
    """

    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    region: str | None = None
    endpoint_url: str | None = None

    def boto3_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``boto3.client('s3', ...)``, unset ones left out."""
        out = {
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_session_token": self.session_token,
            "region_name": self.region,
            "endpoint_url": self.endpoint_url,
        }
        return {k: v for k, v in out.items() if v}


def s3_client(options: S3Options | None = None) -> Any:
    """A boto3 S3 client for ``options``."""
    import boto3

    return boto3.session.Session().client("s3", **(options or S3Options()).boto3_kwargs())


def s3_filesystem(options: S3Options | None = None) -> pyarrow.fs.S3FileSystem:
    """A pyarrow S3 filesystem for ``options`` (the endpoint may be plain http, as moto's is).

    Without a region in ``options``, the one boto3 reads (``AWS_DEFAULT_REGION``, the AWS config), as the
    store's boto3 client does: "us-east-1" put in its place sent a worker in eu-west-1 to another region
    for large writes and input reads only.
    """
    import boto3
    from pyarrow import fs

    opts = options or S3Options()
    kwargs: dict[str, Any] = {}
    region = opts.region or boto3.session.Session().region_name
    if region:
        kwargs["region"] = region
    if opts.endpoint_url:
        parsed = urlparse(opts.endpoint_url)
        kwargs["endpoint_override"] = parsed.netloc or parsed.path
        kwargs["scheme"] = parsed.scheme or "https"
    if opts.access_key:
        kwargs.update(
            access_key=opts.access_key, secret_key=opts.secret_key, session_token=opts.session_token
        )
    return fs.S3FileSystem(**kwargs)


def filesystem(location: Location, options: S3Options | None = None) -> tuple[pyarrow.fs.FileSystem, str]:
    """The pyarrow filesystem and the path in it for a location."""
    from pyarrow import fs

    if location.scheme == "s3":
        return s3_filesystem(options), f"{location.bucket}/{location.path}".rstrip("/")
    return fs.LocalFileSystem(), location.path
