"""The Cost page in a real api-server: refused without a login, and in headless Chromium after one."""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from airflow_server import AirflowServer

from costaware import Ledger

pytestmark = pytest.mark.slow
OUTPUT = Path(os.environ.get("COSTAWARE_TEST_OUTPUT", Path(__file__).resolve().parents[2] / "test-output"))


def _status(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.parametrize(
    "path", ["/costaware/api/summary", "/costaware/openapi.json", "/costaware/api/budgets"]
)
def test_api_refuses_unauthenticated_requests(server: tuple[AirflowServer, Ledger], path: str) -> None:
    airflow, _ = server
    assert _status(airflow.base + path) == 401
    assert _status(airflow.base + path, token="not-a-jwt") in (401, 403)


def test_api_answers_a_logged_in_user(server: tuple[AirflowServer, Ledger]) -> None:
    airflow, _ = server
    body = airflow.call("GET", "/costaware/api/summary?days=30")
    assert set(body) >= {"usd", "on_demand_usd", "savings_usd", "cache_hits", "egress_avoided_usd"}
    assert "/api/spend" in airflow.call("GET", "/costaware/openapi.json")["paths"]
    plugins = airflow.call("GET", "/api/v2/plugins")["plugins"]
    costaware = next(p for p in plugins if p["name"] == "costaware")
    assert costaware["external_views"][0]["url_route"] == "cost"


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise RuntimeError("Chromium not found: run `bash scripts/ensure_services.sh` (make test does)")
    return found


def test_person_logs_in_and_reads_the_cost_page(server: tuple[AirflowServer, Ledger]) -> None:
    from playwright.sync_api import sync_playwright

    airflow, ledger = server
    ledger.set_budget("project=flight-delays", "month", "25")
    airflow.wait_for_dag("cost_aware_retrain")
    run_id = airflow.trigger("cost_aware_retrain", {"replay_date": "2013-04-01"})
    assert airflow.wait_for_run("cost_aware_retrain", run_id) == "success", airflow.failure_report(
        "cost_aware_retrain", run_id
    )
    run_usd = sum(r["usd"] for r in ledger.entries(dag_id="cost_aware_retrain", run_id=run_id))
    assert run_usd > 0

    passwords = (airflow.home / "simple_auth_manager_passwords.json.generated").read_text()
    import json

    password = json.loads(passwords)["admin"]
    OUTPUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=_chromium(),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        page.goto(airflow.base + "/costaware/?days=30")
        # No login yet: the page sends the browser to Airflow's login page, with the way back.
        page.wait_for_url(lambda url: "/auth/login" in url and "next=" in url, timeout=30_000)
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/auth/login" not in url, timeout=30_000)
        assert page.url.endswith("/costaware/?days=30")  # and back to the page it asked for

        page.goto(airflow.base + "/costaware/?days=30&dag_id=cost_aware_retrain&group_by=task")
        page.wait_for_selector("svg.chart")
        text = page.inner_text("body")
        assert "Spend over time" in text and "Budget project=flight-delays/month" in text
        assert "cost_aware_retrain.retrain" in text
        assert page.locator("svg.chart rect").count() > 0  # bars drawn from the ledger
        page.screenshot(path=str(OUTPUT / "cost_page.png"), full_page=True)

        # The form as a new user uses it: "Show" with the DAG and scope fields empty is the page for all
        # DAGs, not raw JSON; a bad DAG id is a message on the page.
        page.goto(airflow.base + "/costaware/")
        page.click("button[type=submit]")
        page.wait_for_selector("svg.chart")
        text = page.inner_text("body")
        assert "Spend over time" in text and "string_pattern_mismatch" not in page.content()
        page.fill("input[name=dag_id]", "not a dag")
        page.click("button[type=submit]")
        page.wait_for_selector(".error")
        assert "DAG: 'not a dag' is not a DAG id" in page.inner_text("body")

        page.goto(airflow.base + "/plugin/cost")  # the nav entry: the page inside the Airflow UI
        page.wait_for_selector("iframe", timeout=30_000)
        page.wait_for_timeout(2000)
        page.screenshot(path=str(OUTPUT / "cost_page_in_airflow_ui.png"))
        browser.close()
    assert (OUTPUT / "cost_page.png").stat().st_size > 10_000
