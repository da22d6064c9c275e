"""``ModelPromoteOperator``: a candidate replaces the champion only when it is as good on holdout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from costaware.core.promotion import higher_is_better
from costaware.glue import (
    DEFAULT_AWS_CONN_ID,
    DEFAULT_LEDGER_CONN_ID,
    airflow_errors,
    run_identity,
    storage_options,
)
from costaware.operators.templating import is_template

if TYPE_CHECKING:
    from airflow.sdk import Context


class ModelPromoteOperator(BaseOperator):
    """Compares a candidate version with the champion on holdout data and promotes it when it is good enough.

    See docs/retraining.md.

    The candidate is promoted when its metric is at least the champion's minus ``margin`` (higher-is-better
    metrics; plus ``margin`` for log loss and Brier), or when there is no champion. A candidate whose run did
    not complete (status ``interrupted``/``failed``, or files without metadata) is never promoted. Every
    decision is stored in the model store with both metrics; the champion switch is one atomic write.

    Returns (XCom) the decision: ``promote``, ``reason``, ``metric``, ``candidate_metric``,
    ``champion_metric``, ``margin``, ``candidate``, ``champion``, ...

    Args:
        model_store: Model store, a local folder or ``s3://bucket/prefix`` (templated).
        candidate: The version to judge (templated), e.g.
            ``"{{ ti.xcom_pull(task_ids='retrain')['version'] }}"``.
        holdout_path: Parquet file or folder with holdout rows the candidate never trained on (templated).
        label_column: Label column: 0/1 or boolean, or numeric with ``label_threshold``.
        label_threshold: When set, the label is ``label_column > label_threshold``.
        metric: ``roc_auc`` (default), ``average_precision``, ``accuracy``, ``log_loss`` or ``brier``
            (templated). An unknown name fails when the DAG is parsed, before any training is paid for; a
            template is checked once rendered, when the task runs.
        margin: How much worse than the champion the candidate may be and still be promoted (templated).
        aws_conn_id: Airflow AWS connection for ``s3://`` locations (default ``aws_default``; when that
            connection does not exist, or with ``None``, the SDKs' default credential chain).
        ledger_conn_id: Airflow connection of the cost ledger, where the run's outcome is recorded.
        **kwargs: ``BaseOperator`` arguments.
    """

    template_fields: Sequence[str] = ("model_store", "candidate", "holdout_path", "metric", "margin")
    ui_color = "#fdf1d8"

    def __init__(
        self,
        *,
        model_store: str,
        candidate: str,
        holdout_path: str,
        label_column: str,
        label_threshold: float | None = None,
        metric: str = "roc_auc",
        margin: float | str = 0.0,
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_template(metric):
            higher_is_better(metric)  # an unknown metric fails the DAG file, not the run after training
        self.ledger_conn_id = ledger_conn_id
        self.model_store = model_store
        self.candidate = candidate
        self.holdout_path = holdout_path
        self.label_column = label_column
        self.label_threshold = label_threshold
        self.metric = metric
        self.margin = margin
        self.aws_conn_id = aws_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from costaware.core.promotion import validate_margin
        from costaware.training.runner import promote_candidate

        with airflow_errors():
            decision = promote_candidate(
                model_store=self.model_store,
                candidate=str(self.candidate),
                holdout_path=self.holdout_path,
                label_column=self.label_column,
                label_threshold=self.label_threshold,
                metric=str(self.metric),
                margin=validate_margin(float(self.margin)),
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
