"""The Cost page and API routes; authentication is tested against a real api-server in tests/integration."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from html import escape

import pytest
from fastapi.testclient import TestClient

from costaware import Ledger
from costaware.adapters.ledger.reports import Filters, burn_down, costliest_tries, daily_spend, summary
from costaware.core.ledger import Kind, LedgerEntry
from costaware.plugins.ui.app import cost_app
from costaware.plugins.ui.deps import readable_dags, require_login


def entry(usd: str, **overrides: object) -> LedgerEntry:
    values: dict[str, object] = {
        "dag_id": "retrain",
        "run_id": "r1",
        "task_id": "train",
        "kind": Kind.COMPUTE,
        "usd": Decimal(usd),
        "quantity": Decimal("0.5"),
        "tags": {"project": "churn", "team": "ml"},
        "market": "on_demand",
        "instance_type": "m5.large",
    }
    values.update(overrides)
    return LedgerEntry(**values)


@pytest.fixture
def filled(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100")
    now = datetime.now(timezone.utc)
    ledger.record(entry("3.00", on_demand_usd=Decimal("10"), market="spot"))
    ledger.record(entry("1.50", task_id="prep", run_id="r2", tags={"project": "churn", "team": "data"}))
    ledger.record(entry("2.00", task_id="train", outcome="failed", cause="preemption", try_number=2))
    ledger.record(entry("0.40", task_id="features", estimated=True, outcome="cache_hit"))
    ledger.record(entry("0.90", kind=Kind.EGRESS, estimated=True, unit="gb"))
    ledger.record(entry("99", incurred_at=now - timedelta(days=90)))  # outside the 30-day window
    return ledger


@pytest.fixture
def client(filled: Ledger) -> Iterator[TestClient]:
    cost_app.dependency_overrides[require_login] = lambda: None
    cost_app.dependency_overrides[readable_dags] = lambda: None  # every DAG; see test_cost_access.py
    yield TestClient(cost_app)
    cost_app.dependency_overrides.clear()


def test_summary_figures(filled: Ledger) -> None:
    s = summary(filled, Filters(since=datetime.now(timezone.utc) - timedelta(days=30)))
    assert (s.usd, s.on_demand_usd, s.savings_usd) == (Decimal("6.5"), Decimal("13.5"), Decimal("7"))
    assert (s.cache_hits, s.cache_avoided_usd, s.egress_avoided_usd) == (1, Decimal("0.4"), Decimal("0.9"))
    assert (s.failed_tries, s.preempted_tries) == (1, 1)


def test_daily_tries_and_burn_down(filled: Ledger) -> None:
    recent = Filters(since=datetime.now(timezone.utc) - timedelta(days=30))
    (point,) = daily_spend(filled, recent, "dag")
    assert point[1:] == ("retrain", Decimal("6.5"))
    # By cause: the entries without one are "(none)", as in the report's rows, not a blank group.
    assert {(g, usd) for _, g, usd in daily_spend(filled, recent, "cause")} == {
        ("(none)", Decimal("4.5")),
        ("preemption", Decimal("2")),
    }
    assert [t["usd"] for t in costliest_tries(filled, recent, 2)] == [Decimal("3"), Decimal("2")]
    (budget,) = burn_down(filled)
    assert budget.usage.cap_usd == 100 and budget.cumulative[-1][1] == budget.usage.spent_usd


def test_api_summary_and_spend(client: TestClient) -> None:
    body = client.get("/api/summary").json()
    assert body["usd"] == "6.500000" and body["savings_usd"] == "7.000000" and body["cache_hits"] == 1
    rows = client.get("/api/spend", params={"group_by": "tag:team"}).json()["rows"]
    assert {r["group"]: r["usd"] for r in rows} == {"ml": "5.000000", "data": "1.500000"}
    assert client.get("/api/budgets").json()["budgets"][0]["left_usd"] == "93.500000"
    assert client.get("/api/top-tries", params={"limit": 1}).json()["tries"][0]["usd"] == "3.000000"
    assert client.get("/api/daily").json()["points"][0]["group"] == "retrain"


def test_a_budget_says_what_spend_gates_hold_in_it(filled: Ledger, client: TestClient) -> None:
    # An approved overage read "-$56.50 left" beside "spent $6.50": the money held was on no part of the page.
    def budgets() -> str:
        page = client.get("/").text
        return page[page.index("<h2>Budgets</h2>") : page.index("<h2>Spend by tag</h2>")]

    assert "Budget project=churn/month (" in budgets() and "reserved by spend gates" not in budgets()
    filled.reserve("project=churn", "150", holder="retrain/r9/spend_gate/-1", approved_by="ann")
    assert ": -$56.50 left" in budgets()
    assert "$150.00 reserved by spend gates, not spent yet: counted in what is left." in budgets()


def test_the_costliest_tries_say_why_in_the_api_and_on_the_page(filled: Ledger, client: TestClient) -> None:
    """A try's cause and note (why it failed, why it ran on on-demand) reach the JSON and the page's table,
    the whole note in the cell's tooltip however the cell cuts it."""
    why = 'attempt 2, job j-7 on batch, 3600 s billed: on-demand: restart thrash in us-west-2a & <2b> "x"'
    filled.record(entry("5.00", task_id="retrain", market="on_demand", cause="", note=why))
    tries = client.get("/api/top-tries", params={"limit": 3}).json()["tries"]
    assert [(t["usd"], t["cause"], t["note"]) for t in tries] == [
        ("5.000000", "", why),
        ("3.000000", "", ""),
        ("2.000000", "preemption", ""),
    ]
    page = client.get("/").text
    table = page[page.index("<h2>Most expensive task tries</h2>") :]
    assert f'<td class="entry-note" title="{escape(why)}"><div>{escape(why)}</div></td>' in table
    assert "<td>failed</td><td>preemption</td>" in table


def test_api_spend_and_page_give_kg_co2e_and_unknown(filled: Ledger, client: TestClient) -> None:
    filled.record(entry("1.00", task_id="green", kg_co2e=Decimal("0.25"), kwh=Decimal("1.2")))
    filled.record(entry("1.00", task_id="prep", run_id="r3", kg_co2e=Decimal("4.5")))
    body = client.get("/api/spend", params={"group_by": "task"}).json()
    rows = {r["group"]: (r["kg_co2e"], r["co2e_unknown_entries"]) for r in body["rows"]}
    assert rows == {
        "retrain.green": ("0.250000", 0),
        "retrain.prep": ("4.500000", 1),  # the known sum; one try of the group is unknown
        "retrain.train": (None, 2),  # unknown, not 0
        "retrain.features": (None, 0),  # an estimate (a cache hit) only: nothing actual to count
    }
    page = client.get("/", params={"group_by": "task"}).text
    assert "<th>kg CO2e</th>" in page
    for shown in ("<td>0.250</td>", "<td>4.500+?</td>", "<td>unknown</td>"):
        assert shown in page


def test_group_by_is_read_whatever_its_case_as_the_cli_reads_it(client: TestClient) -> None:
    # `costaware report --group-by TASK` worked while the API answered 422 for the same word.
    expected = client.get("/api/spend", params={"group_by": "task"}).json()
    for typed in ("TASK", "Task", " task "):
        body = client.get("/api/spend", params={"group_by": typed}).json()
        assert body == expected, typed
        daily = client.get("/api/daily", params={"group_by": typed})
        assert daily.status_code == 200 and daily.json()["group_by"] == "task"
    # A tag keyword in any case; the tag's name as given (a tag Team is not team).
    by_team = client.get("/api/spend", params={"group_by": "tag:team"}).json()
    assert client.get("/api/spend", params={"group_by": "TAG:team"}).json() == by_team
    page = client.get("/", params={"group_by": "Task"}).text
    assert "Group by" not in page.split("<form", 1)[0] and "is not one of" not in page
    assert '<option value="task" selected' in page


@pytest.mark.parametrize(
    "typed",
    [
        "task",
        "TASK",
        "Task",
        " task ",
        "Outcome",
        "tag:team",
        "TAG:team",
        "Tag:Team",
        "week",
        "tag:",
        "TAG:1x",
    ],
)
def test_the_openapi_group_by_pattern_takes_what_the_api_takes(client: TestClient, typed: str) -> None:
    # The schema published the lowercase-only pattern, so a client validating by it refused TASK.
    schema = client.get("/openapi.json").json()
    (group_by,) = [p for p in schema["paths"]["/api/spend"]["get"]["parameters"] if p["name"] == "group_by"]
    accepted = client.get("/api/spend", params={"group_by": typed}).status_code == 200
    assert bool(re.search(group_by["schema"]["pattern"], typed)) == accepted, (typed, accepted)


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/spend", {"group_by": "dag; DROP TABLE costaware_entries"}),
        ("/api/spend", {"group_by": "tag:"}),
        ("/api/summary", {"days": 0}),
        ("/api/summary", {"dag_id": "a b"}),
        ("/api/summary", {"scope": "project"}),
        ("/api/summary", {"since": "2026-01-01T00:00:00"}),
        ("/api/top-tries", {"limit": 1000}),
    ],
)
def test_bad_filters_are_rejected_before_any_query(
    client: TestClient, filled: Ledger, path: str, params: dict[str, object]
) -> None:
    response = client.get(path, params=params)
    assert response.status_code == 422, response.text
    assert filled.spent("*") == Decimal("105.5")  # the table is intact


@pytest.mark.parametrize(
    ("path", "params", "said"),
    [
        ("/api/summary", {"dag_id": "a b"}, "dag_id: 'a b' is not a DAG id: use letters, digits, '_', '.'"),
        ("/api/budgets", {"dag_id": "a/b"}, "dag_id: 'a/b' is not a DAG id"),
        ("/api/spend", {"group_by": "taks"}, "group_by: 'taks' is not a grouping: use one of dag, task, run"),
        ("/api/daily", {"group_by": "tag:"}, "group_by: 'tag:' is not a grouping"),
    ],
)
def test_a_bad_dag_id_or_grouping_is_answered_in_words_not_a_regex(
    client: TestClient, path: str, params: dict[str, str], said: str
) -> None:
    # The 422 held pydantic's "String should match pattern '^[A-Za-z0-9_.-]{1,250}$'" and not the value.
    response = client.get(path, params=params)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail.startswith(said) and "^" not in detail, detail
    assert client.get("/api/spend").json()["group_by"] == "dag"  # the default is kept
    assert client.get("/api/summary", params={"dag_id": "retrain"}).status_code == 200
    schema = client.get("/openapi.json").json()["paths"]["/api/spend"]["get"]["parameters"]
    assert {p["name"]: p["schema"].get("pattern") for p in schema}["group_by"]  # still documented


def test_page_renders_svg_charts_and_numbers(client: TestClient) -> None:
    page = client.get("/", params={"group_by": "task"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert html.count("<svg") >= 4
    assert "$6.50" in html and "Savings vs on-demand" in html and "$7.00" in html
    assert "Budget project=churn/month" in html
    assert "retrain.train" in html and "http" not in html.split("<body>")[1].replace("http-equiv", "")


def test_counts_on_the_page_are_grouped_in_thousands(filled: Ledger, client: TestClient) -> None:
    # "1001 entries" beside "$1,001.00": a count read at a glance as a tenth of itself.
    for n in range(1000):
        filled.record(entry("1", task_id="score", run_id=f"bulk-{n}", outcome="failed"))
    html = client.get("/", params={"group_by": "task"}).text
    assert "1,005 entries, last 30 days" in html
    failed = '<div class="label">Failed tries</div><div class="value">1,001</div>'
    assert failed + '<div class="note">1 preempted</div>' in html
    assert "<td>retrain.score</td><td>1,000</td>" in html


def test_a_grouping_by_a_tag_no_entry_has_says_so_on_the_page(client: TestClient) -> None:
    # "tag:proj" showed one "(none)" row of every dollar, as if no run had been tagged.
    html = client.get("/", params={"group_by": "tag:proj"}).text
    assert "<td>(none)</td>" in html
    assert (
        "no entry in this report has the tag &#x27;proj&#x27; (did you mean &#x27;project&#x27;?): check its "
        "spelling and case (tags on the ledger&#x27;s newest entries: project, team)."
    ) in html
    assert "no entry in this report has the tag" not in client.get("/", params={"group_by": "tag:team"}).text


@pytest.mark.parametrize("path", ["/api/spend", "/api/daily"])
def test_a_grouping_by_a_tag_no_entry_has_says_so_in_the_api(client: TestClient, path: str) -> None:
    # The page and `costaware report` said so; the API answered one "(none)" group of every dollar, no word.
    answer = client.get(path, params={"group_by": "tag:proj"}).json()
    groups = {row["group"] for row in answer["rows" if path == "/api/spend" else "points"]}
    assert groups == {"(none)"}
    assert answer["note"] == (
        "no entry in this report has the tag 'proj' (did you mean 'project'?): check its spelling and case "
        "(tags on the ledger's newest entries: project, team)"
    )
    # A tag in the wrong case is named as the entries spell it, as a scope's tag is.
    cased = client.get(path, params={"group_by": "tag:Team"}).json()["note"]
    assert cased.startswith("no entry in this report has the tag 'Team' (did you mean 'team'?): check")
    assert client.get(path, params={"group_by": "tag:team"}).json()["note"] is None
    assert client.get(path, params={"group_by": "task"}).json()["note"] is None


def test_openapi_lists_the_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/summary", "/api/spend", "/api/daily", "/api/budgets", "/api/top-tries", "/"} <= set(paths)
    assert "/api/gates" in paths


def test_unreachable_ledger_is_503(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "postgresql://nobody@127.0.0.1:1/ledger")
    response = client.get("/api/summary")
    assert response.status_code == 503 and "cannot" in response.json()["detail"]


def test_a_ledger_database_gone_missing_is_503_not_a_bad_request() -> None:
    # Read from a ledger already open, a database dropped since raises LedgerDatabaseMissingError, a
    # ConfigurationError: the page answered 422 "bad filters" with the CREATE DATABASE hint.
    from fastapi import HTTPException

    from costaware.core.errors import LedgerDatabaseMissingError
    from costaware.plugins.ui.deps import guard

    def read() -> None:
        raise LedgerDatabaseMissingError("database 'ledger' does not exist: CREATE DATABASE ledger;")

    with pytest.raises(HTTPException) as answered:
        guard(read)
    assert answered.value.status_code == 503 and "CREATE DATABASE" not in str(answered.value.detail)


def test_the_form_s_defaults_show_the_page_not_json(client: TestClient) -> None:
    # What "Show" sends with the DAG and scope fields left empty.
    page = client.get("/", params={"days": "30", "dag_id": "", "group_by": "dag", "scope": ""})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "$6.50" in page.text and "string_pattern_mismatch" not in page.text
    all_scope = client.get("/", params={"days": "", "dag_id": "", "scope": "*", "group_by": ""})
    assert all_scope.status_code == 200 and "$6.50" in all_scope.text
    # Spaces typed around ',' and '=' are taken, as `costaware report --scope` takes them.
    spaced = client.get("/", params={"days": "30", "scope": "project = churn, team=ml", "group_by": "dag"})
    assert spaced.status_code == 200 and "is not a tag filter" not in spaced.text


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"dag_id": "a b"}, "DAG: 'a b' is not a DAG id"),
        ({"scope": "project"}, "Scope: 'project' is not a tag filter"),
        ({"days": "abc"}, "Days: 'abc' is not a whole number from 1 to 366"),
        ({"group_by": "dag; DROP TABLE x"}, "Group by: 'dag; DROP TABLE x' is not one of dag, task"),
        ({"since": "2026-01-01T00:00:00"}, "has no time zone"),
    ],
)
def test_a_bad_filter_is_a_readable_message_on_the_page(
    client: TestClient, filled: Ledger, params: dict[str, str], message: str
) -> None:
    page = client.get("/", params=params)
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "Cannot show costs" in html and escape(message) in html and '"detail"' not in html
    assert '<form method="get">' in html  # the form is still there, refilled, to fix the value
    assert filled.spent("*") == Decimal("105.5")
    # The JSON API keeps its 422 with a machine-readable body.
    api_path = "/api/spend" if "group_by" in params else "/api/summary"
    api = client.get(api_path, params=params)
    assert api.status_code == 422 and api.json()["detail"]


@pytest.mark.parametrize("route", ["/api/daily", "/api/spend", "/api/summary"])
def test_a_since_that_is_no_iso_time_names_the_format_in_the_api(client: TestClient, route: str) -> None:
    # Pydantic's 422 said "Input should be a valid datetime or date, input is too short": no format to give.
    for field in ("since", "until"):
        answer = client.get(route, params={field: "yesterday"})
        assert answer.status_code == 422
        assert (
            answer.json()["detail"]
            == f"{field}: 'yesterday' is not an ISO time such as 2026-11-01T00:00+00:00"
        )
    assert client.get(route, params={"since": "2026-01-01T00:00+00:00"}).status_code == 200


@pytest.mark.parametrize(
    ("typed", "fixed"),
    [
        ("2026-11-01", "2026-11-01T00:00+00:00"),
        ("2026-11-01T06:30", "2026-11-01T06:30+00:00"),
        ("2026-11-01T06:30:15", "2026-11-01T06:30:15+00:00"),
    ],
)
def test_a_time_without_a_zone_is_named_as_typed_with_one_to_copy(
    client: TestClient, typed: str, fixed: str
) -> None:
    # '2026-11-01' was told "2026-11-01T00:00:00 has no time zone: add one, e.g. +00:00": a value the user
    # never typed, and a suffix a date alone does not take.
    message = f"{typed!r} has no time zone: add one, e.g. {fixed}"
    page = client.get("/", params={"since": typed})
    assert page.status_code == 422 and escape(f"Since: {message}.") in page.text
    for field in ("since", "until"):
        answer = client.get("/api/summary", params={field: typed})
        assert answer.status_code == 422 and answer.json()["detail"] == f"{field}: {message}"
    assert client.get("/api/summary", params={"since": fixed}).status_code == 200


def test_group_by_offers_the_valid_choices(client: TestClient) -> None:
    html = client.get("/", params={"group_by": "tag:owner"}).text
    select = html[html.index('<select name="group_by">') : html.index("</select>")]
    for choice in ("dag", "task", "run", "trial", "kind", "market", "tag:team", "tag:project"):
        assert f'<option value="{choice}"' in select
    assert '<option value="tag:owner" selected>' in select


def test_refused_and_waiting_gates_are_on_the_page(client: TestClient, filled: Ledger) -> None:
    from costaware.adapters.ledger.gate_requests import note_gate_request

    common = {"dag_id": "retrain", "task_id": "spend_gate", "map_index": -1, "for_task_id": "train"}
    budget = "project=churn/month (2026-11)"
    note_gate_request(
        filled,
        run_id="r-refused",
        scope="project=churn",
        budget=budget,
        usd=Decimal("500"),
        status="refused",
        message=f"budget '{budget}' has $93.50 left",
        **common,
    )
    note_gate_request(
        filled,
        run_id="r-waiting",
        scope="project=churn",
        budget=budget,
        usd=Decimal("0.001655"),
        status="waiting",
        message="has $0.00 left",
        **common,
    )
    html = client.get("/").text
    section = html[html.index("Refused and waiting spend gates") :]
    assert "r-refused" in section and "$500.00" in section and "refused (run failed)" in section
    assert "project=churn/month (2026-11)" in section and "UTC" in section
    assert "r-waiting" in section and "$0.001655" in section and "waiting" in section
    assert "No spend gate was refused" not in section
    gates = client.get("/api/gates").json()["gates"]
    assert {(g["run_id"], g["status"], g["usd"]) for g in gates} == {
        ("r-refused", "refused", "500.000000"),
        ("r-waiting", "waiting", "0.001655"),
    }


def test_gates_closed_by_their_task_or_run_say_so_on_the_page(client: TestClient, filled: Ledger) -> None:
    from costaware.adapters.ledger.gate_requests import close_open_requests, note_gate_request

    for run_id in ("r-timed-out", "r-ended"):
        note_gate_request(
            filled, dag_id="retrain", run_id=run_id, task_id="spend_gate", map_index=-1, for_task_id="train",
            scope="project=churn", budget="project=churn/month (2026-11)", usd=Decimal("7"), status="waiting",
            message="has $0.00 left",
        )  # fmt: skip
    closed = close_open_requests(
        filled, dag_id="retrain", run_id="r-timed-out", status="gave_up", task_id="spend_gate"
    )
    assert closed == 1
    assert close_open_requests(filled, dag_id="retrain", run_id="r-ended", status="run_ended") == 1
    assert close_open_requests(filled, dag_id="retrain", run_id="r-ended", status="run_ended") == 0
    with pytest.raises(ValueError, match="closed as gave_up or run_ended, not 'waiting'"):
        close_open_requests(filled, dag_id="retrain", run_id="r-ended", status="waiting")
    section = client.get("/").text
    section = section[section.index("Refused and waiting spend gates") :]
    assert "gave up (the gate timed out or failed while waiting)" in section
    assert "run ended while waiting" in section
    gates = client.get("/api/gates").json()["gates"]
    assert {(g["run_id"], g["status"]) for g in gates} == {
        ("r-timed-out", "gave_up"),
        ("r-ended", "run_ended"),
    }


def test_approved_and_rejected_overages_are_on_the_page(client: TestClient, filled: Ledger) -> None:
    from costaware.adapters.ledger.gate_requests import note_gate_request

    common = {"dag_id": "retrain", "task_id": "spend_gate", "map_index": -1, "for_task_id": "train"}
    budget = "project=churn/month (2026-11)"
    asked = {"scope": "project=churn", "budget": budget, "usd": Decimal("12.5"), "status": "approval"}
    for run_id in ("r-approved", "r-rejected", "r-asking"):
        note_gate_request(filled, run_id=run_id, message="would pass the cap", **asked, **common)
    ending = {"scope": "project=churn", "budget": "", "usd": Decimal("12.5")}
    note_gate_request(
        filled, run_id="r-approved", status="approved", message="approved by ann", **ending, **common
    )
    note_gate_request(
        filled, run_id="r-rejected", status="rejected", message="not approved (bob)", **ending, **common
    )
    # Approved at once never happens (an approval always follows a refusal), but an ending note with
    # nothing open adds no row.
    note_gate_request(filled, run_id="r-other", status="approved", message="x", **ending, **common)

    gates = {g["run_id"]: g for g in client.get("/api/gates").json()["gates"]}
    assert set(gates) == {"r-approved", "r-rejected", "r-asking"}
    assert gates["r-approved"]["status"] == "approved" and gates["r-approved"]["message"] == "approved by ann"
    assert gates["r-approved"]["budget"] == budget  # the ending note keeps the budget that was asked
    assert gates["r-rejected"]["status"] == "rejected" and gates["r-asking"]["status"] == "approval"
    section = client.get("/").text.split("Refused and waiting spend gates")[1]
    assert "overage approved" in section and "approved by ann" in section
    assert "overage rejected" in section and "waiting for approval" in section
    # A gate waiting on a person says where to answer it, not only the budget's "raise the cap".
    assert section.count("approve or reject it under Browse, Required Actions") == 1


def test_openapi_documents_every_answer(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            answers = operation["responses"]
            if path == "/":
                assert {"200", "303", "401", "422", "503"} <= set(answers)
                assert "text/html" in answers["200"]["content"]
                continue
            assert {"200", "401", "403", "422", "503"} <= set(answers), (method, path)
            ref = answers["200"]["content"]["application/json"]["schema"]["$ref"]
            body = schemas[ref.rsplit("/", 1)[1]]
            assert body["properties"] and body.get("description"), (method, path)
    summary = schemas["SpendSummary"]["properties"]
    assert summary["usd"]["type"] == "string" and "decimal string" in summary["usd"]["description"]
    assert schemas["Spend"]["properties"]["rows"]["items"]["$ref"].endswith("/SpendRow")


def test_the_ui_holds_no_sql_and_does_not_import_the_cli() -> None:
    import ast
    from pathlib import Path

    import costaware.plugins.ui as ui

    for path in Path(ui.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        nodes = list(ast.walk(tree))
        imported = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in nodes if isinstance(node, ast.ImportFrom)}
        assert not {m for m in imported if m.split(".")[0] == "sqlalchemy"}, path
        assert not {m for m in imported if m == "costaware.cli" or m.startswith("costaware.cli")}, path


def test_every_text_from_the_ledger_is_escaped(client: TestClient, filled: Ledger) -> None:
    filled.record(entry("1.25", run_id="<script>alert('run')</script>", task_id="<b>task</b>"))
    html = client.get("/", params={"group_by": "task"}).text
    assert "<script>" not in html and "<b>task</b>" not in html
    assert "&lt;script&gt;alert(&#x27;run&#x27;)&lt;/script&gt;" in html
    assert "<td>&lt;b&gt;task&lt;/b&gt;</td>" in html


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize(
    ("zone", "before", "after"),
    [
        # Drawn by UTC days: a Berlin budget's spend at 23:30 UTC (00:30 the next day there) went to the
        # day before.
        ("Europe/Berlin", "2026-11-10T12:00:00+00:00", "2026-11-10T23:30:00+00:00"),
        # Drawn by UTC hours: India's day starts at 18:30 UTC, and spend at 18:40 went to the day before.
        ("Asia/Kolkata", "2026-11-10T18:20:00+00:00", "2026-11-10T18:40:00+00:00"),
    ],
)
def test_a_budgets_burn_down_counts_its_own_time_zones_days(  # type: ignore[no-untyped-def]
    backend: str, zone: str, before: str, after: str, tmp_path, request
) -> None:
    import time_machine
    from services import database_url

    url = database_url(backend, tmp_path, request, f"burn_{zone.split('/')[1].lower()}")
    ledger = Ledger.from_url(url)
    ledger.set_budget("project=churn", "month", "100", timezone=zone)
    for at, usd in ((before, "1"), (after, "2")):
        ledger.record(entry(usd, incurred_at=datetime.fromisoformat(at)))
    with time_machine.travel("2026-11-20T12:00:00Z", tick=False):
        (budget,) = burn_down(ledger)
    assert [(d.isoformat(), v) for d, v in budget.cumulative] == [
        ("2026-11-10", Decimal("1")),
        ("2026-11-11", Decimal("3")),
    ]


def test_a_dag_in_many_budgets_has_its_runs_counted_once_per_request(filled: Ledger) -> None:
    # Each budget counted the DAG's runs to its period end at its own instant: a per-minute DAG's month was
    # walked (seconds of work) once per budget, on every load of the page and of /api/budgets.
    from typing import Any

    from airflow.timetables.trigger import CronTriggerTimetable

    from costaware.adapters.airflow_schedule import TimetableSchedule
    from costaware.adapters.ledger.views import budget_views

    class Counting:
        asked = 0
        inner = CronTriggerTimetable("*/10 * * * *", timezone="UTC")

        def next_dagrun_info(self, **kwargs: Any) -> Any:
            self.asked += 1
            return self.inner.next_dagrun_info(**kwargs)

    filled.set_budget("team=ml", "month", "100")
    filled.set_budget("*", "month", "100")
    timetable = Counting()
    views = budget_views(filled, TimetableSchedule({"retrain": timetable}), readable=None)
    assert len(views) == 3
    runs_left = {view.forecast.runs_left for view in views}
    assert len(runs_left) == 1 and timetable.asked == runs_left.pop() + 1  # the last asked is past the end


def test_runs_of_two_dags_with_one_run_id_are_two_runs(filled: Ledger, client: TestClient) -> None:
    # Grouped by run id alone, two daily DAGs' scheduled runs of a day were one bar and one row.
    day = "scheduled__2026-11-23T00:00:00+00:00"
    filled.record(entry("4.00", dag_id="churn", run_id=day))
    filled.record(entry("1.00", dag_id="fraud", run_id=day))
    rows = client.get("/api/spend", params={"group_by": "run"}).json()["rows"]
    by_run = {r["group"]: r["usd"] for r in rows}
    assert (by_run[f"churn/{day}"], by_run[f"fraud/{day}"]) == ("4.000000", "1.000000")
    assert day not in by_run and by_run["retrain/r1"] == "5.000000"
    points = client.get("/api/daily", params={"group_by": "run"}).json()["points"]
    assert {p["group"] for p in points} >= {f"churn/{day}", f"fraud/{day}"}
    page = client.get("/").text
    runs = page[page.index("<h2>Runs</h2>") :]
    assert f"<title>churn/{day}: $4.00</title>" in runs and f"<title>fraud/{day}: $1.00</title>" in runs


def test_the_costliest_tries_are_tries_each_its_entries_summed(filled: Ledger, client: TestClient) -> None:
    # Ranked entry by entry, a remote training's try of three $2 attempts showed up three times, below a $5
    # try, and a try of many small entries did not show at all.
    for attempt, cause, note in (
        (1, "preemption", "attempt 1: spot reclaimed"),
        (2, "", "attempt 2"),
        (3, "", ""),
    ):
        filled.record(
            entry(
                "2.00",
                task_id="tune",
                run_id="r9",
                cause=cause,
                note=note,
                market="spot" if attempt < 3 else "on_demand",
                on_demand_usd=Decimal("2.50"),
                quantity=Decimal("0.25"),
            )
        )
    filled.record(entry("5.00", task_id="big", run_id="r9", outcome="failed", note="one entry"))
    top = costliest_tries(filled, Filters(since=datetime.now(timezone.utc) - timedelta(days=30)), 2)
    assert [(t["task_id"], t["usd"]) for t in top] == [("tune", Decimal(6)), ("big", Decimal(5))]
    tries = client.get("/api/top-tries", params={"limit": 2}).json()["tries"]
    assert [(t["task_id"], t["usd"], t["entries"]) for t in tries] == [
        ("tune", "6.000000", 3),
        ("big", "5.000000", 1),
    ]
    tune = tries[0]
    assert (tune["on_demand_usd"], tune["hours"]) == ("7.500000", "0.750000")
    assert (tune["cause"], tune["note"], tune["market"]) == (
        "preemption",
        "attempt 1: spot reclaimed\nattempt 2",
        "spot",
    )
    page = client.get("/").text
    table = page[page.index("<h2>Most expensive task tries</h2>") :]
    assert table.count("<td>tune</td>") == 1 and "<td>$6.00</td>" in table


@pytest.mark.parametrize(
    "params",
    [
        {"scope": "project=churn, team=ml", "since": "20261101T000000Z", "days": "30"},
        {"scope": " project = churn ", "until": "2099-01-01T00:00+02:00", "days": "007", "dag_id": "retrain"},
    ],
)
def test_the_json_api_link_answers_for_the_filters_the_page_took(
    client: TestClient, params: dict[str, str]
) -> None:
    # Built from the fields as typed, the link answered 422 where the page's form had read them leniently.
    from html import unescape

    from costaware.core.money import format_usd_exact

    page = client.get("/", params=params)
    assert page.status_code == 200
    found = re.search(r'<a href="api/spend\?([^"]*)">JSON API</a>', page.text)
    assert found is not None
    query = unescape(found.group(1))
    assert client.get(f"/api/spend?{query}").status_code == 200
    answer = client.get(f"/api/summary?{query}")  # the other routes take the same filters
    assert answer.status_code == 200, answer.text
    card = page.text[page.text.index("Spent") :]
    assert format_usd_exact(Decimal(answer.json()["usd"])) in card[:200]  # the figure the page shows


@pytest.mark.parametrize(
    ("path", "params", "said"),
    [
        (
            "/api/summary",
            {"days": "abc"},
            "days: 'abc' is not a whole number from 1 to 366: give one in that range, or leave days out for "
            "the default 30",
        ),
        ("/api/daily", {"days": "0"}, "days: '0' is not a whole number from 1 to 366"),
        (
            "/api/spend",
            {"limit": "0"},
            "limit: '0' is not a whole number from 1 to 10000: give one in that range, or leave limit out",
        ),
        ("/api/top-tries", {"limit": "1000"}, "limit: '1000' is not a whole number from 1 to 100"),
        ("/api/gates", {"limit": "1.5"}, "limit: '1.5' is not a whole number from 1 to 500"),
        (
            "/api/efficiency",
            {"runs_per_month": "x"},
            "runs_per_month: 'x' is not a number from 0 to 100000: give one in that range",
        ),
        (
            "/api/spend",
            {"days": "999", "limit": "x"},
            "days: '999' is not a whole number from 1 to 366: give one in that range, or leave days out for "
            "the default 30; limit: 'x' is not a whole number from 1 to 10000",
        ),
    ],
)
def test_a_bad_number_is_answered_in_the_same_shape_as_the_other_filters(
    client: TestClient, path: str, params: dict[str, str], said: str
) -> None:
    # days and limit came as pydantic's list ("Input should be greater than or equal to 1"), the other
    # filters as one line: a client had to read two shapes, and the list named no range.
    response = client.get(path, params=params)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail.startswith(said), detail


def test_every_json_route_documents_the_422_it_answers(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    json_routes = {path: methods for path, methods in schema["paths"].items() if path.startswith("/api/")}
    assert len(json_routes) >= 8
    for path, methods in json_routes.items():
        for method, operation in methods.items():
            ref = operation["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
            detail = components[ref.rsplit("/", 1)[-1]]["properties"]["detail"]
            # The one shape every bad parameter or body field gets: a body's was FastAPI's list.
            assert detail["type"] == "string", (path, detail)
            if method == "get":
                for parameter in operation.get("parameters", []):
                    declared = parameter["schema"]
                    kind = declared.get("type") or declared.get("anyOf", [{}])[0].get("type")
                    if kind in ("integer", "number"):
                        answer = client.get(path, params={parameter["name"]: "x"})
                        assert answer.status_code == 422 and isinstance(answer.json()["detail"], str), path


@pytest.mark.parametrize(
    ("path", "query", "said"),
    [
        ("/api/summary", "days=7&days=90", "days: given 2 times ('7', then '90'): give it once"),
        ("/api/spend", "group_by=dag&days=7&group_by=task&days=90",
         "group_by: given 2 times ('dag', then 'task'): give it once; days: given 2 times ('7', then '90')"),
        ("/api/efficiency", "dag_id=a&dag_id=b", "dag_id: given 2 times ('a', then 'b'): give it once"),
    ],
)  # fmt: skip
def test_a_query_parameter_given_twice_with_different_values_is_refused(
    client: TestClient, path: str, query: str, said: str
) -> None:
    # FastAPI read the last alone: ?days=7&days=90 answered for 90 days, without a word.
    response = client.get(f"{path}?{query}")
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(said), response.json()
    assert client.get("/api/summary?days=7&days=7").status_code == 200  # the same value twice: read once


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/summary", "days=7&days=07"),
        ("/api/spend", "group_by=dag&group_by=DAG"),
        ("/api/spend", "group_by=tag:team&group_by=TAG:team"),
        ("/api/summary", "since=2026-11-01T00:00%2B00:00&since=2026-11-01T00:00:00Z"),
        ("/api/summary", "foo=a&foo=b"),  # not a parameter of the route: ignored, as docs/ui.md says
    ],
)
def test_a_query_parameter_given_twice_is_compared_as_the_route_reads_it(
    client: TestClient, path: str, query: str
) -> None:
    # The raw texts were compared, so one value written two ways was refused, and so was a parameter the
    # route does not take (which FastAPI ignores).
    response = client.get(f"{path}?{query}")
    assert response.status_code == 200, response.text
    answer = client.get(f"{path}?{query.split('&')[0]}")
    assert response.json() == answer.json()  # read as the value given once


@pytest.fixture
def thirty_studies(filled: Ledger) -> Ledger:
    """The team budget ``project=churn/month`` and 30 nightly tuning studies' own budgets, each spent in."""
    for night in range(30):
        study = f"budgeted_tuning-scheduled__2026-11-{night + 1:02d}"
        filled.set_budget(f"project=churn,study={study}", "total", "0.05")
        filled.record(entry("0.01", run_id=f"n{night}", tags={"project": "churn", "study": study}))
    return filled


def budgets_section(page: str) -> str:
    return page[page.index("<h2>Budgets</h2>") : page.index("<h2>Spend by tag</h2>")]


def test_study_budgets_are_counted_on_the_page_not_drawn_one_by_one(
    thirty_studies: Ledger, client: TestClient
) -> None:
    # Each nightly study's own budget had its chart, its usage and burn-down queries and its forecast: the
    # page grew (and slowed) with every run, burying the team's budget.
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    statements: list[str] = []

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(Engine, "before_cursor_execute", count)
    try:
        section = budgets_section(client.get("/").text)
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    # The studies' figures are not read: the page's statements do not grow with them (30 per query before).
    assert len(statements) < 60, len(statements)
    assert section.count("<svg") == 1 and "Budget project=churn/month (" in section
    assert "study=budgeted_tuning" not in section
    assert "And 30 study budgets (a tuning study's own cap each):" in section
    assert "<code>costaware budget list --studies</code>" in section


def test_a_page_filtered_to_a_study_draws_that_study_s_budget(
    thirty_studies: Ledger, client: TestClient
) -> None:
    study = "project=churn,study=budgeted_tuning-scheduled__2026-11-07"
    section = budgets_section(client.get("/", params={"scope": study}).text)
    # Its own budget, and the team's that counts its spend too; not the 29 other studies'.
    assert section.count("<svg") == 2 and f"Budget {study}/total (total): $0.04 left" in section
    assert "Budget project=churn/month (" in section
    assert "study budget" not in section and "No budget applies" not in section


def test_only_study_budgets_apply_says_so_not_that_none_does(
    thirty_studies: Ledger, client: TestClient
) -> None:
    thirty_studies.delete_budget("project=churn", "month")
    section = budgets_section(client.get("/").text)
    assert "<svg" not in section and "No budget applies" not in section
    assert "30 study budgets" in section


def test_the_json_api_still_lists_every_budget(thirty_studies: Ledger, client: TestClient) -> None:
    # Stable, as ``costaware budget list --format json`` is: a client reading study budgets finds them.
    names = [b["name"] for b in client.get("/api/budgets").json()["budgets"]]
    assert len(names) == 31 and sum(name.startswith("project=churn/month") for name in names) == 1


def statements_of(call: Callable[[], object]) -> int:
    """How many SQL statements ``call`` runs."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    statements: list[str] = []

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(Engine, "before_cursor_execute", count)
    try:
        call()
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    return len(statements)


def test_a_user_with_some_dags_does_not_cost_statements_per_study_budget(
    thirty_studies: Ledger, client: TestClient
) -> None:
    # Which budgets such a user may see was read per budget (its DAGs, its holds: 4 statements each), for
    # the study budgets the page then folds too; so was the DAGs of each for /api/budgets?dag_id=.
    thirty_studies.record(entry("0.20", dag_id="features", tags={"project": "churn"}))
    cost_app.dependency_overrides[readable_dags] = lambda: frozenset({"retrain", "features"})
    page = statements_of(lambda: client.get("/"))
    by_dag = statements_of(lambda: client.get("/api/budgets", params={"dag_id": "features"}))
    assert page < 60 and by_dag < 30, (page, by_dag)
    (budget,) = client.get("/api/budgets", params={"dag_id": "features"}).json()["budgets"]
    assert budget["budget"] == "project=churn/month"
    assert len(client.get("/api/budgets").json()["budgets"]) == 31
    assert "30 study budgets" in budgets_section(client.get("/").text)
    cost_app.dependency_overrides[readable_dags] = lambda: frozenset({"retrain"})  # not features': hidden
    assert "Budget project=churn/month" not in budgets_section(client.get("/").text)
    assert "30 study budgets" in budgets_section(client.get("/").text)
    cost_app.dependency_overrides[readable_dags] = lambda: frozenset({"other"})
    assert client.get("/api/budgets").json()["budgets"] == []
    assert "study budget" not in budgets_section(client.get("/").text)


def test_the_json_api_reads_every_budget_s_figures_in_a_few_statements(
    thirty_studies: Ledger, client: TestClient
) -> None:
    # /api/budgets lists every budget, so each study's figures are read; they were read per budget (its
    # usage twice, each time with the team budget's that covers it too, its burn-down, its recent runs):
    # 12 statements for each, so the answer slowed with every nightly tuning run.
    thirty_studies.reserve("project=churn", "2", holder="retrain/r9/spend_gate/-1")
    before = client.get("/api/budgets").json()["budgets"]
    assert statements_of(lambda: client.get("/api/budgets")) < 30
    by_name = {b["budget"]: b for b in before}
    team = by_name["project=churn/month"]
    # The team's figures count every study's spend, and the hold; a study's, its own spend only.
    assert (team["spent_usd"], team["reserved_usd"], team["left_usd"]) == (
        "6.800000",
        "2.000000",
        "91.200000",
    )
    study = by_name["project=churn,study=budgeted_tuning-scheduled__2026-11-07/total"]
    assert (study["spent_usd"], study["left_usd"], study["forecast_usd"]) == (
        "0.010000",
        "0.040000",
        "0.010000",
    )
    assert [p["spent_usd"] for p in study["burn_down"]] == ["0.010000"]
