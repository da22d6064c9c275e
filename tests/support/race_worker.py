"""A worker process for the ledger race test: reserve until the cap says no, settle each reservation."""

from __future__ import annotations

from decimal import Decimal


def reserve_until_refused(url: str, worker: int, amount: str, attempts: int) -> tuple[int, int]:
    """Returns (reservations granted, refusals). Each grant is settled with an entry of the same amount."""
    from costaware import Ledger
    from costaware.core.errors import BudgetExceededError
    from costaware.core.ledger import Kind, LedgerEntry

    ledger = Ledger.from_url(url)
    granted = refused = 0
    for n in range(attempts):
        try:
            reservation = ledger.reserve("project=race", amount, purpose=f"worker {worker} try {n}")
        except BudgetExceededError:
            refused += 1
            continue
        granted += 1
        if n % 2:  # half settle (spend), half stay open (held): both count against the cap
            ledger.settle(
                reservation.id,
                amount,
                entry=LedgerEntry(
                    dag_id="race",
                    run_id=f"w{worker}",
                    task_id=f"t{n}",
                    kind=Kind.COMPUTE,
                    usd=Decimal(amount),
                    tags={"project": "race"},
                ),
            )
    ledger.dispose()
    return granted, refused


def reserve_and_grow(url: str, worker: int, amount: str, grow_to: str) -> str:
    """Reserve ``amount`` and grow it toward ``grow_to`` at once, as a task's cap does; return what it holds.

    "0": the reservation itself was refused (others had grown into the budget first).
    """
    from costaware import Ledger
    from costaware.core.errors import BudgetExceededError

    ledger = Ledger.from_url(url)
    try:
        reservation = ledger.reserve("project=race", amount, holder=f"race/r/t{worker}/-1")
    except BudgetExceededError:
        ledger.dispose()
        return "0"
    held = ledger.grow(reservation.id, grow_to).usd
    ledger.dispose()
    return str(held)
