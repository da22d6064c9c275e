"""Reports of the ledger: spend per group, totals, spend per day, the costliest tries, budget burn-down.

Every filter is a bound parameter of a SQLAlchemy expression; no SQL is built from strings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, String, and_, case, cast, distinct, func, or_, select, true
from sqlalchemy.sql.elements import ColumnElement

from costaware.adapters.ledger import budgets, schema
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.adapters.ledger.queries import entry_conditions, group_column
from costaware.core.budgets import Budget, Period, Scope, parse_timezone, period_window
from costaware.core.ledger import UNPRICED, BudgetUsage, ReportRow, total_kg_co2e, utcnow
from costaware.core.money import from_micros


def spent(
    ledger: LedgerDatabase,
    scope: str | Scope = "*",
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    run_id: str | None = None,
) -> Decimal:
    """Actual USD spent by entries in ``scope`` from ``since`` (inclusive) to ``until`` (exclusive)."""
    e = schema.entries
    conditions = [e.c.estimated.is_(False), *entry_conditions(since, until, None, run_id, scope)]
    with ledger.reading() as conn:
        total = conn.execute(select(func.sum(e.c.usd_micros)).where(and_(true(), *conditions))).scalar()
    return from_micros(total)


def report(
    ledger: LedgerDatabase,
    *,
    group_by: str = "task",
    since: datetime | None = None,
    until: datetime | None = None,
    dag_id: str | None = None,
    run_id: str | None = None,
    scope: str | Scope = "*",
    dag_ids: frozenset[str] | None = None,
) -> list[ReportRow]:
    """Spend per group, most expensive first; see ``Ledger.report`` for the arguments.

    Each row's ``kg_co2e`` sums the known estimates of its actual entries (None when none has one) and
    ``co2e_unknown`` counts its actual compute entries whose emissions are unknown.
    """
    e = schema.entries
    key = group_column(group_by)
    conditions = entry_conditions(since, until, dag_id, run_id, scope, dag_ids=dag_ids)
    actual = e.c.estimated.is_(False)
    compute = e.c.kind == "compute"  # storage and egress entries carry no emissions estimate
    usd = func.sum(case((actual, e.c.usd_micros), else_=0))
    query = (
        select(
            key.label("grp"),
            func.count().label("n"),
            usd.label("usd"),
            func.sum(case((actual, 0), else_=e.c.usd_micros)).label("est"),
            func.sum(case((actual, func.coalesce(e.c.on_demand_usd_micros, e.c.usd_micros)), else_=0)).label(
                "od"
            ),
            func.sum(case((and_(actual, e.c.unit == "hour"), e.c.quantity_micros), else_=0)).label("hours"),
            # NULL when no actual entry of the group has an estimate (SUM skips NULLs): unknown, not 0.
            func.sum(case((actual, e.c.kg_co2e_micros), else_=None)).label("kg"),
            func.sum(case((and_(actual, compute, e.c.kg_co2e_micros.is_(None)), 1), else_=0)).label(
                "unknown"
            ),
        )
        .where(and_(true(), *conditions))
        .group_by(key)
        .order_by(usd.desc())
    )
    with ledger.reading() as conn:
        rows = conn.execute(query).all()
    return [
        ReportRow(
            group="(none)" if row.grp is None else str(row.grp),
            entries=int(row.n),
            usd=from_micros(row.usd),
            estimated_usd=from_micros(row.est),
            on_demand_usd=from_micros(row.od),
            hours=from_micros(row.hours),
            kg_co2e=None if row.kg is None else from_micros(row.kg),
            co2e_unknown=int(row.unknown or 0),
        )
        for row in rows
    ]


@dataclass(frozen=True, slots=True)
class Filters:
    """What a dashboard asks about: a time range, one DAG, a tag scope."""

    since: datetime | None = None
    until: datetime | None = None
    dag_id: str | None = None
    scope: str = "*"
    run_id: str | None = None
    dag_ids: frozenset[str] | None = None  # only these DAGs (a user's readable ones); None: every DAG

    def conditions(self) -> list[ColumnElement[bool]]:
        return entry_conditions(
            self.since, self.until, self.dag_id, self.run_id, self.scope, dag_ids=self.dag_ids
        )


@dataclass(frozen=True, slots=True)
class Summary:
    """Headline figures of a filter: spend, its on-demand price, estimates, cache reuse and egress."""

    usd: Decimal
    on_demand_usd: Decimal
    estimated_usd: Decimal
    entries: int
    failed_tries: int  # Airflow tries with a failed entry, each counted once
    preempted_tries: int  # those of them that failed because spot took the machine
    cache_hits: int
    cache_avoided_usd: Decimal
    egress_usd: Decimal
    egress_avoided_usd: Decimal
    #: Entries the listener could not price (a misspelt instance type, say), counted at $0.
    unpriced_entries: int = 0

    @property
    def savings_usd(self) -> Decimal:
        return self.on_demand_usd - self.usd


def summary(ledger: LedgerDatabase, filters: Filters) -> Summary:
    """Totals of the entries matching ``filters``, in one query."""
    e = schema.entries
    actual = e.c.estimated.is_(False)

    def total(condition: ColumnElement[bool], column: Any = e.c.usd_micros) -> Any:
        return func.coalesce(func.sum(case((condition, column), else_=0)), 0)

    def count(condition: ColumnElement[bool]) -> Any:
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    # One Airflow try may have several failed entries (a remote training's failed attempt and the worker's
    # own time in that try): tries are counted once each, by their key.
    try_key = (
        e.c.dag_id + "\x1f" + e.c.run_id + "\x1f" + e.c.task_id + "\x1f"
        + cast(e.c.map_index, String) + "\x1f" + cast(e.c.try_number, String)
    )  # fmt: skip

    def tries(condition: ColumnElement[bool]) -> Any:
        return func.count(distinct(case((condition, try_key), else_=None)))

    query = select(
        total(actual),
        total(actual, func.coalesce(e.c.on_demand_usd_micros, e.c.usd_micros)),
        total(~actual),
        func.count(),
        tries(and_(actual, e.c.outcome == "failed")),
        # A try that failed because spot took the machine (a remote attempt preempted within a try that
        # went on is "interrupted", not failed, and is no failed try).
        tries(and_(actual, e.c.outcome == "failed", e.c.cause == "preemption")),
        count(e.c.outcome == "cache_hit"),
        total(e.c.outcome == "cache_hit"),
        total(and_(actual, e.c.kind == "egress")),
        total(and_(~actual, e.c.kind == "egress")),
        count(e.c.price_source == UNPRICED),
    ).where(and_(true(), *filters.conditions()))
    with ledger.reading() as conn:
        row = conn.execute(query).one()
    return Summary(
        usd=from_micros(row[0]),
        on_demand_usd=from_micros(row[1]),
        estimated_usd=from_micros(row[2]),
        entries=int(row[3]),
        failed_tries=int(row[4]),
        preempted_tries=int(row[5]),
        cache_hits=int(row[6]),
        cache_avoided_usd=from_micros(row[7]),
        egress_usd=from_micros(row[8]),
        egress_avoided_usd=from_micros(row[9]),
        unpriced_entries=int(row[10]),
    )


def daily_spend(
    ledger: LedgerDatabase, filters: Filters, group_by: str = "dag"
) -> list[tuple[date, str, Decimal]]:
    """Actual USD per UTC day and group, oldest day first."""
    e = schema.entries
    key = group_column(group_by)
    day = func.date(_incurred_utc(ledger))
    query = (
        select(day, key, func.sum(e.c.usd_micros))
        .where(and_(e.c.estimated.is_(False), *filters.conditions()))
        .group_by(day, key)
        .order_by(day)
    )
    with ledger.reading() as conn:
        rows = conn.execute(query).all()
    return [(_as_date(d), "(none)" if g is None else str(g), from_micros(usd)) for d, g, usd in rows]


def costliest_tries(ledger: LedgerDatabase, filters: Filters, limit: int = 10) -> list[dict[str, Any]]:
    """The most expensive task tries, costliest first: each try's actual entries summed, with their notes.

    A try may have several entries (a remote training's attempts, its egress, the worker's own time); ranked
    one by one, a try showed up twice and a try of many small entries not at all. Instance, market and
    outcome are those of the try's costliest entry; its causes and notes are listed in the order incurred.
    """
    e = schema.entries
    key = (e.c.dag_id, e.c.run_id, e.c.task_id, e.c.map_index, e.c.try_number)
    actual = and_(e.c.estimated.is_(False), *filters.conditions())
    usd = func.sum(e.c.usd_micros)
    tries = (
        select(
            *key,
            usd.label("usd"),
            func.sum(func.coalesce(e.c.on_demand_usd_micros, e.c.usd_micros)).label("od"),
            func.sum(case((e.c.unit == "hour", e.c.quantity_micros), else_=0)).label("hours"),
            func.count().label("n"),
            func.max(e.c.incurred_at).label("last"),
        )
        .where(actual)
        .group_by(*key)
        .order_by(usd.desc(), func.min(e.c.id))
        .limit(limit)
    )
    with ledger.reading() as conn:
        top = conn.execute(tries).mappings().all()
        if not top:
            return []
        one_of = or_(*(and_(*(col == row[col.name] for col in key)) for row in top))
        parts = conn.execute(
            select(*key, e.c.instance_type, e.c.market, e.c.outcome, e.c.cause, e.c.note, e.c.usd_micros)
            .where(actual, one_of)
            .order_by(e.c.incurred_at, e.c.id)
        ).mappings()
        by_try: dict[tuple[Any, ...], list[Any]] = {}
        for part in parts:
            by_try.setdefault(tuple(part[col.name] for col in key), []).append(part)
    out = []
    for row in top:
        entries = by_try[tuple(row[col.name] for col in key)]
        costliest = max(entries, key=lambda part: part["usd_micros"])  # the first of equals: incurred first
        out.append(
            {
                "dag_id": row["dag_id"],
                "run_id": row["run_id"],
                "task_id": row["task_id"],
                "try_number": row["try_number"],
                "map_index": row["map_index"],
                "instance_type": costliest["instance_type"],
                "market": costliest["market"],
                "outcome": costliest["outcome"],
                "cause": ", ".join(_distinct(part["cause"] for part in entries)),
                "note": "\n".join(_distinct(part["note"] for part in entries)),
                "entries": int(row["n"]),
                "usd": from_micros(row["usd"]),
                "on_demand_usd": from_micros(row["od"]),
                "hours": from_micros(row["hours"]),
                "incurred_at": row["last"],
            }
        )
    return out


def _distinct(texts: Any) -> list[str]:
    """The non-empty ``texts``, each once, in their order."""
    return list(dict.fromkeys(text for text in texts if text))


#: Groups a dashboard shows one by one (charts: one colour each); the rest are one "other" group.
TOP_GROUPS = 20


def other_label(folded: int) -> str:
    """The name of the group that totals ``folded`` groups left out of a top list."""
    return f"other ({folded:,} group{'s' if folded != 1 else ''})"


def top_groups(rows: list[ReportRow], limit: int = TOP_GROUPS) -> tuple[list[ReportRow], ReportRow | None]:
    """The first ``limit`` rows of a report (costliest first) and one row totalling the rest.

    The total is None when nothing was left out. Its ``group`` says how many groups it holds.
    """
    if len(rows) <= limit:
        return list(rows), None
    rest = rows[limit:]
    kg, unknown = total_kg_co2e(rest)
    return list(rows[:limit]), ReportRow(
        group=other_label(len(rest)),
        entries=sum(r.entries for r in rest),
        usd=sum((r.usd for r in rest), Decimal(0)),
        estimated_usd=sum((r.estimated_usd for r in rest), Decimal(0)),
        on_demand_usd=sum((r.on_demand_usd for r in rest), Decimal(0)),
        hours=sum((r.hours for r in rest), Decimal(0)),
        kg_co2e=kg,
        co2e_unknown=unknown,
    )


def fold_daily(
    points: list[tuple[date, str, Decimal]], limit: int = TOP_GROUPS
) -> tuple[list[tuple[date, str, Decimal]], int]:
    """Daily points of the ``limit`` costliest groups; the other groups summed per day as one group.

    Returns the points and how many groups were summed (0: none; their group is ``other_label(n)``).
    """
    totals: dict[str, Decimal] = {}
    for _, group, usd in points:
        totals[group] = totals.get(group, Decimal(0)) + usd
    if len(totals) <= limit:
        return list(points), 0
    kept = set(sorted(totals, key=lambda g: (-totals[g], g))[:limit])
    other = other_label(len(totals) - limit)
    out = [p for p in points if p[1] in kept]
    rest: dict[date, Decimal] = {}
    for day, group, usd in points:
        if group not in kept:
            rest[day] = rest.get(day, Decimal(0)) + usd
    out += [(day, other, usd) for day, usd in rest.items()]
    return sorted(out, key=lambda p: p[0]), len(totals) - limit


@dataclass(frozen=True, slots=True)
class BurnDown:
    """One budget in its current period: the cap and the running total of spend by day."""

    usage: BudgetUsage
    start: datetime | None
    end: datetime | None
    cumulative: list[tuple[date, Decimal]]


def burn_down(
    ledger: LedgerDatabase, only: Iterable[Budget] | None = None, *, at: datetime | None = None
) -> list[BurnDown]:
    """Every day-, month- and total-period budget with its spend accumulated day by day this period.

    ``only``: just these budgets (the Cost page reads no figures of the study budgets it folds); None: every
    budget. ``at``: the instant whose periods are drawn (now). Each figure is read for every budget at once
    (``budget_figures``): read per budget, ``/api/budgets`` ran about twelve statements for each.
    """
    from costaware.adapters.ledger.budget_figures import budgets_usage, each_budget

    now = at or utcnow()
    # Per-run caps have no single period to draw.
    chosen = [
        b for b in (budgets.list_budgets(ledger) if only is None else only) if b.period is not Period.RUN
    ]
    windows = [period_window(budget.period, now, budget.timezone) for budget in chosen]
    usages = budgets_usage(ledger, chosen, now)
    filters = [
        Filters(since=w.start, until=w.end, scope=str(b.scope)) for b, w in zip(chosen, windows, strict=True)
    ]
    spends = each_budget(ledger, chosen, lambda i: _quarter_hour_query(ledger, filters[i]))
    out = []
    for budget, window, usage, spend in zip(chosen, windows, usages, spends, strict=True):
        if usage is None:
            continue  # deleted since it was listed
        zone = parse_timezone(budget.timezone)
        running, cumulative = Decimal(0), []
        per_day: dict[date, Decimal] = {}
        # The budget's own days (a Berlin month's spend at 23:30 UTC is the next day's).
        for bucket, micros in sorted(spend):
            quarter = datetime.fromtimestamp(int(bucket) * _QUARTER_HOUR_SECONDS, timezone.utc)
            day = quarter.astimezone(zone).date()
            per_day[day] = per_day.get(day, Decimal(0)) + from_micros(micros)
        for day in sorted(per_day):
            running += per_day[day]
            cumulative.append((day, running))
        out.append(BurnDown(usage, window.start, window.end, cumulative))
    return out


def _quarter_hour_query(ledger: LedgerDatabase, filters: Filters) -> Any:
    """Actual USD micros per quarter hour (its number since the epoch, UTC) of the entries under ``filters``.

    A quarter hour is as fine as any time zone's day needs: India's starts at 18:30 UTC and Nepal's at
    18:15 UTC, which an hour would date with the day before.
    """
    e = schema.entries
    if ledger.is_sqlite:
        epoch = cast(func.strftime("%s", e.c.incurred_at), BigInteger)
    else:
        epoch = cast(func.floor(func.extract("epoch", e.c.incurred_at)), BigInteger)  # UTC, any session
    bucket = epoch // _QUARTER_HOUR_SECONDS
    return (
        select(bucket, func.sum(e.c.usd_micros))
        .where(and_(e.c.estimated.is_(False), *filters.conditions()))
        .group_by(bucket)
    )


_QUARTER_HOUR_SECONDS = 900


def _incurred_utc(ledger: LedgerDatabase) -> Any:
    """The entries' ``incurred_at`` as UTC wall time, for grouping by day or hour.

    PostgreSQL reads a timestamptz in the session's time zone, which a server or role may set: spend near
    midnight went to the wrong UTC day (SQLite, storing UTC, disagreed).
    """
    incurred = schema.entries.c.incurred_at
    return incurred if ledger.is_sqlite else func.timezone("UTC", incurred)


def _as_date(value: Any) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return date.fromisoformat(str(value)[:10])
