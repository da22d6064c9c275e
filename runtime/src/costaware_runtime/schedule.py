"""When to checkpoint by time: every ``COSTAWARE_CHECKPOINT_EVERY_SECONDS``, as the provider asks.

A checkpoint every N steps costs a different amount of lost work on every machine and batch size; the
provider reasons in seconds (the most work a hard kill may lose, and with ``checkpoint_every_seconds="auto"``
the interval the interruption rate calls for, re-tuned before each spot attempt). :class:`CheckpointTimer`
turns that interval into a yes/no between steps::

    timer = cr.CheckpointTimer()                 # the attempt's interval, else 300 s
    for step in range(start, total):
        train_one_step()
        if timer.due() or cr.preemption_requested():
            save(model, optimizer, step=step + 1)
        if cr.preemption_requested():
            cr.exit_preempted()
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from costaware_runtime.contract import CHECKPOINT_EVERY_SECONDS, checkpoint_every_seconds
from costaware_runtime.errors import ContractError

#: The interval outside costaware (no variable set): the provider's default ``checkpoint_every_seconds``.
DEFAULT_EVERY_SECONDS = 300.0


class CheckpointTimer:
    """Says when a checkpoint is due: once every ``every_seconds`` of the job's own clock.

    Args:
        every_seconds: The interval; None (default) reads ``COSTAWARE_CHECKPOINT_EVERY_SECONDS``, and
            without it takes ``default_seconds``.
        default_seconds: The interval when neither is given.
        clock: Seconds of a monotonic clock (``time.monotonic``; tests step their own).

    Raises:
        ContractError: An interval (given or in the variable) that is not seconds > 0.
    """

    def __init__(
        self,
        every_seconds: float | None = None,
        *,
        default_seconds: float = DEFAULT_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        chosen = checkpoint_every_seconds(default_seconds) if every_seconds is None else every_seconds
        if isinstance(chosen, bool) or not isinstance(chosen, int | float) or not (0 < chosen < math.inf):
            what = "is text, not a number of seconds" if isinstance(chosen, str) else "is not seconds > 0"
            raise ContractError(
                f"checkpoint interval {chosen!r} {what}: pass every_seconds=600 (a number), or leave it to "
                f"{CHECKPOINT_EVERY_SECONDS}"
            )
        self.every_seconds = float(chosen)
        self._clock = clock
        self._since = clock()

    def due(self) -> bool:
        """True once the interval has passed since the last True (or the timer's start); then it starts over.

        Call it between steps and save when it says so. The next interval counts from this call, so the
        save's own time is part of it (a save takes seconds against an interval of minutes).
        """
        now = self._clock()
        if now - self._since < self.every_seconds:
            return False
        self._since = now
        return True
