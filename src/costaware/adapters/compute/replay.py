"""Preemption replay: a recorded spot availability trace, played in compressed time against local jobs.

At every tick the injector writes the capacity (``1``/``0``) to the local backend's ``capacity_file`` (so
spot jobs submitted without capacity wait), and at every drop of capacity (1 then 0) it signals each running
spot job of the backend: SIGTERM (the spot notice: the training checkpoints and exits 75; a job still alive
``grace_seconds`` later is SIGKILLed, as AWS reclaims the instance after its two-minute notice) or SIGKILL
(no notice: at most one checkpoint interval of work is lost), by turns or as configured. A job is preempted
once: a later drop does not count it again.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from costaware.adapters.compute.local import LocalBackend
from costaware.core.errors import ConfigurationError


def read_samples(path: str | Path, *, first_tick: int = 0, ticks: int | None = None) -> list[bool]:
    """The 0/1 samples of a trace file (``{"metadata": {...}, "data": [0, 1, ...]}``) from ``first_tick``."""
    try:
        document = json.loads(Path(path).read_text())
        data = [bool(v) for v in document["data"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigurationError(f"cannot read availability trace {path}: {e}") from e
    end = None if ticks is None else first_tick + ticks
    part = data[first_tick:end]
    if not part:
        raise ConfigurationError(f"availability trace {path} has no ticks from {first_tick}")
    return part


@dataclass(frozen=True, slots=True)
class Preemption:
    """One signal the injector sent: at which tick, to which job, which signal, after how many seconds."""

    tick: int
    job_id: str
    signum: int
    at_seconds: float


class PreemptionInjector:
    """Plays ``samples`` at ``tick_seconds`` per tick against ``backend``'s spot jobs, in a thread.

    Args:
        backend: The local backend (its ``capacity_file`` is written when set).
        samples: Capacity per tick.
        tick_seconds: Real seconds per tick (compressed time, e.g. 0.25 for 10-minute ticks).
        signals: Signals to send at successive drops, cycled (default SIGTERM, SIGKILL).
        hold_last: After the trace, keep its last value (default) instead of stopping.
        grace_seconds: Seconds from a SIGTERM to the SIGKILL of a job that has not exited.
    """

    def __init__(
        self,
        backend: LocalBackend,
        samples: Sequence[bool],
        *,
        tick_seconds: float,
        signals: Sequence[int] = (signal.SIGTERM, signal.SIGKILL),
        hold_last: bool = True,
        grace_seconds: float = 15.0,
    ) -> None:
        if not tick_seconds > 0:
            raise ConfigurationError(f"tick_seconds must be > 0, got {tick_seconds!r}")
        if not samples or not signals:
            raise ConfigurationError("a preemption replay needs at least one sample and one signal")
        self.backend = backend
        self.samples = list(samples)
        self.tick_seconds = float(tick_seconds)
        self.signals = list(signals)
        self.hold_last = hold_last
        self.grace_seconds = float(grace_seconds)
        self._kill_at: dict[str, float] = {}
        self.preemptions: list[Preemption] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="preemption-replay", daemon=True)
        self._started = 0.0
        self._write(self.samples[0])

    def _write(self, available: bool) -> None:
        if self.backend.capacity_file:
            path = Path(self.backend.capacity_file)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text("1" if available else "0")
            tmp.replace(path)

    def _spot_jobs_running(self) -> list[str]:
        root = self.backend.root
        if not root.exists():
            return []
        running = []
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            try:
                status = self.backend.poll(folder.name)
            except Exception:  # a job folder still being written; the next tick sees it
                continue
            if status.market == "spot" and status.state.value == "running":
                running.append(folder.name)
        return running

    def _run(self) -> None:
        previous = self.samples[0]
        tick = 0
        while not self._stop.is_set():
            tick += 1
            if self._stop.wait(max(0.0, self._started + tick * self.tick_seconds - time.monotonic())):
                return
            if tick >= len(self.samples):
                if not self.hold_last:
                    return
                continue
            available = self.samples[tick]
            self._write(available)
            self._enforce_grace()
            if previous and not available:
                done = {p.job_id for p in self.preemptions}
                for job_id in self._spot_jobs_running():
                    if job_id in done:
                        continue
                    signum = self.signals[len(self.preemptions) % len(self.signals)]
                    if self.backend.signal(job_id, signum):
                        elapsed = time.monotonic() - self._started
                        self.preemptions.append(Preemption(tick, job_id, int(signum), elapsed))
                        if signum == signal.SIGTERM:
                            self._kill_at[job_id] = time.monotonic() + self.grace_seconds
            previous = available

    def _enforce_grace(self) -> None:
        now = time.monotonic()
        for job_id, at in list(self._kill_at.items()):
            if now >= at:
                self.backend.signal(job_id, signal.SIGKILL)
                del self._kill_at[job_id]

    def start(self) -> PreemptionInjector:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> PreemptionInjector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
