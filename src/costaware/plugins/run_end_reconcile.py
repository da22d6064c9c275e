"""The run-end reconcile: the remote training jobs a run's ended tasks left with nothing to follow them.

At a run's end (:func:`reconcile_unfollowed_jobs`) and at a person's mark of one such task
(:func:`reconcile_marked_task`), read in the caller's session and billed in a thread of their own; the
listener's hooks (:mod:`costaware.plugins.listener`) call them. The jobs' own stop and billing live in
:mod:`costaware.remote_reconcile`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from costaware.glue import ledger_conn_id_of
from costaware.plugins.reservation_release import in_own_thread, release_reservations

#: The listener's logger, as before these moved out of it: filters and alerts on its name still match.
log = logging.getLogger("costaware.plugins.listener")


def reconcile_unfollowed_jobs(
    dag_run: Any, *, wait_seconds: float = 0.0
) -> tuple[frozenset[str], Callable[[], frozenset[str]] | None, frozenset[str]]:
    """Stop and bill the remote training jobs the run's ended tasks left unbilled; never raises.

    A deferred wait whose trigger Airflow's timeout check took away is followed by the task's resume or
    retry only: a run marked failed or success, or timed out, before those ran left its job running
    (:mod:`costaware.remote_reconcile`); a wait whose trigger still ran is that trigger's (its ``on_kill``).
    The waits are read in the caller's session: the scheduler calls this for a ``dagrun_timeout`` with the
    run's tasks set skipped but not committed yet, which a session of its own would read as still deferred.
    The read runs in a savepoint of it: on PostgreSQL a failed statement (a lock or statement timeout)
    aborts the whole transaction, and the scheduler's next query failed and its commit rolled the run's end
    back. A run with no remote training task is not read at all. The backends' calls take seconds per job
    (a stop waits for the job's end), so they run in a thread of their own, which the scheduler or API
    server does not wait for.

    Returns the holders (``DAG/RUN/TASK/MAP_INDEX``) of the tasks whose jobs that thread stops and bills:
    billing a job settles its task's hold, and a job not billed keeps it held, so the run's end leaves
    those holds to it. And, where some ended wait's trigger still ran (its kill settles the hold, or keeps
    it where the backend refused the stop, for ``costaware jobs reconcile``), what gives the holders of
    those whose job the task's ledger does not hold (ledger IO: called in the release's own thread). And
    the task ids whose every hold the run's end keeps: where the waits could not be read (a lock timeout),
    those of the tasks that may be remote trainings, whose paid jobs may still run, left to ``costaware
    jobs reconcile`` (its billing settles them; it frees those whose job is billed already; one of a task
    that left no job waits for its TTL, or ``costaware budget release``).
    """
    dag = getattr(dag_run, "dag", None)
    tasks = list(getattr(dag, "tasks", None) or [])
    if not tasks:
        # No DAG to read the tasks' ledgers from: `costaware jobs reconcile` lists them.
        return frozenset(), None, frozenset()
    try:
        from costaware.glue import DEFAULT_AWS_CONN_ID, DEFAULT_LEDGER_CONN_ID
        from costaware.remote_reconcile import (
            billed_in_its_ledger,
            ended_waits,
            may_keep_a_wait,
            reconcile_ended_run,
            unfollowed,
        )

        if not any(may_keep_a_wait(task) for task in tasks):
            # No task of the run can be a remote training: no query in the caller's transaction.
            return frozenset(), None, frozenset()
        dag_id, run_id = str(dag_run.dag_id), str(dag_run.run_id)
        waits = _read_in_savepoint(
            _session_of(dag_run), lambda session: ended_waits(dag_id=dag_id, run_id=run_id, session=session)
        )
        to_bill = unfollowed(waits)
        ledgers = {task.task_id: ledger_conn_id_of(task) for task in tasks}
        trigger_watched = [w for w in waits if w.current is not None and not w.taken_away]

        def unbilled_trigger_watched() -> frozenset[str]:
            # A stop its trigger's kill was refused kept the hold: freed here, the job ran on unheld.
            return frozenset(
                w.task
                for w in trigger_watched
                if not billed_in_its_ledger(w, ledgers.get(w.task_id, DEFAULT_LEDGER_CONN_ID))
            )

        also_keep = unbilled_trigger_watched if trigger_watched else None
        if not to_bill:
            return frozenset(), also_keep, frozenset()  # nothing to stop: no thread
        aws = {task.task_id: getattr(task, "aws_conn_id", DEFAULT_AWS_CONN_ID) for task in tasks}
        in_own_thread(
            lambda: reconcile_ended_run(
                dag_id, run_id, ledgers, aws, log=log, waits=waits, release_hold=_release_hold_of
            ),
            name="costaware-reconcile",
            wait_seconds=wait_seconds,
        )
        return frozenset(wait.task for wait in to_bill), also_keep, frozenset()
    except Exception as e:  # the run ends as Airflow says; `costaware jobs reconcile` lists what was left
        # Which jobs still run is not known: freed, the holds of a paid job still running could be spent
        # again. Kept, the reconcile settles them by its billing, or frees them where billed already; a
        # kept task that left no job (it never deferred, or is no training) has nothing the reconcile reads.
        kept = _may_be_remote_trainings(tasks)
        log.error(
            "costaware: could not reconcile the remote training jobs of run %s: %s; the holds of its tasks "
            "%s (those that may be remote trainings, the DAG's own operator classes among them) are kept: "
            "run `costaware jobs reconcile --dag-id %s` to stop and bill the jobs its ended tasks left "
            "running (billing settles a hold; one whose job is billed already it frees). The hold of such "
            "a task that left no job (it never deferred, or is no training) stays until its TTL: `costaware "
            "budget release --holder %s/%s/TASK/MAP_INDEX` frees it",
            dag_run.run_id,
            e,
            ", ".join(sorted(kept)),
            dag_run.dag_id,
            dag_run.dag_id,
            dag_run.run_id,
        )
        return frozenset(), None, kept


def _may_be_remote_trainings(tasks: list[Any]) -> frozenset[str]:
    """The ids of ``tasks`` that may keep a remote training's wait (every task's where that is not known)."""
    try:
        from costaware.remote_reconcile import may_keep_a_wait

        return frozenset(str(task.task_id) for task in tasks if may_keep_a_wait(task))
    except Exception:
        return frozenset(str(getattr(task, "task_id", "")) for task in tasks)


def _read_in_savepoint(session: Any, read: Any) -> Any:
    """``read(session)`` in a savepoint of the caller's ``session`` (None: ``read(None)``, in its own).

    A failure rolls back the savepoint only, and is raised: the caller's transaction goes on.
    """
    if session is None:
        return read(None)
    with session.begin_nested():
        return read(session)


def _release_hold_of(wait: Any, ledger_conn_id: str) -> None:
    """Release the hold of ``wait``'s task, whose job was found billed (the run's end left it to this)."""
    release_reservations(
        wait.dag_id,
        wait.run_id,
        {wait.task_id},
        "the run ended; its remote training job was billed already",
        {ledger_conn_id},
        only_holders=frozenset({wait.task}),
    )


def reconcile_marked_task(ti: Any) -> None:
    """A task ended by a person after Airflow's timeout check took its wait's trigger: its job; never raises.

    The API server reports the mark (a metadata-database TaskInstance, committed). Its ``__fail__`` resume
    will not run now, and the run may go on for hours: the job is stopped and billed now, as at the run's
    end (:func:`reconcile_unfollowed_jobs`, the read in a savepoint too).
    """
    from costaware.remote_reconcile import TRIGGER_TAKEN_AWAY
    from costaware.triggers.remote_training import ENDED_STATES

    state = getattr(ti, "state", None)
    ended = str(getattr(state, "value", state)) in ENDED_STATES
    if not ended or getattr(ti, "next_method", None) != TRIGGER_TAKEN_AWAY:
        return  # any other task's wait is its trigger's, its resume's or its retry's
    try:
        from costaware.glue import DEFAULT_AWS_CONN_ID, DEFAULT_LEDGER_CONN_ID
        from costaware.plugins.killed_tries import task_the_try_ran
        from costaware.remote_reconcile import ended_waits, reconcile_ended_run, unfollowed

        dag_id, run_id, task_id = str(ti.dag_id), str(ti.run_id), str(ti.task_id)
        map_index = int(ti.map_index if ti.map_index is not None else -1)
        waits = _read_in_savepoint(
            _session_of(ti),
            lambda session: ended_waits(
                dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index, session=session
            ),
        )
        if not unfollowed(waits):
            return
        task = task_the_try_ran(ti)
        ledgers = {task_id: ledger_conn_id_of(task) if task is not None else DEFAULT_LEDGER_CONN_ID}
        aws = {task_id: getattr(task, "aws_conn_id", DEFAULT_AWS_CONN_ID)}
        in_own_thread(
            lambda: reconcile_ended_run(dag_id, run_id, ledgers, aws, log=log, waits=waits),
            name="costaware-reconcile",
            wait_seconds=0.0,
        )
    except Exception as e:  # the mark stands; `costaware jobs reconcile` lists what was left
        log.error(
            "costaware: could not reconcile the job of %s.%s: %s; `costaware jobs reconcile --dag-id %s` "
            "lists it",
            ti.dag_id,
            ti.task_id,
            e,
            ti.dag_id,
        )


def _session_of(dag_run: Any) -> Any:
    """The database session ``dag_run`` was loaded in (the scheduler's, the API server's), else None."""
    from sqlalchemy.exc import NoInspectionAvailable
    from sqlalchemy.orm import object_session
    from sqlalchemy.orm.exc import UnmappedInstanceError

    try:
        return object_session(dag_run)
    except (UnmappedInstanceError, NoInspectionAvailable):
        return None  # not a database row (`dag.test()` keeps one, a stand-in does not)
