"""What the Cost page reads from the ledger, each view under the page's filters.

The UI (``costaware.plugins.ui``) holds no SQL: which DAGs the ledger knows, spend per group, the budgets
a user may see with their burn-down and forecast, the spend gates, and the efficiency records (measured
tries, run outcomes) of a time range and tag scope are read here. Every value reaches the database as a
bound parameter.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from sqlalchemy import and_, select, true

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.queries import scope_conditions
from costaware.adapters.ledger.reports import BurnDown, Filters, burn_down
from costaware.core.budget_listing import is_study_budget, names_a_study
from costaware.core.budgets import Budget, Period, Scope
from costaware.core.errors import did_you_mean

if TYPE_CHECKING:
    from costaware.adapters.ledger.gate_requests import GateRequest
    from costaware.adapters.ledger.governance import RunSchedule
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.budget_forecast import SpendForecast
    from costaware.core.efficiency import Measurement
    from costaware.core.ledger import ReportRow
    from costaware.core.outcomes import RunOutcome

#: A range without a start begins here (the earliest instant the ledger's columns hold).
_BEGINNING = datetime.min.replace(tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class BudgetView:
    """One budget as the page shows it: its current period's burn-down and the period-end forecast."""

    burn_down: BurnDown
    forecast: SpendForecast


def ledger_dag_ids(ledger: Ledger) -> set[str]:
    """Every DAG the ledger holds something of: a priced entry, a spend gate's request, money held now.

    A DAG whose gate refused its first run has no priced entry yet, and its users must still see the gate;
    a budget another DAG's gate holds money in is shown to those who may read that DAG (``visible_budgets``).
    """
    from costaware.adapters.ledger.governance import holding_dags

    with ledger.reading() as conn:
        found = {
            row[0]
            for table in (schema.entries, schema.gate_requests)
            for row in conn.execute(select(table.c.dag_id).distinct())
        }
    return found | holding_dags(ledger)


def recent_tags(ledger: Ledger, dag_ids: frozenset[str] | None = None) -> list[dict[str, str]]:
    """The tags of the ledger's newest 500 entries (of ``dag_ids`` only, where given): what tag hints read."""
    return [dict(e["tags"]) for e in ledger.entries(limit=500) if dag_ids is None or e["dag_id"] in dag_ids]


def scope_hint(ledger: Ledger, scope: str, dag_ids: frozenset[str] | None = None) -> str:
    """Where ``scope`` names a tag value no recent entry has: which values they have, else "".

    ``dag_ids``: only the entries of these DAGs are looked at (a Cost page user's readable ones).
    """
    wanted = Scope.parse(scope)
    recent = recent_tags(ledger, dag_ids)
    names = sorted({name for tags in recent for name in tags})
    for key, value in wanted.tags:
        seen = sorted({str(tags[key]) for tags in recent if key in tags})
        if not seen and names:
            # A misspelt tag name ("proj"): its values, "none", pointed at the value, not at the name.
            close = difflib.get_close_matches(key, names, n=1)
            meant = f"did you mean {close[0]!r}? " if close else ""
            listed = ", ".join(names[:10])
            return f"no recent entry has a tag {key!r}; {meant}check its spelling and case (tags: {listed})"
        if value not in seen:
            listed = ", ".join(seen[:10]) or "none"
            return f"no recent entry has {key}={value}; check its spelling and case ({key}: {listed})"
    return ""


def untagged_grouping_hint(
    ledger: Ledger, group_by: str, groups: Sequence[str], dag_ids: frozenset[str] | None = None
) -> str:
    """Where a ``tag:<name>`` grouping put every entry under "(none)": whether the tag is misspelt, else "".

    A misspelt tag (``tag:proj``) gave one plausible-looking "(none)" row. ``dag_ids``: only the entries of
    these DAGs are looked at (a Cost page user's readable ones).
    """
    if not group_by.startswith("tag:") or not groups or any(group != "(none)" for group in groups):
        return ""
    seen = sorted(
        {key for tags in recent_tags(ledger, dag_ids) for key in tags}
    )  # the ledger's, not the selection's
    tag = group_by.removeprefix("tag:")
    if tag in seen:
        return f"no entry in this report has the tag {tag!r} (entries outside this selection do)"
    # The tag meant, as the scope's and the DAG's hints name theirs: tag:Team was told only to check it.
    by_case = {key.lower(): key for key in seen}
    meant = (
        f" (did you mean {by_case[tag.lower()]!r}?)" if tag.lower() in by_case else did_you_mean(tag, seen)
    )
    return (
        f"no entry in this report has the tag {tag!r}{meant}: check its spelling and case (tags on the "
        f"ledger's newest entries: {', '.join(seen) or 'none'})"
    )


def empty_filters_hint(ledger: Ledger, filters: Filters) -> str:
    """Why filters that select nothing may be mistyped: a DAG the ledger has no entry of, a tag no entry has.

    "" where neither: the range holds nothing, as it may. A figure of $0 read as a real one otherwise.
    """
    if filters.dag_id and (
        ledger.last_run_id(filters.dag_id) is None
        or (filters.dag_ids is not None and filters.dag_id not in filters.dag_ids)
    ):
        # The DAG meant, among those the user may read: the CLI named it, the page left the user to guess.
        known = ledger_dag_ids(ledger) - {filters.dag_id}
        if filters.dag_ids is not None:
            known &= filters.dag_ids
        by_case = {dag.lower(): dag for dag in known}
        meant = (
            f" (did you mean {by_case[filters.dag_id.lower()]!r}?)"
            if filters.dag_id.lower() in by_case
            else did_you_mean(filters.dag_id, sorted(known))
        )
        return f"the ledger has no entries for DAG {filters.dag_id!r}{meant}: check its name (case counts)"
    return scope_hint(ledger, filters.scope, filters.dag_ids) if filters.scope != "*" else ""


def spend_by(ledger: Ledger, filters: Filters, group_by: str) -> list[ReportRow]:
    """Spend per group of the entries under ``filters``, dearest first."""
    f = filters
    return list(
        ledger.report(
            group_by=group_by, since=f.since, until=f.until, dag_id=f.dag_id, scope=f.scope, dag_ids=f.dag_ids
        )
    )


def budget_views(
    ledger: Ledger,
    schedule: RunSchedule,
    *,
    readable: frozenset[str] | None,
    dag_id: str | None = None,
    scope: str = "*",
) -> list[BudgetView]:
    """The budgets a user may see that apply to ``dag_id`` and ``scope``, each in its current period.

    A budget applies to a scope when it counts some of its spend (no tag of the budget contradicts the
    scope: ``*`` and ``team=ml`` apply to ``project=churn``, ``project=fraud`` does not), and to a DAG
    when that DAG has spent in it. ``readable`` None: the user may read every DAG.

    Args:
        ledger: The ledger.
        schedule: How many runs each DAG's timetable schedules (for the forecast).
        readable: The DAGs the user may read.
        dag_id: Only budgets this DAG has spent in.
        scope: Only budgets that count some of this scope's spend.
    """
    return _views(ledger, schedule, _applying(ledger, readable, dag_id, scope))


@dataclass(frozen=True, slots=True)
class PageBudgets:
    """The budgets the Cost page draws, and how many tuning studies' own budgets it counts instead."""

    views: list[BudgetView]
    folded_studies: int


def page_budgets(
    ledger: Ledger,
    schedule: RunSchedule,
    *,
    readable: frozenset[str] | None,
    dag_id: str | None = None,
    scope: str = "*",
) -> PageBudgets:
    """The budgets of :func:`budget_views`, a tuning study's own ones counted rather than drawn.

    A study named after its run leaves a budget every run: drawn one by one, each with its usage, burn-down
    and forecast read, they grew the page (and its load time) with every nightly run. As in ``costaware
    budget list``, they are counted, and none of their figures is read; a scope naming a study draws them
    (it asks about them). Per-run budgets have no period to draw and are not counted either.
    """
    applying = [b for b in _applying(ledger, readable, dag_id, scope) if b.period is not Period.RUN]
    fold = not names_a_study(Scope.parse(scope))
    drawn = [b for b in applying if not (fold and is_study_budget(b))]
    return PageBudgets(_views(ledger, schedule, drawn), folded_studies=len(applying) - len(drawn))


def _applying(
    ledger: Ledger, readable: frozenset[str] | None, dag_id: str | None, scope: str
) -> list[Budget]:
    """The budgets a user may see that apply to ``dag_id`` and ``scope`` (see :func:`budget_views`)."""
    from costaware.adapters.ledger.budget_figures import budgets_dags
    from costaware.adapters.ledger.governance import visible_budgets

    wanted = Scope.parse(scope).as_dict()
    found = [
        b
        for b in visible_budgets(ledger, readable)
        if all(wanted.get(key, value) == value for key, value in b.scope.tags)
    ]
    if dag_id is None:
        return found
    # The DAGs of every budget in one statement, not one per budget.
    return [b for b, dags in zip(found, budgets_dags(ledger, found), strict=True) if dag_id in dags]


def _views(ledger: Ledger, schedule: RunSchedule, budgets: list[Budget]) -> list[BudgetView]:
    """Each of ``budgets`` but per-run ones in its current period, with its burn-down and forecast."""
    from costaware.adapters.ledger.governance import budgets_forecast
    from costaware.core.ledger import utcnow

    # One instant for every budget: a DAG's runs in a window are counted once (see AirflowSchedule).
    now = utcnow()
    by_label = {b.label: b for b in budgets}
    downs = burn_down(ledger, budgets, at=now)
    drawn = [by_label[down.usage.label] for down in downs]
    forecasts = budgets_forecast(ledger, drawn, [down.usage for down in downs], schedule, at=now)
    return [BudgetView(down, forecast) for down, forecast in zip(downs, forecasts, strict=True)]


def gates_in(ledger: Ledger, filters: Filters, limit: int = 50) -> list[GateRequest]:
    """Spend gates that did not get their money at once, last noted in the filters' range, newest first."""
    from costaware.adapters.ledger.gate_requests import gate_requests

    f = filters
    return gate_requests(
        ledger,
        since=f.since or _BEGINNING,
        until=f.until,
        dag_id=f.dag_id,
        dag_ids=f.dag_ids,
        scope=f.scope,
        limit=limit,
    )


def runs_in_scope(ledger: Ledger, scope: str) -> set[tuple[str, str]] | None:
    """The (DAG, run) pairs with spend inside the tag ``scope``; None when the scope is everything.

    Measurements and outcomes carry no tags: they belong to a scope through their run's ledger entries.
    """
    parsed = Scope.parse(scope)
    if not parsed.tags:
        return None
    e = schema.entries
    query = select(e.c.dag_id, e.c.run_id).where(and_(true(), *scope_conditions(parsed))).distinct()
    with ledger.reading() as conn:
        return {(row[0], row[1]) for row in conn.execute(query)}


def measurements_in(ledger: Ledger, filters: Filters) -> list[Measurement]:
    """The tries measured in the filters' range, of the DAGs they allow and the runs with spend in scope."""
    from costaware.adapters.ledger.efficiency import measurements

    measured = measurements(ledger, dag_id=filters.dag_id, since=filters.since)
    if filters.until is not None:
        measured = [m for m in measured if m.measured_at is None or m.measured_at < filters.until]
    in_scope = runs_in_scope(ledger, filters.scope)
    return [
        m
        for m in measured
        if _readable(filters, m.dag_id)
        and (in_scope is None or (m.dag_id, m.run_id) in in_scope)
        and (filters.run_id is None or m.run_id == filters.run_id)
    ]


def outcomes_in(ledger: Ledger, filters: Filters) -> list[RunOutcome]:
    """Retrain outcomes recorded in the filters' range, oldest first, each with its run's cost."""
    from costaware.adapters.ledger.efficiency import outcomes

    in_scope = runs_in_scope(ledger, filters.scope)
    return [
        o
        for o in outcomes(ledger, dag_id=filters.dag_id)
        if _readable(filters, o.dag_id)
        and (in_scope is None or (o.dag_id, o.run_id) in in_scope)
        and (
            o.recorded_at is None
            or (
                (filters.since is None or o.recorded_at >= filters.since)
                and (filters.until is None or o.recorded_at < filters.until)
            )
        )
    ]


def _readable(filters: Filters, dag_id: str) -> bool:
    """Whether the user behind ``filters`` may read ``dag_id`` (``dag_ids`` None: no restriction)."""
    return filters.dag_ids is None or dag_id in filters.dag_ids
