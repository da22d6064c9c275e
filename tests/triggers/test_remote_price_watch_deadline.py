"""The pause watch's latest resume, worked out at each poll, still lets the work truly left meet the deadline.

A 3-hour job, 10-minute checkpoints, a 5-minute restart, a deadline 2 h away: it trained 1 h, was
interrupted, waited 1.5 h for capacity, and has trained 6 minutes since (1.1 h in all, 1.9 h truly left).
Each backend's status of it, as polled, must not move the latest resume past the last on-demand restart
that finishes the 1.9 h by the deadline.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from costaware.adapters.compute.base import TRAINED_RUNS_SECONDS, JobState
from costaware.training.attempts import AttemptState, Current
from costaware.training.plan import PriceWatch, RemotePlan
from costaware.triggers.remote_price_watch import pause_watch_now

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
RESTART = timedelta(minutes=5)
TRULY_LEFT = timedelta(hours=3 - 1.1)


def attempts(backend: str, *, deadline_hours: float = 2.0) -> AttemptState:
    plan = RemotePlan(
        backend=backend,
        instance_type="p3.2xlarge",
        region="us-east-1",
        on_demand_usd_per_hour="3.06",
        first_market="spot",
        deadline=NOW + timedelta(hours=deadline_hours),
        checkpoint_every_seconds=600.0,
        watch=PriceWatch(
            prices="/dev/null",
            runtime_hours="3",
            priority="normal",
            restart_overhead_minutes=5.0,
            history_days=28,
        ),
    )
    return AttemptState(plan=plan, current=Current(attempt=1, job_id="train-a1", market="spot"))


def assert_meets_the_deadline(state: AttemptState, status: dict[str, Any]) -> dict[str, str]:
    watch = pause_watch_now(state.to_json(), status)
    resumed = datetime.fromisoformat(watch["latest_resume"])
    assert state.plan.deadline is not None
    assert resumed + RESTART + TRULY_LEFT <= state.plan.deadline, watch
    return watch


def test_a_managed_spot_job_s_wait_for_capacity_is_not_taken_for_training() -> None:
    from costaware.adapters.compute.sagemaker import status_from_description

    ts = NOW.timestamp()
    start = ts - 2.6 * 3600
    status = status_from_description(
        {
            "TrainingJobName": "train-a1",
            "TrainingJobStatus": "InProgress",
            "SecondaryStatus": "Training",
            "EnableManagedSpotTraining": True,
            "ResourceConfig": {"InstanceType": "ml.p3.2xlarge", "InstanceCount": 1},
            "TrainingStartTime": start,
            "SecondaryStatusTransitions": [
                {"Status": "Training", "StartTime": start},
                {"Status": "Interrupted", "StartTime": start + 3600},
                {"Status": "Starting", "StartTime": start + 3600},
                {"Status": "Training", "StartTime": ts - 0.1 * 3600},
            ],
        },
        now=ts,
    )
    assert status.metrics[TRAINED_RUNS_SECONDS] == pytest.approx([3600.0, 360.0])
    # Its billable seconds (since the first start: 2.6 h) said 0.65 h were left, and a resume by 13:16.
    watch = assert_meets_the_deadline(attempts("sagemaker"), status.to_dict())
    # Each run keeps what it trained past a restart and a checkpoint interval: 3 - 0.75 h.
    assert Decimal(watch["remaining_hours"]) == Decimal("2.25")


def test_a_batch_job_billed_with_a_copy_of_its_submit_keeps_the_latest_resume_of_its_submit() -> None:
    from costaware.adapters.compute.batch import status_from_description, with_copies

    now_ms = int(NOW.timestamp() * 1000)
    hour_ms = 3_600_000
    job = {"jobId": "train-a1", "status": "RUNNING", "startedAt": now_ms - int(1.1 * hour_ms)}
    # A copy of its submit (a retry's duplicate) ran 1.5 h before its stop: billed, never trained the job.
    copy = {
        "jobId": "train-a1-copy",
        "status": "FAILED",
        "startedAt": now_ms - int(2.6 * hour_ms),
        "stoppedAt": now_ms - int(1.1 * hour_ms),
        "statusReason": "Essential container in task exited",
    }
    status = with_copies(
        status_from_description(job, "spot", "p3.2xlarge", now_ms=now_ms), [copy], now_ms=now_ms
    )
    assert status.state == JobState.RUNNING
    assert status.billable_seconds == pytest.approx(2.6 * 3600)
    # No run time known exactly: what Batch bills may be no training.
    assert TRAINED_RUNS_SECONDS not in status.metrics
    assert_meets_the_deadline(attempts("batch"), status.to_dict())


def test_a_status_without_its_run_time_keeps_the_submit_s_latest_resume() -> None:
    # A pod, say, billed 2.6 h since its start: the latest resume is the submit's (3 h of work).
    state = attempts("kubernetes", deadline_hours=4)
    status = {"billable_seconds": 2.6 * 3600, "metrics": {}}
    watch = pause_watch_now(state.to_json(), status)
    assert datetime.fromisoformat(watch["latest_resume"]) <= NOW + timedelta(hours=4) - RESTART - timedelta(
        hours=3
    )


def test_a_local_job_s_run_time_is_exact_and_lets_a_late_job_resume_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import costaware.adapters.compute.local as local

    folder = tmp_path / "train-a1"
    folder.mkdir()
    (folder / "request.json").write_text(json.dumps({"market": "spot", "instance_type": "p3.2xlarge"}))
    (folder / "started").write_text(str(NOW.timestamp() - 2.5 * 3600))
    monkeypatch.setattr(local.time, "time", lambda: NOW.timestamp())
    status = local.LocalBackend(root=str(tmp_path)).poll("train-a1")
    assert status.state == JobState.RUNNING
    assert status.metrics[TRAINED_RUNS_SECONDS] == pytest.approx([2.5 * 3600])
    # 2.5 h in with a deadline 3 h away: 3 - (2.5 h - 15 min) = 45 min left, resumable until 14:10,
    # where the submit's 3 hours had to restart 5 minutes ago.
    watch = pause_watch_now(attempts("local", deadline_hours=3).to_json(), status.to_dict())
    assert watch["remaining_hours"] == "0.75"
    assert datetime.fromisoformat(watch["latest_resume"]) > NOW + timedelta(hours=2)


def test_a_job_minutes_from_its_end_is_not_paused_for_the_checkpoint_interval_only_a_pause_loses() -> None:
    # cost, hourly checkpoints, a 3-hour job 3 h 3 min in: 2 minutes left if it runs on at 1.00/h (0.033
    # USD), 62 minutes after a pause (a checkpoint interval lost) and a 5-minute restart at 0.30 from 14:00
    # (0.33 USD). Valued over the 62 minutes after a pause, running on looked dear (1.03 USD) and paused.
    from costaware.core.spot_forecast import run_mean_usd
    from costaware.training.pauses import price_watch
    from costaware.triggers.remote_price_watch import price_event

    state = attempts("local", deadline_hours=12)
    state = AttemptState(plan=replace(state.plan, checkpoint_every_seconds=3600.0), current=state.current)
    hourly = [Decimal("1.00")] * 30
    hourly[2:6] = [Decimal("0.30")] * 4

    def look(ran_seconds: float) -> dict[str, Any] | None:
        running = {"billable_seconds": ran_seconds, "metrics": {TRAINED_RUNS_SECONDS: [ran_seconds]}}
        watch = {**price_watch(state, "pause", poll_interval=60), **pause_watch_now(state.to_json(), running)}
        runtime = Decimal(watch["remaining_hours"])
        starts = [
            [(NOW + timedelta(hours=i)).isoformat(), str(run_mean_usd(hourly, i, runtime))]
            for i in range(1, 12)
        ]
        return price_event(
            watch,
            {"k": "v"},
            now=NOW,
            usd_per_hour=Decimal("1.00"),
            available=True,
            source="test",
            forecast_starts=starts,
        )

    assert look(3 * 3600 + 180) is None
    # An hour in, 2 h 5 min left running on at 1.00 against 0.30 for the 3 h a pause leaves: it pauses.
    paused = look(3600.0)
    assert paused is not None and "2.08 h left" in paused["pause"]


@pytest.mark.parametrize(
    ("last", "training_now"),
    [("Interrupted", False), ("Starting", False), ("Stopping", False), ("Training", True)],
)
def test_an_interrupted_job_running_on_restarts_from_its_checkpoint(last: str, training_now: bool) -> None:
    from costaware.adapters.compute.base import TRAINING_NOW
    from costaware.adapters.compute.sagemaker import status_from_description

    ts = NOW.timestamp()
    start = ts - 2 * 3600
    transitions = [{"Status": "Training", "StartTime": start}, {"Status": last, "StartTime": start + 3600}]
    if last == "Training":  # the second run began 59 min 59 s ago: 1 s in the first one's stead
        transitions = [{"Status": "Training", "StartTime": start, "EndTime": start + 3599}, transitions[1]]
    status = status_from_description(
        {
            "TrainingJobName": "train-a1",
            "TrainingJobStatus": "InProgress",
            "SecondaryStatus": last,
            "EnableManagedSpotTraining": True,
            "ResourceConfig": {"InstanceType": "ml.p3.2xlarge", "InstanceCount": 1},
            "TrainingStartTime": start,
            "SecondaryStatusTransitions": transitions,
        },
        now=ts,
    )
    assert status.metrics[TRAINING_NOW] is training_now
    watch = pause_watch_now(attempts("sagemaker", deadline_hours=6).to_json(), status.to_dict())
    if not training_now:
        # One run of 3600 s, interrupted an hour ago: running on restarts from its last checkpoint, losing
        # a restart and the 600 s interval as a stop does (3 - 0.75 h), not only a restart (2.083 h).
        assert status.metrics[TRAINED_RUNS_SECONDS] == pytest.approx([3600.0])
        assert Decimal(watch["run_on_hours"]) == Decimal(watch["remaining_hours"]) == Decimal("2.25")
    else:
        # Training now: its current run loses only its restart if it runs on.
        assert Decimal(watch["run_on_hours"]) < Decimal(watch["remaining_hours"])
