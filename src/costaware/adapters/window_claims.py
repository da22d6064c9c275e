"""Moved to costaware.adapters.ledger.window_claims; kept until the importers move."""

from costaware.adapters.ledger.window_claims import WindowClaim, claim_window, window_claim

__all__ = ["WindowClaim", "claim_window", "window_claim"]
