"""``costaware simulate``: replay scheduling policies over recorded prices and spot capacity.

Wired into ``costaware.cli`` with :func:`add_parser` and :func:`run`. Imports no Airflow.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from costaware.core.errors import ConfigurationError, CostawareError, PriceNotFoundError
from costaware.core.money import format_usd_exact
from costaware.core.policies import POLICIES
from costaware.core.series import PriceSeries
from costaware.core.simulate import (
    DEFAULT_POLICIES,
    Job,
    MarketData,
    PolicySummary,
    SimulationReport,
    simulate,
)


def add_parser(subparsers: Any) -> None:
    """Register the ``simulate`` subcommand on an ``argparse`` subparsers object."""
    parser = subparsers.add_parser(
        "simulate",
        help="replay scheduling policies over recorded spot prices, availability and electricity prices",
        description=(
            "Replays policies over recorded data and prints, per policy: total USD, ratio to the oracle "
            "(the least cost any schedule could reach knowing the future), ratio to on_demand_now, deadline "
            "misses, preemptions and the share of hours on spot."
        ),
    )
    parser.add_argument(
        "--prices",
        action="append",
        required=True,
        metavar="FILE",
        help="spot price history (DescribeSpotPriceHistory JSON or CSV) or hourly electricity CSV (repeat)",
    )
    parser.add_argument(
        "--availability",
        action="append",
        metavar="FILE",
        help="spot availability trace (JSON, 0/1 per tick); repeat with --by-trace to compare traces",
    )
    parser.add_argument(
        "--zones",
        action="append",
        metavar="ZONE=TRACE[,ZONE=TRACE...]",
        help="zones to run in, each with its availability trace; jobs without a 'zones' column use them all "
        "(start in the cheapest zone with capacity, fail over on preemption); repeatable",
    )
    parser.add_argument(
        "--by-trace",
        action="store_true",
        help="replay the jobs once per --availability trace and print one row per trace and policy",
    )
    parser.add_argument(
        "--availability-start",
        metavar="TIME",
        help="ISO time of the trace's first sample (default: the earliest submit time)",
    )
    parser.add_argument(
        "--jobs",
        required=True,
        metavar="FILE",
        help="jobs file, CSV or JSON; optional column 'priority': critical, normal (default) or best_effort",
    )
    parser.add_argument(
        "--policy",
        action="append",
        choices=sorted(POLICIES),
        metavar="NAME",
        help=f"policy to report, repeatable (default: all: {', '.join(DEFAULT_POLICIES)})",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument(
        "--on-demand", metavar="FILE", help="on-demand price CSV (default: the bundled AWS snapshot)"
    )
    parser.add_argument(
        "--product",
        action="append",
        metavar="DESCRIPTION",
        help="spot product description to keep (default: Linux/UNIX); repeatable",
    )
    parser.add_argument(
        "--tick-minutes", type=float, metavar="N", help="grid spacing (default: trace's, else 10)"
    )
    parser.set_defaults(func=run)


def read_jobs(path: str | Path) -> list[Job]:
    """Jobs from a CSV file or a JSON list (or ``{"jobs": [...]}``).

    Raises:
        ConfigurationError: unreadable file, wrong shape, or a bad job (the message names it).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigurationError(f"cannot read jobs file {str(path)!r}: {e.strerror}") from e
    rows: Any
    if text.lstrip().startswith(("[", "{")):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigurationError(
                f"jobs file {str(path)!r} is not valid JSON at line {e.lineno}: {e.msg}"
            ) from e
        rows = document.get("jobs") if isinstance(document, dict) else document
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ConfigurationError(f"jobs file {str(path)!r} must hold a list of job objects")
    else:
        rows = list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"))))
    return [Job.from_mapping(row) for row in rows]


def _market(
    args: argparse.Namespace, jobs: Sequence[Job], availability_file: str | None = None
) -> tuple[MarketData, list[str]]:
    from costaware.adapters import spot_prices
    from costaware.adapters.price_files import bundled_catalog, catalog_from_files

    products = tuple(args.product or spot_prices.LINUX)
    histories: list[spot_prices.SpotPriceHistory] = []
    electricity: PriceSeries | None = None
    for file in args.prices:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigurationError(f"cannot read price file {file!r}: {e.strerror}") from e
        if spot_prices.is_electricity_csv(text):
            if electricity is not None:
                raise ConfigurationError(f"{file}: give one electricity price file, not several")
            electricity = spot_prices.electricity_from_text(text, source=Path(file).name)
        else:
            histories.append(
                spot_prices.spot_history_from_text(text, source=Path(file).name, products=products)
            )

    def spot_series(instance_type: str, region: str, zone: str | None) -> PriceSeries:
        for history in histories:
            if instance_type in history.instance_types:
                return history.series(instance_type, region, zone)
        known = sorted({t for h in histories for t in h.instance_types})
        raise PriceNotFoundError(
            f"unknown instance type {instance_type!r}: "
            f"the spot price files cover {', '.join(known) or 'nothing'}"
        )

    catalog = catalog_from_files(args.on_demand) if args.on_demand else bundled_catalog()
    availability = None
    if availability_file:
        if args.availability_start:
            start = datetime.fromisoformat(args.availability_start.replace("Z", "+00:00"))
        else:
            start = min(j.submit_time for j in jobs)
        availability = spot_prices.load_availability(availability_file, start=start)
    zone_traces = None
    if args.zones:
        start = (
            datetime.fromisoformat(args.availability_start.replace("Z", "+00:00"))
            if args.availability_start
            else min(j.submit_time for j in jobs)
        )
        zone_traces = {
            zone: spot_prices.load_availability(path, start=start)
            for zone, path in zone_files(args.zones).items()
        }
    notes = [note for h in histories for note in h.notes]
    if electricity is not None:
        notes += [f"{electricity.name}: {n}" for n in electricity.notes]
    data = MarketData(
        on_demand_usd_per_hour=catalog.on_demand_usd_per_hour,
        spot_series=spot_series if histories else None,
        electricity_usd_per_mwh=electricity,
        availability=availability,
        zone_availability=zone_traces,
    )
    return data, notes


def zone_files(values: Sequence[str]) -> dict[str, str]:
    """``{"zone": "trace path"}`` from ``--zones`` values ``ZONE=TRACE[,ZONE=TRACE...]``.

    Raises:
        ConfigurationError: an item without ``=``, or a zone given twice.
    """
    found: dict[str, str] = {}
    for value in values:
        for item in value.split(","):
            zone, sep, path = item.partition("=")
            if not sep or not zone.strip() or not path.strip():
                raise ConfigurationError(
                    f"--zones item {item!r} must be ZONE=TRACE, e.g. us-west-2a=trace_a.json"
                )
            if zone.strip() in found:
                raise ConfigurationError(f"--zones names zone {zone.strip()!r} twice")
            found[zone.strip()] = path.strip()
    return found


def format_table(report: SimulationReport | dict[str, SimulationReport]) -> str:
    """The table ``costaware simulate`` prints: a row per policy (and per trace, given several reports)."""
    reports = report if isinstance(report, dict) else {"": report}
    by_trace = isinstance(report, dict)
    header = (
        *(("trace",) if by_trace else ()),
        "policy",
        "usd",
        "vs_oracle",
        "vs_on_demand",
        "deadline_misses",
        "late",
        "preemptions",
        "spot_share",
    )
    rows = [header]
    for trace, one in reports.items():
        rows += [(*((trace,) if by_trace else ()), *_row(name, s)) for name, s in one.summaries.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            c.ljust(w) if i < (2 if by_trace else 1) else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    return "\n".join(lines)


def _row(name: str, s: PolicySummary) -> tuple[str, ...]:
    return (
        name,
        format_usd_exact(s.usd.quantize(Decimal("0.01"))),
        "-" if s.vs_oracle is None else f"{s.vs_oracle:.3f}",
        "-" if s.vs_on_demand is None else f"{s.vs_on_demand:.3f}",
        str(s.deadline_misses),
        str(s.late),
        str(s.preemptions),
        f"{s.spot_share:.1%}",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``costaware simulate``; 0 on success, 2 on bad input (the message goes to stderr)."""
    try:
        jobs = read_jobs(args.jobs)
        if args.zones:
            every = tuple(zone_files(args.zones))
            jobs = [
                j if j.zones or j.availability_zone else dataclasses.replace(j, zones=every) for j in jobs
            ]
        traces = list(args.availability or [])
        if args.availability_start and not traces:
            raise ConfigurationError("--availability-start needs --availability")
        if args.by_trace and not traces:
            raise ConfigurationError("--by-trace needs at least one --availability trace")
        if len(traces) > 1 and not args.by_trace:
            raise ConfigurationError(
                f"{len(traces)} availability traces given; add --by-trace to replay the jobs once per trace"
            )
        tick = None
        if args.tick_minutes is not None:
            if not args.tick_minutes > 0:
                raise ConfigurationError(f"--tick-minutes must be > 0, got {args.tick_minutes}")
            from datetime import timedelta

            tick = timedelta(minutes=args.tick_minutes)
        reports: dict[str, SimulationReport] = {}
        notes: list[str] = []
        for trace in traces or [None]:
            data, notes = _market(args, jobs, trace)
            name = Path(trace).stem if trace else ""
            reports[name] = simulate(jobs, data, args.policy or DEFAULT_POLICIES, tick=tick)
    except CostawareError as e:
        print(f"costaware simulate: error: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.by_trace:
        if args.format == "json":
            print(json.dumps({"traces": {name: r.to_json() for name, r in reports.items()}}))
        else:
            print(format_table(reports))
    elif args.format == "json":
        print(json.dumps(reports[next(iter(reports))].to_json()))
    else:
        print(format_table(reports[next(iter(reports))]))
        print(f"\n{len(jobs)} jobs; ratios compare total USD (oracle = least cost possible with hindsight).")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m costaware.cli_simulate simulate ...``."""
    parser = argparse.ArgumentParser(prog="costaware")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
