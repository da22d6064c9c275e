"""An earlier try's stop of a job, as its ledger entry says: one look-up for the wait and the operator.

The trigger's stop at the cap and the operator's following of a job each read it; the two copies differed in
what they opened the ledger with (the trigger built a whole kill's billing for it).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from costaware import Ledger
from costaware.core.ledger import Kind, LedgerEntry
from costaware.hooks.ledger import CostLedgerHook
from costaware.training.remote import attempt_key, attempt_uid
from costaware.triggers.remote_job_status import earlier_stop_cause

IDENTITY = {"dag_id": "remote_dag", "run_id": "r", "task_id": "train"}
LOG = logging.getLogger(__name__)


def _stop_entry(uid_key: str, cause: str) -> LedgerEntry:
    return LedgerEntry(
        dag_id="remote_dag", run_id="r", task_id="train", kind=Kind.COMPUTE, usd=Decimal("1"),
        entry_uid=attempt_uid(uid_key), cause=cause,
    )  # fmt: skip


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> CostLedgerHook:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    return CostLedgerHook()


@pytest.mark.parametrize(
    ("key_ended_at", "cause", "asked_ended_at", "found"),
    [
        (None, "killed", None, "killed"),  # billed still stopping: keyed by the job's name
        (None, "unwatched", 1_700_000_000.0, "unwatched"),
        (1_700_000_000.0, "killed", 1_700_000_000.0, "killed"),  # billed at the end the kill saw
        (1_700_000_000.0, "killed", None, None),  # the end's key is looked up only where the end is known
        (None, "success", None, None),  # an entry of the job, but no stop's
    ],
)
def test_the_earlier_stops_cause_is_read_by_the_jobs_name_or_its_end(
    hook: CostLedgerHook,
    ledger: Ledger,
    key_ended_at: float | None,
    cause: str,
    asked_ended_at: float | None,
    found: str | None,
) -> None:
    legacy = key_ended_at is None
    assert ledger.record(_stop_entry(attempt_key(IDENTITY, "job-1", key_ended_at, legacy=legacy), cause))
    said = earlier_stop_cause(hook, IDENTITY, "job-1", ended_at=asked_ended_at, log=LOG, otherwise="by x")
    assert said == found
    other_job = earlier_stop_cause(hook, IDENTITY, "job-2", ended_at=asked_ended_at, log=LOG, otherwise="x")
    assert other_job is None


def test_a_ledger_that_cannot_be_read_says_nothing_and_what_the_end_is_recorded_as(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Unreachable:
        def get_conn(self) -> Any:
            raise ConnectionError("ledger down")

    with caplog.at_level(logging.WARNING):
        said = earlier_stop_cause(
            Unreachable(), IDENTITY, "job-1", ended_at=None, log=LOG, otherwise="as stopped at max_usd"
        )
    assert said is None
    assert (
        "cannot read whether an earlier try stopped job job-1 (ConnectionError: ledger down): its end is "
        "recorded as stopped at max_usd"
    ) in caplog.text


def test_a_stop_entry_of_another_run_of_the_name_is_not_this_runs_stop(
    hook: CostLedgerHook, ledger: Ledger
) -> None:
    # A cleared task's new try took the name; the stop entry under the name's key is the earlier run's (a
    # kill of it): read as this run's stop, the run's end was recorded by that cause (a label only).
    name_key = attempt_key(IDENTITY, "job-1", legacy=True)
    earlier = _stop_entry(name_key, "killed")
    note = "attempt 1, job job-1 on kubernetes, 60.0 s billed, run {}: killed"
    assert ledger.record(replace(earlier, note=note.format("uid-a")))

    def said(run_token: str) -> str | None:
        return earlier_stop_cause(
            hook, IDENTITY, "job-1", ended_at=None, log=LOG, otherwise="x", run_token=run_token
        )

    assert said("uid-b") is None
    assert said("uid-a") == "killed"
    assert said("") == "killed"  # a run its state marks not (an older release's): as before
    # This run's own stop, keyed by its run where the earlier run held the name's key.
    by_run = attempt_key(IDENTITY, "job-1", legacy=True, run_token="uid-b")
    own = _stop_entry(by_run, "unwatched")
    assert ledger.record(replace(own, note=note.format("uid-b")))
    assert said("uid-b") == "unwatched"
