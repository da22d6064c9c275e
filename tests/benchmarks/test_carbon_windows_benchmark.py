"""The carbon-window benchmark's tables: every figure rounded once, from its exact value."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import carbon_windows

from costaware.core.simulate import PolicySummary


def summary(name: str, kg: str, value: str | None = None) -> PolicySummary:
    """A policy's totals; ``vs_oracle`` rounded to 4 places as the simulator reports it (to be ignored)."""
    return PolicySummary(
        policy=name,
        jobs=300,
        usd=Decimal("100"),
        vs_oracle=Decimal("1.0085"),
        vs_on_demand=None,
        deadline_misses=0,
        preemptions=0,
        spot_share=0.0,
        value=None if value is None else Decimal(value),
        kg_co2e=Decimal(kg),
    )


#: AU-NSW's full run: the chosen policy at 1.00851x the carbon oracle.
AU_NSW = {
    "on_demand_now": summary("on_demand_now", "4967.332", "4967.332"),
    "cheapest_window": summary("cheapest_window", "3387.674", "3387.674"),
    "deadline_aware": summary("deadline_aware", "3387.674", "3387.674"),
    "oracle": summary("oracle", "3359.082", "3359.082"),
}


def test_the_carbon_table_rounds_the_ratio_to_the_oracle_once() -> None:
    figures = carbon_windows.carbon_figures(AU_NSW)
    row = carbon_windows.carbon_row("AU-NSW", figures, "cheapest_window", met=True)
    # Rounded to 4 places first (1.0085), it printed 1.008.
    assert row[7] == "1.009" and row[9] == "1.009"
    assert row[5] == "31.8%"
    assert carbon_windows.json_figures(figures)["cheapest_window"]["vs_oracle"] == 1.0085


def test_the_pareto_table_rounds_the_ratio_to_the_oracle_once() -> None:
    row = carbon_windows.pareto_row("AU-NSW", 0, AU_NSW, "cheapest_window")
    # From the simulator's 4-place vs_oracle (1.0085), it printed 1.008.
    assert row[6] == "1.009"
    assert row[5] == "3387.7"
