"""One remote training attempt as the state records it: :class:`Attempt` (finished) and :class:`Current`.

Split from :mod:`costaware.training.attempts`, which re-exports every name: read them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from costaware.adapters.compute.base import ESTIMATED_SECONDS, SEEN_BILLABLE_SECONDS, TRAINED_RUNS_SECONDS
from costaware.adapters.compute.job_contract import EXIT_PREEMPTED, EXIT_PREEMPTED_BEFORE_CHECKPOINT
from costaware.training.remote import RUNTIME_LIMIT_REASONS

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
    # stops it once it has run ``stop_after_seconds`` (its backend does not). So is a new run a retry
    # started where the job it followed went before its submit (its request was sized as a follow's).
    stop_by_poll: bool = False
    submitted_at: str | None = None  # ISO time of the submit (older states: None)
    # The data and checkpoint bytes (at the submit) a run in another region than the plan's reads across,
    # where the plan allows zones there (else 0): egress, recorded once the attempt ran in such a zone.
    moved_bytes: int = 0
    # A job an earlier try submitted, as this try found it (``{"job": {...}, "seen_at": iso}``): it ran
    # before ``submitted_at`` (this try's re-attach), so one the wait never sees is billed from this status.
    followed: Mapping[str, Any] | None = None
    # The backend's mark of this run of the job's name (``FoundJob.run_token``; "": not known, or a backend
    # that never reuses a name): its bills carry it, and a bill of the name with another is another run's.
    run_token: str = ""

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
        if self.run_token:
            data["run_token"] = self.run_token
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
            run_token=str(data.get("run_token") or ""),
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
