from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
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


# The try of the test below, in a fresh interpreter: a pytest worker that ran other tests can reap their
# leftover children during the try, and a reaped child's CPU and memory count (seen twice on a full run:
# 4.8 CPU s and a 2 GiB peak in a try of 0.8 s).
MEASURED_TRY = """
import subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from test_listener_utilization import HOG, fake_ti
from costaware.plugins import listener as listener_module
from costaware.plugins.listener import CostListener

listener_module.spool_dir = lambda: Path(sys.argv[2])
ti = fake_ti(instance_type="c5.xlarge", region="us-east-1", market="on_demand")
listener = CostListener()
listener.on_task_instance_running(None, ti)
subprocess.run([sys.executable, "-c", HOG], check=True)
listener.on_task_instance_success(None, ti)
"""


def test_cpu_and_peak_memory_of_the_process_tree_are_measured(ledger_env: Ledger, tmp_path: Path) -> None:
    here = str(Path(__file__).parent)
    subprocess.run([sys.executable, "-c", MEASURED_TRY, here, str(tmp_path / "spool")], check=True)
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


@pytest.mark.parametrize(
    ("figure", "message"),
    [
        ({"peak_memory_gib": "3GiB"}, "peak_memory_gib must be a number >= 0, got '3GiB'"),
        ({"wall_seconds": 0}, "wall_seconds must be a number > 0, got 0"),
        ({"cpu_seconds": float("nan")}, "cpu_seconds must be a number >= 0, got nan"),
    ],
)
def test_remote_figures_that_are_not_numbers_are_refused_where_they_are_given(
    figure: dict[str, object], message: str
) -> None:
    # "3GiB" dropped the whole utilization record later, logging only "[<class 'decimal.ConversionSyntax'>]".
    with pytest.raises(ValueError, match=message):
        annotate_utilization(fake_ti(), backend="sagemaker", **figure)  # type: ignore[arg-type]


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


def test_runs_per_month_of_a_per_minute_dag_asks_for_a_bounded_number_of_runs() -> None:
    # Walked run by run (up to 100,000), a per-minute DAG took about a minute after every try: Airflow killed
    # the listener at [core] task_success_overtime, before it sent the budget alerts.
    from airflow.timetables.trigger import CronTriggerTimetable

    from costaware.adapters.airflow_schedule import TASK_MAX_RUNS

    class Counting:
        can_be_scheduled = True
        asked = 0
        inner = CronTriggerTimetable("* * * * *", timezone="UTC")

        def next_dagrun_info(self, **kwargs: Any) -> Any:
            self.asked += 1
            return self.inner.next_dagrun_info(**kwargs)

    timetable = Counting()
    after = pendulum.datetime(2026, 11, 1, tz="UTC")
    assert runs_per_month(SimpleNamespace(dag_id="d", timetable=timetable), after) == 730 * 60
    assert timetable.asked == TASK_MAX_RUNS


def _carbon_file_covering_now(folder: Any, zone: str, g_per_kwh: int) -> None:
    now = pendulum.now("UTC").start_of("hour")
    rows = [f"{now.add(hours=h).isoformat()},{g_per_kwh},{g_per_kwh}" for h in range(-2, 3)]
    folder.mkdir(parents=True, exist_ok=True)
    header = "timestamp_utc,g_co2eq_per_kwh_lca,g_co2eq_per_kwh_direct\n"
    (folder / f"{zone}_now.csv").write_text(header + "\n".join(rows) + "\n")


def test_an_on_premises_try_records_its_kg_co2e(
    ledger_env: Ledger, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from decimal import Decimal

    from costaware.adapters import carbon_recorded

    # Where RecordedCarbon looks it up since carbon_source's split (252e61c0): patched on carbon_source, the
    # name was re-exported there and the listener read the bundled year.
    monkeypatch.setattr(carbon_recorded, "carbon_folder", lambda: tmp_path / "carbon")
    _carbon_file_covering_now(tmp_path / "carbon", "GB", 200)
    ti = fake_ti(market="local", usd_per_hour="0.5", power_kw=0.5, grid_zone="GB")
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    listener.on_task_instance_success(None, ti)

    (entry,) = ledger_env.entries(dag_id="retrain")
    hours = entry["quantity"]
    # The estimate runs on the try's exact seconds; the stored quantity is rounded to the micro-hour.
    assert abs(entry["kwh"] - Decimal("0.5") * hours) <= Decimal("0.000002")
    assert abs(entry["kg_co2e"] - Decimal("0.1") * hours) <= Decimal("0.000002")  # 0.5 kW x 200 g/kWh
    assert entry["carbon_method"] == "operator power_kw 0.5 kW; grid mean 200.0 gCO2e/kWh"
    assert entry["carbon_source"] == "grid GB: carbon GB_now.csv (gCO2e/kWh, lca), recorded"


def test_a_cloud_try_in_an_unmapped_region_is_unknown_not_zero(ledger_env: Ledger) -> None:
    ti = fake_ti(instance_type="c5.xlarge", region="us-east-1", market="on_demand")
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    subprocess.run([sys.executable, "-c", HOG], check=True)
    listener.on_task_instance_success(None, ti)

    (entry,) = ledger_env.entries(dag_id="retrain")
    assert entry["kg_co2e"] is None
    assert entry["kwh"] is not None and entry["kwh"] > 0
    assert entry["carbon_method"].startswith("unknown: region 'us-east-1' has no grid zone")
    assert "4 vCPU x86_64 at measured CPU use " in entry["carbon_method"]


@pytest.mark.parametrize(
    ("where", "named"),
    [
        ("setting", "set by [costaware] worker_grid_zone (AIRFLOW__COSTAWARE__WORKER_GRID_ZONE)"),
        ("argument", "set by the task's grid_zone (operator argument)"),
        ("param", "set by the task's grid_zone (costaware_compute param)"),
    ],
)
def test_a_grid_zone_without_data_is_warned_of_naming_where_it_was_set(
    ledger_env: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    where: str,
    named: str,
) -> None:
    # A typo in [costaware] worker_grid_zone was logged as the task's grid_zone: the user looked for an
    # operator argument nobody wrote, and every entry of the run went on unknown.
    overrides: dict[str, Any] = {}
    if where == "setting":
        monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_GRID_ZONE", "us-cal-ciso")
    elif where == "argument":
        overrides["grid_zone"] = "us-cal-ciso"
    ti = fake_ti(market="local", usd_per_hour="0.5", power_kw=0.5, **overrides)
    if where == "param":
        ti.task.params = {"costaware_compute": {"grid_zone": "us-cal-ciso"}}
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    with caplog.at_level(logging.WARNING, logger="costaware.adapters.emissions"):
        listener.on_task_instance_success(None, ti)

    (entry,) = ledger_env.entries(dag_id="retrain")
    assert entry["kg_co2e"] is None
    (warning,) = [r.getMessage() for r in caplog.records if "emissions unknown" in r.getMessage()]
    assert f"grid zone 'us-cal-ciso', {named}: " in warning, warning
    assert "did you mean 'US-CAL-CISO'?" in warning and warning.endswith("; fix it there")


def test_a_bad_power_kw_still_records_the_cost(ledger_env: Ledger) -> None:
    ti = fake_ti(instance_type="c5.xlarge", region="us-east-1", market="on_demand", power_kw="lots")
    listener = CostListener()
    listener.on_task_instance_running(None, ti)
    listener.on_task_instance_success(None, ti)

    (entry,) = ledger_env.entries(dag_id="retrain")
    assert entry["usd"] >= 0 and entry["kg_co2e"] is None and entry["kwh"] is None
    assert entry["carbon_method"].startswith("unknown: estimate failed: ValueError: power_kw='lots' is not a")


def test_the_workers_grid_zone_applies_to_tasks_that_name_none(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from costaware.plugins.utilization import carbon_overrides

    task = SimpleNamespace(params={})
    assert carbon_overrides(task) == {}
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_GRID_ZONE", "US-CAL-CISO")
    setting = "[costaware] worker_grid_zone (AIRFLOW__COSTAWARE__WORKER_GRID_ZONE)"
    assert carbon_overrides(task) == {"grid_zone": "US-CAL-CISO", "grid_zone_from": setting}
    named = SimpleNamespace(params={"costaware_compute": {"grid_zone": "GB", "power_kw": 0.2}})
    from_param = "the task's grid_zone (costaware_compute param)"
    assert carbon_overrides(named) == {"grid_zone": "GB", "grid_zone_from": from_param, "power_kw": 0.2}


@pytest.mark.parametrize("unset", [" ", "None", "null", " None "])
def test_a_blank_or_unset_template_carbon_field_is_not_given(
    monkeypatch: pytest.MonkeyPatch, unset: str
) -> None:
    # A blank grid_zone hid the worker's zone (the region's was used), "None" (a template of an unset
    # param) was read as a zone named None, and power_kw "None" lost the try's estimate ("not a number").
    from types import SimpleNamespace

    from costaware.plugins.utilization import carbon_overrides

    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_GRID_ZONE", "US-CAL-CISO")
    param = SimpleNamespace(params={"costaware_compute": {"grid_zone": unset, "power_kw": unset}})
    setting = "[costaware] worker_grid_zone (AIRFLOW__COSTAWARE__WORKER_GRID_ZONE)"
    assert carbon_overrides(param) == {"grid_zone": "US-CAL-CISO", "grid_zone_from": setting}
    # An operator's templated attribute left unset gives way to the task's costaware_compute.
    attributes = SimpleNamespace(
        grid_zone=unset, power_kw=unset, params={"costaware_compute": {"grid_zone": " GB ", "power_kw": 0.2}}
    )
    from_param = "the task's grid_zone (costaware_compute param)"
    assert carbon_overrides(attributes) == {"grid_zone": "GB", "grid_zone_from": from_param, "power_kw": 0.2}
