"""Test DAG: a spend gate that waits (deferred, in the triggerer) until its budget has room."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from costaware.sensors.spend_cap import SpendCapSensor


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["project:wait-test"],
    params={"project": "wait-test"},
)
def budget_wait() -> None:
    gate = SpendCapSensor(
        task_id="spend_gate",
        scope="project=wait-test",
        estimated_usd="1.00",
        on_exceeded="wait",
        deferrable=True,
        poke_interval=2,
        timeout=300,
    )

    @task
    def train() -> str:
        return "trained"

    gate >> train()


budget_wait()
