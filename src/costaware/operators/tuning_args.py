"""The tuning tasks' arguments as the DAG is parsed, and a trial try's timing: checks beside the operators.

Kept apart from :mod:`costaware.operators.tuning` (the operators and ``budgeted_tuning``), which imports them;
nothing here needs the ``tuning`` extra.
"""

from __future__ import annotations

import operator
import re
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.tuning.costs import MAX_KEEP_FOR_RETRY_SECONDS
from costaware.importing import split_path
from costaware.operators.templating import refuse_template

#: Seconds a trial slot is let take to load its study before its trial's reservation, held before it.
DEFAULT_STUDY_LOAD_SECONDS = 60.0
#: The most ``study_load_seconds`` may be: a day. Far above it the slot's hold outlived the ledger's dates
#: (1e12 s: "would end after the year 9999"; 1e13: OverflowError), failing each trial task as it ran.
MAX_STUDY_LOAD_SECONDS = 86400.0


def max_map_length() -> int:
    """Airflow's ``[core] max_map_length``: the most task instances one task maps (1024 by default)."""
    from airflow.sdk import conf

    return conf.getint("core", "max_map_length", fallback=1024)


def seconds_since_try_began(ti: Any) -> float:
    """How long this task try has run (since Airflow's ``start_date``); 0 where the try has no start.

    The cost listener bills the whole try, so the trial's reservation holds this time too: loading the study
    and the task's start are not in a trial's estimate.
    """
    from costaware.core.ledger import utcnow

    began = getattr(ti, "start_date", None)
    if began is None:
        return 0.0
    return max(float((utcnow() - began).total_seconds()), 0.0)


def retry_wait_seconds(task: Any, try_number: int, max_tries: int) -> float:
    """The longest Airflow waits before retrying ``task``'s try ``try_number``; 0 where no retry is left.

    A retry is left while ``try_number <= max_tries`` (the task instance's, as Airflow decides): a clear sets
    it to the try number then plus ``retries``, so a cleared task's later tries have retries left too.

    As Airflow's ``TaskInstance.next_retry_datetime``: ``retry_delay``, or with ``retry_exponential_backoff``
    (a multiplier other than 0 and 1) up to twice ``retry_delay x multiplier ** (try_number - 1)`` (a hash of
    the try picks where in that range), at most ``max_retry_delay``; here at most
    :data:`MAX_KEEP_FOR_RETRY_SECONDS` too. A ``retry_policy``'s own delay is not known before the try ends.
    """
    import math

    def in_seconds(delay: Any) -> float:  # a timedelta, or seconds as Airflow also takes them
        return float(delay.total_seconds() if hasattr(delay, "total_seconds") else delay or 0)

    if not getattr(task, "retries", 0) or try_number > max_tries:
        return 0.0  # the last try: no retry will look for the hold
    seconds = in_seconds(getattr(task, "retry_delay", None))
    multiplier = float(getattr(task, "retry_exponential_backoff", 0) or 0) or 1.0
    if multiplier > 0 and multiplier != 1.0:
        try:
            seconds = 2.0 * math.ceil(seconds * multiplier ** (try_number - 1))
        except OverflowError:
            seconds = MAX_KEEP_FOR_RETRY_SECONDS
        longest = getattr(task, "max_retry_delay", None)
        if longest:
            seconds = min(seconds, in_seconds(longest))
    return min(max(seconds, 0.0), MAX_KEEP_FOR_RETRY_SECONDS)


def check_trial_concurrency(max_active_trials: Any, trial_retries: Any) -> tuple[int | None, int]:
    """``max_active_trials`` and ``trial_retries`` as ints, refused where no trial could start under them.

    Passed on to Airflow's ``max_active_tis_per_dagrun`` unchecked, 0 (or -1) let the scheduler start no
    trial: the run waited forever, its log saying only that the task's concurrency was reached. What Airflow
    itself takes is taken: ``trial_retries=None`` (no retry), ``'2'`` and ``numpy.int64(2)``.

    Returns:
        ``(max_active_trials, trial_retries)`` converted: None stays None for ``max_active_trials``.

    Raises:
        ConfigurationError: ``max_active_trials`` is not None or a whole number >= 1, or ``trial_retries`` is
            not None or a whole number >= 0.
    """

    def whole(name: str, value: Any, least: int, none_is: str) -> int:
        number: int | None = None
        # Text of a whole number ('²' passed isdigit() and escaped int()); a float Airflow's retries take as
        # int(2.0).
        if (isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value)) or (
            isinstance(value, float) and value.is_integer()
        ):
            number = int(value)
        elif not isinstance(value, (bool, float, str)):
            try:
                number = operator.index(value)
            except TypeError:
                number = None
        if number is None:
            raise ConfigurationError(
                f"{name} must be a whole number >= {least} ({none_is}), got {value!r}: give a whole number"
            )
        if number < least:
            why = "no trial would ever start" if least == 1 else "a trial cannot retry fewer than 0 times"
            raise ConfigurationError(
                f"{name} must be a whole number >= {least} ({none_is}), got {value!r}: with fewer than "
                f"{least} {why}"
            )
        return number

    retries = 0 if trial_retries is None else whole("trial_retries", trial_retries, 0, "None: no retry")
    if max_active_trials is None:
        return None, retries
    return whole("max_active_trials", max_active_trials, 1, "None: as many as the workers run"), retries


def check_study_load_seconds(seconds: Any) -> float:
    """``study_load_seconds`` as a float, refused as the DAG is parsed unless 0 to a day's seconds."""
    import math

    number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    if number and math.isfinite(seconds) and 0 <= seconds <= MAX_STUDY_LOAD_SECONDS:
        return float(seconds)
    raise ConfigurationError(
        f"study_load_seconds must be a number of seconds from 0 to {MAX_STUDY_LOAD_SECONDS:g} (a day), got "
        f"{seconds!r}: give about what loading the study takes on a worker ({DEFAULT_STUDY_LOAD_SECONDS:g} "
        "unless set)"
    )


def check_on_exceeded(on_exceeded: Any) -> str:
    """``fail`` or ``skip``, refused as the DAG is parsed otherwise."""
    if on_exceeded not in ("fail", "skip"):
        raise ValueError(
            f"on_exceeded={on_exceeded!r}: use 'fail' (a run with no money for a trial fails) or 'skip'"
        )
    return str(on_exceeded)


def check_trial_trainer(trainer: Any) -> None:
    """Refuse a trial trainer that can never import: a callable, or ``"package.module:name"`` written out.

    Only its form: it is imported where the trial runs (it may load heavy libraries).
    """
    refuse_template("trainer", trainer, write="write 'package.module:name'")
    if isinstance(trainer, str):
        split_path(trainer, what="trainer")
    elif not callable(trainer):
        raise ConfigurationError(f"trainer must be a callable or 'package.module:name', got {trainer!r}")
