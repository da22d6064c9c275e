"""``WarmStartRetrainOperator``: continue the champion on new data, or retrain in full when told to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from costaware.core.given import blank
from costaware.core.ledger import Market
from costaware.glue import (
    DEFAULT_AWS_CONN_ID,
    DEFAULT_LEDGER_CONN_ID,
    airflow_errors,
    run_identity,
    storage_options,
)
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.operators.templating import is_literal
from costaware.operators.training_args import TRAINING_TEMPLATE_FIELDS, BuiltInTrainingArguments

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.core.retrain_policy import RetrainPolicy
    from costaware.training.checkpointing import Checkpointer


class WarmStartRetrainOperator(BuiltInTrainingArguments, WarnsOfDroppedDefaultArgs, BaseOperator):
    """Retrains a model: warm-starts the champion on new data, or retrains in full when the policy says so.

    See docs/retraining.md.

    The policy (default ``DriftRetrainPolicy``) looks at the drift of features and label between the data the
    champion was fully trained on and the new batch, the warm steps since the last full retrain and the
    champion's recent holdout quality; its reason is logged. Training is checkpointed every
    ``checkpoint_every_seconds`` / ``checkpoint_every_steps``; on SIGTERM (spot notice) it checkpoints at the
    end of the current step and raises ``PreemptedError``, which Airflow retries; the retry resumes. The new
    version is stored with its metadata; promoting it is ``ModelPromoteOperator``'s job.

    Returns (XCom) a summary: ``version``, ``mode``, ``reason``, ``parent``, ``steps``, ``resumed_from_step``,
    ``seconds``, ``drift``, ...

    Args:
        data_path: Parquet file or folder with all training data so far, for a full retrain (templated).
        label_column: Label column: 0/1 or boolean, or numeric with ``label_threshold``.
        feature_columns: Feature columns, in model order.
        model_store: Model store, a local folder or ``s3://bucket/prefix`` (templated).
        new_data_path: Parquet file or folder with only the new batch, for a warm start and the drift check
            (templated; default ``data_path``).
        checkpoint_store: Checkpoint store, local folder or ``s3://`` URI (templated; default
            ``$AIRFLOW_HOME/costaware/checkpoints``).
        trainer: ``sklearn-sgd``, ``sklearn-hgb``, ``xgboost``, ``lightgbm`` or the path
            (``"pkg.mod:Class"``) of a class that implements ``costaware.training.trainers.Trainer``.
        trainer_params: Keyword arguments of the trainer (templated): a dict, or a whole template or
            ``XComArg`` that renders one (its text, JSON or a Python dict, is read). A value written as a
            template that renders to exactly a number or bool literal (``{"epochs": "{{ params.epochs }}"}``)
            reaches the trainer as an ``int``, ``float`` or ``bool``; other strings stay strings.
        label_threshold: When set, the label is ``label_column > label_threshold``.
        policy: ``drift`` (default), ``always-full``, ``always-warm``, or a ``RetrainPolicy`` instance.
        policy_params: Keyword arguments of a policy given by name (e.g. ``max_warm_steps``).
        drift_columns: Features to check for drift, a list of column names (default: all features). Leave
            out columns that vary by design between batches, such as the day of week of a daily batch.
        force_full: Retrain in full whatever the policy says (templated, e.g. ``"{{ params.force_full }}"``).
        checkpoint_every_seconds: Checkpoint at least this often (None: not by time).
        checkpoint_every_steps: Checkpoint every this many steps (None: not by steps).
        usd_per_hour: Price of the worker, to store the training's cost with the version (templated; one
            rendered empty, ``None`` or ``null`` is not given); default the task's ``costaware_compute``
            param's, the rate the try is billed at.
        instance_type: Instance type the training runs on, for the cost listener (templated).
        region: Its region (templated).
        market: ``on_demand``, ``spot`` or ``local``, e.g. a ``SpotWindowSensor``'s decision (templated).
        aws_conn_id: Airflow AWS connection for ``s3://`` stores and data (default ``aws_default``; when that
            connection does not exist, or with ``None``, the SDKs' default credential chain).
        features_key: The feature cache's key of the training features, for the run's reproducibility
            record (templated), e.g. ``"{{ ti.xcom_pull(task_ids='build_features')['key'] }}"``.
        ledger_conn_id: Airflow connection of the cost ledger, where the run's outcome is recorded.
        **kwargs: ``BaseOperator`` arguments (set ``retries`` so preemptions are retried).
    """

    # The cost listener prices this task's tries on its instance_type/region/market/usd_per_hour.
    cost_compute_from_arguments = True

    template_fields: Sequence[str] = (
        *TRAINING_TEMPLATE_FIELDS,
        "usd_per_hour",
        "instance_type",
        "region",
        "market",
        "features_key",
        "ledger_conn_id",
    )
    template_fields_renderers = {"trainer_params": "json"}
    ui_color = "#e3f0fb"

    def __init__(
        self,
        *,
        data_path: str,
        label_column: str,
        feature_columns: Sequence[str],
        model_store: str,
        new_data_path: str | None = None,
        checkpoint_store: str | None = None,
        trainer: str = "sklearn-sgd",
        trainer_params: Mapping[str, Any] | str | None = None,
        label_threshold: float | None = None,
        policy: str | RetrainPolicy | None = None,
        policy_params: Mapping[str, Any] | None = None,
        drift_columns: Sequence[str] | None = None,
        force_full: bool | str = False,
        checkpoint_every_seconds: float | None = 300.0,
        checkpoint_every_steps: int | None = None,
        usd_per_hour: str | None = None,
        instance_type: str | None = None,
        region: str | None = None,
        market: str | None = None,
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
        features_key: str | None = None,
        ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._keep_training_arguments(
            model_store=model_store,
            data_path=data_path,
            label_column=label_column,
            feature_columns=feature_columns,
            new_data_path=new_data_path,
            checkpoint_store=checkpoint_store,
            trainer=trainer,
            trainer_params=trainer_params,
            label_threshold=label_threshold,
            policy=policy,
            policy_params=policy_params,
            force_full=force_full,
            checkpoint_every_seconds=checkpoint_every_seconds,
            checkpoint_every_steps=checkpoint_every_steps,
        )
        self.features_key = features_key
        self.ledger_conn_id = ledger_conn_id
        # Where the training runs (e.g. the Celery queue of a spot node group): the cost listener prices
        # this task's runtime on it. None: the worker defaults.
        self.instance_type = instance_type
        self.region = region
        self.market = market
        # Before the other arguments' checks (drift_columns=5 raised a bare TypeError before "unknown
        # market 'spto'"). Written out: when parsed; a template once rendered, in execute.
        self._check_own_compute(
            market=market if is_literal(market) else None,
            usd_per_hour=usd_per_hour if is_literal(usd_per_hour) else None,
        )
        self.drift_columns = self._drift_columns(drift_columns)
        self.usd_per_hour = usd_per_hour
        self.aws_conn_id = aws_conn_id
        self._checkpointer: Checkpointer | None = None

    def _drift_columns(self, drift_columns: Any) -> list[str] | None:
        """``drift_columns`` as column names, else refused naming it (not rendered: checked at parse)."""
        from costaware.core.errors import ConfigurationError
        from costaware.operators.templating import refuse_template
        from costaware.training.spec import parse_drift_columns

        owner = f"{type(self).__name__} {self.task_id!r}"
        try:
            refuse_template("drift_columns", drift_columns, write="write the list of column names")
            return parse_drift_columns(drift_columns)
        except ConfigurationError as e:
            raise ConfigurationError(f"{owner}: {e}") from e

    def _remember(self, checkpointer: Checkpointer) -> None:
        self._checkpointer = checkpointer

    def execute(self, context: Context) -> dict[str, Any]:
        from costaware.adapters.checkpoint_store import checkpoint_key
        from costaware.operators.run_record import record_retrain_outcome
        from costaware.training.runner import run_retrain

        facts = run_identity(context, self.task_id)
        with airflow_errors():
            self._check_own_compute(market=self.market, usd_per_hour=self.usd_per_hour)
            billed_rate = self._check_priced()["usd_per_hour"]
            spec = self.training_spec()
            job = spec.retrain_job(
                checkpoint_key=checkpoint_key(
                    facts["dag_id"], facts["task_id"], facts["run_id"], facts["map_index"]
                ),
                run=facts,
                storage_options=storage_options(self.aws_conn_id),
                # The rate the try is billed at: this task's own, else its costaware_compute param's (the
                # version's cost was unknown with the param's rate alone). None: priced from the catalog.
                usd_per_hour=None if billed_rate is None else str(billed_rate),
                drift_columns=self.drift_columns,
            )
            result = run_retrain(job, on_checkpointer=self._remember)
        self.log.info("stored %s model version %s: %s", result["mode"], result["version"], result["reason"])
        # The run's outcome and reproducibility record, in the ledger next to its cost.
        record_retrain_outcome(
            context=context,
            identity=facts,
            result=result,
            ledger_conn_id=self.ledger_conn_id,
            task_log=self.log,
            features_key=str(self.features_key or ""),
        )
        return result

    def _check_priced(self) -> dict[str, Any]:
        """Refuse, before training, a compute the cost listener would record at $0 (unpriced); return it.

        The check prices the try as the listener bills it (:mod:`costaware.try_pricing`): the compute this
        task's arguments, its ``costaware_compute`` param or the ``worker_*`` settings name, priced from the
        task's ledger's price cache, live prices and the bundled catalog. A check of its own refused a rate
        given in the param, and passed a misspelt type in it, or a spot type only imported prices know,
        which the listener then recorded at $0. Checked here, not when the DAG is parsed: a type only a
        refreshed or imported price knows is valid. A ``local`` try (the team's own hardware, its type a
        name of theirs like 'dgx-box-1') is skipped, as the listener prices none from the catalog.
        """
        from costaware.core.errors import ConfigurationError
        from costaware.glue import ledger_conn_id_of
        from costaware.try_pricing import PRICING_PARAM, charge_of, compute_of, unpriced

        compute = compute_of(self)
        try:
            # The task's own market was checked in execute, a bad worker_market reads as on_demand: only the
            # param's can be bad here.
            if Market.parse(compute["market"]) is Market.LOCAL:
                return compute
        except ConfigurationError as e:
            raise ConfigurationError(f"task {self.task_id!r}: its {PRICING_PARAM} param's market: {e}") from e
        try:
            charge_of(compute, {}, ledger_conn_id_of(self), seconds=3600)
        except ConfigurationError as e:
            raise unpriced(e, compute, task_id=self.task_id, so="its cost would be recorded at $0") from e
        return compute

    def _check_own_compute(self, *, market: Any, usd_per_hour: Any) -> None:
        """Refuse a given ``market`` that is no market or ``usd_per_hour`` that is no amount, naming it.

        Checked before training is paid for.

        The cost listener reads such a value with only a logged error: a misspelt market priced the try on
        the worker's market; a rate that is no amount of $0 or more (-1 passed the parse) was ignored, and the
        catalog's price billed.
        """
        from costaware.core.money import parse_usd

        if blank(market) is not None:
            Market.parse(str(market))
        if blank(usd_per_hour) is not None:
            parse_usd(usd_per_hour, name=f"{type(self).__name__} {self.task_id!r}: usd_per_hour")

    def on_kill(self) -> None:
        """Airflow's SIGTERM path: ask the training to checkpoint and stop after the current step."""
        if self._checkpointer is not None:
            self._checkpointer.request_preemption("task is being killed")
