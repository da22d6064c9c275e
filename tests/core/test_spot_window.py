from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.spot_window import (
    check_priority,
    choose_zone,
    forecast_min,
    latest_start,
    spot_capacity,
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


def test_choose_zone_takes_the_cheapest_with_capacity() -> None:
    seen = {"a": (Decimal("0.9"), True), "b": (Decimal("0.2"), False), "c": (Decimal("0.5"), True)}
    assert choose_zone(seen) == "c"
    assert choose_zone({"a": (Decimal(1), True), "b": (Decimal(1), True)}) == "a"  # ties: first listed
    assert choose_zone({"a": (Decimal(1), False)}) is None


def test_spot_capacity_prefers_the_trace() -> None:
    assert spot_capacity(Decimal(1), Decimal(3), None) is True
    assert spot_capacity(Decimal(4), Decimal(3), None) is False
    assert spot_capacity(Decimal(1), Decimal(3), False) is False


def decide(now: datetime, price: str | None, *, available: bool = True) -> dict[str, str] | None:
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
    assert decide(T - timedelta(minutes=1), "0.10") is None  # before the window opens
    assert decide(T, "0.90") is None  # a cheaper start is forecast
    assert decide(T, "0.40", available=False) is None  # no capacity
    spot = decide(T, "0.40")
    assert spot is not None and spot["market"] == "spot"
    fallback = decide(T + timedelta(hours=3), None)
    assert fallback is not None and fallback["market"] == "on_demand" and fallback["usd_per_hour"] == "3.06"
    assert forecast_min([[T.isoformat(), "1"]], after=T, until=DEADLINE) is None


def test_trigger_module_re_exports_the_core_decision() -> None:
    from costaware.triggers import spot_window as trigger_module

    assert trigger_module.window_decision is window_decision
