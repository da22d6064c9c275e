"""The thread that pushes each checkpoint the job commits while it runs."""

from __future__ import annotations

import logging
import threading

from costaware_runtime.errors import CheckpointChangedError, CostawareRuntimeError
from costaware_runtime.sync import CheckpointSync

log = logging.getLogger("costaware_runtime.launcher")  # the launcher's messages keep its logger


class _Watcher(threading.Thread):
    """Pushes every new commit while the job runs."""

    def __init__(self, sync: CheckpointSync, poll_seconds: float) -> None:
        super().__init__(name="costaware-checkpoint-watcher", daemon=True)
        self.sync = sync
        self.poll_seconds = poll_seconds
        self.stopping = threading.Event()
        self._last_error = ""

    def run(self) -> None:
        while not self.stopping.wait(self.poll_seconds):
            try:
                self.sync.push_changed()
                self._last_error = ""  # pushed again: the same outage coming back is news, warned anew
            except CheckpointChangedError as e:
                log.debug("skipped a superseded checkpoint: %s", e)  # the newer commit is pushed next
            except Exception as e:  # any error: a dead watcher left the job training on with no pushes
                said = str(e) if isinstance(e, CostawareRuntimeError) else f"{type(e).__name__}: {e}"
                if said != self._last_error:  # a store that is down fails every second
                    log.warning("checkpoint push failed, retrying: %s", said)
                self._last_error = said

    def stop(self) -> None:
        self.stopping.set()
        self.join()
