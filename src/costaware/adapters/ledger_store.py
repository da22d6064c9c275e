"""Moved to costaware.adapters.ledger.store; kept until the importers move."""

from costaware.adapters.ledger.store import *  # noqa: F403
