"""Object stores through pyarrow's filesystems (local and S3) and fingerprints of the data in them.

S3 access takes an :class:`S3Options` (credentials, region, endpoint); the Airflow layer builds it from an
AWS connection (``costaware.hooks.aws``), so this module never imports airflow. pyarrow, boto3 and
xxhash are imported where they are used.

Fingerprints read metadata by default: size and modification time of local files, ETag (and version id
of a single object) of S3 objects from one listing or HEAD, never the bytes. Content is hashed (XXH3-128,
streamed) when asked, and in ``auto`` mode where metadata cannot be trusted: local files with whole-second
mtimes (coarse filesystems such as FAT/HFS+, or files unpacked from archives; two writes in one second
keep size and mtime) and S3 objects without an ETag (some S3-compatible stores). Files modified in the
last ``RACY_SECONDS`` are waited for, so a write in the same timestamp tick cannot go unseen.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from costaware.core.errors import ConfigurationError
from costaware.core.fingerprint import FileStat, InputFingerprint, fingerprint_input, safe_relative_path

if TYPE_CHECKING:
    import pyarrow.fs

#: A file modified this recently may change again within the same timestamp tick: wait it out.
RACY_SECONDS = 0.1
CHUNK_BYTES = 8 << 20
MODES = ("auto", "metadata", "content")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


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
        out = {
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_session_token": self.session_token,
            "region_name": self.region,
            "endpoint_url": self.endpoint_url,
        }
        return {k: v for k, v in out.items() if v}


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed data URI.

    Attributes:
        scheme: ``local`` or ``s3``.
        bucket: The S3 bucket (``""`` for local).
        path: The absolute local path, or the S3 key / prefix without a leading ``/``.
    """

    scheme: str
    bucket: str
    path: str

    @property
    def uri(self) -> str:
        if self.scheme == "s3":
            return f"s3://{self.bucket}/{self.path}" if self.path else f"s3://{self.bucket}"
        return self.path

    def child(self, relative: str) -> Location:
        """The location of ``relative`` (checked by ``safe_relative_path``) under this one."""
        rel = safe_relative_path(relative, what="relative path")
        if not rel:
            return self
        joined = f"{self.path.rstrip('/')}/{rel}" if self.path else rel
        return Location(self.scheme, self.bucket, joined)


def parse_uri(uri: str, *, what: str = "URI") -> Location:
    """Parse ``/abs/path``, ``file:///abs/path`` or ``s3://bucket/prefix``.

    Raises:
        ConfigurationError: a relative local path, a path with ``..`` segments, a malformed bucket name,
            or a scheme other than file and s3.
    """
    text = str(uri).strip()
    parsed = urlparse(text)
    if parsed.scheme == "s3":
        bucket = parsed.netloc
        if not _BUCKET.match(bucket):
            raise ConfigurationError(
                f"{what} {uri!r} names bucket {bucket!r}, which is not a valid S3 bucket name "
                "(3-63 characters: lower-case letters, digits, '.', '-')"
            )
        key = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        return Location("s3", bucket, safe_relative_path(key, what=f"key of {what} {uri!r}"))
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme == "file" else text
        if not path.startswith("/"):
            raise ConfigurationError(
                f"{what} {uri!r} is a relative path: workers run in changing folders, so give an absolute "
                "path such as '/data/flights' or an s3:// URI"
            )
        if path != "/":
            safe_relative_path(path[1:], what=f"{what} {uri!r}")
        return Location("local", "", path.rstrip("/") or "/")
    raise ConfigurationError(
        f"{what} {uri!r} has scheme {parsed.scheme!r}: use an absolute local path or s3://bucket/prefix"
    )


# -- clients --------------------------------------------------------------------------------------


def s3_client(options: S3Options | None = None) -> Any:
    """A boto3 S3 client for ``options``."""
    import boto3

    return boto3.session.Session().client("s3", **(options or S3Options()).boto3_kwargs())


def s3_filesystem(options: S3Options | None = None) -> pyarrow.fs.S3FileSystem:
    """A pyarrow S3 filesystem for ``options`` (the endpoint may be plain http, as moto's is)."""
    from pyarrow import fs

    opts = options or S3Options()
    kwargs: dict[str, Any] = {}
    if opts.endpoint_url:
        parsed = urlparse(opts.endpoint_url)
        kwargs["endpoint_override"] = parsed.netloc or parsed.path
        kwargs["scheme"] = parsed.scheme or "https"
    if opts.access_key:
        kwargs.update(access_key=opts.access_key, secret_key=opts.secret_key, session_token=opts.session_token)
    return fs.S3FileSystem(region=opts.region or "us-east-1", **kwargs)


def filesystem(location: Location, options: S3Options | None = None) -> tuple[pyarrow.fs.FileSystem, str]:
    """The pyarrow filesystem and the path in it for a location."""
    from pyarrow import fs

    if location.scheme == "s3":
        return s3_filesystem(options), f"{location.bucket}/{location.path}".rstrip("/")
    return fs.LocalFileSystem(), location.path


# -- listing --------------------------------------------------------------------------------------


def _visible(name: str) -> bool:
    # The same names pyarrow.dataset skips by default, so we fingerprint what a reader would read.
    return not name.startswith((".", "_"))


def _walk_local(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    if root.is_file():
        yield "", root.stat()
        return
    if not root.is_dir():
        raise ConfigurationError(f"input {str(root)!r} does not exist: check the path or the upstream task")
    stack = [root]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as it:
            for item in it:
                if not _visible(item.name):
                    continue
                if item.is_dir(follow_symlinks=True):
                    stack.append(Path(item.path))
                elif item.is_file(follow_symlinks=True):
                    yield Path(item.path).relative_to(root).as_posix(), item.stat()


def _list_s3(location: Location, options: S3Options | None) -> list[dict[str, Any]]:
    """Objects of an S3 object or prefix: ``Key``, ``Size``, ``ETag`` and, for a single object, ``VersionId``."""
    from botocore.exceptions import ClientError

    client = s3_client(options)
    if location.path and not location.path.endswith("/"):
        try:
            head = client.head_object(Bucket=location.bucket, Key=location.path)
            return [
                {
                    "Key": location.path,
                    "Size": head["ContentLength"],
                    "ETag": head.get("ETag", ""),
                    "VersionId": head.get("VersionId") or "",
                }
            ]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
    prefix = f"{location.path}/" if location.path else ""
    found: list[dict[str, Any]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix) :]
            if rel and not obj["Key"].endswith("/") and all(_visible(p) for p in rel.split("/")):
                found.append({"Key": obj["Key"], "Size": obj["Size"], "ETag": obj.get("ETag", ""), "VersionId": ""})
    return found


def total_bytes(uri: str, options: S3Options | None = None) -> tuple[int, int]:
    """(bytes, number of files) of a local file/folder or an S3 object/prefix, from metadata only."""
    location = parse_uri(uri, what="input")
    if location.scheme == "s3":
        objects = _list_s3(location, options)
        return sum(int(o["Size"]) for o in objects), len(objects)
    stats = [st for _, st in _walk_local(Path(location.path))]
    return sum(st.st_size for st in stats), len(stats)


def _settled(root: Path, now: float) -> list[tuple[str, os.stat_result]]:
    """Stats of every file, waiting out the racy window when a file was modified a moment ago.

    A second write within the filesystem's timestamp granularity would not change the mtime; once
    ``RACY_SECONDS`` have passed since the newest mtime, any later write shows.
    """
    found = list(_walk_local(root))
    newest = max((st.st_mtime for _, st in found), default=0.0)
    if newest > now - RACY_SECONDS:
        time.sleep(min(newest - now + RACY_SECONDS, RACY_SECONDS))
        found = list(_walk_local(root))
    return found


# -- hashing --------------------------------------------------------------------------------------


def _hasher() -> Any:
    try:
        import xxhash
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ConfigurationError("content fingerprints need xxhash: pip install 'xxhash>=3.5'") from e
    return xxhash.xxh3_128()


def hash_local_file(path: Path) -> str:
    """XXH3-128 of a local file, streamed in 8 MiB chunks into one reused buffer."""
    h = _hasher()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            h.update(view[:n])
    return f"xxh3_128={h.hexdigest()}"


def hash_bytes(data: bytes | memoryview) -> str:
    """XXH3-128 of bytes in memory."""
    h = _hasher()
    h.update(data)
    return f"xxh3_128={h.hexdigest()}"


def _hash_s3_object(client: Any, bucket: str, key: str) -> str:
    h = _hasher()
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    for chunk in body.iter_chunks(CHUNK_BYTES):
        h.update(chunk)
    return f"xxh3_128={h.hexdigest()}"


def fingerprint_uri(
    name: str, uri: str, options: S3Options | None = None, *, mode: str = "auto", now: float | None = None
) -> InputFingerprint:
    """Fingerprint one input: a local Parquet/CSV file or folder, an S3 object or prefix.

    Args:
        name: The name the transform sees the input under.
        uri: Absolute path, ``file://`` or ``s3://`` URI.
        options: How to reach S3.
        mode: ``auto`` (metadata, content where metadata cannot be trusted), ``metadata`` or ``content``.
        now: The current time (seconds since the epoch), for tests.

    Raises:
        ConfigurationError: unknown mode, bad URI, or the input does not exist or is empty.
    """
    if mode not in MODES:
        raise ConfigurationError(f"fingerprint mode {mode!r} is unknown: use one of {', '.join(MODES)}")
    location = parse_uri(uri, what=f"input {name!r}")
    stats: list[FileStat] = []
    hashed = False
    if location.scheme == "s3":
        client = s3_client(options) if mode != "metadata" else None
        for obj in _list_s3(location, options):
            rel = obj["Key"][len(location.path) :].lstrip("/")
            version = f"etag={obj['ETag']};version={obj['VersionId']}"
            if mode == "content" or (mode == "auto" and not obj["ETag"]):
                version, hashed = _hash_s3_object(client, location.bucket, obj["Key"]), True
            stats.append(FileStat(rel, int(obj["Size"]), version))
    else:
        root = Path(location.path)
        for rel, st in _settled(root, time.time() if now is None else now):
            version = f"mtime_ns={st.st_mtime_ns}"
            if mode == "content" or (mode == "auto" and st.st_mtime_ns % 1_000_000_000 == 0):
                # Whole-second mtimes come from coarse filesystems or archives: two writes in one second
                # keep size and mtime, so only the bytes tell.
                version, hashed = hash_local_file(root / rel if rel else root), True
            stats.append(FileStat(rel, st.st_size, version))
    return fingerprint_input(name, location.uri, stats, mode="content" if hashed else "metadata")
