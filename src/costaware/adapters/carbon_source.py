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

The recorded files are in :mod:`.carbon_recorded` (what decisions weigh of the imported ones in
:mod:`.carbon_imported`), the live API in :mod:`.carbon_live`; every name they define stays importable from
here, where callers and tests find them.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Protocol

from costaware.adapters.atomic_file import write_atomically
from costaware.adapters.carbon_imported import (
    FILLED_AHEAD,
    _then_typical_year,  # noqa: F401
    imported_carbon,
    imported_zones,
    profile_around,
    then_profile,
    then_typical_year,
    weighed_import,
)
from costaware.adapters.carbon_live import (
    _HALF_HOUR,  # noqa: F401
    _MAX_SPAN,  # noqa: F401
    _OFFLINE,  # noqa: F401
    DEFAULT_CONN_ID,
    DEFAULT_TTL_SECONDS,
    FORECAST_HOURS,
    LIVE_ZONES,
    PUBLIC_URL,
    CarbonSourceUnavailableError,
    LiveCarbon,
    _api_time,  # noqa: F401
    _document,  # noqa: F401
    _floor_half_hour,  # noqa: F401
    _points,  # noqa: F401
    base_url_from_connection,
    log,
)
from costaware.adapters.carbon_recorded import (
    RecordedCarbon,
    _or_live,  # noqa: F401
    bundled_year_end_step,
    carbon_folder,
    zone_of,
)
from costaware.adapters.carbon_window import _HOUR, _hours, _joined, _utc, _window, recorded_end  # noqa: F401
from costaware.adapters.object_store.location import expand_user
from costaware.core.errors import ConfigurationError, did_you_mean
from costaware.core.series import PriceSeries

# The private helpers stay importable from here (the noqa'd imports) for code written against the
# single module, but not listed: __all__ is the public interface.
__all__ = [
    "DEFAULT_CONN_ID",
    "DEFAULT_TTL_SECONDS",
    "FILLED_AHEAD",
    "FORECAST_HOURS",
    "LIVE_ZONES",
    "PUBLIC_URL",
    "CarbonSource",
    "CarbonSourceUnavailableError",
    "LiveCarbon",
    "RecordedCarbon",
    "base_url_from_connection",
    "bundled_year_end_step",
    "carbon_folder",
    "carbon_source",
    "imported_carbon",
    "imported_zones",
    "log",
    "profile_around",
    "recorded_end",
    "then_profile",
    "then_typical_year",
    "weighed_import",
    "write_atomically",
    "zone_of",
]


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
