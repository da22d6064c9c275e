"""Who may see which costs on the Cost page and API, from Airflow's own auth manager.

A user sees the entries of the DAGs the auth manager lets them read (``GET`` on the DAG), and the budgets
whose DAGs (spending, holding money or asking for it there) they may all read. Setting a budget needs
``[costaware] budget_admin_role`` (default ``ADMIN``) under the simple auth manager, and ``PUT`` on the
custom view ``Budgets`` under any other (e.g. FAB: the permission ``can_edit`` on ``Budgets``, which
:func:`fab_permission_views` declares so that ``airflow sync-perm`` creates it and gives it to Admin).
"""

from __future__ import annotations

import logging
from typing import Any

from costaware.plugins.ui.permissions import BUDGETS_VIEW, FAB_AUTH_MANAGER, SET_BUDGETS_METHOD

log = logging.getLogger(__name__)

__all__ = ["fab_permission_views", "may_set_budgets", "readable_dag_ids", "user_name"]


def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def readable_dag_ids(user: Any, candidates: set[str]) -> frozenset[str]:
    """Of ``candidates`` (the DAGs in the ledger), those ``user`` may read."""
    return frozenset(
        _auth_manager().filter_authorized_dag_ids(dag_ids=set(candidates), user=user, method="GET")
    )


def user_name(user: Any) -> str:
    """The user's name for the audit trail."""
    for attr in ("get_name", "get_id"):
        getter = getattr(user, attr, None)
        if callable(getter):
            value = getter()
            if value:
                return str(value)
    return "unknown"


def may_set_budgets(user: Any) -> bool:
    """Whether ``user`` holds the permission to create or change budgets."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from costaware.settings import option

    if isinstance(user, SimpleAuthManagerUser):
        # The simple auth manager allows every custom view to every role: decide by the role, as Airflow
        # orders them (a role covers those below it: ADMIN may whatever OP may).
        from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManagerRole

        order = {role.name: role.order for role in SimpleAuthManagerRole}
        wanted = option("budget_admin_role").strip().upper()
        if wanted not in order:
            log.error("%s", budget_role_problem())
            return False
        return bool(order.get((user.role or "").upper(), -1) >= order[wanted])
    return bool(
        _auth_manager().is_authorized_custom_view(
            method=SET_BUDGETS_METHOD, resource_name=BUDGETS_VIEW, user=user
        )
    )


def budget_role_problem() -> str:
    """What is wrong with ``[costaware] budget_admin_role`` under the simple auth manager, else ""."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManagerRole

    from costaware.settings import option

    given = option("budget_admin_role")
    roles = [role.name for role in SimpleAuthManagerRole]
    if given.strip().upper() in roles:
        return ""
    # As typed, not upper-cased: the setting to look for is the one written.
    return (
        f"[costaware] budget_admin_role {given!r} is not a role of the simple auth manager "
        f"({', '.join(roles)}): nobody may set budgets until it is fixed"
    )


def fab_permission_views() -> list[dict[str, Any]]:
    """The plugin's ``appbuilder_views``: under the FAB auth manager, the view that declares ``Budgets``.

    FAB knows only the resources of the Flask-AppBuilder views registered with it. ``airflow sync-perm``
    (and the api-server at start, with ``[fab] update_fab_perms``) registers every plugin's
    ``appbuilder_views``, creates the permissions they declare and gives them to Admin; without a view,
    ``Budgets`` does not exist and nobody, Admin included, may set a budget. Under any other auth manager
    there is no view: Airflow would mount a Flask app for it, and fail without the FAB provider.
    """
    from airflow.api_fastapi.app import get_auth_manager_cls

    manager = get_auth_manager_cls()
    if not any(f"{cls.__module__}.{cls.__qualname__}" == FAB_AUTH_MANAGER for cls in manager.__mro__):
        return []
    from costaware.plugins.ui.fab_permissions import BudgetsPermissionView

    return [{"view": BudgetsPermissionView()}]
