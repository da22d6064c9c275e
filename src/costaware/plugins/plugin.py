"""The costaware Airflow plugin: registration only (listener, timetable, Cost page)."""

from __future__ import annotations

from urllib.parse import urlsplit

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import conf

from costaware.plugins.listener import cost_listener
from costaware.plugins.ui.app import cost_app
from costaware.timetables.off_peak import OffPeakTimetable

URL_PREFIX = "/costaware"
# The UI may live under a sub-path ([api] base_url); the nav link must include it.
_BASE_PATH = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


class CostawarePlugin(AirflowPlugin):
    """Registers the cost listener, the off-peak timetable and the Cost page with Airflow."""

    name = "costaware"
    listeners = [cost_listener]
    # Registered under costaware.timetables.off_peak.OffPeakTimetable, the class's own module path.
    timetables = [OffPeakTimetable]
    fastapi_apps = [{"app": cost_app, "url_prefix": URL_PREFIX, "name": "costaware Cost API"}]
    external_views = [
        {
            "name": "Cost",
            "href": f"{_BASE_PATH}{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "cost",
        }
    ]
