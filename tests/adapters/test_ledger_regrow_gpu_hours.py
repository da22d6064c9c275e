"""A retried try's hold grown back holds GPU-hours again too, never past a budget's GPU-hour cap."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from services import database_url

from costaware import Ledger
from costaware.core.errors import BudgetExceededError
from costaware.core.ledger import LedgerEntry
from costaware.ledger_spool import record_and_settle

HOLDER = "retrain/r1/train/-1"


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Ledger]:
    ledger = Ledger.from_url(database_url(request.param, tmp_path, request, "regrow_gpu"))
    yield ledger
    ledger.dispose()


def try_bill(reservation_id: str, usd: str, gpu_hours: str, try_number: int = 1) -> LedgerEntry:
    return LedgerEntry(
        dag_id="retrain",
        run_id="r1",
        task_id="train",
        kind="compute",
        usd=Decimal(usd),
        gpu_hours=Decimal(gpu_hours),
        try_number=try_number,
        tags={"project": "churn"},
        reservation_id=reservation_id,
    )


def test_a_retry_holds_its_gpu_hours_again_so_another_run_cannot_take_them(any_ledger: Ledger) -> None:
    # Try 1 paid all 8 GPU-hours of its hold; grown back in dollars only, the hold held none for try 2,
    # another run got 6 of the 12 left, and try 2's 8 put the 20 GPU-hour cap at 22.
    any_ledger.set_budget("project=churn", "month", "100", cap_gpu_hours="20")
    held = any_ledger.reserve("project=churn", "10", gpu_hours="8", holder=HOLDER)
    bill = try_bill(held.id, "10", "8")
    grown = any_ledger.record_and_regrow(bill).held
    assert (grown.usd, grown.gpu_hours) == (20, 16)
    (usage,) = any_ledger.usage("project=churn")
    assert (usage.spent_gpu_hours, usage.reserved_gpu_hours) == (8, 8)
    with pytest.raises(BudgetExceededError, match="GPU-hours"):
        any_ledger.reserve("project=churn", "1", gpu_hours="6", holder="other/r1/train/-1")
    # Written again (a retried spool), it grows nothing more.
    again = any_ledger.record_and_regrow(bill)
    assert (again.new, again.held.usd, again.held.gpu_hours) == (False, 20, 16)


def test_a_retry_hold_grows_back_gpu_hours_only_as_far_as_the_cap_has_room(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "100", cap_gpu_hours="10")
    held = any_ledger.reserve("project=churn", "10", gpu_hours="8", holder=HOLDER)
    grown = any_ledger.record_and_regrow(try_bill(held.id, "10", "8")).held
    assert (grown.usd, grown.gpu_hours) == (20, 10)  # 8 spent + 2 held: the cap, not past it
    (usage,) = any_ledger.usage("project=churn")
    assert usage.spent_gpu_hours + usage.reserved_gpu_hours == 10


def test_a_budget_without_a_gpu_hour_cap_does_not_bound_the_gpu_hours_grown_back(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "100")
    held = any_ledger.reserve("project=churn", "10", gpu_hours="8", holder=HOLDER)
    grown = any_ledger.record_and_regrow(try_bill(held.id, "3", "5")).held
    assert (grown.usd, grown.gpu_hours) == (13, 13)


def test_the_regrowth_reports_the_gpu_hour_target_it_grew_toward(any_ledger: Ledger) -> None:
    any_ledger.set_budget("project=churn", "month", "100", cap_gpu_hours="10")
    held = any_ledger.reserve("project=churn", "10", gpu_hours="8", holder=HOLDER)
    regrown = any_ledger.record_and_regrow(try_bill(held.id, "10", "8"))
    # 8 paid + the 8 it had unpaid before: the cap's room gave 10 of the 16.
    assert (regrown.target, regrown.gpu_hours_target, regrown.held.gpu_hours) == (20, 16, 10)
    assert regrown.unpaid_gpu_hours_before == 8


def test_a_retry_held_short_of_its_gpu_hours_is_warned_with_the_gpu_hour_cap(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # The review's numbers: $100 / 10 GPU-hour cap, a $10 / 8 GPU-hour hold, try 1 billed $10 and 8
    # GPU-hours: the dollars grew back in full, the retry got 2 of its 8 GPU-hours and no word was said.
    any_ledger.set_budget("project=churn", "month", "100", cap_gpu_hours="10")
    held = any_ledger.reserve(
        "project=churn", "10", gpu_hours="8", holder=HOLDER, run_id="r1", dag_id="retrain"
    )
    bill = replace(try_bill(held.id, "10", "8"), reservation_id=None)

    with caplog.at_level(logging.WARNING):
        record_and_settle(any_ledger, bill, retrying=True)

    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"the hold {held.id} of retrain.train is held again for its retry 6 GPU-hours short" in warning
    assert "of the 8 GPU-hours it held for try 1 (which paid 8 of them)" in warning
    assert "8 GPU-hours spent and 2 reserved of its 10 GPU-hour cap" in warning
    assert "may pass that GPU-hour cap by up to 6 GPU-hours" in warning
    assert "raise the GPU-hour cap (`costaware budget set --cap-gpu-hours`)" in warning
    assert "$" not in warning.split("held again for its retry")[1].split(":")[0]  # the dollars grew in full


def test_a_retry_short_in_dollars_and_gpu_hours_is_warned_of_both(
    any_ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    any_ledger.set_budget("project=churn", "month", "15", cap_gpu_hours="10")
    held = any_ledger.reserve(
        "project=churn", "10", gpu_hours="8", holder=HOLDER, run_id="r1", dag_id="retrain"
    )
    bill = replace(try_bill(held.id, "10", "8"), reservation_id=None)

    with caplog.at_level(logging.WARNING):
        record_and_settle(any_ledger, bill, retrying=True)

    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "held again for its retry $5.00 and 6 GPU-hours short of the $10.00 and 8 GPU-hours" in warning
    assert "$10.00 spent and $5.00 reserved of its $15.00 cap" in warning
    assert "8 GPU-hours spent and 2 reserved of its 10 GPU-hour cap" in warning
    assert "may pass those caps by up to $5.00 and 6 GPU-hours" in warning
    assert "raise the cap (`costaware budget set`) and the GPU-hour cap" in warning
