"""How a trial ended, as the ledger, the stop rules and the study's summary see it."""

from __future__ import annotations

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
