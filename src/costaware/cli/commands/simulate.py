"""``costaware simulate``: replay scheduling policies over recorded prices and spot capacity.

Imports no Airflow.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from costaware.cli.arguments import midnight_utc
from costaware.cli.output import emit
from costaware.core.carbon import OBJECTIVES, Objective
from costaware.core.errors import ConfigurationError, PriceNotFoundError, not_utf8_text, unreadable_file
from costaware.core.given import not_given
from costaware.core.money import format_usd_exact
from costaware.core.series import PriceSeries
from costaware.core.simulate import (
    DEFAULT_POLICIES,
    Job,
    MarketData,
    PolicySummary,
    SimulationReport,
    simulate,
)


def read_jobs(path: str | Path) -> list[Job]:
    """Jobs from a CSV file or a JSON list (or ``{"jobs": [...]}``).

    Raises:
        ConfigurationError: unreadable file, wrong shape, or a bad job (the message names it).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigurationError(unreadable_file("jobs file", path, e)) from e
    try:
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text reads it
    except UnicodeDecodeError as e:  # Excel's "Unicode Text" was a UnicodeDecodeError traceback
        raise ConfigurationError(not_utf8_text(Path(path).name, data, e.start, kind="a jobs file")) from e
    rows: Any
    # A byte-order mark (PowerShell 5's 'Out-File -Encoding utf8') made a JSON file a CSV of no rows.
    text = text.lstrip("\ufeff")
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
        reader = csv.DictReader(io.StringIO(text))
        rows = []
        for row in reader:
            if None in row:  # csv's key for the fields past the header's: they would be dropped in silence
                raise ConfigurationError(
                    f"jobs file {str(path)!r} line {reader.line_num} has {len(row[None])} more field(s) "
                    f"than the header ({', '.join(map(repr, row[None]))}): quote a value that holds commas, "
                    "and separate a job's zones with '|' (us-east-1a|us-east-1b)"
                )
            rows.append(row)
    return [Job.from_mapping(row) for row in rows]


def _market(
    args: argparse.Namespace, jobs: Sequence[Job], availability_file: str | None = None
) -> tuple[MarketData, list[str]]:
    from costaware.adapters import spot_prices
    from costaware.adapters.price_files import bundled_catalog, catalog_from_files, read_recorded_file

    if not jobs:  # said before the traces are read (they start at the first job: a traceback, before)
        raise ConfigurationError("no jobs to simulate; the jobs file has no rows")
    products = tuple(args.product or spot_prices.LINUX)
    histories: list[spot_prices.SpotPriceHistory] = []
    electricity: PriceSeries | None = None
    for file in args.prices or ():
        text = read_recorded_file(file, "price file")
        if spot_prices.is_electricity_csv(text):
            if electricity is not None:
                raise ConfigurationError(f"{file}: give one electricity price file, not several")
            electricity = spot_prices.electricity_from_text(text, source=Path(file).name)
        else:
            histories.append(
                spot_prices.spot_history_from_text(text, source=Path(file).name, products=products)
            )

    def spot_series(instance_type: str, region: str, zone: str | None) -> PriceSeries:
        holding = [h for h in histories if instance_type in h.instance_types]
        if not holding:
            known = sorted({t for h in histories for t in h.instance_types})
            raise PriceNotFoundError(
                f"unknown instance type {instance_type!r}: "
                f"the spot price files cover {', '.join(known) or 'nothing'}"
            )
        if zone is None:
            return holding[0].series(instance_type, region, None)
        # One file may hold every zone, or each zone may come from its own file: take the zone where it is.
        for history in holding:
            if zone in history.zones(instance_type, region):
                return history.series(instance_type, region, zone)
        present = sorted({z for h in holding for z in h.zones(instance_type, region)})
        raise PriceNotFoundError(
            f"zone {zone!r} has no {instance_type} spot prices in {', '.join(h.source for h in holding)} "
            f"(zones of {region} there: {', '.join(present) or 'none'}); add a --prices file with that "
            "zone's records or leave the zone out of --zones and the jobs' zones"
        )

    catalog = catalog_from_files(args.on_demand) if args.on_demand else bundled_catalog()

    def first_sample() -> datetime:
        return availability_start(args.availability_start) or min(j.submit_time for j in jobs)

    availability = None
    if availability_file:
        availability = spot_prices.load_availability(availability_file, start=first_sample())
    zone_traces = None
    if args.zones:
        zone_traces = {
            zone: spot_prices.load_availability(path, start=first_sample())
            for zone, path in zone_files(args.zones, zone_availability(args)).items()
        }
    notes = [note for h in histories for note in h.notes]
    if electricity is not None:
        notes += [f"{electricity.name}: {n}" for n in electricity.notes]
    objective, carbon = carbon_inputs(args)
    power_kw_of = None
    if carbon is not None:
        from costaware.adapters.carbon_data import machine_of, power_model

        model = power_model()

        def power_kw_of(instance_type: str, region: str) -> float:
            return model.power_kw(machine_of(catalog.offer(instance_type, region)), 1.0)

        notes += [f"{carbon.name}: {n}" for n in carbon.notes]
    if histories:
        notes += beyond_the_price_history(jobs, spot_series)
    data = MarketData(
        on_demand_usd_per_hour=catalog.on_demand_usd_per_hour,
        spot_series=spot_series if histories else None,
        electricity_usd_per_mwh=electricity,
        availability=availability,
        zone_availability=zone_traces,
        carbon_g_per_kwh=carbon,
        objective=objective,
        power_kw_of=power_kw_of,
    )
    return data, notes


#: How long after a series' last spot price record a job may run before the replay says it holds that price:
#: AWS records a spot price only when it changes, so weeks without a record are normal.
HISTORY_SLACK = timedelta(days=30)


def beyond_the_price_history(
    jobs: Sequence[Job], spot_series: Any, slack: timedelta = HISTORY_SLACK
) -> list[str]:
    """A note per spot series whose jobs run more than ``slack`` past its last record (its price is held).

    Without it a jobs file dated years after the price files replays on the last recorded price as if it
    were history; a series that cannot be found is left to the replay, which names it.
    """
    late: dict[tuple[str, str, str | None], list[Job]] = {}
    lasts: dict[tuple[str, str, str | None], datetime] = {}
    for job in jobs:
        # A job that lists zones is priced by each zone's own series.
        for zone in job.zones or (job.availability_zone,):
            key = (job.instance_type, job.region, zone)
            if key not in lasts:
                try:
                    lasts[key] = spot_series(*key).last
                except PriceNotFoundError:
                    continue
            if job.submit_time + timedelta(hours=float(job.deadline_hours)) > lasts[key] + slack:
                late.setdefault(key, []).append(job)
    return [
        f"{len(held)} job(s) of {instance_type} in {zone or region} ({held[0].name} first) have deadlines "
        f"more than {slack.days} days past the last spot price change recorded "
        f"({lasts[(instance_type, region, zone)]:%Y-%m-%d}): the replay holds that price for them; if the "
        "--prices files end before their dates, give files that cover them"
        for (instance_type, region, zone), held in late.items()
    ]


def carbon_inputs(args: argparse.Namespace) -> tuple[Objective, PriceSeries | None]:
    """The ``--objective`` (with ``--carbon-usd-per-tonne``) and the ``--carbon`` intensity series.

    Raises:
        ConfigurationError: an unknown objective, a missing or bad carbon price, an objective needing carbon
            without ``--carbon``, or no ``--prices`` under an objective that needs them (each named).
        InvalidPriceDataError: an unreadable or malformed carbon file.
    """
    name = getattr(args, "objective", None) or "cost"
    price = getattr(args, "carbon_usd_per_tonne", None)
    # A command line is no template: "None" or "null" is a typo or an unset variable, not "not given"
    # (Objective.parse reads it so, for a rendered param), and was refused before that reading.
    if not_given(name):
        raise ConfigurationError(
            f"--objective {name!r} is not one of {', '.join(OBJECTIVES)}: write one of them, or leave "
            "--objective out for cost"
        )
    if price is not None and not_given(price):
        raise ConfigurationError(
            f"--carbon-usd-per-tonne {price!r} is not a price: give USD per tonne CO2e (e.g. 100), or leave "
            "it out"
        )
    if str(name).strip() == "cost+carbon" and price in (None, ""):
        raise ConfigurationError(
            "--objective cost+carbon needs --carbon-usd-per-tonne N (USD per tonne CO2e, e.g. 100)"
        )
    objective = Objective.parse(name, price)
    if price not in (None, "") and objective.name != "cost+carbon":
        raise ConfigurationError(
            f"--carbon-usd-per-tonne {price} is only used by --objective cost+carbon, not {objective.name!r}"
        )
    file = getattr(args, "carbon", None)
    if objective.needs_carbon and not file:
        raise ConfigurationError(
            f"--objective {objective.name} needs --carbon (a bundled grid zone such as DE-LU, or an hourly "
            "carbon intensity CSV, timestamp_utc,g_co2eq_per_kwh_lca)"
        )
    if not args.prices and objective.name != "carbon":
        raise ConfigurationError(
            f"--objective {objective.name} needs --prices (spot price histories or an electricity CSV); "
            "only --objective carbon runs without prices"
        )
    if not file:
        return objective, None
    from costaware.adapters.carbon_data import bundled_carbon, bundled_zones, load_carbon

    if file in bundled_zones() and not Path(file).exists():  # a zone, as the operators take it
        return objective, bundled_carbon(file)
    if not Path(file).exists() and "/" not in file and "." not in file:
        # Neither a file nor a bundled zone: most likely a zone typed wrong ("gb", "DE_LU", "AU-NSV"); said as
        # such, with the zones there are, rather than "cannot read carbon intensity file 'gb'".
        from costaware.adapters.carbon_recorded import near_zones

        zones = bundled_zones()
        near = near_zones(file, zones)
        meant = f"did you mean {near[0]!r}? " if near else ""
        raise ConfigurationError(
            f"--carbon {file!r} is neither a file nor a bundled grid zone: {meant}bundled are "
            f"{', '.join(zones)} (case-sensitive); or give the path of an hourly carbon intensity CSV"
        )
    return objective, load_carbon(file)


def availability_start(value: str | None) -> datetime | None:
    """The ``--availability-start`` time, or ``None`` if not given.

    An ISO 8601 time with a time zone (``Z`` for UTC), or a date alone (its midnight UTC, as
    ``report --since`` and ``carbon show --start`` read one).

    Raises:
        ConfigurationError: the value does not parse, or is a time without a time zone.
    """
    if not value:
        return None
    try:
        text = value.strip()
        start = midnight_utc(text) or datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise ConfigurationError(
            f"--availability-start {value!r} is not an ISO time; write e.g. 2022-10-26T00:00:00Z"
        ) from e
    if start.tzinfo is None:
        raise ConfigurationError(
            f"--availability-start {value!r} has no time zone; add one, e.g. {start.isoformat()}Z for UTC"
        )
    return start


def zone_availability(args: argparse.Namespace) -> list[str]:
    """The ``--availability`` traces that belong to ``--zones`` naming zones only (one per zone, in order)."""
    items = [item for value in args.zones or () for item in value.split(",")]
    if items and not any("=" in item for item in items):
        return list(args.availability or ())
    return []


def zone_files(values: Sequence[str], traces: Sequence[str] = ()) -> dict[str, str]:
    """``{"zone": "trace path"}`` from ``--zones`` values ``ZONE=TRACE[,ZONE=TRACE...]``.

    With ``traces`` (the ``--availability`` files), the values name zones only (``ZONE[,ZONE...]``) and the
    traces pair with them in order.

    Raises:
        ConfigurationError: an item without ``=`` (and no traces), a zone given twice, or as many traces as
            zones not given.
    """
    from costaware.adapters.compute.base import check_aws_zone

    found: dict[str, str] = {}
    items = [item for value in values for item in value.split(",")]
    if traces:
        zones = [item.strip() for item in items]
        if not all(zones):
            raise ConfigurationError(
                f"--zones {','.join(items)!r} has an empty zone name; write e.g. us-west-2a,us-west-2b"
            )
        if len(traces) != len(zones):
            raise ConfigurationError(
                f"--zones names {len(zones)} zones ({', '.join(zones)}) but {len(traces)} --availability "
                "traces were given; give one trace per zone, in the order of the zones, or write ZONE=TRACE"
            )
        items = [f"{zone}={trace}" for zone, trace in zip(zones, traces, strict=True)]
    for item in items:
        zone, sep, path = item.partition("=")
        if not sep or not zone.strip() or not path.strip():
            raise ConfigurationError(
                f"--zones item {item!r} must be ZONE=TRACE, e.g. us-west-2a=trace_a.json, or name zones only "
                "and give one --availability trace per zone"
            )
        if zone.strip() in found:
            raise ConfigurationError(f"--zones names zone {zone.strip()!r} twice")
        check_aws_zone(zone.strip())  # a region or an upper-case name: said as such, not "no prices"
        found[zone.strip()] = path.strip()
    return found


def table_rows(
    report: SimulationReport | dict[str, SimulationReport], *, fractions: bool = False
) -> tuple[list[str], list[tuple[str, ...]]]:
    """The headers and rows ``costaware simulate`` prints: a row per policy (and per trace, given several).

    ``fractions``: ``spot_share`` as a number of 1 (``0.45``), as CSV and JSON give it, not ``45.0%``.
    """
    reports = report if isinstance(report, dict) else {"": report}
    by_trace = isinstance(report, dict)
    carbon = any(s.kg_co2e is not None for one in reports.values() for s in one.summaries.values())
    headers = [
        *(("trace",) if by_trace else ()),
        "policy",
        "usd",
        *(("kg_co2e",) if carbon else ()),
        "vs_oracle",
        "vs_on_demand",
        "deadline_misses",
        "late",
        "preemptions",
        "spot_share",
    ]
    rows = [
        (*((trace,) if by_trace else ()), *_row(name, s, carbon=carbon, fractions=fractions))
        for trace, one in reports.items()
        for name, s in one.summaries.items()
    ]
    return headers, rows


def _row(name: str, s: PolicySummary, *, carbon: bool = False, fractions: bool = False) -> tuple[str, ...]:
    emissions = "unknown" if s.kg_co2e is None else f"{s.kg_co2e.quantize(Decimal('0.001'))}"
    return (
        name,
        format_usd_exact(s.usd.quantize(Decimal("0.01"))) if s.usd_known else "unknown",
        *((emissions,) if carbon else ()),
        "-" if s.vs_oracle is None else f"{s.vs_oracle:.3f}",
        "-" if s.vs_on_demand is None else f"{s.vs_on_demand:.3f}",
        str(s.deadline_misses),
        str(s.late),
        str(s.preemptions),
        f"{round(s.spot_share, 4):g}" if fractions else f"{s.spot_share:.1%}",
    )


def replay(args: argparse.Namespace) -> int:
    """Replay the policies over the recorded data and print a row per policy (and per trace)."""
    carbon_inputs(args)  # a bad objective, carbon price or missing file fails before the jobs are read
    jobs = read_jobs(args.jobs)
    zone_traces = zone_availability(args)
    if args.zones:
        every = tuple(zone_files(args.zones, zone_traces))
        jobs = [j if j.zones or j.availability_zone else dataclasses.replace(j, zones=every) for j in jobs]
    traces = list(args.availability or [])
    if args.zones and traces and not zone_traces and all(j.zones for j in jobs):
        # A job pinned to one zone (availability_zone, no zones) reads --availability; here none is.
        raise ConfigurationError(
            "--availability with --zones ZONE=TRACE: every job runs in the zones, each with its trace, so "
            "the --availability trace would be ignored; drop it, or name zones only in --zones (ZONE,ZONE) "
            "and give one --availability trace per zone"
        )
    if zone_traces:
        if args.by_trace:
            raise ConfigurationError(
                "--by-trace compares --availability traces, but with --zones naming zones only they are the "
                "zones' traces; drop --by-trace or write --zones ZONE=TRACE"
            )
        traces = []  # one replay: the traces belong to the zones
    availability_start(args.availability_start)  # a bad value fails before any file is read
    if args.availability_start and not traces and not args.zones:
        raise ConfigurationError("--availability-start needs --availability or --zones")
    if args.by_trace and not traces:
        raise ConfigurationError("--by-trace needs at least one --availability trace")
    if len(traces) > 1 and not args.by_trace:
        raise ConfigurationError(
            f"{len(traces)} availability traces given; add --by-trace to replay the jobs once per trace"
        )
    repeated = sorted({t for t in traces if traces.count(t) > 1})
    if repeated:
        raise ConfigurationError(
            f"--availability {repeated[0]} is given more than once: give each trace once"
        )
    tick = None
    if args.tick_minutes is not None:
        if not args.tick_minutes > 0:
            raise ConfigurationError(f"--tick-minutes must be > 0, got {args.tick_minutes}")
        tick = timedelta(minutes=args.tick_minutes)
    reports: dict[str, SimulationReport] = {}
    notes: list[str] = []
    stems = [Path(t).stem for t in traces]
    for trace in traces or [None]:
        data, trace_notes = _market(args, jobs, trace)
        notes += [n for n in trace_notes if n not in notes]
        # Named by the file's stem, or by its path where two traces share one (a/trace.json, b/trace.json:
        # the second's row replaced the first's).
        name = (Path(trace).stem if stems.count(Path(trace).stem) == 1 else trace) if trace else ""
        reports[name] = simulate(
            jobs,
            data,
            args.policy or DEFAULT_POLICIES,
            tick=tick,
            restart_guard=args.restart_guard,
        )
    for note in notes:
        print(f"costaware: note: {note}", file=sys.stderr)
    if args.by_trace:
        headers, rows = table_rows(reports, fractions=args.format == "csv")
        payload: dict[str, Any] = {"traces": {name: r.to_json() for name, r in reports.items()}}
        emit(rows, args.format, headers=headers, payload=payload, labels=2)
        return 0
    (only,) = reports.values()
    headers, rows = table_rows(only, fractions=args.format == "csv")
    emit(rows, args.format, headers=headers, payload=only.to_json())
    if args.format == "table":
        objective = only.objective
        compared = (
            "total USD" if objective.name == "cost" else f"the {objective.name} objective ({objective.unit})"
        )
        print(f"\n{len(jobs)} jobs; ratios compare {compared} (oracle = least possible with hindsight).")
    return 0
