"""Moved to costaware.adapters.ledger.governance; kept until the importers move."""

from costaware.adapters.ledger.governance import *  # noqa: F403
