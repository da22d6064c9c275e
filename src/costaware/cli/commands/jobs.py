"""``costaware jobs reconcile``: remote training jobs of ended tasks that no ledger entry bills.

A deferred remote training whose wait's trigger Airflow's timeout check took away is followed only by the
task's resume or its retry; a task ended before those (a person's mark, its run marked failed or timed out)
left its job running and unbilled. This lists those jobs from Airflow's metadata database and the ledger,
and stops and bills them (see :mod:`costaware.remote_reconcile`).
"""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal
from typing import Any

from costaware.cli.output import emit
from costaware.core.errors import CostawareError

HEADERS = ["task", "task_state", "backend", "job", "attempt", "market", "submitted_at", "result"]
#: The database URL Airflow 3's task supervisor gives a task (``block_orm_access``), copied: not imported
#: from the task SDK, which this host's Airflow need not have.
_BLOCKED_DATABASE_URL = "airflow-db-not-allowed:"


def reconcile(args: argparse.Namespace) -> int:
    """List the unbilled jobs of ended tasks; stop and bill them unless ``--dry-run``; 1 when one failed.

    Raises:
        CostawareError: Airflow's metadata database cannot be read, the ledger cannot be opened, or
            ``--dag-id`` names no DAG that database knows.
    """
    from costaware.cli.arguments import check_range, open_ledger
    from costaware.core.errors import StopRefused
    from costaware.glue import DEFAULT_LEDGER_CONN_ID
    from costaware.remote_reconcile import (
        TRIGGER_SETTLE_SECONDS,
        billed_in_its_ledger,
        billed_usd,
        ended_waits,
        entry_giving_no_end,
        is_ledger_of,
        left_to_triggers,
        stop_and_bill,
        task_ledger_conn_ids,
    )

    check_range("--wait-seconds", args.wait_seconds, low=0, high=600)
    waits = _ended_waits(args.dag_id, ended_waits)
    if args.dag_id is not None and not waits:
        _check_dag_is_known(args.dag_id)
    with_job = [w for w in waits if w.current is not None]
    # No ledger is needed where no ended task left a job (a new deployment's scheduled reconcile).
    ledger = open_ledger(args, reading=True, read_only=args.dry_run) if with_job else None
    # Without --ledger-url the ledger is default_ledger_url()'s, read in the order this machine's drain of
    # costaware_ledger (the bill's connection) reads it: an egress it refused waits in the spool for that
    # drain. A --ledger-url may name another ledger than that drain's: logged for a person instead.
    spool_reaches_the_ledger = getattr(args, "ledger_url", None) is None
    # A task whose DAG bills another ledger is billed there only: read here it looked unbilled, billed twice.
    conn_ids = task_ledger_conn_ids(with_job) if with_job else {}
    elsewhere: dict[str, str] = {}  # by task: the ledger connection it bills, not this one
    unreadable: dict[str, str] = {}  # by task: why its wait state cannot be read
    # By task: the job's entry that gives no end, no proof it billed the whole run: its hold is kept.
    unsure: dict[str, dict[str, Any]] = {}
    not_in_ledger, broken, billed_here = [], [], []
    is_this_ledger: dict[str, bool] = {}  # by connection: each looked up once, not once a wait

    def bills_elsewhere(conn_id: str) -> bool:
        if conn_id == DEFAULT_LEDGER_CONN_ID:
            return False
        if conn_id not in is_this_ledger:
            is_this_ledger[conn_id] = is_ledger_of(ledger, conn_id)
        return not is_this_ledger[conn_id]

    for wait in with_job:
        conn_id = conn_ids.get((wait.dag_id, wait.task_id), DEFAULT_LEDGER_CONN_ID)
        try:
            if bills_elsewhere(conn_id):
                if not billed_in_its_ledger(wait, conn_id):
                    elsewhere[wait.task] = conn_id
            elif billed_usd(ledger, wait) is None:
                not_in_ledger.append(wait)
            elif (no_end := entry_giving_no_end(ledger, wait)) is not None:
                unsure[wait.task] = no_end
            else:
                billed_here.append(wait)
        except (KeyError, TypeError, ValueError) as e:  # a state an older or newer version kept
            unreadable[wait.task] = f"{type(e).__name__}: {e}"
            broken.append(wait)
    unbilled, settling = left_to_triggers(not_in_ledger)
    others = [w for w in with_job if w.task in elsewhere or w.task in unsure]
    rows: list[list[Any]] = []
    failed = len(broken)
    for wait in [*unbilled, *settling, *others, *broken]:
        if wait in broken:
            result = (
                f"FAILED: its wait state cannot be read ({unreadable[wait.task]}): look for the task's jobs "
                f"on {wait.backend or 'its backend'} by hand and stop any still running"
            )
        elif wait in settling:
            minutes = f"{TRIGGER_SETTLE_SECONDS / 60:.0f}"
            result = (
                f"left to its trigger: the task ended less than {minutes} minutes ago, and its trigger's "
                "kill stops and bills the job; run again after that"
            )
        elif wait.task in elsewhere:
            result = f"bills in {elsewhere[wait.task]}: run with its --ledger-url"
        elif wait.task in unsure:
            result = (
                f"unsure: its entry {unsure[wait.task]['entry_uid']} gives no job end (written before notes "
                "gave it, or cut), so it may bill part of the run only: the task's hold stays held. Check "
                f"what the job ran on {wait.backend}, then `costaware budget release --holder {wait.task}` "
                "(or settle it)"
            )
        elif args.dry_run:
            result = "unbilled (dry run: not stopped)"
        else:
            print(f"costaware: stopping and billing job {wait.job_id} on {wait.backend} ...", file=sys.stderr)
            by_hand = f"stop job {wait.job_id} on {wait.backend} by hand"
            try:
                usd = stop_and_bill(
                    wait,
                    ledger,
                    wait_seconds=args.wait_seconds,
                    aws_conn_id=wait.aws_conn_id(),
                    spool_reaches_the_ledger=spool_reaches_the_ledger,
                )
            except StopRefused as e:  # not billed, its hold held: listed again until it is
                usd, result = None, f"FAILED: {e}"
            except Exception as e:  # said per job; the others are reconciled all the same
                usd, result = None, f"FAILED ({type(e).__name__}: {e}): {by_hand}"
            else:
                result = f"FAILED (see the log above): {by_hand}"
            if usd is None:
                failed += 1
            else:
                # A job that had ended meanwhile was only billed: its entry's note says which.
                result = f"billed ${usd.quantize(Decimal('0.000001'))} (stopped where it still ran)"
        current = wait.current or {}
        rows.append(
            [
                wait.task,
                wait.task_state,
                wait.backend,
                wait.job_id,
                current.get("attempt", ""),
                current.get("market", ""),
                current.get("submitted_at", ""),
                result,
            ]
        )
    # After the billing: a hold that cannot be freed (a ledger error) leaves no job running unbilled.
    failed += _free_kept_holds(ledger, billed_here, dry_run=args.dry_run)
    if not rows and args.format == "table":
        scope = f" of DAG {args.dag_id!r}" if args.dag_id else ""
        if with_job:
            print(
                f"nothing to reconcile: the jobs of the {len(with_job)} ended task(s){scope} with a remote "
                "training wait are in the ledger"
            )
        else:
            print(f"nothing to reconcile: no ended task{scope} left a remote training job")
        return 1 if failed else 0
    emit(rows, args.format, headers=HEADERS)
    if args.dry_run and unbilled:
        print(
            f"costaware: {len(unbilled)} job(s) of ended tasks have no ledger entry; run without --dry-run "
            "to stop and bill them",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _free_kept_holds(ledger: Any, waits: list[Any], *, dry_run: bool) -> int:
    """Free the holds still open of ended tasks whose jobs ``ledger`` bills already; how many failed.

    A run's end keeps a remote training's hold where it could not tell its job billed (its waits not read):
    nothing else frees it before its TTL, and meanwhile the money is reserved for a job that has ended. Each
    is said on stderr (a dry run says what it would free); one that fails is said and the others go on.
    """
    from costaware.remote_reconcile import still_ended_as_read

    failed = 0
    for wait in waits:
        if wait.ended_at is None:
            continue  # a hold a new try made since (cleared meanwhile) cannot be told from a kept one
        try:
            for hold in _kept_holds(ledger, wait):
                if dry_run:
                    print(
                        f"{_free_kept_hold(ledger, hold, wait, dry_run=True)} (dry run: nothing freed)",
                        file=sys.stderr,
                    )
                # A cleared task's new try gets the kept hold back as its own: read again just before.
                elif not still_ended_as_read(wait):
                    print(
                        f"costaware: kept the hold of {wait.task}: the task was cleared or ran again since "
                        "it was read, and its new try holds it now",
                        file=sys.stderr,
                    )
                else:
                    print(_free_kept_hold(ledger, hold, wait), file=sys.stderr)
        except Exception as e:  # said per task; the other holds are freed all the same
            failed += 1
            print(
                f"costaware: FAILED to free the hold of {wait.task}, kept at its run's end though its job "
                f"{wait.job_id} is billed ({type(e).__name__}: {e}): run again, or `costaware budget "
                f"release --holder {wait.task}`",
                file=sys.stderr,
            )
    return failed


def _kept_holds(ledger: Any, wait: Any) -> list[Any]:
    """The open holds of ``wait``'s task made before it ended: those its run's end kept."""
    from costaware.remote_reconcile import aware_utc

    return [
        hold
        for hold in ledger.open_reservations(holder_prefix=f"{wait.dag_id}/{wait.run_id}/{wait.task_id}/")
        if hold.holder == wait.task and aware_utc(hold.created_at) <= aware_utc(wait.ended_at)
    ]


def _free_kept_hold(ledger: Any, hold: Any, wait: Any, *, dry_run: bool = False) -> str:
    """Close ``hold``, kept for ``wait``'s billed job: what it says of it (a dry run: what it would do).

    Released: only its unpaid part is freed, what the job's entries paid stays spent (see
    :func:`~costaware.remote_reconcile.free_paid_hold`).
    """
    from costaware.remote_reconcile import free_paid_hold

    why = f"it was kept at its run's end, as its job {wait.job_id} is billed"
    said = free_paid_hold(ledger, hold, dry_run=dry_run).said(why, paid_by="its job's entries")
    return f"costaware: {said}"


def _check_dag_is_known(dag_id: str) -> None:
    """Refuse a ``--dag-id`` that Airflow's metadata database knows no DAG or run of (a typo).

    Raises:
        CostawareError: naming it, with the closest known DAG id.
    """
    from costaware.cli.arguments import closest_dag
    from costaware.remote_reconcile import known_dag_ids

    known = known_dag_ids()
    if dag_id in known:
        return
    hint, listed = closest_dag(dag_id, known)
    raise CostawareError(
        f"--dag-id {dag_id!r}: Airflow's metadata database knows no such DAG{hint} (DAGs known: "
        f"{listed or 'none'}); give a DAG id as `airflow dags list` shows it"
    )


def _ended_waits(dag_id: str | None, read: Any) -> list[Any]:
    """The ended tasks' waits, from Airflow's metadata database of ``AIRFLOW_HOME``.

    Raises:
        CostawareError: that database cannot be read (not migrated, down, another AIRFLOW_HOME's).
    """
    from costaware import settings
    from costaware.core.errors import CostawareError

    try:
        return list(read(dag_id=dag_id))
    except Exception as e:
        if _in_an_airflow_task():
            raise CostawareError(
                "cannot read Airflow's metadata database from inside a task: Airflow 3 gives tasks no "
                f"database access ({type(e).__name__}: {e}); run `costaware jobs reconcile` on a schedule "
                "from a host with the scheduler's AIRFLOW_HOME instead (cron, a systemd timer, a Kubernetes "
                "CronJob)"
            ) from e
        home = settings.airflow_home()
        cause = getattr(e, "orig", None) or e  # a database's own error, without SQLAlchemy's SQL text
        raise CostawareError(
            f"cannot read the task states and XComs in Airflow's metadata database of AIRFLOW_HOME={home} "
            f"({type(cause).__name__}: {cause}): run with the deployment's AIRFLOW_HOME (or its "
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN), after `airflow db migrate`"
        ) from e


def _in_an_airflow_task() -> bool:
    """Whether this runs in an Airflow 3 task, whose supervisor blocked the ORM (``block_orm_access``).

    In the task's own process its ``Session`` is a ``BlockedDBSession``; a command the task runs (a
    ``BashOperator``'s) inherits the supervisor's fake database URL instead.
    """
    import os

    if os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "").startswith(_BLOCKED_DATABASE_URL):
        return True
    airflow_settings = sys.modules.get("airflow.settings")
    blocked = getattr(airflow_settings, "Session", None)
    return getattr(blocked, "__name__", "") == "BlockedDBSession"
