"""The largest batch that fits in memory: double until a step runs out of memory, then bisect.

Running out of memory is a real ``torch.OutOfMemoryError`` on a GPU, an allocator failure, or the measured
step memory passing a limit (:class:`BatchMemoryExceeded`). torch is imported where used.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

from costaware.core.errors import ConfigurationError

_OOM_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory")


class BatchMemoryExceeded(RuntimeError):
    """Raised by a probe step whose measured memory passes the limit (CPU, or a cap below the device's)."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says a batch did not fit: torch's OOM error, an allocator failure, or our limit."""
    import torch

    if isinstance(error, (torch.OutOfMemoryError, BatchMemoryExceeded)):
        return True
    return isinstance(error, RuntimeError) and any(m in str(error).lower() for m in _OOM_MESSAGES)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The largest batch that fits, each batch tried (size, fitted), and step seconds of those that fit."""

    max_batch_size: int
    attempts: tuple[tuple[int, bool], ...]
    step_seconds: dict[int, float]


def probe_max_batch_size(
    try_batch: Callable[[int], float],
    *,
    start: int = 1,
    limit: int = 1 << 16,
    granularity: int = 1,
    on_oom: Callable[[], None] | None = None,
) -> ProbeResult:
    """Largest batch in ``[start, limit]`` for which ``try_batch`` runs without running out of memory.

    Doubles from ``start`` until a step fails, then bisects between the last batch that fit and the first
    that did not, to ``granularity``. ``try_batch(b)`` runs one real step and returns its seconds.

    Raises:
        ConfigurationError: even ``start`` does not fit, or bad arguments.
    """
    if start < 1 or limit < start or granularity < 1:
        raise ConfigurationError(
            f"need 1 <= start <= limit and granularity >= 1, got start={start}, limit={limit}, "
            f"granularity={granularity}"
        )
    attempts: list[tuple[int, bool]] = []
    seconds: dict[int, float] = {}

    def fits(batch: int) -> bool:
        try:
            seconds[batch] = try_batch(batch)
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            attempts.append((batch, False))
            gc.collect()
            if on_oom is not None:
                on_oom()
            return False
        attempts.append((batch, True))
        return True

    good, bad, batch = 0, 0, start
    while batch <= limit:
        if not fits(batch):
            bad = batch
            break
        good = batch
        if batch == limit:
            break
        batch = min(batch * 2, limit)
    if good == 0:
        raise ConfigurationError(
            f"a batch of {start} does not fit in memory: lower start, shrink the model or raise the limit"
        )
    while bad and bad - good > granularity:
        middle = (good + bad) // 2 // granularity * granularity
        if middle <= good:
            break
        if fits(middle):
            good = middle
        else:
            bad = middle
    return ProbeResult(good, tuple(attempts), dict(seconds))
