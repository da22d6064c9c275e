"""``costaware budget holds|release``: the open holds, and giving back one nothing will settle."""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal
from typing import Any

from costaware.cli.arguments import open_ledger
from costaware.cli.commands.governance import current_actor
from costaware.cli.output import emit, plain
from costaware.core.money import format_usd_exact


def budget_holds(args: argparse.Namespace) -> int:
    """Print the open reservations (of ``--scope``'s tags): what ``budget show`` counts as reserved.

    A hold is a task's money set aside before it spends it (a spend gate's estimate, a remote training's
    ``max_usd``); it is settled with what the task billed, or released when its run ends.
    """
    from costaware.adapters.airflow_tasks import holder_kind
    from costaware.core.budgets import Scope

    ledger = open_ledger(args, reading=True, read_only=True)
    wanted = Scope.parse(args.scope)
    holds = [r for r in ledger.open_reservations() if wanted.covers(r.scope)]
    holds.sort(key=lambda r: r.created_at)
    if not holds:
        from costaware.adapters.ledger.views import scope_hint

        # A mistyped tag read as "nothing is reserved" while a task held money under the real one.
        hint = scope_hint(ledger, str(wanted)) if str(wanted) != "*" else ""
        if args.format == "table":
            print(
                f"no open holds{'' if str(wanted) == '*' else f' of {wanted}'}: nothing is reserved"
                + (f" ({hint})" if hint else "")
            )
            return 0
        if hint:
            print(f"costaware: note: no open holds of {wanted}: {hint}", file=sys.stderr)
    # A training's attempts are billed while its hold stays open: what is left of it is what is reserved.
    paid = ledger.paid_from([r.id for r in holds])
    rows = [
        [
            r.holder or f"(none: id {r.id})",  # one reserved from Python without a holder: released by its id
            holder_kind(r.holder),
            str(r.scope),
            format_usd_exact(r.usd),
            format_usd_exact(paid.get(r.id, Decimal(0))),
            plain(r.gpu_hours) if r.gpu_hours else "",
            f"{r.created_at:%Y-%m-%d %H:%M} UTC",
            f"{r.expires_at:%Y-%m-%d %H:%M} UTC",
            ", ".join(r.budgets),
        ]
        for r in holds
    ]
    payload = [
        {
            "id": r.id,
            "holder": r.holder,
            "holder_kind": holder_kind(r.holder).partition(" (")[0],
            "scope": str(r.scope),
            "usd": str(r.usd),
            "paid_usd": str(paid.get(r.id, Decimal(0))),
            "gpu_hours": str(r.gpu_hours),
            "created_at": r.created_at.isoformat(),
            "expires_at": r.expires_at.isoformat(),
            "budgets": list(r.budgets),
        }
        for r in holds
    ]
    headers = [
        # One title for every holder's form read wrong for all but one: a search's tail, a task's egress, no
        # holder. Each row says which form its holder has instead.
        "held by",
        "holder is",
        "scope",
        "held",
        "paid so far",
        "GPU-hours",
        "since",
        "until",
        "counted in",
    ]
    emit(rows, args.format, headers=headers, payload=payload, labels=3)
    return 0


def budget_release(args: argparse.Namespace) -> int:
    """Give back the open holds of ``--holder``; audited under the current user.

    For a hold nothing will settle: its run was killed where no run-end listener ran (Ctrl-C of
    ``airflow dags test``), which left it counting as reserved until its time limit, a day or more. A hold
    whose task Airflow's metadata database says may still run (or that cannot be read) is kept unless
    ``--force`` is given: that task would settle its cost against the released hold, past the budget's cap.
    """
    from costaware.adapters.ledger.audit import record_audit
    from costaware.core.errors import InvalidBudgetError

    holder = str(args.holder).strip()
    ledger = open_ledger(args, reading=True)  # nor a hold to release
    # Or its id: a hold reserved from Python without a holder could not be released at all.
    holds = [r for r in ledger.open_reservations() if holder in (r.holder, r.id)]
    if not holds:
        # A hold with no holder is released by its id: listed as '' it named nothing to type.
        open_holders = sorted({r.holder or r.id for r in ledger.open_reservations()})
        listed = ", ".join(repr(h) for h in open_holders[:5]) or "none"
        raise InvalidBudgetError(
            f"no open hold of {holder!r} (open holds: {listed}{' ...' if len(open_holders) > 5 else ''}); "
            "give the holder (or, for a hold with none, its id) as `costaware budget holds` shows it"
        )
    if not args.force:
        _refuse_while_a_task_may_bill(holder, holds)
    for hold in holds:
        # What was paid from it (a training's attempts billed while it stayed open) stays spent: only the
        # rest was reserved, and is what each budget gets back (a budget counts only the entries of its own
        # scope as paid from it). Read in the release's transaction: read before it, an entry paid in
        # between was left out, and a hold closed a moment before was said released here.
        released = ledger.release_hold(hold.id, by_budget=True)
        if not released.released_here:
            print(
                f"the hold of {hold.holder or hold.id} was {released.reservation.status} meanwhile: "
                "nothing released"
            )
            continue
        hold = released.reservation
        back, hold_paid = released.freed_by_budget, released.paid_usd
        freed = max(back.values(), default=Decimal(0))
        record_audit(
            ledger,
            actor=current_actor(),
            action="hold_release",
            target=holder,
            details={
                "reservation": hold.id,
                "usd": str(freed),
                "usd_by_budget": {label: str(usd) for label, usd in back.items()},
                "held_usd": str(hold.usd),
                "paid_usd": str(hold_paid),
                "budgets": list(hold.budgets),
                "forced": bool(args.force),
            },
        )
        print(_release_said(hold, back, hold_paid))
    return 0


def _release_said(hold: Any, back: dict[str, Decimal], hold_paid: Decimal) -> str:
    """What releasing ``hold`` gave back, said per budget where the budgets got different amounts.

    ``back``: what each budget got back; ``hold_paid``: what every entry paid from the hold cost. One note on
    what stays spent, after amounts that differ, contradicted them ("$4.00 back to project=x/month ...
    (nothing was still reserved ...)"): each budget's own is said after its amount instead.
    """
    who = hold.holder or hold.id
    held = format_usd_exact(hold.usd)
    if len(set(back.values())) > 1:
        return f"released the hold of {who}: " + ", ".join(
            f"{format_usd_exact(usd)} back to {label}{_spent_in_budget(hold.usd - usd, hold.usd)}"
            for label, usd in back.items()
        )
    freed = max(back.values(), default=Decimal(0))
    where = ", ".join(hold.budgets) or str(hold.scope)
    said = f"released {format_usd_exact(freed)} held by {who} in {where}"
    if back and hold.usd - freed != min(hold_paid, hold.usd):
        # Entries outside these budgets' scopes paid from it too: only what the budgets count stays spent in
        # them, and the whole of what was paid said so of a part of it.
        scopes = "its scope" if len(back) == 1 else "their scopes"
        return said + _spent_in_budget(hold.usd - freed, hold.usd, scopes)
    if hold_paid >= hold.usd:
        # "$6.25 of its $3.00 hold was paid from it": what was billed passed the hold, none was left.
        said += (
            f" (nothing was still reserved: {format_usd_exact(hold_paid)} was billed against its {held} hold "
            "and stays spent)"
        )
    elif hold_paid:
        said += (
            f" (what was still reserved: {format_usd_exact(hold_paid)} of its {held} hold was paid from it "
            "and stays spent)"
        )
    return said


def _spent_in_budget(paid: Decimal, held: Decimal, scopes: str = "its scope") -> str:
    """`` (...)`` saying ``paid`` of a hold of ``held`` was paid by entries of ``scopes``; "" for none."""
    if paid <= 0:
        return ""
    if paid >= held:
        return (
            f" (nothing was still reserved: entries of {scopes} paid the whole {format_usd_exact(held)} "
            "hold, which stays spent)"
        )
    return (
        f" (the other {format_usd_exact(paid)} of the {format_usd_exact(held)} hold was paid by entries of "
        f"{scopes} and stays spent)"
    )


def _refuse_while_a_task_may_bill(holder: str, holds: list[Any]) -> None:
    """Refuse to release a hold whose task Airflow's metadata database says may still bill, or cannot say.

    Released while its task ran, a hold was settled by that task's cost after the money had been handed to
    others: a $5 budget read -$3.00 left. Holds that name no task instance (reserved from Python) are not
    checked: nothing in Airflow settles them. A budgeted_search's hold is refused without ``--force``: the
    search settles it, and nothing in Airflow says whether it still runs.
    """
    from costaware.adapters.airflow_tasks import (
        AirflowDatabaseUnreadable,
        search_of,
        task_instance_of,
        task_instance_standing,
    )
    from costaware.core.errors import InvalidBudgetError

    for hold in holds:
        search = search_of(hold.holder)
        if search is not None:
            # Its id is the search's own, not a run's: nothing in Airflow says whether it still trains.
            what = "its bookkeeping after the last rung" if hold.holder.endswith("/tail") else "a rung"
            raise InvalidBudgetError(
                f"hold of {holder!r} not released: it is {what} of budgeted_search {search!r}, which runs "
                "outside Airflow's task states, so whether it may still bill cannot be checked. It expires "
                f"by itself at {hold.expires_at:%Y-%m-%d %H:%M} UTC; give --force once the search has "
                "ended (a search still running settles its rung against the released hold, past the "
                "budget's cap)"
            )
        key = task_instance_of(hold.holder)
        if key is None:
            continue
        try:
            standing = task_instance_standing(key)
        except AirflowDatabaseUnreadable as e:
            raise InvalidBudgetError(
                f"hold of {holder!r} not released: cannot read Airflow's metadata database to check that "
                f"{key} has ended ({e}). Run the command with the deployment's AIRFLOW_HOME (or "
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN), or give --force once you know the task runs no more: "
                "a task still running settles its cost against a released hold, past the budget's cap"
            ) from e
        if not standing.found and not standing.run_found:
            # Neither the task nor its run: "let it end or mark it failed" named nothing one could do.
            raise InvalidBudgetError(
                f"hold of {holder!r} not released: {key} is {standing.said()}, so whether it may still "
                "bill cannot be checked. Run the command with the deployment's AIRFLOW_HOME (or "
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN) if this is another one's database; give --force once "
                "you know the task runs no more (its run deleted): a task still running settles its cost "
                "against a released hold, past the budget's cap"
            )
        if not standing.ended:
            raise InvalidBudgetError(
                f"hold of {holder!r} not released: {key} is {standing.said()}, so it may still bill and "
                "would settle its cost against the released hold, past the budget's cap. Let it end (its "
                "run's end releases the hold), or mark it failed; a run of "
                "`airflow dags test` stopped with Ctrl-C still reads running: give --force for that one"
            )
