"""The Cost page's own form in headless Chromium: "Show" with its defaults, then with a bad filter.

The app runs in a real uvicorn server; the login check is Airflow's and is tested against a real
api-server in tests/integration/test_cost_page.py.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware import Ledger
from costaware.core.ledger import Kind, LedgerEntry
from costaware.plugins.ui.app import cost_app
from costaware.plugins.ui.deps import readable_dags, require_login

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: bash scripts/ensure_services.sh")


@contextmanager
def serve() -> Iterator[str]:
    """The Cost app in a real uvicorn on a free port, logged in as a user who may read every DAG."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cost_app.dependency_overrides[require_login] = lambda: None
    cost_app.dependency_overrides[readable_dags] = lambda: None  # every DAG; see test_cost_access.py
    server = uvicorn.Server(uvicorn.Config(cost_app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        cost_app.dependency_overrides.clear()


@pytest.fixture
def page_url(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "25")
    ledger.record(
        LedgerEntry(
            dag_id="retrain",
            run_id="r1",
            task_id="train",
            kind=Kind.COMPUTE,
            usd=Decimal("3.25"),
            tags={"project": "churn"},
            incurred_at=datetime.now(timezone.utc),
        )
    )
    with serve() as url:
        yield url
    ledger.dispose()


@pytest.fixture
def busy_page_url(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """25 DAGs, runs whose ids differ only late, and amounts in the millions."""
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "5000000")
    # A budget of three long tags: its chart's title (scope, and what is left to the micro-dollar) ran past
    # the chart's right edge.
    long_scope = "project=churn,team=team-0,cost_center=machine-learning-research-and-development"
    ledger.set_budget(long_scope, "month", "5000000.123456")
    now = datetime.now(timezone.utc)
    for n in range(25):
        ledger.record(
            LedgerEntry(
                dag_id=f"retrain_{n:02d}",
                run_id=f"manual__2026-11-23T18:00:00.{n:06d}+00:00",
                task_id="train",
                kind=Kind.COMPUTE,
                usd=Decimal("1234567.891234") / (n + 1),
                tags={"project": "churn", "team": f"team-{n % 3}"},
                incurred_at=now - timedelta(days=n % 5),
            )
        )
    with serve() as url:
        yield url
    ledger.dispose()


def test_show_with_the_defaults_then_a_bad_filter(page_url: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.goto(page_url)
        assert page.input_value("input[name=dag_id]") == "" and page.input_value("input[name=scope]") == ""
        page.click("button[type=submit]")  # "Show" with every field as the form offers it
        page.wait_for_load_state()
        assert "dag_id=&" in page.url  # the empty DAG field was sent, as the user saw in the issue
        text = page.inner_text("body")
        assert "Spend over time" in text and "$3.25" in text and "string_pattern_mismatch" not in text
        options = page.locator("select[name=group_by] option").all_inner_texts()
        assert {"dag", "task", "run", "tag:team", "tag:project"} <= set(options)

        page.select_option("select[name=group_by]", "task")
        page.fill("input[name=dag_id]", "no such dag!")
        page.click("button[type=submit]")
        page.wait_for_load_state()
        text = page.inner_text("body")
        assert "Cannot show costs" in text and "DAG: 'no such dag!' is not a DAG id" in text
        assert '"detail"' not in page.content()
        assert page.input_value("input[name=dag_id]") == "no such dag!"  # refilled, to fix it
        assert page.locator("select[name=group_by]").input_value() == "task"

        page.fill("input[name=dag_id]", "retrain")
        page.click("button[type=submit]")
        page.wait_for_load_state()
        assert "retrain.train" in page.inner_text("body")
        browser.close()


# Every text of every chart, measured by Chromium: inside its SVG, and each bar label left of its bar.
MEASURE = """() => [...document.querySelectorAll('svg.chart')].map(svg => {
  const scale = svg.viewBox.baseVal.width / svg.getBoundingClientRect().width;
  const left = svg.getBoundingClientRect().left;
  const texts = [...svg.querySelectorAll('text')].map(t => {
    const box = t.getBoundingClientRect();
    const bar = t.nextElementSibling && t.nextElementSibling.tagName === 'rect' ? t.nextElementSibling : null;
    return {text: t.textContent, x0: (box.left - left) * scale, x1: (box.right - left) * scale,
            cls: t.getAttribute('class'), next: bar ? Number(bar.getAttribute('x')) : null};
  });
  return {title: svg.getAttribute('aria-label'), width: svg.viewBox.baseVal.width, texts};
})"""


def test_chart_texts_are_not_clipped_and_labels_do_not_collide(busy_page_url: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        page.goto(busy_page_url + "?group_by=run")
        charts = page.evaluate(MEASURE)
        legend = page.locator(".legend .key").all_inner_texts()
        colours = page.locator(".legend .key i").evaluate_all("els => els.map(e => e.style.background)")
        browser.close()
    assert len(charts) >= 5
    for chart in charts:
        for t in chart["texts"]:
            assert t["x0"] >= -0.5 and t["x1"] <= chart["width"] + 0.5, (chart["title"], t)
            if t["cls"] == "label" and t["next"] is not None:
                assert t["x1"] <= t["next"] + 0.5, (chart["title"], t)  # the bar starts after its label
    runs = next(c for c in charts if c["title"] == "Spend per run (top 10)")
    labels = [t["text"] for t in runs["texts"] if t["cls"] == "label" and t["next"] is not None]
    assert len(labels) == 10 and len(set(labels)) == 10  # ids differing only in microseconds stay apart
    assert legend[-1] == "other (5 groups)" and len(legend) == 21
    assert len(set(colours)) == 21


def test_a_narrow_window_scrolls_wide_tables_in_their_own_box(busy_page_url: str) -> None:
    # At 800 px the tries' table (11 columns, notes) made the whole page scroll sideways.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 800, "height": 1200})
        page.goto(busy_page_url + "?group_by=run")
        page_width = page.evaluate("document.documentElement.scrollWidth")
        tables = page.locator("table").count()
        browser.close()
    assert tables >= 2 and page_width <= 800
