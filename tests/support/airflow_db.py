"""A real SQLite metadata database with Airflow's ``dag_run``, ``task_instance`` and ``xcom`` tables."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest


def airflow_metadata_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Point Airflow's sessions at a new database; return ``put(dag, run, task, state, run_state=...)``.

    ``put`` adds the run (once) and the task instance in the states given, as the scheduler writes them
    (``next_method="__fail__"``: its deferred wait ended without an event, its trigger taken away).
    """
    from airflow import settings
    from airflow.models import import_all_models
    from airflow.models.base import Base
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import create_engine
    from sqlalchemy.orm import scoped_session, sessionmaker

    import_all_models()
    engine = create_engine(f"sqlite:///{tmp_path / 'airflow.db'}")
    Base.metadata.create_all(engine, tables=[DagRun.__table__, TaskInstance.__table__, XComModel.__table__])
    monkeypatch.setattr(settings, "Session", scoped_session(sessionmaker(bind=engine)))

    def put(
        dag_id: str,
        run_id: str,
        task_id: str,
        state: str | None,
        *,
        run_state: str = "running",
        map_index=-1,
        next_method: str | None = None,
        end_date: datetime | None = None,
    ) -> None:
        with engine.begin() as conn:
            runs = DagRun.__table__
            if not conn.execute(
                runs.select().where(runs.c.dag_id == dag_id, runs.c.run_id == run_id)
            ).first():
                conn.execute(
                    runs.insert().values(
                        dag_id=dag_id,
                        run_id=run_id,
                        run_type="manual",
                        state=run_state,
                        run_after=datetime(2026, 11, 2, tzinfo=timezone.utc),
                        log_template_id=None,
                    )
                )
            conn.execute(
                TaskInstance.__table__.insert().values(
                    id=uuid.uuid4(),
                    dag_id=dag_id,
                    run_id=run_id,
                    task_id=task_id,
                    map_index=map_index,
                    state=state,
                    pool="default_pool",
                    try_number=1,
                    max_tries=0,
                    pool_slots=1,
                    span_status="not_started",
                    next_method=next_method,
                    end_date=end_date,
                )
            )

    return put


def put_xcom(dag_id: str, run_id: str, task_id: str, key: str, value: object, *, map_index: int = -1) -> None:
    """Keep ``value`` in the XCom ``key`` of a task :func:`airflow_metadata_db`'s ``put`` added."""
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel

    with settings.Session() as session:
        run = session.query(DagRun).filter_by(dag_id=dag_id, run_id=run_id).one()
        session.add(
            XComModel(
                dag_run_id=run.id,
                dag_id=dag_id,
                run_id=run_id,
                task_id=task_id,
                map_index=map_index,
                key=key,
                value=XComModel.serialize_value(value),
                timestamp=datetime.now(timezone.utc),
            )
        )
        session.commit()
