"""The job's outputs: checked, then uploaded with a manifest written last.

A reader trusts only a folder that has ``_costaware_manifest.json``: it lists every file with its size and
sha256, and is written after all of them. Before uploading, an older manifest at the same URI is deleted, so
it can never vouch for files that are being replaced.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from costaware_runtime import _files
from costaware_runtime._bounded import Transfer, run_bounded, stall_seconds
from costaware_runtime._store import Progress, Store
from costaware_runtime.contract import MANIFEST_NAME, OUTPUT_DIR
from costaware_runtime.errors import ContractError, StoreError
from costaware_runtime.stores import check_key, open_store

log = logging.getLogger(__name__)

#: Bytes hashed between two reports of progress: hashing a large file (minutes on a slow mount) is work
#: moving, and read as a stall it turned a job that had succeeded into a retried failure.
_HASH_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class OutputSummary:
    """What an upload (or a check) found: where it went, how many files and bytes."""

    uri: str | None
    files: int
    bytes: int


def output_files(directory: Path) -> list[Path]:
    """The files under ``directory``, sorted by relative path.

    Raises:
        ContractError: ``directory`` holds no file, a file named like the manifest, a file whose
            name a store cannot hold (a backslash in it), a link to nothing or a link to a folder.
    """
    found = sorted(directory.rglob("*")) if directory.is_dir() else []
    for path in found:
        # A link is uploaded as the file it points to; one the upload cannot follow was skipped in silence,
        # and a model without its weights (a dangling link) or a linked folder's files was promoted.
        if path.is_symlink() and not path.exists():
            raise ContractError(
                f"output {str(path)!r} is a link to {str(path.readlink())!r}, which does not exist: write "
                f"the file itself into {OUTPUT_DIR}"
            )
        if path.is_symlink() and path.is_dir():
            raise ContractError(
                f"output {str(path)!r} is a link to the folder {str(path.readlink())!r}, whose files would "
                f"not be uploaded: copy that folder into {OUTPUT_DIR}"
            )
    # The launcher's write check, left where the folder refuses deletions: the launcher's, not the model's.
    files = [
        path
        for path in found
        if path.is_file() and not (path.parent == directory and _files.is_write_check_probe(path))
    ]
    if not files:
        raise ContractError(
            f"the job exited 0 but left no files in {OUTPUT_DIR}={directory}: save the model there "
            "(costaware_runtime.output_dir())"
        )
    if directory / MANIFEST_NAME in files:
        raise ContractError(f"{directory / MANIFEST_NAME} is reserved for the launcher's manifest: rename it")
    for path in files:
        # Checked before any upload: a name the store refuses (a backslash) failed halfway through one.
        try:
            check_key(path.relative_to(directory).as_posix())
        except ContractError as e:
            raise ContractError(f"output file {str(path)!r} cannot be uploaded: {e}; rename it") from e
    return files


def check_outputs(directory: Path) -> OutputSummary:
    """Count the outputs of ``directory`` without uploading them (see :func:`output_files`)."""
    files = output_files(directory)
    return OutputSummary(None, len(files), sum(path.stat().st_size for path in files))


def upload_outputs(
    directory: Path, uri: str, metadata: Mapping[str, Any] | None = None, progress: Progress | None = None
) -> OutputSummary:
    """Upload every file of ``directory`` under ``uri``, then the manifest (with ``metadata`` in it).

    ``progress``, if given, is called with the bytes sent as they go, and with 0 after each MiB hashed, each
    file and each other request the store answers (the launcher gives up an upload that reports nothing for
    a while).

    Raises:
        ContractError: ``directory`` holds no file (nothing is uploaded).
        StoreError: The store could not be written.
    """
    files = output_files(directory)
    store = open_store(uri)
    store.request_answered = progress
    store.delete([MANIFEST_NAME])
    entries = []
    for path in files:
        key = path.relative_to(directory).as_posix()
        with open(path, "rb") as source:
            digest = _sha256(source, progress)
            source.seek(0)
            store.put(key, source, progress)
        if progress is not None:
            progress(0)
        entries.append({"path": key, "bytes": path.stat().st_size, "sha256": digest})
    total = sum(path.stat().st_size for path in files)
    manifest = {
        **(metadata or {}),
        "files": entries,
        "bytes": total,
        "created_at": datetime.now(UTC).isoformat(),
    }
    store.put(
        MANIFEST_NAME, io.BytesIO((json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()), progress
    )
    log.info("uploaded %s files (%s bytes) to %s", len(entries), total, store.uri)
    return OutputSummary(uri, len(entries), total)


def _sha256(source: BinaryIO, progress: Progress | None) -> str:
    """The sha256 of what ``source`` holds (read to its end), calling ``progress(0)`` after each MiB."""
    digest = hashlib.sha256()
    while chunk := source.read(_HASH_CHUNK_BYTES):
        digest.update(chunk)
        if progress is not None:
            progress(0)
    return digest.hexdigest()


def read_manifest(uri: str) -> dict[str, Any] | None:
    """The manifest of the outputs at ``uri``, or None when the upload never finished (do not use them).

    Raises:
        ContractError: ``COSTAWARE_STORE_STALL_SECONDS`` is not a number of seconds > 0.
        StoreError: The store could not be read, or did not answer for ``COSTAWARE_STORE_STALL_SECONDS``
            (default 300; ``StoreStalledError``: the read runs on in a thread of its own), or the manifest
            is damaged.
    """
    bound = stall_seconds()  # a bad value fails before the store is opened
    return _read_manifest(open_store(uri), bound)


def _read_manifest(store: Store, bound: float) -> dict[str, Any] | None:
    """The manifest in ``store``, its read given up once unanswered for ``bound`` seconds."""
    # Bounded as the launcher's transfers: a store that hung held its reader (a deploy, an evaluation) for
    # good.
    read = Transfer()
    store.request_answered = read.progressed
    where = store.url(MANIFEST_NAME)
    raw = run_bounded(lambda: store.read(MANIFEST_NAME), read, bound, f"the read of {where}")
    if raw is None:
        return None
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise StoreError(f"{store.url(MANIFEST_NAME)} is not JSON ({e}): upload the outputs again") from e
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise StoreError(f"{store.url(MANIFEST_NAME)} lists no files: upload the outputs again")
    return manifest


def download_outputs(uri: str, directory: Path) -> dict[str, Any]:
    """Download the outputs at ``uri`` into ``directory``, checking each file's sha256; returns the manifest.

    Each request is given up once it moves nothing for ``COSTAWARE_STORE_STALL_SECONDS`` (default 300).

    Raises:
        ContractError: ``COSTAWARE_STORE_STALL_SECONDS`` is not a number of seconds > 0.
        StoreError: ``uri`` has no manifest (the upload did not finish), a file does not match it, or a read
            moved nothing for the stall bound (``StoreStalledError``, naming the file).
    """
    bound = stall_seconds()
    store = open_store(uri)
    manifest = _read_manifest(store, bound)
    if manifest is None:
        raise StoreError(
            f"{store.url(MANIFEST_NAME)} does not exist: the upload did not finish, do not use it"
        )
    for entry in manifest["files"]:
        key = check_key(str(entry["path"]))
        target = directory.joinpath(*key.split("/"))
        download = Transfer()
        store.request_answered = download.progressed
        fetch = functools.partial(store.download, key, target, download.progressed)
        run_bounded(fetch, download, bound, f"the download of {store.url(key)}")
        with open(target, "rb") as source:
            digest = hashlib.file_digest(source, "sha256").hexdigest()
        if digest != entry["sha256"]:
            raise StoreError(f"{store.url(key)} has sha256 {digest}, the manifest says {entry['sha256']}")
    return manifest
