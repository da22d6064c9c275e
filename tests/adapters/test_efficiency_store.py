from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware import Ledger
from costaware.adapters.ledger.efficiency import (
    measurements,
    outcomes,
    record_outcome,
    record_utilization,
    run_outcome,
)
from costaware.core.efficiency import GIB, Measurement
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry
from costaware.core.outcomes import ReproRecord, RunOutcome

T0 = datetime(2026, 11, 2, 3, 0, tzinfo=timezone.utc)


def compute(run: str, usd: str, task: str = "retrain", outcome: str = "success") -> LedgerEntry:
    return LedgerEntry(
        dag_id="nightly",
        run_id=run,
        task_id=task,
        kind=Kind.COMPUTE,
        usd=Decimal(usd),
        instance_type="c5.4xlarge",
        region="us-east-1",
        market="on_demand",
        incurred_at=T0,
        outcome=outcome,
    )


def measured(entry: LedgerEntry, *, cpu: float = 30.0, peak_gib: float = 0.5) -> Measurement:
    return Measurement(
        dag_id=entry.dag_id,
        task_id=entry.task_id,
        run_id=entry.run_id,
        try_number=entry.try_number,
        instance_type=None,  # the entry's instance wins when read back
        region=None,
        market=None,
        usd=Decimal(0),
        wall_seconds=60.0,
        cpu_seconds=cpu,
        peak_memory_bytes=int(peak_gib * GIB),
        vcpus=16,
        memory_gib=Decimal(32),
        runs_per_month=30.0,
        source="local",
        backend_metrics={"note": "x"},
        measured_at=entry.incurred_at,
    )


def test_utilization_is_stored_next_to_its_entry(any_ledger: Ledger) -> None:
    ok, failed = compute("r1", "0.011333"), compute("r2", "0.005", outcome="failed")
    for entry in (ok, failed):
        any_ledger.record(entry)
        assert record_utilization(any_ledger, entry.entry_uid, measured(entry))
    assert not record_utilization(any_ledger, ok.entry_uid, measured(ok))  # once per entry
    (m,) = measurements(any_ledger, dag_id="nightly")
    assert (m.run_id, m.instance_type, m.market, m.usd) == (
        "r1",
        "c5.4xlarge",
        "on_demand",
        Decimal("0.011333"),
    )
    assert m.cpu_utilization == pytest.approx(30 / (60 * 16))
    assert m.peak_memory_gib == pytest.approx(0.5)
    assert m.backend_metrics == {"note": "x"} and m.measured_at == T0
    assert len(measurements(any_ledger, outcome=None)) == 2
    assert measurements(any_ledger, task_id="other") == []
    assert measurements(any_ledger, since=T0 + timedelta(seconds=1)) == []


def test_retrain_then_promotion_fill_one_outcome_with_the_run_cost(any_ledger: Ledger) -> None:
    any_ledger.record(compute("r1", "0.25"))
    any_ledger.record(compute("r1", "0.05", task="promote"))
    record = ReproRecord(data_fingerprint="f" * 64, trainer="sklearn-sgd", seeds={"seed": 0})
    record_outcome(
        any_ledger,
        RunOutcome("nightly", "r1", "v1", task_id="retrain", training_rows=1000, iterations=5, record=record),
    )
    record_outcome(
        any_ledger,
        RunOutcome(
            "nightly", "r1", "v1", metric="roc_auc", metric_value=0.71, champion_metric=0.70, promoted=True
        ),
    )
    (o,) = run_outcome(any_ledger, "r1")
    assert (o.task_id, o.training_rows, o.iterations, o.iteration_unit) == ("retrain", 1000, 5, "epochs")
    assert (o.metric, o.metric_value, o.champion_metric, o.promoted) == ("roc_auc", 0.71, 0.70, True)
    assert o.record is not None and o.record.digest == record.digest
    assert o.usd == Decimal("0.30")
    assert o.usd_per_unit_gain == Decimal("30.000000")
    assert [x.run_id for x in outcomes(any_ledger, dag_id="nightly")] == ["r1"]


def test_unknown_run_is_a_clear_error(any_ledger: Ledger) -> None:
    record_outcome(any_ledger, RunOutcome("nightly", "r1", "v1"))
    with pytest.raises(
        ConfigurationError, match="no retrain outcome for run 'nope'; recent runs with outcomes: r1"
    ):
        run_outcome(any_ledger, "nope")


def test_a_metric_of_zero_and_a_refusal_are_kept(any_ledger: Ledger) -> None:
    record_outcome(
        any_ledger,
        RunOutcome("nightly", "r1", "v1", task_id="retrain", iterations=40, iteration_unit="rounds"),
    )
    record_outcome(
        any_ledger,
        RunOutcome(
            "nightly", "r1", "v1", metric="brier", metric_value=0.0, champion_metric=0.1, promoted=False
        ),
    )
    (o,) = run_outcome(any_ledger, "r1")
    assert (o.metric_value, o.champion_metric, o.promoted) == (0.0, 0.1, False)
    assert (o.iterations, o.iteration_unit, o.task_id) == (40, "rounds", "retrain")
