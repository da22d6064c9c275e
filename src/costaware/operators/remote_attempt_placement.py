"""Where a ``RemoteTrainingOperator`` attempt runs: its backend and store, zone and market, checkpoints.

The base of the operator's attempt mixins (:class:`~costaware.operators.remote_attempts.RemoteAttemptSteps`
builds on it): the operator's fields they read, the backend and the store's options, the zone an attempt
is placed in (its price and availability, the cost of moving its data there), and the checkpoint interval
``"auto"`` re-tunes from the saves measured.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from costaware.core.ledger import utcnow
from costaware.glue import storage_options
from costaware.remote_billing import AttemptBilling

if TYPE_CHECKING:
    from costaware.adapters.compute.base import ComputeBackend
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan


class RemoteAttemptPlacement(AttemptBilling):
    """A mixin of ``RemoteTrainingOperator``: the backend, the store, and where an attempt runs."""

    max_attempts: int
    _killed = False  # set by the operator's on_kill: no new attempt starts
    # The newest state whose job may be running (None: none): what a try that fails for good stops and
    # bills. Set as soon as a submit returns, before anything else can fail.
    _live: AttemptState | None = None
    # The state, the attempt's job name, market, zone and submit time while a submit is under way: a
    # failure inside the submit (an execution_timeout) may come after the backend took the job.
    _submitting: tuple[AttemptState, str, str, str, str, int] | None = None
    _retry = False  # a later try of the task: its submits may find the jobs an earlier try submitted
    poll_interval: float
    budget_scope: str | None
    ledger_conn_id: str
    aws_conn_id: str | None
    checkpoint_every_seconds: float | str | None

    if TYPE_CHECKING:  # BaseOperator's task logger

        @property
        def log(self) -> Any: ...

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

    def _moved_bytes(self, state: AttemptState, *, following: bool = False) -> int:
        """What an attempt reads across regions where it runs in another: the data and the checkpoint (IO).

        0 where the plan allows no zone of another region. Billed as egress at the price the zone choice
        weighed, once the attempt has run there (:meth:`AttemptBilling._record_move_egress`). A job a retry
        follows has pushed checkpoints of its own since its start: its first attempt restored none.
        """
        plan = state.plan
        if not plan.placement.usd_per_gb:
            return 0
        if following and state.next_attempt == 1:
            return plan.placement.data_bytes
        return plan.placement.data_bytes + self._checkpoint_bytes(plan.checkpoint_uri)

    def _place(self, state: AttemptState) -> tuple[AttemptState, str, str, str]:
        """The next spot attempt's market, zone, price and, for on-demand, why (``core.zone_choice``).

        Among the allowed zones, the one with the lowest expected cost; on-demand when the restart-thrash
        guard leaves none. With one zone there is nothing to choose but the guard's verdict. See
        docs/remote-training.md.
        """
        from costaware.training.placement import next_zone, preempted_runs

        placement = state.plan.placement
        if not placement.zones and not (placement.guard and preempted_runs(state)):
            # One zone and no guard to consult: nothing to choose (nor a "stays there" line to log).
            return state, "spot", placement.first_zone, ""
        prices, capacity = self._zone_market(state)
        choice = next_zone(state, prices=prices, capacity=capacity, move_usd=self._move_usd(state))
        if choice.zone is None:
            self.log.warning("%s", choice.reason)
            return state, "on_demand", "", choice.reason
        self.log.info("%s", choice.reason)
        price = prices.get(choice.zone)
        return (state.resumed_at(str(price)) if price is not None else state), "spot", choice.zone, ""

    def _zone_market(self, state: AttemptState) -> tuple[dict[str, Decimal], dict[str, bool | None]]:
        """Each allowed zone's spot price and capacity now, where the plan has prices or traces (IO).

        Without ``prices`` every zone is taken at the attempt's spot price; without a trace a zone's capacity
        is unknown (a job sent there waits for it). A zone whose price cannot be read keeps the attempt's.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        from costaware.adapters import spot_prices
        from costaware.adapters.spot_market import observe_spot
        from costaware.core.errors import CostawareError

        plan, placement = state.plan, state.plan.placement
        source = plan.spot_prices
        now = utcnow()
        prices: dict[str, Decimal] = {}
        capacity: dict[str, bool | None] = {}
        for zone in placement.zones:
            trace = placement.zone_availability.get(zone)
            try:
                if source:
                    price, available, _ = observe_spot(
                        prices=source,
                        instance_type=plan.instance_type,
                        region=plan.region,
                        availability_zone=zone,
                        aws_conn_id=self.aws_conn_id,
                        ttl_seconds=300,
                        products=("Linux/UNIX",),
                        on_demand_usd_per_hour=Decimal(plan.on_demand_usd_per_hour),
                        availability=trace,
                        availability_start=placement.availability_start,
                        now=now,
                    )
                    prices[zone], capacity[zone] = price, available
                elif trace:
                    start = datetime.fromisoformat(placement.availability_start or now.isoformat())
                    capacity[zone] = spot_prices.load_availability(trace, start=start).at(now)
            except (CostawareError, BotoCoreError, ClientError) as e:
                self.log.warning(
                    "zone %s: price or capacity unknown (%s); taken at the attempt's price", zone, e
                )
        return prices, capacity

    def _move_usd(self, state: AttemptState) -> dict[str, Decimal]:
        """``zone -> egress USD`` of running in a zone of another region: the data and the checkpoint (IO)."""
        from costaware.adapters.regions import BYTES_PER_BILLED_GB
        from costaware.core.zone_choice import region_of

        plan, placement = state.plan, state.plan.placement
        if not placement.usd_per_gb:
            return {}
        checkpoint = self._checkpoint_bytes(plan.checkpoint_uri)
        gigabytes = Decimal(placement.data_bytes + checkpoint) / BYTES_PER_BILLED_GB
        moves = {}
        for zone in placement.zones:
            price = placement.usd_per_gb.get(region_of(zone, plan.region))
            if price is not None:
                moves[zone] = gigabytes * Decimal(price)
        return moves

    def _checkpoint_bytes(self, checkpoint_uri: str) -> int:
        """What a restore reads: the newest pushed checkpoint's files; 0 when none is there or unreadable.

        Without a commit marker (SageMaker syncs the folder itself), the whole store.
        """
        from costaware.adapters.checkpoint_store import recorded_marker
        from costaware.adapters.input_data import total_bytes
        from costaware.adapters.object_store import S3Options
        from costaware.core.errors import CostawareError

        parsed = urlparse(checkpoint_uri)
        local = parsed.path if parsed.scheme == "file" else checkpoint_uri
        if parsed.scheme in ("", "file") and not Path(local).exists():
            return 0  # no checkpoint yet (a first attempt): nothing to weigh, nothing to warn about
        opts = self._storage_options()
        try:
            marker = recorded_marker(checkpoint_uri, **opts)
            if marker is not None:
                return sum(file.bytes for file in marker.files)
            return total_bytes(checkpoint_uri, S3Options(**opts) if opts else None, missing_ok=True)[0]
        except (OSError, ValueError, CostawareError) as e:
            self.log.warning(
                "cannot size the checkpoints at %s (%s): a move counts the data only", checkpoint_uri, e
            )
            return 0

    def _measured_saves(self, checkpoint_uri: str) -> tuple[float, ...]:
        """Wall seconds of the latest saves the attempts measured (IO); none when unreadable or none yet."""
        from costaware.adapters.checkpoint_store import recorded_save_seconds

        try:
            return recorded_save_seconds(checkpoint_uri, **self._storage_options())
        except (OSError, ValueError) as e:
            self.log.warning(
                "cannot read the measured saves at %s (%s): the interval assumes the default save cost",
                checkpoint_uri,
                e,
            )
            return ()

    def _retune_interval(self, state: AttemptState) -> float | None:
        """With ``checkpoint_every_seconds="auto"``, the next spot attempt's interval from the preemptions.

        The interval of ``plan.interval.observed_interval`` (the run lengths of the attempts preempted so
        far, which of them saved on their notice, and the saves they measured, read from the checkpoint
        URI's ``LATEST.json``), or None (not ``"auto"``, or nothing preempted yet: the plan's). A built-in
        job's spec is rewritten with it; every job gets it as ``COSTAWARE_CHECKPOINT_EVERY_SECONDS``. The
        plan keeps its own (see there why).
        """
        from costaware.core.checkpoint_interval import is_auto
        from costaware.training.entrypoint import read_spec, write_spec
        from costaware.training.plan.interval import observed_interval

        plan = state.plan
        if not (is_auto(self.checkpoint_every_seconds) and plan.checkpoint_every_seconds):
            return None
        preempted = [a for a in state.attempts if a.cause == "preemption" and a.market == "spot"]
        if not preempted:
            return None
        opts = self._storage_options()
        observed = observed_interval(
            [state.ran_seconds(a) for a in preempted],
            planned_seconds=float(plan.checkpoint_every_seconds),
            save_seconds=self._measured_saves(plan.checkpoint_uri),
            # Exit 75 with a newer step than the attempt restored: it saved on its notice and lost nothing.
            # Exit 75 with the same step: it restored that checkpoint and was cut, losing what it trained.
            # Exit 75 where the steps are unknown counts as saved, the launcher's word (the zone cost, which
            # only ever lowers a zone's price with it, takes unknown as not saved). A hard kill, exit 77 or
            # a backend without exit codes may have lost it all.
            saved_on_notice=[a.saved_on_notice() is not False for a in preempted],
            # A run's first seconds go to the restart: an interruption then loses no training.
            restart_overhead_seconds=plan.placement.restart_overhead_seconds,
        )
        if observed is None:
            return None
        seconds, reason = observed
        if plan.spec_uri:  # the built-in trainer reads its interval from the spec
            spec = read_spec(plan.spec_uri, **opts)
            if spec.get("checkpoint_every_seconds") != seconds:
                write_spec(plan.spec_uri, {**spec, "checkpoint_every_seconds": seconds}, **opts)
        self.log.info("%s", reason)
        return seconds
