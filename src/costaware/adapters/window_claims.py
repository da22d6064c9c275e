"""Moved to costaware.adapters.ledger.window_claims; kept until the importers move."""

from costaware.adapters.ledger.window_claims import *  # noqa: F403
