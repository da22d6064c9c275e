"""The preemption flag and its SIGTERM handler, in this process (the handler is put back after each test)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from costaware_runtime import PreemptionGuard, preemption, preemption_requested

pytestmark = pytest.mark.usefixtures("sigterm_restored")


def notice() -> None:
    """Send this process SIGTERM and wait (briefly) for the handler to have run."""
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(500):
        if preemption._requested.is_set():
            return
        time.sleep(0.001)


def test_guards_after_preemption_requested_do_not_stack_handlers() -> None:
    # Each guard wrapped the runtime's own handler again: after 1,500 uses a chain 1,501 calls deep, and the
    # notice raised RecursionError in the training loop instead of setting the flag.
    assert not preemption_requested()
    ours = signal.getsignal(signal.SIGTERM)
    for _ in range(1500):
        with PreemptionGuard() as guard:
            assert signal.getsignal(signal.SIGTERM) is ours
    assert signal.getsignal(signal.SIGTERM) is ours
    notice()
    assert guard.requested and preemption_requested()


def test_a_guard_puts_back_the_handler_it_found_and_nested_guards_add_nothing() -> None:
    # A handler of its own to find: another test in this worker may have left the runtime's in place.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    before = signal.getsignal(signal.SIGTERM)
    with PreemptionGuard():
        ours = signal.getsignal(signal.SIGTERM)
        assert ours is not before
        with PreemptionGuard():
            assert signal.getsignal(signal.SIGTERM) is ours
        assert signal.getsignal(signal.SIGTERM) is ours  # the inner guard installed nothing to take away
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_handler_the_job_installed_inside_a_guard_is_left_in_place() -> None:
    def job_handler(signum: int, frame: object) -> None:
        pass

    with PreemptionGuard():
        signal.signal(signal.SIGTERM, job_handler)
    assert signal.getsignal(signal.SIGTERM) is job_handler
