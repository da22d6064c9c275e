"""The cost listener: every task try that ran is priced and written to the ledger, failed tries included.

It runs inside the task process on the worker (Airflow 3 calls task-instance listeners there), measures
the try's own runtime from ``on_task_instance_running`` to its end, prices it on the compute the task
declares (see :func:`costaware.try_pricing.compute_of`), estimates its emissions (``kg_co2e``; see
:func:`costaware.plugins.utilization.with_try_emissions`; an on-premises task gives ``power_kw`` and
``grid_zone``), and settles the reservation a ``SpendCapSensor`` made for the task.
A try killed before it could end in its worker (marked failed or success while it ran, a lost worker) is
recorded where Airflow reports it, from the metadata database (:mod:`costaware.plugins.killed_tries`).
A try is always recorded: a tag that cannot be stored is left out and named in the entry's note. When
the ledger cannot be written the entry goes to a spool folder (:mod:`costaware.ledger_spool`) and is
written with the next entry that succeeds, by a scheduler or API server as it starts, or by ``costaware spool
drain``: no row is lost.

Money reserved for a task that will never run is given back at once: when a task fails for good (or
skips), the reservations of the downstream tasks that can no longer run are released; when a run ends
(failed, marked failed, or succeeded with a consumer skipped), every reservation still open for the run is,
and the remote training jobs its ended tasks left running with nothing to follow them are stopped and billed
(:func:`~costaware.plugins.run_end_reconcile.reconcile_unfollowed_jobs`; a person's mark of one such task, at
once: :func:`~costaware.plugins.run_end_reconcile.reconcile_marked_task`).

Pricing a try lives in :mod:`costaware.plugins.try_cost`, releasing reservations in
:mod:`costaware.plugins.reservation_release`, the run-end reconcile in
:mod:`costaware.plugins.run_end_reconcile`; this module holds the hooks and the runtime.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from airflow.listeners import hookimpl

from costaware.glue import (
    ANNOTATION_FIELDS,
    DEFAULT_LEDGER_CONN_ID,
    TAG_NAMES,
    annotate_task,
    dag_of,
    ledger_conn_id_of,
    tags_for,
)
from costaware.glue import try_key as _key
from costaware.ledger_spool import (
    STALE_CLAIM_SECONDS,
    spool_dir,
    spool_dirs_to_drain,
    spool_entry,
    spool_record,
    workers_ledger,
)
from costaware.ledger_spool import record_and_settle as _record_and_settle
from costaware.ledger_spool_drain import combined, drain
from costaware.plugins.reservation_release import (
    end_waiting_gate,
    in_own_thread,
    release_for_doomed_downstream,
    release_run_reservations,
)
from costaware.plugins.run_end_reconcile import reconcile_marked_task, reconcile_unfollowed_jobs
from costaware.plugins.try_cost import build_entry
from costaware.plugins.try_cost import template_context as _template_context
from costaware.plugins.utilization import (
    record_utilization,
    start_probe,
    stop_probe,
    with_try_emissions,
)

log = logging.getLogger(__name__)

__all__ = [
    "ANNOTATION_FIELDS",
    "STALE_CLAIM_SECONDS",
    "TAG_NAMES",
    "CostListener",
    "annotate_task",
    "cost_listener",
    "spool_dir",
    "tags_for",
]

_STARTS: dict[tuple[str, str, str, int, int], float] = {}


def _runtime_seconds(ti: Any) -> float | None:
    started = _STARTS.pop(_key(ti), None)
    if started is not None:
        return time.monotonic() - started
    if getattr(ti, "start_date", None) and getattr(ti, "end_date", None):
        return float((ti.end_date - ti.start_date).total_seconds())
    return None


def write_entry(
    entry: Any,
    ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID,
    *,
    retrying: bool = False,
    in_task_process: bool = True,
) -> None:
    """Record ``entry`` and settle its task's reservation; spool it when the ledger is unreachable.

    ``in_task_process``: written by the try's own worker, which opens the ledger as its tasks do (creating
    the embedded SQLite file on first use). Otherwise (a killed try, recorded by the scheduler or the API
    server) a ledger this machine does not see is refused, as a drain refuses it
    (:func:`costaware.ledger_spool.workers_ledger`): the hook's fallback is a ledger no budget reads, so the
    entry is spooled and the log names what to set.

    ``retrying``: the try failed and the task will run again: its entry is paid from the task's hold, which
    stays open for the next try (settled by the first, the retries ran with no hold, and another task could
    take the money they spent).

    Then the entries spooled for the same ledger are written, each as it would have been (settling its
    task's reservation), each on its own: one that the ledger refuses moves to ``spool/refused`` instead of
    blocking the rest.
    """
    from costaware.hooks.ledger import CostLedgerHook

    try:
        if in_task_process:
            ledger = CostLedgerHook(ledger_conn_id).get_conn()
        else:
            ledger = workers_ledger(ledger_conn_id)
        _record_and_settle(ledger, entry, retrying=retrying)
    except Exception as e:
        try:
            target = spool_entry(spool_dir(), entry, ledger_conn_id, retrying=retrying)
        except Exception as spool_error:
            # The last resort: the log keeps the whole entry, or the try's cost is in no ledger at all.
            log.error(
                "costaware: could not write the cost of %s.%s try %s to the ledger (%s), and could not keep "
                "it in the spool either (%s): save the JSON that ends this line as %s.json in "
                "$AIRFLOW_HOME/costaware/spool and run `costaware spool drain`: %s",
                entry.dag_id,
                entry.task_id,
                entry.try_number,
                e,
                spool_error,
                entry.entry_uid,
                spool_record(entry, ledger_conn_id, retrying=retrying),
            )
            return
        log.error(
            "costaware: could not write the cost of %s.%s try %s to the ledger (%s); kept in %s and written "
            "with the next entry that succeeds, or by `costaware spool drain`",
            entry.dag_id,
            entry.task_id,
            entry.try_number,
            e,
            target,
        )
        return
    _drain_spool(ledger, ledger_conn_id)


def _drain_spool(ledger: Any, ledger_conn_id: str) -> None:
    """Write the entries spooled for ``ledger_conn_id`` (see :func:`costaware.ledger_spool_drain.drain`).

    Never raises: the entry just written stays written, and each spooled one is kept somewhere.
    """
    try:
        folders = spool_dirs_to_drain(spool_dir())
    except Exception as e:  # an AIRFLOW_HOME refused: the task's alerts and audit still follow its entry
        log.error("costaware: could not look in the spool for entries waiting to be written: %s", e)
        return
    for folder in folders:
        drain(
            folder,
            lambda _conn_id: ledger,
            only_ledger_conn_id=ledger_conn_id,
            record=_record_and_settle,  # read here, so that a test can stand in for the ledger's write
        )


def _write_priced(ledger_conn_id: str, price: Any, retrying: bool) -> None:
    """Write a killed try's entry: in the scheduler or the API server, never in the try's own process."""
    entry = price()
    if entry is not None:
        write_entry(entry, ledger_conn_id, retrying=retrying, in_task_process=False)


def _will_retry(ti: Any) -> bool:
    """Whether ``ti``'s try failed and the task will run again (Airflow put it up for retry)."""
    state = getattr(ti, "state", None)
    return str(getattr(state, "value", state)) == "up_for_retry"


def _audit_overrides(ti: Any, context: Mapping[str, Any]) -> None:
    """Audit a run's params that differ from its DAG's defaults (once per run; never breaks the task)."""
    from costaware.glue import audit_run_overrides
    from costaware.hooks.ledger import CostLedgerHook

    try:
        dag_run = context.get("dag_run")
        if not getattr(dag_run, "conf", None):
            return  # a scheduled run, or a trigger with nothing given: nothing to audit, no ledger call
        ledger = CostLedgerHook(ledger_conn_id_of(ti.task)).get_conn()
        audit_run_overrides(ledger, dag_of(ti.task), dag_run, ti.dag_id, ti.run_id)
    except Exception as e:
        log.warning("costaware: could not audit the params of %s/%s: %s", ti.dag_id, ti.run_id, e)


def _drain_every_ledger() -> None:
    """Write what waits in this machine's spool, each entry to its own ledger; never raises.

    A ledger this machine does not see (a scheduler without the workers' connection) is not replaced by the
    hook's fallback SQLite file, which no budget reads: its entries wait, and the log says why.
    """
    try:
        results = [drain(folder, workers_ledger) for folder in spool_dirs_to_drain(spool_dir())]
    except Exception as e:  # a spool folder that cannot be read or named: said, the component starts as ever
        log.error("costaware: could not drain the spool: %s", e)
        return
    for conn_id, why in sorted((combined(results).unavailable or {}).items()):
        log.warning("costaware: spooled entries of ledger %r still wait (%s)", conn_id, why)


def drain_spool_at_start(wait_seconds: float = 5.0) -> None:
    """Drain this machine's spool in a thread of its own as a component starts; never raises.

    Called by the scheduler, triggerer and DAG processor (``on_starting``, which Airflow calls for a Job) and
    by the API server (the Cost app's start, :mod:`costaware.plugins.ui.app`), which runs no Job: a killed
    try it spooled while the ledger was down otherwise waited for the next one killed there, or a
    ``costaware spool drain``. The caller waits at most ``wait_seconds``; a slower ledger finishes after.
    """
    try:
        if not any(next(folder.glob("*.json"), None) for folder in spool_dirs_to_drain(spool_dir())):
            return  # nothing waits: no ledger is opened
        in_own_thread(_drain_every_ledger, name="costaware-spool-drain", wait_seconds=wait_seconds)
    except Exception as e:  # a spool folder that cannot be read: said, and the component starts as ever
        log.error("costaware: could not drain the spool at start: %s; `costaware spool drain` writes it", e)


def _end_run(dag_run: Any, reason: str) -> None:
    """Reconcile a run's unfollowed jobs, then release its holds but those the billing settles."""
    billing, also_keep, keep_task_ids = reconcile_unfollowed_jobs(dag_run)
    release_run_reservations(
        dag_run, reason, keep_holders=billing, also_keep=also_keep, keep_task_ids=keep_task_ids
    )


class CostListener:
    """Airflow listener that writes one compute entry per finished task try."""

    @hookimpl
    def on_starting(self, component: Any) -> None:
        # A scheduler (or triggerer, or DAG processor) starting drains what its machine spooled: a killed
        # try it recorded while the ledger was down waited otherwise for the next killed try there. A task
        # process drains after its own entry instead, without delaying its start on a ledger still down.
        if type(component).__module__.startswith("airflow.sdk"):
            return
        drain_spool_at_start()

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
        if str(getattr(state, "value", state)) == "failed":  # not on a retry: it may still succeed
            release_for_doomed_downstream(task_instance, "failed")
            end_waiting_gate(task_instance)  # a spend gate whose wait timed out

    @hookimpl
    def on_task_instance_skipped(self, previous_state: Any, task_instance: Any) -> None:
        self._record(task_instance, "skipped", None)
        release_for_doomed_downstream(task_instance, "skipped")
        end_waiting_gate(task_instance)  # a spend gate with soft_fail whose wait timed out

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        _end_run(dag_run, f"the run failed ({msg or 'no reason given'})")

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        _end_run(dag_run, "the run ended with its consumer skipped or never run")

    def _record(self, ti: Any, outcome: str, error: BaseException | None) -> None:
        if type(ti).__module__.startswith("airflow.models"):
            # A state change the scheduler or the API server reports (a lost worker, a zombie, a task or run
            # marked while it ran): the try did not end in its worker, whose listener never ran. It is
            # priced there from the metadata database; one that ran to its end is not counted twice.
            from costaware.plugins.killed_tries import killed_try_pricing

            pricing = killed_try_pricing(ti, outcome)  # the database's facts, read in the caller's session
            if pricing is not None:
                retrying = _will_retry(ti)
                in_own_thread(lambda: _write_priced(*pricing, retrying), name="costaware-killed-try")
            reconcile_marked_task(ti)  # a person's mark, which the API server reports
            return
        if getattr(ti, "task", None) is None:
            return
        reading = stop_probe(ti)
        seconds = _runtime_seconds(ti)
        if seconds is None:
            log.warning("costaware: no runtime known for %s.%s; not charged", ti.dag_id, ti.task_id)
            return
        context = _template_context(ti)
        try:
            entry = with_try_emissions(
                ti, build_entry(ti, outcome, error, seconds, context), reading, seconds
            )
        except Exception:
            # Said loudly: the try's cost is missing from the ledger, and its reservation stays open until
            # the run ends.
            log.exception(
                "costaware: the cost of %s.%s try %s (%.0f s) could not be recorded",
                ti.dag_id,
                ti.task_id,
                ti.try_number,
                seconds,
            )
            return
        ledger_conn_id = ledger_conn_id_of(ti.task)
        write_entry(entry, ledger_conn_id, retrying=_will_retry(ti))
        _audit_overrides(ti, context)
        record_utilization(ti, entry, reading, ledger_conn_id)
        from costaware.notifications.budget import alerts_after_spend

        alerts_after_spend(ti, dict(entry.tags), ledger_conn_id)


cost_listener = CostListener()
