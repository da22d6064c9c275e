"""SpotWindowSensor defers while spot is dearer than the forecast, and resumes on spot when the price drops:
under `airflow dags test` (the trigger runs in-process) and in the real triggerer of `airflow standalone`."""

from __future__ import annotations

import json
import subprocess
import threading
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from airflow_server import AirflowServer
from services import BIN, migrated_airflow_env
from spot_history import append, now, write_history

from costaware import Ledger

pytestmark = pytest.mark.slow
DAGS = Path(__file__).parent / "dags"


def _prices(folder: Path) -> Path:
    # The day's cheap hour is two hours ahead, so a price of 1.00 now is worth waiting out.
    path = folder / "prices.csv"
    write_history(path, current="1.00", cheap_hour_utc=(now().hour + 2) % 24)
    return path


def test_defers_and_resumes_under_dags_test(tmp_path: Path) -> None:
    env = migrated_airflow_env(tmp_path / "home", DAGS)
    prices = _prices(tmp_path)
    conf = {"prices": str(prices), "deadline": (now() + timedelta(hours=30)).isoformat()}
    command = [str(BIN / "airflow"), "dags", "test", "spot_wait", "-c", json.dumps(conf)]
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(300, run.kill)
    watchdog.start()
    lines, dropped = [], False
    try:
        assert run.stdout is not None
        for line in run.stdout:
            lines.append(line)
            if not dropped and "running trigger in line" in line:
                append(prices, "0.40")  # the price drops once the task is deferred, however slow start-up is
                dropped = True
        run.wait()
    finally:
        watchdog.cancel()
    output = "".join(lines)
    assert run.returncode == 0, output[-3000:]
    assert dropped and "DEFERRED" in output
    assert "decision: spot at 0.40 USD/hour" in output


def test_defers_in_the_real_triggerer(server: tuple[AirflowServer, Ledger], tmp_path: Path) -> None:
    airflow, ledger = server
    prices = _prices(tmp_path)
    airflow.wait_for_dag("spot_wait")
    run_id = airflow.trigger(
        "spot_wait", {"prices": str(prices), "deadline": (now() + timedelta(hours=30)).isoformat()}
    )
    airflow.wait_for_task_state("spot_wait", run_id, "spot_window", "deferred")
    airflow.wait_for_defer_exit("spot_wait", run_id, "spot_window")
    append(prices, "0.40")
    assert airflow.wait_for_run("spot_wait", run_id) == "success", airflow.failure_report("spot_wait", run_id)
    logs = list(airflow.home.glob("logs/dag_id=spot_wait/**/task_id=spot_window/*.trigger.*.log"))
    assert logs and any("Trigger fired event" in p.read_text() for p in logs)
    (decision,) = [r for r in ledger.entries(dag_id="spot_wait", run_id=run_id) if r["estimated"]]
    assert decision["market"] == "spot" and decision["unit_price_usd"] == Decimal("0.4")
