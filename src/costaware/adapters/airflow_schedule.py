"""Scheduled runs still to come, from DAG timetables: the part of a budget forecast that needs Airflow.

``TimetableSchedule`` counts the runs of timetables it is given; ``AirflowSchedule`` finds each DAG's
timetable in the Airflow metadata database (the api-server, the scheduler or a CLI with database access).
Paused DAGs schedule nothing. Airflow is imported lazily.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

log = logging.getLogger(__name__)

#: Runs counted one by one; past them the rest of the window is extrapolated (a per-minute cron's month is
#: 44,640 runs).
MAX_RUNS = 10_000


def count_runs(timetable: Any, start: datetime, end: datetime) -> int:
    """How many runs ``timetable`` (an ``airflow.timetables.base.Timetable``) starts in ``[start, end)``."""
    import pendulum
    from airflow.timetables.base import TimeRestriction

    if end <= start:
        return 0
    if not hasattr(timetable, "next_dagrun_info"):
        timetable = core_timetable(timetable)
    restriction = TimeRestriction(
        earliest=pendulum.instance(start), latest=pendulum.instance(end), catchup=True
    )
    last = None
    count = 0
    counted_from: datetime | None = None
    while True:
        info = timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
        if info is None or info.run_after >= end or info.data_interval is None:
            break
        if info.run_after >= start:
            counted_from = counted_from or info.run_after
            count += 1
            if count >= MAX_RUNS:
                # Counted one by one no further: the rest of the window at the pace so far. Stopped at the
                # cap, a per-minute DAG's month read 10,000 runs, and its forecast alert came late.
                pace = (info.run_after - counted_from).total_seconds() / (count - 1)  # seconds a run
                if pace > 0:
                    count += max(0, math.ceil((end - info.run_after).total_seconds() / pace) - 1)
                break
        if last is not None and info.data_interval == last:
            break  # a timetable that does not advance
        last = info.data_interval
    return count


def core_timetable(timetable: Any) -> Any:
    """The scheduler's timetable of a DAG file's (Task SDK) timetable, through Airflow's own serialization."""
    from airflow.serialization.decoders import decode_timetable
    from airflow.serialization.encoders import encode_timetable

    return decode_timetable(encode_timetable(timetable))


class TimetableSchedule:
    """Runs of the timetables given per DAG id (DAGs not named schedule nothing)."""

    def __init__(self, timetables: Mapping[str, Any]) -> None:
        self.timetables = dict(timetables)

    def runs_between(self, dag_id: str, start: datetime, end: datetime) -> int:
        timetable = self.timetables.get(dag_id)
        return 0 if timetable is None else count_runs(timetable, start, end)


class AirflowSchedule:
    """Runs of each DAG's timetable as the Airflow metadata database knows it; paused DAGs run nothing.

    A DAG the database does not know (deleted, or never parsed) schedules nothing; a database that cannot be
    read logs a warning and schedules nothing, so the forecast falls back to what is already committed.
    """

    def __init__(self) -> None:
        self._unreadable = False  # said once: every DAG would fail the same way

    def runs_between(self, dag_id: str, start: datetime, end: datetime) -> int:
        if self._unreadable:
            return 0
        try:
            from airflow.models.dag import DagModel
            from airflow.models.serialized_dag import SerializedDagModel
            from airflow.utils.session import create_session

            with create_session() as session:
                model = session.get(DagModel, dag_id)
                if model is None or model.is_paused or model.is_stale:
                    return 0
                dag = SerializedDagModel.get_dag(dag_id, session=session)
        except Exception as e:  # the forecast degrades to committed only, with a warning
            self._unreadable = True
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            log.warning(
                "cannot read the DAG schedules from Airflow's metadata database (%s); the forecast counts "
                "what is committed only (is AIRFLOW_HOME the deployment's, and `airflow db migrate` run? "
                "`costaware budget show --no-schedule` skips this)",
                first_line[:200],
            )
            return 0
        return 0 if dag is None else count_runs(dag.timetable, start, end)
