"""What many budgets' figures need, read in a few statements for all of them rather than a few for each.

The Cost page's ``/api/budgets`` lists every budget a user may see: with every tuning run leaving a study
budget, reading the DAGs, holds and spend of each budget on its own made the answer's statements (and time)
grow with every nightly run. The conditions are the ones the single-budget reads use (``queries``,
``governance``), so a budget's figures are the same either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Integer, Select, and_, func, literal, select, text, true, union_all

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.budgets import held_in, spent_in, usage_of
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.adapters.ledger.queries import scope_conditions
from costaware.core.budgets import Budget, period_window
from costaware.core.ledger import INDEXED_TAGS, BudgetUsage, read_holder
from costaware.core.money import from_micros

#: The most values one statement binds: SQLite before 3.32 (Ubuntu 20.04's, Debian 10's) takes 999.
MAX_BINDS = 900
#: SQLite takes at most 500 selects in one UNION ALL.
BUDGETS_PER_STATEMENT = 100


def binds_of(budget: Budget) -> int:
    """At most how many values one budget's select binds: its usage's 18, and 10 for each tag of its scope.

    A tag is compared five times (in the spent, and twice in each of the USD and GPU-hours still held, which
    a CASE renders twice), a tag outside the indexed columns with its JSON path bound too.
    """
    return 18 + 10 * len(budget.scope.tags)


def budgets_dags(ledger: LedgerDatabase, budgets: Sequence[Budget]) -> list[set[str]]:
    """For each of ``budgets``, every DAG that has ever had an entry in its scope.

    One statement: the distinct DAG and values of the tags the budgets name, matched to each scope here.
    """
    keys = sorted({key for budget in budgets for key, _ in budget.scope.tags})
    e = schema.entries
    # The same expressions scope_conditions compares: a value read here is the value compared there.
    columns = [e.c[key] if key in INDEXED_TAGS else e.c.tags[key].as_string() for key in keys]
    with ledger.reading() as conn:
        rows = conn.execute(select(e.c.dag_id, *columns).distinct()).all()
    position = {key: i + 1 for i, key in enumerate(keys)}
    return [
        {row[0] for row in rows if all(row[position[key]] == value for key, value in budget.scope.tags)}
        for budget in budgets
    ]


def holding_dag(holder: str) -> str:
    """Who holds a reservation, by its holder key: the DAG of ``dag/run/task/map_index`` (``.../egress``).

    A ``budgeted_search``'s hold (``search/<id>/<trial>/<rung>``, ``search/<id>/tail``) names no DAG: it is
    ``search <id>``, which no DAG id can be (it has a space), so no reader is taken for a DAG named
    ``search``, and a budget it holds money in stays shown only to those who may read every DAG. A holder
    of another form counts as its first part.
    """
    key = read_holder(holder)
    if key is not None and key.search:
        return f"search {key.run_id}"
    return holder.split("/", 1)[0]


def budgets_holding_dags(ledger: LedgerDatabase, budgets: Sequence[Budget]) -> list[set[str]]:
    """For each of ``budgets``, the DAGs whose reservations hold money in it now (``holding_dags``)."""
    b, h, r = schema.budgets, schema.holds, schema.reservations
    query = (
        select(b.c.scope, b.c.period, r.c.holder)
        .select_from(h.join(r, r.c.id == h.c.reservation_id).join(b, b.c.id == h.c.budget_id))
        .where(h.c.open.is_(True), r.c.holder.is_not(None))
        .distinct()
    )
    held: dict[tuple[Any, Any], set[str]] = {}
    with ledger.reading() as conn:
        for scope, period, holder in conn.execute(query):
            held.setdefault((scope, period), set()).add(holding_dag(holder))
    return [set(held.get((str(budget.scope), budget.period.value), ())) for budget in budgets]


def each_budget(
    ledger: LedgerDatabase, budgets: Sequence[Budget], query_of: Callable[[int], Select[Any]]
) -> list[list[tuple[Any, ...]]]:
    """The rows of ``query_of(i)`` for the ``i``-th of ``budgets``, in one UNION ALL for as many as it fits.

    A statement holds at most ``BUDGETS_PER_STATEMENT`` budgets binding at most ``MAX_BINDS`` values (see
    :func:`binds_of`). Each query's rows come back in the order the database gives them: sort them where the
    order matters.
    """
    found: list[list[tuple[Any, ...]]] = [[] for _ in budgets]
    with ledger.reading() as conn:
        first = 0
        while first < len(budgets):
            last, binds = first + 1, binds_of(budgets[first])
            while (
                last < len(budgets)
                and last - first < BUDGETS_PER_STATEMENT
                and binds + binds_of(budgets[last]) <= MAX_BINDS
            ):
                binds += binds_of(budgets[last])
                last += 1
            numbered = [
                query_of(i).add_columns(literal(i, Integer).label("budget_number"))
                for i in range(first, last)
            ]
            for row in conn.execute(union_all(*numbered)):
                found[row[-1]].append(tuple(row[:-1]))
            first = last
    return found


def budgets_usage(
    ledger: LedgerDatabase, budgets: Sequence[Budget], at: datetime
) -> list[BudgetUsage | None]:
    """Where each of ``budgets`` (none per run) stands at ``at``, as ``Ledger.usage`` reads each one.

    ``budgets.usage`` of a budget's scope read every budget covering it (a study's: the team's too) and was
    read per budget. None for a budget no longer in the ledger (deleted since it was listed).
    """
    b = schema.budgets
    with ledger.reading() as conn:
        ids = {(row[1], row[2]): row[0] for row in conn.execute(select(b.c.id, b.c.scope, b.c.period))}
    present = [
        (i, ids[key]) for i, key in enumerate((str(x.scope), x.period.value) for x in budgets) if key in ids
    ]
    windows = [period_window(x.period, at, x.timezone) for x in budgets]

    def usage_query(n: int) -> Select[Any]:
        i, budget_id = present[n]
        spent = spent_in(budgets[i], windows[i]).subquery()
        held = held_in(budget_id, budgets[i], windows[i], at).subquery()
        # Spent and held in one select, as budget_usage reads them (one instant on PostgreSQL).
        return select(*spent.c, *held.c).select_from(spent.join(held, text("1 = 1")))

    usages: list[BudgetUsage | None] = [None] * len(budgets)
    read = each_budget(ledger, [budgets[i] for i, _ in present], usage_query)
    for (i, _), rows in zip(present, read, strict=True):
        (row,) = rows
        usages[i] = usage_of(budgets[i], windows[i], row)
    return usages


def recent_runs_query(budget: Budget, at: datetime, lookback: timedelta) -> Select[Any]:
    """Each (DAG, run) with actual spend in the budget's scope in ``[at - lookback, at]``: USD, last entry."""
    e = schema.entries
    return (
        select(e.c.dag_id, e.c.run_id, func.sum(e.c.usd_micros), func.max(e.c.incurred_at))
        .where(
            and_(
                true(),
                e.c.estimated.is_(False),
                e.c.incurred_at >= at - lookback,
                e.c.incurred_at <= at,
                *scope_conditions(budget.scope),
            )
        )
        .group_by(e.c.dag_id, e.c.run_id)
    )


def latest_run_costs(rows: Sequence[tuple[Any, ...]], runs: int) -> dict[str, list[Decimal]]:
    """Of ``recent_runs_query``'s rows, newest run first, each DAG's last ``runs`` runs' costs."""
    out: dict[str, list[Decimal]] = {}
    for dag_id, _run_id, usd, _ in sorted(rows, key=lambda row: row[3], reverse=True):
        costs = out.setdefault(dag_id, [])
        if len(costs) < runs:
            costs.append(from_micros(usd))
    return out


def budgets_recent_run_costs(
    ledger: LedgerDatabase, budgets: Sequence[Budget], *, at: datetime, runs: int, lookback: timedelta
) -> list[dict[str, list[Decimal]]]:
    """``recent_run_costs`` of each of ``budgets``."""
    found = each_budget(ledger, budgets, lambda i: recent_runs_query(budgets[i], at, lookback))
    return [latest_run_costs(rows, runs) for rows in found]
