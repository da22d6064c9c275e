"""The remote training trigger polls again through a passing failure: the job runs on meanwhile.

Failing the wait at the first failed poll (a network error, throttling, a job not listed yet) left the job
running with no task to watch it and, with no retry left, no one to bill it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime
from typing import Any

import pytest
from remote_support import ScriptedPolls

from costaware.core.errors import ComputeBackendError, ConfigurationError
from costaware.triggers import MAX_POLL_ERRORS
from costaware.triggers.remote_training import (
    BILL_PATIENCE_SECONDS,
    RemoteTrainingJobTrigger,
)

STATE = {"attempts": [], "current": {"attempt": 1, "job_id": "j", "market": "spot"}}
ENDED = {"status": "success", "job": {"state": "succeeded"}, "state": STATE, "fallback": False}


def trigger(tmp_path: Any) -> RemoteTrainingJobTrigger:
    return RemoteTrainingJobTrigger(
        backend="local", backend_options={"root": str(tmp_path)}, job_id="j", state=STATE, poll_interval=0.01
    )


def answering(monkeypatch: pytest.MonkeyPatch, answers: list[Any]) -> None:
    """The local backend's polls answer ``answers`` in turn (an exception is raised)."""
    from costaware.adapters.compute.local import LocalBackend

    def poll(self: LocalBackend, job_id: str) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(LocalBackend, "poll", poll)


def first_event(watch: RemoteTrainingJobTrigger) -> dict[str, Any]:
    return asyncio.run(watch.run().__anext__()).payload  # type: ignore[no-any-return]


def test_a_failure_that_passes_is_polled_through(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    watch = trigger(tmp_path)
    answers: list[Any] = [ComputeBackendError("throttled"), TimeoutError("read timed out"), None, ENDED]

    def poll_once(now: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(watch, "poll_once", poll_once)
    assert first_event(watch) == ENDED and answers == []


def test_a_failure_that_lasts_ends_the_wait_after_a_few_polls(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The local backend has no job "j": every poll fails, MAX_POLL_ERRORS times (once, before).
    from costaware.adapters.compute.local import LocalBackend

    polls: list[str] = []
    real_poll = LocalBackend.poll

    def counted(self: LocalBackend, job_id: str) -> Any:
        polls.append(job_id)
        return real_poll(self, job_id)

    monkeypatch.setattr(LocalBackend, "poll", counted)
    event = first_event(trigger(tmp_path))
    assert len(polls) == MAX_POLL_ERRORS
    assert event["status"] == "error" and event["configuration"] is False
    assert "local job 'j' does not exist" in event["message"]


def test_a_configuration_error_ends_the_wait_at_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    watch = trigger(tmp_path)
    calls: list[Any] = []

    def poll_once(now: Any) -> Any:
        calls.append(now)
        raise ConfigurationError("Batch backend needs spot_queue")

    monkeypatch.setattr(watch, "poll_once", poll_once)
    event = first_event(watch)
    assert event["configuration"] is True and len(calls) == 1
    assert MAX_POLL_ERRORS > 1


def test_a_job_deleted_under_the_watch_is_an_interruption_billed_from_what_was_seen(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A drain deletes the bare pod and its node: the exit 75 is never seen. The 404 failed the wait five
    # polls later, the paid attempt never reached the ledger, and a retry bought attempt 1 again.
    from datetime import datetime, timedelta, timezone

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError

    running = JobStatus(
        job_id="j", state=JobState.RUNNING, market="spot", instance_type="g5.xlarge", billable_seconds=600.0
    )
    listing = ScriptedPolls([running, JobNotFoundError("404")])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(backend="kubernetes", backend_options={}, job_id="j", state=STATE)
    t0 = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    assert watch.poll_once(t0) is None  # running: 600 s so far
    event = watch.poll_once(t0 + timedelta(seconds=45))
    assert event is not None and event["status"] == "success" and event["fallback"] is False
    assert event["job"]["state"] == "interrupted"  # the operator resumes from the checkpoint, on the next
    assert event["job"]["billable_seconds"] == 645.0
    assert "a drain or a reclaim deleted it" in event["job"]["reason"]


def test_a_job_never_seen_is_not_listed_yet_until_ten_minutes_after_its_submit(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A triggerer restart forgets what it saw: then the attempt is billed from its submit, never less.
    from datetime import datetime, timedelta, timezone

    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    def gone(self: LocalBackend, job_id: str) -> Any:
        raise JobNotFoundError("404")

    monkeypatch.setattr(LocalBackend, "poll", gone)
    submitted = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    state = {**STATE, "current": {**STATE["current"], "submitted_at": submitted.isoformat()}}  # type: ignore[dict-item]
    watch = RemoteTrainingJobTrigger(
        backend="local", backend_options={"root": str(tmp_path)}, job_id="j", state=state, poll_interval=0.01
    )
    # Not listed yet: polled again, and no failure: counted as one, five polls (2.5 minutes at the default
    # interval) failed the wait long before the job could be billed as gone.
    for seconds in range(30, int(NOT_LISTED_GRACE_SECONDS), 30):
        assert watch.poll_tolerant(submitted + timedelta(seconds=seconds)) is None
    assert watch._poll_errors == 0
    event = watch.poll_once(submitted + timedelta(seconds=NOT_LISTED_GRACE_SECONDS + 60))
    assert event is not None and event["job"]["state"] == "interrupted"
    assert event["job"]["billable_seconds"] == NOT_LISTED_GRACE_SECONDS + 60
    assert "billed from its submit" in event["job"]["reason"]
    with pytest.raises(JobNotFoundError):  # no submit time recorded (an older state): as before
        trigger(tmp_path).poll_once(submitted + timedelta(days=1))


def test_a_job_seen_waiting_then_deleted_is_billed_from_when_it_was_seen_not_its_submit(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A spot pod that waited three hours for capacity was billed those hours as a run once deleted.
    from datetime import datetime, timedelta, timezone

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError

    submitted = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    waiting = JobStatus(job_id="j", state=JobState.PENDING, market="spot", instance_type="")
    listing = ScriptedPolls([waiting, JobNotFoundError("404")])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    state = {**STATE, "current": {**STATE["current"], "submitted_at": submitted.isoformat()}}  # type: ignore[dict-item]
    watch = RemoteTrainingJobTrigger(backend="kubernetes", backend_options={}, job_id="j", state=state)
    seen = submitted + timedelta(hours=3)
    assert watch.poll_once(seen) is None
    event = watch.poll_once(seen + timedelta(seconds=30))
    assert event is not None and event["job"]["billable_seconds"] == 30.0


def inline_in_dags_test(monkeypatch: pytest.MonkeyPatch, watch: RemoteTrainingJobTrigger) -> list[str]:
    """`airflow dags test` runs the trigger inline; record the stops it makes (``stop_and_bill``)."""
    import costaware.triggers.remote_training as module

    stops: list[str] = []
    monkeypatch.setattr(module, "in_dags_test", lambda: True)
    monkeypatch.setattr(watch, "stop_and_bill", lambda **kwargs: stops.append("stopped"))
    return stops


def test_dags_test_taking_the_event_does_not_stop_and_bill_the_job(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow's InProcessTestSupervisor.run_trigger_in_process takes the first event with
    # asyncio.run(anext(trigger.run(), None)), which then cancels the generator: every finished attempt
    # logged "its task was killed: job ... stopped and billed" and settled the task's hold from the trigger.
    watch = trigger(tmp_path)
    stops = inline_in_dags_test(monkeypatch, watch)
    monkeypatch.setattr(watch, "poll_once", lambda now: ENDED)

    async def run_trigger_in_process() -> Any:
        return await anext(watch.run(), None)

    assert asyncio.run(run_trigger_in_process()).payload == ENDED
    assert stops == []


def test_dags_test_interrupted_while_it_waits_stops_and_bills_the_job(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C while the job runs: nobody would watch or bill it after.
    watch = trigger(tmp_path)
    stops = inline_in_dags_test(monkeypatch, watch)
    polled = asyncio.Event()

    def still_running(now: Any) -> None:
        polled.set()
        return None

    monkeypatch.setattr(watch, "poll_once", still_running)

    async def interrupt_the_wait() -> None:
        waiting = asyncio.create_task(anext(watch.run(), None))
        await polled.wait()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(interrupt_the_wait())
    assert stops == ["stopped"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_a_signal_long_into_a_hung_stop_and_bill_goes_through_and_says_what_is_unbilled(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], signum: signal.Signals
) -> None:
    # Both signals were ignored for the whole stop and bill: a backend or ledger call that hung left
    # `airflow dags test` stoppable only by SIGKILL, though the warning said "at most 20 s".
    watch = trigger(tmp_path)
    seconds = [0.0]
    before = signal.signal(signum, signal.default_int_handler)  # a terminal's handler
    try:
        with pytest.raises(KeyboardInterrupt), watch._interrupts_wait_for_the_bill(clock=lambda: seconds[0]):
            os.kill(os.getpid(), signum)  # a hurried second Ctrl-C: the stop and bill goes on
            seconds[0] = BILL_PATIENCE_SECONDS - 1
            os.kill(os.getpid(), signum)
            seconds[0] = BILL_PATIENCE_SECONDS
            os.kill(os.getpid(), signum)  # it hangs: this one goes through
            pytest.fail("a signal after BILL_PATIENCE_SECONDS was ignored")
        assert signal.getsignal(signum) is signal.default_int_handler  # given back
    finally:
        signal.signal(signum, before)
    said = capsys.readouterr().out.splitlines()  # the trigger's log
    assert len([line for line in said if "wait for it" in line]) == 2
    (gave_up,) = [line for line in said if "given up" in line]
    assert "job j on 'local'" in gave_up and "not billed" in gave_up and "clear the task" in gave_up


@pytest.mark.parametrize(("backend", "stopped"), [("batch", ["j"]), ("sagemaker", ["j"]), ("kubernetes", [])])
def test_a_job_seen_and_then_not_listed_is_stopped_unless_its_backend_deleted_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], backend: str, stopped: list[str]
) -> None:
    # Batch's DescribeJobs is eventually consistent: a job seen once (SUBMITTED) may drop out of it and run
    # on beside the resubmitted attempt, unbilled. Only a pod seen and then gone was deleted (a 404 is final).
    from datetime import datetime, timedelta, timezone

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    submitted = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    state = {**STATE, "current": {**STATE["current"], "submitted_at": submitted.isoformat()}}  # type: ignore[dict-item]
    waiting = JobStatus(job_id="j", state=JobState.PENDING, market="spot")
    listing = ScriptedPolls([waiting, *[JobNotFoundError("DescribeJobs does not list it")] * 2])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(backend=backend, backend_options={}, job_id="j", state=state)
    seen = submitted + timedelta(seconds=10)
    assert watch.poll_once(seen) is None
    capsys.readouterr()
    if backend != "kubernetes":  # one listing that missed it: not listed yet, for as long as a new job's
        assert watch.poll_once(seen + timedelta(seconds=30)) is None and listing.stops == []
        assert f"job j is not listed on {backend} now, after it was seen" in capsys.readouterr().out
    event = watch.poll_once(
        seen + timedelta(seconds=30 if backend == "kubernetes" else NOT_LISTED_GRACE_SECONDS)
    )
    assert event is not None
    assert listing.stops == stopped
    said = capsys.readouterr().out
    seen_at = "2026-03-01T09:00:10+00:00"
    if stopped:
        assert f"stopping job j, which {backend} has not listed since it was seen at {seen_at}" in said
        assert (
            f"{backend} has not listed the job in the 600 s since it was last seen" in event["job"]["reason"]
        )
        assert "drain" not in event["job"]["reason"]
    else:
        assert f"job j on kubernetes was seen at {seen_at} and is gone now: nothing to stop" in said
        assert "a drain or a reclaim deleted it" in event["job"]["reason"]


class _FailingStops(ScriptedPolls):
    def stop(self, job_id: str) -> None:
        self.stops.append(job_id)
        raise ComputeBackendError("AccessDenied batch:TerminateJob")


@pytest.mark.parametrize("stop_fails", [False, True], ids=["stopped", "stop failed"])
def test_a_batch_job_billed_as_gone_is_billed_to_its_latest_end(
    monkeypatch: pytest.MonkeyPatch, stop_fails: bool
) -> None:
    # Billed only up to now, a Batch job that DescribeJobs dropped ran on through its grace period after
    # the stop, and where the stop failed, beside the resubmitted attempt to its time limit, unbilled.
    from datetime import datetime, timedelta, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan, job_seconds_left
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(job_id="j", market="spot", submitted_at=t0.isoformat())
    running = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=3600.0)
    gone = [JobNotFoundError("DescribeJobs does not list it")] * 2
    listing = (_FailingStops if stop_fails else ScriptedPolls)([running, *gone])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    seen = t0 + timedelta(seconds=3700)
    assert watch.poll_once(seen) is None
    assert watch.poll_once(seen + timedelta(seconds=10)) is None  # one DescribeJobs missed it: polled again
    event = watch.poll_once(seen + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None and listing.stops == ["j"]
    billed = event["job"]["billable_seconds"]
    if stop_fails:  # it may run on to the limit its submit gave it, and its grace period
        limit = job_seconds_left(plan, t0, "spot")
        assert billed == limit + stop_seconds(state)
        assert f"its stop failed: billed to its time limit ({limit} s)" in event["job"]["reason"]
    else:
        assert billed == 3600 + NOT_LISTED_GRACE_SECONDS + stop_seconds(state)


def test_a_job_never_listed_is_stopped_when_it_is_billed_as_gone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import datetime, timedelta, timezone

    import costaware.adapters.compute.base as compute
    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    submitted = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    state = {**STATE, "current": {**STATE["current"], "submitted_at": submitted.isoformat()}}  # type: ignore[dict-item]
    listing = ScriptedPolls([JobNotFoundError("404")])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(backend="kubernetes", backend_options={}, job_id="j", state=state)
    assert watch.poll_once(submitted + timedelta(seconds=NOT_LISTED_GRACE_SECONDS + 60)) is not None
    assert listing.stops == ["j"]
    said = capsys.readouterr().out
    assert "stopping job j, which kubernetes has not listed in the 660 s since its submit" in said


class _RefusingStops(ScriptedPolls):
    """A backend whose stops fail (a throttled or refused TerminateJob)."""

    def stop(self, job_id: str) -> None:
        self.stops.append(job_id)
        raise ComputeBackendError("AccessDenied batch:TerminateJob")


@pytest.mark.parametrize("miss", ["stop fails", "poll fails"])
def test_a_stop_at_the_cap_that_was_not_sent_is_asked_again_soon_not_a_poll_interval_later(
    monkeypatch: pytest.MonkeyPatch, miss: str
) -> None:
    # The wait slept poll_interval (300 s) after a due stop at what is left of max_usd failed, or after the
    # poll that was to send it failed: the job ran up to 300 s past the cap.
    from datetime import datetime, timedelta, timezone

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.triggers.remote_training import CAP_STOP_RETRY_MAX_SECONDS, CAP_STOP_RETRY_SECONDS

    t0 = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    current = {
        **STATE["current"],
        "submitted_at": t0.isoformat(),
        "stop_after_seconds": 600,
        "stop_by_poll": True,
    }  # type: ignore[dict-item]

    def running(seconds: float) -> JobStatus:
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=seconds)

    due = running(590.0)
    later: list[Any] = [running(601.0)] if miss == "stop fails" else [ComputeBackendError("throttled")]
    listing = _RefusingStops([due, *later, *[running(620.0 + 10 * i) for i in range(6)]])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(
        backend="batch",
        backend_options={},
        job_id="j",
        state={**STATE, "current": current},
        poll_interval=300,
    )
    assert watch.poll_tolerant(t0) is None and watch.next_poll_in() == 10.0  # due in 10 s
    assert watch.poll_tolerant(t0 + timedelta(seconds=11)) is None
    assert watch.next_poll_in() == CAP_STOP_RETRY_SECONDS
    waits = []
    for i in range(6):  # refused on: asked again, backing off, never a poll_interval later
        assert watch.poll_tolerant(t0 + timedelta(seconds=20 + 10 * i)) is None
        waits.append(watch.next_poll_in())
    assert waits == sorted(waits) and waits[-1] == CAP_STOP_RETRY_MAX_SECONDS
    assert listing.stops == ["j"] * (7 if miss == "stop fails" else 6)


def test_a_dearer_type_whose_price_is_unknown_is_asked_again_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its stop at the cap cannot be worked out while the ledger is unreadable: asked a poll_interval later,
    # the job could run that long past what max_usd buys there.
    from datetime import datetime, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import LedgerUnavailableError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import CAP_STOP_RETRY_SECONDS

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise LedgerUnavailableError("database is locked")

    monkeypatch.setattr(KilledTrainingBilling, "_ran_on_scale", unreadable)
    on_dearer = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", instance_type="p4d.24xlarge")
    listing = ScriptedPolls([on_dearer])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    plan = RemotePlan.from_json({**CAPTURED, "max_usd": "5"})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at="2026-03-01T09:00:00+00:00"
    )
    watch = RemoteTrainingJobTrigger(
        backend="batch", backend_options={}, job_id="j", state=state.to_json(), poll_interval=300
    )
    assert watch.poll_once(datetime(2026, 3, 1, 9, 5, tzinfo=timezone.utc)) is None
    assert watch.next_poll_in() == CAP_STOP_RETRY_SECONDS


def test_a_stop_at_the_cap_that_falls_due_while_the_job_is_not_listed_is_sent_by_its_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A poll that found the job not listed (DescribeJobs lags) returned before the cap was weighed: the stop
    # due 10 s later was never sent, and the job ran up to NOT_LISTED_GRACE_SECONDS past max_usd.
    from datetime import datetime, timedelta, timezone

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError

    t0 = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    current = {
        **STATE["current"],
        "submitted_at": t0.isoformat(),
        "stop_after_seconds": 600,
        "stop_by_poll": True,
    }  # type: ignore[dict-item]
    due = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=590.0)
    listing = ScriptedPolls([due, JobNotFoundError("DescribeJobs lags")])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(
        backend="batch",
        backend_options={},
        job_id="j",
        state={**STATE, "current": current},
        poll_interval=300,
    )
    assert watch.poll_tolerant(t0) is None and watch.next_poll_in() == 10.0
    assert watch.poll_tolerant(t0 + timedelta(seconds=10)) is None  # not listed: polled again
    assert listing.stops == ["j"]
    assert watch._stopped_for_cap == "j" and watch.next_poll_in() == 300  # sent once, not asked again


def test_polls_failing_while_a_cap_stop_is_due_fail_the_wait_only_after_as_long_as_at_a_poll_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With a stop at the cap due, failed polls come 5, 10, 20, 40 s apart: the fifth failed the wait after
    # 75 s of throttling, leaving the job to run on unwatched past the cap.
    from datetime import datetime, timedelta, timezone

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.triggers.remote_training import CAP_STOP_RETRY_SECONDS

    t0 = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    current = {
        **STATE["current"],
        "submitted_at": t0.isoformat(),
        "stop_after_seconds": 3600,
        "stop_by_poll": True,
    }  # type: ignore[dict-item]
    due = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=3400.0)
    throttled = [ComputeBackendError("ThrottlingException: Rate exceeded")] * 100
    listing = _RefusingStops([due, *throttled])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(
        backend="batch",
        backend_options={},
        job_id="j",
        state={**STATE, "current": current},
        poll_interval=300,
    )
    now = t0
    assert watch.poll_tolerant(now) is None and watch.next_poll_in() == 200
    now += timedelta(seconds=200)
    failing_from = now
    with pytest.raises(ComputeBackendError):
        while True:
            watch.poll_tolerant(now)
            now += timedelta(seconds=watch.next_poll_in())
    assert (now - failing_from).total_seconds() >= (MAX_POLL_ERRORS - 1) * 300
    # A poll that answers again asks a refused stop again from the shortest wait, not a minute later.
    listing.answers = [JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=3700.0)]
    assert watch.poll_tolerant(now) is None and listing.stops == ["j"]  # due, and refused
    assert watch.next_poll_in() == CAP_STOP_RETRY_SECONDS


def test_a_wait_rebuilt_by_another_triggerer_gives_a_job_it_has_not_seen_its_own_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rebuilt from its deferral's kwargs, the wait knew nothing of the job seen running a minute before:
    # one DescribeJobs that missed it billed it as gone, stopped it and resubmitted its attempt.
    from datetime import datetime, timedelta, timezone

    import costaware.adapters.compute.base as compute
    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    submitted = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    state = {**STATE, "current": {**STATE["current"], "submitted_at": submitted.isoformat()}}  # type: ignore[dict-item]
    listing = ScriptedPolls([JobNotFoundError("DescribeJobs lags")] * 3)
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    _, kwargs = RemoteTrainingJobTrigger(
        backend="batch", backend_options={}, job_id="j", state=state
    ).serialize()
    rebuilt = RemoteTrainingJobTrigger(**kwargs)
    first = submitted + timedelta(hours=1)
    assert rebuilt.poll_once(first) is None
    assert rebuilt.poll_once(first + timedelta(seconds=NOT_LISTED_GRACE_SECONDS - 1)) is None
    assert listing.stops == []
    gone = rebuilt.poll_once(first + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert gone is not None and listing.stops == ["j"]


@pytest.mark.parametrize("stop_fails", [False, True], ids=["stopped", "stop failed"])
def test_a_batch_job_billed_as_gone_bills_and_stops_its_copies_too(
    monkeypatch: pytest.MonkeyPatch, stop_fails: bool
) -> None:
    # Billed as gone, the job's copies lost what they may still run (a copy whose stop failed, to its time
    # limit) and were not stopped; where the job's own stop failed, its time limit swallowed their seconds.
    from datetime import datetime, timedelta, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import COPY_SECONDS_LEFT, JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan, job_seconds_left
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(job_id="j", market="spot", submitted_at=t0.isoformat())
    left = {"seconds_by_type": {"g5.xlarge": 2330.0}, "unstopped": ["c1"]}
    metrics = {
        "batch_copies": 1,
        "batch_copy_seconds": 5000.0,
        "batch_copy_seconds_by_type": {"g5.xlarge": 5000.0},
        COPY_SECONDS_LEFT: left,
    }
    running = JobStatus(
        job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=3600.0 + 5000.0, metrics=metrics
    )
    gone = [JobNotFoundError("DescribeJobs does not list it")]
    listing = (_FailingStops if stop_fails else ScriptedPolls)([running, *gone])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    seen = t0 + timedelta(seconds=3700)
    assert watch.poll_once(seen) is None
    event = watch.poll_once(seen + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None and listing.stops == ["c1", "j"]
    job = event["job"]
    own = job_seconds_left(plan, t0, "spot") if stop_fails else 3600 + NOT_LISTED_GRACE_SECONDS
    assert job["billable_seconds"] == own + stop_seconds(state) + 5000 + 2330
    assert COPY_SECONDS_LEFT not in job["metrics"]
    assert job["metrics"]["batch_copy_seconds_by_type"] == {"g5.xlarge": 7330.0}


@pytest.mark.parametrize(("seen_run", "cause"), [(2500.0, "preemption"), (3000.0, "max_usd")])
def test_a_job_billed_as_gone_past_its_cap_stop_is_a_preemption_unless_it_was_seen_to_reach_it(
    monkeypatch: pytest.MonkeyPatch, seen_run: float, cause: str
) -> None:
    # Billed up to the poll that took it as gone, a Batch job last seen 500 s short of its stop at the cap
    # was billed past it: recorded as stopped by max_usd, its reclaim was no preemption for the next attempt.
    from datetime import datetime, timedelta, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempts import AttemptState, JobEnded, next_step
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=t0.isoformat(), stop_after_seconds=3000
    )
    running = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=seen_run)
    listing = ScriptedPolls([running, *[JobNotFoundError("DescribeJobs does not list it")] * 2])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    seen = t0 + timedelta(seconds=seen_run + 60)
    assert watch.poll_once(seen) is None
    assert watch.poll_once(seen + timedelta(seconds=10)) is None  # one DescribeJobs missed it
    event = watch.poll_once(seen + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None and event["job"]["billable_seconds"] > 3000  # the most it may have run
    now = seen + timedelta(seconds=NOT_LISTED_GRACE_SECONDS)
    step = next_step(state, JobEnded(job=event["job"]), now, max_attempts=10, latest_resume=None)
    assert step.record_cause == cause  # type: ignore[union-attr]


def test_a_job_stopped_at_the_cap_while_not_listed_and_then_gone_ends_stopped_at_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Stopped by its id at the cap while DescribeJobs missed it, then billed as gone 600 s later: it ended
    # interrupted (a preemption) and was billed up to then, ~600 s past the stop its grace period bounds.
    from datetime import datetime, timedelta, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState, JobEnded, next_step
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=t0.isoformat(), stop_after_seconds=600, stop_by_poll=True
    )
    due = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=590.0)
    listing = ScriptedPolls([due, *[JobNotFoundError("DescribeJobs lags")] * 3])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(
        backend="batch", backend_options={}, job_id="j", state=state.to_json(), poll_interval=300
    )
    seen = t0 + timedelta(seconds=600)
    assert watch.poll_tolerant(seen) is None and watch.next_poll_in() == 10.0
    assert watch.poll_tolerant(seen + timedelta(seconds=10)) is None and listing.stops == ["j"]  # by its id
    assert watch.poll_tolerant(seen + timedelta(seconds=300)) is None  # not listed yet
    now = seen + timedelta(seconds=NOT_LISTED_GRACE_SECONDS)
    event = watch.poll_tolerant(now)
    assert event is not None and listing.stops == ["j"]  # stopped once
    # To its grace period's end after the stop, not up to the poll that took it as gone.
    assert event["job"]["billable_seconds"] == 590.0 + 10 + stop_seconds(state)
    step = next_step(state, JobEnded(job=event["job"]), now, max_attempts=10, latest_resume=None)
    assert step.record_cause == "max_usd"  # type: ignore[union-attr]


def keeping_wait_state(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[Any, ...], Any]:
    """Airflow's XComs kept in a dict (as JSON, as Airflow keeps them), shared by the waits of one task."""
    import json

    from airflow.sdk.execution_time.xcom import XCom

    kept: dict[tuple[Any, ...], Any] = {}

    def set_xcom(key: str, value: Any, *, dag_id: str, task_id: str, run_id: str, map_index: int) -> None:
        kept[(key, dag_id, task_id, run_id, map_index)] = json.loads(json.dumps(value))

    def get_one(*, key: str, dag_id: str, task_id: str, run_id: str, map_index: int) -> Any:
        return kept.get((key, dag_id, task_id, run_id, map_index))

    monkeypatch.setattr(XCom, "set", set_xcom)
    monkeypatch.setattr(XCom, "get_one", get_one)
    return kept


@pytest.mark.parametrize("seen_again", [True, False], ids=["seen again", "gone at once"])
def test_a_stop_at_the_cap_survives_a_triggerer_restart(
    monkeypatch: pytest.MonkeyPatch, seen_again: bool
) -> None:
    # A triggerer restart re-creates the wait from its deferral's arguments: the stop at the cap it had
    # sent was lost, so it was sent again, and a job gone after it was billed as gone (from its submit,
    # up to NOT_LISTED_GRACE_SECONDS past its grace period's end).
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState, JobEnded, next_step
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    keeping_wait_state(monkeypatch)
    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=t0.isoformat(), stop_after_seconds=600, stop_by_poll=True
    )

    def running(seconds: float) -> JobStatus:
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=seconds)

    gone = JobNotFoundError("DescribeJobs does not list it")
    after_restart = [running(620.0)] if seen_again else []
    listing = ScriptedPolls([running(590.0), running(600.0), *after_restart, *[gone] * 3])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    deferred = {"backend": "batch", "backend_options": {}, "job_id": "j", "state": state.to_json()}
    task = SimpleNamespace(dag_id="remote_dag", task_id="train", run_id="r", map_index=-1)
    first = RemoteTrainingJobTrigger(**deferred, poll_interval=300)  # type: ignore[arg-type]
    first.task_instance = task  # type: ignore[assignment]
    seen = t0 + timedelta(seconds=610)
    assert first.poll_tolerant(seen) is None and first.next_poll_in() == 10.0
    stopped_at = seen + timedelta(seconds=10)
    assert first.poll_tolerant(stopped_at) is None and listing.stops == ["j"]

    rebuilt = RemoteTrainingJobTrigger(**deferred, poll_interval=300)  # type: ignore[arg-type]
    rebuilt.task_instance = task  # type: ignore[assignment]
    now = stopped_at + timedelta(seconds=20)
    assert rebuilt.poll_tolerant(now) is None  # still in its grace period, or not listed yet
    assert rebuilt.poll_tolerant(now + timedelta(seconds=30)) is None
    event = rebuilt.poll_tolerant(now + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None and listing.stops == ["j"]  # stopped once
    assert event["job"]["billable_seconds"] == 600.0 + stop_seconds(state)  # to its grace period's end
    ended = next_step(
        AttemptState.from_json(event["state"]),
        JobEnded(job=event["job"]),
        now,
        max_attempts=10,
        latest_resume=None,
    )
    assert ended.record_cause == "max_usd"  # type: ignore[union-attr]


def test_a_stop_at_the_cap_whose_kept_state_a_re_created_wait_fails_to_read_once_is_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kept state was read at the wait's first poll only: one failed read (the API server restarting with
    # the triggerer) and the job gone after the stop was billed as gone, past its grace period's end.
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from airflow.sdk.execution_time.xcom import XCom
    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    keeping_wait_state(monkeypatch)
    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=t0.isoformat(), stop_after_seconds=600, stop_by_poll=True
    )

    def running(seconds: float) -> JobStatus:
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=seconds)

    gone = JobNotFoundError("DescribeJobs does not list it")
    listing = ScriptedPolls([running(590.0), running(600.0), *[gone] * 3])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    deferred = {"backend": "batch", "backend_options": {}, "job_id": "j", "state": state.to_json()}
    task = SimpleNamespace(dag_id="remote_dag", task_id="train", run_id="r", map_index=-1)
    first = RemoteTrainingJobTrigger(**deferred, poll_interval=300)  # type: ignore[arg-type]
    first.task_instance = task  # type: ignore[assignment]
    seen = t0 + timedelta(seconds=610)
    assert first.poll_tolerant(seen) is None
    stopped_at = seen + timedelta(seconds=10)
    assert first.poll_tolerant(stopped_at) is None and listing.stops == ["j"]

    read_kept = XCom.get_one
    reads: list[str] = []

    def fails_once(**where: Any) -> Any:
        reads.append(where["key"])
        if len(reads) == 1:
            raise ConnectionError("the API server does not answer")
        return read_kept(**where)

    monkeypatch.setattr(XCom, "get_one", fails_once)
    rebuilt = RemoteTrainingJobTrigger(**deferred, poll_interval=300)  # type: ignore[arg-type]
    rebuilt.task_instance = task  # type: ignore[assignment]
    now = stopped_at + timedelta(seconds=20)
    assert rebuilt.poll_tolerant(now) is None  # not listed yet; its kept state not read
    assert rebuilt.poll_tolerant(now + timedelta(seconds=30)) is None
    event = rebuilt.poll_tolerant(now + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None and listing.stops == ["j"]
    assert event["job"]["billable_seconds"] == 600.0 + stop_seconds(state)  # to its grace period's end
    assert len(reads) == 2  # read again once, then no more


def _cap_stopped_then_rebuilt(
    monkeypatch: pytest.MonkeyPatch, answers_after_stop: list[Any], *, keep_stop: bool = True
) -> tuple[Any, Any, Any, list[bool], datetime]:
    """A wait that stops job "j" at its cap (600 s), and a wait re-created after it whose XCom reads fail
    while the returned flag list holds True; ``keep_stop=False``: the first wait never kept its stop."""
    from datetime import timedelta, timezone
    from types import SimpleNamespace

    from airflow.sdk.execution_time.xcom import XCom
    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    kept = keeping_wait_state(monkeypatch)
    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=t0.isoformat(), stop_after_seconds=600, stop_by_poll=True
    )

    def running(seconds: float) -> JobStatus:
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=seconds)

    listing = ScriptedPolls([running(590.0), running(600.0), *answers_after_stop])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    deferred = {"backend": "batch", "backend_options": {}, "job_id": "j", "state": state.to_json()}
    task = SimpleNamespace(dag_id="remote_dag", task_id="train", run_id="r", map_index=-1)
    first = RemoteTrainingJobTrigger(**deferred, poll_interval=300)  # type: ignore[arg-type]
    first.task_instance = task  # type: ignore[assignment]
    seen = t0 + timedelta(seconds=610)
    assert first.poll_tolerant(seen) is None
    stopped_at = seen + timedelta(seconds=10)
    assert first.poll_tolerant(stopped_at) is None and listing.stops == ["j"]
    if not keep_stop:
        kept.clear()

    read_kept = XCom.get_one
    api_down = [True]

    def fails_while_down(**where: Any) -> Any:
        if api_down[0]:
            raise ConnectionError("the API server does not answer")
        return read_kept(**where)

    monkeypatch.setattr(XCom, "get_one", fails_while_down)
    rebuilt = RemoteTrainingJobTrigger(**deferred, poll_interval=300)  # type: ignore[arg-type]
    rebuilt.task_instance = task  # type: ignore[assignment]
    return rebuilt, listing, state, api_down, stopped_at


def test_a_re_created_wait_that_cannot_read_its_kept_state_neither_stops_nor_bills_the_job_as_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reads of the kept stop failing for ~600 s (the API server down), the same poll that failed to read it
    # sent the stop again and billed the job as gone from its submit: stops ['j', 'j'], 1350 s, not 710 s.
    from datetime import timedelta

    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    rebuilt, listing, state, api_down, stopped_at = _cap_stopped_then_rebuilt(monkeypatch, [gone] * 5)
    now = stopped_at + timedelta(seconds=20)
    assert rebuilt.poll_tolerant(now) is None
    assert rebuilt.poll_tolerant(now + timedelta(seconds=30)) is None
    past_grace = now + timedelta(seconds=NOT_LISTED_GRACE_SECONDS)
    assert rebuilt.poll_tolerant(past_grace) is None  # gone, but whether it was stopped is unread
    assert rebuilt.poll_tolerant(past_grace + timedelta(seconds=5)) is None
    assert listing.stops == ["j"]
    api_down[0] = False
    event = rebuilt.poll_tolerant(past_grace + timedelta(seconds=15))
    assert event is not None and listing.stops == ["j"]
    assert event["job"]["billable_seconds"] == 600.0 + stop_seconds(state)  # to its grace period's end


@pytest.mark.parametrize(
    ("ran", "stopped"),
    [(600.0 + 30, ["j", "j"]), (600.0 + 1000, ["j", "j"])],
    ids=["in its grace", "past it"],
)
def test_an_unread_kept_state_never_holds_back_a_stop_at_the_cap(
    monkeypatch: pytest.MonkeyPatch, ran: float, stopped: list[str]
) -> None:
    # Held back until the job had run a grace period past its stop point, a FIRST wait whose read failed (the
    # API server's blip as the cap was reached: nothing kept to read) let the job run past what max_usd buys
    # (billed 825 s for a 600 s limit). A due stop is sent whatever the kept state; a second SIGTERM to a job
    # that checkpoints is harmless.
    from datetime import timedelta

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempt_effects import stop_seconds

    job = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran)
    rebuilt, listing, state, _, stopped_at = _cap_stopped_then_rebuilt(monkeypatch, [job], keep_stop=False)
    assert 30 < stop_seconds(state) < 1000
    assert rebuilt.poll_tolerant(stopped_at + timedelta(seconds=ran - 600)) is None
    assert listing.stops == stopped


def test_a_job_a_wait_stopped_itself_while_its_kept_state_was_unread_is_billed_to_its_grace_periods_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its own stop (past the grace period: none was kept) is known without the kept state: the job gone
    # after it is billed as stopped at the cap, not held back until the state is read.
    from datetime import timedelta

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    job = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=1600.0)
    gone = JobNotFoundError("DescribeJobs does not list it")
    rebuilt, listing, state, _, stopped_at = _cap_stopped_then_rebuilt(
        monkeypatch, [job, gone, gone], keep_stop=False
    )
    now = stopped_at + timedelta(seconds=1000)
    assert rebuilt.poll_tolerant(now) is None and listing.stops == ["j", "j"]
    assert rebuilt.poll_tolerant(now + timedelta(seconds=30)) is None  # not listed yet
    event = rebuilt.poll_tolerant(now + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None and listing.stops == ["j", "j"]
    assert event["job"]["billable_seconds"] == 1600.0 + stop_seconds(state)


@pytest.mark.parametrize("created_known", [True, False], ids=["created", "no creation time"])
def test_a_followed_job_gone_whose_stop_fails_is_billed_to_the_limit_its_own_submit_gave_it(
    monkeypatch: pytest.MonkeyPatch, created_known: bool
) -> None:
    # Its limit was worked out from this try's re-attach: a spot job's limit runs to the deadline from its
    # submit, 2 h earlier under the earlier try, so 2 h of the run it may go on to were billed to nobody.
    from datetime import timedelta

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan, job_seconds_left
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    assert plan.deadline is not None
    reattach = plan.deadline - timedelta(hours=4)
    created = reattach - timedelta(hours=2)
    # Found running 7000 s in (queued 200 s first): read at the re-attach, or billed from its start.
    found = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=7000.0)
    followed = {"job": found.to_dict(), "seen_at": reattach.isoformat()}
    if created_known:
        followed["created_at"] = created.isoformat()
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=reattach.isoformat(), followed=followed
    )
    listing = _FailingStops([JobNotFoundError("DescribeJobs does not list it")] * 2)
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    assert watch.poll_once(reattach + timedelta(seconds=10)) is None  # not listed yet
    event = watch.poll_once(reattach + timedelta(seconds=NOT_LISTED_GRACE_SECONDS + 10))
    assert event is not None and listing.stops == ["j"]
    # From its submit where the backend said when that was, else from its start (at most its queue later).
    since = created if created_known else reattach - timedelta(seconds=7000)
    limit = job_seconds_left(plan, since, "spot")
    assert event["job"]["billable_seconds"] == limit + stop_seconds(state)
    assert f"billed to its time limit ({limit} s)" in event["job"]["reason"]


@pytest.mark.parametrize("started", [None, 2900.0])
def test_a_followed_job_never_read_and_gone_past_its_cap_stop_is_a_preemption(
    monkeypatch: pytest.MonkeyPatch, started: float | None
) -> None:
    # A retry found the job by its name and could not read it: it was followed with the time since its
    # creation (or start) billed, an upper bound with its queue in it. Drained later, never read, it was
    # taken as seen to run that long, so recorded as stopped at max_usd, not as the preemption it was.
    from datetime import datetime, timedelta, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import SEEN_BILLABLE_SECONDS, FoundJob
    from costaware.core.errors import JobNotFoundError
    from costaware.operators.remote_attempts import _found_unread
    from costaware.training.attempts import AttemptState, JobEnded, next_step
    from costaware.training.plan import RemotePlan

    found_at = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    found = FoundJob(
        "p",
        started_at=None if started is None else found_at.timestamp() - started,
        created_at=found_at.timestamp() - 3000,  # it queued 2900 s, ran 100 s at the most
    )
    followed = _found_unread(found, now=found_at, instances=1)
    assert followed.billable_seconds == (3000.0 if started is None else started)  # the bill's upper bound
    plan = RemotePlan.from_json({**CAPTURED, "backend": "kubernetes", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="p",
        market="spot",
        submitted_at=found_at.isoformat(),
        stop_after_seconds=2500,
        stop_by_poll=True,
        followed={"job": followed.to_dict(), "seen_at": found_at.isoformat()},
    )
    listing = ScriptedPolls([JobNotFoundError("pod 'p' is not in namespace 'ml'")])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(
        backend="kubernetes", backend_options={}, job_id="p", state=state.to_json()
    )
    now = found_at + timedelta(seconds=600)
    event = watch.poll_once(now)
    assert event is not None and event["job"]["state"] == "interrupted"
    assert event["job"]["billable_seconds"] == followed.billable_seconds + 600  # billed the most, still
    assert event["job"]["metrics"][SEEN_BILLABLE_SECONDS] == 0.0  # seen to run nothing
    step = next_step(state, JobEnded(job=event["job"]), now, max_attempts=10, latest_resume=None)
    assert step.record_cause == "preemption"  # type: ignore[union-attr]


@pytest.mark.parametrize(("started", "at_the_cap"), [(None, False), (3600.0, True)])
def test_a_followed_job_found_ended_is_stopped_at_the_cap_only_where_its_run_is_known(
    started: float | None, at_the_cap: bool
) -> None:
    # Found ended and never read, billed from its creation to its end (its queue in it): that is no run
    # into the stop max_usd set. From its start to its end it is what it ran.
    from datetime import datetime, timezone

    from costaware.adapters.compute.base import FoundJob, JobState
    from costaware.operators.remote_attempts import _found_unread
    from costaware.training.attempts import Current

    ended_at = datetime(2026, 11, 30, 12, tzinfo=timezone.utc).timestamp()
    found = FoundJob(
        "p",
        started_at=None if started is None else ended_at - started,
        created_at=ended_at - 3600,
        ended_at=ended_at,
        end_state=JobState.INTERRUPTED,
    )
    job = _found_unread(found, now=datetime(2026, 12, 1, tzinfo=timezone.utc), instances=1)
    assert job.billable_seconds == 3600.0
    attempt = Current(attempt=1, job_id="p", market="spot", stop_after_seconds=2500)
    assert attempt.stopped_by_cap(job.to_dict()) is at_the_cap


def test_a_job_billed_as_gone_whose_stop_went_through_is_billed_within_its_time_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Batch stops it at the 3000 s limit max_usd left (its attemptDurationSeconds): last seen at 2500 s and
    # billed as gone 600 s later, it was billed 2500 + 600 + its grace period, 100 s past what it can run.
    from datetime import datetime, timedelta, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=t0.isoformat(), stop_after_seconds=3000
    )
    running = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=2500.0)
    listing = ScriptedPolls([running, *[JobNotFoundError("DescribeJobs does not list it")] * 2])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    seen = t0 + timedelta(seconds=2560)
    assert watch.poll_once(seen) is None
    assert watch.poll_once(seen + timedelta(seconds=10)) is None  # one DescribeJobs missed it
    event = watch.poll_once(seen + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None and listing.stops == ["j"]  # the stop went through
    assert event["job"]["billable_seconds"] == 3000 + stop_seconds(state)
    # Short of its limit, it is billed up to the poll and the grace period after the stop, as before.
    running = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=1000.0)
    listing = ScriptedPolls([running, *[JobNotFoundError("DescribeJobs does not list it")] * 2])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    assert watch.poll_once(seen) is None
    assert watch.poll_once(seen + timedelta(seconds=10)) is None
    event = watch.poll_once(seen + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None
    assert event["job"]["billable_seconds"] == 1000 + NOT_LISTED_GRACE_SECONDS + stop_seconds(state)


def test_a_cancelled_waits_poll_still_running_sends_no_stop_and_keeps_no_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A cancel (a kill, a timeout, a triggerer handing the wait over) cannot stop the poll's thread: one
    # still in a slow backend call went on to send a stop at the cap and to write its try's state over the
    # wait state XCom the task's new try had kept since.
    import threading
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    import costaware.triggers.remote_training as remote_trigger
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import WAIT_STATE_XCOM_KEY

    kept = keeping_wait_state(monkeypatch)
    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=t0.isoformat(), stop_after_seconds=600, stop_by_poll=True
    )
    polling, answer = threading.Event(), threading.Event()

    class SlowListing(ScriptedPolls):
        def poll(self, job_id: str) -> Any:
            polling.set()
            answer.wait(30)
            return super().poll(job_id)

    # Past its cap when the slow poll answers: a live wait stops it there.
    listing = SlowListing(
        [JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=610.0)]
    )
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    monkeypatch.setattr(remote_trigger, "utcnow", lambda: t0 + timedelta(seconds=620))
    trigger = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    trigger.task_instance = SimpleNamespace(  # type: ignore[assignment]
        dag_id="remote_dag", task_id="train", run_id="r", map_index=-1
    )
    where = (WAIT_STATE_XCOM_KEY, "remote_dag", "train", "r", -1)
    new_try = {"attempts": [], "current": {"attempt": 2, "job_id": "j2"}}

    async def cancelled_mid_poll() -> None:
        waiting = asyncio.ensure_future(trigger.run().__anext__())
        assert await asyncio.to_thread(polling.wait, 30)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        kept[where] = new_try  # the task's new try defers and keeps its own state
        answer.set()  # the old poll answers; asyncio.run waits for its thread below

    asyncio.run(cancelled_mid_poll())
    assert listing.answers == []  # the slow poll did answer
    assert kept[where] == new_try
    assert listing.stops == []


@pytest.mark.parametrize("new_try_deferred", [True, False], ids=["a new try kept its state", "handed over"])
def test_a_cancelled_waits_stop_at_the_cap_still_under_way_keeps_no_state_over_a_new_trys(
    monkeypatch: pytest.MonkeyPatch, new_try_deferred: bool
) -> None:
    # The cancel came while the stop at the cap was under way (a slow backend call): the poll's thread went
    # on to write its try's state over the wait state XCom the task's new try had kept since, and a timeout
    # of that new try's wait then stopped and billed the old job, leaving the new one running unbilled.
    # Handed over to another triggerer, the same try's XCom still gets the stop: the new wait must know it.
    import threading
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    import costaware.triggers.remote_training as remote_trigger
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan
    from costaware.triggers.remote_training import CAP_STOP_KEY, WAIT_STATE_XCOM_KEY

    kept = keeping_wait_state(monkeypatch)
    t0 = datetime(2026, 11, 26, 9, tzinfo=timezone.utc)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=t0.isoformat(), stop_after_seconds=600, stop_by_poll=True
    )
    stopping, stop_answers = threading.Event(), threading.Event()

    class SlowStop(ScriptedPolls):
        def stop(self, job_id: str) -> None:
            stopping.set()
            stop_answers.wait(30)
            super().stop(job_id)

    # Past its cap at the poll: the wait stops it there, and the stop call is slow.
    listing = SlowStop([JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=610.0)])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    monkeypatch.setattr(remote_trigger, "utcnow", lambda: t0 + timedelta(seconds=620))
    trigger = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    trigger.task_instance = SimpleNamespace(  # type: ignore[assignment]
        dag_id="remote_dag", task_id="train", run_id="r", map_index=-1
    )
    where = (WAIT_STATE_XCOM_KEY, "remote_dag", "train", "r", -1)
    kept[where] = state.to_json()  # the operator keeps the state it defers with
    new_try = {"attempts": [], "current": {"attempt": 2, "job_id": "j2"}}

    async def cancelled_mid_stop() -> None:
        waiting = asyncio.ensure_future(trigger.run().__anext__())
        assert await asyncio.to_thread(stopping.wait, 30)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        if new_try_deferred:
            kept[where] = new_try  # the task's new try defers and keeps its own state
        stop_answers.set()  # the old stop goes through; asyncio.run waits for its thread below

    asyncio.run(cancelled_mid_stop())
    assert listing.stops == ["j"]  # sent before the cancel: it went through
    if new_try_deferred:
        assert kept[where] == new_try
    else:
        assert kept[where]["current"]["job_id"] == "j"
        assert kept[where]["current"][CAP_STOP_KEY]["job_id"] == "j"


def test_a_re_created_wait_that_cannot_read_its_kept_state_takes_a_stop_the_backend_reports_as_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its kept state unread, the re-created wait sent the due stop again (a second SIGTERM) and billed the
    # job gone after it from that second stop, 30 s more than the first stop: 630 s + grace, not 600 s.
    from datetime import timedelta

    from costaware.adapters.compute.base import STOP_REQUESTED_AT, JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    answers: list[Any] = []
    rebuilt, listing, state, api_down, stopped_at = _cap_stopped_then_rebuilt(monkeypatch, answers)
    stopping = JobStatus(
        job_id="j",
        state=JobState.RUNNING,
        market="spot",
        billable_seconds=630.0,
        metrics={STOP_REQUESTED_AT: stopped_at.timestamp()},
    )
    listing.answers.extend([stopping, gone, gone])
    now = stopped_at + timedelta(seconds=30)
    assert rebuilt.poll_tolerant(now) is None and listing.stops == ["j"]  # not stopped a second time
    assert rebuilt.poll_tolerant(now + timedelta(seconds=30)) is None  # not listed yet
    event = rebuilt.poll_tolerant(now + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert api_down[0] and event is not None and listing.stops == ["j"]
    assert event["job"]["billable_seconds"] == 600.0 + stop_seconds(state)  # from the first stop
    assert event["state"]["current"]["cap_stop"]["sent_at"] == stopped_at.isoformat()


def test_a_job_gone_while_its_kept_state_stays_unread_is_billed_at_the_dearer_bill_after_a_bound(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Held back until a read of the kept state succeeded: an XCom that never reads back kept the job gone
    # unbilled until the deferral's timeout. Past the bound it is billed as gone, never below the first
    # stop's bill (600 s and its grace period), and the log says so. The re-created wait never saw the job
    # nor whether the first wait lived to send the stop at the cap: billed from its submit up to the bound
    # and a grace period (1,950 s), not at the first stop's bill (710 s), which a wait that died first
    # would under-bill (see the next test).
    from datetime import timedelta

    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.triggers.remote_gone_job import UNREAD_KEPT_STATE_READS, UNREAD_KEPT_STATE_SECONDS
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    rebuilt, listing, state, api_down, stopped_at = _cap_stopped_then_rebuilt(monkeypatch, [gone] * 20)
    now = stopped_at + timedelta(seconds=20)
    assert rebuilt.poll_tolerant(now) is None
    first_gone = now + timedelta(seconds=NOT_LISTED_GRACE_SECONDS)
    polls = [first_gone + timedelta(seconds=s) for s in (0, 5, 15, 35, 75)]
    assert len(polls) + 1 >= UNREAD_KEPT_STATE_READS
    assert all(rebuilt.poll_tolerant(at) is None for at in polls)  # within the bound: held back
    assert listing.stops == ["j"]
    event = rebuilt.poll_tolerant(first_gone + timedelta(seconds=UNREAD_KEPT_STATE_SECONDS))
    assert api_down[0] and event is not None
    billed_to = first_gone + timedelta(seconds=UNREAD_KEPT_STATE_SECONDS) - stopped_at
    assert event["job"]["billable_seconds"] == 620.0 + billed_to.total_seconds() + stop_seconds(state)
    assert "before its stop at the cap fell due" not in event["job"]["reason"]
    assert (
        "the wait's kept state is still unread after 7 failed read(s) over 600 s" in capsys.readouterr().out
    )


STOP_BY_POLL_SUBMIT = datetime(2026, 11, 26, 9, tzinfo=UTC)


def _stop_by_poll_wait(
    monkeypatch: pytest.MonkeyPatch,
    answers: list[Any],
    *,
    cap_seconds: int,
    followed: dict[str, Any] | None = None,
    backend: str = "batch",
) -> tuple[Any, Any, Any, datetime]:
    """A wait of job "j" on ``backend``, stopped at ``cap_seconds`` by its polls, whose kept state never
    reads back; submitted at ``STOP_BY_POLL_SUBMIT`` (``followed``: an earlier try's, as this try found
    it)."""
    from types import SimpleNamespace

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    keeping_wait_state(monkeypatch)
    submitted = STOP_BY_POLL_SUBMIT
    plan = RemotePlan.from_json({**CAPTURED, "backend": backend, "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j",
        market="spot",
        submitted_at=submitted.isoformat(),
        stop_after_seconds=cap_seconds,
        stop_by_poll=True,
        followed=followed,
    )
    listing = ScriptedPolls(answers)
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    deferred = {"backend": backend, "backend_options": {}, "job_id": "j", "state": state.to_json()}
    wait = RemoteTrainingJobTrigger(**deferred, poll_interval=300)  # type: ignore[arg-type]
    wait.task_instance = SimpleNamespace(  # type: ignore[assignment]
        dag_id="remote_dag", task_id="train", run_id="r", map_index=-1
    )
    return wait, listing, state, submitted


def _held_back_to_the_bound(wait: Any, first_gone: datetime) -> Any:
    """Poll ``wait`` through its hold-back of a job gone with its kept state unread; the event at its end."""
    from datetime import timedelta

    from costaware.triggers.remote_gone_job import UNREAD_KEPT_STATE_SECONDS

    for held in (0, 5, 15, 35, 75):
        assert wait.poll_tolerant(first_gone + timedelta(seconds=held)) is None
    return wait.poll_tolerant(first_gone + timedelta(seconds=UNREAD_KEPT_STATE_SECONDS))


def test_a_job_gone_with_its_kept_state_unread_is_billed_to_now_where_no_wait_lived_to_send_its_due_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen at 100 s of a 600 s cap, the first wait died before the stop fell due; the re-created one never
    # saw the job listed, so it sent nothing when due: the only stop went out at the bound, 1,330 s after
    # the submit, yet the job was billed only to the grace period after the stop due at 600 s (710 s).
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.triggers.remote_gone_job import UNREAD_KEPT_STATE_SECONDS
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    seen = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=100.0)
    first, listing, state, submitted = _stop_by_poll_wait(monkeypatch, [seen, *[gone] * 20], cap_seconds=600)
    assert first.poll_tolerant(submitted + timedelta(seconds=110)) is None  # 100 s of 600: not due yet
    # The triggerer restarts: the re-created wait cannot read its kept state, and the job is not listed.
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    rebuilt = RemoteTrainingJobTrigger(
        backend="batch", backend_options={}, job_id="j", state=state.to_json(), poll_interval=300
    )
    rebuilt.task_instance = first.task_instance
    first_poll = submitted + timedelta(seconds=130)
    assert rebuilt.poll_tolerant(first_poll) is None
    first_gone = first_poll + timedelta(seconds=NOT_LISTED_GRACE_SECONDS)
    event = _held_back_to_the_bound(rebuilt, first_gone)
    assert event is not None and listing.stops == ["j"]  # the bound's stop, the only one sent
    stopped_after = (first_gone + timedelta(seconds=UNREAD_KEPT_STATE_SECONDS) - submitted).total_seconds()
    assert stopped_after == 1330.0
    assert event["job"]["billable_seconds"] == stopped_after + stop_seconds(state)  # 1,440 s, not 710 s


@pytest.mark.parametrize("stop_asked", [True, False], ids=["stop asked before due", "no stop asked"])
def test_a_job_gone_with_its_kept_state_unread_is_billed_within_a_stop_its_backend_said_was_asked_before_due(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stop_asked: bool
) -> None:
    # The backend said (STOP_REQUESTED_AT) the job was asked to stop when last seen, long before its stop
    # at the cap (1,200 s) fell due: it ran at most to that and its grace period, not to the bound. The
    # warning said "but not past the grace period after a stop at the cap" of every job, bounded or not.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import STOP_REQUESTED_AT, JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    seen_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=100)
    asked = {STOP_REQUESTED_AT: seen_at.timestamp()} if stop_asked else {}
    seen = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=100.0, metrics=asked)
    wait, _, state, _ = _stop_by_poll_wait(monkeypatch, [seen, *[gone] * 20], cap_seconds=1200)
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    assert wait.poll_tolerant(seen_at) is None
    assert wait.poll_tolerant(seen_at + timedelta(seconds=300)) is None  # not listed yet
    first_gone = seen_at + timedelta(seconds=NOT_LISTED_GRACE_SECONDS)
    event = _held_back_to_the_bound(wait, first_gone)
    assert event is not None
    grace = stop_seconds(state)
    up_to_now = 100.0 + 2 * NOT_LISTED_GRACE_SECONDS + grace
    bounded = "but not past the grace period after its stop at the cap, since batch says it was asked to stop"
    if stop_asked:
        assert event["job"]["billable_seconds"] == 1200.0 + grace < up_to_now
        assert "before its stop at the cap fell due after 1200 s of running" in event["job"]["reason"]
        assert f"{bounded} at {seen_at.isoformat()}, before that fell due" in capsys.readouterr().out
    else:
        assert event["job"]["billable_seconds"] == up_to_now
        assert "but not past the grace period" not in capsys.readouterr().out


def test_a_job_gone_with_its_kept_state_unread_whose_bill_stays_within_its_stop_says_no_bound_was_applied(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The backend said the job was asked to stop long before its stop at the cap (5,000 s) fell due, but its
    # bill up to now (1,300 s and the grace period) is below that bound: the bill applied no cap, yet the
    # warning, which asked _stop_asked_before_due() on its own, said it was held within the stop at the cap.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import STOP_REQUESTED_AT, JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    seen_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=100)
    asked = {STOP_REQUESTED_AT: seen_at.timestamp()}
    seen = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=100.0, metrics=asked)
    wait, _, state, _ = _stop_by_poll_wait(monkeypatch, [seen, *[gone] * 20], cap_seconds=5000)
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    assert wait.poll_tolerant(seen_at) is None
    assert wait.poll_tolerant(seen_at + timedelta(seconds=300)) is None  # not listed yet
    event = _held_back_to_the_bound(wait, seen_at + timedelta(seconds=NOT_LISTED_GRACE_SECONDS))
    assert event is not None
    up_to_now = 100.0 + 2 * NOT_LISTED_GRACE_SECONDS + stop_seconds(state)
    assert event["job"]["billable_seconds"] == up_to_now  # below the bound: not capped
    assert "before its stop at the cap fell due" not in event["job"]["reason"]
    said = capsys.readouterr().out
    assert "billed as gone now from what was last seen" in said
    assert "but not past the grace period" not in said


def test_a_job_listed_again_after_it_was_found_gone_is_held_back_its_full_bound_when_gone_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The time it was first found gone was kept when the job was listed again: gone a second time, it was
    # billed at once as gone (the bound counted from its first disappearance), not held back its 600 s.
    from datetime import timedelta

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_gone_job import UNREAD_KEPT_STATE_SECONDS
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    # Listed again waiting to start: no stop at the cap falls due (running, one is sent when due, and the
    # wait bills the job from its own stop).
    back = JobStatus(job_id="j", state=JobState.PENDING, market="spot", billable_seconds=300.0)
    answers: list[Any] = [gone, gone, gone, gone, back, gone, gone]
    rebuilt, listing, _state, api_down, stopped_at = _cap_stopped_then_rebuilt(monkeypatch, answers)
    now = stopped_at + timedelta(seconds=20)
    assert rebuilt.poll_tolerant(now) is None
    first_gone = now + timedelta(seconds=NOT_LISTED_GRACE_SECONDS)
    assert rebuilt.poll_tolerant(first_gone) is None  # found gone: held back for its kept state
    for seconds in (5, 15):
        assert rebuilt.poll_tolerant(first_gone + timedelta(seconds=seconds)) is None
    listed_at = first_gone + timedelta(seconds=UNREAD_KEPT_STATE_SECONDS - 60)
    assert rebuilt.poll_tolerant(listed_at) is None  # listed again: not gone
    gone_again = listed_at + timedelta(seconds=NOT_LISTED_GRACE_SECONDS)
    assert rebuilt.poll_tolerant(gone_again) is None  # found gone again: its bound starts now
    assert rebuilt.poll_tolerant(gone_again + timedelta(seconds=UNREAD_KEPT_STATE_SECONDS - 1)) is None
    assert api_down[0] and not listing.answers


def test_a_job_gone_while_its_kept_state_is_unread_is_stopped_once_when_its_stop_at_the_cap_falls_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen at 100 s of a 1,200 s cap, then never listed again: the polls that held it back for its kept
    # state only asked to read it again, and the due point was lost; the first stop went out at the bound,
    # 1,315 s after the submit, billed past what the cap allows. Polled as the triggerer polls (after
    # next_poll_in), the stop is now sent once, when it falls due.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_gone_job import UNREAD_KEPT_STATE_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    seen = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=100.0)
    wait, listing, _state, submitted = _stop_by_poll_wait(monkeypatch, [seen, *[gone] * 60], cap_seconds=1200)
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    seen_at = submitted + timedelta(seconds=100)
    due_at = seen_at + timedelta(seconds=1100)  # 1,200 s of running
    now, stops_at, event = seen_at, [], None
    while event is None and now < due_at + timedelta(seconds=UNREAD_KEPT_STATE_SECONDS):
        stopped_before = len(listing.stops)
        event = wait.poll_tolerant(now)
        if len(listing.stops) > stopped_before:
            stops_at.append(now)
        now += timedelta(seconds=wait.next_poll_in())
    assert event is not None and len(stops_at) == 1  # sent once, not again at each poll of the hold-back
    assert due_at <= stops_at[0] <= due_at + timedelta(seconds=5), stops_at[0] - submitted


@pytest.mark.parametrize(
    ("found_state", "derived"),
    [("running", True), ("pending", False)],
    ids=["found running", "found waiting"],
)
def test_a_wait_that_never_saw_a_followed_job_listed_stops_it_when_its_cap_falls_due_as_found(
    monkeypatch: pytest.MonkeyPatch, found_state: str, derived: bool
) -> None:
    # An earlier try's job, found running with 300 s of a 1,200 s cap run: the wait (a triggerer restart's,
    # its kept state unread) never saw it listed, so it had no due point, and the only stop went out at the
    # hold-back's bound, 1,200 s after it was found: 300 s past the cap. Found waiting to start, when it
    # starts is unknown: a stop sent at the earliest it may fall due could cut the job short, so none is.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import JobEnded, next_step
    from costaware.triggers.remote_gone_job import UNREAD_KEPT_STATE_SECONDS
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": found_state, "market": "spot", "billable_seconds": 300.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    wait, listing, state, _ = _stop_by_poll_wait(
        monkeypatch, [gone] * 80, cap_seconds=1200, followed=followed
    )
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    due_at = found_at + timedelta(seconds=900)
    bound = found_at + timedelta(seconds=NOT_LISTED_GRACE_SECONDS + UNREAD_KEPT_STATE_SECONDS)
    assert due_at < bound
    now, stops_at, event = found_at + timedelta(seconds=30), [], None
    while event is None and now < bound + timedelta(seconds=600):
        stopped_before = len(listing.stops)
        event, event_at = wait.poll_tolerant(now), now
        if len(listing.stops) > stopped_before:
            stops_at.append(now)
        now += timedelta(seconds=wait.next_poll_in())
    assert event is not None
    if derived:
        assert len(stops_at) == 1 and due_at <= stops_at[0] <= due_at + timedelta(seconds=5), stops_at
        # Gone at the poll after its stop, sent while the job was not listed: that poll says nothing of when
        # it ended (billed to it, 5 s on, the job's grace period after its SIGTERM went unbilled), so it is
        # billed from its find to its grace period's end after the stop: the cap and that grace period.
        grace = stop_seconds(state)
        assert grace > 5.0
        assert 1200.0 + grace <= event["job"]["billable_seconds"] <= 1205.0 + grace
        # Taken as gone only once that grace period has passed: an end after the poll that told it (a key,
        # note and emissions window in the future) was billed while the job might still be checkpointing.
        assert event["job"]["ended_at"] <= event_at.timestamp(), (event["job"]["ended_at"], event_at)
        # Ended by that stop: recorded as stopped at max_usd, not as a preemption that plans a new attempt
        # (billed as gone from the followed record, the wait that never saw it took it as interrupted).
        assert "stopped at what was left of max_usd" in event["job"]["reason"], event["job"]["reason"]
        step = next_step(state, JobEnded(job=event["job"]), now, max_attempts=10, latest_resume=None)
        assert step.record_cause == "max_usd"  # type: ignore[union-attr]
    else:
        assert stops_at and stops_at[0] >= bound  # no due point: the bound's stop, as before


@pytest.mark.parametrize(
    ("found_run", "wait_from"),
    [(300.0, 800.0), (1100.0, 30.0), (1300.0, 30.0)],
    ids=["due 100 s into the wait", "found near its cap", "found past its cap"],
)
def test_a_wait_that_never_saw_a_followed_job_stops_it_when_its_cap_falls_due_while_not_listed_yet(
    monkeypatch: pytest.MonkeyPatch, found_run: float, wait_from: float
) -> None:
    # A rebuilt Batch wait takes a job it never saw as not listed yet for 600 s after its first poll, and
    # then asked for the followed due point only at its first held-back poll: a due point in those 600 s
    # was missed by up to 600 s (found at 300 s of a 1,200 s cap, the wait 800 s after the find: stopped
    # 1,400 s after the find; found past its cap: stopped 630 s after it).
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.core.errors import JobNotFoundError

    gone = JobNotFoundError("DescribeJobs does not list it")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": found_run}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    wait, listing, _state, _ = _stop_by_poll_wait(
        monkeypatch, [gone] * 80, cap_seconds=1200, followed=followed
    )
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    first_poll = found_at + timedelta(seconds=wait_from)
    due_at = max(first_poll, found_at + timedelta(seconds=max(0.0, 1200 - found_run)))
    now, stops_at, event = first_poll, [], None
    while event is None and not stops_at and now < first_poll + timedelta(seconds=1200):
        event = wait.poll_tolerant(now)
        if listing.stops:
            stops_at.append(now)
        now += timedelta(seconds=wait.next_poll_in())
    assert stops_at, event
    assert due_at <= stops_at[0] <= due_at + timedelta(seconds=5), stops_at[0] - found_at


@pytest.mark.parametrize("price_unread_at_first", [False, True], ids=["price read", "price unread at first"])
@pytest.mark.parametrize("listed", [True, False], ids=["listed", "never listed"])
def test_a_followed_job_found_on_a_dearer_type_is_stopped_at_what_max_usd_buys_there(
    monkeypatch: pytest.MonkeyPatch, listed: bool, price_unread_at_first: bool
) -> None:
    # Batch, planned m5.large, max_usd $0.80; an earlier try's job found on a type 4 times dearer ($4/hour)
    # with 300 s run. Listed, the wait stops it at what $0.80 buys there; never listed, its due point came
    # from stop_after_seconds, sized at the planned price: stopped 900 s after the find (1,200 s run, about
    # $1.46 against $0.80), not 310 s after it. Its price unread at the first poll (the ledger down for a
    # moment), a never-listed job's due point stayed the planned price's for good: stopped 900 s after the
    # find too, where a listed one's price is asked again seconds later.
    from datetime import timedelta
    from decimal import Decimal

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError, LedgerUnavailableError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempt_effects import stop_seconds

    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 300.0}
    followed = {"job": {**job, "instance_type": "p4d.24xlarge"}, "seen_at": found_at.isoformat()}
    wait, listing, state, _ = _stop_by_poll_wait(monkeypatch, [], cap_seconds=1200, followed=followed)
    wait.state = {**wait.state, "max_usd": "0.8"}
    price_reads: list[int] = []

    def ran_on_scale(*args: Any, **kwargs: Any) -> Decimal:
        price_reads.append(1)
        if price_unread_at_first and len(price_reads) == 1:
            raise LedgerUnavailableError("the ledger's database does not answer")
        return Decimal(4)

    monkeypatch.setattr(KilledTrainingBilling, "_ran_on_scale", ran_on_scale)
    monkeypatch.setattr(KilledTrainingBilling, "_on_demand_in", lambda *a, **k: Decimal(1))
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    assert wait.state["instance_type"] == "m5.large"

    def poll(job_id: str) -> JobStatus:
        if not listed:
            raise JobNotFoundError("DescribeJobs does not list it")
        ran = 300.0 + (now - found_at).total_seconds()
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran,
                         instance_type="p4d.24xlarge")  # fmt: skip

    listing.poll = poll  # type: ignore[method-assign]
    limit = int(Decimal("0.8") * 3600 / 4 - Decimal(str(stop_seconds(state))))  # what $0.80 buys, less grace
    due_at = found_at + timedelta(seconds=limit - 300)
    now = found_at + timedelta(seconds=30)
    while not listing.stops and now < found_at + timedelta(seconds=2000):
        wait.poll_tolerant(now)
        stopped_at = now
        now += timedelta(seconds=wait.next_poll_in())
    assert listing.stops == ["j"]
    assert due_at <= stopped_at <= due_at + timedelta(seconds=5), stopped_at - found_at
    # Its end is recorded as stopped by max_usd after what it could run there, as a listed job's.
    assert wait.state["current"]["stop_after_seconds"] == limit


def test_a_stop_at_the_cap_refused_while_a_gone_job_is_held_back_is_asked_again_seconds_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The held-back polls' backoff for reading the kept state (up to 60 s) was that of the stop's retries
    # too: a stop refused when it fell due was asked again 60 s later, the job running on past the cap.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.triggers.remote_cap_stop import CAP_STOP_RETRY_SECONDS

    gone = JobNotFoundError("DescribeJobs does not list it")
    seen = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=100.0)
    wait, listing, _state, submitted = _stop_by_poll_wait(monkeypatch, [seen, *[gone] * 60], cap_seconds=1200)
    asked_at: list[datetime] = []

    def refused_once(job_id: str) -> None:
        asked_at.append(now)
        if len(asked_at) == 1:
            raise ConnectionError("throttled")
        listing.stops.append(job_id)

    listing.stop = refused_once  # type: ignore[method-assign]
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    now, event = submitted + timedelta(seconds=100), None
    while event is None and not listing.stops:
        event = wait.poll_tolerant(now)
        now += timedelta(seconds=wait.next_poll_in())
    assert listing.stops == ["j"] and len(asked_at) == 2
    assert (asked_at[1] - asked_at[0]).total_seconds() <= CAP_STOP_RETRY_SECONDS


@pytest.mark.parametrize("backend", ["batch", "kubernetes"])
def test_a_job_stopped_at_the_cap_before_it_started_and_then_gone_is_billed_no_queue_time(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    # What is left of max_usd buys less than MIN_CAPPED_SECONDS: the job, seen waiting to start, is stopped
    # at once. Gone after that stop (a pod deleted, a Batch job dropped from DescribeJobs), it was billed
    # from that poll to the end of its grace period after the stop, as if it had run: a job waiting to start
    # costs nothing on SageMaker, Batch or Kubernetes, and stopped then it never starts.
    from datetime import timedelta

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempts import JobEnded, next_step
    from costaware.triggers.remote_training import NOT_LISTED_GRACE_SECONDS

    waiting = JobStatus(job_id="j", state=JobState.PENDING, market="spot", billable_seconds=0.0)
    gone = JobNotFoundError("no such job")
    wait, listing, state, submitted = _stop_by_poll_wait(
        monkeypatch, [waiting, *[gone] * 10], cap_seconds=30, backend=backend
    )
    seen_at = submitted + timedelta(seconds=60)
    assert wait.poll_tolerant(seen_at) is None
    assert listing.stops == ["j"]  # stopped before it starts
    now, event = seen_at, None
    while event is None and now < seen_at + timedelta(seconds=2 * NOT_LISTED_GRACE_SECONDS):
        now += timedelta(seconds=wait.next_poll_in())
        event = wait.poll_tolerant(now)
    assert event is not None
    assert event["job"]["billable_seconds"] == 0.0, event["job"]["reason"]
    assert event["job"]["ended_at"] <= now.timestamp()
    assert "stopped at what was left of max_usd" in event["job"]["reason"], event["job"]["reason"]
    step = next_step(state, JobEnded(job=event["job"]), now, max_attempts=10, latest_resume=None)
    assert step.record_cause == "max_usd"  # type: ignore[union-attr]


def test_a_job_stopped_at_the_cap_while_not_listed_and_then_listed_again_is_billed_as_a_listed_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A stop sent while the job was not listed is kept ``unlisted``: the wait takes the job as gone only at
    # the end of its grace period after the stop, and bills it to there (no poll said when it ended). Listed
    # again after that stop, the job was seen: gone later, it ended between that sighting and the poll that
    # found it gone, yet the flag stayed set and it was billed on to the grace period's end (a 1,500 s grace
    # on Batch: 900 s past the poll that took it as gone).
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.triggers.remote_training import CAP_STOP_KEY, WAIT_STATE_XCOM_KEY

    wait, listing, _state, submitted = _stop_by_poll_wait(monkeypatch, [], cap_seconds=1200)
    wait.state = {**wait.state, "grace_seconds": 1500}
    grace = stop_seconds(AttemptState.from_json(wait.state))
    assert grace >= 1500
    seen_at = submitted + timedelta(seconds=100)
    due_at = seen_at + timedelta(seconds=1100)
    relisted_at = due_at + timedelta(seconds=30)

    def poll(job_id: str) -> JobStatus:
        listed = now <= seen_at + timedelta(seconds=800)  # not listed for the last 300 s before its cap
        if listed or relisted_at <= now < relisted_at + timedelta(seconds=20):
            ran = 100.0 + (now - seen_at).total_seconds()
            return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran)
        raise JobNotFoundError("DescribeJobs does not list it")

    listing.poll = poll  # type: ignore[method-assign]
    now = seen_at
    while not listing.stops and now < due_at + timedelta(seconds=60):
        assert wait.poll_tolerant(now) is None
        polled_at, now = now, now + timedelta(seconds=wait.next_poll_in())
    assert listing.stops == ["j"] and due_at <= polled_at < relisted_at  # by its id, while not listed
    now, event = relisted_at, None
    while event is None and now < relisted_at + timedelta(seconds=4000):
        event, event_at = wait.poll_tolerant(now), now
        now += timedelta(seconds=wait.next_poll_in())
    assert event is not None and listing.stops == ["j"]
    where = {"dag_id": "remote_dag", "task_id": "train", "run_id": "r", "map_index": -1}
    stop = XCom.get_one(key=WAIT_STATE_XCOM_KEY, **where)["current"][CAP_STOP_KEY]
    assert stop["unlisted"] is False  # listed again: kept as a listed stop for a re-created wait too
    ended_at = event["job"]["ended_at"]
    stopped_at = datetime.fromisoformat(stop["sent_at"])
    assert ended_at < (stopped_at + timedelta(seconds=grace)).timestamp(), (ended_at, stopped_at)
    assert ended_at == event_at.timestamp()  # billed up to the poll that took it as gone
    assert event["job"]["billable_seconds"] == 100.0 + (ended_at - seen_at.timestamp())


def test_a_pod_gone_before_its_stop_at_the_cap_falls_due_is_not_deleted_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A pod an earlier try submitted, found running with 1,000 s of a 1,200 s cap run, that this wait (its
    # kept state unread) never saw: its API server answers 404, which is final on Kubernetes (the pod was
    # deleted). When its stop at the cap fell due, the wait deleted it again (a 404 that does nothing) and
    # said it "has run what is left of max_usd: stopping it by its id". Its stop is still recorded at its due
    # point; its bill (to its first 404, a job gone by itself) is test_..._billed_to_its_first_404's.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.core.errors import JobNotFoundError

    gone = JobNotFoundError("pod j not found")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 1000.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    wait, listing, _state, _ = _stop_by_poll_wait(
        monkeypatch, [gone] * 80, cap_seconds=1200, followed=followed, backend="kubernetes"
    )
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    due_at = found_at + timedelta(seconds=200)
    now, event = found_at + timedelta(seconds=30), None
    while event is None and now < found_at + timedelta(seconds=3000):
        event = wait.poll_tolerant(now)
        now += timedelta(seconds=wait.next_poll_in())
    assert event is not None
    assert listing.stops == []  # a 404 is final on Kubernetes: nothing to delete
    said = [line for line in capsys.readouterr().out.splitlines() if "max_usd" in line]
    assert not any("stopping it by its id" in line for line in said), said
    assert any("never saw" in line and "nothing to stop" in line for line in said), said
    sent_at = datetime.fromisoformat(wait.state["current"]["cap_stop"]["sent_at"])
    assert due_at <= sent_at <= due_at + timedelta(seconds=5)


def test_a_followed_job_found_waiting_is_stopped_at_its_cap_counted_from_the_run_the_wait_sees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found waiting to start, a followed job has no due point from its find (when it starts is unknown).
    # Seen running by the wait (a triggerer restart's, its kept state unread) and not listed after, its stop
    # at the cap falls due from the run seen, as a job found running: 1,200 s of running, not at the
    # hold-back's bound.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError

    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "pending", "market": "spot", "billable_seconds": 0.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    wait, listing, _state, _ = _stop_by_poll_wait(monkeypatch, [], cap_seconds=1200, followed=followed)
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    started_at = found_at + timedelta(seconds=200)

    def poll(job_id: str) -> JobStatus:
        if now < started_at:
            return JobStatus(job_id="j", state=JobState.PENDING, market="spot")
        if now < started_at + timedelta(seconds=400):
            ran = (now - started_at).total_seconds()
            return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran)
        raise JobNotFoundError("DescribeJobs does not list it")

    listing.poll = poll  # type: ignore[method-assign]
    due_at = started_at + timedelta(seconds=1200)
    now = found_at + timedelta(seconds=30)
    while not listing.stops and now < due_at + timedelta(seconds=1200):
        wait.poll_tolerant(now)
        stopped_at, now = now, now + timedelta(seconds=wait.next_poll_in())
    assert listing.stops == ["j"]
    assert due_at <= stopped_at <= due_at + timedelta(seconds=5), stopped_at - started_at


def test_a_followed_job_found_waiting_with_nothing_left_of_max_usd_is_stopped_at_once_though_never_listed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What is left of max_usd buys less than MIN_CAPPED_SECONDS (30 s): a listed job is stopped at once in
    # any state, but one this wait never saw listed, found waiting to start, got no due point and was
    # stopped only at the hold-back's bound, 1,235 s after the find (room to start and run into its grace
    # period first). Gone after the stop, it is billed from the find to its grace period's end after the
    # stop: it may have started between the find and the stop, which no poll of this wait saw.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import JobEnded, next_step

    gone = JobNotFoundError("DescribeJobs does not list it")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "pending", "market": "spot", "billable_seconds": 0.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    wait, listing, state, _ = _stop_by_poll_wait(monkeypatch, [gone] * 80, cap_seconds=30, followed=followed)
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    first_poll = found_at + timedelta(seconds=30)
    now, stops_at, event = first_poll, [], None
    while event is None and now < found_at + timedelta(seconds=3000):
        stopped_before = len(listing.stops)
        event, event_at = wait.poll_tolerant(now), now
        if len(listing.stops) > stopped_before:
            stops_at.append(now)
        now += timedelta(seconds=wait.next_poll_in())
    assert stops_at == [first_poll], [at - found_at for at in stops_at]
    said = [line for line in capsys.readouterr().out.splitlines() if "stopping it by its id" in line]
    # Found waiting with no room for a run: it has run nothing of max_usd, which buys it no run.
    assert len(said) == 1 and "found pending" in said[0] and "buys no run" in said[0], said
    assert event is not None
    grace = stop_seconds(state)
    assert event["job"]["billable_seconds"] == 30.0 + grace, event["job"]["reason"]
    assert event["job"]["ended_at"] <= event_at.timestamp()
    step = next_step(state, JobEnded(job=event["job"]), event_at, max_attempts=10, latest_resume=None)
    assert step.record_cause == "max_usd"  # type: ignore[union-attr]


@pytest.mark.parametrize("poll_seconds", [0, 10], ids=["instant polls", "10 s polls"])
@pytest.mark.parametrize("seen", [False, True], ids=["never listed", "listed once"])
def test_a_stop_at_the_cap_of_a_job_not_listed_falls_due_on_the_clock_however_long_the_polls_take(
    monkeypatch: pytest.MonkeyPatch, seen: bool, poll_seconds: int
) -> None:
    # Batch, 1,200 s cap, the job at 700 s of it (found so, or listed so at the first poll), then not
    # listed; polls 30 s apart. Each poll took the due point as seconds left and the next took exactly
    # poll_interval off: the time inside each poll was never counted (10 s each: stopped 645 s on, not
    # 500 s), and one due in 1 to 5 s was sent at once (early).
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError

    gone = JobNotFoundError("DescribeJobs does not list it")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 700.0}
    listed = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=700.0)
    answers = [listed, *[gone] * 80] if seen else [gone] * 80
    followed = None if seen else {"job": job, "seen_at": found_at.isoformat()}
    wait, listing, _state, _ = _stop_by_poll_wait(monkeypatch, answers, cap_seconds=1200, followed=followed)
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    wait.poll_interval = 30
    due_at = found_at + timedelta(seconds=500)
    now, stops_at = found_at, []
    while not stops_at and now < found_at + timedelta(seconds=1200):
        wait.poll_tolerant(now)
        if listing.stops:
            stops_at.append(now)
        now += timedelta(seconds=poll_seconds + wait.next_poll_in())
    assert stops_at, listing.stops
    # A poll begun past the due point by the time the one before took, at the latest (its own time).
    assert due_at <= stops_at[0] <= due_at + timedelta(seconds=poll_seconds), stops_at[0] - found_at


def test_a_job_stopped_while_not_listed_says_once_when_it_is_taken_as_gone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Stopped at the cap while not listed, the job is taken as gone at its grace period's end: each poll
    # in between said 'polled again in N s' with what was left of that grace period, while the next poll
    # came after the poll interval (the line repeated at each, its N never when the next poll came).
    import re
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState

    gone = JobNotFoundError("DescribeJobs does not list it")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "pending", "market": "spot", "billable_seconds": 0.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    wait, listing, _state, _ = _stop_by_poll_wait(monkeypatch, [gone] * 80, cap_seconds=30, followed=followed)
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    wait.state = {**wait.state, "grace_seconds": 1500}
    grace = stop_seconds(AttemptState.from_json(wait.state))
    stopped_at = found_at + timedelta(seconds=30)
    assert wait.poll_tolerant(stopped_at) is None
    assert listing.stops == ["j"]
    capsys.readouterr()
    now, event, polls = stopped_at, None, []
    while event is None and now < stopped_at + timedelta(seconds=2 * grace):
        now += timedelta(seconds=wait.next_poll_in())
        event = wait.poll_tolerant(now)
        polls.append(now)
    assert event is not None
    said = re.findall(r"taken as gone at the end of its grace period[^\[]*", capsys.readouterr().out)
    assert len(said) == 1, said
    grace_end = stopped_at + timedelta(seconds=grace)
    assert polls[-1] == grace_end and len(polls) > 4, polls  # held over several polls
    assert grace_end.isoformat() in said[0], said[0]


@pytest.mark.parametrize("listed", [True, False], ids=["listed", "never listed"])
def test_a_followed_job_on_a_dearer_type_is_said_to_stop_where_it_is_stopped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], listed: bool
) -> None:
    # What the budgets left when this try found the job (stop_after_seconds, 200 s) comes before what
    # max_usd buys on the dearer type it runs on (some 600 s): the job is stopped at 200 s, but the log
    # said 'it is stopped after 6xx s of running'.
    import re
    from datetime import timedelta
    from decimal import Decimal

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempt_effects import stop_seconds

    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 100.0}
    followed = {"job": {**job, "instance_type": "p4d.24xlarge"}, "seen_at": found_at.isoformat()}
    wait, listing, state, _ = _stop_by_poll_wait(monkeypatch, [], cap_seconds=200, followed=followed)
    wait.state = {**wait.state, "max_usd": "0.8"}
    monkeypatch.setattr(KilledTrainingBilling, "_ran_on_scale", lambda *a, **k: Decimal(4))
    monkeypatch.setattr(KilledTrainingBilling, "_on_demand_in", lambda *a, **k: Decimal(1))
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    assert int(Decimal("0.8") * 3600 / 4 - Decimal(str(stop_seconds(state)))) > 200

    def poll(job_id: str) -> JobStatus:
        if not listed:
            raise JobNotFoundError("DescribeJobs does not list it")
        ran = 100.0 + (now - found_at).total_seconds()
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran,
                         instance_type="p4d.24xlarge")  # fmt: skip

    listing.poll = poll  # type: ignore[method-assign]
    now = found_at + timedelta(seconds=30)
    while not listing.stops and now < found_at + timedelta(seconds=2000):
        wait.poll_tolerant(now)
        stopped_at = now
        now += timedelta(seconds=wait.next_poll_in())
    assert listing.stops == ["j"]
    assert stopped_at == found_at + timedelta(seconds=100)  # at its 200 s
    said = re.findall(r"it is stopped after (\d+) s of running", capsys.readouterr().out)
    assert said and set(said) == {"200"}, said


@pytest.mark.parametrize(
    ("ran_when_found", "capped"),
    [(1000.0, False), (1190.0, True)],
    ids=["due after the 404", "due before the 404"],
)
def test_a_pod_gone_while_its_kept_state_is_unread_is_billed_to_its_first_404(
    monkeypatch: pytest.MonkeyPatch, ran_when_found: float, capped: bool
) -> None:
    # A pod an earlier try submitted, found running (1,200 s cap), gone (404) from the wait's first poll, 30 s
    # after the find, while the wait's kept state is unread. A 404 is final on Kubernetes: it ran no longer
    # than that. Its stop at the cap, falling due while held back, was recorded as sent to an unlisted job
    # (no delete sent: none was needed), and the wait held it to the end of the grace period after the due
    # point, billing it to there: 1,310 s, ended 280 s after it was known gone (1,030 s with the kept state
    # read). No SIGTERM was sent, so no grace period was run. Billed to the first 404; stopped by max_usd
    # only where the cap fell due by then, else it went by itself.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempts import JobEnded, next_step

    gone = JobNotFoundError("pod j not found")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": ran_when_found}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    wait, listing, state, _ = _stop_by_poll_wait(
        monkeypatch, [gone] * 80, cap_seconds=1200, followed=followed, backend="kubernetes"
    )
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    first_gone = found_at + timedelta(seconds=30)
    now, event = first_gone, None
    while event is None and now < found_at + timedelta(seconds=3000):
        event = wait.poll_tolerant(now)
        now += timedelta(seconds=wait.next_poll_in())
    assert event is not None and listing.stops == []
    assert event["job"]["ended_at"] == first_gone.timestamp()
    assert event["job"]["billable_seconds"] == ran_when_found + 30
    step = next_step(state, JobEnded(job=event["job"]), now, max_attempts=10, latest_resume=None)
    assert (step.record_cause == "max_usd") is capped, (step, event["job"]["reason"])  # type: ignore[union-attr]


def test_a_price_read_again_soon_is_not_taken_as_the_stop_at_the_cap_falling_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A listed job on a dearer type than planned whose price cannot be read is polled again 5 s later to
    # ask the price again. That retry was kept as the stop at the cap's due point: not listed at that next
    # poll (a listing that lags), the job was stopped by its id and recorded as stopped at max_usd, 5 s
    # after it was seen with 100 s run of a 1,200 s cap and $100 left.
    from datetime import timedelta
    from decimal import Decimal

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError, LedgerUnavailableError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.triggers.remote_cap_stop import CAP_STOP_RETRY_SECONDS

    seen_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=100)
    listed = JobStatus(
        job_id="j",
        state=JobState.RUNNING,
        market="spot",
        billable_seconds=100.0,
        instance_type="p4d.24xlarge",
    )
    wait, listing, _state, _ = _stop_by_poll_wait(
        monkeypatch, [listed, JobNotFoundError("lags")], cap_seconds=1200
    )
    wait.state = {**wait.state, "max_usd": "100"}

    def unreadable(*args: Any, **kwargs: Any) -> Decimal:
        raise LedgerUnavailableError("the ledger is down")

    monkeypatch.setattr(KilledTrainingBilling, "_ran_on_scale", unreadable)
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    assert wait.poll_tolerant(seen_at) is None
    assert wait.next_poll_in() == CAP_STOP_RETRY_SECONDS  # the price is asked again soon
    assert wait.poll_tolerant(seen_at + timedelta(seconds=wait.next_poll_in())) is None
    assert listing.stops == []
    assert "cap_stop" not in wait.state["current"]


def test_a_stop_refused_after_price_reads_failed_is_asked_again_seconds_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A followed job never listed, found on a dearer type whose price could not be read for a while: each
    # read asked again on the stop's backoff (5, 10, 20, 40, then 60 s), and that count stayed when its
    # price was read and its stop fell due: a stop then refused was asked again 60 s later, the job running
    # on past what max_usd buys there.
    from datetime import timedelta
    from decimal import Decimal

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.core.errors import JobNotFoundError, LedgerUnavailableError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.triggers.remote_cap_stop import CAP_STOP_RETRY_SECONDS

    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 300.0}
    followed = {"job": {**job, "instance_type": "p4d.24xlarge"}, "seen_at": found_at.isoformat()}
    gone = JobNotFoundError("DescribeJobs does not list it")
    wait, listing, _state, _ = _stop_by_poll_wait(
        monkeypatch, [gone] * 200, cap_seconds=1200, followed=followed
    )
    wait.state = {**wait.state, "max_usd": "0.8"}
    price_reads: list[int] = []

    def ran_on_scale(*args: Any, **kwargs: Any) -> Decimal:
        price_reads.append(1)
        if len(price_reads) <= 6:
            raise LedgerUnavailableError("the ledger's database does not answer")
        return Decimal(4)

    asked_at: list[datetime] = []

    def refused_once(job_id: str) -> None:
        asked_at.append(now)
        if len(asked_at) == 1:
            raise ConnectionError("throttled")
        listing.stops.append(job_id)

    monkeypatch.setattr(KilledTrainingBilling, "_ran_on_scale", ran_on_scale)
    monkeypatch.setattr(KilledTrainingBilling, "_on_demand_in", lambda *a, **k: Decimal(1))
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    listing.stop = refused_once  # type: ignore[method-assign]
    now = found_at + timedelta(seconds=30)
    while not listing.stops and now < found_at + timedelta(seconds=1000):
        wait.poll_tolerant(now)
        now += timedelta(seconds=wait.next_poll_in())
    assert len(price_reads) > 6 and listing.stops == ["j"] and len(asked_at) == 2
    assert (asked_at[1] - asked_at[0]).total_seconds() <= CAP_STOP_RETRY_SECONDS


@pytest.mark.parametrize(
    "listed_throughout",
    [False, True],
    ids=["listing-lags-after-the-failed-read", "listed-ledger-down-longer"],
)
def test_a_dearer_types_limit_stays_due_while_its_price_cannot_be_read_again(
    monkeypatch: pytest.MonkeyPatch, listed_throughout: bool
) -> None:
    # A followed Batch job on a type 4 times dearer than planned, max_usd $0.80 (610 s of running there),
    # its cap 1,200 s, polled every 60 s. Its price was read at the first poll and could not be at the
    # next: the dearer type's due point was dropped (each poll works it out again), and the job, not listed
    # from 90 s on, was stopped at the planned type's 1,200 s (about $1.57), or, listed but the ledger down
    # up to 900 s after the find, at 1,045 s. The limit last read stays due until the price is read again.
    from datetime import timedelta
    from decimal import Decimal

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError, LedgerUnavailableError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempt_effects import stop_seconds

    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 100.0}
    followed = {"job": {**job, "instance_type": "p4d.24xlarge"}, "seen_at": found_at.isoformat()}
    wait, listing, state, _ = _stop_by_poll_wait(monkeypatch, [], cap_seconds=1200, followed=followed)
    wait.state = {**wait.state, "max_usd": "0.8"}
    wait.poll_interval = 60
    price_reads: list[datetime] = []

    def ran_on_scale(*args: Any, **kwargs: Any) -> Decimal:
        price_reads.append(now)
        down_until = found_at + timedelta(seconds=900 if listed_throughout else 0)
        if len(price_reads) == 2 or (len(price_reads) > 2 and now < down_until):  # read at the 1st poll only
            raise LedgerUnavailableError("the ledger's database does not answer")
        return Decimal(4)

    def poll(job_id: str) -> JobStatus:
        if not listed_throughout and now > found_at + timedelta(seconds=90):
            raise JobNotFoundError("DescribeJobs does not list it")
        ran = 100.0 + (now - found_at).total_seconds()
        return JobStatus(
            job_id="j",
            state=JobState.RUNNING,
            market="spot",
            billable_seconds=ran,
            instance_type="p4d.24xlarge",
        )

    monkeypatch.setattr(KilledTrainingBilling, "_ran_on_scale", ran_on_scale)
    monkeypatch.setattr(KilledTrainingBilling, "_on_demand_in", lambda *a, **k: Decimal(1))
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    listing.poll = poll  # type: ignore[method-assign]
    now = found_at + timedelta(seconds=30)
    stopped_at = now
    while not listing.stops and now < found_at + timedelta(seconds=3000):
        wait.poll_tolerant(now)
        stopped_at = now
        now += timedelta(seconds=wait.next_poll_in())
    dearer_limit = int(Decimal("0.8") * 3600 / 4 - Decimal(str(stop_seconds(state))))
    ran_when_stopped = 100 + (stopped_at - found_at).total_seconds()
    assert listing.stops == ["j"]
    assert dearer_limit - 5 <= ran_when_stopped <= dearer_limit + 5, (dearer_limit, ran_when_stopped)


def test_a_pod_an_earlier_wait_stopped_before_its_first_404_is_billed_as_stopped_at_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An earlier wait stopped the pod at what max_usd buys (its kept state says so) 20 s before this wait's
    # first 404 (final on Kubernetes); this wait, holding it back while the kept state was unread, worked
    # out a later due point of its own (the planned type's, a dearer type's price unread). Its own due point
    # was preferred: the pod was billed as gone by itself (a new attempt may be planned), not by max_usd.
    from datetime import timedelta

    from costaware.training.attempts import JobEnded, next_step
    from costaware.triggers.remote_job_status import seen_or_followed, vanished_job_status

    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 500.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    wait, _listing, state, _ = _stop_by_poll_wait(
        monkeypatch, [], cap_seconds=1200, followed=followed, backend="kubernetes"
    )
    first_404 = found_at + timedelta(seconds=30)
    stopped_by_earlier_wait = first_404 - timedelta(seconds=20)
    wait._gone_unread_since = first_404
    wait._held_cap_stop_due_at = first_404 + timedelta(seconds=600)
    now = first_404 + timedelta(seconds=300)
    gone = vanished_job_status(
        "j", wait.state, last_seen=None, now=now, instances=1, backend="kubernetes", watched_since=first_404
    )
    assert gone is not None
    found = seen_or_followed(wait.state, None)  # as _gone_after_cap_stop finds it: the followed record
    billed = wait._final_404_bill(gone, stopped_by_earlier_wait, found, instances=1)
    assert billed is not None and billed.ended_at == first_404.timestamp(), billed
    step = next_step(state, JobEnded(job=billed.to_dict()), now, max_attempts=10, latest_resume=None)
    assert step.record_cause == "max_usd", (step, billed.reason)  # type: ignore[union-attr]


def test_a_price_read_again_stays_due_across_a_poll_that_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # A dearer type's price that could not be read is asked again 5 s later; that poll's status call
    # failed (throttled), and the re-read it was for was dropped: the next poll came a whole poll_interval
    # (300 s) later, the job running on at the dearer price unweighed.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import LedgerUnavailableError
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.triggers.remote_cap_stop import CAP_STOP_RETRY_SECONDS

    seen_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=100)
    listed = JobStatus(
        job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=100.0, instance_type="p4d.xlarge"
    )
    wait, _listing, _state, _ = _stop_by_poll_wait(
        monkeypatch, [listed, ComputeBackendError("throttled")], cap_seconds=1200
    )
    wait.state = {**wait.state, "max_usd": "100"}

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise LedgerUnavailableError("the ledger is down")

    monkeypatch.setattr(KilledTrainingBilling, "_ran_on_scale", unreadable)
    monkeypatch.setattr(XCom, "get_one", lambda **where: None)
    assert wait.poll_tolerant(seen_at) is None
    assert wait.next_poll_in() == CAP_STOP_RETRY_SECONDS
    assert wait.poll_tolerant(seen_at + timedelta(seconds=CAP_STOP_RETRY_SECONDS)) is None  # its poll fails
    assert wait.next_poll_in() <= 2 * CAP_STOP_RETRY_SECONDS


def test_a_listed_again_flag_whose_keep_failed_is_kept_at_the_next_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A job stopped at the cap while not listed, then listed again: its stop is kept as a listed one (see
    # the test above). That XCom write failed once (the API server restarting) and was never tried again:
    # the flag in this wait's state was already cleared, so no later poll wrote it, and a re-created wait
    # read the stop as unlisted and billed the job to its grace period's end.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.triggers.remote_training import CAP_STOP_KEY, WAIT_STATE_XCOM_KEY

    seen_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=1300)
    running = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=1250.0)
    wait, _listing, _state, _ = _stop_by_poll_wait(monkeypatch, [running, running], cap_seconds=1200)
    kept = keeping_wait_state(monkeypatch)
    stop = {"job_id": "j", "sent_at": (seen_at - timedelta(seconds=60)).isoformat(), "unlisted": True}
    wait.state = {**wait.state, "current": {**wait.state["current"], CAP_STOP_KEY: stop}}
    wait._stopped_for_cap, wait._cap_stopped_at = "j", seen_at - timedelta(seconds=60)
    keep = XCom.set
    writes: list[bool] = []

    def failing_once(*args: Any, **kwargs: Any) -> None:
        writes.append(True)
        if len(writes) == 1:
            raise ConnectionError("the API server does not answer")
        keep(*args, **kwargs)

    monkeypatch.setattr(XCom, "set", failing_once)
    assert wait.poll_tolerant(seen_at) is None and kept == {}  # its keep failed
    assert wait.poll_tolerant(seen_at + timedelta(seconds=wait.next_poll_in())) is None
    (value,) = kept.values()
    assert kept and next(iter(kept))[0] == WAIT_STATE_XCOM_KEY
    assert value["current"][CAP_STOP_KEY]["unlisted"] is False


def test_a_re_created_wait_reading_a_kept_stop_of_a_pod_already_gone_bills_it_to_its_first_404(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A wait whose kept state was unread held back a pod gone (404, final on Kubernetes) 30 s after this try
    # found it with 1,190 s of a 1,200 s cap run; its stop at the cap, due already, was recorded as sent to a
    # pod already gone (no SIGTERM, no grace period) and kept. A triggerer restart then: the re-created wait
    # read that stop, had no first 404 of its own, and billed the pod up to its next poll (and on to the
    # grace period's end), 60 s past the 404 here.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempts import JobEnded, next_step

    gone = JobNotFoundError("pod j not found")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 1190.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    wait, listing, state, _ = _stop_by_poll_wait(
        monkeypatch, [gone] * 80, cap_seconds=1200, followed=followed, backend="kubernetes"
    )
    read_kept = XCom.get_one
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    first_gone = found_at + timedelta(seconds=30)
    assert wait.poll_tolerant(first_gone) is None
    assert wait.state["current"]["cap_stop"]["sent_at"] == first_gone.isoformat()  # due: sent, kept

    monkeypatch.setattr(XCom, "get_one", read_kept)  # the API server is back, with the triggerer restarted
    rebuilt = RemoteTrainingJobTrigger(*wait.serialize()[1].values())  # type: ignore[arg-type]
    rebuilt.task_instance = wait.task_instance
    rebuilt.poll_interval = 300
    now, event = first_gone + timedelta(seconds=60), None
    while event is None and now < found_at + timedelta(seconds=3000):
        event = rebuilt.poll_tolerant(now)
        now += timedelta(seconds=rebuilt.next_poll_in())
    assert event is not None and listing.stops == []
    assert event["job"]["ended_at"] == first_gone.timestamp(), event["job"]["reason"]
    assert event["job"]["billable_seconds"] == 1190.0 + 30
    step = next_step(state, JobEnded(job=event["job"]), now, max_attempts=10, latest_resume=None)
    assert step.record_cause == "max_usd", (step, event["job"]["reason"])  # type: ignore[union-attr]


def test_a_job_stopped_at_the_cap_still_seen_running_past_its_grace_period_is_stopped_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The stop may not reach the job (a same-named job a new try resubmitted, a stop lost by its backend):
    # seen running long after its grace period, it was never stopped again, billed on past max_usd. Stopped
    # again once per grace period, and said.
    from datetime import timedelta

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState

    wait, listing, _state, submitted = _stop_by_poll_wait(monkeypatch, [], cap_seconds=600)
    wait.poll_interval = 10  # polls closer than the grace period: it bounds the stops
    grace = stop_seconds(AttemptState.from_json(wait.state))

    def poll(job_id: str) -> JobStatus:
        ran = (now - submitted).total_seconds()
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran)

    listing.poll = poll  # type: ignore[method-assign]
    now = submitted + timedelta(seconds=600)
    assert wait.poll_tolerant(now) is None and listing.stops == ["j"]
    stopped_at = now
    for at, stops in [(grace - 10, 1), (grace + 10, 2), (grace + 10 + grace / 2, 2), (2 * grace + 20, 3)]:
        now = stopped_at + timedelta(seconds=at)
        assert wait.poll_tolerant(now) is None
        assert listing.stops == ["j"] * stops, at
    assert "still seen running" in capsys.readouterr().out


def test_a_pod_listed_again_after_its_stop_recorded_it_gone_is_billed_from_that_listing_when_gone_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A wait whose kept state was unread recorded its due stop at the cap as sent to a pod already gone (404
    # at T0, kept as the stop's gone_at). The pod was then listed running again (a same-named pod, at T0 +
    # 60 s): gone again later, it was billed to the old 404's listing (T0 + 60 s, "deleted it by T0"), not
    # to the grace period's end after the stop, as any listed stop is. No SIGTERM had reached it: it is
    # stopped as it is listed, and billed to the grace period's end after that stop.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState

    gone = JobNotFoundError("pod j not found")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 1190.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    listed_again = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=1250.0)
    wait, listing, _state, _ = _stop_by_poll_wait(
        monkeypatch, [gone, listed_again, gone], cap_seconds=1200, followed=followed, backend="kubernetes"
    )
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    first_gone = found_at + timedelta(seconds=30)
    assert wait.poll_tolerant(first_gone) is None
    assert wait.state["current"]["cap_stop"]["gone_at"] == first_gone.isoformat()  # due: sent, kept gone
    seen_again = first_gone + timedelta(seconds=60)
    assert wait.poll_tolerant(seen_again) is None
    assert "gone_at" not in wait.state["current"]["cap_stop"]  # that 404 is not the pod's end any more
    grace = stop_seconds(AttemptState.from_json(wait.state))
    assert grace > 60  # the listing fell within the grace period after the stop

    event = wait.poll_tolerant(first_gone + timedelta(seconds=360))
    assert event is not None and listing.stops == ["j"]
    assert "404 is final" not in event["job"]["reason"], event["job"]["reason"]
    assert event["job"]["ended_at"] == (seen_again + timedelta(seconds=grace)).timestamp()
    assert event["job"]["billable_seconds"] == 1250.0 + grace


@pytest.mark.parametrize(("asked_after_stop", "stops"), [(2, 1), (-10, 1), (-3600, 3)])
def test_a_sagemaker_job_stopping_since_its_stop_at_the_cap_is_not_stopped_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], asked_after_stop: int, stops: int
) -> None:
    # SageMaker lists a Stopping job as running (it uploads its checkpoint, often past the 120 s grace
    # period): it was sent StopTrainingJob again at each grace period, warned "still seen running". A stop
    # its backend says was asked since ours (a little before: the clocks differ) is ours; one asked long
    # before it (not ours) does not say our stop reached it.
    from datetime import timedelta

    from costaware.adapters.compute.base import STOP_REQUESTED_AT, JobState, JobStatus
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState

    wait, listing, _state, submitted = _stop_by_poll_wait(
        monkeypatch, [], cap_seconds=600, backend="sagemaker"
    )
    wait.poll_interval = 10
    grace = stop_seconds(AttemptState.from_json(wait.state))
    stopped_at = submitted + timedelta(seconds=600)

    def poll(job_id: str) -> JobStatus:
        ran = (now - submitted).total_seconds()
        asked = {STOP_REQUESTED_AT: (stopped_at + timedelta(seconds=asked_after_stop)).timestamp()}
        return JobStatus(
            job_id="j",
            state=JobState.RUNNING,
            market="spot",
            billable_seconds=ran,
            metrics=asked if now > stopped_at else {},
        )

    listing.poll = poll  # type: ignore[method-assign]
    now = stopped_at
    assert wait.poll_tolerant(now) is None and listing.stops == ["j"]
    for at in (grace + 10, 2 * grace + 20):
        now = stopped_at + timedelta(seconds=at)
        assert wait.poll_tolerant(now) is None
    assert listing.stops == ["j"] * stops
    assert ("still seen running" in capsys.readouterr().out) == (stops > 1)


def test_a_job_stopped_at_the_cap_polled_further_apart_than_its_grace_period_is_not_stopped_at_each_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A grace period (60 s on Batch) shorter than poll_interval (300 s): each poll found the job past it
    # and stopped it again. At most every second poll, also where polls come late by their own time.
    from datetime import timedelta

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState

    wait, listing, _state, submitted = _stop_by_poll_wait(monkeypatch, [], cap_seconds=600)
    assert stop_seconds(AttemptState.from_json(wait.state)) < wait.poll_interval

    def poll(job_id: str) -> JobStatus:
        ran = (now - submitted).total_seconds()
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran)

    listing.poll = poll  # type: ignore[method-assign]
    now = submitted + timedelta(seconds=600)
    stopped_at = now
    assert wait.poll_tolerant(now) is None and listing.stops == ["j"]
    for polls, stops in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)]:
        now = stopped_at + timedelta(seconds=polls * (wait.poll_interval + 0.5))
        assert wait.poll_tolerant(now) is None
        assert listing.stops == ["j"] * stops, polls


@pytest.mark.parametrize("backend", ["batch", "kubernetes"])
def test_a_job_stopped_again_past_its_grace_period_and_then_gone_is_billed_to_the_latest_stops_grace_end(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    # Seen running past the grace period after its stop at the cap, the job was stopped again; gone after
    # that, it was billed only to the first stop's grace period's end (before it was last seen running):
    # the time it ran after it went unbilled, and its end came before it was last seen. Billed to the
    # latest stop's grace period's end instead, never past the poll that found it gone (a pod's 404).
    from datetime import timedelta

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState

    wait, listing, _state, submitted = _stop_by_poll_wait(monkeypatch, [], cap_seconds=600, backend=backend)
    wait.poll_interval = 10
    grace = stop_seconds(AttemptState.from_json(wait.state))
    stopped_at = submitted + timedelta(seconds=600)
    again_at = stopped_at + timedelta(seconds=grace + 10)
    last_seen = again_at + timedelta(seconds=5)

    def poll(job_id: str) -> JobStatus:
        if now > last_seen:
            raise JobNotFoundError(f"{backend} does not list job j")
        ran = (now - submitted).total_seconds()
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran)

    listing.poll = poll  # type: ignore[method-assign]
    event = None
    for now in (stopped_at, again_at, last_seen):
        assert wait.poll_tolerant(now) is None
    assert listing.stops == ["j", "j"]
    now = last_seen + timedelta(seconds=10)
    while event is None and now < last_seen + timedelta(seconds=3000):
        event = wait.poll_tolerant(now)
        now += timedelta(seconds=wait.next_poll_in())
    assert event is not None, "never billed as gone"
    gone_at = now - timedelta(seconds=wait.next_poll_in())
    end = min(gone_at, again_at + timedelta(seconds=grace))
    assert event["job"]["ended_at"] == end.timestamp(), event["job"]["reason"]
    assert event["job"]["billable_seconds"] == (end - submitted).total_seconds()
    # Its reason names the latest stop, and where the bill ended (the grace end on Batch, the 404 on
    # Kubernetes, 15 s after the stop again): it named only the first stop and always its grace end.
    reason = event["job"]["reason"]
    assert f"max_usd at {stopped_at.isoformat()}, stopped again at {again_at.isoformat()}; " in reason
    if backend == "kubernetes":
        assert end == gone_at
        assert reason.endswith(
            f"billed to the poll that found it gone ({end.isoformat()}), within its grace period after the "
            "latest stop"
        ), reason
    else:
        assert reason.endswith("billed to the end of its grace period after the latest stop"), reason


def test_a_pod_stopped_at_the_cap_seen_running_past_its_grace_period_and_then_gone_ends_no_sooner_than_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Polls further apart than the grace period (300 s, 110 s): seen running 300 s after its stop (not yet
    # stopped again, at most every second poll), the pod was gone at the next poll and its end was recorded
    # at the grace period's end, 190 s before it was seen running.
    from datetime import timedelta

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState

    wait, listing, _state, submitted = _stop_by_poll_wait(
        monkeypatch, [], cap_seconds=600, backend="kubernetes"
    )
    stopped_at = submitted + timedelta(seconds=600)
    last_seen = stopped_at + timedelta(seconds=300)
    assert stop_seconds(AttemptState.from_json(wait.state)) < 300

    def poll(job_id: str) -> JobStatus:
        if now > last_seen:
            raise JobNotFoundError("pod j not found")
        ran = (now - submitted).total_seconds()
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran)

    listing.poll = poll  # type: ignore[method-assign]
    for now in (stopped_at, last_seen):
        assert wait.poll_tolerant(now) is None
    assert listing.stops == ["j"]
    now = last_seen + timedelta(seconds=300)
    event = wait.poll_tolerant(now)
    assert event is not None
    assert event["job"]["ended_at"] == last_seen.timestamp(), event["job"]["reason"]
    assert event["job"]["billable_seconds"] == 900.0
    # Billed to that sighting, said so: the reason said billed to the grace period's end after the stop.
    reason = event["job"]["reason"]
    assert f"max_usd at {stopped_at.isoformat()}; kubernetes has not listed it since" in reason
    assert reason.endswith(
        f"billed to when it was last seen running ({last_seen.isoformat()}), past its grace period after the "
        "stop"
    ), reason


def test_a_pod_listed_after_its_stop_at_the_cap_was_recorded_with_nothing_sent_is_stopped_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Gone (a final 404) while the kept state was unread, the pod's due stop at the cap was recorded with
    # no SIGTERM sent (nothing to stop). Listed running later, past its cap (a same-named pod), it was
    # stopped only one grace period after that record (_stop_again_past_grace), running on past max_usd
    # meanwhile: no stop had reached it for a grace period to run from. Stopped at the poll that lists it.
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError

    gone = JobNotFoundError("pod j not found")
    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 1190.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    listed = [
        JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=1250.0 + 10 * polls)
        for polls in range(3)
    ]
    wait, listing, _state, _ = _stop_by_poll_wait(
        monkeypatch, [gone, *listed], cap_seconds=1200, followed=followed, backend="kubernetes"
    )
    wait.poll_interval = 10
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    first_gone = found_at + timedelta(seconds=30)
    assert wait.poll_tolerant(first_gone) is None
    assert wait.state["current"]["cap_stop"]["gone_at"] == first_gone.isoformat() and listing.stops == []
    assert wait.poll_tolerant(first_gone + timedelta(seconds=60)) is None
    assert listing.stops == ["j"]
    for polls in (1, 2):  # stopped once: its grace period runs from this stop
        assert wait.poll_tolerant(first_gone + timedelta(seconds=60 + 10 * polls)) is None
    assert listing.stops == ["j"]


def test_a_wait_that_outlives_its_try_does_not_keep_its_state_again_over_a_newer_trys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The keep of its stop at the cap failed, and the next poll keeps it again (_keep_unkept_cap_stop).
    # Not cancelled yet (a triggerer slow to drop it), the old try's wait wrote its state over the one the
    # task's newer try had kept since: a timeout of the new try's wait then stopped and billed the old job.
    # Kept again where the XCom still holds this wait's attempt and job, or cannot be read (as before).
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.triggers.remote_training import WAIT_STATE_XCOM_KEY

    past_cap = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=610.0)
    wait, listing, state, submitted = _stop_by_poll_wait(monkeypatch, [past_cap] * 3, cap_seconds=600)
    kept_in = keeping_wait_state(monkeypatch)
    where = (WAIT_STATE_XCOM_KEY, "remote_dag", "train", "r", -1)
    kept_in[where] = state.to_json()  # the operator keeps the state it defers with
    keep = XCom.set
    monkeypatch.setattr(XCom, "set", lambda *args, **kwargs: (_ for _ in ()).throw(ConnectionError("down")))
    now = submitted + timedelta(seconds=610)
    assert wait.poll_tolerant(now) is None and listing.stops == ["j"]
    monkeypatch.setattr(XCom, "set", keep)
    new_try = {"attempts": [], "current": {"attempt": 2, "job_id": "j2"}}
    kept_in[where] = new_try  # the task's new try deferred and kept its own state
    assert wait.poll_tolerant(now + timedelta(seconds=10)) is None
    assert kept_in[where] == new_try

    kept_in[where] = state.to_json()  # still this wait's: kept again, with its stop
    wait._wait_state_unkept = True
    assert wait.poll_tolerant(now + timedelta(seconds=20)) is None
    assert kept_in[where]["current"]["cap_stop"]["job_id"] == "j"


@pytest.mark.parametrize("backend", ["batch", "kubernetes"])
def test_a_stop_again_at_the_cap_survives_a_triggerer_restart(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    # The stop again past the grace period was kept in memory only: a wait re-created after it (from its
    # serialized kwargs and the kept wait state) billed the job gone later to the first stop's grace end,
    # before it was last seen running, and its reason named only the first stop.
    import importlib
    from datetime import timedelta

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState

    wait, listing, _state, submitted = _stop_by_poll_wait(monkeypatch, [], cap_seconds=600, backend=backend)
    wait.poll_interval = 10
    grace = stop_seconds(AttemptState.from_json(wait.state))
    stopped_at = submitted + timedelta(seconds=600)
    again_at = stopped_at + timedelta(seconds=grace + 10)
    last_seen = again_at + timedelta(seconds=5)

    def poll(job_id: str) -> JobStatus:
        if now > last_seen:
            raise JobNotFoundError(f"{backend} does not list job j")
        ran = (now - submitted).total_seconds()
        return JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=ran)

    listing.poll = poll  # type: ignore[method-assign]
    for now in (stopped_at, again_at):
        assert wait.poll_tolerant(now) is None
    assert listing.stops == ["j", "j"]
    classpath, kwargs = wait.serialize()
    module_name, class_name = classpath.rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module_name), class_name)(**kwargs)
    rebuilt.task_instance = wait.task_instance
    now = last_seen
    assert rebuilt.poll_tolerant(now) is None
    assert listing.stops == ["j", "j"]  # not stopped a third time: the stop again is known
    event = None
    now = last_seen + timedelta(seconds=10)
    while event is None and now < last_seen + timedelta(seconds=3000):
        event = rebuilt.poll_tolerant(now)
        now += timedelta(seconds=rebuilt.next_poll_in())
    assert event is not None, "never billed as gone"
    gone_at = now - timedelta(seconds=rebuilt.next_poll_in())
    end = min(gone_at, again_at + timedelta(seconds=grace))
    assert event["job"]["ended_at"] == end.timestamp(), event["job"]["reason"]
    assert event["job"]["billable_seconds"] == (end - submitted).total_seconds()
    assert f", stopped again at {again_at.isoformat()}; " in event["job"]["reason"]


def test_a_stop_owed_to_a_pod_listed_again_survives_a_triggerer_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A pod gone (404) when its stop at the cap fell due got no SIGTERM; listed again (waiting), the stop
    # it is owed was kept in memory only: a wait re-created before it was seen running let it run on to
    # the grace period's end after a stop that never reached it.
    import importlib
    from datetime import timedelta

    from airflow.sdk.execution_time.xcom import XCom

    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState

    found_at = STOP_BY_POLL_SUBMIT + timedelta(seconds=400)
    job = {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 1190.0}
    followed = {"job": job, "seen_at": found_at.isoformat()}
    waiting = JobStatus(job_id="j", state=JobState.PENDING, market="spot", billable_seconds=1220.0)
    running = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=1230.0)
    wait, listing, _state, _ = _stop_by_poll_wait(
        monkeypatch,
        [JobNotFoundError("pod j not found"), waiting, running],
        cap_seconds=1200,
        followed=followed,
        backend="kubernetes",
    )
    read_kept = XCom.get_one
    monkeypatch.setattr(XCom, "get_one", lambda **where: (_ for _ in ()).throw(ConnectionError("down")))
    first_gone = found_at + timedelta(seconds=30)
    assert wait.poll_tolerant(first_gone) is None and listing.stops == []  # gone: nothing to send to
    assert wait.poll_tolerant(first_gone + timedelta(seconds=20)) is None and listing.stops == []
    assert wait.state["current"]["cap_stop"]["unsent"] is True

    monkeypatch.setattr(XCom, "get_one", read_kept)
    classpath, kwargs = wait.serialize()
    module_name, class_name = classpath.rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module_name), class_name)(**kwargs)
    rebuilt.task_instance = wait.task_instance
    assert stop_seconds(AttemptState.from_json(wait.state)) > 30  # still within its grace period
    assert rebuilt.poll_tolerant(first_gone + timedelta(seconds=30)) is None
    assert listing.stops == ["j"]  # seen running: sent the stop it was owed at once
    assert "unsent" not in rebuilt.state["current"]["cap_stop"]
