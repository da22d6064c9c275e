"""A waiting slot that another slot waited before: it waits for a recorded spare only where its need fits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest

from costaware.core.ledger import BudgetUsage
from costaware.training.tuning.reservations import gpu_hours_for
from costaware.training.tuning.slot_holds import usd_for_seconds
from costaware.training.tuning.slot_yield import _wait_first_or_yield
from costaware.training.tuning.wait_refusals import RecordedSpare, SlotYields

T0 = datetime(2026, 12, 1, tzinfo=UTC)
USD_PER_HOUR = Decimal(3600)  # $1 a second: dollars read as seconds
NEED_NOW_SECONDS = 106.0


def _need_after(ahead: float, pause_after: float = 1.0) -> tuple[Decimal, Decimal]:
    seconds = max(NEED_NOW_SECONDS + ahead + pause_after, 0.0)
    return usd_for_seconds(seconds, USD_PER_HOUR), gpu_hours_for(seconds, Decimal(1))


@pytest.mark.parametrize("due_in", [0.0, -5.0, -20.0, -90.0])
def test_a_slot_the_dollars_refuse_gives_way_however_late_the_spares_trim_is(due_in: float) -> None:
    # Slot 0 waited first and records a GPU-hour spare; slot 1 has $96 of room for a $106 trial and GPU-hours
    # to spare. A late trim gives back GPU time, never dollars: the slot must give way, not wait for the
    # spare (it waited, billed, where the trim was 20 s late and its need was counted 20 s short).
    first = SimpleNamespace(
        id="hold-A",
        created_at=T0,
        budgets=("study",),
        holder="slot-0",
        usd=Decimal(200),
        gpu_hours=Decimal("0.1"),
    )
    mine = SimpleNamespace(
        id="hold-B", created_at=T0 + timedelta(seconds=5), budgets=("study",), holder="slot-1",
        usd=Decimal(10), gpu_hours=Decimal(0),
    )  # fmt: skip
    ledger = SimpleNamespace(open_reservations=lambda: [first, mine])
    own = BudgetUsage(
        "study", "total", Decimal(296), Decimal(0), Decimal(200), Decimal(10), Decimal(0), Decimal("0.1")
    )
    with pytest.raises(SlotYields, match=r"slot 1 runs no trial and gives way"):
        _wait_first_or_yield(
            ledger,
            own,
            "hold-B",
            [first],
            1,
            usd_for_seconds(NEED_NOW_SECONDS, USD_PER_HOUR),
            gpu_hours_for(NEED_NOW_SECONDS, Decimal(1)),
            {"hold-A": T0, "hold-B": T0 + timedelta(seconds=1)},
            {"hold-A": RecordedSpare(Decimal("0.008334"), due_in)},
            _need_after,
        )
