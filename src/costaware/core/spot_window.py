"""The spot window's decision, pure: start on spot now, fall back to on-demand, or keep waiting.

``SpotWindowSensor`` (a worker) and ``SpotWindowTrigger`` (the triggerer) gather the facts (the price in
force, capacity, the forecast) and call :func:`window_decision`; operators that must make the same call (a
remote training operator choosing its market) import it from here. No IO, no Airflow: money in and out as
``Decimal`` and text, times aware UTC.

Priority classes (``critical``, ``normal``, ``best_effort``) move the moment at which waiting stops
(:func:`latest_start`): a critical job keeps room for one preemption before the deadline, a best-effort job
treats the deadline as soft and may wait for spot until the deadline itself.

A job already running on spot may be paused (:func:`pause_decision`) when its price rises well above what the
rest of its window offers, and resumed from its checkpoint by :func:`window_decision` once the price is back
at the forecast minimum: a pause needs a clearly higher price than a start refuses, so the two never chase
each other.

The decision is one frozen value, :class:`SpotDecision`, made by one function, :func:`decide`, from one look
at the market (:class:`Observation`): the sensor, its trigger and the remote training's resume watch all
call it. It travels as JSON (XCom, trigger events) through :meth:`SpotDecision.to_xcom` and
:meth:`SpotDecision.from_xcom`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.core.policies.cheapest_window import PAUSE_MARGIN, pause_rule, start_rule
from costaware.core.series import parse_instant

# The decision's value lives in its own module; it is re-exported here, where the rule that makes it is.
from costaware.core.spot_decision import Observation, SpotDecision, WindowMarket, price_labels

__all__ = [
    "CRITICAL_RESERVE_SHARE",
    "PRIORITIES",
    "Observation",
    "SpotDecision",
    "WindowMarket",
    "check_priority",
    "choose_zone",
    "decide",
    "decide_on_objective",
    "forecast_min",
    "given_priority",
    "label_decision",
    "latest_start",
    "pause_decision",
    "price_labels",
    "spot_capacity",
    "wants_observation",
    "window_decision",
]

#: Priority classes, most protected first.
PRIORITIES = ("critical", "normal", "best_effort")
#: Share of the run a critical job keeps in reserve for one preemption (work lost back to a checkpoint).
CRITICAL_RESERVE_SHARE = Decimal("0.25")


def check_priority(priority: object) -> str:
    """``priority`` as one of :data:`PRIORITIES`.

    Raises:
        ConfigurationError: any other value; the message lists the known ones.
    """
    text = str(priority or "normal").strip().lower().replace("-", "_")
    if text not in PRIORITIES:
        raise ConfigurationError(f"priority {priority!r} is unknown; choose one of {', '.join(PRIORITIES)}")
    return text


def given_priority(priority: object) -> str:
    """``priority`` as :func:`check_priority` reads it, ``normal`` where it is not given (``core.given``).

    A template of an unset param renders ``None`` or ``null``: not a priority to refuse.
    """
    return check_priority(blank(priority))


def latest_start(
    *, deadline: datetime, runtime_hours: Decimal, restart_overhead_minutes: float, priority: str = "normal"
) -> datetime:
    """The last moment at which the job may still wait for spot, by priority class.

    * ``normal``: ``deadline - runtime - restart overhead`` (on-demand from then on just finishes in time);
    * ``critical``: earlier, by one more restart and a quarter of the run (:data:`CRITICAL_RESERVE_SHARE`),
      so that a preemption soon after a late spot start still leaves time to finish on on-demand;
    * ``best_effort``: the deadline itself; the deadline is soft and the run may end after it.
    """
    priority = check_priority(priority)
    # As a library call too (the sensor checks its own): -3 hours ran after the deadline, and a naive
    # deadline failed later in decide() as a bare TypeError.
    deadline = parse_instant(deadline, name="deadline")
    # Read once as finite Decimals: a float or "4" runtime failed only for critical jobs (float x Decimal),
    # and NaN or infinity raised bare decimal and overflow errors.
    hours = _finite_at_least_0(runtime_hours, "runtime_hours", "hours")  # 0: a resume with no work left
    minutes = _finite_at_least_0(restart_overhead_minutes, "restart_overhead_minutes", "minutes")
    overhead = timedelta(minutes=float(minutes))
    runtime = timedelta(hours=float(hours))
    if priority == "best_effort":
        return deadline
    if priority == "critical":
        reserve = max(overhead, timedelta(hours=float(hours * CRITICAL_RESERVE_SHARE)))
        return deadline - runtime - overhead - overhead - reserve
    return deadline - runtime - overhead


def _finite_at_least_0(value: object, name: str, unit: str) -> Decimal:
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        number = Decimal("NaN")
    # Ten years at most: timedelta overflows past about 2.7 million years, and no deadline is that far.
    if not number.is_finite() or number < 0 or number > _MOST[unit]:
        raise ConfigurationError(f"{name} must be a number of {unit} from 0 to {_MOST[unit]}, got {value!r}")
    return number


_MOST = {"hours": Decimal(87_600), "minutes": Decimal(87_600 * 60)}
#: The longest restart overhead a latest start is counted with (ten years); the sensor refuses more at parse.
MOST_RESTART_OVERHEAD_MINUTES = _MOST["minutes"]


def forecast_min(
    forecast_starts: Sequence[Sequence[str]], *, after: datetime, until: datetime
) -> Decimal | None:
    """Lowest forecast mean price of the starts in ``(after, until]``; ``None`` when none is left."""
    values = [
        Decimal(v) for at, v in forecast_starts if after < parse_instant(at, name="forecast start") <= until
    ]
    return min(values) if values else None


def _window_rule(
    *,
    now: datetime,
    usd_per_hour: Decimal | None,
    available: bool,
    on_demand_usd_per_hour: Decimal,
    forecast_starts: Sequence[Sequence[str]],
    target_usd_per_hour: Decimal | None,
    latest_start: datetime,
    not_before: datetime | None,
) -> tuple[WindowMarket, Decimal, str] | None:
    if now >= latest_start:
        late = f"waiting longer would miss the deadline: latest safe start {latest_start.isoformat()}"
        return "on_demand", on_demand_usd_per_hour, late
    if not_before is not None and now < not_before:
        return None
    if usd_per_hour is None or not available or usd_per_hour >= on_demand_usd_per_hour:
        return None
    reason = start_rule(
        usd_per_hour, forecast_min(forecast_starts, after=now, until=latest_start), target_usd_per_hour
    )
    if reason is None:
        return None
    return "spot", usd_per_hour, f"spot capacity available; {reason}"


def window_decision(
    *,
    now: datetime,
    usd_per_hour: Decimal | None,
    available: bool,
    on_demand_usd_per_hour: Decimal,
    forecast_starts: Sequence[Sequence[str]],
    target_usd_per_hour: Decimal | None,
    latest_start: datetime,
    not_before: datetime | None,
) -> dict[str, str] | None:
    """Start on spot, fall back to on-demand, or ``None`` to keep waiting (pure; money in and out as text).

    The order: past ``latest_start`` -> on-demand (waiting longer would miss the deadline); before
    ``not_before`` -> wait; spot with capacity, cheaper than on-demand, and passing the start rule (at or
    below the target or the forecast minimum of the rest of the window) -> spot; else wait.

    The bare rule, ``{"market", "usd_per_hour", "reason"}``; :func:`decide` makes the full
    :class:`SpotDecision` from it.
    """
    rule = _window_rule(
        now=now,
        usd_per_hour=usd_per_hour,
        available=available,
        on_demand_usd_per_hour=on_demand_usd_per_hour,
        forecast_starts=forecast_starts,
        target_usd_per_hour=target_usd_per_hour,
        latest_start=latest_start,
        not_before=not_before,
    )
    if rule is None:
        return None
    market, price, reason = rule
    return {"market": market, "usd_per_hour": str(price), "reason": reason}


def pause_decision(
    *,
    now: datetime,
    usd_per_hour: Decimal,
    forecast_starts: Sequence[Sequence[str]],
    latest_resume: datetime,
    remaining_hours: Decimal,
    restart_overhead_minutes: float,
    priority: str = "normal",
    objective: Objective | None = None,
    power_kw: float = 0.0,
    g_co2e_per_kwh: float | None = None,
    run_on_hours: Decimal | None = None,
) -> str | None:
    """Why to pause a checkpointed job running on spot now, or ``None`` to keep it running (pure).

    Running on costs about ``usd_per_hour x run_on_hours`` (the price in force persists); pausing costs the
    cheapest forecast start of the rest of the window, ``forecast_min x (remaining_hours + one restart)``. The
    job pauses when running on is dearer by more than :data:`PAUSE_MARGIN` of its class. A ``critical`` job
    never pauses, and no job pauses once ``latest_resume`` (the latest restart that still meets the deadline
    with the work left) has come: then it finishes where it is.

    Args:
        now: The moment of the look.
        usd_per_hour: The job's spot price in force now.
        forecast_starts: ``[[iso start, forecast mean USD/h], ...]`` of runs of the remaining work.
        latest_resume: Latest restart that still meets the deadline with the remaining work.
        remaining_hours: Work left after a pause (upper estimate: work since the last checkpoint counts as
            left).
        restart_overhead_minutes: What a restart costs before training goes on.
        priority: The job's class.
        objective: What to minimise (default ``cost``). With ``carbon`` or ``cost+carbon`` the rule compares
            objective values: ``forecast_starts`` then hold the objective's mean hourly value per start
            (:func:`~costaware.core.spot_forecast.objective_starts`), and the value now is that of
            ``usd_per_hour`` at ``power_kw`` and ``g_co2e_per_kwh``.
        power_kw: The instance's power at full load (carbon objectives).
        g_co2e_per_kwh: The mean grid intensity over ``run_on_hours`` from now, valued as the later
            starts are (:func:`~costaware.core.spot_forecast.intensity_from`; carbon objectives).
        run_on_hours: Work left if the job runs on (no checkpoint interval lost; default
            ``remaining_hours``). Valued over the work after a pause, a job minutes from its end paused.

    Raises:
        ConfigurationError: a carbon objective without the intensity now.
    """
    priority = check_priority(priority)
    run_on = remaining_hours if run_on_hours is None else run_on_hours
    if PAUSE_MARGIN[priority] is None or now >= latest_resume or remaining_hours <= 0 or run_on <= 0:
        return None
    later = forecast_min(forecast_starts, after=now, until=latest_resume)
    if later is None:
        return None
    restart_hours = Decimal(str(restart_overhead_minutes)) / 60
    if objective is not None and objective.needs_carbon:
        now_value = Decimal(repr(objective.hourly_value(float(usd_per_hour), power_kw, g_co2e_per_kwh)))
        keep, paused = now_value * run_on, later * (remaining_hours + restart_hours)
        if not pause_rule(keep, paused, priority):
            return None
        unit = objective.unit
        return (
            f"{objective.name} value {now_value.quantize(Decimal('0.0001'))} {unit}/hour now (spot "
            f"{usd_per_hour} USD/hour at {g_co2e_per_kwh} gCO2e/kWh) is well above the forecast minimum "
            f"{later} of the rest of the window: {run_on.quantize(Decimal('0.01'))} h left come to "
            f"about {keep.quantize(Decimal('0.0001'))} {unit} now against "
            f"{paused.quantize(Decimal('0.0001'))} for {remaining_hours.quantize(Decimal('0.01'))} h after a "
            "pause and one restart"
        )
    keep_usd = usd_per_hour * run_on
    pause_usd = later * (remaining_hours + restart_hours)
    if not pause_rule(keep_usd, pause_usd, priority):
        return None
    return (
        f"spot price {usd_per_hour} USD/hour is well above the forecast minimum {later} of the rest of the "
        f"window: {run_on.quantize(Decimal('0.01'))} h left cost about "
        f"{keep_usd.quantize(Decimal('0.0001'))} USD now against {pause_usd.quantize(Decimal('0.0001'))} "
        f"for {remaining_hours.quantize(Decimal('0.01'))} h after a pause and one restart"
    )


def spot_capacity(
    usd_per_hour: Decimal, on_demand_usd_per_hour: Decimal, trace_available: bool | None
) -> bool:
    """Whether spot has capacity: the trace's sample when there is a trace, else "spot is below on-demand".

    Without a capacity trace, a spot price at or above on-demand is taken as "no useful capacity".
    """
    if trace_available is not None:
        return trace_available
    return usd_per_hour < on_demand_usd_per_hour


def choose_zone(observations: Mapping[str, tuple[Decimal, bool]]) -> str | None:
    """The cheapest zone that has capacity now, or ``None`` when none has (ties: the first listed).

    Args:
        observations: ``zone -> (spot USD/hour, has capacity)``, in the order the job lists its zones.
    """
    best: tuple[Decimal, str] | None = None
    for name, (price, available) in observations.items():
        if available and (best is None or price < best[0]):
            best = (price, name)
    return None if best is None else best[1]


def label_decision(decision: dict[str, str], source: str) -> None:
    """Add :func:`price_labels` to a bare :func:`window_decision` dict, in place."""
    decision["price_source"], decision["price_detail"] = price_labels(decision["market"], source)


def wants_observation(now: datetime, *, latest_start: datetime, not_before: datetime | None) -> bool:
    """Whether a look at the market can change :func:`decide`'s answer at ``now``.

    Not before the window opens (nothing starts yet), not from ``latest_start`` on (on-demand whatever
    spot costs): the price is read, which is IO, only in between.
    """
    return now < latest_start and (not_before is None or now >= not_before)


def decide(
    *,
    now: datetime,
    observation: Observation,
    on_demand_usd_per_hour: Decimal,
    forecast_starts: Sequence[Sequence[str]],
    target_usd_per_hour: Decimal | None,
    latest_start: datetime,
    not_before: datetime | None,
) -> SpotDecision | None:
    """The spot window's decision at ``now``, or ``None`` to keep waiting (pure).

    :func:`window_decision`'s rule, stamped with ``now``, the zone the observation chose (spot only) and the
    price's labels (:func:`price_labels`). The ``SpotWindowSensor``, the ``SpotWindowTrigger`` and the
    remote training's resume watch all decide through this.

    Args:
        now: The moment of the look (aware UTC).
        observation: What the market showed; ``Observation()`` when it was not read
            (:func:`wants_observation`).
        on_demand_usd_per_hour: The on-demand price, the fallback's.
        forecast_starts: ``[[iso start, forecast mean USD/h], ...]`` of the rest of the window.
        target_usd_per_hour: Start on spot at once at or below this, or ``None``.
        latest_start: From then on: on-demand.
        not_before: Before this nothing starts, or ``None``.
    """
    rule = _window_rule(
        now=now,
        usd_per_hour=observation.usd_per_hour,
        available=observation.available,
        on_demand_usd_per_hour=on_demand_usd_per_hour,
        forecast_starts=forecast_starts,
        target_usd_per_hour=target_usd_per_hour,
        latest_start=latest_start,
        not_before=not_before,
    )
    if rule is None:
        return None
    market, price, reason = rule
    price_source, price_detail = price_labels(market, observation.source)
    zone = observation.availability_zone if market == "spot" and observation.availability_zone else None
    return SpotDecision(
        market=market,
        usd_per_hour=price,
        reason=reason,
        decided_at=now,
        availability_zone=zone,
        price_source=price_source,
        price_detail=price_detail,
    )


def decide_on_objective(
    *,
    now: datetime,
    observation: Observation,
    on_demand_usd_per_hour: Decimal,
    forecast_starts: Sequence[Sequence[str]],
    target_value_per_hour: Decimal | None,
    latest_start: datetime,
    not_before: datetime | None,
    objective: Objective,
    power_kw: float,
    g_co2e_per_kwh: float | None,
    runtime_hours: Decimal,
) -> SpotDecision | None:
    """:func:`decide` on the objective's hourly value instead of the spot price (pure).

    ``cost`` is :func:`decide` itself. For ``carbon`` and ``cost+carbon``, spot must still be usable on its
    price (capacity, below on-demand: the market choice is about money, the carbon of both markets is the
    same), and the start rule weighs the value now (the spot price at ``power_kw`` and ``g_co2e_per_kwh``)
    against the target and ``forecast_starts``, which then hold the objective's mean hourly value per start
    (:func:`~costaware.core.spot_forecast.objective_starts`). ``g_co2e_per_kwh`` is the mean intensity over
    ``runtime_hours`` from now (:func:`~costaware.core.spot_forecast.intensity_from`), as each later start is
    valued: the instant's intensity scored a clean hour before dirty ones as clean. The decision keeps the
    market's USD/hour and records the objective and the run's expected kg CO2e at that mean.

    Raises:
        ConfigurationError: a carbon objective without the intensity now.
    """
    if not objective.needs_carbon:
        return decide(
            now=now,
            observation=observation,
            on_demand_usd_per_hour=on_demand_usd_per_hour,
            forecast_starts=forecast_starts,
            target_usd_per_hour=target_value_per_hour,
            latest_start=latest_start,
            not_before=not_before,
        )
    price = observation.usd_per_hour
    usable = price is not None and observation.available and price < on_demand_usd_per_hour
    value = None
    if usable and price is not None:
        value = Decimal(repr(objective.hourly_value(float(price), power_kw, g_co2e_per_kwh))).quantize(
            Decimal("0.000001")
        )
    rule = _window_rule(
        now=now,
        usd_per_hour=value,
        available=usable,
        # The market test is done above, on prices: the rule below only times the start.
        on_demand_usd_per_hour=Decimal("Infinity"),
        forecast_starts=forecast_starts,
        target_usd_per_hour=target_value_per_hour,
        latest_start=latest_start,
        not_before=not_before,
    )
    if rule is None:
        return None
    market, _, reason = rule
    usd = on_demand_usd_per_hour if market == "on_demand" or price is None else price
    if market == "spot":
        reason = f"{objective.name} ({objective.unit}/hour): {reason.replace(' USD/hour', '')}"
    kg = None
    if g_co2e_per_kwh is not None:
        kg = Decimal(repr(round(power_kw * float(runtime_hours) * g_co2e_per_kwh / 1000, 3)))
    price_source, price_detail = price_labels(market, observation.source)
    zone = observation.availability_zone if market == "spot" and observation.availability_zone else None
    decision = SpotDecision(
        market=market,
        usd_per_hour=usd,
        reason=reason,
        decided_at=now,
        availability_zone=zone,
        price_source=price_source,
        price_detail=price_detail,
    )
    return replace(decision, objective=objective.name, kg_co2e=kg)
