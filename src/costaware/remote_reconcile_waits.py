"""The ended tasks that kept a remote training's wait, read from Airflow's metadata database.

Split from :mod:`costaware.remote_reconcile`, which stops and bills their jobs and re-exports what is here:
an :class:`EndedWait` per task, whether a task may keep one, and whether its task is still the try that ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from costaware.glue import DEFAULT_AWS_CONN_ID
from costaware.training.remote import aware_utc

#: Airflow's ``next_method`` of a task whose wait ended without an event: the scheduler's timeout check (or
#: a failed trigger) took its trigger away, and no ``on_kill`` comes. ``BaseOperator``'s
#: ``TRIGGER_FAIL_REPR``, copied: the listener reads it without importing the task SDK.
TRIGGER_TAKEN_AWAY = "__fail__"


#: How long after a task ended whose trigger may still run its job is left to that trigger: a person's
#: mark of a deferred task cancels the trigger, whose ``on_kill`` (or its check of a cancel past the
#: deadline) stops and bills the job within ``KILL_WAIT_SECONDS`` and the backend's calls. Stopped here too
#: meanwhile, the job could be billed twice, each stop before the other's entry was there.
TRIGGER_SETTLE_SECONDS = 300.0


@dataclass(frozen=True)
class EndedWait:
    """A task that ended with a deferred remote training wait kept in its XCom (its attempt state)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    task_state: str
    state: Mapping[str, Any]
    #: Whether the wait ended without an event (``TRIGGER_TAKEN_AWAY``): no trigger bills its job.
    taken_away: bool = False
    #: When the task ended (its run's end where Airflow gave the task none), or None.
    ended_at: datetime | None = None
    #: The task's try that ended (None: not read): a cleared task's new try has another.
    try_number: int | None = None

    def left_to_its_trigger(self, now: datetime) -> bool:
        """Whether the task's trigger may still stop and bill the job (see ``TRIGGER_SETTLE_SECONDS``)."""
        if self.taken_away or self.ended_at is None:
            return False
        return (now - aware_utc(self.ended_at)).total_seconds() < TRIGGER_SETTLE_SECONDS

    @property
    def current(self) -> Mapping[str, Any] | None:
        """The attempt the wait watched (None: a paused training, with no job running)."""
        current = self.state.get("current")
        return current if isinstance(current, Mapping) and current.get("job_id") else None

    @property
    def job_id(self) -> str:
        return str(self.current["job_id"]) if self.current else ""

    @property
    def backend(self) -> str:
        return str(self.state.get("backend") or "")

    def aws_conn_id(self, fallback: str | None = DEFAULT_AWS_CONN_ID) -> str | None:
        """The task's AWS connection, as its wait kept it; ``fallback`` for a state kept before it was."""
        from costaware.triggers.remote_training import WAIT_STATE_AWS_CONN_KEY

        if WAIT_STATE_AWS_CONN_KEY not in self.state:
            return fallback
        kept = self.state[WAIT_STATE_AWS_CONN_KEY]
        return str(kept) if kept is not None else None  # None: the default AWS credentials, as the task ran

    @property
    def task(self) -> str:
        """``DAG/RUN/TASK/MAP_INDEX``, as ``costaware budget holds`` names a task."""
        return f"{self.dag_id}/{self.run_id}/{self.task_id}/{self.map_index}"


#: The module of ``RemoteTrainingOperator``, the one operator that keeps a wait (with its subclasses).
_OPERATOR_MODULE = "costaware.operators.remote_training"


#: Modules whose operators are known: none of their classes but ``RemoteTrainingOperator`` keeps a wait.
_KNOWN_MODULES = ("airflow.", "costaware.")


def may_keep_a_wait(task: Any) -> bool:
    """Whether ``task`` (an operator, or its serialized definition) may be a remote training (keeps a wait).

    No metadata database IO: the run-end listener reads the waits of a run only where one of its tasks may.
    A live operator (a mapped one's too) is told by its class. A serialized one keeps only its class's name
    and module: a class of the DAG's own code (a subclass under another name, its template fields its own)
    may be one, which only the run's waits tell; Airflow's and costaware's other operators are not.
    """
    operator_class = getattr(task, "operator_class", None)
    if isinstance(operator_class, type):
        return any(
            base.__name__ == "RemoteTrainingOperator" and base.__module__ == _OPERATOR_MODULE
            for base in operator_class.__mro__
        )
    if getattr(task, "task_type", None) == "RemoteTrainingOperator":
        return True
    module = str(getattr(task, "_task_module", None) or "")
    return module == _OPERATOR_MODULE or (bool(module) and not module.startswith(_KNOWN_MODULES))


def ended_waits(
    *,
    dag_id: str | None = None,
    run_id: str | None = None,
    task_id: str | None = None,
    map_index: int | None = None,
    session: Any = None,
) -> list[EndedWait]:
    """The ended tasks whose XCom keeps a remote training's wait state, oldest run first (metadata DB IO).

    ``session``: Airflow's session to read with (None: one of its own). A task that ran again since its wait
    (cleared, or a retry) is not ended, or kept a newer state: only the last wait of an ended task is read.
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import and_, func, select

    from costaware.triggers.remote_training import ENDED_STATES, WAIT_STATE_XCOM_KEY

    query = (
        select(
            XComModel.dag_id,
            XComModel.run_id,
            XComModel.task_id,
            XComModel.map_index,
            XComModel.value,
            TaskInstance.state,
            TaskInstance.next_method,
            TaskInstance.try_number,
            func.coalesce(TaskInstance.end_date, DagRun.end_date).label("ended_at"),
        )
        .join(
            TaskInstance,
            and_(
                TaskInstance.dag_id == XComModel.dag_id,
                TaskInstance.run_id == XComModel.run_id,
                TaskInstance.task_id == XComModel.task_id,
                TaskInstance.map_index == XComModel.map_index,
            ),
        )
        .outerjoin(DagRun, and_(DagRun.dag_id == XComModel.dag_id, DagRun.run_id == XComModel.run_id))
        .where(XComModel.key == WAIT_STATE_XCOM_KEY, TaskInstance.state.in_(sorted(ENDED_STATES)))
        .order_by(XComModel.timestamp)
    )
    if dag_id is not None:
        query = query.where(XComModel.dag_id == dag_id)
    if run_id is not None:
        query = query.where(XComModel.run_id == run_id)
    if task_id is not None:
        query = query.where(XComModel.task_id == task_id)
    if map_index is not None:
        query = query.where(XComModel.map_index == map_index)
    if session is None:
        from airflow.utils.session import create_session

        with create_session() as own:
            rows = own.execute(query).all()
    else:
        rows = session.execute(query).all()
    waits = []
    for row in rows:
        state = XComModel.deserialize_value(row)
        if isinstance(state, Mapping):
            value = getattr(row.state, "value", row.state)
            waits.append(
                EndedWait(
                    row.dag_id,
                    row.run_id,
                    row.task_id,
                    int(row.map_index),
                    str(value),
                    state,
                    taken_away=row.next_method == TRIGGER_TAKEN_AWAY,
                    ended_at=_ended_at(row.ended_at),
                    try_number=row.try_number,
                )
            )
    return waits


def _ended_at(value: datetime | str | None) -> datetime | None:
    """A task's end as the metadata database gives it: SQLite gives COALESCE's result as text."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def still_ended_as_read(wait: EndedWait) -> bool:
    """Whether ``wait``'s task is still the try that ended as read: not cleared, no new try (metadata DB IO).

    A cleared task's new try reserves again for the same holder and gets back the hold its run's end kept,
    its ``created_at`` unchanged: only the task instance tells that hold from a kept one. Read just before
    the hold is freed; True where the task instance is gone (its run deleted: the hold was kept, with a
    message of a new try that is not there, until its TTL).
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import and_, func, select

    query = (
        select(
            TaskInstance.state,
            TaskInstance.try_number,
            func.coalesce(TaskInstance.end_date, DagRun.end_date).label("ended_at"),
        )
        .outerjoin(DagRun, and_(DagRun.dag_id == TaskInstance.dag_id, DagRun.run_id == TaskInstance.run_id))
        .where(
            TaskInstance.dag_id == wait.dag_id,
            TaskInstance.run_id == wait.run_id,
            TaskInstance.task_id == wait.task_id,
            TaskInstance.map_index == wait.map_index,
        )
    )
    with create_session() as session:
        row = session.execute(query).first()
    if row is None:
        return True  # its run was deleted: no try of it can run again, nor hold the kept hold
    ended_at = _ended_at(row.ended_at)
    return (
        str(getattr(row.state, "value", row.state)) == wait.task_state
        and row.try_number == wait.try_number
        and ended_at is not None
        and wait.ended_at is not None
        and aware_utc(ended_at) == aware_utc(wait.ended_at)
    )


def known_dag_ids() -> list[str]:
    """The DAG ids Airflow's metadata database knows: of its DAGs, and of its runs (metadata database IO)."""
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    known: set[str] = set()
    for column in (DagRun.dag_id, DagModel.dag_id):
        try:
            with create_session() as session:
                known.update(str(dag_id) for dag_id in session.scalars(select(column).distinct()))
        except Exception:  # a table this database does not have
            continue
    return sorted(known)
