"""Totals per policy over all jobs, and their ratios to the oracle and to running on-demand at once.

The oracle (the least any schedule could pay knowing the future) and ``on_demand_now`` (what doing nothing
clever costs) are the two references every other policy is compared with.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from costaware.core.simulate.replay import JobOutcome

BASELINE = "on_demand_now"
ORACLE = "oracle"


@dataclass(frozen=True, slots=True)
class PolicySummary:
    """Totals of one policy over all jobs; ratios are ``None`` when the reference costs nothing.

    ``restart_guard_fired`` counts the jobs the restart-thrash guard sent to on-demand for the rest of their
    run.
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

    def to_json(self) -> dict[str, object]:
        """The ``--format json`` shape of one policy."""
        return {
            "usd": float(self.usd.quantize(Decimal("0.01"))),
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

    def to_json(self) -> dict[str, object]:
        """``{"policies": {"<name>": {"usd": ..., "vs_oracle": ..., ...}}}``."""
        return {"policies": {name: s.to_json() for name, s in self.summaries.items()}}


def _ratio(value: Decimal, reference: Decimal) -> Decimal | None:
    return None if reference == 0 else (value / reference).quantize(Decimal("0.0001"))


def summarize(outcomes: Iterable[JobOutcome], policies: Sequence[str]) -> dict[str, PolicySummary]:
    """Totals per policy; ratios compare total USD with the oracle's and ``on_demand_now``'s totals."""
    by_policy: dict[str, list[JobOutcome]] = {}
    for outcome in outcomes:
        by_policy.setdefault(outcome.policy, []).append(outcome)
    totals = {name: sum((o.usd for o in rows), Decimal(0)) for name, rows in by_policy.items()}
    summaries: dict[str, PolicySummary] = {}
    for name in policies:
        rows = by_policy.get(name, [])
        run_hours = sum(o.run_hours for o in rows)
        summaries[name] = PolicySummary(
            policy=name,
            jobs=len(rows),
            usd=totals.get(name, Decimal(0)),
            vs_oracle=_ratio(totals.get(name, Decimal(0)), totals[ORACLE]) if ORACLE in totals else None,
            vs_on_demand=_ratio(totals.get(name, Decimal(0)), totals[BASELINE])
            if BASELINE in totals
            else None,
            deadline_misses=sum(1 for o in rows if not o.met_deadline),
            preemptions=sum(o.preemptions for o in rows),
            spot_share=sum(o.spot_hours for o in rows) / run_hours if run_hours else 0.0,
            late=sum(1 for o in rows if o.late),
            restart_guard_fired=sum(1 for o in rows if o.guard_fired),
        )
    return summaries
