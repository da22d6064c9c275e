"""The commit marker: what a committed checkpoint holds, read from and written to its folder.

Apart from ``checkpoints`` so that ``sync`` and ``_step_folders``, which ``checkpoints`` calls for its
restore and push, read markers without importing it back (an import cycle).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costaware_runtime import _files
from costaware_runtime._store import check_key
from costaware_runtime.contract import CHECKPOINT_MARKER, checkpoint_dir
from costaware_runtime.errors import ContractError


@dataclass(frozen=True, slots=True)
class CommittedFile:
    """One file of a committed checkpoint, as it was at commit time."""

    path: str
    bytes: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class Marker:
    """A parsed commit marker: the step, when it was saved, its files, and the measured save seconds.

    ``save_seconds``: wall seconds of the latest saves of this training (this commit's last, when timed),
    at most :data:`SAVE_HISTORY`; empty when no saver timed one.
    """

    step: int
    saved_at: str
    files: tuple[CommittedFile, ...]
    save_seconds: tuple[float, ...] = ()

    @property
    def identity(self) -> tuple[int, str]:
        """What tells two commits apart (a step may be saved twice)."""
        return (self.step, self.saved_at)

    def to_json(self) -> dict[str, Any]:
        files = [{"path": f.path, "bytes": f.bytes, "mtime_ns": f.mtime_ns} for f in self.files]
        data: dict[str, Any] = {"step": self.step, "saved_at": self.saved_at, "files": files}
        if self.save_seconds:
            data["save_seconds"] = list(self.save_seconds)
        return data


def parse_marker(raw: bytes, where: str) -> Marker:
    """The marker in ``raw``, read from ``where``.

    Raises:
        ContractError: ``raw`` is not a marker written by :func:`commit`.
    """
    try:
        data = json.loads(raw)
        step, saved_at = data["step"], data["saved_at"]
        files = tuple(
            CommittedFile(check_key(str(f["path"])), int(f["bytes"]), int(f.get("mtime_ns", 0)))
            for f in data["files"]
        )
        save_seconds = tuple(float(x) for x in data.get("save_seconds") or ())
    except (ValueError, KeyError, TypeError, ContractError) as e:  # ContractError: a path check_key refuses
        raise ContractError(
            f"{where} is not a checkpoint marker ({e!r}): write it with costaware_runtime.commit()"
        ) from e
    if type(step) is not int or step < 0 or not isinstance(saved_at, str) or not files:
        raise ContractError(f"{where} holds step {step!r}, saved_at {saved_at!r} and {len(files)} files")
    if not all(math.isfinite(x) and x >= 0 for x in save_seconds):
        raise ContractError(f"{where} holds save_seconds {list(save_seconds)}: each must be seconds >= 0")
    return Marker(step, saved_at, files, save_seconds)


def _folder(directory: Path | str | None) -> Path:
    # Absolute: the save helpers pass commit() paths built from it, which a relative folder ("ckpt", as in a
    # local try) turned into "ckpt/ckpt/..." inside it.
    return (checkpoint_dir() if directory is None else Path(directory)).absolute()


def read_marker(directory: Path | str | None = None) -> Marker | None:
    """The committed checkpoint of ``directory`` (default ``COSTAWARE_CHECKPOINT_DIR``), or None."""
    path = _folder(directory) / CHECKPOINT_MARKER
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return parse_marker(raw, str(path))


def write_marker(directory: Path, marker: Marker) -> None:
    """Write ``marker`` into ``directory`` atomically (a restore's last act)."""
    _files.write_json(directory / CHECKPOINT_MARKER, marker.to_json())
