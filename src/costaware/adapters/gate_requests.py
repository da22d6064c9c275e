"""Moved to costaware.adapters.ledger.gate_requests; kept until the importers move."""

from costaware.adapters.ledger.gate_requests import *  # noqa: F403
