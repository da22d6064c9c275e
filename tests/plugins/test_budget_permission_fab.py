"""Setting budgets under Airflow's FAB auth manager: ``airflow sync-perm`` creates the ``Budgets`` resource.

FAB creates resources only for the Flask-AppBuilder views registered with it, so the plugin declares one
(``appbuilder_views``) under FAB and none under any other auth manager. The slow test runs FAB for real: its
CLI (``sync-perm``, ``roles add-perms``, ``users create``), an api-server, FAB's own tokens and the Cost API.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.fab.auth_manager.fab_auth_manager import FabAuthManager
from airflow_server import api_server
from services import migrated_airflow_env, run_command

from costaware import Ledger
from costaware.adapters.ledger.audit import audit_log
from costaware.plugins.plugin import CostawarePlugin
from costaware.plugins.ui.permissions import FAB_AUTH_MANAGER

SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
#: user -> (FAB role, password, the cap in USD they try to set)
USERS = {
    "adm": ("Admin", "adm-pass-1", "100"),
    "opa": ("Op", "opa-pass-1", "110"),
    "vic": ("Viewer", "vic-pass-1", "120"),
}


class TeamFabAuthManager(FabAuthManager):
    """A deployment's own subclass of FAB's auth manager: it has the same resources."""


def test_the_budgets_view_is_declared_only_under_fab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", SIMPLE_AUTH_MANAGER)
    assert CostawarePlugin().appbuilder_views == []
    assert CostawarePlugin.appbuilder_views == []
    for manager in (FAB_AUTH_MANAGER, f"{__name__}.TeamFabAuthManager"):
        monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", manager)
        (declared,) = CostawarePlugin().appbuilder_views
        assert set(declared) == {"view"}, "a view without a name gets no menu entry"
        assert (declared["view"].class_permission_name, declared["view"].base_permissions) == (
            "Budgets",
            ["can_edit"],
        )


def _airflow(env: dict[str, str], *args: str) -> str:
    done = run_command(env, "airflow", *args)
    assert done.returncode == 0, f"airflow {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def _grants(env: dict[str, str]) -> dict[tuple[str, str], set[str]]:
    """(role, resource) -> actions, from ``airflow roles list -p -o json``."""
    out = _airflow(env, "roles", "list", "-p", "-o", "json")
    rows = json.loads(next(line for line in out.splitlines() if line.startswith("[")))
    return {(row["name"], row["resource"]): set(row["action"].split(",")) for row in rows}


def _call(base: str, method: str, path: str, body: Any, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), json.loads(response.read().decode() or "null")
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read().decode() or "null")


@pytest.mark.slow
def test_fab_admin_sets_budgets_after_sync_perm_and_a_granted_role_too(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    env = migrated_airflow_env(tmp_path, dags, AIRFLOW__CORE__AUTH_MANAGER=FAB_AUTH_MANAGER)
    _airflow(env, "sync-perm")
    granted = _grants(env)
    assert granted[("Admin", "Budgets")] == {"can_edit"}  # Admin gets every permission on sync
    assert ("Op", "Budgets") not in granted
    # The command (Admin has it already), and a grant to a role that does not have it.
    added = _airflow(env, "roles", "add-perms", "Admin", "-r", "Budgets", "-a", "can_edit")
    assert "Added 0 permission(s)" in added
    added = _airflow(env, "roles", "add-perms", "Op", "-r", "Budgets", "-a", "can_edit")
    assert "Added 1 permission(s)" in added
    for name, (role, password, _) in USERS.items():
        person = ["--firstname", name, "--lastname", "Test", "--email", f"{name}@example.com"]
        _airflow(env, "users", "create", "--username", name, "--password", password, "--role", role, *person)

    ledger_url = env["COSTAWARE_LEDGER_URL"]
    statuses: dict[str, tuple[int, Any]] = {}
    with api_server(env, tmp_path / "api-server.log") as (base, _):
        for name, (_, password, cap_usd) in USERS.items():
            status, body = _call(base, "POST", "/auth/token", {"username": name, "password": password})
            assert status in (200, 201), body
            change = {"scope": "project=churn", "period": "month", "cap_usd": cap_usd}
            statuses[name] = _call(base, "POST", "/costaware/api/budgets", change, body["access_token"])
    assert statuses["adm"] == (200, {"budget": "project=churn/month", "cap_usd": "100", "set_by": "adm"})
    assert statuses["opa"][0] == 200, statuses["opa"]
    assert statuses["vic"] == (403, {"detail": "user 'vic' may not set budgets: ask an admin"})

    ledger = Ledger.from_url(ledger_url)
    try:
        assert [b.cap_usd for b in ledger.budgets()] == [Decimal("110")]
        assert [e.actor for e in audit_log(ledger, action="budget_set")] == ["adm", "opa"]
    finally:
        ledger.dispose()
