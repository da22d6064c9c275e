"""The Cost page's efficiency figures and their JSON routes: utilization, right-sizing, cost against metric.

The page draws them in ``templates/_efficiency.html``; the routes sit behind the page's login.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query

from costaware.plugins.ui.datamodels.common import ERRORS
from costaware.plugins.ui.datamodels.efficiency import Efficiency, Outcomes
from costaware.plugins.ui.deps import ReportFilters, guard, one_value_each, open_ledger

if TYPE_CHECKING:
    from costaware.adapters.ledger.reports import Filters
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.efficiency import Advice
    from costaware.core.outcomes import RunOutcome

#: Suggestions saving less than this per month are left off the page (the CLI shows them on request).
MIN_MONTHLY_SAVING_USD = Decimal("0.01")

# A parameter given twice with different values is refused: FastAPI would read the last alone.
router = APIRouter(prefix="/api", responses=ERRORS, dependencies=[Depends(one_value_each)])


@dataclass(frozen=True, slots=True)
class EfficiencyData:
    """Utilization per task (``core.efficiency.utilization_by_task`` rows), advice and run outcomes."""

    tasks: list[dict[str, Any]]
    advice: list[Advice]
    runs: list[RunOutcome]


def efficiency_data(ledger: Ledger, filters: Filters, runs_per_month: float | None = None) -> EfficiencyData:
    """Utilization per task, right-sizing advice and run outcomes for the page's filters."""
    from costaware.adapters.ledger.views import measurements_in, outcomes_in
    from costaware.adapters.price_source import current_catalog, discounts_from_settings
    from costaware.core.efficiency import advise_tasks, utilization_by_task

    measured = measurements_in(ledger, filters)
    # The prices RightSizeOperator decides on: refreshed or imported ones too, not the bundled snapshot only.
    # On-demand types are compared after the [costaware] discounts, as the ledger bills them.
    advice = advise_tasks(
        current_catalog(ledger), measured, runs_per_month=runs_per_month, discounts=discounts_from_settings()
    )
    return EfficiencyData(
        tasks=utilization_by_task(measured),
        advice=[a for a in advice if a.monthly_saving_usd >= MIN_MONTHLY_SAVING_USD],
        runs=outcomes_in(ledger, filters),
    )


@router.get("/efficiency", summary="Measured utilization per task and right-sizing advice")
def api_efficiency(
    filters: ReportFilters,
    runs_per_month: Annotated[
        float | None, Query(ge=0, le=100000, description="Run frequency override.")
    ] = None,
) -> Efficiency:
    """Utilization per task (CPU, peak memory, idle cost) and the suggestions that save $0.01+/month."""
    data = guard(lambda: efficiency_data(open_ledger(), filters, runs_per_month))
    return Efficiency.model_validate({"tasks": data.tasks, "advice": [a.to_json() for a in data.advice]})


@router.get("/outcomes", summary="Retrain runs: model metric, promotion and cost")
def api_outcomes(filters: ReportFilters) -> Outcomes:
    """Each retrain run's outcome and cost, oldest first, with cost per run and per promoted model."""
    from costaware.adapters.ledger.views import outcomes_in
    from costaware.core.outcomes import summarize

    runs = guard(lambda: outcomes_in(open_ledger(), filters))
    summary = guard(lambda: summarize(runs)) if runs else None
    return Outcomes.model_validate(
        {"runs": [r.to_json() for r in runs], "summary": summary.to_json() if summary else None}
    )
