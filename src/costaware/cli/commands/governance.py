"""``costaware audit``, the forecast columns of ``costaware budget show``, and who runs a command.

The forecast counts the runs still to come from the DAGs' timetables in the Airflow metadata database when
Airflow and its database are reachable from where the command runs; elsewhere it forecasts what is
committed (spent + reserved) only, and says so. ``costaware alerts set`` and ``alerts list`` are in
:mod:`.alerts_set` and :mod:`.alerts_list`.
"""

from __future__ import annotations

import argparse
import getpass
import json
from collections.abc import Sequence
from typing import Any

from costaware.cli.arguments import open_ledger
from costaware.cli.output import emit
from costaware.core.money import format_usd_exact


def current_actor() -> str:
    """Who runs this command, for the audit trail (``$USER``, else ``unknown``)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def forecast_rows(ledger: Any, usages: Sequence[Any], *, schedule: Any = None) -> list[dict[str, Any]]:
    """For each usage (of ``Ledger.usage``), its forecast fields; ``None`` for per-run budgets.

    Args:
        ledger: The ledger.
        usages: ``BudgetUsage`` rows, as ``budget show`` prints them.
        schedule: A ``RunSchedule``; default: the Airflow metadata database's timetables.
    """
    from costaware.adapters.ledger.governance import budget_outlook
    from costaware.core.budgets import Period
    from costaware.core.ledger import utcnow

    if schedule is None:
        from costaware.adapters.airflow_schedule import AirflowSchedule

        schedule = AirflowSchedule()
    by_label = {b.label: b for b in ledger.budgets()}
    at = utcnow()  # one instant for every budget: a DAG's runs in a window are counted once
    out: list[dict[str, Any]] = []
    for usage in usages:
        budget = by_label.get(usage.label)
        if budget is None or budget.period is Period.RUN:
            # The same keys as a forecast row: a script reading row["runs_left"] failed on a per-run budget.
            out.append(
                {
                    "forecast_usd": None,
                    "forecast_low_usd": None,
                    "forecast_high_usd": None,
                    "runs_left": None,
                    "forecast_above_cap": None,
                }
            )
            continue
        f = budget_outlook(ledger, budget, schedule, at=at).forecast
        out.append(
            {
                "forecast_usd": str(f.forecast_usd),
                "forecast_low_usd": str(f.low_usd),
                "forecast_high_usd": str(f.high_usd),
                "runs_left": f.runs_left,
                "forecast_above_cap": f.crosses(usage.cap_usd),
            }
        )
    return out


def forecast_cell(row: dict[str, Any]) -> str:
    """``$12.00 ($10.00-$15.00)``, or ``-`` without a forecast."""
    if row.get("forecast_usd") is None:
        return "-"
    from decimal import Decimal

    mark = " !" if row.get("forecast_above_cap") else ""
    return (
        f"{format_usd_exact(Decimal(row['forecast_usd']))} "
        f"({format_usd_exact(Decimal(row['forecast_low_usd']))}"
        f"-{format_usd_exact(Decimal(row['forecast_high_usd']))}){mark}"
    )


def audit(args: argparse.Namespace) -> int:
    """Print the audit trail: who changed which budget, approved or overrode what, and when."""
    from costaware.adapters.ledger.audit import audit_log

    entries = audit_log(open_ledger(args, reading=True, read_only=True), since=args.since, action=args.action)
    if not entries and args.format == "table":
        print("no audit entries" + (f" since {args.since.isoformat()}" if args.since else ""))
        return 0
    headers = ["when (UTC)", "who", "action", "target", "details"]
    rows = [
        [
            e.at.strftime("%Y-%m-%d %H:%M:%S"),
            e.actor,
            e.action,
            e.target,
            json.dumps(e.details, sort_keys=True, default=str),
        ]
        for e in entries
    ]
    payload = [
        {
            "id": e.id,
            "at": e.at.isoformat(),
            "actor": e.actor,
            "action": e.action,
            "target": e.target,
            "details": e.details,
        }
        for e in entries
    ]
    # Every column is text: left-aligned (right-aligned, the details were padded to the widest row).
    emit(rows, args.format, headers=headers, payload=payload, labels=len(headers))
    return 0
