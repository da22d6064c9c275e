"""Test DAG: six independent tasks, enough to keep two Celery workers busy at once."""

from __future__ import annotations

import time

import pendulum
from airflow.sdk import dag, task


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["team:platform", "project:fan-out"],
)
def fan_out() -> None:
    @task
    def work(n: int) -> int:
        time.sleep(3)
        return n * n

    for n in range(6):
        work.override(task_id=f"work_{n}")(n)


fan_out()
