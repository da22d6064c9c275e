"""Local checkpoints: a folder per step, and a commit marker written last that names the committed files.

A job (or a framework helper) writes one checkpoint's files, then calls :func:`commit`, which writes
``_costaware_checkpoint.json`` atomically. Only committed files count: the launcher pushes exactly the files
the marker lists, and checks that none changed after the commit (see :mod:`costaware_runtime.sync`). Write
each step into its own folder (:func:`checkpoint_folder`), because the previous step may still be uploading.

A saver that timed its save passes ``save_seconds`` to :func:`commit` (:func:`save_bytes` and the framework
helpers do): the marker keeps the last :data:`SAVE_HISTORY` of them, carried over from the previous marker
(a restored one too), and the launcher pushes it into ``LATEST.json``, so the orchestrator sets the next
attempt's checkpoint interval from measured saves (``checkpoint_every_seconds="auto"``).
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from costaware_runtime import _files
from costaware_runtime._marker import CommittedFile as CommittedFile
from costaware_runtime._marker import Marker as Marker
from costaware_runtime._marker import _folder
from costaware_runtime._marker import parse_marker as parse_marker
from costaware_runtime._marker import read_marker as read_marker
from costaware_runtime._marker import write_marker as write_marker
from costaware_runtime.contract import (
    CHECKPOINT_MARKER,
    ORIGIN_NAME,
    RETIRED_MARKER,
    process_rank,
)
from costaware_runtime.errors import ContractError, StoreStalledError
from costaware_runtime.stores import check_key

if TYPE_CHECKING:
    from costaware_runtime.sync import CheckpointSync

log = logging.getLogger(__name__)

FOLDER_PREFIX = "checkpoint-"
_FOLDER = re.compile(r"checkpoint-(\d+)")
#: How many measured save durations a marker keeps (the newest last).
SAVE_HISTORY = 8
#: push()'s syncs, one per (URI, folder): a new one per call took the folders it pushed before for another
#: writer's, which it prunes only once they are hours old.
_syncs: dict[tuple[str, Path], CheckpointSync] = {}
_syncs_lock = threading.Lock()
_given_up_folders: dict[tuple[str, Path], set[str]] = {}


def latest_step(directory: Path | str | None = None) -> int | None:
    """The step of the newest committed checkpoint in ``directory``, or None when there is none."""
    marker = read_marker(directory)
    return None if marker is None else marker.step


def checkpoint_folder(step: int, directory: Path | str | None = None) -> Path:
    """``<directory>/checkpoint-<step>``, created, to write one step's files into before :func:`commit`."""
    folder = _folder(directory) / f"{FOLDER_PREFIX}{_check_step(step)}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def commit(
    directory: Path | str | None,
    step: int,
    files: Iterable[Path | str],
    *,
    save_seconds: float | None = None,
) -> Marker:
    """Mark ``files`` (inside ``directory``) as the checkpoint of ``step``, by writing the marker last.

    Args:
        directory: The checkpoint folder; None means ``COSTAWARE_CHECKPOINT_DIR``.
        step: The training step (or round, or epoch) the checkpoint resumes after; at least 0.
        files: Files or folders (taken whole) inside ``directory``, absolute or relative to it.
        save_seconds: How long this save took (wall seconds, serializing and writing), when the saver timed
            it; appended to the previous marker's measured saves. None: not measured.

    Returns:
        The marker written.

    Raises:
        ContractError: A file is missing, outside ``directory`` or named so no store could hold it (a
            backslash in it), or there are none.
    """
    root = _folder(directory).resolve()
    _check_step(step)
    found: dict[str, CommittedFile] = {}
    for item in files:
        path = Path(item) if Path(item).is_absolute() else root / item
        if not path.exists():
            raise ContractError(
                f"checkpoint file {str(item)!r} does not exist in {root}: write it, then commit"
            )
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if not file.is_file() or (file.name.startswith(".") and file.name.endswith(".tmp")):
                continue
            try:
                relative = file.resolve().relative_to(root).as_posix()
            except ValueError:
                raise ContractError(
                    f"checkpoint file {str(file)!r} is outside {root}: save into it"
                ) from None
            if relative in (CHECKPOINT_MARKER, RETIRED_MARKER, ORIGIN_NAME):  # the runtime's, not the job's
                continue
            try:
                check_key(relative)  # read_marker refuses it: every later read of the marker would fail
            except ContractError as e:
                raise ContractError(
                    f"checkpoint file {str(file)!r} cannot be committed: {e}; rename it"
                ) from e
            stat = file.stat()
            found[relative] = CommittedFile(relative, stat.st_size, stat.st_mtime_ns)
    if not found:
        raise ContractError(f"the checkpoint of step {step} in {root} has no files: list what was saved")
    if save_seconds is not None and not (math.isfinite(save_seconds) and save_seconds >= 0):
        raise ContractError(f"save_seconds={save_seconds!r} is not a duration: pass seconds >= 0 or None")
    history = _measured_saves(root) + ((float(save_seconds),) if save_seconds is not None else ())
    marker = Marker(
        step,
        datetime.now(UTC).isoformat(),
        tuple(found[key] for key in sorted(found)),
        history[-SAVE_HISTORY:],
    )
    _files.write_json(root / CHECKPOINT_MARKER, marker.to_json())
    log.info("committed checkpoint step %s (%s files) in %s", step, len(found), root)
    return marker


def retire(directory: Path | str | None = None) -> Marker | None:
    """Delete the checkpoints of ``directory`` (default ``COSTAWARE_CHECKPOINT_DIR``) once the job is done.

    The marker goes first, so nothing more is pushed. Its content stays in ``RETIRED_MARKER``: a commit made
    just before the end, too late for the launcher to push, still tells it the job did checkpoint (it warns
    about a job asked to checkpoint that never did). Returns the retired marker (None: nothing committed).
    """
    root = _folder(directory)
    try:
        marker = read_marker(root)
    except ContractError:
        marker = None  # deleted all the same: a bad marker is nothing to keep
    if marker is not None:
        _files.write_json(root / RETIRED_MARKER, marker.to_json())
    (root / CHECKPOINT_MARKER).unlink(missing_ok=True)
    for folder in root.glob(f"{FOLDER_PREFIX}*"):
        shutil.rmtree(folder, ignore_errors=True)
    return marker


def retired_marker(directory: Path | str | None = None) -> Marker | None:
    """The marker :func:`retire` left in ``directory``, or None (none, or unreadable)."""
    path = _folder(directory) / RETIRED_MARKER
    try:
        return parse_marker(path.read_bytes(), str(path))
    except (OSError, ContractError):
        return None


def _measured_saves(root: Path) -> tuple[float, ...]:
    """The save seconds the current marker of ``root`` holds; none when it has no marker or a bad one."""
    try:
        previous = read_marker(root)
    except ContractError:
        return ()  # the commit replaces it; a bad marker's history is not worth failing a save over
    return previous.save_seconds if previous is not None else ()


def prune(directory: Path | str | None = None, keep: int = 2) -> list[Path]:
    """Delete the ``checkpoint-<n>`` folders of ``directory`` but the committed one and the newest older ones.

    Call it right after :func:`commit`, from the process that saves: folders numbered above the committed
    step are leftovers of an abandoned save. Returns the folders deleted.
    """
    if keep < 1:
        raise ValueError(f"keep={keep} would delete the committed checkpoint: keep at least 1")
    root = _folder(directory)
    committed = latest_step(root)
    if committed is None:
        return []
    numbered = sorted(
        (int(match.group(1)), path)
        for path in root.iterdir()
        if path.is_dir() and (match := _FOLDER.fullmatch(path.name))
    )
    kept = [step for step, _ in numbered if step <= committed][-keep:]
    doomed = [path for step, path in numbered if step not in kept]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def save_bytes(
    data: bytes,
    *,
    step: int,
    name: str = "state.bin",
    directory: Path | str | None = None,
    started_at: float | None = None,
) -> Path | None:
    """Save ``data`` as the checkpoint of ``step`` (``checkpoint-<step>/<name>``), commit it, prune old ones.

    In a multi-process training only rank 0 (``RANK``, else ``LOCAL_RANK``) saves: every rank sharing one
    folder replaced the others' file, set the marker back to its own step, and pruned the newer step rank 0
    had committed as an abandoned save.

    Args:
        data: The state.
        step: The step training resumes after.
        name: The file's name in the step's folder.
        directory: The checkpoint folder; default ``COSTAWARE_CHECKPOINT_DIR``.
        started_at: ``time.monotonic()`` when the save began (before ``data`` was serialized), so the save
            seconds the marker records count the serializing too; default: when this call began.

    Returns:
        The file written, or None on a rank other than 0.
    """
    began = time.monotonic() if started_at is None else started_at
    if process_rank() != 0:
        return None
    path = checkpoint_folder(step, directory) / check_key(name)
    _files.write_bytes(path, data)
    commit(directory, step, [path], save_seconds=max(0.0, time.monotonic() - began))
    prune(directory)
    return path


def held_file(marker: Marker, names: Sequence[str], directory: Path | str | None, *, hint: str) -> Path:
    """The path of the first of ``names`` that the committed checkpoint ``marker`` holds.

    Raises:
        ContractError: It holds none of them: a job that started over would train from step 0 although the
            launcher restored a later step. ``hint`` says what to do instead.
    """
    held = [f.path for f in marker.files]
    for name in names:
        relative = f"{FOLDER_PREFIX}{marker.step}/{name}"
        if relative in held:
            path = _folder(directory) / relative
            recorded = next(f.bytes for f in marker.files if f.path == relative)
            size = path.stat().st_size if path.is_file() else None
            if size != recorded:
                # A folder synced file by file (SageMaker's /opt/ml/checkpoints) can bring the marker back
                # without a file it names: said here, not a FileNotFoundError traceback.
                state = "is missing" if size is None else f"has {size} bytes of the {recorded} committed"
                raise ContractError(
                    f"checkpoint step {marker.step}'s file {relative!r} {state} in {_folder(directory)}: the "
                    "checkpoint did not come back whole; its upload was cut short"
                )
            return path
    found = ", ".join(repr(path.split("/", 1)[-1]) for path in held) or "no file"
    wanted = " or ".join(repr(name) for name in names)
    raise ContractError(
        f"checkpoint step {marker.step} in {_folder(directory)} holds {found}, not {wanted}: {hint}"
    )


def load_bytes(name: str = "state.bin", directory: Path | str | None = None) -> tuple[int, bytes] | None:
    """The step and bytes of ``name`` in the newest committed checkpoint, or None when there is none.

    Raises:
        ContractError: There is a committed checkpoint, but it holds no file ``name``: a job that started
            over here would train from step 0 although the launcher restored a later step.
    """
    marker = read_marker(directory)
    if marker is None:
        return None
    hint = "load the name it was saved under (save_bytes(..., name=...) and load_bytes(name) must agree)"
    return marker.step, held_file(marker, [check_key(name)], directory, hint=hint).read_bytes()


def restore(uri: str, directory: Path | str | None = None) -> int | None:
    """Download the newest complete checkpoint at ``uri`` into ``directory``; returns its step or None.

    ``uri`` is a local folder, ``file://`` or ``s3://bucket/prefix`` laid out by :func:`push`. A step whose
    upload did not finish is never restored: the one ``LATEST.json`` names, or a later step folder whose
    marker (written after its files) and every file it lists are there (its writer died before moving the
    pointer).

    Raises:
        StoreError: The store could not be read, or moved nothing for ``COSTAWARE_STORE_STALL_SECONDS``
            (default 300; ``StoreStalledError``: the download runs on in a thread of its own).
    """
    from costaware_runtime._bounded import run_bounded, stall_seconds
    from costaware_runtime.sync import CheckpointSync

    bound = stall_seconds()  # a bad value fails before the store is opened
    sync = CheckpointSync(uri, _folder(directory))
    # Bounded as the launcher's own: a store that hung held the job, and the machine it is billed for.
    return run_bounded(sync.restore, sync, bound, f"the restore from {sync.store.uri}")


def clear_checkpoints(uri: str) -> list[str]:
    """Delete every checkpoint at ``uri`` (``LATEST.json`` first, then each ``step-*`` folder) to start over.

    A job started over from step 0 in a location that holds checkpoints resumes the old step at every
    attempt, and its pushes never become ``LATEST.json`` (it never goes back). Stop every writer of ``uri``
    first. Open multipart uploads under it are aborted too (S3). Returns the step folders deleted: ``[]``
    where the location holds none (an S3 prefix never written looks the same: check the URI).

    Raises:
        ContractError: ``uri`` is empty, not a location a store can use, or a local folder that does not exist
            or is a file. A relative path is read against the current folder, as ``costaware-run`` reads
            ``COSTAWARE_CHECKPOINT_URI``; one shaped like ``bucket/prefix`` that is no folder here is asked
            whether ``s3://`` was meant.
        StoreError: The store could not be listed or written.
    """
    from costaware_runtime.sync import clear

    return clear(uri)


def push(directory: Path | str | None, uri: str) -> int:
    """Upload the committed checkpoint of ``directory`` to ``uri``; returns its step.

    Raises:
        ContractError: ``directory`` holds no committed checkpoint.
        CheckpointChangedError: A committed file changed or vanished after the commit.
        StoreError: The store could not be written, or moved nothing for ``COSTAWARE_STORE_STALL_SECONDS``
            (default 300; ``StoreStalledError``: the upload runs on in a thread of its own; a later push
            of ``directory`` to ``uri`` does not wait for it, but pushes into a step folder of its own).
    """
    from costaware_runtime._bounded import run_bounded, stall_seconds

    folder = _folder(directory)
    bound = stall_seconds()
    sync = _sync_of(uri, folder)
    try:
        step = run_bounded(sync.push_changed, sync, bound, f"the checkpoint push to {sync.store.uri}")
    except StoreStalledError:
        # Its thread holds the sync's lock: every later push of the folder waited on it and was given up
        # too, however well the store answered by then. The next push makes a sync of its own (a step
        # folder of its own too, as any two writers' pushes).
        sync.give_up()  # its push, should it end, says it ended late and leaves its folder to the next sync
        with _syncs_lock:
            if _syncs.get((uri, folder)) is sync:
                del _syncs[uri, folder]
        raise
    if step is None:
        raise ContractError(f"{folder} holds no committed checkpoint to push: save one, then commit it")
    return step


def _sync_of(uri: str, folder: Path) -> CheckpointSync:
    """This process's one sync of ``folder`` with ``uri``: it prunes the folders it pushed at once."""
    from costaware_runtime.sync import CheckpointSync

    with _syncs_lock:
        sync = _syncs.get((uri, folder))
        if sync is None:
            # A given-up sync's folders go to the next one (see CheckpointSync.give_up).
            given_up_folders = _given_up_folders.setdefault((uri, folder), set())
            sync = _syncs[uri, folder] = CheckpointSync(uri, folder, given_up_folders=given_up_folders)
        return sync


def _check_step(step: int) -> int:
    if type(step) is not int or step < 0:
        raise ContractError(f"step={step!r} is not a step number: use a whole number >= 0")
    return step
