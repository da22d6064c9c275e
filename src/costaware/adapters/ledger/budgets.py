"""Budgets in the ledger: set, list and delete them, and where each stands in its period.

A budget's usage is what its scope spent in the period (actual entries) plus what open reservations hold in
it, read in one statement so PostgreSQL's READ COMMITTED sees both at the same instant.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, RowMapping, Select, and_, case, func, or_, select, text, true

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.audit import append_audit
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.adapters.ledger.queries import scope_conditions
from costaware.core.budget_listing import budgets_said
from costaware.core.budgets import (
    Budget,
    Period,
    PeriodWindow,
    Scope,
    is_run_key,
    period_window,
    run_key,
    run_of_key,
    unset_problem,
)
from costaware.core.errors import (
    BudgetNotFoundError,
    ConfigurationError,
    ReservationNotFoundError,
)
from costaware.core.ledger import BudgetUsage, utcnow
from costaware.core.money import format_usd, from_micros, to_micros

log = logging.getLogger(__name__)

#: Serialises budget upserts on PostgreSQL (SQLite's write lock already does).
UPSERT_LOCK = 74210032


def set_budget(ledger: LedgerDatabase, budget: Budget, *, actor: str) -> Budget:
    """Create or replace the budget of (scope, period), audited in the same transaction.

    Returns the budget as stored: its caps to the micro-dollar (and micro-GPU-hour) the ledger keeps.
    """
    cap_micros = to_micros(budget.cap_usd)
    gpu_micros = None if budget.cap_gpu_hours is None else to_micros(budget.cap_gpu_hours)
    values = {
        "cap_usd_micros": cap_micros,
        "cap_gpu_hours_micros": gpu_micros,
        "timezone": budget.timezone,
        "updated_at": utcnow(),
    }
    t = schema.budgets
    with ledger.transaction() as conn:
        ledger.advisory_lock(conn, UPSERT_LOCK)
        found = conn.execute(
            select(t.c.id, t.c.cap_usd_micros).where(
                t.c.scope == str(budget.scope), t.c.period == budget.period.value
            )
        ).first()
        if found:
            conn.execute(t.update().where(t.c.id == found[0]).values(**values))
        else:
            conn.execute(t.insert().values(scope=str(budget.scope), period=budget.period.value, **values))
        append_audit(
            conn,
            actor=actor,
            action="budget_set",
            target=budget.label,
            details={
                "old_cap_usd": None if found is None else str(from_micros(found[1])),
                "new_cap_usd": str(from_micros(cap_micros)),
                "cap_gpu_hours": None if budget.cap_gpu_hours is None else str(budget.cap_gpu_hours),
                "timezone": budget.timezone,
            },
        )
    log.info("budget %s set to %s", budget.label, format_usd(budget.cap_usd))
    return replace(
        budget,
        cap_usd=from_micros(cap_micros),
        cap_gpu_hours=None if gpu_micros is None else from_micros(gpu_micros),
    )


def list_budgets(ledger: LedgerDatabase) -> list[Budget]:
    """Every budget, by scope."""
    with ledger.reading() as conn:
        rows = conn.execute(select(schema.budgets).order_by(schema.budgets.c.scope)).mappings().all()
    return [budget_from_row(row) for row in rows]


def delete_budget(
    ledger: LedgerDatabase, scope: str | Scope, period: str | Period, *, actor: str = "costaware"
) -> Budget | None:
    """Delete the budget of (scope, period), audited in the same transaction; None when there is none.

    The spend it counted stays in the ledger (entries are not a budget's). Its closed holds go with it:
    they count in no budget once their reservation is settled, released or expired, and each reservation
    keeps the labels of the budgets it was held in. Its alert settings go too; the alerts it sent stay.

    Raises:
        ConfigurationError: a reservation still holds money in it (a task is running on it).
    """
    t, h = schema.budgets, schema.holds
    key = (str(Scope.parse(scope)), Period.parse(period).value)
    now = utcnow()
    with ledger.transaction() as conn:
        ledger.advisory_lock(conn, UPSERT_LOCK)
        query = select(t).where(t.c.scope == key[0], t.c.period == key[1])
        if not ledger.is_sqlite:
            # The row lock reserve and grow take: none holds money in it while it goes, and a later
            # reserve, re-reading under its lock, no longer sees it.
            query = query.with_for_update()
        row = conn.execute(query).mappings().first()
        if row is None:
            return None
        budget = budget_from_row(row)
        held = conn.execute(
            select(func.count(), func.coalesce(func.sum(h.c.usd_micros), 0)).where(
                h.c.budget_id == row["id"], h.c.open.is_(True), h.c.expires_at > now
            )
        ).one()
        if held[0]:
            raise ConfigurationError(
                f"budget '{budget.label}' has {held[0]} open reservation(s) holding "
                f"{format_usd(from_micros(held[1]))}: delete it once the tasks that hold them have ended "
                f"(`costaware budget holds --scope '{budget.scope}'` lists them and their tasks)"
            )
        conn.execute(h.delete().where(h.c.budget_id == row["id"]))
        conn.execute(t.delete().where(t.c.id == row["id"]))
        # Its alert settings go too: a budget set again under the same name starts with the defaults. The
        # alerts it sent stay (append-only, as the audit): a threshold sent this period is not sent again.
        conn.execute(schema.alert_rules.delete().where(schema.alert_rules.c.budget == budget.label))
        append_audit(
            conn,
            actor=actor,
            action="budget_delete",
            target=budget.label,
            details={
                "cap_usd": str(budget.cap_usd),
                "cap_gpu_hours": None if budget.cap_gpu_hours is None else str(budget.cap_gpu_hours),
                "timezone": budget.timezone,
            },
        )
    log.info("budget %s deleted", budget.label)
    return budget


def usage(
    ledger: LedgerDatabase,
    scope: str | Scope,
    *,
    at: datetime | None = None,
    run_id: str | None = None,
    dag_id: str | None = None,
    without: str | None = None,
) -> list[BudgetUsage]:
    """Where each budget that applies to ``scope`` stands now (or at ``at``).

    ``without``: a reservation id whose holds are left out, as :func:`budget_usage` says.

    Raises:
        BudgetNotFoundError: no budget applies to the scope.
        ReservationNotFoundError: the ledger holds no reservation ``without``.
    """
    wanted = Scope.parse(scope)
    at = at or utcnow()
    with ledger.reading() as conn:
        if without is not None and not _reservation_exists(conn, without):
            # Ignored, a typo read the budgets with the hold still counted: less room than the reserve it
            # stands for (``replacing=``, which refuses the same id) would have.
            raise ReservationNotFoundError(
                f"reservation {without!r}, to leave out of the usage of {wanted} (without=), is not in this "
                "ledger: give the id this ledger's reserve returned, or leave without out"
            )
        found = applicable(conn, wanted, run_id, is_sqlite=ledger.is_sqlite, at=at, dag_id=dag_id)
        return [budget_usage(conn, bid, budget, window, at, without=without) for bid, budget, window in found]


def _reservation_exists(conn: Connection, reservation_id: str) -> bool:
    r = schema.reservations
    return conn.execute(select(r.c.id).where(r.c.id == reservation_id)).first() is not None


def suggested_period(scope: Scope) -> str:
    """The period a new budget for ``scope`` most likely wants: a tuning study's is its whole life."""
    return "total" if any(key == "study" for key, _ in scope.tags) else "month"


def applicable(
    conn: Connection,
    wanted: Scope,
    run_id: str | None,
    *,
    is_sqlite: bool,
    lock: bool = False,
    at: datetime | None = None,
    dag_id: str | None = None,
) -> list[tuple[int, Budget, PeriodWindow]]:
    """(id, budget, its current period) of every budget that covers ``wanted``.

    With ``lock`` on PostgreSQL the covering budget rows stay locked (``FOR UPDATE``) until the commit.

    Raises:
        BudgetNotFoundError: no budget covers ``wanted`` (the message lists the budgets there are).
    """
    t = schema.budgets
    rows = conn.execute(select(t).order_by(t.c.id)).mappings().all()
    covering = [row for row in rows if budget_from_row(row).scope.covers(wanted)]
    if lock and covering and not is_sqlite:
        # Lock only the budgets this reservation counts against, in id order (no deadlocks), and
        # re-read them under the lock: unrelated projects never wait for each other.
        ids = [row["id"] for row in covering]
        covering = list(
            conn.execute(select(t).where(t.c.id.in_(ids)).order_by(t.c.id).with_for_update()).mappings()
        )
    found: list[tuple[int, Budget, PeriodWindow]] = []
    for row in covering:
        budget = budget_from_row(row)
        if budget.period is Period.RUN and not run_id:
            # Per-run caps need a run; spend outside a run is not capped by them. A reservation says so: one
            # written without run_id passed a per-run cap in silence.
            if lock:
                log.warning(
                    "budget %s is per run: this reservation gave no run_id, so that cap does not apply",
                    budget.label,
                )
            continue
        window = period_window(budget.period, at or utcnow(), budget.timezone, run_id, dag_id)
        found.append((row["id"], budget, window))
    if not found:
        every = [budget_from_row(r) for r in rows]
        # A study's own budgets (one per run where the run names the study) are counted, not named: named,
        # this list grew with every nightly tuning run.
        known = budgets_said(every, wanted)
        unset = next(filter(None, (unset_problem(key, value) for key, value in wanted.tags)), None)
        if unset is not None:
            # `budget set` over it is refused for that reason: its hint gave a command that fails.
            raise BudgetNotFoundError(f"no budget covers scope '{wanted}' (budgets: {known}): {unset}")
        # A budget over this scope and more tags (a study's 'project=churn,study=s1'): that is the one asked
        # for; setting one over the shorter scope, as the generic hint says, would make a second budget.
        narrower = [b for b in every if wanted.covers(b.scope) and b.scope != wanted]
        if narrower:
            labels = budgets_said(narrower, wanted, fold_studies=False)
            raise BudgetNotFoundError(
                f"no budget covers scope '{wanted}' alone; {labels} cover(s) it with more tags (to see one, "
                f"give its whole scope, e.g. --scope '{narrower[0].scope}'); or set one with `costaware "
                f"budget set --scope '{wanted}' --period {suggested_period(wanted)} --cap-usd <USD>`"
            )
        # A mistyped tag value (a DAG param 'flight_delays' for 'flight-delays') was told only to make a
        # budget for the typo.
        close = _closest_scope(wanted, [b.scope for b in every])
        raise BudgetNotFoundError(
            f"no budget covers scope '{wanted}'{close} (budgets: {known}); set one with "
            f"`costaware budget set --scope '{wanted}' --period {suggested_period(wanted)} --cap-usd <USD>`"
        )
    return found


def _closest_scope(wanted: Scope, scopes: list[Scope]) -> str:
    """`` (did you mean 'k=v'?)`` for a budget whose tag names ``wanted`` has, with values close to its own.

    Only the values are compared: the shared ``project=`` alone made 'project=cv' the hint for
    'project=churn', another team's budget. A budget over fewer tag names than the scope (a task's scope
    carries more) is compared on its own names; one whose values all match covers the scope (a per-run
    budget skipped for want of a run) and is no hint.
    """
    given = dict(wanted.tags)
    best, best_ratio = "", 0.0
    for scope in scopes:
        names = [key for key, _ in scope.tags]
        if not names or not set(names) <= set(given):
            continue
        theirs = ",".join(value for _, value in scope.tags)
        ours = ",".join(given[name] for name in names)
        ratio = difflib.SequenceMatcher(None, ours, theirs).ratio()
        if ours != theirs and ratio >= 0.6 and ratio > best_ratio:
            best, best_ratio = str(scope), ratio
    return f" (did you mean {best!r}?)" if best else ""


def _holds_of_run(period_key: Any, key: str) -> Any:
    """The holds a run window ``run@<dag>/<run>`` (or ``run:<run>``, any DAG's) counts.

    Holds made before run keys named their DAG are keyed ``run:<run>``: a DAG's run counts them too (the
    run id's, whichever DAG: never less than it held); a window of every DAG's run counts every DAG's hold.
    """
    dag_id, run_id = run_of_key(key)
    any_dag = run_key(run_id)
    if dag_id:
        return period_key.in_([key, any_dag])
    # 'run@<dag>/<run>' whose run is exactly this one: the DAG id (which has no '/') is all before it. Not
    # LIKE: ending in '/r' also matched run 'x/r' of DAG 'd' ('run@d/x/r'), and SQLite's LIKE ignores case.
    # The '/'s are counted, not the DAG id cut out: PostgreSQL refuses a negative substr length (a short key).
    tail = f"/{run_id}"
    length = func.length(period_key)
    slashes = length - func.length(func.replace(period_key, "/", ""))
    return or_(
        period_key == any_dag,
        and_(
            func.substr(period_key, 1, len("run@")) == "run@",
            length > len("run@") + len(tail),
            func.substr(period_key, length - len(tail) + 1) == tail,
            slashes == tail.count("/"),
        ),
    )


def budget_usage(
    conn: Connection,
    budget_id: int,
    budget: Budget,
    window: PeriodWindow,
    at: datetime,
    *,
    without: str | None = None,
) -> BudgetUsage:
    """What the budget's scope spent in ``window`` and what open reservations hold in it at ``at``.

    ``without``: the id of a reservation whose holds are left out, as if it were closed: the room a
    reservation replacing it is weighed against (a reserve closes the hold it replaces, then reads this).
    What entries paid from it stays spent. Added back by hand instead (its amount, or what every entry
    paid from it), the room was wrong where an entry paid from it is outside this budget's scope.
    """
    held = held_in(budget_id, budget, window, at, without=without)
    spent = spent_in(budget, window)
    # One statement, so PostgreSQL's READ COMMITTED sees spent and held at the same instant.
    spent_cte, held_cte = spent.cte("spent"), held.cte("held")
    both = spent_cte.join(held_cte, text("1 = 1"))
    row = conn.execute(select(*spent_cte.c, *held_cte.c).select_from(both)).one()
    return usage_of(budget, window, row)


def usage_of(budget: Budget, window: PeriodWindow, row: Any) -> BudgetUsage:
    """The usage of ``budget`` from a row of micros: spent USD and GPU-hours, then held USD and GPU-hours."""
    return BudgetUsage(
        label=budget.label,
        period_key=window.key,
        cap_usd=budget.cap_usd,
        spent_usd=from_micros(row[0]),
        reserved_usd=from_micros(row[2]),
        cap_gpu_hours=budget.cap_gpu_hours,
        spent_gpu_hours=from_micros(row[1]),
        reserved_gpu_hours=from_micros(row[3]),
    )


def spent_in(budget: Budget, window: PeriodWindow) -> Select[tuple[Any, Any]]:
    """What the budget's scope spent in ``window``: one row of USD and GPU-hour micros."""
    e = schema.entries
    conditions = [e.c.estimated.is_(False), *scope_conditions(budget.scope)]
    if is_run_key(window.key):
        # 'run@<dag>/<run>' (a run of one DAG), or 'run:<run>' where the DAG was not given
        dag_id, run_id = run_of_key(window.key)
        conditions.append(e.c.run_id == run_id)
        if dag_id:
            conditions.append(e.c.dag_id == dag_id)
    if window.start is not None and window.end is not None:
        conditions += [e.c.incurred_at >= window.start, e.c.incurred_at < window.end]
    return select(
        func.coalesce(func.sum(e.c.usd_micros), 0), func.coalesce(func.sum(e.c.gpu_hours_micros), 0)
    ).where(and_(true(), *conditions))


def held_in(
    budget_id: int,
    budget: Budget,
    window: PeriodWindow,
    at: datetime,
    *,
    without: str | None = None,
    only: str | None = None,
) -> Select[tuple[Any, Any]]:
    """What open holds hold in the budget's ``window`` at ``at``: one row of USD and GPU-hour micros.

    Each hold counts less what entries of the budget's scope paid from it (never below nothing).
    ``without``: a reservation whose holds are left out (see :func:`budget_usage`); ``only``: the one
    reservation whose holds are counted, what releasing it gives the budget back.
    """
    e = schema.entries
    h, r = schema.holds, schema.reservations
    # A day or month hold still open may land its cost in this period: a hold taken at 23:50 whose job
    # ends after midnight is billed tomorrow, so it counts against tomorrow too. It counts from the period
    # its reservation was made in, by that instant, not by its key: the key is of the budget's time zone
    # then, and after a change of zone west (UTC to Los Angeles) today's key sorted before the key of a hold
    # made minutes ago, so that hold counted nowhere and its money was handed out again.
    # A run's hold counts against its own run only.
    if is_run_key(window.key):
        in_period = _holds_of_run(h.c.period_key, window.key)
    elif window.start is None or window.end is None:
        in_period = h.c.period_key == window.key
    else:
        made = select(r.c.id).where(r.c.id == h.c.reservation_id, r.c.created_at < window.end)
        in_period = made.correlate(h).exists()

    # An open hold counts less what it has paid for already: a training's attempts are billed while its
    # hold stays open until the task ends, and counted twice (spent and held) the budget refused others.
    # Only what this budget counts as spent: an entry of other tags paid from the hold is not in its spend.
    def paid(micros: Any) -> Any:
        linked = (
            e.c.reservation_id == h.c.reservation_id,
            e.c.estimated.is_(False),
            *scope_conditions(budget.scope),
        )
        return select(func.coalesce(func.sum(micros), 0)).where(*linked).correlate(h).scalar_subquery()

    rest_usd = h.c.usd_micros - paid(e.c.usd_micros)
    rest_gpu = h.c.gpu_hours_micros - paid(e.c.gpu_hours_micros)
    return select(
        func.coalesce(func.sum(case((rest_usd > 0, rest_usd), else_=0)), 0),
        func.coalesce(func.sum(case((rest_gpu > 0, rest_gpu), else_=0)), 0),
    ).where(
        h.c.budget_id == budget_id,
        in_period,
        h.c.open.is_(True),
        h.c.expires_at > at,
        true() if without is None else h.c.reservation_id != without,
        true() if only is None else h.c.reservation_id == only,
    )


def budget_from_row(row: RowMapping) -> Budget:
    """The budget of one ``costaware_budgets`` row."""
    return Budget(
        scope=Scope.parse(row["scope"]),
        period=Period(row["period"]),
        cap_usd=from_micros(row["cap_usd_micros"]),
        cap_gpu_hours=None
        if row["cap_gpu_hours_micros"] is None
        else from_micros(row["cap_gpu_hours_micros"]),
        timezone=row["timezone"],
    )
