from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costaware.core.errors import ConfigurationError
from costaware.core.spot_window import (
    PRIORITIES,
    Observation,
    SpotDecision,
    check_priority,
    choose_zone,
    decide,
    forecast_min,
    given_priority,
    label_decision,
    latest_start,
    pause_decision,
    spot_capacity,
    wants_observation,
    window_decision,
)

T = datetime(2026, 3, 1, 22, tzinfo=timezone.utc)
DEADLINE = T + timedelta(hours=10)


@pytest.mark.parametrize(
    ("priority", "latest"),
    [
        ("normal", DEADLINE - timedelta(hours=4, minutes=10)),
        # one more restart and a quarter of the run (1 h) in reserve
        ("critical", DEADLINE - timedelta(hours=5, minutes=20)),
        ("best_effort", DEADLINE),
        ("best-effort", DEADLINE),
    ],
)
def test_latest_start_by_priority(priority: str, latest: datetime) -> None:
    got = latest_start(
        deadline=DEADLINE, runtime_hours=Decimal(4), restart_overhead_minutes=10, priority=priority
    )
    assert got == latest


@pytest.mark.parametrize("bad", ["urgent", "CRITICAL!", 3])
def test_unknown_priority_names_the_value(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=rf"priority {bad!r} is unknown; choose one of critical"):
        check_priority(bad)


def test_no_priority_means_normal() -> None:
    assert check_priority(None) == check_priority("") == "normal"


@pytest.mark.parametrize(
    ("given", "read"), [(None, "normal"), (" None ", "normal"), ("null", "normal"), ("Critical", "critical")]
)
def test_a_priority_not_given_is_normal_and_a_given_one_is_checked(given: object, read: str) -> None:
    assert given_priority(given) == read
    with pytest.raises(ConfigurationError, match=r"priority 'none' is unknown"):
        given_priority("none")  # no template renders it: refused, named


def test_choose_zone_takes_the_cheapest_with_capacity() -> None:
    seen = {"a": (Decimal("0.9"), True), "b": (Decimal("0.2"), False), "c": (Decimal("0.5"), True)}
    assert choose_zone(seen) == "c"
    assert choose_zone({"a": (Decimal(1), True), "b": (Decimal(1), True)}) == "a"  # ties: first listed
    assert choose_zone({"a": (Decimal(1), False)}) is None


def test_spot_capacity_prefers_the_trace() -> None:
    assert spot_capacity(Decimal(1), Decimal(3), None) is True
    assert spot_capacity(Decimal(4), Decimal(3), None) is False
    assert spot_capacity(Decimal(1), Decimal(3), False) is False


def rule_at(now: datetime, price: str | None, *, available: bool = True) -> dict[str, str] | None:
    starts = [[(T + timedelta(hours=h)).isoformat(), "0.50"] for h in (1, 2, 3)]
    return window_decision(
        now=now,
        usd_per_hour=None if price is None else Decimal(price),
        available=available,
        on_demand_usd_per_hour=Decimal("3.06"),
        forecast_starts=starts,
        target_usd_per_hour=None,
        latest_start=T + timedelta(hours=3),
        not_before=T,
    )


def test_window_decision_table() -> None:
    assert rule_at(T - timedelta(minutes=1), "0.10") is None  # before the window opens
    assert rule_at(T, "0.90") is None  # a cheaper start is forecast
    assert rule_at(T, "0.40", available=False) is None  # no capacity
    spot = rule_at(T, "0.40")
    assert spot is not None and spot["market"] == "spot"
    fallback = rule_at(T + timedelta(hours=3), None)
    assert fallback is not None and fallback["market"] == "on_demand" and fallback["usd_per_hour"] == "3.06"
    assert forecast_min([[T.isoformat(), "1"]], after=T, until=DEADLINE) is None


def test_trigger_module_re_exports_the_core_decision() -> None:
    from costaware.triggers import spot_window as trigger_module

    assert trigger_module.window_decision is window_decision


# -- pausing a running spot job --------------------------------------------------------------------------

STARTS = [[(T + timedelta(hours=h)).isoformat(), "0.50"] for h in (1, 2, 3)]


def pause(price: str, *, priority: str = "normal", now: datetime = T, **kwargs: object) -> str | None:
    args: dict[str, object] = {
        "now": now,
        "usd_per_hour": Decimal(price),
        "forecast_starts": STARTS,
        "latest_resume": T + timedelta(hours=3),
        "remaining_hours": Decimal(2),
        "restart_overhead_minutes": 12,
        "priority": priority,
        **kwargs,
    }
    return pause_decision(**args)  # type: ignore[arg-type]


def test_pause_when_running_on_costs_well_above_a_later_start_with_a_restart() -> None:
    # Pausing costs 0.50 x (2 h + 0.2 h) = 1.10 USD; running on 2 h at p. normal pauses above 1.10 x 1.2.
    assert pause("0.60") is None  # 1.20 USD: dearer, but within the margin
    assert pause("0.66") is None  # 1.32: exactly at the margin
    reason = pause("0.70")  # 1.40
    assert reason is not None and "forecast minimum 0.50" in reason and "1.4000 USD now" in reason
    assert pause("0.60", priority="best_effort") is not None  # paused first: any expected saving
    assert pause("0.55", priority="best_effort") is None  # 1.10: no saving after the restart


def test_no_pause_for_a_critical_job_past_the_latest_resume_or_with_nothing_left() -> None:
    assert pause("3.00", priority="critical") is None
    assert pause("3.00", now=T + timedelta(hours=3)) is None
    assert pause("3.00", remaining_hours=Decimal(0)) is None
    assert pause("3.00", now=T + timedelta(hours=3) - timedelta(minutes=1)) is not None
    assert pause("3.00", forecast_starts=[]) is None  # no later start forecast: nothing to wait for


@settings(max_examples=300, deadline=None)
@given(
    price=st.decimals(min_value="0.01", max_value="20", places=4),
    forecast=st.lists(st.decimals(min_value="0.01", max_value="20", places=4), min_size=1, max_size=6),
    remaining=st.decimals(min_value="0.05", max_value="12", places=2),
    overhead=st.integers(min_value=0, max_value=60),
    priority=st.sampled_from(PRIORITIES),
)
def test_a_price_that_a_start_accepts_never_pauses(
    price: Decimal, forecast: list[Decimal], remaining: Decimal, overhead: int, priority: str
) -> None:
    """Hysteresis: resuming at a price the window's start rule accepts can never trigger a pause at once."""
    starts = [[(T + timedelta(hours=i + 1)).isoformat(), str(v)] for i, v in enumerate(forecast)]
    latest = T + timedelta(hours=len(forecast))
    started = window_decision(
        now=T,
        usd_per_hour=price,
        available=True,
        on_demand_usd_per_hour=Decimal(21),
        forecast_starts=starts,
        target_usd_per_hour=None,
        latest_start=latest,
        not_before=None,
    )
    paused = pause_decision(
        now=T,
        usd_per_hour=price,
        forecast_starts=starts,
        latest_resume=latest,
        remaining_hours=remaining,
        restart_overhead_minutes=overhead,
        priority=priority,
    )
    assert not (started is not None and paused is not None)
    if priority == "critical":
        assert paused is None


# -- deciding: one function for the sensor, its trigger and the resume watch ---------------------------

AT_MINIMUM = "price 0.40 is at or below the forecast minimum 0.50 USD/hour of the rest of the window"
OBSERVED = Observation(Decimal("0.40"), True, "recorded prices.csv", "us-east-1b")


@pytest.mark.parametrize(
    ("now", "observation", "expected"),
    [
        (T - timedelta(minutes=1), OBSERVED, None),  # before the window opens
        (T, dataclasses.replace(OBSERVED, usd_per_hour=Decimal("0.90")), None),  # cheaper later
        (T, dataclasses.replace(OBSERVED, available=False), None),  # no capacity
        (T, Observation(), None),  # nothing read
        (
            T,
            OBSERVED,
            SpotDecision(
                market="spot",
                usd_per_hour=Decimal("0.40"),
                reason=f"spot capacity available; {AT_MINIMUM}",
                decided_at=T,
                availability_zone="us-east-1b",
                price_source="recorded",
                price_detail="recorded prices.csv",
            ),
        ),
        (
            T,
            dataclasses.replace(OBSERVED, source="live EC2 (aws_default)", availability_zone=""),
            SpotDecision(
                market="spot",
                usd_per_hour=Decimal("0.40"),
                reason=f"spot capacity available; {AT_MINIMUM}",
                decided_at=T,
                price_source="live-ec2",
                price_detail="live EC2 (aws_default)",
            ),
        ),
        (
            T + timedelta(hours=3),
            OBSERVED,  # past the latest start: on-demand, and the spot zone is not named
            SpotDecision(
                market="on_demand",
                usd_per_hour=Decimal("3.06"),
                reason=f"waiting longer would miss the deadline: latest safe start "
                f"{(T + timedelta(hours=3)).isoformat()}",
                decided_at=T + timedelta(hours=3),
                price_source="on-demand-list",
                price_detail="recorded prices.csv",
            ),
        ),
    ],
)
def test_decide_table(now: datetime, observation: Observation, expected: SpotDecision | None) -> None:
    got = decide(
        now=now,
        observation=observation,
        on_demand_usd_per_hour=Decimal("3.06"),
        forecast_starts=STARTS,
        target_usd_per_hour=None,
        latest_start=T + timedelta(hours=3),
        not_before=T,
    )
    assert got == expected
    # The bare rule and its labels (the names kept for existing imports) say the same.
    bare = window_decision(
        now=now,
        usd_per_hour=observation.usd_per_hour,
        available=observation.available,
        on_demand_usd_per_hour=Decimal("3.06"),
        forecast_starts=STARTS,
        target_usd_per_hour=None,
        latest_start=T + timedelta(hours=3),
        not_before=T,
    )
    if expected is None:
        assert bare is None
    else:
        assert bare is not None
        label_decision(bare, observation.source)
        assert {
            k: v for k, v in expected.to_xcom().items() if k not in ("decided_at", "availability_zone")
        } == bare


@pytest.mark.parametrize(
    ("now", "wanted"),
    [(T - timedelta(seconds=1), False), (T, True), (T + timedelta(hours=3), False)],
)
def test_the_market_is_read_only_inside_the_window(now: datetime, wanted: bool) -> None:
    assert wants_observation(now, latest_start=T + timedelta(hours=3), not_before=T) is wanted


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"runtime_hours": Decimal(-3)}, r"runtime_hours must be a number of hours from 0 to 87600, got "
         r"Decimal\('-3'\)"),
        ({"restart_overhead_minutes": -10}, "restart_overhead_minutes must be a number of minutes from 0 to "
         "5256000, got -10"),
        ({"runtime_hours": float("nan")}, "runtime_hours must be a number of hours from 0 to 87600, got nan"),
        ({"restart_overhead_minutes": float("inf")}, "restart_overhead_minutes must be .* got inf"),
        ({"runtime_hours": "three"}, "runtime_hours must be a number of hours .* got 'three'"),
        ({"deadline": datetime(2026, 12, 1, 11)}, "deadline 2026-12-01T11:00:00 has no time zone"),
    ],
)  # fmt: skip
def test_latest_start_refuses_what_no_job_has(kwargs: dict[str, Any], message: str) -> None:
    # A library call: -3 hours gave a latest start after the deadline; a naive deadline failed later, in
    # decide(), as a bare TypeError.
    args: dict[str, Any] = {
        "deadline": datetime(2026, 12, 1, 11, tzinfo=timezone.utc),
        "runtime_hours": Decimal(3),
        "restart_overhead_minutes": 10,
        **kwargs,
    }
    with pytest.raises(ConfigurationError, match=message):
        latest_start(**args)


@pytest.mark.parametrize("priority", ["normal", "critical", "best_effort"])
def test_latest_start_takes_a_float_or_text_runtime_for_every_priority(priority: str) -> None:
    # 4.0 and "4" worked for normal jobs and raised TypeError (float x Decimal) for critical ones.
    deadline = datetime(2026, 12, 1, 11, tzinfo=timezone.utc)
    wanted = latest_start(
        deadline=deadline, runtime_hours=Decimal(4), restart_overhead_minutes=10, priority=priority
    )
    for runtime in (4.0, "4", 4):
        got = latest_start(
            deadline=deadline,
            runtime_hours=runtime,  # type: ignore[arg-type]
            restart_overhead_minutes=10.0,
            priority=priority,
        )
        assert got == wanted
