"""Test DAGs of budget governance: a spend gate that asks for approval, and a second team's DAG."""

from __future__ import annotations

import time
from datetime import timedelta

import pendulum
from airflow.sdk import dag, task

from costaware.sensors.spend_cap import SpendCapSensor


@dag(
    dag_id="churn_retrain",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["project:churn"],
)
def churn_retrain() -> None:
    gate = SpendCapSensor(
        task_id="spend_gate",
        scope="project=churn",
        estimated_usd="5.00",
        on_exceeded="approve",
        approvers=["ann"],
        approval_timeout=timedelta(minutes=10),
    )

    # $10 a second, for this task only (a task-scoped pricing override): one run passes every threshold of a
    # $1 cap.
    @task(params={"costaware_compute": {"usd_per_hour": 36000}})
    def train() -> str:
        # At $10 a second the listener bills this task's run time; a bare return ends in under 0.1 s on an
        # idle machine, which stays under the $1 cap. Half a second passes it whatever the machine's speed.
        time.sleep(0.5)
        return "trained"

    gate >> train()


@dag(
    dag_id="fraud_retrain",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["project:fraud"],
)
def fraud_retrain() -> None:
    @task
    def train() -> str:
        return "trained"

    train()


churn_retrain()
fraud_retrain()
