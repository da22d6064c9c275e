"""What the two preemption benchmarks share: a spot decision in compressed time, a training driven under a
replayed availability trace, and the work a resumed attempt repeated."""

from __future__ import annotations

import itertools
import signal
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

PRICES = {"spot": Decimal("0.918"), "on_demand": Decimal("3.06")}  # p3.2xlarge, us-west-2, per hour


def spot_decision(
    market: str, now: datetime, deadline: datetime, latest_start_seconds: float
) -> dict[str, str]:
    """What a spot window would have decided for a p3.2xlarge in us-west-2, ``market`` at its price."""
    return {
        "market": market,
        "usd_per_hour": str(PRICES[market]),
        "on_demand_usd_per_hour": str(PRICES["on_demand"]),
        "instance_type": "p3.2xlarge",
        "region": "us-west-2",
        "deadline": deadline.isoformat(),
        "latest_start": (now + timedelta(seconds=latest_start_seconds)).isoformat(),
    }


def drive_under_trace(
    operator: Any, backend_options: dict[str, Any], trace: list[bool] | None, tick_seconds: float
) -> tuple[Any, list[Any]]:
    """Run ``operator`` to its end; with a ``trace``, its spot jobs get SIGKILL or SIGTERM by turns at drops.

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
