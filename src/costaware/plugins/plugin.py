"""The costaware Airflow plugin: registration only (listener, timetable, Cost page, FAB permission)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import conf

from costaware.plugins.listener import cost_listener
from costaware.plugins.ui.app import cost_app
from costaware.settings import log_section_problems
from costaware.timetables.off_peak import OffPeakTimetable

URL_PREFIX = "/costaware"
# Every Airflow process loads the plugin: a misspelt [costaware] option or a worker instance type with no
# price is logged as an error when the scheduler, api-server or a task starts, not found from $0 tries.
log_section_problems()
# The UI may live under a sub-path ([api] base_url); the nav link must include it.
_BASE_PATH = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


class _FabPermissionViews:
    """``appbuilder_views`` worked out when Airflow reads them, not when the plugin is imported.

    Every task process imports the plugin (for the listener); only the api-server, ``airflow sync-perm`` and
    ``airflow plugins`` read ``appbuilder_views``, and only they should pay for finding out which auth
    manager is configured (importing it takes about a second).
    """

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        from costaware.plugins.ui.access import fab_permission_views

        return fab_permission_views()


class CostawarePlugin(AirflowPlugin):
    """Registers the cost listener, the off-peak timetable, the Cost page and its FAB permission."""

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
    # Under the FAB auth manager: the `Budgets` resource, so `airflow sync-perm` creates it (see access.py).
    appbuilder_views = _FabPermissionViews()
