"""Hold data-triggered retrains to an allowed window: at most one retrain per window occurrence, pure.

A DAG scheduled on an Airflow Asset ("new features landed") gets a run for each batch of asset events, at any
hour. Its first task, the window gate, decides with :func:`gate_decision`:

* outside the window: **wait** until it opens;
* in the window, no retrain of this DAG has started in this occurrence yet: **train** (the caller claims the
  occurrence atomically, so two runs reaching the gate together cannot both train);
* in the window, a retrain already started: if every event of this run is older than that start, the retrain
  already saw this data, so **skip**; if an event came later, **wait** for the next occurrence, where this
  run trains on the new data (it is never dropped, and the current occurrence still trains only once).

So several asset events in one window give one retrain, and data that lands after it gives one more retrain
in the next window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from costaware.core.windows import WindowSchedule, require_aware

WAIT = "wait"
TRAIN = "train"
SKIP = "skip"


@dataclass(frozen=True, slots=True)
class GateDecision:
    """What the gate does now.

    Attributes:
        action: ``"wait"``, ``"train"`` or ``"skip"``.
        window_start: Start of the occurrence concerned (the one open now, or the next one to wait for).
        window_end: Its end.
        reason: Readable explanation, for the log and the XCom.
    """

    action: str
    window_start: datetime
    window_end: datetime
    reason: str


def gate_decision(
    *,
    now: datetime,
    schedule: WindowSchedule,
    newest_event: datetime | None,
    claimed_at: datetime | None,
) -> GateDecision:
    """The gate's action at ``now``.

    Args:
        now: Current time (aware).
        schedule: The allowed windows.
        newest_event: Time of the newest asset event that triggered this run (``None``: not asset-triggered,
            treated as "now").
        claimed_at: When the retrain of the occurrence open at ``now`` started, or ``None`` when none has.
    """
    now = require_aware(now, name="now")
    window = schedule.window_at(now)
    if window is None:
        upcoming = schedule.next_window(now)
        return GateDecision(
            WAIT,
            upcoming.start,
            upcoming.end,
            f"outside the window {schedule.describe()}; waiting until it opens at "
            f"{upcoming.start.isoformat()}",
        )
    if claimed_at is None:
        return GateDecision(
            TRAIN, window.start, window.end, f"first retrain in the window open until {window.end}"
        )
    newest = require_aware(newest_event, name="newest_event") if newest_event is not None else now
    if newest <= claimed_at:
        return GateDecision(
            SKIP,
            window.start,
            window.end,
            f"the retrain started at {claimed_at.isoformat()} in this window already covers this run's data "
            f"(newest event {newest.isoformat()})",
        )
    upcoming = schedule.next_window(window.end)
    return GateDecision(
        WAIT,
        upcoming.start,
        upcoming.end,
        f"this window already retrained at {claimed_at.isoformat()}; data from {newest.isoformat()} "
        f"trains in the next window, opening at {upcoming.start.isoformat()}",
    )
