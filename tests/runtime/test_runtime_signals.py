"""The notice passed on with --signal-group, and how ``end_job`` ends what the job left, driven in-process.

A race or a system without ``/proc`` cannot be arranged through ``costaware-run`` run as a subprocess: these
tests call :class:`Notices` and :func:`end_job` as the launcher does, around a real job process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from costaware_runtime import _signals, _tree

# Writes "x" to argv[1] on SIGTERM and exits; its pid to argv[2] once its handler is in; leaves its process
# group (setsid) on SIGUSR1, as a rank started with start_new_session does just after its fork.
HELPER = """
import os, pathlib, signal, sys, time
def heard(signum, frame):
    pathlib.Path(sys.argv[1]).write_text("x")
    os._exit(0)
signal.signal(signal.SIGTERM, heard)
signal.signal(signal.SIGUSR1, lambda signum, frame: os.setsid())
pathlib.Path(sys.argv[2]).write_text(str(os.getpid()))
time.sleep(60)
"""


def wait_for(found: Callable[[], bool], what: str, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not found():
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(0.01)


def notices_of(job: subprocess.Popen[bytes], grace_seconds: float) -> _signals.Notices:
    """The launcher's notices with --signal-group, as they are once the job started and the notice came."""
    notices = _signals.Notices()
    notices.process, notices.signal_group, notices.grace_seconds = job, True, grace_seconds
    notices.notice_at = time.monotonic()
    return notices


@contextlib.contextmanager
def as_the_launcher() -> Iterator[frozenset[int]]:
    """This process as the launcher around its job: the children it had before (spared), a subreaper."""
    spared = frozenset(_tree.children())
    put_back = _tree.become_subreaper()
    try:
        yield spared
    finally:
        put_back()


def end_helper(pid_file: Path, marker: Path) -> None:
    """SIGKILL the helper a failed test left running: ``pid_file``'s pid, with ``marker`` in its command line.

    The marker tells it from a process that took its pid since.
    """
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text())
        if str(marker) in Path(f"/proc/{pid}/cmdline").read_text():
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.timeout(60)
def test_with_signal_group_a_process_that_left_the_group_before_the_notice_reached_it_gets_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The notice reads the group's processes, then signals the group: one that left it in between (setsid) was
    # not reached, yet was counted among those reached, so end_job spared it SIGTERM too: SIGKILLed at the
    # grace period's end, having heard nothing, saved nothing.
    heard, pid_file = tmp_path / "heard", tmp_path / "helper-pid"
    real_in_group = _tree.in_group
    raced: list[int] = []

    def in_group_then_the_helper_leaves(group: int) -> list[int]:
        found = real_in_group(group)
        if not raced:  # the read before the killpg: the helper leaves the group right after it
            helper = int(pid_file.read_text())
            raced.append(helper)
            os.kill(helper, signal.SIGUSR1)
            wait_for(lambda: os.getpgid(helper) != group, "the helper left the job's process group")
        return found

    helper_command = [sys.executable, "-c", HELPER, str(heard), str(pid_file)]
    with as_the_launcher() as spared:
        # The job's process has no handler: the notice ends it, leaving the helper to the launcher.
        job = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import subprocess, sys; subprocess.Popen(sys.argv[1:]).wait()",
                *helper_command,
            ],
            process_group=0,
        )
        try:
            wait_for(pid_file.exists, "the helper started")
            helper = int(pid_file.read_text())
            notices = notices_of(job, grace_seconds=3)
            monkeypatch.setattr(_tree, "in_group", in_group_then_the_helper_leaves)
            notices.forward(signal.SIGTERM)
            monkeypatch.setattr(_tree, "in_group", real_in_group)
            assert raced == [helper]
            assert job.wait(timeout=10) == -signal.SIGTERM
            with caplog.at_level(logging.WARNING, logger="costaware_runtime.launcher"):
                _signals.end_job(job.pid, 3, spared, notices)
            assert heard.exists() and heard.read_text() == "x", "the helper never heard SIGTERM"
            assert "did not exit on SIGTERM" not in caplog.text
        finally:
            job.kill()  # where it still runs: Popen signals no pid it has reaped
            job.wait()
            end_helper(pid_file, heard)


@pytest.mark.timeout(60)
def test_with_signal_group_and_no_proc_a_process_started_after_the_notice_gets_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Without /proc (macOS) nothing tells the processes the notice reached from ones started since: end_job
    # sent the group no SIGTERM at all, so an uploader the job started on the notice was SIGKILLed 5 s later,
    # said to have "not exited on SIGTERM". A second SIGTERM to those the notice reached is the lesser harm.
    monkeypatch.setattr(_tree, "PROC", False)
    monkeypatch.setattr(_tree, "_start_time", lambda pid: None)
    heard, pid_file, ready = tmp_path / "heard", tmp_path / "helper-pid", tmp_path / "ready"
    job_code = f"""
import pathlib, signal, subprocess, sys, time
noticed = []
signal.signal(signal.SIGTERM, lambda signum, frame: noticed.append(signum))
pathlib.Path({str(ready)!r}).touch()
while not noticed:
    time.sleep(0.01)
subprocess.Popen([sys.executable, "-c", {HELPER!r}, {str(heard)!r}, {str(pid_file)!r}])  # an uploader
while not pathlib.Path({str(pid_file)!r}).exists():
    time.sleep(0.01)
sys.exit(75)
"""
    # A subreaper (Linux) reaps the helper once it exits: an orphan left to a PID 1 slow to reap it stays in
    # the group, a zombie, which the group's killpg(0) without /proc takes for a process still running.
    with as_the_launcher() as spared:
        job = subprocess.Popen([sys.executable, "-c", job_code], process_group=0)
        try:
            wait_for(ready.exists, "the job started")
            notices = notices_of(job, grace_seconds=30)
            notices.forward(signal.SIGTERM)
            assert job.wait(timeout=20) == 75
            with caplog.at_level(logging.WARNING, logger="costaware_runtime.launcher"):
                _signals.end_job(job.pid, 30, spared, notices)
            assert heard.exists() and heard.read_text() == "x", "the helper never heard SIGTERM"
            assert "did not exit on SIGTERM" not in caplog.text  # not SIGKILLed, 5 s after the notice
        finally:
            job.kill()
            job.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.pid, signal.SIGKILL)  # the helper, in the job's group, where a failure left it
