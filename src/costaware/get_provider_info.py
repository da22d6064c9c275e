"""Provider metadata read by Airflow's ProvidersManager (``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any

OPERATOR_MODULES = (
    "costaware.operators.cached_features",
    "costaware.operators.data_locality",
    "costaware.operators.data_quality",
    "costaware.operators.promote",
    "costaware.operators.remote_training",
    "costaware.operators.right_size",
    "costaware.operators.tuning",
    "costaware.operators.tuning_study",  # the tuning task group's operators, one module each
    "costaware.operators.tuning_summary",
    "costaware.operators.tuning_trial",
    "costaware.operators.warm_start",
)
SENSOR_MODULES = (
    "costaware.sensors.off_peak_gate",
    "costaware.sensors.spend_cap",
    "costaware.sensors.spend_gate_approval",  # SpendCapSensor's bases (its approval request, its checks)
    "costaware.sensors.spend_gate_base",
    "costaware.sensors.spot_window",
    "costaware.sensors.spot_window_market",  # SpotWindowSensor's bases (its market looks, its plan)
    "costaware.sensors.spot_window_plan",
)
TRIGGER_MODULES = (
    "costaware.triggers.budget",
    "costaware.triggers.remote_training",
    "costaware.triggers.spot_window",
)
HOOK_MODULES = ("costaware.hooks.ledger",)


def _config_options() -> dict[str, dict[str, Any]]:
    """The ``[costaware]`` options as the provider info documents them, from ``costaware.settings``."""
    from costaware.settings import OPTIONS

    return {
        option.name: {
            "description": option.description,
            "version_added": "0.1.0",
            "type": option.kind,
            "example": option.example,
            "default": option.default,
        }
        for option in OPTIONS.values()
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
                "description": "Settings of costaware: the compute a task ran on when the task itself does "
                "not say, price look-ups and discounts, budget alerts and who may set "
                "budgets.",
                "options": _config_options(),
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
