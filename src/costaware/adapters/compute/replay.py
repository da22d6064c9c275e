"""Preemption replay: a recorded spot availability trace, played in compressed time against local jobs.

At every tick the injector writes the capacity (``1``/``0``) to the local backend's ``capacity_file`` (so
spot jobs submitted without capacity wait), and at every drop of capacity (1 then 0) it signals each running
spot job of the backend: SIGTERM (the spot notice: the training checkpoints and exits 75; a job still alive
``grace_seconds`` later is SIGKILLed, as AWS reclaims the instance after its two-minute notice) or SIGKILL
(no notice: at most one checkpoint interval of work is lost), by turns or as configured. A job is preempted
once: a later drop does not count it again.

Given one trace per zone (``{"us-east-1a": samples, "us-east-1b": samples}``) and a per-zone
``capacity_file`` (with ``{zone}``), the injector writes each zone's file and a drop in zone Z signals only
the running spot jobs placed in Z (their status's ``availability_zone``), as a reclaim in one zone leaves the
others running.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from costaware.adapters.compute.base import check_aws_zone
from costaware.adapters.compute.local import ZONE_PLACEHOLDER, LocalBackend
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
    """One signal the injector sent: at which tick, to which job, which signal, after how many seconds.

    ``zone`` is the zone whose drop it was (empty for a single trace).
    """

    tick: int
    job_id: str
    signum: int
    at_seconds: float
    zone: str = ""


class PreemptionInjector:
    """Plays ``samples`` at ``tick_seconds`` per tick against ``backend``'s spot jobs, in a thread.

    Args:
        backend: The local backend (its ``capacity_file`` is written when set).
        samples: Capacity per tick; or capacity per tick of each zone, ``{zone: samples}`` (all of one
            length), for a backend whose ``capacity_file`` has ``{zone}``.
        tick_seconds: Real seconds per tick (compressed time, e.g. 0.25 for 10-minute ticks).
        signals: Signals to send at successive drops, cycled (default SIGTERM, SIGKILL).
        hold_last: After the trace, keep its last value (default) instead of stopping.
        grace_seconds: Seconds from a SIGTERM to the SIGKILL of a job that has not exited.
    """

    def __init__(
        self,
        backend: LocalBackend,
        samples: Sequence[bool] | Mapping[str, Sequence[bool]],
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
        #: Capacity per tick by zone; the zone "" stands for every job (one trace).
        self.traces = _traces(backend, samples)
        self.samples = next(iter(self.traces.values()))
        self.tick_seconds = float(tick_seconds)
        self.signals = list(signals)
        self.hold_last = hold_last
        self.grace_seconds = float(grace_seconds)
        self._kill_at: dict[str, float] = {}
        self.preemptions: list[Preemption] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="preemption-replay", daemon=True)
        self._started = 0.0
        for zone, trace in self.traces.items():
            self._write(zone, trace[0])

    def _write(self, zone: str, available: bool) -> None:
        if self.backend.capacity_file:
            path = Path(self.backend.capacity_file.replace(ZONE_PLACEHOLDER, zone))
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text("1" if available else "0")
            tmp.replace(path)

    def _spot_jobs_running(self, zone: str = "") -> list[str]:
        """The running spot jobs, those placed in ``zone`` unless it is "" (every zone)."""
        root = self.backend.root
        if not root.exists():
            return []
        running = []
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            try:
                status = self.backend.poll(folder.name)
            except Exception:  # a job folder still being written; the next tick sees it
                continue
            in_zone = not zone or status.availability_zone == zone
            if status.market == "spot" and status.state.value == "running" and in_zone:
                running.append(folder.name)
        return running

    def _run(self) -> None:
        previous = {zone: trace[0] for zone, trace in self.traces.items()}
        tick = 0
        while not self._stop.is_set():
            tick += 1
            if self._stop.wait(max(0.0, self._started + tick * self.tick_seconds - time.monotonic())):
                return
            if tick >= len(self.samples):
                if not self.hold_last:
                    return
                continue
            for zone, trace in self.traces.items():
                self._write(zone, trace[tick])
            self._enforce_grace()
            for zone, trace in self.traces.items():
                if previous[zone] and not trace[tick]:
                    self._preempt(tick, zone)
                previous[zone] = trace[tick]

    def _preempt(self, tick: int, zone: str) -> None:
        """Signal the running spot jobs of ``zone`` (every zone for "") not preempted before."""
        done = {p.job_id for p in self.preemptions}
        for job_id in self._spot_jobs_running(zone):
            if job_id in done:
                continue
            signum = self.signals[len(self.preemptions) % len(self.signals)]
            if self.backend.signal(job_id, signum):
                elapsed = time.monotonic() - self._started
                self.preemptions.append(Preemption(tick, job_id, int(signum), elapsed, zone))
                if signum == signal.SIGTERM:
                    self._kill_at[job_id] = time.monotonic() + self.grace_seconds

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


def _traces(
    backend: LocalBackend, samples: Sequence[bool] | Mapping[str, Sequence[bool]]
) -> dict[str, list[bool]]:
    """The samples by zone ("" for one trace), checked against ``backend``'s capacity file."""
    if not isinstance(samples, Mapping):
        if backend.per_zone:
            raise ConfigurationError(
                f"capacity_file {backend.capacity_file!r} is one file per zone ({ZONE_PLACEHOLDER}) but the "
                "replay has one trace: give one per zone, {zone: samples}, or a capacity_file without "
                f"{ZONE_PLACEHOLDER}"
            )
        return {"": [bool(v) for v in samples]}
    if not backend.per_zone:
        raise ConfigurationError(
            f"a replay with one trace per zone ({', '.join(map(repr, samples))}) needs a capacity_file "
            f"with {ZONE_PLACEHOLDER} (e.g. /tmp/capacity-{{zone}}), got {backend.capacity_file!r}"
        )
    traces = {check_aws_zone(zone): [bool(v) for v in trace] for zone, trace in samples.items()}
    lengths = {zone: len(trace) for zone, trace in traces.items()}
    if len(set(lengths.values())) != 1 or 0 in lengths.values():
        raise ConfigurationError(
            f"the zones' traces must have one length of at least one tick, got {lengths}: cut them to the "
            "same ticks (read_samples(..., first_tick=, ticks=))"
        )
    return traces
