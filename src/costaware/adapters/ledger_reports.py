"""Moved to costaware.adapters.ledger.reports; kept until the importers move."""

from costaware.adapters.ledger.reports import (
    TOP_GROUPS,
    BurnDown,
    Filters,
    Summary,
    burn_down,
    costliest_tries,
    daily_spend,
    fold_daily,
    other_label,
    summary,
    top_groups,
)

__all__ = [
    "TOP_GROUPS",
    "BurnDown",
    "Filters",
    "Summary",
    "burn_down",
    "costliest_tries",
    "daily_spend",
    "fold_daily",
    "other_label",
    "summary",
    "top_groups",
]
