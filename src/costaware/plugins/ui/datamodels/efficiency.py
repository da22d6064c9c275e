"""The Cost API's efficiency bodies: utilization per task, right-sizing advice, retrain outcomes and cost."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from costaware.plugins.ui.datamodels.common import Answer, usd_field


class TaskUtilization(Answer):
    """How well one task's measured tries used their instance (``core.efficiency.utilization_by_task``)."""

    dag_id: str
    task_id: str
    tries: int
    instance_type: str | None
    vcpus: int | None
    memory_gib: str | None = Field(description="The instance's memory in GiB, a decimal string.")
    wall_seconds: float = Field(description="Mean wall time of a try.")
    cpu_seconds: float = Field(description="Mean CPU time of a try.")
    cpu_utilization: float | None = Field(description="CPU seconds over vCPU seconds, 0 to 1.")
    peak_cores_used: float
    peak_memory_gib: float
    min_headroom_gib: float | None
    usd: str = usd_field()
    idle_usd: str | None = usd_field()
    sources: list[str] = Field(description="Who measured: local, or the remote backends.")


class RightSizing(Answer):
    """A cheaper instance type that fits a task's measured needs (``core.efficiency.Advice``)."""

    dag_id: str
    task_id: str
    current_instance_type: str
    suggested_instance_type: str
    region: str
    market: str
    needed_memory_gib: str
    needed_vcpus: int
    peak_memory_gib: float
    peak_cores_used: float
    tries: int
    hours_per_run: float
    current_usd_per_run: str = usd_field()
    suggested_usd_per_run: str = usd_field()
    saving_per_run_usd: str = usd_field()
    runs_per_month: float
    frequency_basis: str
    monthly_saving_usd: str = usd_field()
    reason: str


class Efficiency(Answer):
    """Utilization per task, and the right-sizing suggestions that save $0.01 or more a month."""

    tasks: list[TaskUtilization]
    advice: list[RightSizing]


class RunOutcomeOut(Answer):
    """What a retrain run produced and what it cost (``core.outcomes.RunOutcome``)."""

    dag_id: str
    run_id: str
    model_version: str
    task_id: str
    metric: str
    metric_value: float | None
    champion_metric: float | None
    gain: float | None
    promoted: bool | None
    training_rows: int
    iterations: int
    iteration_unit: str
    usd: str | None = usd_field()
    usd_per_unit_gain: str | None = usd_field()
    recorded_at: str | None
    record: dict[str, Any] | None = Field(description="The reproducibility record: data, code, seeds.")
    record_digest: str | None


class OutcomeSummaryOut(Answer):
    """Cost per run, per promoted model and per unit of metric gained (``core.outcomes.OutcomeSummary``)."""

    runs: int
    promoted: int
    usd: str = usd_field()
    per_run_usd: str | None = usd_field()
    per_promoted_usd: str | None = usd_field()
    usd_per_unit_gain: str | None = usd_field()
    metric: str


class Outcomes(Answer):
    """Each retrain run's outcome and cost, oldest first, and their summary (null: no run)."""

    runs: list[RunOutcomeOut]
    summary: OutcomeSummaryOut | None
