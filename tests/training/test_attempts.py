"""The attempts state machine: every branch of ``next_step`` and the JSON the operator and trigger carry."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from attempt_states import CAPTURED  # tests/support/

from costaware.core.spot_decision import SpotDecision
from costaware.training.attempts import (
    NO_CHECKPOINT,
    Attempt,
    AttemptState,
    Current,
    Event,
    Fail,
    Finish,
    JobEnded,
    Pause,
    PriceBack,
    PriceRose,
    Resume,
    Step,
    Submit,
    WaitForPrice,
    event_from_trigger,
    next_step,
    remaining_hours,
)
from costaware.training.plan import Placement, RemotePlan

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
BEFORE, AFTER = NOW + timedelta(hours=1), NOW - timedelta(hours=1)

PLAN = RemotePlan.from_json(CAPTURED)


def _done(n: int) -> Attempt:
    return Attempt(n, f"j-a{n}", "spot", "m5.large", 60.0, "0.01", "preemption", "preempted")


def state(
    *,
    market: str = "spot",
    done: int = 0,
    pausing: str | None = None,
    latest_start: datetime | None = BEFORE,
    command: tuple[str, ...] | None = None,
    market_reason: str = "",
) -> AttemptState:
    """A state whose attempt ``done + 1`` runs on ``market`` (or none runs: ``market=""``)."""
    current = (
        Current(done + 1, f"j-a{done + 1}", market, pausing=pausing, market_reason=market_reason)
        if market
        else None
    )
    return AttemptState(
        plan=PLAN,
        latest_start=latest_start,
        spot_usd_per_hour="0.50",
        command=command,
        attempts=tuple(_done(n) for n in range(1, done + 1)),
        current=current,
    )


def job(ended: str, market: str = "spot", exit_code: int | None = None, reason: str = "r") -> dict[str, Any]:
    return {
        "job_id": "j-a1",
        "state": ended,
        "market": market,
        "billable_seconds": 60.0,
        "instance_type": "m5.large",
        "reason": reason,
        "exit_code": exit_code,
    }


ON_SPOT = SpotDecision(market="spot", usd_per_hour=Decimal("0.40"), reason="back at the forecast minimum")
ON_DEMAND = SpotDecision(market="on_demand", usd_per_hour=Decimal("2.00"), reason="latest resume")

CASES: list[tuple[str, AttemptState, Event, datetime | None, Step]] = [
    ("succeeded", state(), JobEnded(job("succeeded")), None, Finish(record_cause="success")),
    (
        "interrupted before the latest start: spot again",
        state(),
        JobEnded(job("interrupted")),
        None,
        Submit("spot", "preemption", record_cause="preemption"),
    ),
    (
        "interrupted after the latest start: on-demand, and why",
        state(latest_start=AFTER),
        JobEnded(job("interrupted")),
        None,
        Submit(
            "on_demand",
            "preemption",
            record_cause="preemption",
            market_reason="preemption past the latest safe start 2026-11-24T11:00:00+00:00",
        ),
    ),
    (
        "interrupted with no latest start: spot again",
        state(latest_start=None),
        JobEnded(job("interrupted")),
        None,
        Submit("spot", "preemption", record_cause="preemption"),
    ),
    (
        "on-demand interrupted stays on-demand",
        state(market="on_demand"),
        JobEnded(job("interrupted", market="on_demand")),
        None,
        Submit("on_demand", "preemption", record_cause="preemption"),
    ),
    (
        "on-demand interrupted stays on-demand for the reason it went there",
        state(market="on_demand", market_reason="restart thrash in a"),
        JobEnded(job("interrupted", market="on_demand")),
        None,
        Submit("on_demand", "preemption", record_cause="preemption", market_reason="restart thrash in a"),
    ),
    (
        "a store it could not reach (exit 74) is resubmitted, not billed as a preemption",
        state(),
        JobEnded(job("interrupted", exit_code=74)),
        None,
        Submit("spot", "store_error", record_cause="store_error"),
    ),
    (
        "spot capacity not found by the latest start: stop, on-demand",
        state(latest_start=AFTER),
        JobEnded(job("pending"), fallback=True),
        None,
        Submit(
            "on_demand",
            "capacity_wait",
            record_cause="capacity_wait",
            stop_first=True,
            market_reason="no spot capacity by the latest safe start 2026-11-24T11:00:00+00:00",
        ),
    ),
    (
        "price rose: pause at the time the trigger saw it",
        state(),
        PriceRose("spike", "2026-11-24T11:59:00+00:00", job("running")),
        None,
        Pause(reason="spike", job=job("running"), seen_at="2026-11-24T11:59:00+00:00"),
    ),
    (
        "price rose, no time seen: pause now",
        state(),
        PriceRose("spike", None, job("running")),
        None,
        Pause(reason="spike", job=job("running"), seen_at=NOW.isoformat()),
    ),
    (
        "paused job ended with slack left: wait for the price",
        state(pausing="spike"),
        JobEnded(job("interrupted")),
        BEFORE,
        WaitForPrice(record_cause="paused"),
    ),
    (
        "paused job ended with no slack left: on-demand now",
        state(pausing="spike"),
        JobEnded(job("interrupted")),
        AFTER,
        Submit(
            "on_demand",
            "paused",
            record_cause="paused",
            market_reason="paused by a price rise, no slack left for a later spot start",
        ),
    ),
    (
        "paused job that failed is still a pause",
        state(pausing="spike"),
        JobEnded(job("failed", exit_code=1)),
        BEFORE,
        WaitForPrice(record_cause="paused"),
    ),
    (
        "paused job that succeeded before the stop finishes",
        state(pausing="spike"),
        JobEnded(job("succeeded")),
        BEFORE,
        Finish(record_cause="success"),
    ),
    (
        "resume on spot at the decision's price",
        state(market="", done=1),
        PriceBack(ON_SPOT),
        None,
        Resume("spot", "0.40", "back at the forecast minimum"),
    ),
    (
        "resume on on-demand keeps the spot price",
        state(market="", done=1),
        PriceBack(ON_DEMAND),
        None,
        Resume("on_demand", None, "latest resume"),
    ),
    (
        "failed built-in trainer: no retry, its logs",
        state(),
        JobEnded(job("failed", reason="boom")),
        None,
        Fail("training job j-a1 failed: boom", job_id="j-a1", record_cause="code_error"),
    ),
    (
        "failed command: what its exit code means, nothing registered",
        state(command=("python", "train.py")),
        JobEnded(job("failed", exit_code=1, reason="")),
        None,
        Fail(
            "training job j-a1 failed: no reason given; the command exited 1: a code error, not retried "
            "(see its last log lines); nothing was registered",
            job_id="j-a1",
            record_cause="code_error",
        ),
    ),
    (
        # No exit code, so no hint: "...; ; nothing was registered".
        "a command's image that could not be pulled: no exit code to explain",
        state(command=("python", "train.py")),
        JobEnded(job("failed", reason="CannotPullContainerError: not found (check its URI and tag)")),
        None,
        Fail(
            "training job j-a1 failed: CannotPullContainerError: not found (check its URI and tag); nothing "
            "was registered",
            job_id="j-a1",
            record_cause="code_error",
        ),
    ),
    (
        "an image without costaware-run: the launcher is named, not the command's first element",
        state(command=("python", "train.py")),
        JobEnded(job("failed", exit_code=127, reason="sh: 1: costaware-run: not found")),
        None,
        Fail(
            "training job j-a1 failed: sh: 1: costaware-run: not found; costaware-run itself was not found "
            "in the image (exit 127), so the command never started: install costaware-runtime in the image "
            "(pip install costaware-runtime), on the PATH of the image's user; nothing was registered",
            job_id="j-a1",
            record_cause="code_error",
        ),
    ),
    (
        # Kubernetes' StartError (exit 128) read as a code error, sent to log lines a container never started
        # has none of.
        "a container that never started: the runtime's message, no log lines to read",
        state(command=("python", "train.py")),
        JobEnded(job("failed", exit_code=128, reason='StartError: exec: "costaware-run": permission denied')),
        None,
        Fail(
            'training job j-a1 failed: StartError: exec: "costaware-run": permission denied; the container '
            "never started (exit 128: the container runtime could not run its command), so it has no log "
            "lines: fix the image as the runtime's message says; not retried; nothing was registered",
            job_id="j-a1",
            record_cause="code_error",
        ),
    ),
]


@pytest.mark.parametrize(
    ("before", "event", "latest_resume", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_next_step(
    before: AttemptState, event: Event, latest_resume: datetime | None, expected: Step
) -> None:
    assert next_step(before, event, NOW, max_attempts=10, latest_resume=latest_resume) == expected


SPOT_ADVICE, ON_DEMAND_ADVICE = "raise max_attempts or start it on on-demand", "raise max_attempts"
MAX_ATTEMPTS_CASES = [
    (
        "interrupted",
        state(done=2),
        JobEnded(job("interrupted")),
        None,
        "preemption",
        False,
        "preemption: 3",
        SPOT_ADVICE,
    ),
    (
        "fallback: on-demand next, but the job met spot, so starting on on-demand is advice",
        state(done=2),
        JobEnded(job("pending"), fallback=True),
        None,
        "capacity_wait",
        True,
        "preemption: 2, capacity wait: 1",
        SPOT_ADVICE,
    ),
    (
        "paused, no slack",
        state(done=2, pausing="spike"),
        JobEnded(job("interrupted")),
        AFTER,
        "paused",
        False,
        "preemption: 2, paused: 1",
        SPOT_ADVICE,
    ),
    (
        "on-demand from the start: only more attempts help",
        replace(
            state(market="on_demand", done=2),
            attempts=tuple(replace(a, market="on_demand") for a in state(done=2).attempts),
        ),
        JobEnded(job("interrupted", market="on_demand")),
        None,
        "preemption",
        False,
        "preemption: 3",
        ON_DEMAND_ADVICE,
    ),
    ("resume", state(market="", done=3), PriceBack(ON_SPOT), None, None, False, "preemption: 3", SPOT_ADVICE),
]


@pytest.mark.parametrize(
    ("before", "event", "latest_resume", "record_cause", "stop_first", "causes", "advice"),
    [case[1:] for case in MAX_ATTEMPTS_CASES],
    ids=[case[0] for case in MAX_ATTEMPTS_CASES],
)
def test_max_attempts_reached_fails_after_recording_the_last(
    before: AttemptState,
    event: Event,
    latest_resume: datetime | None,
    record_cause: str | None,
    stop_first: bool,
    causes: str,
    advice: str,
) -> None:
    step = next_step(before, event, NOW, max_attempts=3, latest_resume=latest_resume)
    assert step == Fail(
        f"training was interrupted 3 times ({causes}), max_attempts=3 reached: {advice}",
        record_cause=record_cause,
        stop_first=stop_first,
    )
    assert not step.retry


def test_a_store_error_twice_in_a_row_fails_instead_of_buying_more_attempts() -> None:
    once = next_step(
        state(), JobEnded(job("interrupted", exit_code=74)), NOW, max_attempts=10, latest_resume=None
    )
    assert once == Submit("spot", "store_error", record_cause="store_error")  # one may be a passing outage

    before = state(done=1)
    before = replace(before, attempts=(replace(before.attempts[0], cause="store_error"),))
    reason = "costaware-run: could not write /m/_staging/x/attempt-2/output: [Errno 20] Not a directory"
    step = next_step(
        before,
        JobEnded(job("interrupted", exit_code=74, reason=reason)),
        NOW,
        max_attempts=10,
        latest_resume=None,
    )
    assert isinstance(step, Fail) and step.record_cause == "store_error" and step.job_id == "j-a1"
    assert not step.retry  # a setting to fix: an Airflow retry would buy the same failures
    assert reason in step.message
    assert f"model_store {PLAN.model_store!r}" in step.message and PLAN.checkpoint_uri in step.message

    # A store error after a preemption is the first in a row: resubmitted.
    after_preemption = next_step(
        state(done=1), JobEnded(job("interrupted", exit_code=74)), NOW, max_attempts=10, latest_resume=None
    )
    assert isinstance(after_preemption, Submit)


def test_the_last_allowed_attempt_is_still_submitted() -> None:
    step = next_step(state(done=1), JobEnded(job("interrupted")), NOW, max_attempts=3, latest_resume=None)
    assert isinstance(step, Submit)


def test_a_state_written_before_the_typed_plan_reads_and_round_trips() -> None:
    before = copy.deepcopy(CAPTURED)
    parsed = AttemptState.from_json(CAPTURED)
    assert before == CAPTURED  # read, not changed
    # The keys added since: the interval is unknown in an older state, so no work counts as kept (from
    # above); one zone (the backend's choice) with the guard at its defaults; attempts placed nowhere.
    assert parsed.plan.checkpoint_every_seconds is None
    assert parsed.to_json() == {
        **before,
        "checkpoint_every_seconds": None,
        "placement": Placement().to_json(),
        "attempts": [
            {
                **a,
                "zone": "",
                "exit_code": None,
                "restored_step": None,
                "committed_step": None,
                "market_reason": "",
            }
            for a in before["attempts"]
        ],
    }
    assert AttemptState.from_json(json.loads(json.dumps(parsed.to_json()))) == parsed
    assert parsed.current is not None and parsed.current.pausing and parsed.current.stopped
    assert parsed.latest_start == datetime(2026, 11, 26, 14, 18, 41, 332615, tzinfo=timezone.utc)
    assert parsed.attempts == (Attempt.from_json(CAPTURED["attempts"][0]),)
    plan = parsed.plan
    assert plan.watch is not None and plan.watch.to_json() == CAPTURED["watch"]
    assert plan.billing is not None and plan.billing.to_json() == CAPTURED["billing"]
    assert plan.deadline == datetime(2026, 11, 26, 15, 23, 41, 332615, tzinfo=timezone.utc)
    assert (plan.backend, plan.first_market, plan.on_demand_usd_per_hour) == ("local", "spot", "2.00")


@pytest.mark.parametrize(
    ("steps", "exit_code", "kept"),
    [
        ((3, 5), 75, True),  # a newer checkpoint: saved on its notice, or on its interval
        ((NO_CHECKPOINT, 0), None, True),  # the first checkpoint of the training
        ((5, 5), 75, False),  # restored step 5 and cut before the next save (the launcher exits 75 for it)
        ((5, 5), 143, False),
        ((None, None), 77, False),  # the launcher's "preempted before any checkpoint"
        ((NO_CHECKPOINT, NO_CHECKPOINT), 75, None),  # nothing pushed (SageMaker syncs its own): by length
        ((None, 5), 75, None),  # the start was not read: by length
        ((None, None), None, None),  # a state from before steps were kept
    ],
)
def test_an_attempt_kept_work_when_it_committed_a_newer_step_than_it_restored(
    steps: tuple[int | None, int | None], exit_code: int | None, kept: bool | None
) -> None:
    attempt = replace(_done(1), exit_code=exit_code, restored_step=steps[0], committed_step=steps[1])
    assert attempt.kept_work() is kept
    assert Attempt.from_json(json.loads(json.dumps(attempt.to_json()))) == attempt


def test_a_fresh_state_round_trips_without_pause_keys() -> None:
    fresh = {
        **CAPTURED,
        "attempts": [],
        "command": ["python", "t.py"],
        "latest_start": None,
        "checkpoint_every_seconds": 60.0,
        "placement": Placement(zones=("us-west-2a", "us-west-2b"), first_zone="us-west-2b").to_json(),
    }
    fresh["current"] = {"attempt": 1, "job_id": "j-a1", "market": "spot", "zone": "us-west-2b"}
    assert AttemptState.from_json(fresh).to_json() == fresh


def test_transitions_keep_the_json_shape() -> None:
    s = AttemptState.from_json({**CAPTURED, "attempts": [], "current": None})
    s = s.submitted(job_id="j-a1", market="spot")
    assert s.to_json()["current"] == {"attempt": 1, "job_id": "j-a1", "market": "spot"}
    s = s.pausing(reason="spike", job=job("running"), seen_at=NOW.isoformat())
    assert s.to_json()["current"]["stopped"] == {"job": job("running"), "seen_at": NOW.isoformat()}
    s = s.recorded(_done(1))
    assert s.current is None and s.next_attempt == 2 and s.to_json()["attempts"] == [_done(1).to_json()]
    assert s.resumed_at("0.40").spot_usd_per_hour == "0.40" and s.resumed_at(None) is s


def test_why_an_attempt_ran_on_demand_travels_from_its_submit_to_its_record() -> None:
    s = AttemptState.from_json({**CAPTURED, "attempts": [], "current": None})
    why = "restart thrash in us-west-2a: the last 2 preempted runs in each ..."
    s = s.submitted(job_id="j-a1", market="on_demand", market_reason=why)
    assert AttemptState.from_json(json.loads(json.dumps(s.to_json()))) == s
    attempt = replace(_done(1), market="on_demand", market_reason=why)
    assert Attempt.from_json(json.loads(json.dumps(attempt.to_json()))) == attempt
    # A state written before the reason was kept reads as none given.
    older = {k: v for k, v in attempt.to_json().items() if k != "market_reason"}
    assert Attempt.from_json(older).market_reason == ""
    assert "market_reason" not in s.submitted(job_id="j-a2", market="spot").to_json()["current"]


def test_a_resume_on_on_demand_says_a_pause_came_first() -> None:
    paused = state(market="", done=1)
    resumed = next_step(paused, PriceBack(ON_DEMAND), NOW, max_attempts=10, latest_resume=None)
    assert isinstance(resumed, Resume)
    assert resumed.market_reason == "resumed after a pause by a price rise, latest resume"
    on_spot = next_step(paused, PriceBack(ON_SPOT), NOW, max_attempts=10, latest_resume=None)
    assert isinstance(on_spot, Resume) and on_spot.market_reason == ""


def test_pausing_needs_a_running_attempt() -> None:
    with pytest.raises(ValueError, match="no attempt runs"):
        state(market="").pausing(reason="spike", job=job("running"), seen_at=NOW.isoformat())


@pytest.mark.parametrize(
    ("trigger_event", "expected"),
    [
        ({"status": "success", "resume": ON_SPOT.to_xcom(), "state": {}}, PriceBack(ON_SPOT)),
        (
            {"status": "success", "pause": "spike", "job": job("running"), "seen_at": "t", "state": {}},
            PriceRose("spike", "t", job("running")),
        ),
        (
            {"status": "success", "job": job("pending"), "fallback": True, "state": {}},
            JobEnded(job("pending"), True),
        ),
        ({"status": "success", "job": job("succeeded"), "state": {}}, JobEnded(job("succeeded"), False)),
    ],
    ids=["resume", "pause", "fallback", "ended"],
)
def test_event_from_trigger(trigger_event: dict[str, Any], expected: Event) -> None:
    assert event_from_trigger(trigger_event) == expected


@pytest.mark.parametrize(
    ("done", "ended_seconds", "checkpoint_every_seconds", "expected"),
    [
        (0, None, 300.0, Decimal(1)),
        (1, None, 300.0, Decimal(1)),  # 60 s run: less than a restart and a checkpoint interval, all lost
        (0, 1200.0, 300.0, Decimal("0.833333")),  # 1200 - 300 restart - 300 interval = 600 s kept
        (0, 1200.0, None, Decimal(1)),  # no timed checkpoints: a stop may lose everything
        (0, 9000.0, 300.0, Decimal(0)),  # never below zero
    ],
)
def test_remaining_hours(
    done: int, ended_seconds: float | None, checkpoint_every_seconds: float | None, expected: Decimal
) -> None:
    ended = None if ended_seconds is None else {**job("interrupted"), "billable_seconds": ended_seconds}
    left = remaining_hours(
        state(done=done),
        runtime_hours=Decimal(1),
        restart_overhead_minutes=5.0,
        checkpoint_every_seconds=checkpoint_every_seconds,
        ended=ended,
    )
    assert left == expected


def test_remaining_hours_count_how_long_a_multi_instance_attempt_ran_not_its_instance_seconds() -> None:
    # 4 instances for 1200 s bill 4800 s; the run kept 1200 - 300 restart - 300 interval = 600 s of work.
    plan = replace(PLAN, backend="sagemaker", backend_options={"instance_count": 4})
    ended = {**job("interrupted"), "billable_seconds": 4800.0}
    left = remaining_hours(
        replace(state(), plan=plan),
        runtime_hours=Decimal(1),
        restart_overhead_minutes=5.0,
        checkpoint_every_seconds=300.0,
        ended=ended,
    )
    assert left == Decimal("0.833333")


@pytest.mark.parametrize(
    ("steps", "exit_code", "saved"),
    [
        ((3, 5), 75, True),
        ((5, 5), 75, False),
        ((None, None), 75, None),
        ((3, 5), -9, False),
        ((None, None), 77, False),
    ],
)
def test_an_attempt_saved_on_its_notice_when_it_exited_75_from_a_newer_checkpoint(
    steps: tuple[int | None, int | None], exit_code: int, saved: bool | None
) -> None:
    attempt = replace(_done(1), exit_code=exit_code, restored_step=steps[0], committed_step=steps[1])
    assert attempt.saved_on_notice() is saved


@pytest.mark.parametrize(
    ("ended", "reason", "seconds", "capped"),
    [
        ("interrupted", "preempted", 60.0, True),  # it ran as long as the cap allowed (60 s)
        ("interrupted", "preempted", 59.0, False),  # a reclaim before that
        ("failed", "Job attempt duration exceeded timeout", 30.0, True),  # Batch: failed, shorter billed
        ("interrupted", "MaxRuntimeExceeded", 20.0, True),  # SageMaker spot bills less than it ran
        ("failed", "ValueError: the loss went NaN", 60.0, False),  # a code error stays one
    ],
)
def test_an_attempt_stopped_at_max_usd_is_told_from_a_reclaim_and_a_code_error(
    ended: str, reason: str, seconds: float, capped: bool
) -> None:
    running = state(done=1)
    assert running.current is not None
    capped_state = replace(running, current=replace(running.current, stop_after_seconds=60))
    ended_job = {**job(ended, reason=reason), "billable_seconds": seconds}
    step = next_step(capped_state, JobEnded(ended_job), NOW, max_attempts=10, latest_resume=None)
    if capped:
        assert isinstance(step, Submit) and step.record_cause == "max_usd"
    else:
        assert step.record_cause in ("preemption", "code_error") and step.record_cause != "max_usd"
    # Without a cap nothing is ever put down to it.
    plain = next_step(running, JobEnded(ended_job), NOW, max_attempts=10, latest_resume=None)
    assert plain.record_cause != "max_usd"


@pytest.mark.parametrize(("run_seconds", "capped"), [(30.0, False), (60.0, True)])
def test_a_cap_stop_is_judged_by_the_run_length_not_the_seconds_of_all_instances(
    run_seconds: float, capped: bool
) -> None:
    # SageMaker bills every instance: 4 instances preempted 30 s into a 60 s limit bill 120 s.
    plan = replace(PLAN, backend="sagemaker", backend_options={"instance_count": 4})
    running = replace(state(done=1), plan=plan)
    assert running.current is not None
    capped_state = replace(running, current=replace(running.current, stop_after_seconds=60))
    ended_job = {**job("interrupted", reason="preempted"), "billable_seconds": run_seconds * 4}
    step = next_step(capped_state, JobEnded(ended_job), NOW, max_attempts=10, latest_resume=None)
    assert step.record_cause == ("max_usd" if capped else "preemption")


def test_the_stop_a_cap_set_travels_with_the_running_attempt() -> None:
    current = Current(2, "j-a2", "spot", stop_after_seconds=61)
    assert Current.from_json(json.loads(json.dumps(current.to_json()))) == current
    assert "stop_after_seconds" not in Current(2, "j-a2", "spot").to_json()  # older states stay as they were


def test_max_attempts_reached_after_cap_stops_says_to_raise_the_cap() -> None:
    running = state(done=9)
    assert running.current is not None
    capped = replace(running, current=replace(running.current, stop_after_seconds=60))
    step = next_step(capped, JobEnded(job("interrupted")), NOW, max_attempts=10, latest_resume=None)
    assert isinstance(step, Fail) and step.record_cause == "max_usd"
    assert "max usd: 1" in step.message
    assert "raise max_usd: the cap stopped its attempts short" in step.message


def test_a_moves_bytes_and_earlier_tries_spend_travel_with_the_state() -> None:
    current = Current(2, "j-a2", "spot", zone="us-west-2a", moved_bytes=3 * 2**30)
    assert Current.from_json(json.loads(json.dumps(current.to_json()))) == current
    assert "moved_bytes" not in Current(2, "j-a2", "spot").to_json()  # older states stay as they were
    s = replace(AttemptState.from_json({**CAPTURED, "attempts": [], "current": None}), earlier_usd="0.25")
    s = replace(s, first_attempt=3, current=current)
    assert AttemptState.from_json(json.loads(json.dumps(s.to_json()))) == s
    assert "earlier_usd" not in replace(s, earlier_usd=None).to_json()


@pytest.mark.parametrize(
    ("ended", "reason"),
    [
        ("failed", "Job attempt duration exceeded timeout"),  # Batch
        ("failed", "DeadlineExceeded"),  # Kubernetes
        ("interrupted", "MaxRuntimeExceeded"),  # SageMaker
    ],
)
def test_a_spot_attempt_stopped_at_the_limit_its_deadline_set_falls_back_to_on_demand(
    ended: str, reason: str
) -> None:
    # Batch and Kubernetes end it "failed": recorded as a code_error, it failed the task for good.
    running = replace(state(done=1), plan=replace(PLAN, deadline=NOW))
    step = next_step(running, JobEnded(job(ended, reason=reason)), NOW, max_attempts=10, latest_resume=None)
    assert isinstance(step, Submit)
    assert (step.record_cause, step.cause_of_previous, step.market) == ("deadline", "deadline", "on_demand")
    assert (
        step.market_reason == f"the spot attempt ran until the deadline {NOW.isoformat(timespec='seconds')}"
    )
    # Without a deadline the limit is a day, not the deadline's: the job ended as it says.
    no_deadline = replace(state(done=1), plan=replace(PLAN, deadline=None))
    plain = next_step(
        no_deadline, JobEnded(job(ended, reason=reason)), NOW, max_attempts=10, latest_resume=None
    )
    assert plain.record_cause == ("code_error" if ended == "failed" else "preemption")
    # Ended on its limit days before the deadline: the 5-day maximum, not the deadline's.
    early = replace(state(done=1), plan=replace(PLAN, deadline=NOW + timedelta(days=6)))
    step = next_step(early, JobEnded(job(ended, reason=reason)), NOW, max_attempts=10, latest_resume=None)
    assert step.record_cause == ("code_error" if ended == "failed" else "preemption")
