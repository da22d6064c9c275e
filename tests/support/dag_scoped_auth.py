"""A simple auth manager with per-user DAG grants, for tests (Airflow's simple one grants all DAGs to all)."""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

#: user name -> the DAGs they may read; users not named may read every DAG their role allows.
DAG_SCOPES: dict[str, set[str]] = {"ann": {"churn_retrain"}, "vera": {"fraud_retrain"}}


class DagScopedAuthManager(SimpleAuthManager):
    """``SimpleAuthManager`` that also limits each user in :data:`DAG_SCOPES` to their DAGs."""

    def is_authorized_dag(  # type: ignore[override]
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        allowed = super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )
        if not allowed:
            return False
        scope = DAG_SCOPES.get(user.get_id())
        return scope is None or details is None or details.id is None or details.id in scope
