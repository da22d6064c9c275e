"""Triggers live in the installed package: the triggerer imports them by class path, never from dags/."""

#: Polls in a row that may fail for a passing reason (a network error, throttling, a database restart)
#: before a wait fails: the thing waited on is still there, and a wait that failed at one blip failed its
#: run where no retry was set.
MAX_POLL_ERRORS = 5
