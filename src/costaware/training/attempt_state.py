"""The state a remote training carries between trigger events (:class:`AttemptState`), and its work left.

Split from :mod:`costaware.training.attempts`, which re-exports every name: read them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.adapters.compute.base import TRAINING_NOW, billed_instances
from costaware.core.series import parse_instant
from costaware.training.attempt_records import Attempt, Current, trained_runs
from costaware.training.plan import RemotePlan


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
        run_token: str = "",
    ) -> AttemptState:
        """Attempt :attr:`next_attempt` runs as ``job_id`` on ``market`` (in ``zone``, where chosen).

        ``restored_step``: the newest pushed checkpoint's step at the submit, where it was read;
        ``market_reason``: why it runs on on-demand, where something chose that (see
        :attr:`Attempt.market_reason`); ``stop_after_seconds``: when ``max_usd`` stops it (``stop_by_poll``:
        the wait stops it there, not its backend: a job an earlier try submitted under another limit, or a
        new run a retry started where the job it followed went before its submit, counted from this submit);
        ``submitted_at``: when (ISO), the most a job the backend has not priced yet can have run;
        ``moved_bytes``: what a run in another region would read across (see :attr:`Current.moved_bytes`);
        ``followed``: the status of a job an earlier try submitted, as found (see :attr:`Current.followed`);
        ``run_token``: the backend's mark of this run of the name (see :attr:`Current.run_token`).
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
            run_token=run_token,
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
