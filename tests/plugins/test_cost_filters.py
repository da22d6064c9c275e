"""The Cost page's filters apply to the whole page and the JSON routes it mirrors (issue 23: D2, D3, D4)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from html import escape, unescape

import pytest
import time_machine
from fastapi.testclient import TestClient

from costaware import Ledger
from costaware.adapters.ledger.gate_requests import note_gate_request
from costaware.core.ledger import Kind, LedgerEntry
from costaware.plugins.ui.app import cost_app
from costaware.plugins.ui.deps import readable_dags, require_login

NOW = datetime.now(timezone.utc).replace(microsecond=0)
SINCE, UNTIL = NOW - timedelta(days=10), NOW - timedelta(days=2)
RANGE = {"since": SINCE.isoformat(), "until": UNTIL.isoformat()}
JSON_ROUTES = (
    "/api/summary",
    "/api/spend",
    "/api/daily",
    "/api/top-tries",
    "/api/gates",
    "/api/efficiency",
    "/api/outcomes",
)


def spend(
    ledger: Ledger, usd: str, at: datetime, *, dag_id: str, run_id: str, team: str, project: str
) -> None:
    ledger.record(
        LedgerEntry(
            dag_id=dag_id,
            run_id=run_id,
            task_id="train",
            kind=Kind.COMPUTE,
            usd=Decimal(usd),
            quantity=Decimal(1),
            tags={"project": project, "team": team},
            incurred_at=at,
        )
    )


def gate(
    ledger: Ledger, run_id: str, at: datetime, *, dag_id: str = "retrain", scope: str = "project=churn"
) -> None:
    with time_machine.travel(at, tick=False):
        note_gate_request(
            ledger,
            dag_id=dag_id,
            run_id=run_id,
            task_id="spend_gate",
            map_index=-1,
            for_task_id="train",
            scope=scope,
            budget=f"{scope}/month",
            usd=Decimal("7"),
            status="refused",
            message="no room",
        )


@pytest.fixture
def ledger(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    """Spend before, inside and after [SINCE, UNTIL), each on its own DAG, run, team and project."""
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    opened = Ledger.from_url(ledger_url)
    spend(
        opened,
        "1",
        NOW - timedelta(days=20),
        dag_id="early_dag",
        run_id="r-early",
        team="t-early",
        project="churn",
    )
    spend(
        opened,
        "3",
        NOW - timedelta(days=5),
        dag_id="retrain",
        run_id="r-inside",
        team="t-inside",
        project="churn",
    )
    spend(
        opened,
        "50",
        NOW - timedelta(days=1),
        dag_id="late_dag",
        run_id="r-late",
        team="t-late",
        project="churn",
    )
    gate(opened, "g-inside", NOW - timedelta(days=5))
    gate(opened, "g-late", NOW - timedelta(days=1))
    yield opened
    opened.dispose()


@pytest.fixture
def client(ledger: Ledger) -> Iterator[TestClient]:
    cost_app.dependency_overrides[require_login] = lambda: None
    cost_app.dependency_overrides[readable_dags] = lambda: None  # every DAG; see test_cost_access.py
    yield TestClient(cost_app)
    cost_app.dependency_overrides.clear()


def section(html: str, heading: str) -> str:
    """The page from ``<h2>heading`` to the next ``<h2>``."""
    start = html.index(f"<h2>{heading}")
    end = html.find("<h2>", start + 4)
    return html[start : end if end > 0 else None]


# -- D2: since and until filter every section ------------------------------------------------------


def test_since_and_until_filter_every_section_of_the_page(client: TestClient) -> None:
    page = client.get("/", params={**RANGE, "group_by": "dag"})
    assert page.status_code == 200, page.text
    html = page.text
    cards = html[html.index('<div class="cards">') : html.index("<h2>Spend over time")]
    assert "$3.00" in cards and "$53" not in cards and "$54" not in cards  # what the CLI reports too
    for heading in ("Spend by tag", "Spend by dag", "Runs", "Most expensive task tries"):
        part = section(html, heading)
        assert "late" not in part and "early" not in part, (heading, part)
    assert "t-inside" in section(html, "Spend by tag") and "r-inside" in section(html, "Runs")
    gates = section(html, "Refused and waiting spend gates")
    assert "g-inside" in gates and "g-late" not in gates
    # The JSON routes the page mirrors agree with it.
    assert client.get("/api/summary", params=RANGE).json()["usd"] == "3.000000"
    assert [
        r["group"] for r in client.get("/api/spend", params={**RANGE, "group_by": "run"}).json()["rows"]
    ] == ["retrain/r-inside"]  # a run is named with its DAG
    assert [g["run_id"] for g in client.get("/api/gates", params=RANGE).json()["gates"]] == ["g-inside"]


def test_the_form_keeps_since_and_until_and_the_json_link_carries_the_filters(client: TestClient) -> None:
    html = client.get("/", params={**RANGE, "scope": "project=churn"}).text
    form = html[html.index('<form method="get">') : html.index("</form>")]
    assert f'name="since" value="{escape(RANGE["since"])}"' in form
    assert f'name="until" value="{escape(RANGE["until"])}"' in form
    link = unescape(re.search(r'href="(api/spend\?[^"]*)">JSON API', html).group(1))  # type: ignore[union-attr]
    assert "since=" in link and "until=" in link and "scope=project%3Dchurn" in link
    card = html[html.index('<div class="cards">') :]
    assert f"{SINCE:%Y-%m-%d %H:%M} UTC to {UNTIL:%Y-%m-%d %H:%M} UTC" in card  # not "last 30 days"


def test_scope_and_dag_filter_the_budgets_and_the_page_says_time_does_not(
    client: TestClient, ledger: Ledger
) -> None:
    for scope in ("project=churn", "project=fraud", "*", "team=t-inside"):
        ledger.set_budget(scope, "month", "100")
    shown = {
        b["budget"] for b in client.get("/api/budgets", params={"scope": "project=churn"}).json()["budgets"]
    }
    assert shown == {"project=churn/month", "*/month", "team=t-inside/month"}  # fraud's counts none of it
    html = client.get("/", params={"scope": "project=churn"}).text
    budgets = section(html, "Budgets")
    assert "Budget project=churn/month" in budgets and "project=fraud" not in budgets
    assert "whatever Days, Since and Until say" in " ".join(budgets.split())
    # A per-run budget is in no list here: the page said nothing of where it went.
    assert "Per-run budgets have no period to draw and are not listed" in " ".join(budgets.split())
    # A DAG filter keeps the budgets that DAG spent in: early_dag never spent as team t-inside.
    by_dag = client.get("/api/budgets", params={"dag_id": "early_dag"}).json()["budgets"]
    assert {b["budget"] for b in by_dag} == {"project=churn/month", "*/month"}
    assert client.get("/api/budgets").json()["budgets"].__len__() == 4  # no filter: every budget


def test_gates_follow_the_scope_filter(client: TestClient, ledger: Ledger) -> None:
    gate(ledger, "g-fraud", NOW - timedelta(days=5), dag_id="fraud_dag", scope="project=fraud,team=ml")
    gate(ledger, "g-ml", NOW - timedelta(days=5), dag_id="ml_dag", scope="project=churn,team=ml%")
    runs = {g["run_id"] for g in client.get("/api/gates", params={"scope": "project=churn"}).json()["gates"]}
    assert runs == {"g-inside", "g-late", "g-ml"}
    runs = {g["run_id"] for g in client.get("/api/gates", params={"scope": "team=ml%"}).json()["gates"]}
    assert runs == {"g-ml"}  # '%' is a character of the value, not a wildcard
    # Matched as written: SQLite's LIKE took Project=CHURN for project=churn (PostgreSQL's did not).
    assert client.get("/api/gates", params={"scope": "Project=CHURN"}).json()["gates"] == []
    # Noted as the gate wrote it ("team=ml, project=churn"), it was never listed under project=churn.
    gate(ledger, "g-spaced", NOW - timedelta(days=5), dag_id="ml_dag", scope="team=ml, project=churn")
    runs = {g["run_id"] for g in client.get("/api/gates", params={"scope": "project=churn"}).json()["gates"]}
    assert "g-spaced" in runs
    gates = section(
        client.get("/", params={"scope": "project=fraud"}).text, "Refused and waiting spend gates"
    )
    assert "g-fraud" in gates and "g-inside" not in gates


def test_since_after_until_is_refused(client: TestClient) -> None:
    backwards = {"since": RANGE["until"], "until": RANGE["since"]}
    response = client.get("/api/summary", params=backwards)
    # The API names until as its query spells it ("since: ... is not before Until ..." mixed the two).
    assert response.status_code == 422 and "is not before until 20" in response.json()["detail"]
    assert response.json()["detail"].endswith(": swap them")
    empty = client.get("/api/summary", params={"since": RANGE["since"], "until": RANGE["since"]})
    assert "the range is empty: until is exclusive, give a later one" in empty.json()["detail"]
    page = client.get("/", params=backwards)
    assert page.status_code == 422 and "Cannot show costs" in page.text and "is not before Until" in page.text
    assert ": swap them." in page.text
    same = client.get("/", params={"since": RANGE["since"], "until": RANGE["since"]})
    assert "the range is empty: Until is exclusive, give a later one." in same.text


# -- D3: times outside UTC's range are bad input, not a crash -------------------------------------


EXTREMES = ("9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00")


@pytest.mark.parametrize("value", EXTREMES)
@pytest.mark.parametrize("name", ["since", "until"])
@pytest.mark.parametrize("path", JSON_ROUTES)
def test_an_extreme_time_is_a_422_on_every_json_route(
    client: TestClient, path: str, name: str, value: str
) -> None:
    response = client.get(path, params={name: value})
    assert response.status_code == 422, response.text
    assert f"{name}: {value} is outside the range of times in UTC" in response.json()["detail"]


@pytest.mark.parametrize("value", EXTREMES)
def test_an_extreme_time_is_a_message_on_the_page(client: TestClient, value: str) -> None:
    page = client.get("/", params={"since": value})
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
    assert "Cannot show costs" in page.text
    assert escape(f"Since: {value} is outside the range of times in UTC") in page.text
    assert f'name="since" value="{escape(value)}"' in page.text  # refilled, to fix it


def test_the_ledger_names_a_time_it_cannot_store(ledger: Ledger) -> None:
    from costaware.core.errors import ConfigurationError

    edge = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14)))
    with pytest.raises(ConfigurationError, match=r"time 0001-01-01T00:00:00\+14:00 is outside the range"):
        ledger.report(since=edge)


# -- D4: too many tags is bad input; no answer names the database ---------------------------------


def many_tags(n: int) -> str:
    return ",".join(f"k{i}=v" for i in range(n))


@pytest.mark.parametrize("path", JSON_ROUTES)
def test_a_scope_with_too_many_tags_is_a_422_that_states_the_limit(
    client: TestClient, ledger_url: str, path: str
) -> None:
    response = client.get(path, params={"scope": many_tags(1200)})
    assert response.status_code == 422, response.text
    assert "scope: 1,200 tags given, at most 50 are allowed" in response.json()["detail"]
    assert "sqlite" not in response.text and ledger_url.removeprefix("sqlite:///") not in response.text


@pytest.mark.parametrize("path", [*JSON_ROUTES, "/api/budgets"])
@pytest.mark.parametrize("scope", ["project", "project = churn", "1project=churn"])
def test_a_scope_that_is_not_tags_is_a_422_that_names_it(client: TestClient, path: str, scope: str) -> None:
    # The answer was pydantic's "String should match pattern '^(\\*|[A-Za-z][A-Za-z0-9_.-]{0,63}=...'".
    response = client.get(path, params={"scope": scope})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail.startswith(f"scope: {scope!r} is not a tag filter such as project=churn"), detail
    assert "should match pattern" not in response.text


@pytest.mark.parametrize("path", [*JSON_ROUTES, "/api/budgets"])
def test_a_scope_naming_a_tag_twice_is_a_422_that_names_the_field_and_what_to_do(
    client: TestClient, path: str
) -> None:
    # Well-formed, so the pattern let it through, and the read refused it with no field named and no remedy.
    response = client.get(path, params={"scope": "project=churn,project=fraud"})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail.startswith("scope: 'project=churn,project=fraud' names tag 'project' twice"), detail
    assert "keep one, e.g. 'project=churn'" in detail


def test_a_scope_naming_a_tag_twice_is_a_message_on_the_page_by_field(client: TestClient) -> None:
    page = client.get("/", params={"scope": "project=churn, project=fraud"})
    assert page.status_code == 422 and "Cannot show costs" in page.text
    text = unescape(page.text)
    assert "Scope: 'project=churn,project=fraud' names tag 'project' twice" in text
    assert "keep one, e.g. 'project=churn'" in text
    assert 'value="project=churn, project=fraud"' in text  # the form keeps what was typed


def test_the_scope_filter_keeps_its_pattern_in_the_openapi(client: TestClient) -> None:
    from costaware.plugins.ui.filters import SCOPE_PATTERN

    schema = client.get("/openapi.json").json()
    (scope,) = [p for p in schema["paths"]["/api/summary"]["get"]["parameters"] if p["name"] == "scope"]
    assert scope["schema"]["pattern"] == SCOPE_PATTERN


def test_fifty_tags_still_filter(client: TestClient) -> None:
    assert client.get("/api/summary", params={"scope": many_tags(50)}).json()["usd"] == "0.000000"
    assert client.get("/", params={"scope": many_tags(50)}).status_code == 200
    assert client.get("/api/budgets", params={"scope": many_tags(51)}).status_code == 422


def test_a_scope_with_too_many_tags_is_a_message_on_the_page(client: TestClient) -> None:
    page = client.get("/", params={"scope": many_tags(1200)})
    assert page.status_code == 422 and "Cannot show costs" in page.text
    assert "Scope: 1,200 tags given, at most 50 are allowed" in page.text


@pytest.mark.parametrize(
    "url",
    ["postgresql://nobody:secret@127.0.0.1:1/ledger", "mysql://nobody:secret@db.internal/ledger"],
    ids=["unreachable", "unsupported"],
)
def test_no_answer_names_the_ledger_database(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, url: str
) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", url)
    for path in ("/api/summary", "/api/budgets", "/"):
        response = client.get(path)
        assert response.status_code == 503, (path, response.text)
        assert "cannot be read right now" in response.text
        for secret in ("postgresql", "mysql", "127.0.0.1", "db.internal", "nobody", "secret"):
            assert secret not in response.text, (path, secret)
    assert "127.0.0.1" in caplog.text or "mysql" in caplog.text  # the reason is in the server's log


# -- the filters' choices and patterns come from the core's constants (issue 25) ----------------------


def test_group_by_choices_and_patterns_come_from_the_core() -> None:
    from costaware.core.budgets import Period, tag_problem
    from costaware.core.ledger import GROUP_BYS, INDEXED_TAGS
    from costaware.plugins.ui.filters import GROUP_BY_CHOICES, GROUP_BY_PATTERN, PERIOD_PATTERN, TAG_NAME

    assert (*GROUP_BYS, *(f"tag:{tag}" for tag in INDEXED_TAGS)) == GROUP_BY_CHOICES
    for choice in GROUP_BY_CHOICES:
        assert re.fullmatch(GROUP_BY_PATTERN, choice), choice
    for bad in ("week", "dag; DROP", "tag:", "tag:1x"):
        assert not re.fullmatch(GROUP_BY_PATTERN, bad), bad
    assert [p.value for p in Period if re.fullmatch(PERIOD_PATTERN, p.value)] == [p.value for p in Period]
    assert not re.fullmatch(PERIOD_PATTERN, "week")
    # A tag name the filters take is one the ledger records, and the other way round.
    for name in ("team", "a", "Cost.Center-2", "x_y", "a" * 64, "a" * 65, "1team", "", "tag name", "é"):
        assert bool(re.fullmatch(TAG_NAME, name)) == (tag_problem(name, "v") is None), name


def test_the_form_offers_every_grouping_of_a_report(client: TestClient) -> None:
    from costaware.core.ledger import GROUP_BYS, INDEXED_TAGS

    html = client.get("/").text
    select = html[html.index('<select name="group_by">') : html.index("</select>")]
    for choice in (*GROUP_BYS, *(f"tag:{tag}" for tag in INDEXED_TAGS)):
        assert f'<option value="{choice}"' in select, choice


def test_until_alone_counts_days_back_from_until() -> None:
    # From now, an Until older than Days made a backwards range: $0 on the page, and no word.
    from costaware.plugins.ui.filters import check_filters

    until = datetime(2026, 10, 1, tzinfo=timezone.utc)
    filters, problems = check_filters(30, None, until, None, "*")
    assert problems == [] and filters is not None
    assert (filters.since, filters.until) == (until - timedelta(days=30), until)


def test_filters_that_select_nothing_say_why_they_may_be_mistyped(client: TestClient) -> None:
    # A misspelt DAG id or a tag in the wrong case showed $0 as if it were a real figure.
    answer = client.get("/api/summary", params={"dag_id": "Early_Dag"}).json()
    assert answer["entries"] == 0
    assert answer["note"] == (
        "the ledger has no entries for DAG 'Early_Dag' (did you mean 'early_dag'?): "
        "check its name (case counts)"
    )
    typo = client.get("/api/summary", params={"scope": "project=Churn"}).json()["note"]
    assert typo.startswith("no recent entry has project=Churn; check its spelling and case (project: ")
    name_typo = client.get("/api/summary", params={"scope": "proj=churn"}).json()["note"]
    # It named the values of 'proj' ("proj: none"), not that no entry has a tag of that name.
    assert name_typo == (
        "no recent entry has a tag 'proj'; did you mean 'project'? check its spelling and case "
        "(tags: project, team)"
    )
    assert client.get("/api/summary", params={"dag_id": "early_dag"}).json()["note"] is None
    page = client.get("/", params={"dag_id": "Early_Dag"}).text
    assert "No entries: the ledger has no entries for DAG &#x27;Early_Dag&#x27; (did you mean" in page
    # Only a DAG the user may read is offered: others are not named to them.
    cost_app.dependency_overrides[readable_dags] = lambda: frozenset({"late_dag"})
    hidden = client.get("/api/summary", params={"dag_id": "Early_Dag"}).json()["note"]
    assert "early_dag" not in hidden and hidden.startswith("the ledger has no entries for DAG 'Early_Dag'")


def test_an_until_with_no_days_before_it_is_a_422_not_a_500(client: TestClient) -> None:
    response = client.get("/api/summary", params={"until": "0001-01-10T00:00:00+00:00", "days": 30})
    assert response.status_code == 422 and "leaves no 30 days before it" in response.json()["detail"]


@pytest.mark.parametrize(
    ("path", "params", "named"),
    [
        (
            "/api/summary",
            {"since": "yesterday", "until": "tomorrow"},
            ("since: 'yesterday'", "until: 'tomorrow'"),
        ),
        ("/api/summary", {"since": "yesterday", "days": "0"}, ("since: 'yesterday'", "days: '0'")),
        ("/api/spend", {"group_by": "x", "limit": "0"}, ("group_by: 'x'", "limit: '0'")),
        (
            "/api/spend",
            {"dag_id": "a b", "scope": "nope", "until": "soon"},
            ("dag_id: 'a b'", "scope: 'nope'", "until: 'soon'"),
        ),
        ("/api/budgets", {"dag_id": "a b", "scope": "nope"}, ("dag_id: 'a b'", "scope: 'nope'")),
    ],
)
def test_a_422_names_every_bad_query_parameter_one_line_each(
    client: TestClient, path: str, params: dict[str, str], named: tuple[str, ...]
) -> None:
    response = client.get(path, params=params)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str), detail
    parts = detail.split("; ")
    for name in named:
        assert sum(part.startswith(name) for part in parts) == 1, (name, detail)
    assert len(parts) == len(named), detail
    assert "Value error" not in detail and "pattern" not in detail, detail


def test_the_json_link_opens_a_route_that_groups_as_the_page_does(client: TestClient) -> None:
    """The link sent group_by to /api/summary, which has no grouping: the page's Spend by was not in it."""
    html = client.get("/", params={**RANGE, "group_by": "tag:team"}).text
    link = unescape(re.search(r'href="([^"]*)">JSON API', html).group(1))  # type: ignore[union-attr]
    answer = client.get(f"/{link}").json()
    assert answer["group_by"] == "tag:team", answer
    assert [row["group"] for row in answer["rows"]] == ["t-inside"], answer
