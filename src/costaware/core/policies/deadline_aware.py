"""``deadline_aware``: use spot while slack remains, switch to on-demand when needed to meet the deadline.

In the spirit of Wu et al., "Can't Be Late: Optimizing Spot Instance Savings under Deadlines" (NSDI '24): the
job is checkpointed and preemptible, so it runs on spot whenever spot has capacity and it is still safe (a
preemption right after this tick would still leave time to finish on on-demand); when spot has no capacity it
waits while waiting is safe; once neither is safe it switches to on-demand and stays there (the paper's greedy
rule, made robust to the work lost back to the last checkpoint).

Without a spot market (on-premises power at an hourly price) the same slack buys cheaper hours instead: each
tick it compares running the rest of the work from now with pausing and running it as one block later (paying
the restart overhead again), by the forecast, and does the cheaper, until pausing is no longer safe.

A running ``critical`` job never stops of its own accord (:func:`~costaware.core.policies.rules.may_pause`):
where the rule would wait (spot dearer than on-demand, a power price spike) it runs on on-demand instead.
"""

from __future__ import annotations

import itertools

from costaware.core.policies.base import Action, Policy, Situation
from costaware.core.policies.rules import may_pause, safe_on_spot, safe_to_wait, spot_usable


class DeadlineAwarePolicy(Policy):
    """Spot while safe, wait while safe, else on-demand (sticky)."""

    name = "deadline_aware"

    def decide(self, situation: Situation) -> Action:
        """One tick of the greedy slack rule."""
        s = situation
        if s.spot_usd_per_hour is None:
            return _cheap_hours(s)
        if s.running is Action.ON_DEMAND:
            return Action.ON_DEMAND
        if spot_usable(s) and safe_on_spot(s):
            return Action.SPOT
        if safe_to_wait(s) and may_pause(s):
            return Action.WAIT
        return Action.ON_DEMAND


def _cheap_hours(s: Situation) -> Action:
    """Run now, or pause for a cheaper block later (by the forecast), whichever costs less, while safe."""
    if not safe_to_wait(s) or not may_pause(s):
        return Action.ON_DEMAND
    running = s.running is Action.ON_DEMAND
    need = s.work_ticks - s.progress
    # Index 0 is this tick at its known price; the rest are forecasts up to the deadline.
    prices = [s.on_demand_usd_per_hour, *s.on_demand_forecast[s.tick + 1 : s.deadline_tick]]
    prefix = [0.0, *itertools.accumulate(prices)]
    now_len = need + (s.overhead_left if running else s.overhead_ticks)
    cost_now = prefix[min(now_len, len(prices))]
    later_len = need + s.overhead_ticks  # pausing means paying the restart overhead again
    later = [prefix[j + later_len] - prefix[j] for j in range(1, len(prices) - later_len + 1)]
    if not later or cost_now <= min(later):
        return Action.ON_DEMAND
    return Action.WAIT
