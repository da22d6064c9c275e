"""The rungs of a multi-fidelity search worth pruning at: those that rank trials as full fidelity does."""

from __future__ import annotations

from collections.abc import Sequence


def rungs_still_trusted(
    completed: Sequence[tuple[tuple[int, float], ...]], rungs: Sequence[int], minimum: int
) -> tuple[int, ...]:
    """Of the early ``rungs`` pruned at so far, those the completed trials do not show to mislead.

    ``completed`` holds each completed trial's ``(rung, value)`` steps, its last step at full fidelity. A
    rung misleads when, over the completed trials that stopped there (at least ``minimum`` of them), more
    pairs are ordered the other way by its values than the same way as by their full-fidelity values. Such
    a rung is dropped, and so is every rung below it (what misleads at 3 epochs is not trusted at 1).

    The evidence is biased toward agreement (a trial pruned at a rung never completes), so the bar is a
    majority of the pairs against, not a perfect order: dropping a rung only because its few survivors
    are close at full fidelity would give up pruning on noise.
    """
    kept = list(rungs)
    for i in reversed(range(len(kept))):
        pairs = [
            (values[kept[i]], trial[-1][1]) for trial in completed if kept[i] in (values := dict(trial[:-1]))
        ]
        if len(pairs) < minimum:
            continue
        if _discordant(pairs) > _concordant(pairs):
            return tuple(kept[i + 1 :])
    return tuple(kept)


def _concordant(pairs: Sequence[tuple[float, float]]) -> int:
    return sum(
        1
        for i in range(len(pairs))
        for j in range(i + 1, len(pairs))
        if _sign(pairs[i][0] - pairs[j][0]) * _sign(pairs[i][1] - pairs[j][1]) > 0
    )


def _discordant(pairs: Sequence[tuple[float, float]]) -> int:
    return sum(
        1
        for i in range(len(pairs))
        for j in range(i + 1, len(pairs))
        if _sign(pairs[i][0] - pairs[j][0]) * _sign(pairs[i][1] - pairs[j][1]) < 0
    )


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)
