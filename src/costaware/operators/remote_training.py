"""``RemoteTrainingOperator``: run the retrain on a compute backend, on the market the spot window chose."""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow
from costaware.core.series import parse_instant
from costaware.glue import (
    DEFAULT_AWS_CONN_ID,
    airflow_errors,
    as_bool,
    default_store,
    run_identity,
    run_tags,
    storage_options,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.adapters.compute.base import ComputeBackend
    from costaware.hooks.ledger import CostLedgerHook

AWS_BACKENDS = ("sagemaker", "batch")


def _maybe(value: Any) -> Any:
    return None if value in (None, "", "None") else value


def parse_mapping(value: Any, *, name: str = "spot decision") -> dict[str, Any]:
    """A mapping given as a dict, JSON text, or the text of a rendered Python dict."""
    if _maybe(value) is None:
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


def parse_decision(value: Any) -> dict[str, Any]:
    """A spot window decision from XCom: a dict, JSON text, or the text of a rendered Python dict."""
    return parse_mapping(value, name="spot decision")


class RemoteTrainingOperator(BaseOperator):
    """Runs the retrain on a compute backend (a child process, SageMaker, Batch, Kubernetes) with checkpoints.

    See docs/remote-training.md.

    The training is the one the in-worker ``WarmStartRetrainOperator`` runs (``run_retrain``): the operator
    writes a JSON spec and each attempt runs ``python -m costaware.training.entrypoint --spec URI``. It
    starts on the market of the spot window decision; when a spot attempt is interrupted it resubmits from the
    newest checkpoint, on spot while ``now`` is before the latest safe start, on on-demand after it (also when
    a spot attempt still waits for capacity then). Job names are stable per attempt, so an Airflow retry
    follows the same jobs instead of starting new ones. Each finished attempt is one ledger entry (market,
    instance type, billed seconds x price, cause ``preemption``/``code_error``/``success``); the spend gate's
    reservation for this task is settled with their sum. The worker's own time is left to the cost listener
    at the worker's price (cause ``orchestration``), never at the training's.

    Returns (XCom) the training summary (``version``, ``mode``, ...) plus ``attempts`` and ``usd``.

    Args:
        data_path: Parquet file or folder with all training data (templated).
        label_column: Label column.
        feature_columns: Feature columns, in model order.
        model_store: Model store, a local folder or ``s3://bucket/prefix`` (templated).
        new_data_path: The new batch only (templated; default ``data_path``).
        checkpoint_store: Checkpoint store (templated; default ``$AIRFLOW_HOME/costaware/checkpoints``).
        trainer: Trainer name or dotted path (see ``WarmStartRetrainOperator``).
        trainer_params: Trainer keyword arguments (templated).
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
            ``aws_default``; when that connection does not exist, the SDKs' default credential chain).
        deferrable: Poll in the triggerer (default) instead of holding a worker slot.
        **kwargs: ``BaseOperator`` arguments.
    """

    template_fields: Sequence[str] = (
        "data_path",
        "new_data_path",
        "model_store",
        "checkpoint_store",
        "trainer_params",
        "force_full",
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
    )
    template_fields_renderers = {"trainer_params": "json", "backend_options": "json"}
    ui_color = "#d9ecf7"

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        self.data_path = data_path
        self.label_column = label_column
        self.feature_columns = list(feature_columns)
        self.model_store = model_store
        self.new_data_path = new_data_path
        self.checkpoint_store = checkpoint_store
        self.trainer = trainer
        self.trainer_params = dict(trainer_params or {})
        self.label_threshold = label_threshold
        self.policy = policy
        self.policy_params = dict(policy_params or {})
        self.force_full = force_full
        self.seed = seed
        self.checkpoint_every_seconds = checkpoint_every_seconds
        self.checkpoint_every_steps = checkpoint_every_steps
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
        self.tags = dict(tags or {})
        self.aws_conn_id = aws_conn_id
        self.deferrable = deferrable

    @cached_property
    def ledger_hook(self) -> CostLedgerHook:
        from costaware.hooks.ledger import CostLedgerHook

        return CostLedgerHook(ledger_conn_id=self.ledger_conn_id)

    def _backend(self, state: Mapping[str, Any]) -> ComputeBackend:
        from costaware.adapters.compute.base import open_backend

        return open_backend(state["backend"], state["backend_options"])

    # -- plan --------------------------------------------------------------------------------------------

    def _decision(self, context: Context) -> dict[str, Any]:
        if self.spot_task_id:
            ti = context.get("ti")
            pulled = ti.xcom_pull(task_ids=self.spot_task_id) if ti is not None else None
            if pulled is None:
                raise ConfigurationError(
                    f"task {self.spot_task_id!r} left no spot decision in XCom: check spot_task_id"
                )
            return parse_decision(pulled)
        return parse_decision(self.spot_decision)

    def _plan(self, context: Context) -> dict[str, Any]:
        """Everything the attempts need, as JSON primitives; writes the training spec."""
        from costaware.adapters.checkpoint_store import checkpoint_key
        from costaware.adapters.compute.base import BACKENDS, MARKETS
        from costaware.training.entrypoint import write_spec
        from costaware.training.remote import job_base_name

        decision = self._decision(context)
        backend = str(self.backend)
        if backend not in BACKENDS:
            raise ConfigurationError(f"unknown compute backend {backend!r}: use one of {', '.join(BACKENDS)}")
        options = parse_mapping(self.backend_options, name="backend_options")
        if backend in AWS_BACKENDS and self.aws_conn_id and "aws_conn_id" not in options:
            options["aws_conn_id"] = self.aws_conn_id
        market = str(_maybe(self.job_market) or decision.get("market") or "on_demand")
        if market not in MARKETS:
            raise ConfigurationError(f"market {market!r} is not one of {', '.join(MARKETS)}")
        instance_type = _maybe(self.job_instance_type) or decision.get("instance_type")
        if not instance_type:
            raise ConfigurationError("no instance type: pass instance_type or a spot decision that has one")
        region = str(_maybe(self.job_region) or decision.get("region") or "us-east-1")
        on_demand = _maybe(self.on_demand_usd_per_hour) or decision.get("on_demand_usd_per_hour")
        if on_demand is None:
            from costaware.adapters.price_files import bundled_catalog

            on_demand = bundled_catalog().on_demand_usd_per_hour(str(instance_type), region)
        spot = _maybe(self.spot_usd_per_hour)
        if spot is None and decision.get("market") == "spot":
            spot = decision.get("usd_per_hour")
        if market == "spot" and spot is None:
            raise ConfigurationError(
                "market is spot but no spot price is known: pass spot_usd_per_hour or a spot decision"
            )
        deadline = _maybe(self.deadline) or decision.get("deadline")
        latest = _maybe(self.latest_start) or decision.get("latest_start")
        identity = run_identity(context, self.task_id)
        key = checkpoint_key(
            identity["dag_id"], identity["task_id"], identity["run_id"], identity["map_index"]
        )
        ckpt_store = str(self.checkpoint_store or default_store("checkpoints")).rstrip("/")
        spec_uri = str(_maybe(self.spec_uri) or f"{ckpt_store}/_jobs/{key}/spec.json")
        opts = {k: v for k, v in storage_options(self.aws_conn_id).items() if k in ("endpoint_url", "region")}
        spec = {
            "data_path": self.data_path,
            "new_data_path": _maybe(self.new_data_path),
            "label_column": self.label_column,
            "feature_columns": self.feature_columns,
            "label_threshold": self.label_threshold,
            "model_store": self.model_store,
            "checkpoint_store": ckpt_store,
            "checkpoint_key": key,
            "trainer": self.trainer,
            "trainer_params": self.trainer_params,
            "policy": self.policy,
            "policy_params": self.policy_params,
            "force_full": as_bool(self.force_full, "force_full"),
            "checkpoint_every_seconds": self.checkpoint_every_seconds,
            "checkpoint_every_steps": self.checkpoint_every_steps,
            "seed": self.seed,
            "run": identity,
            "storage_options": {k: v for k, v in opts.items() if v},
            "result_uri": spec_uri.rsplit("/", 1)[0] + "/result.json",
        }
        write_spec(spec_uri, spec, **storage_options(self.aws_conn_id))
        return {
            "backend": backend,
            "backend_options": options,
            "identity": identity,
            "base_name": job_base_name(
                identity["dag_id"], identity["run_id"], identity["task_id"], identity["map_index"]
            ),
            "spec_uri": spec_uri,
            "result_uri": spec["result_uri"],
            "checkpoint_uri": f"{ckpt_store}/{key}",
            "instance_type": str(instance_type),
            "region": region,
            "spot_usd_per_hour": str(spot) if spot is not None else None,
            "on_demand_usd_per_hour": str(on_demand),
            "deadline": parse_instant(deadline, name="deadline").isoformat() if deadline else None,
            "latest_start": parse_instant(latest, name="latest_start").isoformat() if latest else None,
            "tags": run_tags(self, context, self.tags),
            "estimated_usd": decision.get("estimated_usd"),
            "attempts": [],
            "current": None,
            "first_market": market,
        }

    # -- attempts ----------------------------------------------------------------------------------------

    def _submit(self, state: dict[str, Any], market: str) -> dict[str, Any]:
        from costaware.adapters.compute.base import JobRequest
        from costaware.training.remote import job_name

        attempt = len(state["attempts"]) + 1
        if attempt > self.max_attempts:
            raise AirflowFailException(
                f"training was interrupted {attempt - 1} times, max_attempts={self.max_attempts} reached: "
                "raise max_attempts or start it on on-demand"
            )
        now = utcnow()
        deadline = parse_instant(state["deadline"], name="deadline") if state["deadline"] else None
        budget = int((deadline - now).total_seconds()) if deadline else 86400
        request = JobRequest(
            job_name=job_name(state["base_name"], attempt),
            spec_uri=state["spec_uri"],
            market=market,
            instance_type=state["instance_type"],
            checkpoint_uri=state["checkpoint_uri"],
            max_runtime_seconds=max(60, budget),
            max_wait_seconds=max(60, budget) if market == "spot" else None,
        )
        job_id = self._backend(state).submit(request)
        self.log.info(
            "attempt %d: job %s on %s, %s %s",
            attempt,
            job_id,
            state["backend"],
            market,
            state["instance_type"],
        )
        state["current"] = {"attempt": attempt, "job_id": job_id, "market": market}
        return state

    def _record_attempt(
        self, state: dict[str, Any], job: Mapping[str, Any], cause: str | None = None
    ) -> None:
        from costaware.training.remote import attempt_entry

        rate_text = state["spot_usd_per_hour"] if job["market"] == "spot" else state["on_demand_usd_per_hour"]
        entry = attempt_entry(
            identity=state["identity"],
            attempt=state["current"]["attempt"],
            job=job,
            usd_per_hour=Decimal(str(rate_text)),
            on_demand_usd_per_hour=Decimal(state["on_demand_usd_per_hour"]),
            region=state["region"],
            backend=state["backend"],
            tags=state["tags"],
            cause=cause,
        )
        self.ledger_hook.get_conn().record(entry)
        state["attempts"].append(
            {
                "attempt": state["current"]["attempt"],
                "job_id": job["job_id"],
                "market": job["market"],
                "instance_type": job["instance_type"],
                "billable_seconds": job["billable_seconds"],
                "usd": str(entry.usd),
                "cause": entry.cause,
                "reason": job.get("reason", ""),
            }
        )
        state["current"] = None

    def _advance(
        self, context: Context, state: dict[str, Any], job: Mapping[str, Any], fallback: bool
    ) -> Any:
        """Act on a finished (or stuck) attempt: record it, then resubmit, finish or fail."""
        from costaware.training.remote import next_market

        latest = parse_instant(state["latest_start"], name="latest_start") if state["latest_start"] else None
        if fallback:
            self.log.warning("spot capacity not found by the latest safe start %s: on-demand", latest)
            self._backend(state).stop(str(job["job_id"]))
            self._record_attempt(state, job, cause="capacity_wait")
            return self._submit(state, "on_demand")
        self._record_attempt(state, job)
        if job["state"] == "succeeded":
            return self._finish(context, state)
        if job["state"] == "failed":
            self._settle(state)
            logs = self._backend(state).logs(str(job["job_id"]), tail=5)
            raise AirflowFailException(
                f"training job {job['job_id']} failed: {job.get('reason') or 'no reason given'}; "
                f"last log lines: {logs[-800:]}"
            )
        market = next_market(previous=str(job["market"]), now=utcnow(), latest_start=latest)
        self.log.warning(
            "attempt %s interrupted (%s): resubmitting on %s from the newest checkpoint",
            state["attempts"][-1]["attempt"],
            job.get("reason"),
            market,
        )
        return self._submit(state, market)

    def _total(self, state: Mapping[str, Any]) -> Decimal:
        return sum((Decimal(a["usd"]) for a in state["attempts"]), Decimal(0))

    def _settle(self, state: Mapping[str, Any]) -> None:
        """Settle this task's reservation (the spend gate's, or our own) with the attempts' total."""
        from costaware.core.ledger import reservation_holder

        ident = state["identity"]
        holder = reservation_holder(ident["dag_id"], ident["run_id"], ident["task_id"], ident["map_index"])
        ledger = self.ledger_hook.get_conn()
        for reservation in ledger.open_reservations(holder_prefix=holder):
            if reservation.holder == holder:
                ledger.settle(reservation.id, self._total(state))

    def _finish(self, context: Context, state: dict[str, Any]) -> dict[str, Any]:
        from costaware.training.entrypoint import read_spec

        self._settle(state)
        result = read_spec(state["result_uri"])
        ti = context.get("ti")
        if ti is not None and hasattr(ti, "dag_id"):
            from costaware.glue import annotate_task

            annotate_task(
                ti, cause="orchestration", note="worker waited for remote training; billed per attempt"
            )
        usd = self._total(state)
        self.log.info(
            "stored %s model version %s after %d attempt(s), %s USD billed",
            result.get("mode"),
            result.get("version"),
            len(state["attempts"]),
            usd,
        )
        return {**result, "attempts": state["attempts"], "usd": str(usd), "backend": state["backend"]}

    def _reserve(self, state: Mapping[str, Any]) -> None:
        if not self.budget_scope or not state.get("estimated_usd"):
            return
        from costaware.core.ledger import reservation_holder

        ident = state["identity"]
        holder = reservation_holder(ident["dag_id"], ident["run_id"], ident["task_id"], ident["map_index"])
        self.ledger_hook.get_conn().reserve(
            self.budget_scope,
            state["estimated_usd"],
            holder=holder,
            run_id=ident["run_id"],
            purpose=f"remote training {ident['task_id']}",
        )

    # -- Airflow entry points ----------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        """Write the spec, submit attempt 1 (or find it, on a retry) and wait for it."""
        with airflow_errors():
            state = self._plan(context)
            self._reserve(state)
            state = self._submit(state, state["first_market"])
        return self._wait(context, state)

    def _wait(self, context: Context, state: dict[str, Any]) -> Any:
        from costaware.triggers.remote_training import RemoteTrainingJobTrigger, job_event

        while True:
            if self.deferrable:
                deadline = state["deadline"]
                timeout = (
                    max(parse_instant(deadline, name="deadline") - utcnow(), timedelta(0))
                    + timedelta(hours=1)
                    if deadline
                    else timedelta(days=1)
                )
                self.defer(
                    trigger=RemoteTrainingJobTrigger(
                        backend=state["backend"],
                        backend_options=state["backend_options"],
                        job_id=state["current"]["job_id"],
                        state=state,
                        fallback_at=state["latest_start"] if state["current"]["market"] == "spot" else None,
                        poll_interval=self.poll_interval,
                    ),
                    method_name="execute_complete",
                    timeout=timeout,
                )
            status = self._backend(state).poll(state["current"]["job_id"])
            latest = state["latest_start"] if state["current"]["market"] == "spot" else None
            fallback_at: datetime | None = parse_instant(latest, name="latest_start") if latest else None
            event = job_event(status, state, fallback_at=fallback_at, now=utcnow())
            if event is None:
                time.sleep(self.poll_interval)
                continue
            with airflow_errors():
                outcome = self._advance(context, state, event["job"], bool(event["fallback"]))
            if "version" in outcome:
                return outcome
            state = outcome

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger: record the attempt, then finish, fail or wait for the next attempt."""
        if not event or "state" not in event:
            raise AirflowException(f"remote training trigger ended without a job status: {event!r}")
        state = dict(event["state"])
        if event.get("status") != "success":
            raise AirflowException(f"polling the training job failed: {event.get('message')}")
        with airflow_errors():
            outcome = self._advance(context, state, event["job"], bool(event.get("fallback")))
        if "version" in outcome:
            return outcome
        return self._wait(context, outcome)

    def on_kill(self) -> None:
        """The task was killed: leave the job running; a retry follows it by its stable name."""
        self.log.info("task killed; the training job keeps running and a retry resumes watching it")
