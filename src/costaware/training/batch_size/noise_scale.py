"""The gradient noise scale, and the batch size that makes the most progress in the time left."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from costaware.core.errors import ConfigurationError


class GradientNoiseScale:
    """Running estimate of the simple gradient noise scale from small- and big-batch gradient norms.

    With ``|G_s|^2`` measured at batch ``B_s`` and ``|G_b|^2`` at ``B_b`` (McCandlish et al. 2018, App. A.1):
    ``|G|^2 ~ (B_b |G_b|^2 - B_s |G_s|^2) / (B_b - B_s)`` and
    ``tr(Sigma) ~ (|G_s|^2 - |G_b|^2) / (1/B_s - 1/B_b)``; each is smoothed by an exponential moving average
    before their ratio is taken, as single-step estimates are very noisy.
    """

    def __init__(self, smoothing: float = 0.95) -> None:
        if not 0 <= smoothing < 1:
            raise ConfigurationError(f"smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self._g2: float | None = None
        self._trace: float | None = None
        self.updates = 0

    def update(self, small_sq_norm: float, small_batch: int, big_sq_norm: float, big_batch: int) -> None:
        if big_batch <= small_batch:
            raise ConfigurationError(
                f"the big batch ({big_batch}) must be larger than the small ({small_batch})"
            )
        g2 = (big_batch * big_sq_norm - small_batch * small_sq_norm) / (big_batch - small_batch)
        trace = (small_sq_norm - big_sq_norm) / (1 / small_batch - 1 / big_batch)
        a = self.smoothing
        self._g2 = g2 if self._g2 is None else a * self._g2 + (1 - a) * g2
        self._trace = trace if self._trace is None else a * self._trace + (1 - a) * trace
        self.updates += 1

    @property
    def value(self) -> float | None:
        """``tr(Sigma) / |G|^2`` in examples; None until it is positive and finite (early, noisy steps)."""
        if self._g2 is None or self._trace is None or self._g2 <= 0 or self._trace <= 0:
            return None
        return self._trace / self._g2


def efficiency(batch: int, base_batch: int, noise_scale: float) -> float:
    """Progress per example at ``batch`` relative to ``base_batch``: (B_noise + B0) / (B_noise + B)."""
    return (noise_scale + base_batch) / (noise_scale + batch)


def choose_batch_size(
    candidates: Iterable[int],
    *,
    throughput: Callable[[int], float],
    noise_scale: float,
    base_batch: int,
    examples_left: float,
    seconds_left: float,
    tolerance: float = 0.05,
) -> tuple[int, str]:
    """The batch that makes the most progress in the time left, and why.

    progress(B) = min(examples_left, seconds_left x throughput(B)) x efficiency(B), a negative
    ``examples_left`` or ``seconds_left`` counting as 0. Of the batches within
    ``tolerance`` of the best progress, the largest is taken: it finishes soonest, so it costs least.
    """
    options = sorted(set(candidates))
    if not options:
        raise ConfigurationError("no candidate batch sizes")
    scored = []
    for batch in options:
        examples = min(max(examples_left, 0.0), max(seconds_left, 0.0) * throughput(batch))
        scored.append((examples * efficiency(batch, base_batch, noise_scale), batch, examples))
    best = max(score for score, _, _ in scored)
    chosen = max(batch for score, batch, _ in scored if score >= (1 - tolerance) * best)
    _, _, examples = next(s for s in scored if s[1] == chosen)
    bound = "the data left" if examples >= examples_left else f"the {seconds_left:.1f} s left"
    return chosen, (
        f"batch {chosen}: noise scale {noise_scale:.0f}, {throughput(chosen):.0f} examples/s, "
        f"efficiency {efficiency(chosen, base_batch, noise_scale):.2f}, progress bounded by {bound}"
    )
