"""Tries killed before their own listener ran: recorded where Airflow reports them, from the metadata DB.

The scheduler (a lost worker, a zombie) and the API server (a task or run marked while it ran) call the
listener with a metadata-database TaskInstance. Here that TaskInstance is a stand-in of the same module and
fields, and the DAG is a real serialized DAG, as ``SerializedDagModel.get_dag`` returns it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG, task
from airflow.serialization.serialized_objects import DagSerialization

from costaware import Ledger
from costaware.plugins import killed_tries
from costaware.plugins import listener as listener_module
from costaware.plugins.listener import CostListener

START = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)


class OrmTaskInstance(SimpleNamespace):
    """Fields of ``airflow.models.taskinstance.TaskInstance`` the listener reads, from that module."""


OrmTaskInstance.__module__ = "airflow.models.taskinstance"


def serialized_dag() -> Any:
    with DAG(
        "nightly",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        tags=["project:churn"],
        params={"team": "ml"},
    ) as dag:

        @task(params={"costaware_compute": {"instance_type": "g5.xlarge", "market": "on_demand"}})
        def train() -> int:
            return 1

        @task
        def prep() -> int:
            return 1

        train()
        prep()
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def killed(task_id: str = "train", minutes: float = 30, **fields: Any) -> OrmTaskInstance:
    values: dict[str, Any] = {
        "id": f"019ad0c4-{task_id}",
        "dag_id": "nightly",
        "run_id": "manual__1",
        "task_id": task_id,
        "map_index": -1,
        "try_number": 1,
        "start_date": START,
        "end_date": START + timedelta(minutes=minutes),
        "next_method": None,
        "dag_run": SimpleNamespace(conf={"owner": "ana"}),
    }
    values.update(fields)
    return OrmTaskInstance(**values)


def in_worker(ti_id: str, *, try_number: int) -> SimpleNamespace:
    """The worker's TI of task ``prep`` (its listener's view), a one-minute try."""
    return SimpleNamespace(
        id=ti_id,
        dag_id="nightly",
        run_id="manual__1",
        task_id="prep",
        map_index=-1,
        try_number=try_number,
        task=SimpleNamespace(dag=None, params={}),
        start_date=START,
        end_date=START + timedelta(minutes=1),
        get_template_context=dict,
    )


@pytest.fixture
def ledger(ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Ledger:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    monkeypatch.setattr(listener_module, "spool_dir", lambda: tmp_path / "spool")
    dag = serialized_dag()
    monkeypatch.setattr(
        killed_tries, "_serialized_dag", lambda dag_id, session=None: dag if dag_id == "nightly" else None
    )
    return Ledger.from_url(ledger_url)


def test_a_try_killed_while_it_ran_is_charged_on_its_declared_compute_and_tags(ledger: Ledger) -> None:
    # Marking a running task (or its run) failed killed it in its worker, whose listener never ran: its
    # 30 minutes on a g5.xlarge were missing from the ledger and from the budgets.
    ledger.set_budget("project=churn", "month", "100")
    held = ledger.reserve("project=churn", "5", holder="nightly/manual__1/train/-1")
    CostListener().on_task_instance_failed(None, killed(), "marked failed")
    (row,) = ledger.entries(dag_id="nightly")
    assert (row["instance_type"], row["quantity"], row["cause"]) == ("g5.xlarge", Decimal("0.5"), "killed")
    assert row["usd"] == (Decimal("1.006") / 2).quantize(Decimal("0.000001"))  # g5.xlarge on-demand
    assert row["tags"] == {"project": "churn", "team": "ml", "owner": "ana"}
    assert "killed before it ended" in row["note"]
    assert ledger.usage("project=churn")[0].reserved_usd == 0  # the gate's hold is settled with it
    assert held.id


def test_a_try_the_worker_recorded_is_not_counted_twice(ledger: Ledger) -> None:
    # The worker's entry and the metadata one carry the same uid: marking a finished task failed, or a
    # try ending as it was being marked, counts once.
    CostListener().on_task_instance_success(None, in_worker("019ad0c4-prep", try_number=1))
    CostListener().on_task_instance_failed(None, killed(task_id="prep"), "marked failed")
    (row,) = ledger.entries(dag_id="nightly")
    assert (row["quantity"], row["outcome"]) == (Decimal("0.016667"), "success")  # the worker's, first


@pytest.mark.parametrize(
    "fields",
    [
        {"start_date": None},  # queued when marked: never ran
        {"next_method": "execute_complete"},  # deferred: start to end held no worker
    ],
)
def test_tries_that_held_no_worker_are_not_charged(ledger: Ledger, fields: dict[str, Any]) -> None:
    CostListener().on_task_instance_failed(None, killed(**fields), "marked failed")
    assert ledger.entries(dag_id="nightly") == []


def test_a_try_put_up_for_retry_does_not_take_the_next_tries_key(ledger: Ledger) -> None:
    # The scheduler gives the TI the next try's id before it reports the lost try: keyed by the id alone,
    # the killed try 1 took try 2's key, and try 2's own entry (from its worker) was dropped.
    CostListener().on_task_instance_failed(None, killed(task_id="prep", id="next-id", try_number=1), "lost")
    CostListener().on_task_instance_success(None, in_worker("next-id", try_number=2))
    rows = sorted(ledger.entries(dag_id="nightly"), key=lambda r: r["try_number"])
    assert [(r["try_number"], r["cause"], r["outcome"]) for r in rows] == [
        (1, "killed", "failed"),
        (2, "", "success"),
    ]


def test_a_killed_remote_training_try_carries_the_operators_own_tags(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Its worker time (a wait in the worker) was recorded without the operator's tags, so the budget the
    # task holds in (its budget_scope, over those tags) left it out. The tags are a template field now, so
    # the serialized DAG keeps them; a value still a template is left out.
    from costaware.operators.remote_training import RemoteTrainingOperator

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    monkeypatch.setattr(listener_module, "spool_dir", lambda: tmp_path / "spool")
    with DAG("remote", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        RemoteTrainingOperator(
            task_id="train",
            command=["python", "train.py"],
            instance_type="m5.large",
            model_store=str(tmp_path / "models"),
            checkpoint_store=str(tmp_path / "ckpt"),
            deferrable=False,
            tags={"project": "churn", "cost_center": "{{ params.cc }}"},
        )
    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    monkeypatch.setattr(killed_tries, "_serialized_dag", lambda dag_id, session=None: serialized)
    workers = Ledger.from_url(
        ledger_url
    )  # the workers' ledger exists: the scheduler writes only to one it sees
    CostListener().on_task_instance_failed(None, killed(dag_id="remote"), "marked failed")
    (row,) = workers.entries(dag_id="remote")
    assert row["cause"] == "killed" and row["tags"] == {"project": "churn", "owner": "ana"}


def test_a_templated_tag_is_checked_once_rendered_not_when_the_dag_is_parsed() -> None:
    # Its text before rendering may hold what a tag may not (a ',' of a Jinja call); run_tags checks the
    # rendered value when the task runs.
    from costaware.glue import check_tags, is_template

    given = {"project": "{{ params.get('project', 'churn') }}", "team": "ml"}
    assert check_tags(given, owner="RemoteTrainingOperator 'train'") == given
    with pytest.raises(ValueError, match="RemoteTrainingOperator 'train'"):
        check_tags({"team": "ml,vision"}, owner="RemoteTrainingOperator 'train'")
    assert [is_template(v) for v in ("{{ x }}", "{% if a %}b{% endif %}", "{# c #}", "plain")] == [
        True,
        True,
        True,
        False,
    ]


def test_a_killed_try_is_priced_off_the_callers_thread_and_its_dag_read_in_its_session(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In the scheduler, the pricing's connection look-ups opened Airflow's thread-local session, which is
    # the scheduler's own transaction: committed (or rolled back) and closed mid-batch.
    import threading

    from airflow.models.serialized_dag import SerializedDagModel

    from costaware.plugins import try_cost

    threads: list[str] = []
    real_build = try_cost.build_entry

    def build(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(try_cost, "build_entry", build)
    CostListener().on_task_instance_failed(None, killed(), "marked failed")
    assert threads == ["costaware-killed-try"]
    assert [r["cause"] for r in ledger.entries(dag_id="nightly")] == ["killed"]

    sessions: list[Any] = []
    monkeypatch.undo()  # the fixture's stand-in off: read the real way, in the session given
    monkeypatch.setattr(
        SerializedDagModel, "get_dag", lambda dag_id, **kw: sessions.append(kw.get("session"))
    )
    caller = object()
    killed_tries._serialized_dag("nightly", caller)
    assert sessions == [caller]


def test_a_killed_try_and_its_runs_end_reach_the_ledger_its_task_names(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The scheduler holds the serialized task, which kept no ledger_conn_id: a task on a team ledger had
    # its killed try written to the default ledger, and its run's end released only the default ledger's
    # holds (the team's counted on until their time limit). It is a template field now.
    import json

    from airflow.providers.standard.operators.empty import EmptyOperator

    from costaware.sensors.spend_cap import SpendCapSensor

    team_url = f"sqlite:///{tmp_path / 'team.db'}"
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    monkeypatch.setenv(
        "AIRFLOW_CONN_TEAM_LEDGER", json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "team.db")})
    )
    monkeypatch.setattr(listener_module, "spool_dir", lambda: tmp_path / "spool")
    with DAG("team", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        gate = SpendCapSensor(
            task_id="gate", scope="project=churn", estimated_usd="5", ledger_conn_id="team_ledger"
        )
        gate >> EmptyOperator(task_id="train")
        SpendCapSensor(
            task_id="templated", scope="project=churn", estimated_usd="5", ledger_conn_id="{{ params.l }}"
        )
    serialized = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert [t.ledger_conn_id for t in serialized.tasks if t.task_id != "train"] == [
        "team_ledger",
        "{{ params.l }}",
    ]
    monkeypatch.setattr(killed_tries, "_serialized_dag", lambda dag_id, session=None: serialized)
    team, default = Ledger.from_url(team_url), Ledger.from_url(ledger_url)
    team.set_budget("project=churn", "month", "100")
    team.reserve("project=churn", "5", holder="team/manual__1/train/-1")

    CostListener().on_task_instance_failed(None, killed(dag_id="team", task_id="gate"), "marked failed")
    assert [r["cause"] for r in team.entries(dag_id="team")] == ["killed"]
    assert default.entries(dag_id="team") == []
    CostListener().on_task_instance_failed(None, killed(dag_id="team", task_id="templated"), "marked failed")
    assert [r["task_id"] for r in default.entries(dag_id="team")] == ["templated"]  # rendered only at run

    CostListener().on_dag_run_failed(SimpleNamespace(dag_id="team", run_id="manual__1", dag=serialized), "x")
    assert team.open_reservations() == []


def test_every_operator_and_sensor_with_a_ledger_keeps_it_in_its_serialized_definition() -> None:
    import importlib
    import inspect
    import pkgutil

    from airflow.sdk import BaseOperator

    import costaware.operators
    import costaware.sensors

    missing, seen = [], 0
    for package in (costaware.operators, costaware.sensors):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for cls in vars(module).values():
                if not (
                    inspect.isclass(cls)
                    and issubclass(cls, BaseOperator)
                    and cls.__module__ == module.__name__
                ):
                    continue
                inits = [k.__init__ for k in cls.__mro__ if "__init__" in vars(k)]
                if cls.__name__[0] != "_" and any(
                    "ledger_conn_id" in inspect.signature(i).parameters for i in inits
                ):
                    seen += 1
                    if "ledger_conn_id" not in cls.template_fields:
                        missing.append(cls.__name__)
    assert seen >= 12 and missing == []


def test_a_mapped_tasks_ledger_is_read_from_its_partial_arguments() -> None:
    # A tuning trial (a mapped task) kept its ledger_conn_id in partial_kwargs in the scheduler: its killed
    # tries went to the default ledger.
    from costaware.glue import ledger_conn_id_of
    from costaware.sensors.spend_cap import SpendCapSensor

    with DAG("mapped", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        SpendCapSensor.partial(task_id="gate", scope="project=churn", ledger_conn_id="team_ledger").expand(
            estimated_usd=["1", "2"]
        )
    (task,) = DagSerialization.from_dict(DagSerialization.to_dict(dag)).tasks
    assert type(task).__name__ == "SerializedMappedOperator" and ledger_conn_id_of(task) == "team_ledger"


def test_a_killed_try_is_priced_on_the_dag_version_it_ran_not_a_later_one(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The try ran on a g5.xlarge; the DAG was changed to a g5.2xlarge while it ran. Its price was read from
    # the latest serialized DAG: the killed try was billed on a type it never ran on.
    import uuid

    from airflow.models import import_all_models
    from airflow.models.base import Base
    from airflow.models.dag import DagModel
    from airflow.models.dag_version import DagVersion
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.dagrun import DagRun
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    versions = select(DagVersion).where(DagVersion.dag_id == "nightly")
    import_all_models()
    engine = create_engine(f"sqlite:///{tmp_path / 'airflow.db'}")
    Base.metadata.create_all(engine)

    def version_on(instance_type: str) -> LazyDeserializedDAG:
        with DAG("nightly", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:

            @task(params={"costaware_compute": {"instance_type": instance_type, "market": "on_demand"}})
            def train() -> int:
                return 1

            train()
        return LazyDeserializedDAG(data=DagSerialization.to_dict(dag))

    with Session(engine) as session:
        session.add_all([DagBundleModel(name="dags"), DagModel(dag_id="nightly", bundle_name="dags")])
        session.flush()
        SerializedDagModel.write_dag(version_on("g5.xlarge"), bundle_name="dags", session=session)
        ran = session.scalars(versions).one()
        run = DagRun(dag_id="nightly", run_id="manual__1", run_type="manual", conf={})
        session.add(run)
        session.flush()
        first = SerializedDagModel.get_dag("nightly", session=session)
        ti = TaskInstance(task=first.get_task("train"), run_id="manual__1", dag_version_id=ran.id)
        ti.id = uuid.uuid4()
        ti.start_date, ti.end_date, ti.try_number = START, START + timedelta(minutes=30), 1
        session.add(ti)
        session.flush()
        SerializedDagModel.write_dag(version_on("g5.2xlarge"), bundle_name="dags", session=session)
        session.flush()
        assert len(session.scalars(versions).all()) == 2
        latest = SerializedDagModel.get_dag("nightly", session=session)
        assert latest.get_task("train").params["costaware_compute"]["instance_type"] == "g5.2xlarge"

        priced = killed_tries.killed_try_pricing(ti, "failed")
        assert priced is not None
        entry = priced[1]()
    assert (entry.instance_type, entry.usd) == (
        "g5.xlarge",
        (Decimal("1.006") / 2).quantize(Decimal("0.000001")),
    )


@pytest.mark.parametrize("ledger_conn_id", ["costaware_ledger", "team_ledger"])
def test_a_killed_try_on_a_machine_without_the_workers_ledger_is_spooled_not_written_to_a_fallback(
    ledger_conn_id: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A scheduler or API server without the workers' connection (or COSTAWARE_LEDGER_URL) opened the hook's
    # fallback: a new $AIRFLOW_HOME/costaware/ledger.db no budget reads got the try's cost, and the spooled
    # entries of the same ledger with it.
    import json
    import logging

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_COSTAWARE_LEDGER", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_TEAM_LEDGER", raising=False)
    spool = tmp_path / "spool"
    monkeypatch.setattr(listener_module, "spool_dir", lambda: spool)
    dag = serialized_dag()
    monkeypatch.setattr(killed_tries, "_serialized_dag", lambda dag_id, session=None: dag)
    from costaware import glue

    monkeypatch.setattr(glue, "ledger_conn_id_of", lambda task: ledger_conn_id)  # as the task names it
    with caplog.at_level(logging.ERROR, logger=listener_module.__name__):
        CostListener().on_task_instance_failed(None, killed(), "marked failed")
    assert not (tmp_path / "airflow" / "costaware" / "ledger.db").exists()
    (spooled,) = spool.glob("*.json")
    assert json.loads(spooled.read_text())["ledger_conn_id"] == ledger_conn_id
    assert f"AIRFLOW_CONN_{ledger_conn_id.upper()}" in caplog.text
