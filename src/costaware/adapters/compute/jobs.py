"""What a backend is given and what it reports: a job's request, its state and status, a job found by name.

``JobRequest`` builds the job's command and environment (the job contract's, see
``costaware.adapters.compute.job_contract``); ``JobStatus`` is what ``poll`` saw, with the ``metrics`` keys
that the billing reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from costaware.adapters.compute import job_contract
from costaware.adapters.compute.zone_names import check_zone
from costaware.core.errors import ConfigurationError

MARKETS = ("spot", "on_demand")
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")


class JobState(str, Enum):
    """Where a job stands. ``interrupted``: stopped by the capacity provider (spot reclaim); resubmit it."""

    PENDING = "pending"
    RUNNING = "running"
    INTERRUPTED = "interrupted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def done(self) -> bool:
        return self in (JobState.INTERRUPTED, JobState.SUCCEEDED, JobState.FAILED)


#: A ``JobStatus.metrics`` key: the seconds of a Batch job's copies (a resent submit's) per instance type they
#: ran on, which the billing prices each at its own type (a compute environment may place a copy on another).
COPY_SECONDS_BY_TYPE = "batch_copy_seconds_by_type"
#: A ``JobStatus.metrics`` key of a Batch job still running: ``{"seconds_by_type": {type: s}, "unstopped":
#: [ids]}``, what its copies may still run after this poll (a stopped one's stop timeout, one whose stop
#: failed its time limit), not billed yet. A poll of the job's end bills it; a bill without one (a kill) adds
#: it with :func:`with_copies_run_out`.
COPY_SECONDS_LEFT = "batch_copy_seconds_left"
#: A ``JobStatus.metrics`` key: true where its billed seconds are priced at the on-demand rate though the
#: job ran on spot (SageMaker managed spot's billable time, which holds the spot saving already).
BILLED_AT_ON_DEMAND = "billed_at_on_demand"
#: A ``JobStatus.metrics`` key of a job billed as gone (its backend no longer lists it) without a poll of its
#: end: the billed seconds it was last seen at, what it surely ran; its ``billable_seconds`` are the most it
#: may have run, time it may never have run included.
SEEN_BILLABLE_SECONDS = "seen_billable_seconds"
#: A ``JobStatus.metrics`` key: true where its ``billable_seconds`` were not read from the backend but worked
#: out from when the job began (a job found by its name whose polls failed): the most it may have run, its
#: queue included, an upper bound to bill, not time it was seen to run (it was seen to run 0 s).
ESTIMATED_SECONDS = "billable_seconds_estimated"
#: A ``JobStatus.metrics`` key of a job not ended yet: when it was asked to stop (epoch seconds), as the
#: backend's own description of the job says (a local job's ``stop`` file, SageMaker's ``Stopping``, a pod's
#: ``deletionTimestamp`` less its grace period); absent where none was asked or the backend does not say
#: (Batch: DescribeJobs gives ``statusReason`` and ``stoppedAt`` once a terminated job has stopped, and
#: ``isTerminated`` no time). A wait re-created by a triggerer restart that cannot read its kept state
#: learns from it that its stop at the cap went out already.
STOP_REQUESTED_AT = "stop_requested_at"
#: A ``JobStatus.metrics`` key: the job's runs so far, each from a (re)start to its end or to now, in seconds
#: of run time (not instance-seconds), where the backend says exactly when it trained (SageMaker's
#: ``Training`` transitions, a local job's one process). Absent where it does not: ``billable_seconds`` may
#: then hold time it did not train (a wait for capacity between restarts, a Batch retry's or copy's), too
#: much to take from the work left.
TRAINED_RUNS_SECONDS = "trained_runs_seconds"
#: A ``JobStatus.metrics`` key beside ``TRAINED_RUNS_SECONDS`` of a job not yet ended: whether its last run
#: trains at this status (False: SageMaker's last transition is not ``Training``, as an interrupted job's
#: waiting for capacity). Running on, a job that is not training restarts from its checkpoint and loses the
#: interval since it, as a stop does. Absent: taken as training (a local job's one process).
TRAINING_NOW = "training_now"


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One attempt of a training job: the built-in entrypoint (``spec_uri``) or a user command.

    Attributes:
        job_name: Unique per attempt, stable across Airflow retries (letters, digits, ``-``; <= 63).
        spec_uri: URI of the training spec the entrypoint reads (empty for a user command).
        market: ``spot`` or ``on_demand``.
        instance_type: What to run on (``ml.*`` for SageMaker, EC2 for Batch and Kubernetes).
        checkpoint_uri: Where checkpoints live: ``COSTAWARE_CHECKPOINT_URI`` of every attempt (SageMaker syncs
            ``CheckpointConfig.S3Uri`` with the checkpoint folder itself).
        model_store: The model store the job writes its version to.
        max_runtime_seconds: Longest the training may run: every backend ends it there (SageMaker's
            ``MaxRuntimeInSeconds``, Batch's ``attemptDurationSeconds``, Kubernetes'
            ``activeDeadlineSeconds``; the ``local`` backend stops it itself, as a stop would).
        max_wait_seconds: Longest to wait for spot capacity plus run (SageMaker managed spot).
        env: Extra environment variables of the training process.
        user_command: The team's own command (run under ``costaware-run``); empty for the built-in trainers.
        image: Container image of the job; empty: the backend's own (``image_uri``, ``image``, the Batch
            job definition's).
        output_uri: Where the launcher uploads the outputs of this attempt (user commands).
        result_uri: Where the launcher writes the result of this attempt (user commands).
        attempt: The attempt number, 1 for the first.
        grace_seconds: SIGTERM to SIGKILL when the job is stopped or preempted (the launcher's).
        availability_zone: The zone to place this attempt in (e.g. ``us-east-1b``), so that a preempted spot
            attempt can move to a zone that still has capacity; empty: the backend's choice. SageMaker
            refuses one (see :func:`require_zone_placement`).
        checkpoint_every_seconds: How often this attempt should checkpoint
            (``COSTAWARE_CHECKPOINT_EVERY_SECONDS``; with ``"auto"``, the interval re-tuned for it); None:
            unset.
        stop_after_seconds: Stop the attempt (SIGTERM, then SIGKILL after the grace period) once it has run
            this long: what is left of the task's ``max_usd``. Every backend gets it as part of
            ``max_runtime_seconds``; the ``local`` backend also keeps it apart, to say which limit stopped
            the job. None: no money cap.
    """

    job_name: str
    spec_uri: str
    market: str
    instance_type: str
    checkpoint_uri: str = ""
    model_store: str = ""
    max_runtime_seconds: int = 86400
    max_wait_seconds: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    user_command: tuple[str, ...] = ()
    image: str = ""
    output_uri: str = ""
    result_uri: str = ""
    attempt: int = 1
    grace_seconds: float = job_contract.DEFAULT_GRACE_SECONDS
    availability_zone: str = ""
    checkpoint_every_seconds: float | None = None
    stop_after_seconds: int | None = None

    def __post_init__(self) -> None:
        if not _JOB_NAME.match(self.job_name):
            raise ConfigurationError(
                f"job name {self.job_name!r} is not valid: 1-63 letters, digits or '-', starting with a "
                "letter or digit"
            )
        if self.availability_zone:
            check_zone(self.availability_zone)
        check_market(self.market)
        if self.user_command:
            job_contract.check_command(list(self.user_command))
            missing = [n for n in ("checkpoint_uri", "output_uri", "result_uri") if not getattr(self, n)]
            if missing:
                raise ConfigurationError(
                    f"job {self.job_name!r} runs a user command but has no {', '.join(missing)}: the "
                    "launcher needs them to resume, upload the outputs and report the result"
                )
        elif not self.spec_uri:
            raise ConfigurationError("spec_uri is empty: write the training spec and pass its URI")
        job_contract.check_grace_seconds(self.grace_seconds)
        if self.max_runtime_seconds < 1:
            raise ConfigurationError(f"max_runtime_seconds must be >= 1, got {self.max_runtime_seconds}")
        if self.attempt < 1:
            raise ConfigurationError(f"attempt must be >= 1, got {self.attempt}")

    @property
    def is_command(self) -> bool:
        """Whether the job is a user command (the job contract) rather than a built-in trainer."""
        return bool(self.user_command)

    def command(self, *, no_sync: bool = False, python: str = "python") -> list[str]:
        """The command the job runs: the launcher around the user's command or the built-in entrypoint.

        Args:
            no_sync: The platform syncs the checkpoint folder itself (SageMaker): the launcher does not.
            python: The interpreter of the built-in entrypoint (the local backend passes its own).
        """
        if self.user_command:
            return job_contract.launcher_command(self.user_command, no_sync=no_sync)
        return job_contract.builtin_command(self.spec_uri, no_sync=no_sync, python=python)

    def environment(self, *, work_dir: str, checkpoint_dir: str | None = None) -> dict[str, str]:
        """The job's environment: ``env`` plus the contract's variables.

        A built-in job gets them but the output and result ones: it stores its model version itself and
        writes its summary to the spec's ``result_uri``.

        Args:
            work_dir: A writable folder on the job's machine for its checkpoint, output and metrics.
            checkpoint_dir: The checkpoint folder where the platform fixes it (default under ``work_dir``).
        """
        contract = job_contract.contract_environment(
            checkpoint_uri=self.checkpoint_uri,
            output_uri=self.output_uri if self.user_command else "",
            result_uri=self.result_uri if self.user_command else "",
            attempt=self.attempt,
            market=self.market,
            grace_seconds=self.grace_seconds,
            work_dir=work_dir,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every_seconds=self.checkpoint_every_seconds,
        )
        return {**dict(self.env), **contract}


def check_market(market: object) -> str:
    """``market`` if it is one of :data:`MARKETS`.

    Raises:
        ConfigurationError: any other value, named, with the known ones.
    """
    if not isinstance(market, str) or market not in MARKETS:
        raise ConfigurationError(f"market {market!r} is not one of {', '.join(MARKETS)}")
    return market


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What ``poll`` saw: state, billed seconds so far, market and instance type, a one-line reason.

    ``metrics`` is free for backend-specific figures (utilization, restarts, ...), e.g. for the listener.
    ``ended_at`` is when the job stopped (epoch seconds), where the backend says; ``None`` while it runs.
    ``availability_zone`` is where the job was placed, where the backend knows it (else empty).
    """

    job_id: str
    state: JobState
    billable_seconds: float = 0.0
    market: str = ""
    instance_type: str = ""
    reason: str = ""
    exit_code: int | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    ended_at: float | None = None
    availability_zone: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON primitives (for trigger events and XCom)."""
        out = asdict(self)
        out["state"] = self.state.value
        out["metrics"] = dict(self.metrics)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobStatus:
        """The status from :meth:`to_dict`; a key it lacks (an older trigger state's) takes its default."""
        values = dict(data)
        values["state"] = JobState(values["state"])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class FoundJob:
    """A job ``find`` found under its name: its id and, where the backend reports them, when it began.

    ``started_at``: when it started running, ``created_at``: when the backend took it (epoch seconds; None
    where the backend does not say). A retry that cannot poll the job it follows bills it from them, not
    from the retry's re-attach: what it ran under the earlier try is never lost. ``ended_at`` and
    ``end_state``: when and how it ended, where it has (both or neither): billed up to its end, not up to
    now (the name is the same on every try and clear, so the job found may have ended days before).
    ``market``: the market it was submitted on, as its backend's record of it says (``""``: unknown): a job
    that cannot be read then is billed on it, not on the one the retry would choose now. ``status``: what a
    ``poll`` now would say, where the look-up read all a poll reads (SageMaker's one DescribeTrainingJob):
    the retry follows the job from it instead of asking again (None: poll it). ``run_token``: what tells
    this run of the name from another run under it, where the backend reuses names (``local``: the token
    its submit wrote in the job's folder; ``kubernetes``: the pod's ``metadata.uid``); ``""``: not known.
    """

    job_id: str
    started_at: float | None = None
    created_at: float | None = None
    ended_at: float | None = None
    end_state: JobState | None = None
    market: str = ""
    status: JobStatus | None = None
    run_token: str = ""

    @property
    def running_since(self) -> float | None:
        """The earliest it can have started running: its start, else its creation (never less than it ran)."""
        return self.started_at if self.started_at is not None else self.created_at


def with_copies_run_out(status: JobStatus) -> JobStatus:
    """``status`` billed with what its copies may still run (``COPY_SECONDS_LEFT``), where it holds that.

    For a job billed as ended without a poll of its end (a kill): nothing looks at its copies again, and a
    copy whose stop failed runs to its time limit (pure).
    """
    from dataclasses import replace

    left = status.metrics.get(COPY_SECONDS_LEFT)
    if not left:
        return status
    seconds_by_type = {str(t): float(s) for t, s in dict(left.get("seconds_by_type") or {}).items()}
    seconds = sum(seconds_by_type.values())
    by_type = dict(status.metrics.get(COPY_SECONDS_BY_TYPE) or {})
    for instance_type, more in seconds_by_type.items():
        by_type[instance_type] = float(by_type.get(instance_type, 0.0)) + more
    metrics = {k: v for k, v in status.metrics.items() if k != COPY_SECONDS_LEFT}
    metrics[COPY_SECONDS_BY_TYPE] = by_type
    metrics["batch_copy_seconds"] = float(metrics.get("batch_copy_seconds") or 0.0) + seconds
    unstopped = list(left.get("unstopped") or [])
    said = f"; its copies billed {seconds:g} s more, to their stop"
    if unstopped:
        said += f" ({', '.join(unstopped)} could not be stopped: billed to its time limit)"
    return replace(
        status,
        billable_seconds=status.billable_seconds + seconds,
        reason=status.reason + said,
        metrics=metrics,
    )
