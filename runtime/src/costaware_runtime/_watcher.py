"""The thread that pushes each checkpoint the job commits while it runs."""

from __future__ import annotations

import logging
import threading
import time

from costaware_runtime._bounded import GIVEN_UP, ended_while_moving
from costaware_runtime.checkpoints import read_marker
from costaware_runtime.contract import DEFAULT_STORE_STALL_SECONDS, STORE_STALL_SECONDS
from costaware_runtime.errors import (
    CheckpointChangedError,
    ContractError,
    CostawareRuntimeError,
)
from costaware_runtime.sync import CheckpointSync

log = logging.getLogger("costaware_runtime.launcher")  # the launcher's messages keep its logger

#: How long the launcher waits, once the job has exited, for a push still in flight to move its next bytes.
#: A push that keeps moving bytes is waited for however long it takes (a big checkpoint at a slow link, lost
#: if cut off; counting finished files gave up a single file that took longer); a store silent for longer
#: (a hung mount, a stalled connection) held the job's exit, and its outputs, for good. The launcher gives
#: ``COSTAWARE_STORE_STALL_SECONDS`` instead, when set.
STOP_SECONDS = DEFAULT_STORE_STALL_SECONDS


class _Watcher(threading.Thread):
    """Pushes every new commit while the job runs."""

    def __init__(self, sync: CheckpointSync, poll_seconds: float) -> None:
        super().__init__(name="costaware-checkpoint-watcher", daemon=True)
        self.sync = sync
        self.poll_seconds = poll_seconds
        self.stopping = threading.Event()
        self._last_error = ""
        #: When the push now in flight began (monotonic seconds), None between pushes.
        self._push_started: float | None = None
        #: When the pushes began to fail (monotonic seconds) and how many failed since, for the recovery.
        self._failing_since: float | None = None
        self._failed = 0

    def run(self) -> None:
        while not self.stopping.wait(self.poll_seconds):
            self._push_started = time.monotonic()
            try:
                self.sync.push_changed()
                self._recovered()
            except CheckpointChangedError as e:
                log.debug("skipped a superseded checkpoint: %s", e)  # the newer commit is pushed next
            except Exception as e:  # any error: a dead watcher left the job training on with no pushes
                said = str(e) if isinstance(e, CostawareRuntimeError) else f"{type(e).__name__}: {e}"
                if said != self._last_error:  # a store that is down fails every second
                    log.warning("checkpoint push failed, retrying: %s", said)
                self._last_error = said
                if self._failing_since is None:
                    self._failing_since = self._push_started
                self._failed += 1
            finally:
                self._push_started = None

    def _recovered(self) -> None:
        """Say once that the pushes work again after failing: the outage was warned, its end was not."""
        self._last_error = ""  # pushed again: the same outage coming back is news, warned anew
        if self._failing_since is None:
            return
        # A warning, as the outage was: under --quiet the log read as if the store had been down all along.
        log.warning(
            "checkpoint pushes to %s work again after %s failed over %.0f s",
            self.sync.store.uri,
            self._failed,
            time.monotonic() - self._failing_since,
        )
        self._failing_since, self._failed = None, 0

    def stop(self, timeout: float | None = None) -> str | None:
        """Stop looking for commits, and wait for a push in flight while it makes progress.

        A push is given up once it has moved no bytes for ``timeout`` (default :data:`STOP_SECONDS`)
        seconds, counted from the job's exit or from its last bytes sent, whichever came later.

        Returns:
            None once the thread has ended, else why it has not (a push that made no progress): the launcher
            must then not push the last checkpoint itself, which waits for that push to end.
        """
        self.stopping.set()
        bound = STOP_SECONDS if timeout is None else timeout
        if ended_while_moving(self, self.sync, time.monotonic(), bound):
            return None
        if not self.is_alive():
            return None
        started = self._push_started
        running = "" if started is None else f", begun {time.monotonic() - started:.0f} s ago"
        if self.sync.pruning:  # LATEST.json names its checkpoint already: only deleting old folders hangs
            running += ", pruning the older step folders there"
        said = (
            f"a checkpoint push to {self.sync.store.uri} has sent nothing for {bound:g} s after the job "
            f"exited{running}: going on without it ({STORE_STALL_SECONDS} sets how long); "
            f"{unpushed(self.sync)}"
        )
        log.error("%s", said)
        GIVEN_UP.add(self)  # its push runs on: the launcher's exit must not wait for it
        return said


def last_commit_in_store(sync: CheckpointSync) -> bool:
    """Whether ``LATEST.json`` names the job's last commit: a push still running is only pruning then."""
    if sync.pruning:
        return True
    try:
        local = read_marker(sync.directory)
    except ContractError:
        return False
    return local is not None and local.identity == sync.synced


def unpushed(sync: CheckpointSync) -> str:
    """What the store may lack: the job's last commit, against what the store was last seen to hold."""
    synced = sync.synced
    held = "none known to this attempt" if synced is None else f"step {synced[0]}"
    try:
        local = read_marker(sync.directory)
    except ContractError as e:
        return f"the last commit cannot be read ({e}); the store holds {held}"
    if local is None:
        return f"the job left no commit in {sync.directory}; the store holds {held}"
    if synced == local.identity:
        return f"the job's last commit, step {local.step}, is in the store already"
    if synced is not None and sync.pushed_behind == local.identity:
        return (
            f"the job's last commit, step {local.step}, is in the store, behind step {synced[0]}, which "
            "LATEST.json names"
        )
    return f"checkpoint step {local.step} may not be in the store, which holds {held}"
