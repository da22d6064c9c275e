"""What a budgeted search (:func:`costaware.training.search.budgeted_search`) returns: trials and result."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from costaware.core.tuning import fall_adjusted_value


@dataclass(frozen=True, slots=True)
class SearchTrial:
    """One configuration the search tried: the rungs it ran and how it ended."""

    number: int
    params: dict[str, Any]
    rungs: tuple[tuple[int, float], ...]
    #: "complete", "pruned", "cut" (its next rung could not be paid) or "failed" (its metric was not a
    #: finite number at the rung after its last: it diverged; that rung is not in ``rungs``).
    state: str
    #: Its Hyperband bracket: judged from early rung ``bracket`` on (as many as early rungs: never judged).
    bracket: int = 0
    #: The rungs it was judged at: its bracket's, where pruning was trusted when it passed them and its value
    #: lay within the reach of the rung's evidence (``search_rungs.within_evidence``; below it: no verdict).
    judged: tuple[int, ...] = ()

    @property
    def value(self) -> float | None:
        """The value at full fidelity (None unless the trial completed)."""
        return self.rungs[-1][1] if self.state == "complete" and self.rungs else None

    def score(self, direction: str = "maximize") -> float | None:
        """Its value at full fidelity less that value's fall from its best rung (None: not completed).

        See :func:`~costaware.core.tuning.fall_adjusted_value`: why a falling curve ranks lower.
        """
        if self.value is None:
            return None
        return fall_adjusted_value([v for _, v in self.rungs], direction)


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What the search found, what it tried and what it spent."""

    best_params: dict[str, Any] | None
    best_value: float | None
    trials: tuple[SearchTrial, ...]
    spent_usd: Decimal
    stop: str
    states: dict[str, int] = field(default_factory=dict)
    #: The rungs the default pruner judged at when the search ended (empty: no early rung ranked the fair
    #: evidence above chance; None: a pruner was given).
    prune_rungs: tuple[int, ...] | None = None
    #: The search's own budget while it ran, ``scope`` plus ``search=<id>``; deleted at its end, its spend
    #: stays tagged so (``costaware report --scope search=<id>``).
    budget_scope: str = ""


def search_result(
    trials: Sequence[SearchTrial],
    direction: str,
    *,
    spent_usd: Decimal,
    stop: str,
    prune_rungs: tuple[int, ...] | None,
    budget_scope: str,
) -> SearchResult:
    """The result of a search that tried ``trials``: the best by score, and how many ended in each state."""
    # Only a finite score can win: nan compares neither above nor below, so max/min kept one that came first.
    scores = [(t.score(direction), t) for t in trials]
    scored = [(score, t) for score, t in scores if score is not None and math.isfinite(score)]
    best = None
    if scored:
        pick = max if direction == "maximize" else min
        best = pick(scored, key=lambda pair: pair[0])[1]
    states: dict[str, int] = {}
    for t in trials:
        states[t.state] = states.get(t.state, 0) + 1
    return SearchResult(
        prune_rungs=prune_rungs,
        best_params=best.params if best else None,
        best_value=best.value if best else None,
        trials=tuple(trials),
        spent_usd=spent_usd,
        stop=stop,
        states=states,
        budget_scope=budget_scope,
    )
