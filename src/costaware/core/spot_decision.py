"""The spot window's decision as one frozen value: :class:`SpotDecision`, and the look it is made from.

:func:`costaware.core.spot_window.decide` makes it from an :class:`Observation` (one look at the spot market);
the ``SpotWindowSensor`` completes it with the job (:meth:`SpotDecision.for_job`) and returns
:meth:`SpotDecision.to_xcom`, which DAGs read as ``ti.xcom_pull(task_ids="spot_window")["market"]``; trigger
events carry the same JSON. :meth:`SpotDecision.from_xcom` reads it back, also from the partial dicts users
write by hand for ``RemoteTrainingOperator(spot_decision=...)``. Money is ``Decimal`` in the value and decimal
text in the JSON, never a float. No IO, no Airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, get_args

from costaware.core.errors import ConfigurationError
from costaware.core.money import MICRO_USD
from costaware.core.series import parse_instant

#: The markets a window decision chooses between.
WindowMarket = Literal["spot", "on_demand"]


def price_labels(market: str, source: str) -> tuple[str, str]:
    """Where a decision's price came from: a short ``price_source`` and the full ``price_detail``.

    A spot price is ``live-ec2`` or ``recorded``; an on-demand one comes from the on-demand list.
    """
    if market != "spot":
        return "on-demand-list", source
    return ("live-ec2" if source.startswith("live") else "recorded"), source


@dataclass(frozen=True, slots=True)
class Observation:
    """One look at the spot market.

    Attributes:
        usd_per_hour: The spot price in force, or ``None`` when nothing was read (outside the window).
        available: Whether spot has capacity.
        source: Where the price came from, in words (``"live EC2 (aws_default)"``, ``"recorded p.csv"``).
        availability_zone: The zone chosen among several (the cheapest with capacity); ``""`` for one zone.
    """

    usd_per_hour: Decimal | None = None
    available: bool = False
    source: str = ""
    availability_zone: str = ""


@dataclass(frozen=True, slots=True)
class SpotDecision:
    """The spot window's decision: the market to start on, at what price, why, and (once complete) the job.

    Made by :func:`costaware.core.spot_window.decide`; the ``SpotWindowSensor`` completes it with
    :meth:`for_job` and returns :meth:`to_xcom` as its XCom; fields that are ``None`` are absent from it.

    Attributes:
        market: ``"spot"`` or ``"on_demand"``.
        usd_per_hour: The price the decision starts at; ``None`` only in a hand-written decision without one.
        reason: Why, in words.
        decided_at: When the decision was made (aware UTC).
        availability_zone: The zone to run in: the chosen one among several zones; in a completed decision
            the job's zone, ``""`` for "the region's cheapest".
        price_source: ``live-ec2``, ``recorded`` or ``on-demand-list`` (:func:`price_labels`).
        price_detail: Where the price came from, in words.
        instance_type: The job's instance type (completed decisions).
        region: The job's region (completed decisions).
        priority: The job's priority class (completed decisions).
        on_demand_usd_per_hour: The on-demand price the spot price was weighed against (completed decisions).
        estimated_usd: ``usd_per_hour x expected_runtime_hours`` (completed decisions).
        expected_runtime_hours: The job's expected run (completed decisions).
        latest_start: The last moment waiting for spot was safe (completed decisions).
        deadline: When the job must be done (completed decisions).
        objective: What the decision minimised, when not ``cost`` (``carbon``, ``cost+carbon``).
        kg_co2e: The expected emissions of the run from the decision (carbon objectives): the instance's
            power at full load x the expected runtime x the grid intensity at the decision.
    """

    market: WindowMarket
    usd_per_hour: Decimal | None
    reason: str = ""
    decided_at: datetime | None = None
    availability_zone: str | None = None
    price_source: str | None = None
    price_detail: str | None = None
    instance_type: str | None = None
    region: str | None = None
    priority: str | None = None
    on_demand_usd_per_hour: Decimal | None = None
    estimated_usd: Decimal | None = None
    expected_runtime_hours: Decimal | None = None
    latest_start: datetime | None = None
    deadline: datetime | None = None
    objective: str | None = None
    kg_co2e: Decimal | None = None

    def __post_init__(self) -> None:
        if self.market not in get_args(WindowMarket):
            known = ", ".join(get_args(WindowMarket))
            raise ConfigurationError(f"spot decision market {self.market!r} is unknown; use one of {known}")
        for name in _DECIMAL_FIELDS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, Decimal) or not value.is_finite() or value < 0):
                raise ConfigurationError(f"spot decision {name} must be a Decimal >= 0, got {value!r}")

    def for_job(
        self,
        *,
        instance_type: str,
        region: str,
        priority: str,
        on_demand_usd_per_hour: Decimal,
        expected_runtime_hours: Decimal,
        latest_start: datetime,
        deadline: datetime,
        availability_zone: str | None = None,
    ) -> SpotDecision:
        """This decision completed with the job it is for, and its estimated cost.

        Args:
            instance_type: The job's instance type.
            region: The job's region.
            priority: The job's priority class.
            on_demand_usd_per_hour: The on-demand price.
            expected_runtime_hours: The job's expected run; ``estimated_usd`` is the price times this.
            latest_start: The last safe moment to wait for spot.
            deadline: When the job must be done.
            availability_zone: The job's configured zone; the decision's own zone (chosen among several)
                wins. ``""`` when neither names one.

        Raises:
            ConfigurationError: the decision has no price to estimate the cost from.
        """
        if self.usd_per_hour is None:
            raise ConfigurationError(f"spot decision {self.to_xcom()!r} has no usd_per_hour to estimate from")
        zone = self.availability_zone if self.availability_zone is not None else (availability_zone or "")
        return replace(
            self,
            availability_zone=zone,
            instance_type=instance_type,
            region=region,
            priority=priority,
            on_demand_usd_per_hour=on_demand_usd_per_hour,
            estimated_usd=(self.usd_per_hour * expected_runtime_hours).quantize(MICRO_USD),
            expected_runtime_hours=expected_runtime_hours,
            latest_start=latest_start,
            deadline=deadline,
        )

    def to_xcom(self) -> dict[str, str]:
        """The decision as JSON text values, the sensor's XCom and the triggers' event payload.

        Money is decimal text (``"0.40"``), times ISO-8601; fields that are ``None`` are left out. DAGs read
        it as ``ti.xcom_pull(task_ids="spot_window")["market"]``.
        """
        out: dict[str, str] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            out[name] = value.isoformat() if isinstance(value, datetime) else str(value)
        return out

    @classmethod
    def from_xcom(cls, mapping: Mapping[str, Any]) -> SpotDecision:
        """A decision read back from :meth:`to_xcom`'s dict, or from a hand-written one.

        Tolerant of what users write in ``spot_decision=``: keys it does not know are ignored; a missing
        ``market`` is ``on_demand`` (without a decision a training runs on on-demand); other missing keys,
        and ``None`` or ``""`` for a number or time, are ``None``. Numbers may be text, ``int`` or ``float``
        (read through their text, so ``0.1`` is ``Decimal("0.1")``); times are aware ISO-8601 text or
        datetimes. ``from_xcom(d.to_xcom()) == d`` for every decision ``d``.

        Args:
            mapping: The decision, e.g. ``ti.xcom_pull(task_ids="spot_window")`` (parse rendered text first).

        Raises:
            ConfigurationError: an unknown market, a number that is not one (or is negative), or a time that
                is not aware ISO-8601; the message names the key and the value.
        """
        if not isinstance(mapping, Mapping):
            raise ConfigurationError(f"spot decision must be a mapping, got {type(mapping).__name__}")
        values: dict[str, Any] = {}
        for name in _FIELDS[1:]:
            raw = mapping.get(name)
            if name in _DECIMAL_FIELDS:
                values[name] = _read_decimal(raw, name)
            elif name in _TIME_FIELDS:
                values[name] = None if raw in (None, "") else parse_instant(raw, name=f"spot decision {name}")
            elif raw is not None:
                values[name] = str(raw)
        return cls(market=_read_market(mapping.get("market")), **values)


#: The XCom's keys, in its order: the decision, then what :meth:`SpotDecision.for_job` adds.
_FIELDS = tuple(f.name for f in fields(SpotDecision))
_DECIMAL_FIELDS = frozenset(
    {"usd_per_hour", "on_demand_usd_per_hour", "estimated_usd", "expected_runtime_hours", "kg_co2e"}
)
_TIME_FIELDS = frozenset({"decided_at", "latest_start", "deadline"})


def _read_market(raw: object) -> WindowMarket:
    text = str(getattr(raw, "value", raw) or "on_demand").strip().lower().replace("-", "_")
    if text == "spot":
        return "spot"
    if text == "on_demand":
        return "on_demand"
    known = ", ".join(get_args(WindowMarket))
    raise ConfigurationError(f"spot decision market {raw!r} is unknown; use one of {known}")


def _read_decimal(raw: object, name: str) -> Decimal | None:
    if raw is None or raw == "":
        return None
    try:
        # bool is an int: True would read as 1
        number = Decimal("NaN") if isinstance(raw, bool) else Decimal(str(raw).strip())
    except (InvalidOperation, ValueError):
        number = Decimal("NaN")
    if not number.is_finite() or number < 0:
        raise ConfigurationError(f"spot decision {name} must be a number >= 0 such as '0.40', got {raw!r}")
    return number
