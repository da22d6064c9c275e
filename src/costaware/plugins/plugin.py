"""The costaware Airflow plugin: registration only (listener, timetables, UI)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from costaware.plugins.listener import cost_listener
from costaware.timetables.off_peak import OffPeakTimetable


class CostawarePlugin(AirflowPlugin):
    """Registers the cost listener and the off-peak timetable with Airflow."""

    name = "costaware"
    listeners = [cost_listener]
    # Registered under costaware.timetables.off_peak.OffPeakTimetable, the class's own module path.
    timetables = [OffPeakTimetable]
