"""What the wait says as it stops a job at what is left of ``max_usd``: a followed job, or a new run.

A retry whose followed job went before its submit starts a new run under the name (6fd7051f), still
stopped by the poll at what the cap allows (45b6be9e): its stop said "which an earlier try submitted" of a
job this try submitted (5955a203 said it only where the state has a followed record).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from remote_support import ScriptedPolls

from costaware.triggers.remote_training import RemoteTrainingJobTrigger

SUBMITTED = datetime(2026, 11, 26, 9, tzinfo=UTC)


def _said_at_the_cap_stop(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    status: Any,
    *,
    cap_seconds: int,
    followed: dict[str, Any] | None,
) -> list[str]:
    """The lines of a wait of job "j", stopped by its polls at ``cap_seconds``, that name max_usd."""
    from attempt_states import CAPTURED  # tests/support/

    import costaware.adapters.compute.base as compute
    from costaware.training.attempts import AttemptState
    from costaware.training.plan import RemotePlan

    plan = RemotePlan.from_json({**CAPTURED, "backend": "batch", "backend_options": {}})
    state = AttemptState(plan=plan).submitted(
        job_id="j", market="spot", submitted_at=SUBMITTED.isoformat(), stop_after_seconds=cap_seconds,
        stop_by_poll=True, followed=followed,
    )  # fmt: skip
    listing = ScriptedPolls([status])
    monkeypatch.setattr(compute, "open_backend", lambda name, options: listing)
    watch = RemoteTrainingJobTrigger(
        backend="batch", backend_options={}, job_id="j", state=state.to_json(), poll_interval=300
    )
    capsys.readouterr()
    assert watch.poll_tolerant(SUBMITTED + timedelta(seconds=700)) is None
    assert listing.stops == ["j"]
    return [line for line in capsys.readouterr().out.splitlines() if "left of max_usd" in line]


#: A followed job's record, as the retry found it: ``followed``; a new run has none.
FOLLOWED = {
    "job": {"job_id": "j", "state": "running", "market": "spot", "billable_seconds": 100.0},
    "seen_at": (SUBMITTED - timedelta(seconds=300)).isoformat(),
}


@pytest.mark.parametrize(
    ("followed", "whose"),
    [(FOLLOWED, "job j, which an earlier try submitted, "), (None, "job j ")],
    ids=["followed", "new run"],
)
def test_a_cap_stop_of_a_running_job_says_an_earlier_try_submitted_it_only_where_one_did(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], followed: Any, whose: str
) -> None:
    from costaware.adapters.compute.base import JobState, JobStatus

    ran = JobStatus(job_id="j", state=JobState.RUNNING, market="spot", billable_seconds=600.0)
    said = _said_at_the_cap_stop(monkeypatch, capsys, ran, cap_seconds=600, followed=followed)
    assert len(said) == 1, said
    assert (
        f"{whose}has run 600 s, what is left of max_usd now buys: stopping it (it checkpoints in its grace "
        "period)" in said[0]
    )
    assert followed is not None or "earlier try" not in said[0]


@pytest.mark.parametrize(
    ("followed", "whose"),
    [(FOLLOWED, "job j, which an earlier try submitted, "), (None, "job j ")],
    ids=["followed", "new run"],
)
def test_a_cap_stop_before_a_job_starts_says_an_earlier_try_submitted_it_only_where_one_did(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], followed: Any, whose: str
) -> None:
    # Under MIN_CAPPED_SECONDS left: stopped at once, waiting or not.
    from costaware.adapters.compute.base import JobState, JobStatus

    waiting = JobStatus(job_id="j", state=JobState.PENDING, market="spot")
    said = _said_at_the_cap_stop(monkeypatch, capsys, waiting, cap_seconds=10, followed=followed)
    assert len(said) == 1, said
    assert (
        f"{whose}is pending and what is left of max_usd buys no run: stopping it before it starts" in said[0]
    )
    assert followed is not None or "earlier try" not in said[0]
