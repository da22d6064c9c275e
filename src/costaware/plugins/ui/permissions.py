"""The budget permission's names, shared by the check (``access.py``) and FAB's view (``fab_permissions.py``).

A module of its own, so that neither of the two imports the other for them (that was an import cycle).
"""

from __future__ import annotations

BUDGETS_VIEW = "Budgets"
#: The method on :data:`BUDGETS_VIEW` that setting a budget needs (FAB's ``can_edit``).
SET_BUDGETS_METHOD = "PUT"
FAB_AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
