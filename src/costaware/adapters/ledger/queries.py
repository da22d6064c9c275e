"""SQL pieces every ledger read shares: the report filters, the scope of a budget, what a report groups by.

Each filter is a bound parameter of a SQLAlchemy expression; no SQL is built from strings. The Cost page's
reads (``views``), the reports and the budgets all take their conditions from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import func
from sqlalchemy.sql.elements import ColumnElement

from costaware.adapters.ledger import schema
from costaware.core.budgets import Scope
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import GROUP_BYS, INDEXED_TAGS

_e = schema.entries

#: The column (or expression) of each name in ``costaware.core.ledger.GROUP_BYS``, in that order.
GROUP_COLUMNS: Mapping[str, ColumnElement[Any]] = {
    "dag": _e.c.dag_id,
    "task": _e.c.dag_id + "." + _e.c.task_id,
    # A run id alone is no run: every daily DAG's scheduled run of a day has the same one.
    "run": _e.c.dag_id + "/" + _e.c.run_id,
    # A trial's label is numbered within its run (every run of a search starts at #0): by label alone, the
    # trials of different runs were summed into one row. NULL (no trial) stays NULL: `||` with NULL is NULL.
    "trial": _e.c.dag_id + "/" + _e.c.run_id + " " + func.nullif(_e.c.trial, ""),
    "kind": _e.c.kind,
    "market": _e.c.market,
    "cause": _e.c.cause,
    "outcome": _e.c.outcome,
}


def entry_conditions(
    since: datetime | None,
    until: datetime | None,
    dag_id: str | None,
    run_id: str | None,
    scope: str | Scope,
    *,
    dag_ids: frozenset[str] | None = None,
) -> list[ColumnElement[bool]]:
    """SQL conditions of the usual report filters, each a bound parameter (``None`` filters nothing).

    ``dag_ids`` keeps only those DAGs (the ones a user may read); an empty set keeps nothing.
    """
    e = schema.entries
    out = scope_conditions(Scope.parse(scope))
    if dag_ids is not None:
        out.append(e.c.dag_id.in_(sorted(dag_ids)))
    if since:
        out.append(e.c.incurred_at >= since)
    if until:
        out.append(e.c.incurred_at < until)
    if dag_id:
        out.append(e.c.dag_id == dag_id)
    if run_id:
        out.append(e.c.run_id == run_id)
    return out


def scope_conditions(scope: Scope) -> list[ColumnElement[bool]]:
    """SQL conditions selecting the entries inside ``scope`` (indexed columns for team/project/owner)."""
    e = schema.entries
    out: list[ColumnElement[bool]] = []
    for key, value in scope.tags:
        if key in INDEXED_TAGS:
            out.append(e.c[key] == value)
        else:
            out.append(e.c.tags[key].as_string() == value)
    return out


def group_column(group_by: str) -> ColumnElement[Any]:
    """The SQL expression a report groups by; raises ``ConfigurationError`` for an unknown grouping.

    An empty value (no cause, a tag set to "") is no value: it is NULL here, so it joins the "(none)" group of
    the entries without one instead of making a blank group of its own.
    """
    e = schema.entries
    if group_by in GROUP_COLUMNS:
        return func.nullif(GROUP_COLUMNS[group_by], "")
    if group_by.startswith("tag:") and len(group_by) > 4:
        name = group_by[4:]
        Scope.of({name: "x"})  # validates the tag name
        return func.nullif(e.c[name] if name in INDEXED_TAGS else e.c.tags[name].as_string(), "")
    hint = f" (a tag: tag:{group_by})" if group_by in ("team", "project", "owner", "study") else ""
    raise ConfigurationError(
        f"cannot group by {group_by!r}{hint}: use one of {', '.join(GROUP_BYS)} or tag:<name>"
    )
