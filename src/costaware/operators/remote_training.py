"""``RemoteTrainingOperator``: run the retrain on a compute backend, on the market the spot window chose."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from costaware.adapters.compute.base import require_usable_locations
from costaware.adapters.compute.job_contract import DEFAULT_GRACE_SECONDS
from costaware.core.budgets import Scope
from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.given import not_given
from costaware.core.ledger import utcnow
from costaware.glue import DEFAULT_AWS_CONN_ID, airflow_errors, run_identity, run_tags
from costaware.operators.remote_attempts import RemoteAttemptSteps
from costaware.operators.remote_command import check_job_kind
from costaware.operators.remote_training_args import RemotePlanArguments
from costaware.operators.templating import is_literal, refuse_root_store
from costaware.operators.training_args import TRAINING_TEMPLATE_FIELDS, BuiltInTrainingArguments
from costaware.triggers.remote_training import WAIT_STATE_AWS_CONN_KEY, WAIT_STATE_XCOM_KEY

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

__all__ = ["RemoteTrainingOperator"]

#: Why a job no try follows is stopped (its entry's note).
UNWATCHED_WHY = "its task failed with no retry left to follow it"
#: How long a kill in the worker waits for the stopped job to end: none. Airflow kills the task process 5 s
#: after its SIGTERM and the billing must be written before then: the job is billed to its grace period's end.
WORKER_KILL_WAIT_SECONDS = 0.0
#: What AWS leaves between a spot interruption notice and the stop (EC2, hence Batch and SageMaker).
AWS_SPOT_NOTICE_SECONDS = 120


def grace_warning(backend: str, grace_seconds: float) -> str | None:
    """What to say of a grace period longer than AWS's spot notice on a backend that runs on EC2 spot."""
    from costaware.training.plan import AWS_BACKENDS

    if backend not in AWS_BACKENDS or grace_seconds <= AWS_SPOT_NOTICE_SECONDS:
        return None
    return (
        f"preemption_grace_seconds={grace_seconds:g} is longer than the {AWS_SPOT_NOTICE_SECONDS} s AWS "
        "leaves between a spot notice and the stop: the job may be stopped before it has saved and pushed "
        f"its checkpoint; keep it at most {DEFAULT_GRACE_SECONDS:g}"
    )


def launcher_reads(command: object) -> tuple[str, ...]:
    """The stores ``costaware-run`` reads and writes itself: the checkpoints, and a command's outputs."""
    return ("checkpoint_store", "model_store") if command is not None else ("checkpoint_store",)


class RemoteTrainingOperator(RemoteAttemptSteps, RemotePlanArguments, BuiltInTrainingArguments, BaseOperator):
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

    # -- plan --------------------------------------------------------------------------------------------

    def _warn_other_regions(self, plan: RemotePlan, *, allowed: Sequence[str]) -> None:
        """Say so when an attempt may move to a zone of another region than the plan's without ``allowed``."""
        from costaware.core.zone_choice import region_of

        others = [zone for zone in plan.placement.zones if region_of(zone, plan.region) != plan.region]
        if not others or allowed:
            return
        size = plan.placement.data_bytes
        self.log.warning(
            "availability_zones %s %s outside region %s: an attempt moved there reads the data and the "
            "checkpoints across regions, weighed at %s; set allowed_regions=[%r] to keep attempts in %s",
            ", ".join(others),
            "is" if len(others) == 1 else "are",
            plan.region,
            f"the transfer price of the data's {size:,} bytes"
            if size
            else "no transfer cost (the data's size is not known: a command reads its own)",
            plan.region,
            plan.region,
        )

    def _check_zones_priced(self, plan: RemotePlan) -> None:
        """Refuse an allowed zone that the recorded price file leaves unpriced where it prices its region.

        Such a zone is a typo of its letter (``us-east-1z``) or one that does not offer the instance type:
        a job sent there waits for capacity that never comes. A region the file has no prices of is left to
        the attempt's price, as documented; live prices are not asked here.

        Raises:
            ConfigurationError: the zones that have no price, and the zones that have one.
        """
        from costaware.adapters import spot_prices
        from costaware.adapters.spot_market import LIVE
        from costaware.core.zone_choice import region_of

        source = plan.spot_prices
        if not source or source == LIVE or plan.first_market != "spot" or not plan.placement.zones:
            return
        try:
            history = spot_prices.load_spot_history(source, products=("Linux/UNIX",))
        except CostawareError:
            return  # as the billing does: said when an attempt is priced, at the attempt's price
        if plan.instance_type not in history.instance_types:
            return
        for zone in plan.placement.zones:
            region = region_of(zone, "")
            if not region:
                continue  # not an AWS zone name: a Kubernetes node label, which no price file names
            priced = history.zones(plan.instance_type, region)
            if priced and zone not in priced:
                raise ConfigurationError(
                    f"availability_zones: {source} has no spot price of {plan.instance_type} in zone "
                    f"{zone!r}, though it prices {', '.join(priced)}: a typo of the zone, or a zone that "
                    f"does not offer {plan.instance_type}; remove it, or record its prices in the file"
                )

    def _data_bytes(self, opts: Mapping[str, Any]) -> int:
        """The training data's size, which a job in another region reads across regions (0 for a command)."""
        from costaware.adapters.input_data import total_bytes
        from costaware.adapters.object_store import S3Options

        if self.command is not None or not self.data_path:
            return 0
        return total_bytes(str(self.data_path), S3Options(**opts) if opts else None)[0]

    def _start(self, context: Context) -> AttemptState:
        """The state before attempt 1: the plan (:func:`~costaware.training.plan.make_plan`) and its spec."""
        from costaware.adapters.checkpoint_store import checkpoint_key
        from costaware.adapters.compute.base import check_backend_options, expand_home, require_s3
        from costaware.adapters.price_files import bundled_catalog
        from costaware.adapters.price_source import list_price
        from costaware.operators.remote_command import rendered_command
        from costaware.training.attempts import AttemptState
        from costaware.training.entrypoint import job_environment, spec_storage_options, write_spec
        from costaware.training.plan import blank, make_plan
        from costaware.training.remote import job_base_name

        args = self._plan_arguments()
        decision = self._decision(context)
        if blank(self.deadline) is None and not is_literal(self._deadline_written):
            # Asked for by a template, then dropped without a word.
            self.log.warning(
                "deadline %r rendered %r, which is not given (blank, None or null): %s; give the param a "
                "value for a deadline of this run's own",
                self._deadline_written,
                self.deadline,
                "the spot decision's deadline is used" if decision and decision.deadline else "there is none",
            )
        identity = run_identity(context, self.task_id)
        key = checkpoint_key(
            identity["dag_id"], identity["task_id"], identity["run_id"], identity["map_index"]
        )
        ckpt_store = expand_home(self.checkpoint_root(), "checkpoint_store")
        owner = f"{type(self).__name__} {self.task_id!r}"
        command = rendered_command(self.command, owner) if self.command is not None else None
        if command and args.backend == "local" and blank(self.image):
            self.log.info("image %r is not used: the local backend runs the command here", self.image)
        # A command has no spec: the contract's variables say it all.
        spec_uri = "" if command else str(blank(self.spec_uri) or f"{ckpt_store}/_jobs/{key}/spec.json")
        result_uri = spec_uri.rsplit("/", 1)[0] + "/result.json" if spec_uri else ""
        # As checkpoint_root: a template that rendered "/", or "~" where the home is /.
        refuse_root_store(f"task {self.task_id!r}", "model_store", self.model_store, example="/srv/ml/models")
        model_store = expand_home(str(self.model_store), "model_store")
        require_s3(args.backend, checkpoint_store=ckpt_store, model_store=model_store, spec_uri=spec_uri)
        require_usable_locations(
            args.backend,
            launcher_reads=launcher_reads(command),
            checkpoint_store=ckpt_store,
            model_store=model_store,
            spec_uri=spec_uri,
        )
        # A typo in backend_options fails here, before the money is reserved, not at the first submit.
        check_backend_options(args.backend, args.backend_options)
        opts = self._storage_options()
        job_opts = spec_storage_options(opts)
        start = make_plan(
            args,
            decision,
            identity=identity,
            base_name=job_base_name(
                identity["dag_id"], identity["run_id"], identity["task_id"], identity["map_index"]
            ),
            checkpoint_uri=f"{ckpt_store}/{key}",
            model_store=model_store,
            spec_uri=spec_uri,
            result_uri=result_uri,
            job_env=job_environment(job_opts),
            tags=run_tags(self, context, self.tags),
            # As the ledger prices a try: refreshed or imported prices before the snapshot.
            list_price=lambda instance_type, region: list_price(
                self.ledger_hook.get_conn(), instance_type, region
            ),
            interruption_band=lambda instance_type, region: (
                bundled_catalog().spot_advice(instance_type, region).interruption_range
            ),
            transfer_price=lambda src, dst: bundled_catalog().transfer_usd_per_gb(src, dst),
            data_bytes=lambda: self._data_bytes(opts),
            now=utcnow(),
        )
        if start.checkpoint_reason:
            self.log.info("%s", start.checkpoint_reason)
        self._warn_other_regions(start.plan, allowed=args.allowed_regions)
        if warning := grace_warning(args.backend, args.grace_seconds):
            self.log.warning("%s", warning)
        self._check_zones_priced(start.plan)
        if spec_uri:
            training = self.training_spec(checkpoint_every_seconds=start.plan.checkpoint_every_seconds)
            spec = training.spec_file(
                checkpoint_key=key, run=identity, storage_options=job_opts, result_uri=result_uri
            )
            write_spec(spec_uri, spec, **opts)
        cap = cap_usd(self.max_usd)
        if cap is None and self.max_usd is not None:
            # A template rendered empty (a param left blank): no cap, but not without a word.
            self.log.warning("max_usd rendered to %r: this run has no cap in dollars", self.max_usd)
        return AttemptState(
            plan=replace(start.plan, max_usd=str(cap)) if cap is not None else start.plan,
            latest_start=start.latest_start,
            spot_usd_per_hour=start.spot_usd_per_hour,
            command=tuple(command) if command is not None else None,
        )

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

    @contextmanager
    def _stops_unwatched_job(self, context: Context) -> Iterator[None]:
        """A try that fails for good while a job it submitted runs stops and bills that job.

        Any failure counts: a wait that failed (its polls, a configuration error), a store or ledger error
        while an attempt's end is handled, an ``execution_timeout`` during a submit (a timeout during a wait
        is ``on_kill``'s). A retry would follow the job by its name; without one it ran on, watched and
        billed by nobody.
        """
        from airflow.sdk.exceptions import TaskDeferred

        try:
            yield
        except (TaskDeferred, _TaskKilled):
            raise
        except BaseException as e:
            # A wait's own failures are handled where it polls, a kill during it by on_kill. A Ctrl-C of
            # `dags test` here (an ended attempt billed, the next submitted) ends the task as one in the wait
            # does: for good. A worker's supervisor forwarding its own SIGINT is a failure like any other.
            interrupted = _ctrl_c_of_dags_test(e)
            for_good = interrupted or isinstance(e, AirflowFailException) or _last_try(context)
            live = self._running_job_state() if self._waiting_on is None and for_good else None
            self._live = self._submitting = None
            stopped = None
            if live is not None and live.current is not None:
                why = "its task was interrupted (Ctrl-C)" if interrupted else UNWATCHED_WHY
                # A job no wait state names (a wait in the worker, a submit not yet deferred) is one
                # `costaware jobs reconcile` cannot find: a refused stop is billed to its grace period now.
                unlisted = not self._wait_state_names(context, live.current.job_id)
                billed = self._stop_unwatched(live, why=why, bill_refused=unlisted)
                stopped = live.current.job_id if billed else None
            if interrupted:
                said = f"job {stopped} stopped and billed" if stopped else "no job was left running"
                raise _interrupted(said) from e
            raise

    def _wait(self, context: Context, state: AttemptState) -> Any:
        from costaware.training.attempts import AttemptState
        from costaware.training.plan import wait_limit

        while True:
            self._live = state if state.current is not None else None
            timeout = wait_limit(state.plan, utcnow(), state.current.market if state.current else None)
            with airflow_errors():
                trigger = self._trigger(state)
                # The budgets hold the attempts' money for as long as this wait may last: a hold past its
                # time limit (6 h by default) stopped counting while the job still billed.
                self._keep_holds(state, utcnow() + timeout + timedelta(hours=1))
            # What on_kill stops and bills (a kill, an execution_timeout), published before the check below.
            self._waiting_on = trigger
            if self._killed:  # killed while the step before ran (a submit): its new job is stopped here
                self._stop_killed(trigger)
            if self.deferrable:
                self._waiting_on = None  # the triggerer watches it from here
                self._keep_wait_state(context, state)
                from costaware.triggers.remote_training import in_dags_test

                self._deferred_inline = state.plan.base_name if in_dags_test() else None
                self.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)
            # In the worker: poll the same trigger (its price watch and state-change logging) until it fires.
            try:
                with airflow_errors():
                    event = trigger.poll_tolerant(utcnow())
                    while event is None and not self._killed:
                        time.sleep(trigger.next_poll_in())  # sooner where a stop at the cap falls due
                        event = trigger.poll_tolerant(utcnow())
            except KeyboardInterrupt as e:
                # Ctrl-C of `airflow dags test`, which runs the task in its own process and calls no
                # on_kill: the job ran on, unbilled, while the task failed. Stopped and billed as a kill.
                # A worker shut down with Ctrl-C forwards the SIGINT to its tasks: the same stop, and the
                # task fails as it did (a retry resumes from the checkpoint), not for good.
                self.on_kill()
                if not _ctrl_c_of_dags_test(e):
                    raise
                done = (
                    "training job stopped and billed"
                    if self._kill_handled
                    else "its training job could not be stopped (the error is above): stop it yourself"
                )
                raise _interrupted(done) from e
            except Exception:
                # A failed wait, not a kill: its job is _stops_unwatched_job's, as a failed step's is.
                self._waiting_on = None
                raise
            if self._killed:
                self._stop_killed(trigger)
            self._waiting_on = None
            if "state" in event:
                # As a deferred wait's event is read (execute_complete): the wait may have set a stop of its
                # own (a job on a dearer type stopped within max_usd), which its end is recorded by.
                with airflow_errors():
                    state = AttemptState.from_json(event["state"])
            # A kill from here on: the ended attempt is billed below, and no new one starts (_submit).
            outcome = self._on_event(context, state, event)
            if isinstance(outcome, dict):
                return outcome
            state = outcome

    def _on_event(self, context: Context, state: AttemptState, event: Mapping[str, Any]) -> Any:
        """Act on a trigger event: resume a pause, pause a job, or handle a job that ended."""
        from costaware.training.attempts import event_from_trigger
        from costaware.triggers.remote_training import in_dags_test

        with airflow_errors():
            outcome = self._step(context, state, event_from_trigger(event))
        if isinstance(outcome, dict) and self._killed and in_dags_test():
            # Killed as the job's end was handled: returned, the task succeeded and `dags test` ran its
            # downstream tasks, though the command was asked to stop. The training is billed and stored, the
            # task fails. A worker's SIGTERM (its shutdown) is Airflow's: the success stands.
            raise AirflowFailException(_killed_after_success(outcome))
        return outcome

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: record the attempt, then finish, fail or wait for the next attempt."""
        from costaware.training.attempts import AttemptState
        from costaware.triggers.remote_training import in_dags_test, take_kill_outside_inline_wait

        self._deferred_inline = None  # the trigger has fired: this process runs the task again
        if not event or "state" not in event:
            raise AirflowException(f"remote training trigger ended without a job status: {event!r}")
        if event.get("status") != "success":
            try:
                failed_state = AttemptState.from_json(event["state"])
            except Exception as e:  # an older or partial state: the failure below is what matters
                self.log.debug("no attempt state in the failed wait's event: %s", e)
            else:
                _tag_this_try(context, failed_state)  # the worker time of a failed try is this task's too
                self._live = failed_state if failed_state.current is not None else None
            with self._stops_unwatched_job(context):
                if event.get("configuration"):  # a retry would fail the same way
                    raise AirflowFailException(f"polling the training job failed: {event.get('message')}")
                raise AirflowException(f"polling the training job failed: {event.get('message')}")
        with airflow_errors():
            state = AttemptState.from_json(event["state"])
        _tag_this_try(context, state)
        self._retry = _try_number(context) > 1
        self._live = state if state.current is not None else None
        # `airflow dags test` killed after its inline wait took the event: the attempt that ended is billed
        # below, then the task ends, as for a kill during the wait (no new attempt, no retry).
        self._killed = take_kill_outside_inline_wait(state.plan.base_name)
        with self._stops_unwatched_job(context):
            try:
                outcome = self._on_event(context, state, event)
                if isinstance(outcome, dict):
                    return outcome
                return self._wait(context, outcome)
            except (AirflowException, _TaskKilled) as e:
                # A worker's SIGTERM (its shutdown) keeps the task's retries: the retry trains on from the
                # newest checkpoint. Only `airflow dags test`, asked to stop, fails for good.
                if not self._killed or not in_dags_test() or isinstance(e, AirflowFailException):
                    raise
                raise AirflowFailException(
                    f"killed (SIGTERM) as its wait ended: {e}; the task fails without a retry (clear it to "
                    "train on from its newest checkpoint)"
                ) from e

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Airflow's resume; a wait that ended with no event stops and bills its job on the last try.

        A deferral timeout (the wait's limit passed: the backend did not end the job at its own time limit,
        a Batch job queued or retried past it) or a trigger that failed resumes the task only to fail it,
        in ``BaseOperator.resume_execution``, before ``execute_complete`` runs, and no trigger ``on_kill``
        is called. The job ran on: with no retry left to follow it by its name, it was never billed and
        the task's hold stayed open.
        """
        from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR
        from airflow.sdk.exceptions import TaskDeferralError, TaskDeferralTimeout

        if next_method != TRIGGER_FAIL_REPR:
            return super().resume_execution(next_method, next_kwargs, context)
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except (TaskDeferralTimeout, TaskDeferralError) as e:
            self._wait_ended_unseen(context, e)

    def _keep_wait_state(self, context: Context, state: AttemptState) -> None:
        """Keep the state the deferred wait watches where a resume without an event reads it (an XCom).

        A failure only warns: the trigger watches the job all the same; a timeout could not stop it.
        """
        push = getattr(context.get("ti"), "xcom_push", None)
        if push is None:  # outside Airflow
            return
        try:
            # With the task's AWS connection, which a reconcile of its job stops and bills with.
            push(
                key=WAIT_STATE_XCOM_KEY, value={**state.to_json(), WAIT_STATE_AWS_CONN_KEY: self.aws_conn_id}
            )
        except Exception as e:
            self.log.warning(
                "could not keep the wait's state in XCom %r (%s): the trigger watches the job all the same, "
                "but a deferral timeout would leave it running",
                WAIT_STATE_XCOM_KEY,
                e,
            )

    def _wait_ended_unseen(self, context: Context, error: Exception) -> NoReturn:
        """Fail the try whose wait ended with no event (see :meth:`resume_execution`).

        Its job may run on: on the last try it is stopped and billed (cause ``unwatched``) and the hold
        settled; with a retry left, the retry follows it by its name, as after any failed try.
        """
        from airflow.sdk.exceptions import TaskDeferralTimeout

        if isinstance(error, TaskDeferralTimeout):
            what = "the wait for the training job timed out (Airflow's deferral timeout)"
        else:
            what = f"the trigger watching the training job failed ({error})"
        state = self._kept_wait_state(context)
        if state is not None:
            _tag_this_try(context, state)  # the worker time of this try is the training's too
            if state.current is None:
                raise AirflowException(
                    f"{what} while the training was paused, with no job running: a retry, or a clear, "
                    "resumes it from its checkpoint"
                ) from error
        job = (
            f"job {state.current.job_id} (attempt {state.current.attempt})" if state and state.current else ""
        )
        if not _last_try(context):
            raise AirflowException(
                f"{what}; {job or 'its job'} may still run: the retry follows it by its name and bills it"
            ) from error
        if state is None:
            raise AirflowException(
                f"{what}; no retry is left to follow its job, and the wait's state is not there to stop it "
                f"from (XCom {WAIT_STATE_XCOM_KEY!r}): look for this task's jobs on the {self.backend!r} "
                "backend and stop any still running"
            ) from error
        if self._stop_unwatched(state, why=f"{what} with no retry left to follow it"):
            done = "it was stopped and billed (cause unwatched), and the task's hold settled"
        else:
            done = f"stopping it failed (see above): stop it on the {state.plan.backend!r} backend by hand"
        raise AirflowException(
            f"{what}; no retry is left to follow {job}: {done}; clear the task to resume from its checkpoint"
        ) from error

    def _kept_wait_state(self, context: Context) -> AttemptState | None:
        """The state :meth:`_keep_wait_state` kept for this try's deferred wait; None: none, or unreadable."""
        from costaware.training.attempts import AttemptState

        ti = context.get("ti")
        if ti is None or not hasattr(ti, "xcom_pull"):
            return None
        try:
            kept = ti.xcom_pull(task_ids=ti.task_id, key=WAIT_STATE_XCOM_KEY, map_indexes=ti.map_index)
            return AttemptState.from_json(kept) if kept else None
        except Exception as e:  # the failure to report is the wait's
            self.log.warning("cannot read the wait's state in XCom %r: %s", WAIT_STATE_XCOM_KEY, e)
            return None

    def on_kill(self) -> None:
        """The task was killed while it waited in the worker: stop the job and bill it, as the trigger does.

        A deferred wait is killed in the triggerer (``RemoteTrainingJobTrigger.on_kill``). Airflow calls this
        on SIGTERM (a person's mark or clear, a worker shutting down) and after an ``execution_timeout``,
        and kills the process 5 s after a SIGTERM: the job is stopped and billed at once, to the end of its
        grace period (a retry resumes from its checkpoint). No new attempt starts after it.
        """
        self._killed = True
        trigger = self._waiting_on
        if trigger is None and self._deferred_inline is not None:
            from costaware.triggers.remote_training import inline_wait_running, note_kill_outside_inline_wait

            # `airflow dags test` runs the deferred wait inline, and Airflow's SIGTERM handler (a `kill`, a
            # `timeout`) still calls this, until the task's resumed run binds its own: nothing ended the
            # process after it, and the command waited on while the job trained on.
            if not inline_wait_running():
                # Before the wait started or after it took its event (the job ended): a KeyboardInterrupt
                # here ended the command with the job unbilled. The wait, or the resumed run, ends it.
                self.log.warning(
                    "SIGTERM while the task is deferred in `airflow dags test`: the training is stopped and "
                    "billed as its wait starts, or its ended attempt billed as the task resumes; then it ends"
                )
                note_kill_outside_inline_wait(self._deferred_inline)
                return
            # Ended as its Ctrl-C is: the inline trigger, cancelled, stops and bills the job.
            self.log.warning("SIGTERM during the inline deferred wait of `airflow dags test`: as a Ctrl-C")
            # Once: `timeout` signals the process and then its group, and a second KeyboardInterrupt cut
            # short the trigger's stop and bill.
            self._deferred_inline = None
            raise KeyboardInterrupt
        if trigger is None:
            # Between two waits: the step under way bills the attempt that ended, and starts no new one.
            self.log.info("task killed between two waits: no new attempt starts")
            return
        try:
            self._stop_killed(trigger)
        except _TaskKilled:
            pass  # Airflow ends the task itself
        except Exception:  # never into the frame the signal came in: said, and the task ends as Airflow says
            self.log.exception("could not stop and bill the training job of the killed task")

    def _wait_state_names(self, context: Context, job_id: str) -> bool:
        """Whether the wait state this try kept (what `costaware jobs reconcile` reads) names ``job_id``."""
        if not self.deferrable:
            return False  # a wait in the worker keeps none
        kept = self._kept_wait_state(context)
        return kept is not None and kept.current is not None and kept.current.job_id == job_id

    def _stop_unwatched(
        self, state: AttemptState, *, why: str = UNWATCHED_WHY, bill_refused: bool = False
    ) -> bool:
        """The task fails for good while its job runs: no try follows the job, so it is stopped and billed.

        A retry would follow it by its name; without one it ran on, watched and billed by nobody. ``why``
        goes into the entry's note. Returns whether it was stopped and billed (False: said in the log).
        ``bill_refused``: a job whose stop the backend refuses (or whose stop and bill fails before the bill)
        is billed to its grace period all the same (one no kept wait state names, which `costaware jobs
        reconcile` could never find and bill).
        """
        if state.current is None:
            return False
        try:
            refused = self._trigger(state).stop_and_bill(
                ask_state=False, cause="unwatched", why=why, bill_refused=bill_refused
            )
        except Exception:  # best effort: the task's own failure is what it reports
            self.log.exception("could not stop and bill job %s of the failing task", state.current.job_id)
            return False
        return refused is None  # a refused stop left it unbilled, its hold held (said in the log)

    def _stop_killed(self, trigger: Any) -> NoReturn:
        """Stop and bill the job ``trigger`` waits on, once, and end the task (see :meth:`on_kill`)."""
        if not self._kill_handled:
            self._kill_handled = True  # against a second call while this one runs (a signal during it)
            # In the worker, Airflow's state is not asked (a call to the supervisor from the signal handler
            # could wait on a lock the interrupted code holds), and the job is billed to the end of its grace
            # period at once (the process is killed 5 s after SIGTERM).
            try:
                # The worker keeps no wait state of this job for a reconcile to find it by: one whose stop
                # is refused (or fails before the bill) is billed to its grace period now, or never would be.
                trigger.stop_and_bill(
                    wait_seconds=WORKER_KILL_WAIT_SECONDS, ask_state=False, bill_refused=True
                )
            except BaseException:  # an execution_timeout's alarm during it: the next call tries again
                self._kill_handled = False
                raise
        raise _TaskKilled("the task was killed: its training job was stopped and billed")


def _try_number(context: Context) -> int:
    """This try's number (1 outside Airflow)."""
    tries = getattr(context.get("ti"), "try_number", None)
    return tries if isinstance(tries, int) else 1


def _last_try(context: Context) -> bool:
    """Whether this try is the task's last: a failure now is for good, no retry follows its job."""
    most = getattr(context.get("ti"), "max_tries", None)
    return isinstance(most, int) and _try_number(context) > most


class _TaskKilled(AirflowException):
    """The task was killed while it waited in the worker; its job was stopped and billed."""


def _ctrl_c_of_dags_test(error: BaseException) -> bool:
    """Whether ``error`` is a person's Ctrl-C of ``airflow dags test``, which ends the task for good.

    A worker's supervisor forwards a SIGINT to its task too (the worker stopped with Ctrl-C): failed for
    good, every waiting training of the worker would lose its retries.
    """
    from costaware.triggers.remote_training import in_dags_test

    return isinstance(error, KeyboardInterrupt) and in_dags_test()


def _killed_after_success(outcome: Mapping[str, Any]) -> str:
    """Why a training that succeeded fails its task: `airflow dags test` was killed as its wait ended."""
    version = outcome.get("version")
    stored = f"its model version {version} is stored" if version else "its result is recorded"
    return (
        f"killed (SIGTERM) as its wait ended: the training succeeded and was billed (${outcome.get('usd')}), "
        f"{stored}; the task fails without a retry so that `airflow dags test` stops here and runs none of "
        "its downstream tasks (run the command again to run them: it trains again)"
    )


def _interrupted(done: str) -> AirflowFailException:
    """The failure a Ctrl-C (``KeyboardInterrupt``) ends the task with: for good, so no retry starts a job.

    Raised as such, Airflow retried the task where it had retries (``airflow dags test`` runs the retry at
    once), and the retry started a new attempt.
    """
    return AirflowFailException(
        f"interrupted (Ctrl-C): {done}; the task fails without a retry, so no new attempt starts "
        "(clear the task to train on from its newest checkpoint)"
    )


def _tag_this_try(context: Context, state: AttemptState) -> None:
    """The worker's own entry of this try (the listener's) carries the attempts' tags, ``tags=`` included.

    The listener tags an entry with the DAG's tags and the run's params only: a project given in the
    operator's ``tags`` (and its ``budget_scope``) left the worker's time out of that project's budget.
    """
    from costaware.glue import annotate_task

    ti = context.get("ti")
    if ti is not None and hasattr(ti, "dag_id"):
        annotate_task(ti, tags=dict(state.plan.tags))


def cap_usd(value: Any) -> Decimal | None:
    """``max_usd`` as an amount above $0, or None where it is not set (None, or a template rendered empty).

    Raises:
        ConfigurationError: not an amount, or not above $0 (no attempt could run).
    """
    from costaware.core.money import parse_usd

    if not_given(value):
        return None
    amount = parse_usd(value, name="max_usd", allow_negative=True)
    if amount <= 0:
        raise ConfigurationError(f"max_usd must be more than $0, got {value!r}: no attempt could run")
    return amount
