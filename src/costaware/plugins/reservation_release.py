"""Giving back money held for tasks that will never run (the cost listener's second duty).

When a task fails for good (or skips), the reservations of the downstream tasks that can no longer run are
released; when a run ends (failed, marked failed, or succeeded with a consumer skipped), every reservation
still open for the run is. Nothing here raises: a listener must not break the task or the scheduler, and an
unreleased reservation still expires at its TTL.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from costaware.glue import dag_of

log = logging.getLogger(__name__)


# Trigger rules under which a task cannot run once an upstream task failed (it becomes upstream_failed)...
_DOOMED_BY_FAILURE = frozenset({"all_success", "none_failed", "none_failed_min_one_success"})
# ... or was skipped (the skip propagates).
_DOOMED_BY_SKIP = frozenset({"all_success"})


def doomed_downstream(task: Any, outcome: str) -> set[str]:
    """Task ids downstream of ``task`` that can no longer run after it ``failed`` or was ``skipped``.

    Follows downstream edges only through tasks whose trigger rule propagates the outcome (``all_success``
    and, for failures, ``none_failed*``); a task with ``all_done`` or ``one_success`` may still run.
    """
    rules = _DOOMED_BY_FAILURE if outcome == "failed" else _DOOMED_BY_SKIP
    doomed: set[str] = set()
    todo = _downstream(task)
    while todo:
        child = todo.pop()
        rule = getattr(child, "trigger_rule", "all_success")
        if child.task_id in doomed or str(getattr(rule, "value", rule)) not in rules:
            continue
        doomed.add(child.task_id)
        todo.extend(_downstream(child))
    return doomed


def _downstream(task: Any) -> list[Any]:
    try:
        return list(getattr(task, "downstream_list", None) or [])
    except (AttributeError, RuntimeError):  # an operator run outside any DAG (tests, ad-hoc execute)
        return []


def release_reservations(
    dag_id: str,
    run_id: str,
    task_ids: set[str] | None,
    reason: str,
    ledger_conn_ids: set[str] | frozenset[str] = frozenset({"costaware_ledger"}),
    *,
    in_task_process: bool = False,
    keep_holders: frozenset[str] = frozenset(),
    keep_task_ids: frozenset[str] = frozenset(),
    only_holders: frozenset[str] | None = None,
) -> list[Any]:
    """Free the open reservations held for ``task_ids`` of one run (all of the run's when None): those closed.

    Each is released, freeing its unpaid part (what entries paid from it stays spent:
    :func:`~costaware.remote_reconcile.free_paid_hold`); one closed meanwhile is said and left out.

    ``keep_holders``: holders left open (a task whose unwatched job a reconcile stops and bills: billing
    it settles its hold, and freed before that, the money its job still spends could be reserved again);
    ``keep_task_ids``: every hold of these tasks left open (their jobs could not be told);
    ``only_holders``: release these holders only (None: any of the tasks').

    ``in_task_process``: called by a task's own worker, which opens each ledger as its tasks do; else (a
    run's end, in the scheduler or the API server) a non-default connection missing there is not replaced
    by another ledger (see :func:`_existing_ledger`).

    Never raises: a listener must not break the task or the scheduler; an unreleased reservation still
    expires at its TTL.
    """
    from costaware.core.ledger import read_holder
    from costaware.remote_reconcile import FreedHold, free_paid_hold

    freed: list[FreedHold] = []
    run_prefix = f"{dag_id}/{run_id}/"  # holders are dag/run/task/map_index (core.ledger.reservation_holder)
    prefixes = [run_prefix] if task_ids is None else [f"{run_prefix}{t}/" for t in sorted(task_ids)]

    def is_ours(holder: str | None) -> bool:
        # A run id may hold a '/': the prefix of run 'r' also matches run 'r/x''s holds, still running.
        key = read_holder(holder)
        return (
            key is not None
            and key.search is None
            and key.dag_id == dag_id
            and key.run_id == run_id
            and (task_ids is None or key.task_id in task_ids)
            and holder not in keep_holders
            and key.task_id not in keep_task_ids
            and (only_holders is None or holder in only_holders)
        )

    def release(ledger: Any) -> None:
        for prefix in prefixes:
            for reservation in ledger.open_reservations(holder_prefix=prefix):
                if is_ours(reservation.holder):
                    freed.append(free_paid_hold(ledger, reservation))

    def could_not(e: Exception) -> None:
        log.warning(
            "costaware: could not release reservations of %s/%s (%s): %s; they expire at their TTL",
            dag_id,
            run_id,
            reason,
            e,
        )

    _in_each_ledger(
        ledger_conn_ids, release, could_not, in_task_process=in_task_process, what="holds", done="released"
    )
    for hold in freed:
        log.info("costaware: %s", hold.said(reason))
    return [hold.reservation for hold in freed if hold.closed_here]


def _ledger_conn_ids(dag: Any) -> set[str]:
    """The ledgers the DAG's tasks use, and the default (the spend gate's holds may be there)."""
    from costaware.glue import DEFAULT_LEDGER_CONN_ID, ledger_conn_id_of

    return {DEFAULT_LEDGER_CONN_ID} | {ledger_conn_id_of(task) for task in getattr(dag, "tasks", None) or []}


def release_for_doomed_downstream(ti: Any, outcome: str) -> list[Any]:
    """After a task failed for good or skipped, release what was reserved for tasks that cannot run now."""
    task = getattr(ti, "task", None)
    if task is None or type(ti).__module__.startswith("airflow.models"):
        return []  # a state set by hand reaches the api-server; the run-end hook covers it
    doomed = doomed_downstream(task, outcome)
    if not doomed:
        return []
    return release_reservations(
        ti.dag_id,
        ti.run_id,
        doomed,
        f"upstream task {ti.task_id!r} {outcome}, so they cannot run",
        _ledger_conn_ids(dag_of(task)),
        in_task_process=True,
    )


def release_run_reservations(
    dag_run: Any,
    reason: str,
    *,
    wait_seconds: float = 5.0,
    keep_holders: frozenset[str] = frozenset(),
    also_keep: Callable[[], frozenset[str]] | None = None,
    keep_task_ids: frozenset[str] = frozenset(),
) -> list[Any]:
    """At the end of a run, release every reservation still open for it (its consumers never settled).

    ``keep_holders``: the holds a reconcile of the run's unwatched jobs settles (see
    :func:`release_reservations`); ``also_keep``: more holders to keep, asked in the release's own thread
    (it reads ledgers, which the caller's session must not); ``keep_task_ids``: tasks whose every hold is
    kept (the run's remote training waits could not be read: their jobs may still run).

    This runs in the scheduler (or the api-server, when a person marks a run) inside its open database
    session. Looking up the ledger's Airflow connection there would use, and close, that very session (a
    thread-local scoped session) and detach the run being updated, so the work runs in a thread of its own,
    with its own session, and the caller waits at most ``wait_seconds`` for it: the scheduler must not
    hold its transaction (on SQLite, the database's write lock) for long; a slower release finishes after.
    """
    args = (
        str(dag_run.dag_id),
        str(dag_run.run_id),
        None,
        reason,
        _ledger_conn_ids(getattr(dag_run, "dag", None)),
    )
    released: list[Any] = []

    def work() -> None:
        kept = keep_holders | (also_keep() if also_keep is not None else frozenset())
        released.extend(release_reservations(*args, keep_holders=kept, keep_task_ids=keep_task_ids))
        end_waiting_gates(args[0], args[1], "run_ended", args[4])

    in_own_thread(work, name="costaware-release", wait_seconds=wait_seconds)
    return released


def end_waiting_gates(
    dag_id: str,
    run_id: str,
    status: str,
    ledger_conn_ids: set[str] | frozenset[str],
    *,
    task_id: str | None = None,
    map_index: int = -1,
    in_task_process: bool = False,
) -> int:
    """Close the run's spend gate requests still waiting or asking for approval (or one gate task's).

    ``status``: ``gave_up`` (the gate's task ended while it waited: timed out, failed or skipped) or
    ``run_ended``. Never raises: the Cost page keeps showing "waiting" a while longer.
    """
    from costaware.adapters.ledger.gate_requests import close_open_requests

    closed = 0

    def close(ledger: Any) -> None:
        nonlocal closed
        closed += close_open_requests(
            ledger, dag_id=dag_id, run_id=run_id, status=status, task_id=task_id, map_index=map_index
        )

    def could_not(e: Exception) -> None:
        log.warning("costaware: could not close the waiting spend gates of %s/%s: %s", dag_id, run_id, e)

    _in_each_ledger(
        ledger_conn_ids,
        close,
        could_not,
        in_task_process=in_task_process,
        what="waiting spend gates",
        done="closed",
    )
    return closed


def end_waiting_gate(ti: Any) -> int:
    """After a task failed for good or skipped, close its spend gate request if it was still waiting."""
    from costaware.glue import ledger_conn_id_of

    task = getattr(ti, "task", None)
    if task is None or type(ti).__module__.startswith("airflow.models"):
        return 0  # a state set by hand reaches the api-server; the run-end hook covers it
    if not _is_spend_gate(task):
        return 0  # only a spend gate notes requests: no ledger call for every skipped branch task
    return end_waiting_gates(
        ti.dag_id,
        ti.run_id,
        "gave_up",
        {ledger_conn_id_of(task)},
        task_id=ti.task_id,
        map_index=int(ti.map_index),
        in_task_process=True,
    )


def _is_spend_gate(task: Any) -> bool:
    """Whether ``task`` is a ``SpendCapSensor``: one can be only where its module was loaded (no import)."""
    spend_cap = sys.modules.get("costaware.sensors.spend_cap")
    return spend_cap is not None and isinstance(task, spend_cap.SpendCapSensor)


@dataclass(frozen=True, slots=True)
class _Unseen:
    """A task's non-default ledger connection that a run's end cannot use on this machine."""

    conn_id: str
    #: ``AIRFLOW_CONN_<ID>`` where it is set but Airflow cannot read it; None where nothing names it here.
    unreadable_variable: str | None
    #: Where a task without the connection held instead: ``COSTAWARE_LEDGER_URL`` or the embedded file.
    fallback_url: str


def _in_each_ledger(
    conn_ids: set[str] | frozenset[str],
    work: Callable[[Any], None],
    on_error: Callable[[Exception], None],
    *,
    in_task_process: bool,
    what: str,
    done: str,
) -> None:
    """Run ``work`` on the ledger of each of ``conn_ids``, ``on_error`` where it raises; never raises.

    Then say, for each connection this machine lacks, whether its ``what`` were reached all the same: its
    fallback database is the ledger of another connection searched in the same pass (the default one,
    missing here too), where ``work`` ``done`` them; or not, and they are left open.
    """
    searched: dict[str, str] = {}  # URL -> the connection through which it was searched
    unseen: list[_Unseen] = []
    for conn_id in sorted(conn_ids):
        try:
            found = _existing_ledger(conn_id, in_task_process=in_task_process)
            if isinstance(found, _Unseen):
                unseen.append(found)
                continue
            url, ledger = found
            if ledger is not None:  # None: a SQLite file not created yet, which holds nothing
                work(ledger)
            searched.setdefault(url, conn_id)
        except Exception as e:
            on_error(e)
    for missing in unseen:
        _say_unseen(missing, searched.get(missing.fallback_url), what, done)


def _existing_ledger(conn_id: str, *, in_task_process: bool) -> tuple[str, Any | None] | _Unseen:
    """The URL and ledger of ``conn_id``; the ledger None where it is a SQLite file not created yet.

    A run's end is heard on the scheduler or the API server: opening the hook's fallback there created an
    empty ``$AIRFLOW_HOME/costaware/ledger.db``, which the killed tries and spool drains of that machine
    then took for the workers' ledger (see :func:`costaware.ledger_spool.workers_ledger`).

    Outside a task process (a run's end), :class:`_Unseen` where ``conn_id`` is not the default and has no
    connection on this machine (or one Airflow cannot read): the hook's fallback (``COSTAWARE_LEDGER_URL``
    or the embedded file) is not opened in its stead, as it may be another database than the workers'. A
    task's own worker opens the ledger as its tasks did (a spend gate there held in that same fallback).
    """
    from airflow.sdk.exceptions import AirflowNotFoundException

    from costaware.adapters.ledger.engine import missing_sqlite_file
    from costaware.glue import DEFAULT_LEDGER_CONN_ID
    from costaware.hooks.ledger import CostLedgerHook
    from costaware.settings import ledger_url

    hook = CostLedgerHook(conn_id)
    if conn_id != DEFAULT_LEDGER_CONN_ID and not in_task_process:
        try:
            hook.get_connection(conn_id)
        except AirflowNotFoundException:
            return _Unseen(conn_id, hook.unreadable_variable(), ledger_url())
    url = hook.get_url()
    if missing_sqlite_file(url) is not None:
        return url, None
    return url, hook.get_conn()


def _say_unseen(missing: _Unseen, fallback_searched_as: str | None, what: str, done: str) -> None:
    """Log what a run's end ``done`` to ``what`` of a ledger connection this machine lacks, and the fix."""
    from costaware.adapters.ledger.engine import safe_url

    conn_id, variable = missing.conn_id, f"AIRFLOW_CONN_{missing.conn_id.upper()}"
    holds = what == "holds"  # only holds expire, and have a command to give them back
    left_open = "left open (they expire at their TTL)" if holds else "left open"
    release = (
        ", or release them with `costaware budget release --holder ... --ledger-url ...`" if holds else ""
    )
    if missing.unreadable_variable is not None:
        log.error(
            "costaware: %s is set on this machine but Airflow cannot read it as a connection: the run's %s "
            "in ledger %r are %s, not looked for in another ledger; fix it here as the workers have it "
            "(a URI such as postgresql://user:password@host:5432/costaware, or a JSON object with conn_type, "
            "host, login, ...)%s",
            variable,
            what,
            conn_id,
            left_open,
            release,
        )
    elif fallback_searched_as is not None:
        # The database a worker without the connection held in: what is there was reached all the same.
        log.warning(
            "costaware: the ledger connection %r does not exist on this machine: the run's %s in %s "
            "(COSTAWARE_LEDGER_URL or the embedded SQLite file, where a task without that connection "
            "holds), if any, were %s through the ledger connection %r, the same database here; any the "
            "workers have through %r in another database are %s: set %s here as the workers have it%s",
            conn_id,
            what,
            safe_url(missing.fallback_url),
            done,
            fallback_searched_as,
            conn_id,
            left_open,
            variable,
            release,
        )
    else:
        log.error(
            "costaware: the ledger connection %r does not exist on this machine: the run's %s in it are %s, "
            "not looked for in another ledger; set %s here as the workers have it%s",
            conn_id,
            what,
            left_open,
            variable,
            release,
        )


def in_own_thread(work: Callable[[], Any], *, name: str, wait_seconds: float = 5.0) -> None:
    """Run ``work`` in a thread of its own and wait for it at most ``wait_seconds``.

    In the scheduler or the API server, a ledger's connection look-up opens Airflow's thread-local session:
    in the caller's thread that committed (or rolled back) and closed the caller's transaction (the
    scheduler's batch of state changes). A slower ledger finishes after, without holding it.
    """
    import threading

    worker = threading.Thread(target=work, name=name, daemon=True)
    worker.start()
    worker.join(timeout=wait_seconds)
