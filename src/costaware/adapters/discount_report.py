"""Moved to costaware.adapters.ledger.discounts; kept until the importers move."""

from costaware.adapters.ledger.discounts import MARKER, discounts_by_rule

__all__ = ["MARKER", "discounts_by_rule"]
