"""The writer lease of a feature-cache key: one process computes a key, the others wait for its entry.

Before computing, a writer creates ``locks/<key>.json`` (create-if-absent) holding its token and an expiry
that a heartbeat thread renews. Others wait and reuse its entry; they break the lease when it expires, or at
once when it belongs to a dead process on the same host.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from costaware.adapters.object_store import ObjectStore
from costaware.core.ledger import utcnow

log = logging.getLogger(__name__)

DEFAULT_LEASE = timedelta(minutes=10)


class Lease:
    """A held lock on one key, renewed by a daemon thread until released.

    Attributes:
        lost: Set once the lease is no longer ours (taken over, or expired while renewing failed): another
            run may be computing the same key.
    """

    def __init__(
        self, store: ObjectStore, rel: str, body: dict[str, Any], token: str, lease: timedelta
    ) -> None:
        self.store, self.rel, self.body, self.token, self.lease = store, rel, body, token, lease
        self.expires_at = datetime.fromisoformat(body["expires_at"])
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{rel}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        interval = self.lease.total_seconds() / 3
        wait = interval
        while not self._stop.wait(wait):
            expires_at = utcnow() + self.lease
            body = {**self.body, "expires_at": expires_at.isoformat()}
            try:
                new = self.store.replace(self.rel, json.dumps(body).encode(), self.token)
                # Once: a store that keeps refusing the token it hands back would spin this loop.
                if new is None and wait > 0 and (written := self._ours_after_all()) is not None:
                    self.token, wait = written, 0  # renew again at once, now with the right token
                    continue
            except Exception as e:  # a 503, an NFS hiccup: the lease is ours until it expires, keep trying
                if utcnow() >= self.expires_at:
                    log.error("lost the lease %s: renewing it failed until it expired (%s)", self.rel, e)
                    self.lost.set()
                    return
                log.warning(
                    "renewing the lease %s failed, retrying (it expires at %s): %s",
                    self.rel,
                    self.expires_at.isoformat(),
                    e,
                )
                wait = interval / 10
                continue
            if new is None:
                log.warning("lost the lease %s (it expired and was taken over)", self.rel)
                self.lost.set()
                return
            self.token, self.expires_at, wait = new, expires_at, interval

    def _ours_after_all(self) -> str | None:
        """The lock's token when it is still ours: a renewal was written but its answer never came."""
        current = self.store.read(self.rel)
        if current is None:
            return None
        try:
            ours = json.loads(current[0])["token"] == self.body["token"]
        except (ValueError, KeyError, TypeError):
            return None
        return current[1] if ours else None

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.store.delete(self.rel, self.token)
        except Exception as e:  # a passing store error (OSError, botocore's): the lease expires by itself
            log.warning("could not release the lease %s (%s): it expires at %s", self.rel, e, self.expires_at)


@contextmanager
def hold_lease(store: ObjectStore, key: str, lease: timedelta) -> Iterator[Lease | None]:
    """Hold the writer lease of ``key`` in the block; yields ``None`` when a live writer has it.

    Args:
        store: The cache's store.
        key: The cache key.
        lease: How long the lock lives without renewal (renewed every third of it).
    """
    rel = f"locks/{key}.json"
    body = {"token": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid()}
    held: Lease | None = None
    for _ in range(3):
        body["expires_at"] = (utcnow() + lease).isoformat()
        token = store.create(rel, json.dumps(body).encode())
        if token is not None:
            held = Lease(store, rel, body, token, lease)
            break
        current = store.read(rel)
        if current is None:
            continue  # released between our two calls: try again
        if not is_stale(current[0]):
            break
        log.warning("breaking the stale lease %s: %s", rel, current[0].decode(errors="replace"))
        store.delete(rel, current[1])
    try:
        yield held
    finally:
        if held is not None:
            held.release()


def is_stale(data: bytes) -> bool:
    """Whether the lock ``data`` protects nothing: expired, unreadable, or of a dead process on this host."""
    try:
        body = json.loads(data)
        if datetime.fromisoformat(body["expires_at"]) < utcnow():
            return True
        return bool(body["host"] == socket.gethostname() and not _pid_alive(int(body["pid"])))
    except (ValueError, KeyError, TypeError):
        return True  # an unreadable lock protects nothing


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
