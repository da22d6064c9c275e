"""What the two preemption benchmarks share: a spot decision in compressed time, a training driven under a
replayed availability trace, and the work a resumed attempt repeated."""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import statistics
import sys
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

PRICES = {"spot": Decimal("0.918"), "on_demand": Decimal("3.06")}  # p3.2xlarge, us-west-2, per hour
ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("COSTAWARE_SHARED_DATA", ROOT / ".." / "shared" / "data")) / "spot_availability"
TRACES = [
    f"availability_1-node_aws-10-26-2022_us-west-{zone}_{gpu}.json"
    for zone in ("2a", "2b")
    for gpu in ("k80_1", "k80_8", "v100_1", "v100_8")
]


def arguments(
    description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> argparse.Namespace:
    """``--quick`` (one trace instead of eight), ``--json``, ``--tick-seconds``; ``extra`` adds more."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="one trace instead of eight")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--tick-seconds", type=float, default=0.5, help="real seconds per 10-minute tick")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def trace_names(quick: bool) -> list[str] | None:
    """The traces to replay, or None (said on stderr) when any is missing from the shared data."""
    names = TRACES[2:3] if quick else TRACES
    missing = [n for n in names if not (SHARED / n).exists()]
    if missing:
        print(f"availability traces missing from {SHARED.resolve()}: {missing}", file=sys.stderr)
        return None
    return names


def trace_window(name: str, seconds: float, tick_seconds: float) -> list[bool]:
    """``seconds`` of a trace in compressed ticks, from its first tick with spot capacity after tick 400."""
    from costaware.adapters.compute.replay import read_samples

    samples = read_samples(SHARED / name)
    first = next(i for i in range(400, len(samples)) if samples[i])
    return samples[first : first + int(seconds / tick_seconds) + 1]


def zone_windows(names: Mapping[str, str], seconds: float, tick_seconds: float) -> dict[str, list[bool]]:
    """``zone -> window`` of each zone's trace, as ``trace_window`` cuts one, all from one tick: the first
    after tick 400 where any zone has spot capacity."""
    from costaware.adapters.compute.replay import read_samples

    samples = {zone: read_samples(SHARED / name) for zone, name in names.items()}
    length = min(len(s) for s in samples.values())
    first = next(i for i in range(400, length) if any(s[i] for s in samples.values()))
    return {zone: s[first : first + int(seconds / tick_seconds) + 1] for zone, s in samples.items()}


def spot_decision(
    market: str,
    now: datetime,
    deadline: datetime,
    latest_start_seconds: float,
    availability_zone: str | None = None,
) -> dict[str, str]:
    """What a spot window would have decided for a p3.2xlarge in us-west-2, ``market`` at its price."""
    zone = {"availability_zone": availability_zone} if availability_zone else {}
    return {
        **zone,
        "market": market,
        "usd_per_hour": str(PRICES[market]),
        "on_demand_usd_per_hour": str(PRICES["on_demand"]),
        "instance_type": "p3.2xlarge",
        "region": "us-west-2",
        "deadline": deadline.isoformat(),
        "latest_start": (now + timedelta(seconds=latest_start_seconds)).isoformat(),
    }


def drive_under_trace(
    operator: Any,
    backend_options: dict[str, Any],
    trace: list[bool] | Mapping[str, list[bool]] | None,
    tick_seconds: float,
) -> tuple[Any, list[Any]]:
    """Run ``operator`` to its end; with a ``trace``, its spot jobs get SIGKILL or SIGTERM by turns at drops.

    ``trace`` may be one trace per zone (``{zone: samples}``, a ``capacity_file`` with ``{zone}``): a drop
    in a zone preempts only the jobs placed there.

    Returns the operator's result and the preemptions sent.
    """
    from remote_support import context_for, drive

    from costaware.adapters.compute.local import LocalBackend
    from costaware.adapters.compute.replay import PreemptionInjector

    if trace is None:
        result, _ = drive(operator, context_for())
        return result, []
    injector = PreemptionInjector(
        LocalBackend(**backend_options),
        trace,
        tick_seconds=tick_seconds,
        signals=(signal.SIGKILL, signal.SIGTERM),
    )
    with injector:
        result, _ = drive(operator, context_for())
    return result, list(injector.preemptions)


def lost_steps(progress: Path) -> list[int]:
    """Steps done twice, per resume: a resumed attempt logs again from its checkpoint's step + 1."""
    logged = [int(line.split()[0]) for line in progress.read_text().splitlines() if line.strip()]
    return [b - (a - 1) for b, a in itertools.pairwise(logged) if a <= b]


OVERHEAD_PAIRS = 3  # uninterrupted runs with and without checkpoints, by turns


def overhead_pairs(
    run_pair: Callable[[int], tuple[dict[str, Any], dict[str, Any]]], count: int = OVERHEAD_PAIRS
) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], dict[str, float], dict[str, float]]:
    """Checkpoint overhead from ``count`` pairs run by turns, medians compared.

    A run is 15-20 s, of which a few are Python (and torch) starting and the serializer's import, which vary
    by more than the saves cost on a shared machine: one pair swung from -2 % to +15 % on the same code.

    Args:
        run_pair: ``n -> (run with checkpoints, run without)``, each with ``billed_seconds`` and
            ``wall_seconds``.
        count: Pairs to run.

    Returns:
        The pairs, and the runs with and without checkpoints as their median ``billed_seconds`` (with: and the
        longest ``wall_seconds``, which sizes the deadlines of the traced runs).
    """
    pairs = [run_pair(n) for n in range(count)]
    base = {
        "billed_seconds": statistics.median(b["billed_seconds"] for b, _ in pairs),
        "wall_seconds": max(b["wall_seconds"] for b, _ in pairs),
    }
    bare = {"billed_seconds": statistics.median(n["billed_seconds"] for _, n in pairs)}
    return pairs, base, bare
