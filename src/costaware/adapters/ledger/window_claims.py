"""The window gate's claims in the cost ledger's database: which run retrains in which window occurrence.

One row per (DAG, window start), written with the primary key as the lock: of two runs that reach the gate
together, one insert wins and the other reads the winner's row. Tasks in Airflow 3 cannot read the metadata
database, so the claim lives beside the cost ledger, in a table of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.core.errors import LedgerUnavailableError


@dataclass(frozen=True, slots=True)
class WindowClaim:
    """The run that retrains in one window occurrence, and when it started."""

    dag_id: str
    window_start: datetime
    run_id: str
    claimed_at: datetime


def window_claim(ledger: LedgerDatabase, dag_id: str, window_start: datetime) -> WindowClaim | None:
    """The claim of ``dag_id`` on the occurrence starting at ``window_start``, if any."""
    table = schema.window_claims
    query = select(table).where(table.c.dag_id == dag_id, table.c.window_start == window_start)
    with ledger.reading() as conn:
        row = conn.execute(query).mappings().first()
    return (
        None
        if row is None
        else WindowClaim(row["dag_id"], row["window_start"], row["run_id"], row["claimed_at"])
    )


def claim_window(
    ledger: LedgerDatabase, dag_id: str, window_start: datetime, run_id: str, now: datetime
) -> WindowClaim:
    """Claim the occurrence for ``run_id``; returns the claim that holds (this run's, or an earlier run's).

    Claiming again from the same run (a retried task) returns its own claim.
    """
    try:
        with ledger.transaction() as conn:
            conn.execute(
                schema.window_claims.insert().values(
                    dag_id=dag_id, window_start=window_start, run_id=run_id, claimed_at=now
                )
            )
    except IntegrityError:
        pass  # someone holds it already; read who
    held = window_claim(ledger, dag_id, window_start)
    if held is None:  # pragma: no cover - a row inserted in a committed transaction cannot vanish
        raise LedgerUnavailableError(f"the window claim of {dag_id!r} at {window_start} was not stored")
    return held
