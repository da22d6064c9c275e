r"""Checkpoint stores: training state by key and step, written atomically, checked on read.

Two places a ``Checkpointer`` saves into and resumes from (:class:`CheckpointStorage`):

- :class:`CheckpointStore`, in the worker (``WarmStartRetrainOperator``) or a job run without the launcher.
  Layout: ``<root>/<key>/step-000000123.ckpt``.
- :class:`CheckpointFolder`, a job under ``costaware-run``: the launcher's ``COSTAWARE_CHECKPOINT_DIR`` in the
  runtime's commit format (``checkpoint-123/state.ckpt`` plus ``_costaware_checkpoint.json``), which the
  launcher pushes to ``COSTAWARE_CHECKPOINT_URI`` and restores before the next attempt.

A checkpoint file is ``CWCKPT1\\n``, one JSON header line (step, size, SHA-256 of the state, plan metadata,
time) and the state bytes, in both. A file that fails any check is ignored with a warning (the store tries
the next older one), so a checkpoint cut off by a kill never breaks a resume.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from costaware_runtime.checkpoints import FOLDER_PREFIX, Marker, load_bytes, retire, save_bytes
from costaware_runtime.contract import CHECKPOINT_MARKER
from costaware_runtime.errors import ContractError

from costaware.adapters.blob_dir import BlobDir, sha256_hex
from costaware.core.errors import ConfigurationError

log = logging.getLogger(__name__)

MAGIC = b"CWCKPT1\n"
_STEP_FILE = re.compile(r"^step-(\d{9})\.ckpt$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


def is_safe_key(key: object) -> bool:
    """Whether ``key`` is a relative path of safe parts (no ``..``, ``.`` or empty part): a store key."""
    if not isinstance(key, str) or not key:
        return False
    return not any(p in ("", ".", "..") for p in key.split("/")) and not _UNSAFE.search(key.replace("/", ""))


def checkpoint_key(*parts: object) -> str:
    """A store key from parts such as dag id, task id and run id (unsafe characters become ``_``)."""
    cleaned = [_UNSAFE.sub("_", str(p)).strip("._") or "_" for p in parts]
    return "/".join(cleaned)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One saved training state: after ``step`` steps, with the plan metadata it was saved under."""

    step: int
    state: bytes
    meta: Mapping[str, Any] = field(default_factory=dict)
    created_at: str = ""


class CheckpointStorage(Protocol):
    """Where a ``Checkpointer`` saves and resumes: :class:`CheckpointStore` or :class:`CheckpointFolder`."""

    def location(self, key: str) -> str:
        """Where the checkpoints of ``key`` are, for messages."""
        ...

    def save(
        self,
        key: str,
        step: int,
        state: bytes,
        meta: Mapping[str, Any] | None = None,
        *,
        started_at: float | None = None,
    ) -> Checkpoint:
        """Keep the state after ``step`` steps, with the plan metadata ``meta``.

        ``started_at`` is ``time.monotonic()`` when the save began (before the state was serialized): a
        store that records how long saves take counts from then.
        """
        ...

    def latest(
        self, key: str, *, meta: Mapping[str, Any] | None = None, quiet: bool = False
    ) -> Checkpoint | None:
        """The newest usable checkpoint of ``key`` (with ``meta``: only one saved under the same plan).

        ``quiet`` skips unusable ones without a warning, for a look ahead of the read that reports them.
        """
        ...

    def clear(self, key: str) -> None:
        """Delete the checkpoints of ``key`` (the trained model is stored)."""
        ...


class CheckpointStore:
    """Checkpoints of running trainings, by key.

    Args:
        blobs: Where checkpoints live (local folder or S3).
        keep: How many checkpoints per key to keep; older ones are deleted after each save (at least 2, so
            a checkpoint corrupted while being replaced still leaves a good one).
    """

    def __init__(self, blobs: BlobDir, *, keep: int = 2) -> None:
        if not isinstance(keep, int) or keep < 2:
            raise ConfigurationError(f"keep must be an integer >= 2, got {keep!r}")
        self.blobs = blobs
        self.keep = keep
        self._corrupt: set[str] = set()  # files latest() found cut off or altered (deleted at the next save)
        self._unread: set[str] = set()  # files latest() could not read (a passing error): never pruned

    @classmethod
    def open(cls, uri: str, *, keep: int = 2, **storage_options: Any) -> CheckpointStore:
        """Open the store at a local folder or ``s3://`` URI (options go to ``BlobDir.from_uri``).

        A bad ``uri`` is refused as the ``checkpoint_store`` argument, which every caller passes here.
        """
        return cls(
            BlobDir.from_uri(uri, what="checkpoint_store", example="/srv/ml/checkpoints", **storage_options),
            keep=keep,
        )

    @property
    def uri(self) -> str:
        return self.blobs.uri

    def location(self, key: str) -> str:
        return f"{self.uri}/{key}"

    def _check_key(self, key: str) -> str:
        if not is_safe_key(key):
            raise ConfigurationError(
                f"checkpoint key {key!r} is not a safe relative path: build it with checkpoint_key()"
            )
        return key

    def steps(self, key: str) -> list[int]:
        """Steps that have a checkpoint file under ``key``, newest first."""
        found = [_STEP_FILE.match(n) for n in self.blobs.list(self._check_key(key))]
        return sorted((int(m.group(1)) for m in found if m), reverse=True)

    def save(
        self,
        key: str,
        step: int,
        state: bytes,
        meta: Mapping[str, Any] | None = None,
        *,
        started_at: float | None = None,
    ) -> Checkpoint:
        """Write the state after ``step`` steps atomically, then delete checkpoints beyond ``keep``.

        ``started_at`` is not recorded: this store serves the in-worker operator and jobs without the
        launcher, which have no later spot attempt to set an interval for.
        """
        if not isinstance(step, int) or step < 0:
            raise ConfigurationError(f"checkpoint step must be an integer >= 0, got {step!r}")
        checkpoint = Checkpoint(
            step=step, state=state, meta=dict(meta or {}), created_at=datetime.now(timezone.utc).isoformat()
        )
        blob = encode_checkpoint(checkpoint)
        self.blobs.write_bytes(f"{self._check_key(key)}/step-{step:09d}.ckpt", blob)
        # A file found cut off or altered goes first: kept, it took the place of a good older one, which
        # the pruning deleted (a resume after a bad newest file kept the bad one and lost the good one).
        # So do steps past the one just written: a run resumes from its newest usable checkpoint, so a later
        # step is another plan's (a retry that changed its data or mode starts at 0). Kept, they ranked
        # above this run's own, and the pruning deleted each new save as soon as it was written.
        steps = self.steps(key)
        names = [f"{key}/step-{s:09d}.ckpt" for s in steps if s <= step]
        stale = [n for n in (f"{key}/step-{s:09d}.ckpt" for s in steps if s > step) if n not in self._unread]
        corrupt = [n for n in names if n in self._corrupt]
        for old in [*stale, *corrupt, *[n for n in names if n not in corrupt][self.keep :]]:
            self.blobs.delete(old)
        self._corrupt.difference_update(corrupt)
        return checkpoint

    def latest(
        self, key: str, *, meta: Mapping[str, Any] | None = None, quiet: bool = False
    ) -> Checkpoint | None:
        """The newest valid checkpoint under ``key``, or None.

        Files that are cut off, altered or unreadable are skipped with a warning (none when ``quiet``). With
        ``meta``, a checkpoint whose plan metadata differs (another data set, trainer, mode or label) is
        skipped with a warning too.
        """
        for step in self.steps(key):
            name = f"{key}/step-{step:09d}.ckpt"
            try:
                blob = self.blobs.read_bytes(name)
            except OSError as e:
                # Perhaps a passing store error: this run resumes from an older one, but the file is not
                # taken for another plan's and pruned.
                self._unread.add(name)
                if not quiet:
                    log.warning(
                        "checkpoint %s/%s is unusable (%s): ignored, trying an older one", self.uri, name, e
                    )
                continue
            checkpoint = usable_checkpoint(
                blob,
                step=step,
                meta=meta,
                where=f"{self.uri}/{name}",
                quiet=quiet,
                on_corrupt=functools.partial(self._corrupt.add, name),
            )
            if checkpoint is not None:
                return checkpoint
        return None

    def clear(self, key: str) -> None:
        """Delete every checkpoint under ``key`` (after the training succeeded)."""
        self.blobs.delete(self._check_key(key))


class CheckpointFolder:
    """The launcher's checkpoint folder (``COSTAWARE_CHECKPOINT_DIR``) as a checkpoint store.

    Each save is ``checkpoint-<step>/state.ckpt`` in the store's file format, committed with the runtime's
    marker (``costaware_runtime.checkpoints.save_bytes``: written, committed, older folders pruned), so
    ``costaware-run`` pushes it to ``COSTAWARE_CHECKPOINT_URI`` and restores it before the next attempt
    (SageMaker syncs ``/opt/ml/checkpoints`` itself). Only the committed step is resumed. The folder belongs
    to one run, so the key names nothing in it.

    Args:
        directory: The checkpoint folder.
        remote: Where the launcher pushes it (``COSTAWARE_CHECKPOINT_URI``), for messages; empty if unknown.
    """

    #: The file of each committed step.
    STATE_FILE = "state.ckpt"

    def __init__(self, directory: Path | str, *, remote: str = "") -> None:
        self.directory = Path(directory)
        self.remote = remote

    def location(self, key: str) -> str:
        pushed = f" (pushed to {self.remote} by costaware-run)" if self.remote else ""
        return f"{self.directory}{pushed}"

    def save(
        self,
        key: str,
        step: int,
        state: bytes,
        meta: Mapping[str, Any] | None = None,
        *,
        started_at: float | None = None,
    ) -> Checkpoint:
        """Write the state after ``step`` steps and commit it (the launcher pushes it within a second).

        The commit marker records the save's wall seconds from ``started_at`` (default: this call), which
        reach ``LATEST.json`` at the checkpoint URI (:func:`recorded_save_seconds`).
        """
        if not isinstance(step, int) or step < 0:
            raise ConfigurationError(f"checkpoint step must be an integer >= 0, got {step!r}")
        checkpoint = Checkpoint(
            step=step, state=state, meta=dict(meta or {}), created_at=datetime.now(timezone.utc).isoformat()
        )
        save_bytes(
            encode_checkpoint(checkpoint),
            step=step,
            name=self.STATE_FILE,
            directory=self.directory,
            started_at=started_at,
        )
        return checkpoint

    def latest(
        self, key: str, *, meta: Mapping[str, Any] | None = None, quiet: bool = False
    ) -> Checkpoint | None:
        """The committed checkpoint, if usable (see :meth:`CheckpointStore.latest`), or None."""
        where = f"{self.directory}/{CHECKPOINT_MARKER}"
        try:
            found = load_bytes(self.STATE_FILE, self.directory)
        except (ContractError, OSError) as e:
            if not quiet:
                log.warning("checkpoint %s is unusable (%s): ignored, starting over", where, e)
            return None
        if found is None:
            return None
        step, blob = found
        where = f"{self.directory}/{FOLDER_PREFIX}{step}"
        return usable_checkpoint(blob, step=step, meta=meta, where=where, quiet=quiet)

    def clear(self, key: str) -> None:
        """Uncommit and delete the local checkpoints (the marker first, so nothing more is pushed).

        The copy the launcher pushed stays at ``COSTAWARE_CHECKPOINT_URI``, as for any job under the launcher,
        and a retired marker tells the launcher that the job committed one (:func:`costaware_runtime.retire`).
        """
        retire(self.directory)


def recorded_marker(checkpoint_uri: str, **storage_options: Any) -> Marker | None:
    """The commit marker of a training's newest pushed checkpoint (``<uri>/LATEST.json``), or None.

    The launcher pushes each committed marker there (``costaware_runtime.sync``): its step, when the job
    saved it, and the latest saves' wall seconds when the saver timed them. None when nothing was pushed.

    Raises:
        OSError: the store could not be read.
        ValueError: ``LATEST.json`` is not a marker the runtime wrote.
    """
    from costaware_runtime.checkpoints import parse_marker
    from costaware_runtime.contract import LATEST_NAME

    blobs = BlobDir.from_uri(checkpoint_uri, create=False, what="checkpoint_store", **storage_options)
    try:
        raw = blobs.read_bytes(LATEST_NAME)
    except FileNotFoundError:
        return None
    try:
        return parse_marker(raw, f"{blobs.uri}/{LATEST_NAME}")
    except ContractError as e:
        raise ValueError(str(e)) from e


def recorded_save_seconds(checkpoint_uri: str, **storage_options: Any) -> tuple[float, ...]:
    """The save seconds measured by the jobs of a training, oldest first (:func:`recorded_marker`).

    Empty when nothing was pushed yet or no save was timed (the built-in trainer times its saves, through
    :class:`CheckpointFolder`).

    Raises:
        OSError: the store could not be read.
        ValueError: ``LATEST.json`` is not a marker the runtime wrote.
    """
    marker = recorded_marker(checkpoint_uri, **storage_options)
    return marker.save_seconds if marker else ()


def recorded_step(checkpoint_uri: str, **storage_options: Any) -> int | None:
    """The step of the newest pushed checkpoint (:func:`recorded_marker`), or None when nothing was pushed.

    Raises:
        OSError: the store could not be read.
        ValueError: ``LATEST.json`` is not a marker the runtime wrote.
    """
    marker = recorded_marker(checkpoint_uri, **storage_options)
    return marker.step if marker else None


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """The file of ``checkpoint``: magic bytes, a JSON header (with the state's SHA-256), the state."""
    header = {
        "step": checkpoint.step,
        "size": len(checkpoint.state),
        "sha256": sha256_hex(checkpoint.state),
        "meta": dict(checkpoint.meta),
        "created_at": checkpoint.created_at,
    }
    return MAGIC + json.dumps(header, sort_keys=True, default=str).encode() + b"\n" + checkpoint.state


def usable_checkpoint(
    blob: bytes,
    *,
    step: int,
    meta: Mapping[str, Any] | None,
    where: str,
    quiet: bool = False,
    on_corrupt: Callable[[], None] | None = None,
) -> Checkpoint | None:
    """The checkpoint in ``blob`` (saved as step ``step``), or None with a warning when it fails a check.

    Checks: the file is whole and unaltered, it says the step it was saved as, and with ``meta`` its plan
    metadata equals ``meta`` (another data set, trainer, mode or label is not resumed). ``quiet``: no warning.
    ``on_corrupt``: called when the file is cut off or altered (no plan could ever resume it).
    """
    warn = (lambda *args: None) if quiet else log.warning
    try:
        checkpoint = decode_checkpoint(blob)
    except ValueError as e:
        warn("checkpoint %s is unusable (%s): ignored, trying an older one", where, e)
        if on_corrupt is not None:
            on_corrupt()
        return None
    if checkpoint.step != step:
        warn("checkpoint %s says step %d: ignored", where, checkpoint.step)
        return None
    if meta is not None and dict(checkpoint.meta) != dict(meta):
        warn(
            "checkpoint %s was saved for another plan (%s, now %s): ignored",
            where,
            dict(checkpoint.meta),
            dict(meta),
        )
        return None
    return checkpoint


def decode_checkpoint(blob: bytes) -> Checkpoint:
    """The checkpoint in a file written by :func:`encode_checkpoint`.

    Raises:
        ValueError: The file is not a checkpoint, is cut off, or does not match its SHA-256.
    """
    if not blob.startswith(MAGIC):
        raise ValueError("not a costaware checkpoint (bad magic bytes)")
    end = blob.find(b"\n", len(MAGIC))
    if end < 0:
        raise ValueError("header is cut off")
    try:
        header = json.loads(blob[len(MAGIC) : end])
        size, digest, step = int(header["size"]), str(header["sha256"]), int(header["step"])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"header is unreadable: {e}") from e
    state = blob[end + 1 :]
    if len(state) != size:
        raise ValueError(f"state has {len(state)} bytes, header says {size}")
    if sha256_hex(state) != digest:
        raise ValueError("state does not match its SHA-256")
    return Checkpoint(
        step=step, state=state, meta=header.get("meta") or {}, created_at=header.get("created_at", "")
    )
