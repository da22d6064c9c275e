"""Internal: a spooled or listened cost entry written against its task's hold (see :mod:`ledger_spool`).

:func:`record_and_settle` settles the task's reservation with the entry, or, for a try to be retried, pays
the entry from the hold and grows the hold back (:func:`hold_again_for_retry`), with the WARNINGs of a hold
grown short or expired. Split out of :mod:`costaware.ledger_spool`, which imports it; no Airflow here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from costaware.core.money import format_gpu_hours

#: The logger these lines were always said under: log configurations and alerts filter by its name.
log = logging.getLogger("costaware.ledger_spool")

#: How long the hold of a bill kept in ``spool/unsure`` counts: until a person drains or drops the file,
#: which may take days (a long weekend, a holiday); past it the money is counted by no budget again.
UNSURE_HOLD_TTL = timedelta(days=30)


def unsure_holder(entry: Any) -> str:
    """The holder of the hold of ``entry``'s bill kept in ``spool/unsure``: ``<task holder>/unsure/<uid>``.

    Not a task's holder form (``read_holder`` reads none from it), so the run's end, which releases its
    tasks' holds, leaves it open: the bill's money is spent whatever the run does.
    """
    from costaware.core.ledger import reservation_holder

    task = reservation_holder(entry.dag_id, entry.run_id, entry.task_id, entry.map_index)
    return f"{task}/unsure/{entry.entry_uid}"


def hold_unsure(ledger: Any, entry: Any) -> Any | None:
    """Hold ``entry``'s figure in its budgets while its bill waits in ``spool/unsure``; the hold, or None.

    The bill is not written (a person decides whether it bills this run), but its money is spent: counted
    by no budget meanwhile, other runs spent the same room. Where the budgets have too little room left, the
    room they have is held (the caps are passed by money already spent, said at WARNING), or nothing. None
    where no budget covers the bill or the ledger cannot be written (said at WARNING): the drain takes none
    later. Kept again by a later try, the same hold is found, not a second one taken.
    """
    from costaware.core.budgets import Scope
    from costaware.core.errors import BudgetExceededError, BudgetNotFoundError

    scope = Scope.parse(dict(entry.tags))
    asked = {"holder": unsure_holder(entry), "run_id": entry.run_id, "dag_id": entry.dag_id}
    purpose = f"the bill {entry.entry_uid} kept in spool/unsure"
    try:
        try:
            return ledger.reserve(
                scope, entry.usd, gpu_hours=entry.gpu_hours, ttl=UNSURE_HOLD_TTL, purpose=purpose, **asked
            )
        except BudgetExceededError:
            usages = ledger.usage(scope, run_id=entry.run_id, dag_id=entry.dag_id)
            room_usd = min([entry.usd, *(max(u.left_usd, Decimal(0)) for u in usages)])
            # GPU-hour room counts only under a GPU-hour cap: uncapped, it is no room worth a hold, and a
            # bill with GPU-hours took a $0.00 hold ("held $0.00") where its dollars had none left.
            capped_rooms = [max(left, Decimal(0)) for u in usages if (left := u.left_gpu_hours) is not None]
            room_gpu_hours = min([entry.gpu_hours, *capped_rooms])
            if room_usd <= 0 and (not capped_rooms or room_gpu_hours <= 0):
                _say_unsure_past_caps(entry, usages, "Nothing is held of it (its budgets have no room left)")
                return None
            try:
                hold = ledger.reserve(
                    scope, room_usd, gpu_hours=room_gpu_hours, ttl=UNSURE_HOLD_TTL, purpose=purpose, **asked
                )
            except BudgetExceededError:  # another run took the room meanwhile
                taken = "Nothing is held of it (another run took the room left meanwhile)"
                _say_unsure_past_caps(entry, usages, taken)
                return None
            held = _held_text(room_usd, room_gpu_hours if capped_rooms else None)
            _say_unsure_past_caps(entry, usages, f"Held {held} of it")
            return hold
    except BudgetNotFoundError:
        return None  # no budget counts it: none to pass
    except Exception as e:
        log.warning(
            "costaware: no budget hold was taken for the bill %s ($%s) kept in spool/unsure (%s): its "
            "budgets count it nowhere until it is drained, and other runs may spend its room; the drain "
            "takes no hold for it later",
            entry.entry_uid,
            entry.usd,
            e,
        )
        return None


def _held_text(usd: Decimal, gpu_hours: Decimal | None) -> str:
    """What a partial hold of a kept bill holds: '$0.50', or '$0.00 and 2 GPU-hours' under a GPU-hour cap."""
    from costaware.core.money import format_usd_exact

    held = format_usd_exact(usd)
    return held if gpu_hours is None else f"{held} and {format_gpu_hours(gpu_hours)} GPU-hours"


def _say_unsure_past_caps(entry: Any, usages: list[Any], held: str) -> None:
    """Warn that the budgets of a bill kept in ``spool/unsure`` have less room than its money spent.

    Each budget short is named with the cap the bill passes and its figures: its dollar cap, its GPU-hour
    cap, or both (a GPU-hour cap alone was said as "money spent" beside the dollar cap it did not pass).
    ``held``: the sentence of what was held of it, said once the ledger took or refused the hold.
    """
    from costaware.core.money import format_usd_exact

    short: list[str] = []
    passed: set[str] = set()  # "usd", "gpu_hours": the kinds of cap the bill passes
    for u in usages:
        caps = []
        if u.left_usd < entry.usd:
            passed.add("usd")
            caps.append(
                f"cap {format_usd_exact(u.cap_usd)}, {format_usd_exact(u.spent_usd)} spent and "
                f"{format_usd_exact(u.reserved_usd)} reserved"
            )
        if (left := u.left_gpu_hours) is not None and entry.gpu_hours > left:
            passed.add("gpu_hours")
            caps.append(
                f"GPU-hour cap {format_gpu_hours(u.cap_gpu_hours)}, {format_gpu_hours(u.spent_gpu_hours)} "
                f"GPU-hours spent and {format_gpu_hours(u.reserved_gpu_hours)} reserved"
            )
        if caps:
            short.append(f"budget '{u.name}' ({'; '.join(caps)})")
    bill = format_usd_exact(entry.usd)
    if "gpu_hours" in passed:
        bill = f"{bill} and {format_gpu_hours(entry.gpu_hours)} GPU-hours"
    raises = []
    if "usd" in passed or not passed:
        raises.append("the cap (`costaware budget set`)")
    if "gpu_hours" in passed:
        raises.append("the GPU-hour cap (`costaware budget set --cap-gpu-hours`)")
    which = (
        "its caps are"
        if len(passed) == 2
        else "its GPU-hour cap is"
        if passed == {"gpu_hours"}
        else "its cap is"
    )
    log.warning(
        "costaware: the bill %s kept in spool/unsure is %s already spent, and %s: %s passed by what the "
        "bill spent. %s until a person drains or drops the bill; raise %s, or hold back the budget's next "
        "runs",
        entry.entry_uid,
        bill,
        "; ".join(short) or "its budgets have too little room",
        which,
        held,
        " and ".join(raises),
    )


def record_unsure(ledger: Any, entry: Any, *, kept_as: Any = None) -> bool:
    """Record a bill a person moved back from ``spool/unsure`` (``another_run``): paid from its own hold.

    Its file says ``retrying`` (kept as a retry's bill is), but its try is long over: paid from the task's
    hold and the hold grown back (:func:`record_and_settle`), a finished task held money for a retry that
    never comes, and the bill's own hold counted it a second time. Settled from the hold kept for it
    (:func:`unsure_holder`) where there is one, else recorded alone: every dollar counted once.
    ``kept_as``: the bill as it was kept, where the drain keyed it again since (a stop's bill keyed by its
    run): the hold is under the uid it was kept with, and looked up under the new one it stayed open.
    Returns whether the entry was written (False: the ledger had its ``entry_uid`` already).
    """
    hold = ledger.reservation_to_settle(unsure_holder(entry if kept_as is None else kept_as))
    if hold is None:
        return bool(ledger.record(entry))
    return bool(ledger.settle_with_entry(hold.id, replace(entry, reservation_id=hold.id)))


def record_and_settle(ledger: Any, entry: Any, *, retrying: bool = False) -> bool:
    """Record ``entry``, settling its task's reservation with it where the task holds one.

    ``retrying``: the try failed and the task will run again: its entry is paid from the task's hold, which
    stays open for the next try (settled by the first, the retries ran with no hold, and another task could
    take the money they spent). The hold is grown back, in the same transaction, by what this entry paid from
    it, where the budgets have room (:func:`hold_again_for_retry`); what a ``RemoteTrainingOperator``'s
    attempts paid during the try is grown back by the operator on its retry, to ``max_usd`` less them. A
    hold past its ttl is not grown (it counts nothing): the entry is recorded alone and a WARNING says so.

    Recorded alone beside an open hold, its cost counted twice in the budgets (spent and held) until the run
    ended; the ledger keeps one entry per ``entry_uid``, so a second write adds nothing. Returns whether the
    entry was written (False: the ledger had its ``entry_uid`` already, and keeps that row; the hold is
    settled all the same), as the write itself told it: a drain says which it was.
    """
    from costaware.core.ledger import reservation_holder

    holder = reservation_holder(entry.dag_id, entry.run_id, entry.task_id, entry.map_index)
    # Open, or released by the run's end while this listener was still on its way (see
    # release_run_reservations): either way the cost settles the task's own reservation.
    reservation = ledger.reservation_to_settle(holder, entry.tags)
    if reservation is None:
        # Not linked to a hold past its ttl, as a last try's entry is not: that hold counts nothing.
        written = bool(ledger.record(entry))
        if written and retrying:
            _say_if_hold_lapsed(ledger, holder, entry)
        return written
    if retrying and reservation.status == "open":
        return hold_again_for_retry(ledger, reservation, entry)
    return bool(ledger.settle_with_entry(reservation.id, replace(entry, reservation_id=reservation.id)))


def hold_again_for_retry(ledger: Any, reservation: Any, entry: Any) -> bool:
    """Record ``entry`` paid from a retried task's hold, growing the hold by what the entry paid from it.

    The hold was sized for one try: left paid in part, the retry (which no gate checks again, and no
    listener can stop) spent past it, and another run meanwhile reserved the room it had freed: try 1 paid
    $5 of a $6 hold, another run took $4 of the $10 cap, try 2 billed $6: $15 committed. The entry and the
    growth are one ledger transaction under the budgets' locks (``Ledger.record_and_regrow``), so no run
    reserves that room in between; the growth takes only the room every covering budget has (in dollars and
    GPU-hours), and where it falls short in either a WARNING names the budgets and why: the retry may pass
    them by up to the shortfall (a hold past its ttl as the entry is written is not grown, and its WARNING
    says it expired). The same entry written again (a drain) pays nothing more, so grows nothing more. Only
    a failed growth is logged, not raised: the task's try is over (a listener cannot fail it). Returns
    whether the entry was written (False: the ledger had its ``entry_uid`` already).
    """
    paid_entry = replace(entry, reservation_id=reservation.id)  # paid from the hold, which stays
    try:
        regrowth = ledger.record_and_regrow(paid_entry)
    except Exception as e:
        # Not written with its growth: write it alone (an error here is the ledger's, for the spool).
        written = bool(ledger.record(paid_entry))
        log.warning(
            "costaware: the hold %s of %s.%s was not held again for its retry (%s): the retry spends from "
            "what is left of it unchecked against the caps",
            reservation.id,
            entry.dag_id,
            entry.task_id,
            e,
        )
        return written
    _say_if_held_short(ledger, reservation, entry, regrowth)
    return bool(regrowth.new)


def _say_if_held_short(ledger: Any, reservation: Any, entry: Any, regrowth: Any) -> None:
    """Warn where :func:`hold_again_for_retry` grew ``reservation`` back short, or found it expired."""
    grown = regrowth.held
    if regrowth.new and regrowth.expired:
        # Not "too little room": the budgets may have plenty, the hold just stopped counting.
        _say_expired(grown, entry)
        return
    try:
        # GPU-hours too: grown back short of them under a GPU-hour cap, the retry may pass that cap.
        shortfall = Shortfall(
            max(regrowth.target - grown.usd, Decimal(0)),
            max(regrowth.gpu_hours_target - grown.gpu_hours, Decimal(0)),
        )
        if not regrowth.new or not shortfall or grown.status != "open":
            return
        why, what_to_do = _why_short(ledger, grown, entry, regrowth.why_not_grown, shortfall)
        held_before = Shortfall(regrowth.unpaid_before, regrowth.unpaid_gpu_hours_before)
        log.warning(
            "costaware: the hold %s of %s.%s is held again for its retry %s short of the %s it held for try "
            "%s (which paid %s): %s. The retry may pass %s by up to %s: %s",
            reservation.id,
            entry.dag_id,
            entry.task_id,
            shortfall.text(),
            held_before.text(usd=shortfall.usd > 0, gpu_hours=shortfall.gpu_hours > 0),
            entry.try_number,
            _paid_text(entry, shortfall),
            why,
            shortfall.caps() if regrowth.why_not_grown is None else "its budgets' caps",
            shortfall.text(),
            what_to_do,
        )
    except Exception as e:  # the entry is recorded and the hold grown: only the warning is missing
        log.warning(
            "costaware: the hold %s of %s.%s was held again for its retry short of what it held for try %s, "
            "and what is short could not be read (%s)",
            reservation.id,
            entry.dag_id,
            entry.task_id,
            entry.try_number,
            e,
        )


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Dollars and GPU-hours a retried try's hold was grown back short by (or held, for ``text``)."""

    usd: Decimal
    gpu_hours: Decimal

    def __bool__(self) -> bool:
        return self.usd > 0 or self.gpu_hours > 0

    def text(self, *, usd: bool | None = None, gpu_hours: bool | None = None) -> str:
        """'$5.00', '6 GPU-hours' or both: each part shown where asked (by default, where short)."""
        from costaware.core.money import format_usd_exact

        show_usd = self.usd > 0 if usd is None else usd
        show_gpu_hours = self.gpu_hours > 0 if gpu_hours is None else gpu_hours
        parts = [format_usd_exact(self.usd)] if show_usd else []
        if show_gpu_hours:
            parts.append(f"{format_gpu_hours(self.gpu_hours)} GPU-hours")
        return " and ".join(parts)

    def caps(self) -> str:
        """The cap(s) the retry may pass."""
        if self.usd > 0 and self.gpu_hours > 0:
            return "those caps"
        return "that cap" if self.usd > 0 else "that GPU-hour cap"


def _paid_text(entry: Any, shortfall: Shortfall) -> str:
    """What the try paid of its hold, in the units the hold was grown short in."""
    from costaware.core.money import format_usd_exact

    if shortfall.usd > 0 and shortfall.gpu_hours > 0:
        return f"{format_usd_exact(entry.usd)} and {format_gpu_hours(entry.gpu_hours)} GPU-hours of it"
    if shortfall.usd > 0:
        return f"{format_usd_exact(entry.usd)} of it"
    return f"{format_gpu_hours(entry.gpu_hours)} of them"


def _say_if_hold_lapsed(ledger: Any, holder: str, entry: Any) -> None:
    """Warn where a retried task's newest hold passed its ttl before its failed try's entry was written.

    No hold was found to settle, so the entry was recorded alone and the retry runs with nothing held:
    that went without a word where the hold lapsed before the try failed (the usual case of a short ttl).
    """
    from costaware.core.ledger import utcnow

    try:
        latest = ledger.latest_reservation(holder)
    except Exception as e:  # the entry is recorded: only the warning is missing
        log.warning(
            "costaware: could not read whether the hold of %s.%s lapsed before its retry (%s)",
            entry.dag_id,
            entry.task_id,
            e,
        )
        return
    if latest is not None and latest.lapsed(utcnow()):
        _say_expired(latest, entry)


def _say_expired(hold: Any, entry: Any) -> None:
    """Warn that ``hold`` expired before ``entry`` (a failed try's, to be retried) was written."""
    from costaware.core.money import format_usd_exact

    log.warning(
        "costaware: the hold %s of %s.%s expired at %s, before try %s's cost of %s was written, so it "
        "was not held again: the retry runs with nothing held in its budgets %s, unchecked against their "
        "caps. Give the task's spend gate a reservation_ttl that covers its tries, or mark the task "
        "failed to stop it",
        hold.id,
        entry.dag_id,
        entry.task_id,
        f"{hold.expires_at:%Y-%m-%d %H:%M:%S} UTC",
        entry.try_number,
        format_usd_exact(entry.usd),
        ", ".join(hold.budgets),
    )


def _why_short(
    ledger: Any, held: Any, entry: Any, why_not_grown: str | None, shortfall: Shortfall
) -> tuple[str, str]:
    """Why ``held`` was grown short (by ``shortfall``), and what to do about it.

    Its budgets with no room left, in dollars or GPU-hours as it fell short (what each has spent and holds
    of its cap), or, where the ledger did not grow it for another reason (``why_not_grown``), that reason.
    """
    from costaware.core.money import format_usd_exact

    stop = "mark the task failed to stop it"
    if why_not_grown is not None:
        # The budgets have room: a raised cap would not help, so name what the ledger logged instead.
        return f"it could not be grown in its budgets {', '.join(held.budgets)}: {why_not_grown}", stop
    raises = []
    if shortfall.usd > 0:
        raises.append("the cap (`costaware budget set`)")
    if shortfall.gpu_hours > 0:
        raises.append("the GPU-hour cap (`costaware budget set --cap-gpu-hours`)")
    raise_cap = f"raise {' and '.join(raises)} before it runs, or {stop}"
    try:
        standing = ledger.usage(held.scope, run_id=entry.run_id, dag_id=entry.dag_id)
    except Exception as e:
        return f"its budgets could not be read ({e})", raise_cap
    mine = [u for u in standing if u.label in held.budgets]
    full = [
        f"budget '{u.name}' has {format_usd_exact(u.spent_usd)} spent and {format_usd_exact(u.reserved_usd)} "
        f"reserved of its {format_usd_exact(u.cap_usd)} cap"
        for u in mine
        if shortfall.usd > 0 and u.left_usd <= 0
    ]
    full += [
        f"budget '{u.name}' has {format_gpu_hours(u.spent_gpu_hours)} GPU-hours spent and "
        f"{format_gpu_hours(u.reserved_gpu_hours)} reserved of its {format_gpu_hours(u.cap_gpu_hours)} "
        "GPU-hour cap"
        for u in mine
        if shortfall.gpu_hours > 0
        and u.cap_gpu_hours is not None
        and u.spent_gpu_hours + u.reserved_gpu_hours >= u.cap_gpu_hours
    ]
    return "; ".join(full) or f"its budgets {', '.join(held.budgets)} have too little room", raise_cap
