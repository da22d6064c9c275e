"""The costaware Airflow plugin: registration only (listener, timetables, UI)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from costaware.plugins.listener import cost_listener


class CostawarePlugin(AirflowPlugin):
    """Registers the cost listener with Airflow."""

    name = "costaware"
    listeners = [cost_listener]
