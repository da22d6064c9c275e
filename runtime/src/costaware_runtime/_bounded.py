"""Store transfers given up once they move nothing for ``COSTAWARE_STORE_STALL_SECONDS``.

A transfer that hangs (a mount that stopped answering, a stalled connection) held the launcher, and the
machine, for good. Each runs in a thread of its own while the caller waits on its progress.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn, Protocol, TypeVar

from costaware_runtime.contract import STORE_STALL_SECONDS, parse_store_stall_seconds
from costaware_runtime.errors import StoreStalledError

_T = TypeVar("_T")


class GivenUp:
    """The threads of the transfers given up in this process, left running (see :func:`exit_now`)."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def add(self, thread: threading.Thread) -> None:
        """Note ``thread``, whose transfer was given up while it ran."""
        with self._lock:
            self._threads.append(thread)

    def running(self) -> bool:
        """Whether a given-up transfer still runs: only then may an exit not wait for its threads.

        One that finished since holds nothing: an exit through :func:`exit_now` then skipped the job's
        ``finally`` blocks and ``atexit`` handlers (a W&B or MLflow run's finish) for no reason.
        """
        with self._lock:
            self._threads = [thread for thread in self._threads if thread.is_alive()]
            return bool(self._threads)

    def clear(self) -> None:
        """Forget every given-up transfer (a new launch in this process)."""
        with self._lock:
            self._threads.clear()


#: The transfers given up in this process whose threads may still run.
GIVEN_UP = GivenUp()


class Moving(Protocol):
    """A transfer that notes when it last moved bytes or had a request answered (monotonic seconds)."""

    progressed_at: float


class Transfer:
    """The progress of a transfer other than a checkpoint sync's (the outputs, the result)."""

    def __init__(self) -> None:
        self.progressed_at = time.monotonic()

    def progressed(self, moved: int = 0) -> None:
        """Note that ``moved`` bytes went (or a store request was answered) now; any thread."""
        self.progressed_at = time.monotonic()


def stall_seconds() -> float:
    """``COSTAWARE_STORE_STALL_SECONDS`` as a job's own call reads it (the default when unset).

    Raises:
        ContractError: It is not a number of seconds > 0.
    """
    return parse_store_stall_seconds(os.environ.get(STORE_STALL_SECONDS, "").strip() or None)


def run_bounded(call: Callable[[], _T], moving: Moving, bound: float, what: str) -> _T:
    """``call()``, given up after ``bound`` seconds in which ``moving`` made no progress.

    It runs in a thread of its own while this one waits. A call that keeps moving bytes, or getting answers
    to its requests (a listing or prune moves none), is waited for however long it takes.

    Args:
        call: The transfer.
        moving: What ``call`` reports its progress to.
        bound: Seconds without progress before it is given up.
        what: The transfer and its store in words, such as ``"the restore from s3://b/p"``.

    Raises:
        StoreStalledError: It moved nothing for ``bound`` seconds; it is left running in its (daemon) thread,
            holding what it holds (a checkpoint sync's lock: nothing may use that sync after this).
        Exception: What ``call`` raised.
    """
    outcome: list[tuple[bool, object]] = []

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as e:  # re-raised below, on the caller's thread
            outcome.append((False, e))

    thread = threading.Thread(target=target, name="costaware-store-transfer", daemon=True)
    started = time.monotonic()
    thread.start()
    if ended_while_moving(thread, moving, started, bound):
        done, value = outcome[0]
        if not done:
            raise value  # type: ignore[misc]  # a BaseException, caught above
        return value  # type: ignore[return-value]  # call()'s own
    GIVEN_UP.add(thread)
    raise StoreStalledError(
        f"{what} has moved nothing for {bound:g} s ({STORE_STALL_SECONDS} sets how long), "
        f"begun {time.monotonic() - started:.0f} s ago: given up"
    )


def ended_while_moving(thread: threading.Thread, moving: Moving, since: float, bound: float) -> bool:
    """Join ``thread`` while its transfer moves: True once it has ended, else False.

    False once ``bound`` seconds passed with nothing moved, counted from ``since`` (monotonic) or from the
    transfer's last progress, whichever came later.
    """
    while (left := max(since, moving.progressed_at) + bound - time.monotonic()) > 0:
        thread.join(left)
        if not thread.is_alive():
            return True
    return False


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` at once, the logs flushed: a given-up transfer's threads may not hold the exit.

    boto3's transfer threads are not daemons: the interpreter joins them at exit, and one stuck on a
    connection held the process (and the machine) for its read timeout at each of botocore's retries.
    """
    logging.shutdown()  # flushes every handler
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or its reader gone: nothing more to say
            stream.flush()
    os._exit(code)
