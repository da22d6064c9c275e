from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from spot_decisions import SENSOR_XCOM_KEYS  # tests/support/

from costaware.core.errors import ConfigurationError
from costaware.core.spot_decision import SpotDecision

T = datetime(2026, 3, 1, 22, tzinfo=timezone.utc)
DEADLINE = T + timedelta(hours=10)

SPOT = SpotDecision(
    market="spot",
    usd_per_hour=Decimal("0.40"),
    reason="spot capacity available; price 0.40 is at or below the forecast minimum 0.50",
    decided_at=T,
    price_source="recorded",
    price_detail="recorded prices.csv",
)
JOB = {
    "instance_type": "p3.2xlarge",
    "region": "us-east-1",
    "priority": "normal",
    "on_demand_usd_per_hour": Decimal("3.06"),
    "expected_runtime_hours": Decimal("1.5"),
    "latest_start": T + timedelta(hours=3),
    "deadline": DEADLINE,
}


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param(SPOT, id="spot"),
        pytest.param(dataclasses.replace(SPOT, availability_zone="us-east-1c"), id="spot-in-a-chosen-zone"),
        pytest.param(
            SpotDecision(
                market="on_demand",
                usd_per_hour=Decimal("3.06"),
                reason="waiting longer would miss the deadline",
                decided_at=T,
                price_source="on-demand-list",
                price_detail="",
            ),
            id="on-demand",
        ),
        pytest.param(SPOT.for_job(**JOB), id="completed"),  # type: ignore[arg-type]
        pytest.param(SPOT.for_job(**JOB, availability_zone="us-east-1a"), id="completed-in-a-zone"),  # type: ignore[arg-type]
        pytest.param(SpotDecision(market="on_demand", usd_per_hour=None), id="bare"),
    ],
)
def test_to_xcom_round_trips_through_json(decision: SpotDecision) -> None:
    xcom = decision.to_xcom()
    assert all(isinstance(v, str) for v in xcom.values())  # JSON text only: no floats, no datetimes
    assert SpotDecision.from_xcom(json.loads(json.dumps(xcom))) == decision
    assert SpotDecision.from_xcom(xcom).to_xcom() == xcom


# What SpotWindowSensor and SpotWindowTrigger wrote before SpotDecision (literal copies of real XComs).
OLD_TRIGGER_EVENT = {
    "market": "spot",
    "usd_per_hour": "0.30",
    "reason": "spot capacity available; price 0.30 is at or below the forecast minimum 0.500000 USD/hour",
    "decided_at": "2026-03-01T22:00:05.123456+00:00",
    "availability_zone": "us-east-1b",
    "price_source": "recorded",
    "price_detail": "recorded /tmp/prices.csv, zone us-east-1b",
}
OLD_SENSOR_XCOM = {
    "availability_zone": "",
    "market": "on_demand",
    "usd_per_hour": "3.06",
    "reason": "waiting longer would miss the deadline: latest safe start 2026-03-02T07:50:00+00:00",
    "decided_at": "2026-03-02T07:50:00.000001+00:00",
    "price_source": "on-demand-list",
    "price_detail": "",
    "instance_type": "p3.2xlarge",
    "region": "us-east-1",
    "priority": "normal",
    "on_demand_usd_per_hour": "3.06",
    "estimated_usd": "3.060000",
    "expected_runtime_hours": "1",
    "latest_start": "2026-03-02T07:50:00+00:00",
    "deadline": "2026-03-02T09:00:00+00:00",
}


@pytest.mark.parametrize("old", [OLD_TRIGGER_EVENT, OLD_SENSOR_XCOM], ids=["trigger-event", "sensor-xcom"])
def test_decisions_written_before_read_back_unchanged(old: dict[str, str]) -> None:
    assert SpotDecision.from_xcom(old).to_xcom() == old


def test_sensor_xcom_keys_are_the_ones_dags_read() -> None:
    xcom = SpotDecision.from_xcom(OLD_TRIGGER_EVENT).for_job(**JOB).to_xcom()  # type: ignore[arg-type]
    assert sorted(xcom) == sorted(SENSOR_XCOM_KEYS)
    assert list(xcom)[:4] == ["market", "usd_per_hour", "reason", "decided_at"]
    assert xcom["estimated_usd"] == "0.450000"  # 0.30 x 1.5 h, to the micro-dollar
    assert xcom["availability_zone"] == "us-east-1b"  # the zone chosen wins over the job's
    assert SPOT.for_job(**JOB).to_xcom()["availability_zone"] == ""  # type: ignore[arg-type]


def test_a_hand_written_partial_decision_reads_with_defaults() -> None:
    written = {
        "market": "Spot",
        "usd_per_hour": 0.1,  # a float from a hand-written dict: read through its text
        "instance_type": "m5.large",
        "deadline": "2026-03-02T08:00:00Z",
        "prices": "live",  # not a decision field: ignored
        "latest_start": "",
        "availability_zone": None,
    }
    decision = SpotDecision.from_xcom(written)
    assert decision == SpotDecision(
        market="spot",
        usd_per_hour=Decimal("0.1"),
        instance_type="m5.large",
        deadline=datetime(2026, 3, 2, 8, tzinfo=timezone.utc),
    )
    assert decision.to_xcom() == {
        "market": "spot",
        "usd_per_hour": "0.1",
        "reason": "",
        "instance_type": "m5.large",
        "deadline": "2026-03-02T08:00:00+00:00",
    }
    assert SpotDecision.from_xcom({}) == SpotDecision(market="on_demand", usd_per_hour=None)


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ({"market": "cheap"}, "spot decision market 'cheap' is unknown; use one of spot, on_demand"),
        (
            {"usd_per_hour": "abc"},
            "spot decision usd_per_hour must be a number >= 0 such as '0.40', got 'abc'",
        ),
        ({"estimated_usd": "-1"}, "spot decision estimated_usd must be a number >= 0"),
        ({"on_demand_usd_per_hour": True}, "on_demand_usd_per_hour must be a number >= 0"),
        ({"usd_per_hour": "NaN"}, "usd_per_hour must be a number >= 0"),
        ({"deadline": "tomorrow"}, "spot decision deadline 'tomorrow' is not ISO-8601"),
        (
            {"decided_at": "2026-03-02T08:00:00"},
            "spot decision decided_at 2026-03-02T08:00:00 has no time zone",
        ),
    ],
)
def test_bad_decision_values_name_the_key_and_the_value(written: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SpotDecision.from_xcom(written)


def test_the_decision_is_frozen_and_checked() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SPOT.market = "on_demand"  # type: ignore[misc]
    with pytest.raises(ConfigurationError, match="market 'local' is unknown"):
        SpotDecision(market="local", usd_per_hour=Decimal(1))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"usd_per_hour must be a Decimal >= 0, got 0\.4"):
        SpotDecision(market="spot", usd_per_hour=0.4)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="has no usd_per_hour to estimate from"):
        SpotDecision(market="spot", usd_per_hour=None).for_job(**JOB)  # type: ignore[arg-type]


def test_the_spot_window_module_re_exports_the_value() -> None:
    from costaware.core import spot_window

    assert spot_window.SpotDecision is SpotDecision
