r"""Checkpoint store: training state by key and step, written atomically, checked on read.

Layout: ``<root>/<key>/step-000000123.ckpt``. A file is ``CWCKPT1\\n``, one JSON header line (step, size,
SHA-256 of the state, plan metadata, time) and the state bytes. A file that fails any check is ignored with
a warning and the next older one is tried, so a checkpoint cut off by a kill never breaks a resume.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from costaware.adapters.model_store import BlobDir, sha256_hex
from costaware.core.errors import ConfigurationError

log = logging.getLogger(__name__)

MAGIC = b"CWCKPT1\n"
_STEP_FILE = re.compile(r"^step-(\d{9})\.ckpt$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


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

    @classmethod
    def open(cls, uri: str, *, keep: int = 2, **storage_options: Any) -> CheckpointStore:
        """Open the store at a local folder or ``s3://`` URI (options go to ``BlobDir.from_uri``)."""
        return cls(BlobDir.from_uri(uri, **storage_options), keep=keep)

    @property
    def uri(self) -> str:
        return self.blobs.uri

    def _check_key(self, key: str) -> str:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts) or _UNSAFE.search(key.replace("/", "")):
            raise ConfigurationError(
                f"checkpoint key {key!r} is not a safe relative path: build it with checkpoint_key()"
            )
        return key

    def steps(self, key: str) -> list[int]:
        """Steps that have a checkpoint file under ``key``, newest first."""
        found = [_STEP_FILE.match(n) for n in self.blobs.list(self._check_key(key))]
        return sorted((int(m.group(1)) for m in found if m), reverse=True)

    def save(self, key: str, step: int, state: bytes, meta: Mapping[str, Any] | None = None) -> Checkpoint:
        """Write the state after ``step`` steps atomically, then delete checkpoints beyond ``keep``."""
        if not isinstance(step, int) or step < 0:
            raise ConfigurationError(f"checkpoint step must be an integer >= 0, got {step!r}")
        checkpoint = Checkpoint(
            step=step, state=state, meta=dict(meta or {}), created_at=datetime.now(timezone.utc).isoformat()
        )
        header = {
            "step": step,
            "size": len(state),
            "sha256": sha256_hex(state),
            "meta": checkpoint.meta,
            "created_at": checkpoint.created_at,
        }
        blob = MAGIC + json.dumps(header, sort_keys=True, default=str).encode() + b"\n" + state
        self.blobs.write_bytes(f"{self._check_key(key)}/step-{step:09d}.ckpt", blob)
        for old in self.steps(key)[self.keep :]:
            self.blobs.delete(f"{key}/step-{old:09d}.ckpt")
        return checkpoint

    def latest(self, key: str, *, meta: Mapping[str, Any] | None = None) -> Checkpoint | None:
        """The newest valid checkpoint under ``key``, or None.

        Files that are cut off, altered or unreadable are skipped with a warning. With ``meta``, a checkpoint
        whose plan metadata differs (another data set, trainer or mode) is skipped with a warning too.
        """
        for step in self.steps(key):
            name = f"{key}/step-{step:09d}.ckpt"
            try:
                checkpoint = _decode(self.blobs.read_bytes(name))
            except (ValueError, OSError) as e:
                log.warning(
                    "checkpoint %s/%s is unusable (%s): ignored, trying an older one", self.uri, name, e
                )
                continue
            if checkpoint.step != step:
                log.warning("checkpoint %s/%s says step %d: ignored", self.uri, name, checkpoint.step)
                continue
            if meta is not None and dict(checkpoint.meta) != dict(meta):
                log.warning(
                    "checkpoint %s/%s was saved for another plan (%s, now %s): ignored",
                    self.uri,
                    name,
                    dict(checkpoint.meta),
                    dict(meta),
                )
                continue
            return checkpoint
        return None

    def clear(self, key: str) -> None:
        """Delete every checkpoint under ``key`` (after the training succeeded)."""
        self.blobs.delete(self._check_key(key))


def _decode(blob: bytes) -> Checkpoint:
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
