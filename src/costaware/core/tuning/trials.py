"""How a trial ended, as the ledger, the stop rules and the study's summary see it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class TrialState(str, Enum):
    """How a trial ended, as the ledger and the summary show it."""

    PROMOTED = "promoted"  # trained to the last rung (full fidelity) and scored
    PRUNED = "pruned"  # stopped at a rung by successive halving
    CUT = "cut"  # stopped before a rung because its reserved money or the study's wall clock ran out
    FAILED = "failed"  # the trainer raised, or the trial's lease expired (a killed worker)
    RUNNING = "running"


@dataclass(frozen=True, slots=True)
class FinishedTrial:
    """A trial that ended, in the order trials ended: its state and, when fully trained, its value."""

    state: TrialState
    value: float | None = None


def trial_label(number: int, state: TrialState, fidelity: int) -> str:
    """The ledger's ``trial`` value: ``#7 pruned@3``, so a report grouped by trial shows each decision."""
    return f"#{number} {state.value}@{fidelity}"


def fall_adjusted_value(rung_values: Sequence[float], direction: str = "maximize") -> float | None:
    """A fully trained trial's value less that value's fall from its best rung: how completed trials rank.

    ``rung_values`` are the trial's values rung by rung, the last at full fidelity (None when empty). A
    metric that got worse while the configuration trained on is past its best: the model overfits, its
    predictions grow idiosyncratic, and its last value carries more noise of the validation sample. Ranked
    by that value alone, the lucky end of a falling curve wins a search, and the model does worse on new
    data than its value said. Counting the fall twice (once in the value, once as a penalty) ranks such a
    configuration below one that ends as high without falling; a curve that never falls scores its value.
    """
    if not rung_values:
        return None
    value = rung_values[-1]
    seen = [v for v in rung_values if not math.isnan(v)]
    if math.isnan(value) or not seen:
        return value
    best = max(seen) if direction == "maximize" else min(seen)
    return 2 * value - best
