"""Many budgets' figures read at once are each budget's figures read on its own."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal

import pytest
from services import fresh_postgres_database

from costaware import Ledger
from costaware.adapters.ledger import budget_figures
from costaware.adapters.ledger.governance import (
    NoSchedule,
    budget_dags,
    budget_outlook,
    budgets_forecast,
    holding_dags,
)
from costaware.adapters.ledger.reports import burn_down
from costaware.core.ledger import Kind, LedgerEntry, reservation_holder, utcnow


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger(request: pytest.FixtureRequest, tmp_path) -> Iterator[Ledger]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        url = fresh_postgres_database(request.getfixturevalue("postgres_url"))
    ledger = Ledger.from_url(url)
    yield ledger
    ledger.dispose()


class TwoRunsLeft:
    def runs_between(self, dag_id: str, start: object, end: object) -> int:
        return 2


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
