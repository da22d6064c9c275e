"""What many budgets' figures need, read in a few statements for all of them rather than a few for each.

The Cost page's ``/api/budgets`` lists every budget a user may see: with every tuning run leaving a study
budget, reading the DAGs, holds and spend of each budget on its own made the answer's statements (and time)
grow with every nightly run. The conditions are the ones the single-budget reads use (``queries``,
``governance``), so a budget's figures are the same either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.core.budgets import Budget
from costaware.core.ledger import INDEXED_TAGS, read_holder


def budgets_dags(ledger: LedgerDatabase, budgets: Sequence[Budget]) -> list[set[str]]:
    """For each of ``budgets``, every DAG that has ever had an entry in its scope (``budget_dags`` of each).

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
