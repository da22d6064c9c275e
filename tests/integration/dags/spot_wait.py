"""Test DAG: a spot window that waits (deferred) for a cheaper price, then lets training start on spot."""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task

from costaware.sensors.spot_window import SpotWindowSensor


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"prices": Param("", type="string"), "deadline": Param("", type="string")},
)
def spot_wait() -> None:
    window = SpotWindowSensor(
        task_id="spot_window",
        instance_type="p3.2xlarge",
        region="us-east-1",
        expected_runtime_hours=1,
        prices="{{ params.prices }}",
        deadline="{{ params.deadline }}",
        on_demand_usd_per_hour="3.06",
        restart_overhead_minutes=0,
        deferrable=True,
        poke_interval=2,
        timeout=600,
    )

    @task
    def train(decision: dict[str, str]) -> str:
        return decision["market"]

    train(window.output)


spot_wait()
