"""A spend gate's hold keeps counting while the spot window between the gate and its task waits.

``spend_gate >> spot_window >> retrain`` (dags/cost_aware_retrain.py): the gate reserves when the night's
window opens, and the spot window may wait for spot until its latest start, after the gate's hold lapsed.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import time_machine
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.sdk.exceptions import TaskDeferred
from contexts import task_context
from spot_history import write_history

from costaware import Ledger
from costaware.core.errors import BudgetExceededError
from costaware.sensors.spend_cap import SpendCapSensor
from costaware.sensors.spot_window import SpotWindowSensor

WINDOW_OPENS = datetime(2026, 11, 30, 22, 0, tzinfo=timezone.utc)
DEADLINE = datetime(2026, 12, 1, 6, 0, tzinfo=timezone.utc)
RUN = "scheduled__2026-11-30T22:00:00+00:00"


@pytest.fixture
def ledger(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    opened = Ledger.from_url(ledger_url)
    opened.set_budget("project=churn", "total", "10")
    return opened


def nightly(prices: Path, *, deferrable: bool) -> tuple[SpendCapSensor, SpotWindowSensor]:
    with DAG("nightly", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
        land = EmptyOperator(task_id="land")
        gate = SpendCapSensor(
            task_id="spend_gate", scope="project=churn", estimated_usd="8", for_task_id="retrain"
        )
        window = SpotWindowSensor(
            task_id="spot_window",
            instance_type="p3.2xlarge",
            region="us-east-1",
            expected_runtime_hours=0.25,
            on_demand_usd_per_hour="3.06",
            prices=str(prices),
            deadline=DEADLINE.isoformat(),
            record_decision=False,
            deferrable=deferrable,
        )
        land >> gate >> window >> EmptyOperator(task_id="retrain")
    return gate, window


def context(task_id: str) -> dict[str, Any]:
    return task_context(task_id, dag_id="nightly", run_id=RUN)


@pytest.mark.parametrize("deferrable", [True, False])
def test_the_gates_hold_counts_until_the_latest_start_plus_its_ttl(
    ledger: Ledger, tmp_path: Path, deferrable: bool
) -> None:
    with time_machine.travel(WINDOW_OPENS, tick=False) as clock:
        prices = tmp_path / "prices.csv"
        write_history(prices, current="1.00")  # 0.50 at 03:00 in the forecast: the window waits for it
        gate, window = nightly(prices, deferrable=deferrable)
        # An upstream task's hold (land's) is not the window's to keep.
        land = f"nightly/{RUN}/land/-1"
        upstream = ledger.reserve("project=churn", "1", holder=land, ttl=timedelta(hours=1))
        assert gate.poke(context("spend_gate"))
        (held,) = [r for r in ledger.open_reservations() if r.holder == f"nightly/{RUN}/retrain/-1"]
        assert held.expires_at == WINDOW_OPENS + timedelta(hours=6)  # 04:00, before the latest start
        if deferrable:
            with pytest.raises(TaskDeferred):
                window.execute(context("spot_window"))
        else:
            assert window.poke(context("spot_window")) is False
        assert ledger.release(upstream.id).expires_at == upstream.expires_at

        # 05:00: the task still waits for spot. Its $8 were free for another run once the hold lapsed at
        # 04:00, and with both billed, $16 against the $10 cap.
        clock.move_to(datetime(2026, 12, 1, 5, 0, tzinfo=timezone.utc))
        with pytest.raises(BudgetExceededError):
            ledger.reserve("project=churn", "8", holder="other/r/train/-1")
        (kept,) = ledger.open_reservations()
        latest_start = DEADLINE - timedelta(hours=0.25, minutes=10)  # 05:35
        assert kept.id == held.id and kept.expires_at == latest_start + timedelta(hours=6)


def window_sensor(prices: Path) -> SpotWindowSensor:
    return SpotWindowSensor(
        task_id="spot_window",
        instance_type="p3.2xlarge",
        region="us-east-1",
        expected_runtime_hours=0.25,
        on_demand_usd_per_hour="3.06",
        prices=str(prices),
        deadline=DEADLINE.isoformat(),
        record_decision=False,
        deferrable=False,
    )


LATEST_START = DEADLINE - timedelta(hours=0.25, minutes=10)  # 05:35


def test_each_gates_hold_counts_by_its_own_reservation_ttl(ledger: Ledger, tmp_path: Path) -> None:
    # Kept by the longest reservation_ttl of the ledger's gates, retrain's 1-hour hold counted until two
    # days after the latest start, as report's 48-hour one.
    with time_machine.travel(WINDOW_OPENS, tick=False):
        prices = tmp_path / "prices.csv"
        write_history(prices, current="1.00")
        with DAG("nightly", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
            retrain_gate = SpendCapSensor(
                task_id="retrain_gate",
                scope="project=churn",
                estimated_usd="8",
                for_task_id="retrain",
                reservation_ttl=timedelta(hours=1),
            )
            report_gate = SpendCapSensor(
                task_id="report_gate",
                scope="project=churn",
                estimated_usd="1",
                for_task_id="{{ 'report' }}",  # rendered as the gate renders it
                reservation_ttl=timedelta(hours=48),
            )
            window = window_sensor(prices)
            retrain, report = EmptyOperator(task_id="retrain"), EmptyOperator(task_id="report")
            retrain_gate >> report_gate >> window >> retrain >> report
        assert retrain_gate.poke(context("retrain_gate"))
        report_gate.render_template_fields(context("report_gate"))
        assert report_gate.poke(context("report_gate"))
        assert window.poke(context("spot_window")) is False
        ends = {r.holder.split("/")[-2]: r.expires_at for r in ledger.open_reservations()}
        assert ends == {
            "retrain": LATEST_START + timedelta(hours=1),
            "report": LATEST_START + timedelta(hours=48),
        }


def test_a_hold_that_ended_before_the_sensor_first_looks_is_warned_about(
    ledger: Ledger, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The gate's 30-minute hold ended while the spot window sat 45 minutes in the queue: the sensor went on
    # without a word, and the task ran with nothing held.
    with time_machine.travel(WINDOW_OPENS, tick=False) as clock:
        prices = tmp_path / "prices.csv"
        write_history(prices, current="1.00")
        with DAG("nightly", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
            gate = SpendCapSensor(
                task_id="spend_gate",
                scope="project=churn",
                estimated_usd="8",
                for_task_id="retrain",
                reservation_ttl=timedelta(minutes=30),
            )
            window = window_sensor(prices)
            gate >> window >> EmptyOperator(task_id="retrain")
        held = gate.poke(context("spend_gate")).xcom_value["reservation_id"]  # type: ignore[union-attr]
        clock.move_to(WINDOW_OPENS + timedelta(minutes=45))
        capsys.readouterr()
        assert window.poke(context("spot_window")) is False
        out = capsys.readouterr().out
        assert (
            f"the budget hold {held} of task 'retrain' ended at 2026-11-30T22:30:00+00:00, before this "
            "sensor could keep it counting" in out
        )
        assert "another run may take its $8.00" in out and "Clear the spend gate 'spend_gate'" in out
        assert ledger.open_reservations() == []  # not brought back: that took the money without a check
        clock.move_to(WINDOW_OPENS + timedelta(minutes=50))
        assert window.poke(context("spot_window")) is False
        assert "the budget hold" not in capsys.readouterr().out  # said once, not at every look


def nightly_behind_one_gate(prices: Path) -> tuple[SpendCapSensor, SpotWindowSensor]:
    with DAG("nightly", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
        gate = SpendCapSensor(
            task_id="spend_gate", scope="project=churn", estimated_usd="8", for_task_id="retrain"
        )
        window = window_sensor(prices)
        gate >> window >> EmptyOperator(task_id="retrain")
    return gate, window


def test_an_unreachable_ledger_is_a_warning_and_the_wait_goes_on(
    ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with time_machine.travel(WINDOW_OPENS, tick=False):
        prices = tmp_path / "prices.csv"
        write_history(prices, current="1.00")
        gate, window = nightly_behind_one_gate(prices)
        assert gate.poke(context("spend_gate"))
        monkeypatch.setenv("COSTAWARE_LEDGER_URL", "postgresql://nobody:x@127.0.0.1:1/none")
        capsys.readouterr()
        assert window.poke(context("spot_window")) is False
        out = capsys.readouterr().out
        assert (
            "could not keep the budget holds of the tasks this sensor waits for (ledger 'costaware_ledger'"
            in out
        )
        assert "they lapse at their own time limit (the gate's reservation_ttl)" in out
        (held,) = ledger.open_reservations()
        assert held.expires_at == WINDOW_OPENS + timedelta(hours=6)


def test_only_the_holds_of_the_waited_for_task_of_this_run_and_map_index_count_longer(
    ledger: Ledger, tmp_path: Path
) -> None:
    from costaware.sensors.gated_holds import keep_gated_holds

    with time_machine.travel(WINDOW_OPENS, tick=False):
        prices = tmp_path / "prices.csv"
        write_history(prices, current="1.00")
        _, window = nightly_behind_one_gate(prices)
        holders = [
            f"nightly/{RUN}/retrain/0",
            f"nightly/{RUN}/retrain/1",
            f"nightly/{RUN}/retrain/-1",
            f"nightly/{RUN}/x/retrain/0",  # another run, whose id extends this one's ('{RUN}/x')
            f"nightlyx/{RUN}/retrain/0",  # another DAG
            f"nightly/{RUN}/retrain/0/egress",  # a data-locality operator's own hold, not the gate's
            f"nightly/{RUN}/spend_gate/0",  # upstream of the sensor
        ]
        for holder in holders:
            ledger.reserve("project=churn", "1", holder=holder)

        def longer(map_index: int) -> list[str]:
            at = task_context("spot_window", dag_id="nightly", run_id=RUN, map_index=map_index)
            return sorted(r.holder for r in keep_gated_holds(window, at, LATEST_START))

        # Mapped, the sensor keeps its own map index's hold only; unmapped, every map index's.
        assert longer(0) == [f"nightly/{RUN}/retrain/0"]
        assert longer(-1) == [f"nightly/{RUN}/retrain/-1", f"nightly/{RUN}/retrain/1"]
        ends = {r.holder: r.expires_at for r in ledger.open_reservations()}
        kept_until, own_end = LATEST_START + timedelta(hours=6), WINDOW_OPENS + timedelta(hours=6)
        assert ends == {holder: kept_until if i < 3 else own_end for i, holder in enumerate(holders)}
