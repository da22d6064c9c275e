"""What DAGs read from a spot decision, for the tests of the sensor and of ``SpotDecision`` alike."""

from __future__ import annotations

#: The SpotWindowSensor's XCom keys as DAGs and templates read them (``ti.xcom_pull(...)["market"]``, and
#: before SpotDecision existed): none may go.
SENSOR_XCOM_KEYS = [
    "availability_zone",
    "market",
    "usd_per_hour",
    "reason",
    "decided_at",
    "price_source",
    "price_detail",
    "instance_type",
    "region",
    "priority",
    "on_demand_usd_per_hour",
    "estimated_usd",
    "expected_runtime_hours",
    "latest_start",
    "deadline",
]
