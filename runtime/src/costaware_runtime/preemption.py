"""Preemption in the job: the notice is SIGTERM; save a checkpoint, then exit 75.

The launcher sends SIGTERM to the job as soon as the machine gets its notice, and SIGKILL once the grace
period (``COSTAWARE_GRACE_SECONDS``, 110 s by default) has passed. Python's default is to die at once on
SIGTERM; the handler installed here only sets a flag that the training loop checks between steps::

    for step in range(start, total):
        train_one_step()
        if preemption_requested():
            save(model, optimizer, step=step + 1)
            exit_preempted()
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType, TracebackType
from typing import Any, NoReturn

from costaware_runtime._bounded import GIVEN_UP, exit_now
from costaware_runtime.contract import EXIT_PREEMPTED
from costaware_runtime.errors import CostawareRuntimeError

_requested = threading.Event()
_install_lock = threading.Lock()
_installed = False


def _handler_chaining(previous: Any) -> Any:
    def handle(signum: int, frame: FrameType | None) -> None:
        _requested.set()
        # A handler the job (or its framework) installed before ours still hears of the notice.
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signum, frame)

    handle._costaware_preemption = True  # type: ignore[attr-defined]
    return handle


def _install() -> tuple[Any, Any] | None:
    """Install the runtime's SIGTERM handler: ``(installed, previous)``, or None where it is already there.

    Wrapping our own handler again stacked one more call per guard: after a loop of guards, a chain
    thousands deep that raised RecursionError on the notice instead of saving.
    """
    try:
        current = signal.getsignal(signal.SIGTERM)
        if getattr(current, "_costaware_preemption", False):
            return None
        handler = _handler_chaining(current)
        signal.signal(signal.SIGTERM, handler)
        return handler, current
    except ValueError as e:  # not the main thread
        raise CostawareRuntimeError(
            "the preemption handler can only be installed from the main thread: call "
            "costaware_runtime.preemption_requested() once at start-up, before starting threads"
        ) from e


def preemption_requested() -> bool:
    """True once the preemption notice (SIGTERM) has arrived.

    The first call installs a SIGTERM handler that sets the flag instead of ending the process, so make it
    early, from the main thread (later calls may come from any thread).
    """
    global _installed
    if not _installed:
        with _install_lock:
            if not _installed:
                _install()
                _installed = True
    return _requested.is_set()


def exit_preempted() -> NoReturn:
    """Exit 75, "preempted after a checkpoint": commit a checkpoint first, or the launcher reports 76.

    Where a store transfer of this process was given up (``cr.push()`` past its stall bound) and still
    runs, at once, the logs flushed: its boto3 threads, joined at a normal exit, held it past the grace period
    until SIGKILL. Once it has finished, through ``SystemExit`` as any exit (``finally``, ``atexit``).
    """
    if GIVEN_UP.running():
        exit_now(EXIT_PREEMPTED)
    sys.exit(EXIT_PREEMPTED)


class PreemptionGuard:
    """A block of training during which SIGTERM sets a flag instead of ending the process.

    On leaving the block the SIGTERM handler that was there before is put back::

        with PreemptionGuard() as guard:
            for step in range(start, total):
                train_one_step()
                if guard.requested:
                    save(model, optimizer, step=step + 1)
                    guard.exit()
    """

    def __init__(self) -> None:
        self._installed: tuple[Any, Any] | None = None

    def __enter__(self) -> PreemptionGuard:
        self._installed = _install()  # None: an outer guard or preemption_requested() installed it
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        installed, self._installed = self._installed, None
        # preemption_requested() keeps its handler for the life of the process; one installed since by the
        # job is left alone.
        if installed is not None and not _installed and signal.getsignal(signal.SIGTERM) is installed[0]:
            signal.signal(signal.SIGTERM, installed[1])

    @property
    def requested(self) -> bool:
        """True once the preemption notice has arrived."""
        return _requested.is_set()

    def exit(self) -> NoReturn:
        """Exit 75 (see :func:`exit_preempted`)."""
        exit_preempted()
