"""The task's budget holds across its tries: the reservations it holds, what earlier tries billed, settling.

``RemoteTrainingOperator`` holds the task's money before a job starts (the spend gate's reservation, or one of
the spot decision's estimate), holds it again on a retry for what the earlier tries have not billed yet, and
settles it with the attempts' total at the end. Split from :mod:`costaware.training.attempt_effects`, which
keeps the side effects of one attempt (its job request, its bill, its stop).
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

from costaware.core.ledger import reservation_holder
from costaware.training.attempt_effects import total_usd
from costaware.training.attempts import AttemptState
from costaware.training.plan import RemotePlan

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.ledger import Reservation


log = logging.getLogger(__name__)


def task_holder(plan: RemotePlan) -> str:
    """The reservation holder of the training's task (the spend gate reserves under the same one)."""
    ident = plan.identity
    return reservation_holder(ident["dag_id"], ident["run_id"], ident["task_id"], ident["map_index"])


def open_task_reservations(ledger: Ledger, plan: RemotePlan) -> list[Reservation]:
    """The task's open reservations (its holder exactly, not a holder it prefixes, e.g. ``/egress``)."""
    return ledger.open_holds_of(task_holder(plan))


class EarlierAttempt(NamedTuple):
    """One attempt entry an earlier try of the task billed: its attempt, its job and its cost.

    The attempt and the job are None where the entry's note does not say them (an older costaware).
    """

    attempt: int | None
    job: str | None
    usd: Decimal
    cause: str = ""  # the entry's cause: "code_error" ended the task for good


def billed_by_earlier_tries(ledger: Ledger, plan: RemotePlan) -> tuple[Decimal, list[EarlierAttempt]]:
    """What this task's attempts billed before this try, and each entry, oldest first ($0 and [] at first).

    An Airflow retry follows the same jobs again by their names (attempt 1, 2, ...), so what its earlier
    tries' attempts billed counts against ``max_usd`` once more in the retry's own state (at the ledger's
    figure): the budgets need to hold only the rest. A run the retry does not follow again
    (:func:`billed_not_followed`) counts against the cap all the same.
    """
    from costaware.training.remote import attempt_of_note, job_of_attempt_note

    mine = reversed(task_attempt_entries(ledger, plan))  # oldest first: a name's last run is its last entry
    billed = [
        EarlierAttempt(
            attempt_of_note(str(row["note"] or "")),
            job_of_attempt_note(str(row["note"] or "")),
            Decimal(row["usd"]),
            str(row["cause"] or ""),
        )
        for row in mine
    ]
    return sum((entry.usd for entry in billed), Decimal(0)), billed


def task_attempt_entries(ledger: Ledger, plan: RemotePlan) -> list[dict[str, Any]]:
    """The attempt entries of this task, every try's (those a remote backend billed, not estimates)."""
    ident = plan.identity
    rows = ledger.entries(dag_id=str(ident["dag_id"]), run_id=str(ident["run_id"]))
    return [
        row
        for row in rows
        if row["task_id"] == ident["task_id"]
        and int(row["map_index"]) == int(ident.get("map_index", -1))
        and str(row["price_source"] or "").startswith("remote:")
        and not row["estimated"]
    ]


def billed_not_followed(billed: list[EarlierAttempt]) -> Decimal:
    """What earlier tries billed for runs a retry following their attempts does not see again.

    ``billed``: the earlier entries, oldest first (:func:`billed_by_earlier_tries`). A job with two
    entries ran twice under its name (lost by the backend, submitted again): the retry follows its last run
    only. (A retry that cannot follow the attempts in order goes on after them: see the operator.)
    """
    last_run = {entry.job: index for index, entry in enumerate(billed) if entry.job is not None}
    return sum(
        (e.usd for index, e in enumerate(billed) if e.job is not None and last_run[e.job] != index),
        Decimal(0),
    )


def settle_reservation(ledger: Ledger, state: AttemptState) -> None:
    """Settle the task's open reservation (the spend gate's, or our own) with the attempts' total."""
    for reservation in open_task_reservations(ledger, state.plan):
        # Every attempt was billed as it ended, an earlier try's under that try's hold.
        ledger.settle(reservation.id, total_usd(state), already_recorded=True)


def gate_reservation(ledger: Ledger, plan: RemotePlan) -> Reservation | None:
    """The task's open reservation, if any: a spend gate's, or the task's own (``budget_scope``)."""
    return next(iter(open_task_reservations(ledger, plan)), None)


def hold_again(
    ledger: Ledger, plan: RemotePlan, *, billed_before: Decimal = Decimal(0)
) -> tuple[Reservation | None, str | None]:
    """An Airflow retry of a task behind a spend gate: hold again, in the gate's scope, from $0.

    A failed try the task retries leaves the gate's hold open (paid in part): ``reserve`` returns it as it
    stands. Where it expired or was released meanwhile, the retry's attempts would run with nothing held in
    the budgets. Returns the new open reservation (grow it with :func:`hold_cap`), or None where no
    gate ever reserved for this task, or its budget is gone; and, where a budget is already past its cap
    (an estimate overrun, another task's approved overage), why nothing could be held. The caller then lets
    the retry spend nothing more than its earlier tries billed: it follows the job its failed try left
    running, up to that cap, and starts no new one.

    Where the gate's reservation was itself an approved overage, the approval stands for the retry of the
    same task: what it approved, less ``billed_before``, is held again past the cap under the same
    approver, and audited as such.
    """
    from costaware.core.errors import BudgetExceededError, BudgetNotFoundError

    holder = task_holder(plan)
    earlier = ledger.latest_reservation(holder)
    if earlier is None:
        return None, None
    amount, approved_past_cap = Decimal(0), {}
    approval = _approval_of(ledger, earlier)
    if approval is not None:
        approver, approved = approval
        amount = max(approved - billed_before, Decimal(0))
        approved_past_cap = {
            "approved_by": approver,
            # The amount first approved, so that a second retry holds it less what was billed, once.
            "approval": {
                "retry_of": earlier.id,
                "billed_before": str(billed_before),
                "approved_usd": str(approved),
            },
        }
    try:
        held = ledger.reserve(
            earlier.scope,
            amount,
            gpu_hours=earlier.gpu_hours,  # what the gate held of a GPU-hour cap, held again
            holder=holder,
            run_id=plan.identity["run_id"],
            dag_id=plan.identity["dag_id"],
            ttl=earlier.expires_at - earlier.created_at,  # the gate's reservation_ttl
            purpose=f"the retry of task {plan.identity['task_id']!r}",
            **approved_past_cap,  # type: ignore[arg-type]
        )
    except BudgetExceededError as e:
        return None, str(e)
    except BudgetNotFoundError as e:
        log.warning("a retry: nothing held again in %s (%s)", earlier.scope, e)
        return None, None
    return held, None


def _approval_of(ledger: Ledger, reservation: Reservation) -> tuple[str, Decimal] | None:
    """Who approved ``reservation`` as an overage and the amount first approved, or None.

    The amount is the gate's approved reservation: a retry's own approval carries it on
    (``approved_usd``), since the retry's hold is already net of what the tries before it billed.
    """
    from costaware.adapters.ledger.audit import audit_log

    for entry in reversed(audit_log(ledger, action="approval")):
        if entry.target == reservation.holder and entry.details.get("reservation_id") == reservation.id:
            approved = entry.details.get("approved_usd") or entry.details.get("usd") or reservation.usd
            return entry.actor, Decimal(str(approved))
    return None


def hold_cap(ledger: Ledger, reservation: Reservation, max_usd: Decimal) -> Decimal:
    """Grow the gate's ``reservation`` to ``max_usd``, as far as its budgets allow; return what it holds.

    The gate reserved its own estimate, which can be less than the cap the attempts may bill: the budgets
    hold all of it only once the reservation does. Where they have less room, what the reservation holds is
    the most this task may spend without passing them.
    """
    return ledger.grow(reservation.id, max_usd).usd


def reserve_estimate(
    ledger: Ledger, plan: RemotePlan, budget_scope: str, *, billed_before: Decimal = Decimal(0)
) -> None:
    """Reserve what the task may spend in ``budget_scope``: its ``max_usd``, else the plan's estimate.

    For a training that no spend gate reserved for; the caller checks that the plan has one of them. The
    cap is the most the attempts can bill, so a budget that holds it can never be passed by them; a retry
    holds what is left of it (or of the estimate) after ``billed_before`` (:func:`billed_by_earlier_tries`),
    already spent.
    """
    ident = plan.identity
    ledger.reserve(
        budget_scope,
        max(Decimal(plan.max_usd or plan.estimated_usd or 0) - billed_before, Decimal(0)),
        holder=task_holder(plan),
        run_id=ident["run_id"],
        dag_id=ident["dag_id"],
        purpose=f"remote training {ident['task_id']}",
    )
