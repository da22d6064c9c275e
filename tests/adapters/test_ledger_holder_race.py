"""Two reserves of one holder at once, in scopes no budget shares: one open hold, never two."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from services import database_url

from costaware import Ledger
from costaware.adapters.ledger import reservations
from costaware.core.ledger import reservation_holder

HOLDER = reservation_holder("retrain", "r1", "train", -1)


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Ledger]:
    ledger = Ledger.from_url(database_url(request.param, tmp_path, request, "holder_race"))
    yield ledger
    ledger.dispose()


def test_two_gates_of_one_task_in_scopes_no_budget_shares_make_one_hold(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each gate locked only its own budget's row on PostgreSQL: both read "no open hold of the task" before
    # either wrote one, and the task held $3 in project=a and $4 in project=b until one was closed.
    any_ledger.set_budget("project=a", "month", "10")
    any_ledger.set_budget("project=b", "month", "10")
    both_looked = threading.Barrier(2, timeout=2)
    real_applicable = reservations.applicable

    def applicable_once_both_looked(*args: Any, **kwargs: Any) -> Any:
        # Each reserve waits here, after looking for the holder's open hold, until the other has looked
        # too; where the other cannot get this far (it waits for this one to commit), it goes on alone.
        with contextlib.suppress(threading.BrokenBarrierError):
            both_looked.wait()
        return real_applicable(*args, **kwargs)

    monkeypatch.setattr(reservations, "applicable", applicable_once_both_looked)
    made: list[Any] = []
    failed: list[BaseException] = []

    def gate(scope: str, usd: str) -> None:
        try:
            made.append(any_ledger.reserve(scope, usd, holder=HOLDER, run_id="r1", dag_id="retrain"))
        except BaseException as e:  # said by the assert below, not lost in the thread
            failed.append(e)

    gates = [threading.Thread(target=gate, args=a) for a in (("project=a", "3"), ("project=b", "4"))]
    for thread in gates:
        thread.start()
    for thread in gates:
        thread.join(timeout=60)

    assert failed == []
    holds = [r for r in any_ledger.open_reservations() if r.holder == HOLDER]
    assert len(holds) == 1, [(r.scope, r.usd) for r in holds]
    assert {r.id for r in made} == {holds[0].id}  # the second gate got the first one's hold back
