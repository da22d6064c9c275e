"""The built-in trainers on the job contract: under ``costaware-run``, on the real local backend.

One code path with a team's own command: the launcher restores the checkpoint folder, pushes each commit to
the attempt's ``COSTAWARE_CHECKPOINT_URI``, passes the notice on and checks the metrics; the training itself
stores the model version and writes the summary to the spec's ``result_uri``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from costaware_runtime.checkpoints import latest_step, read_marker
from remote_support import training_pythonpath, write_data

from costaware.adapters.checkpoint_store import (
    CheckpointFolder,
    CheckpointStore,
    recorded_save_seconds,
    recorded_step,
)
from costaware.adapters.compute.base import JobRequest, JobState, JobStatus, open_backend
from costaware.adapters.compute.local import LocalBackend
from costaware.adapters.model_store import ModelStore
from costaware.core.errors import ConfigurationError
from costaware.training import entrypoint
from costaware.training.checkpointing import Checkpointer, PreemptedError
from costaware.training.runner import run_retrain

KEY = "dag/train/run-1"


def spec_for(tmp: Path, **extra: Any) -> dict[str, Any]:
    return {
        "data_path": str(tmp / "data"),
        "label_column": "y",
        "feature_columns": ["x1", "x2", "c"],
        "model_store": str(tmp / "models"),
        "checkpoint_store": str(tmp / "ckpt"),
        "checkpoint_key": KEY,
        "trainer": "slow_trainer.SlowSGDTrainer",
        "trainer_params": {"epochs": 30, "batch_size": 256, "step_seconds": 0.4},
        "checkpoint_every_seconds": 0.5,
        "seed": 3,
        "result_uri": str(tmp / "jobs-out" / "result.json"),
        **extra,
    }


def attempt(tmp: Path, number: int) -> JobRequest:
    """Attempt ``number`` as the operator submits it: the run's checkpoint URI, no output or result URI."""
    return JobRequest(
        job_name=f"train-0123456789-a{number}",
        spec_uri=str(tmp / "spec.json"),
        market="spot",
        instance_type="m5.large",
        checkpoint_uri=str(tmp / "ckpt" / KEY),
        model_store=str(tmp / "models"),
        attempt=number,
        grace_seconds=30,
    )


def wait_done(backend: LocalBackend, job_id: str, timeout: float = 120) -> JobStatus:
    deadline = time.monotonic() + timeout
    while not (status := backend.poll(job_id)).state.done:
        assert time.monotonic() < deadline, backend.logs(job_id)
        time.sleep(0.1)
    return status


def test_the_builtin_job_is_preempted_under_the_launcher_and_the_next_attempt_resumes_from_the_push(
    tmp_path: Path,
) -> None:
    write_data(tmp_path / "data")
    entrypoint.write_spec(str(tmp_path / "spec.json"), spec_for(tmp_path))
    backend = open_backend(
        "local", {"root": str(tmp_path / "jobs"), "env": {"PYTHONPATH": training_pythonpath()}}
    )
    assert isinstance(backend, LocalBackend)
    latest = tmp_path / "ckpt" / KEY / "LATEST.json"

    first = backend.submit(attempt(tmp_path, 1))
    deadline = time.monotonic() + 90
    while not latest.exists():  # the launcher pushed a checkpoint while the training runs
        assert not backend.poll(first).state.done, backend.logs(first)
        assert time.monotonic() < deadline, backend.logs(first)
        time.sleep(0.05)
    backend.stop(first)  # the spot notice: SIGTERM to the launcher, which passes it on
    status = wait_done(backend, first)
    log = backend.logs(first, tail=200)
    assert (status.state, status.exit_code) == (JobState.INTERRUPTED, 75), log
    step = json.loads(latest.read_text())["step"]
    assert 0 < step < 30
    # Each save was timed and the launcher pushed the times: what the next attempt's re-tune reads.
    saves = recorded_save_seconds(str(tmp_path / "ckpt" / KEY))
    assert 0 < len(saves) <= step and all(0 < s < 30 for s in saves)
    # The step the operator reads after the attempt: newer than none, so the attempt kept work.
    assert recorded_step(str(tmp_path / "ckpt" / KEY)) == step
    assert f"preempted (job exit 75) after checkpoint step {step}" in log
    assert "SIGTERM passed on by costaware-run" in log
    assert f"preempted: preempted: checkpoint after step {step} saved" in log  # the job's own line
    assert status.reason == f"costaware-run: preempted (job exit 75) after checkpoint step {step}"
    assert CheckpointStore.open(str(tmp_path / "ckpt")).steps(KEY) == []  # not the worker's store
    assert ModelStore.open(str(tmp_path / "models")).versions() == []

    second = backend.submit(attempt(tmp_path, 2))
    status = wait_done(backend, second)
    log = backend.logs(second, tail=200)
    assert status.state == JobState.SUCCEEDED, log
    assert f"starting from checkpoint step {step}" in log
    result = entrypoint.read_result(str(tmp_path / "jobs-out" / "result.json"))
    assert result["resumed_from_step"] == step and result["steps"] == 30
    assert [v.version for v in ModelStore.open(str(tmp_path / "models")).versions()] == [result["version"]]
    metrics = json.loads((tmp_path / "jobs" / second / "work" / "metrics.json").read_text())
    assert metrics == entrypoint.summary_metrics(result)
    assert metrics["resumed_from_step"] == step and metrics["rows"] > 0
    assert "done (the job stored its model itself)" in log
    assert "COSTAWARE_OUTPUT_URI is not set" not in log and "COSTAWARE_OUTPUT_DIR" not in log
    # The training cleared its folder once the model was stored: nothing newer is pushed.
    assert latest_step(tmp_path / "jobs" / second / "work" / "checkpoints") is None


def test_the_checkpoint_folder_resumes_only_its_own_plan_and_refuses_another_trainers(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    folder = CheckpointFolder(tmp_path / "checkpoints", remote="s3://ml/ckpt/run")
    job = entrypoint.job_from_spec(spec_for(tmp_path, trainer="sklearn-sgd", trainer_params={"epochs": 3}))
    folder.save(KEY, 2, b"state", {"trainer": "costaware.training.trainers.HGBTrainer"})
    with pytest.raises(ConfigurationError, match=r"was written by trainer .*HGBTrainer.*this job uses") as e:
        run_retrain(job, checkpoints=folder, preemption_notice=lambda: False)
    assert (
        f"checkpoint {tmp_path / 'checkpoints'} (pushed to s3://ml/ckpt/run by costaware-run) after"
        in str(e.value)
    )
    assert not (tmp_path / "models").exists() or ModelStore.open(str(tmp_path / "models")).versions() == []

    trainer = "sklearn-sgd"
    folder.save(KEY, 2, b"state", {"trainer": trainer, "mode": "full", "data_fingerprint": "other data"})
    result = run_retrain(job, checkpoints=folder, preemption_notice=lambda: False)
    assert result["resumed_from_step"] is None and result["steps"] == 3  # another plan: started over
    assert latest_step(tmp_path / "checkpoints") is None  # cleared once the model was stored


def test_a_notice_from_the_runtime_saves_a_commit_and_stops(tmp_path: Path) -> None:
    folder = CheckpointFolder(tmp_path)
    noticed = [False]
    checkpointer = Checkpointer(folder, KEY, every_steps=100, meta={"plan": 1}, notice=lambda: noticed[0])
    with checkpointer:
        checkpointer.step_done(1, lambda: b"one")
        assert latest_step(tmp_path) is None  # not due yet
        noticed[0] = True
        with pytest.raises(PreemptedError) as e:
            checkpointer.step_done(2, lambda: b"two")
    assert e.value.step == 2 and latest_step(tmp_path) == 2
    # Timed from before the state was serialized: the commit marker records it.
    assert len(checkpointer.save_seconds) == 1
    marker = read_marker(tmp_path)
    assert marker is not None and len(marker.save_seconds) == 1
    assert 0 <= marker.save_seconds[0] <= checkpointer.save_seconds[0]
    assert str(tmp_path) in str(e.value)
    resumed = folder.latest(KEY, meta={"plan": 1})
    assert resumed is not None and (resumed.step, resumed.state) == (2, b"two")
    assert folder.latest(KEY, meta={"plan": 2}) is None


def test_saves_are_timed_from_the_serializing_but_the_first_from_its_write(tmp_path: Path) -> None:
    def slow_state() -> bytes:
        time.sleep(0.2)  # serializing; the first one stands for the serializer's one-time imports
        return b"state"

    checkpointer = Checkpointer(CheckpointFolder(tmp_path), KEY, every_steps=1, meta={"plan": 1})
    with checkpointer:
        for step in (1, 2, 3):
            checkpointer.step_done(step, slow_state)
    # The marker's times end at the commit; the Checkpointer's after the pruning: a little longer.
    for measured in (checkpointer.save_seconds, read_marker(tmp_path).save_seconds):  # type: ignore[union-attr]
        first, *later = measured
        assert first < 0.2 and len(later) == 2 and all(s >= 0.2 for s in later)
