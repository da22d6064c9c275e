"""Looking at the spot market: the price history a forecast fits on, and the price and capacity in force now.

Prices come from a recorded file (re-read at each look, so a replay can append to it) or live from EC2
``DescribeSpotPriceHistory`` through an Airflow AWS connection (cached for ``ttl_seconds``); capacity from an
availability trace, or "a spot price below on-demand exists". Every function here blocks on IO: the
triggers call them through ``asyncio.to_thread``. The decisions taken on what they read are pure and live
in ``costaware.core.spot_window`` and ``costaware.core.spot_forecast``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from costaware.adapters import spot_prices
from costaware.adapters.object_store.location import expand_user
from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError, CostawareError, did_you_mean
from costaware.core.series import PriceSeries, parse_instant
from costaware.core.spot_forecast import forecast_starts, intensity_from, objective_starts, read_until
from costaware.core.spot_window import Observation, choose_zone, spot_capacity

LIVE = "live"
"""The ``prices`` value that reads live EC2 spot prices instead of a recorded file."""


log = logging.getLogger(__name__)

_SAID: set[str] = set()


def _said_once(key: str, message: str) -> None:
    """Log ``message`` once per process for ``key`` (a trigger observes every poll)."""
    if key not in _SAID:
        _SAID.add(key)
        log.warning("%s", message)


#: A recorded price file whose last record is older than this at the decision is said (as simulate does).
STALE_RECORD = timedelta(days=30)


def check_prices(prices: object, *, name: str = "prices") -> str:
    """``prices`` when it is ``"live"`` or a file there is; else a ConfigurationError saying what to give.

    Checked when the task starts, before any decision or job: a run that never reads the file (a decision
    taken at once, or a job billed at its starting price once the file cannot be read) would otherwise go on
    without the prices it was given, and say so only in a warning after a paid attempt.
    """
    text = str(prices).strip()
    if text == LIVE or Path(text).is_file():
        return text
    hint = did_you_mean(text.lower(), [LIVE]) if "/" not in text else ""
    raise ConfigurationError(
        f"{name} {text!r} is neither {LIVE!r} (EC2's spot price history through aws_conn_id) nor a "
        f"file{hint}: give {LIVE!r} or the path of a recorded spot price file (JSON or CSV)"
    )


def spot_history(
    *,
    prices: str,
    instance_type: str,
    region: str,
    aws_conn_id: str | None,
    ttl_seconds: float,
    products: Sequence[str],
    now: datetime,
    history_days: int,
) -> Any:
    """The spot price history the forecast fits on: ``history_days`` of live EC2, or the recorded file.

    Live queries end at ``now`` rounded down to ``ttl_seconds``, so that looks within one period ask the
    same question and share the cached answer instead of paging through days of history at every poll.
    """
    if prices == LIVE:
        live = spot_prices.LiveSpotPrices(
            aws_conn_id=aws_conn_id, region_name=region, ttl_seconds=ttl_seconds
        )
        period = max(ttl_seconds, 1.0)
        end = datetime.fromtimestamp(now.timestamp() // period * period, tz=now.tzinfo)
        return live.history(
            [instance_type], start=end - timedelta(days=history_days), end=end, products=list(products)
        )
    return spot_prices.load_spot_history(prices, products=list(products))


def observe_spot(
    *,
    prices: str,
    instance_type: str,
    region: str,
    availability_zone: str | None,
    aws_conn_id: str | None,
    ttl_seconds: float,
    products: Sequence[str],
    on_demand_usd_per_hour: Decimal,
    availability: str | None,
    availability_start: str | None,
    now: datetime,
) -> tuple[Decimal, bool, str]:
    """The spot price in force at ``now``, whether spot has capacity, and the price's source (blocking IO)."""
    if prices == LIVE:
        live = spot_prices.LiveSpotPrices(
            aws_conn_id=aws_conn_id, region_name=region, ttl_seconds=ttl_seconds
        )
        history = live.history([instance_type], products=products)
        source = f"live EC2 ({aws_conn_id})"
    else:
        history = spot_prices.load_spot_history(prices, products=products)
        source = f"recorded {prices}"
        # The file's newest record, of any zone: one zone's price may rightly go weeks unchanged.
        last = history.last_record
        if now - last > STALE_RECORD:
            # A file of years ago read as today's market, in silence (the bundled demo's is one: said too).
            source += f" (recorded up to {last:%Y-%m-%d}: its last prices are held since, not today's market)"
            _said_once(
                prices,
                f"the spot prices of {prices} were recorded up to {last.isoformat()}: their last ones are "
                "held to now",
            )
    price = spot_prices.current_spot_price(history, instance_type, region, availability_zone, now)
    trace_available: bool | None = None
    if availability:
        start = parse_instant(availability_start, name="availability_start") if availability_start else now
        trace_available = spot_prices.load_availability(availability, start=start).at(now)
    return price, spot_capacity(price, on_demand_usd_per_hour, trace_available), source


def observe_zones(
    *,
    zones: Sequence[str],
    availability: Mapping[str, str] | None,
    **observe: Any,
) -> Observation:
    """Observe every zone (blocking IO); keep the cheapest one with capacity (the first listed if none has).

    Args:
        zones: The job's zones, in order of preference on a tie.
        availability: ``zone -> availability trace path``; a zone without one counts as available when its
            spot price is below on-demand.
        **observe: The other arguments of :func:`observe_spot`.

    Returns:
        The chosen zone's price, capacity and price source, and the zone's name.
    """
    seen: dict[str, tuple[Decimal, bool]] = {}
    sources: dict[str, str] = {}
    for zone_name in zones:
        price, available, source = observe_spot(
            availability_zone=zone_name, availability=(availability or {}).get(zone_name), **observe
        )
        seen[zone_name], sources[zone_name] = (price, available), source
    chosen = choose_zone(seen) or zones[0]
    price, available = seen[chosen]
    return Observation(price, available, f"{sources[chosen]}, zone {chosen}", chosen)


def observe_market(
    *,
    availability_zones: Sequence[str] | None,
    zone_availability: Mapping[str, str] | None,
    availability_zone: str | None,
    availability: str | None,
    **common: Any,
) -> Observation:
    """One look at the market at ``now``: price, capacity, source and chosen zone (``""`` for one zone).

    Blocking IO.

    With ``availability_zones`` every zone is observed and the cheapest one with capacity is kept
    (:func:`observe_zones`); else the one ``availability_zone`` (or the region's cheapest zone).
    """
    if availability_zones:
        return observe_zones(zones=availability_zones, availability=zone_availability, **common)
    price, available, source = observe_spot(
        availability_zone=availability_zone, availability=availability, **common
    )
    return Observation(price, available, source)


def forecast_window(
    *,
    prices: str,
    instance_type: str,
    region: str,
    aws_conn_id: str | None,
    ttl_seconds: float,
    products: Sequence[str],
    zones: Sequence[str | None],
    now: datetime,
    latest_start: datetime,
    runtime_hours: Decimal,
    history_days: int,
    objective: Objective | None = None,
    intensity: PriceSeries | None = None,
    power_kw: float = 0.0,
) -> list[list[str]]:
    """:func:`~costaware.core.spot_forecast.forecast_starts` fitted on what :func:`spot_history` reads.

    With a carbon ``objective`` the starts hold its mean hourly value
    (:func:`~costaware.core.spot_forecast.objective_starts` with ``intensity`` and ``power_kw``).
    Blocking IO. Reads nothing when no start is left before ``latest_start``.
    """
    if latest_start <= now:
        return []
    history = spot_history(
        prices=prices,
        instance_type=instance_type,
        region=region,
        aws_conn_id=aws_conn_id,
        ttl_seconds=ttl_seconds,
        products=products,
        now=now,
        history_days=history_days,
    )
    starts = forecast_starts(
        history,
        instance_type=instance_type,
        region=region,
        zones=zones,
        now=now,
        latest_start=latest_start,
        runtime_hours=runtime_hours,
        history_days=history_days,
    )
    if objective is None or not objective.needs_carbon:
        return starts
    return objective_starts(
        starts, intensity, objective=objective, power_kw=power_kw, runtime_hours=runtime_hours
    )


#: A recorded price file whose last record is older than this before a run does not price it.
RECORDED_PRICES_STALE_AFTER = timedelta(days=30)


def mean_spot_price(
    *,
    prices: str,
    instance_type: str,
    region: str,
    availability_zone: str | None,
    aws_conn_id: str | None,
    start: datetime,
    end: datetime,
) -> Decimal:
    """The time-weighted mean spot price in force from ``start`` to ``end``, as EC2 bills a run (blocking IO).

    Raises:
        CostawareError: no price of the instance type in the region or zone over that time.
        BotoCoreError, ClientError: live EC2 could not be read.
    """
    seconds = (end - start).total_seconds()
    history = spot_history(
        prices=prices,
        instance_type=instance_type,
        region=region,
        aws_conn_id=aws_conn_id,
        ttl_seconds=1.0,
        products=["Linux/UNIX"],
        now=end,
        history_days=int(seconds // 86400) + 2,
    )
    series = history.series(instance_type, region, availability_zone)
    if prices != "live" and series.last < start - RECORDED_PRICES_STALE_AFTER:
        # A recorded file that ends long before the run carries its last price forward for years (the
        # example's 2021 history): that is no price over this run.
        raise CostawareError(
            f"the recorded prices in {prices} end on {series.last:%Y-%m-%d}, "
            f"{(start - series.last).days} days before this run: none covers it"
        )
    rate: Decimal = series.mean_usd_per_hour(start, end)
    return rate


def window_carbon_intensity(
    carbon: str | None,
    *,
    region: str | None,
    objective: Objective,
    latest_start: datetime,
    runtime_hours: Decimal,
    at: datetime | None = None,
) -> PriceSeries | None:
    """:func:`carbon_intensity` as a spot window reads it: as far as a run starting by ``latest_start`` reads.

    The sensor's plan, its poke and its deferred trigger read alike through it: read to different ends, a
    poke and a trigger valued the same run now differently (PL, an import 14-366 days ahead).
    """
    until = read_until(latest_start, runtime_hours)
    return carbon_intensity(carbon, region=region, objective=objective, at=at, until=until)


def carbon_intensity(
    carbon: str | None,
    *,
    region: str | None,
    objective: Objective,
    at: datetime | None = None,
    until: datetime | None = None,
) -> PriceSeries | None:
    """The hourly gCO2e/kWh series an objective weighs, or None for ``cost`` (which reads nothing).

    For a grid zone, a file imported with ``costaware carbon import`` that covers ``at`` comes first (as
    for the ledger's emissions), then the bundled year (see
    :func:`~costaware.adapters.carbon_source.imported_carbon`).

    Args:
        carbon: A grid zone (``"GB"``), a recorded CSV path, or None for the zone of ``region``.
        region: The cloud region of the task (for the default zone).
        objective: The decision's objective.
        at: When the decision's hours begin (default now).
        until: Where the hours it reads end; an import is followed that far (two weeks at least) instead of
            a year (the default), which cost a poke or a timetable's decision 0.06-0.18 s.

    Raises:
        ConfigurationError: no ``carbon`` and a region with no known grid zone (named, with what to pass),
            or a zone that is not bundled.
        InvalidPriceDataError: an unreadable or malformed CSV.
    """
    from costaware.adapters.carbon_data import bundled_carbon, grid_zone, load_carbon
    from costaware.adapters.carbon_source import imported_carbon
    from costaware.core.ledger import utcnow

    if not objective.needs_carbon:
        return None
    text = str(carbon or "").strip()
    if text.endswith(".csv") or "/" in text or "\\" in text:
        return load_carbon(text)
    zone = text or (grid_zone(region) if region else None)
    if zone is None:
        if region:
            from costaware.adapters.compute.base import check_aws_regions

            # A misspelt region ("us-est-1") read "has no known grid zone", as if it were a real one.
            check_aws_regions([region], name="region")
        # Without a region (OffPeakTimetable has none by default) this read "region None has no known grid".
        missing = (
            f"region {region!r} has no known grid zone"
            if region
            else "neither carbon= nor a region= whose grid is known (e.g. 'us-west-1') was given"
        )
        raise ConfigurationError(
            f"objective {objective.name!r} needs the grid carbon intensity, and {missing}: pass carbon= a "
            "grid zone (e.g. 'GB', 'US-CAL-CISO') or a recorded carbon intensity CSV path"
        )
    series = imported_carbon(zone, at or utcnow(), until=until)
    if series is None:
        check_grid_zone(zone)
    return series or bundled_carbon(zone)


def check_grid_zone(zone: str) -> None:
    """Refuse a grid zone neither imported nor bundled; names only, nothing is read.

    An imported zone written in another case ("pl" for an imported "PL") was refused as not bundled, with
    the bundled zones only: the import the user had made was never named.

    Raises:
        ConfigurationError: the zone, the imported or bundled name where only its case differs, and the
            zones that are bundled.
    """
    from costaware.adapters.carbon_data import bundled_zones, check_bundled_zone, importable_zone, zone_hint
    from costaware.adapters.carbon_recorded import near_zones
    from costaware.adapters.carbon_source import imported_zones

    imported = imported_zones()
    if zone in imported:
        return
    same = [name for name in imported if name.lower() == zone.lower()]
    if same:
        raise ConfigurationError(
            f"no carbon intensity for grid zone {zone!r}: did you mean {same[0]!r}, imported with "
            "`costaware carbon import`? Zone names are case-sensitive"
        )
    # DE_LU, AU-NSV got the bundled zones' list alone, where carbon show asks whether the one close was meant.
    near = (
        [] if zone in bundled_zones() or zone_hint(zone) else near_zones(zone, [*imported, *bundled_zones()])
    )
    if near == [importable_zone(zone)]:
        raise ConfigurationError(
            f"no carbon intensity for grid zone {zone!r}: did you mean {near[0]!r}? Zone ids are written "
            "with '-', without '_' or spaces, and are case-sensitive"
        )
    if near:
        raise ConfigurationError(
            f"no carbon intensity for grid zone {zone!r}: did you mean {near[0]!r}? If not, pass the path of "
            f"a recorded carbon intensity CSV, or import one with `costaware carbon import FILE --zone "
            f"{importable_zone(zone)}`"
        )
    check_bundled_zone(zone)


def check_local_file(path: str, name: str, what: str, *, columns: Sequence[Sequence[str]] = ()) -> None:
    """Refuse a ``path`` that is no local file, or whose header lacks ``columns``.

    ``columns``: for each, the names of which the header must have one. Only the header and the first row
    are read: the rows' values are the reader's, when the series is needed.

    Raises:
        ConfigurationError: ``name=path is not a file`` (a URI too: the carbon and electricity readers read
            local files, and an s3:// one passed here, then failed every run as "No such file"), lacks a
            column, or (given ``columns``) has no row under its header, with ``what`` to pass instead.
    """
    if "://" in path:
        raise ConfigurationError(
            f"{name}={path!r} is a URI, and it is read as a local file: copy it to every worker's disk and "
            f"pass its path, or pass {what}"
        )
    # Path.expanduser raised a bare RuntimeError for a home nobody has (~nosuchuser, HOME unset).
    file = Path(expand_user(path, what=name, uri=path, example=f"/srv/ml/{Path(path).name or name}"))
    if not file.is_file():
        raise ConfigurationError(f"{name}={path!r} is not a file: pass {what}")
    if not columns:
        return
    try:
        import csv

        with file.open(encoding="utf-8", newline="") as handle:
            # As the readers read it: a quoted header ("timestamp_utc","usd_per_mwh") is a good one.
            first = handle.readline().lstrip("\ufeff")
            header = [c.strip() for c in next(csv.reader([first]), [""])] or [""]
            # Blank lines are no rows to the readers either; the first row ends the read.
            has_rows = any(line.strip() for line in handle)
    except OSError as e:
        raise ConfigurationError(f"{name}={path!r} cannot be read ({e}): pass {what}") from e
    except UnicodeDecodeError as e:  # said as the readers say it: what the file is, and how to save it
        raise ConfigurationError(f"{name}={path!r}: {_not_utf8_file(file, name, e)}") from e
    missing = [" or ".join(names) for names in columns if not any(n in header for n in names)]
    if missing:
        # Found by the scheduler instead, the error stopped the DAG's schedule with nothing in the UI.
        shown = "the file is empty" if header == [""] else f"its header is {','.join(header)[:120]!r}"
        raise ConfigurationError(
            f"{name}={path!r} lacks column(s) {', '.join(missing)} ({shown}): pass {what}"
        )
    if not has_rows:
        # Passed here, the reader refused it when the scheduler asked for a run: said only in its log.
        raise ConfigurationError(
            f"{name}={path!r} has a header but no rows: add a row per hour under its header "
            f"({','.join(header)[:120]}), or pass {what}"
        )


def _not_utf8_file(file: Path, name: str, error: UnicodeDecodeError) -> str:
    """Why ``file`` is not UTF-8, naming its first bad byte and that byte's line.

    ``error.start`` counts from the chunk the text reader decoded: past the first chunk it named another
    byte on another line ("0x0a on line 4492" for 0xe9 on line 70003). The file is decoded again from its
    start, up to the chunk that holds that byte.
    """
    import codecs

    from costaware.core.errors import not_utf8_text

    kind = f"the {name} file"
    decoder = codecs.getincrementaldecoder("utf-8")()
    read = bytearray()
    with file.open("rb") as raw:
        while True:
            chunk = raw.read(1 << 16)
            # The decoder's position counts from the bytes it held back (a character cut at the last chunk's
            # end) and this chunk.
            held = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as found:
                read += chunk
                return not_utf8_text(
                    file.name, bytes(read), len(read) - len(chunk) - held + found.start, kind=kind
                )
            if not chunk:
                break
            read += chunk
    # UTF-8 now: written again since it was read. The byte that failed, counted in its chunk, is still right.
    return not_utf8_text(file.name, error.object, error.start, kind=kind)


def check_carbon_source(carbon: str | None, *, region: str | None, objective: Objective) -> None:
    """Refuse what :func:`carbon_intensity` would refuse, without reading a series (cheap, at DAG parse).

    A grid zone must be bundled (a wrong case is pointed to the right name), a local CSV path must exist, and
    without ``carbon`` the region must map to a grid zone.

    Raises:
        ConfigurationError: the zone, path or region, named, with what to pass.
    """
    from costaware.adapters.carbon_data import INTENSITY_COLUMNS, bundled_zones, grid_zone

    if not objective.needs_carbon:
        return
    text = str(carbon or "").strip()
    if not text:
        if not (region and grid_zone(region)):
            carbon_intensity(None, region=region, objective=objective)  # refuses, naming the region
        return
    if text.endswith(".csv") or "/" in text or "\\" in text:
        zones = ", ".join(bundled_zones())
        what = (
            "a recorded carbon intensity CSV (timestamp_utc,g_co2eq_per_kwh_lca) that exists, or a bundled "
            f"grid zone ({zones})"
        )
        intensity = tuple(INTENSITY_COLUMNS.values())
        check_local_file(text, "carbon", what, columns=[("timestamp_utc",), intensity])
        return
    check_grid_zone(text)  # an imported zone ("PL") is read as a bundled one is


def instance_power_kw(instance_type: str, region: str) -> float:
    """The kW ``instance_type`` draws at full load by the bundled power model (GPUs at board power).

    Raises:
        PriceNotFoundError: an instance type the bundled catalog does not know in ``region``.
    """
    from costaware.adapters.carbon_data import machine_of, power_model
    from costaware.adapters.price_files import bundled_catalog

    offer = bundled_catalog().offer(instance_type, region)
    return power_model().power_kw(machine_of(offer), 1.0)


def intensity_of_run(
    intensity: PriceSeries | None, now: datetime, runtime_hours: Decimal | float
) -> float | None:
    """The mean grid intensity (gCO2e/kWh) over a run of ``runtime_hours`` started at ``now``.

    Valued as every later start of the forecast is (:func:`~costaware.core.spot_forecast.intensity_from`):
    the intensity of the instant alone scored a clean hour before dirty ones as clean, and the decision
    started too early. The hours run from ``now``: a half-hourly file's half hours count as they fall, not
    as clock-hour means. Outside the series, its typical values of those hours.
    """
    if intensity is None:
        return None
    return intensity_from(intensity, now, runtime_hours)


def watch_objective(
    watch: Mapping[str, Any],
    *,
    instance_type: str,
    region: str,
    now: datetime,
    latest_start: datetime,
    runtime_hours: Decimal,
) -> tuple[Objective, PriceSeries | None, float]:
    """A remote training watch's objective, its intensity series and the instance's full-load kW.

    Read from ``training.pauses.price_watch``'s dict: what ``pause_decision``, ``decide_on_objective`` and
    :func:`forecast_window` take. ``cost`` (a watch of today's form) reads nothing. The intensity is read
    from ``now`` as far as a run of ``runtime_hours`` starting by ``latest_start`` reads
    (:func:`window_carbon_intensity`): followed a year, an import cost each of the watch's looks 8,800
    points and 0.08-0.19 s to value a few hours.
    """
    objective = Objective.parse(watch.get("objective"), watch.get("carbon_usd_per_tonne"))
    if not objective.needs_carbon:
        return objective, None, 0.0
    intensity = window_carbon_intensity(
        watch.get("carbon"),
        region=region,
        objective=objective,
        latest_start=latest_start,
        runtime_hours=runtime_hours,
        at=now,
    )
    return objective, intensity, instance_power_kw(instance_type, region)
