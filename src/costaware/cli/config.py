"""Every ``costaware`` command, declared as data: its name, help, arguments and function.

A command's module is named by import path and imported only when that command runs (Airflow's
``cli_config.py`` does the same), so ``costaware --help`` stays fast. :mod:`costaware.cli.parser` builds
the parser from :data:`COMMANDS`, and ``scripts/cli_docs.py`` writes ``docs/cli.md`` from that parser.
"""

from __future__ import annotations

from costaware.cli.arguments import COMMANDS_PACKAGE, ActionCommand, GroupCommand, lazy_load_command

# The declarations live by subject in config_budget, config_prices and config_runs; every name stays
# importable from here.
from costaware.cli.config_budget import ALERTS_COMMANDS, AUDIT_ARGS, BUDGET_COMMANDS, REPORT_ARGS
from costaware.cli.config_prices import CARBON_COMMANDS, PRICES_COMMANDS, SIMULATE_ARGS
from costaware.cli.config_runs import (
    ARG_SPOOL_DIR,
    ARG_USD_PER_GB_MONTH,
    CACHE_ARGS,
    CACHE_COMMANDS,
    JOBS_COMMANDS,
    RUNS_COMMANDS,
    SPOOL_COMMANDS,
)

__all__ = [
    "ALERTS_COMMANDS",
    "ARG_SPOOL_DIR",
    "ARG_USD_PER_GB_MONTH",
    "AUDIT_ARGS",
    "BUDGET_COMMANDS",
    "CACHE_ARGS",
    "CACHE_COMMANDS",
    "CARBON_COMMANDS",
    "COMMANDS",
    "DESCRIPTION",
    "JOBS_COMMANDS",
    "PRICES_COMMANDS",
    "REPORT_ARGS",
    "RUNS_COMMANDS",
    "SIMULATE_ARGS",
    "SPOOL_COMMANDS",
]

DESCRIPTION = "Budgets, cost reports and prices for ML retrains."
_COMMANDS = COMMANDS_PACKAGE

COMMANDS: tuple[ActionCommand | GroupCommand, ...] = (
    GroupCommand("budget", "set and inspect budgets", BUDGET_COMMANDS),
    ActionCommand(
        "report",
        "spend, estimates and savings versus on-demand",
        lazy_load_command(f"{_COMMANDS}.report.report"),
        REPORT_ARGS,
    ),
    ActionCommand(
        "audit",
        "budget changes, approvals, overrides and alerts sent: who, when, what",
        lazy_load_command(f"{_COMMANDS}.governance.audit"),
        AUDIT_ARGS,
    ),
    GroupCommand("alerts", "budget alert thresholds and notifiers", ALERTS_COMMANDS),
    GroupCommand("prices", "look up, refresh and import on-demand prices", PRICES_COMMANDS),
    GroupCommand(
        "carbon", "grid carbon intensity: show recorded or forecast values, import files", CARBON_COMMANDS
    ),
    ActionCommand(
        "simulate",
        "replay scheduling policies over recorded spot prices, availability and electricity prices",
        lazy_load_command(f"{_COMMANDS}.simulate.replay"),
        SIMULATE_ARGS,
        description=(
            "Replays policies over recorded data and prints, per policy: total USD, ratio to the oracle "
            "(the least cost any schedule could reach knowing the future), ratio to on_demand_now, deadline "
            "misses, preemptions and the share of hours on spot. With --carbon also kg CO2e; with "
            "--objective carbon or cost+carbon every policy and the oracle minimise that objective (jobs' "
            "power: their power_kw, else their instance type's at full load) and the ratios compare it."
        ),
    ),
    GroupCommand("cache", "list, show, evict and bill the feature cache", CACHE_COMMANDS),
    GroupCommand("runs", "retrain runs: model outcome, cost and reproducibility record", RUNS_COMMANDS),
    GroupCommand(
        "spool",
        "cost entries waiting for the ledger: show them, drain them into it now, drop a kept one",
        SPOOL_COMMANDS,
    ),
    GroupCommand(
        "jobs",
        "remote training jobs nobody follows: reconcile stops and bills them (--dry-run lists them)",
        JOBS_COMMANDS,
    ),
)
