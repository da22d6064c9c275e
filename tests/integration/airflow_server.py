"""Start a real `airflow standalone` (scheduler, dag-processor, triggerer, api-server) on a free port."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from services import airflow_env, free_port, stop_process_group

BIN = Path(sys.executable).parent


class AirflowServer:
    """REST client of a running standalone Airflow (JWT from /auth/token)."""

    def __init__(self, base: str, home: Path, env: dict[str, str]) -> None:
        self.base, self.home, self.env = base, home, env
        self._token = ""

    def login(self) -> None:
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        body = self.call(
            "POST", "/auth/token", {"username": "admin", "password": passwords["admin"]}, auth=False
        )
        self._token = body["access_token"]

    def call(self, method: str, path: str, body: Any = None, *, auth: bool = True) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if auth:
            request.add_header("Authorization", f"Bearer {self._token}")
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def poll(self, path: str) -> Any:
        """GET ``path``, or None when the server answered nothing within the call's 30 s.

        A loaded 2-core machine (the end-to-end tests run three at a time) can starve the API server past
        one call's timeout; the waits below treat that as one missed poll and keep their own deadlines.
        """
        try:
            return self.call("GET", path)
        except TimeoutError:  # no answer while reading
            return None
        except urllib.error.URLError as e:  # no answer while connecting; a refusal or an HTTP error raises
            if isinstance(e, urllib.error.HTTPError) or not isinstance(e.reason, TimeoutError):
                raise
            return None

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.poll(f"/api/v2/dags/{dag_id}") is not None:
                    return
            except urllib.error.HTTPError:
                pass
            time.sleep(1)
        raise TimeoutError(f"DAG {dag_id} was not parsed within {timeout} s")

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        run = self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return str(run["dag_run_id"])

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        """Each task's state (empty when the server did not answer in time: see :meth:`poll`)."""
        body = self.poll(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti["state"] for ti in body["task_instances"]} if body else {}

    def wait_for_task_state(
        self, dag_id: str, run_id: str, task_id: str, state: str, timeout: float = 120
    ) -> None:
        """Poll every second until ``task_id`` of the run is in ``state``; fail with every task's state."""
        deadline = time.monotonic() + timeout
        while self.task_states(dag_id, run_id).get(task_id) != state:
            assert time.monotonic() < deadline, self.task_states(dag_id, run_id)
            time.sleep(1)

    def wait_for_defer_exit(self, dag_id: str, run_id: str, task_id: str, timeout: float = 90) -> None:
        """Wait until the scheduler has taken the exit of the process that deferred ``task_id``.

        A test that frees a deferred task at once (a price drop, a raised cap, a second after the deferral)
        can resume it before the scheduler drains that process's success event; Airflow 3.3 then fails the
        resumed try ("state mismatch", apache/airflow#72716, fixes open). Real prices and caps do not move
        within the second; a test's do.
        """
        key = f"TaskInstanceKey(dag_id='{dag_id}', task_id='{task_id}', run_id='{run_id}'"
        event = f"Received executor event with state success for task instance {key}"
        log = self.home / "standalone.log"
        deadline = time.monotonic() + timeout
        while event not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"the exit of the process deferring {task_id} never came"
            time.sleep(0.5)

    def failure_report(self, dag_id: str, run_id: str, lines: int = 40) -> str:
        """Each task's state and the log tail of every try of a task that did not succeed.

        A run that fails only on a loaded machine is hard to reproduce: the assertion message keeps the cause.
        """
        states = self.task_states(dag_id, run_id)
        report = [f"task states: {states}"]
        for task_id, state in sorted(states.items()):
            if state in ("success", "skipped"):
                continue
            # Airflow 3 writes logs/dag_id=<dag>/run_id=<run>/task_id=<task>/attempt=<n>.log
            folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
            for log in sorted(folder.glob("**/*.log")):
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                report.append(f"--- {task_id} ({state}) {log.relative_to(self.home)}:\n" + "\n".join(tail))
        return "\n".join(report)

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            run = self.poll(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            state = run["state"] if run else state
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        raise TimeoutError(
            f"run {run_id} still {state} after {timeout} s; {self.failure_report(dag_id, run_id)}"
        )


@contextmanager
def api_server(env: dict[str, str], log_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A second ``airflow api-server`` with ``env`` on a free port, its output in ``log_path``.

    Yields its base URL and the environment it runs with; stops it (its whole process group) on exit.
    """
    port = free_port()
    env = {**env, "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}"}
    base = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [str(BIN / "airflow"), "api-server", "-p", str(port), "-H", "127.0.0.1", "-w", "1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=5).close()
                    break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    assert time.monotonic() < deadline, (
                        f"the api-server did not start within 120 s: {log_path}"
                    )
                    time.sleep(1)
            yield base, env
        finally:
            stop_process_group(proc)


@contextmanager
def airflow_standalone(
    dags: list[Path], ledger_url: str, home: Path, extra_env: dict[str, str] | None = None
) -> Iterator[AirflowServer]:
    dags_folder = home / "dags"
    dags_folder.mkdir(parents=True)
    for dag_file in dags:
        shutil.copy(dag_file, dags_folder / dag_file.name)
    port = free_port()
    env = airflow_env(
        home,
        dags_folder,
        COSTAWARE_LEDGER_URL=ledger_url,
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__API__WORKERS="1",
        AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME="1",
        **(extra_env or {}),
    )
    log = (home / "standalone.log").open("w")
    proc = subprocess.Popen(
        [str(BIN / "airflow"), "standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = AirflowServer(f"http://127.0.0.1:{port}", home, env)
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"airflow standalone exited: {(home / 'standalone.log').read_text()[-3000:]}"
                )
            try:
                health = server.call("GET", "/api/v2/monitor/health", auth=False)
                if all(health.get(c, {}).get("status") == "healthy" for c in ("scheduler", "triggerer")):
                    break
            except (urllib.error.URLError, ConnectionError, KeyError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("airflow standalone was not healthy within 180 s")
            time.sleep(1)
        server.login()
        yield server
    finally:
        stop_process_group(proc)
        log.close()
