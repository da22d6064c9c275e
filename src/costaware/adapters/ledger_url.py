"""Moved to costaware.adapters.ledger.engine; kept until the importers move."""

from costaware.adapters.ledger.engine import url_from_connection_fields

__all__ = ["url_from_connection_fields"]
