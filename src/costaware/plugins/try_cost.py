"""What one task try cost: its ledger entry (:func:`build_entry`), priced by :mod:`costaware.try_pricing`.

The cost listener prices every finished try with these. The try's template context gives the run's params
(its allocation tags); what the running try told :func:`costaware.glue.annotate_task` wins over what the
task declares.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from costaware.adapters.redaction import redacted
from costaware.core.errors import CostawareError
from costaware.core.money import parse_usd
from costaware.glue import dag_of, ledger_conn_id_of, pop_annotations, recorded_tags
from costaware.settings import option
from costaware.try_pricing import charge_of, compute_of

log = logging.getLogger(__name__)


def build_entry(
    ti: Any,
    outcome: str,
    error: BaseException | None,
    seconds: float,
    context: Mapping[str, Any] | None = None,
    *,
    in_task_process: bool = True,
) -> Any:
    """The ledger entry of one finished try (pure apart from reading settings and the bundled catalog).

    ``context`` is the try's template context when the caller has it (the run's params); else it is read.
    ``in_task_process``: False where a killed try is priced (the scheduler, the API server), whose price
    cache is read only from a ledger that machine sees (see :func:`costaware.try_pricing.charge_of`).
    """
    task = ti.task
    context = template_context(ti) if context is None else context
    # Without a context (it could not be built), the task's own params still apply.
    params = dict((context.get("params") if context else getattr(task, "params", None)) or {})
    told = pop_annotations(ti)
    compute = compute_of(task)
    for name in ("instance_type", "region", "market"):
        if told.get(name):
            compute[name] = str(told[name])
    note_told = ""
    if told.get("usd_per_hour") is not None:
        try:
            compute["usd_per_hour"] = parse_usd(told["usd_per_hour"], name="usd_per_hour")
        except CostawareError as e:  # "$0.192" is read; text that is no amount must not lose the entry
            log.warning(
                "costaware: %s.%s: ignoring the annotated usd_per_hour (%s)", ti.dag_id, ti.task_id, e
            )
            note_told = f"annotated usd_per_hour ignored: {e}"
    note, cause = str(told.get("note", "")), str(told.get("cause", ""))
    if outcome == "failed":
        cause = cause or str(getattr(error, "ledger_cause", "error"))
        note = f"{type(error).__name__}: {error}" if error else note
    tags, dropped = recorded_tags(dag_of(task), params, told.get("tags"))
    if dropped:
        # The try's cost is recorded all the same, under the tags that can be; the note says what is missing.
        log.warning("costaware: %s.%s recorded without tag(s): %s", ti.dag_id, ti.task_id, dropped)
        note = "; ".join(filter(None, [f"tags left out: {'; '.join(dropped.values())}", note]))
    note = redacted("; ".join(filter(None, [note_told, note])))
    try:
        return _entry(ti, outcome, seconds, compute, tags, told, note, cause, in_task_process)
    except CostawareError as e:
        # The try's own compute cannot be recorded (a market 'preemptible', an instance type too long): its
        # time is billed as the worker's, so the entry, and the settlement of its reservation, are not lost.
        worker = compute_of(None)
        log.error(
            "costaware: %s.%s: the try's compute %s cannot be recorded (%s); priced as the worker's %s",
            ti.dag_id,
            ti.task_id,
            compute,
            e,
            worker,
        )
        note = "; ".join(filter(None, [f"recorded as the worker: {e}", note]))
        return _entry(ti, outcome, seconds, worker, tags, told, note, cause, in_task_process)


def _entry(
    ti: Any,
    outcome: str,
    seconds: float,
    compute: Mapping[str, Any],
    tags: Mapping[str, str],
    told: Mapping[str, Any],
    note: str,
    cause: str,
    in_task_process: bool,
) -> Any:
    """The entry of a try priced on ``compute``; raises CostawareError where a field cannot be recorded."""
    from costaware.core.ledger import UNPRICED, Kind, LedgerEntry, Market, clipped_note, try_entry_uid

    task = ti.task
    Market.parse(compute["market"])  # one the ledger cannot record ('preemptible'): the caller's fallback
    try:
        charge = charge_of(
            compute, tags, ledger_conn_id_of(task), seconds=seconds, in_task_process=in_task_process
        )
        usd, hours, rate, on_demand = charge.usd, charge.hours, charge.usd_per_hour, charge.on_demand_usd
        gpu_hours, source = charge.gpu_hours, charge.price_source
    except CostawareError as e:
        reason = str(e)
        # The setting that holds the bad value: a misspelt worker_region was blamed on the instance type.
        if compute["region"] == option("worker_region") and f"unknown region {compute['region']!r}" in reason:
            reason += " (the [costaware] worker_region setting: fix it there)"
        elif compute["instance_type"] == option("worker_instance_type"):
            reason += " (the [costaware] worker_instance_type setting: fix it there)"
        log.error("costaware: cannot price task %s on %s: %s; recorded at $0", ti.task_id, compute, reason)
        usd = rate = gpu_hours = Decimal(0)
        hours, on_demand, source = Decimal(str(round(seconds / 3600, 6))), None, UNPRICED
        note = "; ".join(filter(None, [f"unpriced: {reason}", note]))
    return LedgerEntry(
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        try_number=int(ti.try_number),
        map_index=int(ti.map_index),
        # Airflow's id of the try where it has one (a try marked while it ran is recorded by the API server
        # too, under the same id); else a new one.
        entry_uid=try_entry_uid(ti.id, int(ti.try_number)) if getattr(ti, "id", None) else uuid.uuid4().hex,
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
        note=clipped_note(note),
    )


def template_context(ti: Any) -> Mapping[str, Any]:
    """The try's template context (built anew on each call by the Task SDK), or {} when it cannot be built."""
    try:
        return ti.get_template_context() or {}
    except Exception:  # the context is a convenience for pricing and auditing, never a reason to lose a cost
        return {}
