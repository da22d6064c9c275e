"""The attempts of a remote training as a pure state machine: what to do next after each trigger event.

``RemoteTrainingOperator`` and ``RemoteTrainingJobTrigger`` carry an :class:`AttemptState` (as the JSON
dict of :meth:`AttemptState.to_json`); on each trigger event the operator turns it into an :data:`Event`,
asks :func:`next_step` what to do, and performs the side effects the step names (stop a job, record the
ended attempt in the ledger, submit, read the result, raise). No Airflow, no SDK and no IO here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from costaware.adapters.compute.base import (
    ESTIMATED_SECONDS,
    SEEN_BILLABLE_SECONDS,
    TRAINED_RUNS_SECONDS,
    TRAINING_NOW,
    billed_instances,
)
from costaware.adapters.compute.job_contract import (
    EXIT_PREEMPTED,
    EXIT_PREEMPTED_BEFORE_CHECKPOINT,
    exit_hint,
)
from costaware.core.series import parse_instant
from costaware.core.spot_decision import SpotDecision
from costaware.training.plan import RemotePlan
from costaware.training.remote import CAUSES, RUNTIME_LIMIT_REASONS, attempt_cause, next_market

#: ``Attempt.restored_step`` / ``committed_step`` when no checkpoint had been pushed.
NO_CHECKPOINT = -1
#: A key of ``Current.followed``: the cause (``killed``, ``unwatched``) of an earlier try's stop that the
#: wait found the followed job stopping by when its own stop at the cap fell due (see ``earlier_stop``).
EARLIER_STOP_KEY = "stopped_by_earlier_try"


def _step_or_none(value: Any) -> int | None:
    return int(value) if value is not None else None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One finished attempt, as its ledger entry billed it."""

    attempt: int
    job_id: str
    market: str
    instance_type: str
    billable_seconds: float
    usd: str  # a decimal string: JSON has no decimals and floats must not hold money
    cause: str
    reason: str
    zone: str = ""  # where the backend placed it ("" : the backend's choice, or a state from before zones)
    #: The job's exit code where the backend reports one (75: preempted after a checkpoint, see kept_work).
    exit_code: int | None = None
    #: The step of the newest checkpoint pushed (``LATEST.json``) when the attempt was submitted, the one it
    #: restores, and once it ended; :data:`NO_CHECKPOINT` when none was there; None when not read (not
    #: needed, unreadable, or a state from before steps were kept).
    restored_step: int | None = None
    committed_step: int | None = None
    #: Why it ran on on-demand where something chose that over spot (the spot window's decision, the
    #: restart-thrash guard, the latest safe start, a pause with no slack left); "" for spot, and for an
    #: on-demand market given as an argument or taken by default.
    market_reason: str = ""
    #: How long each of its runs trained, where its backend knew it exactly (``TRAINED_RUNS_SECONDS``:
    #: SageMaker's ``Training`` transitions, a local job's process); None where it did not (Batch's bill
    #: counts a submit's copies and its queue before a retry, a pod's bill its waits). Its work done, not
    #: its bill: ``billable_seconds`` stays what was billed.
    trained_runs_seconds: tuple[float, ...] | None = None

    def kept_work(self) -> bool | None:
        """Whether this attempt committed a newer checkpoint than the one it restored.

        True when the newest pushed step moved during the attempt (a save on its interval or on its notice):
        the next attempt resumes past where this one started. False when it did not (the attempt restored a
        checkpoint and was cut before its next save, or it committed the same step again), or when the
        launcher reported a preemption before any checkpoint (exit 77). None when unknown: nothing was read,
        or nothing was pushed after the attempt (SageMaker syncs checkpoints itself, without ``LATEST.json``):
        judge by the run's length. The exit code alone cannot say: the launcher exits 75 after any notice
        once a checkpoint exists, the one the attempt restored included.
        """
        if self.exit_code == EXIT_PREEMPTED_BEFORE_CHECKPOINT:
            return False
        if self.restored_step is None or self.committed_step in (None, NO_CHECKPOINT):
            return None
        return self.committed_step > self.restored_step

    def saved_on_notice(self) -> bool | None:
        """Whether the attempt ended by saving on its preemption notice, so that it lost only its restart.

        True: it exited 75 (preempted after a checkpoint) and that checkpoint is newer than the one it
        restored (:meth:`kept_work`); None: it exited 75 and that is unknown; False otherwise. A job that
        ignored the notice, after a save on its interval, and was killed at the end of the grace period also
        reads True: the launcher exits 75 for it too, and it lost the time since that save.
        """
        if self.exit_code != EXIT_PREEMPTED:
            return False
        return self.kept_work()

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "job_id": self.job_id,
            "market": self.market,
            "instance_type": self.instance_type,
            "billable_seconds": self.billable_seconds,
            "usd": self.usd,
            "cause": self.cause,
            "reason": self.reason,
            "zone": self.zone,
            "exit_code": self.exit_code,
            "restored_step": self.restored_step,
            "committed_step": self.committed_step,
            "market_reason": self.market_reason,
            **(
                {"trained_runs_seconds": list(self.trained_runs_seconds)}
                if self.trained_runs_seconds is not None
                else {}
            ),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Attempt:
        runs = data.get("trained_runs_seconds")
        return cls(
            attempt=int(data["attempt"]),
            job_id=str(data["job_id"]),
            market=str(data["market"]),
            instance_type=str(data["instance_type"]),
            billable_seconds=data["billable_seconds"],
            usd=str(data["usd"]),
            cause=str(data["cause"]),
            reason=str(data.get("reason") or ""),
            zone=str(data.get("zone") or ""),
            # A state written before exit codes were kept has none: unknown, as a backend without them.
            exit_code=int(data["exit_code"]) if data.get("exit_code") is not None else None,
            restored_step=_step_or_none(data.get("restored_step")),
            committed_step=_step_or_none(data.get("committed_step")),
            market_reason=str(data.get("market_reason") or ""),
            # A state written before runs were kept has none: unknown, as a backend without them.
            trained_runs_seconds=tuple(float(r) for r in runs) if runs is not None else None,
        )


def trained_runs(job: Mapping[str, Any]) -> tuple[float, ...] | None:
    """The runs of job status ``job`` where its backend knew them exactly (``TRAINED_RUNS_SECONDS``)."""
    runs = (job.get("metrics") or {}).get(TRAINED_RUNS_SECONDS)
    return tuple(float(r) for r in runs) if runs else None


@dataclass(frozen=True, slots=True)
class Current:
    """The attempt that runs (or waits for capacity).

    ``pausing`` is the reason of a stop this operator asked for (a price rise), ``stopped`` the job status
    seen at that stop with its time (``{"job": {...}, "seen_at": iso}``): a backend that forgets a stopped
    job is billed from it.
    """

    attempt: int
    job_id: str
    market: str
    pausing: str | None = None
    stopped: Mapping[str, Any] | None = None
    zone: str = ""
    restored_step: int | None = None  # see Attempt.restored_step
    market_reason: str = ""  # see Attempt.market_reason
    stop_after_seconds: int | None = None  # what was left of max_usd when it was submitted (None: no cap)
    # A job an earlier try submitted keeps the time limit it got then, whatever the cap is now: the wait
    # stops it once it has run ``stop_after_seconds`` (its backend does not).
    stop_by_poll: bool = False
    submitted_at: str | None = None  # ISO time of the submit (older states: None)
    # The data and checkpoint bytes (at the submit) a run in another region than the plan's reads across,
    # where the plan allows zones there (else 0): egress, recorded once the attempt ran in such a zone.
    moved_bytes: int = 0
    # A job an earlier try submitted, as this try found it (``{"job": {...}, "seen_at": iso}``): it ran
    # before ``submitted_at`` (this try's re-attach), so one the wait never sees is billed from this status.
    followed: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        # Older states have no pausing/stopped keys until a pause: leave them out when unset.
        data: dict[str, Any] = {"attempt": self.attempt, "job_id": self.job_id, "market": self.market}
        if self.zone:
            data["zone"] = self.zone
        if self.restored_step is not None:
            data["restored_step"] = self.restored_step
        if self.market_reason:
            data["market_reason"] = self.market_reason
        if self.stop_after_seconds is not None:
            data["stop_after_seconds"] = self.stop_after_seconds
        if self.stop_by_poll:
            data["stop_by_poll"] = True
        if self.submitted_at is not None:
            data["submitted_at"] = self.submitted_at
        if self.moved_bytes:
            data["moved_bytes"] = self.moved_bytes
        if self.pausing is not None:
            data["pausing"] = self.pausing
        if self.stopped is not None:
            data["stopped"] = dict(self.stopped)
        if self.followed is not None:
            data["followed"] = dict(self.followed)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Current:
        stopped, followed = data.get("stopped"), data.get("followed")
        return cls(
            attempt=int(data["attempt"]),
            job_id=str(data["job_id"]),
            market=str(data["market"]),
            pausing=data.get("pausing") or None,
            stopped=dict(stopped) if stopped else None,
            zone=str(data.get("zone") or ""),
            restored_step=_step_or_none(data.get("restored_step")),
            market_reason=str(data.get("market_reason") or ""),
            stop_after_seconds=_step_or_none(data.get("stop_after_seconds")),
            stop_by_poll=bool(data.get("stop_by_poll")),
            submitted_at=str(data["submitted_at"]) if data.get("submitted_at") else None,
            moved_bytes=int(data.get("moved_bytes") or 0),
            followed=dict(followed) if followed else None,
        )

    def earlier_stop(self) -> str | None:
        """The cause of an earlier try's stop that this followed job was ending by, else None.

        The wait takes a stop the backend reports as its own stop at the cap (not sent twice); where the
        ledger holds that earlier try's stop (its kill's entry), the job ended by it, not by ``max_usd``.
        """
        said = (self.followed or {}).get(EARLIER_STOP_KEY)
        return str(said) if said else None

    def stopped_by_cap(self, job: Mapping[str, Any], *, instances: int = 1) -> bool:
        """Whether ``job`` (this attempt, ended) ran into the stop that ``max_usd`` set for it.

        The backend says so (a runtime limit reached), or an interrupted job ran that long. A Batch timeout
        or a Kubernetes deadline can end as failed, a SageMaker spot job bills less than it ran: either
        test alone would miss some. ``instances``: how many instances its ``billable_seconds`` count
        (SageMaker's ``instance_count``); the stop is on the run's own length.
        """
        if self.stop_after_seconds is None or job.get("state") not in ("interrupted", "failed"):
            return False
        reason = str(job.get("reason") or "")
        if any(said in reason for said in RUNTIME_LIMIT_REASONS):
            return True
        # Ran that long and was stopped; a job that failed on its own then is still a failure. A job billed
        # as gone, or with an estimate (found by its name, never read), is billed the most it may have run:
        # it ran into the stop only if it was seen to.
        metrics = job.get("metrics") or {}
        seen = metrics.get(SEEN_BILLABLE_SECONDS)
        if seen is None and metrics.get(ESTIMATED_SECONDS):
            seen = 0.0
        ran = float(job.get("billable_seconds") or 0) if seen is None else float(seen)
        ran_out = ran / instances >= self.stop_after_seconds
        return ran_out and job.get("state") == "interrupted"


@dataclass(frozen=True, slots=True)
class AttemptState:
    """The state of a remote training between trigger events.

    Args:
        plan: What every attempt shares (backend, identity, stores, prices, ...), fixed at the start.
        latest_start: The latest (re)start on spot that still meets the deadline, or None.
        spot_usd_per_hour: The spot price of the next (or running) spot attempt, a decimal string.
        command: The team's command, or None for the built-in trainers.
        attempts: The finished attempts, oldest first.
        current: The attempt that runs, or None (before the first, or while paused).
        first_attempt: The number of this try's first attempt: 1, or, for a retry that cannot follow an
            earlier try's attempts (the backend lost one), the attempt after them.
        earlier_usd: What earlier tries billed for runs this retry does not follow again (a decimal string;
            None: nothing): taken off its cap, and counted in its summary.
    """

    plan: RemotePlan
    latest_start: datetime | None = None
    spot_usd_per_hour: str | None = None
    command: tuple[str, ...] | None = None
    attempts: tuple[Attempt, ...] = ()
    current: Current | None = None
    first_attempt: int = 1
    earlier_usd: str | None = None

    @property
    def next_attempt(self) -> int:
        """The number of the attempt a submission now would start (1, 2, ...)."""
        return self.first_attempt + len(self.attempts)

    def to_json(self) -> dict[str, Any]:
        """The state dict the operator and its trigger carry (JSON primitives; the plan's keys at the top)."""
        return {
            **self.plan.to_json(),
            "latest_start": self.latest_start.isoformat() if self.latest_start else None,
            "spot_usd_per_hour": self.spot_usd_per_hour,
            "command": list(self.command) if self.command is not None else None,
            "attempts": [a.to_json() for a in self.attempts],
            "current": self.current.to_json() if self.current else None,
            **({"first_attempt": self.first_attempt} if self.first_attempt != 1 else {}),
            **({"earlier_usd": self.earlier_usd} if self.earlier_usd is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptState:
        """Read :meth:`to_json`'s dict, also from a trigger serialized by an older version."""
        latest = data.get("latest_start")
        spot = data.get("spot_usd_per_hour")
        command = data.get("command")
        current = data.get("current")
        return cls(
            plan=RemotePlan.from_json(data),
            latest_start=parse_instant(latest, name="latest_start") if latest else None,
            spot_usd_per_hour=str(spot) if spot is not None else None,
            command=tuple(str(c) for c in command) if command is not None else None,
            attempts=tuple(Attempt.from_json(a) for a in data.get("attempts") or ()),
            current=Current.from_json(current) if current else None,
            first_attempt=int(data.get("first_attempt") or 1),
            earlier_usd=str(data["earlier_usd"]) if data.get("earlier_usd") is not None else None,
        )

    def run_seconds(self, billable_seconds: float) -> float:
        """How long a job of this training ran that billed ``billable_seconds``: they count every instance.

        SageMaker's ``instance_count`` instances each bill the run: its seconds are the billed ones over
        them. The cap's stop, the work kept and the restart-thrash guard weigh the run, not the bill.
        """
        return float(billable_seconds) / billed_instances(self.plan.backend_options)

    def ran_seconds(self, attempt: Attempt) -> float:
        """How long ``attempt`` ran: its exact runs added up where its backend knew them, else its bill's.

        A bill may hold time it did not run (a Batch submit's copies, its queue before a retry): taken as
        run time, a preemption seemed to come later than it did.
        """
        if attempt.trained_runs_seconds is not None:
            return float(sum(attempt.trained_runs_seconds))
        return self.run_seconds(attempt.billable_seconds)

    def submitted(
        self,
        *,
        job_id: str,
        market: str,
        zone: str = "",
        restored_step: int | None = None,
        market_reason: str = "",
        stop_after_seconds: int | None = None,
        stop_by_poll: bool = False,
        submitted_at: str | None = None,
        moved_bytes: int = 0,
        followed: Mapping[str, Any] | None = None,
    ) -> AttemptState:
        """Attempt :attr:`next_attempt` runs as ``job_id`` on ``market`` (in ``zone``, where chosen).

        ``restored_step``: the newest pushed checkpoint's step at the submit, where it was read;
        ``market_reason``: why it runs on on-demand, where something chose that (see
        :attr:`Attempt.market_reason`); ``stop_after_seconds``: when ``max_usd`` stops it (``stop_by_poll``:
        the wait stops it there, not its backend: a job an earlier try submitted under another limit);
        ``submitted_at``: when (ISO), the most a job the backend has not priced yet can have run;
        ``moved_bytes``: what a run in another region would read across (see :attr:`Current.moved_bytes`);
        ``followed``: the status of a job an earlier try submitted, as found (see :attr:`Current.followed`).
        """
        current = Current(
            attempt=self.next_attempt,
            job_id=job_id,
            market=market,
            zone=zone,
            restored_step=restored_step,
            market_reason=market_reason,
            stop_after_seconds=stop_after_seconds,
            stop_by_poll=stop_by_poll,
            submitted_at=submitted_at,
            moved_bytes=moved_bytes,
            followed=followed,
        )
        return replace(self, current=current)

    def recorded(self, attempt: Attempt) -> AttemptState:
        """The current attempt ended and was billed as ``attempt``."""
        return replace(self, attempts=(*self.attempts, attempt), current=None)

    def pausing(self, *, reason: str, job: Mapping[str, Any], seen_at: str) -> AttemptState:
        """The current attempt is being stopped through a price rise; ``job``: its status at ``seen_at``."""
        if self.current is None:
            raise ValueError("no attempt runs: nothing to pause")
        stopped = {"job": dict(job), "seen_at": seen_at}
        return replace(self, current=replace(self.current, pausing=reason, stopped=stopped))

    def resumed_at(self, usd_per_hour: str | None) -> AttemptState:
        """The next attempt runs on spot at ``usd_per_hour`` (None: the price stays, on-demand next)."""
        return self if usd_per_hour is None else replace(self, spot_usd_per_hour=usd_per_hour)


def remaining_hours(
    state: AttemptState,
    *,
    runtime_hours: Decimal,
    restart_overhead_minutes: float,
    checkpoint_every_seconds: float | None,
    ended: Mapping[str, Any] | None = None,
    running_on: bool = False,
    exact_only: bool = False,
) -> Decimal:
    """Work left, estimated from above, counting the job status ``ended`` too (not yet recorded).

    An attempt keeps what it ran past its restart, less one checkpoint interval (the most a stop or a
    preemption loses); without timed checkpoints a stop may lose everything. How long it ran is its runs
    where its backend knew them exactly (``TRAINED_RUNS_SECONDS``, kept as
    :attr:`Attempt.trained_runs_seconds`: each restarted inside the job loses as an attempt does), else its
    billed seconds over its instances (SageMaker's ``instance_count`` bills each).
    ``running_on``: the work left if the job of ``ended`` runs on instead: its last run loses only its
    restart, no checkpoint interval (what a pause alone loses), with or without checkpoints; where its
    status says it is not training (``TRAINING_NOW`` False: interrupted, waiting for capacity) it restarts
    from its checkpoint as after a stop, and the work left is the same.
    ``exact_only``: count only exactly known runs, for a deadline: billed seconds may count time a job did
    not train (a Batch submit's copies, its queue before a retry), and a work left taken from them too
    small moves the latest resume past the deadline.
    """
    restart = restart_overhead_minutes * 60
    lost = restart + float(checkpoint_every_seconds or 0)
    seconds: list[float] = []
    for attempt in state.attempts:
        if attempt.trained_runs_seconds is not None:
            seconds += attempt.trained_runs_seconds
        elif not exact_only:
            seconds.append(state.run_seconds(attempt.billable_seconds))
    last = None
    if ended is not None:
        runs = trained_runs(ended)
        ended_runs = list(runs) if runs else []
        if not runs and not exact_only:
            ended_runs = [state.run_seconds(ended["billable_seconds"])]
        # A job interrupted (waiting for capacity, restarting) restarts from its checkpoint if it runs on:
        # it loses the interval since it, as a stop does, not only a restart.
        training_now = (ended.get("metrics") or {}).get(TRAINING_NOW, True) is not False
        last = ended_runs.pop() if running_on and ended_runs and training_now else None
        seconds += ended_runs
    # Without timed checkpoints a stop may lose everything.
    kept = sum(max(0.0, s - lost) for s in seconds) if checkpoint_every_seconds else 0.0
    if last is not None:
        kept += max(0.0, last - restart)
    return max(runtime_hours - Decimal(str(round(kept / 3600, 6))), Decimal(0))


# -- events --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobEnded:
    """The current job ended (``job``: its status dict).

    ``fallback``: it has not ended but still waits for spot capacity at the latest safe start.
    """

    job: Mapping[str, Any]
    fallback: bool = False


@dataclass(frozen=True, slots=True)
class PriceRose:
    """The spot price rose well above the rest of the window while ``job`` ran (seen at ``seen_at``)."""

    reason: str
    seen_at: str | None
    job: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PriceBack:
    """While paused: the price watch's decision to resume (on spot at its price, or on on-demand)."""

    decision: SpotDecision


Event = JobEnded | PriceRose | PriceBack


def event_from_trigger(event: Mapping[str, Any]) -> Event:
    """The event of a ``RemoteTrainingJobTrigger`` success event dict."""
    if "resume" in event:
        return PriceBack(decision=SpotDecision.from_xcom(event["resume"]))
    if event.get("pause"):
        return PriceRose(reason=str(event["pause"]), seen_at=event.get("seen_at"), job=dict(event["job"]))
    return JobEnded(job=dict(event["job"]), fallback=bool(event.get("fallback")))


# -- steps ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """What to do first, before the step itself.

    ``stop_first``: stop the current job (it still waits for spot capacity); ``record_cause``: record the
    ended current attempt in the ledger with this cause (None: nothing ended).
    """

    record_cause: str | None = None
    stop_first: bool = False


@dataclass(frozen=True, slots=True)
class Submit(Step):
    """Submit the next attempt on ``market``; ``cause_of_previous`` is the cause of the attempt it follows.

    ``market_reason``: why on-demand, where this rule chose it over spot (the attempt's ledger note says it).
    """

    market: str
    cause_of_previous: str | None = None
    market_reason: str = ""


@dataclass(frozen=True, slots=True)
class Pause(Step):
    """Stop the current spot job through a price rise; the wait that follows sees it end."""

    reason: str
    job: Mapping[str, Any]
    seen_at: str


@dataclass(frozen=True, slots=True)
class Resume(Step):
    """After a pause: submit the next attempt on ``market`` (on spot at ``usd_per_hour``)."""

    market: str
    usd_per_hour: str | None
    reason: str = ""

    @property
    def market_reason(self) -> str:
        """Why the attempt runs on on-demand ("" on spot).

        The price watch's reason says why now, not that a pause came first: the ledger note says both.
        """
        if self.market != "on_demand":
            return ""
        return ", ".join(filter(None, ["resumed after a pause by a price rise", self.reason]))


@dataclass(frozen=True, slots=True)
class WaitForPrice(Step):
    """Paused: wait for the spot price to come back (or the latest resume)."""


@dataclass(frozen=True, slots=True)
class Finish(Step):
    """The job succeeded: settle, read its result, register the model."""


@dataclass(frozen=True, slots=True)
class Fail(Step):
    """Fail the task with ``message`` (``retry``: an Airflow retry may help).

    ``job_id``: the failed job, whose last log lines go with the message (and the reservation is settled).
    """

    message: str
    retry: bool = False
    job_id: str | None = None


def _within_attempts(state: AttemptState, step: Submit | Resume, max_attempts: int) -> Step:
    """``step``, or a failure when its attempt would be one more than ``max_attempts``."""
    attempt = state.next_attempt + (1 if step.record_cause else 0)
    if attempt <= max_attempts:
        return step
    causes = Counter(a.cause for a in state.attempts)
    if step.record_cause:
        causes[step.record_cause] += 1
    counted = ", ".join(f"{cause.replace('_', ' ')}: {n}" for cause, n in causes.most_common())
    # Only a job that met spot can avoid its interruptions by starting on on-demand.
    on_spot = step.market == "spot" or any(a.market == "spot" for a in state.attempts)
    advice = "raise max_attempts or start it on on-demand" if on_spot else "raise max_attempts"
    if causes["max_usd"]:
        # Spot billed at the price in force is bounded at on-demand: each stop leaves money over, and the
        # attempts get shorter until max_attempts, not the cap, ends them.
        advice = (
            "raise max_usd: the cap stopped its attempts short each time (a spot attempt billed at the price "
            f"in force is bounded at on-demand), or {advice}"
        )
    return Fail(
        message=(
            f"training was interrupted {attempt - 1} times ({counted}), max_attempts={max_attempts} "
            f"reached: {advice}"
        ),
        record_cause=step.record_cause,
        stop_first=step.stop_first,
    )


def _store_unreachable_again(state: AttemptState, job: Mapping[str, Any]) -> Fail:
    """The second attempt in a row that could not reach a store: a setting to fix, not bad luck.

    Each attempt is a billed job; a store that refused two in a row (a missing bucket or folder, a role
    that may not write it) refuses the next ones too, so they are not bought.
    """
    plan = state.plan
    return Fail(
        message=(
            f"training job {job['job_id']} could not reach a store, the second attempt in a row to fail so "
            f"({job.get('reason') or 'no reason given'}): check that model_store {plan.model_store!r} and "
            f"the checkpoint location {plan.checkpoint_uri!r} can be created and written by the job (its "
            "role or service account on a cloud backend), or, if the reason is a push cut short by a "
            "preemption notice, that a checkpoint uploads within preemption_grace_seconds; then clear the "
            "task; nothing was registered"
        ),
        job_id=str(job["job_id"]),
        record_cause="store_error",
    )


def _failure(state: AttemptState, job: Mapping[str, Any], cause: str) -> Fail:
    hint = ""
    if state.command:
        # No exit code (a Batch container that could not be pulled) has no hint: "...; ; nothing was" read
        # as a part left out.
        said = exit_hint(job.get("exit_code"), str(job.get("reason") or ""))
        hint = f"{'; ' + said if said else ''}; nothing was registered"
    return Fail(
        message=f"training job {job['job_id']} failed: {job.get('reason') or 'no reason given'}{hint}",
        job_id=str(job["job_id"]),
        record_cause=cause,
    )


def next_step(
    state: AttemptState,
    event: Event,
    now: datetime,
    *,
    max_attempts: int,
    latest_resume: datetime | None,
) -> Step:
    """What to do after ``event``.

    Args:
        state: The state before the event.
        event: What the trigger saw.
        now: The time of the decision.
        max_attempts: Attempts at most, interruptions included.
        latest_resume: After a pause, the latest resume that still meets the deadline, counting the work
            of the attempt that ended (None: no limit).

    Returns:
        The step; its ``stop_first`` and ``record_cause`` come before it.
    """
    if isinstance(event, PriceBack):
        decided = event.decision
        price = str(decided.usd_per_hour) if decided.market == "spot" else None
        resume = Resume(market=decided.market, usd_per_hour=price, reason=decided.reason)
        return _within_attempts(state, resume, max_attempts)
    if isinstance(event, PriceRose):
        return Pause(reason=event.reason, job=dict(event.job), seen_at=event.seen_at or now.isoformat())
    job = event.job
    ended = str(job["state"])
    if state.current is not None and state.current.pausing and ended != "succeeded":
        # The stop this operator asked for, not a reclaim: the job checkpointed on SIGTERM.
        if latest_resume is not None and now >= latest_resume:
            submit = Submit(
                market="on_demand",
                cause_of_previous="paused",
                record_cause="paused",
                market_reason="paused by a price rise, no slack left for a later spot start",
            )
            return _within_attempts(state, submit, max_attempts)
        return WaitForPrice(record_cause="paused")
    if event.fallback:
        submit = Submit(
            market="on_demand",
            cause_of_previous="capacity_wait",
            record_cause="capacity_wait",
            stop_first=True,
            market_reason=f"no spot capacity by the latest safe start {_instant(state.latest_start)}",
        )
        return _within_attempts(state, submit, max_attempts)
    cause = attempt_cause(job) or CAUSES.get(ended, "code_error")
    capped = (
        ended != "succeeded"
        and state.current is not None
        and state.current.stopped_by_cap(job, instances=billed_instances(state.plan.backend_options))
    )
    # A followed job an earlier try stopped (its kill) ended by that stop, as its ledger entry says: so
    # recorded whether the wait took the stop as its own at the cap or saw the job end on its notice.
    earlier_stop = state.current.earlier_stop() if state.current is not None else None
    if capped:
        # Stopped at what was left of the cap (the next submit says whether more is left), unless the stop
        # the wait took as its own was an earlier try's (its kill's).
        cause = earlier_stop or "max_usd"
    elif earlier_stop and cause == "preemption":
        cause = earlier_stop
    deadline_stop = not capped and _stopped_at_the_deadline(state, job, now)
    if deadline_stop:
        # A spot attempt's limit is the time to the deadline: Batch and Kubernetes end it "failed", which
        # was a code error that failed the task for good where the on-demand fallback was due.
        cause = "deadline"
    if ended == "succeeded":
        return Finish(record_cause=cause)
    if ended == "failed" and not capped and not deadline_stop:
        return _failure(state, job, cause)
    if cause == "store_error" and state.attempts and state.attempts[-1].cause == "store_error":
        return _store_unreachable_again(state, job)
    market = next_market(previous=str(job["market"]), now=now, latest_start=state.latest_start)
    if deadline_stop:
        market = "on_demand"  # the deadline has passed: the fallback, not another spot attempt
    why = ""
    if deadline_stop:
        why = f"the spot attempt ran until the deadline {_instant(state.plan.deadline)}"
    elif market == "on_demand" and job["market"] == "spot":
        why = f"{cause.replace('_', ' ')} past the latest safe start {_instant(state.latest_start)}"
    elif market == "on_demand" and state.current is not None:
        why = state.current.market_reason  # on-demand stays on-demand, for the reason it went there
    submit = Submit(market=market, cause_of_previous=cause, record_cause=cause, market_reason=why)
    return _within_attempts(state, submit, max_attempts)


def _stopped_at_the_deadline(state: AttemptState, job: Mapping[str, Any], now: datetime) -> bool:
    """Whether ``job``, a spot attempt, was ended by the runtime limit its deadline set (not by ``max_usd``).

    A spot attempt's limit is the time to the deadline (``job_seconds_left``), at most 5 days: one that
    ended on its limit well before the deadline ran into that maximum, not the deadline.
    """
    if state.plan.deadline is None or job.get("market") != "spot":
        return False  # without a deadline, and on-demand, the limit is a day or more: not the deadline's
    if now < state.plan.deadline - timedelta(minutes=1):
        return False
    if job.get("state") not in ("interrupted", "failed"):
        return False
    reason = str(job.get("reason") or "")
    return any(said in reason for said in RUNTIME_LIMIT_REASONS)


def _instant(moment: datetime | None) -> str:
    return moment.isoformat(timespec="seconds") if moment else "(none)"
