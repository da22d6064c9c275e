"""Where ``DataQualityOperator`` moves a refused batch: the quarantine's place checked, the move made whole.

A refused batch left where readers of its landing folder find it is trained on by the next run: the
quarantine must be outside the batch and outside the landing folder, and a batch moved there is copied and
checked before anything is deleted, so it is never lost.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from costaware.core.errors import ConfigurationError

log = logging.getLogger(__name__)


class FolderMarkersLeftError(OSError):
    """Raised when the batch was moved but the empty S3 folder markers it left could not be deleted.

    Attributes:
        moved_to: Where the batch is now (the move itself is whole).
        cleanup: What is left and what to do about it.
    """

    def __init__(self, moved_to: str, cleanup: str) -> None:
        super().__init__(f"the batch was moved to {moved_to}, but {cleanup}")
        self.moved_to = moved_to
        self.cleanup = cleanup


def quarantined_copy(
    data_path: str, quarantine_path: str, key: str, options: Mapping[str, Any]
) -> str | None:
    """Where :func:`quarantine` put ``data_path`` under ``key``, when it is there; else None."""
    from costaware.adapters.blob_dir import BlobDir

    target = BlobDir.from_uri(quarantine_path, create=False, what="quarantine_path", **options).child(key)
    name = data_path.rstrip("/").rpartition("/")[2]
    return f"{target.uri}/{name}" if name and target.exists(name) else None


def check_quarantine_outside(data_path: str, quarantine_path: str) -> None:
    """Refuse a quarantine inside the folder a batch file landed in.

    Readers of a landing folder walk its sub-folders (the retraining's ``read_parquet``, pyarrow datasets):
    a refused ``landing/day.parquet`` moved to ``landing/quarantine`` was still trained on. (A batch that is
    a folder is checked by :func:`quarantine`: the quarantine must not be inside it.)
    """
    landing, _, name = data_path.rstrip("/").rpartition("/")
    if landing and Path(name).suffix and (quarantine_path.rstrip("/") + "/").startswith(landing + "/"):
        raise ConfigurationError(
            f"quarantine_path {quarantine_path!r} is inside {landing!r}, the folder the batch landed in: "
            "readers of that folder walk its sub-folders and would still train on a refused batch; give a "
            "folder outside it"
        )


#: How many of a batch folder's neighbours are looked into for a batch of their own (one listing each).
_NEIGHBOURS_LOOKED_INTO = 20
#: Folder listings that walk the quarantine for a refused batch of the series before it is listed whole: as
#: deep as the gate moves one (the quarantine, ``<dag>/``, ``<run>/``, ``<task>/``, ``<batch>/``).
_QUARANTINE_FOLDERS_WALKED = 5


def check_quarantine_beside_batch_folder(
    data_path: str, quarantine_path: str, options: Mapping[str, Any]
) -> None:
    """Refuse a quarantine beside a batch folder, inside the landing folder that holds them both.

    ``landing/day2/`` refused and moved to ``landing/quarantine/`` was still trained on by the readers of
    ``landing/``, as a batch file's is (:func:`check_quarantine_outside`). From the paths alone this is the
    layout of a batch that is a whole landing folder with its quarantine beside it (``data/landing/``,
    ``data/refused/``), which nothing reads: the batch's parent is taken for a landing folder when it holds
    another batch besides the batch and the quarantine (a Parquet file, or a folder with one in it), both
    named by a date or number (``2013-01-01`` beside ``2013-01-02``). Neighbours named otherwise
    (``datasets/fraud/`` beside ``datasets/churn/``) are warned of only. A dated or numbered batch with
    nothing beside it is refused too where the quarantine already holds a refused batch of its series (a
    Parquet file moved from ``2013-01-01/``): there, it is trained on by the folder's readers as any batch
    beside it is. This batch's own earlier refusal (a fixed ``features_v2/``) is warned of only.

    Raises:
        ConfigurationError: naming both paths and the other batch found beside the batch folder (or in
            the quarantine).
    """
    from pyarrow import fs

    from costaware.adapters.blob_dir import BlobDir

    parent, _, name = data_path.rstrip("/").rpartition("/")
    inside = quarantine_path.rstrip("/")
    refused_before: str | None = None
    if not parent or Path(name).suffix or not inside.startswith(parent + "/"):
        return  # a batch file (check_quarantine_outside's), or a quarantine outside the batch's parent
    if parent.endswith(":/"):
        return  # the batch is a whole bucket (s3://bucket): no folder holds it
    top = inside[len(parent) + 1 :].split("/")[0]
    if top == name:
        return  # inside the batch itself: quarantine() refuses that one
    try:
        folder = BlobDir.from_uri(parent, create=False, what="data_path's folder", **options)
        listed = folder.fs.get_file_info(fs.FileSelector(folder.root, allow_not_found=True))
        neighbours = [i for i in listed if i.base_name not in (name, top)]
        # Numbered ones first (a batch of the series refuses, any other only warns), and among them a file
        # first: it answers without a listing.
        neighbours.sort(key=lambda i: (not _numbered(i.base_name), i.type != fs.FileType.File))
        beside = None
        for info in neighbours[:_NEIGHBOURS_LOOKED_INTO]:
            if info.type == fs.FileType.Directory:
                inner = folder.fs.get_file_info(fs.FileSelector(info.path, allow_not_found=True))
                found = any(i.type == fs.FileType.File and _is_parquet(i.base_name) for i in inner)
            else:
                found = info.type == fs.FileType.File and _is_parquet(info.base_name)
            if found:
                beside = info
                break  # the sort put any numbered batch before the rest
        if beside is None and _numbered(name):
            refused_before = _sibling_refused(folder, f"{folder.root}/{inside[len(parent) + 1 :]}", name)
    except OSError as e:
        # A credential that may read the batch but not list its parent (S3 without s3:ListBucket there):
        # the gate ran before this check came, so it runs on, said, rather than fail every batch.
        log.warning(
            "could not list %s to check that quarantine_path %s is outside the landing folder of %s (%s): "
            "make sure it is, or readers of that folder would still train on a refused batch",
            parent,
            quarantine_path,
            data_path,
            e,
        )
        return
    if beside is None and refused_before is not None:
        # A batch refused and moved here earlier (the first one of the folder, say) lies inside the landing
        # folder: its readers train on it, so the layout is a landing folder's.
        raise ConfigurationError(
            f"quarantine_path {quarantine_path!r} is inside {parent!r}, the landing folder of the batch "
            f"folder {data_path!r} (it holds another batch, {refused_before!r}, refused and moved into the "
            f"quarantine): readers of that folder walk its sub-folders and would still train on a refused "
            f"batch; move it out, and give a folder outside {parent!r}"
        )
    if beside is None:
        if _numbered(name):
            # The first batch of a landing folder has nothing beside it to tell the layout by: refused, a good
            # first batch of any other layout would fail; passed in silence, a refused one moved here was
            # trained on by readers of the folder once more batches landed. Said, and refused from then on.
            log.warning(
                "quarantine_path %s is inside %s, which holds no other batch yet to tell whether it is a "
                "landing folder: if batches land beside %s (dated or numbered, as it is), readers of %s "
                "would still train on a refused batch moved there, and this gate refuses the layout once one "
                "does, or once another of them was refused and moved there; "
                "give a folder outside %s",
                quarantine_path,
                parent,
                name,
                parent,
                parent,
            )
        return
    if not (_numbered(beside.base_name) and _numbered(name)):
        # datasets/churn/ beside datasets/fraud/: likely other data sets, not one series of dated or numbered
        # batches, and a gate that passed for months would fail for good; said, not refused.
        log.warning(
            "quarantine_path %s is inside %s, which also holds %s: if readers of %s train on its sub-folders "
            "(a landing folder of batches), they would still train on a refused batch; give a folder "
            "outside %s",
            quarantine_path,
            parent,
            beside.base_name,
            parent,
            parent,
        )
        return
    raise ConfigurationError(
        f"quarantine_path {quarantine_path!r} is inside {parent!r}, the landing folder of the batch "
        f"folder {data_path!r} (it holds another batch, {beside.base_name!r}): readers of that folder "
        f"walk its sub-folders and would still train on a refused batch; give a folder outside "
        f"{parent!r}"
    )


def _sibling_refused(folder: Any, path: str, batch_name: str) -> str | None:
    """A Parquet file in the quarantine at ``path`` moved there from another batch of ``batch_name``'s series.

    The gate moves a batch folder to ``<quarantine>/<dag>/<run>/<task>/<batch name>/``: the last folder on
    a file's way named like this batch (``2013-01-01`` for ``2013-01-02``, digits aside) is the batch it
    came from. One of this batch's own name (a fixed ``features_v2/`` refused once) or of no such name says
    nothing of a landing folder. The first such file in walking order (folder by folder, by name, a folder's
    files before its sub-folders) is the one found.

    A few listings walk the quarantine, which finds a file where the gate puts one; past them it is listed
    whole, at once (a page per 1,000 files on S3): walked on, a fixed-name batch, which has no such file to
    stop at, cost two listings per run it was refused in (``<run>/``, ``<task>/``).

    Returns:
        The file's path relative to ``folder``, or None.
    """
    from pyarrow import fs

    shape = _series_shape(batch_name)
    root = folder.root.rstrip("/")

    def in_series(name: str) -> bool:  # this batch's own earlier refusal is no other batch of a series
        return name != batch_name and _numbered(name) and _series_shape(name) == shape

    # (folder path, the series batch it is in, if any); depth first, so a hit comes after a few listings.
    to_walk: list[tuple[str, str | None]] = [(path, None)]
    for _ in range(_QUARANTINE_FOLDERS_WALKED):
        if not to_walk:
            return None
        here, batch = to_walk.pop()
        listed = sorted(
            folder.fs.get_file_info(fs.FileSelector(here, allow_not_found=True)), key=lambda i: i.base_name
        )
        if batch is not None:
            for info in listed:
                if info.type == fs.FileType.File and _is_parquet(info.base_name):
                    return str(info.path)[len(root) + 1 :]
        for info in reversed(listed):
            if info.type == fs.FileType.Directory and info.base_name != batch_name:
                to_walk.append((info.path, info.base_name if in_series(info.base_name) else batch))
    if not to_walk:
        return None
    # The rest from one listing of it all, in the walk's order; a file under its own refusal is pruned.
    found = []
    for info in folder.fs.get_file_info(fs.FileSelector(path, allow_not_found=True, recursive=True)):
        *folders, name = str(info.path)[len(path) + 1 :].split("/")
        pruned = batch_name in folders
        if (
            info.type == fs.FileType.File
            and _is_parquet(name)
            and not pruned
            and any(map(in_series, folders))
        ):
            found.append(([(1, f) for f in folders] + [(0, name)], info.path))
    return str(min(found)[1])[len(root) + 1 :] if found else None


def _series_shape(name: str) -> str:
    """A batch name with its numbers blanked: ``2013-01-01`` and ``2013-01-02`` are of one series."""
    return re.sub(r"\d+", "0", name)


def _numbered(file_name: str) -> bool:
    """Is the name one of a series of batches, dated or numbered (``2013-01-02``, ``day-3.parquet``)?"""
    return re.search(r"\d", file_name) is not None


def _is_parquet(file_name: str) -> bool:
    return file_name.lower().endswith((".parquet", ".pq"))


def quarantine(data_path: str, quarantine_path: str, key: str, options: Mapping[str, Any]) -> str:
    """Move the refused batch (a file, or a folder's files) to ``quarantine_path/key``; returns where.

    Each file is copied and its copy's size checked before any is deleted, and only the files copied are
    deleted: a failure part way leaves the batch where it was, or in both places, never in neither, and a
    file that lands in the folder meanwhile stays. A file already at a copy's place is never overwritten:
    one with the same bytes (an earlier try's copy) counts as the copy, any other stops the move before
    anything is copied. The two may be on different stores (local data, an ``s3://`` quarantine).

    Raises:
        ConfigurationError: the quarantine is the batch's own folder or inside it (the batch's deletion
            would take the copy too).
        FileExistsError: another file is already where a copy would go (nothing was copied or deleted).
        FolderMarkersLeftError: the batch was moved, but the empty S3 folder markers under its folder could
            not be listed or deleted.
        OSError: a store could not be read or written, or a copy came out short.
    """
    from pyarrow import fs

    from costaware.adapters.blob_dir import BlobDir

    source = BlobDir.from_uri(data_path, create=False, what="data_path", **options)
    target = BlobDir.from_uri(quarantine_path, create=False, what="quarantine_path", **options).child(key)
    if type(source.fs) is type(target.fs) and (target.root + "/").startswith(source.root.rstrip("/") + "/"):
        raise ConfigurationError(
            f"quarantine_path {quarantine_path!r} is inside the batch {data_path!r}: deleting the batch "
            "would delete its copy too; give a folder outside it"
        )
    name = source.root.rstrip("/").rpartition("/")[2]
    info = source.fs.get_file_info(source.root)
    if info.type == fs.FileType.File:
        files = [(source.root, name, info.size)]
    else:
        listed = source.fs.get_file_info(fs.FileSelector(source.root, recursive=True))
        files = [
            (i.path, f"{name}/{i.path[len(source.root) :].lstrip('/')}", i.size)
            for i in listed
            if i.type == fs.FileType.File
        ]
    to_copy = []
    for path, relative, size in files:
        copy = target.path(relative)
        found = target.fs.get_file_info(copy)
        if found.type == fs.FileType.NotFound:
            to_copy.append((path, copy, size))
        elif not _same_bytes(source.fs, path, target.fs, copy, size):
            # copy_files overwrites: an earlier refused batch of the same name was lost with its source.
            raise FileExistsError(
                f"{target.uri}/{relative} already holds another file than {path}: nothing was moved; move "
                "that file away, or the batch out of the landing folder by hand"
            )
    for path, copy, size in to_copy:
        if target.is_local:
            Path(copy).parent.mkdir(parents=True, exist_ok=True)
        fs.copy_files(path, copy, source_filesystem=source.fs, destination_filesystem=target.fs)
        if target.fs.get_file_info(copy).size != size:
            with contextlib.suppress(OSError):  # ours: left there, it would block the next try's move
                target.fs.delete_file(copy)
            raise OSError(f"the copy of {path} at {copy} is not whole: nothing was deleted")
    for path, _, _ in files:
        source.fs.delete_file(path)
    moved_to = f"{target.uri}/{name}"
    if info.type == fs.FileType.Directory:
        if source.is_local:
            _remove_empty_folders(Path(source.root))
        else:
            # S3 keeps an empty marker for a prefix whose last file went: the next run saw an empty batch.
            try:
                left = source.fs.get_file_info(
                    fs.FileSelector(source.root, recursive=True, allow_not_found=True)
                )
                folders = [source.root] + [i.path for i in left if i.type == fs.FileType.Directory]
                _delete_folder_markers(folders, options)
            except (OSError, ConfigurationError) as e:
                # Not "could not be moved": the batch is whole in the quarantine, only the markers are left.
                raise FolderMarkersLeftError(
                    moved_to,
                    f"the empty folder markers under s3://{source.root.rstrip('/')}/ are left ({e}): delete "
                    "them by hand (the next run would read them as an empty batch)",
                ) from e
    return moved_to


def _delete_folder_markers(folders: list[str], options: Mapping[str, Any]) -> None:
    """Delete the empty ``<folder>/`` marker objects of ``folders`` (``bucket/prefix``), and nothing else.

    pyarrow deletes a folder only with everything under it: a file that landed in the batch's folder after
    its files were listed went with it, neither moved nor left. One key at a time cannot take it.
    """
    import dataclasses
    import os

    from costaware.adapters.object_store import S3Options, s3_client

    known = {field.name for field in dataclasses.fields(S3Options)}
    given = {k: v for k, v in options.items() if k in known}
    # The endpoint the batch was read from (BlobDir's own fallback), not only the one boto3 reads.
    endpoint = given.get("endpoint_url") or os.environ.get("COSTAWARE_S3_ENDPOINT_URL")
    client = s3_client(S3Options(**{**given, "endpoint_url": endpoint or None}))
    by_bucket: dict[str, list[str]] = {}
    for folder in folders:
        bucket, _, prefix = folder.partition("/")
        if prefix:  # the bucket itself has no marker
            by_bucket.setdefault(bucket, []).append(f"{prefix}/")
    from botocore.exceptions import BotoCoreError, ClientError

    for bucket, keys in by_bucket.items():
        for first in range(0, len(keys), 1000):  # S3 deletes up to 1,000 keys a call
            try:
                answer = client.delete_objects(
                    Bucket=bucket,
                    Delete={"Objects": [{"Key": k} for k in keys[first : first + 1000]], "Quiet": True},
                )
            except (BotoCoreError, ClientError) as e:  # an OSError, as pyarrow's: the refusal still stands
                raise OSError(str(e)) from e
            failed = answer.get("Errors") or []
            if failed:
                raise OSError(f"s3://{bucket}/{failed[0].get('Key')}: {failed[0].get('Message')}")


def _same_bytes(source_fs: Any, source: str, target_fs: Any, target: str, size: int | None) -> bool:
    """Whether the file at ``target`` holds the bytes of ``source`` (read in chunks: batches can be large)."""
    if target_fs.get_file_info(target).size != size:
        return False
    chunk = 8 << 20
    with source_fs.open_input_stream(source) as mine, target_fs.open_input_stream(target) as theirs:
        while True:
            block = mine.read(chunk)
            if block != theirs.read(chunk):
                return False
            if not block:
                return True


def _remove_empty_folders(root: Path) -> None:
    """Remove ``root`` and the folders under it that are empty now; a folder with a file stays."""
    for folder in sorted(
        (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
    ):
        with contextlib.suppress(OSError):
            folder.rmdir()
    with contextlib.suppress(OSError):
        root.rmdir()
