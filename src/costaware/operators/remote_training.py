"""``RemoteTrainingOperator``: run the retrain on a compute backend, on the market the spot window chose.

Here its arguments and ``execute``; in mixins: the plan (``remote_training_start``), the waits and resumes
(``remote_training_wait``), the stop and bill of a job no try follows (``remote_training_stops``), the
attempts' steps (``remote_attempts``). What moved from here stays importable from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from costaware.adapters.compute.base import require_usable_locations
from costaware.core.budgets import Scope
from costaware.core.errors import ConfigurationError
from costaware.core.given import not_given
from costaware.glue import DEFAULT_AWS_CONN_ID, airflow_errors
from costaware.operators.base_partial import WarnsOfDroppedDefaultArgs
from costaware.operators.remote_command import check_job_kind
from costaware.operators.remote_training_start import AWS_SPOT_NOTICE_SECONDS as AWS_SPOT_NOTICE_SECONDS
from costaware.operators.remote_training_start import cap_usd as cap_usd
from costaware.operators.remote_training_start import grace_warning as grace_warning
from costaware.operators.remote_training_start import launcher_reads as launcher_reads
from costaware.operators.remote_training_stops import UNWATCHED_WHY as UNWATCHED_WHY
from costaware.operators.remote_training_stops import WORKER_KILL_WAIT_SECONDS as WORKER_KILL_WAIT_SECONDS
from costaware.operators.remote_training_stops import _ctrl_c_of_dags_test as _ctrl_c_of_dags_test
from costaware.operators.remote_training_stops import _interrupted as _interrupted
from costaware.operators.remote_training_stops import _killed_after_success as _killed_after_success
from costaware.operators.remote_training_stops import _last_try as _last_try
from costaware.operators.remote_training_stops import _tag_this_try, _try_number
from costaware.operators.remote_training_stops import _TaskKilled as _TaskKilled
from costaware.operators.remote_training_wait import RemoteTrainingWait
from costaware.operators.templating import is_literal
from costaware.operators.training_args import TRAINING_TEMPLATE_FIELDS

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["RemoteTrainingOperator"]


class RemoteTrainingOperator(RemoteTrainingWait, WarnsOfDroppedDefaultArgs, BaseOperator):
    """Runs the retrain on a compute backend (a child process, SageMaker, Batch, Kubernetes) with checkpoints.

    See docs/remote-training.md, and docs/own-training.md for ``command=``.

    Either a team's own ``command`` (with ``image`` on SageMaker, Batch and Kubernetes) or the built-in
    trainers (``data_path``, ``label_column``, ``feature_columns``): exactly one. A command runs as
    ``costaware-run -- <command...>`` under the job contract (checkpoint, output and metrics folders in its
    environment; exit 75 after a checkpoint is a preemption, any other non-zero exit a code error that fails
    the task without retry); on success its outputs become a ``files`` version of the model store with its
    metrics, and ``{"version", "metrics", "attempts", "usd", "backend", ...}`` is returned.

    The built-in training is the one the in-worker ``WarmStartRetrainOperator`` runs (``run_retrain``): the
    operator writes a JSON spec and each attempt runs ``python -m costaware.training.entrypoint --spec URI``.
    It starts on the market of the spot window decision; when a spot attempt is interrupted it resubmits from
    the newest checkpoint, on spot while ``now`` is before the latest safe start, on on-demand after it (also
    when a spot attempt still waits for capacity then). Job names are stable per attempt, so an Airflow retry
    follows the same jobs instead of starting new ones. Each finished attempt is one ledger entry (market,
    instance type, billed seconds x price, cause ``preemption``/``code_error``/``success``); the spend gate's
    reservation for this task is settled with their sum. The worker's own time is left to the cost listener
    at the worker's price (cause ``orchestration``), never at the training's.

    With ``pause_on_price`` a spot attempt is also watched for its price: when it rises well above what the
    rest of the window offers (``costaware.core.spot_window.pause_decision``; never for a ``critical`` job),
    the job is stopped (it checkpoints), the attempt is recorded with cause ``paused``, and the training
    resumes from its checkpoint when the price is back at the forecast minimum, or on on-demand at the latest
    resume that still meets the deadline.

    Returns (XCom) the training summary (``version``, ``mode``, ...) plus ``attempts`` and ``usd``.

    Args:
        model_store: Model store, a local folder or ``s3://bucket/prefix`` (templated; ``s3://`` on the
            SageMaker, Batch and Kubernetes backends, whose jobs run on another machine).
        command: The team's own training command, a list of strings, each element templated (instead of
            the built-in trainer's arguments below).
        image: Container image of the command on SageMaker, Batch and Kubernetes (templated; default the
            backend's ``image_uri``/``image``/job definition). Batch runs it through a revision of its job
            definition with this image.
        preemption_grace_seconds: Seconds from SIGTERM (a preemption notice, a pause) to SIGKILL for a
            command (templated; blank: the backend's, 110 s inside AWS's 120 s spot notice, and on Batch
            its ``stop_timeout_seconds`` less 10 s, 20 s with ECS's default, which it need not cut).
        data_path: Parquet file or folder with all training data (templated; built-in trainers).
        label_column: Label column (built-in trainers).
        feature_columns: Feature columns, in model order (built-in trainers).
        new_data_path: The new batch only (templated; default ``data_path``).
        checkpoint_store: Checkpoint store (templated; default ``$AIRFLOW_HOME/costaware/checkpoints``;
            ``s3://`` on the SageMaker, Batch and Kubernetes backends).
        trainer: Trainer name or dotted path (see ``WarmStartRetrainOperator``; default ``sklearn-sgd``).
        trainer_params: Trainer keyword arguments (templated): a dict, or a whole template or ``XComArg``
            that renders one (checked once rendered, before the job starts). A value written as a template
            that renders to exactly a number or bool literal (``{"epochs": "{{ params.epochs }}"}`` ->
            ``"5"``) reaches the trainer as an ``int``, ``float`` or ``bool``, without
            ``render_template_as_native_obj``; other strings stay strings.
        label_threshold: When set, the label is ``label_column > label_threshold``.
        policy: Retrain policy name (``drift``, ``always-full``, ``always-warm``).
        policy_params: Keyword arguments of the policy.
        force_full: Retrain in full whatever the policy says (templated).
        seed: Seed of the trainer.
        checkpoint_every_seconds: Checkpoint at least this often (the most work a hard kill loses), or
            ``"auto"``: Young/Daly's interval from the spot advisor's interruption band of the type, bounded,
            re-tuned before each later spot attempt from how the earlier ones were preempted (see
            ``docs/remote-training.md``). A command gets it as ``COSTAWARE_CHECKPOINT_EVERY_SECONDS`` on every
            attempt (``costaware_runtime.CheckpointTimer`` reads it).
        checkpoint_every_steps: Checkpoint every this many steps (None: by time only).
        backend: ``local`` (default), ``sagemaker``, ``batch`` or ``kubernetes`` (templated).
        backend_options: Options of the backend, e.g. ``role_arn`` and ``image_uri`` for SageMaker or
            ``spot_queue``/``on_demand_queue``/``job_definition`` for Batch (templated).
        spot_decision: The ``SpotWindowSensor`` decision: a dict or its rendered XCom (templated).
        spot_task_id: Task id of the ``SpotWindowSensor`` whose XCom is the decision (instead of the above).
        market: ``spot`` or ``on_demand``; default the decision's, else on-demand (templated).
        instance_type: What the training runs on; default the decision's (templated).
        region: Region of the training; default the decision's, else ``us-east-1`` (templated).
        spot_usd_per_hour: Spot price; default the decision's price (templated). SageMaker ``ml.*`` prices
            are not EC2 prices: give them here.
        on_demand_usd_per_hour: On-demand price; default the decision's, else the bundled list (templated).
        deadline: When the model must be ready, ISO (templated; default the decision's).
        latest_start: Latest (re)start on spot that still meets the deadline (templated; default the
            decision's).
        max_attempts: Attempts at most (interruptions included).
        max_usd: The most the attempts may bill together (templated; None: no cap). Each attempt is stopped
            (checkpointed, as on a preemption) once it would pass what is left, at its price (a spot
            attempt billed at the price in force over its run, with ``prices``: at the on-demand price);
            when what is left buys less than a minute the task fails, the checkpoint kept.
        poll_interval: Seconds between status polls.
        spec_uri: Where the spec goes (templated; default next to the checkpoints).
        budget_scope: With no reservation from a spend gate, hold ``max_usd`` (else the decision's
            ``estimated_usd``) in the budgets of these tags before the job starts (templated); one of the two
            is needed, or there would be nothing to hold.
        ledger_conn_id: Connection of the cost ledger.
        tags: Extra allocation tags of the ledger entries (templated).
        aws_conn_id: AWS connection for ``s3://`` stores and the SageMaker/Batch backends (default
            ``aws_default``; when that connection does not exist, the SDKs' default credential chain). The
            spec and the job's result are read and written through it; the job gets its endpoint (not its
            credentials) in the spec and as ``COSTAWARE_S3_ENDPOINT_URL``.
        deferrable: Poll in the triggerer (default) instead of holding a worker slot.
        pause_on_price: Pause a spot attempt through a price rise and resume it later (templated).
        prices: Spot prices: ``"live"`` (EC2 through ``aws_conn_id``) or a recorded price file, as for
            ``SpotWindowSensor`` (templated). Needed by ``pause_on_price``; given, each spot attempt is billed
            at the mean price in force over its run instead of its starting price (not on SageMaker).
        availability: Spot capacity trace for ``pause_on_price`` resumes (templated; default: spot has
            capacity when it is below on-demand); with ``availability_zones``, a map of zone to trace.
        expected_runtime_hours: Training time on the instance; default the decision's (templated).
        priority: ``critical`` (never paused), ``normal`` or ``best_effort`` (paused at any expected saving,
            may wait until the deadline itself); default the decision's, else ``normal`` (templated).
        restart_overhead_minutes: What a restart from a checkpoint costs before training goes on.
        history_days: Days of price history the pause forecast fits on.
        availability_zones: The zones spot attempts may run in (templated; a list or ``"a,b"``): after a
            preemption or a pause the next attempt goes to the zone with the lowest expected cost (spot
            price, its churn so far, the egress of a move to another region). Local, Batch (``spot_queues``)
            and Kubernetes place by zone; SageMaker does not. See docs/remote-training.md.
        allowed_regions: Regions a zone may be in (templated); a zone of another region is refused.
        restart_guard: Leave a zone whose last 2 preempted runs each kept nothing (shorter than the
            restart overhead plus one checkpoint interval); when no zone is left, run the rest on
            on-demand (templated; default off: on recorded traces waiting out a churn on spot cost less
            than on-demand, see docs/remote-training.md).
        objective: What the pause rule minimises: ``cost`` (default), ``carbon`` or ``cost+carbon``
            (templated; checked after rendering).
        carbon_usd_per_tonne: Carbon price of ``cost+carbon``, USD per tonne CO2e (templated).
        carbon: Where the grid intensity comes from: a bundled grid zone (``"GB"``) or a recorded carbon
            intensity CSV path; default the grid zone of the job's region (templated).
        **kwargs: ``BaseOperator`` arguments.
    """

    template_fields: Sequence[str] = (
        "command",
        "image",
        "preemption_grace_seconds",
        *TRAINING_TEMPLATE_FIELDS,
        "backend",
        "backend_options",
        "spot_decision",
        "job_market",
        "job_instance_type",
        "job_region",
        "spot_usd_per_hour",
        "on_demand_usd_per_hour",
        "deadline",
        "latest_start",
        "spec_uri",
        "max_usd",
        "pause_on_price",
        "prices",
        "availability",
        "expected_runtime_hours",
        "priority",
        "availability_zones",
        "allowed_regions",
        "restart_guard",
        "objective",
        "carbon_usd_per_tonne",
        "carbon",
        "budget_scope",
        # Also in the serialized DAG: a try killed in its worker is priced from there, with these tags.
        "tags",
        "ledger_conn_id",
    )
    template_fields_renderers = {"trainer_params": "json", "backend_options": "json"}
    ui_color = "#d9ecf7"

    def __init__(
        self,
        *,
        model_store: str,
        command: Sequence[str] | None = None,
        image: str | None = None,
        preemption_grace_seconds: float | str | None = None,
        data_path: str | None = None,
        label_column: str | None = None,
        feature_columns: Sequence[str] | None = None,
        new_data_path: str | None = None,
        checkpoint_store: str | None = None,
        trainer: str | None = None,
        trainer_params: Mapping[str, Any] | str | None = None,
        label_threshold: float | None = None,
        policy: str | None = None,
        policy_params: Mapping[str, Any] | None = None,
        force_full: bool | str = False,
        seed: int | None = None,
        checkpoint_every_seconds: float | str | None = 300.0,
        checkpoint_every_steps: int | None = None,
        backend: str = "local",
        backend_options: Mapping[str, Any] | str | None = None,
        spot_decision: Any = None,
        spot_task_id: str | None = None,
        market: str | None = None,
        instance_type: str | None = None,
        region: str | None = None,
        spot_usd_per_hour: str | None = None,
        on_demand_usd_per_hour: str | None = None,
        deadline: str | None = None,
        latest_start: str | None = None,
        max_attempts: int = 10,
        poll_interval: float = 30.0,
        spec_uri: str | None = None,
        budget_scope: str | None = None,
        ledger_conn_id: str = "costaware_ledger",
        tags: Mapping[str, str] | None = None,
        aws_conn_id: str | None = DEFAULT_AWS_CONN_ID,
        deferrable: bool = True,
        pause_on_price: bool | str = False,
        prices: str | None = None,
        availability: str | None = None,
        expected_runtime_hours: str | float | None = None,
        priority: str | None = None,
        restart_overhead_minutes: float = 5.0,
        history_days: int = 14,
        availability_zones: Sequence[str] | str | None = None,
        allowed_regions: Sequence[str] | str | None = None,
        restart_guard: bool | str = False,
        objective: str = "cost",
        carbon_usd_per_tonne: float | str | None = None,
        carbon: str | None = None,
        max_usd: str | float | None = None,
        **kwargs: Any,
    ) -> None:
        if "zones" in kwargs:  # the sensor's name for them; Airflow's own error would not say which to use
            raise ConfigurationError(
                f"{type(self).__name__} takes availability_zones=[...], not zones (got "
                f"zones={kwargs['zones']!r})"
            )
        super().__init__(**kwargs)
        if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        if (
            isinstance(poll_interval, bool)
            or not isinstance(poll_interval, int | float)
            or not 0 < poll_interval < math.inf
        ):
            raise ConfigurationError(f"poll_interval must be seconds > 0, got {poll_interval!r}")
        if budget_scope is not None and is_literal(budget_scope):
            # "key=value,...": a bare name or blank text fails here, not at the reservation.
            Scope.given(budget_scope, what="budget_scope")
        if budget_scope is not None and max_usd is None and spot_decision is None and spot_task_id is None:
            raise ConfigurationError(
                f"{type(self).__name__} {self.task_id!r}: budget_scope={budget_scope!r} holds max_usd "
                "(or the spot decision's estimated_usd) in its budgets before the job starts, and this task "
                "has neither: give max_usd, the most the training may spend"
            )
        trainer_arguments = {
            "data_path": data_path,
            "label_column": label_column,
            "feature_columns": feature_columns,
            "new_data_path": new_data_path,
            "label_threshold": label_threshold,
            "trainer": trainer,
            "trainer_params": trainer_params,
            "policy": policy,
            "policy_params": policy_params,
            "seed": seed,
        }
        owner = f"{type(self).__name__} {self.task_id!r}"
        self.command = check_job_kind(owner, command, trainer_arguments)
        self._command_written = self.command  # rendering replaces self.command; a message names the template
        if self.command is not None and checkpoint_every_steps is not None:
            raise ConfigurationError(
                f"{owner} has command= and checkpoint_every_steps={checkpoint_every_steps!r}: a command "
                "saves on its own schedule (count steps in the script), or give checkpoint_every_seconds, "
                "which it reads as COSTAWARE_CHECKPOINT_EVERY_SECONDS"
            )
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
            seed=seed,
            check=self.command is None,
            allow_auto_interval=True,
        )
        self._keep_plan_arguments(
            image=image,
            preemption_grace_seconds=preemption_grace_seconds,
            backend=backend,
            backend_options=backend_options,
            spot_decision=spot_decision,
            spot_task_id=spot_task_id,
            market=market,
            instance_type=instance_type,
            region=region,
            spot_usd_per_hour=spot_usd_per_hour,
            on_demand_usd_per_hour=on_demand_usd_per_hour,
            deadline=deadline,
            latest_start=latest_start,
            tags=tags,
            aws_conn_id=aws_conn_id,
            pause_on_price=pause_on_price,
            prices=prices,
            availability=availability,
            expected_runtime_hours=expected_runtime_hours,
            priority=priority,
            restart_overhead_minutes=restart_overhead_minutes,
            history_days=history_days,
            availability_zones=availability_zones,
            allowed_regions=allowed_regions,
            restart_guard=restart_guard,
            objective=objective,
            carbon_usd_per_tonne=carbon_usd_per_tonne,
            carbon=carbon,
        )
        # A store typed wrong fails as the DAG is parsed; its folders are checked on the worker, at the start.
        stores = {"model_store": model_store, "checkpoint_store": checkpoint_store, "spec_uri": spec_uri}
        written = {name: str(value) for name, value in stores.items() if value and is_literal(value)}
        # spec_uri is optional: written blank, "None" or "null" it is left out (next to the checkpoints), as
        # the run reads it. The stores written so are refused above, naming the argument.
        if not_given(written.get("spec_uri")):
            written.pop("spec_uri", None)
        require_usable_locations(
            str(backend),
            on_this_machine=False,
            launcher_reads=launcher_reads(self.command),
            model_store=written.get("model_store"),
            checkpoint_store=written.get("checkpoint_store"),
            spec_uri=written.get("spec_uri"),
        )
        if isinstance(max_usd, str) and not max_usd.strip():
            raise ConfigurationError(
                f"{owner}: max_usd is empty: give an amount such as '25', or leave it out for no cap"
            )
        if is_literal(max_usd):
            cap_usd(max_usd)  # a cap of "$0" or "ten" fails as the DAG is parsed
        self.max_usd = max_usd
        self.max_attempts = max_attempts
        self.poll_interval = poll_interval
        self.spec_uri = spec_uri
        self.budget_scope = budget_scope
        self.ledger_conn_id = ledger_conn_id
        self.deferrable = deferrable
        self._kill_handled = False  # the job of the wait was stopped and billed
        self._waiting_on: Any = None  # the trigger a wait in the worker polls: what on_kill stops and bills
        # Deferred in `airflow dags test`, whose trigger then runs inline, in this task's process: the
        # training deferred (its jobs' name stem), None where not.
        self._deferred_inline: str | None = None

    # -- Airflow entry points ----------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        """Write the spec, submit attempt 1 (or find it, on a retry) and wait for it."""
        self._deferred_inline = None
        self._retry = _try_number(context) > 1
        with self._stops_unwatched_job(context):
            with airflow_errors():
                state = self._start(context)
                _tag_this_try(context, state)
                state = self._reserve(state)
                if state.plan.first_market_reason and not self._retry:
                    self.log.info("attempt 1 on on-demand: %s", state.plan.first_market_reason)
                state = self._submit(state, state.plan.first_market, state.plan.first_market_reason)
            return self._wait(context, state)
