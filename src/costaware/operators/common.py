"""Small helpers every costaware operator shares: who is running, where its stores live, S3 options."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from costaware.core.errors import ConfigurationError


def run_identity(context: Mapping[str, Any], task_id: str) -> dict[str, Any]:
    """dag_id, run_id, task_id, try_number and map_index of the running task, from its context."""
    ti = context.get("ti") or context.get("task_instance")
    dag = context.get("dag")
    return {
        "dag_id": str(getattr(ti, "dag_id", None) or getattr(dag, "dag_id", None) or "adhoc"),
        "run_id": str(context.get("run_id") or getattr(ti, "run_id", None) or "manual"),
        "task_id": str(getattr(ti, "task_id", None) or task_id),
        "try_number": int(getattr(ti, "try_number", None) or 1),
        "map_index": int(getattr(ti, "map_index", -1) if getattr(ti, "map_index", None) is not None else -1),
    }


def default_store(name: str) -> str:
    """``$AIRFLOW_HOME/costaware/<name>`` (the embedded default for models, checkpoints, quality results)."""
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return str(Path(home) / "costaware" / name)


def storage_options(aws_conn_id: str | None) -> dict[str, Any]:
    """S3 credentials, region and endpoint of an Airflow AWS connection as keywords (empty: default chain)."""
    if not aws_conn_id:
        return {}
    from costaware.hooks.aws import s3_options

    return dataclasses.asdict(s3_options(aws_conn_id))


def as_bool(value: object, name: str) -> bool:
    """A templated flag: a bool, or the strings true/false/1/0/yes/no."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", "", "none"):
        return False
    raise ConfigurationError(f"{name} must be true or false, got {value!r}")


def run_tags(
    operator: Any, context: Mapping[str, Any], own: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The run's allocation tags as the cost listener sees them, then the operator's own ``tags``.

    Every entry an operator writes itself then carries the same tags as the listener's entries: the DAG's
    ``key:value`` tags and the run's team/project/owner params.
    """
    from costaware.plugins.listener import tags_for

    try:
        dag = operator.dag
    except RuntimeError:  # an operator run outside any DAG (tests, ad-hoc execute)
        dag = None
    return {**tags_for(dag, dict(context.get("params") or {})), **dict(own or {})}
