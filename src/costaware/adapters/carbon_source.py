"""Carbon intensity sources behind one small interface, as prices are: recorded files and a live API.

A source answers two questions about a grid zone, both as a ``PriceSeries`` of gCO2e/kWh:

* :meth:`CarbonSource.intensity`: the recorded or measured intensity covering ``[start, end)``;
* :meth:`CarbonSource.forecast`: the source's forecast for ``hours`` from ``now``. A recorded source has no
  forecast: it returns what was recorded (a perfect forecast, which its series name says), as the simulator
  and its oracle use it.

:class:`RecordedCarbon` reads the shared CSV format (one file per zone named ``<ZONE>_<anything>.csv``) from
folders and files, with the bundled 2023 files as a fallback. :class:`LiveCarbon` asks the public GB Carbon
Intensity API (https://api.carbonintensity.org.uk, no key) and caches each response on disk for a TTL.
:func:`carbon_source` builds one from a spec: ``recorded``, ``bundled``, ``live`` or a path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from costaware.adapters.carbon_data import bundled_carbon, bundled_zones, load_carbon, zone_hint
from costaware.adapters.object_store.location import expand_user
from costaware.core.errors import (
    ConfigurationError,
    CostawareError,
    InvalidPriceDataError,
    PriceNotFoundError,
    did_you_mean,
)
from costaware.core.series import PriceSeries
from costaware.settings import costaware_home

log = logging.getLogger(__name__)

PUBLIC_URL = "https://api.carbonintensity.org.uk"
DEFAULT_CONN_ID = "costaware_carbon"
DEFAULT_TTL_SECONDS = 1800.0
#: The zones the GB Carbon Intensity API covers (national figures).
LIVE_ZONES = ("GB",)
#: The API's forecast horizon.
FORECAST_HOURS = 48
#: The API answers at most 14 days of history per request.
_MAX_SPAN = timedelta(days=14)
_HOUR = timedelta(hours=1)
_HALF_HOUR = timedelta(minutes=30)
#: What a live failure says to do: it named "the recorded source" without saying how to choose it.
_OFFLINE = (
    "or use the recorded source, which needs no network (the imported files, then the bundled 2023 year): "
    "--source recorded in `costaware carbon show`, carbon_source('recorded') in Python"
)


class CarbonSourceUnavailableError(CostawareError):
    """Raised when a live carbon intensity source cannot be reached or answers an error; transient."""


class CarbonSource(Protocol):
    """Anything that knows a grid zone's carbon intensity (gCO2e/kWh) over time."""

    def intensity(self, zone: str, start: datetime, end: datetime) -> PriceSeries:
        """The recorded or measured intensity covering ``[start, end)``.

        Raises:
            PriceNotFoundError: the source has nothing for the zone or that time (named, with what it has).
        """
        ...

    def forecast(self, zone: str, now: datetime, hours: int) -> PriceSeries:
        """The source's forecast for ``hours`` from ``now``."""
        ...


def carbon_folder() -> Path:
    """``$AIRFLOW_HOME/costaware/carbon``: where ``costaware carbon import`` puts recorded files."""
    return costaware_home("carbon")


def zone_of(path: Path) -> str:
    """``GB_2023.csv`` -> ``GB``; ``DE-LU.csv`` -> ``DE-LU``."""
    return path.stem.partition("_")[0]


def _utc(instant: datetime, name: str) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ConfigurationError(f"{name} {instant.isoformat()} has no time zone; give it in UTC")
    return instant.astimezone(timezone.utc)


def _hours(hours: int) -> int:
    if not isinstance(hours, int) or hours < 1:
        raise ConfigurationError(f"hours must be a whole number >= 1, got {hours!r}")
    return hours


def _window(series: PriceSeries, start: datetime, end: datetime, *, name: str) -> PriceSeries:
    """The records in force over ``[start, end)`` (the one at or before ``start`` first)."""
    points = series.points
    first = max(i for i, (at, _) in enumerate(points) if at <= start)
    kept = [(at, value) for at, value in points[first:] if at < end]
    return PriceSeries.from_points(kept, name=name)


def recorded_end(series: PriceSeries) -> datetime:
    """Where a recorded series ends: its last record plus its own step there.

    The step is the time from the record before the last (an hour for a single record): a half-hourly file
    ending 01:30 was taken as covering up to 02:30, supplying half an hour nobody recorded. The last step,
    not the shortest: an import merged from a half-hourly month and an hourly one ends hourly.
    """
    times = series.points[-2:]
    return series.last + (times[1][0] - times[0][0] if len(times) == 2 else _HOUR)


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
            # zone_hint's look-up needs three letters: a two-letter typo (PK for PL, GN for GB) got no advice.
            near = [z for z in self.zones if len(z) == len(zone) == 2 and _one_letter_apart(z, zone)]
            meant = f"did you mean {' or '.join(map(repr, near))}? If not, " if near else ""
            raise PriceNotFoundError(
                f"no recorded carbon intensity for grid zone {zone!r}: {meant}recorded zones are "
                f"{', '.join(self.zones) or 'none'}; import a file with "
                f"`costaware carbon import FILE --zone {zone}`{_or_live(zone)}{self._not_read(zone)}"
            )
        # An imported file of a few hours used to hide the zone's bundled 2023 data for every other hour.
        return [self._load(f) for f in files] + bundled

    def files_cover(self, zone: str, start: datetime, end: datetime) -> bool:
        """Whether one of the files given (not the bundled fallback) covers ``zone`` over ``[start, end)``."""
        start, end = _utc(start, "start"), _utc(end, "end")
        return any(
            s.start <= start and end <= recorded_end(s) for s in map(self._load, self.files.get(zone, []))
        )

    def covered_hours(self, zone: str, start: datetime, hours: int) -> dict[datetime, Decimal]:
        """The hours from ``start`` that files given (not the bundled year) cover whole, with their values.

        An hour a file ends inside counted as covered, its last value held past the file's end: it is covered
        only where files (one, or several end to end, as :meth:`intensity` joins them) hold all of it.
        """
        start = _utc(start, "start")
        series = [self._load(f) for f in self.files.get(zone, [])]
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
            f"{end:%Y-%m-%d %H:%M} UTC: {spans}; import a file that covers it{_or_live(zone)}"
            f"{self._not_read(zone)}"
        )

    def _not_read(self, zone: str) -> str:
        """Why a file named one by one was not read for ``zone`` (its name names another), or ""."""
        others = [f for f in self.named_files if zone_of(f) != zone]
        if not others:
            return ""
        names = ", ".join(f"{f.name} (zone {zone_of(f)!r})" for f in others)
        return (
            f". Not read for {zone}: {names}; a file's zone is the start of its name, <ZONE>_<anything>.csv: "
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


def _one_letter_apart(known: str, given: str) -> bool:
    """Whether ``given`` is ``known`` with one letter changed, in any case (``PK``, ``pk`` for ``PL``)."""
    return sum(a != b for a, b in zip(known.upper(), given.upper(), strict=True)) == 1


def _joined(candidates: Sequence[PriceSeries], start: datetime, end: datetime) -> PriceSeries | None:
    """``[start, end)`` from several series end to end (an imported 2024 file after the bundled 2023 year).

    Each hour comes from the first series, in ``candidates``' order, that covers it (up to its last record
    plus its own step, :func:`recorded_end`); None when an hour of the window is in none of them.
    """
    points: list[tuple[datetime, Decimal]] = []
    used: list[str] = []
    ends = [recorded_end(s) for s in candidates]
    at = start
    while at < end:
        covering = [i for i, s in enumerate(candidates) if s.start <= at < ends[i]]
        if not covering:
            return None
        first = covering[0]
        series = candidates[first]
        # Up to where it ends, or where a series before it in the order begins.
        until = min([end, ends[first]] + [s.start for s in candidates[:first] if at < s.start])
        part = _window(series, at, until, name=series.name).points
        points += [(max(t, at), value) for t, value in part]
        if series.name not in used:
            used.append(series.name)
        at = until
    return PriceSeries.from_points(points, name=f"{' + '.join(used)}, recorded")


def _or_live(zone: str) -> str:
    """The live source, as a way out, only for the zones it serves (it was offered for every zone)."""
    return (
        f" or use the live source (--source live; it serves {', '.join(LIVE_ZONES)})"
        if zone in LIVE_ZONES
        else ""
    )


def imported_zones() -> list[str]:
    """The grid zones with a file imported by ``costaware carbon import`` (in :func:`carbon_folder`)."""
    return sorted(RecordedCarbon(bundled=False).files)


def imported_carbon(zone: str, at: datetime) -> PriceSeries | None:
    """The imported series of ``zone`` a decision at ``at`` weighs, or None: the bundled typical year's.

    The newest imported file that covers ``at`` (a current record, or a forecast written as one); for a
    zone with no bundled year, its newest imported file whatever it covers. Decisions read the bundled year
    alone before, whatever was imported, while the ledger's emissions read the import.
    """
    recorded = RecordedCarbon(bundled=False)
    series = [recorded._load(file) for file in recorded.files.get(zone, [])]
    if not series:
        return None
    at = _utc(at, "at")
    bundled = zone in bundled_zones()
    covering = [s for s in series if s.start <= at < recorded_end(s)]
    if not covering:
        return None if bundled else max(series, key=lambda s: s.last)
    newest = max(covering, key=lambda s: s.last)
    return _then_typical_year(newest, zone, until=at + FILLED_AHEAD) if bundled else newest


#: How far past a decision's hour an import shorter than that is followed by the bundled typical year.
FILLED_AHEAD = timedelta(days=14)


def _then_typical_year(imported: PriceSeries, zone: str, *, until: datetime) -> PriceSeries:
    """``imported``, then the bundled year's values at the same dates and hours up to ``until``.

    A few imported hours alone gave every later hour their flat profile, so that no decision told a clean
    hour from a dirty one; the ledger's emissions fall back to the typical year the same way.
    """
    from costaware.core.spot_forecast import same_hour_in

    end = recorded_end(imported)
    if end >= until:
        return imported
    bundled = bundled_carbon(zone)
    year_end = recorded_end(bundled)
    times = [at for at, _ in imported.points]
    values = [value for _, value in imported.points]
    hour = end
    while hour < until:
        shifted = same_hour_in(hour, bundled.start.year)
        if not bundled.start <= shifted < year_end:
            break
        times.append(hour)
        values.append(bundled.mean_usd_per_hour(shifted, shifted + _HOUR))
        hour += _HOUR
    return PriceSeries(times, values, name=f"{imported.name}, then the typical year", notes=imported.notes)


# -- the live GB Carbon Intensity API -----------------------------------------------------------------------


def base_url_from_connection(conn_id: str | None = DEFAULT_CONN_ID) -> str:
    """The base URL of an Airflow ``http`` connection (its host, with schema and port), else the public URL.

    A missing connection (or ``conn_id=None``) means the public API, which needs no key.
    """
    if not conn_id:
        return PUBLIC_URL
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return PUBLIC_URL
    host = (conn.host or "").strip().rstrip("/")
    if not host:
        return PUBLIC_URL
    if "://" not in host:
        scheme = conn.schema or "https"
        host = f"{scheme}://{host}{f':{conn.port}' if conn.port else ''}"
    return host


def _api_time(instant: datetime) -> str:
    return instant.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def _floor_half_hour(instant: datetime) -> datetime:
    instant = instant.astimezone(timezone.utc)
    return instant.replace(minute=instant.minute - instant.minute % 30, second=0, microsecond=0)


class LiveCarbon:
    """The GB Carbon Intensity API (National Grid ESO), half-hourly, with a disk cache.

    History uses the measured (``actual``) intensity where the API has it, else its ``forecast`` for that
    half hour; the forecast uses ``forecast``. Responses are cached under ``cache_dir`` for ``ttl_seconds``
    (the API updates every half hour), keyed by URL; forecast URLs start at the half hour, so polling in the
    same half hour hits the cache.

    Args:
        base_url: The API's root; default the ``costaware_carbon`` connection's host, else the public URL.
        conn_id: Airflow ``http`` connection whose host is the base URL (read when ``base_url`` is None).
        ttl_seconds: How long a cached response is reused (0: never cached).
        timeout_seconds: Per-request network timeout.
        cache_dir: Where responses are cached (default ``$AIRFLOW_HOME/costaware/carbon_cache``).
        clock: Wall-clock seconds, replaceable in tests.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        conn_id: str | None = DEFAULT_CONN_ID,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        timeout_seconds: float = 10.0,
        cache_dir: str | Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not ttl_seconds >= 0:
            raise ConfigurationError(f"ttl_seconds must be >= 0, got {ttl_seconds!r}")
        if not timeout_seconds > 0:
            raise ConfigurationError(f"timeout_seconds must be > 0, got {timeout_seconds!r}")
        self.base_url = (base_url or base_url_from_connection(conn_id)).rstrip("/")
        self.ttl_seconds = ttl_seconds
        self.timeout_seconds = timeout_seconds
        self.cache_dir = Path(cache_dir) if cache_dir is not None else costaware_home("carbon_cache")
        self.clock = clock
        self.requests = 0  # HTTP requests made by this instance, for logs and tests

    @staticmethod
    def _check_zone(zone: str) -> None:
        if zone not in LIVE_ZONES:
            raise ConfigurationError(
                f"the live carbon source (GB Carbon Intensity API) covers zone GB only, not {zone!r}: "
                f"import a recorded file with `costaware carbon import FILE --zone {zone}` "
                "(or wait for a provider that covers it)"
            )

    def intensity(self, zone: str, start: datetime, end: datetime) -> PriceSeries:
        """Measured half-hourly intensity over ``[start, end)`` (``actual``, else the API's ``forecast``).

        Raises:
            ConfigurationError: a zone other than GB, naive times, ``end`` not after ``start``.
            CarbonSourceUnavailableError: the API is unreachable or answers an HTTP error (URL named).
            InvalidPriceDataError: the answer is not the API's JSON, or has no data (URL named).
        """
        self._check_zone(zone)
        start, end = _utc(start, "start"), _utc(end, "end")
        if end <= start:
            raise ConfigurationError(f"end {end.isoformat()} is not after start {start.isoformat()}")
        records: list[dict[str, Any]] = []
        cursor = _floor_half_hour(start)
        while cursor < end:
            upto = min(cursor + _MAX_SPAN, end)
            url = f"{self.base_url}/intensity/{_api_time(cursor)}/{_api_time(upto)}"
            records.extend(self._data(url))
            cursor = upto
        points = _points(records, "actual", fallback="forecast", url=self.base_url)
        series = PriceSeries.from_points(
            points, name=f"carbon {zone} live {self.base_url} (gCO2e/kWh, actual, else forecast)"
        )
        if series.start > start:
            raise PriceNotFoundError(
                f"{self.base_url} has carbon intensity for {zone} from {series.start.isoformat()} only, "
                f"not from {start.isoformat()}"
            )
        return _window(series, start, end, name=series.name)

    def forecast(self, zone: str, now: datetime, hours: int) -> PriceSeries:
        """The API's half-hourly forecast for ``hours`` (at most 48) from the half hour of ``now``.

        Raises:
            ConfigurationError: a zone other than GB, ``hours`` outside 1..48.
            CarbonSourceUnavailableError, InvalidPriceDataError: as :meth:`intensity`.
        """
        self._check_zone(zone)
        if _hours(hours) > FORECAST_HOURS:
            raise ConfigurationError(
                f"the GB Carbon Intensity API forecasts {FORECAST_HOURS} hours ahead, not {hours}"
            )
        start = _floor_half_hour(_utc(now, "now"))
        url = f"{self.base_url}/intensity/{_api_time(start)}/fw48h"
        points = _points(self._data(url), "forecast", url=url)
        series = PriceSeries.from_points(
            points, name=f"carbon {zone} forecast {self.base_url} (gCO2e/kWh, forecast)"
        )
        return _window(series, max(start, series.start), start + hours * _HOUR, name=series.name)

    # -- HTTP and the cache ---------------------------------------------------------------------------------

    def _data(self, url: str) -> list[dict[str, Any]]:
        text = self._cached(url)
        if text is None:
            text = self._get(url)
            document = _document(text, url)
            self._store(url, text)
        else:
            document = _document(text, url)
        return document

    def _cache_file(self, url: str) -> Path:
        return self.cache_dir / f"{hashlib.sha256(url.encode()).hexdigest()[:24]}.json"

    def _cached(self, url: str) -> str | None:
        if self.ttl_seconds <= 0:
            return None
        try:
            entry = json.loads(self._cache_file(url).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("url") != url:
            return None
        age = self.clock() - float(entry.get("fetched_at", 0))
        if not 0 <= age < self.ttl_seconds:
            return None
        body = entry.get("body")
        return body if isinstance(body, str) else None

    def _store(self, url: str, text: str) -> None:
        if self.ttl_seconds <= 0:
            return
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            entry = json.dumps({"url": url, "fetched_at": self.clock(), "body": text})
            write_atomically(self._cache_file(url), entry.encode())
        except OSError as e:  # a read-only home still answers, only slower
            log.warning("costaware: cannot cache carbon intensity in %s: %s", self.cache_dir, e)

    def _get(self, url: str) -> str:
        self.requests += 1
        request = urllib.request.Request(
            url, headers={"Accept": "application/json", "User-Agent": "costaware"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                return str(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            raise CarbonSourceUnavailableError(
                f"carbon intensity API answered HTTP {e.code} {e.reason} for {url}; try again later, "
                f"{_OFFLINE}"
            ) from e
        except TimeoutError as e:
            raise CarbonSourceUnavailableError(
                f"carbon intensity API did not answer {url} within {self.timeout_seconds:g} s; {_OFFLINE}"
            ) from e
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise CarbonSourceUnavailableError(
                f"cannot reach the carbon intensity API at {url}: {reason}; {_OFFLINE}"
            ) from e
        except UnicodeDecodeError as e:
            raise InvalidPriceDataError(
                f"carbon intensity API answered {url} with text that is not UTF-8"
            ) from e


def _document(text: str, url: str) -> list[dict[str, Any]]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidPriceDataError(
            f"carbon intensity API answered {url} with invalid JSON at line {e.lineno}: {e.msg}"
        ) from e
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InvalidPriceDataError(
            f'carbon intensity API answered {url} without {{"data": [...]}}: {text[:200]!r}'
        )
    return data


def _points(
    records: Iterable[dict[str, Any]], key: str, *, url: str, fallback: str | None = None
) -> list[tuple[object, object]]:
    points: list[tuple[object, object]] = []
    for number, record in enumerate(records):
        values = record.get("intensity")
        if "from" not in record or not isinstance(values, dict):
            raise InvalidPriceDataError(f"{url}: record {number} lacks 'from' or 'intensity': {record!r}")
        value = values.get(key)
        if value is None and fallback is not None:
            value = values.get(fallback)
        if value is None:  # the API leaves future actuals null: nothing is known for that half hour
            continue
        points.append((record["from"], value))
    if not points:
        raise InvalidPriceDataError(f"{url}: no {key} intensity in the answer")
    return points


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` through a temporary file in its folder and a rename: readers see old or new.

    The file is synced to disk before the rename and the folder after it, so a crash leaves the old bytes or
    the new ones, never an empty or partial file under the name.
    """
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            # Synced before the rename: a crash after it could otherwise leave the new name on empty bytes.
            os.fsync(out.fileno())
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    # The folder after it: the rename itself is an entry of the folder, lost in a crash until synced.
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


# -- the factory ------------------------------------------------------------------------------------------


def carbon_source(spec: str | Path = "recorded", *, conn_id: str | None = DEFAULT_CONN_ID) -> CarbonSource:
    """A carbon source from a spec.

    Args:
        spec: ``recorded`` (the costaware home's carbon folder, then the bundled files), ``bundled`` (the
            bundled 2023 files only), ``live`` (the GB Carbon Intensity API through ``conn_id``), or the
            path of a folder or file of recorded intensity (the bundled files as a fallback).
        conn_id: The live source's Airflow connection.

    Raises:
        ConfigurationError: a path that does not exist.
    """
    text = str(spec).strip()
    if text == "recorded":
        return RecordedCarbon()
    if text == "bundled":
        return RecordedCarbon([], bundled=True)
    if text == "live":
        return LiveCarbon(conn_id=conn_id)
    # Path.expanduser raised a bare RuntimeError for a home nobody has (~nosuchuser, HOME unset).
    path = Path(expand_user(text, what="carbon source", uri=text, example="/srv/ml/carbon/GB.csv"))
    if not path.exists():
        kinds = ("recorded", "bundled", "live")
        if "/" in text or "\\" in text or "." in text:  # meant as a path: say where it was looked for
            where = "" if path.is_absolute() else f" (a relative path, read as {path.absolute()})"
            raise ConfigurationError(
                f"carbon source {text!r} does not exist{where}: check the name, or give the full path of a "
                "folder or file of <ZONE>_<anything>.csv; or use 'recorded', 'bundled' or 'live'"
            )
        raise ConfigurationError(
            f"carbon source {text!r} is not 'recorded', 'bundled', 'live'{did_you_mean(text.lower(), kinds)} "
            "nor an existing folder or file"
        )
    return RecordedCarbon(path)
