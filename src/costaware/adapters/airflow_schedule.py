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
#: The same in a task process (the cost listener): a try's listener must end within Airflow's
#: ``[core] task_success_overtime`` (20 s), or the supervisor kills it before it sends the budget alerts.
#: Each run counted costs about a millisecond (Airflow rebuilds its cron for every next run).
TASK_MAX_RUNS = 500


def count_runs(timetable: Any, start: datetime, end: datetime, *, max_runs: int = MAX_RUNS) -> int:
    """How many runs ``timetable`` (an ``airflow.timetables.base.Timetable``) starts in ``[start, end)``.

    Past ``max_runs`` runs, the rest of the window is extrapolated at the pace of the runs counted.
    """
    import pendulum
    from airflow.timetables.base import TimeRestriction

    if max_runs < 2:  # the pace needs two runs
        raise ValueError(f"max_runs must be at least 2, got {max_runs}")
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
            if count >= max_runs:
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
    """Runs of the timetables given per DAG id (DAGs not named schedule nothing), each window counted once.

    Args:
        timetables: The timetable of each DAG id.
        max_runs: Runs counted one by one per window (:func:`count_runs`); ``TASK_MAX_RUNS`` in a task.
    """

    def __init__(self, timetables: Mapping[str, Any], *, max_runs: int = MAX_RUNS) -> None:
        self.timetables = dict(timetables)
        self.max_runs = max_runs
        self._counted: dict[tuple[str, datetime, datetime], int] = {}

    def runs_between(self, dag_id: str, start: datetime, end: datetime) -> int:
        timetable = self.timetables.get(dag_id)
        if timetable is None:
            return 0
        # Budgets of one period share the window: a DAG in several of them was counted once per budget.
        key = (dag_id, start, end)
        if key not in self._counted:
            self._counted[key] = count_runs(timetable, start, end, max_runs=self.max_runs)
        return self._counted[key]


class AirflowSchedule:
    """Runs of each DAG's timetable as the Airflow metadata database knows it; paused DAGs run nothing.

    A DAG the database does not know (deleted, or never parsed) schedules nothing; a database that cannot be
    read logs a warning and schedules nothing, so the forecast falls back to what is already committed.
    One instance serves one request (a page, a command): each DAG is read, and each window counted, once.
    """

    def __init__(self) -> None:
        self._unreadable = False  # said once: every DAG would fail the same way
        # The timetables read so far (None: the DAG schedules nothing), each window counted once: the Cost
        # page counted a per-minute DAG's month (seconds of work) once per budget it spends in.
        self._read = TimetableSchedule({})

    def runs_between(self, dag_id: str, start: datetime, end: datetime) -> int:
        if dag_id not in self._read.timetables:
            self._read.timetables[dag_id] = self._timetable(dag_id)
        return self._read.runs_between(dag_id, start, end)

    def _timetable(self, dag_id: str) -> Any:
        """The DAG's timetable as the metadata database has it; None: it schedules nothing, or unknown."""
        if self._unreadable:
            return None
        try:
            from airflow.models.dag import DagModel
            from airflow.models.serialized_dag import SerializedDagModel
            from airflow.utils.session import create_session

            with create_session() as session:
                model = session.get(DagModel, dag_id)
                if model is None or model.is_paused or model.is_stale:
                    return None
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
            return None
        return None if dag is None else dag.timetable
