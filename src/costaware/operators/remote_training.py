"""``RemoteTrainingOperator``: run the retrain on a compute backend, on the market the spot window chose."""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow
from costaware.glue import (
    DEFAULT_AWS_CONN_ID,
    airflow_errors,
    as_bool,
    check_tags,
    run_identity,
    run_tags,
    storage_options,
)
from costaware.operators.remote_command import check_job_kind
from costaware.operators.training_args import TRAINING_TEMPLATE_FIELDS, BuiltInTrainingArguments
from costaware.training.job_contract import DEFAULT_GRACE_SECONDS, check_grace_seconds
from costaware.training.plan import blank

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.adapters.compute.base import ComputeBackend
    from costaware.core.spot_decision import SpotDecision
    from costaware.hooks.ledger import CostLedgerHook
    from costaware.training.attempts import AttemptState, Event, Fail
    from costaware.training.plan import PlanArguments, RemotePlan


def parse_mapping(value: Any, *, name: str = "spot decision") -> dict[str, Any]:
    """A mapping given as a dict, JSON text, or the text of a rendered Python dict."""
    if blank(value) is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    text = str(value)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError) as e:
            raise ConfigurationError(f"{name} {text[:80]!r} is neither JSON nor a dict") from e
    if not isinstance(parsed, dict):
        raise ConfigurationError(f"{name} must be a mapping, got {type(parsed).__name__}")
    return parsed


def parse_decision(value: Any) -> SpotDecision | None:
    """A spot window decision from XCom (a dict, JSON text or a rendered Python dict), or None."""
    from costaware.core.spot_decision import SpotDecision

    mapping = parse_mapping(value, name="spot decision")
    return SpotDecision.from_xcom(mapping) if mapping else None


class RemoteTrainingOperator(BuiltInTrainingArguments, BaseOperator):
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
            command (default 110: AWS gives 120).
        data_path: Parquet file or folder with all training data (templated; built-in trainers).
        label_column: Label column (built-in trainers).
        feature_columns: Feature columns, in model order (built-in trainers).
        new_data_path: The new batch only (templated; default ``data_path``).
        checkpoint_store: Checkpoint store (templated; default ``$AIRFLOW_HOME/costaware/checkpoints``;
            ``s3://`` on the SageMaker, Batch and Kubernetes backends).
        trainer: Trainer name or dotted path (see ``WarmStartRetrainOperator``; default ``sklearn-sgd``).
        trainer_params: Trainer keyword arguments (templated). A value written as a template that renders to
            exactly a number or bool literal (``{"epochs": "{{ params.epochs }}"}`` -> ``"5"``) reaches the
            trainer as an ``int``, ``float`` or ``bool``, without ``render_template_as_native_obj``; other
            strings stay strings.
        label_threshold: When set, the label is ``label_column > label_threshold``.
        policy: Retrain policy name (``drift``, ``always-full``, ``always-warm``).
        policy_params: Keyword arguments of the policy.
        force_full: Retrain in full whatever the policy says (templated).
        seed: Seed of the trainer.
        checkpoint_every_seconds: Checkpoint at least this often (the most work a hard kill loses).
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
        poll_interval: Seconds between status polls.
        spec_uri: Where the spec goes (templated; default next to the checkpoints).
        budget_scope: With no reservation from a spend gate, reserve the decision's ``estimated_usd`` here.
        ledger_conn_id: Connection of the cost ledger.
        tags: Extra allocation tags of the ledger entries.
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
            capacity when it is below on-demand).
        expected_runtime_hours: Training time on the instance; default the decision's (templated).
        priority: ``critical`` (never paused), ``normal`` or ``best_effort`` (paused at any expected saving,
            may wait until the deadline itself); default the decision's, else ``normal`` (templated).
        restart_overhead_minutes: What a restart from a checkpoint costs before training goes on.
        history_days: Days of price history the pause forecast fits on.
        **kwargs: ``BaseOperator`` arguments.
    """

    template_fields: Sequence[str] = (
        "command",
        "image",
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
        "pause_on_price",
        "prices",
        "availability",
        "expected_runtime_hours",
        "priority",
    )
    template_fields_renderers = {"trainer_params": "json", "backend_options": "json"}
    ui_color = "#d9ecf7"

    def __init__(
        self,
        *,
        model_store: str,
        command: Sequence[str] | None = None,
        image: str | None = None,
        preemption_grace_seconds: float = DEFAULT_GRACE_SECONDS,
        data_path: str | None = None,
        label_column: str | None = None,
        feature_columns: Sequence[str] | None = None,
        new_data_path: str | None = None,
        checkpoint_store: str | None = None,
        trainer: str | None = None,
        trainer_params: Mapping[str, Any] | None = None,
        label_threshold: float | None = None,
        policy: str | None = None,
        policy_params: Mapping[str, Any] | None = None,
        force_full: bool | str = False,
        seed: int | None = None,
        checkpoint_every_seconds: float | None = 300.0,
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
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
        }
        owner = f"{type(self).__name__} {self.task_id!r}"
        self.command = check_job_kind(owner, command, trainer_arguments)
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
        )
        self.image = image
        self.preemption_grace_seconds = check_grace_seconds(preemption_grace_seconds)
        self.backend = backend
        self.backend_options = (
            backend_options if isinstance(backend_options, str) else dict(backend_options or {})
        )
        self.spot_decision = spot_decision
        self.spot_task_id = spot_task_id
        # Not named instance_type/market/region/usd_per_hour: the cost listener reads those attributes to
        # price the worker's own time, and the worker only waits here; the training is billed per attempt.
        self.job_market = market
        self.job_instance_type = instance_type
        self.job_region = region
        self.spot_usd_per_hour = spot_usd_per_hour
        self.on_demand_usd_per_hour = on_demand_usd_per_hour
        self.deadline = deadline
        self.latest_start = latest_start
        self.max_attempts = max_attempts
        self.poll_interval = poll_interval
        self.spec_uri = spec_uri
        self.budget_scope = budget_scope
        self.ledger_conn_id = ledger_conn_id
        self.tags = check_tags(tags or {}, owner=f"{type(self).__name__} {self.task_id!r}")
        self.aws_conn_id = aws_conn_id
        self.deferrable = deferrable
        self.pause_on_price = pause_on_price
        self.prices = prices
        self.availability = availability
        self.expected_runtime_hours = expected_runtime_hours
        self.priority = priority
        if not restart_overhead_minutes >= 0:
            raise ConfigurationError(
                f"restart_overhead_minutes must be >= 0, got {restart_overhead_minutes!r}"
            )
        self.restart_overhead_minutes = restart_overhead_minutes
        if not isinstance(history_days, int) or history_days < 1:
            raise ConfigurationError(f"history_days must be an integer >= 1, got {history_days!r}")
        self.history_days = history_days

    @cached_property
    def ledger_hook(self) -> CostLedgerHook:
        from costaware.hooks.ledger import CostLedgerHook

        return CostLedgerHook(ledger_conn_id=self.ledger_conn_id)

    def _storage_options(self) -> dict[str, Any]:
        """How every object of the training is reached: the S3 options of ``aws_conn_id``.

        The one source for the spec write, the result read and (through the spec's endpoint and region)
        the job's checkpoint and model stores, so that the worker and the job see the same store. Read
        anew on each use: temporary credentials may have been renewed since the last.
        """
        return storage_options(self.aws_conn_id)

    def _backend(self, plan: RemotePlan) -> ComputeBackend:
        from costaware.adapters.compute.base import open_backend

        return open_backend(plan.backend, dict(plan.backend_options))

    # -- plan --------------------------------------------------------------------------------------------

    def _decision(self, context: Context) -> SpotDecision | None:
        if self.spot_task_id:
            ti = context.get("ti")
            pulled = ti.xcom_pull(task_ids=self.spot_task_id) if ti is not None else None
            if pulled is None:
                raise ConfigurationError(
                    f"task {self.spot_task_id!r} left no spot decision in XCom: check spot_task_id"
                )
            return parse_decision(pulled)
        return parse_decision(self.spot_decision)

    def _plan_arguments(self) -> PlanArguments:
        from costaware.training.plan import PlanArguments

        return PlanArguments(
            backend=str(self.backend),
            backend_options=parse_mapping(self.backend_options, name="backend_options"),
            market=self.job_market,
            instance_type=self.job_instance_type,
            region=self.job_region,
            spot_usd_per_hour=self.spot_usd_per_hour,
            on_demand_usd_per_hour=self.on_demand_usd_per_hour,
            deadline=self.deadline,
            latest_start=self.latest_start,
            image=self.image,
            grace_seconds=self.preemption_grace_seconds,
            checkpoint_every_seconds=self.checkpoint_every_seconds,
            aws_conn_id=self.aws_conn_id,
            pause_on_price=as_bool(self.pause_on_price, "pause_on_price"),
            prices=self.prices,
            availability=self.availability,
            expected_runtime_hours=self.expected_runtime_hours,
            priority=self.priority,
            restart_overhead_minutes=self.restart_overhead_minutes,
            history_days=self.history_days,
        )

    def _start(self, context: Context) -> AttemptState:
        """The state before attempt 1: the plan (:func:`~costaware.training.plan.make_plan`) and its spec."""
        from costaware.adapters.checkpoint_store import checkpoint_key
        from costaware.adapters.compute.base import require_s3
        from costaware.adapters.price_files import bundled_catalog
        from costaware.operators.remote_command import rendered_command
        from costaware.training.attempts import AttemptState
        from costaware.training.entrypoint import job_environment, spec_storage_options, write_spec
        from costaware.training.plan import blank, make_plan
        from costaware.training.remote import job_base_name

        args = self._plan_arguments()
        decision = self._decision(context)
        identity = run_identity(context, self.task_id)
        key = checkpoint_key(
            identity["dag_id"], identity["task_id"], identity["run_id"], identity["map_index"]
        )
        ckpt_store = self.checkpoint_root()
        owner = f"{type(self).__name__} {self.task_id!r}"
        command = rendered_command(self.command, owner) if self.command is not None else None
        if command and args.backend == "local" and blank(self.image):
            self.log.info("image %r is not used: the local backend runs the command here", self.image)
        # A command has no spec: the contract's variables say it all.
        spec_uri = "" if command else str(blank(self.spec_uri) or f"{ckpt_store}/_jobs/{key}/spec.json")
        result_uri = spec_uri.rsplit("/", 1)[0] + "/result.json" if spec_uri else ""
        require_s3(
            args.backend, checkpoint_store=ckpt_store, model_store=str(self.model_store), spec_uri=spec_uri
        )
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
            model_store=str(self.model_store),
            spec_uri=spec_uri,
            result_uri=result_uri,
            job_env=job_environment(job_opts),
            tags=run_tags(self, context, self.tags),
            list_price=lambda instance_type, region: bundled_catalog().on_demand_usd_per_hour(
                instance_type, region
            ),
        )
        if spec_uri:
            training = self.training_spec()
            spec = training.spec_file(
                checkpoint_key=key, run=identity, storage_options=job_opts, result_uri=result_uri
            )
            write_spec(spec_uri, spec, **opts)
        return AttemptState(
            plan=start.plan,
            latest_start=start.latest_start,
            spot_usd_per_hour=start.spot_usd_per_hour,
            command=tuple(command) if command is not None else None,
        )

    # -- attempts: the side effects of each step of costaware.training.attempts.next_step -----------------

    def _submit(self, state: AttemptState, market: str) -> AttemptState:
        from costaware.adapters.compute.base import JobRequest
        from costaware.training.job_contract import attempt_uris
        from costaware.training.plan import job_seconds_left
        from costaware.training.remote import job_name

        plan = state.plan
        attempt = state.next_attempt
        seconds = job_seconds_left(plan, utcnow())
        output_uri, result_uri = attempt_uris(plan.model_store, plan.base_name, attempt)
        request = JobRequest(
            job_name=job_name(plan.base_name, attempt),
            spec_uri=plan.spec_uri,
            market=market,
            instance_type=plan.instance_type,
            checkpoint_uri=plan.checkpoint_uri,
            model_store=plan.model_store,
            max_runtime_seconds=seconds,
            max_wait_seconds=seconds if market == "spot" else None,
            env=dict(plan.job_env),
            user_command=state.command or (),
            image=plan.image or "",
            output_uri=output_uri if state.command else "",
            result_uri=result_uri if state.command else "",
            attempt=attempt,
            grace_seconds=plan.grace_seconds,
        )
        job_id = self._backend(plan).submit(request)
        self.log.info(
            "attempt %d: job %s on %s, %s %s", attempt, job_id, plan.backend, market, plan.instance_type
        )
        return state.submitted(job_id=job_id, market=market)

    def _record_attempt(self, state: AttemptState, job: Mapping[str, Any], cause: str) -> AttemptState:
        from costaware.training.attempts import Attempt
        from costaware.training.remote import attempt_entry

        plan = state.plan
        assert state.current is not None  # only a running attempt ends
        if job["market"] == "spot":
            rate = self._billed_spot_rate(state, job)
        else:
            rate = Decimal(plan.on_demand_usd_per_hour)
        entry = attempt_entry(
            identity=plan.identity,
            attempt=state.current.attempt,
            job=job,
            usd_per_hour=rate,
            on_demand_usd_per_hour=Decimal(plan.on_demand_usd_per_hour),
            region=plan.region,
            backend=plan.backend,
            tags=plan.tags,
            cause=cause,
        )
        self.ledger_hook.get_conn().record(entry)
        attempt = Attempt(
            attempt=state.current.attempt,
            job_id=str(job["job_id"]),
            market=str(job["market"]),
            instance_type=str(job["instance_type"]),
            billable_seconds=job["billable_seconds"],
            usd=str(entry.usd),
            cause=str(entry.cause),
            reason=str(job.get("reason") or ""),
        )
        return state.recorded(attempt)

    def _billed_spot_rate(self, state: AttemptState, job: Mapping[str, Any]) -> Decimal:
        """The spot USD/hour an attempt is billed at.

        Its starting price or, given ``prices``, the time-weighted mean of the price in force over its run
        (``ended_at`` back by its billed seconds), so that a rise during the run is paid for.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        from costaware.core.errors import CostawareError
        from costaware.triggers.spot_window import spot_history

        started_at = Decimal(str(state.spot_usd_per_hour))
        billing, plan = state.plan.billing, state.plan
        seconds = float(job["billable_seconds"])
        if not billing or seconds <= 0:
            return started_at
        ended = job.get("ended_at")
        end = datetime.fromtimestamp(float(ended), tz=timezone.utc) if ended else utcnow()
        start = end - timedelta(seconds=seconds)
        try:
            history = spot_history(
                prices=billing.prices,
                instance_type=plan.instance_type,
                region=plan.region,
                aws_conn_id=self.aws_conn_id,
                ttl_seconds=1.0,
                products=["Linux/UNIX"],
                now=end,
                history_days=int(seconds // 86400) + 2,
            )
            series = history.series(plan.instance_type, plan.region, billing.availability_zone)
            rate: Decimal = series.mean_usd_per_hour(start, end)
        except (CostawareError, BotoCoreError, ClientError) as e:
            # The attempt still gets its entry: at the price it started on, with the reason in the log.
            self.log.warning("attempt billed at its starting spot price %s USD/hour: %s", started_at, e)
            return started_at
        if rate != started_at:
            self.log.info(
                "attempt billed at %s USD/hour, the mean spot price over its %.0f s (it started at %s)",
                rate,
                seconds,
                started_at,
            )
        return rate

    def _step(self, context: Context, state: AttemptState, event: Event) -> Any:
        """Decide the next step (pure) and perform it: the new state to wait on, or the result (XCom)."""
        from costaware.training.attempts import Fail, Finish, JobEnded, Pause, Resume, Submit, next_step
        from costaware.training.pauses import latest_resume as resume_by
        from costaware.training.pauses import price_watch, work_left

        now = utcnow()
        latest_resume = None
        if isinstance(event, JobEnded) and state.current and state.current.pausing:
            latest_resume = resume_by(state, work_left(state, ended=event.job))
        step = next_step(state, event, now, max_attempts=self.max_attempts, latest_resume=latest_resume)
        current = state.current
        if step.stop_first and isinstance(event, JobEnded):
            self.log.warning(
                "spot capacity not found by the latest safe start %s: on-demand", state.latest_start
            )
            self._backend(state.plan).stop(str(event.job["job_id"]))
        if step.record_cause is not None and isinstance(event, JobEnded):
            state = self._record_attempt(state, event.job, step.record_cause)
        if isinstance(step, Pause):
            assert current is not None  # a price rise is seen on a running job
            self.log.warning(
                "pausing attempt %s (job %s): %s", current.attempt, step.job["job_id"], step.reason
            )
            self._backend(state.plan).stop(str(step.job["job_id"]))
            return state.pausing(reason=step.reason, job=step.job, seen_at=step.seen_at)
        if isinstance(step, Resume):
            self.log.info("resuming from the newest checkpoint on %s: %s", step.market, step.reason)
            return self._submit(state.resumed_at(step.usd_per_hour), step.market)
        if isinstance(step, Submit):
            if step.cause_of_previous == "paused":
                self.log.warning("paused with no slack left for a later spot start: resuming on on-demand")
            elif step.cause_of_previous != "capacity_wait" and isinstance(event, JobEnded):
                self.log.warning(
                    "attempt %s interrupted (%s): resubmitting on %s from the newest checkpoint",
                    current.attempt if current else "?",
                    event.job.get("reason"),
                    step.market,
                )
            return self._submit(state, step.market)
        if isinstance(step, Finish):
            return self._finish(context, state)
        if isinstance(step, Fail):
            self._fail(state, step)
        watch = price_watch(state, "resume", poll_interval=self.poll_interval)  # WaitForPrice
        self.log.info(
            "paused; %s h of work left, waiting for the spot price to come back until %s at the latest",
            watch["remaining_hours"],
            watch["latest_resume"],
        )
        return state

    def _fail(self, state: AttemptState, step: Fail) -> NoReturn:
        message = step.message
        if step.job_id is not None:
            self._settle(state)
            logs = self._backend(state.plan).logs(step.job_id, tail=5)
            message = f"{message}; last log lines: {logs[-800:]}"
        if step.retry:
            raise AirflowException(message)
        raise AirflowFailException(message)

    def _total(self, state: AttemptState) -> Decimal:
        return sum((Decimal(a.usd) for a in state.attempts), Decimal(0))

    def _settle(self, state: AttemptState) -> None:
        """Settle this task's reservation (the spend gate's, or our own) with the attempts' total."""
        from costaware.core.ledger import reservation_holder

        ident = state.plan.identity
        holder = reservation_holder(ident["dag_id"], ident["run_id"], ident["task_id"], ident["map_index"])
        ledger = self.ledger_hook.get_conn()
        for reservation in ledger.open_reservations(holder_prefix=holder):
            if reservation.holder == holder:
                ledger.settle(reservation.id, self._total(state))

    def _finish(self, context: Context, state: AttemptState) -> dict[str, Any]:
        from costaware.training.entrypoint import read_result

        self._settle(state)
        ti = context.get("ti")
        if ti is not None and hasattr(ti, "dag_id"):
            from costaware.glue import annotate_task

            annotate_task(
                ti, cause="orchestration", note="worker waited for remote training; billed per attempt"
            )
        opts = self._storage_options()
        if state.command:
            summary = self._finish_command(context, state, opts)
        else:
            job_id = state.attempts[-1].job_id if state.attempts else ""
            result = read_result(state.plan.result_uri, job_id=job_id, **opts)
            usd = self._total(state)
            self.log.info(
                "stored %s model version %s after %d attempt(s), %s USD billed",
                result.get("mode"),
                result.get("version"),
                len(state.attempts),
                usd,
            )
            attempts = [a.to_json() for a in state.attempts]
            summary = {**result, "attempts": attempts, "usd": str(usd), "backend": state.plan.backend}
        self._clear_checkpoints(state.plan, opts)
        return summary

    def _clear_checkpoints(self, plan: RemotePlan, opts: Mapping[str, Any]) -> None:
        """Delete this training's checkpoints once its model version is stored.

        They cost storage and no other run resumes them. A failure to delete only warns: the model is stored.
        """
        from costaware.adapters.model_store import BlobDir

        parent, _, leaf = plan.checkpoint_uri.rstrip("/").rpartition("/")
        if not parent or not leaf:
            return
        try:
            BlobDir.from_uri(parent, create=False, **opts).delete(leaf)
        except OSError as e:
            self.log.warning(
                "could not delete the checkpoints at %s (%s): delete them by hand", plan.checkpoint_uri, e
            )
            return
        self.log.info("deleted the checkpoints at %s: the model version is stored", plan.checkpoint_uri)

    def _finish_command(
        self, context: Context, state: AttemptState, opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Store the command's outputs as a ``files`` version, record its metrics, return them (XCom)."""
        from costaware.operators.remote_command import format_metrics, register_outputs
        from costaware.operators.run_record import command_outcome, write_outcome

        usd = self._total(state)
        stored = register_outputs(state.to_json(), opts, str(usd))
        self.log.info(
            "stored model version %s (%d files, %d bytes) after %d attempt(s), %s USD billed; metrics: %s",
            stored["version"],
            stored["files"],
            stored["bytes"],
            len(state.attempts),
            usd,
            format_metrics(stored["metrics"]),
        )
        outcome = command_outcome(
            context=context,
            identity=state.plan.identity,
            version=stored["version"],
            metrics=stored["metrics"],
            command=list(state.command or ()),
            image=state.plan.image,
        )
        write_outcome(outcome, self.ledger_conn_id)
        return {
            "version": stored["version"],
            "metrics": stored["metrics"],
            "model_format": "files",
            "files": stored["files"],
            "bytes": stored["bytes"],
            "attempts": [a.to_json() for a in state.attempts],
            "usd": str(usd),
            "backend": state.plan.backend,
        }

    def _reserve(self, state: AttemptState) -> None:
        plan = state.plan
        if not self.budget_scope or not plan.estimated_usd:
            return
        from costaware.core.ledger import reservation_holder

        ident = plan.identity
        holder = reservation_holder(ident["dag_id"], ident["run_id"], ident["task_id"], ident["map_index"])
        self.ledger_hook.get_conn().reserve(
            self.budget_scope,
            plan.estimated_usd,
            holder=holder,
            run_id=ident["run_id"],
            purpose=f"remote training {ident['task_id']}",
        )

    # -- Airflow entry points ----------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        """Write the spec, submit attempt 1 (or find it, on a retry) and wait for it."""
        with airflow_errors():
            state = self._start(context)
            self._reserve(state)
            state = self._submit(state, state.plan.first_market)
        return self._wait(context, state)

    def _trigger(self, state: AttemptState) -> Any:
        """What to wait on: the current job (watching its spot price when asked), or the price of a pause."""
        from costaware.training.pauses import price_watch
        from costaware.triggers.remote_training import RemoteTrainingJobTrigger

        current = state.current
        if current is None:  # paused: wait for a good price to resume
            watch: dict[str, Any] | None = price_watch(state, "resume", poll_interval=self.poll_interval)
        elif state.plan.watch and current.market == "spot" and not current.pausing:
            watch = price_watch(state, "pause", poll_interval=self.poll_interval)
        else:
            watch = None
        latest = state.latest_start
        return RemoteTrainingJobTrigger(
            backend=state.plan.backend,
            backend_options=dict(state.plan.backend_options),
            job_id=current.job_id if current else None,
            state=state.to_json(),
            fallback_at=latest.isoformat() if latest and current and current.market == "spot" else None,
            poll_interval=self.poll_interval,
            price_watch=watch,
        )

    def _wait(self, context: Context, state: AttemptState) -> Any:
        while True:
            with airflow_errors():
                trigger = self._trigger(state)
            if self.deferrable:
                deadline = state.plan.deadline
                timeout = (
                    max(deadline - utcnow(), timedelta(0)) + timedelta(hours=1)
                    if deadline
                    else timedelta(days=1)
                )
                self.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)
            # In the worker: poll the same trigger (its price watch and state-change logging) until it fires.
            with airflow_errors():
                event = trigger.poll_once(utcnow())
                while event is None:
                    time.sleep(self.poll_interval)
                    event = trigger.poll_once(utcnow())
            outcome = self._on_event(context, state, event)
            if isinstance(outcome, dict):
                return outcome
            state = outcome

    def _on_event(self, context: Context, state: AttemptState, event: Mapping[str, Any]) -> Any:
        """Act on a trigger event: resume a pause, pause a job, or handle a job that ended."""
        from costaware.training.attempts import event_from_trigger

        with airflow_errors():
            return self._step(context, state, event_from_trigger(event))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: record the attempt, then finish, fail or wait for the next attempt."""
        from costaware.training.attempts import AttemptState

        if not event or "state" not in event:
            raise AirflowException(f"remote training trigger ended without a job status: {event!r}")
        if event.get("status") != "success":
            if event.get("configuration"):  # a retry would fail the same way
                raise AirflowFailException(f"polling the training job failed: {event.get('message')}")
            raise AirflowException(f"polling the training job failed: {event.get('message')}")
        with airflow_errors():
            state = AttemptState.from_json(event["state"])
        outcome = self._on_event(context, state, event)
        if isinstance(outcome, dict):
            return outcome
        return self._wait(context, outcome)

    def on_kill(self) -> None:
        """The task was killed: leave the job running; a retry follows it by its stable name."""
        self.log.info("task killed; the training job keeps running and a retry resumes watching it")
