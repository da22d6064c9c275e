"""The docker-compose topology without Docker: PostgreSQL and Redis from Debian on free ports, the api-server,
scheduler, DAG processor, triggerer and two Celery workers, one shared ledger in PostgreSQL."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from airflow_server import AirflowServer
from services import (
    RETRAIN_TASKS,
    airflow_env,
    free_port,
    ledger_task_ids,
    postgres_server,
    stop_process_group,
    wait_for_port,
)
from sqlalchemy import create_engine, text

from costaware import Ledger

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
PASSWORD = "celery-test-password"


def _redis(stack: ExitStack, home: Path) -> int:
    server = shutil.which("redis-server")
    if not server:
        raise RuntimeError("redis-server not found: run `bash scripts/ensure_services.sh` (make test does)")
    port = free_port()
    proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(home),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stack.callback(lambda: (proc.terminate(), proc.wait(10)))
    wait_for_port(port)
    return port


def _start(
    stack: ExitStack, home: Path, env: dict[str, str], name: str, *args: str
) -> subprocess.Popen[bytes]:
    log = (home / f"{name}.log").open("w")
    proc = subprocess.Popen(
        [str(BIN / "airflow"), *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )

    def stop() -> None:
        stop_process_group(proc)
        log.close()

    stack.callback(stop)
    return proc


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowServer, Ledger]]:
    home = tmp_path_factory.mktemp("celery")
    dags = home / "dags"
    dags.mkdir()
    for source in (
        ROOT / "dags" / "cost_aware_retrain.py",
        HERE / "dags" / "budget_wait.py",
        HERE / "dags" / "fan_out.py",
    ):
        shutil.copy(source, dags / source.name)
    with ExitStack() as stack:
        pg = stack.enter_context(postgres_server())  # database "costaware" = the shared ledger
        admin = create_engine(pg, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("CREATE DATABASE airflow"))
        admin.dispose()
        pg_root = pg.rsplit("/", 1)[0]
        redis_port = _redis(stack, home)
        api_port = free_port()
        (home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
        env = airflow_env(
            home,
            dags,
            PYTHONPATH=str(HERE),
            AIRFLOW__CORE__EXECUTOR="CeleryExecutor",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"{pg_root}/airflow",
            AIRFLOW__CELERY__BROKER_URL=f"redis://127.0.0.1:{redis_port}/0",
            AIRFLOW__CELERY__RESULT_BACKEND=f"db+{pg_root}/airflow",  # postgresql+psycopg2
            AIRFLOW__CELERY__WORKER_CONCURRENCY="1",
            AIRFLOW__CORE__FERNET_KEY="VrE2Hjz4w9uT8cQF1Wq4OmOhKq8O1GfE7pYQfU3s5aA=",
            AIRFLOW__API_AUTH__JWT_SECRET="celery-topology-test-secret",
            AIRFLOW__API__PORT=str(api_port),
            AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{api_port}",
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{api_port}/execution/",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(home / "passwords.json"),
            AIRFLOW__CORE__HOSTNAME_CALLABLE="worker_name.hostname",
            AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
            AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME="1",
        )
        # The connection, not COSTAWARE_LEDGER_URL, is what the workers must use.
        env.pop("COSTAWARE_LEDGER_URL")
        env["AIRFLOW_CONN_COSTAWARE_LEDGER"] = pg.replace("postgresql+psycopg2://", "postgres://")
        migrate = subprocess.run(
            [str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True
        )
        assert migrate.returncode == 0, migrate.stdout[-2000:] + migrate.stderr[-2000:]
        _start(
            stack, home, env, "api-server", "api-server", "-p", str(api_port), "-H", "127.0.0.1", "-w", "1"
        )
        _start(stack, home, {**env, "COSTAWARE_WORKER_NAME": "scheduler"}, "scheduler", "scheduler")
        _start(stack, home, env, "dag-processor", "dag-processor")
        _start(
            stack,
            home,
            {**env, "COSTAWARE_WORKER_NAME": "triggerer"},
            "triggerer",
            "triggerer",
            "--skip-serve-logs",
        )
        for n in (1, 2):
            _start(
                stack,
                home,
                {**env, "COSTAWARE_WORKER_NAME": f"worker-{n}"},
                f"worker-{n}",
                "celery",
                "worker",
                "--concurrency",
                "1",
                "--celery-hostname",
                f"worker{n}@%h",
                "--skip-serve-logs",
            )
        server = AirflowServer(f"http://127.0.0.1:{api_port}", home, env)
        deadline = time.monotonic() + 240
        while True:
            try:
                health = server.call("GET", "/api/v2/monitor/health", auth=False)
                if all(health.get(c, {}).get("status") == "healthy" for c in ("scheduler", "triggerer")):
                    break
            except (urllib.error.URLError, ConnectionError, KeyError, TimeoutError):
                pass
            assert time.monotonic() < deadline, "the Celery topology was not healthy within 240 s"
            time.sleep(2)
        body = server.call("POST", "/auth/token", {"username": "admin", "password": PASSWORD}, auth=False)
        server._token = body["access_token"]
        ledger = Ledger.from_url(pg)
        yield server, ledger
        ledger.dispose()


def _hostnames(airflow: AirflowServer, dag_id: str, run_id: str) -> dict[str, Any]:
    body = airflow.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    return {ti["task_id"]: ti["hostname"] for ti in body["task_instances"]}


def test_tasks_spread_over_both_workers_and_every_task_is_in_the_shared_ledger(
    topology: tuple[AirflowServer, Ledger],
) -> None:
    airflow, ledger = topology
    airflow.wait_for_dag("fan_out", timeout=180)
    run_id = airflow.trigger("fan_out")
    assert airflow.wait_for_run("fan_out", run_id, timeout=300) == "success", airflow.failure_report(
        "fan_out", run_id
    )
    hosts = _hostnames(airflow, "fan_out", run_id)
    assert set(hosts.values()) == {"worker-1", "worker-2"}, hosts
    # A worker's listener records a task's cost just after it reports the task's state, so the run can be
    # marked successful a moment before the last entry lands: wait for it (a lost entry still fails).
    expected = [f"work_{n}" for n in range(6)]
    give_up = time.monotonic() + 30
    rows = ledger.entries(dag_id="fan_out", run_id=run_id)
    while sorted(r["task_id"] for r in rows) != expected and time.monotonic() < give_up:
        time.sleep(0.5)
        rows = ledger.entries(dag_id="fan_out", run_id=run_id)
    assert sorted(r["task_id"] for r in rows) == expected
    assert all(r["tags"] == {"team": "platform", "project": "fan-out"} and r["usd"] > 0 for r in rows)


def test_retrain_dag_and_a_deferred_gate_through_the_triggerer(
    topology: tuple[AirflowServer, Ledger],
) -> None:
    airflow, ledger = topology
    ledger.set_budget("project=flight-delays", "month", "25")
    ledger.set_budget("project=wait-test", "month", "0")
    airflow.wait_for_dag("cost_aware_retrain", timeout=180)
    airflow.wait_for_dag("budget_wait", timeout=180)
    waiting = airflow.trigger("budget_wait")
    retrain = airflow.trigger("cost_aware_retrain", {"replay_date": "2013-05-01"})
    airflow.wait_for_task_state("budget_wait", waiting, "spend_gate", "deferred", timeout=180)
    assert airflow.wait_for_run("cost_aware_retrain", retrain, timeout=400) == "success", (
        airflow.failure_report("cost_aware_retrain", retrain)
    )
    ledger.set_budget("project=wait-test", "month", "5")
    assert airflow.wait_for_run("budget_wait", waiting, timeout=180) == "success", airflow.failure_report(
        "budget_wait", waiting
    )
    # The triggerer writes each trigger's log beside the task's: it waited there, then fired.
    trigger_logs = list(airflow.home.glob("logs/dag_id=budget_wait/**/task_id=spend_gate/*.trigger.*.log"))
    text = "".join(p.read_text() for p in trigger_logs)
    assert "waiting for budget" in text and "Trigger fired event" in text
    tasks = ledger_task_ids(ledger, "cost_aware_retrain", retrain, expected=RETRAIN_TASKS)
    assert tasks == RETRAIN_TASKS
    assert set(_hostnames(airflow, "cost_aware_retrain", retrain).values()) <= {"worker-1", "worker-2"}
    # Settled by the listener of 'train', which writes a moment after the run reads "success".
    assert "train" in ledger_task_ids(ledger, "budget_wait", waiting, expected=frozenset({"train"}))
    (usage,) = ledger.usage("project=wait-test")
    assert usage.reserved_usd == 0  # the gate's reservation was settled when 'train' finished
