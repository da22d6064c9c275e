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
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
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
    local_job_env,
)

# The job folder's files, the supervisor process and its process handling live in modules of their own;
# every name stays importable from here, where tests, docs and other modules name it
# (the private helpers too: F401 is silenced where this module does not use one itself).
from costaware.adapters.compute.local_job_files import (
    _PASSED_ON,  # noqa: F401
    CAPPED_FILE,
    INTERRUPTED_CODES,
    TIME_LIMIT_FILE,
    _end_state,
    _reason,
    _write_json,
    _write_text,  # noqa: F401
)
from costaware.adapters.compute.local_supervisor import (
    _BACKSTOP_SECONDS,  # noqa: F401
    _WATCH_SECONDS,  # noqa: F401
    HEARTBEAT_SECONDS,
    _adopt_orphans,  # noqa: F401
    _heartbeat,  # noqa: F401
    _kill_orphans,  # noqa: F401
    _kill_tree,
    _stop_when_due,  # noqa: F401
    _time_limit,  # noqa: F401
    _wait,  # noqa: F401
    supervise,
)
from costaware.core.errors import ComputeBackendError, ConfigurationError
from costaware.settings import default_store

__all__ = [
    "CAPPED_FILE",
    "GONE_AFTER_SECONDS",
    "HEARTBEAT_SECONDS",
    "INTERRUPTED_CODES",
    "TIME_LIMIT_FILE",
    "ZONE_PLACEHOLDER",
    "LocalBackend",
    "default_root",
    "main",
    "supervise",
]

#: The placeholder of a per-zone ``capacity_file``.
ZONE_PLACEHOLDER = "{zone}"
#: A supervisor whose heartbeat is older than this is gone. Far above HEARTBEAT_SECONDS: a loaded machine
#: may hold a process back for seconds, and containers sharing the jobs folder may disagree on the time a bit.
GONE_AFTER_SECONDS = 120.0


def default_root() -> str:
    """``$AIRFLOW_HOME/costaware/jobs``."""
    return default_store("jobs")


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
        # Kept as written, checked at the submit: a poll, stop or find never reads it (see open_backend).
        self.env = env

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
        env = local_job_env(self.env)  # before the folder, as the launcher below
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
                "env": {**env, **request.environment(work_dir=str(folder / "work"))},
                "capacity_file": capacity,
                "grace_seconds": request.grace_seconds,
                "stop_after_seconds": request.stop_after_seconds,
                "max_runtime_seconds": request.max_runtime_seconds,
                # The supervisor runs here: only here may a poll stop a training its supervisor left.
                "host": socket.gethostname(),
                "heartbeat_seconds": HEARTBEAT_SECONDS,  # an older release's supervisor wrote none
                # The folder's name is the job's, reused by a cleared task's new try where the folder is
                # gone (another machine, a clean-up): the token tells the bills of the two runs apart.
                "run_token": uuid.uuid4().hex,
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
            request = json.loads((folder / "request.json").read_text())
            market = str(request.get("market") or "")
            run_token = str(request.get("run_token") or "")  # an older release's folder has none
        except (FileNotFoundError, ValueError, AttributeError):
            market = run_token = ""  # not written yet, or unreadable: unknown, as a job that cannot be read
        return FoundJob(
            job_id=job_name,
            started_at=started,
            created_at=created,
            ended_at=ended_at,
            end_state=end_state,
            market=market,
            run_token=run_token,
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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m costaware.adapters.compute.local --job-dir D``: the supervisor of one local job."""
    parser = argparse.ArgumentParser(prog="python -m costaware.adapters.compute.local", allow_abbrev=False)
    parser.add_argument("--job-dir", required=True)
    return supervise(Path(parser.parse_args(argv).job_dir))


if __name__ == "__main__":
    raise SystemExit(main())
