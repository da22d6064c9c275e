"""What each task try used, measured by the cost listener and stored next to the try's ledger entry.

The listener calls :func:`start_probe` when a try starts running and :func:`stop_probe` then
:func:`record_utilization` when it ends, all in the task process. Remote training reports the backend's own
figures with :func:`annotate_utilization`. See docs/efficiency.md.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from costaware.glue import DEFAULT_LEDGER_CONN_ID, dag_of

log = logging.getLogger(__name__)


def _key(ti: Any) -> tuple[str, str, str, int, int]:
    return (ti.dag_id, ti.run_id, ti.task_id, int(ti.map_index), int(ti.try_number))


_PROBES: dict[tuple[str, str, str, int, int], Any] = {}
_REMOTE: dict[tuple[str, str, str, int, int], dict[str, Any]] = {}


def annotate_utilization(
    ti: Any,
    *,
    backend: str,
    cpu_seconds: float | None = None,
    wall_seconds: float | None = None,
    peak_memory_gib: float | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> None:
    """Tell the listener what a remote backend measured for this try's training (the hook for remote runs).

    When the work runs elsewhere (SageMaker, Batch, Kubernetes) the task process only waits, so its own
    measurement says nothing about the training: the figures given here replace it in the try's
    utilization record. Figures left out keep the local measurement.

    Args:
        ti: The running task instance (``context["ti"]``).
        backend: The backend's name, e.g. ``sagemaker`` (stored as the record's source).
        cpu_seconds: CPU seconds the remote job used.
        wall_seconds: Wall seconds the remote job ran.
        peak_memory_gib: The remote job's peak memory.
        metrics: The backend's own metrics, stored as given (JSON-able values).
    """
    if not backend:
        raise ValueError("annotate_utilization needs the backend's name, e.g. backend='sagemaker'")
    figures = {"cpu_seconds": cpu_seconds, "wall_seconds": wall_seconds, "peak_memory_gib": peak_memory_gib}
    for name, value in figures.items():
        # Checked here, where the caller sees it: "3GiB" dropped the whole record later, with a cryptic log.
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if value is not None and (
            number is None
            or not math.isfinite(number)
            or number < 0
            or (name == "wall_seconds" and number == 0)
        ):
            least = "> 0" if name == "wall_seconds" else ">= 0"
            raise ValueError(f"annotate_utilization: {name} must be a number {least}, got {value!r}")
    _REMOTE[_key(ti)] = {
        "backend": str(backend),
        **figures,
        "metrics": dict(metrics or {}),
    }


def start_probe(ti: Any) -> None:
    """Start measuring the try's process tree (a resumed deferred try starts a fresh measurement)."""
    try:
        from costaware.adapters.process_probe import ProcessTreeProbe

        old = _PROBES.pop(_key(ti), None)
        if old is not None:
            old.stop()
        _PROBES[_key(ti)] = ProcessTreeProbe().start()
    except Exception as e:  # measuring is a bonus: the try and its cost must not depend on it
        log.warning("costaware: cannot measure the utilization of %s: %s", getattr(ti, "task_id", "?"), e)


def stop_probe(ti: Any) -> Any:
    """Stop the try's probe and return its ``ProbeReading`` (None when it was never started or failed)."""
    probe = _PROBES.pop(_key(ti), None)
    if probe is None:
        return None
    try:
        return probe.stop()
    except Exception as e:
        log.warning("costaware: cannot read the utilization of %s: %s", ti.task_id, e)
        return None


def runs_per_month(dag: Any, after: datetime | None = None) -> float | None:
    """How many runs the DAG's timetable schedules in the 730 hours after ``after`` (None: no schedule).

    Past ``TASK_MAX_RUNS`` runs the month is extrapolated at the pace of the runs counted: this runs in the
    task process after every try, and walking a per-minute DAG's month run by run took longer than Airflow
    lets the listener run (the budget alerts after it were never sent).
    """
    from datetime import timedelta

    timetable = getattr(dag, "timetable", None)
    if timetable is None or not getattr(timetable, "can_be_scheduled", True):
        return None
    try:
        from costaware.adapters.airflow_schedule import TASK_MAX_RUNS, count_runs

        start = after or datetime.now(timezone.utc)
        count = count_runs(timetable, start, start + timedelta(hours=730), max_runs=TASK_MAX_RUNS)
        return float(count) if count else None
    except Exception as e:  # an exotic timetable: the frequency falls back to the runs seen
        log.info("costaware: cannot count the runs of %s per month: %s", getattr(dag, "dag_id", "?"), e)
        return None


def measurement_of(ti: Any, entry: Any, reading: Any) -> Any:
    """The try's utilization record: the local reading, overridden by what a remote backend reported."""
    from decimal import Decimal

    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.efficiency import GIB, Measurement
    from costaware.core.errors import PriceNotFoundError

    remote = _REMOTE.pop(_key(ti), None) or {}
    vcpus = memory = None
    if entry.instance_type and entry.region:
        try:
            offer = bundled_catalog().offer(entry.instance_type, entry.region)
            vcpus, memory = offer.vcpus, offer.memory_gib
        except PriceNotFoundError:
            pass
    wall = float(remote.get("wall_seconds") or (reading.wall_seconds if reading else 0.0))
    cpu = float(remote.get("cpu_seconds") or (reading.cpu_seconds if reading else 0.0))
    peak = remote.get("peak_memory_gib")
    peak_bytes = (
        int(Decimal(str(peak)) * GIB) if peak is not None else (reading.peak_rss_bytes if reading else 0)
    )
    return Measurement(
        dag_id=entry.dag_id,
        task_id=entry.task_id,
        run_id=entry.run_id,
        try_number=entry.try_number,
        instance_type=entry.instance_type,
        region=entry.region,
        market=entry.market.value if entry.market else None,
        usd=entry.usd,
        wall_seconds=wall,
        cpu_seconds=cpu,
        peak_memory_bytes=peak_bytes,
        vcpus=vcpus,
        memory_gib=memory,
        runs_per_month=runs_per_month(dag_of(ti.task), entry.incurred_at),
        source=str(remote.get("backend") or "local"),
        backend_metrics=remote.get("metrics") or {},
        measured_at=entry.incurred_at,
    )


def carbon_overrides(task: Any) -> dict[str, Any]:
    """``power_kw`` and ``grid_zone`` of a task: its operator attributes, else its ``costaware_compute``.

    A blank value, or a template of an unset param ("None", "null"), is not given: a blank grid_zone hid
    ``[costaware] worker_grid_zone`` (the region's zone was used), "None" was read as a zone of that name, and
    a power_kw of "None" lost the try's estimate ("not a number of kW").
    """
    from costaware.core.given import not_given
    from costaware.try_pricing import CARBON_FIELDS, PRICING_PARAM, stripped

    try:
        param = (getattr(task, "params", None) or {}).get(PRICING_PARAM)
    except Exception:  # a task's params are a convenience here
        param = None
    given = dict(param) if isinstance(param, Mapping) else {}
    out: dict[str, Any] = {}
    for name in CARBON_FIELDS:
        value, where = getattr(task, name, None), "operator argument"
        if not_given(value):
            value, where = given.get(name), f"{PRICING_PARAM} param"
        if not not_given(value):
            out[name] = stripped(value)
            if name == "grid_zone":
                out["grid_zone_from"] = f"the task's grid_zone ({where})"
    if "grid_zone" not in out:
        from costaware.settings import WORKER_GRID_ZONE_SETTING, worker_grid_zone

        worker_grid = worker_grid_zone()
        if worker_grid:  # the grid the deployment says its workers draw from
            out["grid_zone"] = worker_grid
            out["grid_zone_from"] = WORKER_GRID_ZONE_SETTING
    return out


def with_try_emissions(ti: Any, entry: Any, reading: Any, seconds: float) -> Any:
    """``entry`` with the emissions of its try: CPU use from the reading (or what a remote backend reported).

    The try ran ``seconds`` up to the entry's time. Never raises: an entry without an estimate is written.
    """
    try:
        from datetime import timedelta

        from costaware.adapters.emissions import with_emissions

        remote = _REMOTE.get(_key(ti)) or {}
        cpu = remote.get("cpu_seconds")
        wall = remote.get("wall_seconds") if cpu is not None else None
        if cpu is None and reading is not None:
            cpu, wall = reading.cpu_seconds, reading.wall_seconds
        # The share of the measured span the CPUs were busy, over the try's own runtime.
        busy = None if cpu is None else float(cpu) * (seconds / float(wall) if wall else 1.0)
        return with_emissions(
            entry,
            instance_type=entry.instance_type,
            region=entry.region,
            start=entry.incurred_at - timedelta(seconds=seconds),
            end=entry.incurred_at,
            cpu_seconds=busy,
            **carbon_overrides(ti.task),
        )
    except Exception as e:  # the cost matters more than its estimate
        log.error("costaware: no emissions estimate for %s.%s: %s", entry.dag_id, entry.task_id, e)
        return entry


def record_utilization(
    ti: Any, entry: Any, reading: Any, ledger_conn_id: str = DEFAULT_LEDGER_CONN_ID
) -> None:
    """Store the try's utilization next to its entry; a failure is logged, never raised."""
    if reading is None and _key(ti) not in _REMOTE:
        return
    try:
        from costaware.adapters.ledger.efficiency import record_utilization as store
        from costaware.hooks.ledger import CostLedgerHook

        measurement = measurement_of(ti, entry, reading)
        store(
            CostLedgerHook(ledger_conn_id).get_conn(), entry.entry_uid, measurement, map_index=entry.map_index
        )
        log.info(
            "costaware: %s try %s used %.2f CPU s in %.2f s, peak %.3f GiB (%s)",
            entry.task_id,
            entry.try_number,
            measurement.cpu_seconds,
            measurement.wall_seconds,
            measurement.peak_memory_gib,
            measurement.source,
        )
    except Exception as e:
        log.error("costaware: could not record the utilization of %s.%s: %s", entry.dag_id, entry.task_id, e)
