"""Every trigger survives the triggerer's round trip: serialize, store as Airflow encodes it, rebuild.

The triggers are discovered from ``costaware.triggers``, so a new trigger without an example here fails the
suite instead of being skipped.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest
from airflow.serialization.serialized_objects import BaseSerialization
from airflow.triggers.base import BaseTrigger
from attempt_states import CAPTURED  # tests/support/

import costaware.triggers
from costaware.training.attempts import AttemptState

# A paused attempt's state, as the operator writes it now.
STATE = AttemptState.from_json(CAPTURED).to_json()

EXAMPLES: dict[str, dict[str, Any]] = {
    "BudgetAvailableTrigger": {
        "scope": "team=ml,project=churn",
        "usd": "12.50",
        "gpu_hours": "1.5",
        "run_id": "manual__2026-01-01",
        "ledger_conn_id": "test_ledger",
        "poll_interval": 5.0,
        "dag_id": "churn_retrain",
        "holder": "churn_retrain/manual__2026-01-01/train/-1",
    },
    "RemoteTrainingJobTrigger": {
        "backend": "local",
        "backend_options": {"root": "/tmp/jobs", "env": {"PYTHONPATH": "/opt/train"}},
        "job_id": "train-abc-a2",
        "state": STATE,
        "fallback_at": "2026-01-01T02:00:00+00:00",
        "poll_interval": 2.0,
        "price_watch": CAPTURED["watch"],
        "ledger_conn_id": "test_ledger",
        "aws_conn_id": "moto_aws",
    },
    "SpotWindowTrigger": {
        "instance_type": "m5.large",
        "region": "us-east-1",
        "availability_zone": "us-east-1a",
        "prices": "/data/spot.json",
        "on_demand_usd_per_hour": "0.096",
        "forecast_starts": [["2026-01-01T01:00:00+00:00", "0.031"]],
        "latest_start": "2026-01-01T06:00:00+00:00",
        "not_before": "2026-01-01T00:30:00+00:00",
        "target_usd_per_hour": "0.04",
        "aws_conn_id": "moto_aws",
        "ttl_seconds": 60.0,
        "products": ["Linux/UNIX"],
        "availability": "/data/trace.csv",
        "availability_start": "2023-01-01T00:00:00+00:00",
        "poll_interval": 10.0,
        "availability_zones": ["us-east-1a", "us-east-1b"],
        "zone_availability": {"us-east-1a": "/data/a.csv", "us-east-1b": "/data/b.csv"},
        "objective": "cost+carbon",
        "carbon_usd_per_tonne": 85.0,
        "carbon": "GB",
        "power_kw": 0.4,
        "runtime_hours": "2",
    },
}


def _triggers() -> list[type[BaseTrigger]]:
    found: dict[str, type[BaseTrigger]] = {}
    for module_info in pkgutil.iter_modules(costaware.triggers.__path__, "costaware.triggers."):
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseTrigger) and cls.__module__ == module.__name__:
                found[cls.__name__] = cls
    return sorted(found.values(), key=lambda cls: cls.__name__)


TRIGGERS = _triggers()


def test_every_trigger_is_found_and_has_an_example() -> None:
    assert {cls.__name__ for cls in TRIGGERS} == set(EXAMPLES)


@pytest.mark.parametrize("trigger_cls", TRIGGERS, ids=lambda cls: cls.__name__)
def test_trigger_round_trips_through_serialize(trigger_cls: type[BaseTrigger]) -> None:
    kwargs = EXAMPLES[trigger_cls.__name__]
    # The example sets every argument, so a field that serialize() forgets shows up below.
    parameters = set(inspect.signature(trigger_cls.__init__).parameters) - {"self"}
    assert set(kwargs) == parameters

    classpath, serialized = trigger_cls(**kwargs).serialize()
    assert serialized == kwargs

    # What the triggerer stores and reads back (Airflow's own encoding of the kwargs).
    stored = BaseSerialization.deserialize(BaseSerialization.serialize(serialized))
    module_name, _, class_name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module_name), class_name)(**stored)
    assert rebuilt.serialize() == (classpath, kwargs)
