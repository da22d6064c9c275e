"""What task tries used: measured utilization, idle cost and memory headroom, per try and per task.

A try's utilization is what its process tree really used (CPU seconds, peak resident memory) against what
the instance it was priced on offers (vCPUs x wall seconds, memory). Idle cost is the share of the try's
cost its vCPUs spent idle: ``usd x (1 - CPU utilization)``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.money import MICRO_USD

GIB = 1024**3
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class Measurement:
    """What one task try used and cost, as the cost listener measured it.

    Args:
        dag_id: The try's DAG.
        task_id: The try's task.
        run_id: The try's DAG run.
        try_number: The try.
        instance_type: Instance type the try was priced on.
        region: Its region.
        market: ``on_demand``, ``spot`` or ``local``.
        usd: Actual cost of the try.
        wall_seconds: Wall time of the try.
        cpu_seconds: CPU time (user + system) of its process tree.
        peak_memory_bytes: Peak resident memory of its process tree.
        vcpus: vCPUs of the instance (None: unknown type).
        memory_gib: Memory of the instance (None: unknown type).
        runs_per_month: How often the task's DAG runs, from its schedule (None: not scheduled).
        source: ``local`` (measured in the task process) or the remote backend that reported it.
        backend_metrics: The backend's own metrics, as it reported them.
        measured_at: When the try ended.
        team: The ``team`` tag of the try's ledger entry (its team discount applies to its prices).
    """

    dag_id: str
    task_id: str
    run_id: str
    try_number: int
    instance_type: str | None
    region: str | None
    market: str | None
    usd: Decimal
    wall_seconds: float
    cpu_seconds: float
    peak_memory_bytes: int
    vcpus: int | None = None
    memory_gib: Decimal | None = None
    runs_per_month: float | None = None
    source: str = "local"
    backend_metrics: Mapping[str, Any] = field(default_factory=dict)
    measured_at: datetime | None = None
    team: str | None = None

    def __post_init__(self) -> None:
        for name in ("wall_seconds", "cpu_seconds"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigurationError(f"{name} of a measurement must be >= 0 seconds, got {value}")
        if self.peak_memory_bytes < 0:
            raise ConfigurationError(f"peak_memory_bytes must be >= 0, got {self.peak_memory_bytes}")

    @property
    def peak_memory_gib(self) -> float:
        return self.peak_memory_bytes / GIB

    @property
    def cores_used(self) -> float:
        """Average number of cores busy during the try (CPU seconds per wall second)."""
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def cpu_utilization(self) -> float | None:
        """Share of the instance's vCPU time the try used, 0..1 (None: instance size unknown)."""
        if not self.vcpus or self.wall_seconds <= 0:
            return None
        return min(1.0, self.cpu_seconds / (self.wall_seconds * self.vcpus))

    @property
    def idle_usd(self) -> Decimal | None:
        """Cost of the vCPU time left idle: ``usd x (1 - CPU utilization)``."""
        share = self.cpu_utilization
        if share is None:
            return None
        return (self.usd * (Decimal(1) - Decimal(str(round(share, 6))))).quantize(MICRO_USD)

    @property
    def memory_headroom_gib(self) -> float | None:
        """Instance memory the try never touched (None: instance size unknown)."""
        if self.memory_gib is None:
            return None
        return float(self.memory_gib) - self.peak_memory_gib


def recency(m: Measurement) -> tuple[datetime, int]:
    """Sort key of a try by when it ended (unknown: oldest), then by try number: ``max`` is the newest."""
    return (m.measured_at or _EPOCH, m.try_number)


def by_task(measured: Sequence[Measurement]) -> dict[tuple[str, str], list[Measurement]]:
    """The tries grouped by ``(dag_id, task_id)``, each group in the order given."""
    groups: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for m in measured:
        groups[(m.dag_id, m.task_id)].append(m)
    return groups


def utilization_by_task(measured: Sequence[Measurement]) -> list[dict[str, Any]]:
    """One row per (DAG, task): tries, CPU utilization, busy cores, peak memory, headroom, cost and idle cost.

    CPU utilization is the tries' CPU seconds over their vCPU seconds (wall x vCPUs); rows come costliest
    idle first. Money is a string.
    """
    rows = []
    for (dag_id, task_id), tries in by_task(measured).items():
        newest = max(tries, key=recency)
        sized = [m for m in tries if m.vcpus]
        capacity = sum(m.wall_seconds * (m.vcpus or 0) for m in sized)
        utilization = sum(m.cpu_seconds for m in sized) / capacity if capacity > 0 else None
        idle = [m.idle_usd for m in tries if m.idle_usd is not None]
        headroom = [m.memory_headroom_gib for m in tries if m.memory_headroom_gib is not None]
        rows.append(
            {
                "dag_id": dag_id,
                "task_id": task_id,
                "tries": len(tries),
                "instance_type": newest.instance_type,
                "vcpus": newest.vcpus,
                "memory_gib": None if newest.memory_gib is None else str(newest.memory_gib),
                "wall_seconds": round(sum(m.wall_seconds for m in tries) / len(tries), 3),
                "cpu_seconds": round(sum(m.cpu_seconds for m in tries) / len(tries), 3),
                "cpu_utilization": None if utilization is None else round(min(utilization, 1.0), 4),
                "peak_cores_used": round(max(m.cores_used for m in tries), 3),
                "peak_memory_gib": round(max(m.peak_memory_gib for m in tries), 4),
                "min_headroom_gib": round(min(headroom), 4) if headroom else None,
                "usd": str(sum((m.usd for m in tries), Decimal(0))),
                "idle_usd": str(sum(idle, Decimal(0))) if idle else None,
                "sources": sorted({m.source for m in tries}),
            }
        )
    return sorted(rows, key=lambda r: (Decimal(r["idle_usd"] or 0), r["dag_id"], r["task_id"]), reverse=True)
