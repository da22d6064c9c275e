"""What kind of run a :class:`~costaware.sensors.spot_window.SpotWindowSensor` is in, and what to tell it.

A catch-up or backfill run of a window that is over, a run that started inside its window but whose sensor
started after it (a late start), a cron-scheduled run whose deadline is its start: each goes on-demand at
once for a past deadline, and each is told its own reason and remedy. Read from the task's context alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from costaware.core.series import parse_instant

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import Logger


def run_type_of(context: Context) -> str:
    """The run's type as text (``"scheduled"``, ``"backfill"``, ``"manual"``, ...), empty when unknown."""
    run_type = getattr(context.get("dag_run"), "run_type", None)
    # The task SDK's DagRunType is a str Enum whose str() is "DagRunType.SCHEDULED": its value is compared.
    return str(getattr(run_type, "value", run_type) or "")


def late_deadline_remedy(*, given_deadline: bool, run_type: str, started_in_window: bool) -> str:
    """What lets a run whose deadline is past, or too near, use spot, for where its deadline came from."""
    if given_deadline:
        return (
            "give a later deadline (in the trigger form where the DAG has one), or trigger it with a logical "
            "date inside or before its window"
        )
    if run_type in ("scheduled", "backfill") and started_in_window:
        # OffPeakTimetable: the run starts inside its window, so the window (or the tasks before this one)
        # left too little of it; the cron remedy ("schedule with OffPeakTimetable") was given to its DAGs.
        return (
            "leave the run's window room for the expected runtime and restart overhead after the tasks "
            "before this one (a longer window, or fewer or faster tasks before the sensor), or give the "
            "sensor a deadline later than the window's end"
        )
    if run_type in ("scheduled", "backfill"):
        # Not a catch-up (past_window): the timetable starts each run when its data interval ends.
        return (
            "give the sensor a deadline after the run starts (the DAG's schedule ends each run's data "
            'interval when the run starts), e.g. deadline="{{ (data_interval_end + macros.timedelta(hours=6))'
            '.isoformat() }}", or schedule the DAG with OffPeakTimetable, whose data interval is the window'
        )
    return (
        "set the sensor's deadline (e.g. from a trigger-form param), or trigger it with a logical date "
        "inside or before its window"
    )


@dataclass(frozen=True)
class PastWindow:
    """A scheduled or backfill run's window that is over.

    ``run_started`` is when the run itself started, if inside the window (a late task, not a catch-up); None
    for a catch-up.
    """

    end: datetime
    run_started: datetime | None


def try_number(context: Context) -> int:
    """The task's try (1 when the context has no task instance, as in a test or a library call)."""
    return int(getattr(context.get("ti"), "try_number", None) or 1)


def try_key(context: Context) -> tuple[str, int, int]:
    """The run, map index and try of this look: what the sensor's memories of a try are keyed by.

    ``airflow dags test`` (``dag.test()``) runs each run and try on copies of the task that share its dicts
    (a shallow copy): keyed by the try number alone, a second run in the process took the first run's first
    look, and a retry was never told its argument warnings again.
    """
    ti = context.get("ti")
    run_id = getattr(ti, "run_id", None) or context.get("run_id") or ""
    map_index = getattr(ti, "map_index", None)
    return str(run_id), -1 if map_index is None else int(map_index), try_number(context)


#: The task state store key of a reschedule-mode poke that waited for spot (see waited_at_a_rescheduled_poke).
_WAITED_KEY = "costaware.spot_window.waited.try_{}"


def record_rescheduled_wait(context: Context, now: datetime, log: Logger) -> None:
    """Remember, across reschedules, that this try looked at the market at ``now`` and waited for spot.

    Reschedule mode loads the task anew at each poke, and ``task_reschedule_count`` also counts starts put
    off because the worker could not load the DAG: only this record tells a try that waited from one put off.
    """
    store = context.get("task_state_store")
    if store is None:
        return
    try:
        store.set(_WAITED_KEY.format(try_number(context)), now.isoformat())
    except Exception as error:  # a record for a log line: the decision goes on without it
        log.warning(
            "could not record this poke's wait for spot in the task state store (%s): a later poke may say "
            "this try's argument warnings again, and one past the latest start be told its start was put off",
            error,
        )


def waited_at_a_rescheduled_poke(context: Context, log: Logger) -> bool:
    """Whether an earlier reschedule-mode poke of this try looked at the market and waited for spot.

    Such a poke also said the try's argument warnings (see ``SpotWindowSensor._warn_once``).

    Without a task state store (a library call) there is no record: only the pokes the task object itself
    remembers count. The try's reschedules were taken for pokes, and a start put off from before its latest
    start until after it was logged as a planned end of a wait it never had.
    """
    store = context.get("task_state_store")
    if store is None:
        return False
    try:
        return store.get(_WAITED_KEY.format(try_number(context))) is not None
    except Exception as error:  # a read for a log line: the decision goes on without it
        log.warning("could not read the task state store (%s): the try's reschedules count as pokes", error)
        return bool(context.get("task_reschedule_count"))


def try_started(context: Context) -> datetime | None:
    """When this try of the task first started on a worker; None where the context does not say.

    A try put off (reschedule mode's pokes, or a start that could not load the DAG: ``[workers]
    missing_dag_retries``) counts that in ``task_reschedule_count``, and its first start is the first
    reschedule's date, which BaseSensorOperator's timeout counts from too; otherwise ``ti.start_date``
    (a deferral's resume keeps the first start's).
    """
    ti = context.get("ti")
    first_reschedule = getattr(ti, "get_first_reschedule_date", None)
    if context.get("task_reschedule_count") and first_reschedule is not None:
        started = first_reschedule(context)
        if started is not None:
            return parse_instant(started, name="the try's first reschedule date")
    started = getattr(ti, "start_date", None)
    return parse_instant(started, name="ti.start_date") if started is not None else None


def starts_in_window(context: Context) -> bool:
    """Whether the timetable starts the run before its data interval ends (``OffPeakTimetable``)."""
    window_end = context.get("data_interval_end")
    run_after = getattr(context.get("dag_run"), "run_after", None)
    if window_end is None or run_after is None:
        return False
    return parse_instant(run_after, name="run_after") < parse_instant(window_end, name="data_interval_end")


def past_window(context: Context, now: datetime) -> PastWindow | None:
    """The window of a scheduled or backfill run that is over by ``now``, or None.

    Only a timetable that starts its runs inside their window (``OffPeakTimetable``: ``run_after`` is the
    window's start, or its best hour) makes a window whose end is past a catch-up. A cron timetable
    (``CronTriggerTimetable``, ``CronDataIntervalTimetable``) starts each run at its data interval's end, so
    every run on time has that end just past: a deadline to give, not a catch-up. A manual run is left out
    too: one given a logical date in a past window more likely chose the wrong date.

    A run that Airflow started (``dag_run.start_date``) before its window ended is no catch-up: it was on
    time, and this task started late (upstream tasks, a queue slot, a retry). Only the run's start tells the
    two apart: both have ``run_after`` inside the window and its end past.
    """
    if run_type_of(context) not in ("scheduled", "backfill") or not starts_in_window(context):
        return None
    end = parse_instant(context.get("data_interval_end"), name="data_interval_end")
    if end > now:
        return None
    started = getattr(context.get("dag_run"), "start_date", None)
    run_started = parse_instant(started, name="dag_run.start_date") if started is not None else None
    return PastWindow(end=end, run_started=run_started if run_started and run_started < end else None)
