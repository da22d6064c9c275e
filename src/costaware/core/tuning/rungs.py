"""Rungs and promotion: the fidelities at which trials are compared, and which of them move up.

This is asynchronous successive halving (ASHA): a trial is promoted the moment it is in the top ``1/eta`` of
the results seen at its rung, so parallel trials never wait for each other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from costaware.core.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class RungSchedule:
    """The fidelities (epochs, boosting rounds, data percent) at which trials are compared.

    ``RungSchedule.geometric(3, 15, 2, max_rungs=2)`` is ``(3, 15)``: every trial trains 3 epochs, the top
    half is promoted to 15. ``RungSchedule.geometric(10, 160, 2)`` is ``(10, 20, 40, 80, 160)``.
    """

    rungs: tuple[int, ...]
    reduction_factor: int = 2

    def __post_init__(self) -> None:
        if not self.rungs or any(r < 1 for r in self.rungs):
            raise ConfigurationError(f"rungs must be whole resources >= 1, got {self.rungs!r}")
        if list(self.rungs) != sorted(set(self.rungs)):
            raise ConfigurationError(f"rungs must be strictly increasing, got {self.rungs!r}")
        if self.reduction_factor < 2:
            raise ConfigurationError(
                f"reduction_factor must be >= 2 (the top 1/eta move up), got {self.reduction_factor}"
            )

    @classmethod
    def geometric(
        cls, min_resource: int, max_resource: int, reduction_factor: int = 2, max_rungs: int | None = None
    ) -> RungSchedule:
        """Rungs ``min * eta^k`` below ``max``, then ``max``; with ``max_rungs`` the first ones and ``max``.

        Raises:
            ConfigurationError: ``min_resource`` < 1, ``max_resource`` < ``min_resource``,
                ``reduction_factor`` < 2 or ``max_rungs`` < 1.
        """
        if min_resource < 1 or max_resource < min_resource:
            raise ConfigurationError(
                f"need 1 <= min_resource <= max_resource, got min_resource={min_resource}, "
                f"max_resource={max_resource}"
            )
        if reduction_factor < 2:
            raise ConfigurationError(f"reduction_factor must be >= 2, got {reduction_factor}")
        if max_rungs is not None and max_rungs < 1:
            raise ConfigurationError(f"max_rungs must be >= 1, got {max_rungs}")
        rungs = []
        resource = min_resource
        while resource < max_resource:
            rungs.append(resource)
            resource *= reduction_factor
        if max_rungs is not None:
            rungs = rungs[: max_rungs - 1]
        return cls((*rungs, max_resource), reduction_factor)

    @property
    def max_resource(self) -> int:
        return self.rungs[-1]

    def expected_resource_per_trial(self) -> float:
        """Mean resource a trial uses when the top ``1/eta`` move up at every rung (the plan's cost unit)."""
        total, previous, surviving = 0.0, 0, 1.0
        for rung in self.rungs:
            total += (rung - previous) * surviving
            previous, surviving = rung, surviving / self.reduction_factor
        return total


def promotable(
    value: float,
    competing: Sequence[float],
    reduction_factor: int,
    direction: str,
    *,
    stopped: Sequence[float] = (),
) -> bool:
    """Asynchronous successive halving: is ``value`` in the top ``1/eta`` of the results at its rung?

    ``competing`` holds the other trials' results at the same rung. With fewer than ``eta`` results in all,
    only the best so far moves up (ASHA cannot wait for the rest). NaN never moves up.

    ``stopped`` holds the results of trials that stopped at this rung for want of money or time (cut before
    the next rung). They count among the rung's results, so the rung still moves up its ``1/eta`` of all
    results, but they hold none of those places: a promotion such a trial could not use goes to the next
    best. Holding its place, one trial cut for budget kept every later trial from going on, and a study with
    money left ended with nothing trained in full.
    """
    if math.isnan(value):
        return False
    going = [v for v in competing if not math.isnan(v)] + [value]
    counted = len(going) + sum(not math.isnan(v) for v in stopped)
    ordered = sorted(going, reverse=direction == "maximize")
    keep = min(max(counted // reduction_factor, 1), len(ordered))
    cutoff = ordered[keep - 1]
    return value >= cutoff if direction == "maximize" else value <= cutoff
