"""The task context an operator's ``execute`` gets, built one way for every operator test.

Operators read the running try's identity from ``context["ti"]`` (dag_id, run_id, task_id, try_number,
map_index), the run id and the run's params; nothing else, so a plain namespace stands in for the TI.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def task_context(
    task_id: str,
    *,
    dag_id: str = "retrain",
    run_id: str = "manual__1",
    try_number: int = 1,
    map_index: int = -1,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"ti": ..., "run_id": ..., "params": ...}`` for one try of ``dag_id.task_id`` in ``run_id``."""
    ti = SimpleNamespace(
        dag_id=dag_id, task_id=task_id, run_id=run_id, try_number=try_number, map_index=map_index
    )
    return {"ti": ti, "run_id": run_id, "params": dict(params or {})}
