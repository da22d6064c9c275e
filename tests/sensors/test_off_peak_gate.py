"""The window gate of an asset-triggered retrain: several asset events in one window give one retrain."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import time_machine
from airflow.sdk import DAG, Asset
from airflow.sdk.api.datamodels._generated import AssetEventDagRunReference
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred

from costaware.core.errors import ConfigurationError
from costaware.sensors.off_peak_gate import OffPeakWindowSensor

FEATURES = Asset(name="churn_features", uri="s3://ml-bucket/features/churn.parquet")
DAY = datetime(2026, 3, 2, tzinfo=timezone.utc)  # a Monday


@pytest.fixture
def ledger_env(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> str:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    return ledger_url


def gate(**kwargs: Any) -> OffPeakWindowSensor:
    with DAG("retrain_on_new_features", schedule=[FEATURES], start_date=DAY - timedelta(days=7)):
        settings: dict[str, Any] = {"windows": "22:00-06:00", "timezone": "UTC", "deferrable": True}
        return OffPeakWindowSensor(task_id="window_gate", **{**settings, **kwargs})


def run_context(run_id: str, *event_hours: float) -> dict[str, Any]:
    events = [
        AssetEventDagRunReference(
            asset={"name": FEATURES.name, "uri": FEATURES.uri, "extra": {}},
            extra={},
            source_task_id="publish",
            source_dag_id="features",
            source_run_id="r",
            source_map_index=-1,
            source_aliases=[],
            timestamp=DAY + timedelta(hours=h),
        )
        for h in event_hours
    ]
    return {"run_id": run_id, "triggering_asset_events": {FEATURES: events}}


def at(hours: float) -> Any:
    return time_machine.travel(DAY + timedelta(hours=hours), tick=False)


def test_several_asset_events_in_one_window_give_one_retrain(ledger_env: str) -> None:
    sensor = gate()
    # 15:00: features land (run a); the window opens at 22:00, so the gate defers until then.
    with at(15), pytest.raises(TaskDeferred) as deferred:
        sensor.execute(run_context("a", 15))
    assert deferred.value.trigger.moment == DAY + timedelta(hours=22)
    # 18:00 and 21:00: more features land (runs b and c), deferred to the same opening.
    for run_id, hour in (("b", 18), ("c", 21)):
        with at(hour), pytest.raises(TaskDeferred):
            sensor.execute(run_context(run_id, hour))
    # 22:00: the window opens; the first run to reach the gate trains, on all the data so far.
    with at(22):
        result = sensor.execute_complete(run_context("b", 18), event={"status": "success"})
    assert result["action"] == "train" and result["window_start"] == (DAY + timedelta(hours=22)).isoformat()
    # The two others find the window already retrained on their data, and skip.
    for run_id, hour in (("a", 15), ("c", 21)):
        with at(22.01), pytest.raises(AirflowSkipException, match="already covers this run's data"):
            sensor.execute_complete(run_context(run_id, hour), event={"status": "success"})
    # A retry of the run that trained trains again (its own claim), it does not skip.
    with at(22.5):
        assert gate().execute(run_context("b", 18))["action"] == "train"
    # 23:00: data lands after the retrain began: it waits for the next window instead of retraining twice.
    with at(23), pytest.raises(TaskDeferred) as carried:
        sensor.execute(run_context("d", 23))
    assert carried.value.trigger.moment == DAY + timedelta(days=1, hours=22)
    with at(24 + 22):
        assert sensor.execute_complete(run_context("d", 23), event={})["action"] == "train"


def test_poke_mode_and_bad_windows(ledger_env: str) -> None:
    sensor = gate(poke_interval=1, deferrable=False)
    with at(12):
        assert sensor.poke(run_context("p", 11)) is False
    with at(23):
        poked = sensor.poke(run_context("p", 11))
    assert not isinstance(poked, bool) and poked.xcom_value["action"] == "train"
    with pytest.raises(ConfigurationError, match="'25:00' cannot exist on a clock"):
        gate(windows="25:00-03:00")
