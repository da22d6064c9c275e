"""The cost listener: every task try that ran is priced and written to the ledger, failed tries included.

It runs inside the task process on the worker (Airflow 3 calls task-instance listeners there), measures
the try's own runtime from ``on_task_instance_running`` to its end, prices it on the compute the task
declares (see :func:`compute_of`), and settles the reservation a ``SpendCapSensor`` made for the task.
A try is always recorded: a tag that cannot be stored is left out and named in the entry's note. When
the ledger cannot be written the entry goes to a spool folder and is written with the next entry that
succeeds: no row is lost.

Money reserved for a task that will never run is given back at once: when a task fails for good (or
skips), the reservations of the downstream tasks that can no longer run are released; when a run ends
(failed, marked failed, or succeeded with a consumer skipped), every reservation still open for the run is.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from airflow.listeners import hookimpl

from costaware.glue import (
    ANNOTATION_FIELDS,
    DEFAULT_LEDGER_CONN_ID,
    TAG_NAMES,
    annotate_task,
    pop_annotations,
    tags_for,
)
from costaware.glue import try_key as _key
from costaware.plugins.utilization import record_utilization, start_probe, stop_probe
from costaware.settings import costaware_home, option

log = logging.getLogger(__name__)

__all__ = ["ANNOTATION_FIELDS", "TAG_NAMES", "CostListener", "annotate_task", "cost_listener", "tags_for"]

_STARTS: dict[tuple[str, str, str, int, int], float] = {}


def spool_dir() -> Path:
    """Where entries wait when the ledger cannot be written: ``$AIRFLOW_HOME/costaware/spool``."""
    return costaware_home("spool")


COMPUTE_FIELDS = ("instance_type", "region", "market", "usd_per_hour")
PRICING_PARAM = "costaware_compute"
"""The task param that says where any operator's tries run, e.g. ``{"instance_type": "g5.xlarge"}``."""


def compute_of(task: Any) -> dict[str, Any]:
    """Where a task's tries run, as the listener prices them.

    In order, each field from the first that gives it:

    1. the operator's own compute arguments, for operators whose work runs where those arguments say
       (a class attribute ``cost_compute_from_arguments = True``: costaware's in-worker training and
       feature operators). Sensors and operators that merely *name* an instance (the spend gate, the
       spot window, a remote job's waiting task) run on the worker and are priced as such;
    2. the task's own ``costaware_compute`` param (a dict of ``instance_type``, ``region``, ``market``,
       ``usd_per_hour``), read from the task's definition, never from a run's conf, so that a trigger
       cannot reprice other tasks;
    3. the ``[costaware] worker_*`` settings (``m5.large`` on-demand in ``us-east-1`` unless set).

    What a running try tells :func:`costaware.glue.annotate_task` wins over all of these.
    """
    declared: dict[str, Any] = {}
    try:
        param = (getattr(task, "params", None) or {}).get(PRICING_PARAM)
    except Exception:  # a task's params are a convenience here; the worker defaults still apply
        param = None
    if isinstance(param, Mapping):
        declared.update({k: param[k] for k in COMPUTE_FIELDS if param.get(k) not in (None, "")})
    if getattr(type(task), "cost_compute_from_arguments", False):
        for name in COMPUTE_FIELDS:
            value = getattr(task, name, None)
            if value not in (None, ""):
                declared[name] = value
    rate = declared.get("usd_per_hour")
    return {
        "instance_type": str(declared.get("instance_type") or option("worker_instance_type")),
        "region": str(declared.get("region") or option("worker_region")),
        "market": str(declared.get("market") or option("worker_market")),
        "usd_per_hour": Decimal(str(rate)) if rate is not None else None,
    }


def build_entry(
    ti: Any,
    outcome: str,
    error: BaseException | None,
    seconds: float,
    context: Mapping[str, Any] | None = None,
) -> Any:
    """The ledger entry of one finished try (pure apart from reading settings and the bundled catalog).

    ``context`` is the try's template context when the caller has it (the run's params); else it is read.
    """
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.budgets import valid_tags
    from costaware.core.errors import CostawareError
    from costaware.core.ledger import Kind, LedgerEntry
    from costaware.core.pricing import price_compute

    task = ti.task
    context = _template_context(ti) if context is None else context
    # Without a context (it could not be built), the task's own params still apply.
    params = dict((context.get("params") if context else getattr(task, "params", None)) or {})
    told = pop_annotations(ti)
    compute = compute_of(task)
    for name in ("instance_type", "region", "market"):
        if told.get(name):
            compute[name] = str(told[name])
    if told.get("usd_per_hour") is not None:
        compute["usd_per_hour"] = Decimal(str(told["usd_per_hour"]))
    note, cause = str(told.get("note", "")), str(told.get("cause", ""))
    if outcome == "failed":
        cause = cause or str(getattr(error, "ledger_cause", "error"))
        note = f"{type(error).__name__}: {error}"[:500] if error else note
    tags, dropped = valid_tags({**tags_for(_dag_of(task), params), **dict(told.get("tags") or {})})
    if dropped:
        # The try's cost is recorded all the same, under the tags that can be; the note says what is missing.
        log.warning("costaware: %s.%s recorded without tag(s): %s", ti.dag_id, ti.task_id, dropped)
        note = "; ".join(filter(None, [f"tags left out: {'; '.join(dropped.values())}", note]))[:500]
    try:
        charge = price_compute(bundled_catalog(), seconds=seconds, **compute, **_list_price(compute, tags))
        usd, hours, rate, on_demand = charge.usd, charge.hours, charge.usd_per_hour, charge.on_demand_usd
        gpu_hours, source = charge.gpu_hours, charge.price_source
    except CostawareError as e:
        log.error("costaware: cannot price task %s on %s: %s; recorded at $0", ti.task_id, compute, e)
        usd = rate = gpu_hours = Decimal(0)
        hours, on_demand, source = Decimal(str(round(seconds / 3600, 6))), None, "unpriced"
        note = "; ".join(filter(None, [f"unpriced: {e}", note]))[:500]
    return LedgerEntry(
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        try_number=int(ti.try_number),
        map_index=int(ti.map_index),
        trial=told.get("trial") or getattr(task, "trial", None),
        kind=Kind.COMPUTE,
        usd=usd,
        instance_type=compute["instance_type"],
        region=compute["region"],
        market=compute["market"],
        quantity=hours,
        unit="hour",
        unit_price_usd=rate,
        on_demand_usd=on_demand,
        gpu_hours=gpu_hours,
        tags=tags,
        incurred_at=datetime.now(timezone.utc),
        outcome=outcome,
        cause=cause,
        price_source=source,
        note=note,
    )


def _list_price(compute: Mapping[str, Any], tags: Mapping[str, str]) -> dict[str, Any]:
    """On-demand figure (price cache -> live -> snapshot) and discount, as ``price_compute`` arguments."""
    from costaware.adapters.price_source import configured_prices, discounts_from_settings
    from costaware.core.discounts import discount_for
    from costaware.hooks.ledger import CostLedgerHook

    if compute["market"] == "local" or compute["usd_per_hour"] is not None:
        return {}
    instance_type = str(compute["instance_type"])
    extra: dict[str, Any] = {}
    try:
        extra["discount"] = discount_for(discounts_from_settings(), instance_type, tags)
    except Exception as e:  # a bad setting must not lose the entry: priced without the discount
        log.error("costaware: [costaware] discounts ignored: %s", e)
    try:
        prices = configured_prices(CostLedgerHook().get_conn())
        service = "sagemaker" if instance_type.startswith("ml.") else "ec2"
        figure = prices.figure(instance_type, str(compute["region"]), service)
    except Exception as e:  # no figure anywhere, or the cache is unreachable: the snapshot's rules apply
        log.warning("costaware: on-demand price of %s from the price sources: %s", instance_type, e)
        return extra
    return {**extra, "on_demand_usd_per_hour": figure.usd_per_hour, "on_demand_source": figure.price_source}


def _dag_of(task: Any) -> Any:
    try:
        return task.dag
    except (AttributeError, RuntimeError):  # an operator run outside any DAG (tests, ad-hoc execute)
        return None


def _runtime_seconds(ti: Any) -> float | None:
    started = _STARTS.pop(_key(ti), None)
    if started is not None:
        return time.monotonic() - started
    if getattr(ti, "start_date", None) and getattr(ti, "end_date", None):
        return float((ti.end_date - ti.start_date).total_seconds())
    return None


def write_entry(entry: Any, ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID) -> None:
    """Record ``entry`` and settle its task's reservation; spool it when the ledger is unreachable."""
    from costaware.core.ledger import entry_from_json, entry_to_json, reservation_holder
    from costaware.hooks.ledger import CostLedgerHook

    try:
        ledger = CostLedgerHook(ledger_conn_id).get_conn()
        holder = reservation_holder(entry.dag_id, entry.run_id, entry.task_id, entry.map_index)
        # Open, or released by the run's end while this listener was still on its way (see
        # release_run_reservations): either way the cost settles the task's own reservation.
        reservation = ledger.reservation_to_settle(holder)
        if reservation is not None:
            ledger.settle(reservation.id, entry.usd, entry=_with_reservation(entry, reservation.id))
        else:
            ledger.record(entry)
        for path in sorted(spool_dir().glob("*.json")):
            ledger.record(entry_from_json(json.loads(path.read_text())))
            path.unlink()
            log.info("costaware: wrote spooled ledger entry %s", path.name)
    except Exception as e:
        folder = spool_dir()
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{entry.entry_uid}.json"
        temp = target.with_suffix(".tmp")
        temp.write_text(json.dumps(entry_to_json(entry)))
        temp.replace(target)
        log.error(
            "costaware: could not write the cost of %s.%s try %s to the ledger (%s); kept in %s and written "
            "with the next entry that succeeds",
            entry.dag_id,
            entry.task_id,
            entry.try_number,
            e,
            target,
        )


def _with_reservation(entry: Any, reservation_id: str) -> Any:
    from dataclasses import replace

    return replace(entry, reservation_id=reservation_id)


# -- giving back money held for tasks that will never run ------------------------------------------------

# Trigger rules under which a task cannot run once an upstream task failed (it becomes upstream_failed)...
_DOOMED_BY_FAILURE = frozenset({"all_success", "none_failed", "none_failed_min_one_success"})
# ... or was skipped (the skip propagates).
_DOOMED_BY_SKIP = frozenset({"all_success"})


def doomed_downstream(task: Any, outcome: str) -> set[str]:
    """Task ids downstream of ``task`` that can no longer run after it ``failed`` or was ``skipped``.

    Follows downstream edges only through tasks whose trigger rule propagates the outcome (``all_success``
    and, for failures, ``none_failed*``); a task with ``all_done`` or ``one_success`` may still run.
    """
    rules = _DOOMED_BY_FAILURE if outcome == "failed" else _DOOMED_BY_SKIP
    doomed: set[str] = set()
    todo = _downstream(task)
    while todo:
        child = todo.pop()
        rule = getattr(child, "trigger_rule", "all_success")
        if child.task_id in doomed or str(getattr(rule, "value", rule)) not in rules:
            continue
        doomed.add(child.task_id)
        todo.extend(_downstream(child))
    return doomed


def _downstream(task: Any) -> list[Any]:
    try:
        return list(getattr(task, "downstream_list", None) or [])
    except (AttributeError, RuntimeError):  # an operator run outside any DAG (tests, ad-hoc execute)
        return []


def release_reservations(
    dag_id: str,
    run_id: str,
    task_ids: set[str] | None,
    reason: str,
    ledger_conn_ids: set[str] | frozenset[str] = frozenset({"costaware_ledger"}),
) -> list[Any]:
    """Release the open reservations held for ``task_ids`` of one run (all of the run's when None).

    Never raises: a listener must not break the task or the scheduler; an unreleased reservation still
    expires at its TTL.
    """
    from costaware.core.money import format_usd_exact
    from costaware.hooks.ledger import CostLedgerHook

    released: list[Any] = []
    run_prefix = f"{dag_id}/{run_id}/"  # holders are dag/run/task/map_index (core.ledger.reservation_holder)
    prefixes = [run_prefix] if task_ids is None else [f"{run_prefix}{t}/" for t in sorted(task_ids)]
    for conn_id in sorted(ledger_conn_ids):
        try:
            ledger = CostLedgerHook(conn_id).get_conn()
            for prefix in prefixes:
                for reservation in ledger.open_reservations(holder_prefix=prefix):
                    released.append(ledger.release(reservation.id))
        except Exception as e:
            log.warning(
                "costaware: could not release reservations of %s/%s (%s): %s; they expire at their TTL",
                dag_id,
                run_id,
                reason,
                e,
            )
    for reservation in released:
        log.info(
            "costaware: released %s reserved in %s for %s: %s",
            format_usd_exact(reservation.usd),
            ", ".join(reservation.budgets),
            reservation.holder,
            reason,
        )
    return released


def _ledger_conn_ids(dag: Any) -> set[str]:
    found = {"costaware_ledger"}
    for task in getattr(dag, "tasks", None) or []:
        conn_id = getattr(task, "ledger_conn_id", None)
        if isinstance(conn_id, str) and conn_id:
            found.add(conn_id)
    return found


def release_for_doomed_downstream(ti: Any, outcome: str) -> list[Any]:
    """After a task failed for good or skipped, release what was reserved for tasks that cannot run now."""
    task = getattr(ti, "task", None)
    if task is None or type(ti).__module__.startswith("airflow.models"):
        return []  # a state set by hand reaches the api-server; the run-end hook covers it
    doomed = doomed_downstream(task, outcome)
    if not doomed:
        return []
    return release_reservations(
        ti.dag_id,
        ti.run_id,
        doomed,
        f"upstream task {ti.task_id!r} {outcome}, so they cannot run",
        _ledger_conn_ids(_dag_of(task)),
    )


def release_run_reservations(dag_run: Any, reason: str, *, wait_seconds: float = 5.0) -> list[Any]:
    """At the end of a run, release every reservation still open for it (its consumers never settled).

    This runs in the scheduler (or the api-server, when a person marks a run) inside its open database
    session. Looking up the ledger's Airflow connection there would use, and close, that very session (a
    thread-local scoped session) and detach the run being updated, so the work runs in a thread of its own,
    with its own session, and the caller waits at most ``wait_seconds`` for it: the scheduler must not
    hold its transaction (on SQLite, the database's write lock) for long; a slower release finishes after.
    """
    import threading

    args = (
        str(dag_run.dag_id),
        str(dag_run.run_id),
        None,
        reason,
        _ledger_conn_ids(getattr(dag_run, "dag", None)),
    )
    released: list[Any] = []
    worker = threading.Thread(
        target=lambda: released.extend(release_reservations(*args)), name="costaware-release", daemon=True
    )
    worker.start()
    worker.join(timeout=wait_seconds)
    return released


def _template_context(ti: Any) -> Mapping[str, Any]:
    """The try's template context (built anew on each call by the Task SDK), or {} when it cannot be built."""
    try:
        return ti.get_template_context() or {}
    except Exception:  # the context is a convenience for pricing and auditing, never a reason to lose a cost
        return {}


def _audit_overrides(ti: Any, context: Mapping[str, Any]) -> None:
    """Audit a run's params that differ from its DAG's defaults (once per run; never breaks the task)."""
    from costaware.glue import audit_run_overrides
    from costaware.hooks.ledger import CostLedgerHook

    try:
        dag_run = context.get("dag_run")
        if not getattr(dag_run, "conf", None):
            return  # a scheduled run, or a trigger with nothing given: nothing to audit, no ledger call
        ledger = CostLedgerHook(getattr(ti.task, "ledger_conn_id", DEFAULT_LEDGER_CONN_ID)).get_conn()
        audit_run_overrides(ledger, _dag_of(ti.task), dag_run, ti.dag_id, ti.run_id)
    except Exception as e:
        log.warning("costaware: could not audit the params of %s/%s: %s", ti.dag_id, ti.run_id, e)


class CostListener:
    """Airflow listener that writes one compute entry per finished task try."""

    @hookimpl
    def on_task_instance_running(self, previous_state: Any, task_instance: Any) -> None:
        _STARTS[_key(task_instance)] = time.monotonic()
        start_probe(task_instance)

    @hookimpl
    def on_task_instance_success(self, previous_state: Any, task_instance: Any) -> None:
        self._record(task_instance, "success", None)

    @hookimpl
    def on_task_instance_failed(
        self, previous_state: Any, task_instance: Any, error: BaseException | None
    ) -> None:
        self._record(task_instance, "failed", error)
        state = getattr(task_instance, "state", None)
        if str(getattr(state, "value", state)) == "failed":
            release_for_doomed_downstream(task_instance, "failed")  # not on a retry: it may still succeed

    @hookimpl
    def on_task_instance_skipped(self, previous_state: Any, task_instance: Any) -> None:
        self._record(task_instance, "skipped", None)
        release_for_doomed_downstream(task_instance, "skipped")

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        release_run_reservations(dag_run, f"the run failed ({msg or 'no reason given'})")

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        release_run_reservations(dag_run, "the run ended with its consumer skipped or never run")

    def _record(self, ti: Any, outcome: str, error: BaseException | None) -> None:
        # State changes made by a person in the UI reach the api-server with an ORM TaskInstance: nothing
        # ran there, so there is nothing to charge.
        if type(ti).__module__.startswith("airflow.models") or getattr(ti, "task", None) is None:
            return
        reading = stop_probe(ti)
        seconds = _runtime_seconds(ti)
        if seconds is None:
            log.warning("costaware: no runtime known for %s.%s; not charged", ti.dag_id, ti.task_id)
            return
        context = _template_context(ti)
        entry = build_entry(ti, outcome, error, seconds, context)
        write_entry(entry, getattr(ti.task, "ledger_conn_id", DEFAULT_LEDGER_CONN_ID))
        _audit_overrides(ti, context)
        record_utilization(ti, entry, reading, getattr(ti.task, "ledger_conn_id", DEFAULT_LEDGER_CONN_ID))
        from costaware.notifications.budget import alerts_after_spend

        alerts_after_spend(ti, dict(entry.tags), getattr(ti.task, "ledger_conn_id", DEFAULT_LEDGER_CONN_ID))


cost_listener = CostListener()
