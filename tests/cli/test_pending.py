"""What waits in this machine's spools, in words (``costaware.cli.pending.spooled_said``)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from costaware.cli.pending import SpooledCount, spooled_said

CURRENT = Path("/home/ml/airflow/costaware/spool")
EARLIER = Path("/srv/~/airflow/costaware/spool")


@pytest.mark.parametrize(
    ("counts", "where"),
    [
        # One folder reads "spool", an earlier release's too ("the spools" read as several).
        ([SpooledCount(CURRENT, 2, 0, earlier=False)], f"the spool {CURRENT}"),
        ([SpooledCount(EARLIER, 2, 0, earlier=True)], f"an earlier release's spool {EARLIER}"),
        (
            [SpooledCount(CURRENT, 1, 0, earlier=False), SpooledCount(EARLIER, 1, 0, earlier=True)],
            f"the spools {CURRENT} (1) and an earlier release's {EARLIER} (1)",
        ),
        # A folder holding only bills kept for a person is not one entries wait in.
        (
            [SpooledCount(CURRENT, 0, 1, earlier=False), SpooledCount(EARLIER, 2, 0, earlier=True)],
            f"an earlier release's spool {EARLIER}",
        ),
    ],
)
def test_the_folders_entries_wait_in_are_named_singular_or_plural_by_their_number(
    counts: list[SpooledCount], where: str
) -> None:
    said = spooled_said(counts, "of it")
    assert f"2 cost entries of it wait in {where} (the ledger could not be written then): " in said


@pytest.mark.parametrize(
    ("kept", "held", "said"),
    [
        (1, None, "1 remote bill of it is kept for a person in {unsure} (the ledger"),
        (1, (1, "$2.00"), "1 remote bill of it is kept for a person in {unsure}, its hold reserving $2.00 ("),
        (
            2,
            (2, "$4.00"),
            "2 remote bills of it are kept for a person in {unsure}, their holds reserving $4.00 (",
        ),
        # A bill no budget covers takes no hold: the sum is of those that did.
        (
            3,
            (1, "$2.00"),
            "3 remote bills of it are kept for a person in {unsure}, the hold of 1 of them reserving",
        ),
        (
            3,
            (2, "$4.00"),
            "3 remote bills of it are kept for a person in {unsure}, the holds of 2 of them reserving",
        ),
    ],
)
def test_a_folders_kept_bills_are_said_with_what_their_holds_reserve(
    kept: int, held: tuple[int, str] | None, said: str
) -> None:
    counts = [SpooledCount(CURRENT, 0, kept, earlier=False)]
    kept_held = {CURRENT: held} if held is not None else {}
    assert said.format(unsure=CURRENT / "unsure") in spooled_said(counts, "of it", kept_held=kept_held)


def _kept_bill(uid: str) -> Any:
    """A $2 remote bill of run 'r1' of DAG 'nightly' (tags project=x), as a drain keeps it in spool/unsure."""
    from costaware.core.ledger import Kind, LedgerEntry

    return LedgerEntry(
        dag_id="nightly", run_id="r1", task_id="train", kind=Kind.COMPUTE, usd=Decimal("2"),
        tags={"project": "x"}, entry_uid=uid,
    )  # fmt: skip


@pytest.mark.usefixtures("clock")
def test_a_kept_bills_hold_is_named_as_such_and_as_its_runs_not_as_one_held_outside_airflow(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its holder '<dag>/<run>/<task>/<map index>/unsure/<uid>' is no task holder: under a monthly budget
    # (no run in its key) `report --run-id` of any run said "held outside Airflow ... names no run", and of
    # its own run refused the run as unknown (exit 2), though the hold names both.
    from costaware import Ledger
    from costaware.cli import main
    from costaware.spool_settle import hold_unsure

    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "10")
    assert hold_unsure(ledger, _kept_bill("kept-1")) is not None
    report = ["--ledger-url", ledger_url, "report"]
    # No file of it in this machine's spool: kept on another machine (or moved here since).
    kept = (
        "the budget holds of 1 remote bill of it kept for a person (here or on another machine) reserve "
        "$2.00 (`costaware spool show` lists it where it was kept; `costaware spool drop kept-1` there "
        "frees the hold once the run is found billed already)"
    )
    for of_dag in ([], ["--dag-id", "nightly"]):
        assert main([*report, *of_dag, "--run-id", "r1"]) == 0
        err = capsys.readouterr().err
        assert kept in err and "outside Airflow" not in err
    # Another run's report says nothing of it, as of a hold it cannot be.
    assert main([*report, "--dag-id", "nightly", "--run-id", "r2"]) == 2
    err = capsys.readouterr().err
    assert "no entries for run 'r2'" in err and "outside Airflow" not in err and "kept-1" not in err
    # A hold outside Airflow beside it is still said, and it alone.
    ledger.reserve("project=x", "0.5", holder="my-trainer-7")
    assert main([*report, "--run-id", "r2"]) == 2
    err = capsys.readouterr().err
    assert "1 open hold of 'my-trainer-7' reserves $0.50 but names no run" in err and "kept-1" not in err


@pytest.mark.usefixtures("clock")
def test_a_task_named_unsure_holds_for_its_own_run_not_as_a_kept_bill_of_another(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Task 'unsure' of run 'manual/2026/12' holds as 'retrain/manual/2026/12/unsure/-1': read as a kept bill
    # of run 'manual', task '2026', uid '-1', its own run was refused as unknown (exit 2) and run 'manual'
    # was told to run `costaware spool drop -1`.
    from costaware import Ledger
    from costaware.cli import main
    from costaware.cli.pending import kept_bill_of, what_waits
    from costaware.core.ledger import reservation_holder

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    holder = reservation_holder("retrain", "manual/2026/12", "unsure", -1)
    assert kept_bill_of(holder) is None
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "10")
    ledger.reserve("project=x", "1.5", holder=holder, run_id="manual/2026/12", dag_id="retrain")
    assert what_waits(ledger, "retrain", "manual") == ""
    assert what_waits(ledger, "retrain", "manual/2026/12").startswith("1 open hold of it reserves $1.50")
    report = ["--ledger-url", ledger_url, "report", "--dag-id", "retrain"]
    assert main([*report, "--run-id", "manual/2026/12"]) == 0
    assert "1 open hold of it reserves $1.50" in capsys.readouterr().err
    assert main([*report, "--run-id", "manual"]) == 2
    assert "spool drop" not in capsys.readouterr().err


@pytest.mark.usefixtures("clock")
def test_a_bill_kept_in_this_machines_spool_is_said_once_with_its_hold(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Kept here, one bill was said twice: "1 remote bill of it is kept for a person in .../unsure (...); 1
    # remote bill of it kept for a person holds $2.00 in its budgets (...)", read as two bills.
    from costaware import Ledger
    from costaware.cli import main
    from costaware.ledger_spool import keep_unsure
    from costaware.spool_settle import hold_unsure

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    unsure = tmp_path / "airflow" / "costaware" / "spool" / "unsure"
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=x", "month", "10")
    row = {"entry_uid": "older", "usd": "2", "incurred_at": "2026-12-01T00:00:00+00:00", "try_number": 1}
    kept = keep_unsure(_kept_bill("kept-here"), "costaware_ledger", {"job_id": "j"}, row, ledger=ledger)
    assert kept.hold is not None and (unsure / "kept-here.json").is_file()
    report = ["--ledger-url", ledger_url, "report", "--dag-id", "nightly", "--run-id", "r1"]
    assert main(report) == 0
    err = capsys.readouterr().err
    assert (
        f"1 remote bill of it is kept for a person in {unsure}, its hold reserving $2.00 (the ledger cannot "
        "tell whether a row of the job's name bills it: the drain's log says what to do)"
    ) in err
    assert err.count("remote bill") == 1 and "in its budgets" not in err
    # Another bill's hold with no file here is said apart, as kept here or elsewhere.
    assert hold_unsure(ledger, _kept_bill("kept-there")) is not None
    assert main(report) == 0
    err = capsys.readouterr().err
    assert f"in {unsure}, its hold reserving $2.00 (" in err
    assert (
        "; the budget holds of 1 remote bill of it kept for a person (here or on another machine) reserve "
        "$2.00 (`costaware spool show` lists it where it was kept; `costaware spool drop kept-there` there"
    ) in err
    assert "kept-here" not in err
