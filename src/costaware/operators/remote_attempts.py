"""The attempts of ``RemoteTrainingOperator``: the side effects of each step of the attempt state machine.

:func:`costaware.training.attempts.next_step` decides, purely, what follows a trigger event; this mixin
performs what the step names, in the Airflow worker: stop or submit a job on the compute backend, record
an ended attempt in the cost ledger (at the mean spot price over its run, given ``prices``), settle the
task's reservation, store the model version and clear the checkpoints, or fail the task. The effects that
need no Airflow live in ``costaware.training.attempt_effects``; this module logs them and maps failures to
task outcomes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlparse

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from costaware.core.errors import ResultMissingError
from costaware.core.ledger import utcnow
from costaware.glue import storage_options
from costaware.remote_billing import AttemptBilling

if TYPE_CHECKING:
    from airflow.sdk import Context

    from costaware.adapters.compute.base import ComputeBackend, FoundJob, JobStatus
    from costaware.training.attempt_effects import EarlierAttempt
    from costaware.training.attempts import AttemptState, Event, Fail
    from costaware.training.plan import RemotePlan


#: The causes of an attempt whose failure fails the task without a retry: a later try is a person's clear
#: (after a fix), which goes on with a new attempt instead of following the failed job to its failure.
FAILED_FOR_GOOD = ("code_error", "store_error")
#: The waits between the polls of an earlier try's job found by its name, where one fails (throttling, a
#: listing that lags): what it ran under that try is in its status only. Unread, the job was followed as
#: waiting with 0 s run, and a wait that never saw it billed it from the re-attach: the earlier run unbilled.
EARLIER_JOB_POLL_WAITS_SECONDS = (2.0, 5.0, 10.0)


class RemoteAttemptSteps(AttemptBilling):
    """A mixin of ``RemoteTrainingOperator``: the backend, the ledger, and the side effects of each step."""

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

    def _submit(self, state: AttemptState, market: str, market_reason: str = "") -> AttemptState:
        """Submit the next attempt on ``market`` (spot: where the placement says, which may be on-demand).

        ``market_reason``: why on-demand, where a rule chose it (kept on the attempt, in its ledger note).
        """
        from costaware.adapters.compute.base import billed_instances
        from costaware.core.money import format_usd_exact
        from costaware.core.zone_choice import region_of
        from costaware.training.attempt_effects import (
            MIN_CAPPED_SECONDS,
            cap_rate,
            cap_spent_message,
            capped_seconds,
            job_request,
            money_left,
        )
        from costaware.training.remote import job_name

        if self._killed:  # a kill in the worker (on_kill) came while this step ran
            self._settle(state)
            raise AirflowException("the task was killed: no new attempt starts")
        plan = state.plan
        backend = self._backend(plan)
        # A retry follows the job an earlier try submitted under this attempt's name, where it runs.
        earlier = self._earlier_job(
            backend,
            job_name(plan.base_name, state.next_attempt),
            instances=billed_instances(plan.backend_options),
        )
        followed, created_at = earlier if earlier is not None else (None, None)
        found_at = utcnow()
        following = followed is not None
        zone, moved = "", None
        if followed is not None:
            state, market, zone, market_reason, moved = self._follow(state, followed, market, market_reason)
            if not followed.market:
                # Unread, and its look-up by name said no market either: billed (gone before the wait reads
                # it) on the one it is followed on, as its attempt is; with none, its bill failed on ''.
                followed = replace(followed, market=market)
        elif market == "spot":
            state, market, zone, market_reason = self._place(state)
        # A ledger that cannot be read raises (the submit is made again), as for a dearer type below.
        rate = cap_rate(state, market, self._on_demand_in(plan, zone, raise_unavailable=True))
        # The backend that put the last attempt on a dearer type than planned likely does so again: sized
        # at the planned price, the attempt got a limit the trigger cut short, or started with too little.
        sized_on, scale = self._dearer_type_ran_on(state) if plan.max_usd is not None else (None, Decimal(1))
        rate *= scale
        allowed = capped_seconds(state, rate)
        # A job an earlier try started (the cap or a price has changed since) is followed and billed rather
        # than left running unrecorded, whatever is left: the wait stops it there (below), at once if nothing.
        if allowed is not None and allowed < MIN_CAPPED_SECONDS and followed is None:
            self._settle(state)
            # SageMaker syncs its checkpoints itself, without the marker: there, none read says nothing.
            newest = self._newest_step(state) if state.attempts and plan.backend != "sagemaker" else None
            raise AirflowFailException(
                cap_spent_message(state, market, rate, newest_step=newest, instance_type=sized_on)
            )
        every = self._retune_interval(state) if market == "spot" and not following else None
        request = job_request(
            state, market, utcnow(), zone=zone, checkpoint_every_seconds=every, stop_after_seconds=allowed
        )
        left = money_left(state)
        # A followed job's backend keeps the limit an earlier try gave it, sized at the cap of then: the
        # budgets may have lowered the cap since. The wait stops it at what is left now, as the dearer
        # type's stop does (a job that has ended is only billed).
        stop_by_poll = following and allowed is not None and not (followed and followed.state.done)
        if stop_by_poll and left is not None:
            self.log.warning(
                "attempt %d was started by an earlier try as %s under the time limit of that try: %s is left "
                "of max_usd now, at %s/hour%s, so it is stopped after %d s of running",
                request.attempt,
                followed.job_id if followed is not None else request.job_name,
                format_usd_exact(left),
                format_usd_exact(rate),
                f" on {sized_on}" if sized_on else "",
                allowed,
            )
        elif allowed is not None and left is not None and not following:
            self.log.info(
                "attempt %d is stopped after %d s at the latest: %s is left of max_usd, at %s/hour%s",
                request.attempt,
                allowed,
                format_usd_exact(left),
                format_usd_exact(rate),
                f" on {sized_on}, the type attempt {state.attempts[-1].attempt} ran on" if sized_on else "",
            )
        # The stop the cap sets, where it is the limit the job got (an earlier deadline limit is not it):
        # an attempt that ran into it is recorded as stopped by max_usd, not preempted.
        binding = allowed is not None and request.max_runtime_seconds == allowed
        restored = self._committed_step(state) if market == "spot" else None
        if moved is None:
            moved = self._moved_bytes(state)
        submitted_at = utcnow()
        self._submitting = (state, request.job_name, market, zone, submitted_at.isoformat(), moved)
        job_id = backend.submit(request)
        submitted = state.submitted(
            job_id=job_id,
            market=market,
            zone=zone,
            restored_step=restored,
            market_reason=market_reason if market == "on_demand" else "",
            stop_after_seconds=allowed if binding or stop_by_poll else None,
            stop_by_poll=stop_by_poll,
            submitted_at=submitted_at.isoformat(),
            moved_bytes=moved,
            # What it ran before this try: a job the wait never sees is billed from it, not from now.
            followed=self._followed_record(followed, found_at, created_at=created_at),
        )
        self._live, self._submitting = submitted, None  # one step: never neither while the job runs
        self.log.info(
            "attempt %d: %s %s on %s, %s %s%s%s",
            request.attempt,
            "following job" if following else "job",
            # Batch answers with its own id: the name is what the docs and the console's search show.
            job_id if job_id == request.job_name else f"{request.job_name} (id {job_id})",
            plan.backend,
            market,
            plan.instance_type,
            f" in {zone}" if zone else "",
            ", which an earlier try submitted" if following else _log_files_note(backend, job_id),
        )
        if moved and not following and region_of(zone, plan.region) != plan.region:
            self.log.info(
                "attempt %d: once it runs in %s, it reads %d B (its data, and its checkpoint if any) from %s "
                "(billed then as egress)",
                request.attempt,
                zone,
                moved,
                plan.region,
            )
        return submitted

    def _dearer_type_ran_on(self, state: AttemptState) -> tuple[str | None, Decimal]:
        """The type the last attempt ran on and its price over the planned type's, where it is dearer (IO).

        ``(None, 1)`` where it ran on the planned type, a cheaper one (the planned price bounds it), one the
        backend did not say, or one no price source has (warned: the trigger still stops it in time).
        """
        from costaware.core.errors import LEDGER_UNREADABLE, CostawareError

        last = state.attempts[-1] if state.attempts else None
        if last is None:
            return None, Decimal(1)
        ran_on = last.instance_type.removeprefix("ml.")
        if not ran_on or ran_on == state.plan.instance_type.removeprefix("ml."):
            return None, Decimal(1)
        try:
            scale = self._type_price_ratio(state.plan, ran_on)
        except (CostawareError, ArithmeticError) as e:
            if isinstance(e, LEDGER_UNREADABLE):
                raise  # the submit is made again: sized at the planned price, it could outrun max_usd
            self.log.warning(
                "attempt %d ran on %s, not the planned %s, whose price is unknown (%s): the next attempt is "
                "sized at the planned price",
                last.attempt,
                ran_on,
                state.plan.instance_type,
                e,
            )
            return None, Decimal(1)
        return (last.instance_type, scale) if scale > 1 else (None, Decimal(1))

    def _running_job_state(self) -> AttemptState | None:
        """The newest state whose job may be running: ``_live``, or a job a failed submit left (IO).

        A submit that failed on its way out (an ``execution_timeout`` inside the backend's call) may have
        had its job taken: it is looked up by the attempt's name.
        """
        if self._live is not None or self._submitting is None:
            return self._live
        state, name, market, zone, submitted_at, moved = self._submitting
        try:
            found = self._backend(state.plan).find(name)
        except Exception as e:  # best effort: the task's own failure is what it reports
            self.log.warning("cannot tell whether job %s was submitted: %s", name, e)
            return None
        if found is None:
            return None
        return state.submitted(
            job_id=found.job_id, market=market, zone=zone, submitted_at=submitted_at, moved_bytes=moved
        )

    def _follow(
        self, state: AttemptState, job: JobStatus, market: str, market_reason: str
    ) -> tuple[AttemptState, str, str, str, int]:
        """The attempt a retry follows in ``job`` (an earlier try's): its state, market, zone, reason, bytes.

        The job's own market and zone, where the backend says (placing it again could name others and bill
        it there), at that zone's spot price where the plan prices its zones. Watched from here: a failure
        before its submit returns stops it where this is the last try.
        """
        from costaware.adapters.compute.base import placeable_zone

        plan = state.plan
        if job.market not in ("", market):
            market = job.market
            market_reason = "the market an earlier try chose for this job" if market == "on_demand" else ""
        reported = placeable_zone(job.availability_zone)
        zone = reported or (plan.placement.first_zone if market == "spot" else "")
        if market == "spot" and zone in plan.placement.zones:
            price = self._zone_market(state)[0].get(zone)
            state = state.resumed_at(str(price)) if price is not None else state
        moved = self._moved_bytes(state, following=True)
        reason = market_reason if market == "on_demand" else ""
        self._live = state.submitted(
            job_id=job.job_id, market=market, zone=zone, market_reason=reason, moved_bytes=moved
        )
        return state, market, zone, market_reason, moved

    @staticmethod
    def _followed_record(
        followed: JobStatus | None, found_at: datetime, *, created_at: float | None
    ) -> dict[str, Any] | None:
        """What a followed job's attempt keeps of it (``Current.followed``): its status, and its submit.

        Its submit (``created_at``: the backend's creation time, where :meth:`_earlier_job` found it) is
        where the time limit the earlier try gave it runs from: a stop that fails bills it to there.
        """
        if followed is None:
            return None
        record: dict[str, Any] = {"job": followed.to_dict(), "seen_at": found_at.isoformat()}
        if created_at is not None:
            record["created_at"] = datetime.fromtimestamp(created_at, timezone.utc).isoformat()
        return record

    def _earlier_job(
        self, backend: ComputeBackend, name: str, *, instances: int = 1
    ) -> tuple[JobStatus, float | None] | None:
        """The job an earlier try of this task submitted as ``name``, as the backend sees it now (IO).

        With its creation time (epoch seconds, None where the backend does not say). None on a first try
        (nothing to follow), and where the backend has no such job. A job found that cannot be read now
        says no zone: it is taken on the market its look-up says (else the one asked for), in the plan's
        first zone, as waiting with the time since its start (or creation) billed, where its backend's
        listing says when that was: a wait that never reads it bills what it ran under the earlier try.
        """
        from costaware.core.errors import ConfigurationError

        if not self._retry:
            return None
        found = backend.find(name)
        if found is None:
            return None
        if found.status is not None:  # the look-up read it as a poll would (SageMaker): not asked again
            return found.status, found.created_at
        job_id = found.job_id
        import time

        for wait in (*EARLIER_JOB_POLL_WAITS_SECONDS, None):
            try:
                return backend.poll(job_id), found.created_at
            except Exception as e:  # best effort: the wait polls it again, and fails there if it must
                if wait is not None and not isinstance(e, ConfigurationError):  # that fails the same way
                    self.log.warning(
                        "job %s of an earlier try cannot be read now (%s): read again in %g s",
                        job_id,
                        e,
                        wait,
                    )
                    time.sleep(wait)
                    continue
                since = found.running_since
                # The look-up's market is the one it is billed on (_found_unread); only the zone is unknown.
                unknown = (
                    f"zone unknown; billed on {found.market}, as its look-up says"
                    if found.market
                    else "market and zone unknown"
                )
                if found.ended_at is not None:
                    self.log.warning(
                        "job %s of an earlier try cannot be read now (%s): %s; it %s at "
                        "%s, as the look-up by name says: billed from its %s to then",
                        job_id,
                        e,
                        unknown,
                        found.end_state.value if found.end_state is not None else "ended",
                        datetime.fromtimestamp(found.ended_at, timezone.utc).isoformat(timespec="seconds"),
                        "start" if found.started_at is not None else "creation",
                    )
                elif since is None:
                    self.log.warning(
                        "job %s of an earlier try cannot be read now (%s): %s, and what "
                        "it ran under that try is billed only once the wait reads it; if the task ends "
                        "before then, check the job's run time on the %s backend against its ledger entry",
                        job_id,
                        e,
                        unknown,
                        backend.name,
                    )
                else:
                    self.log.warning(
                        "job %s of an earlier try cannot be read now (%s): %s; if the "
                        "wait never reads it, it is billed from its %s at %s",
                        job_id,
                        e,
                        unknown,
                        "start" if found.started_at is not None else "creation",
                        datetime.fromtimestamp(since, timezone.utc).isoformat(timespec="seconds"),
                    )
                break  # the last read, or a configuration error that fails the same way each time
        return _found_unread(found, now=utcnow(), instances=instances), found.created_at

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
            [state.run_seconds(a.billable_seconds) for a in preempted],
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

    def _record_attempt(self, state: AttemptState, job: Mapping[str, Any], cause: str) -> AttemptState:
        # Only a preempted spot run is judged by what it kept (the guard, the zone choice, "auto"'s re-tune).
        committed = self._committed_step(state) if cause == "preemption" and job["market"] == "spot" else None
        recorded = self._bill_attempt(state, job, cause, committed_step=committed)
        self._live = None  # its job ended
        return recorded

    def _committed_step(self, state: AttemptState) -> int | None:
        """The step of the newest checkpoint pushed to the training's checkpoint URI (IO; ``Attempt``).

        ``NO_CHECKPOINT`` when none was pushed; None when nothing judges a run by what it kept (no zones, no
        guard, no ``"auto"``) or the marker cannot be read (the run is then judged by its length).
        """
        from costaware.core.checkpoint_interval import is_auto

        plan = state.plan
        judged = plan.placement.zones or plan.placement.guard or is_auto(self.checkpoint_every_seconds)
        return self._newest_step(state, unread="the attempt is judged by its run length") if judged else None

    def _newest_step(self, state: AttemptState, *, unread: str = "not known") -> int | None:
        """The step in the checkpoint URI's ``LATEST.json``; ``NO_CHECKPOINT``: none; None: cannot tell.

        ``unread``: what follows when the marker cannot be read (said in the warning).
        """
        from costaware.adapters.checkpoint_store import recorded_step
        from costaware.training.attempts import NO_CHECKPOINT

        plan = state.plan
        if not plan.checkpoint_uri:
            return None
        try:
            step = recorded_step(plan.checkpoint_uri, **self._storage_options())
        except (OSError, ValueError) as e:
            self.log.warning(
                "cannot read the newest checkpoint at %s (%s): %s", plan.checkpoint_uri, e, unread
            )
            return None
        return NO_CHECKPOINT if step is None else step

    def _step(self, context: Context, state: AttemptState, event: Event) -> Any:
        """Decide the next step (pure) and perform it: the new state to wait on, or the result (XCom)."""
        from costaware.adapters.compute.job_contract import EXIT_PREEMPTED_BEFORE_CHECKPOINT
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
            ended, cause = event.job, step.record_cause
            missing = self._missing_result(state, ended) if isinstance(step, Finish) else None
            if missing is not None:
                # The task fails for it: billed as a success, the ledger said the money bought a model.
                ended = {
                    **ended,
                    "state": "failed",
                    "reason": f"{ended.get('reason') or 'succeeded'}; {missing}",
                }
                cause = "code_error"
            state = self._record_attempt(state, ended, cause)
        if isinstance(step, Pause):
            assert current is not None  # a price rise is seen on a running job
            self.log.warning(
                "pausing attempt %s (job %s): %s", current.attempt, step.job["job_id"], step.reason
            )
            self._backend(state.plan).stop(str(step.job["job_id"]))
            return state.pausing(reason=step.reason, job=step.job, seen_at=step.seen_at)
        if isinstance(step, Resume):
            self.log.info("resuming from the newest checkpoint on %s: %s", step.market, step.reason)
            return self._submit(state.resumed_at(step.usd_per_hour), step.market, step.market_reason)
        if isinstance(step, Submit):
            if step.cause_of_previous == "paused":
                self.log.warning("paused with no slack left for a later spot start: resuming on on-demand")
            elif step.cause_of_previous != "capacity_wait" and isinstance(event, JobEnded):
                # Where and on which market the next attempt runs is the placement's to say (the
                # restart-thrash guard may send it to on-demand): the next lines log it.
                self.log.warning(
                    "attempt %s %s (%s): %s",
                    current.attempt if current else "?",
                    # A store the launcher could not reach is retried like a preemption, but is not one;
                    # nor is a stop at what was left of max_usd.
                    {
                        "store_error": "could not reach a store",
                        "max_usd": "was stopped at what was left of max_usd",
                    }.get(str(step.cause_of_previous), "interrupted"),
                    event.job.get("reason"),
                    "a next attempt resumes from the newest checkpoint if the cap leaves enough for one"
                    if step.cause_of_previous == "max_usd"
                    # The launcher's exit 77: where its own reason is shown (the local backend) it says what
                    # the next attempt starts from; a platform's reason does not.
                    else "this attempt committed no checkpoint"
                    if event.job.get("exit_code") == EXIT_PREEMPTED_BEFORE_CHECKPOINT
                    and str(event.job.get("reason", "")).startswith("costaware-run:")
                    else "the next attempt starts from the newest checkpoint there is, or over"
                    if event.job.get("exit_code") == EXIT_PREEMPTED_BEFORE_CHECKPOINT
                    else "the next attempt resumes from the newest checkpoint",
                )
            return self._submit(state, step.market, step.market_reason)
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
            try:
                self._settle(state)
            except Exception as e:  # the failure must stand: a retry would pay for the failed code again
                self.log.warning("could not settle the task's hold now (%s): it lapses at its time limit", e)
            backend = self._backend(state.plan)
            try:
                logs = backend.logs(step.job_id, tail=5)
                message = f"{message}; last log lines: {logs[-800:]}{_log_files_note(backend, step.job_id)}"
            except Exception as e:  # the failure is what must be said (a throttled describe raised instead)
                message = f"{message}; its log could not be read ({type(e).__name__}: {e})"
        if step.retry:
            raise AirflowException(message)
        raise AirflowFailException(message)

    def _keep_holds(self, state: AttemptState, until: datetime) -> None:
        """Keep this task's open reservations counting until ``until`` (the end of the wait for its job).

        A ledger that cannot be reached now does not fail the task: its job runs on, and a failed task
        with no retry left would leave it running unwatched and unbilled. The hold then lapses at its own
        time limit, said in the log.
        """
        from costaware.core.errors import LEDGER_UNREADABLE
        from costaware.training.attempt_effects import open_task_reservations

        try:
            ledger = self.ledger_hook.get_conn()
            for reservation in open_task_reservations(ledger, state.plan):
                ledger.extend(reservation.id, until)
        except LEDGER_UNREADABLE as e:
            self.log.warning(
                "could not keep the task's budget hold for the wait (%s); the job is watched on and billed "
                "when it ends, but the hold lapses at its own time limit (reservation_ttl)",
                e,
            )

    def _reserve(self, state: AttemptState) -> AttemptState:
        """Hold what the attempts may bill in the budgets; returns the state with the cap they allow.

        ``max_usd`` bounds the attempts of every try together. A retry follows its earlier tries' jobs
        again, so their cost counts in its own state once more; what it cannot follow (a run the backend
        lost) is taken off the cap it runs under instead (:meth:`_go_on_after`).
        """
        from costaware.core.money import format_usd_exact
        from costaware.training.attempt_effects import billed_by_earlier_tries

        plan = state.plan
        earlier, billed = billed_by_earlier_tries(self.ledger_hook.get_conn(), plan)
        lost = Decimal(0)
        if billed:
            state, lost = self._go_on_after(state, billed, earlier)
            if lost:
                state = replace(state, earlier_usd=str(lost))
        held = self._hold(state, earlier, retry=bool(billed))
        if not lost or plan.max_usd is None or held.plan.max_usd is None:
            return held  # nothing to take off, or no cap to take it off
        allowed = Decimal(held.plan.max_usd)
        cap = max(allowed - lost, Decimal(0))
        # Where the budgets lowered the cap, raising max_usd does nothing: the budget is what to raise.
        by_budgets = allowed != Decimal(plan.max_usd)
        amount = format_usd_exact(allowed)
        limit = f"the {amount} the budgets allow" if by_budgets else f"max_usd {amount}"
        self.log.warning(
            "a retry: earlier tries billed %s for runs it does not follow again, so its attempts may bill "
            "%s, to keep the tries within %s together",
            format_usd_exact(lost),
            format_usd_exact(cap),
            limit,
        )
        note = held.plan.max_usd_note or (
            f"that is what is left of {limit} after the {format_usd_exact(lost)} earlier tries billed for "
            f"runs this try does not follow again; raise {'the budget' if by_budgets else 'max_usd'} and "
            "clear the task"
        )
        return replace(held, plan=replace(held.plan, max_usd=str(cap), max_usd_note=note))

    def _go_on_after(
        self, state: AttemptState, billed: list[EarlierAttempt], earlier: Decimal
    ) -> tuple[AttemptState, Decimal]:
        """A retry's state, and what earlier tries billed that it does not follow again (against the cap).

        ``billed``, ``earlier``: the earlier entries and their total (:func:`billed_by_earlier_tries`).

        A retry follows attempt 1, 2, ... by their names, as long as the backend has each. Where it lost
        one, submitting it again would go another way than the earlier try did and run into the later
        attempts' names (the job the failed try left running among them): the retry goes on from the last
        attempt instead, following its job where the backend still has it (a success there finishes the
        training), else from the next, following the job an earlier try left under its name, or submitting
        it (the training resumes from the newest checkpoint either way).
        """
        from costaware.training.attempt_effects import billed_not_followed
        from costaware.training.remote import job_name

        plan = state.plan
        backend = self._backend(plan)
        numbers = [entry.attempt for entry in billed if entry.attempt is not None]
        # The last attempt billed, from the notes (an older note says none: one attempt per entry).
        last = max(numbers) if len(numbers) == len(billed) else max([len(billed), *numbers])
        names = {n: job_name(plan.base_name, n) for n in range(1, last + 1)}
        first, followed = last + 1, Decimal(0)
        if billed[-1].cause in FAILED_FOR_GOOD:
            # The training failed for good (no Airflow retry follows that), so a person cleared the task,
            # most likely after a fix: followed again, the failed job failed this try at once, for ever.
            lost = last
            why = f"attempt {lost}'s job ({names[lost]}) failed ({billed[-1].cause.replace('_', ' ')})"
        else:
            missing = next((n for n, name in names.items() if backend.find(name) is None), None)
            if missing is None:
                return state, billed_not_followed(billed)  # each is still there: followed in order
            lost = missing
            why = f"the {plan.backend} backend no longer has attempt {lost}'s job ({names[lost]})"
            if lost != last:  # the last attempt's job is still there: followed again, it counts in the state
                first = last
                followed = next(entry.usd for entry in reversed(billed) if entry.attempt == last)
        name = job_name(plan.base_name, first)
        # The last attempt's job was found above; only a next one may not exist yet.
        if first > self.max_attempts and first > last and backend.find(name) is None:
            raise AirflowFailException(
                f"a retry: the earlier tries made {last} attempt(s) and {why}, so this retry would start "
                f"attempt {first}, past max_attempts={self.max_attempts}: raise max_attempts and clear the "
                "task; nothing was started"
            )
        self.log.warning(
            "a retry: %s, so this retry does not follow the earlier attempts: it goes on with attempt %d "
            "(%s), and the %d attempt(s) earlier tries billed count against max_usd and max_attempts",
            why,
            first,
            name,
            last,
        )
        return replace(state, first_attempt=first), earlier - followed

    def _spend_no_more(self, state: AttemptState, earlier: Decimal, refused: str) -> AttemptState:
        """A retry whose budgets have no room: ``max_usd`` lowered to what its earlier tries billed.

        A budget already past its cap: nothing can be held, so nothing more may be spent. The retry follows
        the job its failed try left running to its end (under the limit that job was given) and bills it, and
        starts no new one; failing instead left that job running with nobody to watch or bill it.
        """
        from costaware.core.money import format_usd_exact

        gate = "" if self.budget_scope is not None else " (or approve at the gate)"
        self.log.warning(
            "a retry: the budgets have no room (%s): max_usd is lowered to the %s earlier tries billed, so "
            "no new attempt starts; raise the budget%s and clear the task to go on",
            refused,
            format_usd_exact(earlier),
            gate,
        )
        note = (
            f"the budgets have no room for this retry ({refused}): raise the budget{gate} and clear the task"
        )
        return replace(state, plan=replace(state.plan, max_usd=str(earlier), max_usd_note=note))

    def _hold(self, state: AttemptState, earlier: Decimal, *, retry: bool) -> AttemptState:
        """Hold what is left of ``max_usd`` after ``earlier`` (what earlier tries billed) in the budgets.

        A spend gate's reservation (its estimate) grows to that; where the budgets have less room,
        ``max_usd`` is lowered to what they hold, so that no budget is passed. No gate: reserve it (else the
        estimate) in ``budget_scope``. Returns the state with the cap the budgets allow, all tries together.
        """
        from costaware.core.budgets import Scope
        from costaware.core.errors import BudgetExceededError
        from costaware.core.money import format_usd_exact
        from costaware.glue import check_scope_is_tagged
        from costaware.training.attempt_effects import (
            cap_rate,
            gate_reservation,
            hold_again,
            hold_cap,
            least_cap_usd_said,
            reserve_estimate,
            stop_seconds,
        )

        plan = state.plan
        ledger = self.ledger_hook.get_conn()
        gate = gate_reservation(ledger, plan)
        if gate is None:
            if self.budget_scope is not None:
                scope = str(Scope.given(self.budget_scope, what="budget_scope"))  # as rendered
                if plan.max_usd is None and plan.estimated_usd is None:
                    if self._retry:
                        # The job an earlier try left (under a spend gate's hold, say) would run on unwatched.
                        return self._spend_no_more(state, earlier, "nothing to hold: no max_usd, no estimate")
                    # Nothing held, and the job started: the budgets never heard of it until it billed.
                    raise AirflowFailException(
                        f"budget_scope={scope!r} holds max_usd (or the spot decision's estimated_usd) in its "
                        "budgets before the job starts, and this task has neither (its decision carries no "
                        "estimate): give max_usd, the most the training may spend; nothing was started"
                    )
                task_id = plan.identity["task_id"]
                check_scope_is_tagged(scope, plan.tags, task_id=task_id, gate="budget_scope")
                try:
                    reserve_estimate(ledger, plan, scope, billed_before=earlier)
                except BudgetExceededError as e:
                    if not self._retry:
                        raise  # nothing runs yet: refused before any job
                    # The job the failed try left running would be watched and billed by nobody.
                    return self._spend_no_more(state, earlier, str(e))
                return state
            if plan.max_usd is not None:
                # A retry: the gate's hold is still open (a failed try the task retries is paid from it),
                # or, expired or released meanwhile, held again from $0.
                gate, refused = hold_again(ledger, plan, billed_before=earlier)
                if refused:
                    return self._spend_no_more(state, earlier, refused)
                retry = retry or gate is not None
                if gate is not None:
                    self.log.info(
                        "a retry: holding max_usd again in %s, where the spend gate reserved", gate.scope
                    )
            elif plan.estimated_usd:
                self._hold_estimate_again(state, earlier)
        if plan.max_usd is None:
            return state
        cap = Decimal(plan.max_usd)
        # What this try's attempts may still bill: the earlier tries' attempts are spent already.
        wanted = max(cap - earlier, Decimal(0))
        if gate is None:
            return state
        # A cleared task's hold is still open, and has paid its earlier tries' attempts: what it covers for
        # the attempts to come is the rest (the budgets count only that as reserved).
        paid = ledger.paid_from([gate.id]).get(gate.id, Decimal(0))
        if gate.usd - paid >= wanted:
            return state
        held = max(hold_cap(ledger, gate, wanted + paid) - paid, Decimal(0))
        budgets = ", ".join(f"'{b}'" for b in gate.budgets)
        # A retry says what its earlier tries billed: the hold is what is left of the cap after them.
        target = f"max_usd {format_usd_exact(cap)}"
        if earlier:
            billed = format_usd_exact(earlier)
            target = f"{format_usd_exact(wanted)}, max_usd less the {billed} earlier tries billed"
        if held >= wanted:
            self.log.info(
                "raised the spend gate's reservation from %s to %s in %s: the budgets hold all the attempts "
                "may bill",
                format_usd_exact(gate.usd),
                target,
                budgets,
            )
            return state
        lowered_cap = earlier + held
        # A retry's hold starts at $0 (hold_again): what the gate reserved then is not what it holds now.
        reserved = (
            "this retry held nothing yet"
            if gate.usd == 0 and retry
            else f"the spend gate reserved {format_usd_exact(gate.usd)} for this task"
        )
        self.log.warning(
            "max_usd %s is lowered to %s: %s and %s had room for no more than %s; raise the budget to give "
            "the task its full cap",
            format_usd_exact(cap),
            format_usd_exact(lowered_cap),
            reserved,
            budgets,
            f"{format_usd_exact(held)} beside the {format_usd_exact(earlier)} earlier tries billed"
            if earlier
            else "that",
        )
        lowered = replace(state, plan=replace(plan, max_usd=str(lowered_cap)))
        rate = cap_rate(lowered, plan.first_market)
        least = least_cap_usd_said(rate, stop_seconds(lowered))
        if held < least and not retry:
            # Said here, naming the budget: the cap's own message would say to raise max_usd. A retry goes
            # on: its first submit follows the job its failed try left running (else it fails for the cap).
            self._settle(lowered)
            raise AirflowFailException(
                f"{budgets} had room for {format_usd_exact(held)} for this task beside the spend gate's "
                f"reservation, less than the {format_usd_exact(least)} an attempt needs at "
                f"{format_usd_exact(rate)}/hour; nothing was started: raise the budget, or run when money is "
                "released"
            )
        return lowered

    def _hold_estimate_again(self, state: AttemptState, earlier: Decimal) -> None:
        """A retry with no ``max_usd`` behind a spend gate: hold the estimate again, less what was billed.

        Where the gate's hold expired or was released (a killed try's run marked, a long retry delay), the
        retry ran with nothing held: budgets shared with other tasks did not see the money it was about to
        spend. (A failed try the task retries leaves the hold open, paid in part: ``reserve`` returns it.)
        Without a cap nothing stops it where the budgets have no room; it says so and runs on.
        """
        from costaware.core.money import format_usd_exact
        from costaware.training.attempt_effects import hold_again, hold_cap

        plan = state.plan
        ledger = self.ledger_hook.get_conn()
        gate, refused = hold_again(ledger, plan, billed_before=earlier)
        if refused:
            self.log.warning(
                "a retry: the budgets have no room to hold its estimate again (%s); it runs on with nothing "
                "held: no max_usd caps it",
                refused,
            )
            return
        if gate is None or plan.estimated_usd is None:
            return
        wanted = max(Decimal(plan.estimated_usd) - earlier, Decimal(0))
        held = hold_cap(ledger, gate, wanted) if gate.usd < wanted else gate.usd
        short = f" (the budgets had room for no more of its {format_usd_exact(wanted)})"
        self.log.info(
            "a retry: holding %s again in %s, the estimate%s%s",
            format_usd_exact(held),
            gate.scope,
            f" less the {format_usd_exact(earlier)} earlier tries billed" if earlier else "",
            "" if held >= wanted else short,
        )

    def _missing_result(self, state: AttemptState, job: Mapping[str, Any]) -> str | None:
        """What a job that succeeded failed to leave (its result), or None where it is there (IO).

        Only a result that is not there counts; one that cannot be read now (or is malformed) is left to
        :meth:`_finish`, which reads it again and says why.
        """
        from costaware.operators.remote_command import command_result_missing
        from costaware.training.entrypoint import read_result

        current = state.current
        job_id = str(job.get("job_id") or "")
        opts = self._storage_options()
        try:
            if not state.command:
                read_result(state.plan.result_uri, job_id=job_id, **opts)
                return None
            if current is None:
                return None
            return command_result_missing(state.to_json(), opts, attempt=current.attempt, job_id=job_id)
        except ResultMissingError:
            return f"succeeded but left no result at {state.plan.result_uri}"
        except Exception:  # read again by _finish, which fails or retries the task with the reason
            return None

    def _finish(self, context: Context, state: AttemptState) -> dict[str, Any]:
        from costaware.operators.run_record import record_retrain_outcome
        from costaware.training.attempt_effects import summary_figures
        from costaware.training.entrypoint import read_result

        self._settle(state)
        ti = context.get("ti")
        if ti is not None and hasattr(ti, "dag_id"):
            from costaware.glue import annotate_task

            annotate_task(
                ti, cause="orchestration", note="worker waited for remote training; billed per attempt"
            )
        opts = self._storage_options()
        try:
            if state.command:
                summary = self._finish_command(context, state, opts)
            else:
                job_id = state.attempts[-1].job_id if state.attempts else ""
                result = read_result(state.plan.result_uri, job_id=job_id, **opts)
        except ResultMissingError as e:
            raise ResultMissingError(f"{e}{ran_nothing(state)}") from e
        if not state.command:
            made, usd = summary_figures(state)
            self.log.info(
                "stored %s model version %s after %d attempt(s), %s USD billed",
                result.get("mode"),
                result.get("version"),
                made,
                usd,
            )
            record_retrain_outcome(
                context=context,
                identity=state.plan.identity,
                result=result,
                ledger_conn_id=self.ledger_conn_id,
                task_log=self.log,
            )
            attempts = [a.to_json() for a in state.attempts]
            summary = {**result, "attempts": attempts, "usd": str(usd), "backend": state.plan.backend}
        self._clear_checkpoints(state.plan, opts)
        return summary

    def _clear_checkpoints(self, plan: RemotePlan, opts: Mapping[str, Any]) -> None:
        """Delete this training's checkpoints once its model version is stored.

        They cost storage and no other run resumes them. A failure to delete only warns: the model is stored.
        """
        from costaware.training.attempt_effects import clear_checkpoints

        try:
            cleared = clear_checkpoints(plan, opts)
        except OSError as e:
            self.log.warning(
                "could not delete the checkpoints at %s (%s): delete them by hand", plan.checkpoint_uri, e
            )
            return
        if cleared:
            self.log.info("deleted the checkpoints at %s: the model version is stored", plan.checkpoint_uri)

    def _finish_command(
        self, context: Context, state: AttemptState, opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Store the command's outputs as a ``files`` version, record its metrics, return them (XCom)."""
        from costaware.operators.remote_command import format_metrics, register_outputs
        from costaware.operators.run_record import command_outcome, write_outcome
        from costaware.training.attempt_effects import summary_figures

        made, usd = summary_figures(state)
        stored = register_outputs(state.to_json(), opts, str(usd))
        self.log.info(
            "stored model version %s (%d files, %d bytes) after %d attempt(s), %s USD billed; metrics: %s",
            stored["version"],
            stored["files"],
            stored["bytes"],
            made,
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
            ledger_conn_id=self.ledger_conn_id,
            aws_conn_id=self.aws_conn_id,
        )


def _log_files_note(backend: ComputeBackend, job_id: str) -> str:
    """Where a job's whole output is, for backends that keep it in files here (local); else ""."""
    log_files = getattr(backend, "log_files", None)
    if log_files is None:
        return ""
    out, err = log_files(job_id)
    return f" (the job's whole output: {out}, {err})"


def ran_nothing(state: AttemptState) -> str:
    """Why a job that succeeded after 0 s billed left no result; "" for a job that ran.

    Such a job ran nothing (moto's SageMaker server completes every job at once, without a container):
    the message said only to check the store and the endpoint, which were right.
    """
    last = state.attempts[-1] if state.attempts else None
    if last is None or last.billable_seconds > 0:
        return ""
    return (
        f". The {state.plan.backend} backend reported job {last.job_id!r} succeeded after 0 s billed: it "
        "ran nothing there (a stand-in such as moto's server completes jobs without running a container), "
        "so the store is not the cause; run it on the real service, or on the local backend"
    )


def _found_unread(found: FoundJob, *, now: datetime, instances: int) -> JobStatus:
    """The status a retry follows ``found`` (an earlier try's job) with where no poll could read it (pure).

    Billed from its start (else its creation) to its end where it ended (the name is the same on every try
    and clear: a job that ended days ago billed up to now was billed those days), else up to ``now``: the
    most it can have run on its ``instances``, its queue included, so an estimate, not time seen to run.
    An ended job keeps its backend's end: its ledger entry is keyed by it, so a job an earlier try billed
    is counted at that try's figure, not billed again.
    """
    from costaware.adapters.compute.base import ESTIMATED_SECONDS, JobState, JobStatus

    since = found.running_since
    ended = found.ended_at is not None and found.end_state is not None
    # Its start to its end is what it ran; to now, or from its creation, it is the most it may have run.
    estimated = not ended or found.started_at is None
    until = found.ended_at if ended and found.ended_at is not None else now.timestamp()
    ran = 0.0 if since is None else max(0.0, until - since) * instances
    return JobStatus(
        job_id=found.job_id,
        state=found.end_state if ended and found.end_state is not None else JobState.PENDING,
        billable_seconds=ran,
        reason="ended before this try found it; its polls failed" if ended else "",
        ended_at=found.ended_at if ended else None,
        metrics={ESTIMATED_SECONDS: True} if estimated else {},
        market=found.market,  # as its backend's record says: the market the earlier try submitted it on
    )
