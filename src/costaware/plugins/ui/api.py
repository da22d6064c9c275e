"""The Cost page's JSON API (``/costaware/api/...``): the page's figures, and setting a budget.

Query parameters are typed and pattern-checked by FastAPI before any query runs (``filters.py``) and reach
the database only as bound parameters. Every answer is a pydantic model (``datamodels/``), so the OpenAPI
page documents it, errors included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Depends, HTTPException, Query

from costaware.plugins.ui.datamodels.budgets import (
    BudgetChange,
    Budgets,
    BudgetSet,
    BudgetStatus,
    Gate,
    Gates,
)
from costaware.plugins.ui.datamodels.common import BAD_BODY, ERRORS
from costaware.plugins.ui.datamodels.reports import (
    Daily,
    DailyPoint,
    DailyRest,
    Spend,
    SpendRest,
    SpendRow,
    SpendSummary,
    TaskTry,
    TopTries,
)
from costaware.plugins.ui.deps import (
    Limit,
    OneValuePerKeyRoute,
    Readable,
    ReportFilters,
    User,
    guard,
    one_value_each,
    open_ledger,
)
from costaware.plugins.ui.filters import DagId, GroupBy, ScopeQ

if TYPE_CHECKING:
    from costaware.adapters.ledger.reports import Filters
    from costaware.adapters.ledger.store import Ledger
    from costaware.adapters.ledger.views import BudgetView, PageBudgets
    from costaware.core.budgets import Budget

# A parameter or body key given twice with different values is refused: FastAPI would read the last alone.
router = APIRouter(
    prefix="/api",
    responses=ERRORS,
    dependencies=[Depends(one_value_each)],
    route_class=OneValuePerKeyRoute,
)


@router.get("/summary", summary="Spend, on-demand equivalent, savings, cache reuse and egress")
def api_summary(filters: ReportFilters) -> SpendSummary:
    """Totals of the entries in range: spend, on-demand equivalent, savings, cache hits, egress."""
    from costaware.adapters.ledger.reports import summary
    from costaware.adapters.ledger.views import empty_filters_hint

    ledger = guard(open_ledger)  # an unreachable ledger is a 503, said, not a 500
    found = guard(lambda: summary(ledger, filters))
    note = guard(lambda: empty_filters_hint(ledger, filters)) if found.entries == 0 else ""
    return SpendSummary.of(found, note=note or None)


@router.get("/spend", summary="Spend per group (DAG, task, run, trial, tag, ...), costliest first")
def api_spend(filters: ReportFilters, group_by: GroupBy, limit: Limit = None) -> Spend:
    """Spend per group, costliest first; with ``limit``, the rest totalled in ``other`` (null: none left)."""
    from costaware.adapters.ledger.reports import top_groups
    from costaware.adapters.ledger.views import spend_by

    ledger = guard(open_ledger)
    rows = guard(lambda: spend_by(ledger, filters, group_by))
    shown, rest = top_groups(rows, limit) if limit else (rows, None)
    other = None
    if rest is not None:
        other = SpendRest(**SpendRow.of(rest).model_dump(), groups=len(rows) - len(shown))
    note = grouping_note(ledger, filters, group_by, [r.group for r in rows])
    return Spend(group_by=group_by, rows=[SpendRow.of(r) for r in shown], other=other, note=note)


@router.get("/daily", summary="Actual spend per UTC day and group")
def api_daily(filters: ReportFilters, group_by: GroupBy, limit: Limit = None) -> Daily:
    """Actual spend per UTC day and group, for charts; with ``limit``, the other groups summed per day."""
    from costaware.adapters.ledger.reports import daily_spend, fold_daily, other_label

    ledger = guard(open_ledger)
    points = guard(lambda: daily_spend(ledger, filters, group_by))
    note = grouping_note(ledger, filters, group_by, [group for _, group, _ in points])
    folded = 0
    if limit:
        points, folded = fold_daily(points, limit)
    return Daily(
        group_by=group_by,
        points=[DailyPoint.of(*point) for point in points],
        other=DailyRest(group=other_label(folded), groups=folded) if folded else None,
        note=note,
    )


def grouping_note(ledger: Ledger, filters: Filters, group_by: str, groups: list[str]) -> str | None:
    """Where ``tag:<name>`` put every entry under "(none)", why the tag may be misspelt; None otherwise.

    The page and ``costaware report`` said so for ``tag:proj``; the API answered one "(none)" row, no word.
    """
    from costaware.adapters.ledger.views import untagged_grouping_hint

    return guard(lambda: untagged_grouping_hint(ledger, group_by, groups, filters.dag_ids)) or None


def budget_filters(dag_id: DagId = None, scope: ScopeQ = "*") -> tuple[str | None, str]:
    """The filters that choose budgets (a budget's period is its own: no time range applies)."""
    return dag_id, scope


@router.get("/budgets", summary="Each budget's cap, spend and reservations this period, with burn-down")
def api_budgets(
    readable: Readable, chosen: Annotated[tuple[str | None, str], Depends(budget_filters)]
) -> Budgets:
    """The budgets the user may see that apply to ``dag_id`` and ``scope``, each in its current period.

    ``days``, ``since`` and ``until`` do not apply: a budget's figures are those of its own period.
    """
    dag_id, scope = chosen
    views = guard(lambda: budgets_for(readable, dag_id, scope))
    return Budgets(budgets=[BudgetStatus.of(view) for view in views])


def budgets_for(readable: frozenset[str] | None, dag_id: str | None, scope: str) -> list[BudgetView]:
    """The budgets the user may see under the filters; their forecasts from Airflow's timetables."""
    from costaware.adapters.airflow_schedule import AirflowSchedule
    from costaware.adapters.ledger.views import budget_views

    return budget_views(open_ledger(), AirflowSchedule(), readable=readable, dag_id=dag_id, scope=scope)


def page_budgets_for(readable: frozenset[str] | None, dag_id: str | None, scope: str) -> PageBudgets:
    """The budgets the page draws under the filters, tuning studies' own counted (see ``page_budgets``)."""
    from costaware.adapters.airflow_schedule import AirflowSchedule
    from costaware.adapters.ledger.views import page_budgets

    return page_budgets(open_ledger(), AirflowSchedule(), readable=readable, dag_id=dag_id, scope=scope)


@router.post(
    "/budgets",
    summary="Create or change a budget (needs the budget permission); audited",
    responses=BAD_BODY,
)
def api_set_budget(change: BudgetChange, user: User) -> BudgetSet:
    """Create or change a budget; 403 without the permission. The audit trail records who and the caps."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from costaware.plugins.ui.access import budget_role_problem, may_set_budgets, user_name

    if not guard(lambda: may_set_budgets(user)):
        why = budget_role_problem() if isinstance(user, SimpleAuthManagerUser) else ""
        # A misspelt role refused the admin too, told to "ask an admin".
        raise HTTPException(403, why or f"user {user_name(user)!r} may not set budgets: ask an admin")
    budget = guard(lambda: _set_budget(change, user_name(user)))
    # The stored cap (to the micro-dollar) without trailing zeros: "100", "150.123457".
    stored = format(budget.cap_usd.normalize(), "f")
    return BudgetSet(budget=budget.label, cap_usd=stored, set_by=user_name(user))


def _set_budget(change: BudgetChange, actor: str) -> Budget:
    """Set the budget; what the change leaves out (GPU-hour cap, time zone) stays the budget's own."""
    from costaware.core.budgets import find_budget, kept_cap, kept_settings

    ledger = open_ledger()
    current = find_budget(ledger.budgets(), change.scope, change.period)
    gpu_hours, zone = kept_settings(
        current,
        cap_gpu_hours=change.cap_gpu_hours,
        gpu_given="cap_gpu_hours" in change.model_fields_set,
        timezone=change.timezone,
    )
    cap = kept_cap(
        current, change.cap_usd, scope=change.scope, period=change.period, give="give cap_usd, the cap in USD"
    )
    # As stored (to the micro-dollar): the answer echoed 150.1234567.
    return ledger.set_budget(
        change.scope, change.period, cap, cap_gpu_hours=gpu_hours, timezone=zone, actor=actor
    )


@router.get("/top-tries", summary="The most expensive task tries")
def api_top_tries(filters: ReportFilters, limit: Annotated[int, Query(ge=1, le=100)] = 10) -> TopTries:
    """The most expensive task tries in range."""
    from costaware.adapters.ledger.reports import costliest_tries

    tries = guard(lambda: costliest_tries(open_ledger(), filters, limit))
    return TopTries(tries=[TaskTry.of(t) for t in tries])


@router.get("/gates", summary="Spend gates that were refused, skipped or had to wait")
def api_gates(filters: ReportFilters, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> Gates:
    """Spend gates that did not get their money at once: what they asked, of which budget, when."""
    from costaware.adapters.ledger.views import gates_in

    return Gates(gates=[Gate.of(g) for g in guard(lambda: gates_in(open_ledger(), filters, limit))])
