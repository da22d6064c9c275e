"""Moved to costaware.adapters.ledger.url; kept until the importers move."""

from costaware.adapters.ledger.url import *  # noqa: F403
