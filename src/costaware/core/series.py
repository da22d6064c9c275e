"""Price series: a price in USD per hour that holds from one record until the next (a step function).

Spot prices are recorded as change events (AWS writes a record when the price moves), electricity prices
as one record per hour; both are step functions here. Building a series checks the records and says
what it did:

* records out of time order are sorted (noted in :attr:`PriceSeries.notes`);
* exact duplicates (same time, same price) are dropped (noted); the same time with two prices is rejected;
* naive times, negative or non-finite prices and empty input are rejected;
* with ``max_gap``, a gap between records longer than that is rejected (hourly electricity prices use one
  hour); spot histories have no such limit because a price may hold for days.

Exact queries (:meth:`PriceSeries.price_at`, :meth:`PriceSeries.cost_usd`) use ``Decimal``. The replay
simulator needs prices on a grid of thousands of ticks per job, so :meth:`PriceSeries.tick_means` returns
floats; callers turn results back into ``Decimal`` at their boundary.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation

from costaware.core.errors import ConfigurationError, InvalidPriceDataError, PriceNotFoundError
from costaware.core.money import MICRO_USD

log = logging.getLogger(__name__)


#: The unit a series' values are written in, by what they are (named in the error for a value no number).
_UNITS = {"price": "USD per hour", "intensity": "gCO2e per kWh"}

#: What may be stripped around a number, spaces and case aside, for the bare number to be offered as what
#: was meant: only the expected unit's own signs. "€3.06" or "306¢" (cents, 100x) or "0.35 kg" (1000x) is
#: no USD-per-hour price or gCO2e-per-kWh intensity written with its unit, so no number is offered.
_STRIPPABLE = {
    "price": re.compile(r"\$?(usd)?(/h|/hr|/hour|perhour)?"),
    "intensity": re.compile(r"(g|gco2|gco2e|gco2eq)?(/kwh|perkwh)?"),
}


def _price(
    value: object,
    *,
    what: str,
    where: str,
    allow_negative: bool,
    value_name: str = "price",
    unit: str | None = None,
) -> Decimal:
    unit = unit or _UNITS.get(value_name, "the file's unit")
    try:
        price = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except (InvalidOperation, ValueError) as e:
        raise InvalidPriceDataError(
            f"{what} {where}: {value_name} {value!r} is not a number: write the {unit} as digits with a "
            f"decimal point, without a unit or currency sign{_plain_number_hint(value, value_name)}"
        ) from e
    if not price.is_finite() or (price < 0 and not allow_negative):
        raise InvalidPriceDataError(
            # With its unit: "-5 must be >= 0" did not say a gCO2e/kWh column was read (nor USD per MWh).
            f"{what} {where}: {value_name} {value!r} must be a finite number"
            + ("" if allow_negative else " >= 0")
            + f" ({unit})"
        )
    return price


def _plain_number_hint(value: object, value_name: str = "price") -> str:
    """`` ('3.06'?)`` for a number written with its unit or a decimal comma ("$3.06", "3.06/h", "3,06").

    Only where what is stripped is the expected unit's own signs (:data:`_STRIPPABLE`): "€3.06" offered
    3.06 USD and "306¢" offered 306, a hundred times the price.
    """
    text = str(value).strip()
    whole, comma, fraction = text.partition(",")
    digits_after = re.match(r"\d*", fraction)
    if comma and "." not in text and "," not in fraction and digits_after and len(digits_after[0]) != 3:
        text = f"{whole}.{fraction}"  # a decimal comma; "1,200" may group thousands: no guess
    if "," in text:
        return ""
    match = re.search(r"[-+]?(\d+(\.\d*)?|\.\d+)", text)
    strippable = _STRIPPABLE.get(value_name)
    if not match or strippable is None:
        return ""
    stripped = "".join((text[: match.start()] + text[match.end() :]).split()).lower()
    return f" ({match.group(0)!r}?)" if strippable.fullmatch(stripped) else ""


def parse_instant(
    value: object, *, name: str, error: type[ConfigurationError] = ConfigurationError
) -> datetime:
    """An aware UTC datetime from a datetime or ISO-8601 text; naive values are rejected with ``error``."""
    written = value
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as e:
            # A file's record is most often a spreadsheet's day-first time ('01/11/2026 00:00'); a setting's,
            # a duration ("2h").
            hint = (
                ": write it year first, with a time zone, e.g. '2026-01-31T06:00:00Z'"
                if issubclass(error, InvalidPriceDataError)
                else ": write a time with its zone, e.g. '2026-01-31T06:00:00Z' (a duration such as '2h' is "
                'none: add it to a time in a template, "{{ (data_interval_end + macros.timedelta(hours=2))'
                '.isoformat() }}")'
            )
            raise error(f"{name} {value!r} is not ISO-8601{hint}") from e
    if not isinstance(value, datetime):
        raise error(f"{name} must be a datetime or ISO-8601 text, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        # As written where that is not how Python prints it back: a file's "2026-11-20 00:00" was told as
        # "2026-11-20T00:00:00", a text the file does not hold.
        shown = (
            repr(written) if isinstance(written, str) and written != value.isoformat() else value.isoformat()
        )
        raise error(
            f"{name} {shown} has no time zone; write it with one, e.g. '{value.isoformat()}Z' for UTC"
        )
    # Airflow's context holds pendulum DateTimes, which do not compare with stdlib ones: make it plain.
    return datetime.fromisoformat(value.isoformat()).astimezone(timezone.utc)


def _instant(value: object, *, what: str, where: str) -> datetime:
    return parse_instant(value, name=f"{what} {where}: time", error=InvalidPriceDataError)


class PriceSeries:
    """A step function of USD per hour over time; build it with :meth:`from_points`.

    Attributes:
        name: What the series is, for messages (e.g. ``"spot p3.16xlarge us-east-1a Linux/UNIX"``).
        notes: What was fixed while building it (sorting, dropped duplicates), for the user to read.
    """

    __slots__ = ("_floats", "_prices", "_seconds", "_times", "name", "notes")

    def __init__(
        self, times: Sequence[datetime], prices: Sequence[Decimal], *, name: str, notes: Sequence[str] = ()
    ):
        if not times or len(times) != len(prices):
            raise InvalidPriceDataError(f"price series {name!r} has no records")
        self._times = tuple(times)
        self._prices = tuple(prices)
        self._seconds = [t.timestamp() for t in self._times]
        self._floats = [float(p) for p in self._prices]
        self.name = name
        self.notes = tuple(notes)

    @classmethod
    def from_points(
        cls,
        points: Iterable[tuple[object, object]],
        *,
        name: str,
        max_gap: timedelta | None = None,
        allow_negative: bool = False,
        value_name: str = "price",
        lines: Sequence[int] | None = None,
        unit: str | None = None,
    ) -> PriceSeries:
        """Check, sort and de-duplicate ``(time, usd_per_hour)`` records.

        Args:
            points: Records; times are aware datetimes or ISO-8601 strings with a zone, prices anything
                ``Decimal`` accepts.
            name: What the series is, for messages.
            max_gap: Longest allowed time between consecutive records, or ``None`` for no limit.
            allow_negative: Accept prices below zero (wholesale electricity can go negative).
            value_name: What a record's value is, for messages (a carbon file's is an ``intensity``).
            lines: The file line of each point, for messages (``line 4``); default: its index (``record 2``).
            unit: The values' unit, for messages; default that of ``value_name`` (a price's USD per hour,
                an intensity's gCO2e per kWh).

        Raises:
            InvalidPriceDataError: no records, a naive or malformed time, a bad price, one time with two
                prices, or a gap longer than ``max_gap``.
        """
        points = list(points)
        where = (
            [f"line {n}" for n in lines] if lines is not None else [f"record {i}" for i in range(len(points))]
        )
        records = [
            (
                _instant(t, what=name, where=at),
                _price(
                    p,
                    what=name,
                    where=at,
                    allow_negative=allow_negative,
                    value_name=value_name,
                    unit=unit,
                ),
            )
            for at, (t, p) in zip(where, points, strict=True)
        ]
        if not records:
            # Readers that know the file or the answer say so first; "check the file and its filters" was
            # wrong for the callers this reaches (an API's answer, a window, a list built in code).
            raise InvalidPriceDataError(
                f"{value_name} series {name!r} has no records: give it at least one "
                f"(time, {value_name}) record"
            )
        notes: list[str] = []
        out_of_order = sum(1 for a, b in itertools.pairwise(records) if b[0] < a[0])
        if out_of_order:
            records.sort(key=lambda r: r[0])
            notes.append(f"sorted {len(records)} records by time ({out_of_order} were out of order)")
        times: list[datetime] = []
        prices: list[Decimal] = []
        duplicates = 0
        for at, price in records:
            if times and at == times[-1]:
                if price != prices[-1]:
                    pricing = value_name == "price"
                    raise InvalidPriceDataError(
                        f"{name}: two {'prices' if pricing else value_name + ' values'} at {at.isoformat()}: "
                        f"{prices[-1]} and {price}{' USD/hour' if pricing else ''}; keep one record per time"
                    )
                duplicates += 1
                continue
            times.append(at)
            prices.append(price)
        if duplicates:
            notes.append(f"dropped {duplicates} duplicate record(s)")
        if max_gap is not None:
            for before, after in itertools.pairwise(times):
                if after - before > max_gap:
                    raise InvalidPriceDataError(
                        f"{name}: no {value_name} from {before.isoformat()} to {after.isoformat()} "
                        f"({(after - before).total_seconds() / 3600:g} h; records must be at most {max_gap} "
                        "apart): fill the gap in the source"
                    )
        for note in notes:
            log.info("%s: %s", name, note)
        return cls(times, prices, name=name, notes=notes)

    # -- shape --------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._times)

    def __repr__(self) -> str:
        span = f"{self.start.isoformat()} .. {self.last.isoformat()}"
        return f"PriceSeries({self.name!r}, {len(self)} records, {span})"

    @property
    def start(self) -> datetime:
        """Time of the first record; there is no price before it."""
        return self._times[0]

    @property
    def last(self) -> datetime:
        """Time of the last record; its price holds after it."""
        return self._times[-1]

    @property
    def points(self) -> list[tuple[datetime, Decimal]]:
        """The records, sorted and de-duplicated."""
        return list(zip(self._times, self._prices, strict=True))

    def until(self, instant: datetime) -> PriceSeries:
        """The records at or before ``instant``: what was known then (used to fit forecasts without peeking).

        Raises:
            PriceNotFoundError: no record is that old.
        """
        end = bisect.bisect_right(self._seconds, instant.timestamp())
        if end == 0:
            raise PriceNotFoundError(
                f"{self.name}: no price was known at {instant.isoformat()}; "
                f"the series starts {self.start.isoformat()}"
            )
        return PriceSeries(self._times[:end], self._prices[:end], name=self.name, notes=self.notes)

    # -- exact queries (Decimal) --------------------------------------------------------------------

    def _index(self, seconds: float, instant: datetime) -> int:
        index = bisect.bisect_right(self._seconds, seconds) - 1
        if index < 0:
            raise PriceNotFoundError(
                f"{self.name}: no price at {instant.isoformat()}; the series starts {self.start.isoformat()}"
            )
        return index

    def price_at(self, instant: datetime) -> Decimal:
        """The price in force at ``instant`` (the last record at or before it).

        Raises:
            PriceNotFoundError: ``instant`` is before the first record.
        """
        return self._prices[self._index(instant.timestamp(), instant)]

    def segments(self, start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime, Decimal]]:
        """``(from, to, usd_per_hour)`` pieces covering ``[start, end)``."""
        index = self._index(start.timestamp(), start)
        cursor = start
        while cursor < end:
            upto = self._times[index + 1] if index + 1 < len(self._times) else end
            upto = min(upto, end)
            yield cursor, upto, self._prices[index]
            cursor = upto
            index += 1

    def _usd_seconds(self, start: datetime, end: datetime) -> Decimal:
        """Price x seconds summed over ``[start, end)``, unrounded."""
        return sum(
            (price * Decimal((b - a).total_seconds()) for a, b, price in self.segments(start, end)),
            Decimal(0),
        )

    def cost_usd(self, start: datetime, end: datetime) -> Decimal:
        """Exact cost of running from ``start`` to ``end`` at this price (micro-dollar precision)."""
        return (self._usd_seconds(start, end) / Decimal(3600)).quantize(MICRO_USD)

    def mean_usd_per_hour(self, start: datetime, end: datetime) -> Decimal:
        """Time-weighted mean price over ``[start, end)`` (rounded once, so a flat price comes back as is)."""
        seconds = Decimal((end - start).total_seconds())
        if seconds <= 0:
            return self.price_at(start)
        return (self._usd_seconds(start, end) / seconds).quantize(MICRO_USD)

    # -- grid queries (float, hot path) -------------------------------------------------------------

    def tick_means(self, start: datetime, tick: timedelta, count: int) -> list[float]:
        """Time-weighted mean price of each of ``count`` ticks from ``start`` (floats, for the simulator).

        Raises:
            PriceNotFoundError: ``start`` is before the first record.
        """
        seconds = start.timestamp()
        step = tick.total_seconds()
        index = self._index(seconds, start)
        times, prices, n = self._seconds, self._floats, len(self._seconds)
        out: list[float] = []
        for _ in range(count):
            while index + 1 < n and times[index + 1] <= seconds:
                index += 1
            end = seconds + step
            total = 0.0
            cursor = seconds
            while index + 1 < n and times[index + 1] < end:
                upto = times[index + 1]
                total += prices[index] * (upto - cursor)
                cursor = upto
                index += 1
            total += prices[index] * (end - cursor)
            out.append(total / step)
            seconds = end
        return out

    def tick_starts(self, start: datetime, tick: timedelta, count: int) -> list[float]:
        """The price in force at the start of each of ``count`` ticks from ``start`` (floats).

        What a decision at a tick's start can know; :meth:`tick_means` reads the tick's whole span, a few
        minutes of the future.

        Raises:
            PriceNotFoundError: ``start`` is before the first record.
        """
        seconds = start.timestamp()
        step = tick.total_seconds()
        self._index(seconds, start)  # refuses a start before the first record
        times, prices = self._seconds, self._floats
        return [prices[bisect.bisect_right(times, seconds + i * step) - 1] for i in range(count)]

    @staticmethod
    def pointwise_min(series: Sequence[PriceSeries], *, name: str) -> PriceSeries:
        """The lowest price in force at each instant across ``series`` (e.g. across availability zones).

        The result starts when every input has started, so no instant mixes known and unknown prices.
        """
        if not series:
            raise InvalidPriceDataError(f"{name}: no series to combine")
        begin = max(s.start for s in series)
        instants = sorted({t for s in series for t in s._times if t >= begin} | {begin})
        prices = [min(s.price_at(t) for s in series) for t in instants]
        times: list[datetime] = []
        kept: list[Decimal] = []
        for t, p in zip(instants, prices, strict=True):
            if kept and p == kept[-1]:
                continue  # a step function needs a record only where the price changes
            times.append(t)
            kept.append(p)
        return PriceSeries(times, kept, name=name, notes=())

    def scaled(self, factor: Decimal, *, name: str) -> PriceSeries:
        """Every price times ``factor`` (e.g. USD/MWh times the job's MW gives USD per hour)."""
        return PriceSeries(
            self._times, [(p * factor).quantize(MICRO_USD) for p in self._prices], name=name, notes=self.notes
        )


class AvailabilityTrace:
    """Whether one spot instance could be obtained, sampled every ``gap_seconds`` from ``start``.

    The recorded traces carry no wall-clock time, so the caller says when tick 0 was. At any instant the
    sample in force is the last one at or before it (the same step-function reading as prices).

    Args:
        samples: 1 (capacity) or 0 (none) per tick.
        gap_seconds: Seconds between samples.
        start: Aware instant of sample 0.
        name: What the trace is, for messages.

    Raises:
        InvalidPriceDataError: an empty trace, a sample other than 0/1, or a non-positive gap.
        ConfigurationError: a naive ``start``.
    """

    __slots__ = ("gap_seconds", "name", "samples", "start")

    def __init__(self, samples: Sequence[object], *, gap_seconds: float, start: datetime, name: str) -> None:
        if not samples:
            raise InvalidPriceDataError(
                f"availability trace {name!r} is empty; it needs at least one 0/1 sample"
            )
        bad = next(((i, v) for i, v in enumerate(samples) if v not in (0, 1) or isinstance(v, float)), None)
        if bad is not None:
            raise InvalidPriceDataError(
                f"availability trace {name!r}: sample {bad[0]} is {bad[1]!r}; samples must be 0 or 1"
            )
        if not gap_seconds > 0:
            raise InvalidPriceDataError(
                f"availability trace {name!r}: gap_seconds must be > 0, got {gap_seconds!r}"
            )
        if start.tzinfo is None or start.utcoffset() is None:
            raise ConfigurationError(
                f"availability start {start.isoformat()} has no time zone; pass e.g. '{start.isoformat()}Z'"
            )
        self.samples = tuple(bool(v) for v in samples)
        self.gap_seconds = float(gap_seconds)
        self.start = start.astimezone(timezone.utc)
        self.name = name

    @property
    def end(self) -> datetime:
        """The instant the last sample stops holding."""
        return self.start + timedelta(seconds=self.gap_seconds * len(self.samples))

    @property
    def share_available(self) -> float:
        """Fraction of samples with capacity."""
        return sum(self.samples) / len(self.samples)

    def ticks(self, start: datetime, tick: timedelta, count: int) -> list[bool]:
        """Capacity through each of ``count`` ticks from ``start``: every sample the tick spans has it.

        A tick longer than the trace's spacing spans several samples; read at its start only, an outage
        between two tick starts never preempted anything.

        Raises:
            PriceNotFoundError: part of the span is outside the trace; the message gives its coverage.
        """
        offset = (start - self.start).total_seconds()
        last = offset + tick.total_seconds() * (count - 1)
        if offset < 0 or last >= self.gap_seconds * len(self.samples):
            raise PriceNotFoundError(
                f"availability trace {self.name!r} covers {self.start.isoformat()} to "
                f"{self.end.isoformat()}, not {start.isoformat()} + {count} ticks of {tick}; "
                "move --availability-start or the jobs"
            )
        step, gap, samples = tick.total_seconds(), self.gap_seconds, self.samples
        if step <= gap:
            return [samples[int((offset + i * step) // gap)] for i in range(count)]
        out = []
        for i in range(count):
            first = int((offset + i * step) // gap)
            # The last sample that starts before the tick ends (the trace may end inside the last tick).
            last = min(math.ceil((offset + (i + 1) * step) / gap) - 1, len(samples) - 1)
            out.append(all(samples[first : last + 1]))
        return out

    def at(self, instant: datetime) -> bool:
        """Capacity at ``instant``.

        Raises:
            PriceNotFoundError: ``instant`` is outside the trace.
        """
        return self.ticks(instant, timedelta(seconds=self.gap_seconds), 1)[0]
