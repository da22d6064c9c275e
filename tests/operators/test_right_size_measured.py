from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest

from costaware import Ledger
from costaware.adapters.ledger.efficiency import record_utilization
from costaware.core.efficiency import GIB, Measurement
from costaware.core.ledger import Kind, LedgerEntry
from costaware.operators.right_size import RightSizeOperator

TYPES = ["m5.large", "c5.xlarge", "m5.2xlarge"]


def measured_ledger(ledger_url: str, tries: int, peak_gib: float) -> Ledger:
    ledger = Ledger.from_url(ledger_url)
    for n in range(tries):
        entry = LedgerEntry(
            dag_id="retrain",
            run_id=f"r{n}",
            task_id="train",
            kind=Kind.COMPUTE,
            usd=Decimal("0.4"),
            instance_type="m5.2xlarge",
            region="us-east-1",
            market="on_demand",
            quantity=Decimal("1.0"),
        )
        ledger.record(entry)
        measurement = Measurement(
            "retrain",
            "train",
            entry.run_id,
            1,
            None,
            None,
            None,
            Decimal(0),
            3600.0,
            3600.0,
            int(peak_gib * GIB),
        )
        record_utilization(ledger, entry.entry_uid, measurement)
    return ledger


def run(**kwargs: object) -> dict[str, object]:
    operator = RightSizeOperator(
        task_id="right_size",
        for_task_id="train",
        **{
            "memory_gib": "6",
            "instance_types": TYPES,
            "markets": ["on_demand"],
            "throughput_exponent": 0.0,  # single-threaded: the same runtime on every type
            **kwargs,
        },  # type: ignore[arg-type]
    )
    return operator.execute({"ti": SimpleNamespace(dag_id="retrain")})  # type: ignore[arg-type]


def test_measured_peak_memory_rules_out_types_the_declared_need_allowed(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    measured_ledger(ledger_url, tries=3, peak_gib=7.0)  # 7 GiB x 1.25 = 8.75 GiB: 8 GiB types no longer fit
    declared = run()
    assert declared["instance_type"] == "m5.large" and declared["sizing"] == "declared"
    measured = run(sizing="measured")
    assert measured["instance_type"] == "m5.2xlarge"
    assert str(measured["sizing"]).startswith("measured: peak 7.00 GiB")
    rejected = {r["candidate"]: r["why"] for r in measured["rejected"]}  # type: ignore[union-attr]
    assert rejected["m5.large"] == "8 GiB < 8.750 GiB needed"


def test_too_few_measured_tries_fall_back_to_the_declared_need(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    measured_ledger(ledger_url, tries=2, peak_gib=7.0)
    result = run(sizing="measured")
    assert result["instance_type"] == "m5.large"
    assert str(result["sizing"]).startswith("declared (2 measured tries, 3 needed")


def test_unknown_sizing_is_refused() -> None:
    with pytest.raises(ValueError, match="sizing must be 'declared' or 'measured', got 'guess'"):
        RightSizeOperator(task_id="x", for_task_id="train", memory_gib="1", sizing="guess")


def test_measured_sizing_keeps_the_architecture_the_task_was_measured_on(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As the efficiency report keeps it: a task measured on x86_64 was sent to a cheaper Graviton type.
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    measured_ledger(ledger_url, tries=3, peak_gib=7.0)  # on m5.2xlarge, x86_64
    both = ["m6g.2xlarge", "m5.2xlarge"]  # the arm64 one is cheaper and fits
    assert run(instance_types=both)["instance_type"] == "m6g.2xlarge"  # declared: any architecture
    assert run(instance_types=both, sizing="measured")["instance_type"] == "m5.2xlarge"
    assert run(instance_types=both, sizing="measured", arch="arm64")["instance_type"] == "m6g.2xlarge"


def test_listed_types_of_another_architecture_only_are_not_ruled_out_by_the_measured_one(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A move to Graviton: the task was measured on x86_64, the list names arm64 types only.
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    measured_ledger(ledger_url, tries=3, peak_gib=7.0)
    assert run(instance_types=["m6g.2xlarge"], sizing="measured")["instance_type"] == "m6g.2xlarge"
