"""``costaware carbon show``: a grid zone's hourly carbon intensity, from a carbon source.

The source (``costaware.adapters.carbon_source``) is the recorded files (the costaware home's carbon folder,
then the bundled 2023 files), the bundled files only, a folder or file, or the live GB Carbon Intensity API.
Hours a recorded source lacks are shown as the ledger's emissions and the carbon-aware waits read them.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING

from costaware.cli.output import emit, render_table
from costaware.core.errors import ConfigurationError, PriceNotFoundError

if TYPE_CHECKING:
    from costaware.core.series import PriceSeries

_HOUR = timedelta(hours=1)


def _plain(value: Decimal) -> str:
    """``281.66``; ``150`` for ``150.000000``."""
    return format(value.quantize(Decimal("0.01")).normalize(), "f")


def _kind(name: str, forecast: bool) -> str:
    if name.startswith("typical year"):
        return "typical-year estimate"
    if name.startswith("recorded ("):
        return "recorded, and a typical-year estimate for the other hours"
    if ", then its profile for the rest of " in name:
        return "recorded, and the file's profile for the rest of an hour it starts or ends inside"
    if "perfect forecast" in name:
        return "recorded (as a perfect forecast)"
    if forecast:
        return "forecast"
    return "measured (live)" if " live " in name else "recorded"


def show(args: argparse.Namespace) -> int:
    """Print the hourly intensity of a zone, its mean, min and max, and whether it is forecast or recorded."""
    import json

    from costaware.adapters.carbon_source import RecordedCarbon, carbon_source

    if not 1 <= args.hours <= 8784:  # a year at most (999999999 overflowed the calendar)
        raise ConfigurationError(f"--hours must be 1 to 8784 (a year), got {args.hours}")
    now = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    start = args.start.astimezone(timezone.utc) if args.start is not None else now
    source = carbon_source(args.source)
    unrecorded: list[datetime] = []  # hours left out: no file records them and the zone has no typical year
    forecast = start >= now  # the future (or now): what the source forecasts
    try:
        if forecast:
            series = source.forecast(args.zone, start, args.hours)
        else:
            series = source.intensity(args.zone, start, start + args.hours * _HOUR)
    except PriceNotFoundError as e:
        # Past hours no file records are priced by the ledger's emissions at the typical year too: show that.
        typical = _typical_year(source, args.zone, start, args.hours)
        if typical is None:
            typical, unrecorded = _recorded_part(source, args.zone, start, args.hours)
        if typical is None:
            # A --start helps only a zone the source records: for an unknown or miscased zone ("gb",
            # "US-EAST") it sent the user hunting for hours that no file has.
            recorded = getattr(source, "zones", None)
            if recorded is not None and args.zone not in recorded:
                raise
            # Nor for a zone whose only files are left out (one record nothing places): it has no hours.
            if isinstance(source, RecordedCarbon) and not source.zone_files(args.zone):
                raise
            raise PriceNotFoundError(f"{e}; or pass --start within the recorded hours") from e
        series = typical
    kind = _kind(series.name, forecast)
    fallback = _fallback_note(source, args, start)
    if unrecorded:
        fallback = (
            f"{args.zone} has no value for {len(unrecorded)} of these {args.hours} hour(s), from "
            f"{unrecorded[0]:%Y-%m-%d %H:%M} UTC: no file records them and {args.zone} has no bundled "
            "typical year; they are left out; import a file that covers them (costaware carbon import FILE "
            f"--zone {args.zone})"
        )
    hours = [
        start + i * _HOUR
        for i in range(args.hours)
        if start + i * _HOUR >= series.start and start + i * _HOUR not in unrecorded
    ]
    values = [series.mean_usd_per_hour(h, h + _HOUR) for h in hours]
    if not values:
        raise ConfigurationError(f"{series.name} has no value from {start.isoformat()}")
    mean = sum(values, Decimal(0)) / len(values)
    if args.format == "json":
        payload = {
            "zone": args.zone,
            "source": args.source,
            "series": series.name,
            "kind": kind,
            "unit": "gCO2e/kWh",
            "hours": [
                {"hour": h.isoformat(), "g_co2e_per_kwh": _plain(v)}
                for h, v in zip(hours, values, strict=True)
            ],
            "mean": _plain(mean),
            "min": _plain(min(values)),
            "max": _plain(max(values)),
        }
        if fallback:
            payload["note"] = fallback
        print(json.dumps(payload, indent=2))
        return 0
    rows = [[f"{h:%Y-%m-%d %H:%M}", _plain(v)] for h, v in zip(hours, values, strict=True)]
    emit(rows, args.format, headers=["hour (UTC)", "gCO2e/kWh"])
    said = f"{args.zone}: {len(values)} hour(s), {kind}, from {series.name.removesuffix(', recorded')}"
    if args.format == "table":
        print()
        summary = [["mean", _plain(mean)], ["min", _plain(min(values))], ["max", _plain(max(values))]]
        print(render_table(["", "gCO2e/kWh"], summary))
        print(f"\n{said}")
    elif args.format == "csv":  # estimates are not to pass for records where the rows go on alone
        print(said, file=sys.stderr)
    if fallback:
        print(f"costaware: note: {fallback}", file=sys.stderr)
    return 0


def _typical_year(source: object, zone: str, start: datetime, hours: int) -> PriceSeries | None:
    """The bundled year's intensity at the same dates and hours, for hours a recorded source lacks.

    What the ledger's emissions and the carbon-aware waits use for such hours (a typical-year estimate), so
    that ``carbon show --zone GB`` answers as they do; None where the source is live or the zone is not
    bundled.
    """
    from costaware.adapters.carbon_data import bundled_carbon, bundled_zones
    from costaware.adapters.carbon_source import RecordedCarbon, recorded_end
    from costaware.core.series import PriceSeries
    from costaware.core.spot_forecast import hourly_series

    if not isinstance(source, RecordedCarbon) or zone not in bundled_zones():
        return None
    bundled = bundled_carbon(zone)
    values = hourly_series(bundled, start, hours)
    times = [start + i * _HOUR for i in range(hours)]
    # The hours a file does cover keep its values: a window running past an import's end showed the
    # bundled year for every hour, the imported ones too, as "nothing recorded".
    recorded = source.covered_hours(zone, start, hours)
    recorded_seconds = len(recorded) * _HOUR.total_seconds()
    # So do the bundled year's own hours: a window from 2023-12-31 20:00 said "nothing recorded from
    # 2023-12-31 20:00", its four recorded 2023 hours counted as estimates.
    year_end = recorded_end(bundled)
    in_bundled = [t for t in times if t not in recorded and bundled.start <= t < year_end]
    # An hour a file starts or ends inside (a half-hourly import from 22:30, or to 23:30): its recorded
    # parts, the typical year for the rest; the end read as the waits read it (then_typical_year). Each was
    # shown as typical year whole.
    for hour in (t for t in times if t not in recorded and t not in in_bundled):
        parts = source.recorded_parts(zone, hour, hour + _HOUR)
        if parts:
            recorded[hour] = _typical_year_around(parts, zone, hour).mean_usd_per_hour(hour, hour + _HOUR)
            recorded_seconds += sum((reached - part.start).total_seconds() for part, reached in parts)
    files = [f.name for f in source.files.get(zone, [])] if recorded else []
    recorded |= {t: bundled.mean_usd_per_hour(t, t + _HOUR) for t in in_bundled}
    recorded_seconds += len(in_bundled) * _HOUR.total_seconds()
    files += [bundled.name] if in_bundled else []
    typical = f"{bundled.name} at the same dates and hours"
    if recorded:
        count = f"{round(recorded_seconds / 3600, 2):g}"
        name = f"recorded ({', '.join(files)}) for {count} of {hours} hour(s), else typical year: {typical}"
    else:
        name = f"typical year: {typical} (nothing recorded from {start:%Y-%m-%d %H:%M} UTC)"
    return PriceSeries(
        times,
        [recorded.get(t, Decimal(repr(round(value, 2)))) for t, value in zip(times, values, strict=True)],
        name=name,
    )


def _typical_year_around(parts: list[tuple[PriceSeries, datetime]], zone: str, hour: datetime) -> PriceSeries:
    """``hour``'s recorded ``parts``, each followed by the typical year up to the next (or the hour's end).

    Before the first part, the typical year too: the hour a file starts inside. After a part, the typical year
    as :func:`~costaware.adapters.carbon_source.then_typical_year` gives it to the waits.
    """
    from costaware.adapters.carbon_source import then_typical_year
    from costaware.core.series import PriceSeries

    first = parts[0][0]
    lead = then_typical_year(first, zone, until=first.start, end=hour) if first.start > hour else None
    points = [] if lead is None else [p for p in lead.points if p[0] < first.start]
    for index, (part, reached) in enumerate(parts):
        until = parts[index + 1][0].start if index + 1 < len(parts) else hour + _HOUR
        points += then_typical_year(part, zone, until=until, end=reached).points
    return PriceSeries([at for at, _ in points], [value for _, value in points], name=first.name)


def _recorded_part(
    source: object, zone: str, start: datetime, hours: int
) -> tuple[PriceSeries | None, list[datetime]]:
    """The hours a file records, and those it does not, for a zone without a typical year to fill them.

    A window partly past an imported file of such a zone (PL) showed no hour at all, its recorded ones too.
    An hour a file starts or ends inside (a half-hourly import from 22:30, or to 23:30) counts, as for a
    bundled zone: its recorded parts, the file's profile for the rest (:func:`profile_around`); the hour
    a file starts inside was left out, and of two stretches in one hour the second was read as the first
    file's profile. ``(None, [])`` where no hour is recorded.
    """
    from costaware.adapters.carbon_source import RecordedCarbon, profile_around
    from costaware.core.series import PriceSeries

    if not isinstance(source, RecordedCarbon):
        return None, []
    recorded = source.covered_hours(zone, start, hours)
    recorded_seconds = len(recorded) * _HOUR.total_seconds()
    part_recorded: list[datetime] = []
    for hour in (start + i * _HOUR for i in range(hours)):
        parts = [] if hour in recorded else source.recorded_parts(zone, hour, hour + _HOUR)
        if parts:
            filled = profile_around(parts, source.zone_files(zone), hour)
            recorded[hour] = filled.mean_usd_per_hour(hour, hour + _HOUR)
            recorded_seconds += sum((reached - part.start).total_seconds() for part, reached in parts)
            part_recorded.append(hour)
    if not recorded:
        return None, []
    times = sorted(recorded)
    files = ", ".join(f.name for f in source.files.get(zone, []))
    count = f"{round(recorded_seconds / 3600, 2):g}"
    rest = (
        f", then its profile for the rest of {', '.join(f'{h:%H:%M}' for h in part_recorded)}"
        if part_recorded
        else ""
    )
    series = PriceSeries(
        times, [recorded[t] for t in times], name=f"{files} for {count} of {hours} hour(s), recorded{rest}"
    )
    return series, [start + i * _HOUR for i in range(hours) if start + i * _HOUR not in recorded]


def _fallback_note(source: object, args: argparse.Namespace, start: datetime) -> str | None:
    """Where ``--source`` names a folder or file that does not cover the hours: the bundled year was shown."""
    from costaware.adapters.carbon_source import RecordedCarbon

    if args.source in ("recorded", "bundled", "live") or not isinstance(source, RecordedCarbon):
        return None
    if source.files_cover(args.zone, start, start + args.hours * _HOUR):
        return None
    from costaware.adapters.carbon_data import bundled_zones

    names = ", ".join(f.name for f in source.files.get(args.zone, [])) or f"no {args.zone}_*.csv file"
    missing = args.hours - len(source.covered_hours(args.zone, start, args.hours))
    # A zone with no bundled year shows an hour a file records in part as that part and the files' profile.
    shown_as = (
        "they are the bundled 2023 data, the fallback of a recorded source"
        if args.zone in bundled_zones()
        else f"they are their recorded part and the files' profile ({args.zone} has no bundled typical year)"
    )
    # A file given by name and left out for its name: "(no GB_*.csv file)" alone did not say it was.
    not_read = source.not_read(args.zone)
    return (
        f"{args.source} does not cover {args.zone} over {missing} of these {args.hours} hour(s) ({names}): "
        + shown_as
        + (f". {not_read}" if not_read else "")
    )
