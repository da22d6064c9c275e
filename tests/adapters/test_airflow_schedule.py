"""Runs still to come, from timetables: counted directly, and read from a real Airflow metadata database."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import CronTriggerTimetable as SdkCronTriggerTimetable
from airflow.timetables.trigger import CronTriggerTimetable
from services import migrated_airflow_env, run_command

from costaware import Ledger
from costaware.adapters.airflow_schedule import AirflowSchedule, TimetableSchedule, count_runs
from costaware.core.budgets import Period, period_window
from costaware.core.ledger import Kind, LedgerEntry

T0 = datetime(2026, 11, 24, 0, 30, tzinfo=timezone.utc)
DAG_FILE = """
import pendulum
from airflow.sdk import dag, task

@dag(dag_id="sched_retrain", schedule="0 3 * * *", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, tags=["project:churn"])
def sched_retrain():
    @task
    def train():
        return 1
    train()

sched_retrain()
"""


def test_runs_past_the_counting_cap_are_extrapolated(monkeypatch: pytest.MonkeyPatch) -> None:
    # Stopped at the cap, a per-minute DAG's month read 10,000 runs (44,640 are due): its forecast alert
    # came late or never.
    import costaware.adapters.airflow_schedule as schedule

    every_minute = CronTriggerTimetable("* * * * *", timezone="UTC")
    exact = count_runs(every_minute, T0, T0 + timedelta(days=1))
    monkeypatch.setattr(schedule, "MAX_RUNS", 100)
    assert exact == 1440 and count_runs(every_minute, T0, T0 + timedelta(days=1)) == exact


class CountingTimetable:
    """A real cron timetable that counts the runs asked of it: the work a count does."""

    can_be_scheduled = True

    def __init__(self, cron: str) -> None:
        self.inner = CronTriggerTimetable(cron, timezone="UTC")
        self.asked = 0

    def next_dagrun_info(self, **kwargs: Any) -> Any:
        self.asked += 1
        return self.inner.next_dagrun_info(**kwargs)


def test_a_count_asks_at_most_max_runs_and_extrapolates_the_rest() -> None:
    every_minute = CountingTimetable("* * * * *")
    assert count_runs(every_minute, T0, T0 + timedelta(days=1), max_runs=100) == 1440
    assert every_minute.asked == 100
    with pytest.raises(ValueError, match="max_runs must be at least 2, got 1"):
        count_runs(every_minute, T0, T0 + timedelta(days=1), max_runs=1)


def test_a_schedule_counts_each_window_of_a_dag_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The Cost page asked for the same DAG's month once per budget it spends in: a per-minute DAG's month
    # took seconds each time.
    every_minute = CountingTimetable("* * * * *")
    given = TimetableSchedule({"a": every_minute}, max_runs=50)
    end = T0 + timedelta(hours=3)
    assert [given.runs_between("a", T0, end) for _ in range(3)] == [180] * 3
    assert every_minute.asked == 50
    read: list[str] = []

    def from_the_database(self: AirflowSchedule, dag_id: str) -> Any:
        read.append(dag_id)
        return every_minute

    monkeypatch.setattr(AirflowSchedule, "_timetable", from_the_database)
    airflow = AirflowSchedule()
    assert [airflow.runs_between("a", T0, end) for _ in range(3)] == [180] * 3
    assert read == ["a"] and every_minute.asked == 50 + 181  # the 181st is past the end


@pytest.mark.parametrize(
    ("cron", "end", "expected"),
    [
        ("0 3 * * *", T0 + timedelta(days=7), 7),  # 03:00 on the 24th .. 30th
        ("0 * * * *", T0 + timedelta(hours=5), 5),  # 01:00 .. 05:00; the end is exclusive
        ("0 3 * * *", T0 + timedelta(hours=2), 0),
        ("0 3 * * *", T0, 0),
    ],
)
def test_count_runs_in_a_window(cron: str, end: datetime, expected: int) -> None:
    assert count_runs(CronTriggerTimetable(cron, timezone="UTC"), T0, end) == expected
    # a DAG file's (Task SDK) timetable counts the same, through Airflow's serialization
    assert count_runs(SdkCronTriggerTimetable(cron, timezone="UTC"), T0, end) == expected


def test_a_dag_without_a_timetable_schedules_nothing() -> None:
    schedule = TimetableSchedule({"a": CronTriggerTimetable("0 3 * * *", timezone="UTC")})
    assert schedule.runs_between("b", T0, T0 + timedelta(days=3)) == 0
    assert schedule.runs_between("a", T0, T0 + timedelta(days=3)) == 3


def test_an_unreachable_metadata_database_schedules_nothing() -> None:
    # this test process has no migrated Airflow database: the forecast falls back to what is committed
    assert AirflowSchedule().runs_between("sched_retrain", T0, T0 + timedelta(days=3)) == 0


@pytest.mark.slow
def test_budget_show_reads_the_timetable_from_airflow(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "sched_retrain.py").write_text(DAG_FILE)
    env = migrated_airflow_env(tmp_path / "home", dags)
    for args in (("dags", "reserialize"), ("dags", "unpause", "sched_retrain")):
        done = run_command(env, "airflow", *args)
        assert done.returncode == 0, done.stderr[-2000:]
    ledger = Ledger.from_url(env["COSTAWARE_LEDGER_URL"])
    ledger.set_budget("project=churn", "month", "50")
    for run, usd in (("r1", "2"), ("r2", "4")):
        ledger.record(
            LedgerEntry(
                dag_id="sched_retrain", run_id=run, task_id="train", kind=Kind.COMPUTE, usd=Decimal(usd),
                tags={"project": "churn"},
            )
        )  # fmt: skip

    def show() -> dict[str, object]:
        done = run_command(env, "costaware", "budget", "show", "--scope", "project=churn", "--format", "json")
        assert done.returncode == 0, done.stderr[-2000:]
        (row,) = json.loads(done.stdout)
        return dict(row)

    now = datetime.now(timezone.utc)
    end = period_window(Period.MONTH, now).end
    assert end is not None
    expected = count_runs(CronTriggerTimetable("0 3 * * *", timezone="UTC"), now, end)
    row = show()
    runs = int(str(row["runs_left"]))
    assert runs in (expected, expected - 1)  # a 03:00 may pass while the command runs
    assert Decimal(str(row["forecast_usd"])) == 6 + 3 * runs
    assert (Decimal(str(row["forecast_low_usd"])), Decimal(str(row["forecast_high_usd"]))) == (
        6 + 2 * runs,
        6 + 4 * runs,
    )
    done = run_command(env, "airflow", "dags", "pause", "sched_retrain")
    assert done.returncode == 0, done.stderr[-2000:]
    assert show()["runs_left"] == 0  # a paused DAG schedules nothing
