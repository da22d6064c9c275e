"""A team's own command through RemoteTrainingOperator on the real local backend (issue 24, items 1 and 6).

Each attempt runs ``costaware-run -- python own_train.py MODE`` (``tests/training/own_train.py``: plain
Python, the contract's environment only) as a child process, for real: checkpoints, resume, outputs, metrics,
exit codes, the ledger and the model store.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
import time
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG, Param
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from hung_mount import hung_mount
from remote_support import TRAINING, command_operator_args, context_for, drive

from costaware.adapters.compute.base import JobRequest, JobState, open_backend
from costaware.adapters.ledger.efficiency import run_outcome
from costaware.adapters.model_store import ModelStore
from costaware.cli import main as cli
from costaware.core.errors import ConfigurationError, StoreUnavailableError
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.training.attempts import Attempt

pytest.importorskip("costaware_runtime.launcher", reason="pip install -e ./runtime (costaware-run)")

SCRIPT = str(TRAINING / "own_train.py")


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


def operator(tmp: Path, mode: str, **kwargs: Any) -> RemoteTrainingOperator:
    return RemoteTrainingOperator(**{**command_operator_args(tmp, mode), "deferrable": False, **kwargs})


def seen(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "seen.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def store(tmp: Path) -> ModelStore:
    return ModelStore.open(str(tmp / "models"))


def entries(ledger: Any) -> list[dict[str, Any]]:
    return sorted((e for e in ledger.entries() if e["task_id"] == "train"), key=lambda e: e["note"])


def test_a_command_with_metrics_becomes_a_files_version_with_its_metrics(
    tmp_path: Path, ledger: Any, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    op = operator(tmp_path, "ok", deferrable=True)
    with pytest.raises(TaskDeferred):
        op.execute(context_for())
    result, _ = drive(operator(tmp_path, "ok", deferrable=True), context_for())  # a retry follows the job
    assert set(result) >= {"version", "metrics", "attempts", "usd", "backend"}
    assert result["metrics"]["steps"] == 6 and result["backend"] == "local"
    assert result["files"] == 2 and [a["cause"] for a in result["attempts"]] == ["success"]
    version = store(tmp_path).get(result["version"])
    assert (version.status, version.model_format, version.trainer) == ("complete", "files", "command")
    assert version.metrics == result["metrics"] and version.cost_usd == result["usd"]
    assert version.params["command"] == [sys.executable, SCRIPT, "ok"]
    out = store(tmp_path).download_files(version, tmp_path / "model")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "config/steps.json",
        "model.txt",
    ]
    (entry,) = entries(ledger)
    assert entry["cause"] == "success" and entry["market"] == "spot"
    # The staged copy is gone once the version has its own; a retry of the task returns the same version.
    assert not list((tmp_path / "models" / "_staging").rglob("model.txt"))
    again, _ = drive(operator(tmp_path, "ok"), context_for())
    assert again["version"] == result["version"] and len(store(tmp_path).versions()) == 1
    # The run's outcome holds the metrics, and `costaware runs show` lists them.
    (outcome,) = run_outcome(ledger, "scheduled__2026-01-01")
    assert outcome.model_version == result["version"] and outcome.record is not None
    assert dict(outcome.record.metrics) == result["metrics"] and outcome.record.trainer == "command"
    capsys.readouterr()
    assert cli(["--ledger-url", ledger_url, "runs", "show", "scheduled__2026-01-01"]) == 0
    shown = capsys.readouterr().out
    assert f"model {result['version']}" in shown and '"steps": 6' in shown and '"loss": ' in shown
    # What the built-in trainers record and a command's run does not have is left out (it read "mode: full").
    assert "  mode: " not in shown and "  parent: " not in shown and "  data_fingerprint: " not in shown
    attempt = seen(tmp_path)[0]
    assert attempt == {"attempt": 1, "market": "spot", "start": 0, "grace": "110", "every": 300.0}


def test_a_retry_after_the_registration_marker_failed_reuses_the_version_stored(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The version was stored and then the write of registered.json failed: the task's retry found no
    # marker and stored the job's outputs a second time, as a second version.
    from costaware.adapters.blob_dir import BlobDir

    write = BlobDir.write_bytes
    failed: list[str] = []

    def marker_fails_once(self: BlobDir, name: str, data: bytes) -> None:
        if name.endswith("registered.json") and not failed:
            failed.append(name)
            raise OSError("Read timeout on endpoint URL")
        write(self, name, data)

    monkeypatch.setattr(BlobDir, "write_bytes", marker_fails_once)
    with pytest.raises(OSError, match="Read timeout"):
        drive(operator(tmp_path, "ok"), context_for())
    assert failed and len(store(tmp_path).versions()) == 1
    result, _ = drive(operator(tmp_path, "ok"), context_for(try_number=2))
    assert [v.version for v in store(tmp_path).versions()] == [result["version"]]
    assert result["files"] == 2 and not list((tmp_path / "models" / "_staging").rglob("model.txt"))


def test_exit_75_resubmits_and_the_next_attempt_resumes_from_the_checkpoint(
    tmp_path: Path, ledger: Any
) -> None:
    result, _ = drive(operator(tmp_path / "a", "preempt-once", preemption_grace_seconds=30), context_for())
    assert [(s["attempt"], s["start"]) for s in seen(tmp_path / "a")] == [(1, 0), (2, 3)]
    assert seen(tmp_path / "a")[0]["grace"] == "30"
    assert [a["cause"] for a in result["attempts"]] == ["preemption", "success"]
    assert [a["market"] for a in result["attempts"]] == ["spot", "spot"]
    # The attempts keep the job's exit code: 75, saved on the notice ("auto" weighs only the losses).
    assert [a["exit_code"] for a in result["attempts"]] == [75, 0]
    assert [e["outcome"] for e in entries(ledger)] == ["interrupted", "success"]  # both billed
    # The same script without the preemption ends at the same weights.
    straight, _ = drive(operator(tmp_path / "b", "ok"), context_for(run_id="manual__straight"))
    assert result["metrics"] == straight["metrics"]
    resumed = (tmp_path / "a" / "models" / "versions" / result["version"] / "files" / "model.txt").read_text()
    assert (
        resumed
        == (tmp_path / "b" / "models" / "versions" / straight["version"] / "files" / "model.txt").read_text()
    )


def seen_when_started(tmp: Path, count: int) -> list[dict[str, Any]]:
    """The attempts' own view once ``count`` of them started (each writes its line first)."""
    deadline = time.monotonic() + 60
    while len(seen(tmp)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return seen(tmp)


def test_each_attempt_of_a_command_gets_its_checkpoint_interval(tmp_path: Path, ledger: Any) -> None:
    # A number reaches the command as it is (COSTAWARE_CHECKPOINT_EVERY_SECONDS).
    drive(operator(tmp_path / "n", "ok", checkpoint_every_seconds=42), context_for())
    assert seen(tmp_path / "n")[0]["every"] == 42.0
    # "auto": the first attempt gets the planned interval (m5.large's advisor band, bounded to the cap) ...
    # (a command that saves nothing: a save the launcher pushed before the stop would time the saves)
    op = operator(tmp_path / "a", "preempt-without-checkpoint", checkpoint_every_seconds="auto")
    state = op._start(context_for())
    assert state.plan.checkpoint_every_seconds == 3600.0
    first = op._submit(state, "spot")
    assert seen_when_started(tmp_path / "a", 1)[0]["every"] == 3600.0
    op._backend(first.plan).stop(first.current.job_id)
    # ... and a later spot attempt the interval re-tuned from how the earlier ones were preempted: two hard
    # kills after 7200 s each, less the default 300 s restart: sqrt(2 x 30 s save x 6900 s) = 643 s.
    killed = tuple(
        Attempt(
            attempt=n,
            job_id=f"job-a{n}",
            market="spot",
            instance_type="m5.large",
            billable_seconds=7200.0,
            usd="0.01",
            cause="preemption",
            reason="spot interruption",
            exit_code=-9,
        )
        for n in (1, 2)
    )
    later = op._submit(replace(state, attempts=killed), "spot")
    try:
        assert seen_when_started(tmp_path / "a", 2)[1]["every"] == pytest.approx(643.4, abs=0.5)
    finally:
        op._backend(later.plan).stop(later.current.job_id)


def test_a_command_that_never_checkpointed_is_said_in_the_task_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The launcher's warning was only in the job's own log, unread while the task succeeds; the first
    # preemption then restarted the training from its first step.
    with caplog.at_level(logging.WARNING):
        drive(operator(tmp_path, "save-on-notice", checkpoint_every_seconds=0.5), context_for())
    said = [r.getMessage() for r in caplog.records if "costaware-run in job" in r.getMessage()]
    assert len(said) == 1 and "without committing a checkpoint" in said[0], caplog.text


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("fail", "the command exited 1: a code error, not retried"),
        ("no-metrics", "wrote no metrics file"),
        ("empty-output", "left no files in COSTAWARE_OUTPUT_DIR"),
        ("preempt-without-checkpoint", "without a notice and without a committed checkpoint (exit 76)"),
    ],
)
def test_a_failed_command_fails_without_retry_and_registers_nothing(
    tmp_path: Path, ledger: Any, mode: str, reason: str
) -> None:
    with pytest.raises(AirflowFailException) as failed:
        drive(operator(tmp_path, mode), context_for())
    message = str(failed.value)
    assert "training job train-" in message and reason in message and "nothing was registered" in message
    assert [p.name for p in (tmp_path / "jobs").iterdir()] == [f"{message.split()[2]}"]  # one attempt only
    (entry,) = entries(ledger)  # billed all the same
    assert entry["outcome"] == "failed" and entry["cause"] == "code_error"
    assert not (tmp_path / "models").exists() or store(tmp_path).version_ids() == []
    if mode == "fail":
        assert "the loss went NaN at step 2" in message  # the job's own last lines
    job_folder = tmp_path / "jobs" / message.split()[2]
    assert f"(the job's whole output: {job_folder / 'stdout.log'}, {job_folder / 'stderr.log'})" in message


def test_stop_sends_sigterm_and_kills_after_the_grace_period(tmp_path: Path) -> None:
    backend = open_backend(
        "local", {"root": str(tmp_path / "jobs"), "env": {"OWN_TRAIN_LOG": str(tmp_path / "log")}}
    )

    def submit(name: str, mode: str, grace: float) -> str:
        staging = tmp_path / "models" / "_staging" / name
        return backend.submit(
            JobRequest(
                job_name=name,
                spec_uri="",
                market="spot",
                instance_type="m5.large",
                checkpoint_uri=str(tmp_path / "ckpt" / name),
                user_command=(sys.executable, SCRIPT, mode),
                output_uri=str(staging / "output"),
                result_uri=str(staging / "result.json"),
                grace_seconds=grace,
            )
        )

    def ended(job: str, within: float) -> Any:
        deadline = time.monotonic() + within
        while (status := backend.poll(job)).state in (JobState.PENDING, JobState.RUNNING):
            assert time.monotonic() < deadline, f"{job} still {status.state} after {within}s"
            time.sleep(0.05)
        return status

    polite = submit("polite-a1", "wait-for-notice", 30.0)
    stubborn = submit("stubborn-a1", "ignore-notice", 1.0)
    ready = Path(str(tmp_path / "log") + ".ready")
    deadline = time.monotonic() + 60
    while not ready.exists() or len(seen_lines := (tmp_path / "log").read_text().splitlines()) < 2:
        assert time.monotonic() < deadline, "the jobs did not start"
        time.sleep(0.05)
    assert len(seen_lines) == 2
    started = time.monotonic()
    backend.stop(polite)
    backend.stop(stubborn)
    # The job that checkpoints on the notice ends at once with 75 (resume from its checkpoint) ...
    status = ended(polite, 20)
    assert (status.state, status.exit_code) == (JobState.INTERRUPTED, 75)
    # ... the one that ignores it is killed once its grace period is over: preempted before any checkpoint.
    status = ended(stubborn, 20)
    assert (status.state, status.exit_code) == (JobState.INTERRUPTED, 77)
    assert time.monotonic() - started >= 1.0
    assert backend.signal(stubborn, signal.SIGKILL) is False  # nothing left to signal


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"data_path": "/d", "label_column": "y"},
            r"has command= and the built-in trainer's data_path, label_column: a command reads its own data",
        ),
        (
            {"command": None},
            r"needs either command=\[\.\.\.\] .* data_path, label_column, feature_columns missing",
        ),
        # Accepted and ignored before; a missing store was caught only when the task started.
        (
            {"seed": 7},
            r"has command= and the built-in trainer's seed: a command reads its own data and settings",
        ),
        ({"model_store": None}, r"model_store is None: give where the model versions go"),
        ({"model_store": " "}, r"model_store is ' ': give where the model versions go"),
        # It sent the checkpoints to a local default, unsaid (on a remote backend: not the job's store).
        ({"checkpoint_store": ""}, r"checkpoint_store is '': give where checkpoints go"),
        (
            {"spot_decision": None, "instance_type": None},
            r"'train' has no instance type: pass instance_type, or spot_task_id",
        ),
        # Raw TypeError and AttributeError before, naming neither argument.
        ({"backend_options": [1, 2]}, r"'train': backend_options must be a dict of option to value"),
        ({"tags": ["a"]}, r"'train': tags must be a dict of tag name to value"),
        (
            {"command": "python train.py"},
            r"command must be a list of strings, got the string 'python train.py'",
        ),
        ({"command": ["python", ""]}, "has elements that are not non-empty strings"),
        (
            {"preemption_grace_seconds": -5},
            "preemption_grace_seconds must be a number of seconds > 0, got -5",
        ),
        (
            {"backend": "sagemkaer"},
            r"unknown compute backend 'sagemkaer' \(did you mean 'sagemaker'\?\): use one of local,",
        ),
        ({"backend": "Local"}, r"unknown compute backend 'Local' \(did you mean 'local'\?\): use one of"),
        (
            {"backend_options": {"capacity_fil": "/tmp/capacity"}},
            r"backend_options 'capacity_fil' is not an option of the local backend \(did you mean",
        ),
        ({"market": "spto"}, "market 'spto' is not one of spot, on_demand"),
        ({"priority": "high"}, "priority 'high' is unknown; choose one of critical, normal, best_effort"),
        ({"poll_interval": 0}, "poll_interval must be seconds > 0, got 0"),
        ({"budget_scope": "flight-delays"}, "scope part 'flight-delays' of 'flight-delays' is not key=value"),
        # Written out, these passed the parse and failed the task only when it ran (after a spend gate).
        ({"deadline": "2026-12-01T08:00:00"}, "deadline 2026-12-01T08:00:00 has no time zone"),
        ({"deadline": datetime(2026, 12, 1, 8)}, "deadline 2026-12-01T08:00:00 has no time zone"),
        ({"deadline": "tomorrow 8am"}, "deadline 'tomorrow 8am' is not ISO-8601"),
        ({"latest_start": "2026-12-01T06:00:00"}, "latest_start 2026-12-01T06:00:00 has no time zone"),
        (
            {"deadline": "2026-12-01T08:00:00Z", "latest_start": "2026-12-01T09:00:00Z"},
            r"latest_start 2026-12-01T09:00:00\+00:00 is after the deadline 2026-12-01T08:00:00\+00:00",
        ),
        # Before, a command took any interval: "fast" failed at the first submit with a raw ValueError,
        # and -5 launched a job that failed on it.
        *(
            (
                {"checkpoint_every_seconds": bad},
                f"checkpoint_every_seconds must be a number > 0, 'auto' or None, got {bad!r}",
            )
            for bad in ("fast", -5, 0, "60s", float("nan"), True)
        ),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        operator(tmp_path, "ok", **kwargs)


def test_a_templated_deadline_is_checked_once_rendered_not_when_parsed(tmp_path: Path) -> None:
    train = operator(tmp_path, "ok", deadline="{{ params.deadline }}", latest_start="{{ params.latest }}")
    assert train.deadline == "{{ params.deadline }}"


@pytest.mark.parametrize("every", [None, "auto", " Auto ", 60, 0.5])
def test_a_command_takes_a_checkpoint_interval_in_seconds_auto_or_none(tmp_path: Path, every: Any) -> None:
    assert operator(tmp_path, "ok", checkpoint_every_seconds=every).checkpoint_every_seconds == every


def test_the_command_and_image_are_templated_element_by_element(tmp_path: Path) -> None:
    params = {"steps": Param(4, type="integer"), "tag": Param("v7", type="string")}
    with DAG("templated_command", schedule=None, params=params):
        op = operator(
            tmp_path,
            "ok",
            command=[sys.executable, SCRIPT, "ok", "{{ params.steps }}"],
            image="team/train:{{ params.tag }}",
        )
    op.render_template_fields({**context_for(), "params": {"steps": 4, "tag": "v7"}})
    assert op.command == [sys.executable, SCRIPT, "ok", "4"] and op.image == "team/train:v7"
    result, _ = drive(op, context_for())
    assert result["metrics"]["steps"] == 4
    assert store(tmp_path).get(result["version"]).params["image"] == "team/train:v7"


def test_a_command_element_rendered_empty_is_named_with_its_template(tmp_path: Path, ledger: Any) -> None:
    # It said "... has elements that are not non-empty strings: ['']; quote numbers ('3', not 3) and drop
    # empty ones": not which element, not that a param left empty was the cause.
    with DAG("empty_script", schedule=None, params={"script": Param("", type="string")}):
        op = operator(tmp_path, "ok", command=[sys.executable, "{{ params.script }}"])
    op.render_template_fields({**context_for(), "params": {"script": ""}})
    with pytest.raises(AirflowFailException) as refused:
        drive(op, context_for())
    assert (
        f"command [{sys.executable!r}, ''] has elements that are not non-empty strings: [1] '' rendered "
        "from '{{ params.script }}': give what it reads a value, or drop the element"
    ) in str(refused.value), str(refused.value)
    assert "quote numbers" not in str(refused.value)
    assert entries(ledger) == []  # refused before any job was bought


def test_a_step_interval_is_refused_for_a_command(tmp_path: Path) -> None:
    # It was ignored in silence (a command saves on its own schedule), while trainer_params was refused.
    with pytest.raises(ConfigurationError, match="has command= and checkpoint_every_steps=100: a command"):
        operator(tmp_path, "ok", checkpoint_every_steps=100)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"model_store": "s4://ml/models"},
            "model_store 's4://ml/models' is not a location a training job can use",
        ),
        ({"model_store": "s3:///models"}, "model_store 's3:///models' names no bucket"),
        # The launcher cut it at '#': runs sharing a checkpoint prefix pruned each other's steps.
        (
            {"checkpoint_store": "s3://bkt/runs/job#1"},
            "checkpoint_store 's3://bkt/runs/job#1' holds '#', which ends a URI's path: it would name the "
            "same place as 's3://bkt/runs/job'",
        ),
        (
            {"checkpoint_store": "ckpt"},
            "checkpoint_store 'ckpt' is a relative path: it would resolve against",
        ),
        # Lost its slash to "": the jobs' spec went to /_jobs/..., their checkpoints to /<dag>/<task>/...
        ({"checkpoint_store": "/"}, "checkpoint_store '/' is the root, /, of the whole machine"),
        # Found only inside the bought job, which made its versions' folders under /.
        ({"model_store": "/"}, "model_store '/' is the root, /, of the whole machine"),
        ({"model_store": "file:///"}, "model_store 'file:///' is the root, /, of the whole machine"),
        (
            {"checkpoint_store": "file:///"},
            "checkpoint_store 'file:///' is the root, /, of the whole machine",
        ),
        (
            {"model_store": "file://data/m"},
            "names the host 'data': a file URI takes three slashes, file:///data/m",
        ),
        # What {{ params.nope }} renders to: it read as the relative path "None" with an absolute one offered.
        ({"model_store": "None"}, "model_store is 'None', which names no location"),
        # As the rule every templated value follows: "null" was "a relative path" with '/.../null' offered.
        ({"model_store": "null"}, "model_store is 'null', which names no location"),
        ({"checkpoint_store": " None "}, "checkpoint_store is ' None ', which names no location"),
    ],
)
def test_a_store_written_wrong_fails_when_the_dag_is_parsed(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        operator(tmp_path, "ok", **kwargs)
    operator(tmp_path, "ok", model_store="{{ params.store }}")  # a template is checked once rendered
    operator(tmp_path, "ok", model_store="~/models")  # ~ is expanded, as the provider's stores expand it
    with pytest.raises(ConfigurationError, match="model_store 'gs://b/m' is not a location a training job"):
        operator(tmp_path, "ok", model_store="gs://b/m")  # the launcher uploads a command's outputs


def test_stores_in_a_home_are_left_to_the_worker_when_the_dag_is_parsed(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The DAG processor's home is not the worker's: one with no home at all (HOME unset, a uid with no
    # passwd entry) failed the whole DAG file for the documented '~/models', one with HOME=/ refused '~'.
    import pwd

    monkeypatch.delenv("HOME", raising=False)
    real = pwd.getpwuid

    def no_entry(uid: int) -> None:
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    operator(tmp_path, "ok", model_store="~/models", checkpoint_store="~/ckpt")
    monkeypatch.setattr(pwd, "getpwuid", real)
    monkeypatch.setenv("HOME", "/")
    train = operator(tmp_path, "ok", model_store="~", checkpoint_store=str(tmp_path / "ckpt"))
    # On the worker, where HOME=/ too, it is refused before any job is bought.
    with pytest.raises(AirflowFailException, match=re.escape("model_store '~' is the root, /, of the whole")):
        drive(train, context_for())
    assert not (tmp_path / "jobs").exists() and ledger.open_reservations() == []


def test_a_rendered_checkpoint_store_at_a_home_that_is_the_root_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "~" reached the job's start as it was and expand_home made it "/" (HOME=/, as with OpenShift's random
    # uids): each job's spec and checkpoints went into folders made under /.
    monkeypatch.setenv("HOME", "/")
    train = operator(tmp_path, "ok", checkpoint_store="{{ params.ckpt }}")
    train.checkpoint_store = "~"  # as Airflow renders it
    refused = (
        "task 'train': checkpoint_store '~' is the root, /, of the whole machine (the home folder ~ is '/'"
    )
    with pytest.raises(ConfigurationError, match=re.escape(refused)):
        train.checkpoint_root()  # what the job's start reads first, before any folder is checked or made
    monkeypatch.setenv("HOME", str(tmp_path))
    assert train.checkpoint_root() == "~"  # expanded where it is used, to a home of its own


@pytest.mark.parametrize(("rendered", "home"), [("/", None), ("file:///", None), ("~", "/")])
def test_a_rendered_model_store_at_the_machines_root_fails_before_any_job_is_bought(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, rendered: str, home: str | None
) -> None:
    # It was found only inside the bought job, which made its versions' folders directly under /.
    import costaware_runtime.stores

    if home is not None:
        monkeypatch.setenv("HOME", home)
    checked = costaware_runtime.stores.check_writes

    def check_writes(folder: Path) -> Any:  # never a write check in the real /
        assert Path(folder) != Path("/"), "the root's write was checked"
        return checked(folder)

    monkeypatch.setattr(costaware_runtime.stores, "check_writes", check_writes)
    train = operator(tmp_path, "ok", model_store="{{ params.store }}")
    train.model_store = rendered  # as Airflow renders it
    with pytest.raises(AirflowFailException) as failed:
        drive(train, context_for())
    assert str(failed.value).startswith(
        f"task 'train': model_store {rendered!r} is the root, /, of the whole machine"
    )
    assert not (tmp_path / "jobs").exists()  # no job was started
    assert entries(ledger) == [] and ledger.open_reservations() == []  # nothing billed or held


def test_a_local_store_no_job_could_write_fails_before_any_job_is_bought(tmp_path: Path, ledger: Any) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    train = operator(tmp_path, "ok", model_store=str(tmp_path / "a-file" / "models"))  # fine when parsed
    with pytest.raises(AirflowFailException) as failed:
        drive(train, context_for())
    assert str(failed.value).startswith(
        f"model_store {str(tmp_path / 'a-file' / 'models')!r} cannot be created: "
        f"{str(tmp_path / 'a-file')!r} is a file, not a folder; give a folder path"
    )
    assert not (tmp_path / "jobs").exists()  # no job was started
    assert entries(ledger) == [] and ledger.open_reservations() == []  # nothing billed or held


@pytest.mark.timeout(60)
def test_a_checkpoint_store_on_a_hung_mount_is_retried_before_any_money_or_job(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's write check as the task starts had no bound: a hung NFS mount held the task there for good.
    mount = tmp_path / "nfs"
    mount.mkdir()
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "1")
    train = operator(tmp_path, "ok", checkpoint_store=str(mount / "ckpt"))
    with hung_mount(monkeypatch, mount), pytest.raises(StoreUnavailableError) as caught:
        drive(train, context_for())  # not AirflowFailException: the task's retry checks the mount again
    assert str(caught.value).startswith(
        f"checkpoint_store {str(mount / 'ckpt')!r} could not be checked: the filesystem holding "
        f"{str(mount / 'ckpt')!r} has not answered for 1 s (COSTAWARE_STORE_STALL_SECONDS sets how long); "
    )
    assert not (tmp_path / "jobs").exists()  # no job was started
    assert entries(ledger) == [] and ledger.open_reservations() == []  # nothing billed or held


def job_env_options(tmp: Path, **env: str) -> dict[str, Any]:
    """The local backend's options of :func:`operator`, with ``env`` added to what its jobs get."""
    options = command_operator_args(tmp, "ok")["backend_options"]
    return {**options, "env": {**options["env"], **env}}


@pytest.mark.timeout(60)
def test_a_stall_bound_the_task_sets_for_its_job_bounds_the_start_check_too(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # COSTAWARE_STORE_STALL_SECONDS in backend_options["env"] reached the job's launcher, while the check as
    # the task starts read the worker's own (here 30 s; unset, the default 300 s): held that long on a hung
    # mount, said to be bounded by a value the task had not asked for.
    mount = tmp_path / "nfs"
    mount.mkdir()
    monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "30")
    options = job_env_options(tmp_path, COSTAWARE_STORE_STALL_SECONDS="1")
    train = operator(tmp_path, "ok", checkpoint_store=str(mount / "ckpt"), backend_options=options)
    started = time.monotonic()
    with hung_mount(monkeypatch, mount), pytest.raises(StoreUnavailableError) as caught:
        drive(train, context_for())
    assert time.monotonic() - started < 20
    assert f"{str(mount / 'ckpt')!r} has not answered for 1 s (COSTAWARE_STORE_STALL_SECONDS" in str(
        caught.value
    )
    assert not (tmp_path / "jobs").exists()  # no job was started
    assert entries(ledger) == [] and ledger.open_reservations() == []  # nothing billed or held


@pytest.mark.parametrize("value", ["5m", "0", "-1"])
def test_a_stall_bound_the_task_sets_badly_for_its_job_is_refused_naming_it(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # The job's launcher refuses it (exit 2); the check as the task starts read the worker's (unset) instead.
    monkeypatch.delenv("COSTAWARE_STORE_STALL_SECONDS", raising=False)
    options = job_env_options(tmp_path, COSTAWARE_STORE_STALL_SECONDS=value)
    train = operator(tmp_path, "ok", backend_options=options)
    with pytest.raises(AirflowFailException) as failed:
        drive(train, context_for())
    assert (
        f"COSTAWARE_STORE_STALL_SECONDS={value!r} is not a number of seconds > 0: give how long a checkpoint "
        "push or restore may move nothing before it is given up (default 300); the task's "
        "backend_options['env'] sets it for its job: fix it there"
    ) in str(failed.value)
    assert not (tmp_path / "jobs").exists()  # no job was started
    assert entries(ledger) == [] and ledger.open_reservations() == []  # nothing billed or held


@pytest.mark.parametrize("shape", ["list of pairs", "text"])
def test_a_jobs_env_that_is_no_dict_fails_before_any_money_or_job(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    # A list of pairs (which the local backend's dict(env) took) was passed over by the start check, which
    # read its stall bound from the worker's environment; text was a bare ValueError at the first submit.
    monkeypatch.delenv("COSTAWARE_STORE_STALL_SECONDS", raising=False)
    options = job_env_options(tmp_path)
    pairs = [*options["env"].items(), ("COSTAWARE_STORE_STALL_SECONDS", "5m")]
    written = pairs if shape == "list of pairs" else "COSTAWARE_STORE_STALL_SECONDS=5m"
    # As JSON text, what a template of the options renders: written out, it is refused as the DAG is parsed.
    text = json.dumps({**options, "env": written})
    env = json.loads(text)["env"]
    train = operator(tmp_path, "ok", backend_options=text)
    with pytest.raises(AirflowFailException) as failed:
        drive(train, context_for())
    assert (
        "backend_options['env'] of the local backend must be a dict of variable name to string value, such "
        f"as {{'PYTHONPATH': '/srv/trainer'}}: got the {type(env).__name__} {env!r}"
    ) in str(failed.value)
    assert not (tmp_path / "jobs").exists()  # no job was started
    assert entries(ledger) == [] and ledger.open_reservations() == []  # nothing billed or held


LOCAL_ENV_REFUSED = (
    "backend_options['env'] of the local backend must be a dict of variable name to string value, such as "
    "{'PYTHONPATH': '/srv/trainer'}: got the "
)
SAGEMAKER_OPTIONS = {"role_arn": "arn:aws:iam::123456789012:role/train", "output_s3_uri": "s3://ml/out"}


@pytest.mark.parametrize(
    ("backend", "options", "message"),
    [
        ("local", {"env": "OWN_TRAIN_LOG=/tmp/seen"}, LOCAL_ENV_REFUSED + "str 'OWN_TRAIN_LOG=/tmp/seen'"),
        ("local", {"env": [("A", "1")]}, LOCAL_ENV_REFUSED + "list [('A', '1')]"),
        (
            "sagemaker",
            {**SAGEMAKER_OPTIONS, "environment": [("A", "1")]},
            "backend_options['environment'] of the sagemaker backend must be a dict of variable name to "
            "string value, such as {'PYTHONPATH': '/opt/ml/code'}: got the list [('A', '1')]",
        ),
        (
            "sagemaker",
            {**SAGEMAKER_OPTIONS, "environment": {"EPOCHS": 5, "RUN": "{{ run_id }}"}},
            "backend_options['environment'] of the sagemaker backend gives 'EPOCHS' the int 5: SageMaker "
            "takes only string values; write it as '5'",
        ),
        (
            "sagemaker",
            {**SAGEMAKER_OPTIONS, "environment": {"DEBUG": None}},
            "backend_options['environment'] of the sagemaker backend gives 'DEBUG' None: SageMaker takes "
            "only string values; leave the variable out to have it unset, or give it a string",
        ),
        (
            "sagemaker",
            {**SAGEMAKER_OPTIONS, "environment": {"DEBUG": True}},
            "backend_options['environment'] of the sagemaker backend gives 'DEBUG' the bool True: SageMaker "
            "takes only string values; write it as the text the job reads, such as 'true' or 'false'",
        ),
    ],
)
def test_a_jobs_env_written_out_as_no_dict_is_refused_when_the_dag_is_parsed(
    tmp_path: Path, backend: str, options: dict[str, Any], message: str
) -> None:
    # It passed the parse and failed the task only as it started, after its spot window wait: a DAG whose
    # every run fails, shown nowhere in `airflow dags list-import-errors`.
    with pytest.raises(ConfigurationError) as caught:
        operator(tmp_path, "ok", backend=backend, backend_options=options)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("backend", "options"),
    [
        ("local", {"env": "{{ params.job_env }}"}),
        ("local", {"env": {"RUN": "{{ run_id }}"}}),
        ("sagemaker", {**SAGEMAKER_OPTIONS, "environment": "{{ params.job_env }}"}),
        ("sagemaker", {**SAGEMAKER_OPTIONS, "environment": {"EPOCHS": "{{ params.epochs }}"}}),
    ],
)
def test_a_jobs_env_airflow_renders_is_left_to_the_task(
    tmp_path: Path, backend: str, options: dict[str, Any]
) -> None:
    # A template renders as the task runs (a dict param, a value of its own): checked then, once rendered.
    train = operator(tmp_path, "ok", backend=backend, backend_options=options)
    assert train.backend_options == options


BATCH_OPTIONS = {"spot_queue": "s", "on_demand_queue": "o", "job_definition": "d"}
SAGEMAKER_TAGS = "backend_options['tags'] of the sagemaker backend "


@pytest.mark.parametrize(
    ("backend", "options", "message"),
    [
        (
            "sagemaker",
            {**SAGEMAKER_OPTIONS, "tags": "team=ml"},
            SAGEMAKER_TAGS + "must be a dict of tag key to string value, such as {'team': 'ml'}: got the str "
            "'team=ml'",
        ),
        (
            "sagemaker",
            {**SAGEMAKER_OPTIONS, "tags": [{"Key": "team", "Value": "{{ params.team }}"}]},
            SAGEMAKER_TAGS + "must be a dict of tag key to string value: got the list [{'Key': 'team', "
            "'Value': '{{ params.team }}'}]; write it as {'team': '{{ params.team }}'}",
        ),
        (
            "sagemaker",
            {**SAGEMAKER_OPTIONS, "tags": {"epochs": 5, "run": "{{ run_id }}"}},
            SAGEMAKER_TAGS + "gives 'epochs' the int 5: AWS takes only string values; write it as '5'",
        ),
        (
            "sagemaker",
            {**SAGEMAKER_OPTIONS, "tags": {"{{ params.key }}": "ml"}},  # Airflow never renders a key
            SAGEMAKER_TAGS
            + "has the key '{{ params.key }}' with '{', '}', which SageMaker refuses in tags: use "
            "letters, digits, spaces and _ . : / = + - @ only",
        ),
        (
            "kubernetes",
            {"image": "i", "node_selector": {"gpus": 1, "pool": "{{ params.pool }}"}},
            "backend_options['node_selector'] of the kubernetes backend gives 'gpus' the int 1: node label "
            "values are strings; write it as '1'",
        ),
        (
            "kubernetes",
            {"image": "i", "node_selector": {"team ml": "{{ params.team }}"}},
            "backend_options['node_selector'] of the kubernetes backend has the key 'team ml', which is no "
            "Kubernetes label: a name of 1 to 63 letters, digits, '-', '_' or '.' that starts and ends with "
            "a letter or digit, after an optional lowercase DNS subdomain and '/' (e.g. 'example.com/team')",
        ),
        (
            "batch",
            {**BATCH_OPTIONS, "tags": {f"t{n}": "{{ params.team }}" for n in range(48)}},
            "backend_options['tags'] of the batch backend has 48 tags: a job takes 50 and keeps 3 for "
            "costaware's own, so at most 47; drop 1 of them",
        ),
    ],
)
def test_tags_or_node_labels_written_out_that_would_be_refused_fail_the_dag_parse(
    tmp_path: Path, backend: str, options: dict[str, Any], message: str
) -> None:
    # They passed the parse and failed every run only as its task started (or at the submit, with its money
    # reserved), shown nowhere in `airflow dags list-import-errors`.
    with pytest.raises(ConfigurationError) as caught:
        operator(tmp_path, "ok", backend=backend, backend_options=options)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("backend", "options"),
    [
        ("sagemaker", {**SAGEMAKER_OPTIONS, "tags": "{{ params.tags }}"}),
        ("sagemaker", {**SAGEMAKER_OPTIONS, "tags": {"run": "{{ run_id }}", "team": "ml"}}),
        ("batch", {**BATCH_OPTIONS, "tags": {f"t{n}": "{{ params.team }}" for n in range(47)}}),
        ("kubernetes", {"image": "i", "node_selector": "{{ params.node_selector }}"}),
        ("kubernetes", {"image": "i", "node_selector": {"pool": "{{ params.pool }}"}}),
    ],
)
def test_tags_or_node_labels_airflow_renders_are_left_to_the_task(
    tmp_path: Path, backend: str, options: dict[str, Any]
) -> None:
    # A value rendered as the task runs ('{{ run_id }}' has characters SageMaker refuses) is checked then.
    train = operator(tmp_path, "ok", backend=backend, backend_options=options)
    assert train.backend_options == options


def test_a_local_jobs_env_from_a_dict_param_reaches_its_job(tmp_path: Path, ledger: Any) -> None:
    # Without render_template_as_native_obj the param renders to its dict's text, which every start
    # refused as no dict: a DAG that parsed and failed each run.
    job_env = {"OWN_TRAIN_LOG": str(tmp_path / "seen.jsonl")}
    with DAG("env_from_param", schedule=None, params={"job_env": Param(job_env, type="object")}):
        train = operator(
            tmp_path, "ok", backend_options={"root": str(tmp_path / "jobs"), "env": "{{ params.job_env }}"}
        )
    train.render_template_fields({**context_for(), "params": {"job_env": job_env}})
    assert train.backend_options["env"] == repr(job_env)  # as Airflow renders it
    result, _ = drive(train, context_for())
    assert result["metrics"]["steps"] == 6
    assert [attempt["attempt"] for attempt in seen(tmp_path)] == [1]  # OWN_TRAIN_LOG reached the job


def test_a_sagemaker_environment_from_a_dict_param_is_read_as_the_dict(tmp_path: Path) -> None:
    from costaware.adapters.compute.base import check_backend_options

    environment = {"EPOCHS": "5", "PYTHONPATH": "/opt/ml/code"}
    options = {**SAGEMAKER_OPTIONS, "environment": "{{ params.env }}"}
    with DAG("environment_from_param", schedule=None, params={"env": Param(environment, type="object")}):
        train = operator(tmp_path, "ok", backend="sagemaker", backend_options=options)
    train.render_template_fields({**context_for(), "params": {"env": environment}})
    args = train._plan_arguments(context_for())
    assert args.backend_options["environment"] == environment
    check_backend_options("sagemaker", args.backend_options)  # as the task starts: no error


def test_a_jobs_env_template_that_renders_no_dict_is_refused_naming_the_text(tmp_path: Path) -> None:
    from costaware.adapters.compute.base import check_backend_options

    with DAG("env_param_text", schedule=None, params={"job_env": Param("A=1", type="string")}):
        train = operator(tmp_path, "ok", backend_options={"env": "{{ params.job_env }}"})
    train.render_template_fields({**context_for(), "params": {"job_env": "A=1"}})
    args = train._plan_arguments(context_for())
    with pytest.raises(ConfigurationError) as caught:
        check_backend_options("local", args.backend_options)
    assert str(caught.value) == LOCAL_ENV_REFUSED + "str 'A=1'"


def test_a_sagemaker_environment_value_a_native_template_renders_as_a_number_is_taken_as_text(
    tmp_path: Path,
) -> None:
    # The DAG wrote a string ("{{ params.epochs }}"); render_template_as_native_obj rendered the int 5, and
    # the start refused it: "write it as '5'", which the DAG had done.
    from costaware.adapters.compute.base import check_backend_options

    written = {
        "EPOCHS": "{{ params.epochs }}",
        "RATE": "{{ params.rate }}",
        "DEBUG": "{{ params.debug }}",
        "NAME": "{{ params.name }}",
    }
    params = {"epochs": 5, "rate": 0.5, "debug": True, "name": "churn"}
    with DAG("native_environment", schedule=None, params=params, render_template_as_native_obj=True):
        train = operator(
            tmp_path, "ok", backend="sagemaker", backend_options={**SAGEMAKER_OPTIONS, "environment": written}
        )
    context = {**context_for(), "params": params}
    train.render_template_fields(context)
    native = {"EPOCHS": 5, "RATE": 0.5, "DEBUG": True, "NAME": "churn"}
    assert train.backend_options["environment"] == native
    args = train._plan_arguments(context)
    as_text = {"EPOCHS": "5", "RATE": "0.5", "DEBUG": "True", "NAME": "churn"}  # as text rendering gives them
    assert args.backend_options["environment"] == as_text
    check_backend_options("sagemaker", args.backend_options)  # as the task starts: no error


@pytest.mark.parametrize("version", ["1.10", "1e3", "0x10"])
def test_a_native_template_of_a_number_like_text_reaches_the_job_as_the_text_the_param_holds(
    tmp_path: Path, version: str
) -> None:
    # Native rendering reads '1.10' as the float 1.1; str() of it set MODEL_VERSION=1.1 without a word
    # ('1e3' became '1000.0', '0x10' '16'). The written template rendered as text gives the param's text.
    params = {"version": Param(version, type="string")}
    written = {"MODEL_VERSION": "{{ params.version }}", "TAG": "v{{ params.version }}"}
    with DAG("native_version", schedule=None, params=params, render_template_as_native_obj=True):
        train = operator(
            tmp_path, "ok", backend="sagemaker", backend_options={**SAGEMAKER_OPTIONS, "environment": written}
        )
    context = {**context_for(), "params": {"version": version}}
    train.render_template_fields(context)
    assert train.backend_options["environment"]["MODEL_VERSION"] != version  # what native rendering gives
    args = train._plan_arguments(context)
    assert args.backend_options["environment"] == {"MODEL_VERSION": version, "TAG": f"v{version}"}


@pytest.mark.parametrize("version", ["1.10", "1e3", "0x10"])
def test_a_native_template_of_a_command_argument_reaches_the_job_as_the_text_the_param_holds(
    tmp_path: Path, ledger: Any, version: str
) -> None:
    # Native rendering reads '1.10' as the float 1.1, and str() of it passed '--version 1.1' to the job
    # without a word ('1e3' became '1000.0', '0x10' '16'); as for the backend options' env and tags, the
    # written element is rendered again as text. A bool param's element reaches it as 'True', as rendered
    # without native rendering (it was refused as no string).
    params = {"version": Param(version, type="string"), "debug": Param(True, type="boolean")}
    command = [sys.executable, SCRIPT, "ok", "6", "--version", "{{ params.version }}", "{{ params.debug }}"]
    with DAG("native_command", schedule=None, params=params, render_template_as_native_obj=True):
        train = operator(tmp_path, "ok", command=command)
    context = {**context_for(), "params": {"version": version, "debug": True}}
    train.render_template_fields(context)
    assert train.command[-2:] != [version, "True"]  # what native rendering gives
    result, _ = drive(train, context)
    ran = store(tmp_path).get(result["version"]).params["command"]  # as the job was submitted
    assert ran == [sys.executable, SCRIPT, "ok", "6", "--version", version, "True"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"capacity_label": "capacity type"}, "capacity_label 'capacity type' is no Kubernetes label: "),
        (
            {"capacity_values": {"spot": "spot", "on_demand": "on demand"}},
            "capacity_values gives 'on_demand' the value 'on demand', which is no Kubernetes label value: ",
        ),
    ],
)
def test_kubernetes_capacity_labels_written_out_that_are_no_labels_are_refused_when_the_dag_is_parsed(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    # Every pod's nodeSelector carries them: each run failed as its task started.
    with pytest.raises(ConfigurationError) as caught:
        operator(tmp_path, "ok", backend="kubernetes", backend_options={"image": "i", **options})
    assert str(caught.value).startswith(message)


def test_kubernetes_capacity_labels_airflow_renders_are_left_to_the_task(tmp_path: Path) -> None:
    options = {
        "image": "i",
        "capacity_label": "{{ params.label }}",
        "capacity_values": {"spot": "{{ params.spot }}", "on_demand": "on-demand"},
    }
    train = operator(tmp_path, "ok", backend="kubernetes", backend_options=options)
    assert train.backend_options == options


LABEL_OPTIONS = [
    ("sagemaker", "tags", SAGEMAKER_OPTIONS),
    ("batch", "tags", BATCH_OPTIONS),
    ("kubernetes", "node_selector", {"image": "i"}),
]


@pytest.mark.parametrize(("backend", "name", "options"), LABEL_OPTIONS)
def test_tags_or_node_labels_from_a_dict_param_are_read_as_the_dict(
    tmp_path: Path, backend: str, name: str, options: dict[str, Any]
) -> None:
    # Without render_template_as_native_obj the param renders to its dict's text, which the start refused
    # as no dict: a DAG that parsed and failed every run.
    from costaware.adapters.compute.base import check_backend_options

    labels = {"team": "ml", "pool": "gpu-a"}
    with DAG(f"{name}_from_param", schedule=None, params={"labels": Param(labels, type="object")}):
        train = operator(
            tmp_path, "ok", backend=backend, backend_options={**options, name: "{{ params.labels }}"}
        )
    context = {**context_for(), "params": {"labels": labels}}
    train.render_template_fields(context)
    assert train.backend_options[name] == repr(labels)  # as Airflow renders it
    args = train._plan_arguments(context)
    assert args.backend_options[name] == labels
    check_backend_options(backend, args.backend_options)  # as the task starts: no error


@pytest.mark.parametrize(("backend", "name", "options"), LABEL_OPTIONS)
def test_tags_or_node_labels_a_native_template_renders_as_numbers_are_taken_as_their_text(
    tmp_path: Path, backend: str, name: str, options: dict[str, Any]
) -> None:
    # render_template_as_native_obj rendered '{{ params.epochs }}' to the int 5, and every start refused
    # it: "write it as '5'", which the DAG had done.
    from costaware.adapters.compute.base import check_backend_options

    params = {"epochs": 5, "version": "1.10", "debug": True}
    written = {
        "epochs": "{{ params.epochs }}",
        "version": "{{ params.version }}",
        "debug": "{{ params.debug }}",
    }
    with DAG(f"native_{name}", schedule=None, params=params, render_template_as_native_obj=True):
        train = operator(tmp_path, "ok", backend=backend, backend_options={**options, name: written})
    context = {**context_for(), "params": params}
    train.render_template_fields(context)
    assert train.backend_options[name] == {"epochs": 5, "version": 1.1, "debug": True}
    args = train._plan_arguments(context)
    assert args.backend_options[name] == {"epochs": "5", "version": "1.10", "debug": "True"}
    check_backend_options(backend, args.backend_options)  # as the task starts: no error


def test_a_dag_with_a_local_jobs_env_written_as_text_does_not_import(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    dag_file = tmp_path / "env_as_text.py"
    dag_file.write_text(
        "from airflow.sdk import DAG\n"
        "from costaware.operators.remote_training import RemoteTrainingOperator\n"
        "with DAG('env_as_text', schedule=None):\n"
        "    RemoteTrainingOperator(task_id='train', command=['python', 'train.py'], model_store='/srv/m',\n"
        "        checkpoint_store='/srv/c', instance_type='m5.xlarge', market='on_demand',\n"
        "        backend_options={'env': 'PYTHONPATH=/srv/trainer'})\n"
    )
    bag = DagBag(dag_folder=str(dag_file))
    assert "env_as_text" not in bag.dags
    (error,) = bag.import_errors.values()
    assert LOCAL_ENV_REFUSED + "str 'PYTHONPATH=/srv/trainer'" in error


def test_a_typo_in_backend_options_fails_before_any_money_or_job(tmp_path: Path, ledger: Any) -> None:
    # Options as JSON text (a template's) are checked once rendered; written out, when the DAG is parsed.
    options = json.dumps({"roott": str(tmp_path / "jobs")})
    train = operator(tmp_path, "ok", backend_options=options)
    with pytest.raises(AirflowFailException) as failed:
        drive(train, context_for())
    assert str(failed.value).startswith(
        "backend_options 'roott' is not an option of the local backend (did you mean 'root'?); it takes "
    )
    assert not (tmp_path / "jobs").exists()
    assert entries(ledger) == [] and ledger.open_reservations() == []


@pytest.mark.parametrize("attempts", [True, 0, "3"])
def test_max_attempts_must_be_a_whole_number(tmp_path: Path, attempts: object) -> None:
    # True was taken as 1 attempt.
    with pytest.raises(ConfigurationError, match=f"max_attempts must be an integer >= 1, got {attempts!r}"):
        operator(tmp_path, "ok", max_attempts=attempts)


@pytest.mark.parametrize(
    ("cap", "message"),
    [
        ("$0", r"max_usd must be more than \$0, got '\$0'"),
        ("-1", r"max_usd must be more than \$0, got '-1'"),
        ("ten", "max_usd must be a number of USD"),
        ("  ", "max_usd is empty: give an amount such as '25', or leave it out for no cap"),
    ],
)
def test_a_max_usd_that_pays_for_nothing_fails_when_the_dag_is_parsed(
    tmp_path: Path, cap: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        operator(tmp_path, "ok", max_usd=cap)


def test_a_max_usd_template_rendered_empty_means_no_cap_and_the_log_says_so(
    tmp_path: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    op = operator(tmp_path, "ok", max_usd="{{ params.cap }}")
    op.max_usd = ""  # as a blank param renders
    state = op._start(context_for())
    assert state.plan.max_usd is None
    assert "max_usd rendered to '': this run has no cap in dollars" in capsys.readouterr().out
    op.max_usd = "null"  # as "{{ params.cap | tojson }}" renders a blank param
    assert op._start(context_for()).plan.max_usd is None


def test_max_usd_too_small_for_one_attempt_starts_nothing(tmp_path: Path, ledger: Any) -> None:
    # $0.001 buys 36 s of spot at $0.10/hour: less than a minute beyond a 1 s grace period.
    op = operator(tmp_path, "ok", max_usd="0.001", preemption_grace_seconds=1)
    with pytest.raises(
        AirflowFailException, match=r"max_usd \$0\.001 buys less than 60 s on spot m5\.large"
    ) as e:
        op.execute(context_for())
    assert "raise max_usd to at least $0.001695; nothing was started" in str(e.value)  # 61 s at $0.10/hour
    assert not (tmp_path / "jobs").exists() and entries(ledger) == []


def test_max_usd_stops_the_attempt_before_the_cap_and_keeps_its_checkpoint(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.training import attempt_effects

    monkeypatch.setattr(attempt_effects, "MIN_CAPPED_SECONDS", 1)  # a test cannot wait a minute
    # $0.0001 buys 3.6 s at $0.10/hour: the job that would run until its notice is stopped 1 s (its grace
    # period) before that, saves and exits as preempted, and nothing is left for a second attempt.
    op = operator(tmp_path, "wait-for-notice", max_usd="0.0001", preemption_grace_seconds=1)
    spent = r"max_usd \$0\.0001 cannot start another attempt: 1 attempt\(s\) billed \$"
    with pytest.raises(AirflowFailException, match=spent) as e:
        drive(op, context_for())
    assert re.search(r"the newest checkpoint \(step \d+\) stays at .*: raise max_usd", str(e.value))
    (entry,) = entries(ledger)
    assert entry["outcome"] == "interrupted" and entry["cause"] == "max_usd"
    assert Decimal(str(entry["usd"])) <= Decimal("0.0001")
    assert [s["attempt"] for s in seen(tmp_path)] == [1]
    assert any((tmp_path / "ckpt").rglob("*")), "the checkpoint to resume from is kept"
    assert not (tmp_path / "models" / "versions").exists()
    assert ledger.open_reservations() == []


def test_a_retry_follows_the_attempt_an_earlier_try_started_even_where_the_cap_would_not_start_it(
    tmp_path: Path, ledger: Any
) -> None:
    first = operator(tmp_path, "ok", max_usd="1.00")
    started = first._submit(first._start(context_for()), "on_demand")
    assert started.current is not None
    # The cap was lowered before the retry: refusing now would leave the running job unwatched, unbilled.
    retry = operator(tmp_path, "ok", max_usd="0.000001")
    retry._retry = True  # what execute sets on a try after the first
    followed = retry._submit(retry._start(context_for(try_number=2)), "on_demand")
    assert followed.current is not None and followed.current.job_id == started.current.job_id
    assert len(list((tmp_path / "jobs").iterdir())) == 1  # nothing new was started


def test_with_no_spend_gate_the_task_reserves_its_cap_and_a_budget_short_of_it_starts_nothing(
    tmp_path: Path, ledger: Any
) -> None:
    # max_usd is the most the attempts can bill: a budget that holds it cannot be passed by them.
    ledger.set_budget("project=churn", "month", "10")
    tagged = {"budget_scope": "project=churn", "tags": {"project": "churn"}}
    op = operator(tmp_path / "a", "ok", max_usd="2", **tagged)
    op._reserve(op._start(context_for()))
    (held,) = ledger.open_reservations()
    assert held.usd == Decimal("2")
    # $1.50 left of a $3.50 budget cannot hold a $2 cap: refused before any job.
    ledger.set_budget("project=churn", "month", "3.50")
    short = operator(tmp_path / "b", "ok", max_usd="2", **tagged)
    with pytest.raises(AirflowFailException, match="project=churn"):
        short.execute(context_for(run_id="manual__short"))
    assert not (tmp_path / "b" / "jobs").exists()


def test_a_retry_with_budget_scope_reserves_what_is_left_of_its_cap_after_its_earlier_tries(
    tmp_path: Path, ledger: Any
) -> None:
    # The retry follows the jobs its earlier tries started, which count against max_usd again in it.
    ledger.set_budget("project=churn", "month", "10")
    tagged = {"budget_scope": "project=churn", "tags": {"project": "churn"}}
    result, _ = drive(operator(tmp_path, "ok", max_usd="2", **tagged), context_for())
    billed = Decimal(result["usd"])
    assert billed > 0 and ledger.open_reservations() == []
    retry = operator(tmp_path, "ok", max_usd="2", **tagged)
    retry._reserve(retry._start(context_for(try_number=2)))
    (held,) = ledger.open_reservations()
    assert held.usd == Decimal(2) - billed


def test_an_attempt_billed_while_the_task_holds_its_cap_is_counted_once_in_the_budgets(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hold stays at max_usd until the task ends: attempt 1's entry counted as spent and held, so the
    # budget showed more committed than the task can ever spend, and refused other tasks for it.
    from costaware.operators.remote_attempts import RemoteAttemptSteps

    ledger.set_budget("project=churn", "month", "10")
    seen_after: list[tuple[Decimal, Decimal]] = []
    record = RemoteAttemptSteps._record_attempt

    def counted(self: Any, state: Any, job: Any, cause: str) -> Any:
        recorded = record(self, state, job, cause)
        (usage,) = ledger.usage("project=churn")
        seen_after.append((usage.spent_usd, usage.reserved_usd))
        return recorded

    monkeypatch.setattr(RemoteAttemptSteps, "_record_attempt", counted)
    tagged = {"budget_scope": "project=churn", "tags": {"project": "churn"}}
    result, _ = drive(operator(tmp_path, "preempt-once", max_usd="2", **tagged), context_for())
    assert [a["cause"] for a in result["attempts"]] == ["preemption", "success"]
    (first_spent, first_held), _ = seen_after
    assert first_spent > 0 and first_spent + first_held == Decimal(2)  # the cap, never more
    paid = [
        e for e in ledger.entries() if e["task_id"] == "train" and e["price_source"].startswith("remote:")
    ]
    assert len(paid) == 2 and len({e["reservation_id"] for e in paid}) == 1 and paid[0]["reservation_id"]


def test_a_budget_scope_the_attempts_are_not_tagged_with_starts_nothing(tmp_path: Path, ledger: Any) -> None:
    # The attempts' entries carried no project tag: the reservation was settled and the budget never charged.
    ledger.set_budget("project=churn", "month", "10")
    untagged = operator(tmp_path, "ok", max_usd="2", budget_scope="project=churn")
    with pytest.raises(
        AirflowFailException,
        match=r"budget_scope reserves in scope 'project=churn', but task 'train' records its cost not tagged "
        r"'project' \(its tags: none\): the budget would never be charged. Tag the DAG 'project:churn' or "
        r"give the run param project='churn'",
    ):
        untagged.execute(context_for())
    assert ledger.open_reservations() == [] and not (tmp_path / "jobs").exists()


def test_a_grace_period_longer_than_the_spot_notice_is_warned_about_on_aws_backends() -> None:
    from costaware.operators.remote_training import grace_warning

    assert "longer than the 120 s AWS leaves" in str(grace_warning("batch", 100000))
    assert grace_warning("sagemaker", 110) is None
    assert grace_warning("kubernetes", 600) is None  # its own terminationGracePeriodSeconds


def test_the_task_logs_metrics_one_way_quoting_names_with_commas_equals_signs_or_blanks() -> None:
    from costaware.operators.remote_command import format_metrics

    said = format_metrics({"rmse": 0.5, "AP@IoU=0.50": 0.41, "prec@k=5,10": 0.7, "val loss": 1.25})
    assert said == "'AP@IoU=0.50'=0.41, 'prec@k=5,10'=0.7, rmse=0.5, 'val loss'=1.25"
