"""The local object store's conditional writes: one winner per token, as with S3's If-Match."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from costaware.adapters.object_store import LocalObjectStore, open_store


class _BothRead(LocalObjectStore):
    """Holds each reader until the other one has read too (or a second passed): the window of a race."""

    barrier = threading.Barrier(2)

    def read(self, rel: str) -> tuple[bytes, str] | None:
        got = super().read(rel)
        # Broken: the other caller waits on the lock, and reads after our write.
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait(timeout=1)
        return got


@pytest.mark.parametrize("operation", ["replace", "delete"])
def test_two_callers_with_one_token_one_wins(tmp_path: Path, operation: str) -> None:
    plain = open_store(str(tmp_path / "store"))
    token = plain.create("lease.json", b"v0")
    assert token is not None
    store = _BothRead(plain.root)
    store.barrier = threading.Barrier(2)
    results: list[object] = []

    def call(data: bytes) -> None:
        if operation == "replace":
            results.append(store.replace("lease.json", data, token))
        else:
            results.append(store.delete("lease.json", token))

    threads = [threading.Thread(target=call, args=(data,)) for data in (b"v1", b"v2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(1 for r in results if r not in (None, False)) == 1, results
    if operation == "replace":
        winner = next(r for r in results if r is not None)
        current = plain.read("lease.json")
        assert current is not None and current[1] == winner
    assert sorted(p.name for p in (tmp_path / "store").iterdir() if p.name.endswith(".tmp")) == []
