"""A kept unsure bill whose JSON holds no bill: read as a file that cannot be told, like a cut-short one."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from costaware.ledger_spool import UNSURE, Kept, UnsureBill, keep_unsure


def _unsure_bill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, Any], Path]:
    """A remote attempt's bill, the ledger row of its job that gives no end, and the spool they go to."""
    from costaware.core.ledger import Kind, LedgerEntry

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    bill = LedgerEntry(
        dag_id="remote_dag", run_id="r", task_id="train", kind=Kind.COMPUTE, usd=Decimal("1.25"),
        quantity=Decimal("0.5"), unit="hour", unit_price_usd=Decimal("2.5"), price_source="remote:local",
        cause="success", note="attempt 1, job train-a1 on local, 1800.0 s billed: ok",
        entry_uid="attempt:this",
    )  # fmt: skip
    row = {"entry_uid": "attempt:older-no-end", "usd": "2.000000", "incurred_at": "2026-12-01T21:00:00+00:00",
           "try_number": 3}  # fmt: skip
    return bill, row, tmp_path / "airflow" / "costaware" / "spool"


@pytest.mark.parametrize(
    "on_file",
    [
        pytest.param({}, id="no-entry"),
        pytest.param({"entry": {}}, id="entry-without-usd"),
        pytest.param({"entry": {"usd": None}}, id="usd-null"),
        pytest.param({"entry": "x"}, id="entry-not-a-dict"),
        # duplicate_check read with .get(): a string or a list raised AttributeError.
        pytest.param({"entry": {"usd": "1.25"}, "duplicate_check": "x"}, id="check-a-string"),
        pytest.param({"entry": {"usd": "1.25"}, "duplicate_check": ["x"]}, id="check-a-list"),
        pytest.param({"entry": {"usd": "1.25"}, "duplicate_check": ""}, id="check-an-empty-string"),
        pytest.param({"entry": {"usd": "1.25"}, "duplicate_check": []}, id="check-an-empty-list"),
    ],
)
def test_a_kept_file_holding_no_bill_is_not_kept_and_the_new_bill_is_logged_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, on_file: dict[str, Any]
) -> None:
    # Read as a bill, the first three were "kept at another figure" ($None: the kill said it keeps this
    # job's bill of $None, and the bill was in no file) and {"entry": "x"} raised AttributeError.
    bill, row, spool = _unsure_bill(tmp_path, monkeypatch)
    kept = spool / UNSURE / "attempt:this.json"
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps(on_file))
    dearer = replace(bill, usd=Decimal("3.50"))
    with caplog.at_level(logging.ERROR, logger="costaware.ledger_spool"):
        assert keep_unsure(dearer, "costaware_ledger", {"job_id": "train-a1"}, row) == UnsureBill(
            Kept.NOT_KEPT, kept
        )
    assert json.loads(kept.read_text()) == on_file  # left as it is
    (said,) = [r.getMessage() for r in caplog.records]
    assert "the bill of job train-a1 (entry attempt:this, $3.50) was not written" in said
    assert f"{kept}, kept for it by an earlier try, cannot be read as a bill" in said
    assert "None" not in said
    logged = json.loads(said[said.index("{") :])
    assert Decimal(logged["entry"]["usd"]) == Decimal("3.50")
    assert logged["entry"]["entry_uid"] == "attempt:this"


def test_a_kept_file_holding_a_bill_of_zero_dollars_is_still_read_as_a_bill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # $0 is a figure: only a missing one makes the file unreadable as a bill.
    bill, row, spool = _unsure_bill(tmp_path, monkeypatch)
    kept = spool / UNSURE / "attempt:this.json"
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({"entry": {"usd": "0"}, "duplicate_check": {"job_id": "train-a1"}}))
    assert keep_unsure(bill, "costaware_ledger", {"job_id": "train-a1"}, row) == UnsureBill(
        Kept.EARLIER_AT_ANOTHER_FIGURE, kept, "0"
    )
