"""An object store under ``s3://bucket/prefix``: conditional writes with ``If-None-Match`` / ``If-Match``."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from costaware.adapters.object_store.base import ObjectInfo, ObjectStore
from costaware.adapters.object_store.clients import S3Options, s3_client, s3_filesystem
from costaware.adapters.object_store.location import Location
from costaware.core.fingerprint import safe_relative_path

if TYPE_CHECKING:
    import pyarrow.fs


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

        from costaware.core.errors import ConfigurationError

        try:
            got = self.client.get_object(Bucket=self.root.bucket, Key=self.key(rel))
        except ClientError as e:
            if _s3_error_code(e) in ("NoSuchKey", "404", "NotFound"):
                return None
            if _s3_error_code(e) == "NoSuchBucket":
                # A store's first call: a misspelt bucket failed the task (with retries) on botocore's
                # "The specified bucket does not exist", naming neither the bucket nor the store.
                raise ConfigurationError(
                    f"store {self.root.uri}: bucket {self.root.bucket!r} does not exist: check the bucket's "
                    "name and the S3 endpoint in use (a connection's endpoint_url or --endpoint-url, for "
                    "MinIO or moto), or create the bucket"
                ) from e
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


#: The S3 permission without which the unfinished uploads of a prefix cannot be found.
LIST_UPLOADS_PERMISSION = "s3:ListBucketMultipartUploads"


def abort_open_uploads(folder: Location, options: S3Options | None = None) -> list[str]:
    """Abort every unfinished multipart upload to a key under the S3 ``folder``; returns the keys aborted.

    A push killed in the middle of a file left its upload open: no object listing shows it, so deleting the
    folder's objects left its parts billed until a lifecycle rule (if any) aborted them. Call it once nothing
    writes there any more: a live writer's upload is aborted too.

    Raises:
        PermissionError: The credentials may not list the uploads (``s3:ListBucketMultipartUploads``) or
            abort one (``s3:AbortMultipartUpload``); the message names the permission.
        OSError: S3 could not be asked.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    client = s3_client(options)
    prefix = f"{folder.path.rstrip('/')}/" if folder.path else ""
    try:
        pages = client.get_paginator("list_multipart_uploads").paginate(Bucket=folder.bucket, Prefix=prefix)
        uploads = [upload for page in pages for upload in page.get("Uploads", [])]
    except (BotoCoreError, ClientError) as e:
        raise _upload_error(e, folder, LIST_UPLOADS_PERMISSION) from e
    aborted: list[str] = []
    for upload in uploads:
        try:
            with contextlib.suppress(client.exceptions.NoSuchUpload):  # completed or aborted meanwhile
                client.abort_multipart_upload(
                    Bucket=folder.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )
        except (BotoCoreError, ClientError) as e:
            raise _upload_error(e, folder, "s3:AbortMultipartUpload") from e
        aborted.append(upload["Key"])
    return aborted


def _upload_error(error: Exception, folder: Location, permission: str) -> OSError:
    """``error`` of S3 about ``folder``'s unfinished uploads, as a PermissionError naming ``permission``."""
    if _s3_error_code(error) == "AccessDenied":
        return PermissionError(
            f"{folder.uri} refused {permission} ({error}): allow it, or give the bucket a lifecycle "
            "rule that aborts incomplete multipart uploads (AbortIncompleteMultipartUpload, "
            "DaysAfterInitiation: 1)"
        )
    return OSError(f"could not abort the unfinished uploads under {folder.uri}: {error}")
