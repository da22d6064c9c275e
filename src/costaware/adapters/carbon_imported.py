"""What decisions weigh of ``costaware carbon import``'s files: :func:`imported_carbon`, then a fill.

The newest imported file covering a decision's hour, followed by the bundled typical year
(:func:`then_typical_year`) or, for a zone with none, by the file's own profile (:func:`then_profile`;
an hour such a zone records in part: :func:`profile_around`). Split out of :mod:`.carbon_recorded`, which
reads the files.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from costaware.adapters.carbon_data import bundled_carbon, bundled_zones
from costaware.adapters.carbon_recorded import RecordedCarbon
from costaware.adapters.carbon_window import _HOUR, _utc, recorded_end
from costaware.core.series import PriceSeries


def imported_zones() -> list[str]:
    """The grid zones with a file imported by ``costaware carbon import`` (in :func:`carbon_folder`)."""
    return sorted(RecordedCarbon(bundled=False).files)


def imported_carbon(zone: str, at: datetime, *, until: datetime | None = None) -> PriceSeries | None:
    """The imported series of ``zone`` a decision at ``at`` weighs, or None: the bundled typical year's.

    The newest imported file that covers ``at`` (a current record, or a forecast written as one), else the
    first to start after it within the hours read, with the typical year before it (:func:`weighed_import`);
    for a zone with no bundled year and none of those, its newest imported file's profile
    (:func:`_past_the_files`).
    Decisions read the bundled year alone before, whatever was imported, while the ledger's emissions read
    the import. ``until``: where the hours the decision reads end.
    """
    return weighed_import(RecordedCarbon(bundled=False).zone_files(zone), zone, at, until=until)


def weighed_import(
    series: Sequence[PriceSeries], zone: str, at: datetime, *, until: datetime | None = None
) -> PriceSeries | None:
    """Of a zone's recorded ``series``, what a decision at ``at`` weighs (:func:`imported_carbon`), or None.

    The newest that covers ``at``, followed by the bundled typical year, or for a zone with none by what the
    waits read past a short file (:func:`then_profile`). Where none covers ``at``, the first to start
    before the fill ends (:func:`_fill_end`), with the typical year (or its profile) before it
    (:func:`_ahead_of`): an imported forecast of tomorrow was passed over for the typical year until its
    first hour came. A zone with no typical year and no such file: its newest file's profile in clock hours
    (:func:`_past_the_files`).

    Args:
        series: The zone's imported series.
        zone: Their grid zone.
        at: When the decision's hours begin.
        until: Where they end (the last start plus the run, a window's close); None: a year on, as
            :data:`FILLED_AHEAD`. A window of hours was followed a year, 8,800 points for 24 read.
    """
    if not series:
        return None
    at = _utc(at, "at")
    end = _fill_end(at, None if until is None else _utc(until, "until"))
    bundled = zone in bundled_zones()
    covering = [s for s in series if s.start <= at < recorded_end(s)]
    if not covering:
        ahead = [s for s in series if at < s.start < end]
        if ahead:
            first = min(s.start for s in ahead)
            chosen = max((s for s in ahead if s.start == first), key=lambda s: s.last)
            found = _ahead_of(chosen, zone, at, until=end)
            if found is not None:
                return found
        return None if bundled else _past_the_files(max(series, key=lambda s: s.last), at, until=end)
    newest = max(covering, key=lambda s: s.last)
    if bundled:
        return then_typical_year(newest, zone, until=end)
    return then_profile(newest, until=end)


#: How far past a decision's hour its import is followed (and how far ahead one may start) where the
#: decision does not say how far it reads: a year, so that ``hourly_series`` reads the weighed series as a
#: year of records past it too (the same date and hour). Two weeks of it, read further, were a short series:
#: every hour got their fitted profile, imported ones too.
FILLED_AHEAD = timedelta(days=366)

#: How far it is followed at least, whatever the decision reads: an import starting within two weeks is read
#: from its start, and a decision reading up to two weeks reads what it did before the fill grew to a year.
FILLED_AT_LEAST = timedelta(days=14)


def _fill_end(at: datetime, until: datetime | None) -> datetime:
    """Where a decision's import is followed to, and before which one read from its start must start.

    ``until``, two weeks on at least (:data:`FILLED_AT_LEAST`); a year (:data:`FILLED_AHEAD`) where the
    decision does not say. ``hourly_series`` reads the series as records up to ``until``: an import holds a
    record at least every hour, and the fill one each hour, so the last is at most an hour before it.
    """
    if until is None:
        return at + FILLED_AHEAD
    return max(until, at + FILLED_AT_LEAST)


def then_typical_year(
    recorded: PriceSeries, zone: str, *, until: datetime, end: datetime | None = None
) -> PriceSeries:
    """``recorded`` up to ``end``, then the bundled year's values at the same dates and hours up to ``until``.

    A few imported hours alone gave every later hour their flat profile, so that no decision told a clean
    hour from a dirty one; the ledger's emissions fall back to the typical year the same way. The hour
    ``end`` falls inside gets the typical year for its rest, then clock hours follow: from a half-hourly
    import's 23:30 end they ran 23:30-00:30, ..., off the clock. One reading for the waits
    (:func:`imported_carbon`) and ``costaware carbon show``, which disagreed on that hour.

    Args:
        recorded: The recorded series.
        zone: Its grid zone, which has a bundled year.
        until: Where the typical year stops.
        end: Where ``recorded`` stops being a record (default :func:`recorded_end`).
    """
    end = recorded_end(recorded) if end is None else end
    if end >= until:
        return recorded
    typical = _typical_hours(zone)
    kept = [(at, value) for at, value in recorded.points if at < end]
    times = [at for at, _ in kept]
    values = [value for _, value in kept]
    at = end
    hour = end.replace(minute=0, second=0, microsecond=0)
    while at < until:
        value = typical.get(_date_and_hour(hour))
        if value is None:
            break
        times.append(at)
        values.append(value)
        hour += _HOUR
        at = hour
    return PriceSeries(times, values, name=f"{recorded.name}, then the typical year", notes=recorded.notes)


def then_profile(recorded: PriceSeries, *, until: datetime) -> PriceSeries:
    """``recorded`` to its end, then what the waits read past it (a zone with no typical year) to ``until``.

    That is :func:`~costaware.core.spot_forecast.hourly_series` past the file (the hour-of-day profile of its
    last weeks), from the clock hour it ends inside: a half-hourly file ending 23:30 gets the 23:00 hour's
    profile for 23:30-24:00. Given the file alone, a window running past its end was read as the profile
    throughout, its recorded hours too, and ``costaware carbon show`` left the hour it ends inside out.
    """
    from costaware.core.spot_forecast import hourly_series

    end = recorded_end(recorded)
    if end >= until:
        return recorded
    first = end.replace(minute=0, second=0, microsecond=0)
    hours = -(-(until - first) // _HOUR)
    # An hour more than needed: a window inside the last record's hour is read as that record held, not as
    # the profile that follows the file.
    past = hourly_series(recorded, first, hours + 1)[:hours]
    kept = [(at, value) for at, value in recorded.points if at < end]
    kept += [(max(first + i * _HOUR, end), Decimal(repr(value))) for i, value in enumerate(past)]
    return PriceSeries(
        [at for at, _ in kept],
        [value for _, value in kept],
        name=f"{recorded.name}, then its profile",
        notes=recorded.notes,
    )


def profile_around(
    parts: list[tuple[PriceSeries, datetime]], files: list[PriceSeries], hour: datetime
) -> PriceSeries:
    """``hour``'s recorded ``parts``, their files' profile around them: a zone with no typical year.

    After a part, what the waits read past the file it ends with (:func:`then_profile`); before the first,
    the hour-of-day profile of the file it starts (``hourly_series``, as the waits read an hour before a
    file). ``costaware carbon show``'s ``_typical_year_around`` is the same for a zone with a bundled year.

    Raises:
        ValueError: ``files`` lack the file a part starts or ends with: not those the parts were read from.
    """
    from costaware.core.spot_forecast import hourly_series

    def holding(at: datetime, found: PriceSeries | None, where: str) -> PriceSeries:
        # A bare next() raised StopIteration, a traceback in carbon show and no reason in the ledger.
        if found is None:
            raise ValueError(
                f"no file given holds the recorded part {where} {at:%Y-%m-%d %H:%M} UTC ({len(files)} "
                "given): give the files the parts were read from (RecordedCarbon.zone_files of their zone)"
            )
        return found

    first = parts[0][0].start
    points: list[tuple[datetime, Decimal]] = []
    if first > hour:
        starting = next((f for f in files if f.start <= first < recorded_end(f)), None)
        starting = holding(first, starting, "starting")
        points.append((hour, Decimal(repr(hourly_series(starting, hour, 1)[0]))))
    for index, (part, reached) in enumerate(parts):
        until = parts[index + 1][0].start if index + 1 < len(parts) else hour + _HOUR
        points += [(at, value) for at, value in part.points if at < reached]
        if reached < until:  # a part stops where no file covers: the file it ends with ends there
            ending = next((f for f in files if f.start < reached == recorded_end(f)), None)
            ending = holding(reached, ending, "ending")
            points += [p for p in then_profile(ending, until=until).points if reached <= p[0] < until]
    return PriceSeries([at for at, _ in points], [value for _, value in points], name=parts[0][0].name)


def _past_the_files(recorded: PriceSeries, at: datetime, *, until: datetime) -> PriceSeries:
    """What the waits read of ``recorded`` from ``at``'s clock hour to ``until``, none of which it covers.

    ``hourly_series`` in clock hours (the file's hour-of-day profile, or a year of records at the same dates
    and hours), the one rule for an hour no file covers, as before a file ahead (:func:`_ahead_of`) and after
    one's end (:func:`then_profile`): the profile is fitted on clock-hour means, and ``carbon show`` shows
    clock hours. Given the file itself, a decision at 03:30 read each hour as the profile at its start
    (03:00's value for 03:30-04:30) where a file ahead made it half 03:00's, half 04:00's.
    """
    from costaware.core.spot_forecast import hourly_series

    hour = at.replace(minute=0, second=0, microsecond=0)
    hours = -(-(until - hour) // _HOUR)
    values = hourly_series(recorded, hour, hours)
    return PriceSeries(
        [hour + i * _HOUR for i in range(hours)],
        [Decimal(repr(value)) for value in values],
        name=f"{recorded.name}, its profile from {hour:%Y-%m-%d %H:%M}",
        notes=recorded.notes,
    )


def _ahead_of(recorded: PriceSeries, zone: str, at: datetime, *, until: datetime) -> PriceSeries | None:
    """``recorded``, starting after ``at``, preceded from ``at``'s clock hour as an hour it does not cover.

    Before it, the bundled year at the same dates and hours, or for a zone with none the file's hour-of-day
    profile (what the waits read of an hour before a file); after it, as :func:`weighed_import` follows a
    covering file, to ``until``. The hour it starts inside is its lead's up to its start, as ``costaware
    carbon show`` reads it. None where the bundled year has no hour for the lead.
    """
    from costaware.core.spot_forecast import hourly_series

    hour = at.replace(minute=0, second=0, microsecond=0)
    lead_hours = [hour + i * _HOUR for i in range(-(-(recorded.start - hour) // _HOUR))]
    if zone in bundled_zones():
        typical = _typical_hours(zone)
        lead: list[tuple[datetime, Decimal]] = []
        for lead_hour in lead_hours:
            value = typical.get(_date_and_hour(lead_hour))
            if value is None:
                return None
            lead.append((lead_hour, value))
        followed = then_typical_year(recorded, zone, until=until)
        before = "the typical year"
    else:
        profile = hourly_series(recorded, hour, len(lead_hours))
        lead = [(lead_hour, Decimal(repr(v))) for lead_hour, v in zip(lead_hours, profile, strict=True)]
        followed = then_profile(recorded, until=until)
        before = "its profile"
    points = lead + followed.points
    return PriceSeries(
        [t for t, _ in points],
        [v for _, v in points],
        name=f"{before} to {recorded.start:%Y-%m-%d %H:%M}, then {followed.name}",
        notes=recorded.notes,
    )


@functools.cache
def _typical_hours(zone: str) -> dict[tuple[int, int, int], Decimal]:
    """The bundled year's mean in each clock hour of its first calendar year, by :func:`_date_and_hour`.

    What the same date and hour reads of it (``same_hour_in`` that year), computed once: a year's fill
    read each one for every decision.
    """
    bundled = bundled_carbon(zone)
    year_end = recorded_end(bundled)
    hour = bundled.start.replace(minute=0, second=0, microsecond=0)
    if hour < bundled.start:
        hour += _HOUR
    means: dict[tuple[int, int, int], Decimal] = {}
    while hour < year_end and hour.year == bundled.start.year:
        if (hour.month, hour.day) != (2, 29):  # a leap year's 29th is never read: the 28th stands for it
            means[_date_and_hour(hour)] = bundled.mean_usd_per_hour(hour, hour + _HOUR)
        hour += _HOUR
    return means


def _date_and_hour(hour: datetime) -> tuple[int, int, int]:
    """``hour``'s month, day and hour as ``same_hour_in`` moves it to another year (29 February: the 28th)."""
    day = 28 if (hour.month, hour.day) == (2, 29) else hour.day
    return hour.month, day, hour.hour


#: The name before ``costaware carbon show`` shared it.
_then_typical_year = then_typical_year
