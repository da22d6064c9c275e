"""Atomic local writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The name the write checks (the launcher's of its folders, a folder store's) give their probe file.
WRITE_CHECK = "costaware-write-check"
_WRITE_CHECK_PROBE = re.compile(rf"\.{WRITE_CHECK}\.[0-9a-f]{{12}}\.tmp")


def temp_sibling(path: Path) -> Path:
    """A fresh hidden name next to ``path``: same folder, so ``os.replace`` onto ``path`` is atomic."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")


def write_check_probe(folder: Path) -> Path:
    """A fresh name for a write check's probe file in ``folder``."""
    return temp_sibling(folder / WRITE_CHECK)


def is_write_check_probe(path: Path) -> bool:
    """Whether ``path`` is named as a write check's probe (one left where files cannot be deleted)."""
    return _WRITE_CHECK_PROBE.fullmatch(path.name) is not None


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary name to write; on success it replaces ``path`` (durably), on error it is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_sibling(path)
    try:
        yield temp
        with open(temp, "rb+") as written:
            os.fsync(written.fileno())
        temp.replace(path)
    finally:
        temp.unlink(missing_ok=True)
    _fsync_folder(path.parent)


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with replacing(path) as temp:
        temp.write_bytes(data)


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as indented JSON to ``path`` atomically (NaN and infinities refused)."""
    write_bytes(path, (json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n").encode())


def _fsync_folder(folder: Path) -> None:
    # The rename itself is only durable once the folder's entry is on disk; some filesystems refuse this.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
