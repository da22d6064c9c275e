"""The cost ledger and budgets in a SQL database (SQLite or PostgreSQL) through SQLAlchemy Core.

Reservations are atomic across processes and machines: SQLite takes the database write lock
(``BEGIN IMMEDIATE``) for every write transaction, PostgreSQL locks the budget rows (``SELECT ... FOR
UPDATE``), and the check "spent + held + this <= cap" happens inside that lock.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    RowMapping,
    and_,
    case,
    create_engine,
    event,
    func,
    or_,
    select,
    text,
    true,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError, StatementError
from sqlalchemy.sql.elements import ColumnElement

from costaware.adapters import ledger_schema as schema
from costaware.core.budgets import Budget, Period, PeriodWindow, Scope, period_window
from costaware.core.errors import (
    BudgetExceededError,
    BudgetNotFoundError,
    ConfigurationError,
    CostawareError,
    LedgerUnavailableError,
    ReservationNotFoundError,
)
from costaware.core.ledger import (
    GROUP_BYS,
    INDEXED_TAGS,
    BudgetUsage,
    LedgerEntry,
    ReportRow,
    Reservation,
    utcnow,
)
from costaware.core.money import format_usd, format_usd_exact, from_micros, parse_usd, to_micros
from costaware.settings import LEDGER_URL_ENV, ledger_url

log = logging.getLogger(__name__)

DEFAULT_RESERVATION_TTL = timedelta(hours=6)


def _safe(url: str) -> str:
    """The URL with its password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable URL>"


def _reason(error: DBAPIError) -> str:
    return " ".join(str(error.orig or error).split())


class Ledger:
    """Cost entries, budgets and reservations in one database.

    Use ``Ledger.from_url("postgresql+psycopg2://...")`` or ``Ledger.from_url("sqlite:///ledger.db")``;
    the schema is created and versioned on first use.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._is_sqlite = engine.dialect.name == "sqlite"

    # -- set-up -----------------------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str | None = None, *, create: bool = True) -> Ledger:
        """Open (and by default create) the ledger at ``url`` (default: ``costaware.settings.ledger_url()``).

        Raises:
            ConfigurationError: the URL is malformed or names a database costaware does not support.
            LedgerUnavailableError: the database cannot be reached.
        """
        url = url or ledger_url()
        try:
            parsed = make_url(url)
        except ArgumentError as e:
            raise ConfigurationError(
                f"ledger URL {url!r} is not a database URL such as 'sqlite:///ledger.db'"
            ) from e
        if parsed.drivername in ("postgres", "postgresql"):
            # The bare name means psycopg 3 in SQLAlchemy 2.1; costaware ships psycopg2.
            parsed = parsed.set(drivername="postgresql+psycopg2")
        if parsed.get_backend_name() not in ("sqlite", "postgresql"):
            raise ConfigurationError(
                f"ledger URL {_safe(url)} uses {parsed.get_backend_name()!r}: use sqlite:/// or postgresql://"
            )
        if parsed.get_backend_name() == "sqlite":
            engine = _sqlite_engine(parsed.database)
        else:
            engine = create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": 10})
        ledger = cls(engine)
        if create:
            ledger.create_schema()
        return ledger

    def create_schema(self) -> None:
        """Create missing tables and check the schema version; safe to run from many processes at once."""
        with self._write() as conn:
            if not self._is_sqlite:
                conn.execute(text("SELECT pg_advisory_xact_lock(74210031)"))  # one creator at a time
            schema.metadata.create_all(conn, checkfirst=True)
            row = conn.execute(
                select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")
            ).first()
            version = int(row[0]) if row else 0
            if version > schema.SCHEMA_VERSION:
                raise ConfigurationError(
                    f"the ledger at {_safe(str(self.engine.url))} has schema v{version}, newer than this "
                    "costaware "
                    f"(v{schema.SCHEMA_VERSION}): upgrade airflow-provider-costaware"
                )
            for step in range(max(version, 1) + 1, schema.SCHEMA_VERSION + 1):
                for statement in schema.MIGRATIONS[step]:
                    conn.execute(text(statement))
            if row is None:
                conn.execute(
                    schema.meta.insert().values(key="schema_version", value=str(schema.SCHEMA_VERSION))
                )
            elif version != schema.SCHEMA_VERSION:
                conn.execute(
                    schema.meta.update()
                    .where(schema.meta.c.key == "schema_version")
                    .values(value=str(schema.SCHEMA_VERSION))
                )

    def dispose(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction; on SQLite it holds the database write lock from its first statement."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except (OperationalError, DBAPIError) as e:
            if isinstance(e, IntegrityError):
                raise
            raise LedgerUnavailableError(
                f"cannot write the cost ledger at {_safe(str(self.engine.url))}: {_reason(e)}. Check the "
                f"'costaware_ledger' connection or {LEDGER_URL_ENV}; nothing was recorded or reserved"
            ) from e

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read-only transaction (on SQLite it does not take the write lock)."""
        try:
            with self.engine.connect().execution_options(costaware_read=True) as conn, conn.begin():
                yield conn
        except (OperationalError, DBAPIError) as e:
            raise LedgerUnavailableError(
                f"cannot read the cost ledger at {_safe(str(self.engine.url))}: {_reason(e)}"
            ) from e
        except StatementError as e:
            # SQLAlchemy wraps what a column type refuses (a time outside UTC's range); pass it on unwrapped.
            if isinstance(e.orig, CostawareError):
                raise e.orig from e
            raise

    # -- entries ----------------------------------------------------------------------------------

    def record(self, entry: LedgerEntry) -> bool:
        """Add one entry; recording the same ``entry_uid`` twice adds it once. Returns whether it was new."""
        with self._write() as conn:
            return self._insert_entry(conn, entry)

    def _insert_entry(self, conn: Connection, entry: LedgerEntry) -> bool:
        exists = conn.execute(
            select(schema.entries.c.id).where(schema.entries.c.entry_uid == entry.entry_uid)
        ).first()
        if exists:
            return False
        conn.execute(schema.entries.insert().values(**_entry_row(entry)))
        return True

    def entries(
        self, *, dag_id: str | None = None, run_id: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Raw entries, newest first, money as ``Decimal``."""
        query = select(schema.entries).order_by(
            schema.entries.c.incurred_at.desc(), schema.entries.c.id.desc()
        )
        if dag_id:
            query = query.where(schema.entries.c.dag_id == dag_id)
        if run_id:
            query = query.where(schema.entries.c.run_id == run_id)
        if limit:
            query = query.limit(limit)
        with self.reading() as conn:
            rows = conn.execute(query).mappings().all()
        return [_entry_dict(row) for row in rows]

    def last_run_id(self, dag_id: str) -> str | None:
        """The run of ``dag_id`` with the most recent entry."""
        query = (
            select(schema.entries.c.run_id)
            .where(schema.entries.c.dag_id == dag_id)
            .order_by(schema.entries.c.incurred_at.desc(), schema.entries.c.id.desc())
            .limit(1)
        )
        with self.reading() as conn:
            row = conn.execute(query).first()
        return row[0] if row else None

    # -- budgets ----------------------------------------------------------------------------------

    def set_budget(
        self,
        scope: str | Scope,
        period: str | Period,
        cap_usd: object,
        *,
        cap_gpu_hours: object | None = None,
        timezone: str = "UTC",
        actor: str = "costaware",
    ) -> Budget:
        """Create or replace the budget of (scope, period). Invalid input raises ``InvalidBudgetError``.

        The change goes to the audit trail in the same transaction: ``actor``, the old cap and the new one.
        """
        from costaware.adapters.ledger_governance import append_audit

        budget = Budget.create(scope, period, cap_usd, cap_gpu_hours, timezone)
        values = {
            "cap_usd_micros": to_micros(budget.cap_usd),
            "cap_gpu_hours_micros": None if budget.cap_gpu_hours is None else to_micros(budget.cap_gpu_hours),
            "timezone": budget.timezone,
            "updated_at": utcnow(),
        }
        t = schema.budgets
        with self._write() as conn:
            if not self._is_sqlite:
                conn.execute(text("SELECT pg_advisory_xact_lock(74210032)"))  # serialise upserts
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
                    "new_cap_usd": str(from_micros(to_micros(budget.cap_usd))),
                    "cap_gpu_hours": None if budget.cap_gpu_hours is None else str(budget.cap_gpu_hours),
                    "timezone": budget.timezone,
                },
            )
        log.info("budget %s set to %s", budget.label, format_usd(budget.cap_usd))
        return budget

    def budgets(self) -> list[Budget]:
        with self.reading() as conn:
            rows = conn.execute(select(schema.budgets).order_by(schema.budgets.c.scope)).mappings().all()
        return [_budget(row) for row in rows]

    def delete_budget(self, scope: str | Scope, period: str | Period) -> bool:
        t = schema.budgets
        key = (str(Scope.parse(scope)), Period.parse(period).value)
        with self._write() as conn:
            found = conn.execute(select(t.c.id).where(t.c.scope == key[0], t.c.period == key[1])).first()
            if not found:
                return False
            if conn.execute(
                select(schema.holds.c.budget_id).where(schema.holds.c.budget_id == found[0])
            ).first():
                raise ConfigurationError(
                    f"budget '{key[0]}/{key[1]}' has reservations; set its cap to 0 instead of deleting it"
                )
            conn.execute(t.delete().where(t.c.id == found[0]))
            return True

    def usage(
        self, scope: str | Scope, *, at: datetime | None = None, run_id: str | None = None
    ) -> list[BudgetUsage]:
        """Where each budget that applies to ``scope`` stands now (or at ``at``).

        Raises:
            BudgetNotFoundError: no budget applies to the scope.
        """
        wanted = Scope.parse(scope)
        at = at or utcnow()
        with self.reading() as conn:
            found = self._applicable(conn, wanted, run_id)
            return [self._usage(conn, bid, budget, window, at) for bid, budget, window in found]

    def _applicable(
        self, conn: Connection, wanted: Scope, run_id: str | None, *, lock: bool = False
    ) -> list[tuple[int, Budget, PeriodWindow]]:
        t = schema.budgets
        rows = conn.execute(select(t).order_by(t.c.id)).mappings().all()
        covering = [row for row in rows if _budget(row).scope.covers(wanted)]
        if lock and covering and not self._is_sqlite:
            # Lock only the budgets this reservation counts against, in id order (no deadlocks), and
            # re-read them under the lock: unrelated projects never wait for each other.
            ids = [row["id"] for row in covering]
            covering = list(
                conn.execute(select(t).where(t.c.id.in_(ids)).order_by(t.c.id).with_for_update()).mappings()
            )
        found: list[tuple[int, Budget, PeriodWindow]] = []
        for row in covering:
            budget = _budget(row)
            if budget.period is Period.RUN and not run_id:
                continue  # per-run caps need a run; spend outside a run is not capped by them
            found.append((row["id"], budget, period_window(budget.period, utcnow(), budget.timezone, run_id)))
        if not found:
            known = ", ".join(f"'{_budget(r).label}'" for r in rows) or "none"
            raise BudgetNotFoundError(
                f"no budget covers scope '{wanted}' (budgets: {known}); set one with "
                f"`costaware budget set --scope '{wanted}' --period month --cap-usd <USD>`"
            )
        return found

    def _usage(
        self, conn: Connection, budget_id: int, budget: Budget, window: PeriodWindow, at: datetime
    ) -> BudgetUsage:
        e = schema.entries
        conditions = [e.c.estimated.is_(False), *scope_conditions(budget.scope)]
        if window.key.startswith("run:"):
            conditions.append(e.c.run_id == window.key[4:])
        if window.start is not None and window.end is not None:
            conditions += [e.c.incurred_at >= window.start, e.c.incurred_at < window.end]
        h = schema.holds
        held = select(
            func.coalesce(func.sum(h.c.usd_micros), 0), func.coalesce(func.sum(h.c.gpu_hours_micros), 0)
        ).where(
            h.c.budget_id == budget_id, h.c.period_key == window.key, h.c.open.is_(True), h.c.expires_at > at
        )
        spent = select(
            func.coalesce(func.sum(e.c.usd_micros), 0), func.coalesce(func.sum(e.c.gpu_hours_micros), 0)
        ).where(and_(true(), *conditions))
        # One statement, so PostgreSQL's READ COMMITTED sees spent and held at the same instant.
        spent_cte, held_cte = spent.cte("spent"), held.cte("held")
        both = spent_cte.join(held_cte, text("1 = 1"))
        row = conn.execute(select(*spent_cte.c, *held_cte.c).select_from(both)).one()
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

    # -- reservations -----------------------------------------------------------------------------

    def reserve(
        self,
        scope: str | Scope,
        usd: object,
        *,
        gpu_hours: object = 0,
        holder: str | None = None,
        run_id: str | None = None,
        ttl: timedelta = DEFAULT_RESERVATION_TTL,
        purpose: str = "the next task",
        approved_by: str | None = None,
        approval: dict[str, Any] | None = None,
    ) -> Reservation:
        """Set ``usd`` aside in every budget that covers ``scope``, or raise if any cap would be passed.

        With ``approved_by`` (a person who approved the overage) the caps are not checked, and the approval
        (who, ``approval`` details, the amount and each budget's standing) goes to the audit trail in the
        same transaction as the reservation.

        Atomic across processes: two workers racing for the last dollars cannot both get them.
        With ``holder`` set (e.g. ``dag/run/task/map_index``), asking again while that holder's
        reservation is open returns the same reservation, so a retried sensor does not reserve twice.

        Raises:
            BudgetExceededError: a covering budget has too little left; the message names it.
            BudgetNotFoundError: no budget covers ``scope``.
        """
        wanted = Scope.parse(scope)
        amount = parse_usd(usd, name="reservation amount")
        gpu = parse_usd(gpu_hours, name="reserved GPU-hours")
        if ttl <= timedelta(0):
            raise ConfigurationError(f"reservation ttl must be positive, got {ttl}")
        now = utcnow()
        r, h = schema.reservations, schema.holds
        with self._write() as conn:
            if holder:
                existing = conn.execute(
                    select(r.c.id).where(r.c.holder == holder, r.c.status == "open", r.c.expires_at > now)
                ).first()
                if existing:
                    return self._reservation(conn, existing[0])
            applicable = self._applicable(conn, wanted, run_id, lock=True)
            standing = []
            for budget_id, budget, window in applicable:
                usage = self._usage(conn, budget_id, budget, window, now)
                if approved_by is None:
                    _check_cap(usage, amount, gpu, purpose, window)
                standing.append(usage)
            reservation_id = uuid.uuid4().hex
            if approved_by is not None:
                from costaware.adapters.ledger_governance import append_audit

                append_audit(
                    conn,
                    actor=approved_by,
                    action="approval",
                    target=holder or str(wanted),
                    details={
                        **(approval or {}),
                        "reservation_id": reservation_id,
                        "usd": str(amount),
                        "budgets": [
                            {
                                "budget": u.label,
                                "cap_usd": str(u.cap_usd),
                                "committed_usd": str(u.spent_usd + u.reserved_usd),
                            }
                            for u in standing
                        ],
                    },
                )
            labels = [b.label for _, b, _ in applicable]
            conn.execute(
                r.insert().values(
                    id=reservation_id,
                    scope=str(wanted),
                    holder=holder,
                    usd_micros=to_micros(amount),
                    gpu_hours_micros=to_micros(gpu),
                    status="open",
                    created_at=now,
                    expires_at=now + ttl,
                    budgets=labels,
                )
            )
            conn.execute(
                h.insert(),
                [
                    {
                        "reservation_id": reservation_id,
                        "budget_id": budget_id,
                        "period_key": window.key,
                        "usd_micros": to_micros(amount),
                        "gpu_hours_micros": to_micros(gpu),
                        "expires_at": now + ttl,
                        "open": True,
                    }
                    for budget_id, _, window in applicable
                ],
            )
            names = ", ".join(f"{b.label} ({w.key})" for _, b, w in applicable)  # as BudgetUsage.name
            log.info("reserved %s in %s for %s", format_usd_exact(amount), names, purpose)
            return self._reservation(conn, reservation_id)

    def settle(
        self, reservation_id: str, actual_usd: object, *, entry: LedgerEntry | None = None
    ) -> Reservation:
        """Close a reservation with what was actually spent; ``entry`` (the actual cost) is recorded with it.

        Settling twice is harmless: the second call returns the settled reservation and records nothing.
        """
        actual = parse_usd(actual_usd, name="actual cost")
        with self._write() as conn:
            current = self._reservation(conn, reservation_id)
            if current.status == "settled":
                return current
            if entry is not None:
                self._insert_entry(conn, entry)
            self._close(conn, reservation_id, "settled", actual)
            return self._reservation(conn, reservation_id)

    def release(self, reservation_id: str) -> Reservation:
        """Give a reservation's money back unspent (the task was skipped or never ran)."""
        with self._write() as conn:
            current = self._reservation(conn, reservation_id)
            if current.status in ("settled", "released"):
                return current
            self._close(conn, reservation_id, "released", None)
            return self._reservation(conn, reservation_id)

    def open_reservations(self, *, holder_prefix: str | None = None) -> list[Reservation]:
        """Open, unexpired reservations (optionally those whose holder starts with a prefix)."""
        r = schema.reservations
        query = select(r.c.id).where(r.c.status == "open", r.c.expires_at > utcnow())
        if holder_prefix:
            query = query.where(r.c.holder.startswith(holder_prefix, autoescape=True))
        with self.reading() as conn:
            ids = [row[0] for row in conn.execute(query.order_by(r.c.created_at))]
            return [self._reservation(conn, rid) for rid in ids]

    def reservation_to_settle(self, holder: str) -> Reservation | None:
        """The reservation a finished task's cost settles: its open one, else one released for it meanwhile.

        A run can end, and give back what its tasks still hold, between a task reporting success and its
        listener recording the cost (the scheduler and the worker race); the cost still belongs to that
        reservation. Settling a released reservation records the cost and keeps nothing held.
        """
        r = schema.reservations
        live = and_(r.c.status == "open", r.c.expires_at > utcnow())
        query = (
            select(r.c.id)
            .where(r.c.holder == holder, or_(live, r.c.status == "released"))
            .order_by(case((r.c.status == "open", 0), else_=1), r.c.created_at.desc())
            .limit(1)
        )
        with self.reading() as conn:
            found = conn.execute(query).first()
            return None if found is None else self._reservation(conn, found[0])

    def expire_stale(self) -> int:
        """Mark open reservations past their TTL as expired (they no longer count); return how many."""
        r, h = schema.reservations, schema.holds
        now = utcnow()
        with self._write() as conn:
            stale = [
                row[0]
                for row in conn.execute(select(r.c.id).where(r.c.status == "open", r.c.expires_at <= now))
            ]
            if stale:
                conn.execute(r.update().where(r.c.id.in_(stale)).values(status="expired"))
                conn.execute(h.update().where(h.c.reservation_id.in_(stale)).values(open=False))
        if stale:
            log.warning("expired %d reservation(s) left open past their TTL", len(stale))
        return len(stale)

    def _close(self, conn: Connection, reservation_id: str, status: str, actual: Decimal | None) -> None:
        r, h = schema.reservations, schema.holds
        conn.execute(
            r.update()
            .where(r.c.id == reservation_id)
            .values(
                status=status,
                settled_at=utcnow(),
                settled_usd_micros=None if actual is None else to_micros(actual),
            )
        )
        conn.execute(h.update().where(h.c.reservation_id == reservation_id).values(open=False))

    def _reservation(self, conn: Connection, reservation_id: str) -> Reservation:
        row = (
            conn.execute(select(schema.reservations).where(schema.reservations.c.id == reservation_id))
            .mappings()
            .first()
        )
        if row is None:
            raise ReservationNotFoundError(f"the ledger holds no reservation {reservation_id!r}")
        return Reservation(
            id=row["id"],
            scope=Scope.parse(row["scope"]),
            usd=from_micros(row["usd_micros"]),
            gpu_hours=from_micros(row["gpu_hours_micros"]),
            holder=row["holder"],
            created_at=row["created_at"],
            expires_at=row["expires_at"],
            status=row["status"],
            budgets=tuple(row["budgets"]),
            settled_usd=None if row["settled_usd_micros"] is None else from_micros(row["settled_usd_micros"]),
        )

    # -- reporting --------------------------------------------------------------------------------

    def spent(
        self,
        scope: str | Scope = "*",
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        run_id: str | None = None,
    ) -> Decimal:
        """Actual USD spent by entries in ``scope`` from ``since`` (inclusive) to ``until`` (exclusive)."""
        e = schema.entries
        conditions = [e.c.estimated.is_(False), *entry_conditions(since, until, None, run_id, scope)]
        with self.reading() as conn:
            total = conn.execute(select(func.sum(e.c.usd_micros)).where(and_(true(), *conditions))).scalar()
        return from_micros(total)

    def report(
        self,
        *,
        group_by: str = "task",
        since: datetime | None = None,
        until: datetime | None = None,
        dag_id: str | None = None,
        run_id: str | None = None,
        scope: str | Scope = "*",
        dag_ids: frozenset[str] | None = None,
    ) -> list[ReportRow]:
        """Spend per group, most expensive first.

        Args:
            group_by: ``dag``, ``task``, ``run``, ``trial``, ``kind``, ``market``, ``cause``, ``outcome``
                or ``tag:<name>``.
            since: Entries incurred at or after this instant.
            until: Entries incurred before this instant.
            dag_id: Only this DAG.
            run_id: Only this DAG run.
            scope: Only entries with these tags, e.g. ``project=churn``.
            dag_ids: Only these DAGs (those the asking user may read).
        """
        e = schema.entries
        key = group_column(group_by)
        conditions = entry_conditions(since, until, dag_id, run_id, scope, dag_ids=dag_ids)
        actual = e.c.estimated.is_(False)
        usd = func.sum(case((actual, e.c.usd_micros), else_=0))
        query = (
            select(
                key.label("grp"),
                func.count().label("n"),
                usd.label("usd"),
                func.sum(case((actual, 0), else_=e.c.usd_micros)).label("est"),
                func.sum(
                    case((actual, func.coalesce(e.c.on_demand_usd_micros, e.c.usd_micros)), else_=0)
                ).label("od"),
                func.sum(case((and_(actual, e.c.unit == "hour"), e.c.quantity_micros), else_=0)).label(
                    "hours"
                ),
            )
            .where(and_(true(), *conditions))
            .group_by(key)
            .order_by(usd.desc())
        )
        with self.reading() as conn:
            rows = conn.execute(query).all()
        return [
            ReportRow(
                group="(none)" if row.grp is None else str(row.grp),
                entries=int(row.n),
                usd=from_micros(row.usd),
                estimated_usd=from_micros(row.est),
                on_demand_usd=from_micros(row.od),
                hours=from_micros(row.hours),
            )
            for row in rows
        ]


# -- helpers --------------------------------------------------------------------------------------


def _sqlite_engine(database: str | None) -> Engine:
    if database and database != ":memory:":
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{database or ':memory:'}", connect_args={"timeout": 60})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy's BEGIN below drive transactions
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock at once, so check-then-insert cannot interleave between processes.
        conn.exec_driver_sql(
            "BEGIN" if conn.get_execution_options().get("costaware_read") else "BEGIN IMMEDIATE"
        )

    return engine


def entry_conditions(
    since: datetime | None,
    until: datetime | None,
    dag_id: str | None,
    run_id: str | None,
    scope: str | Scope,
    *,
    dag_ids: frozenset[str] | None = None,
) -> list[ColumnElement[bool]]:
    """SQL conditions of the usual report filters, each a bound parameter (``None`` filters nothing).

    ``dag_ids`` keeps only those DAGs (the ones a user may read); an empty set keeps nothing.
    """
    e = schema.entries
    out = scope_conditions(Scope.parse(scope))
    if dag_ids is not None:
        out.append(e.c.dag_id.in_(sorted(dag_ids)))
    if since:
        out.append(e.c.incurred_at >= since)
    if until:
        out.append(e.c.incurred_at < until)
    if dag_id:
        out.append(e.c.dag_id == dag_id)
    if run_id:
        out.append(e.c.run_id == run_id)
    return out


def scope_conditions(scope: Scope) -> list[ColumnElement[bool]]:
    """SQL conditions selecting the entries inside ``scope`` (indexed columns for team/project/owner)."""
    e = schema.entries
    out: list[ColumnElement[bool]] = []
    for key, value in scope.tags:
        if key in INDEXED_TAGS:
            out.append(e.c[key] == value)
        else:
            out.append(e.c.tags[key].as_string() == value)
    return out


def group_column(group_by: str) -> ColumnElement[Any]:
    """The SQL expression a report groups by; raises ``ConfigurationError`` for an unknown grouping."""
    e = schema.entries
    simple = {
        "dag": e.c.dag_id,
        "run": e.c.run_id,
        "trial": e.c.trial,
        "kind": e.c.kind,
        "market": e.c.market,
        "cause": e.c.cause,
        "outcome": e.c.outcome,
    }
    if group_by in simple:
        return simple[group_by]
    if group_by == "task":
        return e.c.dag_id + "." + e.c.task_id
    if group_by.startswith("tag:") and len(group_by) > 4:
        name = group_by[4:]
        Scope.of({name: "x"})  # validates the tag name
        return e.c[name] if name in INDEXED_TAGS else e.c.tags[name].as_string()
    raise ConfigurationError(f"cannot group by {group_by!r}: use one of {', '.join(GROUP_BYS)} or tag:<name>")


def _check_cap(usage: BudgetUsage, amount: Decimal, gpu: Decimal, purpose: str, window: PeriodWindow) -> None:
    name = usage.name
    if usage.spent_usd + usage.reserved_usd + amount > usage.cap_usd:
        left = format_usd_exact(max(usage.left_usd, Decimal(0)))
        cap, spent = format_usd_exact(usage.cap_usd), format_usd_exact(usage.spent_usd)
        reserved, need = format_usd_exact(usage.reserved_usd), format_usd_exact(amount)
        todo = "raise the cap with `costaware budget set` or lower the estimate"
        raise BudgetExceededError(
            f"budget '{name}' has {left} left (cap {cap}, spent {spent}, reserved {reserved}); "
            f"{purpose} needs an estimated {need}: {todo}",
            scope=name,
            spent_usd=str(usage.spent_usd + usage.reserved_usd),
            cap_usd=str(usage.cap_usd),
            needed_usd=str(amount),
            summary="\n".join(
                [
                    f"Budget refused {purpose}: it needs an estimated {need}, the budget has {left} left.",
                    f"  budget:   {name}",
                    f"  cap:      {cap}",
                    f"  spent:    {spent}",
                    f"  reserved: {reserved}",
                    f"  left:     {left}",
                    f"  need:     {need}",
                    f"  to do:    {todo}",
                ]
            ),
        )
    if (
        usage.cap_gpu_hours is not None
        and usage.spent_gpu_hours + usage.reserved_gpu_hours + gpu > usage.cap_gpu_hours
    ):
        raise BudgetExceededError(
            f"budget '{name}' has "
            f"{usage.cap_gpu_hours - usage.spent_gpu_hours - usage.reserved_gpu_hours} GPU-hours "
            f"left of {usage.cap_gpu_hours}; {purpose} needs {gpu}: raise the GPU-hour cap",
            scope=name,
            spent_usd=str(usage.spent_usd),
            cap_usd=str(usage.cap_usd),
            needed_usd=str(amount),
        )


def _entry_row(entry: LedgerEntry) -> dict[str, Any]:
    tags = dict(entry.tags)
    return {
        "entry_uid": entry.entry_uid,
        "incurred_at": entry.incurred_at,
        "dag_id": entry.dag_id,
        "run_id": entry.run_id,
        "task_id": entry.task_id,
        "try_number": entry.try_number,
        "map_index": entry.map_index,
        "trial": entry.trial,
        "kind": entry.kind.value,
        "instance_type": entry.instance_type,
        "region": entry.region,
        "market": entry.market.value if entry.market else None,
        "quantity_micros": to_micros(entry.quantity),
        "unit": entry.unit,
        "unit_price_usd": str(entry.unit_price_usd),
        "usd_micros": to_micros(entry.usd),
        "on_demand_usd_micros": None if entry.on_demand_usd is None else to_micros(entry.on_demand_usd),
        "gpu_hours_micros": to_micros(entry.gpu_hours),
        "estimated": entry.estimated,
        **{name: tags.get(name) for name in INDEXED_TAGS},
        "tags": tags,
        "outcome": entry.outcome,
        "cause": entry.cause,
        "price_source": entry.price_source,
        "note": entry.note,
        "reservation_id": entry.reservation_id,
    }


def _entry_dict(row: RowMapping) -> dict[str, Any]:
    out = dict(row)
    for column in ("usd", "on_demand_usd", "gpu_hours", "quantity"):
        micros = out.pop(f"{column}_micros")
        out[column] = None if micros is None else from_micros(micros)
    out["unit_price_usd"] = Decimal(out["unit_price_usd"])
    return out


def _budget(row: RowMapping) -> Budget:
    return Budget(
        scope=Scope.parse(row["scope"]),
        period=Period(row["period"]),
        cap_usd=from_micros(row["cap_usd_micros"]),
        cap_gpu_hours=None
        if row["cap_gpu_hours_micros"] is None
        else from_micros(row["cap_gpu_hours_micros"]),
        timezone=row["timezone"],
    )
