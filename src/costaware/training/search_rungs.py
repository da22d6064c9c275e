"""The rungs of a multi-fidelity search worth pruning at: those that rank trials as full fidelity does."""

from __future__ import annotations

from collections.abc import Sequence


def rungs_that_rank_alike(completed: Sequence[tuple[tuple[int, float], ...]]) -> tuple[int, ...]:
    """The early rungs worth pruning at, from the completed trials' values at every rung.

    They are the longest run of rungs up to the last one whose values each put every pair of the completed
    trials in the order of their full-fidelity values (ties aside).

    Pruning at a rung keeps the trials that lead there; that pays only where leading there means leading at
    full fidelity. A rung that ranks the other way (a high learning rate ahead after a few boosting rounds and
    behind at the end) prunes the configurations that would win, so neither it nor any rung before it is used.
    The evidence is a few trials (``reduction_factor`` of them), so no pair may disagree: with three trials
    and no relation at all between a rung and the end, a majority of pairs agrees half the time, all three
    pairs one time in six.
    """
    if not completed:
        return ()
    rungs = [rung for rung, _ in completed[0][:-1]]
    finals = [trial[-1][1] for trial in completed]
    alike: list[int] = []
    for i in reversed(range(len(rungs))):
        if not _same_order([trial[i][1] for trial in completed], finals):
            break
        alike.insert(0, rungs[i])
    return tuple(alike)


def _same_order(xs: Sequence[float], ys: Sequence[float]) -> bool:
    """Whether no pair is ordered one way by ``xs`` and the other by ``ys``, and some pair the same way."""
    signs = [
        _sign(xs[i] - xs[j]) * _sign(ys[i] - ys[j]) for i in range(len(xs)) for j in range(i + 1, len(xs))
    ]
    return min(signs, default=0) >= 0 and max(signs, default=0) > 0


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)
