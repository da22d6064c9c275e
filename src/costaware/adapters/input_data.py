"""Input data: list, size, fingerprint and read local Parquet/CSV files or folders and S3 objects or prefixes.

S3 access takes an ``S3Options`` built by the Airflow layer from an AWS connection; this module never
imports airflow, and imports pyarrow, boto3 and xxhash where they are used.

Fingerprints read metadata by default: size and modification time of local files, ETag (and version id
of a single object) of S3 objects from one listing or HEAD, never the bytes. Content is hashed (XXH3-128,
streamed) when asked, and in ``auto`` mode where metadata cannot be trusted: local files with whole-second
mtimes (coarse filesystems such as FAT/HFS+, or files unpacked from archives; two writes in one second
keep size and mtime) and S3 objects without an ETag (some S3-compatible stores). Files modified in the
last ``RACY_SECONDS`` are waited for, so a write in the same timestamp tick cannot go unseen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from costaware.adapters.object_store import (
    CHUNK_BYTES,
    Location,
    S3Options,
    filesystem,
    new_hasher,
    parse_uri,
    s3_client,
)
from costaware.core.errors import ConfigurationError
from costaware.core.fingerprint import FileStat, InputFingerprint, fingerprint_input

#: A file modified this recently may change again within the same timestamp tick: wait it out.
RACY_SECONDS = 0.1
MODES = ("auto", "metadata", "content")


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
    """Objects of an S3 object or prefix: ``Key``, ``Size``, ``ETag`` (``VersionId`` of a single object).

    Raises:
        ConfigurationError: no AWS credentials were found, or the bucket does not exist (raw botocore
            tracebacks before; a mistyped bucket was retried as if S3 could create it meanwhile).
    """
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    try:
        return _list_s3_objects(location, options)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "NoSuchBucket":
            raise
        raise ConfigurationError(
            f"cannot list {location.uri}: bucket {location.bucket!r} does not exist: check the bucket's name "
            "(and the endpoint the connection points at, for MinIO or moto), or the upstream task"
        ) from e
    except (NoCredentialsError, PartialCredentialsError) as e:
        raise ConfigurationError(
            f"cannot list {location.uri}: {e}. Give the task's AWS connection (aws_conn_id, default "
            "'aws_default') credentials allowed s3:ListBucket and s3:GetObject, or set them in the worker's "
            "environment"
        ) from e


def _list_s3_objects(location: Location, options: S3Options | None) -> list[dict[str, Any]]:
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
                found.append(
                    {"Key": obj["Key"], "Size": obj["Size"], "ETag": obj.get("ETag", ""), "VersionId": ""}
                )
    return found


def total_bytes(uri: str, options: S3Options | None = None, *, missing_ok: bool = False) -> tuple[int, int]:
    """(bytes, number of files) of a local file/folder or an S3 object/prefix, from metadata only.

    Raises:
        ConfigurationError: an S3 prefix with no object, unless ``missing_ok`` (a checkpoint not yet made),
            as a local path that does not exist is: a mistyped input or replica read as 0 bytes, and a
            data-locality check priced it at $0 and accepted the replica.
    """
    location = parse_uri(uri, what="input")
    if location.scheme == "s3":
        objects = _list_s3(location, options)
        if not objects and not missing_ok:
            raise ConfigurationError(
                f"input {uri!r} holds no object: check the bucket and prefix, or the upstream task"
            )
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


def hash_local_file(path: Path) -> str:
    """XXH3-128 of a local file, streamed in 8 MiB chunks into one reused buffer."""
    h = new_hasher()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            h.update(view[:n])
    return f"xxh3_128={h.hexdigest()}"


def _hash_s3_object(client: Any, bucket: str, key: str) -> str:
    h = new_hasher()
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


def read_frame(uri: str, options: S3Options | None = None) -> Any:
    """Read a Parquet or CSV file or folder (local or S3) into a pandas DataFrame with pyarrow.

    The format follows the file names: ``.csv`` / ``.csv.gz`` files are read as CSV, anything else as
    Parquet. Names starting with ``.`` or ``_`` are skipped, as pyarrow.dataset does.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    location = parse_uri(uri, what="input")
    fs, path = filesystem(location, options)
    fmt = "csv" if location.path.endswith((".csv", ".csv.gz")) else "parquet"
    if location.scheme == "local" and Path(location.path).is_dir():
        names = [rel for rel, _ in _walk_local(Path(location.path))]
        if names and all(n.endswith((".csv", ".csv.gz")) for n in names):
            fmt = "csv"
    elif location.scheme == "s3":
        keys = [o["Key"] for o in _list_s3(location, options)]
        if keys and all(k.endswith((".csv", ".csv.gz")) for k in keys):
            fmt = "csv"
        if len(keys) == 1 and keys[0] == location.path:
            path = f"{location.bucket}/{keys[0]}"
    try:
        return ds.dataset(path, filesystem=fs, format=fmt).to_table().to_pandas()
    except pa.ArrowInvalid as e:
        # Not data a retry could fix (a file that is not Parquet, a CSV with ragged rows): said once, plainly.
        raise ConfigurationError(
            f"input {uri!r} is not readable as {fmt}: {e}; fix the file it names or move it out of the input "
            "(every file of a folder is read), then clear the task; if a writer was still writing it, clear "
            "the task once the file is whole"
        ) from e
