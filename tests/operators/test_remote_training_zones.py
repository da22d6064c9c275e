"""Spot across zones on the live path: a preempted attempt moves to the zone the rule chooses, the
restart-thrash guard sends a churning training to on-demand, and a plan refuses zones it cannot honour.

Real local training jobs under per-zone capacity files that ``PreemptionInjector`` replays in compressed
time (one tick = ``TICK`` seconds).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from remote_support import TRAINING, context_for, drive, local_operator_args, write_data

from costaware.adapters.compute.base import FoundJob, JobState, JobStatus
from costaware.adapters.compute.local import LocalBackend
from costaware.adapters.compute.replay import PreemptionInjector
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.operators.remote_training_args import parse_names
from costaware.training.attempts import NO_CHECKPOINT

TICK = 0.5
PRICES = {"spot": "0.918", "on_demand": "3.06"}


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


def spot_decision() -> dict[str, str]:
    """Spot in us-west-2a now: four minutes to the deadline, the latest spot start in two and a half."""
    now = utcnow()
    return {
        "market": "spot",
        "usd_per_hour": PRICES["spot"],
        "on_demand_usd_per_hour": PRICES["on_demand"],
        "instance_type": "p3.2xlarge",
        "region": "us-west-2",
        "availability_zone": "us-west-2a",
        "deadline": (now + timedelta(seconds=240)).isoformat(),
        "latest_start": (now + timedelta(seconds=150)).isoformat(),
    }


def operator(tmp: Path, *, seconds: float = 6.0, **kwargs: Any) -> RemoteTrainingOperator:
    write_data(tmp / "data", rows=2000)
    args = local_operator_args(tmp)
    local_options = {**args["backend_options"], "capacity_file": str(tmp / "capacity-{zone}")}
    args["backend_options"] = kwargs.pop("backend_options", local_options)
    return RemoteTrainingOperator(
        **args,
        trainer="slow_trainer.SlowSGDTrainer",
        trainer_params={"epochs": int(seconds / 0.2), "batch_size": 512, "step_seconds": 0.2},
        checkpoint_every_seconds=1.0,
        spot_decision=spot_decision(),
        max_attempts=20,
        poll_interval=0.1,
        **kwargs,
    )


def replay(op: RemoteTrainingOperator, tmp: Path, traces: dict[str, list[bool]]) -> tuple[Any, Any]:
    backend = LocalBackend(**op.backend_options)  # type: ignore[arg-type]
    with PreemptionInjector(backend, traces, tick_seconds=TICK, signals=(signal.SIGKILL,)) as injector:
        result, _ = drive(op, context_for())
    return result, injector


@contextmanager
def started_once(injector: PreemptionInjector, ready: Callable[[], bool]) -> Iterator[PreemptionInjector]:
    """Start ``injector``'s trace once ``ready()`` holds: its ticks count from the run it is to preempt.

    Started at the submit instead, the trace ran while a loaded machine was still starting the job (seconds
    of interpreter start-up): the drop found nothing running, so the run it was meant to end ran on.
    """
    leave, started = threading.Event(), threading.Event()

    def start_when_ready() -> None:
        while not leave.is_set():
            if ready():
                injector.start()
                started.set()
                return
            leave.wait(0.02)

    gate = threading.Thread(target=start_when_ready, name="replay-gate", daemon=True)
    gate.start()
    try:
        yield injector
    finally:
        leave.set()
        gate.join()
        if started.is_set():
            injector.stop()


def spot_running_in(backend: LocalBackend, zone: str) -> Callable[[], bool]:
    """Whether a spot job of ``backend`` runs in ``zone`` now (what a drop there signals)."""

    def running() -> bool:
        folders = [path.name for path in backend.root.glob("*") if (path / "started").exists()]
        statuses = [backend.poll(folder) for folder in folders]
        return any(
            (s.market, s.availability_zone, s.state) == ("spot", zone, JobState.RUNNING) for s in statuses
        )

    return running


def spot_run_in(backend: LocalBackend, zone: str, run: int) -> Callable[[], bool]:
    """Whether the ``run``-th job of ``backend`` has started and a spot job runs in ``zone`` now."""
    running_in_zone = spot_running_in(backend, zone)

    def running() -> bool:
        started = sum(1 for path in backend.root.glob("*") if (path / "started").exists())
        return started >= run and running_in_zone()

    return running


def replay_from_first_run(
    op: RemoteTrainingOperator, tmp: Path, traces: dict[str, list[bool]], zone: str
) -> tuple[Any, Any]:
    """:func:`replay` with the traces started once the first spot job runs in ``zone``."""
    backend = LocalBackend(**op.backend_options)  # type: ignore[arg-type]
    injector = PreemptionInjector(backend, traces, tick_seconds=TICK, signals=(signal.SIGKILL,))
    with started_once(injector, spot_running_in(backend, zone)):
        result, _ = drive(op, context_for())
    return result, injector


@pytest.mark.slow
def test_a_preempted_attempt_moves_to_the_zone_with_capacity(tmp_path: Path, ledger: Any) -> None:
    # Zone a has capacity for 3 ticks of its first run (1.5 s, less than the 6 s of training), then none for
    # long; b always.
    traces = {"us-west-2a": [True] * 3 + [False] * 400, "us-west-2b": [True] * 403}
    op = operator(tmp_path, availability_zones=["us-west-2a", "us-west-2b"], restart_overhead_minutes=0)
    result, injector = replay_from_first_run(op, tmp_path, traces, "us-west-2a")

    zones = [(a["market"], a["zone"], a["cause"]) for a in result["attempts"]]
    assert zones[0] == ("spot", "us-west-2a", "preemption")
    assert zones[-1] == ("spot", "us-west-2b", "success")
    assert [p.zone for p in injector.preemptions] == ["us-west-2a"]
    # Each attempt's ledger entry is in its zone's region and adds up to the result.
    entries = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert len(entries) == len(result["attempts"]) and {e["region"] for e in entries} == {"us-west-2"}
    assert sum(Decimal(str(e["usd"])) for e in entries) == Decimal(result["usd"])


@pytest.mark.slow
def test_a_move_to_another_region_records_its_egress_once(tmp_path: Path, ledger: Any) -> None:
    # The zone choice weighed the data and checkpoint a move transfers; the ledger never billed it.
    traces = {"us-west-2a": [True] * 3 + [False] * 400, "us-east-1a": [True] * 403}
    op = operator(tmp_path, availability_zones=["us-west-2a", "us-east-1a"], restart_overhead_minutes=0)
    result, _ = replay_from_first_run(op, tmp_path, traces, "us-west-2a")
    assert [a["zone"] for a in result["attempts"]][-1] == "us-east-1a"
    moves = [e for e in ledger.entries() if e["cause"] == "zone_move"]
    (move,) = moves
    assert (move["kind"], move["region"], move["unit"]) == ("egress", "us-east-1", "gb")
    assert move["unit_price_usd"] == Decimal("0.02")  # us-west-2 -> us-east-1
    assert move["usd"] == (move["quantity"] * Decimal("0.02")).quantize(Decimal("0.000001"))
    assert "moved from us-west-2 to us-east-1a" in move["note"]


@pytest.mark.slow
def test_a_retry_follows_an_earlier_job_in_its_own_zone(tmp_path: Path, ledger: Any) -> None:
    # The first try placed attempt 1 in us-east-1a and died while it waited (no event came back). The retry
    # would place a new attempt in us-west-2a (the plan's region, no egress): the job it follows is in
    # us-east-1a all the same, and is billed there, with the move's egress.
    for zone in ("us-west-2a", "us-east-1a"):
        (tmp_path / f"capacity-{zone}").write_text("1")
    first = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"])
    with pytest.raises(TaskDeferred):
        first.execute(context_for())
    retry = operator(tmp_path, seconds=1.0, availability_zones=["us-west-2a", "us-east-1a"])
    result, _ = drive(retry, context_for(try_number=2))

    ((market, zone, cause),) = [(a["market"], a["zone"], a["cause"]) for a in result["attempts"]]
    assert (market, zone, cause) == ("spot", "us-east-1a", "success")
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train" and e["kind"] != "egress"]
    assert entry["region"] == "us-east-1"
    (move,) = [e for e in ledger.entries() if e["cause"] == "zone_move"]
    assert "moved from us-west-2 to us-east-1a" in move["note"]


def test_a_retry_marks_the_job_it_follows_with_the_run_its_look_up_found(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry found the earlier try's job by its name, dropped the run token that look-up gave, and asked
    # the backend again after its submit: where that second read failed, the run it followed was billed with
    # no mark of it, and a bill of another run of the name could be read as its bill (billed twice).
    (tmp_path / "capacity-us-east-1a").write_text("1")
    first = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"])
    with pytest.raises(TaskDeferred):
        first.execute(context_for())
    assert first._live is not None and first._live.current is not None
    token = first._live.current.run_token
    assert token
    finds: list[str] = []
    found_by_name = LocalBackend.find

    def first_find_only(backend: LocalBackend, job_name: str) -> FoundJob | None:
        finds.append(job_name)
        if len(finds) > 1:
            raise OSError(f"cannot read the folder of job {job_name}")
        return found_by_name(backend, job_name)

    monkeypatch.setattr(LocalBackend, "find", first_find_only)
    retry = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"])
    drive(retry, context_for(try_number=2))
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train" and e["kind"] != "egress"]
    assert f", run {token}: " in entry["note"]


def _the_job_goes_before_each_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local job's folder removed (a clean-up, a stop) between a retry's look-up and its submit."""
    import shutil

    submit = LocalBackend.submit

    def submit_after_a_clean_up(backend: LocalBackend, request: Any) -> str:
        shutil.rmtree(backend._dir(request.job_name), ignore_errors=True)
        return submit(backend, request)

    monkeypatch.setattr(LocalBackend, "submit", submit_after_a_clean_up)


def test_a_retry_whose_followed_job_goes_before_its_submit_marks_the_new_run(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The followed job's folder went (a clean-up, a stop) between the retry's look-up and its submit, which
    # started a new run under the name: marked with the look-up's token, the new run's end bill read the old
    # run's bill as its own ("billed already") and the new run went unbilled.
    import json

    from structlog.testing import capture_logs

    (tmp_path / "capacity-us-east-1a").write_text("1")
    first = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"])
    with pytest.raises(TaskDeferred):
        first.execute(context_for())
    assert first._live is not None and first._live.current is not None
    old_token = first._live.current.run_token
    _the_job_goes_before_each_submit(monkeypatch)
    retry = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"])
    with pytest.raises(TaskDeferred), capture_logs() as said:  # self.log is structlog's: not in caplog
        retry.execute(context_for(try_number=2))
    assert retry._live is not None and retry._live.current is not None
    current = retry._live.current
    folder = LocalBackend._dir(retry._backend(retry._live.plan), current.job_id)
    new_token = json.loads((folder / "request.json").read_text())["run_token"]
    assert new_token != old_token and current.run_token == new_token
    # A new run, not the one it followed: no followed record (the old run's seconds, its creation time).
    assert current.followed is None
    warned = [e for e in said if "another run than the one this try followed" in str(e.get("event"))]
    assert len(warned) == 1 and old_token in str(warned[0]) and new_token in str(warned[0])


@pytest.mark.parametrize("allowed", [0, 30])
def test_a_new_run_started_where_the_followed_job_went_is_still_stopped_at_what_the_cap_allows(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, allowed: int
) -> None:
    # The followed job went before the retry's submit, which started a new run: with under a minute of
    # max_usd left (a fresh submit refuses), it got a 1 s backend limit and no recorded stop, and billed its
    # grace period past a cap with nothing left.
    import costaware.training.attempt_effects as effects

    (tmp_path / "capacity-us-east-1a").write_text("1")
    first = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"], max_usd=50)
    with pytest.raises(TaskDeferred):
        first.execute(context_for())
    monkeypatch.setattr(effects, "capped_seconds", lambda state, rate: allowed)
    _the_job_goes_before_each_submit(monkeypatch)
    retry = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"], max_usd=50)
    with pytest.raises(TaskDeferred):
        retry.execute(context_for(try_number=2))
    assert retry._live is not None and retry._live.current is not None
    current = retry._live.current
    assert current.followed is None and current.run_token != first._live.current.run_token  # type: ignore[union-attr]
    assert current.stop_by_poll and current.stop_after_seconds == allowed


@pytest.mark.parametrize("goes", [False, True], ids=["followed", "new run"])
def test_a_retrys_new_run_where_the_followed_job_went_reads_the_checkpoint_across_as_a_new_submit(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, goes: bool
) -> None:
    # Attempt 1 of a followed job read its data across at its start and has pushed its own checkpoints
    # since: none is counted. A new run the retry started where the followed job went restores the old
    # run's checkpoint: counted as the followed job's bytes (data only), its egress was billed short.
    checkpoint_bytes = 7_000_000  # the newest checkpoint's files, sized here: the first job's run varies
    (tmp_path / "capacity-us-east-1a").write_text("1")
    first = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"])
    with pytest.raises(TaskDeferred):
        first.execute(context_for())
    monkeypatch.setattr(RemoteTrainingOperator, "_checkpoint_bytes", lambda self, uri: checkpoint_bytes)
    if goes:
        _the_job_goes_before_each_submit(monkeypatch)
    retry = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"])
    with pytest.raises(TaskDeferred):
        retry.execute(context_for(try_number=2))
    assert retry._live is not None and retry._live.current is not None
    current, data_bytes = retry._live.current, retry._live.plan.placement.data_bytes
    assert data_bytes > 0 and current.zone == "us-east-1a"  # in another region than the plan's us-west-2
    assert (current.followed is None) == goes
    assert current.moved_bytes == data_bytes + (checkpoint_bytes if goes else 0)


def test_a_moves_egress_is_billed_once_its_attempt_has_run_in_another_region(ledger: Any) -> None:
    # An attempt in a zone of another region reads its data and checkpoint across once it runs: one stopped
    # while it waited for capacity moved nothing, a retry billing the job again adds no second entry, and
    # the region is the one the job reports it ran in.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.training.plan.remote_plan import Placement

    plan = RemotePlan.from_json(CAPTURED)  # in us-east-1
    placement = Placement(zones=("us-east-1a", "us-west-2a"), usd_per_gb={"us-west-2": "0.02"})
    state = AttemptState(plan=replace(plan, placement=placement), spot_usd_per_hour="0.05")
    log = logging.getLogger(__name__)
    billing = KilledTrainingBilling(ledger_conn_id="costaware_ledger", aws_conn_id=None, log=log)
    job = {"state": "interrupted", "market": "spot", "instance_type": "m5.large", "ended_at": time.time()}
    three_gb = 3 * 2**30

    def bill(attempt: int, zone: str, seconds: float, ran_in: str = "") -> list[dict[str, Any]]:
        name = f"train-380335d228-a{attempt}"
        running = replace(state, first_attempt=attempt).submitted(
            job_id=name, market="spot", zone=zone, moved_bytes=three_gb
        )
        ended = {**job, "job_id": name, "billable_seconds": seconds, "availability_zone": ran_in}
        billing._bill_attempt(running, ended, None)
        return [e for e in ledger.entries() if e["cause"] == "zone_move"]

    assert bill(1, "us-west-2a", 0.0) == []  # waited for capacity, never ran
    assert bill(2, "us-east-1a", 120.0) == []  # ran in the plan's region
    (move,) = bill(3, "us-west-2a", 120.0)
    assert (move["region"], move["quantity"], move["usd"]) == ("us-west-2", Decimal("3"), Decimal("0.06"))
    assert len(bill(3, "us-west-2a", 120.0)) == 1  # billed again (a retry): still one entry
    # A job followed without knowing its zone, that reports it ran in us-west-2a: billed there.
    notes = [m["note"] for m in bill(4, "us-east-1a", 60.0, ran_in="us-west-2a")]
    assert len(notes) == 2
    assert any(n.startswith("attempt 4 moved from us-east-1 to us-west-2a") for n in notes)


@pytest.mark.parametrize(
    ("ran_on", "times"), [("m5.large", 1), ("m5.2xlarge", 4), ("", 1), ("x9.unknown", 1)]
)
def test_an_attempt_is_billed_at_the_price_of_the_type_it_ran_on(
    ledger: Any, ran_on: str, times: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Batch's compute environment (or a Kubernetes node pool) may run a job on another type than the
    # plan's: it was billed at the planned m5.large's price while the ledger named the dearer type.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    plan = RemotePlan.from_json(CAPTURED)
    assert (plan.instance_type, plan.region) == ("m5.large", "us-east-1")
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(job_id="train-a1", market="spot")
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    job = {"job_id": "train-a1", "state": "succeeded", "market": "spot", "instance_type": ran_on}
    billing._bill_attempt(state, {**job, "billable_seconds": 3600.0, "ended_at": time.time()}, None)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert Decimal(str(entry["usd"])) == Decimal("0.05") * times
    if ran_on == "x9.unknown":
        assert "whose price is unknown" in caplog.text


def test_a_batch_jobs_copy_is_billed_at_the_price_of_the_type_it_ran_on(ledger: Any) -> None:
    # The copies of a resent submit were priced as the job's type: one the compute environment placed on a
    # type 4 times dearer was billed a quarter of what it cost.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.adapters.compute.base import COPY_SECONDS_BY_TYPE
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    plan = RemotePlan.from_json(CAPTURED)
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(job_id="train-a1", market="spot")
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    job = {
        "job_id": "train-a1",
        "state": "succeeded",
        "market": "spot",
        "instance_type": "m5.large",
        "billable_seconds": 3600.0,  # 3000 s of its own, 600 s of a copy on m5.2xlarge
        "metrics": {
            "batch_copies": 1,
            "batch_copy_seconds": 600.0,
            COPY_SECONDS_BY_TYPE: {"m5.2xlarge": 600.0},
        },
        "ended_at": time.time(),
    }
    billing._bill_attempt(state, job, None)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert Decimal(str(entry["usd"])) == Decimal("0.05") * (3000 + 600 * 4) / 3600


def test_a_followed_job_keeps_its_own_market_and_zone(tmp_path: Path) -> None:
    from costaware.adapters.compute.base import JobState, JobStatus

    op = operator(tmp_path, availability_zones=["us-west-2a", "us-west-2b"])
    state = op._start(context_for(try_number=2))

    def follow(market: str, zone: str, asked: str = "spot") -> tuple[str, str, str]:
        job = JobStatus(job_id="j-a1", state=JobState.RUNNING, market=market, availability_zone=zone)
        _, market, zone, reason, _ = op._follow(state, job, asked, "")
        assert op._live is not None and op._live.current is not None  # watched from here
        assert (op._live.current.market, op._live.current.zone) == (market, zone)
        return market, zone, reason

    assert follow("spot", "us-west-2b") == ("spot", "us-west-2b", "")
    # An on-demand job the retry would have placed on spot: on-demand, and why.
    assert follow("on_demand", "") == ("on_demand", "", "the market an earlier try chose for this job")
    # A spot job on a node whose zone label no request could name: taken in the first zone.
    assert follow("spot", "zone_a") == ("spot", "us-west-2a", "")


@pytest.mark.slow
def test_the_guard_sends_a_churning_training_to_on_demand(tmp_path: Path) -> None:
    # Capacity for one tick out of two: every spot run ends within a tick, far below the 3 s restart
    # overhead plus the 1 s checkpoint interval, so the third attempt goes to on-demand.
    churn = [True, False] * 300
    op = operator(tmp_path, restart_overhead_minutes=0.05, restart_guard=True)
    result, _ = replay(op, tmp_path, {"us-west-2a": churn})
    markets = [(a["market"], a["cause"]) for a in result["attempts"]]
    assert markets == [("spot", "preemption"), ("spot", "preemption"), ("on_demand", "success")]
    # The on-demand attempt says it was the guard, not the latest safe start (the benchmark counts on it).
    assert result["attempts"][2]["market_reason"].startswith("restart thrash in us-west-2a: the last 2")


@pytest.mark.slow
def test_the_guard_keeps_spot_for_a_command_that_saves_on_each_notice(tmp_path: Path) -> None:
    # Capacity for 3 ticks of 1 s of a run, then a SIGTERM, twice. The command has no timed checkpoints, so
    # by their length both runs kept nothing. But it saves on the notice: the step pushed after each run is
    # newer than the one it restored, the guard sees work kept, and the third attempt stays on spot (it went
    # to on-demand when the guard judged by length alone).
    options = {"root": str(tmp_path / "jobs"), "capacity_file": str(tmp_path / "capacity-{zone}")}
    options["env"] = {"OWN_TRAIN_LOG": str(tmp_path / "seen.jsonl")}
    op = RemoteTrainingOperator(
        task_id="train",
        command=[sys.executable, str(TRAINING / "own_train.py"), "save-on-notice", "40"],
        model_store=str(tmp_path / "models"),
        checkpoint_store=str(tmp_path / "ckpt"),
        backend_options=options,
        spot_decision=spot_decision(),
        restart_overhead_minutes=0.01,
        restart_guard=True,
        preemption_grace_seconds=5,
        max_attempts=20,
        poll_interval=0.1,
    )
    seen = tmp_path / "seen.jsonl"

    def notices(run: int) -> AbstractContextManager[PreemptionInjector]:
        # Each run's ticks count from its command's start (its line in seen.jsonl): a second run a loaded
        # machine started after the drop meant for it was never noticed and ended in success.
        injector = PreemptionInjector(
            LocalBackend(**options),
            {"us-west-2a": [True] * 3 + [False, True]},
            tick_seconds=1.0,
            signals=(signal.SIGTERM,),
        )
        return started_once(injector, lambda: seen.exists() and len(seen.read_text().splitlines()) >= run)

    with notices(1), notices(2):
        result, _ = drive(op, context_for())
    attempts = result["attempts"]
    assert [(a["market"], a["cause"]) for a in attempts] == [
        ("spot", "preemption"),
        ("spot", "preemption"),
        ("spot", "success"),
    ], attempts
    first, second = attempts[0], attempts[1]
    assert (first["restored_step"], first["exit_code"]) == (NO_CHECKPOINT, 75)
    assert first["committed_step"] > 0 and second["restored_step"] == first["committed_step"]
    assert second["committed_step"] > second["restored_step"] and second["exit_code"] == 75


@pytest.mark.slow
def test_without_the_guard_a_churning_training_stays_on_spot(tmp_path: Path) -> None:
    # Each of the first three spot runs is dropped one tick after it is up, then capacity stays. Timed from
    # the submit instead (12 drops in 12 s), a loaded machine's slow restarts let the churn end after two
    # preemptions, and the test then saw too few attempts to tell the guard was off.
    op = operator(tmp_path, seconds=2.0, restart_overhead_minutes=0.05)  # the guard is off by default
    backend = LocalBackend(**op.backend_options)  # type: ignore[arg-type]

    def drop(run: int) -> AbstractContextManager[PreemptionInjector]:
        injector = PreemptionInjector(
            backend, {"us-west-2a": [True, False, True]}, tick_seconds=TICK, signals=(signal.SIGKILL,)
        )
        return started_once(injector, spot_run_in(backend, "us-west-2a", run))

    with drop(1), drop(2), drop(3):
        result, _ = drive(op, context_for())
    attempts = result["attempts"]
    causes = [(a["market"], a["cause"]) for a in attempts]
    assert causes == [("spot", "preemption")] * 3 + [("spot", "success")], attempts


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
    ],
)
def test_zones_a_plan_cannot_honour_are_refused_before_any_job(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    # Built on the local backend (its options, local stores), then moved to SageMaker as a whole.
    op = operator(tmp_path, **{name: value for name, value in kwargs.items() if name != "backend"})
    if kwargs.get("backend") == "sagemaker":
        op.backend = "sagemaker"
        op.backend_options = {
            "role_arn": "arn:aws:iam::123456789012:role/x",
            "image_uri": "i",
            "output_s3_uri": "s3://m/out",
        }
        op.model_store = "s3://m/models"
        op.checkpoint_store = "s3://m/ckpt"
        op.spec_uri = "s3://m/spec.json"
    # The operator fails the task without retry (AirflowFailException), with the plan's message.
    with pytest.raises(AirflowFailException, match=message):
        drive(op, context_for())
    assert not (tmp_path / "jobs").exists()


def recorded_prices(path: Path, zones: list[str]) -> Path:
    records = [
        {
            "AvailabilityZone": zone,
            "InstanceType": "p3.2xlarge",
            "ProductDescription": "Linux/UNIX",
            "SpotPrice": PRICES["spot"],
            "Timestamp": (utcnow() - timedelta(days=1)).isoformat(),
        }
        for zone in zones
    ]
    path.write_text(json.dumps({"SpotPriceHistory": records}))
    return path


def test_a_zone_the_price_file_leaves_unpriced_in_a_region_it_prices_is_refused_before_any_job(
    tmp_path: Path,
) -> None:
    # A zone letter typo: on the backend, a job would wait there for capacity that never comes.
    prices = recorded_prices(tmp_path / "prices.json", ["us-west-2a", "us-west-2b"])
    op = operator(tmp_path, availability_zones=["us-west-2a", "us-west-2z"], prices=str(prices))
    with pytest.raises(
        AirflowFailException,
        match=r"has no spot price of p3.2xlarge in zone 'us-west-2z', though it prices "
        "us-west-2a, us-west-2b",
    ):
        drive(op, context_for())
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize(
    ("zones", "first_market"),
    [
        (("rack-1", "europe-west1-b"), "spot"),  # Kubernetes node labels: no price file names them
        (("us-west-2a", "us-west-2z"), "on_demand"),  # no spot attempt to place
        (("us-east-1a", "us-west-2a"), "spot"),  # a region the file has no prices of: the attempt's price
    ],
)
def test_zones_a_price_file_cannot_judge_are_left_to_the_attempts_price(
    tmp_path: Path, zones: tuple[str, ...], first_market: str
) -> None:
    from costaware.training.plan import Billing, Placement, RemotePlan

    prices = recorded_prices(tmp_path / "prices.json", ["us-west-2a", "us-west-2b"])
    plan = RemotePlan(
        backend="kubernetes",
        instance_type="p3.2xlarge",
        region="us-west-2",
        on_demand_usd_per_hour=PRICES["on_demand"],
        first_market=first_market,
        billing=Billing(prices=str(prices)),
        placement=Placement(zones=zones),
    )
    operator(tmp_path)._check_zones_priced(plan)  # refuses nothing


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
    assert parse_names("null", name="availability_zones") == ()  # | tojson of a param left blank


@pytest.mark.parametrize("rendered", [" ", "None ", " null"])
def test_zones_and_options_rendered_blank_with_spaces_are_not_given(rendered: str) -> None:
    # "None " was the zone list ('None',), a zone of that name; " " was refused as an empty zone name and
    # as backend_options that are no dict, where the rest of the plan reads them as not given.
    from costaware.operators.remote_training_args import parse_mapping

    assert parse_names(rendered, name="availability_zones") == ()
    assert parse_mapping(rendered, name="backend_options") == {}


def test_zones_that_are_no_list_are_refused_by_name() -> None:
    with pytest.raises(
        ConfigurationError, match=r"availability_zones '\[us-west-2a' is neither JSON nor a list"
    ):
        parse_names("[us-west-2a", name="availability_zones")
    with pytest.raises(ConfigurationError, match="availability_zones must be a list of names, got int 3"):
        parse_names(3, name="availability_zones")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"availability_zones": "us-west-2a,,b"}, "has an empty name"),
        ({"availability_zones": "us-west-2a,"}, "has an empty name"),
        ({"availability_zones": "us-west-2a;us-west-2b"}, "'us-west-2a;us-west-2b' is not a zone name"),
        ({"availability_zones": ["us-west-2"]}, "'us-west-2' is a region, not a zone: list its zones, e.g."),
        ({"availability_zones": "US-WEST-2A"}, "AWS zone names are lower case, write 'us-west-2a'"),
        ({"availability_zones": 5}, "availability_zones must be a list of names, got int 5"),
        ({"allowed_regions": 5}, "allowed_regions must be a list of names, got int 5"),
        (
            {"availability_zones": ["us-east-1a", "us-eats-1b"]},
            "availability zone 'us-eats-1b' is in no AWS region ('us-eats-1' is not one); did you mean "
            "us-east-1b",
        ),
        (
            {"availability_zones": ["us-east1a"]},  # was accepted: a job placed there matches no zone
            "availability zone 'us-east1a' is not an AWS zone name: AWS writes a zone as its region and a "
            "letter; did you mean us-east-1a?",
        ),
        (
            {"allowed_regions": ["us-east-1", "eu-wset-1"]},
            "'eu-wset-1' is not an AWS region; did you mean eu-west-1",
        ),
        (
            {"allowed_regions": ["us-west-2a"]},
            "allowed_regions 'us-west-2a' is a zone: allowed_regions takes regions, e.g. 'us-west-2'",
        ),
        ({"allowed_regions": "us-west-2,"}, "has an empty name: list names like 'us-west-2'"),
        ({"zones": ["us-west-2a"]}, "RemoteTrainingOperator takes availability_zones=[...], not zones"),
        ({"restart_guard": "maybe"}, "restart_guard must be true or false, got 'maybe'"),
        (
            {"restart_overhead_minutes": "5"},
            "restart_overhead_minutes must be a number of minutes >= 0, got '5'",
        ),
        ({"restart_overhead_minutes": None}, "restart_overhead_minutes must be a number of minutes >= 0"),
        ({"restart_overhead_minutes": float("inf")}, "restart_overhead_minutes must be a number of minutes"),
        (
            {"restart_overhead_minutes": -1},
            "restart_overhead_minutes must be a number of minutes >= 0, got -1",
        ),
    ],
)
def test_zone_and_guard_arguments_written_out_are_refused_when_the_dag_is_parsed(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    # Before, these failed the task after the spend gate had reserved its money (or, for the overhead, with
    # a TypeError naming no argument).
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        operator(tmp_path, **kwargs)


def test_arguments_airflow_resolves_at_run_time_are_not_checked_at_parse(tmp_path: Path) -> None:
    # An XComArg or a dag.param(...) is resolved only when the task runs (before, this change refused them).
    from airflow.sdk import DAG, Param, task

    with DAG("resolved_later", schedule=None, params={"zones": Param("us-west-2a,us-west-2b")}) as dag:

        @task
        def zones() -> str:
            return "us-west-2a,us-west-2b"

        op = operator(
            tmp_path,
            backend=dag.param("zones"),
            market=zones(),
            priority=dag.param("zones"),
            availability_zones=dag.param("zones"),
            allowed_regions=[zones()],
            restart_guard=dag.param("zones"),
        )
    assert op.task_id == "train"


def test_a_region_typo_in_a_template_fails_before_any_job(tmp_path: Path) -> None:
    op = operator(tmp_path, allowed_regions="{{ params.region }}")  # not checked until rendered
    op.allowed_regions = "us-east1"  # as the template renders it
    with pytest.raises(
        AirflowFailException, match=re.escape("'us-east1' is not an AWS region; did you mean")
    ):
        drive(op, context_for())
    assert not (tmp_path / "jobs").exists()


def test_kubernetes_zone_labels_are_any_label_value(tmp_path: Path) -> None:
    # Only the backends that place by AWS zone refuse a region or an upper-case AWS zone name.
    labels = "us-south-1,DC-East-1a,us-eats-1b"  # a label need not name an AWS region
    pod = {"image": "costaware:1"}
    on_kubernetes = operator(tmp_path, backend="kubernetes", backend_options=pod, availability_zones=labels)
    assert on_kubernetes.availability_zones == labels
    with pytest.raises(
        ConfigurationError,
        match=re.escape("'US-EAST-1' is a region, not a zone: list its zones, e.g. us-east-1a"),
    ):
        operator(tmp_path, availability_zones="US-EAST-1")
    with pytest.raises(
        ConfigurationError, match=re.escape("AWS zone names are lower case, write 'us-east-1-bos-1a'")
    ):
        operator(tmp_path, availability_zones="US-EAST-1-BOS-1A")


def test_templated_zone_and_guard_arguments_are_checked_after_rendering(tmp_path: Path) -> None:
    op = operator(
        tmp_path,
        availability_zones="{{ params.zones }}",
        allowed_regions=["{{ params.region }}"],
        restart_guard="{{ params.guard }}",
    )
    assert op.availability_zones == "{{ params.zones }}" and op.restart_guard == "{{ params.guard }}"
    # Kubernetes zone labels need not be AWS names, nor need a replay's (GKE-style us-central1-a included);
    # an AWS name in lower case stays as written.
    assert operator(tmp_path, availability_zones="us-central1-a,zone-east-1").availability_zones
    assert (
        operator(tmp_path, availability_zones="rack-1,us-west-2a").availability_zones == "rack-1,us-west-2a"
    )


def test_zones_in_another_region_without_allowed_regions_are_named_in_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    op = operator(tmp_path, availability_zones="us-west-2a,us-east-1a")
    capsys.readouterr()

    def warned(zones: tuple[str, ...], data_bytes: int, allowed: tuple[str, ...]) -> str:
        plan = SimpleNamespace(
            region="us-west-2", placement=SimpleNamespace(zones=zones, data_bytes=data_bytes)
        )
        op._warn_other_regions(plan, allowed=allowed)  # type: ignore[arg-type]
        out = capsys.readouterr()
        return " ".join((out.out + out.err).split())

    text = warned(("us-west-2a", "us-east-1a"), 0, ())
    assert "availability_zones us-east-1a is outside region us-west-2: an attempt moved there reads" in text
    assert "weighed at no transfer cost (the data's size is not known: a command reads its own)" in text
    assert "set allowed_regions=['us-west-2'] to keep attempts in us-west-2" in text
    text = warned(("us-east-1a", "eu-west-1a"), 123456789, ())
    assert "us-east-1a, eu-west-1a are outside region us-west-2" in text
    assert "the transfer price of the data's 123,456,789 bytes" in text
    assert "outside region" not in warned(("us-east-1a",), 0, ("us-east-1",))  # allowed on purpose
    assert "outside region" not in warned(("us-west-2a", "rack-1"), 0, ())  # a label: the plan's region


def test_a_first_attempt_has_no_checkpoints_to_size_and_says_nothing_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    op = operator(tmp_path)
    capsys.readouterr()
    nothing = tmp_path / "nothing"
    for missing in (tmp_path / "ckpt" / "d" / "-1", f"file://{nothing}", f"file://localhost{nothing}"):
        assert op._checkpoint_bytes(str(missing)) == 0
    out = capsys.readouterr()
    assert "cannot size" not in out.out + out.err  # no checkpoint yet is normal, not a warning
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "state.ckpt").write_bytes(b"x" * 10)
    assert op._checkpoint_bytes(str(tmp_path / "kept")) == 10  # no commit marker: the whole store
    # Pushed by the launcher: what a restore reads is the newest checkpoint, not every step the store keeps.
    from costaware_runtime.checkpoints import push, save_bytes

    work, store = tmp_path / "work", tmp_path / "pushed"
    for step in (1, 2):
        save_bytes(b"s" * 100, step=step, directory=work)
        push(work, str(store))
    assert op._checkpoint_bytes(str(store)) == 100


def test_sagemaker_managed_spot_billable_time_is_priced_at_on_demand(ledger: Any) -> None:
    # BillableTimeInSeconds of a managed spot job holds the saving already (saving = 1 - billable /
    # training time): priced at the spot rate again, the ledger under-counted 10 h at $4 (AWS: $12) as $3.60.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.adapters.compute import sagemaker
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    plan = replace(
        RemotePlan.from_json(CAPTURED),
        backend="sagemaker",
        instance_type="ml.g5.xlarge",  # the type the job runs on (another would be priced at its own)
        on_demand_usd_per_hour="4",
    )
    state = AttemptState(plan=plan, spot_usd_per_hour="1.2")
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    described = {
        "TrainingJobName": "train-380335d228-a1",
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1},
        "EnableManagedSpotTraining": True,
        "TrainingJobStatus": "Completed",
        "SecondaryStatus": "Completed",
        "TrainingTimeInSeconds": 36_000,
        "BillableTimeInSeconds": 10_800,
    }
    ended = sagemaker.status_from_description(described).to_dict()
    running = state.submitted(job_id=ended["job_id"], market="spot")
    billing._bill_attempt(running, ended, None)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train" or e["job_id"] == ended["job_id"]]
    assert entry["usd"] == Decimal("12")
    # On-demand would have billed the whole 10 h: the saving read $0 against the billable 3 h.
    assert entry["on_demand_usd"] == Decimal("40")
    # The machine ran those 10 h: GPU-hours (a g5.xlarge has one GPU) count them, not the billable 3 h.
    assert entry["gpu_hours"] == Decimal("10")
    # And max_usd bounds a SageMaker spot attempt at on-demand: billable time can come up to the run's.
    from costaware.training.attempt_effects import cap_rate

    assert cap_rate(state, "spot") == Decimal("4")
    # While it runs, SageMaker gives no billable time: the time since its start is wall clock, spot-priced.
    running_description = {**described, "TrainingJobStatus": "InProgress", "SecondaryStatus": "Training"}
    del running_description["BillableTimeInSeconds"]
    assert not sagemaker.status_from_description(running_description).metrics["billed_at_on_demand"]


def test_a_job_on_a_dearer_type_is_stopped_within_max_usd_at_that_types_price(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its stop was sized at the planned m5.large's price: on an m5.2xlarge (4 times dearer) the attempt ran
    # the 7090 s that $0.10 buys at $0.05/hour, and was billed $0.40 against max_usd $0.10.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    plan = replace(RemotePlan.from_json(CAPTURED), max_usd="0.10", billing=None)  # at its spot price
    assert (plan.instance_type, plan.grace_seconds) == ("m5.large", 110.0)
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(
        job_id="train-a1", market="spot", stop_after_seconds=7090
    )
    ran_on = {"job_id": "train-a1", "market": "spot", "instance_type": "m5.2xlarge"}
    answers = [
        JobStatus(state=JobState.RUNNING, billable_seconds=1000.0, **ran_on),
        JobStatus(state=JobState.RUNNING, billable_seconds=1690.0, **ran_on),  # $0.10 less its grace
        JobStatus(state=JobState.RUNNING, billable_seconds=1750.0, **ran_on),  # in its grace period
        JobStatus(state=JobState.INTERRUPTED, billable_seconds=1800.0, ended_at=time.time(), **ran_on),
    ]
    stops: list[str] = []
    monkeypatch.setattr(LocalBackend, "poll", lambda self, job_id: answers.pop(0))
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options={"root": str(tmp_path)}, job_id="train-a1", state=state.to_json()
    )
    assert watch.poll_once(utcnow()) is None and stops == []
    # $0.10 at $0.20/hour (4 times $0.05), less the 110 s grace period (the trigger's log is structlog's)
    assert (
        "$0.10 is left of max_usd at $0.20/hour there, so it is stopped after 1690 s"
        in capsys.readouterr().out
    )
    assert watch.poll_once(utcnow()) is None and stops == ["train-a1"]
    assert watch.poll_once(utcnow()) is None and stops == ["train-a1"]  # asked once
    event = watch.poll_once(utcnow())
    assert event is not None and event["job"]["state"] == "interrupted"
    ended = AttemptState.from_json(event["state"])
    assert ended.current is not None and ended.current.stopped_by_cap(event["job"])  # cause max_usd
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    billing._bill_attempt(ended, event["job"], "max_usd")
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert Decimal(str(entry["usd"])) == Decimal("0.10")  # within max_usd, billed at the dearer type


@pytest.mark.parametrize(
    ("ran_on", "stop_by_poll", "limit"),
    [("m5.2xlarge", False, 1690), ("m5.large", True, 1690)],  # a dearer type's stop, a followed job's
    ids=["dearer-type", "followed"],
)
def test_the_wait_wakes_when_a_stop_at_the_cap_falls_due_not_a_poll_later(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ran_on: str, stop_by_poll: bool, limit: int
) -> None:
    # Sent at the first poll after it fell due, the stop let the job run up to one poll_interval past what
    # max_usd buys: $0.10 left and polls every 300 s billed a followed job ~$0.176.
    import asyncio
    from datetime import datetime, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.triggers.remote_training as remote_trigger
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    plan = replace(RemotePlan.from_json(CAPTURED), max_usd="0.10", billing=None)
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(
        job_id="train-a1",
        market="spot",
        stop_after_seconds=limit if stop_by_poll else 7090,
        stop_by_poll=stop_by_poll,
    )
    start = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    clock = [start + timedelta(seconds=1000)]
    stopped_at: list[float] = []

    def ran() -> float:
        return (clock[0] - start).total_seconds()

    def poll(self: LocalBackend, job_id: str) -> JobStatus:
        if stopped_at:  # it checkpoints and ends within its grace period
            return JobStatus(job_id, JobState.INTERRUPTED, billable_seconds=stopped_at[0] + 60.0, **job)
        return JobStatus(job_id, JobState.RUNNING, billable_seconds=ran(), **job)

    async def sleep(seconds: float) -> None:
        clock[0] += timedelta(seconds=seconds)

    job = {"market": "spot", "instance_type": ran_on}
    monkeypatch.setattr(LocalBackend, "poll", poll)
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stopped_at.append(ran()))
    monkeypatch.setattr(remote_trigger, "utcnow", lambda: clock[0])
    monkeypatch.setattr(remote_trigger.asyncio, "sleep", sleep)
    watch = remote_trigger.RemoteTrainingJobTrigger(
        backend="local",
        backend_options={"root": str(tmp_path)},
        job_id="train-a1",
        state=state.to_json(),
        poll_interval=300.0,
    )

    async def wait() -> Any:
        async for event in watch._watch():
            return event.payload

    event = asyncio.run(wait())
    assert event["job"]["state"] == "interrupted"
    (at,) = stopped_at
    assert limit <= at <= limit + remote_trigger.MIN_CAP_STOP_WAIT_SECONDS  # at the limit, not 300 s on


def test_a_job_on_the_planned_or_a_cheaper_type_keeps_the_stop_it_was_given(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attempt_states import CAPTURED  # tests/support/

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    plan = replace(RemotePlan.from_json(CAPTURED), max_usd="0.10", billing=None)  # at its spot price
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(
        job_id="train-a1", market="spot", stop_after_seconds=7090
    )
    stops: list[str] = []
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    for ran_on in ("m5.large", "t3.micro"):
        running = JobStatus(
            job_id="train-a1",
            state=JobState.RUNNING,
            market="spot",
            instance_type=ran_on,
            billable_seconds=5000.0,
        )
        monkeypatch.setattr(LocalBackend, "poll", lambda self, job_id, running=running: running)
        watch = RemoteTrainingJobTrigger(
            backend="local", backend_options={"root": str(tmp_path)}, job_id="train-a1", state=state.to_json()
        )
        assert watch.poll_once(utcnow()) is None
    assert stops == []


def test_a_wait_in_the_worker_records_the_dearer_types_stop_as_max_usd(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's wait read the job's end with the stop its submit set (7090 s), not the trigger's: the
    # attempt stopped within max_usd was recorded as a preemption, as if the cap had not stopped it.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    plan = replace(
        RemotePlan.from_json(CAPTURED),
        max_usd="0.10",
        billing=None,
        backend_options={"root": str(tmp_path / "jobs")},
        checkpoint_uri=str(tmp_path / "ckpt"),
    )
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(
        job_id="train-a1", market="spot", stop_after_seconds=7090
    )
    ran_on = {"job_id": "train-a1", "market": "spot", "instance_type": "m5.2xlarge"}
    answers = [
        JobStatus(state=JobState.RUNNING, billable_seconds=1690.0, **ran_on),
        JobStatus(state=JobState.INTERRUPTED, billable_seconds=1800.0, ended_at=time.time(), **ran_on),
    ]
    monkeypatch.setattr(LocalBackend, "poll", lambda self, job_id: answers.pop(0))
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: None)
    op = operator(tmp_path, deferrable=False)
    op.poll_interval = 0
    with pytest.raises(AirflowFailException, match=r"max_usd \$0.10 cannot start another attempt"):
        op._wait(context_for(), state)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert (entry["cause"], Decimal(str(entry["usd"]))) == ("max_usd", Decimal("0.10"))


def test_a_wait_in_the_worker_wakes_when_the_dearer_types_stop_falls_due(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's wait slept poll_interval between polls whatever was due: the stop came up to a poll late.
    from attempt_states import CAPTURED  # tests/support/

    import costaware.operators.remote_training_wait as remote_operator
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    plan = replace(
        RemotePlan.from_json(CAPTURED),
        max_usd="0.10",
        billing=None,
        backend_options={"root": str(tmp_path / "jobs")},
        checkpoint_uri=str(tmp_path / "ckpt"),
    )
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(
        job_id="train-a1", market="spot", stop_after_seconds=7090
    )
    ran_on = {"job_id": "train-a1", "market": "spot", "instance_type": "m5.2xlarge"}
    answers = [
        JobStatus(state=JobState.RUNNING, billable_seconds=1600.0, **ran_on),  # its stop is due at 1690 s
        JobStatus(state=JobState.RUNNING, billable_seconds=1690.0, **ran_on),
        JobStatus(state=JobState.INTERRUPTED, billable_seconds=1800.0, ended_at=time.time(), **ran_on),
    ]
    slept: list[float] = []
    monkeypatch.setattr(LocalBackend, "poll", lambda self, job_id: answers.pop(0))
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: None)
    monkeypatch.setattr(remote_operator.time, "sleep", slept.append)
    op = operator(tmp_path, deferrable=False)
    op.poll_interval = 300
    with pytest.raises(AirflowFailException, match=r"max_usd \$0.10 cannot start another attempt"):
        op._wait(context_for(), state)
    assert slept == [90.0, 300.0]  # woken at the stop, then polled as usual


def test_a_price_unknown_for_one_poll_does_not_turn_off_the_dearer_types_stop(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The limit was worked out once per job: a ledger that could not be read at the first poll that saw the
    # job on a dearer type read as the plan's price, the job was never stopped, and billed $0.40 of $0.10.
    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.price_source as price_source
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import LedgerUnavailableError
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    plan = replace(RemotePlan.from_json(CAPTURED), max_usd="0.10", billing=None)  # at its spot price
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(
        job_id="train-a1", market="spot", stop_after_seconds=7090
    )
    ran_on = {"job_id": "train-a1", "market": "spot", "instance_type": "m5.2xlarge"}
    answers = [
        JobStatus(state=JobState.RUNNING, billable_seconds=s, **ran_on) for s in (100.0, 1000.0, 1690.0)
    ]
    stops: list[str] = []
    monkeypatch.setattr(LocalBackend, "poll", lambda self, job_id: answers.pop(0))
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    real_list_price = price_source.list_price
    calls: list[str] = []

    def down_at_first(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        if len(calls) == 1:
            raise LedgerUnavailableError("ledger down for one poll")
        return real_list_price(*args, **kwargs)

    monkeypatch.setattr(price_source, "list_price", down_at_first)
    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options={"root": str(tmp_path)}, job_id="train-a1", state=state.to_json()
    )
    assert watch.poll_once(utcnow()) is None and stops == []  # price unknown: asked again
    assert watch.poll_once(utcnow()) is None and stops == []  # 1000 s of the 1690 s $0.10 buys there
    assert watch.poll_once(utcnow()) is None and stops == ["train-a1"]


@pytest.mark.parametrize(
    ("billed_usd", "stop_after_seconds"),
    [
        ("0.08", 250),  # $0.02 left buys 360 s at $0.20/hour, less the 110 s grace (1330 s at $0.05/hour)
        ("0.094", None),  # $0.006 buys 108 s at $0.20/hour, less than its grace: nothing is started
    ],
)
def test_the_attempt_after_one_on_a_dearer_type_is_sized_at_that_types_price(
    ledger: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    billed_usd: str,
    stop_after_seconds: int | None,
) -> None:
    # Attempt 1 ran on an m5.2xlarge (4 times the planned m5.large): attempt 2 was still sized at the
    # planned price, its limit (and its "stopped after" log) 4 times what is left of max_usd buys there,
    # and it started where that was less than a minute of it.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.training.attempts import Attempt, AttemptState
    from costaware.training.plan import RemotePlan

    plan = replace(
        RemotePlan.from_json(CAPTURED),
        max_usd="0.10",
        billing=None,
        backend_options={"root": str(tmp_path / "jobs")},
        checkpoint_uri=str(tmp_path / "ckpt"),
    )
    on_dearer = Attempt(1, "train-a1", "spot", "m5.2xlarge", 1690.0, billed_usd, "max_usd", "stopped")
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05", attempts=(on_dearer,))
    submitted: list[Any] = []
    monkeypatch.setattr(LocalBackend, "submit", lambda self, request: submitted.append(request) or "train-a2")
    op = operator(tmp_path, deferrable=False)
    if stop_after_seconds is None:
        with pytest.raises(AirflowFailException, match=r"less than 60 s on spot m5\.2xlarge at \$0\.20/hour"):
            op._submit(state, "spot")
        assert submitted == []
        return
    running = op._submit(state, "spot")
    (request,) = submitted
    assert request.stop_after_seconds == stop_after_seconds
    assert running.current is not None and running.current.stop_after_seconds == stop_after_seconds
    assert (
        f"attempt 2 is stopped after {stop_after_seconds} s at the latest: $0.02 is left of max_usd, at "
        "$0.20/hour on m5.2xlarge, the type attempt 1 ran on" in capsys.readouterr().out
    )


def test_auto_checkpoint_interval_weighs_how_long_a_multi_instance_run_ran(tmp_path: Path) -> None:
    # SageMaker's 4 instances preempted after 700 s bill 2800 s: "auto" re-tuned the interval as if the
    # spot runs lasted 4 times as long, checkpointing far less often than the churn called for.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.training.attempts import Attempt, AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.training.plan.interval import observed_interval

    plan = replace(
        RemotePlan.from_json(CAPTURED),
        backend="sagemaker",
        backend_options={"instance_count": 4},
        checkpoint_every_seconds=3600.0,
        checkpoint_uri=str(tmp_path / "ckpt"),
        spec_uri="",
    )
    preempted = tuple(
        Attempt(n, f"train-a{n}", "spot", "ml.m5.large", 2800.0, "0.01", "preemption", "preempted")
        for n in (1, 2)
    )
    op = operator(tmp_path, deferrable=False)
    op.checkpoint_every_seconds = "auto"
    retuned = op._retune_interval(AttemptState(plan=plan, spot_usd_per_hour="0.05", attempts=preempted))
    ran = observed_interval(
        [700.0, 700.0],
        planned_seconds=3600.0,
        saved_on_notice=[False, False],
        restart_overhead_seconds=plan.placement.restart_overhead_seconds,
    )
    assert ran is not None and retuned == ran[0]


def test_a_bill_whose_price_cannot_be_read_for_now_is_made_again_not_written_at_the_planned_price(
    ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A ledger blip at the price read billed an hour on an m5.2xlarge (4 times the planned m5.large) at the
    # planned price, $0.05 of $0.20, and max_usd's money left was overstated by the rest.
    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.price_source as price_source
    from costaware.core.errors import LedgerUnavailableError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    plan = RemotePlan.from_json(CAPTURED)
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(job_id="train-a1", market="spot")
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    job = {
        "job_id": "train-a1",
        "state": "succeeded",
        "market": "spot",
        "instance_type": "m5.2xlarge",
        "billable_seconds": 3600.0,
        "ended_at": time.time(),
    }
    real_list_price = price_source.list_price
    calls: list[str] = []

    def down_at_first(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        if len(calls) == 1:
            raise LedgerUnavailableError("ledger down for a moment")
        return real_list_price(*args, **kwargs)

    monkeypatch.setattr(price_source, "list_price", down_at_first)
    with pytest.raises(LedgerUnavailableError):
        billing._bill_attempt(state, job, None)
    assert [e for e in ledger.entries() if e["task_id"] == "train"] == []  # nothing written low
    billing._bill_attempt(state, job, None)  # made again, the ledger back
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert Decimal(str(entry["usd"])) == Decimal("0.20")


@pytest.mark.parametrize("copy_type", ["m5.large", None], ids=["copy_on_planned_type", "missing_database"])
def test_a_dearer_types_stop_holds_whatever_its_copies_or_a_missing_database_say_at_the_first_poll(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_type: str | None
) -> None:
    # The limit was worked out once, at the first poll that saw the dearer type. A Batch copy that ran on
    # the planned type weighed most then, and the job ran on to $0.1575 of a $0.10 cap; a missing ledger
    # database (not an outage) at that poll read as the plan's price and the job was never stopped.
    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.price_source as price_source
    from costaware.adapters.compute.base import COPY_SECONDS_BY_TYPE, JobState, JobStatus
    from costaware.core.errors import LedgerDatabaseMissingError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    plan = replace(RemotePlan.from_json(CAPTURED), max_usd="0.10", billing=None)  # at its spot price
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05").submitted(
        job_id="train-a1", market="spot", stop_after_seconds=7090
    )
    copy_seconds = 60.0 if copy_type else 0.0
    metrics = {COPY_SECONDS_BY_TYPE: {copy_type: copy_seconds}} if copy_type else {}

    def status(own_seconds: float, state: JobState = JobState.RUNNING) -> JobStatus:
        return JobStatus(
            job_id="train-a1",
            state=state,
            market="spot",
            instance_type="m5.2xlarge",
            billable_seconds=own_seconds + copy_seconds,
            metrics=metrics,
            ended_at=time.time() if state.done else None,
        )

    answers = [status(s) for s in (40.0, 1000.0, 1500.0, 1700.0)]
    answers.append(status(1760.0, JobState.INTERRUPTED))
    stops: list[str] = []
    monkeypatch.setattr(LocalBackend, "poll", lambda self, job_id: answers.pop(0))
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    if copy_type is None:
        real_list_price = price_source.list_price
        calls: list[str] = []

        def missing_at_first(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[1])
            if len(calls) == 1:
                raise LedgerDatabaseMissingError("database 'costaware' does not exist")
            return real_list_price(*args, **kwargs)

        monkeypatch.setattr(price_source, "list_price", missing_at_first)
    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options={"root": str(tmp_path)}, job_id="train-a1", state=state.to_json()
    )
    event = None
    while event is None:
        event = watch.poll_once(utcnow())
    assert stops == ["train-a1"]
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    billing._bill_attempt(AttemptState.from_json(event["state"]), event["job"], "max_usd")
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert Decimal(str(entry["usd"])) <= Decimal("0.10")  # within max_usd


def test_a_kill_bills_its_job_even_where_the_price_of_the_type_it_ran_on_cannot_be_read(
    ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kill has no later to bill in: raising there left the stopped job unbilled, where the planned price
    # at least counts it.
    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.price_source as price_source
    from costaware.core.errors import LedgerUnavailableError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    state = AttemptState(plan=RemotePlan.from_json(CAPTURED), spot_usd_per_hour="0.05").submitted(
        job_id="train-a1", market="spot"
    )
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    job = {
        "job_id": "train-a1",
        "state": "interrupted",
        "market": "spot",
        "instance_type": "m5.2xlarge",
        "billable_seconds": 3600.0,
        "ended_at": time.time(),
    }

    def down(*args: Any, **kwargs: Any) -> Any:
        raise LedgerUnavailableError("ledger down for a moment")

    monkeypatch.setattr(price_source, "list_price", down)
    billing._bill_attempt(state, job, "killed", price_unread_raises=False)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert Decimal(str(entry["usd"])) == Decimal("0.05")  # the planned price: counted, if low


def test_an_on_demand_attempt_in_another_region_is_billed_at_that_regions_price(ledger: Any) -> None:
    # An on-demand job the backend ran in a zone of another region (a followed job, or one that reports its
    # zone) was billed at the plan region's on-demand price, while its savings were reckoned against its own.
    from attempt_states import CAPTURED  # tests/support/

    from costaware.adapters.price_source import list_price
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.training.plan.remote_plan import Placement

    plan = RemotePlan.from_json(CAPTURED)  # m5.large in us-east-1 at $2.00/hour on-demand
    plan = replace(plan, placement=Placement(zones=("us-east-1a", "us-west-2a")))
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    there = list_price(billing.ledger_hook.get_conn(), "m5.large", "us-west-2")
    assert there != Decimal(plan.on_demand_usd_per_hour)
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand", zone="us-west-2a")
    job = {
        "job_id": "train-a1",
        "state": "succeeded",
        "market": "on_demand",
        "instance_type": "m5.large",
        "availability_zone": "us-west-2a",
        "billable_seconds": 3600.0,
        "ended_at": time.time(),
    }
    billing._bill_attempt(state, job, None)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train" and e["kind"] == "compute"]
    assert Decimal(str(entry["usd"])) == there
    assert Decimal(str(entry["on_demand_usd"])) == there  # no saving: it ran on-demand there


def test_a_followed_job_is_stopped_at_what_is_left_of_the_cap_now(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A retry re-attaching to the job an earlier try submitted kept that job's older, longer time limit:
    # with the cap lowered since (the budgets' room), the job ran on past what is left of max_usd.
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempt_effects import cap_rate, capped_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.remote import job_name
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    op = operator(tmp_path, max_usd="0.10")
    op._retry = True  # as execute sets it on try 2
    state = op._start(context_for(try_number=2))
    name = job_name(state.plan.base_name, 1)
    running = {"job_id": name, "market": "spot", "instance_type": "p3.2xlarge"}
    answers = [JobStatus(state=JobState.RUNNING, billable_seconds=100.0, **running)]
    stops: list[str] = []
    monkeypatch.setattr(LocalBackend, "find", lambda self, job: FoundJob(name) if job == name else None)
    monkeypatch.setattr(LocalBackend, "poll", lambda self, job_id: answers.pop(0))
    monkeypatch.setattr(LocalBackend, "submit", lambda self, request: request.job_name)  # found: kept
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    followed = op._submit(state, "spot")
    assert followed.current is not None
    limit = capped_seconds(followed, cap_rate(followed, "spot"))
    assert limit is not None and 0 < limit < 3600  # $0.10 at $0.918/hour less the grace period
    assert followed.current.stop_after_seconds == limit
    assert f"stopped after {limit} s of running" in capsys.readouterr().out

    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options=op.backend_options, job_id=name, state=followed.to_json()
    )
    answers.extend(
        [
            JobStatus(state=JobState.RUNNING, billable_seconds=limit - 1.0, **running),
            JobStatus(state=JobState.RUNNING, billable_seconds=float(limit), **running),
            JobStatus(state=JobState.RUNNING, billable_seconds=limit + 30.0, **running),  # its grace period
            JobStatus(state=JobState.INTERRUPTED, billable_seconds=limit + 60.0, ended_at=1.0, **running),
        ]
    )
    assert watch.poll_once(utcnow()) is None and stops == []
    assert watch.poll_once(utcnow()) is None and stops == [name]
    assert watch.poll_once(utcnow()) is None and stops == [name]  # asked once
    event = watch.poll_once(utcnow())
    assert event is not None and event["job"]["state"] == "interrupted"
    ended = AttemptState.from_json(event["state"])
    assert ended.current is not None and ended.current.stopped_by_cap(event["job"])  # cause max_usd


def _on_demand_in_us_west_2() -> tuple[Any, Any, dict[str, Any]]:
    """An ended on-demand attempt that ran in us-west-2a, planned in us-east-1, and its billing."""
    from attempt_states import CAPTURED  # tests/support/

    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.training.plan.remote_plan import Placement

    plan = RemotePlan.from_json(CAPTURED)  # m5.large in us-east-1 at $2.00/hour on-demand
    plan = replace(plan, placement=Placement(zones=("us-east-1a", "us-west-2a")))
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand", zone="us-west-2a")
    job = {
        "job_id": "train-a1",
        "state": "succeeded",
        "market": "on_demand",
        "instance_type": "m5.large",
        "availability_zone": "us-west-2a",
        "billable_seconds": 3600.0,
        "ended_at": 1_796_083_200.0,
    }
    return billing, state, job


def test_an_attempt_in_another_region_is_billed_later_where_the_ledger_cannot_be_read_for_its_price(
    ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other region's on-demand price read as the plan region's whenever the ledger could not be read:
    # an m5.large that ran in us-west-2 was billed at us-east-1's $2.00, unsaid, where the bill is made again.
    import costaware.adapters.price_source as price_source
    from costaware.core.errors import LedgerUnavailableError

    billing, state, job = _on_demand_in_us_west_2()

    def down(*args: Any, **kwargs: Any) -> Any:
        raise LedgerUnavailableError("ledger database locked")

    monkeypatch.setattr(price_source, "list_price", down)
    with pytest.raises(LedgerUnavailableError, match="ledger database locked"):
        billing._bill_attempt(state, job, None)
    assert [e for e in ledger.entries() if e["task_id"] == "train"] == []  # billed when it is read again
    # A kill has no later: the plan region's price, counted at least.
    billing._bill_attempt(state, job, "killed", price_unread_raises=False)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert Decimal(str(entry["usd"])) == Decimal("2.00")


def test_an_attempt_in_a_region_no_price_source_has_is_billed_at_the_plans_price_with_a_warning(
    ledger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import costaware.adapters.price_source as price_source
    from costaware.core.errors import PriceNotFoundError

    billing, state, job = _on_demand_in_us_west_2()

    def unpriced(conn: Any, instance_type: str, region: str) -> Any:
        raise PriceNotFoundError(f"no on-demand price for {instance_type} in {region}")

    monkeypatch.setattr(price_source, "list_price", unpriced)
    with caplog.at_level(logging.WARNING):
        billing._bill_attempt(state, job, None)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert Decimal(str(entry["usd"])) == Decimal("2.00")
    assert (
        "the on-demand price of m5.large in us-west-2 (zone us-west-2a) is unknown (no on-demand price for "
        "m5.large in us-west-2): billed at us-east-1's, 2.00 USD/hour" in caplog.text
    )


def test_a_poll_that_cannot_read_the_price_of_the_jobs_region_asks_again_rather_than_size_the_stop(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dearer type's stop read another region's on-demand price as the plan region's when the ledger
    # could not be read: a job in us-west-2 (m5.large $0.096/hour there) was sized at us-east-1's $2.00 and
    # stopped 20 times too early; a region dearer than the plan's would have run past max_usd.
    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.price_source as price_source
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import LedgerUnavailableError
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.training.plan.remote_plan import Placement
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    plan = replace(
        RemotePlan.from_json(CAPTURED),
        max_usd="0.10",
        billing=None,
        placement=Placement(zones=("us-east-1a", "us-west-2a")),
    )
    state = AttemptState(plan=plan).submitted(job_id="train-a1", market="on_demand", zone="us-west-2a")
    ran_on = {"job_id": "train-a1", "market": "on_demand", "instance_type": "m5.2xlarge"}
    answers = [JobStatus(state=JobState.RUNNING, billable_seconds=100.0, **ran_on) for _ in range(2)]
    stops: list[str] = []
    monkeypatch.setattr(LocalBackend, "poll", lambda self, job_id: answers.pop(0))
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    real_list_price = price_source.list_price
    down = {"us-west-2": True}

    def down_there_at_first(conn: Any, instance_type: str, region: str) -> Any:
        if down.pop(region, False):
            raise LedgerUnavailableError("ledger down for one poll")
        return real_list_price(conn, instance_type, region)

    monkeypatch.setattr(price_source, "list_price", down_there_at_first)
    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options={"root": str(tmp_path)}, job_id="train-a1", state=state.to_json()
    )
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert watch.poll_once(now) is None and stops == []  # the price unknown: asked again
    # $0.10 buys 937 s at 4 x $0.096/hour: 100 s in, not stopped.
    assert watch.poll_once(now + timedelta(seconds=10)) is None and stops == []


def test_an_attempt_in_another_region_is_not_sized_while_the_ledger_cannot_be_read_for_its_price(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its max_usd limit was sized at the plan region's on-demand price where the other region's could not
    # be read (what bounds an on-demand attempt, or spot billed at the price in force): in a dearer region
    # the limit outran the cap. The submit is made again instead, as for a dearer type's price.
    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.price_source as price_source
    from costaware.core.errors import LedgerUnavailableError
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.training.plan.remote_plan import Placement

    plan = replace(
        RemotePlan.from_json(CAPTURED),
        max_usd="0.10",
        billing=None,
        backend_options={"root": str(tmp_path / "jobs")},
        checkpoint_uri=str(tmp_path / "ckpt"),
        placement=Placement(first_zone="us-west-2a"),
    )
    state = AttemptState(plan=plan, spot_usd_per_hour="0.05")
    submitted: list[Any] = []
    monkeypatch.setattr(LocalBackend, "submit", lambda self, request: submitted.append(request) or "train-a1")

    def down(conn: Any, instance_type: str, region: str) -> Any:
        raise LedgerUnavailableError("ledger database locked")

    monkeypatch.setattr(price_source, "list_price", down)
    with pytest.raises(LedgerUnavailableError, match="ledger database locked"):
        operator(tmp_path, deferrable=False)._submit(state, "spot")
    assert submitted == []


def test_a_followed_job_with_nothing_left_of_the_cap_is_stopped_while_it_waits_to_start(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A retry the budgets had no room for followed a job still waiting for spot capacity: it was stopped only
    # at its first poll running, after its boot and into its grace period, all billed past the cap.
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempt_effects import MIN_CAPPED_SECONDS
    from costaware.training.attempts import AttemptState
    from costaware.training.remote import job_name
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    op = operator(tmp_path, max_usd="0.001")  # next to nothing left: no room for a run
    op._retry = True  # as execute sets it on try 2
    state = op._start(context_for(try_number=2))
    name = job_name(state.plan.base_name, 1)
    waiting = JobStatus(job_id=name, state=JobState.PENDING, market="spot", instance_type="p3.2xlarge")
    answers = [waiting, waiting]
    stops: list[str] = []
    monkeypatch.setattr(LocalBackend, "find", lambda self, job: FoundJob(name) if job == name else None)
    monkeypatch.setattr(LocalBackend, "poll", lambda self, job_id: answers.pop(0))
    monkeypatch.setattr(LocalBackend, "submit", lambda self, request: request.job_name)  # found: kept
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    followed = op._submit(state, "spot")
    assert followed.current is not None and followed.current.stop_by_poll
    assert followed.current.stop_after_seconds is not None
    assert followed.current.stop_after_seconds < MIN_CAPPED_SECONDS
    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options=op.backend_options, job_id=name, state=followed.to_json()
    )
    assert watch.poll_once(utcnow()) is None and stops == [name]  # stopped while it waits
    answers.append(JobStatus(job_id=name, state=JobState.INTERRUPTED, market="spot", ended_at=1.0))
    event = watch.poll_once(utcnow())
    assert event is not None and stops == [name]
    ended = AttemptState.from_json(event["state"])
    assert ended.current is not None and ended.current.stopped_by_cap(event["job"])  # cause max_usd


def test_a_followed_job_the_wait_never_saw_is_billed_with_what_it_ran_before_the_re_attach(
    ledger: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its submitted_at is this try's re-attach: gone before the wait saw it (a triggerer restart, a drained
    # pod), it was billed from then, and the 2 h it ran under the earlier try were billed to nobody.
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.core.series import parse_instant
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.remote import job_name
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    op = operator(tmp_path, max_usd="10")
    op._retry = True  # as execute sets it on try 2
    state = op._start(context_for(try_number=2))
    name = job_name(state.plan.base_name, 1)
    ran_before = JobStatus(
        job_id=name,
        state=JobState.RUNNING,
        market="spot",
        instance_type="p3.2xlarge",
        billable_seconds=7200.0,
    )
    answers: list[Any] = [ran_before]
    stops: list[str] = []

    def poll(self: LocalBackend, job_id: str) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(LocalBackend, "find", lambda self, job: FoundJob(name) if job == name else None)
    monkeypatch.setattr(LocalBackend, "poll", poll)
    monkeypatch.setattr(LocalBackend, "submit", lambda self, request: request.job_name)  # found: kept
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    followed = op._submit(state, "spot")
    assert followed.current is not None and followed.current.followed is not None
    found_at = parse_instant(followed.current.followed["seen_at"], name="seen_at")
    watch = RemoteTrainingJobTrigger(  # rebuilt after a restart: it never saw the job
        backend="local", backend_options=op.backend_options, job_id=name, state=followed.to_json()
    )
    answers.extend([JobNotFoundError("404")] * 2)
    # Its own first poll misses it: not listed yet for 600 s from then (a listing that lags).
    assert watch.poll_once(found_at + timedelta(seconds=100)) is None and stops == []
    capsys.readouterr()
    event = watch.poll_once(found_at + timedelta(seconds=700))
    assert event is not None and event["job"]["state"] == "interrupted"
    # What it ran before, since at the most, and its grace period after the stop (it may run on).
    assert event["job"]["billable_seconds"] == 7200.0 + 700.0 + stop_seconds(followed)
    assert stops == [name]  # a listing that lags: it may run on
    said = capsys.readouterr().out
    assert (
        f"which local has not listed since this try found it (an earlier try's job) at {found_at.isoformat()}"
        in said
    )


def test_a_retry_reads_an_earlier_tries_job_again_where_its_first_poll_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unread at the re-attach (throttled), the job was followed as waiting with 0 s run: a wait that never
    # saw it (a kill while its polls failed, a job gone) billed 170 s of a job that had run 7200 s.
    import time

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import ComputeBackendError
    from costaware.operators.remote_attempts import EARLIER_JOB_POLL_WAITS_SECONDS

    ran_before = JobStatus(job_id="train-a1", state=JobState.RUNNING, market="spot", billable_seconds=7200.0)
    answers: list[Any] = [
        ComputeBackendError("ThrottlingException"),
        TimeoutError("read timed out"),
        ran_before,
    ]

    class Backend:
        name = "batch"

        def find(self, job_name: str) -> FoundJob:
            return FoundJob("train-a1")

        def poll(self, job_id: str) -> Any:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    op = operator(tmp_path)
    op._retry = True
    assert op._earlier_job(Backend(), "train-a1") == (ran_before, None, "")  # type: ignore[arg-type]
    assert slept == list(EARLIER_JOB_POLL_WAITS_SECONDS[:2])
    # Unread every time: followed as unknown, after the last wait, as before.
    answers.extend([ComputeBackendError("ThrottlingException")] * (len(EARLIER_JOB_POLL_WAITS_SECONDS) + 1))
    unread = op._earlier_job(Backend(), "train-a1")  # type: ignore[arg-type]
    assert unread is not None and unread[0].state == JobState.PENDING and answers == []


def test_a_retry_follows_an_earlier_tries_job_from_its_look_up_where_that_read_it_as_a_poll(
    tmp_path: Path,
) -> None:
    # SageMaker's look-up by name describes the job as its poll does: a second describe read it again.
    seen = JobStatus(job_id="train-a1", state=JobState.RUNNING, market="spot", billable_seconds=60.0)

    class Backend:
        name = "sagemaker"

        def find(self, job_name: str) -> FoundJob:
            return FoundJob("train-a1", created_at=1_700_000_000.0, status=seen)

        def poll(self, job_id: str) -> Any:
            pytest.fail("polled again after its look-up read it")

    op = operator(tmp_path)
    op._retry = True
    assert op._earlier_job(Backend(), "train-a1") == (seen, 1_700_000_000.0, "")  # type: ignore[arg-type]


def test_a_retry_reads_an_earlier_tries_job_once_where_the_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A configuration error (no permission) fails the same way each time: the loop went on after it, four
    # polls and four identical warnings.
    import time

    from costaware.adapters.compute.base import JobState
    from costaware.core.errors import ConfigurationError

    class Backend:
        name = "batch"
        polls = 0

        def find(self, job_name: str) -> FoundJob:
            return FoundJob("train-a1")

        def poll(self, job_id: str) -> Any:
            self.polls += 1
            raise ConfigurationError("AccessDenied batch:DescribeJobs: check the connection's permissions")

    monkeypatch.setattr(time, "sleep", lambda seconds: pytest.fail("slept after a configuration error"))
    op = operator(tmp_path)
    op._retry = True
    backend = Backend()
    unread = op._earlier_job(backend, "train-a1")  # type: ignore[arg-type]
    assert unread is not None and unread[0].state == JobState.PENDING
    assert backend.polls == 1
    assert capsys.readouterr().out.count("cannot be read now") == 1


@pytest.mark.parametrize("market", ["spot", "on_demand", ""])
@pytest.mark.parametrize(
    "found",
    [
        FoundJob("train-a1", started_at=7200.0, ended_at=7800.0, end_state=JobState.FAILED),
        FoundJob("train-a1"),  # nothing said of when it ran
        FoundJob("train-a1", created_at=7500.0),
    ],
    ids=["ended", "no time", "created"],
)
def test_the_warning_for_an_unread_earlier_job_names_the_market_its_look_up_gave(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], found: FoundJob, market: str
) -> None:
    # The look-up's market is the one the job is billed on (d10ef166): the warning still said "market and
    # zone unknown".
    class Backend:
        name = "batch"

        def find(self, job_name: str) -> FoundJob:
            return replace(found, market=market)

        def poll(self, job_id: str) -> Any:
            raise ConfigurationError("AccessDenied batch:DescribeJobs")

    op = operator(tmp_path)
    op._retry = True
    unread = op._earlier_job(Backend(), "train-a1")  # type: ignore[arg-type]
    assert unread is not None and unread[0].market == market
    out = capsys.readouterr().out
    assert "job train-a1 of an earlier try cannot be read now" in out
    if market:
        assert f"zone unknown; billed on {market}, as its look-up says" in out
        assert "market and zone unknown" not in out
    else:
        assert "market and zone unknown" in out


@pytest.mark.parametrize(("started", "created"), [(7200.0, 7500.0), (None, 7500.0)])
def test_a_followed_job_unread_at_the_re_attach_is_billed_from_its_start_where_the_wait_never_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ledger: Any, started: float | None, created: float
) -> None:
    # Each poll of the re-attach failed (throttling): the job was followed as waiting with 0 s run, and a
    # wait that never read it (gone later) billed it from the re-attach: its 2 h, earlier try unbilled.
    from costaware.core.errors import ComputeBackendError, JobNotFoundError
    from costaware.operators import remote_attempt_following, remote_attempts
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.remote import job_name
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    monkeypatch.setattr(remote_attempts, "utcnow", lambda: now)
    monkeypatch.setattr(remote_attempt_following, "utcnow", lambda: now)  # where the re-attach reads it
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    op = operator(tmp_path, max_usd="10")
    op._retry = True  # as execute sets it on try 2
    state = op._start(context_for(try_number=2))
    name = job_name(state.plan.base_name, 1)
    found = FoundJob(
        name,
        started_at=None if started is None else now.timestamp() - started,
        created_at=now.timestamp() - created,
    )
    answers: list[Any] = [ComputeBackendError("ThrottlingException")] * 4
    stops: list[str] = []

    def poll(self: LocalBackend, job_id: str) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(LocalBackend, "find", lambda self, job: found if job == name else None)
    monkeypatch.setattr(LocalBackend, "poll", poll)
    monkeypatch.setattr(LocalBackend, "submit", lambda self, request: request.job_name)  # found: kept
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    followed = op._submit(state, "spot")
    assert answers == []  # every read of the re-attach failed
    # Its submit under the earlier try, where its time limit runs from (a stop that fails bills it to there).
    assert followed.current is not None and followed.current.followed is not None
    assert followed.current.followed["created_at"] == (now - timedelta(seconds=created)).isoformat()
    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options=op.backend_options, job_id=name, state=followed.to_json()
    )
    answers.extend([JobNotFoundError("404")] * 2)
    assert watch.poll_once(now + timedelta(seconds=100)) is None  # not listed yet: a listing that lags
    event = watch.poll_once(now + timedelta(seconds=700))
    assert event is not None and event["job"]["state"] == "interrupted"
    # From its start (its creation where the backend gives no start), and its grace period after the stop.
    since = created if started is None else started
    assert event["job"]["billable_seconds"] == since + 700.0 + stop_seconds(followed)
    assert stops == [name]
    # Billed on the market it was followed on (unread, it said none: its bill failed on market '').
    recorded = op._bill_attempt(followed, event["job"], None)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert entry["market"] == "spot" and recorded.attempts[-1].market == "spot"


@pytest.mark.parametrize("submitted_on", ["spot", "on_demand"])
def test_a_followed_job_unread_at_the_re_attach_is_billed_on_the_market_it_was_submitted_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ledger: Any, submitted_on: str
) -> None:
    # Unread, it was taken on the market the retry would choose now: a spot job an earlier try submitted,
    # followed past its latest safe start (on-demand now), was billed at the on-demand price, and an
    # on-demand one followed on spot at the spot price, under its cost.
    from costaware.core.errors import ComputeBackendError
    from costaware.operators import remote_attempt_following, remote_attempts
    from costaware.training.remote import job_name

    now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    monkeypatch.setattr(remote_attempts, "utcnow", lambda: now)
    monkeypatch.setattr(remote_attempt_following, "utcnow", lambda: now)  # where the re-attach reads it
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    op = operator(tmp_path, max_usd="10")
    op._retry = True  # as execute sets it on try 2
    state = op._start(context_for(try_number=2))
    name = job_name(state.plan.base_name, 1)
    ended_at = now - timedelta(hours=1)
    found = FoundJob(
        name,
        started_at=ended_at.timestamp() - 3600,
        ended_at=ended_at.timestamp(),
        end_state=JobState.INTERRUPTED,
        market=submitted_on,
    )

    def poll(self: LocalBackend, job_id: str) -> Any:
        raise ComputeBackendError("ThrottlingException")

    monkeypatch.setattr(LocalBackend, "find", lambda self, job: found if job == name else None)
    monkeypatch.setattr(LocalBackend, "poll", poll)
    monkeypatch.setattr(LocalBackend, "submit", lambda self, request: request.job_name)  # found: kept
    retry_on = "on_demand" if submitted_on == "spot" else "spot"
    followed = op._submit(state, retry_on)
    assert followed.current is not None and followed.current.market == submitted_on
    assert followed.current.followed is not None
    recorded = op._bill_attempt(followed, followed.current.followed["job"], None)
    (entry,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    assert entry["market"] == submitted_on == recorded.attempts[-1].market


@pytest.mark.parametrize("end_state", [JobState.INTERRUPTED, JobState.SUCCEEDED])
def test_a_followed_job_that_had_ended_when_found_unread_is_billed_to_its_end_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ledger: Any, end_state: JobState
) -> None:
    # The job's name is the same on every try and clear: a clear days later found the job that ran 1 h and
    # ended 2 days before, its polls failed, and it was followed as waiting and billed from its start up to
    # now (2 days), and once gone, billed again beside the entry the earlier try had made for it.
    from costaware.core.errors import ComputeBackendError, JobNotFoundError
    from costaware.operators import remote_attempt_following, remote_attempts
    from costaware.training.remote import job_name
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    ended_at = now - timedelta(days=2)
    monkeypatch.setattr(remote_attempts, "utcnow", lambda: now)
    monkeypatch.setattr(remote_attempt_following, "utcnow", lambda: now)  # where the re-attach reads it
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    op = operator(tmp_path, max_usd="10")
    op._retry = True  # as execute sets it on a later try
    state = op._start(context_for(try_number=2))
    name = job_name(state.plan.base_name, 1)
    found = FoundJob(
        name,
        started_at=ended_at.timestamp() - 3600,
        created_at=ended_at.timestamp() - 3700,
        ended_at=ended_at.timestamp(),
        end_state=end_state,
    )
    answers: list[Any] = [ComputeBackendError("ThrottlingException")] * 4
    stops: list[str] = []

    def poll(self: LocalBackend, job_id: str) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(LocalBackend, "find", lambda self, job: found if job == name else None)
    monkeypatch.setattr(LocalBackend, "poll", poll)
    monkeypatch.setattr(LocalBackend, "submit", lambda self, request: request.job_name)  # found: kept
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    followed = op._submit(state, "spot")
    assert answers == []  # every read of the re-attach failed
    assert followed.current is not None and not followed.current.stop_by_poll  # ended: nothing to stop
    # The earlier try saw it end and billed it, at its poll's figure (its end keys the entry).
    polled = JobStatus(
        job_id=name,
        state=end_state,
        billable_seconds=3600.0,
        market="spot",
        instance_type="m5.large",
        ended_at=ended_at.timestamp(),
    )
    op._bill_attempt(followed, polled.to_dict(), None)
    (earlier,) = [e for e in ledger.entries() if e["task_id"] == "train"]
    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options=op.backend_options, job_id=name, state=followed.to_json()
    )
    answers.extend([JobNotFoundError("404")] * 2)
    assert watch.poll_once(now + timedelta(seconds=100)) is None  # not listed yet: a listing that lags
    event = watch.poll_once(now + timedelta(seconds=700))
    assert event is not None and event["job"]["state"] == end_state.value
    # From its start to its end, as its backend ended it: not to now, and nothing stopped or run on since.
    assert event["job"]["billable_seconds"] == 3600.0 and event["job"]["ended_at"] == ended_at.timestamp()
    assert stops == []
    recorded = op._bill_attempt(followed, event["job"], None)
    assert [e["entry_uid"] for e in ledger.entries() if e["task_id"] == "train"] == [earlier["entry_uid"]]
    assert Decimal(recorded.attempts[-1].usd) == Decimal(str(earlier["usd"]))  # counted, not billed again


@pytest.mark.parametrize("goes", [False, True], ids=["followed", "new run"])
def test_a_retrys_cap_line_says_an_earlier_try_started_the_job_only_where_it_follows_one(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, goes: bool
) -> None:
    # Said before the submit, the line told of the job the look-up found: where that job went and the
    # submit started a new run, it read "attempt 1 was started by an earlier try ... under the time limit
    # of that try" of a run this try started, right before the warning that it is another run.
    from structlog.testing import capture_logs

    import costaware.training.attempt_effects as effects

    (tmp_path / "capacity-us-east-1a").write_text("1")
    first = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"], max_usd=50)
    with pytest.raises(TaskDeferred):
        first.execute(context_for())
    monkeypatch.setattr(effects, "capped_seconds", lambda state, rate: 30)
    if goes:
        _the_job_goes_before_each_submit(monkeypatch)
    retry = operator(tmp_path, seconds=1.0, availability_zones=["us-east-1a"], max_usd=50)
    with pytest.raises(TaskDeferred), capture_logs() as said:  # self.log is structlog's: not in caplog
        retry.execute(context_for(try_number=2))
    lines = [str(e.get("event")) for e in said if "left of max_usd" in str(e.get("event"))]
    assert len(lines) == 1, lines
    if goes:
        assert lines[0].startswith("attempt 1 is stopped after 30 s at the latest: $"), lines
    else:
        assert lines[0].startswith("attempt 1 was started by an earlier try as train-"), lines
        assert "under the time limit of that try" in lines[0] and "stopped after 30 s of running" in lines[0]
