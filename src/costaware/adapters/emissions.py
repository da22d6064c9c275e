"""The emissions of one ledger entry: a task try's, or a remote training attempt's.

Energy is the power model's kW (``core.carbon.PowerModel``) for the entry's machine (the catalog's sizes of
its instance type, or the ``power_kw`` an on-premises task gives) at the try's CPU utilization (measured CPU
seconds / (wall seconds x vCPUs); without a measurement, full load, and the method says so) times its hours.
The intensity is the time-weighted mean over the try's interval of the hourly series of the entry's grid
zone (the zone of its region in ``data/region_grids.csv``, or the ``grid_zone`` the task gives), from a
carbon source (by default the recorded files ``costaware carbon import`` wrote, then the bundled 2023
series). An unmapped region, a zone without a series, or an interval no series covers leave ``kg_co2e``
None with the reason in ``carbon_method``: unknown, never 0.

:func:`estimate` never raises: an estimate must not keep a cost from being recorded.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from costaware.core.carbon import MAX_POWER_KW, Emissions, Machine, emissions
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.ledger import FIELD_LIMITS, LedgerEntry
from costaware.core.series import PriceSeries

log = logging.getLogger(__name__)
_HOUR = timedelta(hours=1)


#: ``(zone, start, end) -> series of gCO2e/kWh covering [start, end)``, raising ``PriceNotFoundError`` when
#: nothing covers it: ``CarbonSource.intensity`` (``costaware.adapters.carbon_source``).
IntensityOf = Callable[[str, datetime, datetime], PriceSeries]


def estimate(
    *,
    instance_type: str | None,
    region: str | None,
    start: datetime,
    end: datetime,
    cpu_seconds: float | None = None,
    power_kw: float | str | None = None,
    grid_zone: str | None = None,
    grid_zone_from: str | None = None,
    intensity_of: IntensityOf | None = None,
) -> dict[str, Any]:
    """The ``kg_co2e``, ``kwh``, ``carbon_method`` and ``carbon_source`` of an entry run ``[start, end)``.

    Args:
        instance_type: The catalog instance type (its vCPUs, memory and GPUs draw the power).
        region: The cloud region; its grid zone comes from ``data/region_grids.csv``.
        start: When the try began (aware).
        end: When it ended (aware).
        cpu_seconds: Measured CPU seconds of the try; None counts every vCPU at full load.
        power_kw: An on-premises machine's average draw in kW: replaces the power model.
        grid_zone: The grid the machine draws from: replaces the region's zone.
        grid_zone_from: Where ``grid_zone`` was set (``[costaware] worker_grid_zone``, the operator's
            argument), for the warning a zone without data gets; default the task's ``grid_zone``.
        intensity_of: Where the intensity comes from (default: ``RecordedCarbon().intensity``, the files
            ``costaware carbon import`` wrote, then the bundled 2023 series).

    Returns:
        The four fields of ``LedgerEntry`` (``kg_co2e`` None when unknown, with the reason in the method).
    """
    try:
        found = _estimate(instance_type, region, start, end, cpu_seconds, power_kw, grid_zone, intensity_of)
    except Exception as e:  # never lose a cost over its emissions: recorded as unknown, with why
        what = f"power_kw {power_kw!r}" if power_kw not in (None, "") else f"{instance_type} in {region}"
        log.warning("costaware: no emissions estimate for %s: %s", what, e)
        return fields(None, None, f"unknown: estimate failed: {type(e).__name__}: {e}", "")
    if found.kg_co2e is None and grid_zone:
        # A zone the task gave ("gb"): said in its log, not only in the ledger's carbon_method, naming where
        # it was set: a typo in [costaware] worker_grid_zone was blamed on the task's grid_zone.
        log.warning(
            "costaware: emissions unknown for grid zone %r, set by %s: %s; fix it there",
            grid_zone,
            grid_zone_from or "the task's grid_zone",
            found.reason,
        )
    return fields(found.kwh, found.kg_co2e, _method(found), found.source)


def with_emissions(entry: LedgerEntry, **kwargs: Any) -> LedgerEntry:
    """``entry`` with the emissions :func:`estimate` gives for ``kwargs``; never raises."""
    try:
        return replace(entry, **estimate(**kwargs))
    except Exception as e:  # e.g. a field over its limit: the entry as it was is still worth recording
        log.warning("costaware: emissions of %s.%s left out: %s", entry.dag_id, entry.task_id, e)
        return entry


def fields(kwh: Decimal | None, kg: Decimal | None, method: str, source: str) -> dict[str, Any]:
    """The entry fields, with text cut to what the ledger stores."""
    return {
        "kwh": kwh,
        "kg_co2e": kg,
        "carbon_method": method[: FIELD_LIMITS["carbon_method"]],
        "carbon_source": source[: FIELD_LIMITS["carbon_source"]],
    }


def _method(found: Emissions) -> str:
    return f"unknown: {found.reason}; {found.method}" if found.kg_co2e is None else found.method


def _estimate(
    instance_type: str | None,
    region: str | None,
    start: datetime,
    end: datetime,
    cpu_seconds: float | None,
    power_kw: float | str | None,
    grid_zone: str | None,
    intensity_of: IntensityOf | None,
) -> Emissions:
    from costaware.adapters.carbon_data import grid_zone as zone_of_region
    from costaware.adapters.carbon_data import power_model

    seconds = max((end - start).total_seconds(), 0.0)
    hours = seconds / 3600
    model = power_model()
    if power_kw not in (None, ""):
        try:
            kw = float(str(power_kw))
        except ValueError:
            raise ValueError(f"power_kw={power_kw!r} is not a number of kW (e.g. 6.5)") from None
        if not 0 <= kw <= MAX_POWER_KW:
            raise ValueError(
                f"power_kw={power_kw!r} is not a machine's power in kW (0 to {MAX_POWER_KW:g}): watts given "
                "as kW? 6500 W is 6.5 kW"
            )
        method = f"operator power_kw {kw:g} kW"
    else:
        machine = _machine(instance_type, region)
        use, how = _cpu_use(cpu_seconds, seconds, machine.vcpus)
        kw = model.power_kw(machine, use)
        method = model.method(machine, gpu_measured=False).replace("at measured CPU use", how)
    # "US-CAL-CISO " (a space from a template or a param) read as an unknown zone, listed as recorded.
    given_zone = str(grid_zone).strip() if grid_zone is not None else ""
    zone = given_zone or zone_of_region(region or "")
    kwh = kw * hours
    if not zone:
        reason = f"region {region!r} has no grid zone in data/region_grids.csv (give grid_zone)"
        return emissions(kwh, None, method=method, source="", reason=reason)
    if intensity_of is None:
        from costaware.adapters.carbon_source import RecordedCarbon

        intensity_of = RecordedCarbon().intensity
    try:  # an instant-long try still has an intensity: that of its hour
        series = intensity_of(zone, start, max(end, start + timedelta(seconds=1)))
        source = f"grid {zone}: {series.name}"
        g_per_kwh = float(
            series.mean_usd_per_hour(max(start, series.start), end)
        )  # the mean value: gCO2e/kWh here
    except (PriceNotFoundError, ConfigurationError) as e:  # not covered, or no series for the zone
        typical = _recorded_then_typical_year(zone, start, end, intensity_of)
        if typical is None:
            return emissions(kwh, None, method=method, source=f"grid {zone}", reason=str(e))
        g_per_kwh, source = typical
    found = emissions(kwh, g_per_kwh, method=f"{method}; grid mean {g_per_kwh:.1f} gCO2e/kWh", source=source)
    # To the milligram, as the ledger stores it: a minutes-long try emits grams, not whole kilograms.
    return replace(found, kg_co2e=Decimal(repr(round(kwh * g_per_kwh / 1000, 6))))


def _recorded_then_typical_year(
    zone: str, start: datetime, end: datetime, intensity_of: IntensityOf
) -> tuple[float, str] | None:
    """The try's mean intensity: recorded for the hours a file covers, the typical year for the others.

    A try running past the end of an imported file got the typical year for all of it, its recorded hours
    too, with a source saying nothing was recorded. None when an hour no file covers has no typical year
    (a zone that is not bundled).
    """
    end = max(end, start + timedelta(seconds=1))
    weighted = recorded_seconds = 0.0
    recorded_names: list[str] = []
    gaps: list[tuple[datetime, datetime]] = []
    at = start
    while at < end:
        until = min(end, at.replace(minute=0, second=0, microsecond=0) + _HOUR)
        try:
            parts = [(intensity_of(zone, at, until), until)]
        except (PriceNotFoundError, ConfigurationError):
            # The hour a file starts or ends inside: its recorded parts count as recorded, the rest are gaps.
            parts = _recorded_parts(intensity_of, zone, at, until)
        covered_to = at
        for part, reached in parts:
            begins = max(covered_to, part.start)
            if begins > covered_to:
                gaps.append((covered_to, begins))
            seconds = (reached - begins).total_seconds()
            weighted += float(part.mean_usd_per_hour(begins, reached)) * seconds
            recorded_seconds += seconds
            if part.name not in recorded_names:
                recorded_names.append(part.name)
            covered_to = reached
        if covered_to < until:
            gaps.append((covered_to, until))
        at = until
    # The gaps' typical year only once it is known some hour was recorded: a try with none takes it whole.
    # A zone with none: the files' profile, but only in an hour they record part of (a try inside the
    # unrecorded half of such an hour too: carbon show and the waits give that hour a value).
    from costaware.adapters.carbon_data import bundled_zones

    bundled = zone in bundled_zones()
    for gap_start, gap_end in gaps if recorded_seconds or not bundled else []:
        if bundled:
            typical = _typical_year(zone, gap_start, gap_end)
            g_per_kwh = None if typical is None else typical[0]
        else:
            profiled = _profile_in_part_recorded_hour(intensity_of, zone, gap_start, gap_end)
            if profiled is None:
                return None
            g_per_kwh, profile_names = profiled
            recorded_names.extend(name for name in profile_names if name not in recorded_names)
        if g_per_kwh is None:
            return None
        weighted += g_per_kwh * (gap_end - gap_start).total_seconds()
    first_gap = gaps[0][0] if gaps else None
    if not recorded_seconds and bundled:  # the whole try over one span, as its source says
        whole = _typical_year(zone, start, end)
        if whole is None:
            return None
        g_per_kwh, stands_in = whole
        # Short enough for the ledger's 128 characters: the series' own name cut it off mid-date.
        return g_per_kwh, (
            f"grid {zone}: typical year, bundled {stands_in:%Y} at {stands_in:%m-%d %H:%M} UTC "
            f"(no recorded intensity for {start:%Y-%m-%d %H:%M})"
        )
    total_seconds = (end - start).total_seconds()
    names = [_short_name(name) for name in recorded_names]
    if first_gap is None:  # every hour recorded, in files that no one call joined
        told = f"grid {zone}: "
        return (
            weighted / total_seconds,
            f"{told}{_whole_names(names, _SOURCE_ROOM - len(told) - 10)}, recorded",
        )
    fill = f"typical year {_bundled_year(zone)}" if bundled else "the files' profile"
    recorded = ""
    if recorded_seconds:
        recorded = f"recorded {_hours(recorded_seconds)} of {_hours(total_seconds)} h, "
    told = (
        f"grid {zone}: {recorded}{fill} for {_hours(total_seconds - recorded_seconds)} h "
        f"from {first_gap:%Y-%m-%d %H:%M}: "
    )
    return weighted / total_seconds, told + _whole_names(names, _SOURCE_ROOM - len(told))


def _recorded_parts(
    intensity_of: IntensityOf, zone: str, start: datetime, end: datetime
) -> list[tuple[PriceSeries, datetime]]:
    """What ``intensity_of``'s source recorded of ``[start, end)``: each stretch's series, and where it stops.

    Only a source that can tell it (``RecordedCarbon.recorded_parts``, behind its ``intensity``); for others,
    none: the window is a gap, as before.
    """
    recorded_parts = getattr(getattr(intensity_of, "__self__", None), "recorded_parts", None)
    if recorded_parts is None:
        return []
    found: list[tuple[PriceSeries, datetime]] = recorded_parts(zone, start, end)
    return found


def _profile_in_part_recorded_hour(
    intensity_of: IntensityOf, zone: str, start: datetime, end: datetime
) -> tuple[float, list[str]] | None:
    """The mean over the unrecorded ``[start, end)`` of a zone with no typical year, inside one clock hour.

    Where files record part of that hour, the hour as ``costaware carbon show`` and the waits read it: its
    recorded parts, the files' profile around them
    (:func:`~costaware.adapters.carbon_source.profile_around`). Such an hour had no intensity, and the whole
    try's emissions were unknown. With the names of the series recording the hour's parts (the source
    names them). None where they record none of it, or the source cannot tell.
    """
    from costaware.adapters.carbon_source import profile_around

    source = getattr(intensity_of, "__self__", None)
    zone_files = getattr(source, "zone_files", None)
    if zone_files is None:
        return None
    hour = start.replace(minute=0, second=0, microsecond=0)
    parts = _recorded_parts(intensity_of, zone, hour, hour + _HOUR)
    if not parts:
        return None
    mean = float(profile_around(parts, zone_files(zone), hour).mean_usd_per_hour(start, end))
    return mean, [part.name for part, _ in parts]


#: The ledger's carbon_source: a longer source is cut there, mid-name ("US-CAL-CISO_imported.cs").
_SOURCE_ROOM = FIELD_LIMITS["carbon_source"]


def _whole_names(names: list[str], room: int) -> str:
    """``names`` joined by `` + `` in ``room`` characters: whole names, the rest counted (``+ 2 more``)."""
    for shown in range(len(names), 0, -1):
        left_out = len(names) - shown
        text = " + ".join(names[:shown]) + (f" + {left_out} more" if left_out else "")
        if len(text) <= room:
            return text
    return f"{len(names)} file{'s' if len(names) > 1 else ''}"


def _typical_year(zone: str, start: datetime, end: datetime) -> tuple[float, datetime] | None:
    """The bundled year's intensity at the same date and hours, and the instant it stands in at.

    A typical-year estimate (as building energy models use a typical meteorological year): the season and
    the hour of day carry most of a grid's variation. None for a zone that is not bundled.
    """
    from costaware.adapters.carbon_data import bundled_carbon, bundled_zones
    from costaware.core.spot_forecast import same_hour_in

    if zone not in bundled_zones():
        return None
    series = bundled_carbon(zone)
    shifted = same_hour_in(start, series.start.year)
    span = max(end - start, timedelta(seconds=1))
    shifted_end = min(shifted + span, series.last + _HOUR)
    if shifted < series.start or shifted_end <= shifted:
        return None
    return float(series.mean_usd_per_hour(shifted, shifted_end)), shifted


def _bundled_year(zone: str) -> int:
    from costaware.adapters.carbon_data import bundled_carbon

    return bundled_carbon(zone).start.year


def _short_name(series_name: str) -> str:
    """``carbon GB_2026-11.csv (gCO2e/kWh, lca), recorded`` -> ``GB_2026-11.csv``: the ledger keeps 128."""
    name = series_name.removesuffix(", recorded").replace("carbon ", "")
    return re.sub(r" \(gCO2e/kWh, \w+\)", "", name)


def _hours(seconds: float) -> str:
    return f"{round(seconds / 3600, 2):g}"


def _machine(instance_type: str | None, region: str | None) -> Machine:
    from costaware.adapters.carbon_data import machine_of
    from costaware.adapters.price_files import bundled_catalog

    if not instance_type:
        raise ValueError("no instance type and no power_kw: give one of them")
    # A SageMaker ml.* type runs on the EC2 type of the same name: same vCPUs, memory and GPUs, so the same
    # power (its price differs, which is not read here). Every SageMaker entry's emissions were unknown.
    instance_type = instance_type.removeprefix("ml.")
    catalog = bundled_catalog()
    try:
        return machine_of(catalog.offer(instance_type, region or ""))
    except PriceNotFoundError:
        # A type's size is the same in every region: a region the price snapshot leaves out still has one.
        for other in catalog.regions:
            try:
                return machine_of(catalog.offer(instance_type, other))
            except PriceNotFoundError:
                continue
        raise


def _cpu_use(cpu_seconds: float | None, wall_seconds: float, vcpus: int) -> tuple[float, str]:
    """CPU utilization (0-1) and how it was found, for the method."""
    if cpu_seconds is None or wall_seconds <= 0 or vcpus <= 0:
        return 1.0, "at full load (CPU use not measured)"
    use = min(max(float(cpu_seconds), 0.0) / (wall_seconds * vcpus), 1.0)
    return use, f"at measured CPU use {use:.0%}"
