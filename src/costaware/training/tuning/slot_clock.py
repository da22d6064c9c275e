"""The clock the slot's holds read: :mod:`.reservations`' ``utcnow``, looked up there as they run.

Split out of reservations.py, the holds' code would read the clock of the module it moved to, and tests (and
callers) that patch ``reservations.utcnow`` to move a slot's wait and its holds on one clock would no longer
move the holds'. Looked up in ``sys.modules``, not imported: reservations.py imports the modules that read it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from costaware.core import ledger

if TYPE_CHECKING:
    from datetime import datetime

_RESERVATIONS = "costaware.training.tuning.reservations"


def utcnow() -> datetime:
    """Now, as :mod:`.reservations` reads it (the ledger's clock where that module is not loaded)."""
    reservations = sys.modules.get(_RESERVATIONS)
    clock = ledger.utcnow if reservations is None else reservations.utcnow
    return clock()
