"""Moved to costaware.adapters.ledger.gate_requests; kept until the importers move."""

from costaware.adapters.ledger.gate_requests import (
    ENDING_STATUSES,
    OPEN_STATUSES,
    STATUSES,
    GateRequest,
    gate_requests,
    note_gate_request,
)

__all__ = [
    "ENDING_STATUSES",
    "OPEN_STATUSES",
    "STATUSES",
    "GateRequest",
    "gate_requests",
    "note_gate_request",
]
