"""The settings of a budgeted search (:func:`costaware.training.search.budgeted_search`), checked first.

Each bad value is refused before anything is written, with a message that names it and what to give.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from costaware.core.errors import ConfigurationError
from costaware.core.money import MICRO_USD

if TYPE_CHECKING:
    import optuna


def checked_settings(
    *,
    cap_usd: Any,
    usd_per_hour: Any,
    scope: Any,
    reduction_factor: Any,
    max_trials: Any,
    first_rung_seconds: Any,
    rungs: Sequence[Any],
    direction: Any,
    safety_factor: Any,
    slack_seconds: Any,
) -> tuple[Decimal, Decimal, list[int]]:
    """``cap_usd`` and ``usd_per_hour`` as ``Decimal`` and the rungs as ints, once every setting is checked.

    Raises:
        ConfigurationError: a setting the search cannot run with, named with its value and what to give.
    """
    from costaware.core.money import parse_usd

    given_cap = cap_usd
    cap_usd = parse_usd(cap_usd, name="cap_usd")
    if cap_usd < MICRO_USD:
        # A $0 cap refused every rung, yet the bookkeeping after it was billed past it, and the stop said
        # to raise the cap with `costaware budget set`, on a budget the search deletes when it ends.
        raise ConfigurationError(
            f"cap_usd must be at least $0.000001, got {given_cap!r}: no rung could be paid; give what the "
            "search may spend in USD, e.g. '0.50'"
        )
    usd_per_hour = parse_usd(usd_per_hour, name="usd_per_hour", allow_negative=True)
    if usd_per_hour <= 0:
        # Free compute: every rung's reservation is $0, so cap_usd never stops the search, and a cut (another
        # budget refusing) divided by the price.
        raise ConfigurationError(
            f"usd_per_hour must be more than $0, got {usd_per_hour}: the search stops when cap_usd is spent, "
            "which free compute never does; give what an hour of this machine costs you (owned GPUs: their "
            "hourly cost, amortized)"
        )
    if isinstance(scope, str) or not isinstance(scope, Mapping):
        raise ConfigurationError(f"scope must be a mapping of tags ({{'project': 'churn'}}), got {scope!r}")
    if "search" in scope:
        raise ConfigurationError(
            f"scope has a 'search' tag ({scope['search']!r}): that tag is the search's own (its budget is "
            "over scope plus search=<id>); name yours otherwise"
        )
    if isinstance(reduction_factor, bool) or not isinstance(reduction_factor, int) or reduction_factor < 2:
        raise ConfigurationError(f"reduction_factor must be an integer >= 2, got {reduction_factor!r}")
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1:
        raise ConfigurationError(f"max_trials must be an integer >= 1, got {max_trials!r}")
    if isinstance(first_rung_seconds, bool) or not isinstance(first_rung_seconds, int | float):
        raise ConfigurationError(f"first_rung_seconds must be seconds (a number), got {first_rung_seconds!r}")
    # A fractional rung (2.5) is no level the model trains to: refused, not cut to a whole one.
    whole = all(isinstance(r, numbers.Integral) and not isinstance(r, bool) for r in rungs)
    rung_list = [int(r) for r in rungs] if whole else []
    if not rung_list or any(r < 1 for r in rung_list) or rung_list != sorted(set(rung_list)):
        raise ConfigurationError(f"rungs must be increasing integers >= 1, got {list(rungs)!r}")
    if direction not in ("maximize", "minimize"):
        raise ConfigurationError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
    if not (first_rung_seconds > 0 and math.isfinite(first_rung_seconds)):
        raise ConfigurationError(f"first_rung_seconds must be > 0, got {first_rung_seconds!r}")
    if (
        isinstance(safety_factor, bool)
        or not isinstance(safety_factor, int | float)
        or not (math.isfinite(safety_factor) and safety_factor >= 1)
    ):
        raise ConfigurationError(f"safety_factor must be a number >= 1, got {safety_factor!r}")
    if slack_seconds is not None and (
        isinstance(slack_seconds, bool)
        or not isinstance(slack_seconds, int | float)
        or not (math.isfinite(slack_seconds) and slack_seconds > 0)
    ):
        raise ConfigurationError(
            f"slack_seconds must be seconds > 0, got {slack_seconds!r}: the search's own bookkeeping "
            "(Optuna, the ledger) is paid from it; or None (the default) to hold what it is measured to take"
        )
    return cap_usd, usd_per_hour, rung_list


def check_space(space: Mapping[str, optuna.distributions.BaseDistribution]) -> None:
    """Refuse an empty ``space``, or one whose values are not Optuna distributions (the JSON form, say).

    Raises:
        ConfigurationError: naming the hyperparameter and how to write it.
    """
    import optuna

    if not space:
        raise ConfigurationError("space is empty: give at least one hyperparameter distribution")
    for name, distribution in space.items():
        # budgeted_tuning's JSON form ({"type": "float", ...}) failed deep in Optuna with an AttributeError.
        if not isinstance(distribution, optuna.distributions.BaseDistribution):
            raise ConfigurationError(
                f"space[{name!r}] is {distribution!r}, not an Optuna distribution: write it as, e.g., "
                "optuna.distributions.FloatDistribution(0.01, 0.3, log=True) or "
                "CategoricalDistribution([7, 15, 31]) (the JSON form is budgeted_tuning's search_space)"
            )
