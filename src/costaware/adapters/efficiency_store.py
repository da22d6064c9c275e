"""Moved to costaware.adapters.ledger.efficiency; kept until the importers move."""

from costaware.adapters.ledger.efficiency import *  # noqa: F403
