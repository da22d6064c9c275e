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
from remote_support import write_data

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
    ],
)
def test_bad_specs_are_refused_by_name(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as e:
        entrypoint.job_from_spec(spec)
    assert message in str(e.value)
