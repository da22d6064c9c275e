"""Moved to costaware.adapters.ledger.discounts; kept until the importers move."""

from costaware.adapters.ledger.discounts import *  # noqa: F403
