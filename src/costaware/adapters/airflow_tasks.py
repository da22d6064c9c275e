"""What Airflow's metadata database says of a task instance: whether a hold made for it can still be billed.

``costaware budget release`` gives a hold back only when its task can bill no more: a task still running
settles its cost against the released hold, past what the budget held for it (a $5 cap read -$3.00 left).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costaware.core.ledger import read_holder

#: A task instance in one of these states ran its last try (or never will): it bills nothing more.
ENDED_TASK_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
#: A run in one of these states starts no task: one of its tasks not yet started never will.
ENDED_RUN_STATES = frozenset({"success", "failed"})
#: A task instance in one of these states has not started yet: it runs only while its run does.
_NOT_STARTED = (None, "none", "scheduled")


class AirflowDatabaseUnreadable(Exception):
    """Airflow's metadata database could not be read (no AIRFLOW_HOME of the deployment, not migrated)."""


@dataclass(frozen=True)
class TaskInstanceKey:
    """The task instance a hold's holder names (``dag/run/task/map_index``, see ``reservation_holder``)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int

    def __str__(self) -> str:
        return (
            f"task {self.task_id!r} (map index {self.map_index}) of DAG {self.dag_id!r} run {self.run_id!r}"
        )


@dataclass(frozen=True)
class TaskInstanceStanding:
    """What the database holds of one task instance and its run; ``found``: the task instance is there."""

    found: bool
    state: str | None
    run_found: bool
    run_state: str | None

    @property
    def ended(self) -> bool:
        """Whether the task instance can bill nothing more: its last try ended, or its run ended first."""
        if self.found and self.state in ENDED_TASK_STATES:
            return True
        not_started = not self.found or self.state in _NOT_STARTED
        return not_started and self.run_found and self.run_state in ENDED_RUN_STATES

    def said(self) -> str:
        """The state in words, for a refusal: 'running in Airflow's metadata database', ..."""
        if not self.found:
            run = f"its run is {self.run_state}" if self.run_found else "nor is its run"
            return f"not in Airflow's metadata database ({run})"
        state = self.state if self.state not in _NOT_STARTED else f"not started (its run is {self.run_state})"
        return f"{state} in Airflow's metadata database"


def search_of(holder: str | None) -> str | None:
    """The search id of a ``budgeted_search`` hold (``search/<id>/<trial>/<rung>``, ``search/<id>/tail``).

    Such a search runs in a process of its own (a notebook, a task's Python), under an id of its own (not an
    Airflow run id): no task instance of Airflow's is named by its holder. None for a holder of another form
    (see :func:`~costaware.core.ledger.read_holder`).
    """
    key = read_holder(holder)
    return key.run_id if key is not None and key.search else None


def task_instance_of(holder: str | None) -> TaskInstanceKey | None:
    """The task instance a holder names; None for one that names none (reserved from Python, a search's)."""
    key = read_holder(holder)
    if key is None or key.dag_id is None or key.task_id is None or key.map_index is None:
        return None  # a search's rung: its trial and rung are no task id and map index
    return TaskInstanceKey(key.dag_id, key.run_id, key.task_id, key.map_index)


def holder_kind(holder: str | None) -> str:
    """What a hold's holder names, in the words ``costaware budget holds`` shows beside it.

    Read as ``budget release`` reads it (:func:`~costaware.core.ledger.read_holder`): ``task
    (dag/run/task/map)``, ``task egress (dag/run/task/map/egress)`` for a data-locality hold, ``search rung
    (search/id/trial/rung)``, ``search tail (search/id/tail)`` for a search's bookkeeping after its last
    rung, ``none (release by id)`` for a hold reserved from Python without a holder, ``other`` otherwise.
    """
    if not holder:
        return "none (release by id)"
    key = read_holder(holder)
    if key is None:
        return "other"
    if key.search == "tail":
        return "search tail (search/id/tail)"
    if key.search == "rung":
        return "search rung (search/id/trial/rung)"
    if key.suffix == "egress":
        return "task egress (dag/run/task/map/egress)"
    return "task (dag/run/task/map)"


def task_instance_standing(key: TaskInstanceKey) -> TaskInstanceStanding:
    """The state of ``key``'s task instance and of its run, as Airflow's metadata database has them.

    Raises:
        AirflowDatabaseUnreadable: the database could not be read; the message says why, in one line.
    """
    try:
        from airflow.models.dagrun import DagRun
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            ti_state = session.execute(
                select(TaskInstance.state).where(
                    TaskInstance.dag_id == key.dag_id,
                    TaskInstance.run_id == key.run_id,
                    TaskInstance.task_id == key.task_id,
                    TaskInstance.map_index == key.map_index,
                )
            ).first()
            run_state = session.execute(
                select(DagRun.state).where(DagRun.dag_id == key.dag_id, DagRun.run_id == key.run_id)
            ).first()
    except Exception as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise AirflowDatabaseUnreadable(first_line[:200]) from e
    return TaskInstanceStanding(
        found=ti_state is not None,
        state=_plain(ti_state),
        run_found=run_state is not None,
        run_state=_plain(run_state),
    )


def _plain(row: Any) -> str | None:
    """A state column's value as text ('running'), whether the driver gives a string or Airflow's enum."""
    value = None if row is None else row[0]
    return None if value is None else str(getattr(value, "value", value))
