"""What ``max_usd`` lets the next remote attempt run, at which price, and what the refusal says."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from attempt_states import CAPTURED  # tests/support/

from costaware.training.attempt_effects import (
    cap_rate,
    cap_spent_message,
    capped_seconds,
    job_request,
    money_left,
)
from costaware.training.attempts import NO_CHECKPOINT, Attempt, AttemptState
from costaware.training.plan import RemotePlan
from costaware.training.plan.remote_plan import Billing

PLAN = replace(RemotePlan.from_json(CAPTURED), on_demand_usd_per_hour="2.00", grace_seconds=10.0)
NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)


def billed(usd: str) -> Attempt:
    return Attempt(1, "j-a1", "spot", "m5.large", 600.0, usd, "preemption", "interrupted")


def capped(cap: str | None, *, spent: str | None = None, **plan: object) -> AttemptState:
    return AttemptState(
        plan=replace(PLAN, max_usd=cap, billing=None, deadline=None, **plan),  # type: ignore[arg-type]
        spot_usd_per_hour="0.50",
        attempts=(billed(spent),) if spent else (),
    )


def test_what_is_left_buys_seconds_at_the_attempts_price_less_its_grace_period() -> None:
    state = capped("1.00", spent="0.25")
    assert money_left(state) == Decimal("0.75")
    # Spot billed at its starting price: $0.75 at $0.50/hour is 5,400 s, the notice 10 s earlier.
    assert capped_seconds(state, cap_rate(state, "spot")) == 5390
    # On-demand at $2.00/hour: 1,350 s.
    assert capped_seconds(state, cap_rate(state, "on_demand")) == 1340
    assert capped_seconds(capped(None), cap_rate(capped(None), "spot")) is None  # no cap, no limit


def test_the_stop_notice_comes_before_the_backends_own_kill_not_only_the_grace() -> None:
    # The grace alone let a capped attempt bill past max_usd: the pod is killed 10 s after it, SageMaker
    # ends a job 120 s after its SIGTERM, Batch at its stop timeout.
    state = capped("1.00", spent="0.25")  # $0.75 at $0.50/hour on spot: 5,400 s
    pod = replace(state, command=("python", "train.py"), plan=replace(state.plan, backend="kubernetes"))
    assert capped_seconds(pod, cap_rate(pod, "spot")) == 5400 - 20
    batch = replace(
        state, plan=replace(state.plan, backend="batch", backend_options={"stop_timeout_seconds": 60})
    )
    assert capped_seconds(batch, cap_rate(batch, "spot")) == 5400 - 60
    sagemaker = replace(state, plan=replace(state.plan, backend="sagemaker"))
    # ... and SageMaker spot at the on-demand rate it bills: $0.75 at $2.00/hour is 1,350 s.
    assert capped_seconds(sagemaker, cap_rate(sagemaker, "spot")) == 1350 - 120


def test_a_spot_price_that_may_rise_and_several_instances_are_bounded() -> None:
    state = capped("1.00")
    # Billed at the price in force over its run (prices given): bounded at on-demand, or at the
    # on-demand price of the zone's region when it moved there.
    billing = replace(state, plan=replace(state.plan, billing=Billing(prices="spot.csv")))
    assert cap_rate(billing, "spot") == Decimal("2.00")
    assert cap_rate(billing, "spot", Decimal("2.40")) == Decimal("2.40")
    # SageMaker bills every instance of a job: 4 x $0.50.
    many = capped("1.00", backend_options={"instance_count": 4})
    assert cap_rate(many, "spot") == Decimal("2.00")


def test_the_refusal_says_what_was_billed_and_where_the_checkpoint_is() -> None:
    state = capped("0.25", spent="0.249")
    said = cap_spent_message(state, "on_demand", cap_rate(state, "on_demand"))
    assert said.startswith(
        "max_usd $0.25 cannot start another attempt: 1 attempt(s) billed $0.249, which leaves $0.001, less"
    )
    assert f"the newest checkpoint stays at {PLAN.checkpoint_uri}: raise max_usd" in said
    # Where the marker was read, the message says which step a cleared task resumes from, or that none was
    # pushed and it trains again from the start.
    rate = cap_rate(state, "on_demand")
    said = cap_spent_message(state, "on_demand", rate, newest_step=40)
    assert f"the newest checkpoint (step 40) stays at {PLAN.checkpoint_uri}: raise max_usd" in said
    said = cap_spent_message(state, "on_demand", rate, newest_step=NO_CHECKPOINT)
    assert said.endswith(
        f"no checkpoint was pushed to {PLAN.checkpoint_uri}: raise max_usd and clear the task to train again "
        "from the start"
    )
    # A cap lowered below what the attempts billed (a retry the budgets have no room for) says by how much.
    over = cap_spent_message(capped("0.00", spent="0.3"), "on_demand", rate)
    assert "1 attempt(s) billed $0.30, $0.30 more than it; nothing was registered" in over
    first = cap_spent_message(capped("0.01"), "on_demand", Decimal("2.00"))
    assert first.endswith("raise max_usd to at least $0.038889; nothing was started")  # 70 s at $2.00/hour


@pytest.mark.parametrize(("stop_after", "runtime"), [(None, 86_400), (600, 600), (10**9, 86_400)])
def test_the_cap_also_bounds_the_backends_runtime_limit(stop_after: int | None, runtime: int) -> None:
    request = job_request(capped("1.00"), "on_demand", NOW, stop_after_seconds=stop_after)
    assert request.max_runtime_seconds == runtime and request.stop_after_seconds == stop_after


def test_a_retry_misses_in_its_state_only_the_earlier_runs_of_a_job_that_ran_twice() -> None:
    from costaware.training.attempt_holds import EarlierAttempt, billed_not_followed

    one, two, three = Decimal("0.1"), Decimal("0.02"), Decimal("0.003")
    a1, a2 = EarlierAttempt(1, "j-a1", one), EarlierAttempt(2, "j-a2", two)
    assert billed_not_followed([]) == 0  # a first try
    assert billed_not_followed([a1, a2]) == 0
    # a1 ran twice under its name: the retry follows its last run only
    assert billed_not_followed([a1, EarlierAttempt(2, "j-a2", three), EarlierAttempt(1, "j-a1", two)]) == one
    assert billed_not_followed([a1, EarlierAttempt(None, None, three)]) == 0  # a note that names no job


def test_an_attempt_entrys_note_names_its_attempt_and_its_job() -> None:
    from costaware.training.remote import attempt_of_note, job_of_attempt_note

    note = "attempt 12, job train-380335d228-a12 on batch (id 3f2c), spot m5.large: preemption"
    assert (attempt_of_note(note), job_of_attempt_note(note)) == (12, "train-380335d228-a12")
    assert attempt_of_note("killed before it ended") is None


def test_an_attempt_in_another_region_saves_against_that_regions_on_demand_price() -> None:
    from costaware.training.attempt_effects import billed_attempt
    from costaware.training.attempts import Current

    state = replace(capped(None), current=Current(attempt=1, job_id="j-a1", market="spot", zone="eu-west-1a"))
    job = {
        "job_id": "j-a1",
        "market": "spot",
        "instance_type": "m5.large",
        "billable_seconds": 3600.0,
        "state": "succeeded",
    }
    entry, _ = billed_attempt(state, job, "success", Decimal("0.50"))
    assert (entry.region, entry.on_demand_usd) == ("eu-west-1", Decimal("2.00"))  # the plan's, as before
    entry, _ = billed_attempt(state, job, "success", Decimal("0.50"), on_demand_usd_per_hour=Decimal("2.40"))
    assert (entry.usd, entry.on_demand_usd) == (Decimal("0.50"), Decimal("2.40"))  # savings in eu-west-1


@pytest.mark.parametrize(("written", "sized"), [(119.5, 120), (0.5, 1), (60.2, 61)])
def test_an_older_pods_grace_sizes_its_stop_at_its_most_with_a_warning(
    written: float, sized: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Up to ea3be43c a pod took any termination_grace_seconds in (0, 120) and ran with int() of it: its
    # stop and bill (backend_stop_seconds) raised ConfigurationError. Sized on the next whole second up.
    import logging

    from costaware.training.attempt_effects import backend_stop_seconds

    options = {"termination_grace_seconds": written}
    with caplog.at_level(logging.WARNING):
        stop = backend_stop_seconds("kubernetes", 0.0, options, is_command=False)
    assert stop == float(sized)
    assert f"termination_grace_seconds {written!r}" in caplog.text


@pytest.mark.parametrize("written", [120, 150.0, "119.5", 0, True])
def test_a_pod_grace_no_release_could_have_made_is_still_refused(written: object) -> None:
    # Every release refused a grace outside (0, 120) at the pod's render, and text failed its comparison.
    from costaware.core.errors import ConfigurationError
    from costaware.training.attempt_effects import backend_stop_seconds

    with pytest.raises(ConfigurationError, match="termination_grace_seconds must be a whole number from 1"):
        backend_stop_seconds("kubernetes", 0.0, {"termination_grace_seconds": written}, is_command=False)
