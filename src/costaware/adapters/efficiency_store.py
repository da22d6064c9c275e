"""Moved to costaware.adapters.ledger.efficiency; kept until the importers move."""

from costaware.adapters.ledger.efficiency import (
    measurements,
    outcomes,
    record_outcome,
    record_utilization,
    run_outcome,
)

__all__ = ["measurements", "outcomes", "record_outcome", "record_utilization", "run_outcome"]
