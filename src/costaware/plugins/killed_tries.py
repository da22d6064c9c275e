"""Tries that were killed before their own listener could run: priced from the metadata database.

A task try records its own cost in the worker when it ends. One that is killed does not end there: a
person marked it (or its run) failed or success while it ran and the supervisor killed the process, or the
executor lost the whole worker (an evicted pod, a dead machine) and the scheduler failed the try. Airflow
then reports the state change in the API server or the scheduler, with a metadata-database TaskInstance.
This module prices those tries there (the listener writes them), from the start and end the database holds:
on the task's ``costaware_compute`` param (from its serialized definition, in the DAG version the try
ran), else the ``[costaware] worker_*`` settings (an operator's own compute arguments are not in that
definition), tagged as the run's other entries are (the DAG's tags, its param defaults and the run's
conf), and with an operator's own ``tags`` where its definition keeps them (``RemoteTrainingOperator``'s,
a template field). It goes to the ledger the task names (``ledger_conn_id``, a template field of every
costaware operator and sensor).

Limits: a lost worker is charged up to when the scheduler noticed it (its heartbeat timeout), not when it
died. A task process killed while its supervisor lives on (an out-of-memory kill of the task alone) is
reported through the execution API, which calls no listener: that try is not recorded.

Both sides write the entry under the same :func:`~costaware.core.ledger.try_entry_uid` (of Airflow's id of
the try), so a try that the worker recorded as well (it ended as it was being marked) is counted once: the
ledger keeps the first. (The scheduler gives a try it puts up for retry a new id before it reports it;
there the worker's listener never ran.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

log = logging.getLogger(__name__)


def killed_try_pricing(ti: Any, outcome: str) -> tuple[str, Callable[[], Any]] | None:
    """The ledger ``ti``'s task writes to, and the pricing of its try (read now), to call in another thread.

    The reads use the caller's session (the scheduler's transaction, where the try's history row is still
    pending). The pricing looks up the ledger's connection and prices, which open Airflow's thread-local
    session: in the scheduler's thread that commits (or rolls back) and closes the scheduler's own
    transaction. None when the try held no worker or cannot be read; never raises.
    """
    from costaware.glue import ledger_conn_id_of
    from costaware.plugins.try_cost import build_entry

    try:
        start = getattr(ti, "start_date", None)
        if start is None:
            return None  # queued or scheduled when marked: it never ran, nothing to charge
        end = getattr(ti, "end_date", None) or datetime.now(timezone.utc)
        seconds = (end - start).total_seconds()
        if seconds <= 0:
            return None
        dag = _dag_the_try_ran(ti, _session_of(ti))
        task = _task_of(dag, ti.task_id) if dag is not None else None
        if getattr(ti, "next_method", None) or getattr(task, "mode", None) == "reschedule":
            # Deferred (or waiting for a person), or a sensor between pokes: most of start-to-end held no
            # worker, and how much did is not in the database. Its worker time before it deferred is not
            # charged either when it ends normally.
            log.info(
                "costaware: %s.%s try %s waited outside a worker (deferred or rescheduled): not charged",
                ti.dag_id,
                ti.task_id,
                ti.try_number,
            )
            return None
        params = {**_default_params(dag), **_run_conf(ti)}
        try_id = _id_of_the_try(ti)
        if try_id is None:
            return None
        view = SimpleNamespace(
            id=try_id,
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            task_id=ti.task_id,
            map_index=int(ti.map_index if ti.map_index is not None else -1),
            try_number=int(ti.try_number or 1),
            task=task if task is not None else SimpleNamespace(dag=dag, params={}),
        )
        ledger_conn_id = ledger_conn_id_of(task)  # a template field: the serialized definition keeps it
        own = _operator_tags(task)
        if own:  # an operator's own tags (RemoteTrainingOperator's), kept in its serialized definition
            from costaware.glue import annotate_task

            annotate_task(view, tags=own)
    except Exception:
        _said_unpriced(ti)
        return None
    who = (ti.dag_id, ti.task_id, ti.try_number)

    def price() -> Any:
        from dataclasses import replace

        from costaware.core.ledger import clipped_note

        try:
            entry = build_entry(view, outcome, None, seconds, {"params": params}, in_task_process=False)
        except Exception:
            _said_unpriced(SimpleNamespace(dag_id=who[0], task_id=who[1], try_number=who[2]))
            return None
        note = (
            f"killed before it ended ({outcome}: marked, or its worker lost): {seconds:.0f} s from the "
            "metadata database's start and end"
        )
        return replace(entry, cause="killed", note=clipped_note("; ".join(filter(None, [note, entry.note]))))

    return ledger_conn_id, price


def _said_unpriced(ti: Any) -> None:
    log.exception(
        "costaware: the cost of %s.%s try %s, killed before it ended, could not be priced",
        getattr(ti, "dag_id", "?"),
        getattr(ti, "task_id", "?"),
        getattr(ti, "try_number", "?"),
    )


def task_the_try_ran(ti: Any) -> Any:
    """``ti``'s task as its DAG version defines it (its ``ledger_conn_id``), or None; never raises."""
    task = getattr(ti, "task", None)
    if task is not None:
        return task
    try:
        dag = _dag_the_try_ran(ti, _session_of(ti))
    except Exception as e:  # the caller falls back to the default ledger, and says so
        log.warning("costaware: the DAG of %s.%s could not be read: %s", ti.dag_id, ti.task_id, e)
        return None
    return _task_of(dag, ti.task_id) if dag is not None else None


def _session_of(ti: Any) -> Any:
    """The metadata-database session ``ti`` belongs to, else Airflow's thread-local one (the caller's).

    None for an object no session maps (no metadata-database TI), or where Airflow has no session.
    The scheduler's failure path hands over a TI without its session: Airflow's thread-local one is the
    session of that transaction, where the try's history row is still pending.
    """
    from sqlalchemy.orm import object_session
    from sqlalchemy.orm.exc import UnmappedInstanceError

    try:
        session = object_session(ti)
    except UnmappedInstanceError:
        return None
    if session is None:
        from airflow import settings

        session = settings.Session() if settings.Session is not None else None
    return session


def _operator_tags(task: Any) -> dict[str, str]:
    """An operator's own ``tags`` argument, where its serialized definition keeps it (a template field).

    A value still a template (``{{ params.project }}``) is left out: it is rendered only when the task runs.
    """
    tags = getattr(task, "tags", None)
    if not isinstance(tags, dict):
        return {}
    from costaware.glue import is_template

    return {str(k): v for k, v in tags.items() if isinstance(v, str) and not is_template(v)}


def _id_of_the_try(ti: Any) -> Any:
    """Airflow's id of the try that ran, as its worker keyed its entry; None when it did not run.

    A try the scheduler puts up for retry gets a new id before the listener hears of it: the try's own id
    is then in its ``TaskInstanceHistory`` row (added in the same session, not yet committed). Keyed by the
    new id, the entry took the next try's key, and the next try's own entry was dropped as a duplicate.
    """
    from sqlalchemy import select

    try:
        from airflow.models.taskinstancehistory import TaskInstanceHistory as History
    except ImportError:  # an Airflow without the history table: the try keeps its id
        return getattr(ti, "id", None)
    key = {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "task_id": ti.task_id,
        "map_index": ti.map_index,
        "try_number": ti.try_number,
    }
    session = _session_of(ti)  # None (no metadata-database TI): no history to read, the try keeps its id
    row = None
    if session is not None:
        pending = [h for h in session.new if isinstance(h, History)]
        row = next((h for h in pending if all(getattr(h, k) == v for k, v in key.items())), None)
        if row is None:
            with session.no_autoflush:
                row = session.scalar(select(History).filter_by(**key))
    if row is None:
        if session is not None and ti.try_number and ti.try_number > 1:
            # A retry failed before it started still carries the try before's start: nothing of it ran.
            with session.no_autoflush:
                before = session.scalar(select(History).filter_by(**{**key, "try_number": ti.try_number - 1}))
            if before is not None and before.start_date == ti.start_date:
                return None
        return getattr(ti, "id", None)
    if row.start_date is None:
        return None  # archived without running
    return row.task_instance_id


def _dag_the_try_ran(ti: Any, session: Any) -> Any:
    """The DAG as the try ran it: the version its TaskInstance names, else the latest one.

    A DAG changed since the try started (a ``costaware_compute`` param, a tag) has a newer version: read
    from the latest, a killed try was priced on compute it never ran on.
    """
    version_id = getattr(ti, "dag_version_id", None)
    if version_id is not None and session is not None:
        try:
            from airflow.models.dag_version import DagVersion

            with session.no_autoflush:  # the scheduler's transaction: flush nothing of it from here
                version = session.get(DagVersion, version_id)
                serialized = version.serialized_dag if version is not None else None
                if serialized is not None:
                    return serialized.dag
        except Exception as e:  # the latest version still prices it
            log.warning(
                "costaware: version %s of DAG %s could not be read (%s): the latest is",
                version_id,
                ti.dag_id,
                e,
            )
    return _serialized_dag(ti.dag_id, session)


def _serialized_dag(dag_id: str, session: Any = None) -> Any:
    """The DAG as the scheduler knows it (its tasks, tags and params), or None.

    Read in ``session`` (the caller's): without one, ``provide_session`` made Airflow's thread-local
    session, committed it and closed it, the scheduler's own transaction with it.
    """
    try:
        from airflow.models.serialized_dag import SerializedDagModel

        if session is not None:
            return SerializedDagModel.get_dag(dag_id, session=session)
        return SerializedDagModel.get_dag(dag_id)
    except Exception as e:  # priced on the worker settings and tagged by the run's conf only
        log.warning("costaware: the definition of DAG %s could not be read: %s", dag_id, e)
        return None


def _run_conf(ti: Any) -> dict[str, Any]:
    """The run's conf (its team/project/owner params), or {} where it cannot be read here."""
    try:
        return dict(getattr(getattr(ti, "dag_run", None), "conf", None) or {})
    except Exception:  # a detached instance: the DAG's defaults still tag the entry
        return {}


def _task_of(dag: Any, task_id: str) -> Any:
    try:
        return dag.get_task(task_id)
    except Exception:  # a task removed from the DAG since
        return None


def _default_params(dag: Any) -> dict[str, Any]:
    """The DAG's param defaults (team, project, owner tags), as plain values."""
    if dag is None:
        return {}
    try:
        params = dag.params
        return {key: params[key] for key in params}  # ParamsDict resolves each to its value
    except Exception:
        return {}
