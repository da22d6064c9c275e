from __future__ import annotations

from pathlib import Path

from airflow.dag_processing.dagbag import DagBag

DAGS = Path(__file__).resolve().parents[2] / "dags"


def test_example_dags_import_without_errors() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert "cost_aware_retrain" in bag.dag_ids


def test_retrain_dag_shape() -> None:
    dag = DagBag(dag_folder=str(DAGS)).dags["cost_aware_retrain"]  # parsed only, no metadata DB needed
    assert dag.get_task("spend_gate").downstream_task_ids == {"spot_window"}
    assert dag.get_task("spend_gate").for_task_id == "retrain"
    assert dag.get_task("retrain").upstream_task_ids == {"spot_window"}
    assert type(dag.timetable).__name__ == "OffPeakTimetable"
    assert {"team:ml-platform", "project:flight-delays"} <= set(dag.tags)
