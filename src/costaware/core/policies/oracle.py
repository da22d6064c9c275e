"""``oracle``: the least cost any schedule could reach with perfect knowledge, meeting the deadline.

It reads the whole future (spot prices, capacity, power prices) from :class:`Hindsight` and solves the job's
schedule exactly by dynamic programming over ticks. The state after each tick is (work kept, where the job is:
idle / spot in a zone / on-demand, restart ticks still owed there); the actions and their effects are exactly
the simulator's:

* ``WAIT`` costs nothing and keeps the work (a voluntary stop checkpoints first);
* ``SPOT`` / ``ON_DEMAND`` cost that tick's price; on a new start the first ``overhead_ticks`` ticks make no
  progress; spot is impossible in a tick without capacity;
* a job on spot whose capacity disappears is preempted before it can act, losing its work back to the last
  checkpoint; where a tick spans several trace samples (:attr:`Hindsight.available_at_start`), spot may start
  on capacity at the tick's start, and capacity that goes inside the tick preempts the job at its end;
* with several zones (:attr:`Hindsight.zones`) each zone is a spot market of its own: moving to another zone
  is a new start, and only a drop in the job's own zone preempts it. This is the exact multi-zone optimum
  under the simulator's rules; planning on the collapsed market instead (the cheapest zone with capacity at
  each tick, as if moving were free and never restarted) gives a looser lower bound.

Any policy's run is one path through this state graph, so no policy that meets the deadline can cost less than
the oracle (property tests check this, and a brute force on small cases). About
``ticks x work x overhead x (markets + 1)**2`` operations per job, vectorised with numpy (imported in the
function, as ``core`` allows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.policies.base import Action, Hindsight, Policy, Situation
from costaware.core.policies.rules import checkpointed


class OraclePolicy(Policy):
    """Replays the optimal plan; solved on the first tick from the situation's hindsight."""

    name = "oracle"
    clairvoyant = True
    plans_zones = True

    def __init__(self) -> None:
        self._plan: list[Action] | None = None
        self._zones: list[int] = []
        self.optimal_usd: float | None = None

    def decide(self, situation: Situation) -> Action:
        """The optimal plan's action for this tick."""
        if self._plan is None:
            if situation.hindsight is None:
                raise ConfigurationError("the oracle needs hindsight: run it through costaware.core.simulate")
            self.optimal_usd, self._plan, self._zones = solve_zoned(situation, situation.hindsight)
        if situation.tick < len(self._plan):
            return self._plan[situation.tick]
        return Action.ON_DEMAND  # pragma: no cover - the plan always finishes the job

    def zone_at(self, tick: int) -> int:
        """The zone (an index of :attr:`Hindsight.zones`) of the plan's spot tick ``tick``; -1 elsewhere."""
        return self._zones[tick] if tick < len(self._zones) else -1


def solve(s: Situation, h: Hindsight) -> tuple[float, list[Action]]:
    """Least cost (USD) and the tick-by-tick plan that finishes the job by its deadline.

    Raises:
        ConfigurationError: the job cannot finish by its deadline even on on-demand from the start.
    """
    cost, plan, _zones = solve_zoned(s, h)
    return cost, plan


def solve_zoned(s: Situation, h: Hindsight) -> tuple[float, list[Action], list[int]]:
    """:func:`solve`, and the zone of each planned spot tick (-1 on other ticks; 0 with one market).

    With ``h.zones`` each zone is a spot market of its own: a move between zones is a new start (it pays the
    restart overhead), and a drop in the job's own zone preempts it, whatever the others have.

    Raises:
        ConfigurationError: the job cannot finish by its deadline even on on-demand from the start.
    """
    import numpy as np

    work, overhead, deadline, dt = s.work_ticks, s.overhead_ticks, s.deadline_tick, s.tick_hours
    if work + overhead > deadline:
        raise ConfigurationError(
            f"the job needs {work + overhead} ticks (work plus restart overhead) but its deadline is "
            f"{deadline} ticks away; raise deadline_hours or lower runtime_hours"
        )
    # The spot markets: one per zone, or the one market (None: no spot at all, on-premises power).
    markets: list[tuple[Sequence[float], Sequence[bool] | None]] = (
        list(h.zones) if h.zones else ([] if h.spot is None else [(h.spot, h.available)])
    )
    # Capacity at each tick's start, where a spot tick may start; a drop inside the tick preempts at its end.
    at_start: list[Sequence[bool] | None] = (
        list(h.zones_at_start) if h.zones and h.zones_at_start else [None] * len(markets)
    )
    if not h.zones and h.available_at_start is not None and markets:
        at_start = [h.available_at_start]
    # Kinds of state: 0 idle, 1..Z running on spot in zone k-1, Z+1 running on on-demand.
    spot_kinds = list(range(1, len(markets) + 1))
    on_demand = len(markets) + 1
    running = [*spot_kinds, on_demand]
    lanes = overhead + 1
    n_idle = work + 1
    size = n_idle + len(running) * (work + 1) * lanes

    def lane(kind: int, p: int, r: int) -> int:
        return n_idle + (kind - 1) * (work + 1) * lanes + p * lanes + r

    src: list[int] = []
    dst: list[int] = []
    kind: list[int] = []

    def add(a: int, b: int, k: int) -> None:
        src.append(a)
        dst.append(b)
        kind.append(k)

    for p in range(work + 1):
        add(p, p, 0)  # idle stays idle
        for k in running:
            for r in range(lanes):
                add(lane(k, p, r), p, 0)  # stop (keeps the work)
    for p in range(work):
        for k in running:
            launched = lane(k, p, overhead - 1) if overhead else lane(k, p + 1, 0)
            add(p, launched, k)
            for other in running:
                if other != k:
                    for r in range(lanes):
                        add(lane(other, p, r), launched, k)  # another market or zone: a new start
            for r in range(1, lanes):
                add(lane(k, p, r), lane(k, p, r - 1), k)  # paying restart overhead
            add(lane(k, p, 0), lane(k, p + 1, 0), k)  # productive tick
    src_a, dst_a, kind_a = np.array(src), np.array(dst), np.array(kind)
    # Preemption: a spot lane that still has work to do falls back to idle at its last checkpoint.
    pre_src = {
        k: np.array([lane(k, p, r) for p in range(work) for r in range(lanes)], dtype=int) for k in spot_kinds
    }
    pre_dst = np.array(
        [checkpointed(p, s.checkpoint_ticks) for p in range(work) for r in range(lanes)], dtype=int
    )

    inf = float("inf")
    value = np.full(size, inf)
    value[s.progress] = 0.0
    back: list[tuple[Any, Any]] = []
    for t in range(deadline):
        pre_back = None
        prices = np.full(len(running) + 1, inf)
        prices[0] = 0.0
        prices[on_demand] = h.on_demand[t] * dt
        for k in spot_kinds:
            spot, available = markets[k - 1]
            opened = at_start[k - 1] if at_start[k - 1] is not None else available
            # Preempted at this tick's start: no capacity now, or it went inside the last tick.
            gone_inside = t > 0 and available is not None and not available[t - 1]
            if (opened is not None and not opened[t]) or gone_inside:
                if pre_back is None:
                    pre_back = np.arange(size)
                moved = value[pre_src[k]]
                for a, b, v in zip(pre_src[k].tolist(), pre_dst.tolist(), moved.tolist(), strict=True):
                    if v < value[b]:
                        value[b] = v
                        pre_back[b] = a
                value[pre_src[k]] = inf
            if opened is None or opened[t]:
                prices[k] = spot[t] * dt
        cost = value[src_a] + prices[kind_a]
        order = np.lexsort((kind_a, cost, dst_a))
        first = np.ones(len(order), dtype=bool)
        first[1:] = dst_a[order][1:] != dst_a[order][:-1]
        chosen = order[first]
        new_value = np.full(size, inf)
        new_value[dst_a[chosen]] = cost[chosen]
        edge = np.full(size, -1)
        edge[dst_a[chosen]] = chosen
        back.append((pre_back, edge))
        value = new_value
    finals = [work] + [lane(k, work, 0) for k in running]
    best = min(finals, key=lambda i: value[i])
    if value[best] == inf:
        raise ConfigurationError("no schedule meets the deadline")  # pragma: no cover - on-demand always can
    plan: list[Action] = []
    zones: list[int] = []
    state = best
    for pre_back, edge in reversed(back):
        e = int(edge[state])
        k = int(kind_a[e])
        plan.append(Action.WAIT if k == 0 else Action.ON_DEMAND if k == on_demand else Action.SPOT)
        zones.append(k - 1 if k in spot_kinds else -1)
        state = int(src_a[e])
        if pre_back is not None:
            state = int(pre_back[state])
    plan.reverse()
    zones.reverse()
    while plan and plan[-1] is Action.WAIT:
        plan.pop()
        zones.pop()
    return float(value[best]), plan, zones
