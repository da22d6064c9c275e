"""The zone of a remote training's next spot attempt, from its attempts (training.placement)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from costaware.core.zone_choice import PreemptedRun
from costaware.training.attempts import Attempt, AttemptState
from costaware.training.placement import allowed_zones, last_zone, next_zone, preempted_runs
from costaware.training.plan import Placement, RemotePlan


def state(
    *attempts: tuple[str, str, float, str], zones: tuple[str, ...] = ("a", "b"), **placed: object
) -> AttemptState:
    plan = RemotePlan(
        backend="local",
        instance_type="p3.2xlarge",
        region="us-west-2",
        on_demand_usd_per_hour="3.06",
        first_market="spot",
        checkpoint_every_seconds=60.0,
        placement=Placement(
            zones=zones,
            first_zone=zones[0] if zones else "",
            restart_overhead_seconds=120.0,
            **placed,  # type: ignore[arg-type]
        ),
    )
    done = tuple(
        Attempt(i + 1, f"j{i}", market, "p3.2xlarge", seconds, "0.1", cause, "", zone=zone)
        for i, (market, zone, seconds, cause) in enumerate(attempts)
    )
    return AttemptState(plan=plan, spot_usd_per_hour="0.918", attempts=done)


def test_runs_and_zones_are_read_from_the_attempts() -> None:
    s = state(
        ("spot", "a", 100.0, "preemption"), ("spot", "b", 50.0, "paused"), ("spot", "a", 30.0, "preemption")
    )
    assert preempted_runs(s) == {"a": (PreemptedRun(100.0), PreemptedRun(30.0))}
    assert last_zone(s) == "a" and allowed_zones(s) == ("a", "b")
    assert last_zone(state()) == "a"  # the decision's zone before any attempt
    assert allowed_zones(state(zones=())) == ("",)


def test_a_preemption_moves_the_next_attempt_to_an_untried_zone_at_the_same_price() -> None:
    choice = next_zone(state(("spot", "a", 600.0, "preemption")), prices={}, capacity={}, move_usd={})
    assert choice.zone == "b" and "moves" in choice.reason


def test_a_zone_without_capacity_is_passed_over_and_prices_count() -> None:
    s = state(("spot", "a", 6000.0, "preemption"), zones=("a", "b", "c"))
    prices = {"a": Decimal("0.5"), "b": Decimal("0.9"), "c": Decimal("0.4")}
    assert next_zone(s, prices=prices, capacity={"c": False}, move_usd={}).zone == "a"
    assert next_zone(s, prices=prices, capacity={}, move_usd={}).zone == "c"
    assert next_zone(s, prices=prices, capacity={}, move_usd={"c": Decimal(5)}).zone == "a"


def test_the_guard_leaves_no_zone_after_two_short_runs_in_each() -> None:
    runs = [("spot", z, 100.0, "preemption") for z in ("a", "b", "a", "b")]
    choice = next_zone(state(*runs, guard=True), prices={}, capacity={}, move_usd={})
    assert choice.zone is None and choice.thrashing == ("a", "b")
    # Off: both zones keep nothing (an infinite expected cost), so the tie keeps the current zone.
    assert next_zone(state(*runs), prices={}, capacity={}, move_usd={}).zone == "b"


def test_one_zone_thrashing_on_its_own_goes_on_demand() -> None:
    runs = [("spot", "", 100.0, "preemption")] * 2
    assert next_zone(state(*runs, zones=(), guard=True), prices={}, capacity={}, move_usd={}).zone is None


def test_the_guard_weighs_how_long_a_multi_instance_run_ran_not_its_instance_seconds() -> None:
    # Two SageMaker runs of 4 instances, each preempted after 100 s (short of the 120 s restart + 60 s
    # interval), billed 400 s each: read as 400 s runs that kept work, the guard never fired.
    runs = [("spot", "", 400.0, "preemption")] * 2
    s = state(*runs, zones=(), guard=True)
    s = replace(s, plan=replace(s.plan, backend="sagemaker", backend_options={"instance_count": 4}))
    assert preempted_runs(s) == {"": (PreemptedRun(100.0), PreemptedRun(100.0))}
    assert next_zone(s, prices={}, capacity={}, move_usd={}).zone is None


def test_runs_that_saved_a_checkpoint_of_their_own_never_fire_the_guard() -> None:
    # Two 100 s runs in each zone, each shorter than the 120 s restart + 60 s interval: by length they thrash.
    # A job that committed a newer step on each notice got past its restart in every run, whatever the
    # estimate says, and kept work: the guard keeps its zones.
    runs = [("spot", z, 100.0, "preemption") for z in ("a", "b", "a", "b")]
    s = state(*runs, guard=True)
    moved = tuple(
        replace(a, exit_code=75, restored_step=a.attempt, committed_step=a.attempt + 1) for a in s.attempts
    )
    saved = replace(s, attempts=moved)
    on_notice = (PreemptedRun(100.0, kept_work=True, saved_on_notice=True),) * 2
    assert preempted_runs(saved) == {"a": on_notice, "b": on_notice}
    assert next_zone(saved, prices={}, capacity={}, move_usd={}).zone is not None
    # Restored step 4 and cut each time before a newer one: the guard fires on the record.
    cut = replace(
        s, attempts=tuple(replace(a, exit_code=75, restored_step=4, committed_step=4) for a in s.attempts)
    )
    lost = (PreemptedRun(100.0, kept_work=False, saved_on_notice=False),) * 2
    assert preempted_runs(cut) == {"a": lost, "b": lost}
    choice = next_zone(cut, prices={}, capacity={}, move_usd={})
    assert choice.zone is None and "ended before committing a checkpoint of their own" in choice.reason


def test_the_guard_weighs_the_exact_runs_not_a_bill_that_holds_a_queue() -> None:
    # Two SageMaker attempts each preempted after runs of 40 s and 60 s (100 s: short of the 120 s restart
    # + 60 s interval), billed 1000 s since their first start with the wait for capacity between: read from
    # the bill they kept work and the guard never fired. A multi-run attempt ran the sum of its runs.
    runs = [("spot", "", 1000.0, "preemption")] * 2
    s = state(*runs, zones=(), guard=True)
    s = replace(s, attempts=tuple(replace(a, trained_runs_seconds=(40.0, 60.0)) for a in s.attempts))
    assert preempted_runs(s) == {"": (PreemptedRun(100.0), PreemptedRun(100.0))}
    assert next_zone(s, prices={}, capacity={}, move_usd={}).zone is None
