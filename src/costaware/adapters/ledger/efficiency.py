"""Utilization records and run outcomes in the ledger database, next to the cost entries they describe.

Utilization rows join their compute entry on ``entry_uid`` (the entry holds the cost, the instance and the
market); run outcomes join the run's entries on ``(dag_id, run_id)`` for the run's cost. Every filter is a
bound parameter.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import RowMapping, and_, func, select, true
from sqlalchemy.sql.elements import ColumnElement

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.engine import LedgerDatabase
from costaware.core.efficiency import Measurement
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import utcnow
from costaware.core.money import from_micros
from costaware.core.outcomes import ReproRecord, RunOutcome


def record_utilization(
    ledger: LedgerDatabase, entry_uid: str, measurement: Measurement, *, map_index: int = -1
) -> bool:
    """Store what the try of entry ``entry_uid`` used; a second record for the same entry is ignored.

    Returns whether the record was new.
    """
    u = schema.utilization
    m = measurement
    with ledger.transaction() as conn:
        if conn.execute(select(u.c.id).where(u.c.entry_uid == entry_uid)).first():
            return False
        conn.execute(
            u.insert().values(
                entry_uid=entry_uid,
                dag_id=m.dag_id,
                run_id=m.run_id,
                task_id=m.task_id,
                try_number=m.try_number,
                map_index=map_index,
                measured_at=m.measured_at or utcnow(),
                wall_seconds=m.wall_seconds,
                cpu_seconds=m.cpu_seconds,
                peak_rss_bytes=m.peak_memory_bytes,
                vcpus=m.vcpus,
                memory_gib=None if m.memory_gib is None else str(m.memory_gib),
                runs_per_month=m.runs_per_month,
                source=m.source[:64],
                backend_metrics=dict(m.backend_metrics),
            )
        )
    return True


def measurements(
    ledger: LedgerDatabase,
    *,
    dag_id: str | None = None,
    task_id: str | None = None,
    since: datetime | None = None,
    outcome: str | None = "success",
    limit: int = 20000,
) -> list[Measurement]:
    """Measured tries with their entry's cost, instance and market, newest first.

    Args:
        ledger: The ledger.
        dag_id: Only this DAG.
        task_id: Only this task.
        since: Only tries measured at or after this instant.
        outcome: Only tries with this outcome (None: all).
        limit: At most this many.
    """
    u, e = schema.utilization, schema.entries
    conditions: list[ColumnElement[bool]] = []
    if dag_id:
        conditions.append(u.c.dag_id == dag_id)
    if task_id:
        conditions.append(u.c.task_id == task_id)
    if since:
        conditions.append(u.c.measured_at >= since)
    if outcome:
        conditions.append(e.c.outcome == outcome)
    query = (
        select(u, e.c.usd_micros, e.c.instance_type, e.c.region, e.c.market, e.c.team)
        .select_from(u.join(e, e.c.entry_uid == u.c.entry_uid))
        .where(and_(true(), *conditions))
        .order_by(u.c.measured_at.desc(), u.c.id.desc())
        .limit(limit)
    )
    with ledger.reading() as conn:
        rows = conn.execute(query).mappings().all()
    return [
        Measurement(
            dag_id=r["dag_id"],
            task_id=r["task_id"],
            run_id=r["run_id"],
            try_number=r["try_number"],
            instance_type=r["instance_type"],
            region=r["region"],
            market=r["market"],
            usd=from_micros(r["usd_micros"]),
            wall_seconds=float(r["wall_seconds"]),
            cpu_seconds=float(r["cpu_seconds"]),
            peak_memory_bytes=int(r["peak_rss_bytes"]),
            vcpus=r["vcpus"],
            memory_gib=None if r["memory_gib"] is None else Decimal(r["memory_gib"]),
            runs_per_month=r["runs_per_month"],
            source=r["source"],
            backend_metrics=r["backend_metrics"] or {},
            measured_at=r["measured_at"],
            team=r["team"],
        )
        for r in rows
    ]


# -- run outcomes ----------------------------------------------------------------------------------


def record_outcome(ledger: LedgerDatabase, outcome: RunOutcome) -> None:
    """Store what a retrain produced (insert, or update the same model version's row of the same DAG).

    Fields the new outcome leaves empty (no metric yet, no record) keep their stored value, so the retrain
    and the promotion can each write what they know, in either order.
    """
    t = schema.run_outcomes
    values: dict[str, Any] = {
        "task_id": outcome.task_id,
        "metric": outcome.metric,
        "metric_value": _finite(outcome.metric_value),
        "champion_metric": _finite(outcome.champion_metric),
        "promoted": outcome.promoted,
        "training_rows": outcome.training_rows,
        "iterations": outcome.iterations,
        "iteration_unit": outcome.iteration_unit,
        "record": outcome.record.to_json() if outcome.record else {},
        "recorded_at": outcome.recorded_at or utcnow(),
    }
    with ledger.transaction() as conn:
        found = (
            conn.execute(
                select(t).where(t.c.dag_id == outcome.dag_id, t.c.model_version == outcome.model_version)
            )
            .mappings()
            .first()
        )
        if found is None:
            conn.execute(
                t.insert().values(
                    dag_id=outcome.dag_id,
                    run_id=outcome.run_id,
                    model_version=outcome.model_version,
                    **values,
                )
            )
            return
        keep: dict[str, Any] = {}
        if outcome.task_id:
            keep["task_id"] = outcome.task_id
        if outcome.metric:  # a promotion's judgement: metric, both values and the decision together
            keep.update(
                metric=outcome.metric,
                metric_value=values["metric_value"],
                champion_metric=values["champion_metric"],
            )
        if outcome.promoted is not None:
            keep["promoted"] = outcome.promoted
        if outcome.training_rows:
            keep["training_rows"] = outcome.training_rows
        if outcome.iterations:
            keep.update(iterations=outcome.iterations, iteration_unit=outcome.iteration_unit)
        if outcome.record is not None:
            keep["record"] = values["record"]
        if keep:
            conn.execute(t.update().where(t.c.id == found["id"]).values(**keep))


def outcomes(
    ledger: LedgerDatabase, *, dag_id: str | None = None, run_id: str | None = None, limit: int = 500
) -> list[RunOutcome]:
    """Run outcomes with each run's actual cost from the ledger, oldest first."""
    t, e = schema.run_outcomes, schema.entries
    conditions: list[ColumnElement[bool]] = []
    if dag_id:
        conditions.append(t.c.dag_id == dag_id)
    if run_id:
        conditions.append(t.c.run_id == run_id)
    newest = (
        select(t)
        .where(and_(true(), *conditions))
        .order_by(t.c.recorded_at.desc(), t.c.id.desc())
        .limit(limit)
    )
    with ledger.reading() as conn:
        rows = list(reversed(conn.execute(newest).mappings().all()))
        runs = {(r["dag_id"], r["run_id"]) for r in rows}
        costs: dict[tuple[str, str], Decimal] = {}
        for run_dag, run in runs:
            total = conn.execute(
                select(func.sum(e.c.usd_micros)).where(
                    e.c.dag_id == run_dag, e.c.run_id == run, e.c.estimated.is_(False)
                )
            ).scalar()
            costs[(run_dag, run)] = from_micros(total)
    return [_outcome(r, costs.get((r["dag_id"], r["run_id"]))) for r in rows]


def run_outcome(ledger: LedgerDatabase, run_id: str, *, dag_id: str | None = None) -> list[RunOutcome]:
    """The outcomes of one run (normally one model version).

    Raises:
        ConfigurationError: the ledger holds no outcome for the run (the message lists recent runs).
    """
    found = outcomes(ledger, dag_id=dag_id, run_id=run_id)
    if not found:
        # Newest first, each run once (a tuning run records a model version per trial).
        newest = reversed(outcomes(ledger, dag_id=dag_id, limit=50))
        recent = list(dict.fromkeys(o.run_id for o in newest))[:5]
        raise ConfigurationError(
            f"the ledger has no retrain outcome for run {run_id!r}"
            + (f" of DAG {dag_id!r}" if dag_id else "")
            + f"; recent runs with outcomes: {', '.join(recent) or 'none'} (see `costaware runs list`)"
        )
    return found


def _outcome(row: RowMapping, usd: Decimal | None) -> RunOutcome:
    record = row["record"] or {}
    return RunOutcome(
        dag_id=row["dag_id"],
        run_id=row["run_id"],
        model_version=row["model_version"],
        task_id=row["task_id"],
        metric=row["metric"],
        metric_value=row["metric_value"],
        champion_metric=row["champion_metric"],
        promoted=row["promoted"],
        training_rows=int(row["training_rows"]),
        iterations=int(row["iterations"]),
        iteration_unit=row["iteration_unit"],
        record=ReproRecord.from_json(record) if record else None,
        recorded_at=row["recorded_at"],
        usd=usd,
    )


def _finite(value: float | None) -> float | None:
    if value is None or value != value:  # NaN: undefined metric (e.g. one class in the holdout)
        return None
    return float(value)
