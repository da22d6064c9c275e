"""``ModelPromoteOperator``: a candidate replaces the champion when it is as good on the team's metric."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from costaware.core.promotion import (
    DEFAULT_SCORING_TIMEOUT_SECONDS,
    check_source,
    metric_direction,
    metric_source,
    parse_command,
    parse_metrics,
    validate_margin,
    validate_timeout,
)
from costaware.glue import (
    DEFAULT_AWS_CONN_ID,
    DEFAULT_LEDGER_CONN_ID,
    airflow_errors,
    run_identity,
    storage_options,
)
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.operators.templating import (
    is_literal,
    is_template,
    refuse_relative_store,
    refuse_root_store,
    refuse_template,
)
from costaware.training.spec import parse_label_threshold

if TYPE_CHECKING:
    from airflow.sdk import Context


class ModelPromoteOperator(WarnsOfDroppedDefaultArgs, BaseOperator):
    """Compares a candidate with the champion on a named metric and promotes it when it is good enough.

    See docs/retraining.md.

    The candidate is promoted when its figure is at least the champion's minus ``margin`` (higher is better)
    or at most the champion's plus ``margin`` (lower is better), or when there is no champion. A candidate
    whose run did not complete (status ``interrupted``/``failed``, or files without metadata) is never
    promoted. Every decision is stored in the model store with the metric, its direction and both figures;
    the champion switch is one atomic write.

    The figures come from one of three places:

    * ``candidate_metrics`` given: the training job's own metrics for the candidate, and the metrics stored
      with the champion's version;
    * ``scoring_command`` given: the team's command scores the candidate, then the champion, on
      ``holdout_path``;
    * neither: costaware predicts ``holdout_path`` with both models and computes a built-in metric (models
      of costaware's trainers only; a ``files`` version from your own code needs one of the two above).

    Returns (XCom) the decision: ``promote``, ``reason``, ``metric``, ``higher_is_better``,
    ``candidate_metric``, ``champion_metric``, ``margin``, ``source``, ``candidate``, ``champion``, ...

    Args:
        model_store: Model store, a local folder or ``s3://bucket/prefix`` (templated).
        candidate: The version to judge (templated), e.g.
            ``"{{ ti.xcom_pull(task_ids='retrain')['version'] }}"``.
        holdout_path: Parquet file or folder with holdout rows the candidate never trained on (templated).
            Needed to score on a holdout, and passed to ``scoring_command`` as ``COSTAWARE_HOLDOUT_PATH``.
        label_column: Label column, for costaware's own scoring: 0/1 or boolean for binary models (or
            numeric with ``label_threshold``), the value for regression, the class index for multiclass.
        label_threshold: When set, the label is ``label_column > label_threshold`` (binary metrics only).
        metric: The metric to compare (templated). Built in: ``roc_auc`` (default), ``average_precision``,
            ``accuracy``, ``log_loss``, ``brier``, ``macro_f1`` (binary; the last three also multiclass),
            ``rmse``, ``mae``, ``r2`` (regression). Any other name needs ``higher_is_better`` and
            ``candidate_metrics`` or ``scoring_command``. An unknown name without a direction fails when the
            DAG is parsed, before any training is paid for; a template is checked once rendered.
        higher_is_better: Whether a larger figure is better (templated). None (default): the built-in
            metric's own direction. Contradicting a built-in metric's direction is an error.
        margin: How much worse than the champion the candidate may be and still be promoted (templated).
        candidate_metrics: The training job's metrics for the candidate (templated): a dict, or its rendered
            text such as ``"{{ ti.xcom_pull(task_ids='train')['metrics'] }}"``. The champion's figure is
            then read from the metrics stored with its version.
        scoring_command: The team's scoring command as a list of strings (templated), run on the Airflow
            worker once for the candidate and once for the champion. Its environment adds
            ``COSTAWARE_MODEL_DIR`` (a local copy of a ``files`` version's folder; for other versions the
            path of the model file), ``COSTAWARE_HOLDOUT_PATH``, ``COSTAWARE_METRICS_PATH`` (where it writes
            a JSON object of named numbers), ``COSTAWARE_MODEL_VERSION`` and ``COSTAWARE_MODEL_ROLE``. A
            non-zero exit or a missing or malformed metrics file fails the task; nothing is promoted.
        scoring_timeout_seconds: Limit on each run of ``scoring_command`` (default 3600); past it the command
            and its children are stopped and the task fails.
        aws_conn_id: Airflow AWS connection for ``s3://`` locations (default ``aws_default``; when that
            connection does not exist, or with ``None``, the SDKs' default credential chain).
        ledger_conn_id: Airflow connection of the cost ledger, where the run's outcome is recorded.
        **kwargs: ``BaseOperator`` arguments.
    """

    template_fields: Sequence[str] = (
        "model_store",
        "candidate",
        "holdout_path",
        "metric",
        "higher_is_better",
        "margin",
        "candidate_metrics",
        "scoring_command",
        "ledger_conn_id",
    )
    ui_color = "#fdf1d8"

    def __init__(
        self,
        *,
        model_store: str,
        candidate: str,
        holdout_path: str | None = None,
        label_column: str | None = None,
        label_threshold: float | None = None,
        metric: str = "roc_auc",
        higher_is_better: bool | str | None = None,
        margin: float | str = 0.0,
        candidate_metrics: Mapping[str, Any] | str | None = None,
        scoring_command: Sequence[str] | str | None = None,
        scoring_timeout_seconds: float = DEFAULT_SCORING_TIMEOUT_SECONDS,
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Everything that can be checked before rendering fails the DAG file, not the run after training;
        # templates are checked in execute, once rendered.
        source = metric_source(candidate_metrics, scoring_command)
        # Not rendered: "abc" or "null" failed only once scored, as "needs a numeric label column".
        from costaware.core.errors import ConfigurationError

        try:
            refuse_template("label_threshold", label_threshold, write="write the number")
            parse_label_threshold(label_threshold)
        except ConfigurationError as e:
            raise ConfigurationError(f"ModelPromoteOperator {kwargs.get('task_id')!r}: {e}") from e
        if not is_template(metric):
            if not is_template(higher_is_better):
                metric_direction(metric, higher_is_better)
            check_source(
                source,
                metric=metric,
                holdout_path=holdout_path,
                label_column=label_column,
                label_threshold=label_threshold,
            )
        if scoring_command is not None and not is_template(scoring_command):
            parse_command(scoring_command)
        if candidate_metrics is not None and is_literal(candidate_metrics):  # an XComArg is checked rendered
            parse_metrics(candidate_metrics, "candidate_metrics")
        if is_literal(margin):  # not a Jinja template, an XComArg or a dag.param: those are checked rendered
            validate_margin(margin)  # it was checked only after the training had been paid for
        self.scoring_timeout_seconds = validate_timeout(scoring_timeout_seconds)
        self.ledger_conn_id = ledger_conn_id
        refuse_relative_store(f"{type(self).__name__} {self.task_id!r}", "model_store", model_store)
        # As the retrain operators' model_store: found only when the task opened it to write champion.json.
        refuse_root_store(
            f"{type(self).__name__} {self.task_id!r}",
            "model_store",
            model_store,
            on_this_machine=False,
        )
        # Read from the folder the worker runs in, a relative holdout scored both models on another file.
        # Optional: written out as "None" beside candidate_metrics (never read) it reads as left out.
        refuse_relative_store(
            f"{type(self).__name__} {self.task_id!r}", "holdout_path", holdout_path, optional=True
        )
        self.model_store = model_store
        self.candidate = candidate
        self.holdout_path = holdout_path
        self.label_column = label_column
        self.label_threshold = label_threshold
        self.metric = metric
        self.higher_is_better = higher_is_better
        self.margin = margin
        self.candidate_metrics = candidate_metrics
        self.scoring_command = scoring_command
        self.aws_conn_id = aws_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from costaware.training.promotion import promote_candidate

        with airflow_errors():
            decision = promote_candidate(
                model_store=self.model_store,
                candidate=str(self.candidate),
                metric=str(self.metric),
                higher_is_better=self.higher_is_better,
                margin=self.margin,
                holdout_path=self.holdout_path,
                label_column=self.label_column,
                label_threshold=self.label_threshold,
                candidate_metrics=self.candidate_metrics,
                scoring_command=self.scoring_command,
                scoring_timeout_seconds=self.scoring_timeout_seconds,
                run=run_identity(context, self.task_id),
                storage_options=storage_options(self.aws_conn_id),
            )
        self.log.info("%s: %s", "promoted" if decision["promote"] else "not promoted", decision["reason"])
        self._record_outcome(context, decision)
        return decision

    def _record_outcome(self, context: Context, decision: dict[str, Any]) -> None:
        """The candidate's metric, the champion's and the decision, on the candidate run's outcome."""
        from costaware.adapters.model_store import ModelStore
        from costaware.core.errors import CostawareError
        from costaware.operators.run_record import promotion_outcome, write_outcome

        try:
            meta = ModelStore.open(self.model_store, **storage_options(self.aws_conn_id)).get(
                decision["candidate"]
            )
        except (CostawareError, OSError):
            meta = None  # an incomplete candidate: the decision is still worth recording
        write_outcome(
            promotion_outcome(identity=run_identity(context, self.task_id), decision=decision, meta=meta),
            self.ledger_conn_id,
        )
