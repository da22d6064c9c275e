"""Object stores through pyarrow's filesystems and boto3: local folders and ``s3://bucket/prefix``.

S3 access takes an :class:`S3Options` (credentials, region, endpoint); the Airflow layer builds it from an
AWS connection (``costaware.hooks.aws``), so this module never imports airflow. pyarrow, boto3 and
xxhash are imported where they are used. Input fingerprints live in ``costaware.adapters.input_data``.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from costaware.core.errors import ConfigurationError
from costaware.core.fingerprint import safe_relative_path

if TYPE_CHECKING:
    import pyarrow.fs

CHUNK_BYTES = 8 << 20
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
        """Keyword arguments for ``boto3.client('s3', ...)``, unset ones left out."""
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
        """The location as a URI (``s3://bucket/key``) or an absolute path."""
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
        kwargs.update(
            access_key=opts.access_key, secret_key=opts.secret_key, session_token=opts.session_token
        )
    return fs.S3FileSystem(region=opts.region or "us-east-1", **kwargs)


def filesystem(location: Location, options: S3Options | None = None) -> tuple[pyarrow.fs.FileSystem, str]:
    """The pyarrow filesystem and the path in it for a location."""
    from pyarrow import fs

    if location.scheme == "s3":
        return s3_filesystem(options), f"{location.bucket}/{location.path}".rstrip("/")
    return fs.LocalFileSystem(), location.path


# -- hashing --------------------------------------------------------------------------------------


def new_hasher() -> Any:
    """A fresh XXH3-128 hasher (fast, non-cryptographic: for change detection, not security)."""
    try:
        import xxhash
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ConfigurationError("content fingerprints need xxhash: pip install 'xxhash>=3.5'") from e
    return xxhash.xxh3_128()


def hash_bytes(data: bytes | memoryview) -> str:
    """XXH3-128 of bytes in memory."""
    h = new_hasher()
    h.update(data)
    return f"xxh3_128={h.hexdigest()}"


# -- stores: small atomic primitives over a root folder or bucket/prefix --------------------------


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One stored file: path relative to the store root, size, modification time (epoch seconds)."""

    path: str
    size: int
    mtime: float


class ObjectStore:
    """Files under a root (an absolute local folder or ``s3://bucket/prefix``), with atomic primitives.

    Every path argument is relative to the root and checked with ``safe_relative_path``, so no caller
    can reach outside the root. Tokens returned by :meth:`read` identify one version of a file (the
    ETag on S3, a content digest locally) for the conditional :meth:`replace` and :meth:`delete`.

    Use :func:`open_store` to build one.
    """

    scheme = ""

    def __init__(self, root: Location) -> None:
        self.root = root

    def uri(self, rel: str = "") -> str:
        """The URI of ``rel`` under the root."""
        return self.root.child(rel).uri

    def read(self, rel: str) -> tuple[bytes, str] | None:
        """(bytes, version token) of a file, or ``None`` when it does not exist."""
        raise NotImplementedError

    def write(self, rel: str, data: bytes) -> None:
        """Write a whole file; readers see the old or the new bytes, never a mix."""
        raise NotImplementedError

    def create(self, rel: str, data: bytes) -> str | None:
        """Write a file only if none exists; returns its token, or ``None`` when another one was there."""
        raise NotImplementedError

    def replace(self, rel: str, data: bytes, token: str) -> str | None:
        """Overwrite a file only if it is still the version ``token``; returns the new token or ``None``."""
        raise NotImplementedError

    def delete(self, rel: str, token: str | None = None) -> bool:
        """Delete a file (only if it is still version ``token``, when given); returns whether it did."""
        raise NotImplementedError

    def stat(self, rel: str) -> ObjectInfo | None:
        """Size and modification time of a file, or ``None`` when it does not exist."""
        raise NotImplementedError

    def children(self, rel: str) -> list[str]:
        """Names of the immediate children (files and folders) of a folder."""
        raise NotImplementedError

    def files(self, rel: str) -> list[ObjectInfo]:
        """Every file under a folder, recursively, with paths relative to the store root."""
        raise NotImplementedError

    def delete_tree(self, rel: str) -> None:
        """Delete a folder and everything under it (missing is fine)."""
        raise NotImplementedError


class LocalObjectStore(ObjectStore):
    """An :class:`ObjectStore` in a local (or network-mounted) folder."""

    scheme = "local"

    def path(self, rel: str) -> Path:
        """The absolute local path of ``rel``."""
        return Path(self.root.child(rel).path)

    def read(self, rel: str) -> tuple[bytes, str] | None:
        """See :meth:`ObjectStore.read`."""
        try:
            data = self.path(rel).read_bytes()
        except FileNotFoundError:
            return None
        return data, hash_bytes(data)

    def _staged(self, rel: str, data: bytes) -> Path:
        target = self.path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        with open(staged, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return staged

    def write(self, rel: str, data: bytes) -> None:
        """See :meth:`ObjectStore.write`."""
        staged = self._staged(rel, data)
        staged.replace(self.path(rel))

    def create(self, rel: str, data: bytes) -> str | None:
        """See :meth:`ObjectStore.create`."""
        staged = self._staged(rel, data)
        try:
            os.link(staged, self.path(rel))  # atomic, fails if the name exists, and the content is complete
        except FileExistsError:
            return None
        finally:
            staged.unlink(missing_ok=True)
        return hash_bytes(data)

    def replace(self, rel: str, data: bytes, token: str) -> str | None:
        """See :meth:`ObjectStore.replace`."""
        current = self.read(rel)
        if current is None or current[1] != token:
            return None
        self.write(rel, data)
        return hash_bytes(data)

    def delete(self, rel: str, token: str | None = None) -> bool:
        """See :meth:`ObjectStore.delete`."""
        target = self.path(rel)
        if token is not None:
            current = self.read(rel)
            if current is None or current[1] != token:
                return False
            # Move it aside first, then check it is still the version we meant to delete.
            aside = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.del")
            try:
                target.rename(aside)
            except FileNotFoundError:
                return False
            if hash_bytes(aside.read_bytes()) != token:
                aside.rename(target)
                return False
            aside.unlink()
            return True
        try:
            target.unlink()
        except FileNotFoundError:
            return False
        return True

    def stat(self, rel: str) -> ObjectInfo | None:
        """Size and modification time of a file, or ``None`` when it does not exist."""
        try:
            st = self.path(rel).stat()
        except FileNotFoundError:
            return None
        return ObjectInfo(safe_relative_path(rel), st.st_size, st.st_mtime)

    def children(self, rel: str) -> list[str]:
        """See :meth:`ObjectStore.children`."""
        try:
            return sorted(p.name for p in self.path(rel).iterdir())
        except FileNotFoundError:
            return []

    def files(self, rel: str) -> list[ObjectInfo]:
        """See :meth:`ObjectStore.files`."""
        base = self.path(rel)
        if not base.is_dir():
            return []
        root = Path(self.root.path)
        return [
            ObjectInfo(p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime)
            for p in sorted(base.rglob("*"))
            if p.is_file()
        ]

    def delete_tree(self, rel: str) -> None:
        """See :meth:`ObjectStore.delete_tree`."""
        import shutil

        shutil.rmtree(self.path(rel), ignore_errors=True)


def _s3_error_code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


class S3ObjectStore(ObjectStore):
    """An :class:`ObjectStore` under ``s3://bucket/prefix``.

    Conditional writes use S3's ``If-None-Match`` and ``If-Match`` (supported by AWS S3 since 2024 and by
    moto); large files go through pyarrow's multipart upload.
    """

    scheme = "s3"

    def __init__(self, root: Location, options: S3Options | None = None) -> None:
        super().__init__(root)
        self.options = options or S3Options()
        self._client: Any = None
        self._fs: Any = None

    @property
    def client(self) -> Any:
        """The boto3 S3 client, made on first use."""
        if self._client is None:
            self._client = s3_client(self.options)
        return self._client

    @property
    def fs(self) -> pyarrow.fs.S3FileSystem:
        """The pyarrow S3 filesystem, made on first use."""
        if self._fs is None:
            self._fs = s3_filesystem(self.options)
        return self._fs

    def key(self, rel: str) -> str:
        """The S3 key of ``rel``."""
        return self.root.child(rel).path

    def read(self, rel: str) -> tuple[bytes, str] | None:
        """See :meth:`ObjectStore.read`."""
        from botocore.exceptions import ClientError

        try:
            got = self.client.get_object(Bucket=self.root.bucket, Key=self.key(rel))
        except ClientError as e:
            if _s3_error_code(e) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        return got["Body"].read(), str(got["ETag"])

    def write(self, rel: str, data: bytes) -> None:
        """See :meth:`ObjectStore.write`."""
        if len(data) < 8 << 20:
            self.client.put_object(Bucket=self.root.bucket, Key=self.key(rel), Body=data)
            return
        with self.fs.open_output_stream(f"{self.root.bucket}/{self.key(rel)}") as out:  # multipart upload
            out.write(data)

    def _conditional_put(self, rel: str, data: bytes, **condition: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            put = self.client.put_object(Bucket=self.root.bucket, Key=self.key(rel), Body=data, **condition)
        except ClientError as e:
            if _s3_error_code(e) in (
                "PreconditionFailed",
                "ConditionalRequestConflict",
                "412",
                "409",
                "NoSuchKey",
            ):
                return None
            raise
        return str(put["ETag"])

    def create(self, rel: str, data: bytes) -> str | None:
        """See :meth:`ObjectStore.create`."""
        return self._conditional_put(rel, data, IfNoneMatch="*")

    def replace(self, rel: str, data: bytes, token: str) -> str | None:
        """See :meth:`ObjectStore.replace`."""
        return self._conditional_put(rel, data, IfMatch=token)

    def delete(self, rel: str, token: str | None = None) -> bool:
        """See :meth:`ObjectStore.delete`."""
        from botocore.exceptions import ClientError

        if token is None:
            self.client.delete_object(Bucket=self.root.bucket, Key=self.key(rel))
            return True
        try:
            self.client.delete_object(Bucket=self.root.bucket, Key=self.key(rel), IfMatch=token)
        except ClientError as e:
            if _s3_error_code(e) in ("PreconditionFailed", "NoSuchKey", "404", "412"):
                return False
            raise
        return True

    def stat(self, rel: str) -> ObjectInfo | None:
        """Size and modification time of a file, or ``None`` when it does not exist."""
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.root.bucket, Key=self.key(rel))
        except ClientError as e:
            if _s3_error_code(e) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        return ObjectInfo(
            safe_relative_path(rel), int(head["ContentLength"]), head["LastModified"].timestamp()
        )

    def _prefix(self, rel: str) -> str:
        key = self.key(rel)
        return f"{key}/" if key else ""

    def children(self, rel: str) -> list[str]:
        """See :meth:`ObjectStore.children`."""
        prefix = self._prefix(rel)
        names: set[str] = set()
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.root.bucket, Prefix=prefix, Delimiter="/"
        )
        for page in pages:
            names |= {p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])}
            names |= {o["Key"][len(prefix) :] for o in page.get("Contents", [])}
        return sorted(n for n in names if n)

    def files(self, rel: str) -> list[ObjectInfo]:
        """See :meth:`ObjectStore.files`."""
        prefix = self._prefix(rel)
        base = self._prefix("")
        found: list[ObjectInfo] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.root.bucket, Prefix=prefix
        ):
            for obj in page.get("Contents", []):
                found.append(
                    ObjectInfo(obj["Key"][len(base) :], int(obj["Size"]), obj["LastModified"].timestamp())
                )
        return found

    def delete_tree(self, rel: str) -> None:
        """See :meth:`ObjectStore.delete_tree`."""
        keys = [{"Key": self._prefix("") + info.path} for info in self.files(rel)]
        for start in range(0, len(keys), 1000):
            self.client.delete_objects(
                Bucket=self.root.bucket, Delete={"Objects": keys[start : start + 1000]}
            )


def open_store(uri: str, options: S3Options | None = None) -> ObjectStore:
    """An :class:`ObjectStore` for an absolute local folder or ``s3://bucket/prefix``.

    Raises:
        ConfigurationError: the URI is relative, has ``..`` segments, or another scheme.
    """
    location = parse_uri(uri, what="store")
    if location.scheme == "s3":
        return S3ObjectStore(location, options)
    return LocalObjectStore(location)
