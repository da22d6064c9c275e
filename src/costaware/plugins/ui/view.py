"""What the Cost page shows: the figures read for one set of filters, and the form that asked for them.

``templates/cost.html`` draws a :class:`CostPage`; nothing here is HTML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costaware.core.budget_listing import study_budgets_counted
from costaware.plugins.ui.filters import GROUP_BY_CHOICES, query_string

if TYPE_CHECKING:
    from costaware.adapters.ledger.gate_requests import GateRequest
    from costaware.adapters.ledger.reports import Filters, Summary
    from costaware.adapters.ledger.views import BudgetView
    from costaware.core.ledger import ReportRow
    from costaware.plugins.ui.efficiency import EfficiencyData

#: How the page names a spend gate's status.
GATE_OUTCOMES = {
    "refused": "refused (run failed)",
    "skipped": "refused (run skipped)",
    "waiting": "waiting",
    "reserved": "reserved after waiting",
    "approval": "waiting for approval",
    "approved": "overage approved",
    "rejected": "overage rejected",
    "gave_up": "gave up (the gate timed out or failed while waiting)",
    "run_ended": "run ended while waiting",
}


@dataclass(frozen=True, slots=True)
class Report:
    """What the page shows for one set of filters, read from the ledger."""

    summary: Summary
    per_day: list[Any]  # (day, group, usd) points
    other_day_group: str | None  # the group in ``per_day`` that totals the groups left out
    by_group: list[ReportRow]
    by_group_rest: ReportRow | None  # the groups past the top ones, totalled
    by_team: list[ReportRow]
    by_project: list[ReportRow]
    by_run: list[ReportRow]
    tries: list[dict[str, Any]]
    budgets: list[BudgetView]
    efficiency: EfficiencyData
    gates: list[GateRequest]
    note: str = ""  # with no entry in range: why the filters may be mistyped
    group_note: str = ""  # a tag grouping with every entry under "(none)": why the tag may be mistyped
    study_budgets: int = 0  # tuning studies' own budgets counted, not drawn (see ``page_budgets``)

    @property
    def study_budgets_note(self) -> str:
        """``12 study budgets`` as ``costaware budget list`` counts them; empty when none is folded."""
        return study_budgets_counted(self.study_budgets) if self.study_budgets else ""


@dataclass(frozen=True, slots=True)
class CostPage:
    """The page: its form as sent and, when every field is good, the report; else what is wrong.

    Attributes:
        typed: The form's fields as typed, to refill it and to build links that keep the filters.
        group_by: The grouping.
        filters: The filters the report was read with (None with errors).
        report: The figures (None with errors).
        errors: One readable message per bad field, or why the ledger could not be read.
    """

    typed: dict[str, str]
    group_by: str
    filters: Filters | None = None
    report: Report | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def query(self) -> str:
        """The filters as a URL query, for the JSON API link: as the page read them, in the API's spelling.

        As typed, the link answered 422 for what the page's lenient form took (a scope typed with spaces, an
        ISO time in basic format); with bad fields it carries them as typed, to the same errors.
        """
        f, typed = self.filters, self.typed
        if f is None:
            return query_string(typed)
        since = f.since.isoformat() if typed.get("since") and f.since else ""
        values = {
            # Days count back from Until (or now): the API works out the same start from them.
            "days": str(int(typed["days"])) if typed.get("days") and not since else "",
            "since": since,
            "until": f.until.isoformat() if f.until else "",
            "dag_id": f.dag_id or "",
            "scope": "" if f.scope == "*" else f.scope,
            "group_by": self.group_by,
        }
        return query_string(values)

    @property
    def scope(self) -> str:
        """The scope field as shown: empty for everything."""
        scope = self.typed.get("scope", "")
        return "" if scope == "*" else scope

    @property
    def group_by_choices(self) -> list[str]:
        """The grouping select's options; a ``tag:<name>`` from the URL is added."""
        return list(GROUP_BY_CHOICES) + ([self.group_by] if self.group_by not in GROUP_BY_CHOICES else [])

    @property
    def range_note(self) -> str:
        """The time range in words: "last 30 days", or the instants the URL or form gave."""
        f = self.filters
        if f is None or f.since is None or not (self.typed.get("since") or self.typed.get("until")):
            return f"last {self.typed.get('days') or 30} days"
        end = "now" if f.until is None else _utc(f.until)
        return f"{_utc(f.since)} to {end}"


def _utc(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%d %H:%M UTC")
