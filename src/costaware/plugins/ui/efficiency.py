"""The Cost page's efficiency panel and its JSON routes: utilization, right-sizing, cost against model metric.

Server-rendered HTML and SVG like the rest of the page; the routes sit behind the page's login.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from html import escape
from typing import Any

from fastapi import Depends, FastAPI, Query

from costaware.core.money import format_usd_exact as money
from costaware.plugins.ui.charts import HEIGHT, PAD, WIDTH, axis_left

#: Suggestions saving less than this per month are left off the page (the CLI shows them on request).
MIN_MONTHLY_SAVING_USD = Decimal("0.01")


def efficiency_data(ledger: Any, filters: Any, runs_per_month: float | None = None) -> dict[str, Any]:
    """Utilization per task, right-sizing advice and run outcomes for the page's filters."""
    from costaware.adapters.efficiency_store import measurements
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.efficiency import advise_tasks, utilization_by_task

    measured = measurements(ledger, dag_id=filters.dag_id, since=filters.since)
    if filters.until is not None:
        measured = [m for m in measured if m.measured_at is None or m.measured_at < filters.until]
    in_scope = runs_in_scope(ledger, filters)
    measured = [
        m
        for m in measured
        if _readable(filters, m.dag_id) and (in_scope is None or (m.dag_id, m.run_id) in in_scope)
    ]
    advice = advise_tasks(bundled_catalog(), measured, runs_per_month=runs_per_month)
    return {
        "tasks": utilization_by_task(measured),
        "advice": [a for a in advice if a.monthly_saving_usd >= MIN_MONTHLY_SAVING_USD],
        "runs": run_outcomes(ledger, filters),
    }


def run_outcomes(ledger: Any, filters: Any) -> list[Any]:
    """Retrain outcomes recorded in the filters' time range, oldest first, each with its run's cost."""
    from costaware.adapters.efficiency_store import outcomes

    in_scope = runs_in_scope(ledger, filters)
    return [
        o
        for o in outcomes(ledger, dag_id=filters.dag_id)
        if _readable(filters, o.dag_id)
        and (in_scope is None or (o.dag_id, o.run_id) in in_scope)
        and (
            o.recorded_at is None
            or (o.recorded_at >= filters.since and (filters.until is None or o.recorded_at < filters.until))
        )
    ]


def runs_in_scope(ledger: Any, filters: Any) -> set[tuple[str, str]] | None:
    """The (DAG, run) pairs with spend inside the filters' tag scope; None when the scope is everything.

    Measurements and outcomes carry no tags: they belong to a scope through their run's ledger entries.
    """
    from sqlalchemy import and_, select, true

    from costaware.adapters import ledger_schema as schema
    from costaware.adapters.ledger_store import scope_conditions
    from costaware.core.budgets import Scope

    scope = Scope.parse(getattr(filters, "scope", "*"))
    if not scope.tags:
        return None
    e = schema.entries
    query = select(e.c.dag_id, e.c.run_id).where(and_(true(), *scope_conditions(scope))).distinct()
    with ledger.reading() as conn:
        return {(row[0], row[1]) for row in conn.execute(query)}


def _readable(filters: Any, dag_id: str) -> bool:
    """Whether the user behind ``filters`` may read ``dag_id`` (``dag_ids`` None: no restriction)."""
    allowed = getattr(filters, "dag_ids", None)
    return allowed is None or dag_id in allowed


def efficiency_panel(ledger: Any, filters: Any) -> str:
    """The panel's HTML: utilization table, right-sizing suggestions, and cost against metric over runs."""
    data = efficiency_data(ledger, filters)
    rows = [
        [
            f"{r['dag_id']}.{r['task_id']}",
            str(r["tries"]),
            r["instance_type"] or "-",
            "-" if r["cpu_utilization"] is None else f"{r['cpu_utilization']:.1%}",
            f"{r['peak_memory_gib']:.2f} / {r['memory_gib'] or '-'}",
            money(Decimal(r["usd"])),
            "-" if r["idle_usd"] is None else money(Decimal(r["idle_usd"])),
        ]
        for r in data["tasks"][:15]
    ]
    table = _table(
        ["task", "tries", "instance", "CPU util", "peak / instance GiB", "cost", "idle cost"], rows
    )
    advice = "".join(
        f"<li><b>{escape(a.dag_id)}.{escape(a.task_id)}</b>: {escape(a.current.instance_type)} &rarr; "
        f"{escape(a.suggested.instance_type)} saves {escape(money(a.monthly_saving_usd))}/month "
        f"({escape(a.requirements.describe())}; {a.runs_per_month:g} runs/month, "
        f"{escape(a.frequency_basis)})</li>"
        for a in data["advice"]
    )
    advice_html = (
        f"<ul>{advice}</ul>"
        if advice
        else '<p class="empty">No cheaper instance type fits the measured tries (3+ tries per task).</p>'
    )
    return (
        "<h2>Efficiency</h2>"
        + table
        + "<h3>Right-sizing</h3>"
        + advice_html
        + "<h3>Cost against model metric</h3>"
        + cost_vs_metric(data["runs"])
    )


def cost_vs_metric(runs: Sequence[Any]) -> str:
    """One bar per retrain run (its cost) and a line of its holdout metric; promoted runs are marked."""
    scored = [r for r in runs if r.usd is not None][-30:]
    if not scored:
        return '<p class="empty">No retrain outcomes yet: the retrain and promote operators record them.</p>'
    metric = next((r.metric for r in scored if r.metric), "metric")
    values = [r.metric_value for r in scored if r.metric_value is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    span = (high - low) or 1.0
    top = max(r.usd for r in scored) or Decimal(1)
    left = axis_left(money(top))
    slot = (WIDTH - left - PAD) / len(scored)
    bar = max(2.0, slot * 0.6)
    inner = HEIGHT - 2 * PAD
    title = f"Cost per run (bars) and holdout {metric} (line); filled points were promoted"
    parts = [
        f'<svg role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" class="chart">',
        f'<text x="0" y="16" class="title">{escape(title)}</text>',
        f'<line x1="{left:.1f}" x2="{WIDTH - PAD}" y1="{HEIGHT - PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
        f'<text x="{left - 4:.1f}" y="{PAD + 4}" class="tick" text-anchor="end">{escape(money(top))}</text>',
        # The metric's scale sits right of the plot, right-aligned so a wide value is not cut off.
        f'<text x="{WIDTH}" y="{PAD + 4}" class="tick" text-anchor="end">{high:.4f}</text>',
        f'<text x="{WIDTH}" y="{HEIGHT - PAD}" class="tick" text-anchor="end">{low:.4f}</text>',
    ]
    points = []
    for i, run in enumerate(scored):
        x = left + i * slot + (slot - bar) / 2
        h = float((run.usd or 0) / top) * inner
        label = f"{run.run_id}: {money(run.usd or Decimal(0))}"
        if run.metric_value is not None:
            label += f", {metric} {run.metric_value:.4f}" + (" (promoted)" if run.promoted else "")
            y = HEIGHT - PAD - (run.metric_value - low) / span * inner * 0.9 - inner * 0.05
            points.append((x + bar / 2, y, bool(run.promoted)))
        parts.append(
            f'<rect x="{x:.1f}" y="{HEIGHT - PAD - h:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="#93c5fd">'
            f"<title>{escape(label)}</title></rect>"
        )
    if points:
        parts.append(
            f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)}" class="spent"/>'
        )
        parts += [
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{"#2563eb" if promoted else "#ffffff"}" '
            'stroke="#2563eb"/>'
            for x, y, promoted in points
        ]
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    body = body or "<tr><td>no measured tries in this range</td></tr>"
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def add_routes(
    app: FastAPI, filters: Callable[..., Any], guard: Callable[..., Any], ledger: Callable[[], Any]
) -> None:
    """Add ``/api/efficiency`` and ``/api/outcomes`` to the Cost API (same filters, errors and login)."""
    in_range = Depends(filters)

    @app.get("/api/efficiency", summary="Measured utilization per task and right-sizing advice")
    def api_efficiency(
        f: Any = in_range,
        runs_per_month: float | None = Query(None, ge=0, le=100000, description="Run frequency override."),
    ) -> dict[str, Any]:
        """Utilization per task (CPU, peak memory, idle cost) and the suggestions that save $0.01+/month."""
        data = guard(lambda: efficiency_data(ledger(), f, runs_per_month))
        return {"tasks": data["tasks"], "advice": [a.to_json() for a in data["advice"]]}

    @app.get("/api/outcomes", summary="Retrain runs: model metric, promotion and cost")
    def api_outcomes(f: Any = in_range) -> dict[str, Any]:
        """Each retrain run's outcome and cost, oldest first, with cost per run and per promoted model."""
        from costaware.core.outcomes import summarize

        runs = guard(lambda: run_outcomes(ledger(), f))
        summary = guard(lambda: summarize(runs)) if runs else None
        return {"runs": [r.to_json() for r in runs], "summary": summary.to_json() if summary else None}
