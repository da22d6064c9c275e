"""``costaware carbon``: show a grid zone's carbon intensity, import a recorded intensity file.

``show`` asks a carbon source (``costaware.adapters.carbon_source``): the recorded files (the costaware
home's carbon folder, then the bundled 2023 files), the bundled files only, a folder or file, or the live GB
Carbon Intensity API. ``import`` checks a file in the shared CSV format and copies it into the carbon
folder, where the recorded source finds it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import re
import stat
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from costaware.cli.output import emit, render_table
from costaware.core.errors import ConfigurationError, PriceNotFoundError

if TYPE_CHECKING:
    from collections.abc import Iterator

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
        return "recorded, and the file's profile for the rest of the hour it ends inside"
    if "perfect forecast" in name:
        return "recorded (as a perfect forecast)"
    if forecast:
        return "forecast"
    return "measured (live)" if " live " in name else "recorded"


def show(args: argparse.Namespace) -> int:
    """Print the hourly intensity of a zone, its mean, min and max, and whether it is forecast or recorded."""
    import json

    from costaware.adapters.carbon_source import carbon_source

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
    The hour a file ends inside (a half-hourly import ending 23:30) is read as the waits read it: its
    recorded part, then the profile that follows the file (``weighed_import``); it was left out. ``(None,
    [])`` where no hour is recorded.
    """
    from costaware.adapters.carbon_source import RecordedCarbon, weighed_import
    from costaware.core.series import PriceSeries

    if not isinstance(source, RecordedCarbon):
        return None, []
    recorded = source.covered_hours(zone, start, hours)
    recorded_seconds = len(recorded) * _HOUR.total_seconds()
    ends_inside: list[datetime] = []
    for hour in (start + i * _HOUR for i in range(hours)):
        parts = [] if hour in recorded else source.recorded_parts(zone, hour, hour + _HOUR)
        weighed = weighed_import(source.zone_files(zone), zone, hour) if parts else None
        if weighed is not None and parts[0][0].start == hour:
            recorded[hour] = weighed.mean_usd_per_hour(hour, hour + _HOUR)
            recorded_seconds += (parts[0][1] - hour).total_seconds()
            ends_inside.append(hour)
    if not recorded:
        return None, []
    times = sorted(recorded)
    files = ", ".join(f.name for f in source.files.get(zone, []))
    count = f"{round(recorded_seconds / 3600, 2):g}"
    rest = (
        f", then its profile for the rest of {', '.join(f'{h:%H:%M}' for h in ends_inside)}"
        if ends_inside
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
    names = ", ".join(f.name for f in source.files.get(args.zone, [])) or f"no {args.zone}_*.csv file"
    missing = args.hours - len(source.covered_hours(args.zone, start, args.hours))
    return (
        f"{args.source} does not cover {args.zone} over {missing} of these {args.hours} hour(s) ({names}): "
        "they are the bundled 2023 data, the fallback of a recorded source"
    )


def import_file(args: argparse.Namespace) -> int:
    """Check a recorded intensity CSV and copy it into the carbon folder as the zone's imported file."""
    from costaware.adapters.carbon_data import (
        known_grid_zones,
        unreadable_carbon_file,
        zone_hint,
    )
    from costaware.adapters.carbon_source import (
        bundled_year_end_step,
        carbon_folder,
        recorded_end,
        write_atomically,
        zone_of,
    )
    from costaware.adapters.object_store.location import named_or_expanded
    from costaware.core.errors import InvalidPriceDataError

    zone = args.zone.strip()
    if not zone or any(mark in zone for mark in "_/ \t") or zone.startswith("."):
        # "DE_LU" or "DE LU" for DE-LU: the zone meant, where the marks stand for its hyphen.
        dashed = re.sub(r"[_ \t]+", "-", zone).strip("-").upper()
        meant = next((z for z in known_grid_zones() if z.upper() == dashed), None)
        raise ConfigurationError(
            f"zone {args.zone!r} is not a grid zone name (e.g. GB, DE-LU: no '_', '/', space or leading '.')"
            + (f": did you mean {meant!r}?" if meant else "")
        )

    known = {name.upper(): name for name in known_grid_zones()}
    if zone not in known.values() and zone.upper() in known:
        # Zones are looked up exactly: a file imported as "gb" would never be read for GB.
        raise ConfigurationError(f"zone {zone!r}: grid zone names are written {known[zone.upper()]!r}")
    hint = zone_hint(zone) if zone not in known.values() else ""
    if hint:
        # Imported as "CAISO" or "us-west-1", it is a zone of its own that no task of the region reads.
        raise ConfigurationError(f"zone {zone!r}: {hint.strip()} Import it under the zone's id")
    path = named_or_expanded(args.file, what="carbon intensity file", example="/data/GB.csv")
    named = zone_of(path)
    if named != zone and named in known.values():
        print(
            f"costaware: warning: {path.name} is named for zone {named!r}; it is imported as {zone!r}, as "
            "--zone says",
            file=sys.stderr,
        )
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except OSError as e:
        raise unreadable_carbon_file(path, e, zone_instead=False) from e
    except UnicodeDecodeError as e:
        raise InvalidPriceDataError(f"{path.name} is not UTF-8 text: nothing was imported") from e
    try:
        series = _check_columns(text, path.name)
    except InvalidPriceDataError as e:
        raise InvalidPriceDataError(f"{e}; nothing was imported") from e
    folder = carbon_folder()
    target = folder / f"{zone}_imported.csv"
    # Where the bundled year ends, a record takes its step, as reading the file there does.
    one_step = bundled_year_end_step(zone, series.start) if len(series) == 1 else None
    unplaced = len(series) == 1 and one_step is None  # one record nothing gives a step to, yet
    if unplaced and not target.exists():
        raise _one_record_error(path.name, series, zone, folder)
    folder.mkdir(parents=True, exist_ok=True)
    hours = len({at.replace(minute=0, second=0) for at, _ in series.points})  # half-hourly rows are not hours
    records = "" if hours == len(series) else f" in {len(series)} records"
    imported = (
        f"imported {hours} hour(s){records} of {zone} carbon intensity from {path.name} "
        f"({series.start:%Y-%m-%d %H:%M} to {series.last:%Y-%m-%d %H:%M} UTC) into {target}"
    )
    with _locked(target):
        if not target.exists():
            if unplaced:  # the earlier import was there before the lock
                raise _one_record_error(path.name, series, zone, folder)
            write_atomically(target, data, mode=_new_file_mode())
            print(imported)
            return 0
        # Read and checked under the lock, once: checked before it, the one-record check could pass on an
        # end that another import of the zone moved before the merge read the file again.
        earlier_text, earlier = _earlier_import(target, path.name)
        new_end = recorded_end(series)
        if len(series) == 1 and recorded_end(earlier) != series.start:
            if one_step is None:
                # Its end was guessed an hour on: merged into a half-hourly import at 23:30, it took 00:00.
                raise _one_record_error(path.name, series, zone, folder)
            new_end = series.start + one_step
        # A second import of the zone replaced the first: imported month by month, earlier months were lost.
        merged, added, replaced, kept = _merged_import(
            target, earlier_text, text, path.name, series, new_end=new_end
        )
        # The mode and owner it had: the temporary file's 0600 kept other users of the group out, and a merge
        # by another user left the file theirs (their group's), which a 0640 import's group could not read.
        earlier_stat = target.stat()
        write_atomically(
            target,
            merged.encode("utf-8"),
            mode=stat.S_IMODE(earlier_stat.st_mode),
            owner=(earlier_stat.st_uid, earlier_stat.st_gid),
        )
    print(f"{imported}: {added} hour(s) added, {replaced} replaced, {kept} kept from the earlier import")
    return 0


def _one_record_error(name: str, series: PriceSeries, zone: str, folder: Path) -> Exception:
    """The refusal of a one-record file that neither the earlier import's end nor the bundled year places.

    Reading places one more case, a record just before another file of the zone (it stands until that file
    begins), which a merge into one import cannot tell apart: the refusal says how to keep it that way.
    """
    from costaware.core.errors import InvalidPriceDataError

    return InvalidPriceDataError(
        f"{name} holds one record ({series.start:%Y-%m-%d %H:%M} UTC): the format declares no step, and "
        "one record cannot tell an hour from half an hour, so where it ends is unknown; nothing was "
        "imported: add the record after it (the next hour or half hour), or, where another "
        f"{zone} file begins within the hour after it, copy it into {folder} as {zone}_<name>.csv beside "
        "that file: read there, it stands until that file begins"
    )


def _earlier_import(target: Path, name: str) -> tuple[str, PriceSeries]:
    """The earlier import at ``target``: its text and its series, every intensity column checked.

    Raises:
        InvalidPriceDataError: it cannot be read or is malformed (a merge with it would write nothing).
    """
    from costaware.core.errors import InvalidPriceDataError

    try:
        text = target.read_text(encoding="utf-8")
        return text, _check_columns(text, target.name)
    except (OSError, UnicodeDecodeError, InvalidPriceDataError) as e:
        raise InvalidPriceDataError(
            f"cannot merge {name} with the earlier import {target.name}: {e}; nothing was imported: fix it, "
            f"or delete {target} to start over, then import again"
        ) from e


def _new_file_mode() -> int:
    """0666 less the process's umask: the mode ``open`` gives a new file (a temporary file gets 0600).

    The umask is read from ``/proc/self/status`` where Linux shows it: ``os.umask`` reads it only by setting
    it, for every thread at once.
    """
    import os

    with contextlib.suppress(OSError):
        found = re.search(r"^Umask:\s*([0-7]+)$", Path("/proc/self/status").read_text(), re.MULTILINE)
        if found:
            return 0o666 & ~int(found.group(1), 8)
    mask = os.umask(0o077)  # set for a moment: 077 can only make a file another thread creates stricter
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``target`` (its lock file beside it) from the read to the write.

    Two imports of one zone at once both read the earlier import (or found none), and the later write lost
    the other's records. The lock file stays: removing it would let a third import lock a new file while a
    waiter still locks the old one. It is opened read-only, as ``flock`` needs no more: opened for append, one
    that another user's import made 0644 refused the group's other members the merge.

    Raises:
        ConfigurationError: the lock file cannot be opened (unreadable, or missing in a folder this user may
            not write), naming it and what to do.
    """
    import fcntl
    import os

    path = target.with_name(f".{target.name}.lock")
    try:
        # 0664 less the umask: locking needs no write access, but an earlier release opened it to append.
        handle = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o664)
    except OSError as e:
        raise ConfigurationError(
            f"cannot open the lock file {path} ({e.strerror}): nothing was imported; an import needs read "
            f"access to it (chmod g+r {path} for the group) and write access to {path.parent}"
        ) from e
    with os.fdopen(handle, "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _check_columns(text: str, source: str) -> PriceSeries:
    """The file's lca series, once every intensity column it has is checked.

    Every column is read by some source (``RecordedCarbon(basis="direct")``): a bad one passed the import
    and failed there, far from the file.
    """
    from costaware.adapters.carbon_data import INTENSITY_COLUMNS, carbon_from_text

    header = next(csv.reader(io.StringIO(text.lstrip("\ufeff"))), [])
    series = carbon_from_text(text, source=source)
    for basis, column in INTENSITY_COLUMNS.items():
        if basis != "lca" and column in header:
            carbon_from_text(text, source=source, basis=basis)
    return series


def _instant(timestamp: str) -> datetime:
    from costaware.core.series import parse_instant

    return parse_instant(timestamp, name="timestamp_utc")


def _hour(instant: datetime) -> datetime:
    return instant.replace(minute=0, second=0, microsecond=0)


def _merged_import(
    target: Path,
    earlier_text: str,
    text: str,
    name: str,
    series: PriceSeries,
    *,
    new_end: datetime,
) -> tuple[str, int, int, int]:
    """The earlier import at ``target`` (``earlier_text``, checked) merged with the checked ``text``.

    The new file replaces the earlier records from its first record up to its end (its last record plus its
    own step), record by record: merged hour by hour, a half-hourly file starting at :30 dropped the earlier
    :00 record of that hour, and an hourly import followed by a file starting 23:30 lost 23:00 to a gap.
    Returns the merged CSV and the hours added, replaced (given a new value) and kept whole from the earlier
    import. Raises, writing nothing, where the merged file would not be a valid import (a gap between the
    two, or hours without a value of an intensity column only one of them has). ``new_end`` is the new
    file's end: its recorded end, or where its records cannot tell it (one record where the bundled year
    ends), that record plus the year's step.
    """
    from costaware.adapters.carbon_data import INTENSITY_COLUMNS
    from costaware.core.errors import InvalidPriceDataError

    start_over = f"or delete {target} to start over, then import again"
    earlier = csv.DictReader(io.StringIO(earlier_text.lstrip("\ufeff")))
    newer = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    # Each row's time parsed once: the hours, the span replaced and the order were parsed apart, three times.
    earlier_rows = [(_instant(row["timestamp_utc"]), row) for row in earlier]
    newer_rows = [(_instant(row["timestamp_utc"]), row) for row in newer]
    earlier_columns, newer_columns = list(earlier.fieldnames or []), list(newer.fieldnames or [])
    new_hours = {_hour(at) for at, _ in newer_rows}
    old_hours = {_hour(at) for at, _ in earlier_rows}
    kept_rows = [(at, row) for at, row in earlier_rows if not series.start <= at < new_end]
    intensity = set(INTENSITY_COLUMNS.values())
    differ = sorted((set(earlier_columns) ^ set(newer_columns)) & intensity)
    if kept_rows and differ:
        # A column only one file has would be blank for the other's hours: the merged file unreadable.
        raise InvalidPriceDataError(
            f"cannot merge {name} with the earlier import {target.name}: only one of them has "
            f"{', '.join(differ)} (its header is {newer_columns!r}, the earlier import's "
            f"{earlier_columns!r}); "
            f"nothing was imported: give {name} the same intensity columns, {start_over}"
        )
    # Every earlier hour replaced: the new file alone, without columns of the earlier one left blank.
    columns = newer_columns + [c for c in earlier_columns if c not in newer_columns and kept_rows]
    rows = [row for _, row in sorted(kept_rows + newer_rows, key=lambda timed: timed[0])]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, restval="", extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    merged = out.getvalue()
    try:
        _check_columns(merged, f"{target.name} merged with {name}")
    except InvalidPriceDataError as e:
        # Months apart (January, then March): one file cannot hold a gap of hours.
        raise InvalidPriceDataError(
            f"{e}; nothing was imported: import the hours between first, or keep {name} apart by copying it "
            f"into {target.parent} as {target.name.partition('_')[0]}_<name>.csv (every such file is read), "
            f"{start_over}"
        ) from e
    return merged, len(new_hours - old_hours), len(new_hours & old_hours), len(old_hours - new_hours)
