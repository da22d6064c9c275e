"""What the retrain and promote operators write to the ledger about a run: its outcome, how to reproduce it.

Writing the outcome is a record for people, not part of training: when the ledger cannot be written the
operator logs an error and the run goes on (its cost is still recorded by the listener, which spools).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costaware.glue import DEFAULT_LEDGER_CONN_ID
from costaware.training.record import package_version

__all__ = [
    "command_outcome",
    "dag_file_sha256",
    "package_version",
    "promotion_outcome",
    "record_retrain_outcome",
    "retrain_outcome",
    "write_outcome",
]

log = logging.getLogger(__name__)


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


def retrain_outcome(
    *,
    context: Mapping[str, Any],
    identity: Mapping[str, Any],
    result: Mapping[str, Any],
    features_key: str = "",
) -> Any:
    """The run outcome of a finished built-in training (not scored yet) with its reproducibility record.

    The record's trainer, its parameters and seeds, the data fingerprint and library versions are the job's
    own, from the runner's ``result["record"]`` (:func:`~costaware.training.record.training_record`). A
    result written by an older job without it gives the version, rows and steps and no record: an empty
    record would share its digest with every other such run, as if they had trained the same way.
    """
    from costaware.core.ledger import utcnow
    from costaware.core.outcomes import ReproRecord, RunOutcome

    facts = dict(result.get("record") or {})
    record = (
        None
        if not facts
        else ReproRecord(
            data_fingerprint=str(facts.get("data_fingerprint") or ""),
            features_key=features_key,
            package_version=str(facts.get("package_version") or ""),
            dag_file_sha256=dag_file_sha256(context),
            trainer=str(facts.get("trainer") or ""),
            trainer_params=dict(facts.get("trainer_params") or {}),
            seeds={str(k): int(v) for k, v in dict(facts.get("seeds") or {}).items()},
            mode=str(result.get("mode") or ""),
            parent=result.get("parent"),
            libraries={str(k): str(v) for k, v in dict(facts.get("libraries") or {}).items()},
        )
    )
    return RunOutcome(
        dag_id=str(identity["dag_id"]),
        run_id=str(identity["run_id"]),
        model_version=str(result["version"]),
        task_id=str(identity["task_id"]),
        training_rows=int(result.get("rows") or 0),
        iterations=int(facts.get("iterations") or result.get("steps") or 0),
        iteration_unit=str(facts.get("iteration_unit") or "epochs"),
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


def record_retrain_outcome(
    *,
    context: Mapping[str, Any],
    identity: Mapping[str, Any],
    result: Mapping[str, Any],
    ledger_conn_id: str,
    task_log: Any,
    features_key: str = "",
) -> None:
    """:func:`retrain_outcome` written to the ledger, and the record's digest in the task's ``task_log``."""
    outcome = retrain_outcome(context=context, identity=identity, result=result, features_key=features_key)
    if write_outcome(outcome, ledger_conn_id):
        record = outcome.record.digest[:16] if outcome.record else "none (a job of an older version)"
        task_log.info("recorded the run's outcome; reproducibility record %s", record)


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
