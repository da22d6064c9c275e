"""The Cost page (``/costaware/``) and its JSON API (``/costaware/api/...``) inside the Airflow api-server.

Every route, the OpenAPI schema included, requires an authenticated Airflow user: a ``Bearer`` token or
the UI's session cookie. A browser without a session is sent to the auth manager's login page and back;
the JSON routes answer 401. Query parameters are typed and pattern-checked by FastAPI before any query
runs (``filters.py``), and reach the database only as bound parameters. No answer names the ledger's
database: why it cannot be used goes to the api-server's log.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from decimal import Decimal
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from costaware.core.errors import ConfigurationError, CostawareError, LedgerUnavailableError
from costaware.plugins.ui.filters import (
    MAX_SCOPE_TAGS,
    SCOPE_PATTERN,
    DagId,
    GroupBy,
    ScopeQ,
    page_filters,
    report_filters,
    scope_problem,
)

log = logging.getLogger(__name__)

#: What a request learns when the ledger cannot be used; the reason (with the database's URL) is logged.
LEDGER_UNAVAILABLE = (
    "the cost ledger cannot be read right now: try again later; an administrator finds the reason in "
    "the api-server log"
)
_DATABASE_URL = re.compile(r"\b(sqlite|postgres(ql)?)(\+\w+)?://\S*", re.IGNORECASE)


async def require_login(request: Request) -> Any:
    """Airflow's own check (Bearer token, else the UI's session cookie); 401/403 when it fails.

    Returns the logged-in user (an auth manager ``BaseUser``).

    Airflow's security module is imported here, at request time, not when the plugin loads: every
    task process loads plugins (for the listener) and should not pay for the api-server's imports.
    """
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPAuthorizationCredentials

    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    credentials = HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if token else None
    return await get_user(request, None, credentials)


cost_app = FastAPI(
    title="costaware Cost API",
    version="1",
    description="Spend, budgets and savings from the costaware ledger. Every route needs an Airflow login.",
    openapi_url=None,  # served below, behind the same authentication as the data
    docs_url=None,
    redoc_url=None,
    dependencies=[Depends(require_login)],
)


@cost_app.exception_handler(StarletteHTTPException)
async def login_or_error(request: Request, exc: StarletteHTTPException) -> Response:
    """Send a browser whose session is missing, expired or unreadable to the login page, then back here.

    Only the HTML page does this, and only for a request without an ``Authorization`` header (a browser
    with a cookie, not a script with a token): the JSON routes keep their 401/403, which scripts act on.
    """
    if (
        exc.status_code in (401, 403)
        and request.scope.get("endpoint") is cost_page
        and "authorization" not in request.headers
    ):
        from airflow.api_fastapi.app import get_auth_manager

        back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        # Every auth manager takes keyword arguments; the simple one and FAB honour ``next_url``.
        return RedirectResponse(get_auth_manager().get_url_login(next_url=back), status_code=303)
    return await http_exception_handler(request, exc)


def _ledger() -> Any:
    """The ledger; a URL or schema it cannot be opened with is the server's problem, not the request's."""
    from costaware.hooks.ledger import CostLedgerHook

    try:
        return CostLedgerHook().get_conn()
    except CostawareError as e:
        raise LedgerUnavailableError(str(e)) from e


def readable_dags(user: Annotated[Any, Depends(require_login)]) -> frozenset[str]:
    """The DAGs in the ledger that the logged-in user may read (the auth manager decides)."""
    from costaware.plugins.ui.access import readable_dag_ids

    def find() -> frozenset[str]:
        return readable_dag_ids(user, _ledger_dag_ids())

    return frozenset(_guard(find))


def _ledger_dag_ids() -> set[str]:
    from sqlalchemy import select

    from costaware.adapters import ledger_schema as schema

    with _ledger().reading() as conn:  # a refused gate's DAG may have no priced entry yet
        return {
            row[0]
            for table in (schema.entries, schema.gate_requests)
            for row in conn.execute(select(table.c.dag_id).distinct())
        }


Readable = Annotated[frozenset[str], Depends(readable_dags)]


def visible_filters(filters: Annotated[Any, Depends(report_filters)], readable: Readable) -> Any:
    """The report filters narrowed to the DAGs the user may read."""
    return replace(filters, dag_ids=readable)


ReportFilters = Annotated[Any, Depends(visible_filters)]
Limit = Annotated[
    int | None,
    Query(ge=1, le=10000, description="Only the costliest groups; the rest are totalled under `other`."),
]


def _guard(call: Any) -> Any:
    """Run a ledger call; bad filters are 422, an unusable ledger 503 (its reason logged, not answered)."""
    try:
        return call()
    except LedgerUnavailableError as e:
        log.warning("costaware Cost API: %s", e)
        raise HTTPException(503, LEDGER_UNAVAILABLE) from e
    except ConfigurationError as e:
        raise HTTPException(422, _public(str(e))) from e
    except CostawareError as e:
        raise HTTPException(400, _public(str(e))) from e


def _public(message: str) -> str:
    """``message`` without any database URL (messages about the request should hold none; be sure)."""
    return _DATABASE_URL.sub("<the ledger database>", message)


def _usd(value: Decimal) -> str:
    return str(value)


@cost_app.get("/openapi.json", include_in_schema=False)
def openapi_schema() -> dict[str, Any]:
    """The OpenAPI schema of this API."""
    return cost_app.openapi()


@cost_app.get("/api/summary", summary="Spend, on-demand equivalent, savings, cache reuse and egress")
def api_summary(filters: ReportFilters) -> dict[str, Any]:
    """Totals of the entries in range: spend, on-demand equivalent, savings, cache hits, egress."""
    from costaware.adapters.ledger_reports import summary

    s = _guard(lambda: summary(_ledger(), filters))
    return {
        "usd": _usd(s.usd),
        "on_demand_usd": _usd(s.on_demand_usd),
        "savings_usd": _usd(s.savings_usd),
        "estimated_usd": _usd(s.estimated_usd),
        "entries": s.entries,
        "failed_tries": s.failed_tries,
        "preempted_tries": s.preempted_tries,
        "cache_hits": s.cache_hits,
        "cache_avoided_usd": _usd(s.cache_avoided_usd),
        "egress_usd": _usd(s.egress_usd),
        "egress_avoided_usd": _usd(s.egress_avoided_usd),
    }


def _spend_rows(filters: Any, group_by: str) -> list[Any]:
    f = filters
    return list(
        _ledger().report(
            group_by=group_by, since=f.since, until=f.until, dag_id=f.dag_id, scope=f.scope, dag_ids=f.dag_ids
        )
    )


def _row_json(r: Any) -> dict[str, Any]:
    return {
        "group": r.group,
        "entries": r.entries,
        "hours": _usd(r.hours),
        "usd": _usd(r.usd),
        "estimated_usd": _usd(r.estimated_usd),
        "on_demand_usd": _usd(r.on_demand_usd),
        "savings_usd": _usd(r.savings_usd),
    }


@cost_app.get("/api/spend", summary="Spend per group (DAG, task, run, trial, tag, ...), costliest first")
def api_spend(filters: ReportFilters, group_by: GroupBy = "dag", limit: Limit = None) -> dict[str, Any]:
    """Spend per group, costliest first; with ``limit``, the rest totalled in ``other`` (null: none left)."""
    from costaware.adapters.ledger_reports import top_groups

    rows = _guard(lambda: _spend_rows(filters, group_by))
    shown, rest = top_groups(rows, limit) if limit else (rows, None)
    other = None if rest is None else {**_row_json(rest), "groups": len(rows) - len(shown)}
    return {"group_by": group_by, "rows": [_row_json(r) for r in shown], "other": other}


@cost_app.get("/api/daily", summary="Actual spend per UTC day and group")
def api_daily(filters: ReportFilters, group_by: GroupBy = "dag", limit: Limit = None) -> dict[str, Any]:
    """Actual spend per UTC day and group, for charts; with ``limit``, the other groups summed per day."""
    from costaware.adapters.ledger_reports import daily_spend, fold_daily, other_label

    points = _guard(lambda: daily_spend(_ledger(), filters, group_by))
    folded = 0
    if limit:
        points, folded = fold_daily(points, limit)
    return {
        "group_by": group_by,
        "points": [{"day": d.isoformat(), "group": g, "usd": _usd(u)} for d, g, u in points],
        "other": {"group": other_label(folded), "groups": folded} if folded else None,
    }


def budget_filters(dag_id: DagId = None, scope: ScopeQ = "*") -> tuple[str | None, str]:
    """The filters that choose budgets (a budget's period is its own: no time range applies)."""
    problem = scope_problem(scope)
    if problem:
        raise HTTPException(422, f"scope: {problem}")
    return dag_id, scope


@cost_app.get("/api/budgets", summary="Each budget's cap, spend and reservations this period, with burn-down")
def api_budgets(
    readable: Readable, chosen: Annotated[tuple[str | None, str], Depends(budget_filters)]
) -> dict[str, Any]:
    """The budgets the user may see that apply to ``dag_id`` and ``scope``, each in its current period.

    ``days``, ``since`` and ``until`` do not apply: a budget's figures are those of its own period.
    """
    found, forecasts = _guard(lambda: _budgets_with_forecasts(readable, *chosen))
    return {
        "budgets": [
            {
                "budget": b.usage.label,
                "name": b.usage.name,
                "period": b.usage.period_key,
                "cap_usd": _usd(b.usage.cap_usd),
                "spent_usd": _usd(b.usage.spent_usd),
                "reserved_usd": _usd(b.usage.reserved_usd),
                "left_usd": _usd(b.usage.left_usd),
                "burn_down": [{"day": d.isoformat(), "spent_usd": _usd(v)} for d, v in b.cumulative],
                "forecast_usd": _usd(forecasts[b.usage.label].forecast_usd),
                "forecast_low_usd": _usd(forecasts[b.usage.label].low_usd),
                "forecast_high_usd": _usd(forecasts[b.usage.label].high_usd),
                "runs_left": forecasts[b.usage.label].runs_left,
            }
            for b in found
        ]
    }


def _budgets_with_forecasts(
    readable: frozenset[str] | None, dag_id: str | None = None, scope: str = "*"
) -> tuple[list[Any], dict[str, Any]]:
    """The burn-down and forecast of each budget the user may see that applies to ``dag_id`` and ``scope``.

    A budget applies to a scope when it counts some of its spend (no tag of the budget contradicts the
    scope: ``*`` and ``team=ml`` apply to ``project=churn``, ``project=fraud`` does not), and to a DAG
    when that DAG has spent in it. Timetables for the forecast come from Airflow's DB.
    """
    from costaware.adapters.airflow_schedule import AirflowSchedule
    from costaware.adapters.ledger_governance import budget_dags, budget_outlook, visible_budgets
    from costaware.adapters.ledger_reports import burn_down
    from costaware.core.budgets import Scope

    ledger = _ledger()
    wanted = Scope.parse(scope).as_dict()
    visible = {
        b.label: b
        for b in visible_budgets(ledger, readable)
        if all(wanted.get(key, value) == value for key, value in b.scope.tags)
        and (dag_id is None or dag_id in budget_dags(ledger, b))
    }
    found = [b for b in burn_down(ledger) if b.usage.label in visible]
    schedule = AirflowSchedule()
    forecasts = {
        b.usage.label: budget_outlook(ledger, visible[b.usage.label], schedule).forecast for b in found
    }
    return found, forecasts


class BudgetChange(BaseModel):
    """A budget to create or change from the UI."""

    scope: str = Field(
        pattern=SCOPE_PATTERN,
        max_length=512,  # the ledger's column
        description=f"Tags the budget covers, e.g. project=churn (at most {MAX_SCOPE_TAGS} tags).",
    )
    period: str = Field(pattern=r"^(run|day|month|total)$")
    cap_usd: str = Field(pattern=r"^[0-9]{1,12}(\.[0-9]{1,6})?$", description="The cap in USD, e.g. 250.")
    timezone: str = Field(default="UTC", max_length=64)


@cost_app.post("/api/budgets", summary="Create or change a budget (needs the budget permission); audited")
def api_set_budget(change: BudgetChange, user: Annotated[Any, Depends(require_login)]) -> dict[str, Any]:
    """Create or change a budget; 403 without the permission. The audit trail records who and the caps."""
    from costaware.plugins.ui.access import may_set_budgets, user_name

    if not _guard(lambda: may_set_budgets(user)):
        raise HTTPException(403, f"user {user_name(user)!r} may not set budgets: ask an admin")
    budget = _guard(
        lambda: _ledger().set_budget(
            change.scope, change.period, change.cap_usd, timezone=change.timezone, actor=user_name(user)
        )
    )
    return {"budget": budget.label, "cap_usd": _usd(budget.cap_usd), "set_by": user_name(user)}


@cost_app.get("/api/top-tries", summary="The most expensive task tries")
def api_top_tries(filters: ReportFilters, limit: Annotated[int, Query(ge=1, le=100)] = 10) -> dict[str, Any]:
    """The most expensive task tries in range."""
    from costaware.adapters.ledger_reports import costliest_tries

    tries = _guard(lambda: costliest_tries(_ledger(), filters, limit))
    return {
        "tries": [
            {
                **t,
                "usd": _usd(t["usd"]),
                "on_demand_usd": _usd(t["on_demand_usd"]),
                "hours": _usd(t["hours"]),
                "incurred_at": t["incurred_at"].isoformat(),
            }
            for t in tries
        ]
    }


def _gates(filters: Any, limit: int = 50) -> list[Any]:
    from costaware.adapters.gate_requests import gate_requests

    f = filters
    return list(
        gate_requests(
            _ledger(),
            since=f.since,
            until=f.until,
            dag_id=f.dag_id,
            dag_ids=f.dag_ids,
            scope=f.scope,
            limit=limit,
        )
    )


@cost_app.get("/api/gates", summary="Spend gates that were refused, skipped or had to wait")
def api_gates(filters: ReportFilters, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> dict[str, Any]:
    """Spend gates that did not get their money at once: what they asked, of which budget, when."""
    found = _guard(lambda: _gates(filters, limit))
    return {
        "gates": [
            {
                "requested_at": g.requested_at.isoformat(),
                "updated_at": g.updated_at.isoformat(),
                "dag_id": g.dag_id,
                "run_id": g.run_id,
                "task_id": g.task_id,
                "for_task_id": g.for_task_id,
                "scope": g.scope,
                "budget": g.budget,
                "usd": _usd(g.usd),
                "status": g.status,
                "message": g.message,
            }
            for g in found
        ]
    }


PageFilters = Annotated[tuple[Any, str, dict[str, str], list[str]], Depends(page_filters)]


@cost_app.get("/", response_class=HTMLResponse, summary="The Cost page")
def cost_page(form: PageFilters, readable: Readable) -> HTMLResponse:
    """The Cost page: cards, spend over time, budget burn-down, spend by tag and run, costliest tries."""
    from costaware.plugins.ui.render import error_html, page_html

    filters, group_by, typed, errors = form
    if errors:
        return HTMLResponse(error_html(typed, group_by, errors), status_code=422)
    f = replace(filters, dag_ids=readable)  # only the DAGs this user may read
    try:
        return HTMLResponse(_guard(lambda: page_html(typed, f, group_by, _read_report(f, group_by))))
    except HTTPException as e:  # an unusable ledger or a bad filter: say so on the page, not in JSON
        return HTMLResponse(error_html(typed, group_by, [str(e.detail)]), status_code=e.status_code)


def _read_report(f: Any, group_by: str) -> Any:
    """Everything the page shows, every section under the same filters (budgets: see ``docs/ui.md``)."""
    from costaware.adapters.ledger_reports import (
        costliest_tries,
        daily_spend,
        fold_daily,
        other_label,
        summary,
        top_groups,
    )
    from costaware.plugins.ui.efficiency import efficiency_panel
    from costaware.plugins.ui.render import Report

    ledger = _ledger()
    by_group, rest = top_groups(_spend_rows(f, group_by))
    per_day, folded = fold_daily(daily_spend(ledger, f, group_by))
    budgets, forecasts = _budgets_with_forecasts(f.dag_ids, f.dag_id, f.scope)
    return Report(
        summary=summary(ledger, f),
        per_day=per_day,
        other_day_group=other_label(folded) if folded else None,
        by_group=by_group,
        by_group_rest=rest,
        by_team=_spend_rows(f, "tag:team"),
        by_project=_spend_rows(f, "tag:project"),
        by_run=_spend_rows(f, "run"),
        tries=costliest_tries(ledger, f, 10),
        budgets=budgets,
        forecasts=forecasts,
        efficiency=efficiency_panel(ledger, f),
        gates=_gates(f),
    )


from costaware.plugins.ui import efficiency as _efficiency  # noqa: E402  (routes need the names above)

_efficiency.add_routes(cost_app, visible_filters, _guard, _ledger)
