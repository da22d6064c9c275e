"""The supervisor of one ``local`` job: the process that starts its training, waits for it, records its end.

It runs as ``python -m costaware.adapters.compute.local --job-dir D`` (that module's ``main``), apart from
the worker that submitted the job: it waits for spot capacity, starts the launcher, beats its heartbeat,
stops the training at its time limit and after a stop's grace period, and writes ``exit.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from costaware.adapters.compute.local_job_files import CAPPED_FILE, TIME_LIMIT_FILE, _write_json, _write_text

#: How often the supervisor looks for a stop request while the training runs.
_WATCH_SECONDS = 0.05
#: After a stop, how much longer than the grace period the supervisor lets the launcher run.
_BACKSTOP_SECONDS = 10.0
#: How often the supervisor writes its heartbeat.
HEARTBEAT_SECONDS = 5.0


def supervise(folder: Path) -> int:
    """Run the job in ``folder``: start the training, record its pid, wait, write ``exit.json``."""
    request = json.loads((folder / "request.json").read_text())
    env = {**os.environ, **request["env"]}
    capacity = Path(request["capacity_file"]) if request.get("capacity_file") else None
    beat = _heartbeat(folder)
    while capacity is not None and capacity.exists() and capacity.read_text().strip() == "0":
        beat()
        if (folder / "stop").exists():
            now = time.time()
            _write_json(
                folder / "exit.json", {"exit_code": -signal.SIGTERM, "started_at": now, "stopped_at": now}
            )
            return 0
        time.sleep(0.05)
    started_at = time.time()
    _adopt_orphans()
    with (folder / "stdout.log").open("ab") as out, (folder / "stderr.log").open("ab") as err:
        proc = subprocess.Popen(request["command"], stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        _write_text(folder / "pid", str(proc.pid))
        _write_text(folder / "started", repr(started_at))
        beat(now=True)  # a heartbeat before the start would bill a supervisor gone now from its start: 0 s
        # The training handles SIGTERM itself (checkpoint, exit 75); the supervisor only waits for it.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if (folder / "stop").exists():  # stopped before its pid was written: LocalBackend.stop sent nothing
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        grace = request.get("grace_seconds")
        limit = _time_limit(request)
        if limit is not None:  # stop as LocalBackend.stop does, from here
            _stop_when_due(proc, folder, *limit)
        code = _wait(proc, folder / "stop", None if grace is None else float(grace), beat)
        _kill_orphans()
    _write_json(
        folder / "exit.json", {"exit_code": code, "started_at": started_at, "stopped_at": time.time()}
    )
    return 0


def _heartbeat(folder: Path) -> Callable[..., None]:
    """A function that writes the time to ``alive``: now, then every HEARTBEAT_SECONDS (or when ``now``)."""
    due = 0.0

    def beat(now: bool = False) -> None:
        nonlocal due
        if now or time.monotonic() >= due:
            due = time.monotonic() + HEARTBEAT_SECONDS
            try:
                _write_text(folder / "alive", repr(time.time()))
            except OSError as e:  # a full disk, a network folder's hiccup: the job runs on, tried again later
                print(f"costaware supervisor: cannot write the heartbeat ({e})", file=sys.stderr, flush=True)

    beat()
    return beat


def _adopt_orphans() -> None:
    """Make this supervisor the parent of whatever the launcher leaves behind when it dies (Linux).

    The launcher runs the command in a process group of its own; a ``kill -9`` of the launcher left the
    training running, unbilled, beside the next attempt that resumed it.
    """
    import ctypes

    pr_set_child_subreaper = 36
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def _kill_orphans() -> None:
    """SIGKILL what the launcher left running (adopted by :func:`_adopt_orphans`): the attempt has ended."""
    import psutil

    left = psutil.Process().children(recursive=True)
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(left, timeout=5)


def _time_limit(request: Mapping[str, Any]) -> tuple[float, str] | None:
    """When the supervisor stops the training, and the file that will say why; None: never.

    ``stop_after_seconds`` (``max_usd``) where it comes first, else ``max_runtime_seconds``, which the cloud
    backends enforce themselves: a local job left to run past it was billed on after the operator's wait for
    it had timed out. A request of an older release has no ``max_runtime_seconds``: no time limit, as then.
    """
    cap, runtime = request.get("stop_after_seconds"), request.get("max_runtime_seconds")
    if cap is not None and (runtime is None or float(cap) <= float(runtime)):
        return float(cap), CAPPED_FILE
    if runtime is not None:
        return float(runtime), TIME_LIMIT_FILE
    return None


def _stop_when_due(proc: subprocess.Popen[bytes], folder: Path, after_seconds: float, why: str) -> None:
    """In a thread: once ``proc`` has run ``after_seconds``, ask it to stop (the ``stop`` file, SIGTERM).

    The training checkpoints on the SIGTERM and exits as preempted; :func:`_wait` kills it after the
    grace period if it does not. The file ``why`` (:data:`CAPPED_FILE`, :data:`TIME_LIMIT_FILE`) tells
    :meth:`LocalBackend.poll` why it stopped.
    """
    import threading

    def stop_when_due() -> None:
        try:
            proc.wait(timeout=after_seconds)
        except subprocess.TimeoutExpired:
            (folder / why).write_text(repr(after_seconds))
            (folder / "stop").touch()
            with contextlib.suppress(ProcessLookupError):  # it ended just now
                proc.send_signal(signal.SIGTERM)

    threading.Thread(target=stop_when_due, daemon=True).start()


def _wait(
    proc: subprocess.Popen[bytes], stop: Path, grace_seconds: float | None, beat: Callable[..., None]
) -> int:
    """Wait for ``proc``, beating; once ``stop`` exists, SIGKILL it if it still runs ``grace_seconds`` later.

    ``LocalBackend.stop`` sends the SIGTERM itself; this enforces the end of the grace period even when the
    worker that asked for the stop has gone. No grace period: the job itself decides when it ends.
    """
    kill_at: float | None = None
    while True:
        try:
            return proc.wait(timeout=_WATCH_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        beat()
        if grace_seconds is None:
            continue
        if kill_at is None and stop.exists():
            # The launcher SIGKILLs the command at the end of the grace period itself; this is the backstop
            # for a launcher that hangs, a little later so that the launcher's own exit code is kept.
            kill_at = time.monotonic() + grace_seconds + _BACKSTOP_SECONDS
        elif kill_at is not None and time.monotonic() >= kill_at:
            _kill_tree(proc.pid)
            return proc.wait()


def _kill_tree(pid: int, *, started_by: float | None = None) -> bool:
    """SIGKILL ``pid`` and every process it started (the launcher puts the command in its own group).

    ``started_by``: the time the job's training started; a process of that pid created later is another
    one (the pid was reused after the machine restarted) and is left alone.
    Returns whether ``pid`` was still there.
    """
    import psutil

    try:
        root = psutil.Process(pid)
        if started_by is not None and root.create_time() > started_by + 1.0:
            return False
        # The launcher first: killed after its command, it could see the command die (on a loaded machine
        # it may run between the two kills) and report a SIGKILL of the job, a code error, not a reclaim.
        family = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for process in family:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    return True
