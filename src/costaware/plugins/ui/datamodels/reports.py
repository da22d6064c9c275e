"""The Cost API's report bodies: totals, spend per group, spend per day, the costliest task tries."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pydantic import Field

from costaware.plugins.ui.datamodels.common import Answer, usd_field

if TYPE_CHECKING:
    from costaware.adapters.ledger.reports import Summary
    from costaware.core.ledger import ReportRow


#: The ``note`` of the grouped answers: the page's and ``costaware report``'s note for a tag no entry has.
GROUPING_NOTE = (
    "A `tag:<name>` grouping that put every entry under `(none)`: whether the tag may be misspelt, with the "
    "tags the ledger's newest entries have; null otherwise."
)


class SpendSummary(Answer):
    """Totals of the entries in range: spend, on-demand equivalent, savings, cache reuse, egress."""

    usd: str = usd_field()
    on_demand_usd: str = usd_field()
    savings_usd: str = usd_field()
    estimated_usd: str = usd_field()
    entries: int
    failed_tries: int
    preempted_tries: int
    cache_hits: int
    cache_avoided_usd: str = usd_field()
    egress_usd: str = usd_field()
    egress_avoided_usd: str = usd_field()
    #: With no entry: why the filters may be mistyped (a DAG the ledger has no entry of, an unknown tag).
    note: str | None = None

    @classmethod
    def of(cls, s: Summary, *, note: str | None = None) -> SpendSummary:
        return cls(
            note=note,
            usd=str(s.usd),
            on_demand_usd=str(s.on_demand_usd),
            savings_usd=str(s.savings_usd),
            estimated_usd=str(s.estimated_usd),
            entries=s.entries,
            failed_tries=s.failed_tries,
            preempted_tries=s.preempted_tries,
            cache_hits=s.cache_hits,
            cache_avoided_usd=str(s.cache_avoided_usd),
            egress_usd=str(s.egress_usd),
            egress_avoided_usd=str(s.egress_avoided_usd),
        )


class SpendRow(Answer):
    """One group's spend."""

    group: str
    entries: int
    hours: str = Field(description="Billed hours, an exact decimal string.")
    usd: str = usd_field()
    estimated_usd: str = usd_field()
    on_demand_usd: str = usd_field()
    savings_usd: str = usd_field()
    kg_co2e: str | None = Field(
        description="Estimated emissions of the group's actual entries with an estimate, kg CO2e as an exact "
        "decimal string; null when none has one (unknown, never 0)."
    )
    co2e_unknown_entries: int = Field(
        description="Compute entries of the group whose emissions are unknown (not counted in kg_co2e)."
    )

    @classmethod
    def of(cls, r: ReportRow) -> SpendRow:
        return cls(
            group=r.group,
            entries=r.entries,
            hours=str(r.hours),
            usd=str(r.usd),
            estimated_usd=str(r.estimated_usd),
            on_demand_usd=str(r.on_demand_usd),
            savings_usd=str(r.savings_usd),
            kg_co2e=None if r.kg_co2e is None else str(r.kg_co2e),
            co2e_unknown_entries=r.co2e_unknown,
        )


class SpendRest(SpendRow):
    """The groups left out by ``limit``, totalled; ``group`` says how many (``other (1,180 groups)``)."""

    groups: int


class Spend(Answer):
    """Spend per group, costliest first."""

    group_by: str
    rows: list[SpendRow]
    other: SpendRest | None = Field(description="The groups past `limit`, totalled; null when none is left.")
    note: str | None = Field(default=None, description=GROUPING_NOTE)


class DailyPoint(Answer):
    """A group's actual spend on one UTC day."""

    day: str = Field(description="The UTC day, e.g. 2026-11-23.")
    group: str
    usd: str = usd_field()

    @classmethod
    def of(cls, day: date, group: str, usd: Decimal) -> DailyPoint:
        return cls(day=day.isoformat(), group=group, usd=str(usd))


class DailyRest(Answer):
    """The group that sums, day by day, the groups left out by ``limit``."""

    group: str
    groups: int


class Daily(Answer):
    """Actual spend per UTC day and group."""

    group_by: str
    points: list[DailyPoint]
    other: DailyRest | None = Field(description="The group summing the others past `limit`; null: none.")
    note: str | None = Field(default=None, description=GROUPING_NOTE)


class TaskTry(Answer):
    """One task try's actual cost: its entries summed."""

    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    map_index: int
    instance_type: str | None = Field(description="The instance of the try's costliest entry.")
    market: str | None = Field(description="The market of the try's costliest entry.")
    outcome: str = Field(description="The outcome of the try's costliest entry.")
    cause: str = Field(
        description="What the entries were for or why the try ended (preemption, error, success, "
        "orchestration, feature_cache, ...), each once, comma-separated; '' when none was recorded."
    )
    note: str = Field(
        description="The entries' notes, one a line in the order incurred: what failed, why it ran on "
        "on-demand, which tags were left out ('' if none)."
    )
    entries: int = Field(description="How many ledger entries the try has.")
    usd: str = usd_field()
    on_demand_usd: str = usd_field()
    hours: str = Field(description="Billed hours, an exact decimal string.")
    incurred_at: str = Field(description="When the try's last entry was incurred.")

    @classmethod
    def of(cls, t: dict[str, Any]) -> TaskTry:
        return cls(
            **{
                **t,
                "usd": str(t["usd"]),
                "on_demand_usd": str(t["on_demand_usd"]),
                "hours": str(t["hours"]),
                "incurred_at": t["incurred_at"].isoformat(),
            }
        )


class TopTries(Answer):
    """The most expensive task tries, costliest first."""

    tries: list[TaskTry]
