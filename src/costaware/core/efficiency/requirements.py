"""What a task needs, from its measured tries: the worst try's peak memory and busy cores, plus margins.

Measured needs replace the memory and vCPUs a DAG declares once enough tries have been measured; before
that, the declared ones stand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from costaware.core.efficiency.measurement import Measurement
from costaware.core.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Requirements:
    """What a task needs, from its measured tries: memory with a margin, whole vCPUs, and how many tries."""

    memory_gib: Decimal
    vcpus: int
    tries: int
    peak_memory_gib: float
    peak_cores_used: float

    def describe(self) -> str:
        return (
            f"peak {self.peak_memory_gib:.2f} GiB and {self.peak_cores_used:.2f} busy cores over "
            f"{self.tries} tries -> needs {self.memory_gib} GiB, {self.vcpus} vCPU(s)"
        )


def measured_requirements(
    measurements: Sequence[Measurement], *, memory_margin: float = 0.25, cpu_margin: float = 0.25
) -> Requirements:
    """The memory and vCPUs the task needs: the worst try's peak memory and busy cores, plus margins.

    Raises:
        ConfigurationError: no measurement, or a margin below 0.
    """
    _check_margin(memory_margin, "memory_margin")
    _check_margin(cpu_margin, "cpu_margin")
    if not measurements:
        raise ConfigurationError("no measured tries: run the task with the costaware listener first")
    peak = max(m.peak_memory_gib for m in measurements)
    cores = max(m.cores_used for m in measurements)
    memory = Decimal(str(peak * (1 + memory_margin))).quantize(Decimal("0.001"), rounding="ROUND_CEILING")
    vcpus = max(1, math.ceil(round(cores * (1 + cpu_margin), 6)))
    return Requirements(memory, vcpus, len(measurements), peak, cores)


def _check_margin(value: float, name: str) -> None:
    if not (math.isfinite(value) and 0 <= value <= 10):
        raise ConfigurationError(f"{name} must be between 0 and 10 (0.25 = 25 % headroom), got {value}")


def sized_needs(
    declared_memory_gib: Decimal,
    declared_vcpus: int,
    measurements: Sequence[Measurement],
    *,
    min_tries: int = 3,
    memory_margin: float = 0.25,
    cpu_margin: float = 0.25,
) -> tuple[Decimal, int, str]:
    """Memory and vCPUs to size a job for: measured (plus margins) after ``min_tries`` tries, else declared.

    Returns:
        ``(memory_gib, vcpus, basis)`` where basis says which it was and why.
    """
    if min_tries < 1:
        raise ConfigurationError(f"min_tries must be at least 1, got {min_tries}")
    # Checked before any try is measured: a bad margin failed only the run that had min_tries of them.
    _check_margin(memory_margin, "memory_margin")
    _check_margin(cpu_margin, "cpu_margin")
    if len(measurements) < min_tries:
        return (
            declared_memory_gib,
            declared_vcpus,
            f"declared ({len(measurements)} measured tries, {min_tries} needed to size from measurements)",
        )
    needs = measured_requirements(measurements, memory_margin=memory_margin, cpu_margin=cpu_margin)
    return needs.memory_gib, needs.vcpus, f"measured: {needs.describe()}"
