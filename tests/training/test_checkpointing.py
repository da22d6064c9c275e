from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from costaware.adapters.checkpoint_store import CheckpointStore, checkpoint_key
from costaware.adapters.model_store import ModelStore
from costaware.core.errors import ConfigurationError
from costaware.training.checkpointing import PREEMPTED_EXIT_CODE, Checkpointer, PreemptedError
from costaware.training.runner import run_retrain
from costaware.training.spec import RetrainJob
from costaware.training.trainers import resolve_trainer

HERE = Path(__file__).resolve().parent
SPOT_NOTICE_SECONDS = 120
STEPS, EVERY_STEPS, STEP_SECONDS = 12, 3, 0.25


def _data(folder: Path, rows: int = 4000, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "x1": rng.normal(size=rows),
            "x2": rng.normal(size=rows),
            "c": rng.choice(["a", "b", "c", "d"], rows),
        }
    )
    logit = 1.5 * frame.x1 - frame.x2 + frame.c.map({"a": 0.5, "b": -0.5, "c": 0.0, "d": 1.0})
    frame["y"] = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(int)
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / "day-001.parquet", index=False)
    return folder


def _fields(tmp: Path, name: str, **trainer: Any) -> dict[str, Any]:
    return {
        "data_path": str(tmp / "data"),
        "label_column": "y",
        "feature_columns": ["x1", "x2", "c"],
        "model_store": str(tmp / name / "models"),
        "checkpoint_store": str(tmp / name / "ckpt"),
        "checkpoint_key": "dag/retrain/run-1",
        "trainer": "slow_trainer:SlowSGDTrainer",
        "trainer_params": {"epochs": STEPS, "batch_size": 256, **trainer},
        "checkpoint_every_steps": EVERY_STEPS,
        "checkpoint_every_seconds": None,
    }


def _start(tmp: Path, fields: dict[str, Any]) -> subprocess.Popen[str]:
    config = tmp / f"job-{time.monotonic_ns()}.json"
    config.write_text(json.dumps(fields))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-m", "costaware.training.runner", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _steps_done(progress: Path) -> int:
    lines = progress.read_text().split() if progress.exists() else []
    return int(lines[-2]) if lines else 0


def _wait_for_steps(proc: subprocess.Popen[str], progress: Path, steps: int) -> None:
    deadline = time.monotonic() + 60
    while _steps_done(progress) < steps:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "training made no progress"
        time.sleep(0.02)


def _interrupt(
    proc: subprocess.Popen[str], progress: Path, sig: signal.Signals
) -> tuple[int, float, str, str]:
    """Send ``sig``; return the exit code, seconds from signal to exit, stdout and stderr."""
    sent = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=SPOT_NOTICE_SECONDS)
    return proc.returncode, time.monotonic() - sent, out, err


@pytest.fixture
def uninterrupted(tmp_path: Path) -> np.ndarray:
    """Coefficients of the same training run in one go (in this process)."""
    _data(tmp_path / "data")
    fields = _fields(tmp_path, "reference")
    sys.path.insert(0, str(HERE))
    try:
        result = run_retrain(RetrainJob(**fields))
    finally:
        sys.path.remove(str(HERE))
    assert result["resumed_from_step"] is None and result["steps"] == STEPS
    return _coefficients(tmp_path / "reference" / "models", result["version"])


def _coefficients(store_path: Path, version: str) -> np.ndarray:
    store = ModelStore.open(str(store_path))
    meta = store.get(version)
    model = resolve_trainer("sklearn-sgd").load(store.model_bytes(meta))
    clf = model.named_steps["clf"]
    return np.concatenate([clf.coef_.ravel(), clf.intercept_])


def test_sigterm_twice_then_resume_matches_an_uninterrupted_run(
    tmp_path: Path, uninterrupted: np.ndarray
) -> None:
    progress = tmp_path / "progress.txt"
    fields = _fields(tmp_path, "spot", step_seconds=STEP_SECONDS, progress_file=str(progress))
    ckpts = CheckpointStore.open(fields["checkpoint_store"])

    # First spot notice, mid-run.
    proc = _start(tmp_path, fields)
    _wait_for_steps(proc, progress, 4)
    rc, seconds, out, err = _interrupt(proc, progress, signal.SIGTERM)
    done_first = _steps_done(progress)
    assert rc == PREEMPTED_EXIT_CODE, err
    assert seconds < SPOT_NOTICE_SECONDS and seconds < 10  # checkpoint written well within the notice
    report = json.loads(out.strip().splitlines()[-1])
    assert report["preempted"] is True and report["step"] == done_first
    assert "SIGTERM (spot interruption notice)" in err
    saved = ckpts.steps(fields["checkpoint_key"])
    assert saved[0] == done_first  # nothing finished was lost: the in-flight step completed and was saved
    assert done_first - saved[0] <= EVERY_STEPS

    # The retry resumes and is interrupted a second time.
    proc = _start(tmp_path, fields)
    _wait_for_steps(proc, progress, done_first + 2)
    rc, seconds, out, err = _interrupt(proc, progress, signal.SIGTERM)
    done_second = _steps_done(progress)
    assert rc == PREEMPTED_EXIT_CODE, err
    assert f"resuming {fields['checkpoint_key']} from the checkpoint after step {done_first}" in err
    assert ckpts.steps(fields["checkpoint_key"])[0] == done_second

    # The third attempt finishes from the second checkpoint.
    proc = _start(tmp_path, fields)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["resumed_from_step"] == done_second and result["steps"] == STEPS
    steps_run = [int(line.split()[0]) for line in progress.read_text().splitlines()]
    assert steps_run == list(range(1, STEPS + 1))  # every step ran exactly once over three attempts
    assert ckpts.steps(fields["checkpoint_key"]) == []  # checkpoints removed after success
    np.testing.assert_allclose(
        _coefficients(tmp_path / "spot" / "models", result["version"]), uninterrupted, rtol=1e-9, atol=1e-12
    )


def test_hard_kill_loses_at_most_one_checkpoint_interval(tmp_path: Path, uninterrupted: np.ndarray) -> None:
    progress = tmp_path / "progress.txt"
    fields = _fields(tmp_path, "killed", step_seconds=STEP_SECONDS, progress_file=str(progress))
    proc = _start(tmp_path, fields)
    _wait_for_steps(proc, progress, 5)
    rc, _, _, _ = _interrupt(proc, progress, signal.SIGKILL)  # no notice at all
    assert rc == -signal.SIGKILL
    done = _steps_done(progress)
    saved = CheckpointStore.open(fields["checkpoint_store"]).steps(fields["checkpoint_key"])
    assert saved and 0 <= done - saved[0] <= EVERY_STEPS
    proc = _start(tmp_path, fields)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["resumed_from_step"] == saved[0]
    np.testing.assert_allclose(
        _coefficients(tmp_path / "killed" / "models", result["version"]), uninterrupted, rtol=1e-9, atol=1e-12
    )


def test_corrupt_checkpoint_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore.open(str(tmp_path / "ckpt"), keep=3)
    key = checkpoint_key("dag", "task", "manual__2026-01-01T00:00:00+00:00")
    assert key == "dag/task/manual__2026-01-01T00_00_00_00_00"
    for step in (2, 4, 6):
        store.save(key, step, f"state-{step}".encode(), {"plan": "p"})
    newest = tmp_path / "ckpt" / key / "step-000000006.ckpt"
    newest.write_bytes(newest.read_bytes()[:-3])  # cut off, as by a kill during a non-atomic copy
    middle = tmp_path / "ckpt" / key / "step-000000004.ckpt"
    middle.write_bytes(middle.read_bytes().replace(b"state-4", b"state-X"))
    with caplog.at_level(logging.WARNING):
        found = store.latest(key, meta={"plan": "p"})
    assert found is not None and (found.step, found.state) == (2, b"state-2")
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "step-000000006.ckpt is unusable (state has 4 bytes, header says 7)" in messages
    assert "step-000000004.ckpt is unusable (state does not match its SHA-256)" in messages
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert store.latest(key, meta={"plan": "other"}) is None
    assert "saved for another plan" in caplog.text
    (tmp_path / "ckpt" / key / "step-000000002.ckpt").write_bytes(b"garbage")
    assert store.latest(key, meta={"plan": "p"}) is None


def test_training_resumes_past_a_corrupt_checkpoint(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _data(tmp_path / "data")
    fields = {**_fields(tmp_path, "run"), "trainer": "sklearn-sgd", "checkpoint_every_steps": 2}
    checkpointers: list[Checkpointer] = []

    def preempt_at_step_7(c: Checkpointer) -> None:
        checkpointers.append(c)
        real = c.step_done

        def step_done(step: int, state: Any, *, last: bool = False) -> None:
            if step == 7:
                c.request_preemption("test notice")
            real(step, state, last=last)

        c.step_done = step_done  # type: ignore[method-assign]

    with pytest.raises(PreemptedError, match="checkpoint after step 7 saved"):
        run_retrain(RetrainJob(**fields), on_checkpointer=preempt_at_step_7)
    assert PreemptedError.ledger_cause == "preemption"
    key_dir = tmp_path / "run" / "ckpt" / fields["checkpoint_key"]
    assert sorted(p.name for p in key_dir.iterdir()) == ["step-000000006.ckpt", "step-000000007.ckpt"]
    (key_dir / "step-000000007.ckpt").write_bytes(b"CWCKPT1\n{not json")
    with caplog.at_level(logging.INFO):
        result = run_retrain(RetrainJob(**fields))
    assert result["resumed_from_step"] == 6
    assert caplog.text.count("step-000000007.ckpt is unusable (header is cut off)") == 1  # said once


def _preempt_at(step_at: int) -> Any:
    def install(c: Checkpointer) -> None:
        real = c.step_done

        def step_done(step: int, state: Any, *, last: bool = False) -> None:
            if step == step_at:
                c.request_preemption("test notice")
            real(step, state, last=last)

        c.step_done = step_done  # type: ignore[method-assign]

    return install


def test_a_new_plans_saves_outlive_an_old_plans_later_steps(tmp_path: Path) -> None:
    # A retry under another plan starts at step 0; the old plan's steps 400 and 500 outranked its saves,
    # and each was deleted as soon as it was written: a second preemption resumed from nothing.
    store = CheckpointStore.open(str(tmp_path / "ckpt"))
    key = "dag/task/run1"
    store.save(key, 400, b"a400", {"plan": "A"})
    store.save(key, 500, b"a500", {"plan": "A"})
    assert store.latest(key, meta={"plan": "B"}, quiet=True) is None
    store.save(key, 10, b"b10", {"plan": "B"})
    assert store.steps(key) == [10]
    store.save(key, 20, b"b20", {"plan": "B"})
    store.save(key, 30, b"b30", {"plan": "B"})
    assert store.steps(key) == [30, 20]
    resumed = store.latest(key, meta={"plan": "B"})
    assert resumed is not None and (resumed.step, resumed.state) == (30, b"b30")
    # A later step that could not be read (a passing store error) is not taken for another plan's.
    again = CheckpointStore.open(str(tmp_path / "ckpt"))
    read = again.blobs.read_bytes

    def unreadable_30(name: str) -> bytes:
        if name.endswith("step-000000030.ckpt"):
            raise OSError("503 Slow Down")
        return read(name)

    again.blobs.read_bytes = unreadable_30  # type: ignore[method-assign]
    assert again.latest(key, meta={"plan": "B"}, quiet=True).step == 20  # type: ignore[union-attr]
    again.save(key, 25, b"b25", {"plan": "B"})
    assert 30 in again.steps(key)


@pytest.mark.parametrize(
    "change",
    [
        {"label_threshold": 0.5},
        {"feature_columns": ["x1", "x2"]},
        {"label_column": "x1", "label_threshold": 0.0, "feature_columns": ["x2", "c"]},
    ],
    ids=["label_threshold", "features", "label"],
)
def test_a_checkpoint_of_other_inputs_is_not_resumed(
    tmp_path: Path, change: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The same file read for another label or columns has one fingerprint: its model is not carried on."""
    _data(tmp_path / "data")
    fields = {**_fields(tmp_path, "run"), "trainer": "sklearn-sgd", "checkpoint_every_steps": 2}
    with pytest.raises(PreemptedError):
        run_retrain(RetrainJob(**fields), on_checkpointer=_preempt_at(5))
    with caplog.at_level(logging.WARNING):
        result = run_retrain(RetrainJob(**{**fields, **change}))
    assert result["resumed_from_step"] is None
    assert "saved for another plan" in caplog.text
    # The same inputs again still resume (from the checkpoint the changed run left alone).
    fields_again = {**fields, "checkpoint_key": "dag/retrain/run-2"}
    with pytest.raises(PreemptedError):
        run_retrain(RetrainJob(**fields_again), on_checkpointer=_preempt_at(5))
    assert run_retrain(RetrainJob(**fields_again))["resumed_from_step"] == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"every_seconds": 0}, "every_seconds must be a number > 0 or None, got 0"),
        ({"every_steps": 0}, "every_steps must be an integer >= 1 or None, got 0"),
        ({"every_seconds": None, "every_steps": None}, "set checkpoint every_seconds or every_steps"),
    ],
)
def test_checkpointer_rejects_bad_intervals(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Checkpointer(CheckpointStore.open(str(tmp_path / "c")), "k", **kwargs)


def test_checkpoint_store_rejects_unsafe_keys(tmp_path: Path) -> None:
    store = CheckpointStore.open(str(tmp_path / "c"))
    with pytest.raises(ConfigurationError, match=r"checkpoint key '\.\./escape' is not a safe relative path"):
        store.save("../escape", 1, b"x")
    assert not (tmp_path / "escape").exists()


def test_time_based_checkpoints_use_the_clock(tmp_path: Path) -> None:
    now = [0.0]
    c = Checkpointer(CheckpointStore.open(str(tmp_path / "c")), "k", every_seconds=60, clock=lambda: now[0])
    c.step_done(1, lambda: b"one")
    now[0] = 61.0
    c.step_done(2, lambda: b"two")
    now[0] = 90.0
    c.step_done(3, lambda: b"three")
    assert c.store.steps("k") == [2] and c.saves == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"checkpoint_key": None}, "lacks checkpoint_key: give them"),  # a TypeError from __init__ before
        (
            {"feature_colums": ["x1"]},
            "'feature_colums' is no RetrainJob field (did you mean 'feature_columns'?)",
        ),
        ({"feature_columns": "x1,x2"}, """got the string 'x1,x2': write ["x1", "x2"], or leave"""),
        # Told to write [""] / ["None"], themselves no columns.
        ({"feature_columns": ""}, """got the string '': write e.g. ["dep_delay", "distance"], or leave"""),
        ({"feature_columns": "None"}, """got the string 'None': write e.g. ["dep_delay", "distance"]"""),
        ({"feature_columns": 5}, "feature_columns must be a list of column names, such as"),
        ({"feature_columns": ["x1", 2]}, "feature_columns must be a list of column names, such as"),
        ({"force_full": "maybe"}, "force_full must be true or false, got 'maybe'"),
        # A ValueError traceback (exit 1) once the data was read, before.
        (
            {"label_threshold": "15m"},
            "label_threshold must be a number (a label above it counts as 1), got '15m'",
        ),
        # These failed only once the data was read, naming Checkpointer's "every_seconds", not the field.
        (
            {"checkpoint_every_seconds": -5},
            "job.json': checkpoint_every_seconds must be a number > 0 or None, got -5",
        ),
        (
            {"checkpoint_every_seconds": "300"},
            "checkpoint_every_seconds must be a number > 0 or None, got '300' (a string: write 300",
        ),
        ({"feature_columns": ["x1", "y"]}, "job.json': label column 'y' is also a feature"),
        # A ValueError traceback (exit 1) once the store was opened, before.
        ({"storage_options": "anon=true"}, "storage_options must be a JSON object of names and values"),
        # Refused by the checkpoint store only once the data had been read.
        (
            {"checkpoint_key": "../escape"},
            "job.json': checkpoint_key '../escape' is not a safe relative path",
        ),
        ({"checkpoint_key": ""}, "job.json': checkpoint_key '' is not a safe relative path"),
    ],
)
def test_a_bad_job_file_is_named_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, Any], message: str
) -> None:
    from costaware.training.runner import main

    given = {**_fields(tmp_path, "bad"), **fields}
    config = tmp_path / "job.json"
    config.write_text(json.dumps({k: v for k, v in given.items() if v is not None}))
    assert main(["--config", str(config)]) == 2
    assert message in json.loads(capsys.readouterr().out)["error"]
    assert not (tmp_path / "bad").exists()
    assert main(["--config", str(tmp_path / "nope.json")]) == 2  # a traceback, exit 1, before
    assert "cannot read the job file" in json.loads(capsys.readouterr().out)["error"]


def test_force_full_false_as_text_warm_starts(tmp_path: Path) -> None:
    # "false" was bool("false"), True: a full retrain where a warm start was asked for.
    from costaware.training.runner import job_from_file

    config = tmp_path / "job.json"
    config.write_text(json.dumps({**_fields(tmp_path, "ff"), "force_full": "false"}))
    assert job_from_file(str(config)).force_full is False


def test_a_label_threshold_as_text_is_read_as_a_number(tmp_path: Path) -> None:
    from costaware.training.runner import job_from_file

    config = tmp_path / "job.json"
    config.write_text(json.dumps({**_fields(tmp_path, "lt"), "label_threshold": " 15 "}))
    assert job_from_file(str(config)).label_threshold == 15.0


# label_threshold is never rendered, so text that reads as not given was written out: "null" and "" were
# read as not given (trained on the raw label) while " " and "None " were refused.
@pytest.mark.parametrize("written", ["", " ", "None", "None ", "null", " null"])
def test_a_label_threshold_written_as_not_given_is_refused_naming_it(tmp_path: Path, written: str) -> None:
    import re

    from costaware.training.runner import job_from_file

    config = tmp_path / "job.json"
    config.write_text(json.dumps({**_fields(tmp_path, "lt"), "label_threshold": written}))
    message = (
        rf"job file .*: label_threshold must be a number \(a label above it counts as 1\), got "
        rf"{re.escape(repr(written))}: write the number, or leave label_threshold out \(None\)"
    )
    with pytest.raises(ConfigurationError, match=message):
        job_from_file(str(config))


def test_a_label_threshold_null_in_json_is_not_given(tmp_path: Path) -> None:
    from costaware.training.runner import job_from_file

    config = tmp_path / "job.json"
    config.write_text(json.dumps({**_fields(tmp_path, "lt"), "label_threshold": None}))
    assert job_from_file(str(config)).label_threshold is None


# 5 exited 2 with {"error": "'int' object is not iterable"}, naming neither the file nor the field.
@pytest.mark.parametrize(
    ("written", "what"),
    [(5, "got 5: e.g."), ("x1", r"got 'x1': write \['x1'\]"), (["x1", 2], r"got \['x1', 2\]")],
)
def test_drift_columns_that_are_no_list_of_names_are_refused_naming_them(
    tmp_path: Path, written: Any, what: str
) -> None:
    from costaware.training.runner import job_from_file

    config = tmp_path / "job.json"
    config.write_text(json.dumps({**_fields(tmp_path, "dc"), "drift_columns": written}))
    with pytest.raises(ConfigurationError, match=rf"job file .*: drift_columns must be a list .*{what}"):
        job_from_file(str(config))
    config.write_text(json.dumps({**_fields(tmp_path, "dc"), "drift_columns": ["x1"]}))
    assert job_from_file(str(config)).drift_columns == ["x1"]


def test_a_save_after_a_resume_past_a_corrupt_file_keeps_the_good_one(tmp_path: Path) -> None:
    # keep=2 kept the newest two files: the new one and the cut-off one, and deleted the good one the
    # training had just resumed from.
    store = CheckpointStore.open(str(tmp_path / "ckpt"))
    store.save("k", 6, b"six")
    store.save("k", 7, b"seven")
    (tmp_path / "ckpt" / "k" / "step-000000007.ckpt").write_bytes(b"CWCKPT1\n{not json")
    resumed = store.latest("k")
    assert resumed is not None and resumed.step == 6
    store.save("k", 8, b"eight")
    assert store.steps("k") == [8, 6]
    assert store.latest("k").state == b"eight"  # type: ignore[union-attr]
