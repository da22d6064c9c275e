"""The remote training's plan (``make_plan``), its pauses (``training.pauses``), ``TrainingSpec``: pure."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.spot_decision import SpotDecision
from costaware.training.attempts import Attempt, AttemptState
from costaware.training.entrypoint import job_from_spec
from costaware.training.pauses import latest_resume, price_watch, work_left
from costaware.training.plan import (
    Billing,
    PlanArguments,
    PriceWatch,
    RemotePlan,
    job_seconds_left,
    make_plan,
    wait_limit,
)
from costaware.training.spec import TrainingSpec

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
DEADLINE = NOW + timedelta(hours=10)
DECISION: dict[str, Any] = {
    "market": "spot",
    "usd_per_hour": "0.31",
    "on_demand_usd_per_hour": "0.96",
    "instance_type": "m5.2xlarge",
    "region": "us-west-2",
    "availability_zone": "us-west-2b",
    "expected_runtime_hours": "2",
    "priority": "normal",
    "estimated_usd": "0.62",
    "deadline": DEADLINE.isoformat(),
    "latest_start": (DEADLINE - timedelta(hours=2, minutes=5)).isoformat(),
}


def plan_of(args: PlanArguments, decision: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    given: dict[str, Any] = {
        "identity": {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1},
        "base_name": "t-0123456789",
        "checkpoint_uri": "s3://b/ckpt/d/t/r/-1",
        "model_store": "s3://b/models",
        "spec_uri": "",
        "result_uri": "",
        "job_env": {},
        "tags": {"team": "ml"},
        **kwargs,
    }
    written = DECISION if decision is None else decision
    return make_plan(args, SpotDecision.from_xcom(written) if written else None, **given)


def test_the_decision_fills_what_the_arguments_leave_out() -> None:
    start = plan_of(PlanArguments(backend="batch", aws_conn_id="aws_prod"))
    plan = start.plan
    assert (plan.first_market, plan.instance_type, plan.region) == ("spot", "m5.2xlarge", "us-west-2")
    assert (plan.on_demand_usd_per_hour, plan.estimated_usd, start.spot_usd_per_hour) == (
        "0.96",
        "0.62",
        "0.31",
    )
    assert plan.deadline == DEADLINE and start.latest_start == DEADLINE - timedelta(hours=2, minutes=5)
    assert plan.backend_options == {"aws_conn_id": "aws_prod"}  # an AWS backend reaches AWS through it
    assert plan.watch is None and plan.billing is None


def test_arguments_win_over_the_decision_and_templates_rendered_empty_do_not() -> None:
    args = PlanArguments(
        market="on_demand",
        instance_type="c5.xlarge",
        region="None",  # a template that rendered nothing
        on_demand_usd_per_hour="",
        deadline=(NOW + timedelta(hours=3)).isoformat(),
        aws_conn_id="aws_prod",
    )
    plan = plan_of(args, list_price=lambda instance_type, region: Decimal("0.17")).plan
    assert (plan.first_market, plan.instance_type, plan.region) == ("on_demand", "c5.xlarge", "us-west-2")
    assert plan.on_demand_usd_per_hour == "0.17"  # c5.xlarge's, not the window's m5.2xlarge's 0.96
    assert plan.deadline == NOW + timedelta(hours=3)
    assert plan.backend_options == {}  # the local backend needs no AWS connection


@pytest.mark.parametrize("rendered", [" ", "None ", " null"])
@pytest.mark.parametrize(
    "field",
    ["market", "instance_type", "region", "spot_usd_per_hour", "on_demand_usd_per_hour", "image", "deadline"],
)
def test_an_argument_rendered_blank_with_spaces_falls_back_to_the_decision(field: str, rendered: str) -> None:
    # A rendered " " or "None " was read as given: a price or market " " failed the task, a region " " was
    # another job than the window's, an image " " was submitted. The bill reads all of them as not given.
    start = plan_of(PlanArguments(**{field: rendered}))
    plan = start.plan
    assert (plan.first_market, plan.instance_type, plan.region, plan.image) == (
        "spot",
        "m5.2xlarge",
        "us-west-2",
        None,
    )
    assert (plan.on_demand_usd_per_hour, start.spot_usd_per_hour, plan.deadline) == ("0.96", "0.31", DEADLINE)


def test_an_on_demand_start_the_spot_window_chose_says_why() -> None:
    # The window's reason goes to attempt 1's ledger note; a market given, or the default, is no choice.
    said = {**DECISION, "market": "on_demand", "reason": "spot price 0.45 above your maximum 0.40"}
    plan = plan_of(PlanArguments(), said).plan
    assert plan.first_market_reason == "the spot window's decision: spot price 0.45 above your maximum 0.40"
    assert RemotePlan.from_json(plan.to_json()) == plan
    assert plan_of(PlanArguments(market="on_demand"), said).plan.first_market_reason == ""
    bare = PlanArguments(instance_type="m5.large", on_demand_usd_per_hour="0.096")
    assert plan_of(bare, {}).plan.first_market_reason == ""  # no decision: on-demand by default
    assert plan_of(PlanArguments()).plan.first_market_reason == ""  # on spot
    assert "first_market_reason" not in plan_of(PlanArguments()).plan.to_json()


def test_the_list_price_is_asked_only_when_nobody_gave_one() -> None:
    asked: list[tuple[str, str]] = []

    def list_price(instance_type: str, region: str) -> Decimal:
        asked.append((instance_type, region))
        return Decimal("0.17")

    assert plan_of(PlanArguments(), list_price=list_price).plan.on_demand_usd_per_hour == "0.96"
    assert asked == []
    decision = {k: v for k, v in DECISION.items() if k != "on_demand_usd_per_hour"}
    assert plan_of(PlanArguments(), decision, list_price=list_price).plan.on_demand_usd_per_hour == "0.17"
    assert asked == [("m5.2xlarge", "us-west-2")]


def test_another_instance_type_or_region_than_the_windows_is_not_billed_at_the_windows_prices() -> None:
    # remote_retrain's remote_instance_type=m5.xlarge behind a window on c5.4xlarge: the m5.xlarge attempt
    # was capped and billed at the c5.4xlarge's on-demand $0.68/hour instead of its own.
    asked: list[tuple[str, str]] = []

    def list_price(instance_type: str, region: str) -> Decimal:
        asked.append((instance_type, region))
        return {"m5.xlarge": Decimal("0.192"), "m5.2xlarge": Decimal("0.40")}[instance_type]

    on_demand = plan_of(PlanArguments(market="on_demand", instance_type="m5.xlarge"), list_price=list_price)
    assert on_demand.plan.on_demand_usd_per_hour == "0.192" and asked == [("m5.xlarge", "us-west-2")]
    # The window's $0.62 estimate is its m5.2xlarge's ($0.96/hour): a cheaper m5.xlarge may run longer, so
    # the hold stays $0.62; a dearer type is held at the ratio of the on-demand prices.
    assert on_demand.plan.estimated_usd == "0.62"
    dearer = plan_of(
        PlanArguments(market="on_demand", instance_type="m5.xlarge", on_demand_usd_per_hour="1.92"),
        list_price=list_price,
    )
    assert dearer.plan.estimated_usd == "1.240000"  # $0.62 x 1.92 / 0.96
    elsewhere = plan_of(PlanArguments(market="on_demand", region="us-east-1"), list_price=list_price)
    assert elsewhere.plan.on_demand_usd_per_hour == "0.40"  # m5.2xlarge in us-east-1, not us-west-2's
    with pytest.raises(ConfigurationError) as refused:
        plan_of(PlanArguments(instance_type="m5.xlarge"), list_price=list_price)  # on spot, as decided
    assert str(refused.value) == (
        "market is spot but the spot window's price $0.31/hour is for m5.2xlarge in us-west-2, not m5.xlarge "
        "in us-west-2: pass spot_usd_per_hour for m5.xlarge, or give the SpotWindowSensor that instance type"
    )
    given = PlanArguments(
        instance_type="ml.m5.xlarge", spot_usd_per_hour="0.069", on_demand_usd_per_hour="0.23"
    )
    start = plan_of(given, list_price=list_price)
    assert (start.spot_usd_per_hour, start.plan.on_demand_usd_per_hour) == ("0.069", "0.23")
    same = plan_of(PlanArguments(instance_type="m5.2xlarge", region="us-west-2"), list_price=list_price)
    assert (same.spot_usd_per_hour, same.plan.on_demand_usd_per_hour) == ("0.31", "0.96")


@pytest.mark.parametrize(
    ("args", "decision", "message"),
    [
        (PlanArguments(backend="ec2"), DECISION, "unknown compute backend 'ec2': use one of"),
        (
            PlanArguments(backend="{{ params.backend }}"),
            DECISION,
            "unknown compute backend '{{ params.backend }}': use one of",
        ),
        (PlanArguments(market="cheap"), DECISION, "market 'cheap' is not one of"),
        (PlanArguments(), {}, "no instance type: pass instance_type"),
        (PlanArguments(market="spot", instance_type="m5.large"), {}, "no on-demand price of m5.large"),
        (
            PlanArguments(market="spot", instance_type="m5.large", on_demand_usd_per_hour="0.1"),
            {},
            "market is spot but no spot price is known",
        ),
        (PlanArguments(pause_on_price=True), DECISION, "pause_on_price needs spot prices"),
        (
            PlanArguments(pause_on_price=True, prices="live", expected_runtime_hours="-1"),
            {k: v for k, v in DECISION.items() if k != "expected_runtime_hours"},
            "pause_on_price needs the expected runtime, got '-1'",
        ),
        (
            PlanArguments(pause_on_price=True, prices="live"),
            {k: v for k, v in DECISION.items() if k != "deadline"},
            "pause_on_price needs a deadline",
        ),
        (PlanArguments(pause_on_price=True, prices="live", priority="urgent"), DECISION, "priority 'urgent'"),
        (  # everything missing, said at once (it took three failed runs to learn before)
            PlanArguments(pause_on_price=True),
            {k: v for k, v in DECISION.items() if k not in ("deadline", "expected_runtime_hours")},
            "pause_on_price needs spot prices: pass prices='live' or the path of a recorded price file; and "
            "the expected runtime, got None: pass expected_runtime_hours or a spot decision that has one "
            r"\(hours > 0\); and a deadline",
        ),
        # Each attempt is billed at these: refused before a job runs (before, "$1.00" failed the task after
        # the job had run, with no ledger entry for it, and "-1" billed a negative cost).
        (
            PlanArguments(on_demand_usd_per_hour="-1"),
            DECISION,
            "on_demand_usd_per_hour must be zero or more USD",
        ),
        (
            PlanArguments(on_demand_usd_per_hour="1,00 EUR"),
            DECISION,
            "on_demand_usd_per_hour '1,00 EUR' is not a number of USD",
        ),
        (
            PlanArguments(on_demand_usd_per_hour="1 EUR"),
            DECISION,
            "on_demand_usd_per_hour must be a number of USD",
        ),
        (
            PlanArguments(spot_usd_per_hour="-0.5"),
            DECISION,
            "spot_usd_per_hour must be zero or more USD, got",
        ),
        # A $0 price billed nothing and let max_usd cap nothing: the attempts ran uncapped.
        (
            PlanArguments(on_demand_usd_per_hour="0"),
            DECISION,
            "on_demand_usd_per_hour must be more than \\$0",
        ),
        (PlanArguments(spot_usd_per_hour="$0"), DECISION, "spot_usd_per_hour must be more than \\$0 an hour"),
        (
            PlanArguments(deadline=NOW.isoformat()),
            {
                k: v
                for k, v in DECISION.items()
                if k not in ("deadline", "latest_start", "expected_runtime_hours")
            },
            "deadline 2026-11-24T12:00:00\\+00:00 is given without latest_start: give latest_start",
        ),
        (  # it read "given without latest_start ... or expected_runtime_hours", which was given
            PlanArguments(deadline=NOW.isoformat(), expected_runtime_hours="-1"),
            {
                k: v
                for k, v in DECISION.items()
                if k not in ("deadline", "latest_start", "expected_runtime_hours")
            },
            "expected_runtime_hours must be a number of hours > 0 such as '2.5', got '-1'",
        ),
        (
            PlanArguments(deadline=NOW.isoformat(), latest_start=(NOW + timedelta(hours=1)).isoformat()),
            DECISION,
            "latest_start 2026-11-24T13:00:00\\+00:00 is after the deadline",
        ),
        (  # failed the task at the move to us-west-2c, after a paid preemption
            PlanArguments(
                backend="batch",
                backend_options={"spot_queues": {"us-west-2a": "q-a", "us-west-2b": "q-b"}},
                availability_zones=("us-west-2a", "us-west-2c"),
            ),
            DECISION,
            "availability_zones 'us-west-2c' have no queue in backend_options spot_queues",
        ),
        (PlanArguments(priority="high"), DECISION, "priority 'high' is unknown; choose one of"),
        (
            PlanArguments(expected_runtime_hours="2h"),
            DECISION,
            "expected_runtime_hours must be a number of hours",
        ),
        (
            PlanArguments(expected_runtime_hours="0"),
            DECISION,
            "expected_runtime_hours must be a number of hours",
        ),
    ],
)
def test_bad_arguments_are_named(args: PlanArguments, decision: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        plan_of(args, decision)


def test_a_deadline_given_alone_keeps_an_on_demand_fallback() -> None:
    # Given without latest_start, a spot attempt waited for capacity past the deadline, for ever.
    later = DEADLINE + timedelta(hours=5)
    start = plan_of(PlanArguments(deadline=later.isoformat()))  # the decision's lead: 2 h 05 min
    assert start.latest_start == later - timedelta(hours=2, minutes=5)
    bare = {k: v for k, v in DECISION.items() if k not in ("deadline", "latest_start")}
    start = plan_of(PlanArguments(deadline=later.isoformat(), expected_runtime_hours="3"), bare)
    assert start.latest_start == later - timedelta(hours=3)


def test_prices_written_with_a_dollar_sign_are_read_as_usd() -> None:
    start = plan_of(PlanArguments(on_demand_usd_per_hour="$1.00", spot_usd_per_hour=" $0.25 "))
    assert (start.plan.on_demand_usd_per_hour, start.spot_usd_per_hour) == ("1.00", "0.25")
    assert Decimal(start.plan.on_demand_usd_per_hour) == Decimal("1")  # what billing reads


def test_pausing_and_billing_plans_come_from_the_prices() -> None:
    args = PlanArguments(
        pause_on_price=True, prices="prices.csv", restart_overhead_minutes=7, aws_conn_id="a"
    )
    plan = plan_of(args).plan
    assert plan.watch == PriceWatch(
        prices="prices.csv",
        runtime_hours="2",
        priority="normal",
        restart_overhead_minutes=7.0,
        history_days=14,
        availability_zone="us-west-2b",
        aws_conn_id="a",
        region="us-west-2",
    )
    assert plan.billing == Billing(prices="prices.csv", availability_zone="us-west-2b")
    # SageMaker bills its own ml.* spot prices: no EC2 series to bill from.
    assert plan_of(replace(args, backend="sagemaker")).plan.billing is None


def test_a_plan_round_trips_through_json() -> None:
    plan = plan_of(PlanArguments(pause_on_price=True, prices="live", image="img:1", grace_seconds=30)).plan
    assert RemotePlan.from_json(plan.to_json()) == plan


def paused_state(ran_seconds: list[float], *, exact: bool = True) -> AttemptState:
    """``exact``: the backend knew each attempt's run exactly (a local job, SageMaker's transitions)."""
    plan = plan_of(PlanArguments(pause_on_price=True, prices="live", checkpoint_every_seconds=300.0)).plan
    attempts = tuple(
        Attempt(
            n + 1,
            f"j-a{n + 1}",
            "spot",
            "m5.2xlarge",
            s,
            "0.01",
            "paused",
            "",
            trained_runs_seconds=(s,) if exact else None,
        )
        for n, s in enumerate(ran_seconds)
    )
    return AttemptState(plan=plan, spot_usd_per_hour="0.31", attempts=attempts)


def test_the_work_left_sets_the_latest_resume_and_the_price_watch() -> None:
    state = paused_state([3600.0])  # one hour run; 300 s restart + 300 s interval lost: 3000 s kept
    left = work_left(state)
    assert left == Decimal("2") - Decimal("0.833333")
    # normal priority: deadline - work left - one restart (5 minutes)
    assert latest_resume(state, left) == DEADLINE - timedelta(hours=float(left), minutes=5)
    watch = price_watch(state, "resume", poll_interval=30)
    assert watch["mode"] == "resume" and watch["remaining_hours"] == str(left)
    assert watch["latest_resume"] == latest_resume(state, left).isoformat()
    assert watch["observe"]["ttl_seconds"] == 300.0 and watch["observe"]["availability_zone"] == "us-west-2b"
    assert watch["on_demand_usd_per_hour"] == "0.96"
    # An attempt that is ending counts too, before it is recorded.
    assert work_left(state, ended={"billable_seconds": 3600.0}) == Decimal("0.333333")  # 2 h - 2 x 3000 s
    # Billed only (Batch: its bill may count a submit's copies): it weighs the pause, not the deadline.
    billed = paused_state([3600.0], exact=False)
    watch = price_watch(billed, "resume", poll_interval=30)
    assert watch["remaining_hours"] == str(left)
    assert watch["latest_resume"] == latest_resume(billed, Decimal(2)).isoformat()


def test_a_plan_without_a_watch_has_no_price_watch() -> None:
    state = replace(paused_state([]), plan=plan_of(PlanArguments()).plan)
    with pytest.raises(ValueError, match="pause_on_price is off"):
        price_watch(state, "pause", poll_interval=30)


def test_an_attempt_may_run_until_the_deadline_and_the_fallback_until_it_finishes() -> None:
    plan = plan_of(PlanArguments()).plan
    assert job_seconds_left(plan, NOW, "spot") == 10 * 3600
    assert job_seconds_left(plan, DEADLINE - timedelta(seconds=5), "spot") == 60  # never below a minute
    assert job_seconds_left(replace(plan, deadline=None), NOW, "spot") == 86400
    # On-demand, or past the deadline: at least a day. A past deadline gave SageMaker, Batch and Kubernetes
    # jobs 60 s, so the on-demand fallback was killed, billed and retried without ever finishing.
    assert job_seconds_left(plan, NOW, "on_demand") == 86400
    assert job_seconds_left(plan, DEADLINE + timedelta(hours=1), "on_demand") == 86400
    assert job_seconds_left(plan, DEADLINE + timedelta(hours=1), "spot") == 86400
    # A deadline in 2099 asked SageMaker for 72 years: capped at its default quota of 5 days.
    assert job_seconds_left(plan, DEADLINE - timedelta(days=365), "spot") == 5 * 86400


def test_the_wait_on_an_attempt_outlasts_the_attempt_s_own_time_limit() -> None:
    # The on-demand fallback near the deadline runs up to a day, and the wait timed out an hour past the
    # deadline: the task failed with the paid job running on, unwatched and unbilled.
    plan = plan_of(PlanArguments()).plan
    grace = timedelta(seconds=float(plan.grace_seconds))
    near = DEADLINE - timedelta(minutes=30)
    assert wait_limit(plan, near, "on_demand") == timedelta(days=1) + grace + timedelta(hours=1)
    assert wait_limit(plan, NOW, "spot") == timedelta(hours=11) + grace  # the deadline's hour and more
    assert wait_limit(replace(plan, deadline=None), NOW, "spot") == timedelta(days=1, hours=1) + grace
    # Paused (no job): until an hour past the deadline, as before.
    assert wait_limit(plan, NOW, None) == timedelta(hours=11)
    assert wait_limit(replace(plan, deadline=None), NOW, None) == timedelta(days=1)


# -- TrainingSpec ------------------------------------------------------------------------------------------

SPEC = TrainingSpec(
    data_path="s3://b/data/",
    label_column="delay",
    feature_columns=("distance", "hour"),
    model_store="s3://b/models",
    checkpoint_store="s3://b/ckpt",
    new_data_path="s3://b/data/day-2.parquet",
    label_threshold=15.0,
    trainer="sklearn-sgd",
    trainer_params={"epochs": 3},
    policy="drift",
    policy_params={"max_warm_steps": 4},
    force_full=True,
    checkpoint_every_seconds=60.0,
    checkpoint_every_steps=2,
    seed=7,
)


def test_the_remote_job_trains_the_same_retrain_job_as_the_worker() -> None:
    run = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}
    spec_file = SPEC.spec_file(
        checkpoint_key="d/t/r/-1",
        run=run,
        storage_options={"endpoint_url": "http://s3"},
        result_uri="s3://b/r",
    )
    in_worker = SPEC.retrain_job(
        checkpoint_key="d/t/r/-1", run=run, storage_options={"endpoint_url": "http://s3"}
    )
    assert job_from_spec(spec_file) == in_worker
    assert in_worker.trainer_params == {"seed": 7, "epochs": 3}  # the seed reaches the trainer
    assert replace(SPEC, trainer_params={"seed": 1}).retrain_job(
        checkpoint_key="k", run=run, storage_options={}
    ).trainer_params == {"seed": 1}  # trainer_params' own seed wins


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"feature_columns": ()}, "feature_columns is empty"),
        ({"feature_columns": ("delay",)}, "label column 'delay' is also a feature"),
        (
            {"checkpoint_every_seconds": None, "checkpoint_every_steps": None},
            "set checkpoint_every_seconds or checkpoint_every_steps",
        ),
        (
            {"checkpoint_every_seconds": float("nan")},
            "checkpoint_every_seconds must be a number > 0",
        ),
        ({"checkpoint_every_steps": True}, "checkpoint_every_steps must be an integer >= 1"),
        ({"data_path": " "}, "data_path rendered empty"),
        ({"model_store": ""}, "model_store rendered empty"),
    ],
)
def test_a_bad_training_spec_is_named(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        replace(SPEC, **changes)


def test_a_policy_object_cannot_travel_to_a_remote_job() -> None:
    with pytest.raises(ConfigurationError, match="a remote job gets it by name"):
        replace(SPEC, policy=object()).spec_file(
            checkpoint_key="k", run={}, storage_options={}, result_uri=""
        )


@pytest.mark.parametrize(
    ("args", "band", "seconds", "why"),
    [
        # the decision's 2 h runtime, 15-20%: 2 h / -ln(0.8) = 32,266 s between interruptions, so
        # sqrt(2 x 30 x 32,266) = 1,391 s
        (PlanArguments(checkpoint_every_seconds="auto"), "15-20%", 1391.4, "over the 2 h expected runtime"),
        (
            PlanArguments(checkpoint_every_seconds="auto", expected_runtime_hours="0.25"),
            "<5%",
            900.0,
            "bounded to the expected runtime: 900 s",
        ),
        (PlanArguments(checkpoint_every_seconds="auto", market="on_demand"), "<5%", 300.0, "on on_demand"),
        # no entry: >20% taken at 50 %, 2 h / -ln(0.5) = 10,387 s, so sqrt(2 x 30 x 10,387) = 789 s
        (PlanArguments(checkpoint_every_seconds="auto"), None, 789.4, "no spot advisor entry"),
        # an hour's cap is what a kill without notice may lose, however rare interruptions are
        (
            PlanArguments(checkpoint_every_seconds="auto", expected_runtime_hours="48"),
            "<5%",
            3600.0,
            "bounded to the 3600 s cap",
        ),
        (PlanArguments(checkpoint_every_seconds=120.0), "<5%", 120.0, None),
    ],
)
def test_auto_checkpoint_interval_comes_from_the_advisor_band(
    args: PlanArguments, band: str | None, seconds: float, why: str | None
) -> None:
    from costaware.core.errors import PriceNotFoundError

    asked: list[tuple[str, str]] = []

    def interruption_band(instance_type: str, region: str) -> str:
        asked.append((instance_type, region))
        if band is None:
            raise PriceNotFoundError(f"the spot advisor has no entry for {instance_type} in {region}")
        return band

    start = plan_of(args, interruption_band=interruption_band)
    assert start.plan.checkpoint_every_seconds == pytest.approx(seconds, abs=0.1)
    if why is None:
        assert start.checkpoint_reason is None and asked == []
    else:
        assert why in start.checkpoint_reason
    assert asked == ([("m5.2xlarge", "us-west-2")] if why and "on_demand" not in why else [])


def test_auto_with_a_bad_runtime_or_band_is_named() -> None:
    with pytest.raises(
        ConfigurationError, match="checkpoint_every_seconds='auto' needs the expected runtime"
    ):
        plan_of(PlanArguments(checkpoint_every_seconds="auto", expected_runtime_hours="-1"))
    with pytest.raises(ConfigurationError, match="unknown spot advisor interruption band '12%'"):
        plan_of(PlanArguments(checkpoint_every_seconds="auto"), interruption_band=lambda t, r: "12%")


@pytest.mark.parametrize(
    ("runs", "planned", "seconds", "logged"),
    [
        ([], 3600.0, None, None),
        # sqrt(2 x 30 x 7200) = 657 s
        (
            [7200.0],
            3600.0,
            math.sqrt(2 * 30 * 7200),
            "ran 7200 s and each lost the work since its last save: a mean 7200 s between losses",
        ),
        # the last three only: mean 800 s, sqrt(2 x 30 x 800) = 219 s, below the floor of 10 saves
        ([60_000.0, 900.0, 1200.0, 300.0], 3600.0, 300.0, "last 3 preempted attempt(s) ran 900, 1200, 300 s"),
        # never above the planned interval
        ([7200.0], 400.0, 400.0, "kept at the planned 400 s"),
    ],
)
def test_observed_run_lengths_shorten_the_next_spot_attempts_interval(
    runs: list[float], planned: float, seconds: float | None, logged: str | None
) -> None:
    from costaware.training.plan.interval import observed_interval

    observed = observed_interval(runs, planned_seconds=planned)
    if seconds is None:
        assert observed is None
    else:
        assert observed is not None
        assert observed[0] == pytest.approx(seconds)
        assert logged is not None and logged in observed[1]


@pytest.mark.parametrize(
    ("runs", "saves", "seconds", "logged"),
    [
        # none measured yet: the assumed 30 s, sqrt(2 x 30 x 7200) = 657 s
        ([7200.0], [], math.sqrt(2 * 30 * 7200), "save cost 30 s assumed (none measured yet)"),
        # the median measured save: sqrt(2 x 120 x 7200) = 1315 s (one slow save does not move it)
        (
            [7200.0],
            [100.0, 900.0, 120.0],
            math.sqrt(2 * 120 * 7200),
            "save cost 120 s measured (median of the last 3 save(s): 100, 900, 120 s)",
        ),
        # sqrt(2 x 240 x 3000) = 1200 s is below the floor of ten measured saves: 2400 s
        ([3000.0], [240.0], 2400.0, "bounded to the floor of max(60 s, 10 saves): 2400 s"),
    ],
)
def test_the_next_spot_attempts_interval_weighs_the_measured_save(
    runs: list[float], saves: list[float], seconds: float, logged: str
) -> None:
    from costaware.training.plan.interval import observed_interval

    observed = observed_interval(runs, planned_seconds=3600.0, save_seconds=saves)
    assert observed is not None
    assert observed[0] == pytest.approx(seconds)
    assert logged in observed[1]


@pytest.mark.parametrize(
    ("saved", "seconds", "logged"),
    [
        # two of three saved on their notice: one loss in 2,100 s, sqrt(2 x 30 x 2100) = 355 s
        ([True, False, True], math.sqrt(2 * 30 * 2100), "1 of them lost work (2 saved on the notice)"),
        # none lost work: the planned interval
        ([True, True, True], 3600.0, "each saved on its notice or was stopped while starting: no interrupt"),
        # only the latest three count: the oldest loss is out of the window
        ([False, True, True, True], 3600.0, "The last 3 preempted attempt(s) ran 700, 700, 700 s"),
    ],
)
def test_interruptions_the_job_saved_on_do_not_shorten_the_interval(
    saved: list[bool], seconds: float, logged: str
) -> None:
    from costaware.training.plan.interval import observed_interval

    runs = [700.0] * len(saved)
    observed = observed_interval(runs, planned_seconds=3600.0, saved_on_notice=saved)
    assert observed is not None
    assert observed[0] == pytest.approx(seconds)
    assert logged in observed[1]


@pytest.mark.parametrize(
    ("runs", "saved", "seconds", "logged"),
    [
        # the first run was killed 200 s in, inside the 300 s restart: no training lost; the other trained
        # 6,900 s before its kill: sqrt(2 x 30 x 6900) = 643 s
        (
            [200.0, 7200.0],
            [False, False],
            math.sqrt(2 * 30 * 6900),
            "ran 200, 7200 s (of which 0, 6900 s training, after a 300 s restart each) and 1 of them lost "
            "work (1 stopped while starting): a mean 6900 s between losses",
        ),
        # 0 + 6,900 + 400 s of training, one loss (the last); one saved on its notice, one starting
        ([200.0, 7200.0, 700.0], [False, True, False], math.sqrt(2 * 30 * 7300), "(1 saved on the notice, 1"),
        # every kill came while the job was starting: nothing lost, the planned interval
        ([200.0, 300.0], [False, False], 3600.0, "each saved on its notice or was stopped while starting"),
    ],
)
def test_an_interruption_while_the_job_starts_loses_no_training(
    runs: list[float], saved: list[bool], seconds: float, logged: str
) -> None:
    from costaware.training.plan.interval import observed_interval

    observed = observed_interval(
        runs, planned_seconds=3600.0, saved_on_notice=saved, restart_overhead_seconds=300.0
    )
    assert observed is not None
    assert observed[0] == pytest.approx(seconds)
    assert logged in observed[1]


@pytest.mark.parametrize("overhead", [-1.0, float("nan"), float("inf"), "300", True])
def test_a_bad_restart_overhead_is_named(overhead: object) -> None:
    from costaware.training.plan.interval import observed_interval

    with pytest.raises(ConfigurationError, match="the restart overhead must be seconds >= 0, got"):
        observed_interval([700.0], planned_seconds=3600.0, restart_overhead_seconds=overhead)  # type: ignore[arg-type]


def test_saved_on_notice_needs_one_value_per_attempt() -> None:
    from costaware.training.plan.interval import observed_interval

    with pytest.raises(ConfigurationError, match=r"saved_on_notice has 1 value\(s\) for 2 preempted attempt"):
        observed_interval([700.0, 700.0], planned_seconds=3600.0, saved_on_notice=[True])


def test_a_bad_measured_save_is_named() -> None:
    from costaware.training.plan.interval import observed_interval

    with pytest.raises(ConfigurationError, match=r"a measured save must be seconds >= 0, got -2\.0"):
        observed_interval([7200.0], planned_seconds=3600.0, save_seconds=[-2.0])
