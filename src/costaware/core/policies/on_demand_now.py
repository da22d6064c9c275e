"""``on_demand_now``: start at once on on-demand (or the team's own power), run to the end; the baseline."""

from __future__ import annotations

from costaware.core.policies.base import Action, Policy, Situation


class OnDemandNowPolicy(Policy):
    """Run every tick on on-demand from submit time; never waits, never preempted."""

    name = "on_demand_now"

    def decide(self, situation: Situation) -> Action:
        """Always on-demand."""
        return Action.ON_DEMAND
