"""Where a budget's period will end: the spend so far plus the scheduled runs still to come.

The method is deliberately simple, so a team lead can check it by hand:

1. **Committed.** What the budget has spent this period plus what is reserved (``spent + reserved``): that
   money is gone or promised whatever happens next.
2. **Still to come.** For every DAG that spends in the budget's scope, the number of runs its timetable
   schedules between now and the end of the period (``runs_left``), times its cost per run over its
   recent runs. The forecast uses the mean cost per run, the low end of the interval the cheapest recent run
   and the high end the dearest one.

So ``forecast = committed + sum(runs_left[d] * mean(cost_per_run[d]))``, ``low`` uses ``min`` and ``high``
uses ``max`` in place of ``mean``. A DAG with no recent run (nothing to learn a cost from) adds nothing and is
counted in ``unpriced_dags``; a manual-only DAG has no scheduled runs and adds nothing either. The interval
is the spread of what recent runs actually cost, not a statistical confidence interval: with one recent run
it is a single point.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from costaware.core.errors import ConfigurationError
from costaware.core.money import MICRO_USD


@dataclass(frozen=True, slots=True)
class DagOutlook:
    """One DAG's share of a forecast: runs still to come this period and what its recent runs cost."""

    dag_id: str
    runs_left: int
    recent_run_usd: tuple[Decimal, ...]

    def __post_init__(self) -> None:
        if self.runs_left < 0:
            raise ConfigurationError(f"DAG {self.dag_id!r} has runs_left={self.runs_left}: it must be >= 0")
        bad = [usd for usd in self.recent_run_usd if not usd.is_finite() or usd < 0]
        if bad:
            raise ConfigurationError(f"DAG {self.dag_id!r} has recent run costs {bad}: each must be >= 0")


@dataclass(frozen=True, slots=True)
class SpendForecast:
    """Projected spend of one budget at the end of its period, with a low-high interval."""

    committed_usd: Decimal
    forecast_usd: Decimal
    low_usd: Decimal
    high_usd: Decimal
    runs_left: int
    unpriced_dags: tuple[str, ...] = ()

    def crosses(self, cap_usd: Decimal) -> bool:
        """Whether the central forecast ends the period above ``cap_usd``."""
        return self.forecast_usd > cap_usd


def forecast_spend(committed_usd: Decimal, outlooks: Sequence[DagOutlook]) -> SpendForecast:
    """The period-end forecast of a budget (see the module docstring for the method).

    Args:
        committed_usd: Spent plus reserved this period; below zero where a refund or credit recorded this
            period outweighs the spend (the ledger takes negative entries).
        outlooks: One per DAG spending in the budget's scope.

    Raises:
        ConfigurationError: a committed amount that is not a finite number.
    """
    if not committed_usd.is_finite():
        # Only a non-finite amount: a credit above the period's spend made every budget view, forecast and
        # alert check of that scope fail ("must be a finite amount >= 0").
        raise ConfigurationError(f"committed spend {committed_usd} must be a finite amount")
    mean = low = high = Decimal(0)
    runs = 0
    unpriced: list[str] = []
    for outlook in outlooks:
        if outlook.runs_left == 0:
            continue
        if not outlook.recent_run_usd:
            unpriced.append(outlook.dag_id)
            continue
        costs = outlook.recent_run_usd
        runs += outlook.runs_left
        mean += outlook.runs_left * sum(costs, Decimal(0)) / len(costs)
        low += outlook.runs_left * min(costs)
        high += outlook.runs_left * max(costs)
    return SpendForecast(
        committed_usd=committed_usd,
        forecast_usd=(committed_usd + mean).quantize(MICRO_USD),
        low_usd=(committed_usd + low).quantize(MICRO_USD),
        high_usd=(committed_usd + high).quantize(MICRO_USD),
        runs_left=runs,
        unpriced_dags=tuple(sorted(unpriced)),
    )


def outlooks_from(
    recent_costs: Mapping[str, Sequence[Decimal]], runs_left: Mapping[str, int]
) -> list[DagOutlook]:
    """Join per-DAG recent run costs and per-DAG runs left into outlooks (a DAG in either map counts).

    A run whose entries net below zero (a refund or credit recorded against it) is forecast at $0 a run: a
    credit does not come again with the next run, and the budget's committed spend already holds it.
    """
    return [
        DagOutlook(
            dag_id,
            int(runs_left.get(dag_id, 0)),
            tuple(max(usd, Decimal(0)) for usd in recent_costs.get(dag_id, ())),
        )
        for dag_id in sorted(set(recent_costs) | set(runs_left))
    ]


# -- alert thresholds ------------------------------------------------------------------------------

FORECAST = "forecast"
DEFAULT_THRESHOLDS = ("50%", "80%", "100%", FORECAST)
#: The most decimal places of a percentage threshold: ``'999.99%'`` fits where alerts sent are stored.
MAX_THRESHOLD_DECIMALS = 2


def parse_thresholds(spec: str | Sequence[str | int]) -> tuple[str, ...]:
    """Normalise thresholds such as ``"50%,80%,100%,forecast"`` or ``[50, 80, "forecast"]``.

    A number is a percentage of the cap (``50`` and ``"50%"`` are the same; ``"80.5%"`` has a fraction);
    ``forecast`` fires when the period-end forecast passes the cap. Returns them as
    ``("50%", "80.5%", "forecast")``, percentages ascending.

    Raises:
        ConfigurationError: an empty list, a percentage that is not a number in 1..1000 with at most two
            decimal places, a bare number under 10 (``2``: 2 % or twice the cap?), or an unknown word.
    """
    parts = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else [str(p).strip() for p in spec]
    parts = [p for p in parts if p]
    if not parts:
        raise ConfigurationError(f"alert thresholds {spec!r} are empty: use e.g. '50%,80%,100%,forecast'")
    percents: set[Decimal] = set()
    forecast = False
    for part in parts:
        if part.lower() == FORECAST:
            forecast = True
            continue
        if part.endswith("%%"):
            # airflow.cfg's way to write '%', copied to the command line or an environment variable.
            raise ConfigurationError(
                f"alert threshold {part!r} has '%%', which only airflow.cfg needs for '%': write "
                f"{part.rstrip('%') + '%'!r} here (on the command line, in an environment variable or a rule)"
            )
        digits = part.removesuffix("%")
        percent = _percent_of_a_fraction(part)
        if percent is not None:  # the habit of 0.8 for 80 %, as in other tools' alert settings
            raise ConfigurationError(
                f"alert threshold {part!r} reads as a fraction of the cap, but thresholds are percentages: "
                f"write {_to_write(percent)}"
            )
        written = _PERCENT.fullmatch(digits)
        percent = Decimal(digits) if written else None
        if percent is not None and 1 <= percent < 10 and not part.endswith("%"):
            # A fraction's habit (0.8 is refused): '1' meant "at the cap", 2 or 1.2 twice or 1.2 times it,
            # and they alerted at 1 %, 2 % and 1.2 % of it.
            what = "the cap" if percent == 1 else f"{_plain(percent)} times the cap"
            raise ConfigurationError(
                f"alert threshold {part!r} is ambiguous: write {_to_write(percent)} for {_plain(percent)} "
                f"percent of the cap, or {_to_write(percent * 100)} for {what}"
            )
        if percent is not None and 0 < percent < 1 and part.endswith("%"):
            # '0.8%' is most likely 0.8 (80 %) with a '%' added, and alerted at the first cents spent.
            raise ConfigurationError(
                f"alert threshold {part!r} is {_plain(percent)} % of the cap, under the least of 1%: if you "
                f"meant {_plain(percent * 100)} % of the cap, write {_to_write(percent * 100)}"
            )
        if percent is None or not 1 <= percent <= 1000:
            raise ConfigurationError(
                f"alert threshold {part!r} is neither a percentage of the cap (1..1000, e.g. '80%' or "
                "'80.5%') nor 'forecast'"
            )
        # As written (trailing zeros aside): normalize() rounds to 28 digits, so that
        # '50.000000000000000000000000000001%' counted none and was accepted as '50%'.
        decimals = len(digits.partition(".")[2].rstrip("0"))
        if decimals > MAX_THRESHOLD_DECIMALS:
            # Stored per alert sent in a 16-character column: PostgreSQL refused '10.00000000000001%' at
            # every check, and every alert of its budget was lost.
            raise ConfigurationError(
                f"alert threshold {part!r} has {decimals} decimal places: at most "
                f"{MAX_THRESHOLD_DECIMALS} (e.g. '80.25%'); round it"
            )
        percents.add(percent.normalize())
    return tuple(f"{_plain(p)}%" for p in sorted(percents)) + ((FORECAST,) if forecast else ())


def sort_thresholds(items: Sequence[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Each threshold of ``items`` read alone: ``(usable, refused)``.

    ``usable``: (as written, as :func:`parse_thresholds` normalises it); ``refused``: (as written, why).
    The one reading of a list item by item, so that every bad item is named, not the first alone.
    """
    usable: list[tuple[str, str]] = []
    refused: list[tuple[str, str]] = []
    for item in items:
        try:
            (normalised,) = parse_thresholds([item])
        except ConfigurationError as e:
            refused.append((item, str(e)))
        else:
            usable.append((item, normalised))
    return usable, refused


def every_threshold_refused(spec: str, *, refused_whole: str) -> str:
    """Why each bad item of ``spec`` is refused, and the good ones set aside with them; "" if none is bad.

    ``refused_whole``: what is refused whole, as the message's subject (``the setting``): ``5,50`` refused
    for its ``5`` left the ``50%`` unused too, unsaid.
    """
    usable, refused = sort_thresholds([part.strip() for part in spec.split(",") if part.strip()])
    if not refused:
        return ""
    # Each once: '5,5' said the same refusal twice, '5,50,50%' listed its 50% twice.
    valid = list(dict.fromkeys(normalised for _, normalised in usable))
    are = "is" if len(valid) == 1 else "are"
    said = "; ".join(dict.fromkeys(why for _, why in refused))
    if not valid:
        return said
    return f"{said} ({refused_whole} is refused whole: its {','.join(valid)} {are} not used either)"


#: A percentage as written: digits, maybe a fraction (no sign, exponent, nan or inf).
_PERCENT = re.compile(r"[0-9]+(\.[0-9]+)?")


def _plain(number: Decimal) -> str:
    """``80.50`` -> ``80.5``, ``100`` -> ``100`` (never ``1E+2``)."""
    return f"{number.normalize():f}"


def _to_write(percent: Decimal) -> str:
    """A percentage as a threshold to write, quoted: rounded to what is accepted, and said so.

    '0.85555' was told "write '85.555%'", refused in turn for its 3 decimal places.
    """
    rounded = percent.quantize(Decimal(1).scaleb(-MAX_THRESHOLD_DECIMALS), rounding=ROUND_HALF_UP)
    if rounded == percent:
        return f"'{_plain(percent)}%'"
    return f"'{_plain(rounded)}%' (rounded to {MAX_THRESHOLD_DECIMALS} decimals)"


def _percent_of_a_fraction(part: str) -> Decimal | None:
    """The percentage of the cap a threshold such as ``0.8`` means as a fraction of it (80), else None."""
    try:
        value = Decimal(part)
    except ArithmeticError:
        return None
    if "." not in part or not value.is_finite() or not 0 < value <= 1:
        return None
    return (value * 100).normalize()


def crossed_thresholds(
    thresholds: Sequence[str], *, spent_usd: Decimal, cap_usd: Decimal, forecast_usd: Decimal | None
) -> list[str]:
    """The thresholds that spend (or the forecast, for ``forecast``) has reached, in order.

    A percentage threshold is reached when ``spent >= cap * percent / 100``; ``forecast`` when the forecast
    is above the cap. A zero cap reaches every percentage at once.
    """
    out = []
    for threshold in thresholds:
        if threshold == FORECAST:
            if forecast_usd is not None and forecast_usd > cap_usd:
                out.append(threshold)
        elif spent_usd >= cap_usd * Decimal(threshold.removesuffix("%")) / 100:
            out.append(threshold)
    return out
