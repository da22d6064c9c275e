"""Benchmark: a team's own PyTorch script on spot through the ``local`` backend, under replayed availability.

Run: ``.venv/bin/python benchmarks/own_training.py [--quick] --json``.

The script is ``examples/own_training/train_delay.py`` (a PyTorch regression of the arrival delay, which
imports only ``costaware_runtime``), run as ``RemoteTrainingOperator(command=[...])`` jobs under
``costaware-run``, with a fixed sleep per optimizer step so that compressed time means something. A trace from
``../shared/data/spot_availability`` is replayed in compressed time (one 10-minute tick = ``--tick-seconds``
real seconds): spot jobs wait while there is no capacity, and at each drop the running job gets SIGKILL or
SIGTERM by turns (the spot notice: the script saves and exits 75; no notice: the newest checkpoint is all
that is kept). Per trace: completed, deadline missed, preemptions, work lost per preemption in checkpoint
intervals (steps done after the newest checkpoint, from the script's progress file).

Checkpoint overhead: median billed seconds of three uninterrupted runs that checkpoint every interval against
three of the same script never checkpointing until its end, run by turns.

Image size: a fresh venv with ``./runtime`` installed against a venv of the provider (a bare venv plus every
distribution the provider's install pulls in, measured from this environment's installed files); both sizes
are measured in the same run.

Targets (issue 24): 0 deadline misses, mean work lost per preemption <= 0.5 checkpoint interval, checkpoint
overhead <= 5 %, the runtime's venv <= 0.1 of the provider's.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, scratch_airflow_home, table  # noqa: E402
from _replay import (  # noqa: E402
    arguments,
    drive_under_trace,
    lost_steps,
    overhead_pairs,
    spot_decision,
    trace_names,
    trace_window,
)

SCRIPT = ROOT / "examples" / "own_training" / "train_delay.py"
TARGET_LOST = 0.5
TARGET_OVERHEAD = 0.05
TARGET_SIZE_RATIO = 0.1
EPOCHS, BATCH, STEP_SECONDS, EVERY_STEPS = 5, 2048, 0.2, 10


def arrays(folder: Path) -> Path:
    """January 2013's training arrays and 1 February's holdout, as the example DAG's ``prepare`` does."""
    from datetime import date

    from costaware.examples import flights

    landing = folder / "landing"
    flights.land_days(landing, date(2013, 2, 1))
    return Path(flights.write_delay_arrays(landing, date(2013, 1, 31), folder / "arrays")["folder"])


def run_once(
    work: Path,
    data: Path,
    *,
    every_steps: int,
    market: str,
    trace: list[bool] | None,
    tick_seconds: float,
    deadline_seconds: float,
    latest_start_seconds: float,
) -> dict[str, Any]:
    """One training through the operator; returns its result, preemptions, work lost and billed seconds."""
    from costaware.core.ledger import utcnow
    from costaware.operators.remote_training import RemoteTrainingOperator

    work.mkdir(parents=True)
    progress = work / "progress.txt"
    options = {"root": str(work / "jobs"), "capacity_file": str(work / "capacity")}
    now = utcnow()
    deadline = now + timedelta(seconds=deadline_seconds)
    op = RemoteTrainingOperator(
        task_id="train",
        command=[
            sys.executable,
            str(SCRIPT),
            "--data",
            str(data),
            "--epochs",
            str(EPOCHS),
            "--batch-size",
            str(BATCH),
            "--checkpoint-every",
            str(every_steps),
            "--step-sleep",
            str(STEP_SECONDS),
            "--progress-file",
            str(progress),
        ],
        model_store=str(work / "models"),
        checkpoint_store=str(work / "ckpt"),
        backend_options=options,
        spot_decision=spot_decision(market, now, deadline, latest_start_seconds),
        preemption_grace_seconds=15,
        max_attempts=40,
        poll_interval=0.1,
    )
    started = time.monotonic()
    result, kills = drive_under_trace(op, options, trace, tick_seconds)
    return {
        "result": result,
        "wall_seconds": time.monotonic() - started,
        "missed": utcnow() > deadline,
        "preemptions": len(kills),
        "lost_steps": lost_steps(progress),
        "billed_seconds": sum(float(a["billable_seconds"]) for a in result["attempts"]),
    }


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _distribution_closure(name: str, seen: dict[str, int]) -> dict[str, int]:
    """Bytes of every file of ``name`` and of the distributions it requires (no extras), recursively."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return seen
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return seen
    total = 0
    for file in dist.files or []:
        with contextlib.suppress(OSError):
            total += Path(str(file.locate())).stat().st_size
    seen[key] = total
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            _distribution_closure(requirement.name, seen)
    return seen


def venv_sizes(folder: Path) -> dict[str, float]:
    """MB of a fresh venv with ``./runtime`` installed, of a bare venv, and of one with the provider."""
    bare, runtime = folder / "bare", folder / "runtime"
    subprocess.run([sys.executable, "-m", "venv", str(bare)], check=True)
    subprocess.run([sys.executable, "-m", "venv", str(runtime)], check=True)
    subprocess.run(
        [
            str(runtime / "bin" / "pip"),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(ROOT / "runtime"),
        ],
        check=True,
    )
    check = subprocess.run([str(runtime / "bin" / "python"), "-c", "import airflow"], capture_output=True)
    if check.returncode == 0:
        raise RuntimeError("the runtime's venv can import airflow: it must not")
    provider = _distribution_closure("airflow-provider-costaware", {})
    # The provider is installed editable here: its own files are a link to src/, so count src/ instead.
    provider["airflow-provider-costaware"] = _folder_bytes(ROOT / "src" / "costaware")
    return {
        "runtime_venv_mb": _folder_bytes(runtime) / 1e6,
        "bare_venv_mb": _folder_bytes(bare) / 1e6,
        "provider_venv_mb": (_folder_bytes(bare) + sum(provider.values())) / 1e6,
        "provider_distributions": len(provider),
    }


def main() -> int:
    args = arguments(__doc__.splitlines()[0])
    scratch_airflow_home("cw-own-home-")
    names = trace_names(args.quick)
    if names is None:
        return 2
    tick = args.tick_seconds
    every_seconds = EVERY_STEPS * STEP_SECONDS
    with tempfile.TemporaryDirectory(prefix="cw-own-") as tmp:
        folder = Path(tmp)
        os.environ["COSTAWARE_LEDGER_URL"] = f"sqlite:///{folder / 'ledger.db'}"
        data = arrays(folder / "data")
        uninterrupted = {
            "market": "on_demand",
            "trace": None,
            "tick_seconds": tick,
            "deadline_seconds": 900,
            "latest_start_seconds": 0,
        }
        pairs, base, bare = overhead_pairs(
            lambda n: (
                run_once(folder / f"base-{n}", data, every_steps=EVERY_STEPS, **uninterrupted),
                run_once(folder / f"bare-{n}", data, every_steps=10**9, **uninterrupted),
            )
        )
        overhead = base["billed_seconds"] / bare["billed_seconds"] - 1
        deadline_seconds = 4 * base["wall_seconds"] + 30
        rows, lost_all, preemptions, misses, completed = [], [], 0, 0, 0
        for name in names:
            trace = trace_window(name, deadline_seconds, tick)
            run = run_once(
                folder / name.removesuffix(".json"),
                data,
                every_steps=EVERY_STEPS,
                market="spot",
                trace=trace,
                tick_seconds=tick,
                deadline_seconds=deadline_seconds,
                latest_start_seconds=deadline_seconds - 2 * base["wall_seconds"],
            )
            completed += int(bool(run["result"].get("version")))
            misses += int(run["missed"])
            preemptions += run["preemptions"]
            lost_all += run["lost_steps"]
            share = sum(run["lost_steps"]) / run["preemptions"] / EVERY_STEPS if run["preemptions"] else 0.0
            rows.append(
                [
                    name[30:-5],
                    len(run["result"]["attempts"]),
                    run["preemptions"],
                    f"{share:.2f}",
                    "yes" if run["missed"] else "no",
                    f"{Decimal(run['result']['usd']):.6f}",
                    f"{run['result']['metrics']['rmse']:.2f}",
                ]
            )
        sizes = venv_sizes(folder / "venvs")
    mean_lost = (sum(lost_all) / preemptions / EVERY_STEPS) if preemptions else 0.0
    size_ratio = sizes["runtime_venv_mb"] / sizes["provider_venv_mb"]
    print(table(["trace", "attempts", "preempt", "lost/ckpt", "missed", "usd", "rmse min"], rows))
    print(
        f"checkpoint overhead: {base['billed_seconds']:.2f} s billed with a checkpoint every "
        f"{EVERY_STEPS} steps ({every_seconds:.1f} s) vs {bare['billed_seconds']:.2f} s without "
        f"({overhead:+.1%})"
    )
    print(
        f"venv sizes: runtime {sizes['runtime_venv_mb']:.1f} MB, bare {sizes['bare_venv_mb']:.1f} MB, "
        f"provider {sizes['provider_venv_mb']:.1f} MB ({sizes['provider_distributions']} distributions): "
        f"{size_ratio:.3f}"
    )
    target_met = (
        completed == len(names)
        and misses == 0
        and mean_lost <= TARGET_LOST
        and overhead <= TARGET_OVERHEAD
        and size_ratio <= TARGET_SIZE_RATIO
    )
    emit(
        {
            "benchmark": "own_training",
            "quick": args.quick,
            "traces": len(names),
            "completed": completed,
            "deadline_misses": misses,
            "preemptions": preemptions,
            "mean_work_lost_per_preemption_intervals": round(mean_lost, 3),
            "checkpoint_overhead": round(overhead, 4),
            "billed_seconds_with_checkpoints": round(base["billed_seconds"], 3),
            "overhead_pairs": [
                [round(b["billed_seconds"], 2), round(n["billed_seconds"], 2)] for b, n in pairs
            ],
            "billed_seconds_without_checkpoints": round(bare["billed_seconds"], 3),
            "checkpoint_every_steps": EVERY_STEPS,
            "runtime_venv_mb": round(sizes["runtime_venv_mb"], 1),
            "provider_venv_mb": round(sizes["provider_venv_mb"], 1),
            "venv_size_ratio": round(size_ratio, 4),
            "baseline": "the same script uninterrupted without checkpoints; a venv of the full provider",
            "rows": rows,
            "target": {
                "deadline_misses": 0,
                "mean_work_lost_intervals": TARGET_LOST,
                "overhead": TARGET_OVERHEAD,
                "venv_size_ratio": TARGET_SIZE_RATIO,
            },
            "target_met": target_met,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
