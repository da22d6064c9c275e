"""``cheapest_window``: wait for the forecast-cheapest start, then run; fall back to on-demand in time.

Before the job starts, each tick it compares the price now with the forecast: it starts when the price now is
at or below the lowest forecast mean price of a run starting at any later moment that still meets the
deadline (or at or below a target price, when one is set), and spot has capacity. When no later start is left
it starts anyway: on spot if that is still safe, else on-demand. Once started on spot it keeps to the same
deadline rules as ``deadline_aware`` (wait out a lost capacity while safe, else on-demand). Without a spot
market it times the start on the hourly power price and then runs straight through.

:func:`start_rule` is the same test the ``SpotWindowSensor`` applies, so replays measure the sensor's rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from decimal import Decimal

from costaware.core.errors import ConfigurationError
from costaware.core.policies.base import Action, Policy, Situation
from costaware.core.policies.rules import safe_on_spot, safe_to_wait, spot_usable

#: Prices equal up to float noise count as equal (tick means and forecasts are sums of floats).
PRICE_TOLERANCE = 1 + 1e-9


def start_rule(
    now_usd_per_hour: float | Decimal,
    forecast_min_usd_per_hour: float | Decimal | None,
    target_usd_per_hour: float | Decimal | None = None,
) -> str | None:
    """Why to start now, or ``None`` to keep waiting.

    Args:
        now_usd_per_hour: The price in force now.
        forecast_min_usd_per_hour: Lowest forecast mean price of any later start, ``None`` if none is left.
        target_usd_per_hour: Start whenever the price is at or below this.
    """
    now = float(now_usd_per_hour)
    if target_usd_per_hour is not None and now <= float(target_usd_per_hour) * PRICE_TOLERANCE:
        return f"price {now_usd_per_hour} is at or below the target {target_usd_per_hour} USD/hour"
    if forecast_min_usd_per_hour is None:
        return "no later start is left before the deadline"
    if now <= float(forecast_min_usd_per_hour) * PRICE_TOLERANCE:
        return (
            f"price {now_usd_per_hour} is at or below the forecast minimum {forecast_min_usd_per_hour} "
            "USD/hour of the rest of the window"
        )
    return None


class CheapestWindowPolicy(Policy):
    """Forecast-timed start, then the deadline rules.

    Args:
        target_usd_per_hour: Optional price at or below which to start at once.
    """

    name = "cheapest_window"

    def __init__(self, target_usd_per_hour: float | None = None) -> None:
        if target_usd_per_hour is not None and not target_usd_per_hour >= 0:
            raise ConfigurationError(f"target_usd_per_hour must be >= 0, got {target_usd_per_hour!r}")
        self.target_usd_per_hour = target_usd_per_hour
        self._started = False
        self._prefix: list[float] | None = None

    def _forecast_min(self, s: Situation, forecast: Sequence[float], last_start: int) -> float | None:
        if last_start <= s.tick:
            return None
        run = s.work_ticks + s.overhead_ticks
        if self._prefix is None:
            self._prefix = [0.0, *itertools.accumulate(forecast)]
        prefix = self._prefix
        return min((prefix[j + run] - prefix[j]) / run for j in range(s.tick + 1, last_start + 1))

    def decide(self, situation: Situation) -> Action:
        """Wait for the start rule, then run under the deadline rules."""
        s = situation
        spot_market = s.spot_usd_per_hour is not None
        if self._started:
            if not spot_market or s.running is Action.ON_DEMAND:
                return Action.ON_DEMAND
            if spot_usable(s) and safe_on_spot(s):
                return Action.SPOT
            return Action.WAIT if safe_to_wait(s) else Action.ON_DEMAND
        action = self._first_start(s) if spot_market else self._local_start(s)
        self._started = action is not Action.WAIT
        return action

    def _first_start(self, s: Situation) -> Action:
        assert s.spot_usd_per_hour is not None and s.spot_forecast is not None  # checked by the caller
        # The last start that leaves room for one preemption (work back to a checkpoint, one more restart):
        # starting on spot later than that would almost surely end on on-demand after paying two restarts.
        slack_for_one_loss = max(s.checkpoint_ticks, 1) + 2 * s.overhead_ticks + 1
        last_start = s.deadline_tick - s.work_ticks - slack_for_one_loss
        usable = spot_usable(s) and safe_on_spot(s)
        if usable and start_rule(
            s.spot_usd_per_hour, self._forecast_min(s, s.spot_forecast, last_start), self.target_usd_per_hour
        ):
            return Action.SPOT
        if safe_to_wait(s):
            return Action.WAIT
        return Action.SPOT if usable else Action.ON_DEMAND

    def _local_start(self, s: Situation) -> Action:
        # Hourly power prices swing within a run, so "now" is the run starting now (this tick at its known
        # price, the rest forecast), compared with the forecast of every later start.
        if not safe_to_wait(s):
            return Action.ON_DEMAND
        run = s.work_ticks + s.overhead_ticks
        forecast = s.on_demand_forecast
        now_mean = (s.on_demand_usd_per_hour + sum(forecast[s.tick + 1 : s.tick + run])) / run
        last_start = s.deadline_tick - run
        if start_rule(now_mean, self._forecast_min(s, forecast, last_start), self.target_usd_per_hour):
            return Action.ON_DEMAND
        return Action.WAIT
