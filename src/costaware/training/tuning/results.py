"""What a trial slot returns, and who owns a trial's ledger entry outside Airflow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from costaware.core.tuning import StopReason, TrialState


@dataclass(frozen=True, slots=True)
class TrialResult:
    """One trial as it ended in this slot."""

    number: int
    label: str
    state: TrialState
    value: float | None
    fidelity: int
    rungs: tuple[tuple[int, float], ...]
    decision: str
    params: dict[str, Any]
    seconds: float
    train_seconds: float
    reserved_usd: Decimal
    reservation_id: str
    #: It trains the parameters of the trial an earlier try of its task left running (that one failed).
    resumed: bool
    estimate: str
    settled_usd: Decimal | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "label": self.label,
            "state": self.state.value,
            "value": self.value,
            "fidelity": self.fidelity,
            "rungs": [list(r) for r in self.rungs],
            "decision": self.decision,
            "params": self.params,
            "seconds": round(self.seconds, 3),
            "train_seconds": round(self.train_seconds, 3),
            "reserved_usd": str(self.reserved_usd),
            "reservation_id": self.reservation_id,
            "resumed": self.resumed,
            "estimate": self.estimate,
            "settled_usd": None if self.settled_usd is None else str(self.settled_usd),
        }


@dataclass(frozen=True, slots=True)
class SlotResult:
    """What a trial slot did: ran a trial, found (or made) the study stopped, or ran none as it goes on.

    ``goes_on``: with ``ran=False``, the study is not stopped and a slot run later may find room: the slot
    gave way to another one refused beside it that waited first, or (outside Airflow) its own time could
    not be held while the study's holds are open; ``stop`` then says what refused it (the budget). False
    with ``ran=False``: the study stopped for ``stop``.
    """

    ran: bool
    reason: str = ""
    stop: StopReason | None = None
    trial: TrialResult | None = None
    goes_on: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "ran": self.ran,
            "reason": self.reason,
            "stop": None if self.stop is None else self.stop.value,
            "trial": None if self.trial is None else self.trial.to_json(),
            "goes_on": self.goes_on,
        }


@dataclass(frozen=True, slots=True)
class EntryOwner:
    """Who a trial's ledger entry belongs to when the trial settles its own reservation (outside Airflow)."""

    dag_id: str
    run_id: str
    task_id: str = "trial"
    map_index: int = -1
    extra_tags: Mapping[str, str] = field(default_factory=dict)
