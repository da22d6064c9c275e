"""Pause and resume on the live path: a real local spot job is stopped through a price spike and resumed.

The spot price comes from a recorded price file that the test appends to, as the EC2 feed would change: flat
0.50 USD/h for two weeks, a spike to 3.00 once the job trains, back to 0.50 once the job was paused. The
forecast expects a spike to fade with a half-life of a day, so with two days to the deadline the rest of the
window is cheaper than running through it. The history is flat, so the forecast is the same at every hour of
the day and the test needs no frozen clock (the training runs in real subprocesses that bill by the real
clock).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from remote_support import context_for, drive, local_operator_args, write_data

from costaware.adapters.model_store import ModelStore
from costaware.adapters.spot_prices import load_spot_history
from costaware.core.ledger import utcnow
from costaware.core.spot_decision import SpotDecision
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.training.attempts import AttemptState, Current
from costaware.training.plan import RemotePlan, billing_plan

HEADER = "timestamp,region,availability_zone,instance_type,product_description,usd_per_hour\n"
STEP_SECONDS, STEPS, EVERY_SECONDS = 0.25, 24, 1.0


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


def record(path: Path, price: str, at: datetime | None = None) -> None:
    at = at or datetime.now(timezone.utc)
    with path.open("a") as f:
        f.write(f"{at.isoformat()},us-east-1,us-east-1a,m5.large,Linux/UNIX,{price}\n")


def flat_history(path: Path) -> None:
    path.write_text(HEADER)
    start = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(weeks=2)
    for hour in range(14 * 24):
        record(path, "0.50", start + timedelta(hours=hour))
    record(path, "0.50", datetime.now(timezone.utc) - timedelta(seconds=5))


def operator(tmp: Path, price_file: Path, **kwargs: Any) -> RemoteTrainingOperator:
    now = utcnow()
    args: dict[str, Any] = {
        **local_operator_args(tmp),
        "trainer": "slow_trainer.SlowSGDTrainer",
        "trainer_params": {
            "epochs": STEPS,
            "batch_size": 512,
            "step_seconds": STEP_SECONDS,
            "progress_file": str(tmp / "progress.txt"),
        },
        "checkpoint_every_seconds": EVERY_SECONDS,
        "spot_decision": {
            "market": "spot",
            "usd_per_hour": "0.50",
            "on_demand_usd_per_hour": "2.00",
            "instance_type": "m5.large",
            "region": "us-east-1",
            "availability_zone": "us-east-1a",
            "expected_runtime_hours": "1",
            "deadline": (now + timedelta(hours=48)).isoformat(),
            "latest_start": (now + timedelta(hours=46, minutes=55)).isoformat(),
        },
        "pause_on_price": True,
        "prices": str(price_file),
        "restart_overhead_minutes": 5,
        "poll_interval": 0.2,
        "max_attempts": 5,
        **kwargs,
    }
    return RemoteTrainingOperator(**args)


class PriceMover:
    """Spikes the price once the first job trains; drops it back once that job has stopped."""

    def __init__(self, prices: Path, jobs: Path, progress: Path) -> None:
        self.prices, self.jobs, self.progress = prices, jobs, progress
        self.spiked_at: float | None = None
        self.dropped_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            firsts = sorted(self.jobs.glob("*-a1")) if self.jobs.exists() else []
            job = firsts[0] if firsts else None
            # Its first step logged, not its process started: on a loaded machine the job's imports took
            # longer than the wait below, and the pause ended it before any step (nothing to resume from).
            trains = job is not None and self.progress.exists() and self.progress.stat().st_size > 0
            if self.spiked_at is None and trains:
                time.sleep(6 * STEP_SECONDS)  # a checkpoint or so in
                record(self.prices, "3.00")
                self.spiked_at = time.time()
            elif self.spiked_at is not None and self.dropped_at is None and (job / "exit.json").exists():
                time.sleep(1.0)  # the resume wait sees the spike first, and must not start on it
                record(self.prices, "0.50")
                self.dropped_at = time.time()
                return
            time.sleep(0.05)

    def __enter__(self) -> PriceMover:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def prices(tmp_path: Path) -> Iterator[Path]:
    write_data(tmp_path / "data", rows=3000)
    path = tmp_path / "prices.csv"
    flat_history(path)
    yield path


def test_a_price_spike_pauses_the_spot_job_and_it_resumes_from_its_checkpoint(
    tmp_path: Path, prices: Path, ledger: Any
) -> None:
    # Deferrable; the in-worker wait (deferrable=False) polls through the same trigger.poll_once and acts
    # through the same _on_event, so one run covers both (each run costs about 20 s of real training).
    with PriceMover(prices, tmp_path / "jobs", tmp_path / "progress.txt") as mover:
        result, deferrals = drive(operator(tmp_path, prices), context_for(), timeout=120)
    assert deferrals == 4  # running (pause), stopping, paused (resume), running again
    assert mover.spiked_at is not None and mover.dropped_at is not None

    first, second = result["attempts"]
    assert (first["market"], first["cause"]) == ("spot", "paused")
    assert (second["market"], second["cause"]) == ("spot", "success")
    assert result["steps"] == STEPS
    assert ModelStore.open(str(tmp_path / "models")).get(result["version"]).mode == "full"
    # The pause pushed a checkpoint there that the second attempt resumed (below); with the model stored, the
    # run's checkpoints are deleted.
    assert (tmp_path / "ckpt" / "remote_dag" / "train").is_dir()
    assert not (tmp_path / "ckpt" / "remote_dag" / "train" / "scheduled__2026-01-01" / "-1").exists()
    # The resume came after the price dropped, never on the spike.
    second_started = float((tmp_path / "jobs" / second["job_id"] / "started").read_text())
    assert second_started >= mover.dropped_at
    # It resumed from a checkpoint (the stop's SIGTERM writes one): at most a checkpoint interval is redone.
    logged = [line.split() for line in (tmp_path / "progress.txt").read_text().splitlines()]
    before = [int(step) for step, at in logged if float(at) < second_started]
    after = [int(step) for step, at in logged if float(at) >= second_started]
    assert before and after[0] > 1
    assert max(before) - (after[0] - 1) <= EVERY_SECONDS / STEP_SECONDS
    rows = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert sorted(e["cause"] for e in rows) == ["paused", "success"]
    assert sum(Decimal(str(e["usd"])) for e in rows) == Decimal(result["usd"]) > 0
    # Each attempt is billed at the mean price in force over its run, the seconds of the spike before the
    # pause included, not at the price it started on; never above on-demand ($2.00), where AWS would have
    # interrupted it.
    series = load_spot_history(str(prices)).series("m5.large", "us-east-1", "us-east-1a")
    unit = {e["cause"]: Decimal(str(e["unit_price_usd"])) for e in rows}
    for attempt in (first, second):
        ran = json.loads((tmp_path / "jobs" / attempt["job_id"] / "exit.json").read_text())
        start, end = (datetime.fromtimestamp(ran[k], tz=timezone.utc) for k in ("started_at", "stopped_at"))
        # The operator takes the start as the end less the billed seconds, which can land a microsecond
        # off the job's own start time: equal to the ledger's resolution, the micro-dollar.
        expected = min(series.mean_usd_per_hour(start, end), Decimal("2.00"))
        assert abs(unit[attempt["cause"]] - expected) <= Decimal("0.000001")
    assert Decimal("0.50") < unit["paused"] <= Decimal("2.00") and unit["success"] == Decimal("0.50")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prices": None}, "pause_on_price needs spot prices: pass prices='live'"),
        ({"expected_runtime_hours": "-1"}, "pause_on_price needs the expected runtime, got '-1'"),
        ({"pause_on_price": "sometimes"}, "pause_on_price"),
        ({"priority": "urgent"}, "priority 'urgent' is unknown"),
    ],
)
def test_bad_pause_settings_fail_before_any_job_starts(
    tmp_path: Path, prices: Path, ledger: Any, kwargs: dict[str, Any], message: str
) -> None:
    # A priority written out is refused when the DAG is parsed; here it comes as a template renders it.
    rendered = {"priority": kwargs.pop("priority")} if "priority" in kwargs else {}
    op = operator(tmp_path, prices, **kwargs)
    for name, value in rendered.items():
        setattr(op, name, value)
    with pytest.raises(AirflowFailException) as e:
        op.execute(context_for())
    assert message in str(e.value)
    assert not (tmp_path / "jobs").exists()
    assert ledger.entries() == []


def test_price_event_pauses_resumes_and_falls_back_to_on_demand_at_the_latest_resume() -> None:
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger, price_event

    at = datetime(2026, 11, 24, 0, 30, tzinfo=timezone.utc)
    watch = {
        "mode": "pause",
        "on_demand_usd_per_hour": "2.00",
        "latest_resume": (at + timedelta(hours=3)).isoformat(),
        "remaining_hours": "1",
        "restart_overhead_minutes": 6,
        "priority": "normal",
    }
    starts = [[(at + timedelta(hours=h)).isoformat(), "0.50"] for h in (1, 2, 3)]
    state = {"attempts": []}

    def event(price: str | None, now: datetime = at, **changes: Any) -> dict[str, Any] | None:
        return price_event(
            {**watch, **changes},
            state,
            now=now,
            usd_per_hour=None if price is None else Decimal(price),
            available=True,
            source="recorded prices.csv",
            forecast_starts=starts,
        )

    # 1 h at 0.60 (0.60 USD) against 0.50 x 1.1 h (0.55): within the normal margin; 0.70 is not.
    assert event("0.60") is None
    paused = event("0.70")
    assert paused is not None and "well above the forecast minimum 0.50" in paused["pause"]
    assert paused["state"] == state
    assert event("0.70", priority="critical") is None
    assert event(None) is None  # no price read: the job runs on

    assert event("0.70", mode="resume") is None  # a later start is forecast cheaper: keep waiting
    resumed = event("0.50", mode="resume")
    assert resumed is not None and resumed["resume"]["market"] == "spot"
    assert resumed["resume"]["price_source"] == "recorded"
    late = event(None, mode="resume", now=at + timedelta(hours=3))
    assert late is not None and late["resume"]["market"] == "on_demand"

    with pytest.raises(ValueError, match="needs a price_watch"):
        RemoteTrainingJobTrigger(backend="local", backend_options={}, job_id=None, state={})


def test_a_paused_job_whose_backend_forgot_it_ends_billed_up_to_the_look_that_found_it_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A Kubernetes pause deletes the pod: once the container has checkpointed and exited, the pod can be gone
    # before a poll reads its end. The wait must end the attempt (billed from the status seen at the pause),
    # not fail the task.
    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    class PodGone:
        def poll(self, job_id: str) -> JobStatus:
            raise JobNotFoundError(f"pod {job_id!r} is not in namespace 'ml'")

    monkeypatch.setattr(compute, "open_backend", lambda name, options: PodGone())
    paused_at = datetime(2026, 11, 24, 0, 30, tzinfo=timezone.utc)
    seen = JobStatus("train-a2", JobState.RUNNING, 600.0, "spot", "g5.xlarge", "Running")
    current = {"attempt": 2, "job_id": "train-a2", "market": "spot", "pausing": "price rose"}
    stopped = {"job": seen.to_dict(), "seen_at": paused_at.isoformat()}
    trigger = RemoteTrainingJobTrigger(
        "kubernetes", {}, "train-a2", {"current": {**current, "stopped": stopped}}
    )

    event = trigger.poll_once(paused_at + timedelta(seconds=45))
    assert event is not None and event["status"] == "success" and not event["fallback"]
    job = event["job"]
    assert job["state"] == "interrupted" and job["market"] == "spot" and job["instance_type"] == "g5.xlarge"
    assert job["billable_seconds"] == 645.0  # never less than it ran: at most one poll more
    assert job["ended_at"] == (paused_at + timedelta(seconds=45)).timestamp()
    # Gone without a stop of ours (nothing to bill it from): the error stays, and the task fails with it.
    with pytest.raises(JobNotFoundError, match="train-a2"):
        RemoteTrainingJobTrigger("kubernetes", {}, "train-a2", {"current": current}).poll_once(paused_at)


@pytest.mark.parametrize("pause_on_price", [True, False])
def test_with_prices_a_spot_attempt_is_billed_at_the_mean_price_over_its_run(
    tmp_path: Path, prices: Path, capsys: pytest.CaptureFixture[str], pause_on_price: bool
) -> None:
    # The price rose from 0.50 to 1.50 half-way through a one-hour attempt: it is billed 1.00 USD/hour,
    # with or without pausing, since it is the price file that tells.
    ended = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=2)
    record(prices, "1.50", ended - timedelta(minutes=30))
    op = operator(tmp_path, prices, pause_on_price=pause_on_price)
    args = op._plan_arguments(context_for())
    plan = RemotePlan(
        backend="local",
        instance_type="m5.large",
        region="us-east-1",
        on_demand_usd_per_hour="2.00",
        first_market="spot",
        billing=billing_plan(args, SpotDecision.from_xcom(op.spot_decision), backend="local"),
    )
    state = AttemptState(plan=plan, spot_usd_per_hour="0.50")
    job = {"billable_seconds": 3600.0, "ended_at": ended.timestamp()}
    assert op._billed_spot_rate(state, job) == Decimal("1.00")
    # An attempt that moved to another zone (availability_zones) is billed at that zone's prices.
    with prices.open("a") as f:
        f.write(f"{(ended - timedelta(hours=3)).isoformat()},us-east-1,us-east-1b,m5.large,Linux/UNIX,1.80\n")
    assert op._billed_spot_rate(state, job) == Decimal("1.00")  # the decision's zone: still us-east-1a
    moved = replace(state, current=Current(attempt=2, job_id="j-a2", market="spot", zone="us-east-1b"))
    assert op._billed_spot_rate(moved, job) == Decimal("1.80")
    # Above on-demand AWS would have interrupted it (the default maximum price): never billed above.
    with prices.open("a") as f:
        f.write(f"{(ended - timedelta(hours=2)).isoformat()},us-east-1,us-east-1b,m5.large,Linux/UNIX,3.00\n")
    assert op._billed_spot_rate(moved, job) == Decimal("2.00")
    assert "is above on-demand 2.00: billed at on-demand" in capsys.readouterr().out
    # No series for the type (here: a type the file lacks): the starting price, and the log says why.
    other = replace(state, plan=replace(plan, instance_type="c5.large"))
    assert op._billed_spot_rate(other, job) == Decimal("0.50")
    logged = capsys.readouterr().out
    assert "starting spot price 0.50 USD/hour: prices.csv has no spot prices of c5.large" in logged
    # A recorded file that ends long before the run (the example's 2021 history) carried its last price
    # forward for years: it prices no run; the starting price does, and the log says why.
    years_later = {"billable_seconds": 3600.0, "ended_at": (ended + timedelta(days=400)).timestamp()}
    assert op._billed_spot_rate(state, years_later) == Decimal("0.50")
    assert "attempt billed at its starting spot price 0.50 USD/hour: the recorded prices in" in (
        capsys.readouterr().out
    )
    # SageMaker bills its own ml.* spot prices: no EC2 series applies.
    assert billing_plan(args, SpotDecision.from_xcom(op.spot_decision), backend="sagemaker") is None
