"""``spot_now``: start at once on spot, wait whenever capacity is gone, never fall back. Naive on purpose."""

from __future__ import annotations

from costaware.core.policies.base import Action, Policy, Situation


class SpotNowPolicy(Policy):
    """Run on spot whenever it has capacity, from submit time; without a spot market, on-demand.

    It ignores the deadline: with scarce capacity it misses it (the simulator then finishes the job on
    on-demand and counts the miss), which is what ``deadline_aware`` fixes.
    """

    name = "spot_now"

    def decide(self, situation: Situation) -> Action:
        """Spot when available, else wait."""
        if situation.spot_usd_per_hour is None:
            return Action.ON_DEMAND
        return Action.SPOT if situation.spot_available else Action.WAIT
