"""Remote training jobs whose task ended with nobody left to follow them: found, stopped and billed.

A deferred ``RemoteTrainingOperator`` wait whose trigger the scheduler's timeout check took away is followed
only by the task's ``__fail__`` resume or its retry. A task ended before either runs (a person's mark
failed or success, its DAG run marked failed, which skips its unfinished tasks, or its ``dagrun_timeout``)
left its job running, unbilled, to its own time limit. Each such wait kept its attempt state in the task's
XCom ``costaware_wait_state``: a task that ended with the job of that state not in the ledger is one of
them. Its job is stopped and billed by the trigger's own kill path
(:meth:`~costaware.triggers.remote_training.RemoteTrainingJobTrigger.stop_and_bill`, cause ``unwatched``),
under the same ledger keys as the resume, a retry or the trigger: whichever comes second finds the entry and
bills nothing again. The listener runs it at a run's end and at a person's mark of a task
(:mod:`costaware.plugins.listener`), for waits whose trigger was taken away only (a wait whose trigger still
ran is that trigger's kill's); ``costaware jobs reconcile`` runs it for any ended task (``--dry-run`` lists
them), ``TRIGGER_SETTLE_SECONDS`` after the task's end where its trigger still ran.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.errors import StopRefused
from costaware.core.ledger import utcnow
from costaware.glue import DEFAULT_AWS_CONN_ID, DEFAULT_LEDGER_CONN_ID
from costaware.training.remote import aware_utc as aware_utc  # re-exported: the CLI reads it here

#: What the entry of a job stopped here says stopped it.
RECONCILE_WHY = "its task ended with no resume or retry left to follow it"
#: Airflow's ``next_method`` of a task whose wait ended without an event: the scheduler's timeout check (or
#: a failed trigger) took its trigger away, and no ``on_kill`` comes. ``BaseOperator``'s
#: ``TRIGGER_FAIL_REPR``, copied: the listener reads it without importing the task SDK.
TRIGGER_TAKEN_AWAY = "__fail__"
#: How long after a task ended whose trigger may still run its job is left to that trigger: a person's
#: mark of a deferred task cancels the trigger, whose ``on_kill`` (or its check of a cancel past the
#: deadline) stops and bills the job within ``KILL_WAIT_SECONDS`` and the backend's calls. Stopped here too
#: meanwhile, the job could be billed twice, each stop before the other's entry was there.
TRIGGER_SETTLE_SECONDS = 300.0

#: The jobs this process is stopping and billing now: a person's mark of a run reports its killed tasks and
#: the run's end at once, and two threads on one job could each bill it before the other's entry was there.
_UNDER_WAY: set[tuple[str, str]] = set()
_UNDER_WAY_LOCK = threading.Lock()


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


@dataclass(frozen=True)
class FreedHold:
    """What :func:`free_paid_hold` did with a hold, or would do with it (``dry_run``).

    ``closed_here``: it released the hold, freeing ``freed_usd`` (the unpaid part; the ``paid_usd`` its
    entries paid from it stays spent); False where a settle, release or new hold closed it a moment before
    (``status`` says which; nothing freed). A dry run's ``freed_usd`` is what releasing it would free.
    """

    paid_usd: Decimal
    freed_usd: Decimal
    reservation: Any  # as the release left it; a dry run's as it was read, still open
    closed_here: bool
    dry_run: bool = False

    @property
    def status(self) -> str:
        return str(self.reservation.status)

    def said(self, why: str, *, paid_by: str = "its entries") -> str:
        """What freeing the hold did, in words, then ``why``: a run's end and ``jobs reconcile`` say it alike.

        A dry run says the same in the conditional (``would release ...``), so that the two cannot drift.
        ``paid_by``: who paid what stays spent (``its job's entries``).
        """
        from costaware.core.money import format_usd_exact

        hold = self.reservation
        if self.dry_run:
            released, stays = "would release", "would stay"
        elif not self.closed_here:
            return f"the hold of {hold.holder} was {self.status} meanwhile: nothing freed ({why})"
        else:
            released, stays = "released", "stays"
        budgets = ", ".join(hold.budgets)
        freed = format_usd_exact(self.freed_usd)
        if self.paid_usd > 0:  # part of it spent: only the rest is freed
            return (
                f"{released} the hold of {hold.holder} in {budgets}, freeing {freed} (the "
                f"{format_usd_exact(self.paid_usd)} {paid_by} paid from it {stays} spent): {why}"
            )
        return f"{released} {freed} reserved in {budgets} for {hold.holder}: {why}"


def free_paid_hold(ledger: Any, hold: Any, *, dry_run: bool = False) -> FreedHold:
    """Release the open ``hold`` whose consumer ended, saying what it frees: only its unpaid part.

    ``dry_run``: release nothing, and say what releasing it would free.

    Released, not settled at what its entries paid so far: an entry still on its way (the spool, a late
    listener) then finds the hold, pays from it and is said over its cap where it is; a hold settled at the
    part paid so far took no later entry, recorded alone and silently past the cap. The entries paid from
    it count as spent either way. A hold a settle, release or new hold closed meanwhile is left as it is,
    and said so: the release is a compare-and-set, and what was paid is read in its transaction.
    """
    if dry_run:  # what the release would do: read only
        paid_usd = ledger.paid_from([hold.id]).get(hold.id, Decimal(0))
        return FreedHold(
            paid_usd, max(hold.usd - paid_usd, Decimal(0)), hold, closed_here=False, dry_run=True
        )
    released = ledger.release_hold(hold.id)
    if not released.released_here:
        return FreedHold(Decimal(0), Decimal(0), released.reservation, closed_here=False)
    # Its amount as released (a grow since it was listed counts), less what was paid: as Ledger.unpaid says.
    unpaid_usd = max(released.reservation.usd - released.paid_usd, Decimal(0))
    return FreedHold(released.paid_usd, unpaid_usd, released.reservation, closed_here=True)


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


def left_to_triggers(waits: list[EndedWait]) -> tuple[list[EndedWait], list[EndedWait]]:
    """``waits`` split: those to stop and bill now, and those their trigger may still be billing (clock)."""
    now = utcnow()
    later = [w for w in waits if w.left_to_its_trigger(now)]
    return [w for w in waits if w not in later], later


def billed_usd(ledger: Any, wait: EndedWait) -> Decimal | None:
    """What the ledger holds for the job ``wait`` watched, from its run, else None (it was never billed).

    Any entry naming the job counts that the resume, a retry, the trigger or this module wrote since the
    attempt's submit (an earlier run under the same name, lost by its backend, was billed before it).
    """
    from costaware.training.attempt_effects import task_attempt_entries
    from costaware.training.attempts import AttemptState
    from costaware.training.remote import job_of_attempt_note

    if wait.current is None:
        return None
    plan = AttemptState.from_json(dict(wait.state)).plan
    since = _submitted_at(wait)
    billed = [
        Decimal(str(row["usd"]))
        for row in task_attempt_entries(ledger, plan)
        if job_of_attempt_note(str(row["note"] or "")) == wait.job_id
        and (since is None or aware_utc(row["incurred_at"]) >= since)
    ]
    return sum(billed, Decimal(0)) if billed else None


def stop_and_bill(
    wait: EndedWait,
    ledger: Any,
    *,
    ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
    aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
    wait_seconds: float | None = None,
) -> Decimal | None:
    """Stop ``wait``'s job where it runs, bill it in ``ledger`` and settle the task's hold (backend IO).

    The trigger's kill path does it, as the last try's resume would have: ``unwatched``, to the end of the
    job's grace period where it has not ended within ``wait_seconds`` (default the kill's). Returns what the
    ledger holds for the job after it (None: not billed, said in the log).

    Raises:
        StopRefused: the backend refused the stop (or did not answer it) and the job was not seen to end:
            nothing is billed and the task's hold stays held; the message says to stop the job by hand.
    """
    from costaware.training.attempts import AttemptState
    from costaware.triggers.remote_training import KILL_WAIT_SECONDS, RemoteTrainingJobTrigger

    state = AttemptState.from_json(dict(wait.state))
    if state.current is None:
        return None
    trigger = RemoteTrainingJobTrigger(
        backend=state.plan.backend,
        backend_options=dict(state.plan.backend_options),
        job_id=state.current.job_id,
        state=state.to_json(),
        ledger_conn_id=ledger_conn_id,
        aws_conn_id=aws_conn_id,
    )
    refused = trigger.stop_and_bill(
        wait_seconds=KILL_WAIT_SECONDS if wait_seconds is None else wait_seconds,
        ask_state=False,
        cause="unwatched",
        why=f"{RECONCILE_WHY} (task {wait.task_state})",
        ledger=ledger,
    )
    if refused is not None:
        raise StopRefused(
            f"stop refused ({refused}): stop job {wait.job_id} on {wait.backend} by hand; it is not billed "
            "and the task's hold stays held until `costaware jobs reconcile` bills it"
        )
    return billed_usd(ledger, wait)


def task_ledger_conn_ids(waits: list[EndedWait]) -> dict[tuple[str, str], str]:
    """The ledger connection each wait's task bills, by ``(dag_id, task_id)`` (metadata database IO).

    Read from its DAG's latest serialized definition, as the listener reads a killed try's (``ledger_conn_id``
    is a template field). A DAG or task not found there (deleted since, or never parsed) is left out: its
    task is taken to bill the ledger given.
    """
    from airflow.models.serialized_dag import SerializedDagModel

    from costaware.glue import ledger_conn_id_of

    conn_ids: dict[tuple[str, str], str] = {}
    for dag_id in sorted({wait.dag_id for wait in waits}):
        try:
            dag = SerializedDagModel.get_dag(dag_id)
        except Exception:  # no serialized_dag table (a bare test database), or no such DAG any more
            dag = None
        if dag is None:
            continue
        for wait in (w for w in waits if w.dag_id == dag_id):
            try:
                conn_ids[(dag_id, wait.task_id)] = ledger_conn_id_of(dag.get_task(wait.task_id))
            except Exception:  # a task removed from the DAG since
                continue
    return conn_ids


def is_ledger_of(ledger: Any, conn_id: str) -> bool:
    """Whether connection ``conn_id`` names the database ``ledger`` is open on (False: not known here)."""
    from sqlalchemy.engine import make_url

    from costaware.hooks.ledger import CostLedgerHook

    try:
        hook = CostLedgerHook(conn_id)
        hook.get_connection(conn_id)  # missing here, the hook's fallback is some other ledger
        theirs = make_url(hook.get_url())
    except Exception:  # a connection missing on this machine
        return False
    return _database_of(theirs) == _database_of(ledger.engine.url)


#: The port a URL without one connects to.
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433}


def _database_of(url: Any) -> tuple[Any, ...]:
    """What names the database a SQLAlchemy URL opens, however written: not its driver, nor its password.

    A SQLite file by its resolved path (``a/../b.db`` is ``b.db``), a server's by host, port and name.
    """
    from pathlib import Path

    backend = url.get_backend_name()
    if backend == "sqlite":
        return (backend, str(Path(url.database).resolve()) if url.database else ":memory:")
    port = url.port or _DEFAULT_PORTS.get(backend)
    return (backend, (url.host or "").lower(), port, url.database, url.username)


def billed_in_its_ledger(wait: EndedWait, conn_id: str) -> bool:
    """Whether the job of ``wait`` is billed in the ledger ``conn_id`` names, where this machine sees it."""
    from costaware.ledger_spool import workers_ledger

    try:
        return billed_usd(workers_ledger(conn_id), wait) is not None
    except Exception:  # not seen here, or not readable: its own reconcile says
        return False


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


def _submitted_at(wait: EndedWait) -> datetime | None:
    from costaware.core.series import parse_instant

    submitted = (wait.current or {}).get("submitted_at")
    return parse_instant(submitted, name="submitted_at") if submitted else None


def unfollowed(waits: list[EndedWait]) -> list[EndedWait]:
    """The waits of ``waits`` with a job whose trigger Airflow took away: nothing but a reconcile bills it.

    A wait whose trigger still ran when the task ended is that trigger's to stop and bill (its on_kill):
    both at once billed the job twice. `costaware jobs reconcile` takes one its trigger left unbilled.
    """
    return [w for w in waits if w.current is not None and w.taken_away]


def reconcile_ended_run(
    dag_id: str,
    run_id: str,
    ledger_conn_ids: Mapping[str, str],
    aws_conn_ids: Mapping[str, str | None],
    *,
    log: Any,
    waits: list[EndedWait] | None = None,
    release_hold: Callable[[EndedWait, str], None] | None = None,
) -> int:
    """Stop and bill the unbilled jobs of a run's ended tasks (the run-end listener's); never raises.

    ``waits``: the run's, read already (None: read here, in a session of its own). Each task's job is
    billed in the ledger its task names (``ledger_conn_ids``, by task id; the default elsewhere), opened as
    a drain opens it here: a ledger this machine does not see is left to ``costaware jobs reconcile`` where
    it is, and said; with the task's AWS connection its wait kept (else ``aws_conn_ids``'). The billing
    settles the task's hold; a job not billed keeps it held (it may run on). ``release_hold(wait, ledger
    conn id)``: called for a job found billed already, whose hold the run's end left to this. Returns how
    many jobs were stopped and billed.
    """
    try:
        if waits is None:
            waits = ended_waits(dag_id=dag_id, run_id=run_id)
    except Exception as e:
        log.warning(
            "costaware: could not read the remote training waits of run %s/%s (%s): `costaware jobs "
            "reconcile --dag-id %s` lists the jobs its ended tasks left running",
            dag_id,
            run_id,
            e,
            dag_id,
        )
        return 0
    billed = 0
    for wait in unfollowed(waits):
        key = (wait.task, wait.job_id)
        with _UNDER_WAY_LOCK:
            if key in _UNDER_WAY:
                continue  # another thread of this process has it
            _UNDER_WAY.add(key)
        try:
            outcome = _reconcile_one(wait, ledger_conn_ids, aws_conn_ids, dag_id=dag_id, log=log)
            billed += outcome == "billed"
            if outcome == "found" and release_hold is not None:
                release_hold(wait, ledger_conn_ids.get(wait.task_id, DEFAULT_LEDGER_CONN_ID))
        finally:
            with _UNDER_WAY_LOCK:
                _UNDER_WAY.discard(key)
    return billed


def _reconcile_one(
    wait: EndedWait,
    ledger_conn_ids: Mapping[str, str],
    aws_conn_ids: Mapping[str, str | None],
    *,
    dag_id: str,
    log: Any,
) -> str:
    """:func:`reconcile_ended_run` for one wait: ``billed`` here, ``found`` billed before, or ``unbilled``."""
    from costaware.ledger_spool import workers_ledger

    conn_id = ledger_conn_ids.get(wait.task_id, DEFAULT_LEDGER_CONN_ID)
    try:
        ledger = workers_ledger(conn_id)
        if billed_usd(ledger, wait) is not None:
            return "found"
        log.warning(
            "costaware: job %s on %s of task %s (%s) has no ledger entry and nothing follows it: stopping "
            "and billing it",
            wait.job_id,
            wait.backend,
            wait.task,
            wait.task_state,
        )
        usd = stop_and_bill(
            wait,
            ledger,
            ledger_conn_id=conn_id,
            aws_conn_id=wait.aws_conn_id(aws_conn_ids.get(wait.task_id, DEFAULT_AWS_CONN_ID)),
        )
    except StopRefused as e:
        log.error("costaware: job %s of task %s is not billed: %s", wait.job_id, wait.task, e)
        return "unbilled"
    except Exception as e:
        usd = None
        log.error("costaware: stopping and billing job %s failed: %s", wait.job_id, e)
    if usd is None:
        log.error(
            "costaware: job %s on %s of task %s is not billed: stop it on its backend by hand, or run "
            "`costaware jobs reconcile --dag-id %s` where its ledger is seen",
            wait.job_id,
            wait.backend,
            wait.task,
            dag_id,
        )
        return "unbilled"
    log.warning("costaware: job %s stopped and billed, $%s", wait.job_id, usd)
    return "billed"
