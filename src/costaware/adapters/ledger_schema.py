"""Moved to costaware.adapters.ledger.schema; kept until the importers move."""

from costaware.adapters.ledger.schema import (
    SCHEMA_VERSION,
    UTCDateTime,
    alert_rules,
    alerts_sent,
    audit,
    budgets,
    entries,
    gate_requests,
    holds,
    meta,
    metadata,
    price_cache,
    reservations,
    run_outcomes,
    utilization,
    window_claims,
)

__all__ = [
    "SCHEMA_VERSION",
    "UTCDateTime",
    "alert_rules",
    "alerts_sent",
    "audit",
    "budgets",
    "entries",
    "gate_requests",
    "holds",
    "meta",
    "metadata",
    "price_cache",
    "reservations",
    "run_outcomes",
    "utilization",
    "window_claims",
]
