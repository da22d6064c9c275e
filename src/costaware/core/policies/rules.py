"""Deadline rules shared by the policies: when is it still safe to wait, or to stay on spot?

"Safe" means: if the worst happens next (the job is preempted right after this tick and loses its work back to
the last checkpoint), on-demand capacity started at the next tick still finishes by the deadline, paying the
restart overhead once more. Keeping to these two rules is what guarantees zero missed deadlines.

A ``critical`` job keeps a reserve on top: room for one more preemption (a checkpoint interval of lost work
and a restart), so it turns to on-demand while a second mishap could still be absorbed.
"""

from __future__ import annotations

from costaware.core.policies.base import Action, Situation


def checkpointed(progress: int, checkpoint_ticks: int) -> int:
    """Work kept after a preemption: progress down to the last checkpoint (0 when there are none)."""
    if checkpoint_ticks <= 0:
        return 0
    return progress - progress % checkpoint_ticks


def reserve_ticks(s: Situation) -> int:
    """Slack kept unused: one preemption's loss and restart for a ``critical`` job, else none."""
    return max(s.checkpoint_ticks, 1) + s.overhead_ticks if s.priority == "critical" else 0


def may_pause(s: Situation) -> bool:
    """Whether the job may stop of its own accord this tick: a ``critical`` job that runs never does.

    A preempted job is not running any more (``running`` is ``WAIT``): waiting out the lost capacity is no
    pause.
    """
    return s.priority != "critical" or s.running is Action.WAIT


def safe_to_wait(s: Situation) -> bool:
    """Whether idling this tick still leaves time to finish on on-demand from the next tick."""
    return s.tick + 1 + (s.work_ticks - s.progress) + s.overhead_ticks + reserve_ticks(s) <= s.deadline_tick


def progress_after_spot_tick(s: Situation) -> int:
    """Progress at the end of this tick if the job runs it on spot."""
    productive = s.overhead_left == 0 if s.running is Action.SPOT else s.overhead_ticks == 0
    return s.progress + (1 if productive else 0)


def safe_on_spot(s: Situation) -> bool:
    """Whether running this tick on spot still leaves time to finish on on-demand after a preemption."""
    after = progress_after_spot_tick(s)
    if after >= s.work_ticks:
        return True
    lost_to = checkpointed(after, s.checkpoint_ticks)
    return s.tick + 1 + (s.work_ticks - lost_to) + s.overhead_ticks + reserve_ticks(s) <= s.deadline_tick


def spot_usable(s: Situation) -> bool:
    """Spot exists, has capacity now, and is cheaper than on-demand (in USD, whatever the objective).

    Under the ``carbon`` objective both markets emit the same per hour: compared on those values, spot was
    never usable in a replay, while the live rule (``decide_on_objective``) takes it on its price.
    """
    if s.spot_usd_per_hour is None or not s.spot_available:
        return False
    if s.usd_spot_now is not None and s.usd_on_demand_now is not None:
        return s.usd_spot_now < s.usd_on_demand_now
    return s.spot_usd_per_hour < s.on_demand_usd_per_hour
