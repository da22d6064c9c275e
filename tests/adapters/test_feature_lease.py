"""The writer lease's renewal thread: it outlives transient store failures and says when the lease is lost."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from costaware.adapters.feature_lease import hold_lease
from costaware.adapters.object_store import LocalObjectStore, open_store

KEY = "0123456789abcdef0123456789abcdef"


class _Flaky(LocalObjectStore):
    """Fails the renewals listed in ``failures`` (1-based), after writing when ``written``; counts them."""

    failures: frozenset[int] = frozenset()
    written = False

    def __init__(self, root: object, wanted: int) -> None:
        super().__init__(root)  # type: ignore[arg-type]
        self.calls = 0
        self.wanted = wanted
        self.reached = threading.Event()

    def replace(self, rel: str, data: bytes, token: str) -> str | None:
        self.calls += 1
        if self.calls >= self.wanted:
            self.reached.set()
        if self.calls in self.failures:
            if self.written:
                super().replace(rel, data, token)
            raise OSError("503 Slow Down")
        return super().replace(rel, data, token)


@pytest.mark.parametrize("written", [False, True], ids=["not-written", "written-answer-lost"])
def test_a_failed_renewal_is_retried_and_the_lease_kept(tmp_path: Path, written: bool) -> None:
    store = _Flaky(open_store(str(tmp_path / "cache")).root, wanted=3)
    store.failures, store.written = frozenset({1}), written
    # 6 s: the retry of the failed renewal has 4 s before the lease expires (at 1.5 s, a loaded machine's
    # scheduling delays let it expire first, and the test failed in a CI rehearsal under load).
    with hold_lease(store, KEY, timedelta(seconds=6)) as lease:
        assert lease is not None
        assert store.reached.wait(timeout=30), f"the renewal thread stopped after {store.calls} call(s)"
        assert not lease.lost.is_set()
        body = json.loads((tmp_path / "cache" / "locks" / f"{KEY}.json").read_bytes())
        assert body["token"] == lease.body["token"]
    assert not (tmp_path / "cache" / "locks" / f"{KEY}.json").exists()  # released with the right token


def test_a_lease_that_expires_while_renewals_fail_is_flagged_lost(tmp_path: Path) -> None:
    store = _Flaky(open_store(str(tmp_path / "cache")).root, wanted=1)
    store.failures = frozenset(range(1, 1000))
    with hold_lease(store, KEY, timedelta(seconds=0.3)) as lease:
        assert lease is not None
        assert lease.lost.wait(timeout=30)


class _Refusing(LocalObjectStore):
    """Refuses every renewal while the lock still reads as ours (a store whose tokens never match)."""

    def __init__(self, root: object) -> None:
        super().__init__(root)  # type: ignore[arg-type]
        self.calls = 0

    def replace(self, rel: str, data: bytes, token: str) -> str | None:
        if rel.startswith("locks/"):
            self.calls += 1
            return None
        return super().replace(rel, data, token)


def test_a_store_that_keeps_refusing_its_own_token_loses_the_lease_instead_of_spinning(
    tmp_path: Path,
) -> None:
    # The renewal retried at once, with no wait, for as long as the lock read as ours: a busy loop.
    store = _Refusing(open_store(str(tmp_path / "cache")).root)
    with hold_lease(store, KEY, timedelta(seconds=0.3)) as lease:
        assert lease is not None
        assert lease.lost.wait(timeout=30)
        assert store.calls == 2  # the renewal, and one retry with the token read back


class _NoDelete(LocalObjectStore):
    def delete(self, rel: str, token: str | None = None) -> bool:
        raise OSError("503 Slow Down")


def test_a_release_the_store_refuses_leaves_the_lease_to_expire(tmp_path: Path) -> None:
    # The error went up through the feature computation that had just finished, failing the task.
    store = _NoDelete(open_store(str(tmp_path / "cache")).root)
    with hold_lease(store, KEY, timedelta(seconds=30)) as lease:
        assert lease is not None
    assert (tmp_path / "cache" / "locks" / f"{KEY}.json").exists()  # expires by itself
