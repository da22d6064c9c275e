"""One evaluate-and-promote step: get both models' figures of the team's metric, decide, record, switch.

The figures come from one of three places (``costaware.core.promotion.metric_source``):

* ``job``: the candidate's from the training job's own metrics (``candidate_metrics``), the champion's from
  the metrics stored with its version;
* ``command``: the team's scoring command, run once for the candidate and once for the champion;
* ``holdout``: costaware predicts the holdout with each model (costaware's trainers only) and computes a
  built-in metric.

Every check runs before anything is written: a bad argument, a metric missing on either side or a failed
scoring command records no decision and leaves the champion as it was.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from costaware.adapters.model_store import ModelStore
from costaware.adapters.model_versions import UNRECORDED, IncompleteVersionError, ModelVersion
from costaware.core.errors import ConfigurationError
from costaware.core.given import not_given
from costaware.core.promotion import (
    COMMAND,
    COMPLETE,
    DEFAULT_SCORING_TIMEOUT_SECONDS,
    JOB,
    check_source,
    decide_promotion,
    metric_direction,
    metric_source,
    metric_value,
    parse_command,
    parse_metrics,
    validate_margin,
    validate_timeout,
)
from costaware.training.scoring import command_scores, holdout_scores
from costaware.training.spec import parse_label_threshold

log = logging.getLogger(__name__)


def _label_mismatch(candidate: ModelVersion, label_column: Any, label_threshold: Any) -> str:
    """Why the holdout's label column is read at another threshold than ``candidate`` was trained on.

    Empty when it is not (or the candidate's threshold is unknown, or the holdout names another column).

    A retrain on ``arr_delay > 15`` promoted with ``label_threshold=90`` was scored, and could be promoted,
    on a label it never learned: its ROC AUC fell to 0.38 and nothing said why.
    """
    # A holdout may name its label column otherwise; one column read at another threshold is a typo.
    if candidate.label_threshold == UNRECORDED or str(label_column) != candidate.label:
        return ""
    given = parse_label_threshold(label_threshold)
    trained = None if candidate.label_threshold is None else float(candidate.label_threshold)
    if given == trained:
        return ""

    def label(column: Any, threshold: float | None) -> str:
        return f"{column!s} > {threshold:g}" if threshold is not None else f"{column!s} (its own values)"

    return (
        f"candidate {candidate.version!r} was trained on the label {label(candidate.label, trained)}, but "
        f"this promotion scores {label(label_column, given)} (label_column={label_column!r}, "
        f"label_threshold={label_threshold!r}): both models would be judged on a label the candidate never "
        "learned; give the retrain task's label_column and label_threshold"
    )


def promote_candidate(
    *,
    model_store: str,
    candidate: str,
    metric: str = "roc_auc",
    higher_is_better: bool | str | None = None,
    margin: float | str = 0.0,
    holdout_path: str | None = None,
    label_column: str | None = None,
    label_threshold: float | None = None,
    candidate_metrics: Mapping[str, Any] | str | None = None,
    scoring_command: Sequence[str] | str | None = None,
    scoring_timeout_seconds: float = DEFAULT_SCORING_TIMEOUT_SECONDS,
    run: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Get the candidate's and the champion's figures, decide, record the decision, switch if promoted.

    A candidate whose run did not complete (incomplete files, status ``interrupted`` or ``failed``) is
    never scored and never promoted; the refusal is recorded like any other decision. See
    ``ModelPromoteOperator`` for the arguments.

    Returns:
        The decision as recorded in the model store (JSON-able), with its file name.

    Raises:
        ConfigurationError: A bad argument, a metric missing from either side, or a failed scoring
            (``ScoringError``); nothing is recorded and the champion stays.
    """
    better_high = metric_direction(metric, higher_is_better)
    margin = validate_margin(margin)
    source = metric_source(candidate_metrics, scoring_command)
    check_source(
        source,
        metric=metric,
        holdout_path=holdout_path,
        label_column=label_column,
        label_threshold=label_threshold,
    )
    job_metrics = (
        parse_metrics(candidate_metrics, "candidate_metrics") if candidate_metrics is not None else {}
    )
    command = parse_command(scoring_command) if scoring_command is not None else []
    timeout = validate_timeout(scoring_timeout_seconds)
    if not_given(candidate):  # "None", or "null" through | tojson: an XCom or param that gave nothing
        raise ConfigurationError(
            f"no candidate version given, got {candidate!r}: pass the retrain task's 'version' (its XCom)"
        )
    opts = dict(storage_options or {})
    store = ModelStore.open(model_store, **opts)
    meta: ModelVersion | None
    try:
        meta = store.get(candidate)
        status = meta.status
    except IncompleteVersionError:
        meta, status = None, "incomplete"
    champion = store.champion()
    if champion and champion.version == candidate:
        return _promoted_before(store, candidate, dict(run or {}))
    figures: dict[str, float | None] = {"candidate": None, "champion": None}
    scores: dict[str, dict[str, float]] = {}
    holdout_rows, holdout_fingerprint = 0, ""
    if meta is not None and status == COMPLETE:
        versions = {"candidate": meta, **({"champion": champion} if champion else {})}
        if source == JOB:
            figures["candidate"] = metric_value(
                job_metrics,
                metric,
                f"candidate_metrics of candidate {candidate!r}",
                fix=f"make the training job write {metric!r} to COSTAWARE_METRICS_PATH, or promote on a "
                "metric it has",
            )
            if champion:
                figures["champion"] = metric_value(
                    champion.metrics,
                    metric,
                    f"champion {champion.version!r} (the metrics stored with its version)",
                    fix="promote on a metric both versions have, or pass scoring_command to score both on "
                    "one holdout",
                )
        elif source == COMMAND:
            with tempfile.TemporaryDirectory(prefix="costaware-score-") as workdir:
                for role, version in versions.items():
                    scores[role] = command_scores(
                        store,
                        version,
                        role=role,
                        command=command,
                        holdout_path=str(holdout_path),
                        timeout_seconds=timeout,
                        workdir=Path(workdir),
                    )
                    figures[role] = metric_value(
                        scores[role],
                        metric,
                        f"the scoring command's metrics for {role} {version.version!r}",
                        fix=f"make the command write {metric!r}",
                    )
        else:
            mismatch = _label_mismatch(meta, label_column, label_threshold)
            if mismatch:
                raise ConfigurationError(mismatch)
            found = holdout_scores(
                store,
                versions,
                metric=metric,
                holdout_path=str(holdout_path),
                label_column=str(label_column),
                label_threshold=label_threshold,
                storage_options=opts,
            )
            figures.update(found.values)
            holdout_rows, holdout_fingerprint = found.rows, found.fingerprint
    decision = decide_promotion(
        metric=metric,
        candidate_metric=figures["candidate"],
        champion_metric=figures["champion"],
        candidate_status=status,
        has_champion=champion is not None,
        margin=margin,
        higher_is_better=better_high,
    )
    record = {
        **decision.to_dict(),
        "source": source,
        "candidate": candidate,
        "champion": champion.version if champion else None,
        "scores": scores,
        "holdout_rows": holdout_rows,
        "holdout_fingerprint": holdout_fingerprint,
        "decided_at": datetime.now(timezone.utc).isoformat(),
        "run": dict(run or {}),
    }
    if decision.promote:
        # Two promotions of one store at once (two runs, two DAGs) both beat the champion they read: the
        # later switch must not replace the earlier one unjudged. The decision is kept only once the check
        # passed, just before the pointer is written (a refused one said it promoted, and its candidate's
        # metric fed the retrain policy's quality window as if it had served).
        def keep_decision() -> None:
            record["decision_file"] = store.record_decision(record)

        store.set_champion(
            candidate, replacing=champion.version if champion else None, before_switch=keep_decision
        )
    else:
        record["decision_file"] = store.record_decision(record)
    log.info("promotion: %s", decision.reason)
    return record


#: The fields of a run identity that name one task instance (``try_number`` differs between its tries).
_TASK_INSTANCE = ("dag_id", "run_id", "task_id", "map_index")


def _promoted_before(store: ModelStore, candidate: str, run: Mapping[str, Any]) -> dict[str, Any]:
    """The decision that made ``candidate`` the champion, when this task instance made it.

    A retry or a clear after a successful promotion asks again: it gets the decision it made, and nothing is
    judged or written a second time.

    Raises:
        ConfigurationError: another run (or a person) made it the champion: promoting it again judges nothing.
    """
    earlier = store.promotion_of(candidate)
    made_by = dict((earlier or {}).get("run") or {})
    if earlier is not None and all(made_by.get(k) == run.get(k) for k in _TASK_INSTANCE):
        log.info(
            "candidate %r is already the champion of %s, promoted by an earlier try of this task (%s): "
            "returning that decision",
            candidate,
            store.uri,
            earlier["decision_file"],
        )
        return earlier
    if earlier is None:
        how = "set by hand (no recorded promotion names it)"
    else:
        how = (
            f"promoted by task {made_by.get('task_id')!r} of run {made_by.get('run_id')!r} of DAG "
            f"{made_by.get('dag_id')!r} ({earlier['decision_file']})"
        )
    raise ConfigurationError(
        f"candidate {candidate!r} is already the champion of {store.uri}, {how}: pass a new version"
    )
