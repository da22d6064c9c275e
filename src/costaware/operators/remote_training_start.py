"""The start of ``RemoteTrainingOperator``'s training: its plan, its spec, and the checks made before them.

Also what the operator checks as the DAG is parsed: the stores the launcher reads, ``max_usd``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.adapters.compute.base import require_usable_locations
from costaware.adapters.compute.job_contract import DEFAULT_GRACE_SECONDS
from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.given import not_given
from costaware.core.ledger import utcnow
from costaware.glue import run_identity, run_tags
from costaware.operators.remote_attempts import RemoteAttemptSteps
from costaware.operators.remote_training_args import RemotePlanArguments
from costaware.operators.templating import is_literal, refuse_root_store
from costaware.operators.training_args import BuiltInTrainingArguments

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.core.spot_decision import SpotDecision
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

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


class RemoteTrainingStart(RemoteAttemptSteps, RemotePlanArguments, BuiltInTrainingArguments):
    """A mixin of ``RemoteTrainingOperator``: the plan and spec of its training, before attempt 1."""

    command: Sequence[str] | None
    _command_written: Sequence[str] | None
    spec_uri: str | None
    max_usd: str | float | None

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

    def _check_rendered_instance_type(self, decision: SpotDecision | None) -> None:
        """Check a templated instance type (or backend) once rendered, as the parse checks them written out.

        A template's "g5.xlarge " went to the job as written, and an ``ml.*`` name to Batch or Kubernetes,
        after the budget was held; one rendered not given took the decision's without a word, or failed as
        no instance type at all. Called before anything is held or written.

        Raises:
            ConfigurationError: a type the backend refuses, or none given with no decision's to take.
        """
        from costaware.operators.remote_instance_type import (
            check_rendered_instance_type,
            instance_type_rendered_unset,
        )

        written = self._instance_type_written
        if is_literal(written) and is_literal(self._backend_written):
            return  # both checked as the DAG was parsed
        if not_given(self.job_instance_type):
            if not is_literal(written):
                decided = decision.instance_type if decision is not None else None
                self.log.warning(
                    "%s",
                    instance_type_rendered_unset(written, self.job_instance_type, self.backend, decided),
                )
            return
        warning = check_rendered_instance_type(
            self.job_instance_type, written, self.backend, self.on_demand_usd_per_hour
        )
        if warning:
            self.log.warning("%s", warning)

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
        from costaware.operators.rendered_values import text_renderer
        from costaware.training.attempts import AttemptState
        from costaware.training.entrypoint import job_environment, spec_storage_options, write_spec
        from costaware.training.plan import blank, make_plan
        from costaware.training.remote import job_base_name

        args = self._plan_arguments(context)
        decision = self._decision(context)
        self._check_rendered_instance_type(decision)
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
        command = (
            rendered_command(
                self.command, owner, self._command_written, text_renderer(self.get_dag(), context)
            )
            if self.command is not None
            else None
        )
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
            backend_options=args.backend_options,  # a stall bound the task sets for its job bounds these too
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
