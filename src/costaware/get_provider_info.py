"""Provider metadata read by Airflow's ProvidersManager (``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any

OPERATOR_MODULES = (
    "costaware.operators.cached_features",
    "costaware.operators.data_locality",
    "costaware.operators.data_quality",
    "costaware.operators.promote",
    "costaware.operators.right_size",
    "costaware.operators.tuning",
    "costaware.operators.warm_start",
)
SENSOR_MODULES = ("costaware.sensors.spend_cap", "costaware.sensors.spot_window")
TRIGGER_MODULES = ("costaware.triggers.budget", "costaware.triggers.spot_window")
HOOK_MODULES = ("costaware.hooks.ledger",)


def _option(description: str, default: str, example: str, kind: str = "string") -> dict[str, Any]:
    return {
        "description": description,
        "version_added": "0.1.0",
        "type": kind,
        "example": example,
        "default": default,
    }


# Every ``[costaware]`` option the code reads (``costaware.glue.setting``); a test checks none is missing.
CONFIG_OPTIONS: dict[str, dict[str, Any]] = {
    "worker_instance_type": _option(
        "EC2 instance type a task is priced on when neither the operator nor the run's params name one.",
        "m5.large",
        "c7i.2xlarge",
    ),
    "worker_region": _option(
        "AWS region a task is priced in when neither the operator nor the run's params name one.",
        "us-east-1",
        "eu-west-1",
    ),
    "worker_market": _option(
        "Market (on_demand or spot) a task is priced on when neither the operator nor the run's params "
        "name one.",
        "on_demand",
        "spot",
    ),
}


def get_provider_info() -> dict[str, Any]:
    """What ``airflow providers list`` shows for this package."""
    from costaware import __version__

    return {
        "package-name": "airflow-provider-costaware",
        "name": "costaware",
        "description": "Scheduled, cost-aware ML retraining: budgets, spend caps, a cost ledger.",
        "versions": [__version__],
        "hook-class-names": [],
        "operators": [{"integration-name": "costaware", "python-modules": list(OPERATOR_MODULES)}],
        "sensors": [{"integration-name": "costaware", "python-modules": list(SENSOR_MODULES)}],
        "hooks": [{"integration-name": "costaware", "python-modules": list(HOOK_MODULES)}],
        "triggers": [{"integration-name": "costaware", "python-modules": list(TRIGGER_MODULES)}],
        "connection-types": [
            {
                "hook-class-name": "costaware.hooks.ledger.CostLedgerHook",
                "connection-type": "costaware_ledger",
            },
        ],
        "config": {
            "costaware": {
                "description": "Defaults of the cost listener: the compute a task ran on when neither the "
                "operator nor the run's params say (a worker's own instance type, region and market).",
                "options": CONFIG_OPTIONS,
            }
        },
        "integrations": [
            {
                "integration-name": "costaware",
                "external-doc-url": "https://pypi.org/project/airflow-provider-costaware/",
                "tags": ["software"],
            }
        ],
    }
