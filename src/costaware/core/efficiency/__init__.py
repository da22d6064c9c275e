"""Efficiency of task tries: measured utilization, idle cost, memory headroom and right-sizing advice.

A try's utilization is what its process tree really used (CPU seconds, peak resident memory) against what
the instance it was priced on offers (vCPUs x wall seconds, memory). Idle cost is the share of the try's
cost its vCPUs spent idle: ``usd x (1 - CPU utilization)``. Right-sizing advice turns the measurements of
a task's tries into the cheapest catalog type that would have fit them, with the saving per month at the
task's run frequency. Pure: callers pass the catalog and the measurements. The parts:

* :mod:`~costaware.core.efficiency.measurement`: one try's measurement, and utilization per task;
* :mod:`~costaware.core.efficiency.requirements`: the memory and vCPUs a task needs, from its tries;
* :mod:`~costaware.core.efficiency.advice`: a cheaper type that fits, and what it saves.
"""

from __future__ import annotations

from costaware.core.efficiency.advice import (
    DAYS_PER_MONTH,
    Advice,
    advise,
    advise_tasks,
    hourly_price,
)
from costaware.core.efficiency.measurement import GIB, Measurement, utilization_by_task
from costaware.core.efficiency.requirements import Requirements, measured_requirements, sized_needs
from costaware.core.prices import BURSTABLE  # re-exported: the advice's rule, shared with right-sizing

__all__ = [
    "BURSTABLE",
    "DAYS_PER_MONTH",
    "GIB",
    "Advice",
    "Measurement",
    "Requirements",
    "advise",
    "advise_tasks",
    "hourly_price",
    "measured_requirements",
    "sized_needs",
    "utilization_by_task",
]
