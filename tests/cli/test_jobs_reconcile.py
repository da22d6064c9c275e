"""`costaware jobs reconcile`: the job of a task ended with nobody left to follow it is stopped and billed.

A deferred wait whose trigger Airflow's timeout check took away is followed only by the task's resume or
retry; a task marked failed (or its run marked failed, which skips it) before those ran left its job
running, unbilled, to its time limit. Real jobs on the local backend (a team's command under
``costaware-run``), a real SQLite metadata database with Airflow's own tables.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from airflow_db import airflow_metadata_db, put_xcom
from remote_support import command_operator_args, context_for, reimported

from costaware.adapters.compute.base import open_backend
from costaware.adapters.ledger import reservations
from costaware.cli import main
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.remote_reconcile import TRIGGER_TAKEN_AWAY
from costaware.triggers.remote_training import WAIT_STATE_XCOM_KEY, RemoteTrainingJobTrigger

pytest.importorskip("costaware_runtime.launcher", reason="pip install -e ./runtime (costaware-run)")

DAG, RUN, TASK = "remote_dag", "scheduled__2026-01-01", "train"
HOLDER = f"{DAG}/{RUN}/{TASK}/-1"
IN_THE_LEDGER = (
    "nothing to reconcile: the jobs of the 1 ended task(s) with a remote training wait are in the ledger"
)


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


@pytest.fixture(autouse=True)
def _no_job_left(tmp_path: Path) -> Iterator[None]:
    """Every job a test started is gone at its end, whatever the test did."""
    yield
    root = tmp_path / "jobs"
    if root.exists():
        backend = open_backend("local", {"root": str(root)})
        for folder in root.iterdir():
            (folder / "stop").touch()
            with contextlib.suppress(Exception):
                backend.signal(folder.name, signal.SIGKILL)


def _deferred(
    tmp: Path,
    op: RemoteTrainingOperator | None = None,
    *,
    kept: dict[str, Any] | None = None,
    run_id: str = RUN,
) -> RemoteTrainingJobTrigger:
    """A training deferred on a running job, as the triggerer builds its trigger.

    ``kept``: gets the XComs the task pushed (its wait state), as Airflow keeps them.
    """
    args = {**command_operator_args(tmp, "wait-for-notice"), "tags": {"project": "churn"}}
    op = op or RemoteTrainingOperator(**args)
    context = context_for(run_id)
    if kept is not None:
        context["ti"].xcom_push = lambda key, value: kept.__setitem__(key, value)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = reimported(deferred.value.trigger)
    give_up = time.monotonic() + 60
    ready = "seen.jsonl.ready" if "wait-for-notice" in op.command else "seen.jsonl"
    while not (tmp / ready).exists():  # the job runs: it checkpointed and waits (or ignores a stop)
        assert time.monotonic() < give_up, "the job never started"
        time.sleep(0.05)
    assert isinstance(trigger, RemoteTrainingJobTrigger) and trigger.job_id is not None
    return trigger


def _task_ended_with_its_wait(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    state: str,
    trigger: RemoteTrainingJobTrigger,
    *,
    next_method: str | None = TRIGGER_TAKEN_AWAY,
    end_date: datetime | None = None,
    kept: dict[str, Any] | None = None,
) -> None:
    """The metadata database of a task in ``state`` whose deferred wait kept ``trigger``'s attempt state.

    By default the wait's trigger was taken away by Airflow's timeout check (``__fail__``), no ``on_kill``.
    ``kept``: the XComs the task pushed (:func:`_deferred`'s), whose wait state is kept instead.
    """
    put = airflow_metadata_db(tmp, monkeypatch)
    put(DAG, RUN, TASK, state, next_method=next_method, end_date=end_date)
    put_xcom(DAG, RUN, TASK, WAIT_STATE_XCOM_KEY, kept[WAIT_STATE_XCOM_KEY] if kept else trigger.state)


def _listed(out: str) -> list[dict[str, Any]]:
    """The JSON rows of ``--format json``: this process imported Airflow before, whose logs go to stdout."""
    return list(json.loads(out[out.index("[\n") :]))


def _reconciled() -> None:
    """Wait for the listener's reconcile, in a thread of its own: the scheduler does not wait for it."""
    for reconciling in [t for t in threading.enumerate() if t.name == "costaware-reconcile"]:
        reconciling.join(timeout=60)
        assert not reconciling.is_alive()


def _entries(ledger: Any) -> list[dict[str, Any]]:
    return [e for e in ledger.entries() if e["task_id"] == TASK]


def _running(tmp: Path, job_id: str) -> bool:
    return not open_backend("local", {"root": str(tmp / "jobs")}).poll(job_id).state.done


def test_a_task_marked_failed_after_its_wait_was_taken_has_its_job_listed_then_stopped_and_billed_once(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    trigger = _deferred(tmp_path)
    assert trigger.job_id is not None
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger)
    # Run where the workers' ledger is not this machine's default: --ledger-url names it, and is billed.
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{tmp_path / 'not-the-workers.db'}")
    argv = ["jobs", "reconcile", "--ledger-url", ledger_url, "--format", "json"]
    capsys.readouterr()  # the operator's own log lines

    assert main([*argv, "--dry-run"]) == 0
    (listed,) = _listed(capsys.readouterr().out)
    assert (listed["task"], listed["task_state"], listed["job"], listed["backend"]) == (
        HOLDER,
        "failed",
        trigger.job_id,
        "local",
    )
    assert _running(tmp_path, trigger.job_id) and _entries(ledger) == []  # a dry run touches nothing

    assert main([*argv, "--wait-seconds", "10"]) == 0
    (done,) = _listed(capsys.readouterr().out)
    assert not _running(tmp_path, trigger.job_id)
    (entry,) = _entries(ledger)
    assert entry["cause"] == "unwatched" and Decimal(str(entry["usd"])) > 0
    assert done["result"] == f"billed ${Decimal(str(entry['usd'])):.6f} (stopped where it still ran)"
    with ledger.reading() as conn:
        assert reservations.reservation(conn, gate.id).status == "settled"

    # Billed: listed no more; and the resume (or a trigger) that comes late finds the entry.
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url]) == 0
    assert IN_THE_LEDGER in capsys.readouterr().out
    reimported(trigger).stop_and_bill(ask_state=False, cause="unwatched", why="the wait timed out")
    assert len(_entries(ledger)) == 1


@pytest.mark.parametrize("state", ["up_for_retry", "scheduled", "deferred"])
def test_a_task_whose_resume_or_retry_still_follows_the_job_is_left_to_it(
    state: str, tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    trigger = _deferred(tmp_path)
    assert trigger.job_id is not None
    _task_ended_with_its_wait(tmp_path, monkeypatch, state, trigger)
    capsys.readouterr()
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url]) == 0
    assert "nothing to reconcile: no ended task left a remote training job" in capsys.readouterr().out
    assert _running(tmp_path, trigger.job_id) and _entries(ledger) == []


def test_a_job_billed_already_is_not_listed(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    trigger = _deferred(tmp_path)
    trigger.stop_and_bill(wait_seconds=10, ask_state=False)  # a person's kill, before Airflow's deadline
    _task_ended_with_its_wait(tmp_path, monkeypatch, "success", trigger)
    capsys.readouterr()
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--dry-run"]) == 0
    assert IN_THE_LEDGER in capsys.readouterr().out
    assert [e["cause"] for e in _entries(ledger)] == ["killed"]


def test_a_metadata_database_that_cannot_be_read_is_named_with_what_to_do(
    tmp_path: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from airflow import settings
    from sqlalchemy import create_engine
    from sqlalchemy.orm import scoped_session, sessionmaker

    empty = create_engine(f"sqlite:///{tmp_path / 'not-migrated.db'}")  # no tables: never migrated
    monkeypatch.setattr(settings, "Session", scoped_session(sessionmaker(bind=empty)))
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "cannot read the task states and XComs in Airflow's metadata database" in err
    assert "no such table: xcom" in err and "`airflow db migrate`" in err


def test_a_reconcile_run_inside_an_airflow_task_says_to_schedule_it_on_a_host_instead(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Run from a maintenance DAG's task (as the docs suggested), Airflow 3's worker blocks the ORM: the error
    # said to set AIRFLOW_HOME and run `airflow db migrate`, neither of which helps there.
    from airflow import settings
    from airflow.sdk.execution_time.supervisor import BlockedDBSession

    monkeypatch.setattr(settings, "Session", BlockedDBSession)  # what the task supervisor sets
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--dry-run"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "cannot read Airflow's metadata database from inside a task" in err
    assert "Direct database access via the ORM is not allowed" in err
    assert "run `costaware jobs reconcile` on a schedule from a host with the scheduler's AIRFLOW_HOME" in err


@pytest.mark.parametrize("hook", ["on_dag_run_failed", "on_dag_run_success"])
def test_a_run_ended_by_hand_or_its_timeout_has_the_job_its_task_left_stopped_and_billed_by_the_listener(
    hook: str, tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from costaware.plugins.listener import CostListener

    op = RemoteTrainingOperator(**{**command_operator_args(tmp_path, "wait-for-notice"), "tags": {"x": "y"}})
    trigger = _deferred(tmp_path, op)
    assert trigger.job_id is not None
    # Marked failed (its unfinished tasks skipped), timed out, or marked success (its tasks set success).
    task_state = "skipped" if hook == "on_dag_run_failed" else "success"
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put(
        DAG, RUN, TASK, task_state, run_state=hook.removeprefix("on_dag_run_"), next_method=TRIGGER_TAKEN_AWAY
    )
    put_xcom(DAG, RUN, TASK, WAIT_STATE_XCOM_KEY, trigger.state)

    run = SimpleNamespace(dag_id=DAG, run_id=RUN, dag=SimpleNamespace(tasks=[op]))
    getattr(CostListener(), hook)(run, "timed_out")

    _reconciled()
    (entry,) = _entries(ledger)
    assert entry["cause"] == "unwatched" and Decimal(str(entry["usd"])) > 0
    assert not _running(tmp_path, trigger.job_id)


def test_a_dagrun_timeout_read_before_the_scheduler_commits_its_skips_still_bills_the_job(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scheduler sets a timed-out run's unfinished tasks skipped, flushes, and calls the listener before
    # it commits: a session of the listener's own read the task still deferred, and left its job running.
    from types import SimpleNamespace

    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance

    from costaware.plugins.listener import CostListener

    op = RemoteTrainingOperator(**{**command_operator_args(tmp_path, "wait-for-notice"), "tags": {"x": "y"}})
    trigger = _deferred(tmp_path, op)
    assert trigger.job_id is not None
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put(DAG, RUN, TASK, "scheduled", next_method=TRIGGER_TAKEN_AWAY)  # the timeout check took its trigger
    put_xcom(DAG, RUN, TASK, WAIT_STATE_XCOM_KEY, trigger.state)

    with settings.Session() as scheduler:  # the scheduler's transaction
        run = scheduler.query(DagRun).filter_by(dag_id=DAG, run_id=RUN).one()
        run.state = "failed"
        scheduler.query(TaskInstance).filter_by(dag_id=DAG, run_id=RUN).one().state = "skipped"
        scheduler.flush()
        run.dag = SimpleNamespace(tasks=[op])
        CostListener().on_dag_run_failed(run, "timed_out")
        _reconciled()  # before the commit: what the listener acts on is what it read in the transaction
        scheduler.commit()

    (entry,) = _entries(ledger)
    assert entry["cause"] == "unwatched"
    assert not _running(tmp_path, trigger.job_id)


def test_a_wait_for_the_stopped_job_out_of_range_is_refused_naming_it(ledger_url: str, capsys: Any) -> None:
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--wait-seconds", "-3"]) == 2
    assert "--wait-seconds must be 0 or more and at most 600, got -3" in capsys.readouterr().err


def test_a_task_ended_while_its_trigger_still_ran_is_left_to_that_triggers_kill_for_a_while(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # A person marked the deferred task failed before Airflow's deadline: its trigger's on_kill stops and
    # bills the job. Stopped here too at the same time, both billed it, each before the other's entry.
    from types import SimpleNamespace

    from costaware import remote_reconcile
    from costaware.plugins.listener import CostListener

    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    monkeypatch.setattr(remote_reconcile, "utcnow", lambda: now)
    op = RemoteTrainingOperator(**{**command_operator_args(tmp_path, "wait-for-notice"), "tags": {"x": "y"}})
    trigger = _deferred(tmp_path, op)
    assert trigger.job_id is not None
    marked = now - timedelta(minutes=1)
    _task_ended_with_its_wait(
        tmp_path, monkeypatch, "failed", trigger, next_method="execute_complete", end_date=marked
    )
    capsys.readouterr()

    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--format", "json"]) == 0
    (listed,) = _listed(capsys.readouterr().out)
    assert listed["result"].startswith("left to its trigger: the task ended less than 5 minutes ago")
    CostListener().on_dag_run_failed(
        SimpleNamespace(dag_id=DAG, run_id=RUN, dag=SimpleNamespace(tasks=[op])), ""
    )
    _reconciled()
    assert _running(tmp_path, trigger.job_id) and _entries(ledger) == []

    # Its trigger never billed it (its on_kill failed, or it could not read the task's state): taken now.
    now += timedelta(minutes=5)
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--format", "json"]) == 0
    (done,) = _listed(capsys.readouterr().out)
    assert done["result"].startswith("billed $") and done["result"].endswith("(stopped where it still ran)")
    assert [e["cause"] for e in _entries(ledger)] == ["unwatched"]
    assert not _running(tmp_path, trigger.job_id)


@pytest.mark.parametrize(
    ("hook", "next_method", "stopped"),
    [
        ("on_task_instance_failed", TRIGGER_TAKEN_AWAY, True),
        ("on_task_instance_success", TRIGGER_TAKEN_AWAY, True),
        # Marked while its trigger still ran: that trigger's kill stops and bills it, not this.
        ("on_task_instance_failed", "execute_complete", False),
    ],
)
def test_a_task_a_person_marks_after_its_wait_was_taken_has_its_job_stopped_and_billed_while_its_run_goes_on(
    hook: str,
    next_method: str,
    stopped: bool,
    tmp_path: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow import settings
    from airflow.models.taskinstance import TaskInstance

    from costaware.plugins.listener import CostListener

    trigger = _deferred(tmp_path)
    assert trigger.job_id is not None
    state = hook.removeprefix("on_task_instance_")
    _task_ended_with_its_wait(tmp_path, monkeypatch, state, trigger, next_method=next_method)

    with settings.Session() as api_server:  # the API server's request, its mark committed
        ti = api_server.query(TaskInstance).filter_by(dag_id=DAG, run_id=RUN, task_id=TASK).one()
        if hook == "on_task_instance_failed":
            CostListener().on_task_instance_failed(None, ti, "TaskInstance's state was manually set")
        else:
            CostListener().on_task_instance_success(None, ti)
    _reconciled()

    assert _running(tmp_path, trigger.job_id) is not stopped
    assert [e["cause"] for e in _entries(ledger)] == (["unwatched"] if stopped else [])


def test_a_run_marked_failed_reports_its_task_and_its_end_and_the_job_is_stopped_once(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The API server reports the killed task's mark and the run's end at once: two threads of one process.
    # The job ignores its stop until its grace period ends, so the first is still at it when the second
    # comes; each, not seeing the other's entry yet, stopped it and billed it.
    from types import SimpleNamespace

    from airflow import settings
    from airflow.models.taskinstance import TaskInstance

    from costaware.plugins.listener import CostListener

    args = {**command_operator_args(tmp_path, "ignore-notice"), "preemption_grace_seconds": 3}
    op = RemoteTrainingOperator(**{**args, "tags": {"x": "y"}})
    trigger = _deferred(tmp_path, op)
    assert trigger.job_id is not None
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger)

    with settings.Session() as api_server:
        ti = api_server.query(TaskInstance).filter_by(dag_id=DAG, run_id=RUN, task_id=TASK).one()
        CostListener().on_task_instance_failed(None, ti, "Dag Run's state was manually set")
        run = SimpleNamespace(dag_id=DAG, run_id=RUN, dag=SimpleNamespace(tasks=[op]))
        CostListener().on_dag_run_failed(run, "Dag Run's state was manually set to `failed`.")
    _reconciled()

    stops = [r for r in caplog.records if "has no ledger entry and nothing follows it" in r.getMessage()]
    assert len(stops) == 1
    assert [e["cause"] for e in _entries(ledger)] == ["unwatched"]


def _connections_billed_with(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The AWS connections each stop and bill of a job uses from now on (it reads live spot prices)."""
    used: list[str | None] = []
    real = RemoteTrainingJobTrigger.stop_and_bill

    def stop_and_bill(self: RemoteTrainingJobTrigger, **kwargs: Any) -> Any:
        used.append(self.aws_conn_id)
        return real(self, **kwargs)

    monkeypatch.setattr(RemoteTrainingJobTrigger, "stop_and_bill", stop_and_bill)
    return used


def test_a_sagemaker_job_whose_task_ended_unbilled_is_found_through_the_tasks_aws_connection(
    moto_endpoint: str,
    moto_aws_conn: str,
    ledger: Any,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    # moto's SageMaker completes a job at once without running it: billed as it ended, for its 0 s.
    from remote_support import aws_client

    bucket = f"own-{uuid.uuid4().hex[:12]}"
    aws_client("s3", moto_endpoint).create_bucket(Bucket=bucket)
    op = RemoteTrainingOperator(
        task_id=TASK,
        command=["python", "train.py"],
        image="123456789012.dkr.ecr.us-east-1.amazonaws.com/team-train:7",
        model_store=f"s3://{bucket}/models",
        checkpoint_store=f"s3://{bucket}/checkpoints",
        backend="sagemaker",
        backend_options={
            "role_arn": "arn:aws:iam::123456789012:role/train",
            "output_s3_uri": f"s3://{bucket}/o",
        },
        market="on_demand",
        instance_type="ml.m5.xlarge",
        on_demand_usd_per_hour="0.23",
        aws_conn_id=moto_aws_conn,
        poll_interval=0.1,
    )
    kept: dict[str, Any] = {}
    context = context_for()
    context["ti"].xcom_push = lambda key, value: kept.__setitem__(key, value)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    _task_ended_with_its_wait(tmp_path, monkeypatch, "success", trigger, kept=kept)
    used = _connections_billed_with(monkeypatch)
    capsys.readouterr()

    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--format", "json"]) == 0
    assert used == [moto_aws_conn]  # not aws_default: the task's own serialized definition does not keep it
    (done,) = _listed(capsys.readouterr().out)
    assert (done["backend"], done["job"]) == ("sagemaker", trigger.job_id)
    (entry,) = _entries(ledger)
    assert done["result"] == f"billed ${Decimal(str(entry['usd'])):.6f} (stopped where it still ran)"
    assert f"job {trigger.job_id} on sagemaker" in entry["note"]
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url]) == 0
    assert IN_THE_LEDGER in capsys.readouterr().out


def test_a_wait_state_that_cannot_be_read_is_named_with_what_to_do_and_fails_the_command(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Kept by another version of costaware: the others are still reconciled, this one is said.
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put(DAG, RUN, TASK, "failed", next_method=TRIGGER_TAKEN_AWAY)
    kept = {"backend": "batch", "current": {"attempt": 1, "job_id": "train-3f2a9c01de-a1", "market": "spot"}}
    put_xcom(DAG, RUN, TASK, WAIT_STATE_XCOM_KEY, kept)
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--format", "json"]) == 1
    (row,) = _listed(capsys.readouterr().out)
    assert row["job"] == "train-3f2a9c01de-a1"
    assert row["result"] == (
        "FAILED: its wait state cannot be read (KeyError: 'instance_type'): look for the task's jobs on "
        "batch by hand and stop any still running"
    )


def _remote_task(task_id: str = TASK) -> Any:
    """A remote training task as the scheduler holds it (its serialized definition's type)."""
    from types import SimpleNamespace

    return SimpleNamespace(task_id=task_id, task_type="RemoteTrainingOperator", aws_conn_id=None)


def test_a_failed_read_of_the_waits_at_a_runs_end_leaves_the_schedulers_postgresql_transaction_whole(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # On PostgreSQL a failed statement aborts the whole transaction: the listener's read of the waits, run in
    # the scheduler's, timed out on a lock, and the scheduler's next query failed (InFailedSqlTransaction)
    # and its commit rolled back the run's end, the run left `running`.
    from types import SimpleNamespace

    from airflow.models import import_all_models
    from airflow.models.base import Base
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from services import fresh_postgres_database
    from sqlalchemy import create_engine, event, text
    from sqlalchemy.orm import Session

    from costaware.plugins.listener import CostListener

    import_all_models()
    engine = create_engine(fresh_postgres_database(postgres_url, "reconcile"))
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            DagRun.__table__.insert().values(
                dag_id=DAG,
                run_id=RUN,
                run_type="manual",
                state="running",
                run_after=datetime(2026, 11, 2, tzinfo=timezone.utc),
                log_template_id=None,
            )
        )
        conn.execute(
            TaskInstance.__table__.insert().values(
                id=uuid.uuid4(),
                dag_id=DAG,
                run_id=RUN,
                task_id=TASK,
                map_index=-1,
                state="skipped",
                pool="default_pool",
                try_number=1,
                max_tries=0,
                pool_slots=1,
                span_status="not_started",
                next_method=TRIGGER_TAKEN_AWAY,
            )
        )
    read_xcom: list[str] = []
    event.listen(
        engine,
        "before_cursor_execute",
        lambda _c, _cur, statement, *_: read_xcom.append(statement) if "FROM xcom" in statement else None,
    )
    locker = engine.connect()
    locked = locker.begin()
    locker.execute(text("LOCK TABLE xcom IN ACCESS EXCLUSIVE MODE"))  # a long writer, say
    try:
        with Session(engine) as scheduler:
            scheduler.execute(text("SET lock_timeout = '300ms'"))  # a deployment's lock timeout
            run = scheduler.query(DagRun).one()
            run.state = "failed"
            scheduler.flush()
            run.dag = SimpleNamespace(tasks=[_remote_task()])
            CostListener().on_dag_run_failed(run, "timed_out")
            assert read_xcom and "could not reconcile the remote training jobs" in caplog.text
            assert scheduler.execute(text("SELECT count(*) FROM task_instance")).scalar() == 1
            scheduler.commit()

            # A DAG of no remote training task is not read at all.
            read_xcom.clear()
            run.dag = SimpleNamespace(tasks=[SimpleNamespace(task_id="report", task_type="PythonOperator")])
            CostListener().on_dag_run_failed(run, "timed_out")
            assert read_xcom == []
    finally:
        locked.rollback()
        locker.close()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT state FROM dag_run")).scalar() == "failed"
    engine.dispose()


def test_a_failed_read_of_the_waits_at_a_runs_end_keeps_the_holds_of_its_remote_trainings(
    ledger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A read that failed (a lock timeout) released every hold of the run: a paid job still running had its
    # money free for another task to reserve, until `costaware jobs reconcile` billed it.
    from types import SimpleNamespace

    from costaware import remote_reconcile
    from costaware.plugins.listener import CostListener

    def lock_timeout(**_: Any) -> list[Any]:
        raise TimeoutError("canceling statement due to lock timeout")

    monkeypatch.setattr(remote_reconcile, "ended_waits", lock_timeout)
    ledger.set_budget("x=y", "month", "10")
    training = ledger.reserve("x=y", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    report = ledger.reserve("x=y", "1.00", holder=f"{DAG}/{RUN}/report/-1", run_id=RUN, dag_id=DAG)
    tasks = [_remote_task(), SimpleNamespace(task_id="report", task_type="PythonOperator")]
    run = SimpleNamespace(dag_id=DAG, run_id=RUN, dag=SimpleNamespace(tasks=tasks))

    CostListener().on_dag_run_failed(run, "timed_out")

    with ledger.reading() as conn:
        assert reservations.reservation(conn, training.id).status == "open"
        assert reservations.reservation(conn, report.id).status == "released"
    (error,) = [r for r in caplog.records if "could not reconcile" in r.getMessage()]
    said = error.getMessage()
    assert error.levelname == "ERROR" and "lock timeout" in said
    assert f"the holds of its tasks {TASK} (those that may be remote trainings" in said
    assert f"`costaware jobs reconcile --dag-id {DAG}`" in said
    # The reconcile reads no wait of a task that left no job: its kept hold waits for its TTL, or this.
    assert "that left no job (it never deferred, or is no training) stays until its TTL" in said
    assert f"`costaware budget release --holder {DAG}/{RUN}/TASK/MAP_INDEX` frees it" in said


@pytest.mark.parametrize("hold_made", ["before the task ended", "by a new try since"])
def test_a_hold_a_runs_end_kept_for_a_job_billed_since_is_released_by_the_reconcile(
    hold_made: str, tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # A run's end that could not read its waits keeps its remote trainings' holds; where the job was billed
    # (by its trigger's kill, say), `costaware jobs reconcile` said "nothing to reconcile" and the money
    # stayed reserved for an ended job until the hold's TTL. A hold made after the task ended is a new try's.
    ledger.set_budget("project=churn", "month", "10")
    trigger = _deferred(tmp_path)
    trigger.stop_and_bill(wait_seconds=10, ask_state=False)
    kept = ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    other_run = ledger.reserve("project=churn", "1.00", holder=f"{DAG}/r2/{TASK}/-1", run_id="r2", dag_id=DAG)
    after = timedelta(minutes=1 if hold_made == "before the task ended" else -1)
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger, end_date=kept.created_at + after)
    capsys.readouterr()

    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--dry-run"]) == 0
    with ledger.reading() as conn:
        assert reservations.reservation(conn, kept.id).status == "open"  # a dry run changes nothing
    # Said as the real run says it, in the conditional: the dry run's line read "would free $4.00 held for
    # ..., kept at its run's end: ..." while the real run's named the budgets and the reason otherwise.
    would = (
        f"would release $4.00 reserved in project=churn/month for {HOLDER}: it was kept at its run's end, as "
        f"its job {trigger.job_id} is billed (dry run: nothing freed)"
    )
    assert (would in capsys.readouterr().err) == (hold_made == "before the task ended")

    assert main(["jobs", "reconcile", "--ledger-url", ledger_url]) == 0
    out, err = capsys.readouterr()
    assert IN_THE_LEDGER in out
    said = (
        f"released $4.00 reserved in project=churn/month for {HOLDER}: it was kept at its run's end, as its "
        f"job {trigger.job_id} is billed"
    )
    with ledger.reading() as conn:
        assert reservations.reservation(conn, other_run.id).status == "open"
        if hold_made == "before the task ended":
            assert said in err and reservations.reservation(conn, kept.id).status == "released"
        else:
            assert said not in err and reservations.reservation(conn, kept.id).status == "open"


class _StopRefusing:
    """A backend whose API refuses every call (a 503): the job it runs is neither stopped nor seen to end."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def poll(self, job_id: str) -> Any:
        from costaware.core.errors import ComputeBackendError

        raise ComputeBackendError("backend API unreachable (503)")

    stop = poll

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_job_whose_stop_the_backend_refuses_is_not_billed_keeps_its_hold_and_is_listed_again(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Billed to its grace period's end under its name, the hold settled and "billed" said (exit 0): the next
    # reconcile found the entry and said "nothing to reconcile" while the job ran on, unbilled.
    from costaware.adapters.compute import base

    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "9.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    trigger = _deferred(tmp_path)
    assert trigger.job_id is not None
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger)
    real_open = base.open_backend
    argv = ["jobs", "reconcile", "--ledger-url", ledger_url, "--wait-seconds", "1", "--format", "json"]
    capsys.readouterr()

    with monkeypatch.context() as down:
        down.setattr(base, "open_backend", lambda *a, **k: _StopRefusing(real_open(*a, **k)))
        assert main(argv) == 1
    (refused,) = _listed(capsys.readouterr().out)
    assert refused["result"].startswith(
        "FAILED: stop refused (ComputeBackendError: backend API unreachable (503)): stop job "
        f"{trigger.job_id} on local by hand"
    )
    assert _running(tmp_path, trigger.job_id) and _entries(ledger) == []
    with ledger.reading() as conn:
        assert reservations.reservation(conn, gate.id).status == "open"

    # The backend answers again: listed again, stopped and billed, and the hold settled.
    assert main(argv) == 0
    (done,) = _listed(capsys.readouterr().out)
    assert done["result"].startswith("billed $")
    assert [e["cause"] for e in _entries(ledger)] == ["unwatched"]
    with ledger.reading() as conn:
        assert reservations.reservation(conn, gate.id).status == "settled"


def test_a_run_end_whose_job_stop_is_refused_logs_an_error_and_keeps_the_tasks_hold(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from types import SimpleNamespace

    from costaware import triggers
    from costaware.adapters.compute import base
    from costaware.plugins.listener import CostListener

    monkeypatch.setattr(triggers.remote_training, "KILL_WAIT_SECONDS", 1.0)
    ledger.set_budget("x=y", "month", "10")
    gate = ledger.reserve("x=y", "9.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    op = RemoteTrainingOperator(**{**command_operator_args(tmp_path, "wait-for-notice"), "tags": {"x": "y"}})
    trigger = _deferred(tmp_path, op)
    assert trigger.job_id is not None
    _task_ended_with_its_wait(tmp_path, monkeypatch, "skipped", trigger)
    real_open = base.open_backend
    with monkeypatch.context() as down:
        down.setattr(base, "open_backend", lambda *a, **k: _StopRefusing(real_open(*a, **k)))
        run = SimpleNamespace(dag_id=DAG, run_id=RUN, dag=SimpleNamespace(tasks=[op]))
        CostListener().on_dag_run_failed(run, "timed_out")
        _reconciled()

    (error,) = [r for r in caplog.records if "stop refused" in r.getMessage() and r.name.endswith("listener")]
    assert error.levelname == "ERROR" and f"stop job {trigger.job_id} on local by hand" in error.getMessage()
    assert _running(tmp_path, trigger.job_id) and _entries(ledger) == []
    with ledger.reading() as conn:
        assert reservations.reservation(conn, gate.id).status == "open"


def test_a_runs_end_leaves_the_hold_of_a_task_whose_job_it_bills_to_that_bill(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run's holds were released before its unwatched job was billed: meanwhile another task reserved the
    # money the job still spent ($10 budget: $4.95 spent by the job and $9 held by the other, $13.95).
    from types import SimpleNamespace

    from remote_support import m5_decision

    from costaware.core.errors import BudgetExceededError
    from costaware.plugins.listener import CostListener

    ledger.set_budget("x=y", "month", "10")
    gate = ledger.reserve("x=y", "9.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    decision = {**m5_decision(), "usd_per_hour": "3600", "on_demand_usd_per_hour": "7200"}  # $1 a second
    args = {**command_operator_args(tmp_path, "ignore-notice"), "preemption_grace_seconds": 3}
    op = RemoteTrainingOperator(**{**args, "spot_decision": decision, "tags": {"x": "y"}})
    trigger = _deferred(tmp_path, op)
    _task_ended_with_its_wait(tmp_path, monkeypatch, "skipped", trigger)

    run = SimpleNamespace(dag_id=DAG, run_id=RUN, dag=SimpleNamespace(tasks=[op]))
    CostListener().on_dag_run_failed(run, "timed_out")  # a dagrun_timeout; its release waited for
    with ledger.reading() as conn:
        assert reservations.reservation(conn, gate.id).status in ("open", "settled")  # never released
    with pytest.raises(BudgetExceededError):  # the money the job spends stays held for it
        ledger.reserve("x=y", "9.00", holder=f"other/{RUN}/t/-1", run_id=RUN, dag_id="other")
    _reconciled()
    with ledger.reading() as conn:
        assert reservations.reservation(conn, gate.id).status == "settled"
    (entry,) = _entries(ledger)
    assert entry["cause"] == "unwatched" and Decimal(str(entry["usd"])) > 1


@pytest.mark.parametrize("by", ["cli", "listener"])
def test_a_job_is_stopped_and_billed_with_the_aws_connection_its_task_ran_with(
    by: str, tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The task's serialized definition keeps no aws_conn_id (not a template field): both used aws_default,
    # live spot prices read with another account's credentials. The wait's state keeps the task's own.
    from types import SimpleNamespace

    from costaware.plugins.listener import CostListener

    kept: dict[str, Any] = {}
    args = {**command_operator_args(tmp_path, "wait-for-notice"), "aws_conn_id": "team_aws"}
    trigger = _deferred(tmp_path, RemoteTrainingOperator(**args), kept=kept)
    assert kept[WAIT_STATE_XCOM_KEY]["aws_conn_id"] == "team_aws"
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger, kept=kept)
    used = _connections_billed_with(monkeypatch)

    if by == "cli":
        assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--wait-seconds", "10"]) == 0
    else:
        serialized = SimpleNamespace(task_id=TASK, task_type="RemoteTrainingOperator")  # no aws_conn_id
        CostListener().on_dag_run_failed(
            SimpleNamespace(dag_id=DAG, run_id=RUN, dag=SimpleNamespace(tasks=[serialized])), "timed_out"
        )
        _reconciled()
    assert used == ["team_aws"]
    assert [e["cause"] for e in _entries(ledger)] == ["unwatched"]


def _serialized_dag(tmp: Path, **task_args: Any) -> None:
    """The DAG of the task in Airflow's metadata database, as its DAG processor writes it (all its tables)."""
    from airflow import settings
    from airflow.models.base import Base
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.sdk import DAG as Dag
    from airflow.serialization.serialized_objects import DagSerialization, LazyDeserializedDAG

    with Dag(DAG, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
        RemoteTrainingOperator(**{**command_operator_args(tmp, "wait-for-notice"), **task_args})
    with settings.Session() as session:
        Base.metadata.create_all(session.get_bind())
        session.add_all([DagBundleModel(name="dags"), DagModel(dag_id=DAG, bundle_name="dags")])
        session.flush()
        serialized = LazyDeserializedDAG(data=DagSerialization.to_dict(dag))
        SerializedDagModel.write_dag(serialized, bundle_name="dags", session=session)
        session.commit()


def test_a_task_that_bills_another_ledger_is_left_to_a_reconcile_of_that_ledger(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Read in --ledger-url's ledger, the job of a task billing team_b's looked unbilled, and was billed there
    # a second time (its resume billed it in team_b's).
    from costaware import Ledger

    team_b_db = tmp_path / "team_b.db"
    team_b = Ledger.from_url(f"sqlite:///{team_b_db}")
    trigger = _deferred(tmp_path)
    assert trigger.job_id is not None
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger)
    _serialized_dag(tmp_path, ledger_conn_id="team_b")
    capsys.readouterr()

    # This machine does not see team_b: listed, neither stopped nor billed (dry run or not).
    for dry_run in (["--dry-run"], []):
        argv = ["jobs", "reconcile", "--ledger-url", ledger_url, "--format", "json", *dry_run]
        assert main(argv) == 0
        (listed,) = _listed(capsys.readouterr().out)
        assert listed["result"] == "bills in team_b: run with its --ledger-url"
    assert _running(tmp_path, trigger.job_id) and _entries(ledger) == []

    # Its resume billed it in team_b's ledger: the job is no more listed, and nothing is billed here.
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_B", json.dumps({"conn_type": "sqlite", "host": str(team_b_db)}))
    reimported(trigger).stop_and_bill(ask_state=False, cause="unwatched", why="resume", ledger=team_b)
    for given in (ledger_url, f"sqlite:///{team_b_db}"):
        assert main(["jobs", "reconcile", "--ledger-url", given]) == 0
        assert IN_THE_LEDGER in capsys.readouterr().out
    assert _entries(ledger) == [] and len(team_b.entries()) == 1


def test_a_dag_id_airflow_does_not_know_is_refused_naming_it(
    tmp_path: Path, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Read as "nothing to reconcile" (exit 0): a typo hid the jobs of the DAG meant.
    put = airflow_metadata_db(tmp_path, monkeypatch)
    put(DAG, RUN, TASK, "failed", next_method=TRIGGER_TAKEN_AWAY)
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--dry-run", "--dag-id", "remote_dga"]) == 2
    assert (
        "--dag-id 'remote_dga': Airflow's metadata database knows no such DAG; did you mean 'remote_dag'? "
        "(DAGs known: remote_dag)"
    ) in capsys.readouterr().err


def test_a_dry_runs_count_is_of_the_jobs_it_would_stop_and_bill_only(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    trigger = _deferred(tmp_path)
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger)
    put = airflow_metadata_db(tmp_path, monkeypatch)
    # ... and a wait state another version of costaware kept, which cannot be read
    put(DAG, RUN, "other", "failed", next_method=TRIGGER_TAKEN_AWAY)
    kept = {"backend": "batch", "current": {"attempt": 1, "job_id": "other-3f2a9c01de-a1", "market": "spot"}}
    put_xcom(DAG, RUN, "other", WAIT_STATE_XCOM_KEY, kept)
    capsys.readouterr()
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "costaware: 1 job(s) of ended tasks have no ledger entry; run without --dry-run" in err


def test_a_task_billing_another_ledger_is_billed_when_given_that_ledger_however_its_url_is_written(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The URL given and the connection's were compared as text: the same file written another way (or a
    # driver named, postgresql+psycopg2:// for postgresql://) was "another ledger", listed on every run as
    # "bills in team_b: run with its --ledger-url", and never billed.
    from costaware import Ledger

    team_b_db = tmp_path / "team_b.db"
    team_b = Ledger.from_url(f"sqlite:///{team_b_db}")
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_B", json.dumps({"conn_type": "sqlite", "host": str(team_b_db)}))
    trigger = _deferred(tmp_path)
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger)
    _serialized_dag(tmp_path, ledger_conn_id="team_b")
    (tmp_path / "elsewhere").mkdir()
    capsys.readouterr()

    given = f"sqlite:///{tmp_path}/elsewhere/../team_b.db"
    assert main(["jobs", "reconcile", "--ledger-url", given, "--wait-seconds", "10", "--format", "json"]) == 0
    (done,) = _listed(capsys.readouterr().out)
    assert done["result"].startswith("billed $")
    assert [e["cause"] for e in team_b.entries()] == ["unwatched"] and _entries(ledger) == []


def test_a_servers_ledger_is_the_connections_whatever_driver_or_default_port_its_url_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from sqlalchemy.engine import make_url

    from costaware.remote_reconcile import is_ledger_of

    monkeypatch.setenv("AIRFLOW_CONN_TEAM_B", "postgresql://ledger:secret@DB.internal/costs")

    def opened_on(url: str) -> Any:
        return SimpleNamespace(engine=SimpleNamespace(url=make_url(url)))

    assert is_ledger_of(opened_on("postgresql+psycopg2://ledger:other@db.internal:5432/costs"), "team_b")
    assert not is_ledger_of(opened_on("postgresql://ledger@db.internal/other_costs"), "team_b")
    assert not is_ledger_of(opened_on("postgresql://ledger@db.internal/costs"), "no_such_connection")


def test_a_runs_end_keeps_the_hold_of_a_task_whose_trigger_still_watched_its_unbilled_job(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A person marked the run failed; the trigger's kill was refused its stop and kept the task's hold, the
    # job running on. The run's end released it all the same: the money the job still spends was free.
    from types import SimpleNamespace

    from costaware.plugins.listener import CostListener

    ledger.set_budget("x=y", "month", "10")
    gate = ledger.reserve("x=y", "1.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    op = RemoteTrainingOperator(**{**command_operator_args(tmp_path, "wait-for-notice"), "tags": {"x": "y"}})
    trigger = _deferred(tmp_path, op)
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger, next_method="execute_complete")
    run = SimpleNamespace(dag_id=DAG, run_id=RUN, dag=SimpleNamespace(tasks=[op]))

    CostListener().on_dag_run_failed(run, "Dag Run's state was manually set to `failed`.")
    _reconciled()
    with ledger.reading() as conn:
        assert reservations.reservation(conn, gate.id).status == "open"
    assert _running(tmp_path, trigger.job_id) and _entries(ledger) == []

    trigger.stop_and_bill(wait_seconds=10, ask_state=False)  # billed: a hold the task still has is freed
    assert [e["cause"] for e in _entries(ledger)] == ["killed"]
    again = ledger.reserve("x=y", "1.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    CostListener().on_dag_run_failed(run, "Dag Run's state was manually set to `failed`.")
    with ledger.reading() as conn:
        assert reservations.reservation(conn, again.id).status == "released"


def test_a_subclass_of_the_remote_training_in_the_dags_own_code_is_read_at_a_runs_end(tmp_path: Path) -> None:
    # A subclass under another name and module, its template fields narrowed, was taken for no remote
    # training: the run's end never read its waits, and its unwatched job ran on unbilled.
    import pendulum
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG as SdkDag
    from airflow.serialization.serialized_objects import DagSerialization

    from costaware.remote_reconcile import may_keep_a_wait

    class TeamTraining(RemoteTrainingOperator):
        template_fields = ("command", "image", "max_usd")

    TeamTraining.__module__ = "team.operators"
    args = {**command_operator_args(tmp_path, "wait-for-notice"), "tags": {"x": "y"}}
    with SdkDag("team", start_date=pendulum.datetime(2026, 1, 1), schedule=None) as dag:
        TeamTraining(**{**args, "task_id": "team_train"})
        BashOperator(task_id="bash", bash_command="true")
    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    for tasks in (dag.task_dict, serialized.task_dict):
        assert may_keep_a_wait(tasks["team_train"]) and not may_keep_a_wait(tasks["bash"])


def test_the_wait_seconds_help_says_a_refused_stop_is_not_billed(capsys: Any) -> None:
    # It said any job not ended within the wait was billed to its grace period: a refused stop is not.
    with pytest.raises(SystemExit):
        main(["jobs", "reconcile", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "one whose stop the backend refused and not seen to end is not billed" in said


def test_the_help_says_the_reconcile_frees_the_kept_holds_of_billed_jobs(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["jobs", "reconcile", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "frees the hold a run's end kept for a task whose job is billed already" in said
    assert "--dry-run" in said and "says what it would free" in said


def test_a_reconcile_a_tasks_own_command_runs_says_to_schedule_it_on_a_host_instead(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # A BashOperator running `costaware jobs reconcile` is a process of its own: its ORM is not blocked, but
    # it inherits the supervisor's fake database URL, and the error said to run `airflow db migrate`.
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "airflow-db-not-allowed:///")
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--dry-run"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "cannot read Airflow's metadata database from inside a task" in err
    assert "`airflow db migrate`" not in err


def test_a_hold_that_cannot_be_freed_leaves_the_other_jobs_stopped_and_billed_and_fails_the_command(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The kept holds were released before the unbilled jobs were stopped: a ledger error on one crashed
    # the command, and the other run's job ran on unbilled.
    from sqlalchemy.exc import OperationalError

    from costaware.adapters.ledger.store import Ledger

    ledger.set_budget("project=churn", "month", "10")
    (tmp_path / "billed").mkdir()
    (tmp_path / "unbilled").mkdir()
    billed = _deferred(tmp_path / "billed")
    billed.stop_and_bill(wait_seconds=10, ask_state=False)
    kept = ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    other_run = "manual__2026-01-02"
    unbilled = _deferred(tmp_path / "unbilled", run_id=other_run)
    put = airflow_metadata_db(tmp_path, monkeypatch)
    end_date = kept.created_at + timedelta(minutes=1)
    for run_id, trigger in ((RUN, billed), (other_run, unbilled)):
        put(DAG, run_id, TASK, "failed", next_method=TRIGGER_TAKEN_AWAY, end_date=end_date)
        put_xcom(DAG, run_id, TASK, WAIT_STATE_XCOM_KEY, trigger.state)

    def locked(self: Any, reservation_id: str) -> Any:
        raise OperationalError("UPDATE reservations", {}, Exception("database is locked"))

    monkeypatch.setattr(Ledger, "release_hold", locked)
    capsys.readouterr()
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url]) == 1
    out, err = capsys.readouterr()
    assert "billed $" in out and not _running(tmp_path / "unbilled", unbilled.job_id)
    said = " ".join(err.split())
    assert (
        f"FAILED to free the hold of {HOLDER}, kept at its run's end though its job {billed.job_id} " in said
    )
    assert "database is locked" in said and f"`costaware budget release --holder {HOLDER}`" in said
    with ledger.reading() as conn:
        assert reservations.reservation(conn, kept.id).status == "open"


def test_a_hold_a_cleared_tasks_new_try_got_back_is_not_freed_by_a_reconcile_that_read_it_ended(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # A cleared task's new try reserves for the same holder and gets the kept hold back, its created_at
    # unchanged: a reconcile that had read the task ended released it while the new try's job ran.
    from costaware import remote_reconcile

    ledger.set_budget("project=churn", "month", "10")
    trigger = _deferred(tmp_path)
    trigger.stop_and_bill(wait_seconds=10, ask_state=False)
    kept = ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    _task_ended_with_its_wait(
        tmp_path, monkeypatch, "failed", trigger, end_date=kept.created_at + timedelta(seconds=1)
    )
    read_billed = remote_reconcile.billed_usd
    new_try: list[Any] = []

    def cleared_after_the_read(ledger_: Any, wait: Any) -> Any:
        billed = read_billed(ledger_, wait)
        if not new_try:
            from airflow import settings
            from airflow.models.taskinstance import TaskInstance

            with settings.Session() as session:  # a person clears the task; its new try runs and reserves
                session.query(TaskInstance).update({"state": "running", "end_date": None, "try_number": 2})
                session.commit()
            new_try.append(ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG))
        return billed

    monkeypatch.setattr(remote_reconcile, "billed_usd", cleared_after_the_read)
    capsys.readouterr()
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url]) == 0
    err = " ".join(capsys.readouterr().err.split())
    (held,) = new_try
    assert held.id == kept.id  # the new try's hold is the kept one
    with ledger.reading() as conn:
        assert reservations.reservation(conn, held.id).status == "open"
    assert f"kept the hold of {HOLDER}: the task was cleared or ran again since it was read" in err


def test_a_kept_hold_whose_task_instance_is_deleted_since_the_read_is_freed(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The run deleted between the read and the free: the hold was kept "for its new try", which is not there.
    from costaware import remote_reconcile

    ledger.set_budget("project=churn", "month", "10")
    trigger = _deferred(tmp_path)
    trigger.stop_and_bill(wait_seconds=10, ask_state=False)
    kept = ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    _task_ended_with_its_wait(
        tmp_path, monkeypatch, "failed", trigger, end_date=kept.created_at + timedelta(seconds=1)
    )
    read_billed = remote_reconcile.billed_usd

    def deleted_after_the_read(ledger_: Any, wait: Any) -> Any:
        from airflow import settings
        from airflow.models.taskinstance import TaskInstance

        billed = read_billed(ledger_, wait)
        with settings.Session() as session:
            session.query(TaskInstance).delete()
            session.commit()
        return billed

    monkeypatch.setattr(remote_reconcile, "billed_usd", deleted_after_the_read)
    capsys.readouterr()
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "its new try holds it now" not in err
    with ledger.reading() as conn:
        assert reservations.reservation(conn, kept.id).status == "released"


def test_a_kept_hold_its_jobs_entries_paid_from_is_released_and_says_it_frees_only_the_rest(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The hold is there first and the job's entry is paid from it; its settle never came (the trigger was
    # killed before it). The reconcile released it, naming the whole hold as freed: part of it was spent.
    from costaware.core.money import format_usd_exact
    from costaware.remote_billing import KilledTrainingBilling

    ledger.set_budget("project=churn", "month", "10")
    kept = ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    trigger = _deferred(tmp_path)
    monkeypatch.setattr(KilledTrainingBilling, "_settle", lambda self, state: None)
    trigger.stop_and_bill(wait_seconds=10, ask_state=False)
    _task_ended_with_its_wait(
        tmp_path, monkeypatch, "failed", trigger, end_date=kept.created_at + timedelta(minutes=1)
    )
    paid = ledger.paid_from([kept.id])[kept.id]
    assert paid > 0
    left = Decimal("4.00") - paid
    capsys.readouterr()

    # The dry run says the same, in the conditional: it said the unpaid part alone, not what stays spent.
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--dry-run"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"would release the hold of {HOLDER} in project=churn/month, freeing {format_usd_exact(left)} (the "
        f"{format_usd_exact(paid)} its job's entries paid from it would stay spent): it was kept at its "
        f"run's end, as its job {trigger.job_id} is billed (dry run: nothing freed)"
    ) in err
    with ledger.reading() as conn:
        assert reservations.reservation(conn, kept.id).status == "open"

    assert main(["jobs", "reconcile", "--ledger-url", ledger_url]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"released the hold of {HOLDER} in project=churn/month, freeing {format_usd_exact(left)} (the "
        f"{format_usd_exact(paid)} its job's entries paid from it stays spent): it was kept at its run's "
        f"end, as its job {trigger.job_id} is billed"
    ) in err
    with ledger.reading() as conn:
        closed = reservations.reservation(conn, kept.id)
    assert closed.status == "released"


def test_a_kept_hold_settled_meanwhile_is_not_said_released(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # release() changes nothing of a hold a settle closed first, and returns it as it stands: the reconcile
    # said "released $4.00" all the same.
    from costaware.adapters.ledger.store import Ledger

    ledger.set_budget("project=churn", "month", "10")
    trigger = _deferred(tmp_path)
    trigger.stop_and_bill(wait_seconds=10, ask_state=False)
    kept = ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    _task_ended_with_its_wait(
        tmp_path, monkeypatch, "failed", trigger, end_date=kept.created_at + timedelta(minutes=1)
    )
    release = Ledger.release_hold

    def settled_first(self: Any, reservation_id: str) -> Any:
        self.settle(reservation_id, "1.00", already_recorded=True)  # the job's own settle, late
        return release(self, reservation_id)

    monkeypatch.setattr(Ledger, "release_hold", settled_first)
    capsys.readouterr()
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "released $" not in err
    said = (
        f"the hold of {HOLDER} was settled meanwhile: nothing freed (it was kept at its run's end, as its "
        f"job {trigger.job_id} is billed)"
    )
    assert said in err


def test_a_hold_kept_for_a_job_whose_only_entry_gives_no_end_stays_held_and_is_said_unsure(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The job's entry was written before notes gave a job's end (or its note was cut), by no stop: it may
    # bill part of the run only, as the spool's drain keeps such a bill for a person. The reconcile took it
    # as "billed" all the same and released the hold kept at the run's end, the rest of the run unpaid.
    kept, billed = _billed_with_no_end(tmp_path, ledger, monkeypatch)
    capsys.readouterr()

    for dry_run in (["--dry-run"], []):
        assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--format", "json", *dry_run]) == 0
        out, err = capsys.readouterr()
        (row,) = _listed(out)
        assert row["result"] == (
            f"unsure: its entry {billed['entry_uid']} gives no job end (written before notes gave it, or "
            "cut), so it may bill part of the run only: the task's hold stays held. Check what the job ran "
            f"on local, then `costaware budget release --holder {HOLDER}` (or settle it)"
        )
        assert "released" not in err
        with ledger.reading() as conn:
            assert reservations.reservation(conn, kept.id).status == "open"


def _billed_with_no_end(tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """A task ended with its hold kept, its job billed by one entry whose note gives no end (no stop's)."""
    import re

    from costaware.adapters.ledger import schema

    ledger.set_budget("project=churn", "month", "10")
    trigger = _deferred(tmp_path)
    trigger.stop_and_bill(wait_seconds=10, ask_state=False)
    kept = ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    _task_ended_with_its_wait(
        tmp_path, monkeypatch, "failed", trigger, end_date=kept.created_at + timedelta(minutes=1)
    )
    (billed,) = _entries(ledger)
    assert ", ended " in billed["note"]
    e = schema.entries
    with ledger.transaction() as conn:
        conn.execute(
            e.update()
            .where(e.c.entry_uid == billed["entry_uid"])
            .values(note=re.sub(r", ended \S+?(?=:)", "", billed["note"]), cause="")
        )
    return kept, billed


def test_a_runs_end_keeps_the_hold_of_a_job_whose_only_entry_gives_no_end(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The listener's path: a job "found" billed had its task's hold released by the run's end.
    import logging

    from costaware.remote_reconcile import ended_waits, reconcile_ended_run

    kept, billed = _billed_with_no_end(tmp_path, ledger, monkeypatch)
    released: list[Any] = []
    reconciled = logging.getLogger("test.reconcile")

    with caplog.at_level("WARNING", logger="test.reconcile"):
        billed_here = reconcile_ended_run(
            DAG, RUN, {}, {}, log=reconciled, release_hold=lambda wait, conn_id: released.append(wait)
        )

    assert (billed_here, released) == (0, [])
    assert f"by entry {billed['entry_uid']} only, whose note gives no job end" in caplog.text
    assert [w.job_id for w in ended_waits(dag_id=DAG, run_id=RUN)] == [billed_job(billed)]
    with ledger.reading() as conn:
        assert reservations.reservation(conn, kept.id).status == "open"
    assert len(_entries(ledger)) == 1  # not stopped nor billed again


def billed_job(row: Any) -> str | None:
    from costaware.training.remote import job_of_attempt_note

    return job_of_attempt_note(str(row["note"]))


def _billed_with_no_end_from_its_backend(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, *, backend: str | None = None
) -> tuple[Any, Any]:
    """A task ended with its hold kept, its job billed in full by the billing path with no end to give.

    As ``attempt_entry`` writes a job that ended on its own while its backend gave no ``ended_at`` (a
    SageMaker job with no TrainingEndTime, a Failed pod with no end): keyed ``ended=none``, the job's
    cause, no end in the note. ``backend``: the wait's, where not the local backend the job ran on.
    """
    import re

    from costaware.adapters.ledger import schema
    from costaware.remote_reconcile import ended_waits
    from costaware.training.attempts import AttemptState
    from costaware.training.remote import attempt_key, attempt_uid

    ledger.set_budget("project=churn", "month", "10")
    trigger = _deferred(tmp_path)
    trigger.stop_and_bill(wait_seconds=10, ask_state=False)
    kept = ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    wait_state = {**trigger.state, **({"backend": backend} if backend else {})}
    _task_ended_with_its_wait(
        tmp_path,
        monkeypatch,
        "failed",
        trigger,
        end_date=kept.created_at + timedelta(minutes=1),
        kept={WAIT_STATE_XCOM_KEY: wait_state},
    )
    (wait,) = ended_waits(dag_id=DAG, run_id=RUN)
    identity = AttemptState.from_json(dict(wait.state)).plan.identity
    (billed,) = _entries(ledger)
    e = schema.entries
    with ledger.transaction() as conn:
        conn.execute(
            e.update()
            .where(e.c.entry_uid == billed["entry_uid"])
            .values(
                entry_uid=attempt_uid(attempt_key(identity, wait.job_id, None)),
                note=re.sub(r", ended \S+?(?=:)", "", billed["note"]),
                cause="success",
                outcome="succeeded",
            )
        )
    return kept, wait


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_hold_kept_for_a_job_billed_in_full_with_no_end_from_its_backend_is_released(
    tmp_path: Path,
    ledger: Any,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    dry_run: bool,
) -> None:
    # The billing path leaves the end out of an entry whose backend gave none: a full bill with the job's
    # own cause. The reconcile read it as an older note that lost its end ("unsure") and kept the hold to
    # its TTL, telling a person the bill may be partial.
    kept, wait = _billed_with_no_end_from_its_backend(tmp_path, ledger, monkeypatch)
    capsys.readouterr()
    flags = ["--dry-run"] if dry_run else []
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--format", "json", *flags]) == 0
    out, err = capsys.readouterr()
    err = " ".join(err.split())
    assert "unsure" not in out
    said = "would release" if dry_run else "released"
    assert (
        f"{said} $4.00 reserved in project=churn/month for {HOLDER}: it was kept at its run's end, as its "
        f"job {wait.job_id} is billed" in err
    )
    with ledger.reading() as conn:
        assert reservations.reservation(conn, kept.id).status == ("open" if dry_run else "released")
    assert len(_entries(ledger)) == 1  # not stopped nor billed again


def test_a_runs_end_releases_the_hold_of_a_job_billed_in_full_with_no_end_from_its_backend(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from costaware.remote_reconcile import reconcile_ended_run

    _kept, wait = _billed_with_no_end_from_its_backend(tmp_path, ledger, monkeypatch)
    released: list[Any] = []
    billed_here = reconcile_ended_run(
        DAG,
        RUN,
        {},
        {},
        log=logging.getLogger("test.reconcile"),
        release_hold=lambda ended, conn_id: released.append(ended.job_id),
    )
    assert (billed_here, released) == (0, [wait.job_id])
    assert len(_entries(ledger)) == 1


def test_a_sagemaker_jobs_entry_giving_no_end_is_proof_of_its_bill_as_at_the_spools_drain(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The drain never calls a SageMaker row unsure (row_of_unknown_run): its names are never reused and its
    # bill is the backend's billable time. The reconcile kept the hold of the same row as "unsure".
    from costaware.adapters.ledger import schema
    from costaware.remote_reconcile import entry_giving_no_end

    _kept, wait = _billed_with_no_end_from_its_backend(tmp_path, ledger, monkeypatch, backend="sagemaker")
    (billed,) = _entries(ledger)
    e = schema.entries
    with ledger.transaction() as conn:  # not even the billing path's key: an older note's
        conn.execute(e.update().where(e.c.entry_uid == billed["entry_uid"]).values(entry_uid="older"))
    assert wait.backend == "sagemaker"
    assert entry_giving_no_end(ledger, wait) is None


def test_an_entry_whose_note_lost_its_end_is_no_proof_even_with_the_jobs_own_cause(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keyed by its end but giving none in its note (an older version's note, or a cut one): the cause alone
    # does not tell a full bill, so the hold stays as the commit that brought "unsure" meant.
    from costaware.adapters.ledger import schema
    from costaware.remote_reconcile import ended_waits, entry_giving_no_end

    _kept, billed = _billed_with_no_end(tmp_path, ledger, monkeypatch)
    e = schema.entries
    with ledger.transaction() as conn:
        conn.execute(e.update().where(e.c.entry_uid == billed["entry_uid"]).values(cause="success"))
    (wait,) = ended_waits(dag_id=DAG, run_id=RUN)
    unsure = entry_giving_no_end(ledger, wait)
    assert unsure is not None and unsure["entry_uid"] == billed["entry_uid"]


def _earlier_runs_bill(wait: Any, identity: Any, run_token: str) -> Any:
    """A bill of the job's name written now, after the wait's submit, marking the run ``run_token``."""
    from costaware.core.ledger import Kind, LedgerEntry
    from costaware.training.remote import attempt_key, attempt_uid

    return LedgerEntry(
        dag_id=DAG, run_id=RUN, task_id=TASK, kind=Kind.COMPUTE, usd=Decimal("1.5"),
        tags={"project": "churn"}, quantity=Decimal("0.5"), unit="hour", price_source="remote:local",
        cause="killed",
        note=f"attempt {wait.current['attempt']}, job {wait.job_id} on local, 1800.0 s billed, "
        f"run {run_token}: killed",
        entry_uid=attempt_uid(attempt_key(identity, wait.job_id, legacy=True, run_token=run_token)),
    )  # fmt: skip


def test_an_earlier_run_of_the_jobs_name_billed_after_its_submit_is_not_read_as_its_bill(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # A cleared task's new try submits its job under the name an earlier try's run had (its job folder
    # gone), and that run's bill (its kill's) is written just after the submit. Read by its writing alone
    # it was this run's: "found", the running job neither stopped nor billed. Its note marks its own run.
    from costaware.remote_reconcile import ended_waits
    from costaware.training.attempts import AttemptState

    ledger.set_budget("project=churn", "month", "10")
    trigger = _deferred(tmp_path)
    ledger.reserve("project=churn", "4.00", holder=HOLDER, run_id=RUN, dag_id=DAG)
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger)
    (wait,) = ended_waits(dag_id=DAG, run_id=RUN)
    identity = AttemptState.from_json(dict(wait.state)).plan.identity
    run_token = wait.current["run_token"]  # the token the local backend wrote in the job's folder
    assert len(run_token) == 32
    assert ledger.record(_earlier_runs_bill(wait, identity, "e" * 32))
    assert main(["jobs", "reconcile", "--ledger-url", ledger_url, "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert f'"job": "{wait.job_id}"' in out  # listed, not read as billed ("[]")
    (row,) = _listed(out)
    assert row["job"] == wait.job_id and row["result"].startswith("billed $")
    assert not _running(tmp_path, wait.job_id)
    assert len(_entries(ledger)) == 2


def test_a_bill_marking_the_waits_own_run_is_its_bill(
    tmp_path: Path, ledger: Any, ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The same bill marking this run (its kill's, written by another path of the same run): found, not
    # billed a second time.
    from dataclasses import replace

    from costaware.remote_reconcile import billed_usd, ended_waits
    from costaware.training.attempts import AttemptState

    trigger = _deferred(tmp_path)
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger)
    (wait,) = ended_waits(dag_id=DAG, run_id=RUN)
    identity = AttemptState.from_json(dict(wait.state)).plan.identity
    assert ledger.record(_earlier_runs_bill(wait, identity, wait.current["run_token"]))
    assert billed_usd(ledger, wait) == Decimal("1.5")
    # Where the wait's state marks no run (kept by an older release), the rule before it: found too.
    older = replace(wait, state={**wait.state, "current": {**wait.current, "run_token": ""}})
    assert billed_usd(ledger, older) == Decimal("1.5")


@pytest.mark.parametrize(
    ("by", "waits_for_the_drain"), [("listener", True), ("cli", True), ("cli --ledger-url", False)]
)
def test_an_egress_the_ledger_refuses_waits_for_the_drain_only_where_the_drain_opens_that_ledger(
    by: str,
    waits_for_the_drain: bool,
    tmp_path: Path,
    ledger: Any,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The listener bills in workers_ledger(conn_id), and `jobs reconcile` without --ledger-url in
    # default_ledger_url()'s: the ledger this machine's drain of costaware_ledger opens. An egress that
    # ledger refused was logged for a person only, where the drain would have written it.
    from types import SimpleNamespace

    from costaware.plugins.listener import CostListener
    from costaware.remote_billing_egress import AttemptEgressBilling

    seen: list[bool] = []
    real = AttemptEgressBilling._bill_move_egress

    def bill_move_egress(self: AttemptEgressBilling, *args: Any) -> None:
        seen.append(self._spool_reaches_the_ledger)
        real(self, *args)

    monkeypatch.setattr(AttemptEgressBilling, "_bill_move_egress", bill_move_egress)
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    kept: dict[str, Any] = {}
    trigger = _deferred(
        tmp_path, RemoteTrainingOperator(**command_operator_args(tmp_path, "wait-for-notice")), kept=kept
    )
    _task_ended_with_its_wait(tmp_path, monkeypatch, "failed", trigger, kept=kept)

    if by == "listener":
        serialized = SimpleNamespace(task_id=TASK, task_type="RemoteTrainingOperator")
        CostListener().on_dag_run_failed(
            SimpleNamespace(dag_id=DAG, run_id=RUN, dag=SimpleNamespace(tasks=[serialized])), "timed_out"
        )
        _reconciled()
    else:
        from airflow import settings
        from airflow.models.connection import Connection

        # A metadata database keeping no costaware_ledger connection: the default is COSTAWARE_LEDGER_URL's.
        Connection.__table__.create(settings.Session.get_bind(), checkfirst=True)
        given = ["--ledger-url", ledger_url] if by.endswith("--ledger-url") else []
        assert main(["jobs", "reconcile", *given, "--wait-seconds", "10"]) == 0
    assert seen == [waits_for_the_drain]
    assert [e["cause"] for e in _entries(ledger)] == ["unwatched"]
