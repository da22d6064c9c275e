"""Spend gates that did not get their money at once, for the Cost page: refused, skipped or waiting.

A ``SpendCapSensor`` notes a refusal or a wait here; a wait that ends with a reservation is marked
``reserved``. A gate with ``on_exceeded="approve"`` notes ``approval`` while it waits for a person, then
``approved`` (with who approved) or ``rejected``. A row still open when its gate task ends (a wait that
timed out) is marked ``gave_up``, and one still open when its run ends ``run_ended``, by the cost listener.
Rows live in the ledger database (table ``costaware_gate_requests``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import String, func, select

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.core.ledger import utcnow
from costaware.core.money import from_micros, to_micros

STATUSES = (
    "refused",
    "skipped",
    "waiting",
    "reserved",
    "approval",
    "approved",
    "rejected",
    "gave_up",
    "run_ended",
)
#: A row in one of these states is updated by the gate's next note instead of adding a row.
OPEN_STATUSES = ("waiting", "approval")
#: Notes that end an open row; with no open row there is nothing to show (the money came at once).
ENDING_STATUSES = ("reserved", "approved", "rejected")
#: What a row's ``budget`` column holds: the gate lists the budgets it passed in it, whole names only.
BUDGET_CHARACTERS = cast(int, cast(String, schema.gate_requests.c.budget.type).length)
#: The longest ``message`` a row keeps (the Cost page shows it in a table cell).
MESSAGE_CHARACTERS = 2000
#: Ends a message cut to fit: the gate logs it whole (``SpendCapSensor._note``).
CUT_MESSAGE = " … [cut here: the gate task's log holds the whole message]"


def fitted_message(message: str) -> str:
    """``message`` as a row keeps it: whole, or cut to fit with :data:`CUT_MESSAGE` at its end.

    Cut silently, a refusal naming many long budgets ended mid-name, as if that were all it said.
    """
    if len(message) <= MESSAGE_CHARACTERS:
        return message
    return message[: MESSAGE_CHARACTERS - len(CUT_MESSAGE)] + CUT_MESSAGE


@dataclass(frozen=True, slots=True)
class GateRequest:
    """One spend gate's request that was refused or had to wait."""

    requested_at: datetime
    updated_at: datetime
    dag_id: str
    run_id: str
    task_id: str
    for_task_id: str
    scope: str
    budget: str
    usd: Decimal
    status: str
    message: str


def note_gate_request(
    ledger: LedgerDatabase,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    for_task_id: str,
    scope: str,
    budget: str,
    usd: Decimal,
    status: str,
    message: str,
) -> None:
    """Record (or update) the request of one gate task instance; a repeated wait only updates its time."""
    if status not in STATUSES:
        raise ValueError(f"gate request status {status!r}: use one of {', '.join(STATUSES)}")
    t = schema.gate_requests
    now = utcnow()
    key = (t.c.dag_id == dag_id, t.c.run_id == run_id, t.c.task_id == task_id, t.c.map_index == map_index)
    open_row = select(t.c.id).where(*key, t.c.status.in_(OPEN_STATUSES))
    if status in ENDING_STATUSES:
        # Most gates get their money at once: a read, not the ledger's write lock, finds nothing to end.
        with ledger.reading() as conn:
            if conn.execute(open_row).first() is None:
                return
    with ledger.transaction() as conn:
        waiting = conn.execute(open_row).first()
        values: dict[str, Any] = {"updated_at": now, "status": status}
        if status not in ENDING_STATUSES:  # the end of a wait keeps what was asked and the budget's answer
            values.update(
                budget=budget[:BUDGET_CHARACTERS],
                usd_micros=to_micros(usd),
                message=fitted_message(message),
            )
        elif message:  # who approved or rejected
            values.update(message=fitted_message(message))
        if waiting is not None:
            conn.execute(t.update().where(t.c.id == waiting[0]).values(**values))
            return
        if status in ENDING_STATUSES:
            return  # reserved at once: nothing to show
        conn.execute(
            t.insert().values(
                requested_at=now,
                dag_id=dag_id,
                run_id=run_id,
                task_id=task_id,
                map_index=map_index,
                for_task_id=for_task_id,
                scope=_canonical(scope)[:512],
                **values,
            )
        )


def asked_budgets(
    ledger: LedgerDatabase, *, dag_id: str, run_id: str, task_id: str, map_index: int
) -> list[str]:
    """The budgets an open approval request of this gate was asked with, as noted; [] when none is open.

    Names are joined with ``", "``, which no budget name holds (a tag value has no ``,``).
    """
    t = schema.gate_requests
    with ledger.reading() as conn:
        noted = conn.execute(
            select(t.c.budget)
            .where(
                t.c.dag_id == dag_id,
                t.c.run_id == run_id,
                t.c.task_id == task_id,
                t.c.map_index == map_index,
                t.c.status == "approval",
            )
            .order_by(t.c.id.desc())
        ).first()
    return [name for name in (noted[0] if noted else "").split(", ") if name]


def close_open_requests(
    ledger: LedgerDatabase,
    *,
    dag_id: str,
    run_id: str,
    status: str,
    task_id: str | None = None,
    map_index: int = -1,
) -> int:
    """Mark the run's requests still waiting or asking for approval (or one gate task's) ``status``.

    The gate's own notes end a wait it lived through; one that timed out, failed or whose run ended stayed
    "waiting" on the Cost page for good. Returns how many rows were closed.
    """
    if status not in ("gave_up", "run_ended"):
        raise ValueError(f"gate requests are closed as gave_up or run_ended, not {status!r}")
    t = schema.gate_requests
    match = [t.c.dag_id == dag_id, t.c.run_id == run_id, t.c.status.in_(OPEN_STATUSES)]
    if task_id is not None:
        match += [t.c.task_id == task_id, t.c.map_index == map_index]
    # Most runs and tasks have no open row: a read, not the ledger's write lock, finds nothing to close.
    with ledger.reading() as conn:
        if conn.execute(select(t.c.id).where(*match).limit(1)).first() is None:
            return 0
    with ledger.transaction() as conn:
        return int(conn.execute(t.update().where(*match).values(status=status, updated_at=utcnow())).rowcount)


def _canonical(scope: str) -> str:
    """``scope`` as :class:`~costaware.core.budgets.Scope` writes it (sorted, no spaces), else as given.

    The scope filter matches whole ``k=v`` parts of it: ``"team=ml, project=churn"`` stored as written was
    never listed under ``project=churn``.
    """
    from costaware.core.budgets import Scope
    from costaware.core.errors import ConfigurationError

    try:
        return str(Scope.parse(scope))
    except ConfigurationError:  # noted as the gate had it; the gate itself refused it
        return scope


def gate_requests(
    ledger: LedgerDatabase,
    *,
    since: datetime,
    until: datetime | None = None,
    dag_id: str | None = None,
    dag_ids: Collection[str] | None = None,
    scope: str = "*",
    limit: int = 50,
) -> list[GateRequest]:
    """Requests last noted from ``since`` to ``until`` (exclusive), newest first.

    Optionally only of one DAG, of ``dag_ids``, or of gates whose scope has every tag of ``scope`` (the
    rule a ledger entry matches a scope by).
    """
    from sqlalchemy import literal

    from costaware.core.budgets import Scope

    t = schema.gate_requests
    query = select(t).where(t.c.updated_at >= since)
    if until is not None:
        query = query.where(t.c.updated_at < until)
    # SQLite's LIKE ignores case (PostgreSQL's does not): a gate of project=Flight-Delays was listed beside
    # the $0 of that scope's spend. instr and strpos match the text as it is.
    find = func.instr if ledger.is_sqlite else func.strpos
    for key, value in Scope.parse(scope).tags:
        # Stored scopes are canonical ("k=v,k=v", values without ',' or '='): match whole parts only.
        query = query.where(find(literal(",") + t.c.scope + ",", f",{key}={value},") > 0)
    if dag_id:
        query = query.where(t.c.dag_id == dag_id)
    if dag_ids is not None:  # the DAGs a Cost page user may read
        query = query.where(t.c.dag_id.in_(sorted(dag_ids)))
    with ledger.reading() as conn:
        rows = conn.execute(query.order_by(t.c.updated_at.desc(), t.c.id.desc()).limit(limit)).mappings()
        return [
            GateRequest(
                requested_at=row["requested_at"],
                updated_at=row["updated_at"],
                dag_id=row["dag_id"],
                run_id=row["run_id"],
                task_id=row["task_id"],
                for_task_id=row["for_task_id"],
                scope=row["scope"],
                budget=row["budget"],
                usd=from_micros(row["usd_micros"]),
                status=row["status"],
                message=row["message"],
            )
            for row in rows
        ]
