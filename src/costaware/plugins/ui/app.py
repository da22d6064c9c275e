"""The Cost page (``/costaware/``) and its JSON API (``/costaware/api/...``) inside the Airflow api-server.

Every route, the OpenAPI schema included, requires an authenticated Airflow user: a ``Bearer`` token or
the UI's session cookie. Query parameters are typed and pattern-checked by FastAPI before any query runs,
and reach the database only as bound parameters.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from html import escape
from importlib import resources
from string import Template
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from costaware.core.errors import ConfigurationError, CostawareError, LedgerUnavailableError
from costaware.core.money import format_usd, format_usd_exact
from costaware.plugins.ui import charts

log = logging.getLogger(__name__)

GROUP_BY_PATTERN = r"^(dag|task|run|trial|kind|market|cause|outcome|tag:[A-Za-z][A-Za-z0-9_.-]{0,63})$"
DAG_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,250}$"
SCOPE_PATTERN = (
    r"^(\*|[A-Za-z][A-Za-z0-9_.-]{0,63}=[^,=]{1,128}(,[A-Za-z][A-Za-z0-9_.-]{0,63}=[^,=]{1,128})*)$"
)


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

Days = Annotated[int, Query(ge=1, le=366, description="How many days back from now (default 30).")]
Since = Annotated[datetime | None, Query(description="ISO datetime with a zone; overrides `days`.")]
Until = Annotated[datetime | None, Query(description="ISO datetime with a zone (exclusive).")]
DagId = Annotated[str | None, Query(pattern=DAG_ID_PATTERN, description="Only this DAG.")]
ScopeQ = Annotated[str, Query(pattern=SCOPE_PATTERN, description="Tag filter such as project=churn,team=ml.")]
GroupBy = Annotated[
    str, Query(pattern=GROUP_BY_PATTERN, description="dag, task, run, trial, kind, market, tag:<name>")
]


def _ledger() -> Any:
    from costaware.hooks.ledger import CostLedgerHook

    return CostLedgerHook().get_conn()


def report_filters(
    days: Days = 30, since: Since = None, until: Until = None, dag_id: DagId = None, scope: ScopeQ = "*"
) -> Any:
    """The filters every report route takes, validated: a ``ledger_reports.Filters``."""
    from costaware.adapters.ledger_reports import Filters

    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise HTTPException(422, f"{name}={value.isoformat()} has no time zone: add one, e.g. +00:00")
    start = since or datetime.now(timezone.utc) - timedelta(days=days)
    return Filters(since=start, until=until, dag_id=dag_id, scope=scope)


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
    from dataclasses import replace

    return replace(filters, dag_ids=readable)


ReportFilters = Annotated[Any, Depends(visible_filters)]


def _guard(call: Any) -> Any:
    """Run a ledger call; bad filters are 422, an unreachable ledger is 503."""
    try:
        return call()
    except LedgerUnavailableError as e:
        raise HTTPException(503, str(e)) from e
    except ConfigurationError as e:
        raise HTTPException(422, str(e)) from e
    except CostawareError as e:
        raise HTTPException(400, str(e)) from e


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


@cost_app.get("/api/spend", summary="Spend per group (DAG, task, run, trial, tag, ...), costliest first")
def api_spend(filters: ReportFilters, group_by: GroupBy = "dag") -> dict[str, Any]:
    """Spend per group, costliest first."""
    f = filters
    rows = _guard(
        lambda: _ledger().report(
            group_by=group_by, since=f.since, until=f.until, dag_id=f.dag_id, scope=f.scope, dag_ids=f.dag_ids
        )
    )
    return {
        "group_by": group_by,
        "rows": [
            {
                "group": r.group,
                "entries": r.entries,
                "hours": _usd(r.hours),
                "usd": _usd(r.usd),
                "estimated_usd": _usd(r.estimated_usd),
                "on_demand_usd": _usd(r.on_demand_usd),
                "savings_usd": _usd(r.savings_usd),
            }
            for r in rows
        ],
    }


@cost_app.get("/api/daily", summary="Actual spend per UTC day and group")
def api_daily(filters: ReportFilters, group_by: GroupBy = "dag") -> dict[str, Any]:
    """Actual spend per UTC day and group, for charts."""
    from costaware.adapters.ledger_reports import daily_spend

    points = _guard(lambda: daily_spend(_ledger(), filters, group_by))
    return {
        "group_by": group_by,
        "points": [{"day": d.isoformat(), "group": g, "usd": _usd(u)} for d, g, u in points],
    }


@cost_app.get("/api/budgets", summary="Each budget's cap, spend and reservations this period, with burn-down")
def api_budgets(readable: Readable) -> dict[str, Any]:
    """Every budget the user may see with its cap, spend, reservations, burn-down and period-end forecast."""
    found, forecasts = _guard(lambda: _budgets_with_forecasts(readable))
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


def _budgets_with_forecasts(readable: frozenset[str]) -> tuple[list[Any], dict[str, Any]]:
    """The burn-down of each budget the user may see, and its forecast (timetables from Airflow's DB)."""
    from costaware.adapters.airflow_schedule import AirflowSchedule
    from costaware.adapters.ledger_governance import budget_outlook, visible_budgets
    from costaware.adapters.ledger_reports import burn_down

    ledger = _ledger()
    visible = {b.label: b for b in visible_budgets(ledger, readable)}
    found = [b for b in burn_down(ledger) if b.usage.label in visible]
    schedule = AirflowSchedule()
    forecasts = {
        b.usage.label: budget_outlook(ledger, visible[b.usage.label], schedule).forecast for b in found
    }
    return found, forecasts


class BudgetChange(BaseModel):
    """A budget to create or change from the UI."""

    scope: str = Field(pattern=SCOPE_PATTERN, description="Tags the budget covers, e.g. project=churn.")
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


@cost_app.get("/api/gates", summary="Spend gates that were refused, skipped or had to wait")
def api_gates(filters: ReportFilters, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> dict[str, Any]:
    """Spend gates that did not get their money at once: what they asked, of which budget, when."""
    from costaware.adapters.gate_requests import gate_requests

    found = _guard(
        lambda: gate_requests(
            _ledger(), since=filters.since, dag_id=filters.dag_id, dag_ids=filters.dag_ids, limit=limit
        )
    )
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


GROUP_BY_CHOICES = (
    "dag",
    "task",
    "run",
    "trial",
    "kind",
    "market",
    "cause",
    "outcome",
    "tag:team",
    "tag:project",
)
TextQ = Annotated[str | None, Query()]


def page_filters(
    days: TextQ = None,
    since: TextQ = None,
    until: TextQ = None,
    dag_id: TextQ = None,
    scope: TextQ = None,
    group_by: TextQ = None,
) -> tuple[Any, str, dict[str, str], list[str]]:
    """The page's form, read leniently: empty fields mean "all" (or the default); bad ones become messages.

    Returns the ``Filters`` (None when a field is bad), the grouping, the values as typed (to refill the
    form) and one readable message per bad field. The JSON API keeps answering 422 instead.
    """
    import re

    from costaware.adapters.ledger_reports import Filters

    typed = {
        "days": (days or "").strip(),
        "since": (since or "").strip(),
        "until": (until or "").strip(),
        "dag_id": (dag_id or "").strip(),
        "scope": (scope or "").strip(),
        "group_by": (group_by or "").strip(),
    }
    errors: list[str] = []
    span = 30
    if typed["days"]:
        try:
            span = int(typed["days"])
        except ValueError:
            span = 0
        if not 1 <= span <= 366:
            errors.append(f"Days: {typed['days']!r} is not a whole number from 1 to 366.")
    instants: dict[str, datetime | None] = {"since": None, "until": None}
    for name in instants:
        if not typed[name]:
            continue
        try:
            instants[name] = datetime.fromisoformat(typed[name])
        except ValueError:
            errors.append(
                f"{name.title()}: {typed[name]!r} is not an ISO time such as 2026-11-01T00:00+00:00."
            )
            continue
        if instants[name].tzinfo is None:  # type: ignore[union-attr]
            errors.append(f"{name.title()}: {typed[name]!r} has no time zone: add one, e.g. +00:00.")
    if typed["dag_id"] and not re.fullmatch(DAG_ID_PATTERN, typed["dag_id"]):
        errors.append(
            f"DAG: {typed['dag_id']!r} is not a DAG id (letters, digits, '_', '.', '-'); "
            "leave it empty for all."
        )
    if typed["scope"] and not re.fullmatch(SCOPE_PATTERN, typed["scope"]):
        errors.append(
            f"Scope: {typed['scope']!r} is not a tag filter such as project=churn or project=churn,team=ml; "
            "leave it empty (or *) for all."
        )
    grouping = typed["group_by"] or "dag"
    if not re.fullmatch(GROUP_BY_PATTERN, grouping):
        errors.append(f"Group by: {grouping!r} is not one of {', '.join(GROUP_BY_CHOICES)} or tag:<name>.")
    if errors:
        return None, grouping, typed, errors
    start = instants["since"] or datetime.now(timezone.utc) - timedelta(days=span)
    filters = Filters(
        since=start, until=instants["until"], dag_id=typed["dag_id"] or None, scope=typed["scope"] or "*"
    )
    return filters, grouping, typed, []


PageFilters = Annotated[tuple[Any, str, dict[str, str], list[str]], Depends(page_filters)]


@cost_app.get("/", response_class=HTMLResponse, summary="The Cost page")
def cost_page(form: PageFilters, readable: Readable) -> HTMLResponse:
    """The Cost page: cards, spend over time, budget burn-down, spend by tag and run, costliest tries."""
    from dataclasses import replace

    from costaware.adapters.gate_requests import gate_requests
    from costaware.adapters.ledger_reports import costliest_tries, daily_spend, summary

    filters, group_by, typed, errors = form
    if errors:
        return HTMLResponse(_error_page(typed, group_by, errors), status_code=422)

    def build() -> str:
        ledger = _ledger()
        f = replace(filters, dag_ids=readable)  # only the DAGs this user may read
        dag_id, scope = f.dag_id, f.scope
        days = max(1, round((datetime.now(timezone.utc) - f.since).total_seconds() / 86400))
        s = summary(ledger, f)
        per_day = daily_spend(ledger, f, group_by)
        seen = f.dag_ids
        by_group = ledger.report(group_by=group_by, since=f.since, dag_id=dag_id, scope=scope, dag_ids=seen)
        by_team = ledger.report(group_by="tag:team", since=f.since, dag_id=dag_id, scope=scope, dag_ids=seen)
        by_project = ledger.report(
            group_by="tag:project", since=f.since, dag_id=dag_id, scope=scope, dag_ids=seen
        )
        by_run = ledger.report(group_by="run", since=f.since, dag_id=dag_id, scope=scope, dag_ids=seen)[:10]
        tries = costliest_tries(ledger, f, 10)
        budgets, forecasts = _budgets_with_forecasts(readable)
        from costaware.plugins.ui.efficiency import efficiency_panel

        efficiency = efficiency_panel(ledger, f)
        page = _page(
            days,
            dag_id,
            group_by,
            scope,
            s,
            per_day,
            by_group,
            by_team,
            by_project,
            by_run,
            tries,
            budgets,
            efficiency,
            forecasts,
        )
        gates = gate_requests(ledger, since=f.since, dag_id=dag_id, dag_ids=readable)
        return page.replace("<!--gates-->", _gates_table(gates))

    try:
        return HTMLResponse(str(_guard(build)))
    except HTTPException as e:  # an unreachable ledger or a bad filter: say so on the page, not in JSON
        return HTMLResponse(_error_page(typed, group_by, [str(e.detail)]), status_code=e.status_code)


def _group_by_options(current: str) -> str:
    choices = list(GROUP_BY_CHOICES) + ([current] if current not in GROUP_BY_CHOICES else [])
    return "".join(
        f'<option value="{escape(c)}"{" selected" if c == current else ""}>{escape(c)}</option>'
        for c in choices
    )


def _error_page(typed: dict[str, str], group_by: str, errors: list[str]) -> str:
    items = "".join(f"<li>{escape(e)}</li>" for e in errors)
    return (
        _TEMPLATE.safe_substitute(
            days=escape(typed.get("days") or "30"),
            dag_id=escape(typed.get("dag_id", "")),
            group_by=escape(group_by),
            group_by_options=_group_by_options(group_by),
            scope=escape(typed.get("scope", "")),
            cards="",
            spend_chart="",
            budget_charts="",
            team_chart="",
            project_chart="",
            group_table="",
            run_chart="",
            tries_table="",
            efficiency="",
        )
        .replace(
            "<!--error-->", f'<div class="error" role="alert"><b>Cannot show costs:</b><ul>{items}</ul></div>'
        )
        .replace('<div id="report">', '<div id="report" hidden>')
    )


def _gates_table(requests: list[Any]) -> str:
    """Spend gates that were refused, skipped or had to wait: what was asked, of which budget, when."""
    if not requests:
        return '<p class="empty">No spend gate was refused or had to wait in this period.</p>'
    label = {"refused": "refused (run failed)", "skipped": "refused (run skipped)", "waiting": "waiting"}
    label.update(
        reserved="reserved after waiting",
        approval="waiting for approval",
        approved="overage approved",
        rejected="overage rejected",
    )
    rows = [
        [
            r.updated_at.strftime("%Y-%m-%d %H:%M UTC"),
            r.dag_id,
            r.run_id,
            f"{r.task_id} for {r.for_task_id}",
            format_usd_exact(r.usd),
            r.budget,
            label.get(r.status, r.status),
            r.message if r.status != "reserved" else f"waited since {r.requested_at:%Y-%m-%d %H:%M} UTC",
        ]
        for r in requests
    ]
    return _table(["when", "DAG", "run", "gate", "asked", "budget", "outcome", "budget's answer"], rows)


def _forecast_triple(forecast: Any) -> tuple[Decimal, Decimal, Decimal] | None:
    if forecast is None:
        return None
    return (forecast.forecast_usd, forecast.low_usd, forecast.high_usd)


def _card(label: str, value: str, note: str = "") -> str:
    return (
        f'<div class="card"><div class="label">{escape(label)}</div><div class="value">{escape(value)}</div>'
        f'<div class="note">{escape(note)}</div></div>'
    )


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    body = body or "<tr><td>no entries</td></tr>"
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _page(
    days: int,
    dag_id: str | None,
    group_by: str,
    scope: str,
    s: Any,
    per_day: Any,
    by_group: Any,
    by_team: Any,
    by_project: Any,
    by_run: Any,
    tries: Any,
    budgets: Any,
    efficiency: str = "",
    forecasts: Any = None,
) -> str:
    cards = "".join(
        [
            _card("Spent", format_usd(s.usd), f"{s.entries} entries, last {days} days"),
            _card("On-demand equivalent", format_usd(s.on_demand_usd), "the same compute at list price"),
            _card("Savings vs on-demand", format_usd(s.savings_usd), "spot, local and cheaper windows"),
            _card("Cache hits", str(s.cache_hits), f"{format_usd(s.cache_avoided_usd)} of compute avoided"),
            _card(
                "Egress avoided", format_usd(s.egress_avoided_usd), f"{format_usd(s.egress_usd)} egress paid"
            ),
            _card("Failed tries", str(s.failed_tries), f"{s.preempted_tries} preempted"),
        ]
    )
    budget_charts = (
        "".join(
            charts.burn_down_line(
                b.cumulative,
                b.usage.cap_usd,
                f"Budget {b.usage.name}: {format_usd_exact(b.usage.left_usd)} left",
                _forecast_triple((forecasts or {}).get(b.usage.label)),
            )
            for b in budgets
        )
        or '<p class="empty">No budgets yet: set one with <code>costaware budget set</code>.</p>'
    )
    group_table = _table(
        [group_by, "entries", "hours", "actual", "estimated", "on-demand", "savings"],
        [
            [
                r.group,
                str(r.entries),
                f"{r.hours:.4f}",
                format_usd(r.usd),
                format_usd(r.estimated_usd),
                format_usd(r.on_demand_usd),
                format_usd(r.savings_usd),
            ]
            for r in by_group
        ],
    )
    tries_table = _table(
        ["DAG", "run", "task", "try", "instance", "market", "outcome", "hours", "cost"],
        [
            [
                t["dag_id"],
                t["run_id"],
                t["task_id"],
                str(t["try_number"]),
                t["instance_type"] or "-",
                t["market"] or "-",
                t["outcome"],
                f"{t['hours']:.4f}",
                format_usd(t["usd"]),
            ]
            for t in tries
        ],
    )
    return _TEMPLATE.substitute(
        days=days,
        dag_id=escape(dag_id or ""),
        group_by=escape(group_by),
        group_by_options=_group_by_options(group_by),
        scope=escape("" if scope == "*" else scope),
        cards=cards,
        spend_chart=charts.stacked_bars(per_day, f"Spend per day by {group_by}"),
        budget_charts=budget_charts,
        team_chart=charts.horizontal_bars([(r.group, r.usd) for r in by_team], "By team"),
        project_chart=charts.horizontal_bars([(r.group, r.usd) for r in by_project], "By project"),
        group_table=group_table,
        run_chart=charts.horizontal_bars([(r.group, r.usd) for r in by_run], "Spend per run (top 10)"),
        tries_table=tries_table,
        efficiency=efficiency,
    )


from costaware.plugins.ui import efficiency as _efficiency  # noqa: E402  (routes need the names above)

_efficiency.add_routes(cost_app, visible_filters, _guard, _ledger)

_TEMPLATE = Template((resources.files("costaware.plugins.ui") / "templates" / "cost.html").read_text("utf-8"))
