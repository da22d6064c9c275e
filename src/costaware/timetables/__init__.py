"""Timetables: ``OffPeakTimetable`` (registered by the costaware plugin)."""

from __future__ import annotations

from costaware.timetables.off_peak import OffPeakTimetable

__all__ = ["OffPeakTimetable"]
