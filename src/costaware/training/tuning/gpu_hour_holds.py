"""A waiting slot's hold in GPU-hours: held again with the GPU-hours its time uses (outside Airflow).

Split from :mod:`.reservations`, which re-exports the public names (callers import them from there).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from costaware.core.errors import BudgetExceededError
from costaware.core.ledger import holder_dag_id
from costaware.training.tuning.slot_clock import utcnow
from costaware.training.tuning.wait_refusals import SLOT_HOLD_SECONDS, WaitNotHeld

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import BudgetUsage, Reservation


# Polls' worth of GPU time a waiting slot holds past its need while others wait: small beside their trials,
# and held again once in that many polls, not at each.
WAITING_BESIDE_OTHERS_POLLS = 10


def hold_wait_gpu_hours(
    ledger: Ledger,
    hold_id: str,
    wait_gpu_hours: Decimal,
    slot: int,
    run_id: str | None,
    gpus: Decimal,
    *,
    others_wait: bool,
    poll_seconds: float = 0.0,
    spare_recorded: Decimal = Decimal(0),
) -> tuple[str, Decimal]:
    """Make a waiting slot's hold pay the GPU-hours of its time to the end of its next wait (outside Airflow).

    Returns the id of the hold that does and its spare: the GPU-hours it holds past them and past its margin,
    what it gives up once other slots wait. Alone, it holds the GPU-hours of a hold's ttl more, as far as its
    budgets have room (held again only every few hundred polls). While other slots wait (``others_wait``) it
    gives up the spare and holds its need and its margin: ``WAITING_BESIDE_OTHERS_POLLS`` polls
    (``poll_seconds`` each, a hold's ttl at most) more: a large spare kept, a second slot whose trial fit
    beside this slot's need gave way to it; no margin, the hold was replaced at every poll. The spare it
    recorded at its last poll (``spare_recorded``), which the others wait for, it gives up whole as far as
    ``wait_gpu_hours`` stay held, its margin taken down to make it: the asks between two polls (the reserve,
    a wait for the ledger's lock) grow its need past the pause the spare was counted past.

    Raises:
        WaitNotHeld: a budget the hold is in has no room for ``wait_gpu_hours``.
    """
    # Capped: 10 polls of a 120 s pause on 8 GPUs held 2.67 GPU-hours, more than a lone slot's headroom.
    margin = gpu_hours_for(min(WAITING_BESIDE_OTHERS_POLLS * poll_seconds, SLOT_HOLD_SECONDS), gpus)
    headroom = margin if others_wait else gpu_hours_for(SLOT_HOLD_SECONDS, gpus)
    try:
        kept = cover_gpu_hours(
            ledger,
            hold_id,
            wait_gpu_hours,
            slot,
            run_id,
            headroom=headroom,
            trim=others_wait,
            give_back=spare_recorded,
        )
    except BudgetExceededError as e:
        raise WaitNotHeld.after(
            e,
            f"slot {slot} stops waiting for the study's money: its time to the end of its "
            f"next wait uses {wait_gpu_hours} GPU-hours, and holding them was refused: {e}",
        ) from e
    # The margin is kept while others wait, not given up: counted as a spare, a slot whose trial fitted only
    # beside this slot's need waited for it, its own need grew, and it gave way anyway.
    return kept, max(ledger.unpaid(kept)[1] - wait_gpu_hours - margin, Decimal(0))


def gpu_hours_for(seconds: float, gpus: Decimal) -> Decimal:
    """GPU-hours of ``seconds`` on ``gpus``, rounded up to the micro-GPU-hour (never short)."""
    exact = Decimal(str(max(seconds, 0.0))) / 3600 * gpus
    return exact.quantize(Decimal("0.000001"), rounding="ROUND_CEILING")


def cover_gpu_hours(
    ledger: Ledger,
    hold_id: str,
    gpu_hours: Decimal,
    slot: int | None,
    run_id: str | None,
    *,
    headroom: Decimal = Decimal(0),
    trim: bool = False,
    give_back: Decimal = Decimal(0),
) -> str:
    """Make the slot's hold ``hold_id`` hold ``gpu_hours`` unpaid; returns the id of the hold that does.

    The ledger grows a hold's dollars only: on free compute (a price of 0) a slot's hold held no GPU-hours
    and its wait and entry were spent past a ``max_gpu_hours`` cap. Where it holds fewer, it is held again
    with them (same dollars, same holder), the old one closed as replaced. ``headroom``: GPU-hours held past
    ``gpu_hours`` as far as its budgets have room, so that a wait that asks a little more at each poll holds
    it again rarely (held exactly, a 1 s poll replaced it each second: thousands of rows an hour). It takes
    at most half the room past ``gpu_hours``: taking it all near a ``max_gpu_hours`` cap, it left another
    slot no room for a hold of its own time, and that slot went on at once, neither waiting nor arbitrating.
    The room is read before the ask: where the ask with headroom is refused (another run took some of that
    room meanwhile), it asks once more for ``gpu_hours`` alone, so that a need that still fits is held.
    ``trim``: a hold holding more than ``gpu_hours`` and ``headroom`` is held again with them alone, and
    where it holds more than ``gpu_hours``, it gives back at least ``give_back`` GPU-hours as far as
    ``gpu_hours`` stay held (its headroom taken down to make them).

    Raises:
        BudgetExceededError: a budget over the hold's scope has no room for ``gpu_hours`` alone (named by
            the ledger; the ask without headroom, or the second ask for the need alone, was refused).
    """
    held = next((r for r in ledger.open_reservations() if r.id == hold_id), None)
    if held is None:  # settled, released or expired: not the slot's to hold again here
        return hold_id
    unpaid_usd, unpaid_gpu_hours = ledger.unpaid(hold_id)
    if trim and give_back > 0 and unpaid_gpu_hours > gpu_hours:
        headroom = min(headroom, max(unpaid_gpu_hours - give_back - gpu_hours, Decimal(0)))
    if unpaid_gpu_hours >= gpu_hours and not (trim and unpaid_gpu_hours > gpu_hours + headroom):
        return hold_id
    asked = gpu_hours
    if headroom > 0:
        room = _gpu_hour_room(ledger, held, run_id)
        spare = headroom if room is None else min(headroom, _half_micros(room - gpu_hours))
        asked = gpu_hours + max(spare, Decimal(0))
    try:
        return _hold_again(ledger, held, unpaid_usd, asked, slot, run_id)
    except BudgetExceededError:
        if asked == gpu_hours:
            raise
        # The room was read before the ask: another run took some of it meanwhile, and the headroom refused
        # stopped a slot whose need alone still fit ("needs 0.008473 ... 0.008483 left"). The need alone.
        return _hold_again(ledger, held, unpaid_usd, gpu_hours, slot, run_id)


def _hold_again(
    ledger: Ledger, held: Reservation, usd: Decimal, gpu_hours: Decimal, slot: int | None, run_id: str | None
) -> str:
    """Replace ``held`` by a hold of ``usd`` and ``gpu_hours`` (same holder); returns the new hold's id."""
    who = "the slot" if slot is None else f"slot {slot}"
    again = ledger.reserve(
        held.scope,
        usd,
        gpu_hours=gpu_hours,
        holder=held.holder,
        run_id=run_id,
        dag_id=holder_dag_id(held.holder) if held.holder else None,
        ttl=max(held.expires_at - utcnow(), timedelta(seconds=SLOT_HOLD_SECONDS)),
        purpose=f"{who}'s time, held again for {gpu_hours} GPU-hours",
        replacing=held.id,  # closed as "replaced": the entry settles the new hold
    )
    return again.id


def _half_micros(gpu_hours: Decimal) -> Decimal:
    """Half of ``gpu_hours``, rounded down to the micro-GPU-hour the ledger counts (never past the room)."""
    return (gpu_hours / 2).quantize(Decimal("0.000001"), rounding="ROUND_FLOOR")


def _gpu_hour_room(ledger: Ledger, held: Reservation, run_id: str | None) -> Decimal | None:
    """The fewest GPU-hours left in a budget ``held`` is in, with it given back; None: none caps them."""
    rooms = [left for u in budgets_without(ledger, held, run_id) if (left := u.left_gpu_hours) is not None]
    return min(rooms, default=None)


def budgets_without(ledger: Ledger, held: Reservation, run_id: str | None) -> list[BudgetUsage]:
    """Where each budget ``held`` is in stands without it: what it has unpaid counts as room.

    Read for the holder's run and DAG, as the hold's own budgets were found when it was made.
    """
    dag_id = holder_dag_id(held.holder) if held.holder else None
    standing = ledger.usage(held.scope, run_id=run_id, dag_id=dag_id, without=held.id)
    return [u for u in standing if u.label in held.budgets]
