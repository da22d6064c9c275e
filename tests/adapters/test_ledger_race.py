"""Many processes race for one budget: the cap is never passed and no row is lost (SQLite and PostgreSQL)."""

from __future__ import annotations

import multiprocessing
from decimal import Decimal

import pytest
from race_worker import reserve_and_grow, reserve_until_refused
from services import database_url
from sqlalchemy import func, select

from costaware import Ledger
from costaware.adapters.ledger import schema

PROCESSES = 12
ATTEMPTS = 12
AMOUNT = "0.70"
CAP = Decimal("25.00")  # 35 reservations of $0.70 fit in $24.50; 144 are attempted


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_parallel_reservations_never_overspend(backend: str, tmp_path, request) -> None:  # type: ignore[no-untyped-def]
    url = database_url(backend, tmp_path, request, "race")
    ledger = Ledger.from_url(url)
    ledger.set_budget("project=race", "month", CAP)

    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        results = pool.starmap(reserve_until_refused, [(url, w, AMOUNT, ATTEMPTS) for w in range(PROCESSES)])

    granted = sum(g for g, _ in results)
    refused = sum(r for _, r in results)
    assert granted + refused == PROCESSES * ATTEMPTS
    assert granted == int(CAP / Decimal(AMOUNT))  # every dollar that fits is handed out, no more
    with ledger.engine.connect() as conn:
        reservations = conn.execute(select(func.count()).select_from(schema.reservations)).scalar_one()
        entries = conn.execute(select(func.count()).select_from(schema.entries)).scalar_one()
        settled = conn.execute(
            select(func.count())
            .select_from(schema.reservations)
            .where(schema.reservations.c.status == "settled")
        ).scalar_one()
    assert reservations == granted
    assert entries == settled  # every settled reservation left exactly one entry
    (usage,) = ledger.usage("project=race")
    assert usage.spent_usd + usage.reserved_usd == granted * Decimal(AMOUNT)
    assert usage.spent_usd + usage.reserved_usd <= CAP
    ledger.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_parallel_growth_never_overspends(backend: str, tmp_path, request) -> None:  # type: ignore[no-untyped-def]
    """Tasks grow their gate's reservation to their cap at once: the budget ends full, never passed."""
    url = database_url(backend, tmp_path, request, "grow")
    ledger = Ledger.from_url(url)
    ledger.set_budget("project=race", "month", CAP)
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        held = pool.starmap(reserve_and_grow, [(url, w, "1.00", "3.00") for w in range(PROCESSES)])
    amounts = [Decimal(h) for h in held if Decimal(h)]
    # 12 x $3 do not fit in $25: whichever order they come in, the budget ends exactly full.
    assert len(amounts) >= int(CAP / 3) and all(Decimal(1) <= a <= Decimal(3) for a in amounts)
    assert sum(amounts) == CAP
    (usage,) = ledger.usage("project=race")
    assert usage.reserved_usd == CAP
    ledger.dispose()
