"""The append-only audit trail: who changed a budget, approved an overage, overrode a run, or was alerted.

The table has an insert path only: nothing in costaware updates or deletes its rows, and the database refuses
to (a trigger created with the table). A line is added inside the transaction of what it records, so both
commit together or neither does. Depends on the schema and the engine only: budgets and reservations audit
through here without importing the governance features built on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, select

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow

AUDIT_ACTIONS = (
    "budget_set",
    "budget_delete",
    "alert_rule",
    "approval",
    "rejection",
    "override",
    "alert",
    "hold_release",
)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One line of the audit trail: who did what to which budget or run, and when."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    details: dict[str, Any]


def append_audit(
    conn: Connection,
    *,
    actor: str,
    action: str,
    target: str,
    details: Mapping[str, Any] | None = None,
    at: datetime | None = None,
) -> None:
    """Add one audit line inside the caller's write transaction (so it commits with what it records).

    Raises:
        ConfigurationError: an unknown action or an empty actor.
    """
    if action not in AUDIT_ACTIONS:
        raise ConfigurationError(f"audit action {action!r} is unknown: use one of {', '.join(AUDIT_ACTIONS)}")
    if not str(actor).strip():
        raise ConfigurationError("an audit entry needs the name of who acted; got an empty actor")
    conn.execute(
        schema.audit.insert().values(
            at=at or utcnow(),
            actor=str(actor)[:256],
            action=action,
            target=str(target)[:1024],
            details={k: _jsonable(v) for k, v in (details or {}).items()},
        )
    )


def record_audit(
    ledger: LedgerDatabase,
    *,
    actor: str,
    action: str,
    target: str,
    details: Mapping[str, Any] | None = None,
) -> None:
    """Add one audit line in its own transaction."""
    with ledger.transaction() as conn:
        append_audit(conn, actor=actor, action=action, target=target, details=details)


def audit_log(
    ledger: LedgerDatabase,
    *,
    since: datetime | None = None,
    action: str | None = None,
    limit: int | None = None,
) -> list[AuditEntry]:
    """Audit lines, oldest first, optionally from ``since`` on and of one ``action``."""
    a = schema.audit
    query = select(a).order_by(a.c.at, a.c.id)
    if since is not None:
        query = query.where(a.c.at >= since)
    if action is not None:
        query = query.where(a.c.action == action)
    if limit:
        query = query.limit(limit)
    with ledger.reading() as conn:
        rows = conn.execute(query).mappings().all()
    return [
        AuditEntry(r["id"], r["at"], r["actor"], r["action"], r["target"], dict(r["details"])) for r in rows
    ]


def _jsonable(value: Any) -> Any:
    if isinstance(value, Decimal | datetime):
        return str(value) if isinstance(value, Decimal) else value.isoformat()
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
