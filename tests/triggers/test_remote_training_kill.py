"""A person kills a remote training's waiting task: its job is stopped and billed, and its hold settled.

Before, the job ran on with no task left to record its attempt or settle the task's hold (a task marked
failed or succeeded has no retry to follow the job). Real jobs on the local backend, a team's command
(``tests/training/own_train.py``) under ``costaware-run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from remote_support import command_operator_args, context_for, drive, reimported

from costaware.adapters.compute.base import JobState, open_backend
from costaware.adapters.ledger import reservations
from costaware.operators.remote_training import RemoteTrainingOperator
from costaware.triggers.remote_training import RemoteTrainingJobTrigger

pytest.importorskip("costaware_runtime.launcher", reason="pip install -e ./runtime (costaware-run)")

HOLDER = "remote_dag/scheduled__2026-01-01/train/-1"
#: A task state that Airflow's API cannot give (``get_task_states`` raises).
UNREADABLE = "<unreadable>"


@pytest.fixture(autouse=True)
def _ledger(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> None:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)


@pytest.fixture(autouse=True)
def _no_job_left(tmp_path: Path) -> Iterator[None]:
    """Every job a test started is gone at its end, whatever the test did."""
    yield
    root = tmp_path / "jobs"
    if root.exists():
        backend = open_backend("local", {"root": str(root)})
        for folder in root.iterdir():
            # A job whose command has not started yet (no pid) gets its SIGTERM when it does.
            (folder / "stop").touch()
            with contextlib.suppress(Exception):
                backend.signal(folder.name, signal.SIGKILL)


def operator(tmp: Path, mode: str, **kwargs: Any) -> RemoteTrainingOperator:
    return RemoteTrainingOperator(
        **{**command_operator_args(tmp, mode), "tags": {"project": "churn"}, **kwargs}
    )


def deferred_trigger(op: RemoteTrainingOperator) -> RemoteTrainingJobTrigger:
    """Execute ``op`` to its first deferral: the trigger as the triggerer rebuilds it."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context_for())
    trigger = reimported(deferred.value.trigger)
    assert isinstance(trigger, RemoteTrainingJobTrigger)
    return trigger


def wait_for(path: Path, seconds: float = 60.0) -> None:
    give_up = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < give_up, f"{path} never appeared"
        time.sleep(0.05)


def train_entries(ledger: Any) -> list[dict[str, Any]]:
    return [e for e in ledger.entries() if e["task_id"] == "train"]


def test_a_killed_deferred_task_stops_its_job_bills_it_and_settles_its_hold(
    tmp_path: Path, ledger: Any
) -> None:
    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    assert (trigger.ledger_conn_id, trigger.aws_conn_id) == ("costaware_ledger", "aws_default")
    wait_for(tmp_path / "seen.jsonl.ready")  # the job runs: it checkpointed and waits
    assert train_entries(ledger) == []

    asyncio.run(trigger.on_kill())  # what the triggerer calls on a person's mark failed / success / clear

    assert trigger.job_id is not None
    assert open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done
    (entry,) = train_entries(ledger)
    assert (entry["cause"], entry["outcome"], entry["market"]) == ("killed", "interrupted", "spot")
    assert Decimal(str(entry["usd"])) > 0 and Decimal(str(entry["quantity"])) > 0
    assert ledger.open_reservations() == []
    with ledger.reading() as conn:
        settled = reservations.reservation(conn, gate.id)
    assert settled.status == "settled" and settled.settled_usd == Decimal(str(entry["usd"]))


def test_a_clear_after_the_kill_follows_the_stopped_job_and_bills_it_once(
    tmp_path: Path, ledger: Any
) -> None:
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice", max_usd="1"))
    wait_for(tmp_path / "seen.jsonl.ready")
    asyncio.run(trigger.on_kill())
    # The cleared task's new try finds the stopped job by its name (the same attempt, billed already) and
    # resumes its checkpoint in attempt 2.
    result, _ = drive(operator(tmp_path, "ok", max_usd="1"), context_for(try_number=2))
    # Attempt 1 ended by the kill's stop, as the kill's entry says: the new try recorded it as a preemption
    # (exit 75 after saving on the notice), while one whose stop at the cap fell due recorded it as killed.
    assert [a["cause"] for a in result["attempts"]] == ["killed", "success"]
    killed, done = sorted(train_entries(ledger), key=lambda e: e["note"])
    assert (killed["cause"], done["cause"]) == ("killed", "success")
    assert Decimal(result["usd"]) == Decimal(str(killed["usd"])) + Decimal(str(done["usd"]))


def test_a_job_still_stopping_after_the_wait_is_billed_to_the_end_of_its_grace(
    tmp_path: Path, ledger: Any
) -> None:
    # It ignores SIGTERM: the backend kills it only at the end of its grace period, which it is billed to
    # (billed up to the kill, it ran most of its grace unbilled). A clear's new try then sees its real end
    # and bills it no second time.
    trigger = deferred_trigger(operator(tmp_path, "ignore-notice", preemption_grace_seconds=3, max_usd="1"))
    wait_for(tmp_path / "seen.jsonl")
    time.sleep(0.5)
    started = time.monotonic()
    trigger.stop_and_bill(wait_seconds=0.5, poll_seconds=0.1)
    assert time.monotonic() - started < 10
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed" and "billed to 3 s after the stop (its grace period" in entry["note"]
    billed = Decimal(str(entry["quantity"])) * 3600
    assert Decimal("3.5") <= billed < Decimal("15")  # what ran before the stop, and 3 s of grace after it
    backend = open_backend("local", {"root": str(tmp_path / "jobs")})
    assert trigger.job_id is not None
    give_up = time.monotonic() + 30
    while backend.poll(trigger.job_id).state != JobState.INTERRUPTED:  # killed at the end of its grace
        assert time.monotonic() < give_up
        time.sleep(0.2)
    # It ran about what it was billed: the kill lands a moment after the grace period's end.
    assert abs(backend.poll(trigger.job_id).billable_seconds - float(billed)) < 1.5
    result, _ = drive(operator(tmp_path, "ok", max_usd="1"), context_for(try_number=2))
    first, _ = sorted(train_entries(ledger), key=lambda e: e["note"])
    assert len(train_entries(ledger)) == 2 and first["entry_uid"] == entry["entry_uid"]
    assert result["attempts"][0]["usd"] == str(Decimal(str(entry["usd"])))  # the ledger's figure


def test_a_killed_job_that_waited_for_capacity_is_billed_nothing_and_says_it_never_ran(
    tmp_path: Path, ledger: Any
) -> None:
    # Stopped with no time to see its end (a worker's kill): a spot job that never got capacity is billed
    # 0 s, and its note says why, not that it was billed to the end of a grace period.
    (tmp_path / "capacity").write_text("0")
    op = operator(tmp_path, "ok")
    op.backend_options = {**op.backend_options, "capacity_file": str(tmp_path / "capacity")}
    trigger = deferred_trigger(op)
    trigger.stop_and_bill(wait_seconds=0, poll_seconds=0.1)
    (entry,) = train_entries(ledger)
    assert entry["quantity"] == 0 and entry["usd"] == 0
    assert entry["note"].endswith("stopped when its task was killed, while it waited to start: it never ran")


@pytest.mark.parametrize(
    ("state_now", "stopped", "settled"),
    [
        ("failed", True, True),
        ("success", True, True),
        ("gone", True, True),  # the run was deleted
        ("scheduled", True, False),
        (None, True, False),
        ("deferred", False, False),  # no person ended it: its trigger moved to another triggerer
        ("running", False, False),  # nor here: a worker shutting down, an execution_timeout
    ],
)
def test_what_a_kill_does_follows_the_task_state(
    tmp_path: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
    state_now: str | None,
    stopped: bool,
    settled: bool,
) -> None:
    # The new try of a cleared task may start before the old try's kill is handled, and take the task's
    # hold over: settled then at the old try's attempts, the new try's attempts ran with nothing held. A
    # task still waiting was not ended by a person: its job runs on.
    from types import SimpleNamespace

    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    asked: list[dict[str, Any]] = []

    def task_states(**query: Any) -> dict[str, Any]:
        asked.append(query)
        return {"scheduled__2026-01-01": {} if state_now == "gone" else {"train": state_now}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(task_states))
    # What the triggerer sets on the trigger of a deferred task.
    trigger.task_instance = SimpleNamespace(  # type: ignore[attr-defined]
        dag_id="remote_dag", run_id="scheduled__2026-01-01", task_id="train", map_index=-1, try_number=1
    )
    wait_for(tmp_path / "seen.jsonl.ready")
    trigger.stop_and_bill()
    assert asked == [
        {"dag_id": "remote_dag", "map_index": -1, "task_ids": ["train"], "run_ids": ["scheduled__2026-01-01"]}
    ]
    assert trigger.job_id is not None
    assert open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done is stopped
    assert [e["cause"] for e in train_entries(ledger)] == (["killed"] if stopped else [])
    with ledger.reading() as conn:
        found = reservations.reservation(conn, gate.id)
    assert (found.status == "settled") is settled


@pytest.mark.parametrize(
    ("deadline_in", "state_now", "stopped"),
    [
        (-20.0, "failed", True),  # a person's mark after the deadline: Airflow calls no on_kill
        (-20.0, "success", True),
        (-20.0, "scheduled", False),  # the scheduler's timeout check: the task's __fail__ resume follows it
        (-20.0, "up_for_retry", False),  # that resume failed the try: the retry follows the job by its name
        (-20.0, "queued", False),  # the __fail__ resume on its way to a worker
        # A hand-over to another triggerer sends the same cancel message: the task still waits
        (-20.0, "deferred", False),
        (-20.0, "running", False),
        # Far likelier a timeout than a person's mark: a stop would cut a job its resume or retry follows
        (-20.0, UNREADABLE, False),
        (3600.0, "failed", True),  # before the deadline: Airflow's on_kill
    ],
)
def test_a_person_ending_a_deferred_task_past_its_waits_deadline_stops_and_bills_its_job(
    tmp_path: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
    deadline_in: float,
    state_now: str,
    stopped: bool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Airflow 3.3.2's run_trigger calls no on_kill for a cancel past the task's trigger_timeout, a person's
    # action too: a task marked failed or succeeded then, before the scheduler's timeout check reached it,
    # got no resume either, and its job ran on unbilled to its time limit.
    from datetime import timedelta
    from types import SimpleNamespace

    from airflow.jobs.triggerer_job_runner import _USER_ACTION_CANCEL_MSG, TriggerRunner
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    from costaware.core.ledger import utcnow

    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))

    def task_states(**query: Any) -> dict[str, dict[str, str]]:
        if state_now == UNREADABLE:
            raise ConnectionError("the API server did not answer")
        return {"scheduled__2026-01-01": {"train": state_now}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(task_states))
    trigger.task_instance = SimpleNamespace(  # type: ignore[assignment]
        id="ti",
        dag_id="remote_dag",
        run_id="scheduled__2026-01-01",
        task_id="train",
        map_index=-1,
        try_number=1,
        context_carrier=None,
    )
    wait_for(tmp_path / "seen.jsonl.ready")
    deadline = utcnow() + timedelta(seconds=deadline_in)
    trigger.timeout_after = deadline  # type: ignore[attr-defined]  # as Airflow's triggerer sets it

    async def cancelled_by_a_person() -> None:
        runner = TriggerRunner()
        runner.triggers[1] = {"name": "wait", "events": 0}  # type: ignore[typeddict-item]
        running = asyncio.ensure_future(runner.run_trigger(1, trigger, deadline))
        await asyncio.sleep(0.5)
        running.cancel(_USER_ACTION_CANCEL_MSG)
        with contextlib.suppress(asyncio.CancelledError):
            await running

    monkeypatch.setenv("AIRFLOW_DISABLE_GREENBACK_PORTAL", "true")  # no greenlet portal needed here
    capsys.readouterr()
    asyncio.run(cancelled_by_a_person())  # waits for the stop and bill's thread, where one was started
    # One cancel message for a person's mark, the timeout check and a hand-over: the log claims no person
    said = "the task ended past its wait's deadline (a person's mark, or its last try's resume)"
    assert (said in capsys.readouterr().out) is (stopped and deadline_in < 0)
    assert trigger.job_id is not None
    assert open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done is stopped
    assert [e["cause"] for e in train_entries(ledger)] == (["killed"] if stopped else [])
    with ledger.reading() as conn:
        assert (reservations.reservation(conn, gate.id).status == "settled") is stopped


def test_a_cancel_past_the_deadline_after_the_last_trys_resume_billed_the_job_bills_it_no_second_time(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A triggerer slow to cancel the timed-out wait reads the task failed by its resume on the last try,
    # which stopped and billed the job already (cause unwatched): as a person's mark, it is billed again.
    from types import SimpleNamespace

    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    resumed = reimported(trigger)  # the resume's own trigger, from the kept wait state
    resumed.stop_and_bill(ask_state=False, cause="unwatched", why="the wait timed out")
    monkeypatch.setattr(
        RuntimeTaskInstance,
        "get_task_states",
        staticmethod(lambda **query: {"scheduled__2026-01-01": {"train": "failed"}}),
    )
    trigger.task_instance = SimpleNamespace(  # type: ignore[assignment]
        dag_id="remote_dag", run_id="scheduled__2026-01-01", task_id="train", map_index=-1
    )
    trigger._stop_and_bill_if_the_task_ended()
    assert [e["cause"] for e in train_entries(ledger)] == ["unwatched"]
    with ledger.reading() as conn:
        assert reservations.reservation(conn, gate.id).status == "settled"


def test_a_cancel_past_the_deadline_with_the_task_state_unreadable_names_the_job_to_check(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The job is left running (a timeout is far likelier), but a person's mark is possible: the log said
    # "the task's resume, or its new try, follows the job", and nobody looked for a job left unbilled.
    from types import SimpleNamespace

    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))

    def unreadable(**query: Any) -> dict[str, Any]:
        raise ConnectionError("the API server did not answer")

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(unreadable))
    trigger.task_instance = SimpleNamespace(  # type: ignore[assignment]
        dag_id="remote_dag", run_id="scheduled__2026-01-01", task_id="train", map_index=-1
    )
    capsys.readouterr()
    trigger._stop_and_bill_if_the_task_ended()
    logged = capsys.readouterr().out  # the trigger's log is structlog's
    assert trigger.job_id is not None
    warned = f"job {trigger.job_id} on local may run on unbilled if the task was ended: check it and stop it"
    assert f"{warned} by hand" in logged
    assert "follows the job" not in logged
    assert not open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done
    assert train_entries(ledger) == []


def test_the_trigger_assignment_cancel_message_is_airflows() -> None:
    # Copied from Airflow (a private name): a change there would leave a person's late mark unbilled again.
    from airflow.jobs.triggerer_job_runner import _USER_ACTION_CANCEL_MSG

    from costaware.triggers.remote_training import AIRFLOW_USER_ACTION_CANCEL

    assert AIRFLOW_USER_ACTION_CANCEL == _USER_ACTION_CANCEL_MSG


def test_a_job_gone_after_the_stop_is_billed_up_to_then(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Kubernetes pod is deleted by the stop: the backend no longer has it. It ended by then, not at the
    # end of its grace period. When exactly is not known: it is keyed by the job's name, so that a new try
    # that saw its real end bills it once.
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import JobNotFoundError
    from costaware.training.remote import attempt_key, attempt_uid

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    real_poll, stops = LocalBackend.poll, []

    def poll(self: LocalBackend, job_id: str) -> Any:
        if stops:
            raise JobNotFoundError(f"pod {job_id} not found")
        return real_poll(self, job_id)

    monkeypatch.setattr(LocalBackend, "poll", poll)
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: stops.append(job_id))
    trigger.stop_and_bill(poll_seconds=0.1)
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed" and "the backend no longer has it, billed up to then" in entry["note"]
    assert Decimal(str(entry["quantity"])) * 3600 < 30  # seconds, not the 110 s grace
    identity = {"dag_id": "remote_dag", "run_id": "scheduled__2026-01-01", "task_id": "train"}
    assert entry["entry_uid"] == attempt_uid(attempt_key(identity, str(trigger.job_id), legacy=True))


def runs_of(state: Any, *, marked: bool) -> tuple[Any, Any]:
    """``state``'s run and a later run of the job's name: marked apart by their backend (a new token), or,
    ``marked`` False, both marking no run (states an older release kept: told apart by their times)."""
    from dataclasses import replace

    if not marked:
        state = replace(state, current=replace(state.current, run_token=""))
        return state, state
    assert len(state.current.run_token) == 32  # the token the local backend wrote in the job's folder
    return state, replace(state, current=replace(state.current, run_token="b" * 32))


@pytest.mark.parametrize("marked", [True, False], ids=["runs-marked", "older-states"])
def test_a_run_under_the_same_name_after_a_kill_is_billed_on_its_own(
    tmp_path: Path, ledger: Any, marked: bool
) -> None:
    # A kill billed a job still stopping under its name alone. A backend that lost that job takes a new
    # run under the same name; it started after the kill and is not the run the kill billed.
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState

    trigger = deferred_trigger(operator(tmp_path, "ok"))
    state, later_run = runs_of(AttemptState.from_json(trigger.state), marked=marked)
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    now = time.time()
    job = {"job_id": trigger.job_id, "state": "interrupted", "market": "spot", "instance_type": "m5.large"}
    billing._bill_attempt(
        state, {**job, "billable_seconds": 200.0, "ended_at": now + 110}, "killed", keyed_by_name=True
    )
    # The same run seen by a cleared task's new try, with its real end: billed once.
    billing._bill_attempt(state, {**job, "billable_seconds": 150.0, "ended_at": now + 60}, None)
    assert len(train_entries(ledger)) == 1
    # A run started after the kill under the same name: billed on its own.
    later = billing._bill_attempt(later_run, {**job, "billable_seconds": 50.0, "ended_at": now + 100}, None)
    assert len(train_entries(ledger)) == 2 and later.attempts[-1].billable_seconds == 50.0
    # The race the other way: a new try saw another job end and recorded it under its end before the kill,
    # whose last look saw it still stopping, billed it under its name: billed once.
    other = {**job, "job_id": "train-other-a1"}
    billing._bill_attempt(state, {**other, "billable_seconds": 80.0, "ended_at": now - 5}, None)
    billing._bill_attempt(
        state, {**other, "billable_seconds": 180.0, "ended_at": now + 95}, "killed", keyed_by_name=True
    )
    assert len(train_entries(ledger)) == 3


def test_two_stops_of_different_runs_under_one_name_are_both_billed(tmp_path: Path, ledger: Any) -> None:
    # A kill billed a job still stopping, keyed by its name alone; a cleared task's new try ran the job again
    # under that name (its folder gone), and its kill too billed it before it ended: the same key, so the
    # second bill read as billed already and was not written (its run unbilled). The runs' tokens differ.
    from dataclasses import replace
    from datetime import datetime, timezone

    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState

    trigger = deferred_trigger(operator(tmp_path, "ok"))
    first_try = AttemptState.from_json(trigger.state)
    assert first_try.current is not None and len(first_try.current.run_token) == 32  # from the job's folder
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    now = time.time()
    job = {"job_id": trigger.job_id, "state": "interrupted", "market": "spot", "instance_type": "m5.large"}
    billing._bill_attempt(
        first_try, {**job, "billable_seconds": 200.0, "ended_at": now - 3000}, "killed", keyed_by_name=True
    )
    # The new try submitted long after the first run ended.
    submitted = datetime.fromtimestamp(now - 120, timezone.utc).isoformat()
    # Its job folder was gone (another machine): the backend wrote it a new run token.
    new_try = replace(
        first_try, current=replace(first_try.current, submitted_at=submitted, run_token="b" * 32)
    )
    second = billing._bill_attempt(
        new_try, {**job, "billable_seconds": 180.0, "ended_at": now + 60}, "killed", keyed_by_name=True
    )
    entries = train_entries(ledger)
    assert len(entries) == 2 and second.attempts[-1].billable_seconds == 180.0
    assert {round(float(e["quantity"]) * 3600) for e in entries} == {200, 180}
    # Each run billed again (a kill repeated, a new try that saw its real end): billed once each.
    billing._bill_attempt(
        new_try, {**job, "billable_seconds": 190.0, "ended_at": now + 70}, "killed", keyed_by_name=True
    )
    billing._bill_attempt(new_try, {**job, "billable_seconds": 150.0, "ended_at": now + 30}, None)
    billing._bill_attempt(first_try, {**job, "billable_seconds": 150.0, "ended_at": now - 3050}, None)
    assert len(train_entries(ledger)) == 2


@pytest.mark.parametrize("marked", [True, False], ids=["runs-marked", "older-states"])
def test_an_ended_job_an_older_version_billed_up_to_now_is_not_billed_again(
    tmp_path: Path, ledger: Any, marked: bool
) -> None:
    # Before 4fdc9e47 / 894e5b2c a Failed pod or an ended SageMaker job read as not ended: billed up to
    # then, keyed 'ended=none'. After the upgrade a retry reads its real end, a new key: billed twice.
    from costaware.remote_billing import KilledTrainingBilling
    from costaware.training.attempts import AttemptState

    trigger = deferred_trigger(operator(tmp_path, "ok"))
    state, later_run = runs_of(AttemptState.from_json(trigger.state), marked=marked)
    billing = KilledTrainingBilling(
        ledger_conn_id="costaware_ledger", aws_conn_id=None, log=logging.getLogger(__name__)
    )
    now = time.time()
    job = {"job_id": trigger.job_id, "market": "spot", "instance_type": "m5.large"}
    # What the older version wrote: no end, billed up to now.
    billing._bill_attempt(state, {**job, "state": "pending", "billable_seconds": 400.0}, None)
    # The retry after the upgrade: the same run, its real end (before the older entry was written).
    again = billing._bill_attempt(
        state, {**job, "state": "failed", "billable_seconds": 300.0, "ended_at": now - 60}, None
    )
    (entry,) = train_entries(ledger)
    assert Decimal(again.attempts[-1].usd) == Decimal(str(entry["usd"]))
    # A run under the same name that started after that entry (a pod submitted again): its own entry.
    billing._bill_attempt(
        later_run, {**job, "state": "failed", "billable_seconds": 50.0, "ended_at": now + 100}, None
    )
    assert len(train_entries(ledger)) == 2


def test_a_killed_pause_has_no_job_and_settles_its_hold(tmp_path: Path, ledger: Any) -> None:
    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "ok"))
    paused = RemoteTrainingJobTrigger(
        **{**trigger.serialize()[1], "job_id": None, "price_watch": {"mode": "resume"}}
    )
    # The state still names a current attempt, but there is no job to stop: nothing is billed.
    paused.stop_and_bill()
    assert train_entries(ledger) == []
    with ledger.reading() as conn:
        settled = reservations.reservation(conn, gate.id)
    assert settled.status == "settled" and settled.settled_usd == 0


def test_a_task_killed_while_it_waits_in_the_worker_stops_and_bills_its_job(
    tmp_path: Path, ledger: Any
) -> None:
    # The wait polls once, then sleeps past the test: as in Airflow, whose task process ends after on_kill.
    op = operator(tmp_path, "wait-for-notice", deferrable=False, poll_interval=3600)
    threading.Thread(target=op.execute, args=(context_for(),), daemon=True).start()
    wait_for(tmp_path / "seen.jsonl.ready")
    give_up = time.monotonic() + 30
    while getattr(op, "_waiting_on", None) is None:
        assert time.monotonic() < give_up
        time.sleep(0.05)
    op.on_kill()  # Airflow's task runner calls it on SIGTERM, when a person kills the task
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed" and Decimal(str(entry["usd"])) > 0
    assert [p.name for p in (tmp_path / "jobs").iterdir()] == [entry["note"].split()[3]]  # no attempt 2


def test_a_kill_in_the_worker_starts_no_new_attempt(tmp_path: Path, ledger: Any) -> None:
    # The wait went on after on_kill (Airflow kills the process only 5 s later): a poll that saw the
    # stopped job ended took it for a preemption and started attempt 2, which ran on unbilled.
    op = operator(tmp_path, "wait-for-notice", deferrable=False, poll_interval=0.05)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            op.execute(context_for())
        except BaseException as e:
            failed.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    wait_for(tmp_path / "seen.jsonl.ready")
    op.on_kill()
    worker.join(30)
    assert not worker.is_alive() and "the task was killed" in str(failed[0])
    assert len(list((tmp_path / "jobs").iterdir())) == 1
    assert [e["cause"] for e in train_entries(ledger)] == ["killed"]


@pytest.mark.parametrize("inline", [True, False], ids=["dags_test", "worker"])
def test_ctrl_c_of_dags_test_during_a_wait_in_the_worker_stops_and_bills_its_job(
    tmp_path: Path, ledger: Any, inline: bool
) -> None:
    # `airflow dags test` runs the task in its own process and calls no on_kill on Ctrl-C: the
    # KeyboardInterrupt failed the task and the job ran on, stopped and billed by nobody. Then the log said
    # "no new attempt starts" while Airflow retried the KeyboardInterrupt, and the retry started one: the
    # task now fails for good (AirflowFailException: no retry). A worker stopped with Ctrl-C forwards the
    # SIGINT to its task through its supervisor: the job is stopped and billed the same, and the task fails
    # as before (its retry resumes from the checkpoint), not for good.
    from airflow.sdk.exceptions import AirflowFailException
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms, set_supervisor_comms

    op = operator(tmp_path, "wait-for-notice", deferrable=False, poll_interval=0.2)
    comms = InProcessSupervisorComms(supervisor=None) if inline else None  # type: ignore[arg-type]

    def press_ctrl_c() -> None:
        wait_for(tmp_path / "seen.jsonl.ready")
        while getattr(op, "_waiting_on", None) is None:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal
    try:
        threading.Thread(target=press_ctrl_c, daemon=True).start()
        with (
            set_supervisor_comms(comms),
            pytest.raises(AirflowFailException if inline else KeyboardInterrupt) as failed,
        ):
            op.execute(context_for(try_number=1))
    finally:
        signal.signal(signal.SIGINT, before)
    if inline:
        assert isinstance(failed.value.__cause__, KeyboardInterrupt)
        assert str(failed.value) == (
            "interrupted (Ctrl-C): training job stopped and billed; the task fails without a retry, so no "
            "new attempt starts (clear the task to train on from its newest checkpoint)"
        )
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed" and Decimal(str(entry["usd"])) > 0
    job = entry["note"].split()[3]
    assert [p.name for p in (tmp_path / "jobs").iterdir()] == [job]  # no attempt 2
    give_up = time.monotonic() + 30
    while not open_backend("local", {"root": str(tmp_path / "jobs")}).poll(job).state.done:
        assert time.monotonic() < give_up  # stopped, not left running
        time.sleep(0.2)


def test_ctrl_c_outside_the_waits_poll_stops_and_bills_the_job_just_submitted_on_any_try(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Ctrl-C of `dags test` while a job was being submitted (or an ended attempt billed and the next
    # submitted) missed the wait's handler: with a retry left the KeyboardInterrupt was retried and the job
    # ran on, for the retry to follow; only a last try stopped it. It now ends the task as a Ctrl-C in the
    # wait does.
    from airflow.sdk.exceptions import AirflowFailException
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms, set_supervisor_comms

    from costaware.adapters.compute.local import LocalBackend

    real_submit = LocalBackend.submit

    def submit_then_ctrl_c(self: LocalBackend, request: Any) -> str:
        real_submit(self, request)
        time.sleep(1)  # it runs a second: billed more than the micro-dollar it rounds to
        raise KeyboardInterrupt  # as the SIGINT lands: the job is taken, the submit has not returned

    monkeypatch.setattr(LocalBackend, "submit", submit_then_ctrl_c)
    op = operator(tmp_path, "wait-for-notice", deferrable=False, poll_interval=0.2)
    with (
        set_supervisor_comms(InProcessSupervisorComms(supervisor=None)),  # type: ignore[arg-type]
        pytest.raises(AirflowFailException) as failed,
    ):
        op.execute(context_for(try_number=1))  # retries left: no max_tries reached
    assert isinstance(failed.value.__cause__, KeyboardInterrupt)
    (job,) = [p.name for p in (tmp_path / "jobs").iterdir()]
    assert str(failed.value).startswith(f"interrupted (Ctrl-C): job {job} stopped and billed; the task fails")
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "unwatched" and Decimal(str(entry["usd"])) > 0  # stopped by us, and billed
    give_up = time.monotonic() + 30
    while not open_backend("local", {"root": str(tmp_path / "jobs")}).poll(job).state.done:
        assert time.monotonic() < give_up  # stopped, not left running for a retry to follow
        time.sleep(0.2)


@pytest.mark.parametrize("inline", [True, False], ids=["dags_test", "triggerer"])
def test_a_deferred_wait_cancelled_by_ctrl_c_of_dags_test_stops_and_bills_its_job(
    tmp_path: Path, ledger: Any, inline: bool
) -> None:
    # `airflow dags test` runs the trigger inline and cancels it on Ctrl-C: the job ran on, unbilled. A
    # triggerer cancels a trigger it hands to another, which watches the job on: that job keeps running.
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms, set_supervisor_comms

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")

    async def cancel_the_watch() -> None:
        watch = asyncio.ensure_future(anext(trigger.run(), None))
        await asyncio.sleep(0.5)
        watch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watch

    comms = InProcessSupervisorComms(supervisor=None) if inline else None  # type: ignore[arg-type]
    with set_supervisor_comms(comms):
        asyncio.run(cancel_the_watch())
    assert trigger.job_id is not None
    ended = open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done
    assert [e["cause"] for e in train_entries(ledger)] == (["killed"] if inline else [])
    assert ended is inline


def test_a_second_ctrl_c_of_dags_test_waits_for_the_stop_and_bill_of_its_job(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hurried person presses Ctrl-C twice: the second KeyboardInterrupt landed in the stop and bill of the
    # first, whose `finally` settled the hold, and the stopped job (23 s) was never billed.
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms, set_supervisor_comms

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    real_stop_job = RemoteTrainingJobTrigger._stop_job

    def stop_job_then_ctrl_c(self: RemoteTrainingJobTrigger, *args: Any, **kwargs: Any) -> Any:
        # Two, as asyncio.run takes the first to cancel its task (`dags test`'s first Ctrl-C did that)
        # and raises KeyboardInterrupt on the next, here while the job is being stopped.
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        return real_stop_job(self, *args, **kwargs)

    monkeypatch.setattr(RemoteTrainingJobTrigger, "_stop_job", stop_job_then_ctrl_c)

    async def cancel_the_watch() -> None:
        watch = asyncio.ensure_future(anext(trigger.run(), None))
        await asyncio.sleep(0.5)
        watch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watch

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal
    try:
        with set_supervisor_comms(InProcessSupervisorComms(supervisor=None)):  # type: ignore[arg-type]
            try:
                asyncio.run(cancel_the_watch())
            except KeyboardInterrupt:
                pytest.fail("the second Ctrl-C broke into the stop and bill")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back
    finally:
        signal.signal(signal.SIGINT, before)
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed" and Decimal(str(entry["usd"])) > 0


def test_a_stop_and_bill_given_up_leaves_the_tasks_hold_held(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The give-up's KeyboardInterrupt (a hung backend, a signal after BILL_PATIENCE_SECONDS) unwound through
    # the stop and bill's `finally`, which settled the hold without the unbilled job: its money was freed
    # while the job trained on.
    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")

    def hung_until_given_up(self: RemoteTrainingJobTrigger, *args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # what the give-up handler raises inside the hung stop

    monkeypatch.setattr(RemoteTrainingJobTrigger, "_stop_job", hung_until_given_up)
    with pytest.raises(KeyboardInterrupt):
        trigger.stop_and_bill(ask_state=False)

    assert train_entries(ledger) == []
    (held,) = ledger.open_reservations()
    assert held.id == gate.id
    assert "the task's budget hold stays held" in capsys.readouterr().out


def _inline_comms() -> Any:
    """What `airflow dags test` runs a task and its trigger under (``in_dags_test()`` is true)."""
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms, set_supervisor_comms

    return set_supervisor_comms(InProcessSupervisorComms(supervisor=None))  # type: ignore[arg-type]


def test_sigterm_of_dags_test_during_its_inline_deferred_wait_ends_it_as_ctrl_c(
    tmp_path: Path, ledger: Any
) -> None:
    # `airflow dags test` keeps the task's SIGTERM handler (on_kill) while it runs the trigger inline, and
    # nothing ended the process after it: `timeout` or `kill` logged "task killed between two waits" and
    # the command waited on while the job trained on. It now raises KeyboardInterrupt there, which cancels
    # the inline trigger, and the trigger stops and bills the job.
    op = operator(tmp_path, "wait-for-notice")

    async def sigterm_during_the_wait(trigger: RemoteTrainingJobTrigger) -> None:
        watch = asyncio.ensure_future(anext(trigger.run(), None))
        await asyncio.to_thread(wait_for, tmp_path / "seen.jsonl.ready")
        op.on_kill()  # Airflow's SIGTERM handler, in the main thread the loop runs in
        await watch

    with _inline_comms():
        trigger = deferred_trigger(op)
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(sigterm_during_the_wait(trigger))
        op.on_kill()  # a second SIGTERM (`timeout` signals the group too) leaves the stop and bill be
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed" and Decimal(str(entry["usd"])) > 0
    assert ledger.open_reservations() == []


def test_sigterm_of_dags_test_after_its_inline_wait_took_the_event_bills_the_ended_job(
    tmp_path: Path, ledger: Any
) -> None:
    # The job ended and the inline trigger delivered its event; the SIGTERM handler still called the
    # deferred copy's on_kill, which raised KeyboardInterrupt: the command ended before execute_complete,
    # the ended attempt was never billed and its hold stayed open until its TTL. Then the resumed run
    # billed it and returned, and `dags test` ran the downstream tasks it was asked to stop before: the
    # task now fails for good once the success is billed and recorded.
    op = operator(tmp_path, "ok", poll_interval=0.2)
    with _inline_comms():
        trigger = deferred_trigger(op)
        event = asyncio.run(anext(trigger.run(), None))
        assert event is not None and event.payload["status"] == "success"
        op.on_kill()  # returns: the resumed run bills the job
        resumed = operator(tmp_path, "ok", poll_interval=0.2)  # Airflow resumes a fresh copy of the task
        with pytest.raises(AirflowFailException, match=r"killed \(SIGTERM\).*succeeded and was billed"):
            resumed.execute_complete(context_for(), event.payload)
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "success" and Decimal(str(entry["usd"])) > 0
    assert ledger.open_reservations() == []


def test_sigterm_of_dags_test_as_its_worker_wait_handles_a_success_stops_the_command(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not deferred: the SIGTERM lands while the ended job is handled ("killed between two waits"); the
    # task returned its success and `dags test` went on to the downstream tasks.
    op = operator(tmp_path, "ok", deferrable=False, poll_interval=0.2)
    handle_the_end = RemoteTrainingOperator._on_event

    def sigterm_as_the_end_is_handled(self: RemoteTrainingOperator, *args: Any) -> Any:
        self.on_kill()
        return handle_the_end(self, *args)

    monkeypatch.setattr(RemoteTrainingOperator, "_on_event", sigterm_as_the_end_is_handled)
    with _inline_comms(), pytest.raises(AirflowFailException, match=r"succeeded and was billed \(\$"):
        op.execute(context_for())
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "success" and Decimal(str(entry["usd"])) > 0
    assert ledger.open_reservations() == []


def test_sigterm_of_dags_test_after_a_preemption_event_starts_no_new_attempt(
    tmp_path: Path, ledger: Any
) -> None:
    # Attempt 1 is preempted: the resumed run bills it and, killed, starts no attempt 2 and fails for good.
    op = operator(tmp_path, "preempt-once", poll_interval=0.2)
    with _inline_comms():
        trigger = deferred_trigger(op)
        event = asyncio.run(anext(trigger.run(), None))
        assert event is not None
        op.on_kill()
        resumed = operator(tmp_path, "preempt-once", poll_interval=0.2)
        with pytest.raises(AirflowFailException, match=r"killed \(SIGTERM\) as its wait ended"):
            resumed.execute_complete(context_for(), event.payload)
    assert [e["cause"] for e in train_entries(ledger)] == ["preemption"]
    assert len(list((tmp_path / "jobs").iterdir())) == 1  # no attempt 2
    assert ledger.open_reservations() == []


def test_sigterm_of_a_worker_after_a_preemption_event_keeps_the_tasks_retries(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker shutting down (SIGTERM) as the resumed run handled a preemption failed the task for good
    # ("clear it to train on"), where a kill during the wait leaves the retry to it: the same kill, in a
    # worker, now ends the task as a failure Airflow retries. Still no attempt 2 in this try.
    op = operator(tmp_path, "preempt-once", poll_interval=0.2)
    trigger = deferred_trigger(op)
    event = asyncio.run(anext(trigger.run(), None))
    assert event is not None
    handle_the_end = RemoteTrainingOperator._on_event

    def sigterm_as_the_end_is_handled(self: RemoteTrainingOperator, *args: Any) -> Any:
        self.on_kill()
        return handle_the_end(self, *args)

    monkeypatch.setattr(RemoteTrainingOperator, "_on_event", sigterm_as_the_end_is_handled)
    resumed = operator(tmp_path, "preempt-once", poll_interval=0.2)
    with pytest.raises(AirflowException) as raised:
        resumed.execute_complete(context_for(), event.payload)
    assert not isinstance(raised.value, AirflowFailException), raised.value
    assert [e["cause"] for e in train_entries(ledger)] == ["preemption"]
    assert len(list((tmp_path / "jobs").iterdir())) == 1  # no attempt 2
    assert ledger.open_reservations() == []


def test_sigterm_of_dags_test_before_its_inline_wait_started_stops_and_bills_the_job(
    tmp_path: Path, ledger: Any
) -> None:
    # Deferred, the wait not started yet (Airflow writes the deferral first): a KeyboardInterrupt there ended
    # the command with the job training on, unbilled. The wait stops and bills it as it starts.
    op = operator(tmp_path, "wait-for-notice")
    with _inline_comms():
        trigger = deferred_trigger(op)
        wait_for(tmp_path / "seen.jsonl.ready")
        op.on_kill()
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(anext(trigger.run(), None))
    assert trigger.job_id is not None
    assert open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done
    assert [e["cause"] for e in train_entries(ledger)] == ["killed"]
    assert ledger.open_reservations() == []


def test_an_execution_timeout_in_the_worker_stops_and_bills_the_job(tmp_path: Path, ledger: Any) -> None:
    # Airflow raises AirflowTaskTimeout inside execute, then calls on_kill: the job was left running, and
    # with no retry left it was never billed.
    from airflow.sdk.exceptions import AirflowTaskTimeout
    from airflow.sdk.execution_time.timeout import timeout

    op = operator(tmp_path, "wait-for-notice", deferrable=False, poll_interval=0.2)
    with pytest.raises(AirflowTaskTimeout), timeout(4):
        op.execute(context_for())
    op.on_kill()  # as Airflow's task runner does after the timeout
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed"
    job = entry["note"].split()[3]
    give_up = time.monotonic() + 30
    while not open_backend("local", {"root": str(tmp_path / "jobs")}).poll(job).state.done:
        assert time.monotonic() < give_up
        time.sleep(0.2)


def test_a_job_the_backend_cannot_tell_about_is_stopped_and_billed_from_its_submit(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A backend may give no start time for a running job, and a poll may fail: the job is stopped all the
    # same and billed from its submit to the end of its grace period, an upper bound.
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import ComputeBackendError

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice", preemption_grace_seconds=3))
    wait_for(tmp_path / "seen.jsonl.ready")
    time.sleep(1.0)

    def poll(self: LocalBackend, job_id: str) -> Any:
        raise ComputeBackendError("ThrottlingException: Rate exceeded")

    with monkeypatch.context() as patched:
        patched.setattr(LocalBackend, "poll", poll)
        trigger.stop_and_bill(wait_seconds=0.3, poll_seconds=0.1)
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed" and "grace period" in entry["note"]
    assert Decimal(str(entry["quantity"])) * 3600 >= 4  # over a second since the submit, and 3 s of grace
    assert trigger.job_id is not None
    give_up = time.monotonic() + 30
    while not open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done:
        assert time.monotonic() < give_up  # it was stopped although no poll answered
        time.sleep(0.2)


@pytest.mark.parametrize(("max_tries", "stopped"), [(0, True), (1, False)])
def test_a_task_failing_for_good_while_its_job_runs_stops_and_bills_it(
    tmp_path: Path, ledger: Any, max_tries: int, stopped: bool
) -> None:
    # The wait failed (five failed polls in a row) with no retry left: nothing would follow the job, which
    # ran on unbilled. With a retry left it runs on: the retry follows it by its name.
    from airflow.sdk.exceptions import AirflowException

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    context = context_for()
    context["ti"].max_tries = max_tries
    event = {
        "status": "error",
        "message": "ThrottlingException",
        "state": trigger.state,
        "configuration": False,
    }
    with pytest.raises(AirflowException, match="polling the training job failed"):
        operator(tmp_path, "wait-for-notice").execute_complete(context, event=event)
    assert trigger.job_id is not None
    backend = open_backend("local", {"root": str(tmp_path / "jobs")})
    if stopped:
        give_up = time.monotonic() + 30
        while not backend.poll(trigger.job_id).state.done:
            assert time.monotonic() < give_up
            time.sleep(0.2)
    else:
        assert not backend.poll(trigger.job_id).state.done
    assert [e["cause"] for e in train_entries(ledger)] == (["unwatched"] if stopped else [])


def keeping_xcoms(context: dict[str, Any], xcoms: dict[tuple[str, int], Any]) -> dict[str, Any]:
    """``context`` whose task instance pushes and pulls its XComs in ``xcoms``, as JSON as Airflow keeps them.

    One store for the deferring try and its resume: Airflow keeps a try's XComs over a deferral.
    """
    import json

    ti = context["ti"]

    def push(key: str, value: Any) -> None:
        xcoms[(key, ti.map_index)] = json.loads(json.dumps(value))

    def pull(
        task_ids: str | None = None, key: str = "return_value", map_indexes: Any = None, **_: Any
    ) -> Any:
        return xcoms.get((key, map_indexes)) if task_ids == ti.task_id else None

    ti.xcom_push, ti.xcom_pull = push, pull
    return context


@pytest.mark.parametrize(
    ("error", "max_tries", "stopped", "said"),
    [
        ("Trigger timeout", 0, True, "the wait for the training job timed out .*: it was stopped and billed"),
        ("Trigger failure", 0, True, r"the trigger watching the training job failed \(Trigger failure\)"),
        ("Trigger timeout", 1, False, "may still run: the retry follows it by its name and bills it"),
    ],
)
def test_a_deferral_timeout_on_the_last_try_stops_and_bills_the_job(
    tmp_path: Path, ledger: Any, error: str, max_tries: int, stopped: bool, said: str
) -> None:
    # Airflow resumes a timed-out deferral only to fail it in BaseOperator.resume_execution, before
    # execute_complete runs, and calls no trigger on_kill: the job ran on (the local backend kept no time
    # limit), unbilled, and the task's hold stayed open. With a retry left, the retry follows the job.
    from airflow.sdk.exceptions import AirflowException

    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    xcoms: dict[tuple[str, int], Any] = {}
    with pytest.raises(TaskDeferred) as deferred:
        operator(tmp_path, "wait-for-notice").execute(keeping_xcoms(context_for(), xcoms))
    wait_for(tmp_path / "seen.jsonl.ready")  # the job runs
    # The resume Airflow runs on a timeout: a new operator, and the error alone in next_kwargs.
    resumed = keeping_xcoms(context_for(), xcoms)
    resumed["ti"].max_tries = max_tries
    with pytest.raises(AirflowException, match=said):
        operator(tmp_path, "wait-for-notice").resume_execution("__fail__", {"error": error}, resumed)
    job = deferred.value.trigger.job_id
    backend = open_backend("local", {"root": str(tmp_path / "jobs")})
    if stopped:
        assert backend.poll(job).state.done  # stopped_and_bill waited for its end
        (entry,) = train_entries(ledger)
        assert (entry["cause"], entry["outcome"]) == ("unwatched", "interrupted")
        with ledger.reading() as conn:
            settled = reservations.reservation(conn, gate.id)
        assert settled.status == "settled" and settled.settled_usd == Decimal(str(entry["usd"])) > 0
    else:
        assert not backend.poll(job).state.done
        assert train_entries(ledger) == [] and [r.id for r in ledger.open_reservations()] == [gate.id]


def test_a_deferral_timeout_without_the_waits_state_says_what_to_stop_by_hand(
    tmp_path: Path, ledger: Any
) -> None:
    # A deferral of an earlier costaware (no state kept): nothing to stop from; the message says so.
    from airflow.sdk.exceptions import AirflowException

    context = keeping_xcoms(context_for(), {})
    context["ti"].max_tries = 0
    with pytest.raises(
        AirflowException,
        match=r"no retry is left to follow its job, and the wait's state is not there to stop it from .*: "
        r"look for this task's jobs on the 'local' backend",
    ):
        operator(tmp_path, "ok").resume_execution("__fail__", {"error": "Trigger timeout"}, context)


@pytest.mark.parametrize(
    ("where", "max_tries", "stopped"), [("wait", 0, True), ("submit", 0, True), ("wait", 1, False)]
)
def test_a_try_failing_for_good_between_a_submit_and_its_wait_stops_and_bills_the_job(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, where: str, max_tries: int, stopped: bool
) -> None:
    # An execution_timeout right after a submit, before the wait began ("wait"), or inside the backend's
    # submit once it took the job ("submit"): the job ran on, with no try to follow it. With a retry left
    # it runs on for the retry.
    from airflow.sdk.exceptions import AirflowTaskTimeout

    from costaware.adapters.compute.local import LocalBackend

    real_trigger, real_submit = RemoteTrainingOperator._trigger, LocalBackend.submit
    calls: list[int] = []

    def fails_once(self: RemoteTrainingOperator, state: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            wait_for(tmp_path / "seen.jsonl.ready")  # the job runs
            raise AirflowTaskTimeout("Timeout, PID: 1")
        return real_trigger(self, state)

    def times_out_on_its_way_out(self: LocalBackend, request: Any) -> str:
        real_submit(self, request)
        wait_for(tmp_path / "seen.jsonl.ready")
        raise AirflowTaskTimeout("Timeout, PID: 1")

    if where == "wait":
        monkeypatch.setattr(RemoteTrainingOperator, "_trigger", fails_once)
    else:
        monkeypatch.setattr(LocalBackend, "submit", times_out_on_its_way_out)
    context = context_for()
    context["ti"].max_tries = max_tries
    with pytest.raises(AirflowTaskTimeout):
        operator(tmp_path, "wait-for-notice", deferrable=False).execute(context)
    (job,) = [p.name for p in (tmp_path / "jobs").iterdir()]
    backend = open_backend("local", {"root": str(tmp_path / "jobs")})
    if stopped:
        give_up = time.monotonic() + 30
        while not backend.poll(job).state.done:
            assert time.monotonic() < give_up
            time.sleep(0.2)
    else:
        assert not backend.poll(job).state.done
    assert [e["cause"] for e in train_entries(ledger)] == (["unwatched"] if stopped else [])


def test_a_last_try_failing_while_it_takes_up_an_earlier_tries_job_stops_and_bills_it(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Try 1 submitted attempt 1 and was lost. The last try finds the job and fails while it takes it up,
    # before it asks the backend for it again (a timeout reading the checkpoint store): no try is left to
    # follow it, so it is stopped and billed.
    from airflow.sdk.exceptions import AirflowTaskTimeout

    deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")  # the job runs

    def times_out(self: RemoteTrainingOperator, state: Any) -> int:
        raise AirflowTaskTimeout("Timeout, PID: 1")

    monkeypatch.setattr(RemoteTrainingOperator, "_committed_step", times_out)
    last = context_for(try_number=2)
    last["ti"].max_tries = 1
    with pytest.raises(AirflowTaskTimeout):
        operator(tmp_path, "wait-for-notice", deferrable=False).execute(last)
    (job,) = [p.name for p in (tmp_path / "jobs").iterdir()]
    backend = open_backend("local", {"root": str(tmp_path / "jobs")})
    give_up = time.monotonic() + 30
    while not backend.poll(job).state.done:
        assert time.monotonic() < give_up, "the job runs on, watched by nobody"
        time.sleep(0.2)
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "unwatched"
    # Marked with the run the look-up found (unmarked, a drain could not key it apart from an earlier run's
    # bill under the name, and dropped it on that key).
    token = json.loads((tmp_path / "jobs" / job / "request.json").read_text())["run_token"]
    assert f", run {token}: " in entry["note"]


def test_a_deferred_try_failing_for_good_after_it_submitted_the_next_attempt_stops_and_bills_that_job(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trigger reported attempt 1 preempted; execute_complete billed it and submitted attempt 2, then
    # failed (a ledger or store error) on the last try: attempt 2's job ran on, unwatched and unbilled.
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    ready = tmp_path / "seen.jsonl.ready"
    wait_for(ready)
    ready.unlink()
    assert trigger.job_id is not None
    open_backend("local", {"root": str(tmp_path / "jobs")}).signal(trigger.job_id, signal.SIGTERM)
    event = asyncio.run(trigger.run().__anext__()).payload  # a spot notice: it saved and exited 75
    real = RemoteTrainingOperator._trigger

    def fails_at_attempt_2(self: RemoteTrainingOperator, state: Any) -> Any:
        if state.current is not None and state.current.attempt == 2 and not self._live_failed:
            self._live_failed = True
            wait_for(ready)  # attempt 2 runs
            raise RuntimeError("the ledger cannot be reached")
        return real(self, state)

    monkeypatch.setattr(RemoteTrainingOperator, "_live_failed", False, raising=False)
    monkeypatch.setattr(RemoteTrainingOperator, "_trigger", fails_at_attempt_2)
    context = context_for()
    context["ti"].max_tries = 0
    with pytest.raises(RuntimeError, match="ledger"):
        operator(tmp_path, "wait-for-notice").execute_complete(context, event=event)
    assert [e["cause"] for e in sorted(train_entries(ledger), key=lambda e: e["incurred_at"])] == [
        "preemption",
        "unwatched",
    ]
    jobs = open_backend("local", {"root": str(tmp_path / "jobs")})
    assert all(jobs.poll(folder.name).state.done for folder in (tmp_path / "jobs").iterdir())


def test_a_retry_that_cannot_follow_an_earlier_attempt_goes_on_with_the_job_its_failed_try_left(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Try 1: attempt 1 is preempted and billed, attempt 2 runs, the try fails with a retry left. The backend
    # then loses attempt 1's job. The retry submitted attempt 1 again and went its own way: attempt 2 ran
    # on beside it, watched and billed by nobody (the tries together past max_usd).
    import json
    import shutil
    import sys

    from remote_support import TRAINING

    command = [sys.executable, str(TRAINING / "own_train.py"), "save-on-notice", "60"]  # 0.2 s a step
    jobs = open_backend("local", {"root": str(tmp_path / "jobs")})
    seen = tmp_path / "seen.jsonl"

    def preempt_attempt_1() -> None:
        wait_for(seen)
        time.sleep(1.0)
        jobs.signal(next((tmp_path / "jobs").iterdir()).name, signal.SIGTERM)

    real = RemoteTrainingOperator._trigger

    def fails_at_attempt_2(self: RemoteTrainingOperator, state: Any) -> Any:
        if state.current is not None and state.current.attempt == 2:
            give_up = time.monotonic() + 60
            while len(seen.read_text().splitlines()) < 2:  # attempt 2 runs
                assert time.monotonic() < give_up, "attempt 2 never started"
                time.sleep(0.05)
            raise RuntimeError("the ledger cannot be reached")
        return real(self, state)

    threading.Thread(target=preempt_attempt_1, daemon=True).start()
    with monkeypatch.context() as patch:
        patch.setattr(RemoteTrainingOperator, "_trigger", fails_at_attempt_2)
        first = context_for()
        first["ti"].max_tries = 1
        with pytest.raises(RuntimeError, match="ledger"):
            operator(tmp_path, "save-on-notice", command=command, deferrable=False).execute(first)
    names = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert [n[-3:] for n in names] == ["-a1", "-a2"]
    assert not jobs.poll(names[1]).state.done  # attempt 2 runs on for the retry
    shutil.rmtree(tmp_path / "jobs" / names[0])  # the backend lost attempt 1
    capsys.readouterr()
    retry = context_for(try_number=2)
    retry["ti"].max_tries = 1
    result = operator(tmp_path, "save-on-notice", command=command, max_usd="5", deferrable=False).execute(
        retry
    )
    out = capsys.readouterr().out
    assert "a retry: the local backend no longer has attempt 1's job" in out
    assert f"attempt 2: following job {names[1]}" in out
    # Attempt 2 went on to its end under the retry, billed once; nothing new was submitted.
    assert [a["attempt"] for a in result["attempts"]] == [2] and result["attempts"][0]["cause"] == "success"
    causes = [e["cause"] for e in sorted(train_entries(ledger), key=lambda e: e["incurred_at"])]
    assert causes == ["preemption", "success"]
    assert [p.name for p in (tmp_path / "jobs").iterdir()] == [names[1]]
    assert [json.loads(line)["attempt"] for line in seen.read_text().splitlines()] == [1, 2]


def test_a_retry_that_cannot_follow_attempt_1_follows_the_last_attempt_and_trains_no_more(
    tmp_path: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Attempt 1 was preempted, attempt 2 succeeded, and the try failed after it (a store error while it
    # finished). The backend lost attempt 1's job: the retry must not train a third time.
    import shutil

    first, _ = drive(operator(tmp_path, "preempt-once", deferrable=False), context_for())
    assert [a["cause"] for a in first["attempts"]] == ["preemption", "success"]
    (a1,) = [p for p in (tmp_path / "jobs").iterdir() if p.name.endswith("-a1")]
    shutil.rmtree(a1)
    capsys.readouterr()
    again, _ = drive(operator(tmp_path, "preempt-once", deferrable=False), context_for(try_number=2))
    said = capsys.readouterr().out
    assert "it goes on with attempt 2" in said
    assert [p.name[-3:] for p in (tmp_path / "jobs").iterdir()] == ["-a2"]  # nothing new submitted
    assert [a["attempt"] for a in again["attempts"]] == [2] and again["attempts"][0]["cause"] == "success"
    entries = train_entries(ledger)
    assert len(entries) == 2  # each attempt billed once
    # The summary counts the attempt the retry did not follow again: both attempts, what both billed.
    assert Decimal(again["usd"]) == sum(Decimal(str(e["usd"])) for e in entries) == Decimal(first["usd"])
    assert "after 2 attempt(s)" in said


def test_a_retry_past_max_attempts_starts_nothing(tmp_path: Path, ledger: Any) -> None:
    import shutil

    from airflow.sdk.exceptions import AirflowFailException

    drive(operator(tmp_path, "ok", deferrable=False), context_for())
    shutil.rmtree(tmp_path / "jobs")  # the backend lost attempt 1: the retry would start attempt 2
    with pytest.raises(AirflowFailException, match="past max_attempts=1: raise max_attempts"):
        drive(operator(tmp_path, "ok", deferrable=False, max_attempts=1), context_for(try_number=2))
    assert not (tmp_path / "jobs").exists()
    assert len(train_entries(ledger)) == 1


def test_a_local_job_stopped_before_it_started_still_gets_its_notice(tmp_path: Path) -> None:
    # A stop that came before the job's pid was written sent no SIGTERM (LocalBackend.stop found no pid):
    # the job ran on until the grace period's SIGKILL. The supervisor now sends it once it started.
    import json
    import shutil
    import subprocess
    import sys

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice", preemption_grace_seconds=60))
    assert trigger.job_id is not None
    original = tmp_path / "jobs" / trigger.job_id
    folder = tmp_path / "early" / "job"
    folder.mkdir(parents=True)
    wait_for(original / "request.json")
    shutil.copy(original / "request.json", folder / "request.json")
    (folder / "stop").touch()  # stopped before it started: deterministic, not a race
    run = "import sys; from pathlib import Path; from costaware.adapters.compute.local import supervise; "
    run += "supervise(Path(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", run, folder], timeout=30, check=True)
    wait_for(original / "pid")  # the original job runs too: it is killed at the end (_no_job_left)
    assert json.loads((folder / "exit.json").read_text())["exit_code"] != 0  # noticed, not run to its end


def test_a_retry_the_budgets_have_no_room_for_follows_and_bills_the_job_its_failed_try_left(
    tmp_path: Path, ledger: Any
) -> None:
    # The retry's budget_scope hold was refused, and the try failed before it looked for the earlier job:
    # attempt 1 ran on, watched and billed by nobody. Now it is followed and billed, and no new attempt
    # starts (max_usd is lowered to what the earlier tries billed), as behind a spend gate. Nothing is left
    # of that cap: the job is stopped (it checkpoints) rather than run on to the limit try 1 gave it.
    from costaware.core.ledger import Kind, LedgerEntry

    ledger.set_budget("project=churn", "month", "10")
    scoped = {"budget_scope": "project=churn", "max_usd": "5"}
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice", **scoped))
    assert trigger.job_id is not None
    wait_for(tmp_path / "seen.jsonl.ready")  # the job runs
    for hold in ledger.open_reservations():  # try 1 failed: the cost listener settles its hold
        ledger.settle(hold.id, "0")
    ledger.record(LedgerEntry("other", "o", "t", Kind.COMPUTE, Decimal("8"), tags={"project": "churn"}))
    retry = operator(tmp_path, "wait-for-notice", deferrable=False, **scoped)
    with pytest.raises(AirflowFailException, match="the budgets have no room for this retry"):
        drive(retry, context_for(try_number=2))
    assert open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done
    (billed,) = train_entries(ledger)
    assert billed["cause"] == "max_usd" and Decimal(billed["usd"]) > 0


def test_a_killed_job_the_backend_does_not_list_yet_is_stopped_all_the_same(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batch's DescribeJobs may not list a job just submitted: taken as gone, it was billed from its submit
    # but never stopped, and ran on once listed, with no task left to bill it.
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import JobNotFoundError

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice", preemption_grace_seconds=3))
    wait_for(tmp_path / "seen.jsonl.ready")

    def poll(self: LocalBackend, job_id: str) -> Any:
        raise JobNotFoundError(f"job {job_id!r} is not listed")

    with monkeypatch.context() as patched:
        patched.setattr(LocalBackend, "poll", poll)
        trigger.stop_and_bill(wait_seconds=0.3, poll_seconds=0.1)
    (entry,) = train_entries(ledger)
    assert "billed from its submit" in entry["note"]
    assert trigger.job_id is not None
    give_up = time.monotonic() + 30
    while not open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done:
        assert time.monotonic() < give_up, "the job was not stopped"
        time.sleep(0.2)


def test_a_workers_forwarded_sigint_outside_the_wait_leaves_the_job_to_the_retry(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker stopped with Ctrl-C forwards the SIGINT to its tasks: not a person's Ctrl-C of `dags test`.
    # Ending it for good failed every waiting training of the worker without its retries; with a retry
    # left the job runs on for the retry to follow, as for any failure of a try.
    from costaware.adapters.compute.local import LocalBackend

    real_submit = LocalBackend.submit

    def submit_then_sigint(self: LocalBackend, request: Any) -> str:
        real_submit(self, request)
        raise KeyboardInterrupt

    monkeypatch.setattr(LocalBackend, "submit", submit_then_sigint)
    op = operator(tmp_path, "wait-for-notice", deferrable=False, poll_interval=0.2)
    with pytest.raises(KeyboardInterrupt):
        op.execute(context_for(try_number=1))  # retries left
    (job,) = [p.name for p in (tmp_path / "jobs").iterdir()]
    assert not open_backend("local", {"root": str(tmp_path / "jobs")}).poll(job).state.done
    assert train_entries(ledger) == []  # the retry follows it and bills it
    open_backend("local", {"root": str(tmp_path / "jobs")}).stop(job)


def test_a_killed_followed_job_that_does_not_answer_is_billed_with_what_it_ran_before_the_re_attach(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Billed from this try's submit (the re-attach) where its poll did not answer, a followed job's 2 h
    # under the earlier try went unbilled.
    from datetime import datetime, timedelta, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.triggers.remote_kill_stop as kill_stop  # where the kill reads the clock
    from costaware.adapters.compute.base import JobStatus
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import ComputeBackendError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    def poll(self: LocalBackend, job_id: str) -> Any:
        raise ComputeBackendError("ThrottlingException: Rate exceeded")

    monkeypatch.setattr(LocalBackend, "poll", poll)
    monkeypatch.setattr(LocalBackend, "stop", lambda self, job_id: None)
    now = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    monkeypatch.setattr(kill_stop, "utcnow", lambda: now)
    found_at = now - timedelta(seconds=60)
    ran_before = JobStatus(job_id="train-a1", state=JobState.RUNNING, market="spot", billable_seconds=7200.0)
    state = AttemptState(plan=RemotePlan.from_json(CAPTURED)).submitted(
        job_id="train-a1",
        market="spot",
        submitted_at=found_at.isoformat(),
        followed={"job": ran_before.to_dict(), "seen_at": found_at.isoformat()},
    )
    trigger = RemoteTrainingJobTrigger(
        backend="local", backend_options={"root": str(tmp_path)}, job_id="train-a1", state=state.to_json()
    )
    job, ended, _ = trigger._stop_job(state, wait_seconds=0, poll_seconds=0)
    assert job is not None and not ended
    # What it ran before the re-attach, since then, and its grace period after the stop.
    assert job["billable_seconds"] == 7200.0 + 60.0 + stop_seconds(state)


def test_a_killed_batch_job_is_billed_with_its_copies_to_their_stop_and_one_unstopped_to_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kill bills the job's last poll, not its end: a copy of its submit whose terminate failed, billed
    # only the 600 s it had run, went on to its attemptDurationSeconds (7200 s) unbilled.
    from datetime import datetime, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    import costaware.triggers.remote_kill_stop as kill_stop  # where the kill reads the clock
    from costaware.adapters.compute.base import JobStatus
    from costaware.adapters.compute.batch import with_copies
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    now = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    monkeypatch.setattr(kill_stop, "utcnow", lambda: now)
    now_ms = int(now.timestamp() * 1000)
    own = JobStatus(
        job_id="j", state=JobState.RUNNING, market="spot", instance_type="m5.large", billable_seconds=1000.0
    )
    unstopped = {"jobId": "c1", "jobName": "n", "status": "RUNNING", "startedAt": now_ms - 600_000}
    stopping = {"jobId": "c2", "jobName": "n", "status": "RUNNING", "startedAt": now_ms - 50_000}
    polled = with_copies(
        own,
        [unstopped, stopping],
        now_ms=now_ms,
        unstopped=["c1"],
        attempt_limit_seconds=7200,
        stop_timeout_seconds=30,
    )
    assert polled.billable_seconds == 1000 + 600 + 50  # while it runs: up to this poll

    class Batch:
        def poll(self, job_id: str) -> JobStatus:
            return polled

        def stop(self, job_id: str) -> None:
            pass

    monkeypatch.setattr(compute, "open_backend", lambda name, options: Batch())
    state = AttemptState(plan=RemotePlan.from_json(CAPTURED)).submitted(
        job_id="j", market="spot", submitted_at=now.isoformat()
    )
    trigger = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    job, ended, _ = trigger._stop_job(state, wait_seconds=0, poll_seconds=0)
    assert job is not None and not ended
    # The job to its grace period's end; c1 to its limit and ECS's stop timeout; c2 to its stop timeout.
    assert job["billable_seconds"] == 1000 + stop_seconds(state) + (7200 + 30) + (50 + 30)
    assert job["metrics"]["batch_copy_seconds_by_type"] == {"m5.large": 7200 + 30 + 50 + 30}
    assert "batch_copy_seconds_left" not in job["metrics"]
    assert "c1 could not be stopped: billed to its time limit" in job["reason"]


@pytest.mark.parametrize("stop_fails", [False, True], ids=["stopped", "stop failed"])
def test_a_killed_batch_job_describejobs_misses_is_billed_as_gone_to_its_latest_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_fails: bool
) -> None:
    # One DescribeJobs that missed it at the kill billed the job only to now, as ended on its own and keyed
    # by attempt: its grace period after the stop, and where the stop failed its run to its time limit,
    # went unbilled.
    from datetime import datetime, timedelta, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    import costaware.triggers.remote_kill_stop as kill_stop  # where the kill reads the clock
    from costaware.core.errors import ComputeBackendError, JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan, job_seconds_left

    stops: list[str] = []

    class Lagging:
        def poll(self, job_id: str) -> Any:
            raise JobNotFoundError("DescribeJobs does not list it")

        def stop(self, job_id: str) -> None:
            stops.append(job_id)
            if stop_fails:
                raise ComputeBackendError("ThrottlingException on TerminateJob")

    monkeypatch.setattr(compute, "open_backend", lambda name, options: Lagging())
    now = datetime(2026, 11, 26, 10, tzinfo=timezone.utc)
    monkeypatch.setattr(kill_stop, "utcnow", lambda: now)
    submitted = now - timedelta(seconds=3600)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(job_id="j", market="spot", submitted_at=submitted.isoformat())
    trigger = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    job, ended, own_end = trigger._stop_job(state, wait_seconds=0, poll_seconds=0)
    assert job is not None and stops == ["j"]
    assert (ended, own_end) == (False, False)  # keyed by name: a cleared try following it bills it once
    own = job_seconds_left(plan, submitted, "spot") if stop_fails else 3600
    assert job["billable_seconds"] == own + stop_seconds(state)


def test_a_killed_job_describejobs_misses_is_billed_from_the_status_the_wait_saw_last_not_its_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Missed at the kill, a job the wait had seen running 1000 s after it queued 2000 s was billed from its
    # submit as if it had run all along: 3600 s and its grace period, where it can have run 1600 s.
    from datetime import datetime, timedelta, timezone

    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    import costaware.triggers.remote_kill_stop as kill_stop  # where the kill reads the clock
    from costaware.adapters.compute.base import JobState, JobStatus
    from costaware.core.errors import JobNotFoundError
    from costaware.training.attempt_effects import stop_seconds
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    now = datetime(2026, 11, 26, 10, tzinfo=timezone.utc)
    submitted = now - timedelta(seconds=3600)
    seen = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=1000.0)
    answers: list[Any] = [seen, JobNotFoundError("DescribeJobs does not list it")]
    stops: list[str] = []

    class Lagging:
        def poll(self, job_id: str) -> Any:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

        def stop(self, job_id: str) -> None:
            stops.append(job_id)

    monkeypatch.setattr(compute, "open_backend", lambda name, options: Lagging())
    monkeypatch.setattr(kill_stop, "utcnow", lambda: now)
    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(job_id="j", market="spot", submitted_at=submitted.isoformat())
    trigger = RemoteTrainingJobTrigger(backend="batch", backend_options={}, job_id="j", state=state.to_json())
    assert trigger.poll_once(now - timedelta(seconds=600)) is None  # seen running, 1000 s in
    job, ended, own_end = trigger._stop_job(state, wait_seconds=0, poll_seconds=0)
    assert job is not None and stops == ["j"] and (ended, own_end) == (False, False)
    assert job["billable_seconds"] == 1000 + 600 + stop_seconds(state)


def test_sigterm_of_a_worker_as_its_resumed_run_handles_a_success_keeps_the_success(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker shut down (SIGTERM) while the task resumed from its deferred wait handles the job's success:
    # the task failed for good, with a message about `airflow dags test`, and a training that succeeded,
    # billed and stored had to be run again. Only `dags test` stops there; a worker's task succeeds.
    op = operator(tmp_path, "ok", poll_interval=0.2)
    trigger = deferred_trigger(op)

    async def first_event() -> Any:
        async for event in trigger.run():
            return event

    event = asyncio.run(first_event())
    assert event is not None and event.payload["status"] == "success"
    handle_the_end = RemoteTrainingOperator._on_event

    def sigterm_as_the_end_is_handled(self: RemoteTrainingOperator, *args: Any) -> Any:
        self.on_kill()
        return handle_the_end(self, *args)

    monkeypatch.setattr(RemoteTrainingOperator, "_on_event", sigterm_as_the_end_is_handled)
    resumed = operator(tmp_path, "ok", poll_interval=0.2)  # Airflow resumes a fresh copy of the task
    result = resumed.execute_complete(context_for(), event.payload)
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "success" and Decimal(str(entry["usd"])) > 0
    assert isinstance(result, dict) and Decimal(str(result["usd"])) == Decimal(str(entry["usd"]))
    assert ledger.open_reservations() == []


def test_a_killed_job_whose_stop_the_backend_refuses_is_not_billed_and_keeps_the_tasks_hold(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Billed to the end of its grace period and the hold settled, the job ran on past it unbilled: its entry
    # (keyed by its name) also hid it from `costaware jobs reconcile`.
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import ComputeBackendError

    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")

    def refused(self: LocalBackend, job_id: str) -> Any:
        raise ComputeBackendError("AccessDeniedException: not authorized to perform StopTrainingJob")

    with monkeypatch.context() as patched:
        patched.setattr(LocalBackend, "stop", refused)
        why = trigger.stop_and_bill(wait_seconds=0.3, poll_seconds=0.1, ask_state=False)

    assert why == "ComputeBackendError: AccessDeniedException: not authorized to perform StopTrainingJob"
    assert train_entries(ledger) == []
    (held,) = ledger.open_reservations()
    assert held.id == gate.id
    assert trigger.job_id is not None
    assert not open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done
    trigger.stop_and_bill(wait_seconds=10, ask_state=False)  # stopped once the backend lets it: billed
    assert [e["cause"] for e in train_entries(ledger)] == ["killed"]


def test_a_job_killed_in_the_worker_whose_stop_is_refused_is_billed_to_its_grace_period_all_the_same(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wait in the worker keeps no wait state for `costaware jobs reconcile` to find its job by: left
    # unbilled for a later reconcile as a deferred wait's is, it was billed by nothing, ever.
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import ComputeBackendError

    def refused(self: LocalBackend, job_id: str) -> Any:
        raise ComputeBackendError("AccessDeniedException: not authorized to perform StopTrainingJob")

    op = operator(tmp_path, "wait-for-notice", deferrable=False, poll_interval=3600)
    threading.Thread(target=op.execute, args=(context_for(),), daemon=True).start()
    wait_for(tmp_path / "seen.jsonl.ready")
    give_up = time.monotonic() + 30
    while getattr(op, "_waiting_on", None) is None:
        assert time.monotonic() < give_up
        time.sleep(0.05)
    with monkeypatch.context() as patched:
        patched.setattr(LocalBackend, "stop", refused)
        op.on_kill()
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed" and "grace period" in entry["note"]
    assert op._waiting_on is not None and op._waiting_on.job_id is not None
    (tmp_path / "jobs" / op._waiting_on.job_id / "stop").touch()  # the test's own end of the job


def test_a_failing_last_try_whose_stop_is_refused_bills_a_job_no_wait_state_names_to_its_grace_period(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A try failing for good in the worker (deferrable=False keeps no wait state) stops its job; a refused
    # stop left it unbilled for a `costaware jobs reconcile` that could never find it.
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import ComputeBackendError

    def refused(self: LocalBackend, job_id: str) -> Any:
        raise ComputeBackendError("AccessDeniedException: not authorized to perform StopTrainingJob")

    running = operator(tmp_path, "wait-for-notice", deferrable=False, poll_interval=3600)
    threading.Thread(target=running.execute, args=(context_for(),), daemon=True).start()
    wait_for(tmp_path / "seen.jsonl.ready")
    give_up = time.monotonic() + 30
    while getattr(running, "_live", None) is None:
        assert time.monotonic() < give_up
        time.sleep(0.05)
    job_id = running._live.current.job_id
    failing = operator(tmp_path, "wait-for-notice", deferrable=False, poll_interval=3600)
    failing._live = running._live  # a failure between its submit and its wait, on the last try
    context = context_for()
    context["ti"].max_tries = 0
    with monkeypatch.context() as patched:
        patched.setattr(LocalBackend, "stop", refused)
        with pytest.raises(RuntimeError, match="store failed"), failing._stops_unwatched_job(context):
            raise RuntimeError("store failed")
    (entry,) = train_entries(ledger)
    assert entry["cause"] == "unwatched" and "grace period" in entry["note"]
    (tmp_path / "jobs" / job_id / "stop").touch()  # the test's own end of the job


@pytest.mark.parametrize("failing", ["open_backend", "first poll"])
def test_a_kill_whose_stop_fails_before_the_job_is_stopped_keeps_the_tasks_hold(
    tmp_path: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failing: str,
) -> None:
    # Any error but a refused stop settled the hold in the `finally`: a ConfigurationError of open_backend,
    # or a botocore error a poll did not wrap, left the job training on, unbilled, its money freed.
    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import ConfigurationError

    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")

    error: Exception
    with monkeypatch.context() as patched:
        if failing == "open_backend":
            error = ConfigurationError("backend_options: 'region' is not a known option")

            def no_backend(name: str, options: Any) -> Any:
                raise error

            patched.setattr(compute, "open_backend", no_backend)
        else:
            error = RuntimeError("EndpointConnectionError: Could not connect to the endpoint URL")

            def unwrapped(self: LocalBackend, job_id: str) -> Any:
                raise error

            patched.setattr(LocalBackend, "poll", unwrapped)
        with pytest.raises(type(error)):
            trigger.stop_and_bill(wait_seconds=0.3, poll_seconds=0.1, ask_state=False)

    assert train_entries(ledger) == []
    (held,) = ledger.open_reservations()
    assert held.id == gate.id
    assert trigger.job_id is not None
    assert not open_backend("local", {"root": str(tmp_path / "jobs")}).poll(trigger.job_id).state.done
    said = capsys.readouterr().out
    assert f"job {trigger.job_id} not billed ({type(error).__name__}" in said
    assert "the task's budget hold stays held" in said


def test_a_job_gone_when_the_reconcile_stops_it_is_said_gone_for_the_reconciles_cause_not_a_kill(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its log said "the task was killed; ..." whatever stopped it: the reconcile's job of a task that ended,
    # or a try failing for good, read as a person's kill.
    import costaware.adapters.compute.base as compute
    from costaware.core.errors import JobNotFoundError
    from costaware.remote_reconcile import RECONCILE_WHY

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))

    class DrainedPods:  # Kubernetes: a pod gone is gone for good
        def poll(self, job_id: str) -> Any:
            raise JobNotFoundError(f"pod {job_id!r} not found")

        def stop(self, job_id: str) -> None:
            pass

    monkeypatch.setattr(compute, "open_backend", lambda name, options: DrainedPods())
    trigger.backend = "kubernetes"
    trigger.stop_and_bill(
        wait_seconds=0.3, poll_seconds=0.1, ask_state=False, cause="unwatched", why=RECONCILE_WHY
    )

    said = capsys.readouterr().out
    assert f"{RECONCILE_WHY}; job {trigger.job_id}: " in said
    assert "the task was killed" not in said


@pytest.mark.parametrize("failing", ["open_backend", "first poll"])
def test_a_kill_in_the_worker_whose_stop_fails_before_the_job_is_stopped_bills_it_to_its_grace_period(
    tmp_path: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failing: str,
) -> None:
    # A wait in the worker keeps no wait state for `costaware jobs reconcile` to find its job by: an error
    # before the bill kept the hold and said the reconcile would bill the job, which nothing ever did.
    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.local import LocalBackend
    from costaware.core.errors import ConfigurationError

    ledger.set_budget("project=churn", "month", "10")
    ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    assert trigger.job_id is not None

    error: Exception
    with monkeypatch.context() as patched:
        if failing == "open_backend":
            error = ConfigurationError("backend_options: 'region' is not a known option")

            def no_backend(name: str, options: Any) -> Any:
                raise error

            patched.setattr(compute, "open_backend", no_backend)
        else:
            error = RuntimeError("EndpointConnectionError: Could not connect to the endpoint URL")

            def unwrapped(self: LocalBackend, job_id: str) -> Any:
                raise error

            patched.setattr(LocalBackend, "poll", unwrapped)
        trigger.stop_and_bill(wait_seconds=0.3, poll_seconds=0.1, ask_state=False, bill_refused=True)

    (entry,) = train_entries(ledger)
    assert entry["cause"] == "killed" and "grace period" in entry["note"] and str(error) in entry["note"]
    assert ledger.open_reservations() == []
    said = capsys.readouterr().out
    assert f"stopping and billing job {trigger.job_id} failed ({type(error).__name__}" in said
    stop_by_hand = f"check job {trigger.job_id} on local and stop it by hand if it still runs"
    assert (stop_by_hand in said) == (failing == "open_backend")  # a poll's error: its stop went through
    assert "jobs reconcile" not in said
    (tmp_path / "jobs" / trigger.job_id / "stop").touch()  # the test's own end of the job


@pytest.mark.parametrize("in_worker", [True, False], ids=["worker", "trigger"])
def test_a_kill_whose_bill_fails_says_what_follows_on_its_own_path(
    tmp_path: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    in_worker: bool,
) -> None:
    # A worker's wait keeps no wait state: `costaware jobs reconcile` never bills its job, as the error said.
    from costaware.remote_billing import KilledTrainingBilling

    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    assert trigger.job_id is not None
    error = OSError("disk I/O error")

    def unwritable(self: KilledTrainingBilling, *args: Any, **kwargs: Any) -> Any:
        raise error

    with monkeypatch.context() as patched:
        patched.setattr(KilledTrainingBilling, "_bill_attempt", unwritable)
        with pytest.raises(OSError):
            trigger.stop_and_bill(wait_seconds=0.3, poll_seconds=0.1, ask_state=False, bill_refused=in_worker)

    (held,) = ledger.open_reservations()
    assert held.id == gate.id
    said = capsys.readouterr().out
    assert f"job {trigger.job_id} not billed (OSError: disk I/O error)" in said
    assert ("`costaware jobs reconcile` bills the job" in said) is not in_worker
    assert ("nothing bills the job: record what it ran by hand" in said) is in_worker


def test_a_worker_kills_bill_neither_the_ledger_nor_the_spool_takes_is_logged_whole(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The last resort logged the bill's uid alone ("record what it ran by hand"): what it ran was lost
    # with the worker. The log keeps the whole spool file now, and saved in the spool it drains.
    import json

    import costaware.ledger_spool as ledger_spool
    import costaware.ledger_spool_drain as ledger_spool_drain

    def no_spool() -> Path:
        raise OSError("read-only file system")

    monkeypatch.setattr(ledger_spool, "spool_dir", no_spool)
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")

    def down(self: Any, entry: Any) -> Any:
        raise OSError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(type(ledger), "record", down)
        with pytest.raises(Exception, match="disk I/O error"):
            trigger.stop_and_bill(wait_seconds=0, poll_seconds=0.1, ask_state=False, bill_refused=True)
    said = capsys.readouterr().out
    (line,) = [line for line in said.splitlines() if "could not keep the bill" in line]
    kept, _ = json.JSONDecoder().raw_decode(line[line.index('{"ledger_conn_id"') :])
    assert kept["duplicate_check"]["job_id"] == trigger.job_id and kept["retrying"] is True
    assert said.count("stays held") == 1  # said once, not "stays held, and the hold stays held"

    spool = tmp_path / "saved"
    spool.mkdir()
    (spool / f"{kept['entry']['entry_uid']}.json").write_text(json.dumps(kept))
    assert ledger_spool_drain.drain(spool, lambda conn_id: ledger).written == 1
    (entry,) = train_entries(ledger)
    assert entry["entry_uid"] == kept["entry"]["entry_uid"]


@pytest.mark.parametrize("in_worker", [True, False], ids=["worker", "trigger"])
def test_a_worker_kill_whose_ledger_write_fails_keeps_the_bill_in_the_spool(
    tmp_path: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    in_worker: bool,
) -> None:
    # A worker's wait keeps no wait state: its bill that the ledger refused was lost ("record what it ran by
    # hand"). It is spooled now and written when the ledger is back; the trigger's is left to the reconcile.
    import costaware.ledger_spool as ledger_spool
    import costaware.ledger_spool_drain as ledger_spool_drain

    spool = tmp_path / "spool"
    monkeypatch.setattr(ledger_spool, "spool_dir", lambda: spool)
    ledger.set_budget("project=churn", "month", "10")
    gate = ledger.reserve("project=churn", "1.00", holder=HOLDER, run_id="r")
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    assert trigger.job_id is not None

    def down(self: Any, entry: Any) -> Any:
        raise OSError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(type(ledger), "record", down)
        with pytest.raises(Exception, match="disk I/O error"):
            trigger.stop_and_bill(wait_seconds=0.3, poll_seconds=0.1, ask_state=False, bill_refused=in_worker)

    assert train_entries(ledger) == []
    (held,) = ledger.open_reservations()
    assert held.id == gate.id  # the ledger down: nothing settled
    said = capsys.readouterr().out
    kept = sorted(spool.glob("*.json"))
    if not in_worker:
        assert kept == [] and "`costaware jobs reconcile` bills the job" in said
        return
    assert len(kept) == 1 and f"kept in {kept[0]} and written when the ledger is back" in said
    assert "record what it ran by hand" not in said
    for _ in range(2):  # the ledger back: written once, however often drained
        ledger_spool_drain.drain(spool, lambda conn_id: ledger)
    (entry,) = train_entries(ledger)
    assert entry["entry_uid"] == kept[0].stem and entry["cause"] == "killed" and Decimal(entry["usd"]) > 0
    assert list(spool.glob("*.json")) == []


def test_a_spooled_kill_bill_is_dropped_at_the_drain_where_a_new_try_billed_the_job_meanwhile(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A worker kill's bill (keyed by the job's name) waited in the spool; a cleared task's new try saw the
    # job end and billed it under its end's key. The drain asked the ledger for its own key only and wrote
    # it beside the new try's: the job counted twice.
    import json
    from dataclasses import replace
    from datetime import timedelta

    import costaware.ledger_spool as ledger_spool
    import costaware.ledger_spool_drain as ledger_spool_drain
    from costaware.core.ledger import entry_from_json
    from costaware.training.remote import attempt_key, attempt_uid

    spool = tmp_path / "spool"
    monkeypatch.setattr(ledger_spool, "spool_dir", lambda: spool)
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    assert trigger.job_id is not None

    def down(self: Any, entry: Any) -> Any:
        raise OSError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(type(ledger), "record", down)
        with pytest.raises(Exception, match="disk I/O error"):
            # Not waited for: billed to its grace period's end, keyed by its name (its end unknown).
            trigger.stop_and_bill(wait_seconds=0, poll_seconds=0.1, ask_state=False, bill_refused=True)
    (kept,) = spool.glob("*.json")
    data = json.loads(kept.read_text())
    killed = entry_from_json(data["entry"])
    task = {"dag_id": killed.dag_id, "run_id": killed.run_id, "task_id": killed.task_id}
    assert killed.entry_uid == attempt_uid(attempt_key(task, trigger.job_id, legacy=True))
    # The new try's bill of the same run: under its end's key, for the time it really ran (less).
    new_try = replace(
        killed,
        entry_uid=attempt_uid(attempt_key(task, trigger.job_id, time.time())),
        quantity=killed.quantity / 2,
        usd=killed.usd / 2,
        cause="preemption",
        try_number=killed.try_number + 1,
        incurred_at=killed.incurred_at + timedelta(seconds=1),
    )
    assert ledger.record(new_try)

    result = ledger_spool_drain.drain(spool, lambda conn_id: ledger)
    (entry,) = train_entries(ledger)
    assert entry["entry_uid"] == new_try.entry_uid and result.billed_already == 1 and result.written == 0
    assert list(spool.glob("*.json")) == []
    assert f"spooled {kept.name} (job {trigger.job_id}) was billed meanwhile" in caplog.text
    # Not written, and not deleted either: kept for a person to read (a wrong match would be lost).
    assert json.loads((spool / "billed" / kept.name).read_text()) == data
    assert f"moved to {spool / 'billed'}" in caplog.text


@pytest.mark.parametrize("note_gives_end", [True, False], ids=["note-gives-end", "older-note"])
def test_a_spooled_kill_bill_is_written_where_a_later_run_under_the_same_job_name_was_billed(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, note_gives_end: bool
) -> None:
    # A cleared task's new try resubmits the job under the same name ({base}-a1, every try) after the
    # killed run ended; that later run's bill, written before the drain, was taken for the killed run's
    # (the row written after the killed run began) and the kill's spooled bill was dropped: under-billed.
    import json
    from dataclasses import replace
    from datetime import datetime, timedelta, timezone

    import costaware.ledger_spool as ledger_spool
    import costaware.ledger_spool_drain as ledger_spool_drain
    from costaware.core.ledger import entry_from_json
    from costaware.training.remote import attempt_key, attempt_uid

    spool = tmp_path / "spool"
    monkeypatch.setattr(ledger_spool, "spool_dir", lambda: spool)
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    assert trigger.job_id is not None

    def down(self: Any, entry: Any) -> Any:
        raise OSError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(type(ledger), "record", down)
        with pytest.raises(Exception, match="disk I/O error"):
            trigger.stop_and_bill(wait_seconds=0, poll_seconds=0.1, ask_state=False, bill_refused=True)
    (kept,) = spool.glob("*.json")
    data = json.loads(kept.read_text())
    killed = entry_from_json(data["entry"])
    task = {"dag_id": killed.dag_id, "run_id": killed.run_id, "task_id": killed.task_id}
    # The later run: submitted 2 hours after the kill, it ran 1 hour and was billed at its end.
    later_end = float(data["duplicate_check"]["ended_at"]) + 3 * 3600
    # Its note gives its end as a bill writes it now; a row written before notes gave it, none (its
    # writing is taken instead).
    ended = f", ended {datetime.fromtimestamp(later_end, timezone.utc).isoformat(timespec='milliseconds')}"
    later_run = replace(
        killed,
        entry_uid=attempt_uid(attempt_key(task, trigger.job_id, later_end)),
        note=f"attempt 1, job {trigger.job_id} on local, 3600.0 s billed{ended * note_gives_end}: ok",
        quantity=Decimal("1"),
        usd=Decimal("1.00"),
        cause="success",
        try_number=killed.try_number + 1,
        incurred_at=killed.incurred_at + timedelta(hours=3),
    )
    assert ledger.record(later_run)

    result = ledger_spool_drain.drain(spool, lambda conn_id: ledger)
    if not note_gives_end:
        # A row that gives no end reads as a later run only by its writing, as a new try's bill of this run
        # written hours later does: kept for a person, not written (see the test below).
        assert (result.written, result.billed_already, result.unsure) == (0, 0, 1)
        held_back = spool / "unsure" / kept.name
        assert json.loads(held_back.read_text()) == data
        # The person finds the row bills a later run: marked so and moved back, the bill is written.
        held_back.replace(kept)
        kept.write_text(json.dumps({**data, "another_run": True}))
        result = ledger_spool_drain.drain(spool, lambda conn_id: ledger)
    assert result.written == 1 and result.billed_already == 0
    billed = {row["entry_uid"]: row["usd"] for row in train_entries(ledger)}
    assert billed == {later_run.entry_uid: Decimal("1.00"), killed.entry_uid: killed.usd}


@pytest.mark.parametrize("note_gives_end", [True, False], ids=["note-gives-end", "older-note"])
def test_a_spooled_kill_bill_is_dropped_where_a_new_try_billed_the_same_run_hours_after_it_ended(
    tmp_path: Path,
    ledger: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    note_gives_end: bool,
) -> None:
    # A cleared task's new try, hours after the kill, finds the killed job long ended and bills it under its
    # end's key. Its row's run start was taken as its writing less its billed hours: 3 h after a run of
    # minutes, that start fell after the kill's stop, the row read as a later run, and the drain wrote the
    # kill's bill too: the run billed twice.
    import json
    import re
    from dataclasses import replace
    from datetime import timedelta

    import costaware.ledger_spool as ledger_spool
    import costaware.ledger_spool_drain as ledger_spool_drain
    from costaware.core.ledger import entry_from_json
    from costaware.training.remote import attempt_entry, end_of_attempt_note

    spool = tmp_path / "spool"
    monkeypatch.setattr(ledger_spool, "spool_dir", lambda: spool)
    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    assert trigger.job_id is not None

    def down(self: Any, entry: Any) -> Any:
        raise OSError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(type(ledger), "record", down)
        with pytest.raises(Exception, match="disk I/O error"):
            trigger.stop_and_bill(wait_seconds=0, poll_seconds=0.1, ask_state=False, bill_refused=True)
    (kept,) = spool.glob("*.json")
    data = json.loads(kept.read_text())
    killed = entry_from_json(data["entry"])
    check = data["duplicate_check"]
    # The new try's bill of the killed run, as the bill writes it: the job ended at the kill's stop, and
    # the row is written 3 hours later.
    new_try = attempt_entry(
        identity={**check["identity"], "try_number": killed.try_number + 1},
        attempt=1,
        job={
            "job_id": trigger.job_id,
            "ended_at": check["ended_at"],
            "billable_seconds": check["billable_seconds"],
            "instance_type": killed.instance_type or "",
            "market": killed.market.value,
            "state": "interrupted",
            "reason": "stopped",
        },
        usd_per_hour=killed.unit_price_usd,
        on_demand_usd_per_hour=None,
        region=killed.region or "",
        backend=check["backend"],
        tags=killed.tags,
    )
    new_try = replace(new_try, incurred_at=killed.incurred_at + timedelta(hours=3))
    if not note_gives_end:
        # Written by a version whose notes gave no end (an upgrade while the bill waited): its run's start
        # was taken from its writing, and the kill's bill was written beside it.
        new_try = replace(new_try, note=re.sub(r", ended \S+?:", ":", new_try.note))
        assert end_of_attempt_note(new_try.note) is None
    assert new_try.entry_uid != killed.entry_uid and ledger.record(new_try)

    result = ledger_spool_drain.drain(spool, lambda conn_id: ledger)
    (entry,) = train_entries(ledger)
    assert entry["entry_uid"] == new_try.entry_uid
    if note_gives_end:
        assert result.written == 0 and result.billed_already == 1
        return
    # Which run the row bills cannot be told: kept whole in spool/unsure for a person, and said so.
    assert (result.written, result.billed_already, result.unsure) == (0, 0, 1)
    assert json.loads((spool / "unsure" / kept.name).read_text()) == data
    assert list(spool.glob("*.json")) == []
    said = caplog.text
    assert f"spooled {kept.name} (job {trigger.job_id}" in said and new_try.entry_uid in said
    assert '"another_run": true' in said


def test_a_new_try_whose_cap_stop_finds_the_kills_stop_records_the_job_as_killed(
    tmp_path: Path, ledger: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # A local job has one `stop` file, whoever asked: the cleared task's new try, following the job still
    # stopping from the kill, took the kill's stop as its own stop at the cap (not sent again, rightly) and
    # recorded the job as stopped at what was left of max_usd. The kill's grace is long enough for the new try
    # to find the job still stopping on a loaded machine: with 4 s, a new try that took longer to start found
    # it ended, sent no stop and said nothing of the kill's.
    trigger = deferred_trigger(operator(tmp_path, "ignore-notice", preemption_grace_seconds=20, max_usd="1"))
    wait_for(tmp_path / "seen.jsonl")
    trigger.stop_and_bill(wait_seconds=0.3, poll_seconds=0.1)  # billed to its grace period's end
    (killed,) = train_entries(ledger)
    assert killed["cause"] == "killed"
    capsys.readouterr()
    # What is left of max_usd buys nothing: the new try's stop at the cap falls due at its first poll.
    new_try = operator(tmp_path, "ok", preemption_grace_seconds=20, max_usd=str(killed["usd"]))
    with pytest.raises(AirflowFailException, match="cannot start another attempt"):
        drive(new_try, context_for(try_number=2))
    said = capsys.readouterr().out
    assert "attempt 1 was stopped at what was left of max_usd" not in said
    assert "attempt 1 was stopped by the kill of an earlier try" in said
    assert "already, as the backend says, by an earlier try (killed, as its ledger entry says)" in said
    assert train_entries(ledger) == [killed]  # billed once, by the kill


def test_a_cap_stop_whose_kept_followed_time_is_no_time_is_still_taken_as_sent(
    tmp_path: Path, ledger: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The job was asked to stop already (its backend says so); the look-up of an earlier try's stop parsed
    # the kept 'seen_at' outside any guard, and a value that is no time made the stop at the cap raise.
    from costaware.core.ledger import utcnow

    trigger = deferred_trigger(operator(tmp_path, "wait-for-notice"))
    wait_for(tmp_path / "seen.jsonl.ready")
    assert trigger.job_id is not None
    current = dict(trigger.state["current"])
    current["followed"] = {**(current.get("followed") or {}), "seen_at": "yesterday"}
    trigger.state = {**trigger.state, "current": current}
    monkeypatch.setattr(trigger, "_stop_asked_at", lambda job_id: utcnow())
    monkeypatch.setattr(trigger, "_keep_cap_stop", lambda: None)
    assert trigger._send_cap_stop(trigger.job_id) is True
    said = capsys.readouterr().out
    assert f"cannot tell whether an earlier try stopped job {trigger.job_id}" in said
    assert "followed.seen_at 'yesterday' is not ISO-8601" in said
    assert f"job {trigger.job_id} on local was asked to stop at" in said
    trigger.stop_and_bill(wait_seconds=0.3, poll_seconds=0.1, ask_state=False)  # nothing left running
