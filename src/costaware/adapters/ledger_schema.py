"""Moved to costaware.adapters.ledger.schema; kept until the importers move."""

from costaware.adapters.ledger.schema import *  # noqa: F403
