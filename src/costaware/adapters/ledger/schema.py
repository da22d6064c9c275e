"""Tables of the cost ledger (SQLAlchemy Core), shared by SQLite and PostgreSQL.

Money columns hold whole micro-dollars (BigInteger): exact sums on both databases, where SQLite would
store a ``Numeric`` as a float. Change a table here and add an Alembic revision under ``migrations/versions/``
that makes the same change (``tests/adapters/test_ledger_migrations.py`` fails while the two differ).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    DDL,
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    event,
)
from sqlalchemy.types import TypeDecorator

from costaware.core.errors import ConfigurationError

#: The schema level releases before the Alembic migrations check in ``costaware_meta`` (they refuse a ledger
#: whose level is higher). Raise it in a revision that older code could not work with.
SCHEMA_VERSION = 1

metadata = MetaData()


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out, on SQLite (which keeps no zone) and PostgreSQL alike."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ConfigurationError(
                f"naive datetime {value.isoformat()} given to the ledger: pass an aware one"
            )
        try:
            value = value.astimezone(timezone.utc)
        except OverflowError as e:  # e.g. 0001-01-01T00:00+14:00 is before year 1 in UTC
            raise ConfigurationError(
                f"time {value.isoformat()} is outside the range of times in UTC: "
                "use a time from 0001-01-02 to 9999-12-30"
            ) from e
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


meta = Table(
    "costaware_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)

entries = Table(
    "costaware_entries",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("entry_uid", String(64), nullable=False, unique=True),
    Column("incurred_at", UTCDateTime, nullable=False, index=True),
    Column("dag_id", String(250), nullable=False),
    Column("run_id", String(250), nullable=False),
    Column("task_id", String(250), nullable=False),
    Column("try_number", Integer, nullable=False),
    Column("map_index", Integer, nullable=False),
    Column("trial", String(250)),
    Column("kind", String(16), nullable=False),
    Column("instance_type", String(64)),
    Column("region", String(64)),
    Column("market", String(16)),
    Column("quantity_micros", BigInteger, nullable=False),
    Column("unit", String(16), nullable=False),
    Column("unit_price_usd", String(40), nullable=False),
    Column("usd_micros", BigInteger, nullable=False),
    Column("on_demand_usd_micros", BigInteger),
    Column("gpu_hours_micros", BigInteger, nullable=False),
    Column("estimated", Boolean, nullable=False),
    Column("team", String(128)),
    Column("project", String(128)),
    Column("owner", String(128)),
    Column("tags", JSON, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("cause", String(32), nullable=False),
    Column("price_source", String(64), nullable=False),
    Column("note", Text, nullable=False),
    Column("reservation_id", String(64)),
    # Emissions (revision 0002): micro-kg CO2e and micro-kWh; NULL kg is unknown (never stored as 0).
    Column("kg_co2e_micros", BigInteger),
    Column("kwh_micros", BigInteger),
    Column("carbon_method", String(512), nullable=False, server_default=""),
    Column("carbon_source", String(128), nullable=False, server_default=""),
    Index("ix_costaware_entries_dag_run", "dag_id", "run_id"),
    Index("ix_costaware_entries_project_time", "project", "incurred_at"),
    Index("ix_costaware_entries_team_time", "team", "incurred_at"),
    # What each open hold has spent already (revision 0003): a budget counts only the rest of it as held.
    Index("ix_costaware_entries_reservation", "reservation_id"),
)

budgets = Table(
    "costaware_budgets",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(512), nullable=False),
    Column("period", String(8), nullable=False),
    Column("cap_usd_micros", BigInteger, nullable=False),
    Column("cap_gpu_hours_micros", BigInteger),
    Column("timezone", String(64), nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    UniqueConstraint("scope", "period", name="uq_costaware_budgets_scope_period"),
)

reservations = Table(
    "costaware_reservations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("scope", String(512), nullable=False),
    Column("holder", String(1024)),
    Column("usd_micros", BigInteger, nullable=False),
    Column("gpu_hours_micros", BigInteger, nullable=False),
    Column("status", String(10), nullable=False, index=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("settled_at", UTCDateTime),
    Column("settled_usd_micros", BigInteger),
    Column("budgets", JSON, nullable=False),
    # The newest try of the holder's task that took the hold up (revision 0004; NULL: none said, as for a
    # spend gate's hold no try has taken yet): a late bill of that try does not grow it back for a retry.
    Column("taken_by_try", Integer),
    Index("ix_costaware_reservations_holder", "holder", "status"),
)

# One row per (reservation, budget it counts against): the budget's usage is a sum over its open holds.
holds = Table(
    "costaware_holds",
    metadata,
    Column("reservation_id", String(64), ForeignKey("costaware_reservations.id"), primary_key=True),
    Column("budget_id", Integer, ForeignKey("costaware_budgets.id"), primary_key=True),
    Column("period_key", String(300), nullable=False),
    Column("usd_micros", BigInteger, nullable=False),
    Column("gpu_hours_micros", BigInteger, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("open", Boolean, nullable=False),
    Index("ix_costaware_holds_budget_open", "budget_id", "period_key", "open"),
)

# What a task try used (issue 14): one row per compute entry, joined on entry_uid. Not a cost.
utilization = Table(
    "costaware_utilization",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("entry_uid", String(64), nullable=False, unique=True),
    Column("dag_id", String(250), nullable=False),
    Column("run_id", String(250), nullable=False),
    Column("task_id", String(250), nullable=False),
    Column("try_number", Integer, nullable=False),
    Column("map_index", Integer, nullable=False),
    Column("measured_at", UTCDateTime, nullable=False),
    Column("wall_seconds", Float, nullable=False),
    Column("cpu_seconds", Float, nullable=False),
    Column("peak_rss_bytes", BigInteger, nullable=False),
    Column("vcpus", Integer),
    Column("memory_gib", String(40)),
    Column("runs_per_month", Float),
    Column("source", String(64), nullable=False),
    Column("backend_metrics", JSON, nullable=False),
    Index("ix_costaware_utilization_task", "dag_id", "task_id", "measured_at"),
)

# What each retrain run produced (issue 14): the model, its metric, promotion, and how to reproduce it.
run_outcomes = Table(
    "costaware_run_outcomes",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("dag_id", String(250), nullable=False),
    Column("run_id", String(250), nullable=False),
    Column("model_version", String(128), nullable=False),
    Column("task_id", String(250), nullable=False),
    Column("metric", String(32), nullable=False),
    Column("metric_value", Float),
    Column("champion_metric", Float),
    Column("promoted", Boolean),
    Column("training_rows", BigInteger, nullable=False),
    Column("iterations", Integer, nullable=False),
    Column("iteration_unit", String(16), nullable=False),
    Column("record", JSON, nullable=False),
    Column("recorded_at", UTCDateTime, nullable=False),
    UniqueConstraint("dag_id", "run_id", "model_version", name="uq_costaware_run_outcomes_version"),
    Index("ix_costaware_run_outcomes_run", "run_id"),
)

# On-demand prices fetched from the AWS Price List API or imported from an offer file (issue 12).
price_cache = Table(
    "costaware_price_cache",
    metadata,
    Column("service", String(16), primary_key=True),
    Column("region", String(64), primary_key=True),
    Column("instance_type", String(64), primary_key=True),
    Column("usd_per_hour", String(40), nullable=False),
    Column("source", String(64), nullable=False),
    Column("sku", String(64), nullable=False),
    Column("effective_date", String(40), nullable=False),
    Column("fetched_at", UTCDateTime, nullable=False),
)

# Governance: an append-only audit trail, and one row per alert sent. The unique key of
# ``costaware_alerts_sent`` decides which of many workers sends a threshold's alert: the one whose insert
# wins.
audit = Table(
    "costaware_audit",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False, index=True),
    Column("actor", String(256), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(1024), nullable=False),
    Column("details", JSON, nullable=False),
)

alerts_sent = Table(
    "costaware_alerts_sent",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("budget", String(600), nullable=False),
    Column("period_key", String(300), nullable=False),
    Column("threshold", String(16), nullable=False),
    Column("sent_at", UTCDateTime, nullable=False),
    UniqueConstraint("budget", "period_key", "threshold", name="uq_costaware_alerts_sent"),
)

# Per-budget alert settings (thresholds, notifiers as [{"class", "kwargs"}]); absent: the [costaware] ones.
alert_rules = Table(
    "costaware_alert_rules",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("budget", String(600), nullable=False, unique=True),
    Column("thresholds", String(256)),
    Column("notifiers", JSON),
    Column("updated_at", UTCDateTime, nullable=False),
)

# The database itself refuses to change or remove an audit row, whatever code connects to it.
for _verb in ("UPDATE", "DELETE"):
    event.listen(
        audit,
        "after_create",
        DDL(
            f"CREATE TRIGGER costaware_audit_no_{_verb.lower()} BEFORE {_verb} ON costaware_audit "
            "BEGIN SELECT RAISE(ABORT, 'costaware_audit is append-only'); END"
        ).execute_if(dialect="sqlite"),
    )
event.listen(
    audit,
    "after_create",
    DDL(
        "CREATE OR REPLACE FUNCTION costaware_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'costaware_audit is append-only'; END $$; "
        "CREATE TRIGGER costaware_audit_append_only BEFORE UPDATE OR DELETE ON costaware_audit "
        "FOR EACH STATEMENT EXECUTE FUNCTION costaware_audit_append_only()"
    ).execute_if(dialect="postgresql"),
)

# One row per (DAG, window occurrence) in which a data-triggered retrain started: the window gate's claim.
window_claims = Table(
    "costaware_window_claims",
    metadata,
    Column("dag_id", String(250), primary_key=True),
    Column("window_start", UTCDateTime, primary_key=True),
    Column("run_id", String(250), nullable=False),
    Column("claimed_at", UTCDateTime, nullable=False),
)

# Spend gates that did not get their money at once: refused (failed or skipped) or waiting for room.
# One row per gate task instance and outcome; a wait that ends with a reservation is marked "reserved".
gate_requests = Table(
    "costaware_gate_requests",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("requested_at", UTCDateTime, nullable=False, index=True),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("dag_id", String(250), nullable=False),
    Column("run_id", String(250), nullable=False),
    Column("task_id", String(250), nullable=False),
    Column("map_index", Integer, nullable=False),
    Column("for_task_id", String(250), nullable=False),
    Column("scope", String(512), nullable=False),
    Column("budget", String(600), nullable=False),
    Column("usd_micros", BigInteger, nullable=False),
    Column("status", String(10), nullable=False),
    Column("message", Text, nullable=False),
    Index("ix_costaware_gate_requests_ti", "dag_id", "run_id", "task_id", "map_index"),
)
