"""The cost listener: every task try that ran is priced and written to the ledger, failed tries included.

It runs inside the task process on the worker (Airflow 3 calls task-instance listeners there), measures
the try's own runtime from ``on_task_instance_running`` to its end, prices it on the compute the task
declares (operator attributes, then the run's params, then the ``[costaware] worker_*`` settings), and
settles the reservation a ``SpendCapSensor`` made for the task. When the ledger cannot be written the
entry goes to a spool folder and is written with the next entry that succeeds: no row is lost.
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
    costaware_home,
    pop_annotations,
    tags_for,
)
from costaware.glue import setting as _setting
from costaware.glue import try_key as _key
from costaware.plugins.utilization import record_utilization, start_probe, stop_probe

log = logging.getLogger(__name__)

__all__ = ["ANNOTATION_FIELDS", "TAG_NAMES", "CostListener", "annotate_task", "cost_listener", "tags_for"]

_STARTS: dict[tuple[str, str, str, int, int], float] = {}


def spool_dir() -> Path:
    """Where entries wait when the ledger cannot be written: ``$AIRFLOW_HOME/costaware/spool``."""
    return costaware_home("spool")


def _compute_of(task: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """Where the task ran: operator attributes win, then run params, then the worker defaults."""

    def pick(name: str, default: str | None) -> Any:
        value = getattr(task, name, None)
        if value in (None, ""):
            value = params.get(name)
        return default if value in (None, "") else value

    rate = pick("usd_per_hour", None)
    return {
        "instance_type": str(pick("instance_type", _setting("worker_instance_type", "m5.large"))),
        "region": str(pick("region", _setting("worker_region", "us-east-1"))),
        "market": str(pick("market", _setting("worker_market", "on_demand"))),
        "usd_per_hour": Decimal(str(rate)) if rate is not None else None,
    }


def build_entry(ti: Any, outcome: str, error: BaseException | None, seconds: float) -> Any:
    """The ledger entry of one finished try (pure apart from reading settings and the bundled catalog)."""
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.errors import CostawareError
    from costaware.core.ledger import Kind, LedgerEntry
    from costaware.core.pricing import price_compute

    task = ti.task
    try:
        params = dict(ti.get_template_context().get("params") or {})
    except Exception:  # the context is a convenience here; the task's own params still apply
        params = dict(getattr(task, "params", None) or {})
    told = pop_annotations(ti)
    compute = _compute_of(task, params)
    for name in ("instance_type", "region", "market"):
        if told.get(name):
            compute[name] = str(told[name])
    if told.get("usd_per_hour") is not None:
        compute["usd_per_hour"] = Decimal(str(told["usd_per_hour"]))
    note, cause = str(told.get("note", "")), str(told.get("cause", ""))
    if outcome == "failed":
        cause = cause or str(getattr(error, "ledger_cause", "error"))
        note = f"{type(error).__name__}: {error}"[:500] if error else note
    tags = {**tags_for(_dag_of(task), params), **dict(told.get("tags") or {})}
    try:
        charge = price_compute(bundled_catalog(), seconds=seconds, **compute, **_list_price(compute, tags))
        usd, hours, rate, on_demand = charge.usd, charge.hours, charge.usd_per_hour, charge.on_demand_usd
        gpu_hours, source = charge.gpu_hours, charge.price_source
    except CostawareError as e:
        log.error("costaware: cannot price task %s on %s: %s; recorded at $0", ti.task_id, compute, e)
        usd = rate = gpu_hours = Decimal(0)
        hours, on_demand, source = Decimal(str(round(seconds / 3600, 6))), None, "unpriced"
        note = f"unpriced: {e}"[:500]
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
        reservations = ledger.open_reservations(holder_prefix=holder)
        reservations = [r for r in reservations if r.holder == holder]
        if reservations:
            ledger.settle(reservations[0].id, entry.usd, entry=_with_reservation(entry, reservations[0].id))
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

    @hookimpl
    def on_task_instance_skipped(self, previous_state: Any, task_instance: Any) -> None:
        self._record(task_instance, "skipped", None)

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
        entry = build_entry(ti, outcome, error, seconds)
        write_entry(entry, getattr(ti.task, "ledger_conn_id", DEFAULT_LEDGER_CONN_ID))
        record_utilization(ti, entry, reading, getattr(ti.task, "ledger_conn_id", DEFAULT_LEDGER_CONN_ID))
        from costaware.notifications.budget import alerts_after_spend

        alerts_after_spend(ti, dict(entry.tags), getattr(ti.task, "ledger_conn_id", DEFAULT_LEDGER_CONN_ID))


cost_listener = CostListener()
