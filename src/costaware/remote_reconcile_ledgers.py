"""Which ledger an ended task bills: its DAG's ``ledger_conn_id``, and whether that is the ledger open here.

Split from :mod:`costaware.remote_reconcile`, which re-exports the public names.
"""

from __future__ import annotations

from typing import Any

from costaware.remote_reconcile_waits import EndedWait


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
