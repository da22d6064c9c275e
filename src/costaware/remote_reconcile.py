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

The waits are read in :mod:`.remote_reconcile_waits`, holds freed in :mod:`.remote_reconcile_holds`, and the
ledger a task bills found in :mod:`.remote_reconcile_ledgers`; their public names stay importable from here,
where the listener, the CLI and tests read (and patch) them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.errors import StopRefused
from costaware.core.ledger import utcnow
from costaware.glue import DEFAULT_AWS_CONN_ID, DEFAULT_LEDGER_CONN_ID
from costaware.remote_reconcile_holds import FreedHold as FreedHold
from costaware.remote_reconcile_holds import free_paid_hold as free_paid_hold
from costaware.remote_reconcile_ledgers import is_ledger_of as is_ledger_of
from costaware.remote_reconcile_ledgers import task_ledger_conn_ids as task_ledger_conn_ids
from costaware.remote_reconcile_waits import TRIGGER_SETTLE_SECONDS as TRIGGER_SETTLE_SECONDS
from costaware.remote_reconcile_waits import TRIGGER_TAKEN_AWAY as TRIGGER_TAKEN_AWAY
from costaware.remote_reconcile_waits import EndedWait
from costaware.remote_reconcile_waits import ended_waits as ended_waits  # looked up here: tests patch it
from costaware.remote_reconcile_waits import known_dag_ids as known_dag_ids
from costaware.remote_reconcile_waits import may_keep_a_wait as may_keep_a_wait
from costaware.remote_reconcile_waits import still_ended_as_read as still_ended_as_read
from costaware.training.remote import aware_utc as aware_utc  # re-exported: the CLI reads it here

#: What the entry of a job stopped here says stopped it.
RECONCILE_WHY = "its task ended with no resume or retry left to follow it"

#: The jobs this process is stopping and billing now: a person's mark of a run reports its killed tasks and
#: the run's end at once, and two threads on one job could each bill it before the other's entry was there.
_UNDER_WAY: set[tuple[str, str]] = set()
_UNDER_WAY_LOCK = threading.Lock()


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
    billed = [Decimal(str(row["usd"])) for row in _job_entries(ledger, wait)]
    return sum(billed, Decimal(0)) if billed else None


def _job_entries(ledger: Any, wait: EndedWait) -> list[dict[str, Any]]:
    """The entries naming ``wait``'s job written since the attempt's submit (none: no job).

    Not one whose note marks another run of the job's name: an earlier run's bill written after this
    submit (its kill's, a cleared task's new try took the name) read as this job's, which was left running.
    """
    from costaware.training.attempt_holds import task_attempt_entries
    from costaware.training.attempts import AttemptState
    from costaware.training.remote import job_of_attempt_note, other_run

    if wait.current is None:
        return []
    plan = AttemptState.from_json(dict(wait.state)).plan
    since = _submitted_at(wait)
    run_token = str(wait.current.get("run_token") or "")
    return [
        row
        for row in task_attempt_entries(ledger, plan)
        if job_of_attempt_note(str(row["note"] or "")) == wait.job_id
        and (since is None or aware_utc(row["incurred_at"]) >= since)
        and not other_run(run_token, str(row["note"] or ""))
    ]


def entry_giving_no_end(ledger: Any, wait: EndedWait) -> dict[str, Any] | None:
    """The entry of ``wait``'s job that is no proof it was billed in full; None where one is, or none is.

    An entry proves it where its note gives the job's end, where a stop wrote it (billed to the stop,
    which settles the task's hold), or where its job ended on its own with no end from its backend (a
    SageMaker job failed before it started, a Failed pod whose container never ran): billed in full by the
    job's own billable time, keyed ``ended=none`` with the job's cause, its note has no end to give. One of
    none of these (written before notes gave an end, or its note cut) may bill part of the run only: the
    spool's drain keeps a bill beside such a row for a person, and a reconcile keeps the task's hold for
    one. As the drain, a SageMaker job's entry is never that (its names are never reused, its bill is the
    backend's billable time). The job's entries from its run, as :func:`billed_usd` reads. Where several
    (a run billed again under its end by a later try), one that is proof is enough.
    """
    from costaware.training.attempt_duplicates import STOP_CAUSES
    from costaware.training.attempts import AttemptState
    from costaware.training.remote import attempt_key, attempt_uid, end_of_attempt_note

    rows = _job_entries(ledger, wait)
    if not rows or wait.backend == "sagemaker":
        return None
    identity = AttemptState.from_json(dict(wait.state)).plan.identity
    # The billing path's key of a job its backend gave no end for: not an end lost from an older note.
    ended_unknown = attempt_uid(attempt_key(identity, wait.job_id, None))
    if any(
        row["cause"] in STOP_CAUSES
        or end_of_attempt_note(str(row["note"] or ""))
        or (row["entry_uid"] == ended_unknown and row["cause"])
        for row in rows
    ):
        return None
    return dict(rows[0])


def stop_and_bill(
    wait: EndedWait,
    ledger: Any,
    *,
    ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
    aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
    wait_seconds: float | None = None,
    spool_reaches_the_ledger: bool = False,
) -> Decimal | None:
    """Stop ``wait``'s job where it runs, bill it in ``ledger`` and settle the task's hold (backend IO).

    The trigger's kill path does it, as the last try's resume would have: ``unwatched``, to the end of the
    job's grace period where it has not ended within ``wait_seconds`` (default the kill's). Returns what the
    ledger holds for the job after it (None: not billed, said in the log). ``spool_reaches_the_ledger``:
    ``ledger`` is the one this machine's drain of ``ledger_conn_id`` opens, so an egress it would not take
    waits in the spool for that drain; else it is logged for a person to record.

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
        spool_reaches_the_ledger=spool_reaches_the_ledger,
    )
    if refused is not None:
        raise StopRefused(
            f"stop refused ({refused}): stop job {wait.job_id} on {wait.backend} by hand; it is not billed "
            "and the task's hold stays held until `costaware jobs reconcile` bills it"
        )
    return billed_usd(ledger, wait)


def billed_in_its_ledger(wait: EndedWait, conn_id: str) -> bool:
    """Whether the job of ``wait`` is billed in the ledger ``conn_id`` names, where this machine sees it."""
    from costaware.ledger_spool import workers_ledger

    try:
        return billed_usd(workers_ledger(conn_id), wait) is not None
    except Exception:  # not seen here, or not readable: its own reconcile says
        return False


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
    """:func:`reconcile_ended_run` for one wait: ``billed`` here, ``found`` billed before, or ``unbilled``.

    ``unsure``: its entry gives no job end (:func:`entry_giving_no_end`): not stopped nor billed again,
    and its hold is not freed as if the job were billed in full.
    """
    from costaware.ledger_spool import workers_ledger

    conn_id = ledger_conn_ids.get(wait.task_id, DEFAULT_LEDGER_CONN_ID)
    try:
        ledger = workers_ledger(conn_id)
        if billed_usd(ledger, wait) is not None:
            unsure = entry_giving_no_end(ledger, wait)
            if unsure is None:
                return "found"
            log.warning(
                "costaware: job %s on %s of task %s is in the ledger by entry %s only, whose note gives no "
                "job end (written before notes gave it, or cut): it may bill part of the run only, so the "
                "task's hold stays held. Check what the job ran, then `costaware budget release --holder %s`",
                wait.job_id,
                wait.backend,
                wait.task,
                unsure["entry_uid"],
                wait.task,
            )
            return "unsure"
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
            # Opened as the drain of conn_id opens it here: an egress it refused waits for that drain.
            spool_reaches_the_ledger=True,
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
