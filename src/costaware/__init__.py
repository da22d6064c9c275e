"""costaware: scheduled, cost-aware ML retraining for Apache Airflow 3.

This module stays import-light because Airflow imports providers early during discovery: the public
``Ledger`` is loaded on first access, not at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Ledger", "__version__"]

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger


def __getattr__(name: str) -> Any:
    if name == "Ledger":
        from costaware.adapters.ledger.store import Ledger

        return Ledger
    raise AttributeError(f"module 'costaware' has no attribute {name!r}")
