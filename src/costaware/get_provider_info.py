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
    "costaware.operators.warm_start",
)
SENSOR_MODULES = (
    "costaware.sensors.off_peak_gate",
    "costaware.sensors.spend_cap",
    "costaware.sensors.spot_window",
)
TRIGGER_MODULES = (
    "costaware.triggers.budget",
    "costaware.triggers.remote_training",
    "costaware.triggers.spot_window",
)
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
        "EC2 instance type a task is priced on when the task itself names none (docs/budgets.md).",
        "m5.large",
        "c7i.2xlarge",
    ),
    "worker_region": _option(
        "AWS region a task is priced in when the task itself names none (docs/budgets.md).",
        "us-east-1",
        "eu-west-1",
    ),
    "worker_market": _option(
        "Market (on_demand or spot) a task is priced on when the task itself names none (docs/budgets.md).",
        "on_demand",
        "spot",
    ),
    "price_aws_conn_id": _option(
        "Airflow AWS connection for live on-demand prices from the AWS Price List API; empty: no live "
        "look-ups (cache, then the bundled snapshot). See docs/prices.md.",
        "",
        "aws_pricing",
    ),
    "price_ttl_hours": _option(
        "Hours a cached price counts as fresh; an older one is used only after the snapshot and is flagged "
        "stale.",
        "168",
        "24",
        "float",
    ),
    "discounts": _option(
        "Discounts on on-demand prices (savings plans, enterprise agreements) as 'team:<name>=<percent>' or "
        "'family:<prefix>=<percent>', comma-separated; the largest matching rule applies.",
        "",
        "team:ml=12, family:p4d=30",
    ),
    "alert_thresholds": _option(
        "Budget alert thresholds for budgets without their own rules: percentages of the cap and 'forecast' "
        "(forecast above cap); empty: 50%,80%,100%,forecast. See docs/governance.md.",
        "",
        "50%,80%,100%,forecast",
    ),
    "alert_notifiers": _option(
        'JSON list of Airflow notifiers that receive budget alerts, each {"class": ..., "kwargs": {...}}; '
        "empty: alerts go to the task log only.",
        "",
        '[{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier", '
        '"kwargs": {"to": "lead@example.com"}}]',
    ),
    "budget_admin_role": _option(
        "Role (simple auth manager) allowed to create or change budgets from the Cost page and its API.",
        "ADMIN",
        "OP",
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
                "description": "Settings of costaware: the compute a task ran on when the task itself does "
                "not say, price look-ups and discounts, budget alerts and who may set "
                "budgets.",
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
