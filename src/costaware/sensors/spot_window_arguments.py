"""``SpotWindowSensor``'s arguments written out in the DAG, checked when it is parsed (``__init__``).

Each with the message the task would give after rendering; :func:`price` and :func:`check_target_fits` are
also the run's checks of the rendered values.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.carbon import Objective
from costaware.core.errors import ConfigurationError
from costaware.core.given import blank
from costaware.core.series import parse_instant
from costaware.core.spot_window import MOST_RESTART_OVERHEAD_MINUTES
from costaware.glue import parse_decimal
from costaware.operators.remote_instance_type import TEMPLATE_FIX, refuse_blanks_around
from costaware.operators.templating import is_literal

#: The most days of price history the forecast reads (ten years, as the core's longest durations).
MOST_HISTORY_DAYS = 3650


def parse_overhead_and_history(restart_overhead_minutes: Any, history_days: Any) -> tuple[Decimal, Decimal]:
    """``restart_overhead_minutes`` and ``history_days`` as numbers, within the bounds the run counts with.

    Raises:
        ConfigurationError: a value that is no number, or out of its bounds; named, with what to write.
    """
    # "10m" or "7d" failed the parse with a bare TypeError ("'<' not supported between ... 'str'").
    overhead = parse_decimal(
        restart_overhead_minutes,
        name="restart_overhead_minutes",
        non_negative=True,
        unit="minutes",
        read_at_parse=True,
    )
    # Finite as a Decimal, "1e400" is infinite as the float the latest start is counted with: it passed
    # the parse and failed the run naming inf. Refused here, as written, at the core's bound.
    if overhead > MOST_RESTART_OVERHEAD_MINUTES:
        raise ConfigurationError(
            "restart_overhead_minutes must be a number of minutes from 0 to "
            f"{MOST_RESTART_OVERHEAD_MINUTES} (ten years), got {restart_overhead_minutes!r}: write the "
            "minutes a restart takes, e.g. 10"
        )
    days = parse_decimal(history_days, name="history_days", unit="days", read_at_parse=True)
    # "1e400" days overflowed the run's timedelta with a bare OverflowError.
    if days < 7 or days > MOST_HISTORY_DAYS or days != int(days):
        raise ConfigurationError(
            f"history_days must be 7 or more (one week of prices) and at most {MOST_HISTORY_DAYS} (ten "
            f"years), a whole number of days, got {history_days!r}"
        )
    return overhead, days


def written(value: Any) -> bool:
    """Whether ``value`` is given and holds no template (so it can be checked when the DAG is parsed)."""
    # A datetime written out too: a naive one passed the parse, and failed the run.
    return blank(value) is not None and (is_literal(value) or isinstance(value, datetime))


def check_instance_type_written(instance_type: Any) -> None:
    """Refuse an instance type written out with blanks around it, as ``RemoteTrainingOperator`` does.

    Its prices are looked up under the name as written: "g5.xlarge " passed the parse unwarned (the bundled
    list was read stripped) and failed the run as an unknown type, or went to AWS as one.

    Raises:
        ConfigurationError: blanks around the name, named with the name to write.
    """
    if written(instance_type):
        refuse_blanks_around(str(instance_type))


def rendered_instance_type(instance_type: Any) -> str:
    """The instance type as rendered, checked before any price is looked up under it.

    A template's blanks (``"{{ params.type }} "``, a param given ``"g5.xlarge "``) failed the run as an
    unknown type, offered the very name meant as the fix; a param not set, as the type ``'None'``.

    Raises:
        ConfigurationError: a type not given, or with blanks around it; named, with what to write.
    """
    if blank(instance_type) is None:
        raise ConfigurationError(
            f"instance_type rendered {instance_type!r}, which gives no type (what a template renders of a "
            "param or XCom that is not set): give it a value"
        )
    name = str(instance_type)
    refuse_blanks_around(name, subject=f"instance_type {name!r} (as rendered)", fix=TEMPLATE_FIX)
    return name


def instance_type_not_bundled(instance_type: Any, on_demand_usd_per_hour: Any) -> str | None:
    """Why an instance type written out may be a typo (the bundled EC2 price list lacks it), or None.

    Only a warning when the DAG is parsed, with the closest names: the run reads the price cache and live
    prices before the bundled list, which may hold types the list lacks (newer AWS types, a user's imported
    prices). With ``on_demand_usd_per_hour`` given (written out or a template) the run needs no list price,
    but still reads the type's spot prices under its name: a typo's are none, and the window never finds
    spot, so it is warned of all the same. A template of the type is read at run time.
    """
    if not written(instance_type):
        return None
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.errors import PriceNotFoundError

    try:
        # As the run looks it up: blanks around it were refused first (check_instance_type_written).
        bundled_catalog().check_instance_type(str(instance_type))
    except PriceNotFoundError as e:
        unlisted = f"instance_type {instance_type!r} is not in the bundled EC2 price list ({e})"
        if blank(on_demand_usd_per_hour) is not None:
            return (
                f"{unlisted}: on_demand_usd_per_hour stands in for its list price, but its spot prices are "
                "read under that name, and a name no market lists has none (the window then never finds "
                "spot): if it is a typo, correct it"
            )
        return (
            f"{unlisted}: if it is a typo, correct it; the run prices it from the price cache (`costaware "
            "prices refresh` or `import`), live prices, then that list, and refuses it there if none has it, "
            "unless on_demand_usd_per_hour is given"
        )
    return None


def prices_file_missing_here(prices: Any) -> str | None:
    """Why ``prices`` written out is no file on this machine (the DAG processor's), or None.

    Only a warning when the DAG is parsed: the file may be on the workers alone, where the run refuses it
    if it is not there either.
    """
    from pathlib import Path

    from costaware.adapters.spot_market import LIVE
    from costaware.core.errors import did_you_mean

    text = str(prices).strip() if written(prices) else LIVE
    if text == LIVE or Path(text).is_file():
        return None
    hint = did_you_mean(text.lower(), [LIVE]) if "/" not in text else ""
    return (
        f"prices {text!r} is neither {LIVE!r} nor a file on this machine{hint}: the task refuses it as it "
        "runs unless the workers have that file; give 'live' or the path of a recorded spot price file"
    )


def check_written(
    *,
    expected_runtime_hours: Any,
    deadline: Any,
    earliest_start: Any,
    target_usd_per_hour: Any,
    on_demand_usd_per_hour: Any,
    objective: Any,
    carbon_usd_per_tonne: Any,
) -> None:
    """Check the values written out in the DAG now, with the messages the task would give after rendering.

    Raises:
        ConfigurationError: a bad value, named.
    """
    if written(expected_runtime_hours):
        parse_decimal(expected_runtime_hours, name="expected_runtime_hours", positive=True)
    instants = {
        name: parse_instant(value, name=name)
        for name, value in (("deadline", deadline), ("earliest_start", earliest_start))
        if written(value)
    }
    if len(instants) == 2 and instants["earliest_start"] >= instants["deadline"]:
        raise ConfigurationError(
            f"earliest_start {earliest_start!r} is not before the deadline {deadline!r}: no run could "
            "start in time; move one of them"
        )
    if written(target_usd_per_hour):
        price(target_usd_per_hour, "target_usd_per_hour")
    if written(on_demand_usd_per_hour):
        price(on_demand_usd_per_hour, "on_demand_usd_per_hour", positive=True)
    if written(objective) and (carbon_usd_per_tonne in (None, "") or written(carbon_usd_per_tonne)):
        parsed = Objective.parse(objective, carbon_usd_per_tonne)
        parsed.check_settings_used(carbon_usd_per_tonne)
        if written(target_usd_per_hour):
            check_target_fits(target_usd_per_hour, parsed)


def price(value: Any, name: str, *, positive: bool = False) -> Decimal:
    """A price in USD/hour as written (``0.40``, ``"$0.40"``).

    Raises:
        ConfigurationError: text, a negative price, or $0 where ``positive``; named.
    """
    from costaware.core.money import parse_usd

    price = parse_usd(value, name=name)
    if positive and price == 0:
        # Only on_demand_usd_per_hour is positive: spot is judged against it, and the fallback billed at it.
        raise ConfigurationError(
            f"{name} must be more than $0 an hour, got {value!r}: write the instance's on-demand price an "
            "hour (e.g. 3.06), or leave it out for the bundled AWS price list"
        )
    return price


def check_target_fits(target: Any, objective: Objective) -> None:
    """Refuse a price target where the objective ranks starts by kg CO2e: the two cannot be compared.

    It was read in the objective's unit, so ``"0.10"`` meant 0.10 kg CO2e/hour, and a run started on spot at
    a price above the dollars the team meant.
    """
    if target in (None, "") or objective.name != "carbon":
        return
    raise ConfigurationError(
        f"target_usd_per_hour={target!r} is a price, and objective 'carbon' ranks starts by kg CO2e an hour, "
        "which a price cannot be compared with: leave target_usd_per_hour out (the sensor starts at the "
        "forecast's best hour), or use objective 'cost+carbon' (USD an hour plus the carbon price)"
    )
