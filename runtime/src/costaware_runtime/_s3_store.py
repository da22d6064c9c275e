"""A store in an S3 bucket; boto3 is imported only when one is first used."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

from costaware_runtime import _files
from costaware_runtime._bounded import Transfer, run_bounded, stall_seconds
from costaware_runtime._store import Progress, Store, check_key
from costaware_runtime.contract import S3_ENDPOINT_URL
from costaware_runtime.errors import ContractError, StoreError, StoreStalledError

S3_INSTALL_HINT = "pip install 'costaware-runtime[s3]'"

log = logging.getLogger("costaware_runtime.stores")  # as before the split: its warnings keep their logger


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
        ``StoreError``, retried; ``StoreStalledError`` once a HeadBucket is unanswered for
        ``COSTAWARE_STORE_STALL_SECONDS``) fails here: any other answer (403 from credentials that may write
        but not list, a gateway without HeadBucket) is left to the first real read or write.
        """
        client = self._client  # first: without boto3 this says how to install it
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        from costaware_runtime import stores  # its tunable, read where users set it (not a copy of it)

        bound = stall_seconds()
        try:
            for wait in stores.CREDENTIAL_RETRY_SECONDS:
                try:
                    self._head_bucket(client, bound)
                    break
                except NoCredentialsError:
                    # An instance role's metadata service can time out once (botocore then finds none):
                    # asked again before the attempt is failed for good.
                    time.sleep(wait)
            else:
                self._head_bucket(client, bound)
        except StoreStalledError as e:
            raise StoreStalledError(
                f"{e}; check that the store's endpoint answers ({S3_ENDPOINT_URL} or AWS_ENDPOINT_URL for an "
                "S3-compatible store)"
            ) from e
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

    def _head_bucket(self, client: Any, bound: float) -> None:
        """HeadBucket, given up once unanswered for ``bound`` seconds (``StoreStalledError``).

        botocore waits 60 s for each answer and asks again up to 4 times: a stalled endpoint held the start
        of every attempt for minutes, the machine billed meanwhile.
        """
        run_bounded(
            lambda: client.head_bucket(Bucket=self.bucket),
            Transfer(),
            bound,
            f"the check that bucket {self.bucket!r} of {self.uri} exists (HeadBucket)",
        )

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def put(self, key: str, source: BinaryIO, progress: Progress | None = None) -> None:
        with self._errors(key, "upload"):
            # boto3 calls Callback with the bytes of each chunk as it is sent, from its transfer threads.
            self._client.upload_fileobj(source, self.bucket, self._key(key), Callback=progress)

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

    def download(self, key: str, destination: Path, progress: Progress | None = None) -> None:
        with self._errors(key, "download"), _files.replacing(destination) as temp:
            self._client.download_file(self.bucket, self._key(key), str(temp), Callback=progress)

    def sizes(self, prefix: str = "") -> dict[str, int]:
        found: dict[str, int] = {}
        with self._errors(prefix, "list"):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            for page in pages:
                self._answered()
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
                self._answered()
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
                    self._answered()
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
                self._answered()
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
                    self._answered()
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
                    self._answered()
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
            self._answered()

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
