"""Moved to costaware.adapters.ledger.store; kept until the importers move."""

from costaware.adapters.ledger.queries import entry_conditions, group_column, scope_conditions
from costaware.adapters.ledger.reservations import DEFAULT_RESERVATION_TTL
from costaware.adapters.ledger.store import Ledger

__all__ = ["DEFAULT_RESERVATION_TTL", "Ledger", "entry_conditions", "group_column", "scope_conditions"]
