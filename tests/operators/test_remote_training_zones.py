"""Spot across zones on the live path: a preempted attempt moves to the zone the rule chooses, the
restart-thrash guard sends a churning training to on-demand, and a plan refuses zones it cannot honour.

Real local training jobs under per-zone capacity files that ``PreemptionInjector`` replays in compressed
time (one tick = ``TICK`` seconds).
"""

from __future__ import annotations

import signal
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from remote_support import context_for, drive, local_operator_args, write_data

from costaware.adapters.compute.local import LocalBackend
from costaware.adapters.compute.replay import PreemptionInjector
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.operators.remote_training_args import parse_names

TICK = 0.5
PRICES = {"spot": "0.918", "on_demand": "3.06"}


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


def operator(tmp: Path, *, seconds: float = 6.0, **kwargs: Any) -> RemoteTrainingOperator:
    write_data(tmp / "data", rows=2000)
    args = local_operator_args(tmp)
    args["backend_options"] = {**args["backend_options"], "capacity_file": str(tmp / "capacity-{zone}")}
    now = utcnow()
    return RemoteTrainingOperator(
        **args,
        trainer="slow_trainer.SlowSGDTrainer",
        trainer_params={"epochs": int(seconds / 0.2), "batch_size": 512, "step_seconds": 0.2},
        checkpoint_every_seconds=1.0,
        spot_decision={
            "market": "spot",
            "usd_per_hour": PRICES["spot"],
            "on_demand_usd_per_hour": PRICES["on_demand"],
            "instance_type": "p3.2xlarge",
            "region": "us-west-2",
            "availability_zone": "us-west-2a",
            "deadline": (now + timedelta(seconds=240)).isoformat(),
            "latest_start": (now + timedelta(seconds=150)).isoformat(),
        },
        max_attempts=20,
        poll_interval=0.1,
        **kwargs,
    )


def replay(op: RemoteTrainingOperator, tmp: Path, traces: dict[str, list[bool]]) -> tuple[Any, Any]:
    backend = LocalBackend(**op.backend_options)  # type: ignore[arg-type]
    with PreemptionInjector(backend, traces, tick_seconds=TICK, signals=(signal.SIGKILL,)) as injector:
        result, _ = drive(op, context_for())
    return result, injector


@pytest.mark.slow
def test_a_preempted_attempt_moves_to_the_zone_with_capacity(tmp_path: Path, ledger: Any) -> None:
    # Zone a has capacity for 3 ticks (1.5 s, less than the 6 s of training), then none for long; b always.
    traces = {"us-west-2a": [True] * 3 + [False] * 400, "us-west-2b": [True] * 403}
    op = operator(tmp_path, availability_zones=["us-west-2a", "us-west-2b"], restart_overhead_minutes=0)
    result, injector = replay(op, tmp_path, traces)

    zones = [(a["market"], a["zone"], a["cause"]) for a in result["attempts"]]
    assert zones[0] == ("spot", "us-west-2a", "preemption")
    assert zones[-1] == ("spot", "us-west-2b", "success")
    assert [p.zone for p in injector.preemptions] == ["us-west-2a"]
    # Each attempt's ledger entry is in its zone's region and adds up to the result.
    entries = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert len(entries) == len(result["attempts"]) and {e["region"] for e in entries} == {"us-west-2"}
    assert sum(Decimal(str(e["usd"])) for e in entries) == Decimal(result["usd"])


@pytest.mark.slow
def test_the_guard_sends_a_churning_training_to_on_demand(tmp_path: Path) -> None:
    # Capacity for one tick out of two: every spot run ends within a tick, far below the 3 s restart
    # overhead plus the 1 s checkpoint interval, so the third attempt goes to on-demand.
    churn = [True, False] * 300
    op = operator(tmp_path, restart_overhead_minutes=0.05, restart_guard=True)
    result, _ = replay(op, tmp_path, {"us-west-2a": churn})
    markets = [(a["market"], a["cause"]) for a in result["attempts"]]
    assert markets == [("spot", "preemption"), ("spot", "preemption"), ("on_demand", "success")]


@pytest.mark.slow
def test_without_the_guard_a_churning_training_stays_on_spot(tmp_path: Path) -> None:
    churn = [True, False] * 12 + [True] * 300
    op = operator(tmp_path, seconds=2.0, restart_overhead_minutes=0.05)  # the guard is off by default
    result, _ = replay(op, tmp_path, {"us-west-2a": churn})
    markets = {a["market"] for a in result["attempts"]}
    assert markets == {"spot"} and len(result["attempts"]) > 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"backend": "sagemaker", "availability_zones": ["us-west-2a", "us-west-2b"]},
            "SageMaker chooses the zone itself",
        ),
        (
            {"availability_zones": "us-west-2a,us-east-1a", "allowed_regions": ["us-west-2"]},
            "availability zone 'us-east-1a' is in region us-east-1, which allowed_regions",
        ),
        (
            {"availability_zones": ["us-west-2a"], "availability": {"us-west-2b": "b.json"}},
            "availability maps zones us-west-2b that availability_zones does not list",
        ),
        ({"availability_zones": "us-west-2a,,b"}, "has an empty name"),
    ],
)
def test_zones_a_plan_cannot_honour_are_refused_before_any_job(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    op = operator(tmp_path, **kwargs)
    if kwargs.get("backend") == "sagemaker":
        op.backend_options = {"role_arn": "arn:aws:iam::123456789012:role/x", "image_uri": "i"}
        op.model_store = "s3://m/models"
        op.checkpoint_store = "s3://m/ckpt"
        op.spec_uri = "s3://m/spec.json"
    # The operator fails the task without retry (AirflowFailException), with the plan's message.
    with pytest.raises(AirflowFailException, match=message):
        drive(op, context_for())
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize(
    "value",
    [
        ["us-west-2a", "us-west-2b"],
        "us-west-2a, us-west-2b",
        '["us-west-2a", "us-west-2b"]',
        "['us-west-2a', 'us-west-2b']",
    ],
)
def test_zones_read_from_a_list_or_the_text_a_template_renders(value: object) -> None:
    assert parse_names(value, name="availability_zones") == ("us-west-2a", "us-west-2b")
    assert parse_names("", name="availability_zones") == ()


def test_zones_that_are_no_list_are_refused_by_name() -> None:
    with pytest.raises(
        ConfigurationError, match=r"availability_zones '\[us-west-2a' is neither JSON nor a list"
    ):
        parse_names("[us-west-2a", name="availability_zones")
    with pytest.raises(ConfigurationError, match="availability_zones must be a list of names, got int 3"):
        parse_names(3, name="availability_zones")
