"""Cost entries: one row per cost (a task try's compute, an egress estimate, a cache hit), recorded once.

Money is stored as whole micro-dollars and read back as ``Decimal``; emissions and energy as micro-kg CO2e
and micro-kWh (NULL: unknown).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, RowMapping, select

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.core.ledger import INDEXED_TAGS, LedgerEntry
from costaware.core.money import from_micros, to_micros


def insert_entry(conn: Connection, entry: LedgerEntry) -> bool:
    """Add ``entry`` in the caller's transaction unless its ``entry_uid`` is there; returns whether new.

    One statement that skips a duplicate (``ON CONFLICT DO NOTHING``), not a look-up then an insert: on
    PostgreSQL two transactions writing the same entry at once (a spooled entry drained as its task's
    hold is settled with it) both saw no row, and the second failed on the unique key and rolled back
    the settle it was part of.
    """
    from sqlalchemy.dialects import postgresql, sqlite

    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    statement = (
        insert(schema.entries)
        .values(**entry_row(entry))
        .on_conflict_do_nothing(index_elements=[schema.entries.c.entry_uid])
    )
    return bool(conn.execute(statement).rowcount)


def entries(
    ledger: LedgerDatabase,
    *,
    dag_id: str | None = None,
    run_id: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Raw entries, newest first, money as ``Decimal``."""
    query = select(schema.entries).order_by(schema.entries.c.incurred_at.desc(), schema.entries.c.id.desc())
    if dag_id:
        query = query.where(schema.entries.c.dag_id == dag_id)
    if run_id:
        query = query.where(schema.entries.c.run_id == run_id)
    if limit:
        query = query.limit(limit)
    with ledger.reading() as conn:
        rows = conn.execute(query).mappings().all()
    return [entry_dict(row) for row in rows]


def entries_by_uid(ledger: LedgerDatabase, uids: Sequence[str]) -> list[dict[str, Any]]:
    """The entries whose ``entry_uid`` is one of ``uids`` (an indexed look-up), money as ``Decimal``."""
    query = select(schema.entries).where(schema.entries.c.entry_uid.in_(list(uids)))
    with ledger.reading() as conn:
        rows = conn.execute(query).mappings().all()
    return [entry_dict(row) for row in rows]


def last_run_id(ledger: LedgerDatabase, dag_id: str) -> str | None:
    """The run of ``dag_id`` with the most recent entry."""
    query = (
        select(schema.entries.c.run_id)
        .where(schema.entries.c.dag_id == dag_id)
        .order_by(schema.entries.c.incurred_at.desc(), schema.entries.c.id.desc())
        .limit(1)
    )
    with ledger.reading() as conn:
        row = conn.execute(query).first()
    return row[0] if row else None


def entry_row(entry: LedgerEntry) -> dict[str, Any]:
    """The column values of one entry (money in micro-dollars, the indexed tags in their own columns)."""
    tags = dict(entry.tags)
    return {
        "entry_uid": entry.entry_uid,
        "incurred_at": entry.incurred_at,
        "dag_id": entry.dag_id,
        "run_id": entry.run_id,
        "task_id": entry.task_id,
        "try_number": entry.try_number,
        "map_index": entry.map_index,
        "trial": entry.trial,
        "kind": entry.kind.value,
        "instance_type": entry.instance_type,
        "region": entry.region,
        "market": entry.market.value if entry.market else None,
        "quantity_micros": to_micros(entry.quantity),
        "unit": entry.unit,
        "unit_price_usd": str(entry.unit_price_usd),
        "usd_micros": to_micros(entry.usd),
        "on_demand_usd_micros": None if entry.on_demand_usd is None else to_micros(entry.on_demand_usd),
        "gpu_hours_micros": to_micros(entry.gpu_hours),
        "estimated": entry.estimated,
        **{name: tags.get(name) for name in INDEXED_TAGS},
        "tags": tags,
        "outcome": entry.outcome,
        "cause": entry.cause,
        "price_source": entry.price_source,
        "note": entry.note,
        "reservation_id": entry.reservation_id,
        "kg_co2e_micros": None if entry.kg_co2e is None else to_micros(entry.kg_co2e),
        "kwh_micros": None if entry.kwh is None else to_micros(entry.kwh),
        "carbon_method": entry.carbon_method,
        "carbon_source": entry.carbon_source,
    }


def entry_dict(row: RowMapping) -> dict[str, Any]:
    """One stored entry as a dict, money as ``Decimal`` under its name without ``_micros``.

    ``kg_co2e`` and ``kwh`` are None when unknown (never 0 for unknown).
    """
    out = dict(row)
    for column in ("usd", "on_demand_usd", "gpu_hours", "quantity", "kg_co2e", "kwh"):
        micros = out.pop(f"{column}_micros")
        out[column] = None if micros is None else from_micros(micros)
    out["unit_price_usd"] = Decimal(out["unit_price_usd"])
    return out
