from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pendulum
import pytest

from costaware import Ledger
from costaware.adapters.ledger.efficiency import measurements
from costaware.plugins import listener as listener_module
from costaware.plugins.listener import CostListener
from costaware.plugins.utilization import annotate_utilization, runs_per_month

# A child that keeps one core busy for about 0.6 s while holding 300 MiB resident.
HOG = (
    "import time\n"
    "block = bytearray(300 * 1024 * 1024)\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"
    "end = time.process_time() + 0.6\n"
    "while time.process_time() < end: pass\n"
)


class _PricedTask(SimpleNamespace):
    """An operator whose tries run where its compute arguments say (as WarmStartRetrainOperator's)."""

    cost_compute_from_arguments = True


def fake_ti(task_id: str = "train", **task_attrs: Any) -> SimpleNamespace:
    dag = SimpleNamespace(tags=["project=churn"], dag_id="retrain")
    task = _PricedTask(dag=dag, params={}, **task_attrs)
    return SimpleNamespace(
        dag_id="retrain",
        run_id="run1",
        task_id=task_id,
        map_index=-1,
        try_number=1,
        task=task,
        start_date=None,
        end_date=None,
        get_template_context=lambda: {"params": {}},
    )


@pytest.fixture
def ledger_env(ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> Ledger:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    monkeypatch.setattr(listener_module, "spool_dir", lambda: tmp_path / "spool")
    return Ledger.from_url(ledger_url)


def test_cpu_and_peak_memory_of_the_process_tree_are_measured(ledger_env: Ledger) -> None:
    ti = fake_ti(instance_type="c5.xlarge", region="us-east-1", market="on_demand")
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    subprocess.run([sys.executable, "-c", HOG], check=True)
    listener.on_task_instance_success(None, ti)
    (m,) = measurements(ledger_env, dag_id="retrain")
    (entry,) = ledger_env.entries(dag_id="retrain")
    assert m.cpu_seconds >= 0.5  # the child's CPU counts: it is part of the task's process tree
    assert m.peak_memory_gib >= 300 / 1024  # the child's 300 MiB count towards the peak
    assert m.wall_seconds >= m.cpu_seconds * 0.9
    assert (m.vcpus, m.memory_gib, m.instance_type, m.source) == (4, 8, "c5.xlarge", "local")
    assert m.usd == entry["usd"]  # the utilization record joins the try's cost entry
    assert m.cpu_utilization is not None and 0 < m.cpu_utilization <= 1


def test_remote_backend_figures_replace_the_local_ones(ledger_env: Ledger) -> None:
    ti = fake_ti(instance_type="m5.2xlarge", region="us-east-1")
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    annotate_utilization(
        ti,
        backend="sagemaker",
        cpu_seconds=7200.0,
        wall_seconds=3600.0,
        peak_memory_gib=3.0,
        metrics={"gpu": 0},
    )
    listener.on_task_instance_success(None, ti)
    (m,) = measurements(ledger_env)
    assert (m.source, m.cpu_seconds, m.wall_seconds, m.backend_metrics) == (
        "sagemaker",
        7200.0,
        3600.0,
        {"gpu": 0},
    )
    assert m.peak_memory_gib == pytest.approx(3.0)
    assert m.cpu_utilization == pytest.approx(0.25)  # 2 busy cores of m5.2xlarge's 8


def test_remote_annotation_needs_a_backend_name() -> None:
    with pytest.raises(ValueError, match="needs the backend's name"):
        annotate_utilization(fake_ti(), backend="")


def test_runs_per_month_from_the_dag_schedule() -> None:
    from airflow.sdk import DAG

    from costaware.timetables import OffPeakTimetable

    after = pendulum.datetime(2026, 11, 1, tz="UTC")
    daily = DAG("d1", schedule="0 2 * * *", start_date=after)
    off_peak = DAG(
        "d2",
        schedule=OffPeakTimetable(windows=["22:00-06:00"], days="daily", timezone="UTC"),
        start_date=after,
    )
    assert runs_per_month(daily, after) == pytest.approx(30.0, abs=1)
    assert runs_per_month(off_peak, after) == pytest.approx(30.0, abs=1)
    assert runs_per_month(DAG("d3", schedule=None, start_date=after), after) is None
