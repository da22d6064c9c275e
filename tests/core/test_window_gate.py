from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from costaware.core.window_gate import SKIP, TRAIN, WAIT, gate_decision
from costaware.core.windows import WindowSchedule

NIGHTS = WindowSchedule.parse("22:00-06:00", "mon-fri", "UTC")
MONDAY = datetime(2026, 3, 2, tzinfo=timezone.utc)


def hours(h: float) -> datetime:
    return MONDAY + timedelta(hours=h)


@pytest.mark.parametrize(
    ("now", "newest", "claimed", "action", "window_start"),
    [
        (hours(12), hours(11), None, WAIT, hours(22)),  # before the window: wait for it
        (hours(23), hours(11), None, TRAIN, hours(22)),  # first in the window: train
        (hours(23), hours(21), hours(22.5), SKIP, hours(22)),  # the retrain at 22:30 saw this data
        (hours(23), hours(22.75), hours(22.5), WAIT, hours(24 + 22)),  # newer data: next window
        (hours(23), None, hours(22.5), WAIT, hours(24 + 22)),  # not asset-triggered: treated as new
        (hours(4 * 24 + 23), hours(4 * 24 + 23), hours(4 * 24 + 22), WAIT, hours(7 * 24 + 22)),  # fri -> mon
    ],
)
def test_gate_decision(
    now: datetime, newest: datetime | None, claimed: datetime | None, action: str, window_start: datetime
) -> None:
    decision = gate_decision(now=now, schedule=NIGHTS, newest_event=newest, claimed_at=claimed)
    assert (decision.action, decision.window_start) == (action, window_start)
    assert decision.reason
