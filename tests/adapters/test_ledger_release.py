"""A release is a compare-and-set: a hold closed a moment before by another process is said so, not freed."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from services import database_url

from costaware import Ledger
from costaware.core.ledger import Kind, LedgerEntry
from costaware.remote_reconcile import free_paid_hold

HOLDER = "nightly/manual__1/train/-1"


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Ledger]:
    opened = Ledger.from_url(database_url(request.param, tmp_path, request, "release"))
    yield opened
    opened.dispose()


def test_a_hold_released_elsewhere_a_moment_before_is_not_said_freed_here(ledger: Ledger) -> None:
    # free_paid_hold read the hold's status after releasing it: "released" by the run's end a moment before
    # read as released here, and its $4 was said freed a second time.
    ledger.set_budget("project=x", "month", "5")
    ledger.reserve("project=x", "4", holder=HOLDER)
    (hold,) = ledger.open_reservations()
    ledger.release(hold.id)  # the run's end, in another process, after this one listed the hold

    freed = free_paid_hold(ledger, hold)

    assert (freed.closed_here, freed.status, freed.freed_usd) == (False, "released", Decimal(0))


def test_free_paid_hold_frees_what_is_unpaid_when_it_releases_the_hold(ledger: Ledger) -> None:
    ledger.set_budget("project=x", "month", "5")
    ledger.reserve("project=x", "4", holder=HOLDER)
    (hold,) = ledger.open_reservations()
    entry = LedgerEntry(
        dag_id="nightly",
        run_id="manual__1",
        task_id="train",
        kind=Kind.COMPUTE,
        usd=Decimal("1.5"),
        tags={"project": "x"},
        reservation_id=hold.id,
    )
    ledger.record(entry)  # paid after the hold was listed: counted all the same

    freed = free_paid_hold(ledger, hold)

    assert (freed.closed_here, freed.status) == (True, "released")
    assert (freed.paid_usd, freed.freed_usd) == (Decimal("1.5"), Decimal("2.5"))
    assert ledger.release_hold(hold.id).released_here is False  # released once only


def test_a_payment_during_a_release_is_in_both_what_was_paid_and_what_was_freed(
    request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    # release_hold read what each budget got back, then what was paid, in statements of their own: under
    # PostgreSQL's READ COMMITTED a payment committed between them (a plain record takes no lock that
    # waits for the release's) was in the one and not the other, and the $4 hold read $4 freed and $1 paid.
    import threading

    from sqlalchemy import event

    ledger = Ledger.from_url(database_url("postgres", tmp_path, request, "release_paid_race"))
    try:
        ledger.set_budget("project=x", "month", "10")
        hold = ledger.reserve("project=x", "4", holder=HOLDER)
        releasing: list[Any] = []

        def pay_once_per_read(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            # Each read the release makes after freeing the hold lets one more payment commit before it.
            if statement.lstrip().upper().startswith("UPDATE COSTAWARE_RESERVATIONS"):
                releasing.append(conn)
            elif releasing and conn is releasing[0] and statement.lstrip().upper().startswith("SELECT"):
                paid = threading.Thread(target=ledger.record, args=(payment(hold.id, "1"),))
                paid.start()
                paid.join(timeout=30)
                assert not paid.is_alive(), "the payment waited on a lock the release held"

        event.listen(ledger.engine, "before_cursor_execute", pay_once_per_read)
        try:
            released = ledger.release_hold(hold.id, by_budget=True)
        finally:
            event.remove(ledger.engine, "before_cursor_execute", pay_once_per_read)

        assert released.released_here
        assert released.paid_usd > 0  # a payment came before the report was read
        assert released.freed_by_budget == {"project=x/month": Decimal(4) - released.paid_usd}
    finally:
        ledger.dispose()


def payment(reservation_id: str, usd: str) -> LedgerEntry:
    return LedgerEntry(
        dag_id="nightly",
        run_id="manual__1",
        task_id="train",
        kind=Kind.COMPUTE,
        usd=Decimal(usd),
        tags={"project": "x"},
        reservation_id=reservation_id,
    )
