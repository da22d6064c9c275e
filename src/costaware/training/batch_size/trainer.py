"""A PyTorch training loop whose batch size fits the device and follows the gradient noise scale."""

from __future__ import annotations

import logging
import math
import numbers
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.training.batch_size.learning_rate import scale_learning_rate
from costaware.training.batch_size.noise_scale import GradientNoiseScale, choose_batch_size
from costaware.training.batch_size.probe import BatchMemoryExceeded, ProbeResult, probe_max_batch_size

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BatchChange:
    """One change of batch size during training."""

    step: int
    batch_size: int
    learning_rate: float
    noise_scale: float | None
    reason: str


@dataclass(frozen=True, slots=True)
class TrainingReport:
    """What :meth:`AdaptiveBatchTrainer.fit` did."""

    steps: int
    examples: int
    epochs: float
    seconds: float
    stopped_by: str  # "epochs" or "budget"
    max_batch_size: int
    changes: tuple[BatchChange, ...]
    losses: tuple[float, ...] = field(default=())
    noise_scale: float | None = None


class AdaptiveBatchTrainer:
    """Trains a model with a batch size that fits the device and adapts to the gradient noise scale.

    Args:
        model: The ``torch.nn.Module``.
        optimizer: Its optimizer; the learning rate of every parameter group is rescaled on a batch change.
        loss_fn: ``loss_fn(model(inputs), targets)`` returns the mean loss of a batch.
        base_batch_size: The batch the learning rate ``base_lr`` was tuned for (and the first one used).
        base_lr: Learning rate at ``base_batch_size``.
        lr_rule: ``linear`` or ``sqrt`` scaling of the learning rate with the batch size.
        budget_seconds: Training time the budget pays for (e.g. what is left of the reservation).
        max_batch_size: Never use a larger batch, even if it fits.
        memory_limit_bytes: Memory a step may use (model, gradients, optimizer state, activations); on a
            GPU the device's own out-of-memory error also stops the probe. None: no measured limit.
        adapt_every: Re-choose the batch size every this many steps.
        tolerance: Take the largest batch within this fraction of the best expected progress.
        clock: Seconds clock (time.monotonic).
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        loss_fn: Callable[[Any, Any], Any],
        *,
        base_batch_size: int,
        base_lr: float,
        lr_rule: str = "sqrt",
        budget_seconds: float,
        max_batch_size: int = 1 << 14,
        memory_limit_bytes: int | None = None,
        adapt_every: int = 20,
        tolerance: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Text ("32" from a config file) compared with numbers below raised a bare TypeError.
        for name, value, kind in (
            ("base_batch_size", base_batch_size, numbers.Integral),
            ("max_batch_size", max_batch_size, numbers.Integral),
            ("adapt_every", adapt_every, numbers.Integral),
            ("base_lr", base_lr, numbers.Real),
            ("budget_seconds", budget_seconds, numbers.Real),
            ("tolerance", tolerance, numbers.Real),
        ):
            if isinstance(value, bool) or not isinstance(value, kind):
                what = "a whole number" if kind is numbers.Integral else "a number"
                raise ConfigurationError(f"{name} must be {what}, got {value!r}")
        scale_learning_rate(base_lr, base_batch_size, base_batch_size, lr_rule)  # validates all three
        if not (budget_seconds > 0 and math.isfinite(budget_seconds)):
            raise ConfigurationError(f"budget_seconds must be > 0, got {budget_seconds}")
        if max_batch_size < base_batch_size:
            raise ConfigurationError(
                f"max_batch_size ({max_batch_size}) must be >= base_batch_size ({base_batch_size})"
            )
        if memory_limit_bytes is not None and memory_limit_bytes <= 0:
            raise ConfigurationError(f"memory_limit_bytes must be > 0, got {memory_limit_bytes}")
        if adapt_every < 1:
            raise ConfigurationError(f"adapt_every must be >= 1, got {adapt_every}")
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.base_batch_size, self.base_lr, self.lr_rule = base_batch_size, base_lr, lr_rule
        self.budget_seconds, self.max_batch_size = budget_seconds, max_batch_size
        self.memory_limit_bytes, self.adapt_every, self.tolerance = memory_limit_bytes, adapt_every, tolerance
        self.clock = clock
        self.noise = GradientNoiseScale()
        self._seconds_per_step: dict[int, float] = {}

    # -- memory ---------------------------------------------------------------------------------------

    def step_bytes(self, inputs: Any, targets: Any) -> int:
        """Memory of one training step on this batch, measured.

        Parameters, gradients, optimizer state, the batch and every tensor autograd keeps for the backward
        pass, each tensor counted once.
        """
        import torch

        sizes: dict[tuple[int, int, str], int] = {}

        def keep(t: torch.Tensor) -> None:
            # A batch sliced from the data set is a view: count the batch, not the whole data set.
            sizes[(t.data_ptr(), t.numel(), str(t.dtype))] = t.numel() * t.element_size()

        def pack(t: torch.Tensor) -> torch.Tensor:
            keep(t)
            return t

        for p in self.model.parameters():
            keep(p)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = self.model(inputs)
            loss = self.loss_fn(out, targets)
        keep(inputs)
        keep(targets)
        keep(out)
        loss.backward()
        for p in self.model.parameters():
            if p.grad is not None:
                keep(p.grad)
        for state in self.optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    keep(value)
        self.optimizer.zero_grad(set_to_none=True)
        return sum(sizes.values()) + self._state_to_come()

    def _state_to_come(self) -> int:
        """Bytes of the optimizer state its first step will make for parameters that have none yet.

        An optimizer makes its state lazily: probed before any step, Adam's two moments (twice the
        parameters) were not counted, and the batch chosen ran out of memory once training began. Estimated
        from the optimizer's kind; one it does not know is taken as Adam's, the common larger case.
        """
        import torch

        kind = type(self.optimizer).__name__
        defaults = getattr(self.optimizer, "defaults", {})
        # Tensors of the parameters' size each kind keeps per parameter; Adam's 2 for any other kind.
        copies = {
            "SGD": int(bool(defaults.get("momentum"))),
            "RMSprop": 1 + bool(defaults.get("momentum")) + bool(defaults.get("centered")),
            "Adagrad": 1,
            "Adadelta": 2,
            "Rprop": 2,
        }.get(kind, 2)
        missing = [
            p
            for group in self.optimizer.param_groups
            for p in group["params"]
            if isinstance(p, torch.Tensor) and p.requires_grad and not self.optimizer.state.get(p)
        ]
        return copies * sum(p.numel() * p.element_size() for p in missing)

    def probe(self, inputs: Any, targets: Any) -> ProbeResult:
        """The largest batch (up to ``max_batch_size`` and the data) whose training step fits in memory."""
        import torch

        def try_batch(batch: int) -> float:
            x, y = inputs[:batch], targets[:batch]
            _synchronize(x)
            tick = self.clock()
            if self.memory_limit_bytes is not None:
                needed = self.step_bytes(x, y)
                if needed > self.memory_limit_bytes:
                    raise BatchMemoryExceeded(
                        f"a batch of {batch} needs {needed} bytes, the limit is {self.memory_limit_bytes}"
                    )
            else:
                self.loss_fn(self.model(x), y).backward()
                self.optimizer.zero_grad(set_to_none=True)
            # A GPU runs the step after the call returns: wait for it, or this times the launches alone.
            _synchronize(x)
            return self.clock() - tick

        def release() -> None:
            self.optimizer.zero_grad(set_to_none=True)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

        limit = min(self.max_batch_size, len(inputs))
        result = probe_max_batch_size(try_batch, start=1, limit=limit, on_oom=release)
        self._seconds_per_step.update(result.step_seconds)
        log.info("largest batch that fits: %d (tried %s)", result.max_batch_size, result.attempts)
        return result

    # -- training -------------------------------------------------------------------------------------

    def _throughput(self, batch: int) -> float:
        """Examples per second at ``batch``: measured, else from a line through the measured step times."""
        known = sorted(self._seconds_per_step.items())
        if batch in self._seconds_per_step and self._seconds_per_step[batch] > 0:
            return batch / self._seconds_per_step[batch]
        if len(known) >= 2:
            (b0, t0), (b1, t1) = known[0], known[-1]
            slope = max((t1 - t0) / (b1 - b0), 0.0)
            seconds = max(t0 + slope * (batch - b0), 1e-9)
        else:
            b0, t0 = known[0] if known else (1, 1e-3)
            seconds = max(t0 * batch / b0, 1e-9)
        return batch / seconds

    def _set_lr(self, batch: int) -> float:
        lr = scale_learning_rate(self.base_lr, self.base_batch_size, batch, self.lr_rule)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _step(self, x: Any, y: Any) -> float:
        """One step on the batch as two halves: their gradient norms feed the noise scale."""
        import torch

        half = len(x) // 2
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer.zero_grad(set_to_none=True)
        first = self.loss_fn(self.model(x[:half]), y[:half])
        first.backward()
        g1 = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
        self.optimizer.zero_grad(set_to_none=True)
        second = self.loss_fn(self.model(x[half:]), y[half:])
        second.backward()
        g2 = [p.grad.detach() if p.grad is not None else torch.zeros_like(p) for p in params]
        n1 = sum(float((g * g).sum()) for g in g1)
        n2 = sum(float((g * g).sum()) for g in g2)
        w1, w2 = half / len(x), (len(x) - half) / len(x)
        for p, a, b in zip(params, g1, g2, strict=True):
            p.grad = w1 * a + w2 * b
        big = sum(float((p.grad * p.grad).sum()) for p in params)
        if half >= 1 and len(x) - half >= 1:
            self.noise.update((n1 + n2) / 2, len(x) // 2, big, len(x))
        self.optimizer.step()
        return float(w1 * first.detach() + w2 * second.detach())

    def fit(self, inputs: Any, targets: Any, *, epochs: float, seed: int = 0) -> TrainingReport:
        """Train for ``epochs`` passes over the data or until the budget's time is spent, adapting the batch.

        The batch starts at ``base_batch_size`` (at least 2, so each step has two halves); every
        ``adapt_every`` steps it is re-chosen among powers of two up to the largest that fits.
        """
        import torch

        if epochs <= 0:
            raise ConfigurationError(f"epochs must be > 0, got {epochs}")
        started = self.clock()
        probe = self.probe(inputs, targets)
        top = probe.max_batch_size
        candidates = sorted({b for b in (2**k for k in range(1, 31)) if b <= top} | {top, 2})
        batch = max(2, min(self.base_batch_size, top))
        changes = [BatchChange(0, batch, self._set_lr(batch), None, "start at the base batch size")]
        generator = torch.Generator().manual_seed(seed)
        n, total = len(inputs), int(epochs * len(inputs))
        order, cursor, examples, steps, losses = torch.randperm(n, generator=generator), 0, 0, 0, []
        stopped_by = "epochs"
        while examples < total:
            elapsed = self.clock() - started
            step_time = batch / self._throughput(batch)
            if elapsed + step_time > self.budget_seconds:
                stopped_by = "budget"
                break
            # The last step takes what is left of the epochs (at least 2 rows, one per half), so a large
            # batch does not train past them: epochs=1 once trained 1.24 passes at a batch of 256.
            size = max(2, min(batch, total - examples))
            if cursor + size > n:
                order, cursor = torch.randperm(n, generator=generator), 0
            index = order[cursor : cursor + size]
            cursor += size
            tick = self.clock()
            losses.append(self._step(inputs[index], targets[index]))
            seconds = self.clock() - tick
            previous = self._seconds_per_step.get(batch)
            if previous is None:
                self._seconds_per_step[batch] = seconds
            elif size == batch:  # a short last step would skew the batch's step time
                self._seconds_per_step[batch] = 0.8 * previous + 0.2 * seconds
            examples += size
            steps += 1
            noise = self.noise.value
            # (Past the last example nothing is left to choose a batch for.)
            if steps % self.adapt_every == 0 and noise is not None and examples < total:
                chosen, reason = choose_batch_size(
                    candidates,
                    throughput=self._throughput,
                    noise_scale=noise,
                    base_batch=self.base_batch_size,
                    examples_left=total - examples,
                    seconds_left=self.budget_seconds - (self.clock() - started),
                    tolerance=self.tolerance,
                )
                if chosen != batch:
                    batch = chosen
                    changes.append(BatchChange(steps, batch, self._set_lr(batch), noise, reason))
                    log.info("step %d: %s", steps, reason)
        return TrainingReport(
            steps=steps,
            examples=examples,
            epochs=examples / n,
            seconds=self.clock() - started,
            stopped_by=stopped_by,
            max_batch_size=top,
            changes=tuple(changes),
            losses=tuple(losses),
            noise_scale=self.noise.value,
        )


def _synchronize(tensor: Any) -> None:
    """Wait for the GPU's queued work when ``tensor`` lives on one (CUDA runs asynchronously)."""
    import torch

    if isinstance(tensor, torch.Tensor) and tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)
