"""Measures what a stretch of work in this process used: CPU time and peak memory of the process tree.

The cost listener starts a probe when a task try starts running and stops it when the try ends; both run
in the task process, so the probe sees the task's own process and every child it starts. CPU time is the
difference of ``psutil`` CPU times of the process (user + system, its waited-for children included) plus
the CPU time of children still alive at the end. Peak memory is the highest resident set size of the
process tree seen by a sampling thread (every ``interval_seconds``), and the peak of any child that ended
in between (``getrusage(RUSAGE_CHILDREN)``, when it grew during the try).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """What the probed stretch used."""

    wall_seconds: float
    cpu_seconds: float
    peak_rss_bytes: int
    samples: int


def _children_maxrss_bytes() -> int:
    try:
        import resource
    except ImportError:  # not on POSIX
        return 0
    # ru_maxrss is in KiB on Linux (bytes on macOS, where this over-reports by 1024: harmless for a peak).
    return int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024


class ProcessTreeProbe:
    """CPU seconds and peak resident memory of this process and its children between ``start`` and ``stop``.

    Args:
        interval_seconds: How often the sampling thread reads the tree's resident memory.
        pid: Process to probe (default: this one).
    """

    def __init__(self, *, interval_seconds: float = 0.1, pid: int | None = None) -> None:
        import psutil

        self._psutil = psutil
        self._process = psutil.Process(pid or os.getpid())
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._peak = 0
        self._samples = 0
        self._started = 0.0
        self._cpu_started = 0.0
        self._children_maxrss = 0

    def _cpu(self) -> float:
        times = self._process.cpu_times()
        own = times.user + times.system + times.children_user + times.children_system
        live = 0.0
        for child in self._children():
            try:
                t = child.cpu_times()
                live += t.user + t.system
            except self._psutil.Error:
                continue  # it ended between listing and reading: its time is in children_* now
        return float(own + live)

    def _children(self) -> list[Any]:
        try:
            return list(self._process.children(recursive=True))
        except self._psutil.Error:
            return []

    def _rss(self) -> int:
        total = 0
        for process in (self._process, *self._children()):
            try:
                total += int(process.memory_info().rss)
            except self._psutil.Error:
                continue
        return total

    def _sample(self) -> None:
        self._peak = max(self._peak, self._rss())
        self._samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def start(self) -> ProcessTreeProbe:
        """Take the starting CPU time and memory and start sampling; returns the probe."""
        self._started = time.monotonic()
        self._cpu_started = self._cpu()
        self._children_maxrss = _children_maxrss_bytes()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="costaware-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> ProbeReading:
        """Stop sampling and return what the stretch used."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sample()
        peak = self._peak
        ended_children = _children_maxrss_bytes()
        if ended_children > self._children_maxrss:
            # A child that ended between samples peaked at ended_children while this process lived on.
            peak = max(peak, ended_children + int(self._process.memory_info().rss))
        return ProbeReading(
            wall_seconds=max(0.0, time.monotonic() - self._started),
            cpu_seconds=max(0.0, self._cpu() - self._cpu_started),
            peak_rss_bytes=peak,
            samples=self._samples,
        )
