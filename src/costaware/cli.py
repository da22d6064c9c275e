"""The ``costaware`` command: budgets, cost reports and price look-ups for MLOps leads.

The ledger URL comes from ``--ledger-url``, else ``COSTAWARE_LEDGER_URL``, else the SQLite file at
``$AIRFLOW_HOME/costaware/ledger.db`` (the same default the Airflow side uses).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections.abc import Sequence
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from costaware.core.errors import CostawareError
from costaware.core.money import format_usd_exact

FORMATS = ("table", "json", "csv")


def _when(text: str) -> datetime:
    """An ISO date (UTC midnight) or an ISO datetime with an offset."""
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), tzinfo=timezone.utc)
        value = datetime.fromisoformat(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO date (2026-11-01) or datetime") from e
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone: add one, e.g. {text}+00:00")
    return value


_AMOUNT = re.compile(r"^-?\$[\d,]+\.(\d+)$")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    for i in range(1, len(headers)):
        # Dollar columns mix cents and micro-dollars ($0.17, $0.170002): line their decimal points up.
        column = [row[i] for row in cells[1:]]
        found = [_AMOUNT.match(c) for c in column]
        if column and all(f or c == "-" for f, c in zip(found, column, strict=True)):
            places = max((len(f.group(1)) for f in found if f), default=0)
            for row, f in zip(cells[1:], found, strict=True):
                row[i] += " " * (places - len(f.group(1)) if f else 0)
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _emit(fmt: str, headers: Sequence[str], rows: Sequence[Sequence[Any]], payload: Any) -> None:
    if fmt == "json":
        print(json.dumps(payload, indent=2, default=str))
    elif fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(headers)
        writer.writerows(rows)
        print(out.getvalue(), end="")
    else:
        print(_table(headers, rows))


def _ledger(args: argparse.Namespace) -> Any:
    from costaware.adapters.ledger_store import Ledger

    return Ledger.from_url(args.ledger_url)


# -- budget ---------------------------------------------------------------------------------------


def _budget_set(args: argparse.Namespace) -> int:
    from costaware.cli_governance import current_actor

    budget = _ledger(args).set_budget(
        args.scope,
        args.period,
        args.cap_usd,
        cap_gpu_hours=args.cap_gpu_hours,
        timezone=args.timezone,
        actor=current_actor(),
    )
    gpu = f", {budget.cap_gpu_hours} GPU-hours" if budget.cap_gpu_hours is not None else ""
    print(f"budget '{budget.label}' set: {format_usd_exact(budget.cap_usd)} per {budget.period.value}{gpu}")
    return 0


def _budget_list(args: argparse.Namespace) -> int:
    budgets = _ledger(args).budgets()
    rows = [
        [
            str(b.scope),
            b.period.value,
            format_usd_exact(b.cap_usd),
            "" if b.cap_gpu_hours is None else b.cap_gpu_hours,
            b.timezone,
        ]
        for b in budgets
    ]
    payload = [
        dict(
            zip(
                ("scope", "period", "cap_usd", "cap_gpu_hours", "timezone"),
                (str(b.scope), b.period.value, str(b.cap_usd), b.cap_gpu_hours, b.timezone),
                strict=True,
            )
        )
        for b in budgets
    ]
    if not budgets and args.format == "table":
        print(
            "no budgets; set one with "
            "`costaware budget set --scope project=<name> --period month --cap-usd 100`"
        )
        return 0
    _emit(args.format, ["scope", "period", "cap", "GPU-hour cap", "time zone"], rows, payload)
    return 0


def _budget_show(args: argparse.Namespace) -> int:
    from costaware.adapters.ledger_governance import NoSchedule
    from costaware.cli_governance import forecast_cell, forecast_rows

    ledger = _ledger(args)
    usages = ledger.usage(args.scope, run_id=args.run_id)
    forecasts = forecast_rows(ledger, usages, schedule=NoSchedule() if args.no_schedule else None)
    headers = ["budget", "cap", "spent", "reserved", "left", "forecast (low-high)"]
    rows = [
        [
            u.name,  # project=churn/month (2026-11): the same name as on the Cost page and in task logs
            format_usd_exact(u.cap_usd),
            format_usd_exact(u.spent_usd),
            format_usd_exact(u.reserved_usd),
            format_usd_exact(u.left_usd),
            forecast_cell(f),
        ]
        for u, f in zip(usages, forecasts, strict=True)
    ]
    payload = [
        {
            "budget": u.label,
            "period": u.period_key,
            "cap_usd": str(u.cap_usd),
            "spent_usd": str(u.spent_usd),
            "reserved_usd": str(u.reserved_usd),
            "left_usd": str(u.left_usd),
            **f,
        }
        for u, f in zip(usages, forecasts, strict=True)
    ]
    _emit(args.format, headers, rows, payload)
    return 0


# -- report ---------------------------------------------------------------------------------------


def _report(args: argparse.Namespace) -> int:
    if args.efficiency:
        from costaware.cli_efficiency import report_efficiency

        return report_efficiency(args)
    ledger = _ledger(args)
    run_id = args.run_id
    if args.last_run:
        if not args.dag_id:
            raise CostawareError("--last-run needs --dag-id")
        run_id = ledger.last_run_id(args.dag_id)
        if run_id is None:
            raise CostawareError(f"the ledger has no entries for DAG {args.dag_id!r} yet")
    rows = ledger.report(
        group_by=args.group_by,
        since=args.since,
        until=args.until,
        dag_id=args.dag_id,
        run_id=run_id,
        scope=args.scope,
    )
    total_usd = sum((r.usd for r in rows), Decimal(0))
    total_od = sum((r.on_demand_usd for r in rows), Decimal(0))
    total_est = sum((r.estimated_usd for r in rows), Decimal(0))
    total_hours = sum((r.hours for r in rows), Decimal(0))
    headers = [args.group_by, "entries", "hours", "actual", "estimated", "on-demand", "savings"]
    prefix = f"{args.dag_id}." if args.dag_id and args.group_by == "task" else ""
    table = [
        [
            r.group.removeprefix(prefix),
            r.entries,
            f"{r.hours:.4f}",
            format_usd_exact(r.usd),
            format_usd_exact(r.estimated_usd),
            format_usd_exact(r.on_demand_usd),
            format_usd_exact(r.savings_usd),
        ]
        for r in rows
    ]
    payload = {
        "group_by": args.group_by,
        "dag_id": args.dag_id,
        "run_id": run_id,
        "rows": [
            {
                "group": r.group,
                "entries": r.entries,
                "hours": str(r.hours),
                "usd": str(r.usd),
                "estimated_usd": str(r.estimated_usd),
                "on_demand_usd": str(r.on_demand_usd),
                "savings_usd": str(r.savings_usd),
            }
            for r in rows
        ],
        "total": {
            "usd": str(total_usd),
            "estimated_usd": str(total_est),
            "on_demand_usd": str(total_od),
            "savings_usd": str(total_od - total_usd),
            "hours": str(total_hours),
        },
    }
    if args.format == "table":
        title = "cost report"
        if args.dag_id:
            title += f" for DAG {args.dag_id}"
        if run_id:
            title += f", run {run_id}"
        print(title)
        if not rows:
            print("(no entries)")
            return 0
        table.append(
            [
                "TOTAL",
                sum(r.entries for r in rows),
                f"{total_hours:.4f}",
                format_usd_exact(total_usd),
                format_usd_exact(total_est),
                format_usd_exact(total_od),
                format_usd_exact(total_od - total_usd),
            ]
        )
    from costaware.adapters.ledger_reports import Filters, summary

    totals = summary(ledger, Filters(args.since, args.until, args.dag_id, args.scope, run_id))
    from costaware.adapters.discount_report import discounts_by_rule

    discounts = discounts_by_rule(ledger, Filters(args.since, args.until, args.dag_id, args.scope, run_id))
    payload["discounts"] = {rule: str(usd) for rule, usd in discounts.items()}
    payload["failed_tries"] = {
        "preemption": totals.preempted_tries,
        "other": totals.failed_tries - totals.preempted_tries,
    }
    per_trial = _trial_costs(rows) if args.group_by == "trial" else None
    if per_trial is not None:
        payload["trials"] = {
            "trials": per_trial.trials,
            "successful": per_trial.successful,
            "per_trial_usd": str(per_trial.per_trial_usd),
            "per_successful_trial_usd": str(per_trial.per_successful_trial_usd),
        }
    _emit(args.format, headers, table, payload)
    if args.format == "table" and per_trial is not None:
        each = (
            "-"
            if per_trial.per_successful_trial_usd is None
            else format_usd_exact(per_trial.per_successful_trial_usd)
        )
        print(
            f"{per_trial.trials} trials, {per_trial.successful} trained to full fidelity: "
            f"{format_usd_exact(per_trial.per_trial_usd or Decimal(0))} per trial, "
            f"{each} per successful trial"
        )
    if args.format == "table" and discounts:
        listed = ", ".join(f"{rule} {format_usd_exact(usd)}" for rule, usd in discounts.items())
        print(f"discounts on on-demand prices (part of the savings): {listed}")
    if args.format == "table" and totals.failed_tries:
        print(
            f"failed tries: {totals.preempted_tries} after a spot preemption, "
            f"{totals.failed_tries - totals.preempted_tries} after other errors "
            "(--group-by cause splits their cost)"
        )
    return 0


def _trial_costs(rows: Sequence[Any]) -> Any:
    """Cost per trial and per successful trial, from the ``#<n> <state>@<fidelity>`` trial labels."""
    import re

    from costaware.core.tuning import TrialState, trial_costs

    costs = []
    for row in rows:
        found = re.match(r"^#\d+ ([a-z]+)@\d+$", row.group)
        if found and found.group(1) in {s.value for s in TrialState}:
            costs.append((TrialState(found.group(1)), row.usd))
    return trial_costs(costs) if costs else None


# -- wiring ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``costaware`` subcommand."""
    parser = argparse.ArgumentParser(
        prog="costaware", description="Budgets, cost reports and prices for ML retrains."
    )
    parser.add_argument(
        "--ledger-url",
        help="SQLAlchemy URL of the ledger (default: $COSTAWARE_LEDGER_URL, "
        "else $AIRFLOW_HOME/costaware/ledger.db)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    budget = sub.add_parser("budget", help="set and inspect budgets").add_subparsers(
        dest="action", required=True
    )
    b_set = budget.add_parser("set", help="create or change a budget")
    b_set.add_argument("--scope", required=True, help="tags the budget covers, e.g. project=churn,team=ml")
    b_set.add_argument("--period", required=True, help="run, day, month or total")
    b_set.add_argument("--cap-usd", required=True, help="the cap in USD, e.g. 250")
    b_set.add_argument("--cap-gpu-hours", default=None, help="optional cap in GPU-hours")
    b_set.add_argument("--timezone", default="UTC", help="where days and months start (IANA name)")
    b_set.set_defaults(func=_budget_set)
    b_list = budget.add_parser("list", help="list budgets")
    b_list.add_argument("--format", choices=FORMATS, default="table")
    b_list.set_defaults(func=_budget_list)
    b_show = budget.add_parser("show", help="spent, reserved and left for the budgets covering a scope")
    b_show.add_argument("--scope", required=True)
    b_show.add_argument("--run-id", default=None, help="the DAG run, for budgets with period 'run'")
    b_show.add_argument("--format", choices=FORMATS, default="table")
    b_show.add_argument(
        "--no-schedule",
        action="store_true",
        help="forecast without reading DAG timetables from Airflow (committed spend only)",
    )
    b_show.set_defaults(func=_budget_show)

    report = sub.add_parser("report", help="spend, estimates and savings versus on-demand")
    report.add_argument("--dag-id")
    report.add_argument("--run-id")
    report.add_argument("--last-run", action="store_true", help="the DAG's most recent run (needs --dag-id)")
    report.add_argument("--since", type=_when, help="ISO date or datetime, inclusive")
    report.add_argument("--until", type=_when, help="ISO date or datetime, exclusive")
    report.add_argument("--scope", default="*", help="only entries with these tags, e.g. project=churn")
    report.add_argument(
        "--group-by",
        default="task",
        help="dag, task, run, trial, kind, market, cause, outcome or tag:<name> (default: task)",
    )
    report.add_argument("--format", choices=FORMATS, default="table")
    report.set_defaults(func=_report)
    from costaware import cli_efficiency

    cli_efficiency.add_report_options(report)

    from costaware import cli_cache, cli_governance, cli_prices, cli_runs, cli_simulate

    cli_governance.add_parser(sub)

    cli_prices.add_parser(sub)
    cli_simulate.add_parser(sub)
    cli_cache.add_parser(sub)
    cli_runs.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``costaware`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CostawareError as e:
        print(f"costaware: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
