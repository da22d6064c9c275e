"""Who sees which costs: the Cost API asks Airflow's auth manager (a real one) about every DAG and budget.

Authentication (tokens, cookies) is tested against a real api-server in tests/integration; here the
logged-in user is given, and the authorization is Airflow's own, per user.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from fastapi.testclient import TestClient

from costaware import Ledger
from costaware.adapters.ledger.audit import audit_log
from costaware.core.ledger import Kind, LedgerEntry
from costaware.plugins.ui.app import cost_app
from costaware.plugins.ui.deps import require_login

USERS = {
    "ann": SimpleAuthManagerUser(username="ann", role="user"),  # may read churn_retrain only
    "vera": SimpleAuthManagerUser(username="vera", role="viewer"),  # may read fraud_retrain only
    "adm": SimpleAuthManagerUser(username="adm", role="admin"),  # every DAG
}


def spend(ledger: Ledger, dag_id: str, usd: str, project: str) -> None:
    ledger.record(
        LedgerEntry(
            dag_id=dag_id,
            run_id="r1",
            task_id="train",
            kind=Kind.COMPUTE,
            usd=Decimal(usd),
            tags={"project": project},
        )
    )


@pytest.fixture
def ledger_with_two_teams(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    from airflow.api_fastapi import app as airflow_app

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", "dag_scoped_auth.DagScopedAuthManager")
    airflow_app.purge_cached_app()
    airflow_app.create_auth_manager()
    ledger = Ledger.from_url(ledger_url)
    ledger.set_budget("project=churn", "month", "100", actor="lead")
    ledger.set_budget("project=fraud", "month", "50", actor="lead")
    ledger.set_budget("*", "month", "1000", actor="lead")
    spend(ledger, "churn_retrain", "3", "churn")
    spend(ledger, "fraud_retrain", "5", "fraud")
    yield ledger
    airflow_app.purge_cached_app()
    ledger.dispose()


def client_for(name: str) -> TestClient:
    cost_app.dependency_overrides[require_login] = lambda: USERS[name]
    return TestClient(cost_app)


@pytest.fixture(autouse=True)
def _clear_overrides() -> Iterator[None]:
    yield
    cost_app.dependency_overrides.clear()


def test_each_user_sees_only_the_dags_they_may_read(ledger_with_two_teams: Ledger) -> None:
    ann, vera, adm = client_for("ann"), client_for("vera"), client_for("adm")
    cost_app.dependency_overrides[require_login] = lambda: USERS["ann"]
    rows = ann.get("/api/spend").json()["rows"]
    assert {r["group"]: r["usd"] for r in rows} == {"churn_retrain": "3.000000"}
    assert ann.get("/api/summary").json()["usd"] == "3.000000"
    assert ann.get("/api/summary", params={"dag_id": "fraud_retrain"}).json()["usd"] == "0.000000"
    assert [t["dag_id"] for t in ann.get("/api/top-tries").json()["tries"]] == ["churn_retrain"]
    assert {p["group"] for p in ann.get("/api/daily").json()["points"]} == {"churn_retrain"}
    page = ann.get("/", params={"group_by": "dag"}).text
    assert "churn_retrain" in page and "fraud_retrain" not in page

    cost_app.dependency_overrides[require_login] = lambda: USERS["vera"]
    rows = vera.get("/api/spend").json()["rows"]
    assert {r["group"]: r["usd"] for r in rows} == {"fraud_retrain": "5.000000"}

    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    rows = adm.get("/api/spend").json()["rows"]
    assert {r["group"] for r in rows} == {"churn_retrain", "fraud_retrain"}


def test_budgets_whose_dags_a_user_cannot_read_are_hidden(ledger_with_two_teams: Ledger) -> None:
    cost_app.dependency_overrides[require_login] = lambda: USERS["ann"]
    budgets = TestClient(cost_app).get("/api/budgets").json()["budgets"]
    assert [b["budget"] for b in budgets] == ["project=churn/month"]  # '*' covers fraud_retrain too
    assert set(budgets[0]) >= {"forecast_usd", "forecast_low_usd", "forecast_high_usd"}
    assert budgets[0]["forecast_usd"] == "3.000000"  # no Airflow schedule known here: what is committed
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    budgets = TestClient(cost_app).get("/api/budgets").json()["budgets"]
    assert sorted(b["budget"] for b in budgets) == ["*/month", "project=churn/month", "project=fraud/month"]


def test_a_budget_held_or_asked_by_a_dag_a_user_cannot_read_is_hidden_before_any_spend(
    ledger_with_two_teams: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only DAGs with entries were checked: ann, who reads churn_retrain only, saw project=secret reserving
    # $750 for secret_dag's training before it had spent anything.
    from dag_scoped_auth import DAG_SCOPES

    from costaware.adapters.ledger.gate_requests import note_gate_request
    from costaware.core.ledger import reservation_holder

    monkeypatch.setitem(DAG_SCOPES, "sam", {"secret_dag"})
    monkeypatch.setitem(USERS, "sam", SimpleAuthManagerUser(username="sam", role="user"))
    ledger = ledger_with_two_teams
    for project in ("secret", "hidden"):
        ledger.set_budget(f"project={project}", "month", "1000", actor="lead")
    holder = reservation_holder("secret_dag", "r1", "train")
    ledger.reserve("project=secret", "750", holder=holder, run_id="r1")
    note_gate_request(
        ledger, dag_id="secret_dag", run_id="r2", task_id="gate", map_index=-1, for_task_id="train",
        scope="project=hidden", budget="project=hidden/month (2026-11)", usd=Decimal("5000"),
        status="waiting", message="no room yet",
    )  # fmt: skip

    def budgets(name: str) -> dict[str, str]:
        cost_app.dependency_overrides[require_login] = lambda: USERS[name]
        got = TestClient(cost_app).get("/api/budgets").json()["budgets"]
        return {b["budget"]: b["reserved_usd"] for b in got}

    assert budgets("ann") == {"project=churn/month": "0.000000"}
    # Whoever may read secret_dag sees them (the DAG is known to the page by its hold, with no entry).
    assert budgets("sam") == {"project=secret/month": "750.000000", "project=hidden/month": "0.000000"}
    assert set(budgets("adm")) >= {"project=secret/month", "project=hidden/month"}


def test_the_feature_cache_s_storage_bills_do_not_hide_a_budget_whose_dags_a_user_may_read(
    ledger_with_two_teams: Ledger,
) -> None:
    # Recorded under the DAG id costaware_feature_cache, which no per-DAG grant names: the budget of every
    # project whose cache was billed disappeared for all but users who may read every DAG.
    from costaware.adapters.feature_billing import STORAGE_DAG_ID

    ledger = ledger_with_two_teams
    ledger.set_budget("project=cached", "month", "10", actor="lead")
    spend(ledger, STORAGE_DAG_ID, "0.25", "churn")
    spend(ledger, STORAGE_DAG_ID, "0.50", "cached")  # the cache's bill alone: no DAG of the user's decides
    cost_app.dependency_overrides[require_login] = lambda: USERS["ann"]
    budgets = TestClient(cost_app).get("/api/budgets").json()["budgets"]
    assert [(b["budget"], b["spent_usd"]) for b in budgets] == [("project=churn/month", "3.250000")]
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    budgets = TestClient(cost_app).get("/api/budgets").json()["budgets"]
    assert "project=cached/month" in {b["budget"] for b in budgets}


def test_only_the_budget_role_may_set_a_budget_and_it_is_audited(ledger_with_two_teams: Ledger) -> None:
    change = {"scope": "project=churn", "period": "month", "cap_usd": "150"}
    for name in ("ann", "vera"):
        cost_app.dependency_overrides[require_login] = lambda name=name: USERS[name]  # type: ignore[misc]
        response = TestClient(cost_app).post("/api/budgets", json=change)
        assert response.status_code == 403 and f"user {name!r} may not set budgets" in response.text
    assert [b.cap_usd for b in ledger_with_two_teams.budgets() if str(b.scope) == "project=churn"] == [100]
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    response = TestClient(cost_app).post("/api/budgets", json=change)
    assert response.status_code == 200 and response.json()["set_by"] == "adm"
    last = audit_log(ledger_with_two_teams, action="budget_set")[-1]
    assert (last.actor, last.target, last.details["old_cap_usd"], last.details["new_cap_usd"]) == (
        "adm",
        "project=churn/month",
        "100.000000",
        "150.000000",
    )


@pytest.mark.parametrize(("cap", "stored"), [(150, 150), ("$1,000", 1000), (" 99.5 ", Decimal("99.5"))])
def test_a_cap_is_read_as_the_cli_reads_it(
    ledger_with_two_teams: Ledger, cap: object, stored: object
) -> None:
    # A JSON number or "$150" was refused with the field's regex as the only explanation.
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    body = {"scope": "project=churn", "period": "month", "cap_usd": cap}
    assert TestClient(cost_app).post("/api/budgets", json=body).status_code == 200
    assert [b.cap_usd for b in ledger_with_two_teams.budgets() if str(b.scope) == "project=churn"] == [stored]


def test_a_cap_the_api_cannot_read_names_the_value() -> None:
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    body = {"scope": "project=churn", "period": "month", "cap_usd": "25 USD"}
    response = TestClient(cost_app).post("/api/budgets", json=body)
    assert (
        response.status_code == 422
        and "cap_usd must be a number of USD such as '4.20', got '25 USD'" in response.text
    ), response.text


def test_a_cap_changed_through_the_api_keeps_what_the_change_leaves_out(
    ledger_with_two_teams: Ledger,
) -> None:
    # A cap raise dropped the GPU-hour cap and reset the time zone: a GPU budget could then be passed.
    ledger = ledger_with_two_teams
    ledger.set_budget("project=churn", "month", "100", cap_gpu_hours="40", timezone="Europe/Berlin")
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    post = TestClient(cost_app).post
    assert (
        post("/api/budgets", json={"scope": "project=churn", "period": "month", "cap_usd": "200"}).status_code
        == 200
    )
    (churn,) = [b for b in ledger.budgets() if str(b.scope) == "project=churn"]
    assert (churn.cap_usd, churn.cap_gpu_hours, churn.timezone) == (200, 40, "Europe/Berlin")
    dropped = {"scope": "project=churn", "period": "month", "cap_usd": "200", "cap_gpu_hours": None}
    assert post("/api/budgets", json=dropped).status_code == 200
    (churn,) = [b for b in ledger.budgets() if str(b.scope) == "project=churn"]
    assert churn.cap_gpu_hours is None and churn.timezone == "Europe/Berlin"
    new = {"scope": "team=ml", "period": "day", "cap_usd": "5", "cap_gpu_hours": "2"}
    assert post("/api/budgets", json=new).status_code == 200
    (ml,) = [b for b in ledger.budgets() if str(b.scope) == "team=ml"]
    assert (ml.cap_gpu_hours, ml.timezone) == (2, "UTC")
    # The cap left out of a change (only the GPU-hour cap given) is the budget's own; it was 422, "cap_usd:
    # Field required". A new budget still needs it, and GPU-hours are not USD.
    gpu_only = {"scope": "project=churn", "period": "month", "cap_gpu_hours": "60"}
    assert post("/api/budgets", json=gpu_only).status_code == 200
    (churn,) = [b for b in ledger.budgets() if str(b.scope) == "project=churn"]
    assert (churn.cap_usd, churn.cap_gpu_hours) == (200, 60)
    missing = post("/api/budgets", json={"scope": "team=data", "period": "day"})
    assert missing.status_code == 422 and "does not exist yet: give cap_usd" in missing.text
    hours = post("/api/budgets", json={**gpu_only, "cap_gpu_hours": "-1"})
    assert hours.status_code == 422 and "cap_gpu_hours must be a number of GPU-hours" in hours.text


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "project", "period": "month", "cap_usd": "1"},
        {"scope": "project=churn", "period": "week", "cap_usd": "1"},
        {"scope": "project=churn", "period": "month", "cap_usd": "-1"},
        {"scope": "project=churn", "period": "month", "cap_usd": "lots"},
        {"scope": "project=churn", "period": "month", "cap_usd": "1e13"},
        {"scope": "project=churn", "period": "month", "cap_usd": "1", "timezone": "Mars/Base"},
        # A misspelt field was dropped: 200, and no GPU-hour cap.
        {"scope": "project=churn", "period": "month", "cap_usd": "150", "cap_gpu_hourz": 3},
    ],
)
def test_bad_budget_changes_are_refused_and_not_recorded(
    ledger_with_two_teams: Ledger, body: dict[str, str]
) -> None:
    before = len(audit_log(ledger_with_two_teams))
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    response = TestClient(cost_app).post("/api/budgets", json=body)
    assert response.status_code == 422, response.text
    assert len(audit_log(ledger_with_two_teams)) == before


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"scope": "project churn"}, "scope part 'project churn' of 'project churn' is not key=value"),
        ({"scope": ""}, "scope is empty: give the tags it counts"),
        ({"scope": "1project=churn"}, "tag name '1project' is not allowed: start with a letter"),
        ({"period": "monthly"}, "unknown budget period 'monthly': use one of run, day, month, total"),
        # It said "Extra inputs are not permitted", naming neither the field meant nor those it takes.
        (
            {"cap_gpu_hour": 5},
            "'cap_gpu_hour' is not a field of a budget change (did you mean 'cap_gpu_hours'?); "
            "the fields are scope, period, cap_usd, cap_gpu_hours, timezone",
        ),
    ],
)
def test_a_scope_or_period_the_api_cannot_read_names_the_value(body: dict[str, str], said: str) -> None:
    # The field's regex was the only explanation: "String should match pattern '^(\\*|[A-Za-z]...".
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    change = {"scope": "project=churn", "period": "month", "cap_usd": "5", **body}
    response = TestClient(cost_app).post("/api/budgets", json=change)
    assert response.status_code == 422 and said in response.text, response.text
    assert "should match pattern" not in response.text


def test_a_scope_is_read_as_the_cli_reads_it(ledger_with_two_teams: Ledger) -> None:
    # `costaware budget set --scope 'project = churn, team = ml'` and the page's filter took the spaces;
    # the API refused them with its regex.
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    body = {"scope": " project = churn , team = ml ", "period": " Month ", "cap_usd": "7"}
    response = TestClient(cost_app).post("/api/budgets", json=body)
    assert response.status_code == 200 and response.json()["budget"] == "project=churn,team=ml/month"
    caps = [b.cap_usd for b in ledger_with_two_teams.budgets() if str(b.scope) == "project=churn,team=ml"]
    assert caps == [7]


def test_an_unreadable_ledger_is_said_on_the_page_and_in_json(
    ledger_with_two_teams: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The DAG check read the ledger first and answered raw JSON inside the Airflow UI.
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "postgresql://nobody:secret@127.0.0.1:1/ledger")
    page = client_for("adm").get("/", params={"days": "30"})
    assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
    assert "cannot be read right now" in page.text and "<form" in page.text and "secret" not in page.text
    for path in ("/api/summary", "/api/budgets", "/api/spend"):
        answer = client_for("adm").get(path)
        assert answer.status_code == 503 and "cannot be read right now" in answer.json()["detail"], path


@pytest.mark.parametrize(
    ("setting", "allowed"),
    [
        ("ADMIN", {"adm"}),
        ("op", {"adm", "olga"}),  # a role covers those below it: admin may whatever an op may
        ("viewer", {"adm", "olga", "ann", "vera"}),
        ("ADMN", set()),  # a typo: nobody, said in the api-server log
    ],
)
def test_the_budget_role_is_a_floor_and_a_misspelt_one_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, setting: str, allowed: set[str]
) -> None:
    from costaware.plugins.ui.access import may_set_budgets

    monkeypatch.setenv("AIRFLOW__COSTAWARE__BUDGET_ADMIN_ROLE", setting)
    users = {**USERS, "olga": SimpleAuthManagerUser(username="olga", role="op")}
    assert {name for name, user in users.items() if may_set_budgets(user)} == allowed
    assert ("budget_admin_role 'ADMN' is not a role" in caplog.text) == (setting == "ADMN")


def test_a_misspelt_budget_role_is_named_to_the_admin_it_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    # The admin was told "may not set budgets: ask an admin", and the log named the role upper-cased.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__BUDGET_ADMIN_ROLE", "Operators")
    response = client_for("adm").post(
        "/api/budgets", json={"scope": "project=churn", "period": "month", "cap_usd": "5"}
    )
    assert response.status_code == 403
    assert "budget_admin_role 'Operators' is not a role of the simple auth manager" in response.text


def test_a_cap_json_cannot_hold_as_a_float_is_a_422_and_the_answer_is_the_stored_cap(
    ledger_with_two_teams: Ledger,
) -> None:
    client = client_for("adm")
    huge = '{"scope": "project=churn", "period": "month", "cap_usd": 1e400}'  # inf once parsed: a 500 before
    response = client.post("/api/budgets", content=huge, headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and "inf" in response.text
    body = {"scope": "project=churn", "period": "month", "cap_usd": "150.1234567"}
    answer = client.post("/api/budgets", json=body).json()
    (churn,) = [b for b in ledger_with_two_teams.budgets() if str(b.scope) == "project=churn"]
    assert answer["cap_usd"] == "150.123457" and churn.cap_usd == Decimal(answer["cap_usd"])  # as stored
    body["cap_usd"] = "100"
    assert client.post("/api/budgets", json=body).json()["cap_usd"] == "100"  # no trailing zeros


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ('{"scope": "project churn", "period": "weekly", "cap_usd": "1"}',
         "scope: scope part 'project churn' of 'project churn' is not key=value: write e.g. "
         "'project=churn,team=ml'; period: unknown budget period 'weekly': use one of run, day, month, "
         "total"),
        ('{"period": "month", "cap_usd": "1"}', "scope: missing: give it"),
        # A scope the pattern takes but whose tag reads as never set was refused under cap_usd.
        ('{"scope": "project=null", "period": "month", "cap_usd": "100"}',
         "scope: tag 'project' has value 'null', which says it was never set"),
        ('{"scope": 5, "period": "month"}', "scope: 5 is not valid: Input should be a valid string"),
        ('{"scope": "project=churn", "period": "month", "cap_usd": 1e400}',
         "cap_usd: cap_usd must be a finite number of USD, got inf"),
        ("{bad",
         "body: not valid JSON (Expecting property name enclosed in double quotes): send a JSON object"),
        # Budget.create's own checks answered without the field's name.
        ('{"scope": "project=churn", "period": "month", "cap_usd": "5", "timezone": "Mars/X"}',
         "timezone: unknown time zone 'Mars/X': use an IANA name such as 'Europe/Berlin' or 'UTC'"),
        ('{"scope": "project=churn", "period": "month", "cap_usd": "5", "timezone": " "}',
         "timezone: empty: give an IANA name such as 'Europe/Berlin', or leave timezone out"),
        ('{"scope": "project=churn", "period": "month", "cap_usd": "0.0000001", "cap_gpu_hours": 1e-7}',
         "cap_usd: cap of budget 'project=churn/month' '0.0000001' is below the ledger's micro-dollar: it "
         "would be stored as $0; give at least 0.000001 (or 0 to block all spending); cap_gpu_hours: "
         "GPU-hour cap of budget 'project=churn/month' '0.0000001' is below a micro-hour"),
    ],
)  # fmt: skip
def test_a_bad_budget_body_is_one_line_naming_every_bad_field_as_a_bad_query_is(
    ledger_with_two_teams: Ledger, body: str, detail: str
) -> None:
    # A bad body answered FastAPI's list of dicts, where every GET route answers one line in `detail`.
    before = len(audit_log(ledger_with_two_teams))
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    response = TestClient(cost_app).post(
        "/api/budgets", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert isinstance(response.json()["detail"], str) and detail in response.json()["detail"]
    assert len(audit_log(ledger_with_two_teams)) == before
    schema = TestClient(cost_app).get("/openapi.json").json()["components"]["schemas"]["BadRequest"]
    assert schema["properties"]["detail"]["type"] == "string"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ('{"scope": "project=churn", "period": "month", "cap_usd": "5", "cap_usd": "7"}',
         "cap_usd: given 2 times ('5', then '7'): give it once"),
        ('{"scope": "project=churn", "period": "month", "cap_usd": "5", "period": "day", "cap_usd": 7}',
         "period: given 2 times ('month', then 'day'): give it once; "
         "cap_usd: given 2 times ('5', then 7): give it once"),
        # Python's == takes 1 and true for one value: the cap was set to 1 without a word.
        ('{"scope": "project=churn", "period": "month", "cap_usd": 1, "cap_usd": true}',
         "cap_usd: given 2 times (1, then True): give it once"),
    ],
)  # fmt: skip
def test_a_body_key_given_twice_with_different_values_is_refused(
    ledger_with_two_teams: Ledger, body: str, detail: str
) -> None:
    # json.loads kept the last: the cap set was 7, without a word.
    before = len(audit_log(ledger_with_two_teams))
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    client = TestClient(cost_app)
    response = client.post("/api/budgets", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == detail
    assert len(audit_log(ledger_with_two_teams)) == before
    # The same value twice is read once.
    same = '{"scope": "project=churn", "period": "month", "cap_usd": "7", "cap_usd": "7"}'
    response = client.post("/api/budgets", content=same, headers={"content-type": "application/json"})
    assert response.status_code == 200 and response.json()["cap_usd"] == "7", response.text


def test_a_budget_scope_in_quotes_is_refused_by_the_api_as_by_the_cli(ledger_with_two_teams: Ledger) -> None:
    # POST {"scope": "project=\"churn\""} made a budget over "churn" with its quotes: it capped nothing.
    before = len(audit_log(ledger_with_two_teams))
    cost_app.dependency_overrides[require_login] = lambda: USERS["adm"]
    body = {"scope": 'project="churn"', "period": "month", "cap_usd": "5"}
    response = TestClient(cost_app).post("/api/budgets", json=body)
    assert response.status_code == 422
    assert response.json()["detail"] == (
        'scope: \'project="churn"\': "churn" is in quotes, which would be part of the tag and match no '
        "task's tags: drop them (give 'project=churn')"
    )
    assert len(audit_log(ledger_with_two_teams)) == before
