"""The remote training trigger polls again through a passing failure: the job runs on meanwhile.

Failing the wait at the first failed poll (a network error, throttling, a job not listed yet) left the job
running with no task to watch it and, with no retry left, no one to bill it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from costaware.core.errors import ComputeBackendError, ConfigurationError
from costaware.triggers.remote_training import MAX_POLL_ERRORS, RemoteTrainingJobTrigger

STATE = {"attempts": [], "current": {"attempt": 1, "job_id": "j", "market": "spot"}}
ENDED = {"status": "success", "job": {"state": "succeeded"}, "state": STATE, "fallback": False}


def trigger(tmp_path: Any) -> RemoteTrainingJobTrigger:
    return RemoteTrainingJobTrigger(
        backend="local", backend_options={"root": str(tmp_path)}, job_id="j", state=STATE, poll_interval=0.01
    )


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
