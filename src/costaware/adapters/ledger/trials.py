"""What each tuning trial spent, per run: the figures behind ``costaware report --group-by trial``'s summary.

A trial's label (``#<n>@<rung>``, ``#<n> <state>@<fidelity>``) is numbered within its run: every run of a
search starts again at ``#0``. Summed by label alone, the trials of different runs merged into one.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from sqlalchemy import and_, func, select

from costaware.adapters.ledger import schema
from costaware.core.money import from_micros

if TYPE_CHECKING:
    from costaware.adapters.ledger.engine import LedgerDatabase
    from costaware.adapters.ledger.reports import Filters


def trial_spend(ledger: LedgerDatabase, filters: Filters) -> list[tuple[str, str, Decimal]]:
    """``(dag_id/run_id, trial label, actual USD)`` of the entries matching ``filters`` that name a trial."""
    e = schema.entries
    run = e.c.dag_id + "/" + e.c.run_id  # a run id alone is no run: scheduled runs repeat across DAGs
    query = (
        select(run, e.c.trial, func.sum(e.c.usd_micros))
        .where(and_(e.c.estimated.is_(False), e.c.trial.is_not(None), e.c.trial != "", *filters.conditions()))
        .group_by(run, e.c.trial)
        .order_by(run, e.c.trial)
    )
    with ledger.reading() as conn:
        return [(str(r), str(t), from_micros(int(micros or 0))) for r, t, micros in conn.execute(query)]
