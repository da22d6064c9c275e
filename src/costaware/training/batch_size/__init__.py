"""Adaptive batch size for PyTorch training loops, within the time (money) left in the budget.

The largest batch that fits, a learning rate scaled with it, and a batch size that follows the gradient
noise scale.

Three pieces, usable alone or through :class:`AdaptiveBatchTrainer`:

* :func:`probe_max_batch_size` doubles the batch until a training step runs out of memory (a real
  ``torch.OutOfMemoryError`` on a GPU, or the measured step memory passing ``memory_limit_bytes``), then
  backs off by bisection to the largest batch that fits.
* :func:`scale_learning_rate` scales the learning rate with the batch: ``linear`` (Goyal et al. 2017, for
  SGD) or ``sqrt`` (Krizhevsky 2014; Hoffer et al. 2017; common for Adam).
* :class:`GradientNoiseScale` estimates the simple noise scale ``B_noise = tr(Sigma) / |G|^2`` (McCandlish
  et al. 2018) from two gradient norms every step, and :func:`choose_batch_size` picks the batch that makes
  the most progress in the time left: progress(B) = min(examples left, seconds left x throughput(B)) x
  efficiency(B), with efficiency(B) = (B_noise + B0) / (B_noise + B) (Pollux, Qiao et al. 2021). With time to
  spare, small efficient batches win; when time is short, larger batches get through more data.

One module each: ``probe``, ``learning_rate``, ``noise_scale``, and ``trainer`` for the training loop; every
name is importable from here. torch is imported where it is used; this package imports without it.
"""

from __future__ import annotations

from costaware.training.batch_size.learning_rate import LR_RULES, scale_learning_rate
from costaware.training.batch_size.noise_scale import GradientNoiseScale, choose_batch_size, efficiency
from costaware.training.batch_size.probe import (
    BatchMemoryExceeded,
    ProbeResult,
    is_out_of_memory,
    probe_max_batch_size,
)
from costaware.training.batch_size.trainer import AdaptiveBatchTrainer, BatchChange, TrainingReport

__all__ = [
    "LR_RULES",
    "AdaptiveBatchTrainer",
    "BatchChange",
    "BatchMemoryExceeded",
    "GradientNoiseScale",
    "ProbeResult",
    "TrainingReport",
    "choose_batch_size",
    "efficiency",
    "is_out_of_memory",
    "probe_max_batch_size",
    "scale_learning_rate",
]
