"""The rungs of a multi-fidelity search worth pruning at: those that rank trials as full fidelity does."""

from __future__ import annotations

import math
from collections.abc import Sequence

#: One-sided 5 % point of the standard normal: a rung is dropped only on a reversal this unlikely by chance.
REVERSAL_Z = -1.645


def rungs_still_trusted(
    completed: Sequence[tuple[tuple[int, float], ...]], rungs: Sequence[int], minimum: int
) -> tuple[int, ...]:
    """Of the early ``rungs`` pruned at so far, those the completed trials do not show to mislead.

    ``completed`` holds each completed trial's ``(rung, value)`` steps, its last step at full fidelity. A
    rung misleads when the completed trials that stopped there (at least ``minimum`` of them) are ranked
    by its values against their full-fidelity order beyond chance: Kendall's tau between the two is
    negative at the one-sided 5 % level (normal approximation, variance ``2(2n+5) / (9n(n-1))``). Such a
    rung is dropped, and so is every rung below it (what misleads at 3 epochs is not trusted at 1).

    Why a test and not the sign of tau: the trials that complete are the survivors of pruning at that
    rung, so their values there span a narrow range and their tau is pulled toward 0; its sign is then
    noise, and dropping on it gives up pruning half the time where pruning works. With 3 trials no
    reversal is significant, with 4 only a complete one, with 6 a tau below -0.58.
    """
    kept = list(rungs)
    for i in reversed(range(len(kept))):
        pairs = [
            (values[kept[i]], trial[-1][1]) for trial in completed if kept[i] in (values := dict(trial[:-1]))
        ]
        n = len(pairs)
        if n < max(minimum, 2):
            continue
        tau = _concordant_minus_discordant(pairs) / (n * (n - 1) / 2)
        if tau / math.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1))) < REVERSAL_Z:
            return tuple(kept[i + 1 :])
    return tuple(kept)


def _concordant_minus_discordant(pairs: Sequence[tuple[float, float]]) -> int:
    """Kendall's S: pairs ordered the same way by both values, less pairs ordered the other way (ties: 0)."""
    return sum(
        _sign(pairs[i][0] - pairs[j][0]) * _sign(pairs[i][1] - pairs[j][1])
        for i in range(len(pairs))
        for j in range(i + 1, len(pairs))
    )


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)
