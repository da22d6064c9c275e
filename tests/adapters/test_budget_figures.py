"""Many budgets' figures read at once are each budget's figures read on its own."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from sqlalchemy import and_, select, true

from costaware import Ledger
from costaware.adapters.ledger import budget_figures, schema
from costaware.adapters.ledger.governance import (
    NoSchedule,
    budget_outlook,
    budgets_forecast,
    holding_dags,
)
from costaware.adapters.ledger.queries import scope_conditions
from costaware.adapters.ledger.reports import burn_down
from costaware.core.budgets import Budget
from costaware.core.ledger import Kind, LedgerEntry, reservation_holder, utcnow


class TwoRunsLeft:
    def runs_between(self, dag_id: str, start: object, end: object) -> int:
        return 2


def budget_dags(ledger: Ledger, budget: Budget) -> set[str]:
    """Every DAG with an entry in the budget's scope, read alone (as the Cost page read it per budget)."""
    e = schema.entries
    query = select(e.c.dag_id).where(and_(true(), *scope_conditions(budget.scope))).distinct()
    with ledger.reading() as conn:
        return {row[0] for row in conn.execute(query)}


def spend(ledger: Ledger, usd: str, dag_id: str, tags: dict[str, str], **more: object) -> None:
    ledger.record(
        LedgerEntry(
            dag_id=dag_id, run_id=str(more.pop("run_id", "r1")), task_id="train", kind=Kind.COMPUTE,
            usd=Decimal(usd), gpu_hours=Decimal("0.5"), tags=tags, **more,  # type: ignore[arg-type]
        )
    )  # fmt: skip


def test_budgets_read_together_have_the_figures_each_has_read_alone(
    any_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = any_ledger
    monkeypatch.setattr(budget_figures, "BUDGETS_PER_STATEMENT", 2)  # three statements for five budgets
    ledger.set_budget("*", "month", "1000")
    ledger.set_budget("project=churn", "day", "50", cap_gpu_hours="10", timezone="Europe/Berlin")
    ledger.set_budget("project=churn,study=s1", "total", "5")
    ledger.set_budget("project=fraud,study=s2", "total", "5")
    ledger.set_budget("team=ml", "run", "3")  # per run: neither drawn nor forecast
    ledger.set_budget("project=empty", "month", "9")
    now = utcnow()
    spend(ledger, "1.25", "churn", {"project": "churn"})
    spend(ledger, "0.75", "tune", {"project": "churn", "study": "s1"}, run_id="r2")
    spend(ledger, "0.10", "tune", {"project": "churn", "study": "s1"}, incurred_at=now - timedelta(days=3))
    spend(ledger, "2.00", "fraud", {"project": "fraud", "study": "s2", "team": "ml"})
    ledger.reserve("project=churn,study=s1", "1.5", holder=reservation_holder("tune", "r3", "trial"))
    ledger.reserve("project=fraud,study=s2", "0.5", holder="search/x1/0/1")
    every = ledger.budgets()

    downs = burn_down(ledger, at=now)
    assert [d.usage.label.split(" (")[0] for d in downs] == [
        b.label for b in every if b.period.value != "run"
    ]
    drawn = [b for b in every if b.period.value != "run"]
    forecasts = budgets_forecast(ledger, drawn, [d.usage for d in downs], TwoRunsLeft(), at=now)
    for budget, down, forecast in zip(drawn, downs, forecasts, strict=True):
        alone = budget_outlook(ledger, budget, TwoRunsLeft(), at=now)
        assert (down.usage, forecast) == (alone.usage, alone.forecast), budget.label
    study = next(d for d in downs if d.usage.label.startswith("project=churn,study=s1"))
    assert (study.usage.spent_usd, study.usage.reserved_usd) == (Decimal("0.85"), Decimal("1.5"))
    assert study.cumulative[-1][1] == Decimal("0.85") and len(study.cumulative) == 2

    assert budget_figures.budgets_dags(ledger, every) == [budget_dags(ledger, b) for b in every]
    assert budget_figures.budgets_holding_dags(ledger, every) == [holding_dags(ledger, b) for b in every]
    assert budget_figures.budgets_dags(ledger, every)[0] == {"churn", "tune", "fraud"}


def test_a_budget_deleted_since_it_was_listed_is_left_out(any_ledger: Ledger) -> None:
    ledger = any_ledger
    ledger.set_budget("project=a", "month", "1")
    ledger.set_budget("project=b", "month", "1")
    listed = ledger.budgets()
    ledger.delete_budget("project=a", "month")
    assert [d.usage.label.split(" (")[0] for d in burn_down(ledger, listed)] == ["project=b/month"]
    assert burn_down(ledger, []) == [] and budgets_forecast(ledger, [], [], NoSchedule(), at=utcnow()) == []


def test_many_budgets_fit_the_binds_of_an_sqlite_before_3_32(ledger_url: str) -> None:
    # SQLite before 3.32 (Ubuntu 20.04's 3.31, Debian 10's 3.27) takes at most 999 bound values in one
    # statement; a hundred budgets' usages in one UNION ALL bound 2,800 and the Cost page failed there.
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def as_old_sqlite(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)

    event.listen(Engine, "connect", as_old_sqlite)
    try:
        ledger = Ledger.from_url(ledger_url)
        # Eight tags each: what one budget binds grows with its tags (three times each).
        tags = ",".join(f"t{n}=v" for n in range(7))
        for n in range(45):
            ledger.set_budget(f"{tags},study=s{n}", "total", "1")
        spend(ledger, "0.5", "tune", {**{f"t{n}": "v" for n in range(7)}, "study": "s3"})
        downs = burn_down(ledger)
        forecasts = budgets_forecast(
            ledger, ledger.budgets(), [d.usage for d in downs], NoSchedule(), at=utcnow()
        )
        assert [d.usage.spent_usd for d in downs].count(Decimal("0.5")) == 1 and len(forecasts) == 45
        ledger.dispose()
    finally:
        event.remove(Engine, "connect", as_old_sqlite)


@pytest.mark.parametrize(
    "scope", ["*", "project=a", "study=a", "project=a,team=b,owner=c", ",".join(f"t{n}=v" for n in range(9))]
)
@pytest.mark.parametrize("period", ["total", "month", "day"])
def test_what_a_budget_binds_is_never_more_than_counted(scope: str, period: str) -> None:
    from sqlalchemy import Integer, literal, select, text
    from sqlalchemy.dialects import sqlite

    from costaware.adapters.ledger.budgets import held_in, spent_in
    from costaware.core.budgets import Budget, period_window

    budget, now = Budget.create(scope, period, "5"), utcnow()
    window = period_window(budget.period, now, budget.timezone)
    spent, held = spent_in(budget, window).subquery(), held_in(1, budget, window, now).subquery()
    usage = select(*spent.c, *held.c).select_from(spent.join(held, text("1 = 1")))
    usage = usage.add_columns(literal(0, Integer))
    # SQLite binds by position: a value used twice is bound twice.
    binds = usage.compile(dialect=sqlite.dialect()).string.count("?")
    assert 0 < binds <= budget_figures.binds_of(budget)
