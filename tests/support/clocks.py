"""Wall-clock instants under which the time-dependent tests run (the ``clock`` fixture in conftest.py).

00:30 UTC is where a forecast bug once failed CI (a run whose cheap hour is 03:00 UTC); 13:05 UTC on a summer
day is mid-day, in DST for the time zones the tests use. Add an instant here to run every clock-driven test
under it too.
"""

CLOCKS = ("2026-11-24T00:30:00+00:00", "2026-07-15T13:05:00+00:00")
