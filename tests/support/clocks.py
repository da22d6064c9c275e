"""Wall-clock instants under which the time-dependent tests run (the ``clock`` fixture in conftest.py).

00:30 UTC is where a forecast bug once failed CI (a run whose cheap hour is 03:00 UTC); 13:05 UTC on a summer
day is mid-day, in DST for the time zones the tests use. Add an instant here to run every clock-driven test
under it too.
"""

import importlib
from types import ModuleType

CLOCKS = ("2026-11-24T00:30:00+00:00", "2026-07-15T13:05:00+00:00")

# The cost ledger's modules that read ``utcnow`` to tell an open hold from an expired one (reserve, extend,
# release, regrow, count): a test that moves the ledger's clock patches every one, or its holds read as
# expired against the real clock. A module split out of these joins this list, not each test's own.
HOLD_CLOCK_MODULES = (
    "reservations",
    "reservation_queries",
    "reservation_rows",
    "reservation_settle",
    "reservation_freeing",
    "regrowth",
    "budgets",
)


def hold_clock_modules() -> list[ModuleType]:
    """The modules of ``HOLD_CLOCK_MODULES``, imported."""
    return [importlib.import_module(f"costaware.adapters.ledger.{name}") for name in HOLD_CLOCK_MODULES]
