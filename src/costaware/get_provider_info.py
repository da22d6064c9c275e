"""Provider metadata read by Airflow's ProvidersManager (``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """What ``airflow providers list`` shows for this package."""
    from costaware import __version__

    return {
        "package-name": "airflow-provider-costaware",
        "name": "costaware",
        "description": "Scheduled, cost-aware ML retraining: budgets, spend caps, a cost ledger.",
        "versions": [__version__],
        "hook-class-names": [],
        "sensors": [
            {"integration-name": "costaware", "python-modules": ["costaware.sensors.spend_cap"]},
        ],
        "hooks": [
            {"integration-name": "costaware", "python-modules": ["costaware.hooks.ledger"]},
        ],
        "triggers": [
            {"integration-name": "costaware", "python-modules": ["costaware.triggers.budget"]},
            {"integration-name": "costaware", "python-modules": ["costaware.triggers.remote_training"]},
        ],
        "operators": [
            {"integration-name": "costaware", "python-modules": ["costaware.operators.remote_training"]},
        ],
        "integrations": [
            {
                "integration-name": "costaware",
                "external-doc-url": "https://pypi.org/project/airflow-provider-costaware/",
                "tags": ["software"],
            }
        ],
    }
