"""A slot's compute entries outside Airflow: its trial's, settling the reservation, or its skipped time.

Split from :mod:`.reservations`, which re-exports the public names (callers import them from there).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING

from costaware.core.errors import BudgetExceededError
from costaware.core.ledger import Kind, LedgerEntry, Market, clipped_note, compute_cost
from costaware.core.money import format_usd_exact
from costaware.training.tuning.gpu_hour_holds import cover_gpu_hours
from costaware.training.tuning.slot_clock import utcnow

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.tuning import StudySpec
    from costaware.training.tuning.results import EntryOwner

# Logged under the name these records had before reservations.py was split (logging configs filter on it).
log = logging.getLogger("costaware.training.tuning.reservations")


def settle_trial(
    ledger: Ledger,
    spec: StudySpec,
    reservation_id: str,
    seconds: float,
    owner: EntryOwner,
    label: str,
    tags: Mapping[str, str],
    outcome: str,
    note: str,
) -> Decimal:
    """Settle the trial's reservation with one compute entry owned by ``owner`` (outside Airflow)."""
    entry = _slot_entry(
        spec,
        seconds,
        owner,
        label=label,
        tags=tags,
        outcome=outcome,
        note=note,
        reservation_id=reservation_id,
    )
    ledger.settle(reservation_id, entry.usd, entry=entry)
    return entry.usd


def record_skipped_slot(
    ledger: Ledger,
    spec: StudySpec,
    seconds: float,
    owner: EntryOwner,
    why: str,
    hold: str | None = None,
    *,
    label: str = "skipped",
    outcome: str = "skipped",
    tried_to_hold_again: bool = False,
) -> Decimal:
    """Record the time a slot that ran no trial took to decide (outside Airflow); returns its cost.

    In Airflow the listener bills a skipped try; here loading the study and waiting for money ran on the
    machine the study pays for too, and nothing else records it. ``hold``: the slot's hold on that time
    (:func:`hold_slot_time`), settled with the entry. ``label`` and ``outcome``: the entry's (a slot that
    raised before its trial's reservation: ``open``, ``failed``). ``tried_to_hold_again``: the caller tried
    to hold the slot's time again and the budgets refused (said only then, of a hold found expired).
    """
    tags = spec.budget_scope.as_dict()
    entry = _slot_entry(
        spec, seconds, owner, label=label, tags=tags, outcome=outcome, note=why, reservation_id=hold
    )
    if hold is None:
        ledger.record(entry)
        return entry.usd
    # The tail since the hold was last grown (the refusal, this entry's write): held before it is billed.
    if entry.gpu_hours > 0:
        try:
            hold = cover_gpu_hours(ledger, hold, entry.gpu_hours, None, owner.run_id)
            entry = replace(entry, reservation_id=hold)
        except BudgetExceededError as e:
            log.warning("slot's skipped entry of %s GPU-hours is past its hold: %s", entry.gpu_hours, e)
    paid = ledger.paid_from([hold]).get(hold, Decimal(0))
    unpaid_before, _ = ledger.unpaid(hold)
    asked_at = utcnow()
    held = ledger.grow(hold, paid + entry.usd)
    # Lapsed by the time the grow used: before it was asked, or lapsed now and not grown at all (a grow
    # that raised it found it open). Read after the grow alone, a hold grown in full just before its end
    # was said to hold none of it; judged by "grown in full" instead, a hold that already held the entry
    # and ran out as the grow was asked was returned as it stood and nothing was said.
    grown = held.usd - paid > unpaid_before
    if held.lapsed(asked_at) or (not grown and held.lapsed(utcnow())):
        # Expired (a load past its ttl) and not held again: it holds nothing, whatever room its budgets have.
        # "Could not be held again" only where the caller tried: a slot that found its study stopped after
        # a long load never did.
        why_expired = (
            "and could not be held again" if tried_to_hold_again else "before the entry was recorded"
        )
        log.warning(
            "slot's skipped entry of %s (%.1f s at the study's $%s/h) is settled against its hold %s, which "
            "expired at %s %s: it held none of it; the time was spent and is recorded",
            format_usd_exact(entry.usd),
            seconds,
            spec.usd_per_hour,
            hold,
            held.expires_at.isoformat(timespec="seconds"),
            why_expired,
        )
    elif held.status == "open" and held.usd < paid + entry.usd:
        log.warning(
            "slot's skipped entry of %s (%.1f s at the study's $%s/h) is %s more than its hold %s has left: "
            "the budgets it is in had no room for the rest; the time was spent and is recorded",
            format_usd_exact(entry.usd),
            seconds,
            spec.usd_per_hour,
            format_usd_exact(paid + entry.usd - held.usd),
            hold,
        )
    ledger.settle(hold, entry.usd, entry=entry)
    return entry.usd


def _slot_entry(
    spec: StudySpec,
    seconds: float,
    owner: EntryOwner,
    *,
    label: str,
    tags: Mapping[str, str],
    outcome: str,
    note: str,
    reservation_id: str | None = None,
) -> LedgerEntry:
    """The compute entry of ``seconds`` a slot ran at the study's price, owned by ``owner``."""
    hours, usd = compute_cost(seconds, spec.usd_per_hour)
    return LedgerEntry(
        dag_id=owner.dag_id,
        run_id=owner.run_id,
        task_id=owner.task_id,
        map_index=owner.map_index,
        trial=label,
        kind=Kind.COMPUTE,
        usd=usd,
        instance_type=spec.instance_type,
        region=spec.region,
        market=Market.parse(spec.market),
        quantity=hours,
        unit_price_usd=spec.usd_per_hour,
        gpu_hours=(hours * spec.gpus).quantize(Decimal("0.000001")),
        tags={**dict(tags), **dict(owner.extra_tags)},
        outcome=outcome,
        price_source="given",
        note=clipped_note(note),
        reservation_id=reservation_id,
    )
