"""``take_up_holds`` locks as reserve does (holder, budgets, rows): beside a reserve on PostgreSQL too."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from services import database_url
from sqlalchemy import create_engine, select, text

from costaware import Ledger
from costaware.adapters.ledger import reservations, schema

HOLDER = "d/r1/train/-1"


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Ledger]:
    ledger = Ledger.from_url(database_url(request.param, tmp_path, request, "take_up"))
    yield ledger
    ledger.dispose()


@pytest.fixture
def pg_ledger(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Ledger]:
    ledger = Ledger.from_url(database_url("postgres", tmp_path, request, "take_up_locks"))
    yield ledger
    ledger.dispose()


def taken_by(ledger: Ledger) -> dict[str, int | None]:
    r = schema.reservations
    with ledger.reading() as conn:
        return {rid: taken for rid, taken in conn.execute(select(r.c.id, r.c.taken_by_try))}


def test_take_up_marks_the_open_holds_of_the_holder_only(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "10")
    any_ledger.set_budget("project=other", "month", "10")
    mine = any_ledger.reserve("project=churn", "2", holder=HOLDER)
    another = any_ledger.reserve("project=churn", "1", holder="d/r1/score/-1")
    settled = any_ledger.reserve("project=other", "1", holder="d/r0/train/-1")
    any_ledger.settle(settled.id, "0")

    assert any_ledger.take_up_holds(HOLDER, 2) == 1
    assert any_ledger.take_up_holds(HOLDER, 1) == 0  # never lowered
    assert any_ledger.take_up_holds("d/r0/train/-1", 2) == 0  # a settled hold is not taken up
    assert taken_by(any_ledger) == {mine.id: 2, another.id: None, settled.id: None}


def waiting_on_a_lock(url: str, timeout: float = 20) -> None:
    """Return once a session of the database waits on a lock (another's row or advisory lock)."""
    watcher = create_engine(url)
    deadline = time.monotonic() + timeout
    try:
        with watcher.connect() as conn:
            while time.monotonic() < deadline:
                waiting = conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                ).scalar()
                if waiting:
                    return
                conn.rollback()
                time.sleep(0.05)
    finally:
        watcher.dispose()
    raise AssertionError(f"take_up_holds never waited on the reserve's locks within {timeout:.0f} s")


def test_take_up_beside_a_reserve_replacing_one_of_two_holds_waits_and_never_deadlocks(
    pg_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two open holds of one task (two gates at once left them before reserve took the holder's lock). A
    # reserve replacing the newer one locked its row, then the older one's; take_up's single UPDATE locked
    # the older row first and waited for the newer: PostgreSQL found the deadlock and aborted one of them.
    pg_ledger.set_budget("project=churn", "month", "10")
    older = pg_ledger.reserve("project=churn", "3", holder=HOLDER)
    with monkeypatch.context() as blind:  # as each gate then saw: no open hold of the holder yet
        blind.setattr(reservations, "open_holds_of", lambda *args, **kwargs: [])
        newer = pg_ledger.reserve("project=churn", "1", holder=HOLDER)
    assert {h.id for h in pg_ledger.open_holds_of(HOLDER)} == {older.id, newer.id}

    real_close = reservations.close
    taking_up: list[threading.Thread] = []
    outcome: dict[str, Any] = {}

    def take_up() -> None:
        try:
            outcome["marked"] = pg_ledger.take_up_holds(HOLDER, 2)
        except BaseException as e:  # said by the assert below, not lost in the thread
            outcome["error"] = e

    def close_then_let_take_up_in(conn: Any, reservation_id: str, *args: Any) -> None:
        real_close(conn, reservation_id, *args)
        if not taking_up:  # the newer row is locked, the older not yet: take_up starts and waits
            taking_up.append(threading.Thread(target=take_up))
            taking_up[0].start()
            waiting_on_a_lock(pg_ledger.engine.url.render_as_string(hide_password=False))

    monkeypatch.setattr(reservations, "close", close_then_let_take_up_in)
    replacing = pg_ledger.reserve(
        "project=churn", "5", holder=HOLDER, replacing=newer.id, replace_unlike=True
    )
    (thread,) = taking_up
    thread.join(timeout=30)

    assert not thread.is_alive()
    assert "error" not in outcome, str(outcome.get("error"))  # "deadlock detected", aborted
    assert outcome["marked"] == 1  # the hold the reserve made, the two it closed no longer open
    assert [h.id for h in pg_ledger.open_holds_of(HOLDER)] == [replacing.id]
    assert taken_by(pg_ledger) == {older.id: None, newer.id: None, replacing.id: 2}
