"""What the retrain and promote operators write to the ledger about a run: its outcome, how to reproduce it.

Writing the outcome is a record for people, not part of training: when the ledger cannot be written the
operator logs an error and the run goes on (its cost is still recorded by the listener, which spools).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costaware.glue import DEFAULT_LEDGER_CONN_ID

log = logging.getLogger(__name__)

PACKAGE = "airflow-provider-costaware"
#: Libraries whose version changes what a trainer produces.
MODEL_LIBRARIES = ("numpy", "pandas", "scikit-learn", "xgboost", "lightgbm")
SEED_NAMES = ("seed", "random_state", "random_seed")


def package_version() -> str:
    """The installed version of airflow-provider-costaware (the module's version when run from source)."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        from costaware import __version__

        return f"{__version__} (source)"


def dag_file_sha256(context: Mapping[str, Any]) -> str:
    """SHA-256 of the running DAG's file, or "" when the file is not known or readable."""
    dag = context.get("dag")
    location = getattr(dag, "fileloc", None)
    if not location:
        return ""
    try:
        return hashlib.sha256(Path(location).read_bytes()).hexdigest()
    except OSError:
        return ""


def trainer_seeds(trainer: Any) -> dict[str, int]:
    """Every seed a trainer uses: its ``seed`` attribute and seed-like keys of its ``params``."""
    seeds: dict[str, int] = {}
    if isinstance(getattr(trainer, "seed", None), int):
        seeds["seed"] = int(trainer.seed)
    params = getattr(trainer, "params", None)
    if isinstance(params, Mapping):
        for name in SEED_NAMES:
            if isinstance(params.get(name), int):
                seeds[f"params.{name}"] = int(params[name])
    return seeds


def iterations_of(trainer: Any, steps: int) -> tuple[int, str]:
    """Boosting rounds (steps x rounds per step) for boosters, else epochs (one per step)."""
    per_step = getattr(trainer, "rounds_per_step", None) or getattr(trainer, "trees_per_step", None)
    if isinstance(per_step, int) and per_step > 0:
        return steps * per_step, "rounds"
    return steps, "epochs"


def retrain_outcome(
    *,
    context: Mapping[str, Any],
    identity: Mapping[str, Any],
    result: Mapping[str, Any],
    trainer: Any,
    trainer_params: Mapping[str, Any],
    data_fingerprint: str,
    features_key: str,
) -> Any:
    """The run outcome of a finished retrain (not scored yet) with its reproducibility record."""
    from costaware.core.fingerprint import library_versions
    from costaware.core.ledger import utcnow
    from costaware.core.outcomes import ReproRecord, RunOutcome
    from costaware.training.trainers import trainer_path

    iterations, unit = iterations_of(trainer, int(result.get("steps") or 0))
    record = ReproRecord(
        data_fingerprint=data_fingerprint,
        features_key=features_key,
        package_version=package_version(),
        dag_file_sha256=dag_file_sha256(context),
        trainer=trainer_path(trainer),
        trainer_params=dict(trainer_params),
        seeds=trainer_seeds(trainer),
        mode=str(result.get("mode") or ""),
        parent=result.get("parent"),
        libraries={k: v for k, v in library_versions(MODEL_LIBRARIES).items() if v != "absent"},
    )
    return RunOutcome(
        dag_id=str(identity["dag_id"]),
        run_id=str(identity["run_id"]),
        model_version=str(result["version"]),
        task_id=str(identity["task_id"]),
        training_rows=int(result.get("rows") or 0),
        iterations=iterations,
        iteration_unit=unit,
        record=record,
        recorded_at=utcnow(),
    )


def command_outcome(
    *,
    context: Mapping[str, Any],
    identity: Mapping[str, Any],
    version: str,
    metrics: Mapping[str, float],
    command: Sequence[str],
    image: str | None,
) -> Any:
    """The run outcome of a team's own training command: its version and metrics (not scored yet).

    The record names the command and image (what reproduces it); the job's metrics ride along with it, so
    ``costaware runs show`` lists them. Data fingerprint and seeds are the command's own business.
    """
    from costaware.core.ledger import utcnow
    from costaware.core.outcomes import ReproRecord, RunOutcome

    record = ReproRecord(
        data_fingerprint="",
        package_version=package_version(),
        dag_file_sha256=dag_file_sha256(context),
        trainer="command",
        trainer_params={"command": list(command), "image": image or None},
        mode="full",
        metrics=dict(metrics),
    )
    return RunOutcome(
        dag_id=str(identity["dag_id"]),
        run_id=str(identity["run_id"]),
        model_version=version,
        task_id=str(identity["task_id"]),
        record=record,
        recorded_at=utcnow(),
    )


def promotion_outcome(*, identity: Mapping[str, Any], decision: Mapping[str, Any], meta: Any) -> Any:
    """The run outcome a promotion decision adds: the metric, the champion's, and whether it was promoted.

    ``meta`` is the candidate's ``ModelVersion`` (None when it could not be read); its run is the run the
    outcome belongs to, so a candidate trained by another run is scored on that run's row.
    """
    from costaware.core.ledger import utcnow
    from costaware.core.outcomes import RunOutcome

    trained_by = dict(getattr(meta, "run", None) or {})
    metrics = dict(getattr(meta, "metrics", None) or {})
    return RunOutcome(
        dag_id=str(trained_by.get("dag_id") or identity["dag_id"]),
        run_id=str(trained_by.get("run_id") or identity["run_id"]),
        model_version=str(decision["candidate"]),
        task_id=str(trained_by.get("task_id") or ""),
        metric=str(decision.get("metric") or ""),
        metric_value=decision.get("candidate_metric"),
        champion_metric=decision.get("champion_metric"),
        promoted=bool(decision.get("promote")),
        training_rows=int(metrics.get("rows") or 0),
        recorded_at=utcnow(),
    )


def write_outcome(outcome: Any, ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID) -> bool:
    """Store ``outcome`` in the ledger; log and return False when the ledger cannot be written."""
    from costaware.adapters.ledger.efficiency import record_outcome
    from costaware.core.errors import CostawareError
    from costaware.hooks.ledger import CostLedgerHook

    try:
        record_outcome(CostLedgerHook(ledger_conn_id).get_conn(), outcome)
    except (CostawareError, OSError) as e:  # unreachable database, or a ledger folder that cannot be made
        log.error(
            "costaware: could not record the outcome of run %s (model %s): %s",
            outcome.run_id,
            outcome.model_version,
            e,
        )
        return False
    return True
