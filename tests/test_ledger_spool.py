"""The spool's drain results summed, as ``costaware spool drain`` and the listener add up their folders'."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from costaware.ledger_spool import UNSURE, Kept, UnsureBill, keep_unsure
from costaware.ledger_spool_drain import DrainResult, combined


def test_drain_results_sum_field_by_field_and_merge_what_was_unavailable() -> None:
    current = DrainResult(
        written=2, already_in_ledger=1, refused=1, waiting=3, billed_already=1, unsure=0,
        unavailable={"a": "down", "b": "no file"},
    )  # fmt: skip
    earlier = DrainResult(
        written=5, already_in_ledger=6, refused=0, waiting=1, billed_already=2, unsure=4,
        unavailable={"b": "gone"},
    )  # fmt: skip
    assert current + earlier == DrainResult(
        written=7,
        already_in_ledger=7,
        refused=1,
        waiting=4,
        billed_already=3,
        unsure=4,
        # A ledger both drains found unavailable: the later folder's reason, as the loops kept it.
        unavailable={"a": "down", "b": "gone"},
    )
    # Operands stay as they were (the CLI reads each folder's result after the sum).
    assert current.written == 2 and current.unavailable == {"a": "down", "b": "no file"}


def test_combined_drains_of_no_folder_or_with_no_unavailable_map_read_as_nothing_done() -> None:
    assert combined([]) == DrainResult(unavailable={})
    assert combined([DrainResult(written=1), DrainResult(unsure=2)]) == DrainResult(
        written=1, unsure=2, unavailable={}
    )


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


def test_a_bill_that_cannot_be_kept_in_unsure_is_logged_with_the_row_and_what_to_do_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The log line is all that holds the bill then: it named no row to look at, and said to save the JSON
    # in unsure/, which nothing drains, and to read a `spool show` help that says nothing of it.
    bill, row, spool = _unsure_bill(tmp_path, monkeypatch)
    spool.mkdir(parents=True)
    (spool / UNSURE).write_text("a plain file where the folder goes")
    with caplog.at_level(logging.ERROR, logger="costaware.ledger_spool"):
        kept = keep_unsure(bill, "costaware_ledger", {"job_id": "train-a1"}, row)
    assert kept == UnsureBill(Kept.NOT_KEPT, None)
    (said,) = [r.getMessage() for r in caplog.records]
    assert "the bill of job train-a1 (entry attempt:this, $1.25) was not written" in said
    assert (
        "entry attempt:older-no-end of the same job ($2.000000, written 2026-12-01T21:00:00+00:00, try 3)"
        in said
    )
    assert (
        f'save the JSON that ends this line as {spool / "attempt:this.json"} with "another_run": true' in said
    )
    assert "`costaware spool drain`; if it bills this run, drop it" in said and "spool show" not in said
    saved = json.loads(said[said.index("{") :])
    assert saved["entry"]["entry_uid"] == "attempt:this" and saved["duplicate_check"] == {
        "job_id": "train-a1"
    }
    assert sorted(p.name for p in spool.iterdir()) == [UNSURE]  # nothing written anywhere


def test_a_second_bill_of_the_same_attempt_leaves_the_kept_file_a_person_marked_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A new try billing the job again rewrote unsure/<uid>.json: the "another_run" a person added, not
    # moved back yet, was gone, and the bill went back to unsure at the drain.
    bill, row, spool = _unsure_bill(tmp_path, monkeypatch)
    kept = keep_unsure(bill, "costaware_ledger", {"job_id": "train-a1"}, row).path
    assert kept == spool / UNSURE / "attempt:this.json"
    marked = {**json.loads(kept.read_text()), "another_run": True}
    kept.write_text(json.dumps(marked))
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="costaware.ledger_spool"):
        assert keep_unsure(bill, "costaware_ledger", {"job_id": "train-a1"}, row) == UnsureBill(
            Kept.EARLIER, kept, "1.25"
        )
    assert json.loads(kept.read_text()) == marked
    (said,) = [r.getMessage() for r in caplog.records]
    assert "the bill attempt:this.json (kept there already: left as it is) (job train-a1, $1.25)" in said


def test_a_second_bill_of_the_same_attempt_at_another_figure_names_the_files_and_logs_itself_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Kept at $1.25, then the same uid billed at $3.50: the file held $1.25, the ERROR said the kept file
    # was "(job train-a1, $3.50)", and the $3.50 bill was in neither the file nor the log.
    from dataclasses import replace

    bill, row, _spool = _unsure_bill(tmp_path, monkeypatch)
    kept = keep_unsure(bill, "costaware_ledger", {"job_id": "train-a1"}, row).path
    assert kept is not None
    caplog.clear()
    dearer = replace(bill, usd=Decimal("3.50"))
    with caplog.at_level(logging.ERROR, logger="costaware.ledger_spool"):
        assert keep_unsure(dearer, "costaware_ledger", {"job_id": "train-a1"}, row) == UnsureBill(
            Kept.EARLIER_AT_ANOTHER_FIGURE, kept, "1.25"
        )
    assert Decimal(json.loads(kept.read_text())["entry"]["usd"]) == Decimal("1.25")
    kept_again, new_bill = [r.getMessage() for r in caplog.records]
    assert "(kept there already: left as it is) (job train-a1, $1.25)" in kept_again
    assert "3.5" not in kept_again
    assert f"billed again at $3.50 under entry attempt:this, where {kept} says $1.25" in new_bill
    logged = json.loads(new_bill[new_bill.index("{") :])
    assert (
        Decimal(logged["entry"]["usd"]) == Decimal("3.50") and logged["entry"]["entry_uid"] == "attempt:this"
    )
    # The same figure again: said once, as before.
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="costaware.ledger_spool"):
        keep_unsure(bill, "costaware_ledger", {"job_id": "train-a1"}, row)
    assert len(caplog.records) == 1


def test_a_second_bill_where_the_kept_file_cannot_be_read_says_so_and_logs_itself_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The kept file cut short: its figure was read as the new bill's ("kept there already ... $3.50" of a
    # file holding no figure), and the $3.50 bill was in neither the file nor the log.
    from dataclasses import replace

    bill, row, spool = _unsure_bill(tmp_path, monkeypatch)
    kept = keep_unsure(bill, "costaware_ledger", {"job_id": "train-a1"}, row).path
    assert kept is not None
    cut_short = kept.read_text()[:40]
    kept.write_text(cut_short)
    caplog.clear()
    dearer = replace(bill, usd=Decimal("3.50"))
    with caplog.at_level(logging.ERROR, logger="costaware.ledger_spool"):
        # Not kept: the file stands for no bill that can be told, so no caller may say this one waits there.
        assert keep_unsure(dearer, "costaware_ledger", {"job_id": "train-a1"}, row) == UnsureBill(
            Kept.NOT_KEPT, kept
        )
    assert kept.read_text() == cut_short
    (said,) = [r.getMessage() for r in caplog.records]
    assert "the bill of job train-a1 (entry attempt:this, $3.50) was not written" in said
    assert f"{kept}, kept for it by an earlier try, cannot be read as a bill" in said
    assert "Replace that file with the JSON that ends this line" in said and str(spool) in said
    # Not "delete the file": deleted by hand, the hold an earlier try kept for it stayed held 30 days.
    assert "if it bills this run, run `costaware spool drop attempt:this`" in said
    assert "delete the file" not in said
    logged = json.loads(said[said.index("{") :])
    assert (
        Decimal(logged["entry"]["usd"]) == Decimal("3.50") and logged["entry"]["entry_uid"] == "attempt:this"
    )


def test_a_bill_kept_earlier_at_the_same_figure_reports_the_figure_as_the_file_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # UnsureBill.file_usd is what the file holds: for a file of "1.250000" it gave the new bill's "1.25".
    bill, row, _spool = _unsure_bill(tmp_path, monkeypatch)
    kept = keep_unsure(bill, "costaware_ledger", {"job_id": "train-a1"}, row).path
    assert kept is not None
    on_file = json.loads(kept.read_text())
    on_file["entry"]["usd"] = "1.250000"
    kept.write_text(json.dumps(on_file))
    again = keep_unsure(bill, "costaware_ledger", {"job_id": "train-a1"}, row)
    assert again == UnsureBill(Kept.EARLIER, kept, "1.250000")


def test_a_spooled_stop_bill_of_a_second_run_under_the_name_is_written_under_its_run(
    tmp_path: Path, ledger: Any
) -> None:
    # A cleared task's new try took the job's name (its pod deleted); its kill's bill, keyed by the name
    # as a stop's is, waited in the spool while the earlier run's kill bill took the name's key. Drained,
    # the ledger dropped it on the key (the drain said it wrote it): the second run went unbilled.
    from dataclasses import replace
    from datetime import datetime, timezone

    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain
    from costaware.training.attempt_duplicates import DuplicateCheck
    from costaware.training.remote import attempt_entry, attempt_key, attempt_uid

    task = {"dag_id": "d", "run_id": "r", "task_id": "train", "map_index": -1}
    name_key = attempt_uid(attempt_key(task, "train-a1", legacy=True))

    def stop_bill(run_token: str, seconds: float, ended: float) -> Any:
        job = {"job_id": "train-a1", "ended_at": ended, "billable_seconds": seconds,
               "instance_type": "m5.large", "market": "spot", "state": "interrupted"}  # fmt: skip
        entry = attempt_entry(
            identity=task, attempt=1, job=job, usd_per_hour=Decimal("1"), on_demand_usd_per_hour=None,
            region="us-east-1", backend="kubernetes", tags={}, cause="killed", run_token=run_token,
        )  # fmt: skip
        return replace(entry, entry_uid=name_key)

    ended = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc).timestamp()
    assert ledger.record(stop_bill("uid-a", 600, ended))
    second = stop_bill("uid-b", 300, ended + 3 * 3600)
    check = DuplicateCheck(
        entry_uid=name_key, quantity=str(second.quantity), job_id="train-a1", ended_at=ended + 3 * 3600,
        billable_seconds=300, instances=1, backend="kubernetes", identity=task, keyed_by_name=True,
        run_token="uid-b",
    )  # fmt: skip
    spool = tmp_path / "spool"
    spool_entry(spool, second, "costaware_ledger", retrying=True, duplicate_check=check.to_json())
    assert drain(spool, lambda conn_id: ledger).written == 1
    billed = {row["entry_uid"]: row["quantity"] for row in ledger.entries()}
    by_run = attempt_uid(attempt_key(task, "train-a1", legacy=True, run_token="uid-b"))
    assert billed == {name_key: Decimal("0.166667"), by_run: second.quantity}
    # The same bill spooled again (a kill repeated): found under its run's key, billed once.
    spool_entry(spool, second, "costaware_ledger", retrying=True, duplicate_check=check.to_json())
    assert drain(spool, lambda conn_id: ledger).billed_already == 1
    assert len(ledger.entries()) == 2


def test_a_second_runs_stop_bill_kept_in_unsure_and_re_keyed_at_its_drain_settles_its_own_hold(
    tmp_path: Path, ledger: Any
) -> None:
    # Run 2's stop bill was kept in spool/unsure under the name's key, with a hold for it under that key. A
    # person marked it another_run; the drain keyed it by name + run (run 1's row holds the name's key) and
    # looked for the hold under the new key: none, so the bill was recorded alone and its hold stayed open
    # for 30 days, the bill counted spent and held.
    from dataclasses import replace
    from datetime import datetime, timedelta, timezone

    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain
    from costaware.spool_settle import unsure_holder
    from costaware.training.attempt_duplicates import DuplicateCheck
    from costaware.training.remote import attempt_entry, attempt_key, attempt_uid

    task = {"dag_id": "d", "run_id": "r", "task_id": "train", "map_index": -1}
    name_key = attempt_uid(attempt_key(task, "train-a1", legacy=True))

    def stop_bill(at: datetime, seconds: float, run_token: str, **changes: Any) -> Any:
        job = {"job_id": "train-a1", "ended_at": at.timestamp(), "billable_seconds": seconds,
               "instance_type": "m5.large", "market": "spot", "state": "interrupted"}  # fmt: skip
        entry = attempt_entry(
            identity=task, attempt=1, job=job, usd_per_hour=Decimal("1.00"), on_demand_usd_per_hour=None,
            region="us-east-1", backend="local", tags={"project": "churn"},
        )  # fmt: skip
        head, reason = entry.note.split(": ", 1)
        mark = f", run {run_token}" if run_token else ""
        note = f"{head.split(', ended ')[0]}{mark}: {reason}"
        changes = {"entry_uid": name_key, "cause": "killed", "incurred_at": at, **changes}
        return replace(entry, note=note, **changes)

    ledger.set_budget("project=churn", "month", "100")
    killed_at = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
    assert ledger.record(stop_bill(killed_at, 600, "a" * 32))
    second_killed_at = killed_at + timedelta(hours=1, seconds=900)
    second = stop_bill(second_killed_at, 930, "b" * 32)
    # A row of the name that marks no run and gives no end, written after run 2's stop: unsure.
    later = stop_bill(killed_at + timedelta(hours=3), 60, "", entry_uid="x" * 32)
    assert ledger.record(later)
    check = DuplicateCheck(
        entry_uid=second.entry_uid, quantity=str(second.quantity), job_id="train-a1",
        ended_at=(second_killed_at + timedelta(seconds=30)).timestamp(), billable_seconds=930, instances=1,
        backend="local", identity=task, keyed_by_name=True, run_token="b" * 32,
    )  # fmt: skip
    spool = tmp_path / "spool"
    spool_entry(spool, second, "costaware_ledger", retrying=True, duplicate_check=check.to_json())
    assert drain(spool, lambda _conn_id: ledger).unsure == 1
    kept = spool / UNSURE / f"{second.entry_uid}.json"
    assert len(ledger.open_holds_of(unsure_holder(second))) == 1
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "another_run": True}))
    kept.replace(spool / kept.name)
    assert drain(spool, lambda _conn_id: ledger).written == 1
    by_run = attempt_uid(attempt_key(task, "train-a1", legacy=True, run_token="b" * 32))
    (written,) = [row for row in ledger.entries() if row["entry_uid"] == by_run]
    assert written["usd"] == second.usd and written["reservation_id"] is not None
    assert ledger.open_holds_of(unsure_holder(second)) == []
    (usage,) = ledger.usage("project=churn")
    assert usage.reserved_usd == 0


#: The hold of the task ``_spooled_bill`` bills.
TASK_HOLDER = "retrain/r1/train/-1"


def _holds_of_the_task(ledger: Any) -> list[tuple[Decimal, Decimal]]:
    """The open holds of ``TASK_HOLDER``: what each holds and what entries paid from it."""
    holds = ledger.open_holds_of(TASK_HOLDER)
    paid = ledger.paid_from([hold.id for hold in holds])
    return [(hold.usd, paid.get(hold.id, Decimal(0))) for hold in holds]


def _spooled_bill(usd: str, note: str = "try 1") -> Any:
    from costaware.core.ledger import Kind, LedgerEntry

    return LedgerEntry(
        dag_id="retrain", run_id="r1", task_id="train", kind=Kind.COMPUTE, usd=Decimal(usd), note=note,
        tags={"project": "churn"}, entry_uid="bill-1",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("held", "retrying"),
    [(False, False), (True, False), (True, True)],
    ids=["recorded-alone", "settling-the-hold", "paid-from-the-retry-hold"],
)
def test_a_spooled_entry_the_ledger_has_already_is_said_so_not_said_written(
    tmp_path: Path, ledger: Any, caplog: pytest.LogCaptureFixture, held: bool, retrying: bool
) -> None:
    # The ledger keeps one entry per uid, so a spooled entry written meanwhile (the listener's own write
    # that timed out after its commit, a spool file copied back) was dropped: the drain still said "wrote
    # spooled ledger entry", as record_and_settle told it nothing either way.
    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain

    # A $1 cap the stored row passed already: nor is the entry said to have taken the budget past it.
    ledger.set_budget("project=churn", "month", "1")
    if held:
        ledger.reserve("project=churn", "1", holder=TASK_HOLDER, run_id="r1", dag_id="retrain")
    assert ledger.record(_spooled_bill("1.25"))
    spool = tmp_path / "spool"
    spool_entry(spool, _spooled_bill("1.25"), "costaware_ledger", retrying=retrying)
    with caplog.at_level(logging.INFO, logger="costaware.ledger_spool"):
        result = drain(spool, lambda _conn_id: ledger)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "costaware.ledger_spool"]
    assert said == [
        (
            logging.INFO,
            "costaware: spooled entry bill-1.json is in the ledger already as bill-1: not written again",
        ),
    ]
    # Counted apart: as "1 written", `costaware spool drain` said a bill the ledger had was billed now.
    assert (result.written, result.already_in_ledger) == (0, 1)
    assert [row["usd"] for row in ledger.entries()] == [Decimal("1.25")]
    assert list(spool.glob("*.json")) == []  # done with: nothing waits to be written again
    # The hold as record_and_settle leaves it, the entry new or not: settled with a duplicate (the task is
    # over, its cost in the ledger), else held open for a retry at what it held (the duplicate paid nothing).
    assert _holds_of_the_task(ledger) == ([(Decimal("1"), Decimal("0"))] if retrying else [])


def test_a_spooled_entry_the_ledger_has_at_another_figure_is_warned_of_with_both(
    tmp_path: Path, ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The same uid at another amount or note is two costs keyed alike, or one priced twice: the stored row
    # stands, and the drain said it wrote the other.
    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain

    assert ledger.record(_spooled_bill("1.25"))
    spool = tmp_path / "spool"
    spool_entry(spool, _spooled_bill("3.50", note="try 1, repriced"), "costaware_ledger", retrying=False)
    with caplog.at_level(logging.INFO, logger="costaware.ledger_spool"):
        drain(spool, lambda _conn_id: ledger)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "costaware.ledger_spool"]
    assert said == [
        (
            logging.WARNING,
            "costaware: spooled entry bill-1.json ($3.50, note 'try 1, repriced') is not written: the "
            "ledger has bill-1 already at $1.25 (note 'try 1'), which it keeps. Two costs keyed alike, or "
            "one priced twice: compare them, and record the difference by hand if both were spent",
        )
    ]
    assert [(row["usd"], row["note"]) for row in ledger.entries()] == [(Decimal("1.25"), "try 1")]


def test_a_spooled_egress_the_ledger_has_already_is_counted_as_such_not_as_written(
    tmp_path: Path, ledger: Any
) -> None:
    # A killed try's egress spooled while its direct write's answer was lost: the ledger has its key.
    from dataclasses import replace

    from costaware.core.ledger import Kind
    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain
    from costaware.ledger_spool_egress import EgressRun

    run = EgressRun(job_name="train-a1", run_token="", started_at=None)
    egress = replace(_spooled_bill("0.06"), kind=Kind.EGRESS, entry_uid="egress:train-a1")
    assert ledger.record(egress)
    spool = tmp_path / "spool"
    spool_entry(spool, egress, "costaware_ledger", retrying=False, egress_run=run.to_json())
    result = drain(spool, lambda _conn_id: ledger)
    assert (result.written, result.already_in_ledger) == (0, 1)
    assert [row["entry_uid"] for row in ledger.entries()] == ["egress:train-a1"]
    assert list(spool.glob("*.json")) == []
    spool_entry(spool, replace(egress, entry_uid="egress:train-a2"), "costaware_ledger", retrying=False,
                egress_run=replace(run, job_name="train-a2").to_json())  # fmt: skip
    result = drain(spool, lambda _conn_id: ledger)
    assert (result.written, result.already_in_ledger) == (1, 0)


def test_a_spooled_entry_the_ledger_lacks_is_said_written(
    tmp_path: Path, ledger: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from costaware.ledger_spool import spool_entry
    from costaware.ledger_spool_drain import drain

    spool = tmp_path / "spool"
    spool_entry(spool, _spooled_bill("1.25"), "costaware_ledger", retrying=False)
    with caplog.at_level(logging.INFO, logger="costaware.ledger_spool"):
        assert drain(spool, lambda _conn_id: ledger).written == 1
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "costaware.ledger_spool"]
    assert said == [(logging.INFO, "costaware: wrote spooled ledger entry bill-1.json")]


@pytest.mark.parametrize(
    ("held", "retrying", "written_before"),
    [
        (False, False, False),
        (True, False, False),
        (True, True, False),
        (True, False, True),
        (True, True, True),
    ],
    ids=[
        "recorded-alone",
        "settling-the-hold",
        "paid-from-the-retry-hold",
        "settling-the-hold-with-a-row-written-before",
        "retry-hold-beside-a-row-written-before",
    ],
)
def test_record_and_settle_tells_whether_the_entry_was_new(
    ledger: Any, held: bool, retrying: bool, written_before: bool
) -> None:
    from costaware.ledger_spool import record_and_settle

    ledger.set_budget("project=churn", "month", "100")
    if held:
        ledger.reserve("project=churn", "5", holder=TASK_HOLDER, run_id="r1", dag_id="retrain")
    if written_before:
        # The listener's own write that committed, its answer lost before it settled: the row alone.
        assert ledger.record(_spooled_bill("1.25"))
    assert record_and_settle(ledger, _spooled_bill("1.25"), retrying=retrying) is not written_before
    after_first = _holds_of_the_task(ledger)
    assert record_and_settle(ledger, _spooled_bill("1.25"), retrying=retrying) is False
    assert [row["usd"] for row in ledger.entries()] == [Decimal("1.25")]
    if not held or not retrying:
        # Settled by the entry, or by its duplicate where the row was written before: the task is over.
        assert _holds_of_the_task(ledger) == []
        return
    # Held open for the retry; the duplicate pays nothing from it and grows it no further.
    paid = Decimal("0") if written_before else Decimal("1.25")
    assert after_first == [(Decimal("5") + paid, paid)]
    assert _holds_of_the_task(ledger) == after_first
