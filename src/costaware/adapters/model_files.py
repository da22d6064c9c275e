"""Model versions whose model is a folder of files (``model_format="files"``): what a team's command left.

Layout of such a version under the model store::

    versions/<version>/files/<path>      every file of the job's output folder, as the job left it
    versions/<version>/model.json        the listing: each file's path, bytes and SHA-256
    versions/<version>/metadata.json     written last, with the listing's SHA-256: until then the version
                                         is incomplete and never used

The files come from a staging folder inside the same store, where the launcher (``costaware-run``) uploaded
them with its manifest written last (``_costaware_manifest.json``). Only a staging folder that has the
manifest is taken, and only the files it lists; each copy's size is checked against it, and every later read
(:func:`download_files`) checks each file's SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from costaware.adapters.blob_dir import BlobDir, sha256_hex
from costaware.adapters.model_versions import STATUSES, ModelVersion, UntrustedModelError
from costaware.core.errors import ConfigurationError

log = logging.getLogger(__name__)

FILES_FORMAT = "files"
#: The launcher's manifest in a staging folder (``costaware_runtime.contract.MANIFEST_NAME``).
MANIFEST_NAME = "_costaware_manifest.json"
#: S3's CopyObject copies at most 5 GiB; a larger file is streamed through the worker instead.
_COPY_OBJECT_LIMIT = 5 * 1024**3
_CHUNK = 8 * 1024**2


class ModelStore(Protocol):
    """What this module needs of :class:`costaware.adapters.model_store.ModelStore`, which calls it.

    Spelled as a protocol so that the store may import this module and not the other way round.
    """

    @property
    def blobs(self) -> BlobDir: ...

    @property
    def uri(self) -> str: ...

    def model_bytes(self, meta: ModelVersion) -> bytes: ...


def _safe_path(value: Any, where: str) -> str:
    text = str(value)
    parts = PurePosixPath(text).parts
    if not text or text.startswith("/") or "\\" in text or any(p in ("", ".", "..") for p in parts):
        raise ConfigurationError(f"{where} lists file {value!r}, which is not a relative path inside it")
    return text


def staged_files(staging: BlobDir) -> list[dict[str, Any]]:
    """The files the launcher's manifest in ``staging`` lists: ``path``, ``bytes``, ``sha256``.

    Raises:
        ConfigurationError: no manifest (the upload never finished), or one that lists no valid files.
    """
    where = f"{staging.uri}/{MANIFEST_NAME}"
    try:
        manifest = json.loads(staging.read_bytes(MANIFEST_NAME))
    except FileNotFoundError:
        raise ConfigurationError(
            f"the job's outputs in {staging.uri} have no {MANIFEST_NAME}: their upload did not finish, so "
            "they are not stored; check the job's last log lines"
        ) from None
    except ValueError as e:
        raise ConfigurationError(f"{where} is not JSON ({e}): the outputs are not stored") from e
    listed = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(listed, list) or not listed:
        raise ConfigurationError(f"{where} lists no files: the outputs are not stored")
    files = []
    for entry in listed:
        try:
            path = _safe_path(entry["path"], where)
            size, digest = int(entry["bytes"]), str(entry["sha256"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigurationError(f"{where} has a malformed entry {entry!r}: {e}") from e
        files.append({"path": path, "bytes": size, "sha256": digest})
    return sorted(files, key=lambda f: f["path"])


def _copy(blobs: BlobDir, source: str, target: str, size: int) -> None:
    if blobs.is_local:  # an object store has no folders to make
        blobs.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    if size <= _COPY_OBJECT_LIMIT:
        blobs.fs.copy_file(source, target)  # server-side on S3: the bytes never pass through the worker
        return
    with blobs.fs.open_input_stream(source) as reader, blobs.fs.open_output_stream(target) as writer:
        while chunk := reader.read(_CHUNK):
            writer.write(chunk)


def save_files_version(store: ModelStore, meta: ModelVersion, staging: str) -> ModelVersion:
    """Store the files staged under ``staging`` (a folder inside ``store``) as the version ``meta``.

    The files are copied first, then the listing, then the metadata (with the listing's SHA-256), so a
    version without all its files never has metadata and is never seen as complete.

    Raises:
        ConfigurationError: the staging folder is not a finished upload, a copy has another size than the
            manifest says, or the version exists already. Nothing is marked complete then.
    """
    if meta.status not in STATUSES:
        raise ConfigurationError(f"status {meta.status!r} is not one of {', '.join(STATUSES)}")
    if not meta.version or "/" in meta.version or meta.version.startswith("."):
        raise ConfigurationError(f"version id {meta.version!r} is not a plain name: use new_version_id()")
    source = store.blobs.child(staging)
    files = staged_files(source)
    folder = f"versions/{meta.version}"
    if store.blobs.exists(folder):
        raise ConfigurationError(
            f"version {meta.version!r} already exists in {store.uri}: versions are immutable"
        )
    for entry in files:
        target = store.blobs.path(f"{folder}/files/{entry['path']}")
        _copy(store.blobs, source.path(entry["path"]), target, entry["bytes"])
        copied = store.blobs.fs.get_file_info(target).size
        if copied != entry["bytes"]:
            raise ConfigurationError(
                f"{entry['path']!r} copied from {source.uri} has {copied} bytes, the job's manifest says "
                f"{entry['bytes']}: the staging folder changed during the copy; version {meta.version!r} "
                "is left incomplete (never used)"
            )
    listing = _json({"files": files, "bytes": sum(int(f["bytes"]) for f in files)})
    stored = replace(
        meta,
        model_format=FILES_FORMAT,
        model_sha256=sha256_hex(listing),
        created_at=meta.created_at or datetime.now(timezone.utc).isoformat(),
    )
    store.blobs.write_bytes(f"{folder}/{stored.model_file}", listing)
    write_metadata(store.blobs, folder, _json(stored.to_dict()))
    log.info("saved model version %s (%d files) to %s", stored.version, len(files), store.uri)
    return stored


def write_metadata(blobs: BlobDir, folder: str, metadata: bytes) -> None:
    """Write a version's ``metadata.json``, which completes it; a write that landed but failed counts as done.

    A store that writes and then reports an error (an S3 PUT whose reply timed out) failed the save of a
    complete version, and the retry that followed stored a second one. The metadata is read back: the same
    bytes there are this save's own (they name its new version id), so the version is complete.
    """
    name = f"{folder}/metadata.json"
    try:
        blobs.write_bytes(name, metadata)
    except OSError as error:
        try:
            landed = blobs.read_bytes(name) == metadata
        except OSError:
            landed = False
        if not landed:
            raise
        log.warning(
            "writing %s/%s reported an error (%s), but it landed: the version is complete",
            blobs.uri,
            name,
            error,
        )


def _json(data: Any) -> bytes:
    return json.dumps(data, indent=2, sort_keys=True, default=str).encode()


def version_files(store: ModelStore, meta: ModelVersion) -> list[dict[str, Any]]:
    """The listing of a files version (``path``, ``bytes``, ``sha256``), checked against its metadata."""
    if meta.model_format != FILES_FORMAT:
        raise ConfigurationError(
            f"version {meta.version!r} has model_format {meta.model_format!r}, not {FILES_FORMAT!r}: load "
            "its model with model_bytes()"
        )
    listing: list[dict[str, Any]] = json.loads(store.model_bytes(meta))["files"]
    return listing


def download_files(store: ModelStore, meta: ModelVersion, destination: Path) -> Path:
    """Copy a files version into ``destination``, checking every file's SHA-256; returns ``destination``.

    Raises:
        UntrustedModelError: a file differs from the listing (changed after it was stored).
    """
    for entry in version_files(store, meta):
        data = store.blobs.read_bytes(f"versions/{meta.version}/files/{entry['path']}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry["sha256"]:
            raise UntrustedModelError(
                f"file {entry['path']!r} of version {meta.version!r} in {store.uri} has SHA-256 "
                f"{digest[:12]}..., its listing says {str(entry['sha256'])[:12]}...: it changed after it "
                "was stored; it is not used"
            )
        target = destination.joinpath(*_safe_path(entry["path"], str(destination)).split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return destination
