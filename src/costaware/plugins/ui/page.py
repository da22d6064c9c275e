"""The Cost page (``/costaware/``): the form's filters, the report read under them, drawn by ``render.py``.

A bad field, or a ledger that cannot be read, is said on the page (in a red box above the refilled form),
not in JSON; the JSON API answers the same values with 422 or 503.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import HTMLResponse

from costaware.plugins.ui.deps import Readable, guard, open_ledger
from costaware.plugins.ui.filters import PageForm, page_filters

if TYPE_CHECKING:
    from costaware.adapters.ledger.reports import Filters
    from costaware.plugins.ui.view import Report

router = APIRouter()
_HTML: dict[str, Any] = {"content": {"text/html": {}}}


@router.get(
    "/",
    response_class=HTMLResponse,
    summary="The Cost page",
    responses={
        303: {"description": "No Airflow session: to the login page, and back here after it."},
        401: {"description": "A request with an Authorization header that is not valid: JSON {detail}."},
        422: {**_HTML, "description": "The page, with what is wrong with the filters."},
        503: {**_HTML, "description": "The page, saying the ledger cannot be read now."},
    },
)
def cost_page(form: Annotated[PageForm, Depends(page_filters)], readable: Readable) -> HTMLResponse:
    """The Cost page: cards, spend over time, budget burn-down, spend by tag and run, costliest tries."""
    from costaware.plugins.ui.render import render_page
    from costaware.plugins.ui.view import CostPage

    page = CostPage(form.typed, form.group_by, errors=form.errors)
    if form.filters is None:
        return HTMLResponse(render_page(page), status_code=422)
    filters = replace(form.filters, dag_ids=readable)  # only the DAGs this user may read
    try:
        report = guard(lambda: read_report(filters, form.group_by))
    except HTTPException as e:  # an unusable ledger or a bad filter: say so on the page, not in JSON
        return HTMLResponse(render_page(replace(page, errors=[str(e.detail)])), status_code=e.status_code)
    return HTMLResponse(render_page(replace(page, filters=filters, report=report)))


def read_report(f: Filters, group_by: str) -> Report:
    """Everything the page shows, every section under the same filters (budgets: see ``docs/ui.md``)."""
    from costaware.adapters.ledger.reports import (
        costliest_tries,
        daily_spend,
        fold_daily,
        other_label,
        summary,
        top_groups,
    )
    from costaware.adapters.ledger.views import empty_filters_hint, gates_in, spend_by, untagged_grouping_hint
    from costaware.plugins.ui.api import page_budgets_for
    from costaware.plugins.ui.efficiency import efficiency_data
    from costaware.plugins.ui.view import Report

    ledger = open_ledger()
    by_group, rest = top_groups(spend_by(ledger, f, group_by))
    per_day, folded = fold_daily(daily_spend(ledger, f, group_by))
    totals = summary(ledger, f)
    budgets = page_budgets_for(f.dag_ids, f.dag_id, f.scope)
    return Report(
        summary=totals,
        note=empty_filters_hint(ledger, f) if totals.entries == 0 else "",
        per_day=per_day,
        other_day_group=other_label(folded) if folded else None,
        by_group=by_group,
        by_group_rest=rest,
        group_note=untagged_grouping_hint(
            ledger, group_by, [r.group for r in by_group + ([rest] if rest else [])], f.dag_ids
        ),
        by_team=spend_by(ledger, f, "tag:team"),
        by_project=spend_by(ledger, f, "tag:project"),
        by_run=spend_by(ledger, f, "run"),
        tries=costliest_tries(ledger, f, 10),
        budgets=budgets.views,
        study_budgets=budgets.folded_studies,
        efficiency=efficiency_data(ledger, f),
        gates=gates_in(ledger, f),
    )
