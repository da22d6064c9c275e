"""``cheapest_window``: wait for the forecast-cheapest start, then run; fall back to on-demand in time.

Before the job starts, each tick it compares the price now with the forecast: it starts when the price now is
at or below the lowest forecast mean price of a run starting at any later moment that still meets the
deadline (or at or below a target price, when one is set), and spot has capacity. Under ``carbon`` or
``cost+carbon`` "now" is the run starting now: the spot price in force, and the grid's intensity averaged over
the run's hours as each later start's is (the live sensor's rule). When no later start is left
it starts anyway: on spot if that is still safe, else on-demand. Once started on spot it keeps to the same
deadline rules as ``deadline_aware`` (wait out a lost capacity while safe, else on-demand). Without a spot
market it times the start on the hourly power price and then runs straight through.

``cheapest_window_pausing`` adds the pause of ``RemoteTrainingOperator(pause_on_price=True)``: while the job
runs, each tick compares finishing where it is with pausing and resuming at the cheapest later start (one more
restart), by :func:`pause_rule`; on a pause the job keeps its progress (a stop writes a checkpoint) and waits
for the start rule again, for the work left. It never pauses a ``critical`` job, nor once the latest resume
that leaves room for one preemption has passed.

:func:`start_rule` and :func:`pause_rule` are the tests the ``SpotWindowSensor`` and the operator apply, so
replays measure the live rules.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from decimal import Decimal

from costaware.core.errors import ConfigurationError
from costaware.core.policies.base import Action, Policy, Situation
from costaware.core.policies.rules import may_pause, safe_on_spot, safe_to_wait, spot_usable
from costaware.core.spot_forecast import run_mean

#: Prices equal up to float noise count as equal (tick means and forecasts are sums of floats).
PRICE_TOLERANCE = 1 + 1e-9


def _at_most(value: float, limit: float) -> bool:
    """``value <= limit`` up to float noise, for prices of either sign.

    Power markets go below zero (DE-LU had 291 negative hours in 2023): ``limit * PRICE_TOLERANCE`` is then
    stricter, not looser, and an equal price no longer counted as at the limit.
    """
    return value <= limit + abs(limit) * (PRICE_TOLERANCE - 1)


#: How much dearer than pausing (resuming at the forecast minimum, paying one more restart) running on must
#: be before a ``normal`` job pauses: the forecast is a seasonal average, and a pause made on a forecast error
#: costs a restart. A ``best_effort`` job pauses at any expected saving: it is paused first. A ``critical``
#: job never pauses. Chosen for forecast error, not fitted to any trace.
PAUSE_MARGIN: dict[str, float | None] = {"critical": None, "normal": 0.20, "best_effort": 0.0}


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
    if target_usd_per_hour is not None and _at_most(now, float(target_usd_per_hour)):
        return f"price {now_usd_per_hour} is at or below the target {target_usd_per_hour} USD/hour"
    if forecast_min_usd_per_hour is None:
        return "no later start is left before the deadline"
    if _at_most(now, float(forecast_min_usd_per_hour)):
        return (
            f"price {now_usd_per_hour} is at or below the forecast minimum {forecast_min_usd_per_hour} "
            "USD/hour of the rest of the window"
        )
    return None


def pause_rule(keep_usd: float | Decimal, pause_usd: float | Decimal, priority: str) -> bool:
    """Whether a running job should pause: running on costs more than pausing by its class's margin.

    ``keep_usd`` is what the rest of the work costs where it runs now; ``pause_usd`` what it costs after a
    pause, at the cheapest later start and with one more restart. A price the start rule accepts (at or below
    the forecast minimum) never pauses, since pausing adds a restart: pause and resume never chase each other.
    """
    margin = PAUSE_MARGIN[priority]
    if margin is None:
        return False
    keep, pause = float(keep_usd), float(pause_usd)
    # The margin on the size of the pause's cost, so that it holds for negative prices too: "more than -10
    # by 20 %" read as -11 > -12, and a job paused where running on was cheaper.
    return keep - pause > (margin + PRICE_TOLERANCE - 1) * abs(pause)


class CheapestWindowPolicy(Policy):
    """Forecast-timed start, then the deadline rules.

    Args:
        target_usd_per_hour: Optional price at or below which to start at once.
    """

    name = "cheapest_window"
    #: Whether a running job may pause when its price rises (``cheapest_window_pausing``).
    pause_on_price = False

    def __init__(self, target_usd_per_hour: float | None = None) -> None:
        if target_usd_per_hour is not None and not target_usd_per_hour >= 0:
            raise ConfigurationError(f"target_usd_per_hour must be >= 0, got {target_usd_per_hour!r}")
        self.target_usd_per_hour = target_usd_per_hour
        self._started = False
        self._prefix: list[float] | None = None

    def _forecast_min(
        self, s: Situation, forecast: Sequence[float], last_start: int, run: int
    ) -> float | None:
        """Lowest forecast mean price of a run of ``run`` ticks starting in ``(now, last_start]``."""
        if last_start <= s.tick:
            return None
        if self._prefix is None:
            self._prefix = [0.0, *itertools.accumulate(forecast)]
        prefix = self._prefix
        return min((prefix[j + run] - prefix[j]) / run for j in range(s.tick + 1, last_start + 1))

    def decide(self, situation: Situation) -> Action:
        """Wait for the start rule, then run under the deadline rules."""
        s = situation
        spot_market = s.spot_usd_per_hour is not None
        if self._started and self.pause_on_price and self._pause(s):
            self._started = False
            return Action.WAIT
        if self._started:
            if not spot_market or s.running is Action.ON_DEMAND:
                return Action.ON_DEMAND
            if spot_usable(s) and safe_on_spot(s):
                return Action.SPOT
            return Action.WAIT if safe_to_wait(s) and may_pause(s) else Action.ON_DEMAND
        action = self._first_start(s) if spot_market else self._local_start(s)
        self._started = action is not Action.WAIT
        return action

    def _last_start(self, s: Situation, need: int) -> int:
        """The last (re)start on spot that leaves room for one preemption.

        That is work lost back to a checkpoint and one more restart: starting later would almost surely end on
        on-demand after paying two restarts.
        """
        return s.deadline_tick - need - (max(s.checkpoint_ticks, 1) + 2 * s.overhead_ticks + 1)

    def _first_start(self, s: Situation) -> Action:
        assert s.spot_usd_per_hour is not None and s.spot_forecast is not None  # checked by the caller
        need = s.work_ticks - s.progress  # all of it, or what is left after a pause
        usable = spot_usable(s) and safe_on_spot(s)
        run = need + s.overhead_ticks
        best_later = self._forecast_min(s, s.spot_forecast, self._last_start(s, need), run)
        if usable and start_rule(self._spot_run_value(s, run), best_later, self.target_usd_per_hour):
            return Action.SPOT
        if safe_to_wait(s):
            return Action.WAIT
        return Action.SPOT if usable else Action.ON_DEMAND

    def _local_start(self, s: Situation) -> Action:
        # Hourly power prices swing within a run, so "now" is the run starting now (this tick at its known
        # price, the rest forecast), compared with the forecast of every later start.
        if not safe_to_wait(s):
            return Action.ON_DEMAND
        run = s.work_ticks - s.progress + s.overhead_ticks
        now_mean = self._run_from_now(s, run) / run
        best_later = self._forecast_min(s, s.on_demand_forecast, s.deadline_tick - run, run)
        if start_rule(now_mean, best_later, self.target_usd_per_hour):
            return Action.ON_DEMAND
        return Action.WAIT

    @staticmethod
    def _spot_run_value(s: Situation, ticks: int) -> float:
        """Spot's value per hour of a run of ``ticks`` ticks from now, as the live sensor values a start now.

        The price in force persists (under ``cost`` that is all of it); the grid's part is the run's mean,
        this tick's intensity then the forecast (:func:`~costaware.core.spot_forecast.run_mean`, as live
        ``intensity_from``): the instant's made a clean tick before dirty hours look clean, and a run started
        into them where every later start is valued over its hours.
        """
        assert s.spot_usd_per_hour is not None  # on spot
        if s.carbon_now is None or s.carbon_forecast is None:
            return s.spot_usd_per_hour
        hourly = [s.carbon_now, *s.carbon_forecast[s.tick + 1 : s.tick + ticks]]
        return s.spot_usd_per_hour - s.carbon_now + run_mean(hourly, 0, len(hourly))

    @staticmethod
    def _run_from_now(s: Situation, ticks: int) -> float:
        """USD/hour summed over ``ticks`` ticks from now: this tick's known price, then the forecast."""
        return s.on_demand_usd_per_hour + sum(s.on_demand_forecast[s.tick + 1 : s.tick + ticks])

    def _pause(self, s: Situation) -> bool:
        """Whether the running job should pause now (see the module docstring); never while it is idle."""
        if s.running is Action.WAIT or s.priority == "critical":
            return False
        need = s.work_ticks - s.progress
        resumed = need + s.overhead_ticks
        if s.running is Action.SPOT:
            assert s.spot_usd_per_hour is not None and s.spot_forecast is not None  # it runs on spot
            if not s.spot_available:
                return False  # a preemption, not a price: the deadline rules handle it
            # The price in force persists while the job runs on; the grid's intensity is the mean over the
            # work left (as in the operator's pause_decision).
            left = need + s.overhead_left
            keep = self._spot_run_value(s, left) * left
            later = self._forecast_min(s, s.spot_forecast, self._last_start(s, need), resumed)
        elif s.spot_usd_per_hour is None:
            keep = self._run_from_now(s, need + s.overhead_left)
            later = self._forecast_min(s, s.on_demand_forecast, s.deadline_tick - resumed, resumed)
        else:
            return False  # on on-demand because the deadline forced it: finish there
        return later is not None and pause_rule(keep, later * resumed, s.priority)


class CheapestWindowPausingPolicy(CheapestWindowPolicy):
    """``cheapest_window`` that pauses a running job through a price rise (``pause_on_price=True``)."""

    name = "cheapest_window_pausing"
    pause_on_price = True
