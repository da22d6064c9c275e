"""RemoteTrainingOperator with checkpoint_every_seconds="auto": the interval it picks, logs and passes on."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from remote_support import context_for, drive, local_operator_args, write_data

from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.operators.warm_start import WarmStartRetrainOperator
from costaware.training.attempts import NO_CHECKPOINT, Attempt


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_data(tmp_path / "data")


def decision(market: str = "spot", instance_type: str = "m5.large") -> dict[str, str]:
    return {
        "market": market,
        "usd_per_hour": "0.1" if market == "spot" else "0.4",
        "instance_type": instance_type,
        "region": "us-east-1",
        "on_demand_usd_per_hour": "0.4",
        "deadline": utcnow().replace(year=utcnow().year + 1).isoformat(),
    }


def operator(tmp: Path, **kwargs: Any) -> RemoteTrainingOperator:
    args: dict[str, Any] = {
        **local_operator_args(tmp),
        "trainer_params": {"epochs": 2, "batch_size": 512},
        "checkpoint_every_seconds": "auto",
        "spot_decision": decision(),
        "poll_interval": 0.1,
        "deferrable": False,
        **kwargs,
    }
    return RemoteTrainingOperator(**args)


def auto_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The operator's log lines about the automatic interval (Airflow's task log goes to stdout here)."""
    out = capsys.readouterr()
    return [line for line in (out.out + out.err).splitlines() if "checkpoint_every_seconds='auto'" in line]


def written_spec(tmp: Path) -> dict[str, Any]:
    (spec,) = (tmp / "ckpt" / "_jobs").rglob("spec.json")
    return json.loads(spec.read_text())


def test_auto_on_spot_takes_the_advisor_band_logs_why_and_the_job_trains_with_it(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # m5.large in us-east-1 is in the advisor's 15-20% band; without an expected runtime that share is spread
    # over the month: a mean 3,271 h between interruptions, so sqrt(2 x 30 s x 11.8e6 s) = 26,583 s, above
    # the 1 h cap.
    with pytest.raises(TaskDeferred):
        operator(tmp_path, deferrable=True).execute(context_for())
    assert written_spec(tmp_path)["checkpoint_every_seconds"] == 3600.0
    (line,) = auto_lines(capsys)
    result, _ = drive(operator(tmp_path), context_for())  # a retry: follows the same job to its end
    assert "m5.large in us-east-1 15-20%, taken as 20% of instances interrupted over a month," in line
    assert "3271.4 h between interruptions" in line and "save cost 30 s assumed" in line
    assert "= 26583 s, bounded to the 3600 s cap: 3600 s" in line
    assert result["attempts"][0]["cause"] == "success"


@pytest.mark.parametrize(
    ("kwargs", "seconds", "logged"),
    [
        # 20% of instances interrupted over a 6 h (0.5 h) run: a mean 6 h / -ln(0.8) = 26.9 h (2.2 h).
        ({"expected_runtime_hours": "6"}, 2410.0, "over the 6 h expected runtime: a mean 26.9 h"),
        ({"expected_runtime_hours": "0.5"}, 696.0, "over the 0.5 h expected runtime: a mean 2.2 h"),
        ({"checkpoint_every_seconds": " AUTO "}, 3600.0, "bounded to the 3600 s cap"),
        ({"spot_decision": decision("on_demand")}, 300.0, "'auto' on on_demand: 300 s"),
        (
            {"spot_decision": decision(instance_type="m5.nosuch")},
            3600.0,
            "no spot advisor entry for m5.nosuch in us-east-1, assumed >20%",
        ),
        ({"checkpoint_every_seconds": 42}, 42, None),
    ],
)
def test_auto_interval_by_market_runtime_and_advisor_entry(
    tmp_path: Path,
    data: Path,
    ledger: Any,
    capsys: pytest.CaptureFixture[str],
    kwargs: dict[str, Any],
    seconds: float,
    logged: str | None,
) -> None:
    state = operator(tmp_path, **kwargs)._start(context_for())
    assert state.plan.checkpoint_every_seconds == pytest.approx(seconds, abs=0.5)
    assert written_spec(tmp_path)["checkpoint_every_seconds"] == pytest.approx(seconds, abs=0.5)
    lines = auto_lines(capsys)
    if logged is None:
        assert lines == []
    else:
        (line,) = lines
        assert logged in line


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"checkpoint_every_seconds": "often"},
            "RemoteTrainingOperator 'train': checkpoint_every_seconds must be a number > 0, 'auto' or None, "
            "got 'often'",
        ),
        (
            {"checkpoint_every_seconds": "300"},
            "must be a number > 0, 'auto' or None, got '300' (a string: write 300, without quotes)",
        ),
        ({"checkpoint_every_seconds": 0}, "must be a number > 0, 'auto' or None, got 0"),
        (
            {"checkpoint_every_seconds": "{{ params.ck }}"},
            "got '{{ params.ck }}' (it is not templated: the interval is part of the DAG; write the number)",
        ),
    ],
)
def test_bad_intervals_are_refused_when_the_dag_is_parsed(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError) as e:
        operator(tmp_path, **kwargs)
    assert message in str(e.value)
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "jobs").exists()


def test_auto_in_the_worker_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigurationError, match=r"checkpoint_every_seconds='auto' sets the interval of a remote job"
    ):
        WarmStartRetrainOperator(
            task_id="retrain",
            data_path=str(tmp_path / "data"),
            label_column="y",
            feature_columns=["x1"],
            model_store=str(tmp_path / "models"),
            checkpoint_every_seconds="auto",
        )


def preempted(
    state: Any,
    *run_seconds: float,
    exit_codes: tuple[int | None, ...] = (),
    steps: tuple[tuple[int | None, int | None], ...] = (),
) -> Any:
    codes = exit_codes or (-9,) * len(run_seconds)  # hard kills: each lost the work since its last save
    steps = steps or ((None, None),) * len(run_seconds)  # the steps restored and committed: unknown
    attempts = tuple(
        Attempt(
            attempt=n,
            job_id=f"job-a{n}",
            market="spot",
            instance_type="m5.large",
            billable_seconds=seconds,
            usd="0.01",
            cause="preemption",
            reason="spot interruption",
            exit_code=code,
            restored_step=restored,
            committed_step=committed,
        )
        for n, (seconds, code, (restored, committed)) in enumerate(
            zip(run_seconds, codes, steps, strict=True), start=1
        )
    )
    return replace(state, attempts=attempts)


@pytest.mark.parametrize(
    ("kwargs", "market", "exit_codes", "seconds", "logged"),
    [
        # each run's first 300 s (the default restart overhead) were starting: 6900 s of training each,
        # sqrt(2 x 30 s x 6900 s) = 643 s: the next spot attempt checkpoints more often
        (
            {},
            "spot",
            (),
            643.4,
            "ran 7200, 7200 s (of which 6900, 6900 s training, after a 300 s restart each) and each lost "
            "the work",
        ),
        # a backend without exit codes: each may have lost it all
        ({}, "spot", (None, None), 643.4, "a mean 6900 s between losses"),
        # one of the two saved on its notice (exit 75): one loss in 13,800 s, sqrt(2 x 30 x 13800) = 910 s
        ({}, "spot", (75, -9), 910.0, "1 of them lost work (1 saved on the notice): a mean 13800 s between"),
        # both saved on their notice: no loss the interval could have kept, the planned 3600 s
        ({}, "spot", (75, 75), 3600.0, "each saved on its notice or was stopped while starting"),
        # exit 77 (preempted before any checkpoint) lost it all
        ({}, "spot", (77, 75), 910.0, "1 of them lost work"),
        # exit 75 from the checkpoint it restored (step 3 again): it lost its run; the other saved step 9
        ({"steps": ((3, 3), (3, 9))}, "spot", (75, 75), 910.0, "1 of them lost work (1 saved on the notice)"),
        ({}, "on_demand", (), 3600.0, None),  # on-demand: the planned interval, nothing to weigh
        ({"checkpoint_every_seconds": 42}, "spot", (), 42, None),  # a number is never changed
    ],
)
def test_later_spot_attempts_take_the_interval_from_the_preempted_run_lengths(
    tmp_path: Path,
    data: Path,
    ledger: Any,
    capsys: pytest.CaptureFixture[str],
    kwargs: dict[str, Any],
    market: str,
    exit_codes: tuple[int | None, ...],
    seconds: float,
    logged: str | None,
) -> None:
    op = operator(tmp_path, **{k: v for k, v in kwargs.items() if k != "steps"})
    state = preempted(
        op._start(context_for()), 7200.0, 7200.0, exit_codes=exit_codes, steps=kwargs.get("steps", ())
    )
    capsys.readouterr()
    submitted = op._submit(state, market)
    try:
        assert written_spec(tmp_path)["checkpoint_every_seconds"] == pytest.approx(seconds, abs=0.5)
        assert submitted.plan.checkpoint_every_seconds == state.plan.checkpoint_every_seconds
        lines = auto_lines(capsys)
        if logged is None:
            assert lines == []
        else:
            (line,) = lines
            assert logged in line
    finally:
        op._backend(submitted.plan).stop(submitted.current.job_id)


def pushed_saves(tmp: Path, checkpoint_uri: str, *save_seconds: float) -> None:
    """What an attempt's launcher leaves at the checkpoint URI: ``LATEST.json`` with its timed saves."""
    from costaware_runtime import checkpoint_folder, commit, push

    folder = tmp / "attempt-checkpoints"
    for step, seconds in enumerate(save_seconds, start=1):
        (checkpoint_folder(step, folder) / "state.ckpt").write_bytes(b"x")
        commit(folder, step, [checkpoint_folder(step, folder)], save_seconds=seconds)
    push(folder, checkpoint_uri)


@pytest.mark.parametrize(
    ("latest", "seconds", "logged"),
    [
        # the median of the measured saves, 120 s: sqrt(2 x 120 s x 6900 s training) = 1287 s
        ([100.0, 900.0, 120.0], 1286.9, "save cost 120 s measured (median of the last 3 save(s)"),
        (None, 643.4, "save cost 30 s assumed (none measured yet)"),  # nothing pushed yet
        ("damaged", 643.4, "save cost 30 s assumed (none measured yet)"),
    ],
)
def test_later_spot_attempts_weigh_the_saves_the_attempts_measured(
    tmp_path: Path,
    data: Path,
    ledger: Any,
    capsys: pytest.CaptureFixture[str],
    latest: list[float] | str | None,
    seconds: float,
    logged: str,
) -> None:
    op = operator(tmp_path)
    state = preempted(op._start(context_for()), 7200.0, 7200.0)
    if isinstance(latest, list):
        pushed_saves(tmp_path, state.plan.checkpoint_uri, *latest)
    elif latest == "damaged":
        Path(state.plan.checkpoint_uri).mkdir(parents=True, exist_ok=True)
        (Path(state.plan.checkpoint_uri) / "LATEST.json").write_text('{"step": "no"}')
    capsys.readouterr()
    submitted = op._submit(state, "spot")
    try:
        assert written_spec(tmp_path)["checkpoint_every_seconds"] == pytest.approx(seconds, abs=0.5)
        out = capsys.readouterr()
        lines = (out.out + out.err).splitlines()
        (line,) = [line for line in lines if "checkpoint_every_seconds='auto'" in line]
        assert logged in line
        warned = [line for line in lines if "cannot read the measured saves at" in line]
        assert len(warned) == (1 if latest == "damaged" else 0)
    finally:
        op._backend(submitted.plan).stop(submitted.current.job_id)


def test_the_newest_pushed_step_is_read_when_something_judges_what_a_run_kept(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    op = operator(tmp_path)  # "auto": its re-tune reads what each preempted run kept
    state = op._start(context_for())
    uri = state.plan.checkpoint_uri
    assert op._committed_step(state) == NO_CHECKPOINT  # nothing pushed yet: not a warning
    pushed_saves(tmp_path, uri, 5.0, 6.0)
    assert op._committed_step(state) == 2
    (Path(uri) / "LATEST.json").write_text('{"step": "no"}')
    capsys.readouterr()
    assert op._committed_step(state) is None
    out = capsys.readouterr()
    assert "cannot read the newest checkpoint at" in out.out + out.err
    assert "judged by its run length" in out.out + out.err
    # A fixed interval, one zone, no guard: nothing judges a run, nothing is read.
    fixed = operator(tmp_path / "fixed", checkpoint_every_seconds=60)
    assert fixed._committed_step(fixed._start(context_for())) is None


def test_the_auto_interval_takes_the_exact_runs_not_a_bill_that_holds_a_copy(
    tmp_path: Path, data: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two attempts that trained 7200 s each before their preemption, billed 12,600 s (a SageMaker job stopped
    # without BillableTimeInSeconds, billed from its first start, its 1.5 h wait for capacity too): read
    # from the bill they ran 12,600 s, sqrt(2 x 30 s x 12300 s) = 859 s, not 643 s.
    op = operator(tmp_path)
    state = preempted(op._start(context_for()), 12600.0, 12600.0)
    exact = tuple(replace(a, trained_runs_seconds=(7200.0,)) for a in state.attempts)
    state = replace(state, attempts=exact)
    capsys.readouterr()
    submitted = op._submit(state, "spot")
    try:
        assert written_spec(tmp_path)["checkpoint_every_seconds"] == pytest.approx(643.4, abs=0.5)
        (line,) = auto_lines(capsys)
        assert "ran 7200, 7200 s" in line
    finally:
        op._backend(submitted.plan).stop(submitted.current.job_id)
