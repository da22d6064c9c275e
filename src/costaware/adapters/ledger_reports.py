"""Moved to costaware.adapters.ledger.reports; kept until the importers move."""

from costaware.adapters.ledger.reports import *  # noqa: F403
