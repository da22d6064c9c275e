"""The live GB Carbon Intensity API (https://api.carbonintensity.org.uk, no key), cached on disk for a TTL."""

from __future__ import annotations

import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from costaware.adapters.atomic_file import write_atomically
from costaware.adapters.carbon_window import _HOUR, _hours, _utc, _window
from costaware.core.errors import (
    ConfigurationError,
    CostawareError,
    InvalidPriceDataError,
    PriceNotFoundError,
)
from costaware.core.series import PriceSeries
from costaware.settings import costaware_home

# The logger of the single module this came from: a filter on that name still sees the cache warnings.
log = logging.getLogger("costaware.adapters.carbon_source")

PUBLIC_URL = "https://api.carbonintensity.org.uk"
DEFAULT_CONN_ID = "costaware_carbon"
DEFAULT_TTL_SECONDS = 1800.0
#: The zones the GB Carbon Intensity API covers (national figures).
LIVE_ZONES = ("GB",)
#: The API's forecast horizon.
FORECAST_HOURS = 48
#: The API answers at most 14 days of history per request.
_MAX_SPAN = timedelta(days=14)
_HALF_HOUR = timedelta(minutes=30)
#: What a live failure says to do: it named "the recorded source" without saying how to choose it.
_OFFLINE = (
    "or use the recorded source, which needs no network (the imported files, then the bundled 2023 year): "
    "--source recorded in `costaware carbon show`, carbon_source('recorded') in Python"
)


class CarbonSourceUnavailableError(CostawareError):
    """Raised when a live carbon intensity source cannot be reached or answers an error; transient."""


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
            from costaware.adapters.carbon_data import importable_zone

            raise ConfigurationError(
                f"the live carbon source (GB Carbon Intensity API) covers zone GB only, not {zone!r}: "
                f"import a recorded file with `costaware carbon import FILE --zone {importable_zone(zone)}` "
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
        urls: list[str] = []
        cursor = _floor_half_hour(start)
        while cursor < end:
            upto = min(cursor + _MAX_SPAN, end)
            urls.append(f"{self.base_url}/intensity/{_api_time(cursor)}/{_api_time(upto)}")
            records.extend(self._data(urls[-1]))
            cursor = upto
        asked = f"{zone} from {start.isoformat()} to {end.isoformat()}"
        points = _points(records, "actual", fallback="forecast", asked=asked, urls=urls)
        series = PriceSeries.from_points(
            points,
            name=f"carbon {zone} live {self.base_url} (gCO2e/kWh, actual, else forecast)",
            value_name="intensity",
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
        end = start + hours * _HOUR
        url = f"{self.base_url}/intensity/{_api_time(start)}/fw48h"
        asked = f"{zone} from {start.isoformat()} to {end.isoformat()}"
        points = _points(self._data(url), "forecast", asked=asked, urls=[url])
        series = PriceSeries.from_points(
            points,
            name=f"carbon {zone} forecast {self.base_url} (gCO2e/kWh, forecast)",
            value_name="intensity",
        )
        if series.start >= end:
            # Nothing left in the window: the series' own message said "check the file and its filters".
            raise InvalidPriceDataError(
                f"carbon intensity API answered {url} with a forecast from {series.start.isoformat()} only, "
                f"after the {hours} hour(s) asked ({asked}): ask for more hours (up to {FORECAST_HOURS}) "
                f"or try again later, {_OFFLINE}"
            )
        return _window(series, max(start, series.start), end, name=series.name)

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
    records: Sequence[dict[str, Any]],
    key: str,
    *,
    asked: str,
    urls: Sequence[str],
    fallback: str | None = None,
) -> list[tuple[object, object]]:
    """The ``(from, value)`` of each record with a ``key`` (else ``fallback``) intensity.

    Raises:
        InvalidPriceDataError: a record without ``from`` or ``intensity``; no record has a value (the
            message names ``asked``, the zone and span, and the ``urls`` asked).
    """
    answered = urls[0] if len(urls) == 1 else f"{urls[0]} and {len(urls) - 1} more request(s)"
    points: list[tuple[object, object]] = []
    for number, record in enumerate(records):
        values = record.get("intensity")
        if "from" not in record or not isinstance(values, dict):
            raise InvalidPriceDataError(
                f"{answered}: record {number} lacks 'from' or 'intensity': {record!r}"
            )
        value = values.get(key)
        if value is None and fallback is not None:
            value = values.get(fallback)
        if value is None:  # the API leaves future actuals null: nothing is known for that half hour
            continue
        points.append((record["from"], value))
    if not points:
        # It said "<base URL>: no actual intensity in the answer": neither the hours asked nor what to do.
        wanted = f"{key} or {fallback}" if fallback else key
        found = (
            "no records"
            if not records
            else f"{len(records)} record(s), each with its {wanted} intensity null (unknown to the API)"
        )
        raise InvalidPriceDataError(
            f"carbon intensity API answered {answered} with {found}: it has no intensity for {asked}; "
            f"ask for other hours or try again later, {_OFFLINE}"
        )
    return points
