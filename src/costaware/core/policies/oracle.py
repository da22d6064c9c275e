"""``oracle``: the least cost any schedule could reach with perfect knowledge, meeting the deadline.

It reads the whole future (spot prices, capacity, power prices) from :class:`Hindsight` and solves the job's
schedule exactly by dynamic programming over ticks. The state after each tick is (work kept, where the job is:
idle / spot / on-demand, restart ticks still owed there); the actions and their effects are exactly the
simulator's:

* ``WAIT`` costs nothing and keeps the work (a voluntary stop checkpoints first);
* ``SPOT`` / ``ON_DEMAND`` cost that tick's price; on a new start the first ``overhead_ticks`` ticks make no
  progress; spot is impossible in a tick without capacity;
* a job on spot whose capacity disappears is preempted before it can act, losing its work back to the last
  checkpoint.

Any policy's run is one path through this state graph, so no policy that meets the deadline can cost less than
the oracle (a property test checks this). About ``ticks x work x overhead x 6`` operations per job, vectorised
with numpy (imported in the function, as ``core`` allows).
"""

from __future__ import annotations

from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.policies.base import Action, Hindsight, Policy, Situation
from costaware.core.policies.rules import checkpointed

_KINDS = (Action.WAIT, Action.SPOT, Action.ON_DEMAND)


class OraclePolicy(Policy):
    """Replays the optimal plan; solved on the first tick from the situation's hindsight."""

    name = "oracle"
    clairvoyant = True

    def __init__(self) -> None:
        self._plan: list[Action] | None = None
        self.optimal_usd: float | None = None

    def decide(self, situation: Situation) -> Action:
        """The optimal plan's action for this tick."""
        if self._plan is None:
            if situation.hindsight is None:
                raise ConfigurationError("the oracle needs hindsight: run it through costaware.core.simulate")
            self.optimal_usd, self._plan = solve(situation, situation.hindsight)
        if situation.tick < len(self._plan):
            return self._plan[situation.tick]
        return Action.ON_DEMAND  # pragma: no cover - the plan always finishes the job


def solve(s: Situation, h: Hindsight) -> tuple[float, list[Action]]:
    """Least cost (USD) and the tick-by-tick plan that finishes the job by its deadline.

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
    lanes = overhead + 1
    n_idle = work + 1
    size = n_idle + 2 * (work + 1) * lanes

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
        for k in (1, 2):
            for r in range(lanes):
                add(lane(k, p, r), p, 0)  # stop (keeps the work)
    for p in range(work):
        for k in (1, 2):
            launched = lane(k, p, overhead - 1) if overhead else lane(k, p + 1, 0)
            add(p, launched, k)
            other = 3 - k
            for r in range(lanes):
                add(lane(other, p, r), launched, k)  # switch market: a new start
            for r in range(1, lanes):
                add(lane(k, p, r), lane(k, p, r - 1), k)  # paying restart overhead
            add(lane(k, p, 0), lane(k, p + 1, 0), k)  # productive tick
    src_a, dst_a, kind_a = np.array(src), np.array(dst), np.array(kind)
    spot_edge = kind_a == 1
    # Preemption: a spot lane that still has work to do falls back to idle at its last checkpoint.
    pre_src = np.array([lane(1, p, r) for p in range(work) for r in range(lanes)], dtype=int)
    pre_dst = np.array(
        [checkpointed(p, s.checkpoint_ticks) for p in range(work) for r in range(lanes)], dtype=int
    )

    inf = float("inf")
    value = np.full(size, inf)
    value[s.progress] = 0.0
    back: list[tuple[Any, Any]] = []
    spot_prices = h.spot
    for t in range(deadline):
        pre_back = None
        available = h.available is None or bool(h.available[t])
        if spot_prices is not None and not available:
            pre_back = np.arange(size)
            moved = value[pre_src]
            for a, b, v in zip(pre_src.tolist(), pre_dst.tolist(), moved.tolist(), strict=True):
                if v < value[b]:
                    value[b] = v
                    pre_back[b] = a
            value[pre_src] = inf
        prices = np.array(
            [0.0, (spot_prices[t] if spot_prices is not None else inf) * dt, h.on_demand[t] * dt]
        )
        cost = value[src_a] + prices[kind_a]
        if spot_prices is None or not available:
            cost = np.where(spot_edge, inf, cost)
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
    finals = [p for p in [work] + [lane(k, work, 0) for k in (1, 2)]]
    best = min(finals, key=lambda i: value[i])
    if value[best] == inf:
        raise ConfigurationError("no schedule meets the deadline")  # pragma: no cover - on-demand always can
    plan: list[Action] = []
    state = best
    for pre_back, edge in reversed(back):
        e = int(edge[state])
        plan.append(_KINDS[int(kind_a[e])])
        state = int(src_a[e])
        if pre_back is not None:
            state = int(pre_back[state])
    plan.reverse()
    while plan and plan[-1] is Action.WAIT:
        plan.pop()
    return float(value[best]), plan
