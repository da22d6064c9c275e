"""Totals per policy over all jobs, and their ratios to the oracle and to running on-demand at once.

The oracle (the least any schedule could pay knowing the future) and ``on_demand_now`` (what doing nothing
clever costs) are the two references every other policy is compared with. The ratios compare the objective's
totals (USD under ``cost``; kg CO2e under ``carbon``; USD plus the carbon price of the emissions under
``cost+carbon``); ``usd`` and ``kg_co2e`` are always the real dollars and emissions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from costaware.core.carbon import Objective
from costaware.core.money import MICRO_USD
from costaware.core.simulate.replay import JobOutcome

BASELINE = "on_demand_now"
ORACLE = "oracle"


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """Totals of one policy over all jobs; ratios are ``None`` when the reference costs nothing or less.

    ``restart_guard_fired`` counts the jobs the restart-thrash guard sent to on-demand for the rest of their
    run. ``value`` is the objective's total when it is not ``cost`` (the ratios compare it), ``kg_co2e`` the
    emissions when a carbon series was given, and ``usd_known`` False when some job had no prices (its USD
    is then unknown and shown as null).
    """

    policy: str
    jobs: int
    usd: Decimal
    vs_oracle: Decimal | None
    vs_on_demand: Decimal | None
    deadline_misses: int
    preemptions: int
    spot_share: float
    late: int = 0
    restart_guard_fired: int = 0
    value: Decimal | None = None
    kg_co2e: Decimal | None = None
    usd_known: bool = True

    def to_json(self) -> dict[str, object]:
        """The ``--format json`` shape of one policy (``kg_co2e``, ``objective_value`` only with carbon)."""
        extra: dict[str, object] = {}
        if self.kg_co2e is not None:
            extra["kg_co2e"] = float(self.kg_co2e.quantize(Decimal("0.001")))
        if self.value is not None:
            extra["objective_value"] = float(self.value.quantize(Decimal("0.001")))
        return extra | {
            # To the micro-dollar as the ledger keeps money (cents hid the small jobs' figures).
            "usd": float(self.usd.quantize(MICRO_USD)) if self.usd_known else None,
            "vs_oracle": None if self.vs_oracle is None else float(self.vs_oracle),
            "vs_on_demand": None if self.vs_on_demand is None else float(self.vs_on_demand),
            "deadline_misses": self.deadline_misses,
            "preemptions": self.preemptions,
            "spot_share": round(self.spot_share, 4),
            "late": self.late,
            "restart_guard_fired": self.restart_guard_fired,
        }


@dataclass(frozen=True)
class SimulationReport:
    """Per-policy totals (in the order asked) and every job's outcome."""

    summaries: dict[str, PolicySummary]
    outcomes: list[JobOutcome] = field(default_factory=list)
    objective: Objective = field(default_factory=Objective)

    def to_json(self) -> dict[str, object]:
        """``{"policies": {"<name>": {"usd": ..., "vs_oracle": ..., ...}}}``.

        With a carbon series also ``"objective": {"name", "unit", "carbon_usd_per_tonne"}`` (the unit of
        ``objective_value``; ``vs_oracle`` and ``vs_on_demand`` compare the objective's totals).
        """
        out: dict[str, object] = {"policies": {name: s.to_json() for name, s in self.summaries.items()}}
        if self.objective.needs_carbon or any(o.kg_co2e is not None for o in self.outcomes):
            out["objective"] = {
                "name": self.objective.name,
                "unit": self.objective.unit,
                "carbon_usd_per_tonne": self.objective.carbon_usd_per_tonne,
            }
        return out


def _ratio(value: Decimal, reference: Decimal) -> Decimal | None:
    # None also for a reference below zero (power paid to be drawn): the ratio would read upside down, the
    # cheaper policy the higher one.
    return None if reference <= 0 else (value / reference).quantize(Decimal("0.0001"))


def summarize(outcomes: Iterable[JobOutcome], policies: Sequence[str]) -> dict[str, PolicySummary]:
    """Totals per policy; ratios compare the objective's totals with the oracle's and ``on_demand_now``'s.

    The objective's total is USD under ``cost`` (see ``JobOutcome.objective_value``).
    """
    by_policy: dict[str, list[JobOutcome]] = {}
    for outcome in outcomes:
        by_policy.setdefault(outcome.policy, []).append(outcome)
    totals = {name: sum((o.objective_value for o in rows), Decimal(0)) for name, rows in by_policy.items()}
    summaries: dict[str, PolicySummary] = {}
    for name in policies:
        rows = by_policy.get(name, [])
        run_hours = sum(o.run_hours for o in rows)
        valued = any(o.value is not None for o in rows)
        emitted = bool(rows) and all(o.kg_co2e is not None for o in rows)
        summaries[name] = PolicySummary(
            policy=name,
            jobs=len(rows),
            usd=sum((o.usd for o in rows), Decimal(0)),
            vs_oracle=_ratio(totals.get(name, Decimal(0)), totals[ORACLE]) if ORACLE in totals else None,
            vs_on_demand=_ratio(totals.get(name, Decimal(0)), totals[BASELINE])
            if BASELINE in totals
            else None,
            deadline_misses=sum(1 for o in rows if not o.met_deadline),
            preemptions=sum(o.preemptions for o in rows),
            spot_share=sum(o.spot_hours for o in rows) / run_hours if run_hours else 0.0,
            late=sum(1 for o in rows if o.late),
            restart_guard_fired=sum(1 for o in rows if o.guard_fired),
            value=totals.get(name, Decimal(0)) if valued else None,
            kg_co2e=sum((o.kg_co2e or Decimal(0) for o in rows), Decimal(0)) if emitted else None,
            usd_known=all(o.usd_known for o in rows),
        )
    return summaries
