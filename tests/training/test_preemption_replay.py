"""Preemption replay: a shared spot availability trace, in compressed time, against real local training jobs.

At every capacity drop the injector SIGTERMs or SIGKILLs the running spot training (by turns); while there is
no capacity, new spot jobs wait. The job must finish by its deadline, lose at most one checkpoint interval of
work per preemption, and the ledger's attempts must add up to what the backend reports as billable.
"""

from __future__ import annotations

import itertools
import os
import signal
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from remote_support import context_for, drive, write_data

from costaware.adapters.compute.local import LocalBackend
from costaware.adapters.compute.replay import PreemptionInjector, read_samples
from costaware.core.ledger import compute_cost, utcnow
from costaware.operators.remote_training import RemoteTrainingOperator

HERE = Path(__file__).resolve().parent
TRACE = "availability_1-node_aws-10-26-2022_us-west-2a_v100_1.json"
# From tick 1300 the trace has capacity for 7 ticks, none for 2, capacity for 6, none for 1, then for 96.
FIRST_TICK, TICKS, TICK_SECONDS = 1300, 112, 0.5
# 15 s of training is more than the first two runs of capacity together (6.5 s), so at least two preemptions
# happen however fast or slow the machine is (a job cannot do more work than its run of capacity lasts);
# the 48 s run then finishes the job.
STEP_SECONDS, STEPS, EVERY_SECONDS = 0.25, 60, 1.0
assert STEPS * STEP_SECONDS > (7 + 6) * TICK_SECONDS
PRICES = {"spot": Decimal("0.918"), "on_demand": Decimal("3.06")}


def lost_steps(progress: Path) -> list[int]:
    """Steps done but not kept, at each resume: the last step logged minus the step resumed from."""
    steps = [int(line.split()[0]) for line in progress.read_text().splitlines() if line.strip()]
    return [before - (after - 1) for before, after in itertools.pairwise(steps) if after <= before]


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


def test_replayed_trace_job_meets_deadline_loses_under_one_interval_and_ledger_reconciles(
    tmp_path: Path, ledger: Any
) -> None:
    trace = HERE / "traces" / TRACE  # a copy of the shared trace (see traces/README.md)
    write_data(tmp_path / "data", rows=4000)
    progress = tmp_path / "progress.txt"
    options = {
        "root": str(tmp_path / "jobs"),
        "env": {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])},
        "capacity_file": str(tmp_path / "capacity"),
    }
    now = utcnow()
    deadline = now + timedelta(seconds=240)
    op = RemoteTrainingOperator(
        task_id="train",
        data_path=str(tmp_path / "data"),
        label_column="y",
        feature_columns=["x1", "x2", "c"],
        model_store=str(tmp_path / "models"),
        checkpoint_store=str(tmp_path / "ckpt"),
        trainer="slow_trainer.SlowSGDTrainer",
        trainer_params={
            "epochs": STEPS,
            "batch_size": 512,
            "step_seconds": STEP_SECONDS,
            "progress_file": str(progress),
        },
        checkpoint_every_seconds=EVERY_SECONDS,
        backend_options=options,
        spot_decision={
            "market": "spot",
            "usd_per_hour": str(PRICES["spot"]),
            "on_demand_usd_per_hour": str(PRICES["on_demand"]),
            "instance_type": "p3.2xlarge",
            "region": "us-west-2",
            "deadline": deadline.isoformat(),
            "latest_start": (now + timedelta(seconds=90)).isoformat(),
        },
        max_attempts=30,
        poll_interval=0.1,
    )
    backend = LocalBackend(**options)
    samples = read_samples(trace, first_tick=FIRST_TICK, ticks=TICKS)
    with PreemptionInjector(
        backend, samples, tick_seconds=TICK_SECONDS, signals=(signal.SIGKILL, signal.SIGTERM)
    ) as injector:
        result, _ = drive(op, context_for())
    finished = utcnow()

    assert finished <= deadline
    assert result["steps"] == STEPS
    kills = injector.preemptions
    assert len(kills) >= 2, f"the replay preempted only {kills}"
    assert {k.signum for k in kills} == {signal.SIGTERM, signal.SIGKILL}
    causes = [a["cause"] for a in result["attempts"]]
    assert causes[-1] == "success" and causes.count("preemption") == len(kills)

    lost = [n * STEP_SECONDS for n in lost_steps(progress)]
    assert all(s <= EVERY_SECONDS + STEP_SECONDS for s in lost), lost
    assert sum(lost) / len(kills) <= EVERY_SECONDS, lost  # mean work lost per preemption

    # Reconcile: every job the backend ran, re-polled now, billed at its market's price.
    jobs = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert jobs == sorted(a["job_id"] for a in result["attempts"])  # no job started twice or orphaned
    reconciled = Decimal(0)
    for job_id in jobs:
        status = backend.poll(job_id)
        seconds = Decimal(str(round(status.billable_seconds, 3)))
        reconciled += compute_cost(seconds, PRICES[status.market])[1]
    entries = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert len(entries) == len(jobs)
    assert sum((Decimal(str(e["usd"])) for e in entries), Decimal(0)) == reconciled == Decimal(result["usd"])
    assert reconciled > 0
