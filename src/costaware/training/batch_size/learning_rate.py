"""The learning rate for a batch size, from the one tuned at a base batch size."""

from __future__ import annotations

import math

from costaware.core.errors import ConfigurationError

LR_RULES = ("linear", "sqrt")


def scale_learning_rate(base_lr: float, base_batch: int, batch: int, rule: str = "linear") -> float:
    """The learning rate for ``batch`` when ``base_lr`` was tuned at ``base_batch``.

    Raises:
        ConfigurationError: unknown rule, or a batch size or learning rate that is not positive.
    """
    if rule not in LR_RULES:
        raise ConfigurationError(f"lr_rule must be one of {', '.join(LR_RULES)}, got {rule!r}")
    if base_batch < 1 or batch < 1:
        raise ConfigurationError(f"batch sizes must be >= 1, got base {base_batch} and {batch}")
    if not (base_lr > 0 and math.isfinite(base_lr)):
        raise ConfigurationError(f"base learning rate must be > 0, got {base_lr}")
    ratio = batch / base_batch
    return base_lr * (ratio if rule == "linear" else math.sqrt(ratio))
