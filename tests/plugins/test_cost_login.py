"""A browser without a valid session is sent to Airflow's login page; scripts keep their 401 (issue 23: D14).

The Cost app is mounted under ``/costaware`` in a parent app, as the api-server mounts it; the login check
and the login URL are Airflow's own (the simple auth manager of the test configuration).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from costaware.plugins.ui.app import cost_app


@pytest.fixture
def server(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    from airflow.api_fastapi import app as airflow_app

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    airflow_app.purge_cached_app()
    airflow_app.create_auth_manager()
    parent = FastAPI()
    parent.mount("/costaware", cost_app)
    cost_app.dependency_overrides.clear()  # Airflow's real login check
    yield TestClient(parent, follow_redirects=False)
    airflow_app.purge_cached_app()


def expired_token() -> str:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    user = SimpleAuthManagerUser(username="ann", role="viewer")
    return get_auth_manager().generate_jwt(user, expiration_time_in_seconds=-3600)


@pytest.mark.parametrize(
    "cookie", [None, "not-a-jwt", "expired"], ids=["no session", "unreadable session", "expired session"]
)
def test_the_page_sends_a_browser_without_a_session_to_the_login_page_and_back(
    server: TestClient, cookie: str | None
) -> None:
    if cookie is not None:
        server.cookies.set("_token", expired_token() if cookie == "expired" else cookie)
    response = server.get("/costaware/", params={"days": "7", "group_by": "task"})
    assert response.status_code == 303, response.text
    target = urlsplit(response.headers["location"])
    assert target.path == "/auth/login"  # the simple auth manager's login page
    assert parse_qs(target.query)["next"] == ["/costaware/?days=7&group_by=task"]  # back to the same view
    assert "detail" not in response.text


def test_the_json_api_keeps_its_401(server: TestClient) -> None:
    for path in ("/costaware/api/summary", "/costaware/openapi.json", "/costaware/api/budgets"):
        response = server.get(path)
        assert response.status_code == 401 and response.json() == {"detail": "Not authenticated"}, path


def test_a_script_with_a_bad_token_gets_the_status_not_a_redirect(server: TestClient) -> None:
    response = server.get("/costaware/", headers={"Authorization": "Bearer not-a-jwt"})
    assert response.status_code == 403 and "location" not in response.headers
