"""Recorded carbon intensity: CSV files in the shared format, then the bundled 2023 files.

:class:`RecordedCarbon` reads the files of a zone (one file per zone named ``<ZONE>_<anything>.csv``) from
folders and files and joins them end to end (:mod:`.carbon_window`); what decisions weigh of ``costaware
carbon import``'s files is in :mod:`.carbon_imported`.
"""

from __future__ import annotations

import difflib
import logging
import re
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from costaware.adapters.carbon_data import (
    bundled_carbon,
    bundled_zones,
    importable_zone,
    load_carbon,
    real_grid_zones,
    zone_hint,
)
from costaware.adapters.carbon_live import LIVE_ZONES
from costaware.adapters.carbon_window import (
    _HOUR,
    _hours,
    _joined,
    _joined_part,
    _OneRecord,
    _utc,
    _window,
    recorded_end,
)
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.series import PriceSeries
from costaware.settings import costaware_home

# The logger of the single module this came from, as carbon_live's: a filter on that name sees these too.
log = logging.getLogger("costaware.adapters.carbon_source")

#: The one-record files left out that this process has warned of, by (file, mtime in ns): each decision, poll
#: and emissions figure reads a fresh :class:`RecordedCarbon`, so its own cache warned at every read. A file
#: written again (a new mtime) is warned of again.
_warned_left_out: set[tuple[Path, int]] = set()
_warned_lock = threading.Lock()


def _warn_left_out_once(file: Path, why: str) -> bool:
    """Log ``why`` the one-record ``file`` is left out, once per process for each version of the file.

    Returns whether it was logged now.
    """
    try:
        key: tuple[Path, int] | None = (file.resolve(), file.stat().st_mtime_ns)
    except OSError:  # gone since it was read: say it, there is no version to remember
        key = None
    if key is not None:
        with _warned_lock:
            if key in _warned_left_out:
                return False
            _warned_left_out.add(key)
    log.warning("costaware: %s", why)
    return True


def carbon_folder() -> Path:
    """``$AIRFLOW_HOME/costaware/carbon``: where ``costaware carbon import`` puts recorded files."""
    return costaware_home("carbon")


def zone_of(path: Path) -> str:
    """``GB_2023.csv`` -> ``GB``; ``DE-LU.csv`` -> ``DE-LU``."""
    return path.stem.partition("_")[0]


def bundled_year_end_step(zone: str, at: datetime, *, basis: str = "lca") -> timedelta | None:
    """The step of a one-record series at ``at`` where ``zone``'s bundled year ends (its last step), or None.

    One rule for :class:`RecordedCarbon`, which places such a file by it, and ``costaware carbon import``,
    which refused the same file that reading accepted (a 2024-01-01 00:00 record after the 2023 year).
    """
    if zone not in bundled_zones():
        return None
    year = bundled_carbon(zone, basis)
    return at - year.last if recorded_end(year) == at else None


# -- recorded files -----------------------------------------------------------------------------------------


class RecordedCarbon:
    """Recorded hourly intensity from CSV files in the shared format, then the bundled 2023 files.

    Args:
        paths: Folders (every ``<ZONE>_<anything>.csv`` in them) and files (named the same way); default the
            costaware home's carbon folder (:func:`carbon_folder`, where ``costaware carbon import`` writes;
            it may not exist yet).
        bundled: Fall back to the bundled 2023 files for windows no path covers (zones with none included).
        basis: ``lca`` (life-cycle, default) or ``direct``.

    Raises:
        ConfigurationError: a path given explicitly does not exist.
    """

    def __init__(
        self,
        paths: str | Path | Sequence[str | Path] | None = None,
        *,
        bundled: bool = True,
        basis: str = "lca",
    ) -> None:
        if paths is None:
            folders: list[Path] = [carbon_folder()]
        else:
            given = [paths] if isinstance(paths, str | Path) else list(paths)
            folders = [Path(p) for p in given]
            for path in folders:
                if not path.exists():
                    raise ConfigurationError(
                        f"carbon intensity path {str(path)!r} does not exist: give a folder of "
                        "<ZONE>_<anything>.csv files or one such file"
                    )
        self.files: dict[str, list[Path]] = {}
        #: Files named one by one: one whose name names no zone asked for is said, not silently passed by.
        self.named_files = [path for path in folders if path.is_file()]
        for path in folders:
            found = sorted(path.glob("*.csv")) if path.is_dir() else [path] if path.is_file() else []
            for file in found:
                self.files.setdefault(zone_of(file), []).append(file)
        self.bundled = bundled
        self.basis = basis
        self._loaded: dict[Path, PriceSeries] = {}
        self._of_zone: dict[str, list[PriceSeries]] = {}
        #: Per zone, the one-record files :meth:`zone_files` left out: their record's time and what an error
        #: says of them (why, or where this source just warned why, that it did).
        self._left_out: dict[str, list[tuple[datetime, str]]] = {}

    @property
    def zones(self) -> list[str]:
        """Zones with a recorded file, bundled ones included when the fallback is on."""
        return sorted(set(self.files) | (set(bundled_zones()) if self.bundled else set()))

    def _series(self, zone: str) -> list[PriceSeries]:
        """The zone's files in order, then its bundled year: a window no file covers falls back to it."""
        files = self.files.get(zone, [])
        bundled = [bundled_carbon(zone, self.basis)] if self.bundled and zone in bundled_zones() else []
        if not files and not bundled:
            same = [z for z in self.zones if z.lower() == zone.lower()]
            if same:  # "gb": the zone is there, named in capitals; importing a file as "gb" would not help
                raise PriceNotFoundError(
                    f"no recorded carbon intensity for grid zone {zone!r}: did you mean {same[0]!r}? Zone "
                    "names are case-sensitive"
                )
            hint = zone_hint(zone)
            if hint:  # a region or a grid's everyday name: importing data under it makes a second zone
                raise PriceNotFoundError(
                    f"no recorded carbon intensity for grid zone {zone!r}: {hint.strip()}"
                )
            near = near_zones(zone, self.zones)
            importable = importable_zone(zone)
            if near == [importable]:  # DE_LU, ' GB': the zone meant, as written; no other is typed so
                raise PriceNotFoundError(
                    f"no recorded carbon intensity for grid zone {zone!r}: did you mean {near[0]!r}? "
                    "Zone ids are written with '-', without '_' or spaces, and are case-sensitive"
                )
            meant = f"did you mean {' or '.join(map(repr, near))}? If not, " if near else ""
            raise PriceNotFoundError(
                f"no recorded carbon intensity for grid zone {zone!r}: {meant}recorded zones are "
                f"{', '.join(self.zones) or 'none'}; import a file with "
                f"`costaware carbon import FILE --zone {importable}`{_or_live(zone)}{self._not_read(zone)}"
            )
        # An imported file of a few hours used to hide the zone's bundled 2023 data for every other hour.
        return self.zone_files(zone) + bundled

    def files_cover(self, zone: str, start: datetime, end: datetime) -> bool:
        """Whether one of the files given (not the bundled fallback) covers ``zone`` over ``[start, end)``."""
        start, end = _utc(start, "start"), _utc(end, "end")
        return any(s.start <= start and end <= recorded_end(s) for s in self.zone_files(zone))

    def covered_hours(self, zone: str, start: datetime, hours: int) -> dict[datetime, Decimal]:
        """The hours from ``start`` that files given (not the bundled year) cover whole, with their values.

        An hour a file ends inside counted as covered, its last value held past the file's end: it is covered
        only where files (one, or several end to end, as :meth:`intensity` joins them) hold all of it.
        """
        start = _utc(start, "start")
        series = self.zone_files(zone)
        covered: dict[datetime, Decimal] = {}
        ends = [recorded_end(one) for one in series]
        for hour in (start + i * _HOUR for i in range(hours)):
            first = next((i for i, one in enumerate(series) if one.start <= hour < ends[i]), None)
            if first is None:
                continue
            if hour + _HOUR <= ends[first]:
                covered[hour] = series[first].mean_usd_per_hour(hour, hour + _HOUR)
                continue
            # It ends inside the hour: joining the files is slow (a scan per hour), so only here.
            joined = _joined(series, hour, hour + _HOUR)
            if joined is not None:
                covered[hour] = joined.mean_usd_per_hour(hour, hour + _HOUR)
        return covered

    def _load(self, file: Path) -> PriceSeries:
        """A file's series, read once."""
        if file not in self._loaded:
            self._loaded[file] = load_carbon(file, basis=self.basis)
        return self._loaded[file]

    def zone_files(self, zone: str) -> list[PriceSeries]:
        """The series of the zone's files (not the bundled year), in order, each read once.

        A one-record file's step is not its own (:meth:`_one_record_step`): read as an hour, it supplied half
        an hour nobody recorded after a half-hourly file. One whose step nothing tells is left out with a
        warning naming it, and its time is unrecorded, as a gap is: refusing the zone over it refused every
        window, the bundled year's included, and lost every try's emissions.

        Raises:
            InvalidPriceDataError: a file is malformed.
        """
        if zone in self._of_zone:
            return self._of_zone[zone]
        files = self.files.get(zone, [])
        loaded = {file: self._load(file) for file in files}
        # The step at each end a file of several records reaches; a one-record file joined on passes it on.
        step_at = {recorded_end(s): recorded_end(s) - s.last for s in loaded.values() if len(s) > 1}
        starts = sorted({s.start for s in loaded.values()})
        left_out: list[tuple[datetime, str]] = []
        for file in sorted((f for f in files if len(loaded[f]) == 1), key=lambda f: loaded[f].start):
            one = loaded[file]
            step = self._one_record_step(zone, one.start, step_at, starts)
            if step is None:
                why = (
                    f"{file.name} holds one record ({one.start:%Y-%m-%d %H:%M} UTC) and no other {zone} file "
                    "ends where it starts or begins within the hour after it: one record cannot tell an hour "
                    "from half an hour, so where it ends is unknown; not read: add the record after it (the "
                    "next hour or half hour) to the file, or put it beside the file it follows"
                )
                # Warned of by this read, an error it raises says it short, where it said the reason again in
                # full; never "see the warning above": the error's text is kept where no warning is (the
                # ledger's carbon_method). Warned of before (another read, another log), it says all.
                short = (
                    f"{file.name} holds one record ({one.start:%Y-%m-%d %H:%M} UTC) and is not read: "
                    "where it ends is unknown; add the record after it to the file"
                )
                left_out.append((one.start, short if _warn_left_out_once(file, why) else why))
                del loaded[file]
                continue
            loaded[file] = _OneRecord(one, step)
            step_at.setdefault(one.start + step, step)
        self._left_out[zone] = left_out
        self._of_zone[zone] = [loaded[file] for file in files if file in loaded]
        return self._of_zone[zone]

    def _one_record_step(
        self, zone: str, at: datetime, step_at: dict[datetime, timedelta], starts: list[datetime]
    ) -> timedelta | None:
        """The step of a one-record file starting ``at``, or None where nothing tells it.

        Up to the zone's next file where that begins within the hour (a feed writing each record to its own
        file: the record stands until the next, as inside a file), else the step of the file whose end it
        starts at (as ``costaware carbon import`` merges one), the bundled year's included.
        """
        after = next((start for start in starts if start > at), None)
        if after is not None and after - at <= _HOUR:
            return after - at
        if at in step_at:
            return step_at[at]
        return bundled_year_end_step(zone, at, basis=self.basis)

    def _left_out_at(self, zone: str, start: datetime, end: datetime) -> str:
        """Why the one-record files left out whose hour ``[start, end)`` reaches are not read, or "".

        Read after :meth:`_series`, whose :meth:`zone_files` filled what was left out.
        """
        reached = [why for at, why in self._left_out.get(zone, []) if start < at + _HOUR and at < end]
        return "".join(f". {why}" for why in reached)

    def intensity(self, zone: str, start: datetime, end: datetime) -> PriceSeries:
        """The recorded intensity of ``zone`` over ``[start, end)``, from the first file that covers it.

        A window no one file covers is joined from several (a 2024 file after the bundled 2023 year).

        Raises:
            ConfigurationError: ``end`` is not after ``start``, or a naive time.
            PriceNotFoundError: no file of the zone, or none covering the window (each file's span named).
            InvalidPriceDataError: a file of the zone is malformed.
        """
        start, end = _utc(start, "start"), _utc(end, "end")
        if end <= start:
            raise ConfigurationError(f"end {end.isoformat()} is not after start {start.isoformat()}")
        candidates = self._series(zone)
        ends = [recorded_end(s) for s in candidates]
        for index, series in enumerate(candidates):
            if series.start <= start and end <= ends[index]:
                # Only where no file before it holds an hour of the window: a file given for 2023-06-14
                # 00:00-02:00 was passed over for the bundled 2023 year, which covers any 2023 window whole.
                if not any(s.start < end and start < ends[i] for i, s in enumerate(candidates[:index])):
                    return _window(series, start, end, name=f"{series.name}, recorded")
                break
        joined = _joined(candidates, start, end)
        if joined is not None:
            return joined
        spans = "; ".join(
            f"{s.name} covers {s.start:%Y-%m-%d %H:%M} to {s_end:%Y-%m-%d %H:%M}"
            for s, s_end in zip(candidates, ends, strict=True)
        )
        raise PriceNotFoundError(
            f"no recorded carbon intensity for {zone} from {start:%Y-%m-%d %H:%M} to "
            f"{end:%Y-%m-%d %H:%M} UTC: {spans or f'no {zone} file is read'}; import a file that covers it"
            f"{_or_live(zone)}{self._not_read(zone)}{self._left_out_at(zone, start, end)}"
        )

    def recorded_parts(self, zone: str, start: datetime, end: datetime) -> list[tuple[PriceSeries, datetime]]:
        """The stretches of ``[start, end)`` that files record, in order: each one's series and its end.

        Joined as :meth:`intensity` joins; each series starts where its stretch begins. The hour a half-hourly
        file ends inside is half recorded, and so is the hour one starts inside (its first stretch begins
        after ``start``). Empty where nothing is recorded (or nothing of the zone at all).

        Raises:
            ConfigurationError: a naive time.
            InvalidPriceDataError: a file of the zone is malformed.
        """
        start, end = _utc(start, "start"), _utc(end, "end")
        try:
            candidates = self._series(zone)
        except PriceNotFoundError:
            return []
        ends = [recorded_end(s) for s in candidates]
        parts: list[tuple[PriceSeries, datetime]] = []
        at = start
        while at < end:
            # The next stretch begins at ``at`` where a series covers it, else where the first one after
            # starts: the hour a file starts inside was typical year whole, its recorded part too.
            reaching = [
                max(s.start, at)
                for s, s_end in zip(candidates, ends, strict=True)
                if s.start < end and at < s_end
            ]
            part = _joined_part(candidates, min(reaching), end) if reaching else None
            if part is None:
                break
            parts.append(part)
            at = part[1]
        return parts

    def _not_read(self, zone: str) -> str:
        """``. Not read for <zone>: ...`` where :meth:`not_read` says it, else ""."""
        why = self.not_read(zone)
        return f". {why}" if why else ""

    def not_read(self, zone: str) -> str:
        """Why a file named one by one was not read for ``zone`` (its name names another), or ""."""
        others = [f for f in self.named_files if zone_of(f) != zone]
        if not others:
            return ""
        names = ", ".join(f"{f.name} (zone {zone_of(f)!r})" for f in others)
        return (
            f"Not read for {zone}: {names}; a file's zone is the start of its name, <ZONE>_<anything>.csv: "
            f"name it {zone}_<anything>.csv"
        )

    def forecast(self, zone: str, now: datetime, hours: int) -> PriceSeries:
        """The recorded values of the ``hours`` from ``now``: a perfect forecast (the name says so).

        Raises:
            PriceNotFoundError: nothing recorded for that time (as :meth:`intensity`).
        """
        now = _utc(now, "now")
        recorded = self.intensity(zone, now, now + _hours(hours) * _HOUR)
        name = f"{recorded.name.removesuffix(', recorded')}, recorded values as a perfect forecast"
        return PriceSeries(
            [at for at, _ in recorded.points],
            [v for _, v in recorded.points],
            name=name,
            notes=recorded.notes,
        )


#: How alike (difflib's ratio) a zone id of three characters or more must be to a known one to be asked
#: about beside one edit away: typos score 0.91-0.96 (US-CAL-CAISO, DE-LUX, AU-NSWW).
TYPO_RATIO = 0.85


def near_zones(zone: str, zones: Sequence[str]) -> list[str]:
    """The zone of ``zones`` that ``zone`` is likely a typo of (``DE_LU``, ``AU-NSV``, ``GV``), or [].

    Written alike but for spaces, '_' or case, it is the zone meant. Otherwise a zone id that exists
    (:func:`real_grid_zones`: GR, PK, GD, AU-TAS, DK-DK2) is never asked about, however close to a known one:
    "did you mean 'GB'?" for Greece misled. Any other id one letter changed, swapped, left out or added
    away from a known one (``AU-NSV``, ``GV`` for GB), or scoring :data:`TYPO_RATIO`, is.
    """
    by_spelling = {z.upper(): z for z in zones}
    # A space pasted around it, '_' for '-', lower case: marks and a case no zone id is written with.
    spelled = re.sub(r"[_\s]+", "-", zone.strip()).upper()
    if spelled in by_spelling:
        return [by_spelling[spelled]]
    if spelled in real_grid_zones():
        return []
    one_edit = [z for z in by_spelling if _one_edit_apart(spelled, z)]
    if one_edit:
        return [by_spelling[max(one_edit, key=lambda z: difflib.SequenceMatcher(None, spelled, z).ratio())]]
    longer = [spelling for spelling in by_spelling if len(spelling) > 2] if len(spelled) > 2 else []
    return [by_spelling[z] for z in difflib.get_close_matches(spelled, longer, n=1, cutoff=TYPO_RATIO)]


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether ``a`` is ``b`` with one character changed, two neighbours swapped, or one left out or added."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diffs = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        swapped = (
            len(diffs) == 2
            and diffs[1] == diffs[0] + 1
            and a[diffs[0]] + a[diffs[1]] == b[diffs[1]] + b[diffs[0]]
        )
        return len(diffs) == 1 or swapped
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _or_live(zone: str) -> str:
    """The live source, as a way out, only for the zones it serves (it was offered for every zone)."""
    return (
        f" or use the live source (--source live; it serves {', '.join(LIVE_ZONES)})"
        if zone in LIVE_ZONES
        else ""
    )
