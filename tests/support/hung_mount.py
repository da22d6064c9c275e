"""A folder on a mount that stopped answering: its calls block, as a hard NFS mount's do in the kernel."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: How long a blocked call waits at most: a check with no bound then fails its test, not the whole run.
BLOCKED_AT_MOST_SECONDS = 60.0


@contextmanager
def hung_mount(
    monkeypatch: pytest.MonkeyPatch, mount: Path, calls: tuple[str, ...] = ("open",)
) -> Iterator[None]:
    """Make ``os.<call>`` of ``mount`` or any path under it block until the block ends.

    Args:
        monkeypatch: The test's, which undoes the calls after the block has released them.
        mount: The folder standing for the mount; it must exist.
        calls: The ``os`` functions that block there (``open`` makes every new file, ``stat`` every look).
    """
    released = threading.Event()

    def under_mount(path: Any) -> bool:
        if isinstance(path, int):
            return False  # a descriptor, already open
        target = Path(os.fsdecode(path))
        return target == mount or mount in target.parents

    for name in calls:
        real = getattr(os, name)

        def blocking(path: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if under_mount(path):
                released.wait(BLOCKED_AT_MOST_SECONDS)
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, blocking)
    try:
        yield
    finally:
        released.set()  # the given-up check's thread goes on, and ends
