"""What stops a slot's wait for its trial's money: the refusals it raises, and whether a budget may make room.

Split from :mod:`.reservations`, which re-exports the public names (callers import them from there).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Self

from costaware.core.errors import BudgetExceededError

if TYPE_CHECKING:
    from costaware.core.ledger import BudgetUsage

#: The least a slot's hold (:func:`hold_slot_time`) counts past what it is for: the cost listener settles it
#: with the try's bill after the try ends.
SLOT_HOLD_SECONDS = 600.0
#: Seconds of the try's time a waiting slot's hold pays past its next wait: the ask after it, and the try's
#: end once it gives up (the cost listener bills the whole try).
SLOT_WAIT_MARGIN_SECONDS = 30.0
#: What a slot that stops waiting is told to do about the budget its wait could not be held in.
RAISE_THAT_CAP = "raise that budget's cap with `costaware budget set`"
#: The same, where several budgets are short.
RAISE_THOSE_CAPS = "raise those budgets' caps with `costaware budget set`"


@dataclass(frozen=True, slots=True)
class RecordedSpare:
    """GPU-hours a waiting slot's hold holds past its need and margin, and when it gives them up.

    ``due_in_seconds``: from now to the recording slot's next poll, whose trim gives the spare back (less
    than 0 where that poll is late; 0 for a record that names no time). A trim later than that gives back
    the GPU time it is late by too, so a waiting slot counts its need as it will be at the due poll.
    """

    gpu_hours: Decimal
    due_in_seconds: float = 0.0


class WaitNotHeld(BudgetExceededError):
    """A waiting slot's hold could not be grown to pay its next wait: it stops waiting."""

    @classmethod
    def after(cls, refusal: BudgetExceededError, message: str) -> Self:
        """The slot's stop, said by ``message``, where the ledger refused what it asked (``refusal``)."""
        return cls(
            message,
            scope=refusal.scope,
            spent_usd=refusal.spent_usd,
            cap_usd=refusal.cap_usd,
            needed_usd=refusal.needed_usd,
            renews=refusal.renews,
        )


class HoldNotHeldAgain(WaitNotHeld):
    """Raised when a waiting slot's hold could not pay for its wait and holding it again was refused."""

    #: That hold (expired, or not grown): the slot's skipped entry is settled against it.
    hold_id: str = ""


class SlotYields(WaitNotHeld):
    """A slot refused only for other slots' holds on their own time gives way to the first of them to wait."""


def _may_come_back(own: BudgetUsage, usd: Decimal, gpu_hours: Decimal) -> bool:
    """Whether a budget (the study's) may make room: holds are open in it, and what is spent leaves room.

    GPU-hours count as dollars do: on free compute (a price of 0) trials hold GPU-hours and no dollars, and a
    slot refused while they ran stopped the study for good.
    """
    in_flight = own.reserved_usd > 0 or own.reserved_gpu_hours > 0
    gpu_room = own.cap_gpu_hours is None or own.spent_gpu_hours + gpu_hours <= own.cap_gpu_hours
    return in_flight and own.spent_usd + usd <= own.cap_usd and gpu_room


def _has_room_now(own: BudgetUsage, usd: Decimal, gpu_hours: Decimal) -> bool:
    """Whether a budget (the study's) has room for ``usd`` and ``gpu_hours`` beside its spend and holds."""
    left_gpu_hours = own.left_gpu_hours
    gpu_room = left_gpu_hours is None or gpu_hours <= left_gpu_hours
    return own.spent_usd + own.reserved_usd + usd <= own.cap_usd and gpu_room
