"""A failed try that will be retried gets its task's hold grown back for the retry, as far as caps allow."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from services import fresh_postgres_database

from costaware import Ledger
from costaware.core.errors import BudgetExceededError, ConfigurationError
from costaware.core.ledger import LedgerEntry
from costaware.ledger_spool import record_and_settle

HOLDER = "retrain/r1/train/-1"


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Ledger]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        url = fresh_postgres_database(request.getfixturevalue("postgres_url"))
    ledger = Ledger.from_url(url)
    yield ledger
    ledger.dispose()


def _try_bill(usd: str, try_number: int) -> LedgerEntry:
    return LedgerEntry(
        dag_id="retrain",
        run_id="r1",
        task_id="train",
        kind="compute",
        usd=Decimal(usd),
        try_number=try_number,
        tags={"project": "churn"},
    )


def _committed(ledger: Ledger) -> Decimal:
    usage = ledger.usage("project=churn")[0]
    return usage.spent_usd + usage.reserved_usd


def test_a_retry_gets_its_hold_back_so_another_run_cannot_take_the_room(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Try 1 paid $5 of its $6 hold; the $5 it freed went to another run's $4, and try 2 billed $6 from the
    # $1 left: $11 spent, $15 committed against the cap.
    any_ledger.set_budget("project=churn", "month", "11")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")

    with caplog.at_level(logging.WARNING):
        record_and_settle(any_ledger, _try_bill("5", 1), retrying=True)

    assert any_ledger.unpaid(held.id)[0] == 6  # as much for the retry as try 1 had
    assert _committed(any_ledger) == 11
    with pytest.raises(BudgetExceededError, match=r"has \$0.00 left"):
        any_ledger.reserve("project=churn", "4", holder="retrain/r2/train/-1", run_id="r2", dag_id="retrain")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    record_and_settle(any_ledger, _try_bill("6", 2))
    usage = any_ledger.usage("project=churn")[0]
    assert (usage.spent_usd, usage.reserved_usd) == (11, 0)


def test_a_retry_whose_budget_has_too_little_room_is_warned_with_the_shortfall(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # The probe's numbers: a $10 cap has $4 of room for the $5 try 1 paid: $1 short.
    any_ledger.set_budget("project=churn", "month", "10")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")

    with caplog.at_level(logging.WARNING):
        record_and_settle(any_ledger, _try_bill("5", 1), retrying=True)

    assert any_ledger.unpaid(held.id)[0] == 5
    assert _committed(any_ledger) == 10
    with pytest.raises(BudgetExceededError):
        any_ledger.reserve("project=churn", "4", holder="retrain/r2/train/-1", run_id="r2", dag_id="retrain")
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = f"the hold {held.id} of retrain.train is held again for its retry $1.00 short of the $6.00"
    assert said in warning
    assert "budget 'project=churn/month (" in warning and "$5.00 reserved of its $10.00 cap" in warning
    assert "may pass that cap by up to $1.00" in warning
    record_and_settle(any_ledger, _try_bill("6", 2))
    assert any_ledger.usage("project=churn")[0].spent_usd == 11  # past the cap by the shortfall, no more


def test_a_try_written_again_grows_its_hold_once(any_ledger: Ledger) -> None:
    # A drain writing a spooled entry that had gone in grew the hold a second time.
    any_ledger.set_budget("project=churn", "month", "100")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")
    bill = _try_bill("5", 1)

    record_and_settle(any_ledger, bill, retrying=True)
    record_and_settle(any_ledger, bill, retrying=True)

    (hold,) = any_ledger.open_reservations()
    assert (hold.id, hold.usd, any_ledger.unpaid(held.id)[0]) == (held.id, 11, 6)


def test_each_retry_gets_back_what_its_try_paid(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "100")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")

    record_and_settle(any_ledger, _try_bill("5", 1), retrying=True)
    record_and_settle(any_ledger, _try_bill("7", 2), retrying=True)  # past what it held: all of it back

    assert any_ledger.unpaid(held.id)[0] == 6
    assert _committed(any_ledger) == 18


def test_no_run_takes_the_room_a_retried_try_freed_before_its_hold_grows_back(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written apart, the entry freed $5 of the hold and another run reserved $4 of it before the growth:
    # the retry got $2 and could pass the $11 cap by $4. Entry and growth are now one transaction, so the
    # other run (reserving as soon as an entry is written alone) comes after the growth and is refused.
    any_ledger.set_budget("project=churn", "month", "11")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")
    other_run: list[object] = []
    record_alone = any_ledger.record

    def record_then_another_run_reserves(entry: LedgerEntry) -> bool:
        new = record_alone(entry)
        other_run.append(
            any_ledger.reserve(
                "project=churn", "4", holder="retrain/r2/train/-1", run_id="r2", dag_id="retrain"
            )
        )
        return new

    monkeypatch.setattr(any_ledger, "record", record_then_another_run_reserves)

    record_and_settle(any_ledger, _try_bill("5", 1), retrying=True)

    assert (other_run, any_ledger.unpaid(held.id)[0], _committed(any_ledger)) == ([], 6, 11)
    with pytest.raises(BudgetExceededError, match=r"has \$0.00 left"):
        any_ledger.reserve("project=churn", "4", holder="retrain/r2/train/-1", run_id="r2", dag_id="retrain")


def test_a_retry_hold_not_grown_though_its_budget_has_room_is_warned_with_why(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # The budget's time zone changed after the hold: its day is no longer the hold's, so the hold is not
    # grown. The warning said the budget had "no room left" and to raise a cap with $94 of room.
    import time_machine

    with time_machine.travel(datetime(2026, 12, 1, 12, tzinfo=UTC), tick=False):
        any_ledger.set_budget("project=churn", "day", "100")
        held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")
        any_ledger.set_budget("project=churn", "day", "100", timezone="Pacific/Kiritimati")  # UTC+14
        with caplog.at_level(logging.WARNING):
            record_and_settle(any_ledger, _try_bill("5", 1), retrying=True)

    assert any_ledger.unpaid(held.id)[0] == 1
    warning = [r.getMessage() for r in caplog.records if r.name == "costaware.ledger_spool"][-1]
    assert "held again for its retry $5.00 short of the $6.00" in warning
    assert (
        "could not be grown in its budgets project=churn/day: its hold in project=churn/day is for "
        in warning
    )
    assert "period 2026-12-01, the budget's period of its start is now 2026-12-02" in warning
    assert "no room" not in warning and "raise the cap" not in warning
    assert "may pass its budgets' caps by up to $5.00: mark the task failed to stop it" in warning


def test_an_entry_of_no_hold_is_refused_a_regrowth_naming_it(any_ledger: Ledger) -> None:
    bill = _try_bill("5", 1)
    with pytest.raises(
        ConfigurationError, match=rf"entry {bill.entry_uid} has no reservation_id.*Ledger.record"
    ):
        any_ledger.record_and_regrow(bill)
    assert any_ledger.entries() == []


def test_another_process_reserving_as_a_retried_try_is_written_waits_for_its_hold_to_grow(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another worker (its own connection) reserves $4 the moment try 1's entry is in: it waits for the
    # budgets' locks, and gets them only once the hold is grown back, so it is refused. With the entry and
    # the growth in two transactions it got the lock between them and took the $4.
    import threading
    import time

    from costaware.adapters.ledger import entries, regrowth

    if any_ledger.is_sqlite:
        # SQLite's busy handler lets the writer that retries first in: the written-apart code often got the
        # lock back before the other worker, and the test would pass without the fix. PostgreSQL queues.
        pytest.skip("needs PostgreSQL's queued row locks to order the two workers")
    any_ledger.set_budget("project=churn", "month", "11")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")
    other_worker = Ledger.from_url(any_ledger.engine.url.render_as_string(hide_password=False))
    outcome: list[object] = []

    def reserve_elsewhere() -> None:
        try:
            holder = "retrain/r2/train/-1"
            outcome.append(other_worker.reserve("project=churn", "4", holder=holder, run_id="r2", dag_id="r"))
        except BudgetExceededError as e:
            outcome.append(e)

    other = threading.Thread(target=reserve_elsewhere)
    insert_alone = entries.insert_entry

    def insert_then_another_worker_reserves(conn: Any, entry: LedgerEntry) -> bool:
        new = insert_alone(conn, entry)
        other.start()
        time.sleep(0.5)  # long enough for it to queue for the locks this write holds
        return new

    monkeypatch.setattr(entries, "insert_entry", insert_then_another_worker_reserves)
    monkeypatch.setattr(regrowth, "insert_entry", insert_then_another_worker_reserves)
    try:
        record_and_settle(any_ledger, _try_bill("5", 1), retrying=True)
        other.join(timeout=30)
    finally:
        other_worker.dispose()

    assert [type(o) for o in outcome] == [BudgetExceededError]
    assert (any_ledger.unpaid(held.id)[0], _committed(any_ledger)) == (6, 11)


def test_a_retry_written_as_a_settle_writes_the_same_entry_neither_deadlocks(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A drain settling the hold with try 1's entry while the listener writes it for the retry: the settle
    # had the entry's key and waited for the hold's row, the regrowth had that row and waited for the key.
    # PostgreSQL aborted one; the spool kept the entry but the hold was not grown, warned as "not held".
    import threading
    import time

    from costaware.adapters.ledger import regrowth, reservation_settle

    if any_ledger.is_sqlite:
        pytest.skip("SQLite's one writer lock cannot deadlock: needs PostgreSQL's row locks")
    any_ledger.set_budget("project=churn", "month", "100")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")
    other_worker = Ledger.from_url(any_ledger.engine.url.render_as_string(hide_password=False))
    bill = replace(_try_bill("5", 1), reservation_id=held.id)
    settle_has_the_entry = threading.Event()
    insert_alone = reservation_settle.insert_entry

    def insert_then_wait_in_the_settle(conn: Any, entry: LedgerEntry) -> bool:
        new = insert_alone(conn, entry)
        if threading.current_thread().name == "settle":
            settle_has_the_entry.set()
            time.sleep(1.5)  # the regrowth takes its locks and queues for the entry meanwhile
        return new

    monkeypatch.setattr(reservation_settle, "insert_entry", insert_then_wait_in_the_settle)  # the settle's
    monkeypatch.setattr(regrowth, "insert_entry", insert_then_wait_in_the_settle)
    failures: list[BaseException] = []

    def settle() -> None:
        try:
            other_worker.settle(held.id, bill.usd, entry=bill)
        except BaseException as e:
            failures.append(e)

    settling = threading.Thread(target=settle, name="settle")
    settling.start()
    try:
        assert settle_has_the_entry.wait(30)
        try:
            any_ledger.record_and_regrow(bill)
        except BaseException as e:
            failures.append(e)
        settling.join(timeout=30)
    finally:
        other_worker.dispose()

    assert failures == []
    assert [e["entry_uid"] for e in any_ledger.entries()] == [bill.entry_uid]
    assert any_ledger.latest_reservation(HOLDER).status == "settled"


def test_the_shortfall_warning_names_what_the_hold_had_unpaid_as_its_entry_was_written(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The warning read what the hold had paid again after the write: an entry paid from it in between (the
    # task's other attempt) made try 1's $6 read $4.
    any_ledger.set_budget("project=churn", "month", "10")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")
    regrow_alone = any_ledger.record_and_regrow

    def regrow_then_another_entry_is_paid(entry: LedgerEntry) -> Any:
        regrown = regrow_alone(entry)
        any_ledger.record(replace(_try_bill("2", 1), kind="storage", reservation_id=held.id))
        return regrown

    monkeypatch.setattr(any_ledger, "record_and_regrow", regrow_then_another_entry_is_paid)
    with caplog.at_level(logging.WARNING):
        record_and_settle(any_ledger, _try_bill("5", 1), retrying=True)

    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "held again for its retry $1.00 short of the $6.00 it held for try 1 (which paid $5.00" in warning


def test_a_regrowth_returns_what_the_hold_had_unpaid_before_its_entry(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "100")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")
    any_ledger.record(replace(_try_bill("2", 1), kind="storage", reservation_id=held.id))

    bill = replace(_try_bill("3", 1), reservation_id=held.id)
    regrown = any_ledger.record_and_regrow(bill)
    again = any_ledger.record_and_regrow(bill)  # written again: pays, and grows, nothing more

    assert (regrown.new, regrown.unpaid_before, regrown.target, regrown.held.usd) == (True, 4, 9, 9)
    assert (again.new, again.unpaid_before, again.target, again.held.usd) == (False, 4, 9, 9)


def test_a_hold_that_expires_as_its_retry_is_written_is_warned_as_expired_not_short_of_room(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Found open, then past its ttl by the time the entry was written: it was not grown (it counts nothing
    # any more), and the warning said its budget, with $94 of room, had "too little room".
    from datetime import timedelta

    import time_machine

    start = datetime(2026, 12, 1, 12, tzinfo=UTC)
    with time_machine.travel(start, tick=False):
        any_ledger.set_budget("project=churn", "month", "100")
        held = any_ledger.reserve(
            "project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain", ttl=timedelta(hours=1)
        )
    regrow_alone = any_ledger.record_and_regrow

    def regrow_after_the_ttl(entry: LedgerEntry) -> Any:
        with time_machine.travel(start + timedelta(hours=1, seconds=1), tick=False):
            return regrow_alone(entry)

    monkeypatch.setattr(any_ledger, "record_and_regrow", regrow_after_the_ttl)
    with time_machine.travel(start + timedelta(minutes=59), tick=False), caplog.at_level(logging.WARNING):
        record_and_settle(any_ledger, _try_bill("5", 1), retrying=True)

    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"the hold {held.id} of retrain.train expired at 2026-12-01 13:00:00" in warning
    assert "the retry runs with nothing held in its budgets project=churn/month" in warning
    assert "reservation_ttl" in warning
    assert "room" not in warning and "short" not in warning
    assert any_ledger.usage("project=churn")[0].spent_usd == 5  # the entry is kept


@pytest.mark.parametrize("marked_expired", [False, True])
def test_a_hold_that_expired_before_its_try_failed_is_warned_as_expired(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture, marked_expired: bool
) -> None:
    # Past its ttl before the try's entry came, no hold was found to settle: the entry was recorded alone
    # and the retry ran with nothing held, without a word (the docs promised the "expired" WARNING).
    from datetime import timedelta

    import time_machine

    start = datetime(2026, 12, 1, 12, tzinfo=UTC)
    with time_machine.travel(start, tick=False):
        any_ledger.set_budget("project=churn", "month", "100")
        held = any_ledger.reserve(
            "project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain", ttl=timedelta(hours=1)
        )
    after_the_ttl = start + timedelta(hours=1, minutes=5)
    with time_machine.travel(after_the_ttl, tick=False), caplog.at_level(logging.WARNING):
        if marked_expired:
            any_ledger.expire_stale()
            caplog.clear()
        # Not marked expired: the hold is still open past its ttl, the case the status alone does not tell.
        lapsed = any_ledger.latest_reservation(HOLDER)
        assert lapsed is not None and lapsed.status == ("expired" if marked_expired else "open")
        bill = _try_bill("5", 1)
        record_and_settle(any_ledger, bill, retrying=True)
        record_and_settle(any_ledger, bill, retrying=True)  # a drain writing it again: no second word
        usage = any_ledger.usage("project=churn")[0]

    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"the hold {held.id} of retrain.train expired at 2026-12-01 13:00:00 UTC, before try 1" in warning
    assert "the retry runs with nothing held in its budgets project=churn/month" in warning
    assert "reservation_ttl" in warning
    # Recorded alone, as a last try's entry beside an expired hold is: counted once, as spent.
    assert [e["reservation_id"] for e in any_ledger.entries()] == [None]
    assert (usage.spent_usd, usage.reserved_usd) == (5, 0)


def test_a_retry_whose_hold_was_settled_is_not_warned_as_expired(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    any_ledger.set_budget("project=churn", "month", "100")
    held = any_ledger.reserve("project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain")
    any_ledger.settle(held.id, "1", entry=replace(_try_bill("1", 1), kind="storage", reservation_id=held.id))

    with caplog.at_level(logging.WARNING):
        record_and_settle(any_ledger, _try_bill("5", 2), retrying=True)

    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_hold_grown_just_before_its_ttl_is_not_said_to_have_expired(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The growth read the clock, then the verdict read it again: a hold grown a second before its ttl was
    # returned as expired (the warning: "the retry runs with nothing held"), though it was held again.
    from datetime import timedelta

    import time_machine

    from costaware.adapters.ledger import regrowth

    start = datetime(2026, 12, 1, 12, tzinfo=UTC)
    with time_machine.travel(start, tick=False):
        any_ledger.set_budget("project=churn", "month", "100")
        held = any_ledger.reserve(
            "project=churn", "6", holder=HOLDER, run_id="r1", dag_id="retrain", ttl=timedelta(hours=1)
        )
    readings = iter([start + timedelta(minutes=59, seconds=59), start + timedelta(hours=1, seconds=1)])
    monkeypatch.setattr(regrowth, "utcnow", lambda: next(readings))  # each read of the clock 2 s later

    with time_machine.travel(start + timedelta(minutes=59, seconds=59), tick=False):
        regrown = any_ledger.record_and_regrow(replace(_try_bill("5", 1), reservation_id=held.id))

    assert (regrown.held.usd, regrown.expired) == (11, False)
