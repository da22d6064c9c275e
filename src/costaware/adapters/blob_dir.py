"""A folder of whole-file blobs on the local disk or in an object store (pyarrow.fs), written atomically.

The model store, the checkpoint store and the training spec keep their files in one. pyarrow is imported
where it is used.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from costaware.adapters.object_store.location import (
    expand_user,
    refuse_cut_uri,
    refuse_file_host,
    refuse_machine_root,
)
from costaware.core.errors import ConfigurationError
from costaware.core.given import names_nothing, not_given


class BlobDir:
    """A folder of whole-file blobs on the local disk or in an object store, written atomically.

    Local writes go to a temporary file that is renamed over the target; an object store makes an object
    visible only once its upload completes. A reader sees the old blob or the new one, never half of one,
    with one exception: pyarrow completes an S3 upload when its stream is closed, also after the writer
    raised midway, so a failed write can leave a short object. The stores write their metadata last, so
    such a blob is never read as part of a version or checkpoint; it costs storage until deleted.

    Args:
        filesystem: A ``pyarrow.fs.FileSystem``.
        root: The folder's path on that file system (``bucket/prefix`` for S3).
        uri: How to name the folder to people, e.g. ``s3://bucket/prefix``.
    """

    def __init__(self, filesystem: Any, root: str, uri: str) -> None:
        self.fs = filesystem
        self.root = root.rstrip("/")
        self.uri = uri.rstrip("/")
        self.is_local = type(filesystem).__name__ == "LocalFileSystem"

    @classmethod
    def from_uri(
        cls,
        uri: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        session_token: str | None = None,
        create: bool = True,
        what: str = "store location",
        example: str = "/srv/ml/store",
    ) -> BlobDir:
        """Open a local folder (created when missing) or an ``s3://bucket/prefix`` location.

        Args:
            uri: A local path, ``file://`` URI or ``s3://`` URI.
            endpoint_url: S3 endpoint (e.g. MinIO or moto); else ``COSTAWARE_S3_ENDPOINT_URL`` or
                ``AWS_ENDPOINT_URL`` from the environment, else AWS.
            region: S3 region; else the environment's.
            access_key: S3 access key; else the default AWS credential chain.
            secret_key: S3 secret key.
            session_token: S3 session token.
            create: Create a missing local folder (off for paths that may name a file).
            what: The argument ``uri`` came from (``model_store``), as a refusal names it: "store
                location 'None' names nothing" told no one which of a task's stores to fix.
            example: A folder of its own to give instead of the machine's root, as the refusal offers it:
                a checkpoint store was told a models folder.
        """
        from pyarrow import fs

        text = str(uri).strip()
        if not text:
            raise ConfigurationError(f"{what} is empty: pass a local folder or an s3://bucket/prefix URI")
        if not_given(text):  # read as a relative folder named "None" or "null" before
            raise ConfigurationError(names_nothing(what, uri))
        parsed = urlparse(text)
        refuse_cut_uri(parsed, text, what)
        refuse_file_host(parsed, text, what)
        if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
            # Path.expanduser raised a bare RuntimeError for a home nobody has (HOME unset, OpenShift's uids).
            local = parsed.path if parsed.scheme == "file" else text
            given = Path(expand_user(local, what=what, uri=text, example=example))
            if create and not given.is_absolute():
                # A store written to (models, checkpoints, results): resolved against the task's working
                # folder, which changes between workers and tries, a retry read another store than its first
                # try wrote. A file read by hand (a spec, a data file) may be relative.
                raise ConfigurationError(
                    f"{what} {text!r} is a relative path: give an absolute folder such as "
                    f"{Path.cwd() / given} or an s3:// URI"
                )
            path = given.resolve()
            if create:
                # model_store='/' (what "$UNSET/" gives) wrote /versions/... and /champion.json: a store
                # makes its folders in its root, here the machine's.
                refuse_machine_root(
                    what,
                    text,
                    str(given),
                    example=example,
                    writes="a store there would make its folders directly under /",
                )
            if create:
                path.mkdir(parents=True, exist_ok=True)
            return cls(fs.LocalFileSystem(), str(path), str(path))
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise ConfigurationError(f"{what} {text!r} has no bucket: use s3://bucket/prefix")
            endpoint = (
                endpoint_url
                or os.environ.get("COSTAWARE_S3_ENDPOINT_URL")
                or os.environ.get("AWS_ENDPOINT_URL")
            )
            options: dict[str, Any] = {}
            if endpoint:
                ep = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
                options.update(endpoint_override=ep.netloc, scheme=ep.scheme or "https")
            if region or os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION"):
                options["region"] = (
                    region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                )
            if access_key and secret_key:
                options.update(access_key=access_key, secret_key=secret_key, session_token=session_token)
            root = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
            return cls(fs.S3FileSystem(**options), root, f"s3://{root}")
        try:
            filesystem, root = fs.FileSystem.from_uri(text)
        except Exception as e:
            raise ConfigurationError(f"cannot open {what} {text!r}: {e}; use a folder or s3:// URI") from e
        return cls(filesystem, root, text)

    def path(self, name: str = "") -> str:
        return f"{self.root}/{name.strip('/')}" if name else self.root

    def child(self, name: str) -> BlobDir:
        """The sub-folder ``name`` (created lazily by the first write)."""
        return BlobDir(self.fs, self.path(name), f"{self.uri}/{name.strip('/')}")

    def read_bytes(self, name: str) -> bytes:
        """The blob's content; ``FileNotFoundError`` when it does not exist."""
        try:
            with self.fs.open_input_stream(self.path(name)) as stream:
                return bytes(stream.read())
        except FileNotFoundError:
            raise
        except OSError as e:
            if self.exists(name):
                raise
            raise FileNotFoundError(f"{self.uri}/{name}") from e

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write the whole blob atomically (replacing any blob of the same name)."""
        target = self.path(name)
        if self.is_local:
            folder = Path(target).parent
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{Path(target).name}.{uuid.uuid4().hex}.tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                tmp.replace(target)
            finally:
                tmp.unlink(missing_ok=True)
            return
        with self.fs.open_output_stream(target) as stream:
            stream.write(data)

    def exists(self, name: str) -> bool:
        from pyarrow import fs

        return bool(self.fs.get_file_info(self.path(name)).type != fs.FileType.NotFound)

    def list(self, name: str = "") -> list[str]:
        """Names of the files and folders directly inside ``name``, sorted; [] when it does not exist."""
        from pyarrow import fs

        infos = self.fs.get_file_info(fs.FileSelector(self.path(name), allow_not_found=True, recursive=False))
        return sorted(info.base_name for info in infos if not info.base_name.startswith("."))

    def delete(self, name: str) -> None:
        """Delete a blob or a folder with everything in it; nothing happens when it does not exist."""
        from pyarrow import fs

        info = self.fs.get_file_info(self.path(name))
        if info.type == fs.FileType.Directory:
            self.fs.delete_dir(self.path(name))
        elif info.type != fs.FileType.NotFound:
            self.fs.delete_file(self.path(name))


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()
