"""``availability_aware``: spot, wait or on-demand, by the expected cost under a learnt capacity model.

In the spirit of Wu et al., "Can't Be Late: Optimizing Spot Instance Savings under Deadlines" (NSDI '24) and
its successors, which show that the greedy rule (spot while safe, then on-demand to the end) wastes money on
two things: short spot runs that are preempted before they pay back their restart and lost work, and a long
on-demand tail once the slack is spent. This policy plans around both with what it has seen so far:

1. **Capacity model.** From the availability seen before submit and during the job it fits
   :class:`~costaware.core.policies.capacity.CapacityModel`: the chance that capacity (or its absence) holds
   one more tick given how long it has held. That is the estimate of "will capacity come back within my
   slack?" and "how long will this spot run last before a preemption?".
2. **Expected cost to go.** Over the ticks left to the deadline it solves, by backward induction, the least
   expected cost of finishing from every state (work kept, idle / spot / on-demand, restart ticks still owed,
   capacity state and age), with the simulator's exact rules: a start pays the restart overhead, a
   preemption loses the work back to the last checkpoint, prices are the forecast (the price in force for this
   tick). The policy takes the action with the least expected cost, so it may leave on-demand for spot when
   capacity returns, skip a spot run that is likely to be short, or pause a checkpointed job when the forecast
   says the rest of its window is cheaper by more than a restart (pause and resume).
3. **Hard deadline guard.** Only actions that the deadline rules (:mod:`~costaware.core.policies.rules`)
   call safe are considered: if the worst happens next, on-demand still finishes in time. So the model can
   only cost money when it is wrong, never a missed deadline.

A ``critical`` job is never paused once running and keeps a one-preemption reserve; ``best_effort`` and
``normal`` jobs may pause. The plan is re-solved when capacity flips (new information) and at least every
``replan`` (two hours). Without a spot market (power at an hourly price) the same solver times the work on the
forecast power price, pausing through price spikes when a later block is cheaper.

Measured (``benchmarks/spot_windows.py``): over the eight shared availability traces it is 1.137x the oracle
against 1.164x for the greedy ``deadline_aware`` in the full run, but 1.175x against 1.156x on the quick run's
fewer nights, and it loses on some traces (a model fitted on the past can overrate a short outage); so it is
offered beside ``deadline_aware``, which stays the default.

Its constants are durations (the history kept, the capacity model's age cap and prior run length, the replan
interval), turned into ticks with the simulation's tick length, so it behaves the same on traces sampled every
10 minutes or every 195 seconds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.policies.base import Action, Policy, Situation
from costaware.core.policies.capacity import CapacityModel, run_state
from costaware.core.policies.rules import checkpointed, reserve_ticks

#: Capacity seen before submit that feeds the model.
HISTORY = timedelta(weeks=1)
#: Runs of capacity (or of its absence) older than this share one estimate in the capacity model.
MAX_AGE = timedelta(hours=2)
#: Mean run of capacity the model assumes before it has seen any (its weak prior).
PRIOR_MEAN_RUN = timedelta(minutes=100)
#: Re-solve at least this often, even when capacity has not changed.
REPLAN = timedelta(hours=2)
#: Cost, per missing tick of work, of a state that cannot finish by the deadline (unreachable when safe).
_UNFINISHED = 1e9


class AvailabilityAwarePolicy(Policy):
    """Least expected cost under a capacity model fitted on the trace seen so far, within the deadline rules.

    Args:
        replan: Re-solve at least this often (a duration, at least one tick); also when capacity changes.
    """

    name = "availability_aware"

    def __init__(self, replan: timedelta = REPLAN) -> None:
        if not isinstance(replan, timedelta) or replan <= timedelta(0):
            raise ConfigurationError(
                f"replan must be a positive timedelta, e.g. timedelta(hours=2), got {replan!r}"
            )
        self.replan = replan
        self._seen: list[bool] = []
        self._plan: _Plan | None = None
        self._planned_at = -1

    def decide(self, situation: Situation) -> Action:
        """The action with the least expected cost among the safe ones."""
        s = situation
        spot_market = s.spot_usd_per_hour is not None
        if spot_market:
            if not self._seen and s.availability_history:
                self._seen = list(s.availability_history[-ticks(HISTORY, s.tick_hours) :])
            flipped = bool(self._seen) and self._seen[-1] != s.spot_available
            self._seen.append(s.spot_available)
        else:
            flipped = False
        if self._plan is None or flipped or s.tick - self._planned_at >= ticks(self.replan, s.tick_hours):
            model = _fit(self._seen, s.tick_hours) if spot_market else None
            self._plan = _Plan.solve(s, model)
            self._planned_at = s.tick
        return self._plan.act(s, self._seen)


def ticks(duration: timedelta, tick_hours: float) -> int:
    """``duration`` in whole ticks of ``tick_hours`` (rounded to the nearest, at least one)."""
    return max(1, round(duration / timedelta(hours=tick_hours)))


def _fit(seen: list[bool], tick_hours: float) -> CapacityModel:
    """The capacity model with its age cap and prior run length counted in this simulation's ticks."""
    prior_run = max(2, ticks(PRIOR_MEAN_RUN, tick_hours))
    return CapacityModel.fit(seen, max_age=ticks(MAX_AGE, tick_hours), prior_stay=1 - 1 / prior_run)


class _Plan:
    """Expected cost to go from every state at every tick after the solve tick (numpy arrays)."""

    def __init__(
        self, model: CapacityModel | None, values: dict[int, Any], table: _Transitions, matrix: Any
    ) -> None:
        self.model = model
        self.values = values
        self.table = table
        self.matrix = matrix

    @classmethod
    def solve(cls, s: Situation, model: CapacityModel | None) -> _Plan:
        import numpy as np

        work, overhead, deadline = s.work_ticks, s.overhead_ticks, s.deadline_tick
        lanes = max(overhead, 1)
        ages = model.max_age if model else 1
        kinds = 2 * ages if model else 1
        table = _Transitions(s, lanes)
        matrix = np.array(model.transition_matrix()) if model else np.ones((1, 1))
        available = np.array([k >= ages for k in range(kinds)]) if model else np.zeros(1, dtype=bool)
        # Terminal values: done costs nothing; unfinished work is (unreachably) expensive.
        terminal = np.where(table.progress >= work, 0.0, _UNFINISHED * (work - table.progress + 1))
        value = np.repeat(terminal[:, None], kinds, axis=1)
        values: dict[int, Any] = {deadline: value}
        spot_forecast = s.spot_forecast
        dt = s.tick_hours
        for t in range(deadline - 1, s.tick, -1):
            spot_price = spot_forecast[t] if spot_forecast is not None else None
            value = table.step(
                value,
                t,
                matrix,
                available,
                spot_usd=None if spot_price is None else spot_price * dt,
                on_demand_usd=s.on_demand_forecast[t] * dt,
            )
            values[t] = value
        return cls(model, values, table, matrix)

    def act(self, s: Situation, seen: list[bool]) -> Action:
        import numpy as np

        table = self.table
        later = self.values.get(s.tick + 1)
        if later is None:  # pragma: no cover - the simulator forces on-demand past the deadline
            return Action.ON_DEMAND
        if self.model is not None:
            ages = self.model.max_age
            state, age = run_state(seen, ages)
            available = np.array([k >= ages for k in range(2 * ages)])
            expected = table.after_preemption(later, available) @ self.matrix[state * ages + age]
        else:
            expected = later[:, 0]
        here = table.index(s.progress, s.running, s.overhead_left)
        dt = s.tick_hours
        options: list[tuple[float, int, Action]] = []
        if s.spot_usd_per_hour is not None and s.spot_available and bool(table.safe_spot(s.tick)[here]):
            target = int(table.next[Action.SPOT][here])
            options.append((s.spot_usd_per_hour * dt + float(expected[target]), 0, Action.SPOT))
        options.append(
            (
                s.on_demand_usd_per_hour * dt + float(expected[table.next[Action.ON_DEMAND][here]]),
                2,
                Action.ON_DEMAND,
            )
        )
        if bool(table.may_wait(s.tick)[here]):
            options.append((float(expected[table.next[Action.WAIT][here]]), 1, Action.WAIT))
        # Ties go to spot (cheap progress now), then to waiting: where the model finds on-demand now and later
        # equal, waiting keeps the chance that capacity comes back sooner than the model, fitted on few runs,
        # expects; on-demand later costs no more than on-demand now.
        best = min(options, key=lambda o: (round(o[0], 9), o[1]))
        return best[2]


class _Transitions:
    """States ``progress * (1 + 2 * lanes) + lane`` (lane 0 idle, then spot and on-demand by restart owed)."""

    def __init__(self, s: Situation, lanes: int) -> None:
        import numpy as np

        self.s = s
        self.lanes = lanes
        width = 1 + 2 * lanes
        self.width = width
        size = (s.work_ticks + 1) * width
        index = np.arange(size)
        self.progress = index // width
        lane = index % width
        self.market = np.where(lane == 0, 0, np.where(lane <= lanes, 1, 2))
        self.owed = np.where(lane == 0, 0, (lane - 1) % lanes)
        work, overhead = s.work_ticks, s.overhead_ticks
        nxt: dict[Action, Any] = {Action.WAIT: self.progress * width}
        for action, market in ((Action.SPOT, 1), (Action.ON_DEMAND, 2)):
            base = 1 + (market - 1) * lanes
            same = self.market == market
            paying = same & (self.owed > 0)
            if overhead:
                fresh = self.progress * width + base + overhead - 1
            else:
                fresh = np.minimum(self.progress + 1, work) * width + base
            productive = np.minimum(self.progress + 1, work) * width + base
            nxt[action] = np.where(
                same, np.where(paying, self.progress * width + base + self.owed - 1, productive), fresh
            )
        done = self.progress >= work
        for action in nxt:
            nxt[action] = np.where(done, index, nxt[action])
        self.next = nxt
        self.done = done
        spot_lane = self.market == 1
        self.preempt = np.where(
            spot_lane,
            np.array([checkpointed(int(p), s.checkpoint_ticks) for p in self.progress]) * width,
            index,
        )
        self.preempt = np.where(done, index, self.preempt)
        self.reserve = reserve_ticks(s)
        # Progress after one spot tick, for the "safe on spot" rule.
        productive_spot = np.where(spot_lane, self.owed == 0, overhead == 0)
        after = self.progress + productive_spot.astype(int)
        lost_to = np.array([checkpointed(int(a), s.checkpoint_ticks) for a in after])
        self._spot_need = np.where(after >= work, -(10**9), work - lost_to + overhead + self.reserve)
        self._wait_need = work - self.progress + overhead + self.reserve
        self._running = self.market != 0

    def index(self, progress: int, running: Action, owed: int) -> int:
        if running is Action.WAIT:
            lane = 0
        elif running is Action.SPOT:
            lane = 1 + owed
        else:
            lane = 1 + self.lanes + owed
        return progress * self.width + lane

    def safe_spot(self, t: int) -> Any:
        return t + 1 + self._spot_need <= self.s.deadline_tick

    def may_wait(self, t: int) -> Any:
        safe = t + 1 + self._wait_need <= self.s.deadline_tick
        if self.s.priority == "critical":
            return safe & ~self._running
        return safe

    def after_preemption(self, value: Any, available: Any) -> Any:
        """``value`` with spot states sent back to idle at their checkpoint where capacity is gone."""
        import numpy as np

        return np.where(available[None, :], value, value[self.preempt])

    def step(
        self,
        value: Any,
        t: int,
        matrix: Any,
        available: Any,
        *,
        spot_usd: float | None,
        on_demand_usd: float,
    ) -> Any:
        """Expected cost to go at tick ``t`` from the values at ``t + 1``."""
        import numpy as np

        expected = self.after_preemption(value, available) @ matrix.T
        best = on_demand_usd + expected[self.next[Action.ON_DEMAND]]
        wait = expected[self.next[Action.WAIT]]
        best = np.where(self.may_wait(t)[:, None], np.minimum(best, wait), best)
        if spot_usd is not None:
            spot = spot_usd + expected[self.next[Action.SPOT]]
            allowed = self.safe_spot(t)[:, None] & available[None, :]
            best = np.where(allowed, np.minimum(best, spot), best)
        return np.where(self.done[:, None], 0.0, best)
