"""The restart-thrash guard: are spot attempts preempted faster than they make progress?

An attempt keeps work only once it has paid its restart overhead (start, restore the newest checkpoint) and
then reached its next checkpoint: a run shorter than ``restart overhead + checkpoint interval`` kept nothing
and paid for all of it. When the last ``window`` preempted spot runs in a row were each that short, the
capacity is churning faster than the job can checkpoint, and another spot attempt there is likely to waste
its run too. Without timed checkpoints a preempted run keeps nothing however long it ran, so every such run
counts as short. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from costaware.core.errors import ConfigurationError

#: The restart overhead assumed when a plan states none (the price watch's default, 5 minutes).
DEFAULT_RESTART_OVERHEAD_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class ThrashVerdict:
    """What the guard found.

    Args:
        thrash: The recent runs kept nothing: leave this spot capacity (today: go on-demand; a later
            version may move zone on the same verdict).
        runs_seconds: The runs judged, oldest first (the last ``window`` at most).
        threshold_seconds: The shortest run that keeps work, or None without timed checkpoints.
        reason: One line that says why, with the figures.
    """

    thrash: bool
    runs_seconds: tuple[float, ...]
    threshold_seconds: float | None
    reason: str


class RestartThrashGuard:
    """Calls the churn thrash when each of the last ``window`` preempted spot runs kept nothing.

    Args:
        window: How many preempted spot runs in a row must each be shorter than the restart overhead plus
            one checkpoint interval (at least 1).
    """

    def __init__(self, window: int = 2) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigurationError(
                f"window={window!r} is not a whole number of runs >= 1: use 2, the default"
            )
        self.window = window

    def judge(
        self,
        runs_seconds: Sequence[float],
        *,
        restart_overhead_seconds: float,
        checkpoint_every_seconds: float | None,
    ) -> ThrashVerdict:
        """Judge the runs of the recent preempted spot attempts, oldest first.

        Args:
            runs_seconds: How long each ran (billable seconds), the latest last.
            restart_overhead_seconds: What a restart from a checkpoint costs (>= 0).
            checkpoint_every_seconds: The checkpoint interval; None or 0: no timed checkpoints.

        Returns:
            The verdict; ``thrash`` is False while fewer than ``window`` runs are known.

        Raises:
            ConfigurationError: A negative or non-finite overhead, interval or run length (named).
        """
        _check("restart_overhead_seconds", restart_overhead_seconds)
        if checkpoint_every_seconds is not None:
            _check("checkpoint_every_seconds", checkpoint_every_seconds)
        for run in runs_seconds:
            _check("run length", run)
        recent = tuple(float(r) for r in runs_seconds[-self.window :])
        threshold = (
            float(restart_overhead_seconds) + float(checkpoint_every_seconds)
            if checkpoint_every_seconds
            else None
        )
        if len(recent) < self.window:
            return ThrashVerdict(False, recent, threshold, f"{len(recent)} preempted run(s) < {self.window}")
        runs = ", ".join(f"{r:g} s" for r in recent)
        if threshold is None:
            return ThrashVerdict(True, recent, None, f"restart thrash: last runs {runs} with no checkpoints")
        bound = f"overhead {restart_overhead_seconds:g} s + interval {checkpoint_every_seconds:g} s"
        if all(r < threshold for r in recent):
            return ThrashVerdict(True, recent, threshold, f"restart thrash: last runs {runs} < {bound}")
        return ThrashVerdict(False, recent, threshold, f"progress: last runs {runs}, not all < {bound}")


def _check(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ConfigurationError(f"{name}={value!r} is not a finite number of seconds >= 0")
