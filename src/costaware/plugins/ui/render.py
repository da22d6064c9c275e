"""The Cost page's HTML: the template filled with cards, tables and charts (escaped, no JavaScript).

Every dollar figure is written with :func:`costaware.core.money.format_usd_exact`, as in the CLI's tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from html import escape
from importlib import resources
from string import Template
from typing import Any

from costaware.core.money import format_usd_exact as money
from costaware.plugins.ui import charts
from costaware.plugins.ui.filters import GROUP_BY_CHOICES, query_string

TEMPLATE = Template((resources.files("costaware.plugins.ui") / "templates" / "cost.html").read_text("utf-8"))
GATE_OUTCOMES = {
    "refused": "refused (run failed)",
    "skipped": "refused (run skipped)",
    "waiting": "waiting",
    "reserved": "reserved after waiting",
    "approval": "waiting for approval",
    "approved": "overage approved",
    "rejected": "overage rejected",
}


@dataclass(frozen=True, slots=True)
class Report:
    """What the page shows for one set of filters, read from the ledger."""

    summary: Any
    per_day: list[Any]
    other_day_group: str | None  # the group in ``per_day`` that totals the groups left out
    by_group: list[Any]
    by_group_rest: Any  # a ReportRow totalling the groups past the top ones, or None
    by_team: list[Any]
    by_project: list[Any]
    by_run: list[Any]
    tries: list[Any]
    budgets: list[Any]
    forecasts: dict[str, Any]
    efficiency: str
    gates: list[Any]


def page_html(typed: dict[str, str], filters: Any, group_by: str, report: Report) -> str:
    """The whole page for ``filters`` (``typed``: the form's fields as sent, to refill it and build links)."""
    s = report.summary
    cards = "".join(
        [
            card("Spent", money(s.usd), f"{s.entries} entries, {range_note(typed, filters)}"),
            card("On-demand equivalent", money(s.on_demand_usd), "the same compute at list price"),
            card("Savings vs on-demand", money(s.savings_usd), "spot, local and cheaper windows"),
            card("Cache hits", str(s.cache_hits), f"{money(s.cache_avoided_usd)} of compute avoided"),
            card("Egress avoided", money(s.egress_avoided_usd), f"{money(s.egress_usd)} egress paid"),
            card("Failed tries", str(s.failed_tries), f"{s.preempted_tries} preempted"),
        ]
    )
    budget_charts = "".join(
        charts.burn_down_line(
            b.cumulative,
            b.usage.cap_usd,
            f"Budget {b.usage.name}: {money(b.usage.left_usd)} left",
            _forecast_triple(report.forecasts.get(b.usage.label)),
        )
        for b in report.budgets
    ) or (
        '<p class="empty">No budget applies to these filters; set one with '
        "<code>costaware budget set</code>.</p>"
    )
    return _fill(
        typed,
        group_by,
        cards=cards,
        spend_chart=charts.stacked_bars(
            report.per_day, f"Spend per day by {group_by}", other=report.other_day_group
        ),
        budget_charts=budget_charts,
        team_chart=charts.horizontal_bars([(r.group, r.usd) for r in report.by_team], "By team"),
        project_chart=charts.horizontal_bars([(r.group, r.usd) for r in report.by_project], "By project"),
        group_table=group_table(group_by, report.by_group, report.by_group_rest),
        run_chart=charts.horizontal_bars(
            [(r.group, r.usd) for r in report.by_run], "Spend per run (top 10)", limit=10, noun="runs"
        ),
        tries_table=tries_table(report.tries),
        efficiency=report.efficiency,
    ).replace("<!--gates-->", gates_table(report.gates))


def error_html(typed: dict[str, str], group_by: str, errors: list[str]) -> str:
    """The page with its form refilled and a red box listing what is wrong, instead of the report."""
    items = "".join(f"<li>{escape(e)}</li>" for e in errors)
    empty = dict.fromkeys(
        (
            "cards",
            "spend_chart",
            "budget_charts",
            "team_chart",
            "project_chart",
            "group_table",
            "run_chart",
            "tries_table",
            "efficiency",
        ),
        "",
    )
    return (
        _fill(typed, group_by, **empty)
        .replace(
            "<!--error-->", f'<div class="error" role="alert"><b>Cannot show costs:</b><ul>{items}</ul></div>'
        )
        .replace('<div id="report">', '<div id="report" hidden>')
    )


def _fill(typed: dict[str, str], group_by: str, **sections: str) -> str:
    scope = typed.get("scope", "")
    return TEMPLATE.substitute(
        query=escape(query_string(typed)),
        days=escape(typed.get("days") or "30"),
        since=escape(typed.get("since", "")),
        until=escape(typed.get("until", "")),
        dag_id=escape(typed.get("dag_id", "")),
        group_by=escape(group_by),
        group_by_options=group_by_options(group_by),
        scope=escape("" if scope == "*" else scope),
        **sections,
    )


def range_note(typed: dict[str, str], filters: Any) -> str:
    """The time range in words: "last 30 days", or the instants the URL or form gave."""
    if not typed.get("since") and not typed.get("until"):
        return f"last {typed.get('days') or 30} days"
    end = "now" if filters.until is None else _utc(filters.until)
    return f"{_utc(filters.since)} to {end}"


def _utc(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%d %H:%M UTC")


def group_by_options(current: str) -> str:
    """The grouping select's options, the current one selected (a ``tag:<name>`` from the URL added)."""
    choices = list(GROUP_BY_CHOICES) + ([current] if current not in GROUP_BY_CHOICES else [])
    return "".join(
        f'<option value="{escape(c)}"{" selected" if c == current else ""}>{escape(c)}</option>'
        for c in choices
    )


def group_table(group_by: str, rows: list[Any], rest: Any) -> str:
    """Spend per group, costliest first; ``rest`` (a row totalling the groups left out) last."""
    note = ""
    if rest is not None:
        note = (
            f'<p class="note">The {len(rows)} costliest groups; the last row, '
            f"<i>{escape(rest.group)}</i>, totals the rest.</p>"
        )
    body = [
        [
            r.group,
            str(r.entries),
            f"{r.hours:.4f}",
            money(r.usd),
            money(r.estimated_usd),
            money(r.on_demand_usd),
            money(r.savings_usd),
        ]
        for r in [*rows, *([rest] if rest is not None else [])]
    ]
    headers = [group_by, "entries", "hours", "actual", "estimated", "on-demand", "savings"]
    return note + table(headers, body, rest_row=rest is not None)


def tries_table(tries: list[dict[str, Any]]) -> str:
    """The most expensive task tries."""
    return table(
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
                money(t["usd"]),
            ]
            for t in tries
        ],
    )


def gates_table(requests: list[Any]) -> str:
    """Spend gates that were refused, skipped or had to wait: what was asked, of which budget, when."""
    if not requests:
        return '<p class="empty">No spend gate was refused or had to wait in this period.</p>'
    rows = [
        [
            r.updated_at.strftime("%Y-%m-%d %H:%M UTC"),
            r.dag_id,
            r.run_id,
            f"{r.task_id} for {r.for_task_id}",
            money(r.usd),
            r.budget,
            GATE_OUTCOMES.get(r.status, r.status),
            r.message if r.status != "reserved" else f"waited since {r.requested_at:%Y-%m-%d %H:%M} UTC",
        ]
        for r in requests
    ]
    return table(["when", "DAG", "run", "gate", "asked", "budget", "outcome", "budget's answer"], rows)


def _forecast_triple(forecast: Any) -> tuple[Decimal, Decimal, Decimal] | None:
    if forecast is None:
        return None
    return (forecast.forecast_usd, forecast.low_usd, forecast.high_usd)


def card(label: str, value: str, note: str = "") -> str:
    """One headline figure."""
    return (
        f'<div class="card"><div class="label">{escape(label)}</div><div class="value">{escape(value)}</div>'
        f'<div class="note">{escape(note)}</div></div>'
    )


def table(headers: list[str], rows: list[list[str]], *, rest_row: bool = False) -> str:
    """An escaped HTML table; with ``rest_row`` its last row is styled as the total of the rest."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    lines = [
        ('<tr class="rest">' if rest_row and i == len(rows) - 1 else "<tr>")
        + "".join(f"<td>{escape(c)}</td>" for c in row)
        + "</tr>"
        for i, row in enumerate(rows)
    ]
    body = "".join(lines) or "<tr><td>no entries</td></tr>"
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
