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
    gate = dag.get_task("spend_gate")
    assert gate.downstream_task_ids == {"train"}
    assert {"team:ml-platform", "project:flight-delays"} <= set(dag.tags)
