"""Where checkpoints, outputs and results go: a local folder or S3, behind one small interface.

Keys are ``/``-separated paths relative to the store's root URI. boto3 is imported only when an ``s3://``
store is first used, so the runtime itself needs nothing beyond the standard library.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import logging
import os
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import urlparse, urlsplit

from costaware_runtime import _files
from costaware_runtime.contract import S3_ENDPOINT_URL, is_uri
from costaware_runtime.errors import ContractError, StoreError

S3_INSTALL_HINT = "pip install 'costaware-runtime[s3]'"

log = logging.getLogger(__name__)


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative ``/`` path (no ``..``, not absolute, no empty parts).

    Raises:
        ContractError: ``key`` could escape the folder it is written into.
    """
    parts = key.split("/")
    if not key or key.startswith("/") or "\\" in key or any(part in ("", ".", "..") for part in parts):
        raise ContractError(f"{key!r} is not a relative file path like 'checkpoint-3/model.pt'")
    return key


class Store(ABC):
    """Files under one root URI, addressed by relative keys."""

    uri: str

    @abstractmethod
    def put(self, key: str, source: BinaryIO) -> None:
        """Store what ``source`` holds (read to its end) under ``key``, replacing what was there."""

    @abstractmethod
    def read(self, key: str) -> bytes | None:
        """The bytes under ``key``, or None when there is no such key."""

    @abstractmethod
    def download(self, key: str, destination: Path) -> None:
        """Copy ``key`` to the local file ``destination`` (atomically); StoreError when it is missing."""

    def keys(self, prefix: str = "") -> list[str]:
        """Every key that starts with ``prefix``, sorted."""
        return sorted(self.sizes(prefix))

    @abstractmethod
    def sizes(self, prefix: str = "") -> dict[str, int]:
        """The size in bytes of every key that starts with ``prefix``."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Remove ``keys``; keys that are already gone are fine."""

    @abstractmethod
    def modified(self, folder: str) -> float | None:
        """When anything under the top-level ``folder`` last changed (epoch seconds); None: it is empty.

        A file written counts, and so does a part an unfinished upload into it received (a writer alive).
        """

    def folders(self, prefix: str = "") -> list[str]:
        """The top-level folders whose names start with ``prefix``, sorted."""
        return sorted({key.split("/", 1)[0] for key in self.keys(prefix) if "/" in key})

    def delete_folder(self, folder: str) -> None:
        """Remove the top-level ``folder`` and everything in it."""
        self.delete(self.keys(f"{check_key(folder)}/"))

    def check(self) -> None:  # noqa: B027  # a store with nothing to check needs no override
        """Fail now if the store cannot be used at all (an S3 store without boto3, a folder under a file)."""

    def abort_uploads(self, prefix: str, idle_since: float, started_before: float) -> list[str]:
        """Abort the unfinished uploads to keys under ``prefix`` that did nothing since ``idle_since``.

        An upload counts as busy at its start and at each part it received (epoch seconds); one whose parts
        may not be listed is aborted only if it began before ``started_before``. Returns the keys whose
        uploads were aborted. A folder store has none: what a killed copy left (a temporary file) goes with
        its folder.
        """
        return []

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``."""
        self.put(key, io.BytesIO(data))

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The bytes under ``key`` and a tag that changes whenever ``key`` is replaced; None: no such key."""
        data = self.read(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def put_bytes_if(self, key: str, data: bytes, tag: str | None) -> bool:
        """Store ``data`` under ``key`` only if ``key`` still has ``tag`` (None: still does not exist).

        Returns False, writing nothing, when another writer replaced (or wrote) ``key`` since. Here the check
        and the write are two steps: a writer between them is overwritten (see the stores' overrides).
        """
        current = self.read_versioned(key)
        if (None if current is None else current[1]) != tag:
            return False
        self.put_bytes(key, data)
        return True

    def location(self) -> str:
        """What tells this store apart from another whatever way its URI was spelt."""
        return self.uri

    def url(self, key: str = "") -> str:
        """The full URI of ``key``."""
        return f"{self.uri.rstrip('/')}/{key}" if key else self.uri


class LocalStore(Store):
    """A folder on a local or mounted filesystem; every file is written to a temporary name, then renamed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = str(root)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def location(self) -> str:
        return str(self.root.resolve())  # "ckpts", "./ckpts" and file:///abs/ckpts are one folder

    def check(self) -> None:
        """Fail before the job runs where the folder cannot be written, nor made.

        A folder under a file, or one the job may not write, failed only at the first push or at the outputs'
        upload, after the training (and as a passing failure, retried: training again to fail again). Nothing
        is made here: a folder that does not exist yet is checked through the nearest one that does.

        Raises:
            ContractError: The folder, or the nearest folder above it that exists, is a file, not writable,
                or refuses to rename or delete a file.
            StoreError: The filesystem could not be asked (a mount that does not answer).
        """
        existing = self.root.absolute()
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            where = "is a file" if existing == self.root.absolute() else f"is under {existing}, a file"
            raise ContractError(f"{self.uri} {where}, not a folder: give a folder's path")
        made = "" if existing == self.root.absolute() else f" (where {self.uri} would be made)"
        refusal = check_writes(existing)
        if refusal is None:
            return
        error = refusal.error
        left = refusal.left_note("its")
        if not refusal.refused:
            raise StoreError(
                f"could not {refusal.step} a file in {existing} for {self.uri}: {error}{left}"
            ) from error
        if refusal.step == "create":
            raise ContractError(
                f"{self.uri} cannot be written: {existing}{made} refuses a new file ({refusal.reason}); "
                "give a folder the job may write, or make it writable"
            ) from error
        # An append-only folder, a Mountpoint for S3 without --allow-delete: "refuses a new file" said the
        # opposite of what happened. A store renames and deletes files (each is written to a temporary
        # name first; old steps and manifests are deleted), so it is still refused.
        mount = (
            " (a Mountpoint for S3 renames no file: give the bucket's s3:// URI instead)"
            if refusal.step == "rename" and refusal.unsupported
            else ""
        )
        raise ContractError(
            f"{self.uri} cannot be a store: {existing}{made} takes new files but refuses to "
            f"{refusal.step} them ({refusal.reason}), and a store renames and deletes files{left}; give a "
            f"folder that allows both{mount}"
        ) from error

    def put(self, key: str, source: BinaryIO) -> None:
        with (
            _local_errors(self.url(key), "write"),
            _files.replacing(self._path(key)) as temp,
            open(temp, "wb") as target,
        ):
            shutil.copyfileobj(source, target, 1 << 20)

    def read(self, key: str) -> bytes | None:
        with _local_errors(self.url(key), "read"):
            try:
                return self._path(key).read_bytes()
            except FileNotFoundError:
                return None

    def download(self, key: str, destination: Path) -> None:
        source = self._path(key)
        if not source.is_file():
            raise StoreError(f"{self.url(key)} does not exist")
        with _local_errors(self.url(key), "read"), _files.replacing(destination) as temp:
            shutil.copyfile(source, temp)

    def sizes(self, prefix: str = "") -> dict[str, int]:
        if not self.root.is_dir():
            return {}
        found = {}
        with _local_errors(self.uri, "list"):
            for folder, _, names in os.walk(self.root):
                for name in names:
                    if name.startswith(".") and name.endswith(".tmp"):
                        continue  # another writer's file, not yet renamed into place
                    path = Path(folder, name)
                    key = path.relative_to(self.root).as_posix()
                    if key.startswith(prefix):
                        with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                            found[key] = path.stat().st_size
        return found

    def folders(self, prefix: str = "") -> list[str]:
        # From the folder itself: one holding only a killed writer's temporary file lists no key.
        with _local_errors(self.uri, "list"):
            if not self.root.is_dir():
                return []
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and p.name.startswith(prefix))

    def delete_folder(self, folder: str) -> None:
        # Whole, temporary files too: a writer killed mid-copy left one that no key names and nothing
        # deleted (a checkpoint's size, per kill, for good).
        with _local_errors(self.url(folder), "delete"), contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self._path(folder))

    def modified(self, folder: str) -> float | None:
        # The folders and temporary files too: a writer busy copying a file into it counts as a change.
        root = self._path(folder)
        newest: float | None = None
        with _local_errors(self.url(folder), "list"):
            for path, _, names in os.walk(root):
                for entry in (Path(path), *(Path(path, name) for name in names)):
                    with contextlib.suppress(FileNotFoundError):  # renamed or deleted meanwhile
                        newest = max(newest or 0.0, entry.stat().st_mtime)
        return newest

    def put_bytes_if(self, key: str, data: bytes, tag: str | None) -> bool:
        # Check and rename under a lock on the store's folder, which every writer of it takes here: no
        # writer replaces the key between them. A filesystem without flock (some network mounts) leaves the
        # base class's small window between the check and the rename.
        with _local_errors(self.uri, "write"):
            self.root.mkdir(parents=True, exist_ok=True)
        with _folder_lock(self.root):
            return super().put_bytes_if(key, data, tag)

    def delete(self, keys: Iterable[str]) -> None:
        with _local_errors(self.uri, "delete"):
            for key in keys:
                path = self._path(key)
                path.unlink(missing_ok=True)
                # Drop the folders the key emptied, so a deleted step leaves no husk behind.
                for parent in path.parents:
                    if parent == self.root or not parent.is_relative_to(self.root):
                        break
                    try:
                        parent.rmdir()
                    except OSError:
                        break


class S3Store(Store):
    """A prefix of an S3 bucket (or of an S3-compatible store at ``COSTAWARE_S3_ENDPOINT_URL``).

    Credentials come from boto3's default chain; the region from ``AWS_REGION`` or ``AWS_DEFAULT_REGION``.
    """

    def __init__(self, bucket: str, prefix: str) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.uri = f"s3://{bucket}/{self.prefix}".rstrip("/")
        #: False once the store refused a conditional write (an S3-compatible store without them).
        self._conditional_writes = True
        #: The S3 permissions found missing, each warned about once.
        self._missing_permissions: set[str] = set()

    @cached_property
    def _client(self) -> Any:
        try:
            import boto3
        except ImportError as e:
            raise ContractError(f"{self.uri} needs boto3, which is not installed: {S3_INSTALL_HINT}") from e
        endpoint = os.environ.get(S3_ENDPOINT_URL) or os.environ.get("AWS_ENDPOINT_URL") or None
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
        return boto3.client("s3", endpoint_url=endpoint, region_name=region)

    def check(self) -> None:
        """Fail before the job runs where the bucket does not exist or the store cannot be reached.

        Only a missing bucket (404: a ``ContractError``, not retried) or an endpoint that does not answer (a
        ``StoreError``, retried) fails here: any other answer (403 from credentials that may write but not
        list, a gateway without HeadBucket) is left to the first real read or write.
        """
        client = self._client  # first: without boto3 this says how to install it
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            for wait in CREDENTIAL_RETRY_SECONDS:
                try:
                    client.head_bucket(Bucket=self.bucket)
                    break
                except NoCredentialsError:
                    # An instance role's metadata service can time out once (botocore then finds none):
                    # asked again before the attempt is failed for good.
                    time.sleep(wait)
            else:
                client.head_bucket(Bucket=self.bucket)
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket", "NotFound"):
                # A wrong URI, not a passing failure: every retry would pay a start to fail the same way.
                raise ContractError(
                    f"bucket {self.bucket!r} of {self.uri} does not exist: fix the URI, or create the bucket"
                ) from e
        except NoCredentialsError as e:
            # No credentials at all: every retry would pay a start to fail the same way (74 retried it).
            raise ContractError(
                f"no AWS credentials to reach {self.uri}: give the job a role (SageMaker, Batch, an IRSA "
                "service account) or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            ) from e
        except BotoCoreError as e:
            raise StoreError(
                f"could not reach {self.uri}: {e}; check {S3_ENDPOINT_URL} (or AWS_ENDPOINT_URL) for an "
                "S3-compatible store, and the credentials"
            ) from e

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def put(self, key: str, source: BinaryIO) -> None:
        with self._errors(key, "upload"):
            self._client.upload_fileobj(source, self.bucket, self._key(key))

    def read(self, key: str) -> bytes | None:
        with self._errors(key, "read"):
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
            except self._client.exceptions.NoSuchKey:
                return None
            body: bytes = response["Body"].read()
            return body

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        with self._errors(key, "read"):
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
            except self._client.exceptions.NoSuchKey:
                return None
            body: bytes = response["Body"].read()
            return body, str(response["ETag"])

    def put_bytes_if(self, key: str, data: bytes, tag: str | None) -> bool:
        # S3's conditional PutObject (If-Match / If-None-Match) checks and writes at once. A store that
        # refuses them falls back to the base class's check, then write; one that ignores the headers
        # silently writes unchecked (the small window between this writer's read and write stays).
        if not self._conditional_writes:
            return super().put_bytes_if(key, data, tag)
        from botocore.exceptions import ClientError

        condition = {"IfNoneMatch": "*"} if tag is None else {"IfMatch": tag}
        with self._errors(key, "write"):
            try:
                self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **condition)
                return True
            except ClientError as e:
                code = str(e.response.get("Error", {}).get("Code", ""))
                if code in ("PreconditionFailed", "ConditionalRequestConflict"):
                    return False  # replaced meanwhile, or another conditional write to it in flight
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if code != "NotImplemented" and status != 501:
                    raise
        self._conditional_writes = False
        return super().put_bytes_if(key, data, tag)

    def download(self, key: str, destination: Path) -> None:
        with self._errors(key, "download"), _files.replacing(destination) as temp:
            self._client.download_file(self.bucket, self._key(key), str(temp))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        found: dict[str, int] = {}
        with self._errors(prefix, "list"):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            for page in pages:
                found.update(
                    (item["Key"][len(self.prefix) :], item["Size"]) for item in page.get("Contents", [])
                )
        return found

    def modified(self, folder: str) -> float | None:
        newest: float | None = None
        with self._errors(folder, "list"):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{self.prefix}{check_key(folder)}/"
            )
            for page in pages:
                for item in page.get("Contents", []):
                    newest = max(newest or 0.0, item["LastModified"].timestamp())
        # A live writer uploading a large file into the folder: its parts are changes too. Counting only the
        # finished files let another writer delete them once the upload ran 6 hours, and the live writer then
        # pointed LATEST.json at a folder missing it.
        from botocore.exceptions import ClientError

        with self._errors(folder, "list the unfinished uploads under"):
            pages = self._client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=f"{self.prefix}{check_key(folder)}/"
            )
            try:
                for page in pages:
                    for upload in page.get("Uploads", []):
                        last_part = self._last_part_at(upload) or 0.0  # None: its start alone counts
                        newest = max(newest or 0.0, upload["Initiated"].timestamp(), last_part)
            except ClientError as e:
                # Without the permission every other writer's folder was kept for good (and warned about
                # at each push): dated by its finished files, as before uploads were counted.
                if not self._refused(e, "s3:ListBucketMultipartUploads"):
                    raise
        return newest

    def abort_uploads(self, prefix: str, idle_since: float, started_before: float) -> list[str]:
        # A push killed mid-file (SIGKILL, the instance reclaimed) leaves its multipart upload open: no key
        # lists or deletes its parts, which are billed until it is aborted.
        aborted = []
        with self._errors(prefix, "abort the unfinished uploads under"):
            pages = self._client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            for page in pages:
                for upload in page.get("Uploads", []):
                    if upload["Initiated"].timestamp() >= idle_since:
                        continue  # maybe a live writer's
                    # A live writer's upload of a large file can have begun long ago: it still adds a part
                    # every few seconds (boto3 sends 8 MiB parts), and aborting it failed its push each time.
                    last_part = self._last_part_at(upload)
                    if last_part is None and upload["Initiated"].timestamp() >= started_before:
                        continue  # its parts may not be listed: a live writer's, as far as can be told
                    if last_part is not None and last_part >= idle_since:
                        continue
                    with contextlib.suppress(self._client.exceptions.NoSuchUpload):  # finished meanwhile
                        self._client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
                    aborted.append(upload["Key"][len(self.prefix) :])
        return aborted

    def _last_part_at(self, upload: dict[str, Any]) -> float | None:
        """When the multipart ``upload`` last received a part (epoch seconds; 0 without one).

        None: the credentials may not list its parts (then the caller goes by when it began).
        """
        from botocore.exceptions import ClientError

        newest = 0.0
        pages = self._client.get_paginator("list_parts").paginate(
            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
        )
        try:
            with contextlib.suppress(self._client.exceptions.NoSuchUpload):  # finished or aborted meanwhile
                for page in pages:
                    for part in page.get("Parts", []):
                        newest = max(newest, part["LastModified"].timestamp())
        except ClientError as e:
            if not self._refused(e, "s3:ListMultipartUploadParts"):
                raise
            return None
        return newest

    def _refused(self, error: Any, permission: str) -> bool:
        """Whether ``error`` is S3 refusing ``permission`` (warned about once per store)."""
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code != "AccessDenied":
            return False
        if permission not in self._missing_permissions:
            self._missing_permissions.add(permission)
            log.warning(
                "%s refused %s (%s): checkpoint sync dates another writer's folder by its finished files and "
                "an unfinished upload by its start (aborted only once it began 6 hours ago); allow %s to "
                "have them dated by their newest part",
                self.uri,
                permission,
                error,
                permission,
            )
        return True

    def delete(self, keys: Iterable[str]) -> None:
        full = [{"Key": self._key(key)} for key in keys]
        for start in range(0, len(full), 1000):  # the most one DeleteObjects request takes
            with self._errors("", "delete"):
                self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": full[start : start + 1000], "Quiet": True}
                )

    @contextmanager
    def _errors(self, key: str, action: str) -> Iterator[None]:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        # Boto3Error: the transfer manager's own (RetriesExceededError after a download's retries), which
        # escaped as a traceback and an exit 1, read as a code error where exit 74 (retried) was meant.
        except (BotoCoreError, ClientError, Boto3Error, OSError) as e:
            raise StoreError(
                f"could not {action} {self.url(key)}: {e}; check the bucket, the credentials and "
                f"{S3_ENDPOINT_URL} (or AWS_ENDPOINT_URL) for an S3-compatible store"
            ) from e


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` where the platform and filesystem give one (else go unlocked)."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):  # not POSIX, or a folder it may write but not open: unlocked
        yield
        return
    try:
        with contextlib.suppress(OSError):  # no flock on this filesystem: unlocked, as documented
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def _local_errors(where: str, action: str) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        raise StoreError(f"could not {action} {where}: {e}") from e


#: Waits before asking again for credentials that were not found (then "no credentials" is final).
CREDENTIAL_RETRY_SECONDS = (1.0, 3.0)


@dataclass(frozen=True, slots=True)
class WriteRefusal:
    """Where a folder's write check stopped.

    Attributes:
        step: What the folder refused: ``"create"`` a new file, ``"rename"`` it, or ``"delete"`` it.
        error: The filesystem's error.
        left: The probe file still there (it could not be deleted), else None.
    """

    step: str
    error: OSError
    left: Path | None

    @property
    def refused(self) -> bool:
        """Whether the filesystem refused (no permission, read-only, a step it never does), not failed."""
        return _refused(self.error) or self.unsupported

    @property
    def unsupported(self) -> bool:
        """Whether the filesystem does not do this step at all (Mountpoint for S3 renames nothing)."""
        return self.error.errno in _UNSUPPORTED

    @property
    def reason(self) -> str:
        """The filesystem's words for the error (``Permission denied``), else the whole error."""
        return str(self.error.strerror or self.error)

    def stays(self, whose: str) -> str:
        """``"<whose> write check '<probe>' stays there"``: one wording wherever a refusal names the probe."""
        return f"{whose} write check {str(self.left)!r} stays there"

    def left_note(self, whose: str) -> str:
        """``"; <whose> write check '<probe>' stays there"`` where the probe is still there, else ``""``."""
        return f"; {self.stays(whose)}" if self.left else ""


def check_writes(folder: Path, *, rename: bool = True) -> WriteRefusal | None:
    """Create a probe file in ``folder``, rename it (where ``rename``) and delete it; None where all passed.

    A real write, not ``os.access``: root passes that on a read-only mount or sysfs, and an ACL refuses
    where the mode bits allow. The launcher's check of its folders and a folder store's check share it.
    """
    probe = _files.write_check_probe(folder)
    try:
        probe.touch(exist_ok=False)
    except OSError as e:
        return WriteRefusal("create", e, None)
    if rename:
        moved = _files.write_check_probe(folder)
        try:
            probe.rename(moved)
        except OSError as e:
            with contextlib.suppress(OSError):
                probe.unlink()
            return WriteRefusal("rename", e, probe if probe.exists() else None)
        probe = moved
    try:
        probe.unlink()
    except OSError as e:
        return WriteRefusal("delete", e, probe)
    return None


#: A filesystem's answer for a step it never does, which a retry gets again: Mountpoint for S3 on a general
#: purpose bucket renames nothing (ENOSYS), some FUSE and network mounts answer EOPNOTSUPP, and EXDEV is a
#: rename within the folder that crossed mounts. Read as a failure to answer, such a store was retried
#: (exit 74, each retry a billed attempt) to fail the same way.
_UNSUPPORTED = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV})


def _refused(error: OSError) -> bool:
    """Whether ``error`` is the filesystem refusing (no permission, read-only), not failing to answer."""
    return isinstance(error, PermissionError) or error.errno == errno.EROFS


def open_store(uri: str) -> Store:
    """The store at ``uri``: a local folder path, ``file:///path`` or ``s3://bucket/prefix``.

    Raises:
        ContractError: ``uri`` has another scheme, an ``s3://`` URI names no bucket, a ``file://`` URI
            names a host or no path, a ``file:`` URI is relative (``file:ckpt``), an ``s3://`` or ``file://``
            URI holds a ``#`` or ``?``, or the local folder is the root, ``/`` (``//``, ``/.``, ``file:///.``,
            or ``.`` in a job started in ``/``).
    """
    parsed = urlparse(uri)
    _refuse_cut_uri(uri, parsed.scheme)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ContractError(f"{uri!r} names no bucket: use s3://bucket/prefix")
        return S3Store(parsed.netloc, parsed.path)
    if parsed.scheme == "file":
        _refuse_file_host(uri, parsed.netloc, parsed.path)
        if names_no_file_path(uri):
            # file:// (what f"file://{unset}" gives) was read as Path(""): the current folder, whose
            # step-* folders a checkpoint push pruned and where the outputs were uploaded; file:/// (what
            # f"file://{unset}/" gives) the whole machine's root.
            root = " but the root, / (what file://$UNSET/ gives)" if parsed.path.strip() else ""
            raise ContractError(
                f"{uri!r} names no folder{root}: give an absolute path after three slashes "
                "(file:///data/ckpt), or the folder's path itself; leave the variable unset for no store"
            )
        if not parsed.path.startswith("/"):
            # file:ckpt was opened in whatever folder the job was started in; open_object refused its like.
            raise ContractError(
                f"{uri!r} is a relative file: URI: give an absolute path after three slashes "
                f"(file:///data/{PurePosixPath(parsed.path).name or 'ckpt'}), or the folder's path itself"
            )
        return _local_store(uri, parsed.path)
    if is_uri(uri):
        raise ContractError(f"{uri!r} is not a supported location: use a local folder, file:// or s3://")
    return _local_store(uri, uri)


def _local_store(uri: str, path: str, file_name: str = "") -> LocalStore:
    """The store in the local folder ``path`` (from ``uri``), refused where that folder is the root.

    Only file:/// was refused: / (what "$UNSET/" gives), //, /. and file:///. opened the machine's root, where
    a checkpoint push wrote its step folders and pruned older ones, and a clear deleted them. ``file_name``:
    the one file ``uri`` names in that folder (the result), if it names one.
    """
    if os.path.realpath(path) != "/":
        return LocalStore(Path(path))
    if not PurePosixPath(path).is_absolute():
        # A relative path where the job runs in / (a container's WORKDIR /) was blamed on an unset variable.
        example = f"/data/{file_name or 'ckpt'}"
        here = str(Path.cwd())
        if here != "/":  # '../..' climbed there: the current folder is not the root itself
            raise ContractError(
                f"{uri!r} is a relative path that leads from the current folder, {here}, up to the root, /, "
                f"of the whole machine: give an absolute path ({example})"
            )
        raise ContractError(
            f"{uri!r} is a relative path, read against the current folder, here the root, /, of the whole "
            f"machine: give an absolute path ({example})"
        )
    if file_name:
        raise ContractError(
            f"{uri!r} names a file in the root, /, of the whole machine (what file://$UNSET/{file_name} or "
            f'"$UNSET/{file_name}" gives): give the file a folder of its own (/data/{file_name}), or leave '
            "the variable unset"
        )
    raise ContractError(
        f'{uri!r} is the root, /, of the whole machine (what "$UNSET/" or file://$UNSET/ gives): a '
        "store there would write its files (checkpoint step folders, outputs) in / and delete old ones "
        "from it; give the store's own folder (/data/ckpt), or leave the variable unset for no store"
    )


def open_object(uri: str) -> tuple[Store, str]:
    """The store holding the single object ``uri`` and the object's key in it.

    Raises:
        ContractError: ``uri`` names a folder, is a relative ``file:`` URI, or names a file in the root, ``/``
            (see :func:`open_store`).
    """
    parsed = urlparse(uri)
    _refuse_cut_uri(uri, parsed.scheme)
    path = PurePosixPath(parsed.path if parsed.scheme else uri)
    if not path.name or uri.endswith("/"):
        raise ContractError(f"{uri!r} names a folder, not a file: add a file name such as result.json")
    if parsed.scheme == "file":
        # From the parsed path: cutting the name off the text left file:///result.json's parent as "file:",
        # which opened the current folder.
        _refuse_file_host(uri, parsed.netloc, parsed.path)
        if not path.is_absolute():
            # file:result.json wrote into whatever folder the job was started in.
            raise ContractError(
                f"{uri!r} is a relative file: URI: give an absolute path after three slashes "
                f"(file:///data/{path.name}), or the file's path itself"
            )
        # As a store: file:///result.json (what file://$UNSET/result.json gives) wrote /result.json.
        return _local_store(uri, str(path.parent), path.name), path.name
    if not parsed.scheme:
        return _local_store(uri, str(path.parent), path.name), path.name
    return open_store(f"{parsed.scheme}://{parsed.netloc}{path.parent}"), path.name


def _refuse_file_host(uri: str, host: str, path: str) -> None:
    """Refuse a ``file://`` URI naming a host: file://ckpts/run1 would otherwise write to /run1."""
    if host not in ("", "localhost"):
        raise ContractError(
            f"{uri!r} names the host {host!r}: a file URI takes three slashes, file:///{host}{path} for an "
            "absolute path, or give the folder's path itself"
        )


def names_no_file_path(uri: str) -> bool:
    """Is ``uri`` a ``file:`` URI with no folder (``file://``, ``file:``, ``file://localhost``, ``file:///``)?"""
    parts = urlsplit(uri.strip())
    return parts.scheme.lower() == "file" and not parts.path.strip("/ ")


def _refuse_cut_uri(uri: str, scheme: str) -> None:
    """Refuse an ``s3://`` or ``file://`` URI holding ``#`` or ``?``, which a URI parser cuts off.

    s3://bkt/runs/job#1 and s3://bkt/runs/job?x=1 both named runs/job/: two runs shared one checkpoint
    prefix and pruned each other's steps.
    """
    if scheme in ("s3", "file"):
        for mark in ("#", "?"):
            if mark in uri:
                raise ContractError(
                    f"{uri!r} holds {mark!r}, which ends a URI's path: it would name the same place as "
                    f"{uri.split(mark)[0]!r}; leave '#' and '?' out of the location"
                )
