"""Who may see which costs on the Cost page and API, from Airflow's own auth manager.

A user sees the entries of the DAGs the auth manager lets them read (``GET`` on the DAG), and the budgets
whose spending DAGs they may all read. Setting a budget needs ``[costaware] budget_admin_role`` (default
``ADMIN``) under the simple auth manager, and ``PUT`` on the custom view ``Budgets`` under any other
(e.g. FAB: the permission ``can_edit`` on ``Budgets``).
"""

from __future__ import annotations

from typing import Any

BUDGETS_VIEW = "Budgets"


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
    from airflow.sdk import conf

    if isinstance(user, SimpleAuthManagerUser):
        # The simple auth manager allows every custom view to every role: decide by the role.
        wanted = str(conf.get("costaware", "budget_admin_role", fallback="ADMIN")).upper()
        return (user.role or "").upper() == wanted
    return bool(
        _auth_manager().is_authorized_custom_view(method="PUT", resource_name=BUDGETS_VIEW, user=user)
    )
