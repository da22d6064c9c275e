"""The interface every store gives (:class:`Store`) and the keys it takes (:func:`check_key`)."""

from __future__ import annotations

import hashlib
import io
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from costaware_runtime.errors import ContractError

#: Called with each count of bytes a transfer moved, as it moves them: a slow transfer that keeps moving is
#: told apart from one that hangs (see ``_watcher``).
Progress = Callable[[int], None]


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative ``/`` path (no ``..``, not absolute, no empty parts).

    Raises:
        ContractError: ``key`` could escape the folder it is written into.
    """
    parts = key.split("/")
    if not key or key.startswith("/") or "\\" in key or any(part in ("", ".", "..") for part in parts):
        raise ContractError(f"{key!r} is not a relative file path like 'checkpoint-3/model.pt'")
    return key


class Store(ABC):
    """Files under one root URI, addressed by relative keys."""

    uri: str
    #: Called (with 0) after each request a listing, deletion or abort sends is answered, a page of a listing
    #: too: a long listing or prune moves no bytes, and was given up as hung (see ``_bounded.run_bounded``).
    request_answered: Progress | None = None

    def _answered(self) -> None:
        if self.request_answered is not None:
            self.request_answered(0)

    @abstractmethod
    def put(self, key: str, source: BinaryIO, progress: Progress | None = None) -> None:
        """Store what ``source`` holds (read to its end) under ``key``, replacing what was there.

        ``progress``, if given, is called with the bytes sent as they go (not only once the file is stored).
        """

    @abstractmethod
    def read(self, key: str) -> bytes | None:
        """The bytes under ``key``, or None when there is no such key."""

    @abstractmethod
    def download(self, key: str, destination: Path, progress: Progress | None = None) -> None:
        """Copy ``key`` to the local file ``destination`` (atomically); StoreError when it is missing.

        ``progress``, if given, is called with the bytes received as they come.
        """

    def keys(self, prefix: str = "") -> list[str]:
        """Every key that starts with ``prefix``, sorted."""
        return sorted(self.sizes(prefix))

    @abstractmethod
    def sizes(self, prefix: str = "") -> dict[str, int]:
        """The size in bytes of every key that starts with ``prefix``."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Remove ``keys``; keys that are already gone are fine."""

    @abstractmethod
    def modified(self, folder: str) -> float | None:
        """When anything under the top-level ``folder`` last changed (epoch seconds); None: it is empty.

        A file written counts, and so does a part an unfinished upload into it received (a writer alive).
        """

    def folders(self, prefix: str = "") -> list[str]:
        """The top-level folders whose names start with ``prefix``, sorted."""
        return sorted({key.split("/", 1)[0] for key in self.keys(prefix) if "/" in key})

    def delete_folder(self, folder: str) -> None:
        """Remove the top-level ``folder`` and everything in it."""
        self.delete(self.keys(f"{check_key(folder)}/"))

    def check(self) -> None:  # noqa: B027  # a store with nothing to check needs no override
        """Fail now if the store cannot be used at all (an S3 store without boto3, a folder under a file)."""

    def abort_uploads(self, prefix: str, idle_since: float, started_before: float) -> list[str]:
        """Abort the unfinished uploads to keys under ``prefix`` that did nothing since ``idle_since``.

        An upload counts as busy at its start and at each part it received (epoch seconds); one whose parts
        may not be listed is aborted only if it began before ``started_before``. Returns the keys whose
        uploads were aborted. A folder store has none: what a killed copy left (a temporary file) goes with
        its folder.
        """
        return []

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``."""
        self.put(key, io.BytesIO(data))

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The bytes under ``key`` and a tag that changes whenever ``key`` is replaced; None: no such key."""
        data = self.read(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def put_bytes_if(self, key: str, data: bytes, tag: str | None) -> bool:
        """Store ``data`` under ``key`` only if ``key`` still has ``tag`` (None: still does not exist).

        Returns False, writing nothing, when another writer replaced (or wrote) ``key`` since. Here the check
        and the write are two steps: a writer between them is overwritten (see the stores' overrides).
        """
        current = self.read_versioned(key)
        if (None if current is None else current[1]) != tag:
            return False
        self.put_bytes(key, data)
        return True

    def location(self) -> str:
        """What tells this store apart from another whatever way its URI was spelt."""
        return self.uri

    def url(self, key: str = "") -> str:
        """The full URI of ``key``."""
        return f"{self.uri.rstrip('/')}/{key}" if key else self.uri
