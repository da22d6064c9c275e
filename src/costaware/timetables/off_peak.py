"""``OffPeakTimetable``: one run per allowed window, started when it opens; the data interval is the window.

``OffPeakTimetable(windows=["22:00-06:00"], days="mon-fri", timezone="America/New_York")`` starts a run at
22:00 New York time on weekdays, with ``data_interval_start`` = 22:00 and ``data_interval_end`` = 06:00 the
next morning, so downstream tasks (``SpotWindowSensor``) know how long the window lasts. The window math is in
``costaware.core.windows`` (DST-correct: a window may last 7 or 9 hours on the nights clocks change).

Register it with the plugin (``timetables = [OffPeakTimetable]``) and import it in DAGs from
``costaware.timetables``; both name the same class, whose registry key is
``costaware.timetables.off_peak.OffPeakTimetable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pendulum
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction, Timetable

from costaware.core.ledger import utcnow
from costaware.core.windows import Window, WindowSchedule


def _pendulum(instant: datetime) -> pendulum.DateTime:
    return pendulum.instance(instant, tz="UTC")


class OffPeakTimetable(Timetable):
    """Runs at the start of each allowed window; the data interval is the window.

    See docs/spot-windows.md.

    Args:
        windows: Local wall-clock windows, e.g. ``["22:00-06:00"]`` (an end before the start is the next day).
        days: Days on which a window opens: ``"mon-fri"``, ``"sat,sun"``, ``"daily"``.
        timezone: IANA zone of the wall-clock times.

    Raises:
        ConfigurationError: a window that cannot exist (``"25:00-03:00"``), overlapping windows, an unknown
            day or zone.
    """

    periodic = True
    run_ordering: Sequence[str] = ("data_interval_end", "logical_date")

    def __init__(
        self,
        windows: Sequence[str] | str = ("22:00-06:00",),
        days: str | Sequence[str] = "daily",
        timezone: str = "UTC",
    ) -> None:
        self.windows = [windows] if isinstance(windows, str) else list(windows)
        self.days = days if isinstance(days, str) else ",".join(days)
        self.timezone = str(timezone)
        self._schedule = WindowSchedule.parse(self.windows, self.days, self.timezone)
        self.description = (
            f"One run per off-peak window {self._schedule.describe()}; the data interval is the window "
            "(DST-aware: a window can be an hour shorter or longer on the nights clocks change)."
        )

    @property
    def summary(self) -> str:
        """Short text for the UI's schedule column."""
        return f"off-peak {self._schedule.describe()}"

    def serialize(self) -> dict[str, Any]:
        """JSON-able constructor arguments."""
        return {"windows": self.windows, "days": self.days, "timezone": self.timezone}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> Timetable:
        """Inverse of :meth:`serialize`."""
        return cls(windows=data["windows"], days=data["days"], timezone=data["timezone"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffPeakTimetable) and self.serialize() == other.serialize()

    def __hash__(self) -> int:
        return hash((tuple(self.windows), self.days, self.timezone))

    @staticmethod
    def _info(window: Window) -> DagRunInfo:
        start, end = _pendulum(window.start), _pendulum(window.end)
        # The run starts when the window opens (not when it closes, as interval timetables do): the work must
        # happen inside the window.
        return DagRunInfo(run_after=start, data_interval=DataInterval(start=start, end=end))

    def infer_manual_data_interval(self, *, run_after: pendulum.DateTime) -> DataInterval:
        """The window open at ``run_after``, else the next one to open; never one that already ended.

        The trigger form pre-fills the logical date with "now", and Airflow passes it here: a run started by
        hand between windows gets the next window, so its spot window waits for it to open instead of
        deciding against a deadline hours in the past. (A logical date in the past, e.g. a replay with
        ``airflow dags test dag 2013-02-01``, gets the window open then or the next one after it.)
        """
        window = self._schedule.next_window(run_after, include_open=True)
        return DataInterval(start=_pendulum(window.start), end=_pendulum(window.end))

    def next_dagrun_info(
        self, *, last_automated_data_interval: DataInterval | None, restriction: TimeRestriction
    ) -> DagRunInfo | None:
        """The next window after the last run's; without catchup, the window open now or the next one."""
        if last_automated_data_interval is not None:
            window = self._schedule.next_window(last_automated_data_interval.end)
        elif restriction.earliest is None:
            return None
        else:
            window = self._schedule.next_window(restriction.earliest)
        if not restriction.catchup:
            now = pendulum.instance(utcnow())
            if window.end <= now:
                window = self._schedule.next_window(now, include_open=True)
        if restriction.earliest is not None and window.start < restriction.earliest:
            window = self._schedule.next_window(restriction.earliest)
        if restriction.latest is not None and window.start > restriction.latest:
            return None
        return self._info(window)
