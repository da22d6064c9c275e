"""After a pause, the latest resume still lets the work truly left meet the deadline.

A 3-hour job, 10-minute checkpoints, a 5-minute restart, a deadline at 14:00: its job trained 1.1 h and was
paused at 12:00. A Batch job's bill counts time it did not train (a 1.5 h copy of its submit, its queue
before a retry inside Batch): billed 9360 s it gave 0.65 h left and a latest resume of 13:16, while 1.9 h
are truly left and the last restart that meets the deadline is 11:55.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from remote_support import local_operator_args

from costaware.adapters.compute.base import TRAINED_RUNS_SECONDS
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.training.attempt_effects import billed_attempt
from costaware.training.attempts import Attempt, AttemptState, Current, JobEnded
from costaware.training.pauses import price_watch, work_left
from costaware.training.plan import PriceWatch, RemotePlan

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
DEADLINE = NOW + timedelta(hours=2)
RESTART = timedelta(minutes=5)
TRULY_LEFT = timedelta(hours=3 - 1.1)
BATCH_STOPPED = {
    "job_id": "train-a1",
    "state": "failed",
    "market": "spot",
    "instance_type": "p3.2xlarge",
    "billable_seconds": 9360.0,  # 1.1 h trained, plus a 1.5 h copy of its submit
    "reason": "stopped",
    "metrics": {},
}


class Decided(Exception):
    """Raised by the spy on ``next_step``: the test reads what the operator passed it."""


def pausing_state(backend: str = "batch") -> AttemptState:
    plan = RemotePlan(
        backend=backend,
        instance_type="p3.2xlarge",
        region="us-east-1",
        on_demand_usd_per_hour="3.06",
        first_market="spot",
        identity={"dag_id": "retrain", "run_id": "r1", "task_id": "train", "try_number": 1},
        deadline=DEADLINE,
        checkpoint_every_seconds=600.0,
        watch=PriceWatch(
            prices="/dev/null",
            runtime_hours="3",
            priority="normal",
            restart_overhead_minutes=5.0,
            history_days=28,
        ),
    )
    state = AttemptState(plan=plan, current=Current(attempt=1, job_id="train-a1", market="spot"))
    return state.pausing(reason="price rose", job=BATCH_STOPPED, seen_at=NOW.isoformat())


def resume_by_after_the_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: dict[str, Any]
) -> datetime:
    """The latest resume the operator decides on when the paused ``job`` ends at ``NOW``."""
    import costaware.operators.remote_attempts as remote_attempts
    import costaware.training.attempts as attempts

    seen: dict[str, Any] = {}

    def spy(state: AttemptState, event: Any, now: datetime, **kwargs: Any) -> Any:
        seen.update(kwargs, now=now)
        raise Decided

    monkeypatch.setattr(remote_attempts, "utcnow", lambda: NOW)
    monkeypatch.setattr(attempts, "next_step", spy)
    with pytest.raises(Decided):
        RemoteTrainingOperator(**local_operator_args(tmp_path), instance_type="p3.2xlarge")._step(
            {}, pausing_state(), JobEnded(job=job)
        )
    assert seen["now"] == NOW
    return seen["latest_resume"]


def test_a_paused_batch_job_s_bill_does_not_move_the_latest_resume_past_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    latest = resume_by_after_the_pause(tmp_path, monkeypatch, BATCH_STOPPED)
    assert latest + RESTART + TRULY_LEFT <= DEADLINE, latest
    # Never later than its submit's, which counted nothing of the job.
    assert latest == datetime.fromisoformat(
        price_watch(pausing_state(), "pause", poll_interval=60)["latest_resume"]
    )


def test_a_paused_job_with_exact_runs_is_given_its_work_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A SageMaker job's Training transitions: 1 h, then 6 minutes after its wait for capacity.
    job = {**BATCH_STOPPED, "metrics": {TRAINED_RUNS_SECONDS: [3600.0, 360.0]}}
    latest = resume_by_after_the_pause(tmp_path, monkeypatch, job)
    # Each run loses a restart and a checkpoint interval: 1 h - 15 min and nothing kept of the 6 minutes.
    assert latest == DEADLINE - RESTART - timedelta(hours=3) + timedelta(minutes=45)


def recorded(job: dict[str, Any]) -> AttemptState:
    state = pausing_state()
    _, attempt = billed_attempt(state, job, "paused", Decimal("0.918"))
    assert Attempt.from_json(attempt.to_json()) == attempt  # as the trigger carries it
    return state.recorded(attempt)


def test_a_recorded_attempt_keeps_its_exact_runs_and_its_bill() -> None:
    runs = [3600.0, 360.0]
    state = recorded({**BATCH_STOPPED, "metrics": {TRAINED_RUNS_SECONDS: runs}})
    (attempt,) = state.attempts
    assert attempt.trained_runs_seconds == tuple(runs) and attempt.billable_seconds == 9360.0
    # Work done is its runs (45 minutes kept), not its bill (2.6 h less a restart and an interval).
    assert work_left(state) == Decimal("2.25")


def test_the_next_attempt_s_watch_keeps_the_deadline_after_a_recorded_batch_attempt() -> None:
    state = recorded(BATCH_STOPPED)
    assert state.attempts[0].trained_runs_seconds is None
    latest = datetime.fromisoformat(price_watch(state, "resume", poll_interval=60)["latest_resume"])
    assert latest + RESTART + TRULY_LEFT <= DEADLINE, latest


def test_a_stopped_sagemaker_job_without_billed_time_or_transitions_keeps_the_submit_s_latest_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.adapters.compute.sagemaker import status_from_description

    ts = NOW.timestamp()
    status = status_from_description(
        {
            "TrainingJobName": "train-a1",
            "TrainingJobStatus": "Stopped",
            "SecondaryStatus": "Stopped",
            "EnableManagedSpotTraining": True,
            "ResourceConfig": {"InstanceType": "ml.p3.2xlarge", "InstanceCount": 1},
            # Its first start 2.6 h ago, its waits for capacity included; no BillableTimeInSeconds.
            "TrainingStartTime": ts - 2.6 * 3600,
            "TrainingEndTime": ts,
        },
        now=ts,
    )
    job = status.to_dict()
    assert TRAINED_RUNS_SECONDS not in job["metrics"]
    latest = resume_by_after_the_pause(tmp_path, monkeypatch, job)
    assert latest + RESTART + TRULY_LEFT <= DEADLINE, (latest, job["billable_seconds"])
