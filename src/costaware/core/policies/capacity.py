"""A model of spot capacity fitted on the availability seen so far: how long do runs of capacity last?

Capacity is a two-state process (spot can be had, or not). Its runs are far from memoryless: capacity that has
just come back is often gone again a few minutes later, while capacity that has held for an hour tends to
hold. So the model is semi-Markov: the chance that the state holds one more tick depends on the state and on
its **age** (ticks since it began, capped at ``max_age``)::

    P(same state at t+1 | state c, age a) = stay[c][a]

Each ``stay[c][a]`` is the share of such ticks in the samples that were followed by the same state, shrunk
towards the state's pooled share (``prior_weight`` pseudo-observations), which is itself shrunk towards
``prior_stay``. With no samples at all the model says "a state lasts 1 / (1 - prior_stay) ticks on average".
Nothing here is fitted to a particular trace: the only constants are the age cap and the weak prior.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Ages beyond this many ticks share one estimate (two hours at the traces' 10-minute spacing).
MAX_AGE = 12
#: Prior chance that a state holds one more tick, before any sample is seen (mean run: 10 ticks).
PRIOR_STAY = 0.9
#: Weight, in pseudo-observations, of each level of the prior.
PRIOR_WEIGHT = 2.0


def run_state(samples: Sequence[bool], max_age: int = MAX_AGE) -> tuple[int, int]:
    """The state of the last sample (1: capacity) and its age in ticks (capped at ``max_age - 1``)."""
    if not samples:
        return 1, 0
    last = samples[-1]
    age = 0
    for value in reversed(samples[:-1]):
        if value != last or age >= max_age - 1:
            break
        age += 1
    return int(last), age


@dataclass(frozen=True, slots=True)
class CapacityModel:
    """Chance that capacity (state 1) or its absence (state 0) holds one more tick, by age.

    Attributes:
        stay: ``stay[state][age]``, ``max_age`` ages per state.
        samples: How many transitions the fit saw.
    """

    stay: tuple[tuple[float, ...], tuple[float, ...]]
    samples: int

    @property
    def max_age(self) -> int:
        """Number of age buckets per state."""
        return len(self.stay[0])

    @classmethod
    def fit(
        cls,
        samples: Sequence[bool],
        *,
        max_age: int = MAX_AGE,
        prior_stay: float = PRIOR_STAY,
        prior_weight: float = PRIOR_WEIGHT,
    ) -> CapacityModel:
        """Estimate the model from consecutive capacity samples (oldest first)."""
        held = [[0.0] * max_age for _ in range(2)]
        seen = [[0.0] * max_age for _ in range(2)]
        age = 0
        for i in range(len(samples) - 1):
            state = int(samples[i])
            seen[state][age] += 1
            if samples[i + 1] == samples[i]:
                held[state][age] += 1
                age = min(age + 1, max_age - 1)
            else:
                age = 0
        stay: list[tuple[float, ...]] = []
        for state in (0, 1):
            pooled = (sum(held[state]) + prior_weight * prior_stay) / (sum(seen[state]) + prior_weight)
            stay.append(
                tuple(
                    (held[state][a] + prior_weight * pooled) / (seen[state][a] + prior_weight)
                    for a in range(max_age)
                )
            )
        return cls((stay[0], stay[1]), max(len(samples) - 1, 0))

    def mean_run_ticks(self, state: int, age: int = 0) -> float:
        """Expected further ticks the state holds from ``age`` (the last age's chance repeats forever)."""
        expected, alive = 0.0, 1.0
        for a in range(age, self.max_age - 1):
            alive *= self.stay[state][a]
            expected += alive
        last = self.stay[state][-1]
        return expected + alive * last / (1 - last) if last < 1 else float("inf")

    def transition_matrix(self) -> list[list[float]]:
        """Chance ``P[i][j]`` of going from state-age ``i`` to ``j`` in a tick, ``i = state * ages + age``."""
        size = 2 * self.max_age
        matrix = [[0.0] * size for _ in range(size)]
        for state in (0, 1):
            for age in range(self.max_age):
                here = state * self.max_age + age
                held = self.stay[state][age]
                matrix[here][state * self.max_age + min(age + 1, self.max_age - 1)] += held
                matrix[here][(1 - state) * self.max_age] += 1 - held
        return matrix
