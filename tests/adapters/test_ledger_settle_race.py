"""A settlement and a release of one hold at once, on two PostgreSQL connections.

SQLite takes its write lock at the start of each write transaction, so there the two only ever run one
after the other; PostgreSQL lets the release commit while the settlement is half way through.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
from services import database_url

from costaware import Ledger
from costaware.adapters.ledger import reservation_rows, reservation_settle, reservations
from costaware.core.ledger import Kind, LedgerEntry

HOLDER = "d/r1/train/-1"


def entry(usd: str, task_id: str = "train") -> LedgerEntry:
    return LedgerEntry(
        dag_id="d",
        run_id="r1",
        task_id=task_id,
        kind=Kind.COMPUTE,
        usd=Decimal(usd),
        quantity=Decimal(1),
        tags={"project": "churn"},
    )


@pytest.fixture
def pg_ledger(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Ledger]:
    ledger = Ledger.from_url(database_url("postgres", tmp_path, request, "settle_race"))
    yield ledger
    ledger.dispose()


def in_thread(work: Any) -> Any:
    """Run ``work`` on another thread (so on another pooled connection) to the end; its result or error."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as e:  # raised below, in the test's thread
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the other connection waited on a lock the settlement held"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def test_a_release_committed_while_a_settle_ran_ends_as_if_it_came_first(
    pg_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Settle read the hold open, then a run's end released it (and another task took its $4) before settle
    # wrote: the hold ended 'settled', as a settle after a release leaves it, but settle still went by the
    # status it had read, and the $5 budget went $3 past its cap without the ERROR a late settle gives.
    import time_machine

    real_insert_entry = reservation_settle.insert_entry
    released: list[reservations.Released] = []

    def release_first(conn: Any, written: LedgerEntry) -> bool:
        if not released:  # settle's own entry: the release and the other task's cost land before it
            released.append(in_thread(lambda: pg_ledger.release_hold(held.id)))
            in_thread(lambda: pg_ledger.record(entry("4", task_id="other")))
        return real_insert_entry(conn, written)

    with (
        time_machine.travel(datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc), tick=False),
        caplog.at_level("ERROR", logger="costaware.adapters.ledger.reservations"),
    ):
        pg_ledger.set_budget("project=churn", "month", "5")
        held = pg_ledger.reserve("project=churn", "4", holder=HOLDER)
        monkeypatch.setattr(reservation_settle, "insert_entry", release_first)
        settled = pg_ledger.settle(held.id, "4", entry=entry("4"))

        (release,) = released
        assert (release.released_here, release.paid_usd) == (True, 0)  # it freed the whole $4
        assert (settled.status, settled.settled_usd) == ("settled", 4)
        (usage,) = pg_ledger.usage("project=churn")
        assert (usage.spent_usd, usage.reserved_usd, usage.left_usd) == (8, 0, -3)  # both costs, no hold
        said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert len(said) == 1, said
        assert f"the hold {held.id} of {HOLDER} had been released" in said[0]
        assert "project=churn/month (2026-11) is $3.00 over its cap $5.00" in said[0]


def test_a_settle_committed_first_is_never_undone_by_the_release(
    pg_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other order: the release's compare-and-set waits for the settle's row lock, then finds it
    # settled, frees nothing and says so.
    real_close_holds = reservation_rows.close_holds
    released: list[reservations.Released] = []

    def release_while_the_row_is_locked(conn: Any, reservation_id: str) -> None:
        real_close_holds(conn, reservation_id)
        if not released:
            thread = threading.Thread(target=lambda: released.append(pg_ledger.release_hold(held.id)))
            thread.start()
            thread.join(timeout=1)  # it waits on the row settle has locked
            assert thread.is_alive()
            waiting.append(thread)

    waiting: list[threading.Thread] = []
    pg_ledger.set_budget("project=churn", "month", "10")
    held = pg_ledger.reserve("project=churn", "4", holder=HOLDER)
    # Settle's close calls it where close lives.
    monkeypatch.setattr(reservation_rows, "close_holds", release_while_the_row_is_locked)
    settled = pg_ledger.settle(held.id, "3", entry=entry("3"))
    (thread,) = waiting
    thread.join(timeout=30)
    (release,) = released

    assert (settled.status, settled.settled_usd) == ("settled", 3)
    assert (release.released_here, release.reservation.status) == (False, "settled")
    (usage,) = pg_ledger.usage("project=churn")
    assert (usage.spent_usd, usage.reserved_usd) == (3, 0)
