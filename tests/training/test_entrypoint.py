"""The training entrypoint a remote job runs: one code path with the in-worker operator, clear exits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from remote_support import aws_client, write_data

from costaware.adapters.checkpoint_store import CheckpointStore
from costaware.adapters.model_store import ModelStore
from costaware.core.errors import ConfigurationError
from costaware.training import entrypoint
from costaware.training.checkpointing import PREEMPTED_EXIT_CODE

HERE = Path(__file__).resolve().parent


def spec_for(tmp: Path, **extra: Any) -> dict[str, Any]:
    return {
        "data_path": str(tmp / "data"),
        "label_column": "y",
        "feature_columns": ["x1", "x2", "c"],
        "model_store": str(tmp / "models"),
        "checkpoint_store": str(tmp / "ckpt"),
        "checkpoint_key": "dag/train/run-1",
        "trainer": "slow_trainer.SlowSGDTrainer",
        "trainer_params": {"epochs": 8, "batch_size": 256, "step_seconds": 0.3},
        "checkpoint_every_seconds": 0.5,
        "seed": 3,
        "result_uri": str(tmp / "out" / "result.json"),
        **extra,
    }


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}


def run(spec_uri: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "costaware.training.entrypoint", "--spec", spec_uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )


def test_sigterm_checkpoints_exits_75_and_the_rerun_resumes_and_stores_once(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    uri = entrypoint.write_spec(str(tmp_path / "spec.json"), spec_for(tmp_path))
    proc = run(uri)
    ckpt = CheckpointStore.open(str(tmp_path / "ckpt"))
    deadline = time.monotonic() + 60
    while not ckpt.steps("dag/train/run-1"):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == PREEMPTED_EXIT_CODE
    assert err.strip().splitlines()[-1].startswith("preempted: preempted: checkpoint after step")
    assert ModelStore.open(str(tmp_path / "models")).versions() == []
    saved = ckpt.steps("dag/train/run-1")[0]

    proc = run(uri)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["resumed_from_step"] == saved and result["steps"] == 8
    assert json.loads((tmp_path / "out" / "result.json").read_text())["version"] == result["version"]
    assert [v.version for v in ModelStore.open(str(tmp_path / "models")).versions()] == [result["version"]]
    assert ckpt.steps("dag/train/run-1") == []  # cleared once the model is stored


def test_missing_spec_exits_2_with_one_line_reason(tmp_path: Path) -> None:
    proc = run(str(tmp_path / "nope" / "spec.json"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("bad training spec or input: training spec ") and "does not exist" in last


def test_a_store_it_cannot_reach_is_no_bad_spec(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    # It exited 2 (bad spec, never retried) with "write the spec first", where the endpoint was wrong; then 1,
    # a code error that failed the task for good: a transient outage is the contract's 74, submitted again.
    from costaware_runtime.contract import EXIT_SYNC_FAILED

    from costaware.training.entrypoint import main

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert (
        main(["--spec", "s3://ml/jobs/spec.json", "--endpoint-url", "http://127.0.0.1:1"]) == EXIT_SYNC_FAILED
    )
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("store unavailable: cannot read the training spec 's3://ml/jobs/spec.json'")
    assert "through the endpoint 'http://127.0.0.1:1' (--endpoint-url" in last
    assert "write the spec first" not in last


def test_checkpoint_of_another_trainer_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    CheckpointStore.open(str(tmp_path / "ckpt")).save(
        "dag/train/run-1", 3, b"state", {"trainer": "costaware.training.trainers.HGBTrainer"}
    )
    spec = spec_for(tmp_path, trainer="sklearn-sgd", trainer_params={"epochs": 2})
    with pytest.raises(ConfigurationError, match=r"was written by trainer .*HGBTrainer.*this job uses") as e:
        entrypoint.run_spec(spec)
    assert "use another checkpoint key or prefix" in str(e.value)
    assert ModelStore.open(str(tmp_path / "models")).versions() == []
    assert not (tmp_path / "out" / "result.json").exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"data_path": "x", "colour": "red"}, "training spec has unknown keys ['colour']"),
        ({"storage_options": {"secret_key": "s"}}, "storage_options ['secret_key'] are not allowed"),
        ({"data_path": "x"}, "training spec is incomplete"),
        # A seed of text was a ValueError (exit 1, a code error); 1.5 was trained as seed 1.
        ({"data_path": "x", "seed": "abc"}, "training spec seed must be a whole number, got 'abc'"),
        ({"data_path": "x", "seed": 1.5}, "training spec seed must be a whole number, got 1.5"),
    ],
)
def test_bad_specs_are_refused_by_name(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as e:
        entrypoint.job_from_spec(spec)
    assert message in str(e.value)


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_a_spec_on_a_custom_endpoint_is_read_through_it_and_the_job_stays_there(
    tmp_path: Path, moto_endpoint: str, how: str
) -> None:
    bucket = f"spec-endpoint-{how}"
    aws_client("s3", moto_endpoint).create_bucket(Bucket=bucket)
    write_data(tmp_path / "data")
    spec = spec_for(
        tmp_path,
        trainer="sklearn-sgd",
        trainer_params={"epochs": 2},
        model_store=f"s3://{bucket}/models",
        checkpoint_store=f"s3://{bucket}/ckpt",
        result_uri=f"s3://{bucket}/jobs/result.json",
        storage_options={"endpoint_url": moto_endpoint, "region": "us-east-1"},
    )
    keys = {"access_key": "testing", "secret_key": "testing"}
    uri = entrypoint.write_spec(f"s3://{bucket}/jobs/spec.json", spec, endpoint_url=moto_endpoint, **keys)
    env = {
        k: v
        for k, v in child_env().items()
        if not k.startswith(("AWS_ENDPOINT_URL", entrypoint.ENDPOINT_ENV))
    }
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_EC2_METADATA_DISABLED="true")
    command = [sys.executable, "-m", "costaware.training.entrypoint", "--spec", uri]
    if how == "argument":
        command += ["--endpoint-url", moto_endpoint]
    else:
        env[entrypoint.ENDPOINT_ENV] = moto_endpoint
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    version = json.loads(done.stdout.strip().splitlines()[-1])["version"]
    result = entrypoint.read_result(f"s3://{bucket}/jobs/result.json", endpoint_url=moto_endpoint, **keys)
    assert result["version"] == version
    store = ModelStore.open(f"s3://{bucket}/models", endpoint_url=moto_endpoint, **keys)
    assert [v.version for v in store.versions()] == [version]


def test_a_missing_result_names_the_job_and_what_to_check(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as e:
        entrypoint.read_result(str(tmp_path / "jobs" / "result.json"), job_id="train-1-a1")
    message = str(e.value)
    assert message.startswith("training job 'train-1-a1' ended successfully but its result ")
    assert "check that aws_conn_id reaches the job's S3 endpoint" in message and "spec" not in message


def test_a_result_it_cannot_write_fails_the_attempt_for_good_naming_the_stored_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The model was trained and stored and its checkpoints cleared, then the result's write failed: exit 74
    # had the attempt submitted again, which trained from step 0 (paid twice) and stored a second version.
    from costaware_runtime.contract import EXIT_SYNC_FAILED

    monkeypatch.syspath_prepend(str(HERE))  # slow_trainer
    monkeypatch.setattr(entrypoint, "RESULT_WRITE_RETRY_SECONDS", (0.0, 0.0))
    write_data(tmp_path / "data", rows=300)
    (tmp_path / "out").write_text("a file where the result's folder should be")
    spec = spec_for(tmp_path, trainer_params={"epochs": 1, "batch_size": 256, "step_seconds": 0.0})
    spec_uri = entrypoint.write_spec(str(tmp_path / "spec.json"), spec)
    code = entrypoint.main(["--spec", spec_uri])
    assert code == entrypoint.ERROR_EXIT_CODE != EXIT_SYNC_FAILED  # recorded failed: never submitted again
    (version,) = ModelStore.open(str(tmp_path / "models")).versions()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(
        f"result not written: model version {version.version!r} was stored in {str(tmp_path / 'models')!r} "
        f"but its result {spec['result_uri']!r} could not be written (3 tries: "
    )
    assert "a new attempt would train again" in last and "nothing was registered" not in last


def test_a_model_store_it_cannot_write_is_a_store_failure_and_keeps_the_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The docs promise exit 74 for a model store the job cannot reach; it exited 1 ("training failed"),
    # recorded code_error and never submitted again, and a failed save lost nothing only by luck.
    from costaware_runtime.contract import EXIT_SYNC_FAILED

    from costaware.adapters.model_store import ModelStore as Store

    monkeypatch.syspath_prepend(str(HERE))  # slow_trainer
    write_data(tmp_path / "data", rows=300)
    (tmp_path / "models").write_text("a file where the model store's folder should be")
    spec = spec_for(tmp_path, trainer_params={"epochs": 1, "batch_size": 256, "step_seconds": 0.0})
    assert (
        entrypoint.main(["--spec", entrypoint.write_spec(str(tmp_path / "spec.json"), spec)])
        == EXIT_SYNC_FAILED
    )
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"store unavailable: cannot open the model store {str(tmp_path / 'models')!r}")
    # A save that fails after training: 74 too, and the checkpoints stay for the next attempt's resume.
    (tmp_path / "models").unlink()

    def refused(self: Any, meta: Any, model: bytes, **options: Any) -> Any:
        raise PermissionError("Access Denied writing versions/")

    monkeypatch.setattr(Store, "save", refused)
    spec.update(
        trainer_params={"epochs": 3, "batch_size": 256, "step_seconds": 0.0}, checkpoint_every_steps=1
    )
    assert (
        entrypoint.main(["--spec", entrypoint.write_spec(str(tmp_path / "spec.json"), spec)])
        == EXIT_SYNC_FAILED
    )
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "store unavailable: cannot store the model version in" in last and "Access Denied" in last
    assert [p.name for p in (tmp_path / "ckpt").rglob("*") if p.is_file()]  # kept for the resume


def test_a_result_write_that_fails_once_is_tried_again_in_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A passing store error (throttling) at the result's write cost a new attempt, trained from step 0.
    monkeypatch.syspath_prepend(str(HERE))  # slow_trainer
    write_data(tmp_path / "data", rows=300)
    (tmp_path / "out").write_text("a file where the result's folder should be")
    spec = spec_for(tmp_path, trainer_params={"epochs": 1, "batch_size": 256, "step_seconds": 0.0})
    waits: list[float] = []

    def wait_while_the_store_recovers(seconds: float) -> None:
        waits.append(seconds)
        (tmp_path / "out").unlink()

    result = entrypoint.run_spec(spec, environ={}, sleep=wait_while_the_store_recovers)
    assert waits == [entrypoint.RESULT_WRITE_RETRY_SECONDS[0]]
    assert entrypoint.read_result(spec["result_uri"])["version"] == result["version"]
    assert [v.version for v in ModelStore.open(str(tmp_path / "models")).versions()] == [result["version"]]
