"""Benchmark: carbon-aware windows for nightly retrains on four recorded grids (issue 27 item 5).

Run: ``.venv/bin/python benchmarks/carbon_windows.py [--quick] --json``.

Data (``shared/data`` beside the repository, or ``$COSTAWARE_SHARED_DATA``): the hourly carbon intensity of
2023 (life-cycle gCO2e/kWh) of four grids, ``carbon_intensity/{US-CAL-CISO,DE-LU,GB,AU-NSW}_2023.csv``, and
the hourly electricity prices of the two grids that have them, ``electricity_prices/{US-CAL-CISO,DE-LU}``.

Jobs: the power jobs of the spot-window benchmark (an on-premises 8-GPU node drawing 6.5 kW): one retrain a
night, submitted at 22:00 local time of the grid, 1-6 h of work, deadlines 8-24 h, checkpoints every 30 min,
5-15 min restart overhead (seeded random, the same jobs for every policy and objective), from four weeks into
the year (the forecasts need history): 300 nights per grid, ``--quick`` every 7th of them (43).

Measured:
* objective ``carbon``: emissions of each policy against running at submit time (``on_demand_now``) and
  against the carbon oracle (the least emissions any schedule could reach knowing the future);
* objective ``cost+carbon`` at 0, 50, 100, 200, 500 USD per tonne on the two grids with prices: USD and
  kg CO2e of the chosen policy, the oracle and running at submit time (a Pareto table).

Rules must generalise: no constant is tuned here. The reported policy is chosen among the product's window
policies (``cheapest_window``, ``deadline_aware``) on the fit grids (US-CAL-CISO, DE-LU) only, by emissions
against the oracle with 0 misses, and the same policy is reported on the held-out grids (GB, AU-NSW).
Targets (issue 27), per grid, for that policy: >= 10 % less CO2e than running at submit time, <= 1.10x the
carbon oracle, 0 missed deadlines.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import emit, table  # noqa: E402

from costaware.adapters import spot_prices  # noqa: E402
from costaware.adapters.carbon_data import load_carbon  # noqa: E402
from costaware.core.carbon import Objective  # noqa: E402
from costaware.core.series import PriceSeries  # noqa: E402
from costaware.core.simulate import Job, MarketData, PolicySummary, simulate  # noqa: E402

# ``shared/data`` from $COSTAWARE_SHARED_DATA, else beside the repository (or beside a git worktree of it).
SHARED = (
    Path(os.environ["COSTAWARE_SHARED_DATA"])
    if os.environ.get("COSTAWARE_SHARED_DATA")
    else next(
        (
            p / "shared" / "data"
            for p in (ROOT.parent, ROOT.parent.parent)
            if (p / "shared" / "data").exists()
        ),
        ROOT.parent / "shared" / "data",
    )
)
#: Grid -> the local time zone its team submits in.
GRIDS = {
    "US-CAL-CISO": "America/Los_Angeles",
    "DE-LU": "Europe/Berlin",
    "GB": "Europe/London",
    "AU-NSW": "Australia/Sydney",
}
FIT = ("US-CAL-CISO", "DE-LU")
HELD_OUT = ("GB", "AU-NSW")
#: The product's window policies a user can run; one is chosen on the fit grids.
CANDIDATES = ("cheapest_window", "deadline_aware")
BASELINE, ORACLE = "on_demand_now", "oracle"
POLICIES = (BASELINE, *CANDIDATES, ORACLE)
CARBON_PRICES = (0, 50, 100, 200, 500)
POWER_KW = Decimal("6.5")
TARGET_REDUCTION = 0.10
TARGET_VS_ORACLE = 1.10
SEED = 20230101
#: Nights per grid (from four weeks into 2023); ``--quick`` keeps every 7th of them.
NIGHTS = 300
QUICK_EVERY = 7


def nightly_jobs(grid: str, first: datetime, nights: int, rng: random.Random) -> list[Job]:
    """One retrain a night at 22:00 local (the spot-window benchmark's power jobs)."""
    local_zone = ZoneInfo(GRIDS[grid])
    day = first.astimezone(local_zone).date()
    jobs = []
    for night in range(nights):
        local = datetime.combine(day + timedelta(days=night), datetime.min.time()).replace(
            hour=22, tzinfo=local_zone
        )
        runtime = rng.randint(1, 6)
        jobs.append(
            Job(
                name=f"{grid}-{night}",
                instance_type="on-prem-8xV100",
                region="on-prem",
                submit_time=local.astimezone(ZoneInfo("UTC")),
                runtime_hours=Decimal(runtime),
                deadline_hours=Decimal(rng.randint(max(8, runtime + 1), 24)),
                checkpoint_minutes=Decimal(30),
                restart_overhead_minutes=Decimal(rng.choice([5, 10, 15])),
                power_kw=POWER_KW,
            )
        )
    return jobs


def load(grid: str) -> tuple[PriceSeries, PriceSeries | None]:
    carbon = load_carbon(SHARED / "carbon_intensity" / f"{grid}_2023.csv")
    prices_file = SHARED / "electricity_prices" / f"{grid}_2023.csv"
    prices = spot_prices.load_electricity(prices_file) if prices_file.exists() else None
    return carbon, prices


def run(
    jobs: list[Job], carbon: PriceSeries, prices: PriceSeries | None, objective: Objective
) -> dict[str, PolicySummary]:
    data = MarketData(
        on_demand_usd_per_hour=lambda t, r: Decimal(0),
        electricity_usd_per_mwh=prices,
        carbon_g_per_kwh=carbon,
        objective=objective,
    )
    return simulate(jobs, data, POLICIES).summaries


def carbon_figures(s: dict[str, PolicySummary]) -> dict[str, dict[str, Any]]:
    """Each policy's emissions and ratios, unrounded: the table and the JSON each round them once."""
    base = float(s[BASELINE].kg_co2e or 0)
    oracle = float(s[ORACLE].kg_co2e or 0)
    out = {}
    for name, one in s.items():
        kg = float(one.kg_co2e or 0)
        out[name] = {
            "kg_co2e": kg,
            "usd": float(one.usd.quantize(Decimal("0.01"))) if one.usd_known else None,
            "vs_submit_time": kg / base if base else None,
            "reduction_vs_submit_time": 1 - kg / base if base else None,
            "vs_oracle": kg / oracle if oracle else None,
            "deadline_misses": one.deadline_misses,
        }
    return out


#: Decimal places of each figure in the JSON (the table rounds the same figures for display).
JSON_PLACES = {"kg_co2e": 3, "vs_submit_time": 4, "reduction_vs_submit_time": 4, "vs_oracle": 4}


def json_figures(figures: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`carbon_figures` rounded for the JSON."""
    return {
        name: {
            key: round(value, JSON_PLACES[key]) if key in JSON_PLACES and value is not None else value
            for key, value in one.items()
        }
        for name, one in figures.items()
    }


def carbon_row(grid: str, figures: dict[str, dict[str, Any]], chosen: str, met: bool) -> list[Any]:
    """One grid's line of the carbon table, each figure rounded once from its exact value.

    Rounded to the JSON's 4 places first, AU-NSW's 1.00851 printed 1.008 (1.0085 to 3 places), not 1.009.
    """
    best = figures[chosen]
    return [
        grid,
        "fit" if grid in FIT else "held out",
        f"{figures[BASELINE]['kg_co2e']:.1f}",
        f"{best['kg_co2e']:.1f}",
        f"{figures[ORACLE]['kg_co2e']:.1f}",
        f"{best['reduction_vs_submit_time']:.1%}",
        f"{figures[ORACLE]['reduction_vs_submit_time']:.1%}",
        f"{best['vs_oracle']:.3f}",
        best["deadline_misses"],
        f"{figures[_other(chosen)]['vs_oracle']:.3f}",
        "met" if met else "NOT met",
    ]


def pareto_row(grid: str, price: int, s: dict[str, PolicySummary], chosen: str) -> list[Any]:
    """One line of the cost+carbon table, from the exact totals (the summaries' ratios are rounded)."""
    base, best, oracle = s[BASELINE], s[chosen], s[ORACLE]
    best_value, oracle_value = best.value or Decimal(0), oracle.value or Decimal(0)
    return [
        grid,
        price,
        f"{base.usd:.2f}",
        f"{base.kg_co2e or 0:.1f}",
        f"{best.usd:.2f}",
        f"{best.kg_co2e or 0:.1f}",
        f"{best_value / oracle_value:.3f}" if oracle_value > 0 else "-",
        best.deadline_misses,
        f"{oracle.usd:.2f}",
        f"{oracle.kg_co2e or 0:.1f}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every 7th night of the full run (well under a minute on 2 cores)",
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON line of results")
    args = parser.parse_args()
    if not (SHARED / "carbon_intensity").exists():
        print(f"shared data not found at {(SHARED / 'carbon_intensity').resolve()}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    # --quick replays every QUICK_EVERY-th of the full run's nights: the same jobs, spread over the year.
    step = QUICK_EVERY if args.quick else 1
    rng = random.Random(SEED)
    per_grid: dict[str, dict[str, dict[str, Any]]] = {}
    inputs: dict[str, tuple[list[Job], PriceSeries, PriceSeries | None]] = {}
    for grid in GRIDS:
        carbon, prices = load(grid)
        jobs = nightly_jobs(grid, carbon.start + timedelta(days=28), NIGHTS, rng)[::step]
        inputs[grid] = (jobs, carbon, prices)
        per_grid[grid] = carbon_figures(run(jobs, carbon, prices, Objective("carbon")))

    # Choose the policy on the fit grids only: fewest misses, then the least emissions against the oracle.
    def fit_score(name: str) -> tuple[int, float]:
        return (
            sum(per_grid[g][name]["deadline_misses"] for g in FIT),
            sum(per_grid[g][name]["vs_oracle"] for g in FIT) / len(FIT),
        )

    chosen = min(CANDIDATES, key=fit_score)
    checks: dict[str, dict[str, bool]] = {}
    rows = []
    for grid, figures in per_grid.items():
        best = figures[chosen]
        checks[grid] = {
            "at_least_10pct_below_submit_time": best["reduction_vs_submit_time"] >= TARGET_REDUCTION,
            "within_10pct_of_carbon_oracle": best["vs_oracle"] <= TARGET_VS_ORACLE,
            "zero_deadline_misses": best["deadline_misses"] == 0,
        }
        rows.append(carbon_row(grid, figures, chosen, all(checks[grid].values())))

    pareto: dict[str, list[dict[str, Any]]] = {}
    pareto_rows = []
    for grid in FIT:
        jobs, carbon, prices = inputs[grid]
        for price in CARBON_PRICES:
            s = run(jobs, carbon, prices, Objective("cost+carbon", float(price)))
            entry: dict[str, Any] = {"carbon_usd_per_tonne": price}
            for name in (BASELINE, chosen, ORACLE):
                entry[name] = {
                    "usd": float(s[name].usd.quantize(Decimal("0.01"))),
                    "kg_co2e": float((s[name].kg_co2e or Decimal(0)).quantize(Decimal("0.001"))),
                    "objective_usd": float((s[name].value or Decimal(0)).quantize(Decimal("0.01"))),
                    "vs_oracle": float(s[name].vs_oracle or 0),
                    "deadline_misses": s[name].deadline_misses,
                }
            pareto.setdefault(grid, []).append(entry)
            pareto_rows.append(pareto_row(grid, price, s, chosen))
    elapsed = time.perf_counter() - started
    nights = len(inputs[FIT[0]][0])

    print(
        f"objective carbon: {nights} nightly retrains per grid (6.5 kW, 22:00 local, 1-6 h, deadlines "
        "8-24 h); "
        f"policy chosen on the fit grids ({', '.join(FIT)}): {chosen}; held out: {', '.join(HELD_OUT)}"
    )
    print(
        table(
            [
                "grid",
                "split",
                "kg_submit",
                f"kg_{chosen}",
                "kg_oracle",
                "less_CO2e",
                "oracle_less",
                "vs_oracle",
                "misses",
                f"{_other(chosen)}_vs_oracle",
                "targets",
            ],
            rows,
        )
    )
    print()
    print(
        f"objective cost+carbon (Pareto; {chosen}, the oracle on that objective, and running at submit time):"
    )
    print(
        table(
            [
                "grid",
                "usd_per_t",
                "usd_submit",
                "kg_submit",
                f"usd_{chosen}",
                f"kg_{chosen}",
                "vs_oracle",
                "misses",
                "usd_oracle",
                "kg_oracle",
            ],
            pareto_rows,
        )
    )
    target_met = all(all(c.values()) for c in checks.values())
    # Where even the oracle saves less than the target, no policy can meet it on these jobs: said, not hidden.
    out_of_reach = [
        g for g, f in per_grid.items() if f[ORACLE]["reduction_vs_submit_time"] < TARGET_REDUCTION
    ]
    notes = [
        f"{g}: even the carbon oracle emits only {per_grid[g][ORACLE]['reduction_vs_submit_time']:.1%} "
        "less than running at submit time on these jobs: the 10 % target is out of reach there for any "
        "schedule"
        for g in out_of_reach
    ]
    if args.quick:
        notes.append(
            f"--quick replays every {QUICK_EVERY}th of the full run's {NIGHTS} nights per grid: a sample; "
            "the issue's targets are judged on the full run"
        )
    for note in notes:
        print(f"note: {note}")
    print(f"\n{len(GRIDS) * nights} jobs in {elapsed:.1f} s; target_met={target_met}")
    result = {
        "benchmark": "carbon_windows",
        "quick": args.quick,
        "nights_per_grid": nights,
        "power_kw": float(POWER_KW),
        "chosen_policy": chosen,
        "chosen_on": list(FIT),
        "held_out": list(HELD_OUT),
        "split_note": (
            f"{chosen} chosen among {', '.join(CANDIDATES)} on {' + '.join(FIT)} (fewest misses, then "
            f"emissions vs the carbon oracle); reported unchanged on {' + '.join(HELD_OUT)}; "
            "no constant tuned"
        ),
        "carbon": {grid: json_figures(figures) for grid, figures in per_grid.items()},
        "pareto": pareto,
        "targets": {
            "co2e_reduction_vs_submit_time_at_least": TARGET_REDUCTION,
            "vs_carbon_oracle_at_most": TARGET_VS_ORACLE,
            "deadline_misses": 0,
        },
        "checks": checks,
        "target_met": target_met,
        "target_out_of_reach_for_the_oracle": out_of_reach,
        "notes": notes,
        "seconds": round(elapsed, 1),
    }
    emit(result, args.json)
    return 0


def _other(chosen: str) -> str:
    return next(name for name in CANDIDATES if name != chosen)


if __name__ == "__main__":
    raise SystemExit(main())
