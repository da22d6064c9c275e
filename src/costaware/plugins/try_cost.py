"""What one task try cost: the compute it ran on (:func:`compute_of`) and its entry (:func:`build_entry`).

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
from costaware.glue import ledger_conn_id_of, pop_annotations, tags_for
from costaware.settings import option

log = logging.getLogger(__name__)

COMPUTE_FIELDS = ("instance_type", "region", "market", "usd_per_hour")
#: Operator attributes (or ``costaware_compute`` param keys) an on-premises task gives for its emissions,
#: read by the utilization listener (``plugins/utilization.py``).
CARBON_FIELDS = ("power_kw", "grid_zone")
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
        known = (*COMPUTE_FIELDS, *CARBON_FIELDS)  # the carbon ones are read by the utilization listener
        unknown = sorted(str(k) for k in param if k not in known)
        if unknown:  # {"markt": "spot"} priced the try on-demand without a word
            log.error(
                "costaware: task %s: %s keys %s are not read (use %s): the try is priced without them",
                getattr(task, "task_id", "?"),
                PRICING_PARAM,
                unknown,
                ", ".join(known),
            )
    if getattr(type(task), "cost_compute_from_arguments", False):
        for name in COMPUTE_FIELDS:
            value = getattr(task, name, None)
            if value not in (None, ""):
                declared[name] = value
    rate = declared.get("usd_per_hour")
    if rate is not None:
        try:
            # As the operators parse it: "$0.192" crashed here with Decimal() and the try's entry was lost.
            rate = parse_usd(rate, name="usd_per_hour")
        except CostawareError as e:
            # The try is still billed, at the catalog price of its instance: never lost for a bad rate.
            log.warning("ignoring the task's usd_per_hour (%s): the try is priced from the catalog", e)
            rate = None
    market = str(declared.get("market") or _worker_market())
    return {
        "instance_type": str(declared.get("instance_type") or option("worker_instance_type")),
        "region": str(declared.get("region") or option("worker_region")),
        "market": market,
        "usd_per_hour": rate,
    }


def _worker_market() -> str:
    """``[costaware] worker_market``; a value that is no market ('spto') is said and read as on-demand.

    Else every try priced on the worker would fail to be recorded at all.
    """
    from costaware.core.ledger import Market

    raw = option("worker_market")
    try:
        return Market.parse(raw).value
    except CostawareError as e:
        log.error("costaware: [costaware] worker_market: %s; tries on the worker are priced on-demand", e)
        return "on_demand"


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
    cache is read only from a ledger that machine sees (see :func:`_list_price`).
    """
    from costaware.core.budgets import valid_tags

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
    tags, dropped = valid_tags({**tags_for(dag_of(task), params), **dict(told.get("tags") or {})})
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
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.ledger import UNPRICED, Kind, LedgerEntry, Market, clipped_note, try_entry_uid
    from costaware.core.pricing import price_compute

    task = ti.task
    Market.parse(compute["market"])  # one the ledger cannot record ('preemptible'): the caller's fallback
    try:
        listed = _list_price(compute, tags, ledger_conn_id_of(task), in_task_process=in_task_process)
        charge = price_compute(bundled_catalog(), seconds=seconds, **compute, **listed)
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


def _list_price(
    compute: Mapping[str, Any], tags: Mapping[str, str], ledger_conn_id: str, *, in_task_process: bool = True
) -> dict[str, Any]:
    """On-demand figure (price cache -> live -> snapshot) and discount, as ``price_compute`` arguments.

    The price cache is the one in the ledger the task writes to (``ledger_conn_id``), where a team imported
    its prices (``costaware prices import``), not the default ledger's. Outside the task's process that
    ledger is opened only where the machine sees it: the hook's fallback created an empty SQLite file, which
    the killed try's own entry then went to instead of the spool.
    """
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
        if in_task_process:
            ledger = CostLedgerHook(ledger_conn_id=ledger_conn_id).get_conn()
        else:
            from costaware.ledger_spool import workers_ledger

            ledger = workers_ledger(ledger_conn_id)
        prices = configured_prices(ledger)
        service = "sagemaker" if instance_type.startswith("ml.") else "ec2"
        figure = prices.figure(instance_type, str(compute["region"]), service)
    except Exception as e:  # no figure anywhere, or the cache is unreachable: the snapshot's rules apply
        log.warning("costaware: on-demand price of %s from the price sources: %s", instance_type, e)
        return extra
    return {**extra, "on_demand_usd_per_hour": figure.usd_per_hour, "on_demand_source": figure.price_source}


def dag_of(task: Any) -> Any:
    """The task's DAG, or None for an operator run outside any DAG."""
    try:
        return task.dag
    except (AttributeError, RuntimeError):  # an operator run outside any DAG (tests, ad-hoc execute)
        return None


def template_context(ti: Any) -> Mapping[str, Any]:
    """The try's template context (built anew on each call by the Task SDK), or {} when it cannot be built."""
    try:
        return ti.get_template_context() or {}
    except Exception:  # the context is a convenience for pricing and auditing, never a reason to lose a cost
        return {}
