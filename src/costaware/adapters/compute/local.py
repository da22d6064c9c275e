"""The ``local`` backend: the training job as a child process of the worker (the default).

Each job has a folder ``<root>/<job_name>/`` holding its request, the training's pid, its logs and, once it
ended, ``exit.json`` (exit code, start and stop time). A small supervisor process (this module's ``main``)
starts the training, waits for it and writes ``exit.json``, so any process (the worker, the triggerer, a
retry) can poll the job from the folder alone. Creating the folder is the idempotency lock: a second submit
of the same name finds it and returns the running job.

Every job runs under the launcher (``costaware-run -- <command...>``, from ``costaware-runtime`` installed
in the interpreter's environment) with the job contract's variables: a user command, or the built-in
entrypoint run by this backend's interpreter. Its local folders are under ``<root>/<job_name>/work/``.
``stop`` asks the supervisor to send SIGTERM, then SIGKILL once the request's grace period has passed. The
supervisor stops the training the same way once it has run its ``max_runtime_seconds`` (or, sooner, its
``stop_after_seconds``), as SageMaker, Batch and Kubernetes end a job at their own time limit.

The supervisor writes its heartbeat (the time, in ``alive``) every few seconds. A job whose supervisor has
stopped beating (the machine or the worker's container restarted, or it was killed) ended unrecorded: a poll
ends it as an interruption, billed to the last heartbeat, where it read ``RUNNING`` for ever before.

Billed seconds are the training process's wall time; market, instance type and availability zone are the
requested ones (the local machine stands in for them, e.g. in tests and demos that replay spot interruptions).
A ``capacity_file`` with ``{zone}`` in its path is one file per zone, so that a replay can take capacity away
in one zone and not another.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from costaware.adapters.compute import job_contract
from costaware.adapters.compute.base import (
    STOP_REQUESTED_AT,
    TRAINED_RUNS_SECONDS,
    FoundJob,
    JobRequest,
    JobState,
    JobStatus,
)
from costaware.core.errors import ComputeBackendError, ConfigurationError
from costaware.core.ledger import clipped_note
from costaware.settings import default_store

#: Exit codes that mean the capacity went away (or a store failed), not that the code failed.
INTERRUPTED_CODES = (*job_contract.RESUBMIT_EXIT_CODES, -signal.SIGTERM, -signal.SIGKILL)
#: How often the supervisor looks for a stop request while the training runs.
_WATCH_SECONDS = 0.05
#: After a stop, how much longer than the grace period the supervisor lets the launcher run.
_BACKSTOP_SECONDS = 10.0
#: Written when the job was stopped at its ``stop_after_seconds`` (``max_usd``).
CAPPED_FILE = "capped"
#: Written when the job was stopped at its ``max_runtime_seconds`` (the attempt's time limit).
TIME_LIMIT_FILE = "time_limit"
#: The placeholder of a per-zone ``capacity_file``.
ZONE_PLACEHOLDER = "{zone}"
#: How often the supervisor writes its heartbeat.
HEARTBEAT_SECONDS = 5.0
#: A supervisor whose heartbeat is older than this is gone. Far above HEARTBEAT_SECONDS: a loaded machine
#: may hold a process back for seconds, and containers sharing the jobs folder may disagree on the time a bit.
GONE_AFTER_SECONDS = 120.0


def default_root() -> str:
    """``$AIRFLOW_HOME/costaware/jobs``."""
    return default_store("jobs")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    _write_text(path, json.dumps(dict(data)))


def _write_text(path: Path, text: str) -> None:
    """Whole or not there: a poll reading a half-written ``started`` took it as epoch 0 (56 years billed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # the supervisor and a poll may both write
    tmp.write_text(text)
    tmp.replace(path)


#: The launcher's last line when it passes the job's own exit code on: the job's line before it says why.
_PASSED_ON = re.compile(r"costaware-run: the job (exited -?\d+|was killed by SIG\w+)")


def _end_state(exit_code: int) -> JobState:
    """How a local job that exited with ``exit_code`` ended."""
    if exit_code == 0:
        return JobState.SUCCEEDED
    return JobState.INTERRUPTED if exit_code in INTERRUPTED_CODES else JobState.FAILED


def _reason(path: Path) -> str:
    """The last line of the job's stderr that says why it ended (not the launcher's "the job exited N")."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return ""
    told = [line for line in lines if not _PASSED_ON.fullmatch(line)]
    return clipped_note((told or lines or [""])[-1])


class LocalBackend:
    """Runs each job as a child process on this machine.

    Args:
        root: Folder of the job folders (default ``$AIRFLOW_HOME/costaware/jobs``).
        python: Interpreter that runs the entrypoint (default this one).
        env: Extra environment variables of every job (e.g. ``PYTHONPATH`` of a custom trainer).
        capacity_file: A file holding ``1`` or ``0``: whether spot capacity exists now. While it holds ``0``
            a spot job waits (``pending``) before it starts, like a spot request without capacity. A
            preemption replay (``costaware.adapters.compute.replay``) keeps it up to date. With ``{zone}``
            in it (``/tmp/capacity-{zone}``) there is one file per zone: a spot job placed in zone Z waits
            on the file for Z, and a spot request must then name its ``availability_zone``.
    """

    name = "local"
    places_zones = True

    def __init__(
        self,
        *,
        root: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        capacity_file: str | None = None,
    ) -> None:
        self.root = Path(root or default_root())
        self.capacity_file = capacity_file
        self.python = python or sys.executable
        self.env = {str(k): str(v) for k, v in dict(env or {}).items()}

    @property
    def per_zone(self) -> bool:
        """Whether ``capacity_file`` is one file per zone (has ``{zone}``)."""
        return bool(self.capacity_file) and ZONE_PLACEHOLDER in str(self.capacity_file)

    def capacity_path(self, zone: str = "") -> str | None:
        """The capacity file a spot job in ``zone`` waits on (None: no capacity file).

        Raises:
            ConfigurationError: the file is per zone and ``zone`` is empty.
        """
        if not self.capacity_file:
            return None
        if not self.per_zone:
            return self.capacity_file  # one file for every zone, as without zones
        if not zone:
            raise ConfigurationError(
                f"capacity_file {self.capacity_file!r} is one file per zone ({ZONE_PLACEHOLDER}), so a spot "
                "request needs an availability_zone: set it on the request, or use a capacity_file without "
                f"{ZONE_PLACEHOLDER}"
            )
        return str(self.capacity_file).replace(ZONE_PLACEHOLDER, zone)

    def _dir(self, job_id: str) -> Path:
        if not job_id or "/" in job_id or job_id in (".", ".."):
            raise ConfigurationError(f"local job id {job_id!r} is not a job name")
        return self.root / job_id

    def launcher(self) -> list[str]:
        """How this backend starts ``costaware-run``: the script next to ``python``, else ``-m``.

        Raises:
            ConfigurationError: ``costaware-runtime`` is not installed in ``python``'s environment.
        """
        script = Path(self.python).parent / job_contract.LAUNCHER
        if script.is_file() and os.access(script, os.X_OK):
            return [str(script)]
        probe = subprocess.run(
            [self.python, "-c", "import costaware_runtime.launcher"], capture_output=True, check=False
        )
        if probe.returncode == 0:
            return [self.python, "-m", "costaware_runtime"]
        found = shutil.which(job_contract.LAUNCHER)
        if found:
            return [found]
        raise ConfigurationError(
            f"{job_contract.LAUNCHER} is not installed for {self.python}: pip install costaware-runtime "
            "(./runtime in this repository) into the worker's environment, or set python in backend_options "
            "to an interpreter that has it"
        )

    def _command(self, request: JobRequest) -> list[str]:
        return [*self.launcher(), *request.command(python=self.python)[1:]]

    def submit(self, request: JobRequest) -> str:
        folder = self._dir(request.job_name)
        command = self._command(request)  # before the folder: a missing launcher leaves nothing behind
        capacity = self.capacity_path(request.availability_zone) if request.market == "spot" else None
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir()
        except FileExistsError:
            return request.job_name  # this attempt was submitted before (an Airflow retry): do not rerun
        _write_json(
            folder / "request.json",
            {
                "command": command,
                "market": request.market,
                "instance_type": request.instance_type,
                "availability_zone": request.availability_zone,
                "env": {**self.env, **request.environment(work_dir=str(folder / "work"))},
                "capacity_file": capacity,
                "grace_seconds": request.grace_seconds,
                "stop_after_seconds": request.stop_after_seconds,
                "max_runtime_seconds": request.max_runtime_seconds,
                # The supervisor runs here: only here may a poll stop a training its supervisor left.
                "host": socket.gethostname(),
                "heartbeat_seconds": HEARTBEAT_SECONDS,  # an older release's supervisor wrote none
            },
        )
        try:
            # The supervisor has its own copy of the descriptor: this long-running worker closes its one now.
            with (folder / "supervisor.log").open("ab") as log_file:
                subprocess.Popen(
                    # The supervisor is costaware's own: this worker's interpreter runs it. ``python`` (the
                    # job's, perhaps a venv with costaware-runtime alone) runs the command: as the supervisor
                    # it died at once, and its job was read as preempted again and again.
                    [sys.executable, "-m", "costaware.adapters.compute.local", "--job-dir", str(folder)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log_file,
                    start_new_session=True,  # the job outlives the worker process that submitted it
                )
        except OSError as e:
            # Left behind, the folder made every retry's submit "submitted before", pending for ever.
            shutil.rmtree(folder, ignore_errors=True)
            raise ComputeBackendError(f"cannot start local job {request.job_name!r}: {e}") from e
        return request.job_name

    def find(self, job_name: str) -> FoundJob | None:
        folder = self._dir(job_name)
        if not folder.exists():
            return None
        try:
            started: float | None = float((folder / "started").read_text())
        except (FileNotFoundError, ValueError):
            started = None  # not started yet (or an older release's empty file)
        try:
            created: float | None = (folder / "request.json").stat().st_mtime  # written at the submit
        except FileNotFoundError:
            created = None
        try:
            # Its end, as a poll reads it (the same end keys its ledger entry).
            ended = json.loads((folder / "exit.json").read_text())
            ended_at: float | None = float(ended["stopped_at"])
            end_state: JobState | None = _end_state(int(ended["exit_code"]))
        except FileNotFoundError:
            ended_at, end_state = None, None  # not ended yet
        except (ValueError, KeyError, TypeError) as e:
            raise ComputeBackendError(f"cannot read how local job {job_name!r} ended: {e}") from e
        try:
            market = str(json.loads((folder / "request.json").read_text()).get("market") or "")
        except (FileNotFoundError, ValueError, AttributeError):
            market = ""  # not written yet, or unreadable: unknown, as a job that cannot be read
        return FoundJob(
            job_id=job_name,
            started_at=started,
            created_at=created,
            ended_at=ended_at,
            end_state=end_state,
            market=market,
        )

    def _request(self, folder: Path) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads((folder / "request.json").read_text())
        except FileNotFoundError as e:
            raise ComputeBackendError(f"local job {folder.name!r} does not exist under {self.root}") from e
        return data

    def poll(self, job_id: str) -> JobStatus:
        folder = self._dir(job_id)
        request = self._request(folder)
        common = {
            "job_id": job_id,
            "market": request["market"],
            "instance_type": request["instance_type"],
            "availability_zone": str(request.get("availability_zone") or ""),  # older job folders lack it
        }
        # A stop asked already (its file's time): a re-created wait does not send its stop at the cap again,
        # and a new try that finds the job ended by an earlier try's stop records it by that stop's cause.
        with contextlib.suppress(FileNotFoundError):
            common["metrics"] = {STOP_REQUESTED_AT: (folder / "stop").stat().st_mtime}
        exit_file = folder / "exit.json"
        if not exit_file.exists():
            self._end_if_supervisor_gone(folder, request)
        if exit_file.exists():
            ended = json.loads(exit_file.read_text())
            code = int(ended["exit_code"])
            seconds = max(0.0, float(ended["stopped_at"]) - float(ended["started_at"]))
            reason = _reason(folder / "stderr.log")
            state = _end_state(code)
            if state == JobState.INTERRUPTED:
                reason = (reason or f"exit code {code}") if code >= 0 else f"killed by signal {-code}"
            elif state == JobState.FAILED:
                reason = reason or f"exit code {code}"
            if ended.get("supervisor_gone"):
                at = datetime.fromtimestamp(float(ended["stopped_at"]), timezone.utc)
                reason = (
                    f"its supervisor stopped at {at.isoformat(timespec='seconds')} without recording how the "
                    "job ended (the machine or the worker's container restarted, or the supervisor was "
                    "killed): billed to its last heartbeat"
                )
            capped, limited = folder / CAPPED_FILE, folder / TIME_LIMIT_FILE
            if code != 0 and capped.exists():
                reason = f"stopped at its max_usd limit after {capped.read_text().strip()} s ({reason})"
            elif code != 0 and limited.exists():
                reason = (
                    f"stopped at its time limit (max_runtime_seconds) after {limited.read_text().strip()} s "
                    f"({reason})"
                )
            return JobStatus(
                state=state,
                billable_seconds=seconds,
                reason=reason,
                exit_code=code,
                ended_at=float(ended["stopped_at"]),
                **common,
            )
        try:
            started = (folder / "started").read_text().strip()
        except FileNotFoundError:
            started = ""
        if not started:  # not started (a folder of an older release may hold an empty file)
            return JobStatus(state=JobState.PENDING, **common)
        seconds = max(0.0, time.time() - float(started))
        # One process since its start, never restarted inside: its run time is exact.
        common["metrics"] = {**common.get("metrics", {}), TRAINED_RUNS_SECONDS: [seconds]}
        return JobStatus(state=JobState.RUNNING, billable_seconds=seconds, **common)

    def _end_if_supervisor_gone(self, folder: Path, request: Mapping[str, Any]) -> None:
        """Write the job's ``exit.json`` (a SIGKILL: an interruption) where its supervisor stopped beating.

        Billed to the last heartbeat. A training the supervisor left running is killed first where this
        is its machine: the next attempt resumes from its checkpoint, and two would write the same files.
        """
        if "heartbeat_seconds" not in request:
            return  # an older release's supervisor: no heartbeat to read
        try:
            last = float((folder / "alive").read_text())
        except (FileNotFoundError, ValueError):
            last = (folder / "request.json").stat().st_mtime  # its supervisor never started
        if time.time() - last <= GONE_AFTER_SECONDS:
            return
        try:
            started = float((folder / "started").read_text())
        except (FileNotFoundError, ValueError):
            started = None  # it never started its training: nothing ran, nothing is billed
        pid = self.pid(folder.name)
        if started is not None and pid is not None and request.get("host") == socket.gethostname():
            _kill_tree(pid, started_by=started)
        started_at = last if started is None else started
        _write_json(
            folder / "exit.json",
            {
                "exit_code": -signal.SIGKILL,
                "started_at": started_at,
                "stopped_at": max(last, started_at),
                "supervisor_gone": True,
            },
        )

    def pid(self, job_id: str) -> int | None:
        """The training process's pid while it runs (None before it started or after it ended)."""
        folder = self._dir(job_id)
        if (folder / "exit.json").exists() or not (folder / "pid").exists():
            return None
        text = (folder / "pid").read_text().strip()
        return int(text) if text else None

    def signal(self, job_id: str, signum: int) -> bool:
        """Send ``signum`` to the running training; returns whether one was running.

        SIGKILL takes the training's child processes too (a user command under ``costaware-run``): an
        instance that vanishes leaves nothing running, and the launcher cannot pass a SIGKILL on.
        """
        pid = self.pid(job_id)
        if pid is None:
            return False
        if signum == signal.SIGKILL:
            return _kill_tree(pid)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return False
        return True

    def stop(self, job_id: str) -> None:
        """Ask the job to stop: SIGTERM now, SIGKILL after its grace period.

        The supervisor sees the ``stop`` file: a job still waiting for capacity never starts, and a running
        job that outlives its grace period is killed, as a spot instance is after its notice.
        """
        (self._dir(job_id) / "stop").touch()
        self.signal(job_id, signal.SIGTERM)

    def log_files(self, job_id: str) -> tuple[Path, Path]:
        """The job's whole output, ``stdout.log`` and ``stderr.log`` (the task log carries a few lines)."""
        folder = self._dir(job_id)
        return folder / "stdout.log", folder / "stderr.log"

    def logs(self, job_id: str, tail: int = 20) -> str:
        path = self._dir(job_id) / "stderr.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-tail:])


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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m costaware.adapters.compute.local --job-dir D``: the supervisor of one local job."""
    parser = argparse.ArgumentParser(prog="python -m costaware.adapters.compute.local", allow_abbrev=False)
    parser.add_argument("--job-dir", required=True)
    return supervise(Path(parser.parse_args(argv).job_dir))


if __name__ == "__main__":
    raise SystemExit(main())
