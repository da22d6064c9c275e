"""``costaware carbon import``: check a recorded intensity file and add it to the zone's imported file.

The file is checked in the shared CSV format and copied into the carbon folder, where the recorded source
finds it; a second import of a zone merges with the first, under a lock that keeps two at once from losing
each other's records.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import errno
import io
import re
import stat
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from costaware.cli.commands.carbon_import_access import ACCESS_REFUSED, cannot_make_folder, cannot_write
from costaware.core.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from costaware.core.series import PriceSeries


def import_file(args: argparse.Namespace) -> int:
    """Check a recorded intensity CSV and copy it into the carbon folder as the zone's imported file."""
    from costaware.adapters.carbon_data import (
        known_grid_zones,
        not_utf8_carbon_file,
        unreadable_carbon_file,
        with_lf_line_ends,
        zone_hint,
    )
    from costaware.adapters.carbon_source import (
        bundled_year_end_step,
        carbon_folder,
        recorded_end,
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
        # As the carbon folder's reader reads it: the header check and a merge read a CR-only file too.
        text = with_lf_line_ends(data.decode("utf-8"))
    except OSError as e:
        raise unreadable_carbon_file(path, e, zone_instead=False) from e
    except UnicodeDecodeError as e:
        raise InvalidPriceDataError(
            f"{not_utf8_carbon_file(path.name, data, e.start)}; nothing was imported"
        ) from e
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
    _warn_of_a_typo(zone, known.values(), folder, target)  # once the file is known to go in
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cannot_make_folder(folder, e) from e
    hours = len({at.replace(minute=0, second=0) for at, _ in series.points})  # half-hourly rows are not hours
    if len(series) == 1:  # an hour or half an hour: the span says which
        what = "1 record"
    else:
        what = f"{hours} hour(s)" + ("" if hours == len(series) else f" in {len(series)} records")

    def imported(end: datetime) -> str:
        # To the end of the last record, not its start: one record was "from 00:00 to 00:00".
        return (
            f"imported {what} of {zone} carbon intensity from {path.name} "
            f"({series.start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC) into {target}"
        )

    with _locked(target):
        if not target.exists():
            if unplaced:  # the earlier import was there before the lock
                raise _one_record_error(path.name, series, zone, folder)
            _write(target, data, mode=_new_file_mode())
            print(imported(series.start + one_step if one_step is not None else recorded_end(series)))
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
        elif len(series) == 1:
            # Appended where the earlier import ends: the merged file reads it with that import's last step
            # (half an hour after a half-hourly import), not the hour a lone record is given.
            new_end = series.start + (series.start - earlier.last)
        # A second import of the zone replaced the first: imported month by month, earlier months were lost.
        merged, counts = _merged_import(target, earlier_text, text, path.name, series, new_end=new_end)
        # The mode and owner it had: the temporary file's 0600 kept other users of the group out, and a merge
        # by another user left the file theirs (their group's), which a 0640 import's group could not read.
        earlier_stat = target.stat()
        _write(
            target,
            merged.encode("utf-8"),
            mode=stat.S_IMODE(earlier_stat.st_mode),
            owner=(earlier_stat.st_uid, earlier_stat.st_gid),
        )
    print(f"{imported(new_end)}: {counts.summary(series.start, new_end)}")
    return 0


@dataclass(frozen=True, slots=True)
class _MergeCounts:
    """What a merge did to the earlier import, record by record (by time: a repeated row counts once).

    Counted by hour, appending 22:30 to a half-hourly import ending at 22:00 was "0 hour(s) added, 1
    replaced": the 22:00 record, which was kept, shared the new record's hour.
    """

    added: int  # new records at a time the earlier import had none at
    replaced: int  # new records at a time the earlier import had one at
    dropped: int  # earlier records inside the new file's span at a time it has none at
    kept: int  # earlier records outside that span

    def summary(self, start: datetime, end: datetime) -> str:
        # Only a file sparser than the earlier records over its span (hourly over half-hourly) drops any.
        dropped = (
            f", {self.dropped} dropped inside the span it replaced ({start:%Y-%m-%d %H:%M} to "
            f"{end:%Y-%m-%d %H:%M} UTC)"
            if self.dropped
            else ""
        )
        return (
            f"{self.added} record(s) added, {self.replaced} replaced{dropped}, {self.kept} kept from the "
            "earlier import"
        )


def _warn_of_a_typo(zone: str, known: Iterable[str], folder: Path, target: Path) -> None:
    """Warn where ``zone`` is new to costaware and likely a typo of one it knows or has imported.

    Such an import succeeded in silence, into a zone that no task reads, while the zone meant stayed
    without the file. A warning, not a refusal, and only for a likely typo (``US-CAL-CAISO``, ``DE-LUX``;
    :func:`near_zones`): a real zone may be one letter from another (GR, GB).
    """
    from costaware.adapters.carbon_recorded import near_zones
    from costaware.adapters.carbon_source import zone_of

    if zone in known or target.exists():
        return
    imported = {zone_of(file) for file in folder.glob("*_imported.csv")} if folder.is_dir() else set()
    near = near_zones(zone, sorted({*known, *imported}))
    if near:
        print(
            f"costaware: warning: zone {zone!r} is new to costaware (no bundled year, region or earlier "
            f"import has it): did you mean {near[0]!r}? It is imported as {zone!r}, as --zone says, and only "
            f"carbon={zone!r} reads it; if it was a typo, delete {target} and import the file again with "
            f"--zone {near[0]}",
            file=sys.stderr,
        )


def _write(target: Path, data: bytes, *, mode: int, owner: tuple[int, int] | None = None) -> None:
    """Write ``target`` atomically; a refusal is told with what to do, not as a traceback."""
    from costaware.adapters.carbon_source import write_atomically

    try:
        write_atomically(target, data, mode=mode, owner=owner)
    except OSError as e:
        # A group member merging into a folder not the group's to write: its temporary file is refused.
        raise cannot_write(target, e) from e


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
    waiter still locks the old one.

    Raises:
        ConfigurationError: the lock file cannot be opened (unreadable, or missing in a folder this user may
            not write) or locked, naming it and what to do.
        CostawareError: any other OS error opening it (an I/O error), naming the lock file and the error.
    """
    import fcntl
    import os

    path = target.with_name(f".{target.name}.lock")
    try:
        handle = _open_lock_file(path)
    except OSError as e:
        if e.errno not in ACCESS_REFUSED:  # a read-only file system, a full disk: no chmod fixes those
            raise cannot_write(path, e) from e
        raise ConfigurationError(
            f"cannot open the lock file {path} ({e.strerror}): nothing was imported; an import needs read "
            f"access to it (chmod g+r {path} for the group) and write access to {path.parent}"
        ) from e
    with os.fdopen(handle, "rb") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        except OSError as e:
            raise _cannot_lock(path, e) from e
        yield


def _open_lock_file(path: Path) -> int:
    """Open (or create) the lock file for writing where this user may, else read-only.

    On NFS Linux emulates ``flock`` with an fcntl lock, whose exclusive lock needs the file open for writing
    (EBADF otherwise). On a local disk read-only does: a 0644 lock file another user's import made refused
    the group's other members the merge where it was opened for writing alone.
    """
    import os

    try:
        # 0664 less the umask: the group's members may open it for writing too.
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o664)
    except OSError as e:
        if e.errno not in ACCESS_REFUSED:
            raise
    return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o664)


def _cannot_lock(path: Path, error: OSError) -> ConfigurationError:
    if error.errno in (errno.EBADF, errno.ENOLCK):
        return ConfigurationError(
            f"cannot lock {path} ({error.strerror}): nothing was imported; this file system cannot lock a "
            f"read-only file: make {path} group-writable (chmod g+w {path}), then import again"
        )
    return ConfigurationError(f"cannot lock {path}: nothing was imported: {error.strerror or error}")


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


def _merged_import(
    target: Path,
    earlier_text: str,
    text: str,
    name: str,
    series: PriceSeries,
    *,
    new_end: datetime,
) -> tuple[str, _MergeCounts]:
    """The earlier import at ``target`` (``earlier_text``, checked) merged with the checked ``text``.

    The new file replaces the earlier records from its first record up to its end (its last record plus its
    own step), record by record: merged hour by hour, a half-hourly file starting at :30 dropped the earlier
    :00 record of that hour, and an hourly import followed by a file starting 23:30 lost 23:00 to a gap.
    Returns the merged CSV and what it did to the earlier import's records (:class:`_MergeCounts`).
    Raises, writing nothing, where the merged file would not be a valid import (a gap between the two, or
    hours without a value of an intensity column only one of them has). ``new_end`` is the new file's end:
    its recorded end, or where its records cannot tell it (one record where the bundled year ends), that
    record plus the year's step.
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
    new_times, old_times = {at for at, _ in newer_rows}, {at for at, _ in earlier_rows}
    kept_times = {at for at, _ in kept_rows}
    counts = _MergeCounts(
        added=len(new_times - old_times),
        replaced=len(new_times & old_times),
        dropped=len(old_times - kept_times - new_times),
        kept=len(kept_times),
    )
    return merged, counts
