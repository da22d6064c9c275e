from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch

from costaware.core.errors import ConfigurationError
from costaware.training.batch_size import (
    AdaptiveBatchTrainer,
    BatchMemoryExceeded,
    GradientNoiseScale,
    choose_batch_size,
    efficiency,
    is_out_of_memory,
    probe_max_batch_size,
    scale_learning_rate,
)


def _data(n: int = 12000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=g)
    w = torch.randn(32, generator=g)
    y = ((x @ w + 2.0 * torch.randn(n, generator=g)) > 0).float()
    return x, y


def _trainer(**kwargs: Any) -> AdaptiveBatchTrainer:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    args: dict[str, Any] = {"base_batch_size": 16, "base_lr": 0.05, "lr_rule": "sqrt", "budget_seconds": 30.0}
    args.update(kwargs)
    return AdaptiveBatchTrainer(
        model,
        optimizer,
        lambda out, t: torch.nn.functional.binary_cross_entropy_with_logits(out.squeeze(-1), t),
        **args,
    )


def test_probe_finds_the_largest_batch_within_the_measured_memory() -> None:
    x, y = _data()
    trainer = _trainer(memory_limit_bytes=600_000)
    result = trainer.probe(x, y)
    best = result.max_batch_size
    assert (
        trainer.step_bytes(x[:best], y[:best]) <= 600_000 < trainer.step_bytes(x[: best + 1], y[: best + 1])
    )
    sizes = [b for b, _ in result.attempts]
    assert sizes[:4] == [1, 2, 4, 8]  # doubling first ...
    first_oom = next(b for b, fitted in result.attempts if not fitted)
    assert first_oom > best and first_oom == 2 * max(b for b in sizes if b < first_oom and b & (b - 1) == 0)
    assert any(not fitted for b, fitted in result.attempts if b != first_oom)  # ... then backing off
    assert all(result.step_seconds[b] >= 0 for b, fitted in result.attempts if fitted)
    # Memory grows with the batch: activations are measured, not assumed.
    assert trainer.step_bytes(x[:64], y[:64]) < trainer.step_bytes(x[:512], y[:512])


def test_probe_stops_at_the_data_and_the_cap_and_reports_what_never_fits() -> None:
    x, y = _data(300)
    assert _trainer(max_batch_size=256).probe(x, y).max_batch_size == 256
    assert _trainer(max_batch_size=1024).probe(x, y).max_batch_size == 300
    with pytest.raises(ConfigurationError, match="a batch of 1 does not fit in memory"):
        _trainer(memory_limit_bytes=1000).probe(x, y)


def test_probe_backs_off_only_on_out_of_memory() -> None:
    def shape_bug(batch: int) -> float:
        torch.nn.Linear(3, 1)(torch.randn(batch, 4))  # a real error that is not about memory
        return 0.0

    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        probe_max_batch_size(shape_bug, start=1, limit=64)
    with pytest.raises(ConfigurationError, match="need 1 <= start <= limit"):
        probe_max_batch_size(lambda b: 0.0, start=8, limit=4)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (
            RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
            True,
        ),
        (BatchMemoryExceeded("a batch of 64 needs 9000 bytes"), True),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
        (ValueError("out of memory"), False),
    ],
)
def test_out_of_memory_errors_are_recognised(error: BaseException, expected: bool) -> None:
    assert is_out_of_memory(error) is expected


@pytest.mark.parametrize(
    ("rule", "batch", "lr"),
    [
        ("linear", 256, 0.8),
        ("sqrt", 256, 0.2),
        ("linear", 16, 0.05),
        ("sqrt", 4, 0.025),
        ("linear", 8, 0.025),
    ],
)
def test_learning_rate_scales_with_the_batch(rule: str, batch: int, lr: float) -> None:
    assert scale_learning_rate(0.05, 16, batch, rule) == pytest.approx(lr)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.05, 16, 32, "cubic"), "lr_rule must be one of linear, sqrt, got 'cubic'"),
        ((0.05, 0, 32, "linear"), "batch sizes must be >= 1, got base 0 and 32"),
        ((-1.0, 16, 32, "linear"), "base learning rate must be > 0, got -1.0"),
    ],
)
def test_bad_scaling_arguments(args: tuple[float, int, int, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        scale_learning_rate(*args)


def test_noise_scale_matches_the_exact_value_of_a_linear_model() -> None:
    """Least squares, where per-example gradients are exact: B_noise = tr(Sigma) / |G|^2."""
    g = torch.Generator().manual_seed(1)
    n = 4000
    x = torch.randn(n, 10, generator=g)
    y = x @ torch.randn(10, generator=g) + 0.5 * torch.randn(n, generator=g)
    w = torch.zeros(10, requires_grad=True)
    with torch.no_grad():
        per_example = (x @ w - y)[:, None] * x  # gradient of (x.w - y)^2 / 2 for each example
        mean = per_example.mean(0)
        exact = float(((per_example - mean) ** 2).sum(1).mean() / (mean @ mean))

    estimate = GradientNoiseScale(smoothing=0.99)
    for _ in range(400):
        index = torch.randint(0, n, (64,), generator=g)

        def sq_norm(rows: torch.Tensor) -> float:
            w.grad = None
            (0.5 * ((x[rows] @ w - y[rows]) ** 2).mean()).backward()
            assert w.grad is not None
            return float(w.grad @ w.grad)

        small = (sq_norm(index[:32]) + sq_norm(index[32:])) / 2
        estimate.update(small, 32, sq_norm(index), 64)
    assert estimate.value is not None
    assert estimate.value == pytest.approx(exact, rel=0.3)
    with pytest.raises(ConfigurationError, match=r"the big batch \(8\) must be larger than the small \(16\)"):
        estimate.update(1.0, 16, 1.0, 8)


def test_batch_choice_trades_efficiency_for_speed_only_when_time_is_short() -> None:
    def throughput(batch: int) -> float:
        return batch / (0.01 + 0.0001 * batch)  # a fixed cost per step: bigger batches run more examples/s

    options = [16, 32, 64, 128, 256, 512]
    plenty, why = choose_batch_size(
        options,
        throughput=throughput,
        noise_scale=1000,
        base_batch=16,
        examples_left=10_000,
        seconds_left=3600,
    )
    assert plenty == 64 and "bounded by the data left" in why  # eff(64) = 0.955: within 5 % of batch 16
    assert efficiency(64, 16, 1000) == pytest.approx(1016 / 1064)
    short, why = choose_batch_size(
        options, throughput=throughput, noise_scale=1000, base_batch=16, examples_left=1e9, seconds_left=10
    )
    progress = {b: 10 * throughput(b) * efficiency(b, 16, 1000) for b in options}
    assert short == max(b for b in options if progress[b] >= 0.95 * max(progress.values()))
    assert short >= 256 and "bounded by the 10.0 s left" in why
    noisy, _ = choose_batch_size(
        options,
        throughput=throughput,
        noise_scale=1e6,
        base_batch=16,
        examples_left=10_000,
        seconds_left=3600,
    )
    assert noisy == 512  # very noisy gradients: a large batch loses nothing per example


def _ticking_clock(step: float = 0.001) -> Any:
    """A clock that advances ``step`` seconds a reading: step times, and so the batch choice, do not depend on
    how busy the machine is (with the wall clock this test failed now and then under load)."""
    readings = itertools.count()
    return lambda: next(readings) * step


def test_training_grows_the_batch_with_the_noise_scale_and_keeps_the_lr_rule() -> None:
    x, y = _data()
    trainer = _trainer(lr_rule="linear", adapt_every=10, memory_limit_bytes=2_000_000, clock=_ticking_clock())
    report = trainer.fit(x, y, epochs=2, seed=3)
    assert report.stopped_by == "epochs" and report.epochs == 2  # the last step takes what is left
    assert sum(report.losses[-20:]) / 20 < 0.75 * sum(report.losses[:20]) / 20
    assert len(report.changes) >= 2 and max(c.batch_size for c in report.changes) > 16
    for change in report.changes:
        assert change.learning_rate == pytest.approx(
            scale_learning_rate(0.05, 16, change.batch_size, "linear")
        )
        assert change.batch_size <= report.max_batch_size
    assert all(c.noise_scale is not None and c.noise_scale > 0 for c in report.changes[1:])
    assert all(c.reason.startswith(f"batch {c.batch_size}: noise scale") for c in report.changes[1:])


def test_a_last_step_past_the_epochs_on_an_adaptation_step_ends_training(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """16 rows a step over 100: the 7th step ends the epoch (at 112 before the last step was trimmed to the 4
    rows left), and the 7th is when the batch is re-chosen. That choice, with -12 examples left, raised
    ValueError (no batch within 5 % of a negative best)."""
    from costaware.training.batch_size import trainer as trainer_module

    asked: list[float] = []
    real_choice = trainer_module.choose_batch_size

    def recording(*args: Any, **kwargs: Any) -> tuple[int, str]:
        asked.append(kwargs["examples_left"])
        return real_choice(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "choose_batch_size", recording)
    x, y = _data(n=100, seed=1)
    trainer = _trainer(adapt_every=7, max_batch_size=16, clock=_ticking_clock())
    report = trainer.fit(x, y, epochs=1, seed=1)
    assert (report.steps, report.examples, report.epochs, report.stopped_by) == (7, 100, 1.0, "epochs")
    assert trainer.noise.value is not None  # a choice would have had a noise scale to run on
    assert asked == []  # nothing was left to choose a batch for
    late, why = choose_batch_size(
        [2, 4, 8], throughput=lambda b: 100.0 * b, noise_scale=10, base_batch=4, examples_left=-12,
        seconds_left=5,
    )  # fmt: skip
    assert late == 8 and "bounded by the data left" in why


class TickingClock:
    """A clock that moves 1 ms at each reading (and what a test adds to ``now``): the same on any machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_training_stops_within_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = _data()
    clock = TickingClock()
    trainer = _trainer(budget_seconds=3.0, adapt_every=10, clock=clock)
    step = trainer._step

    def step_of_100_ms(*args: Any) -> Any:
        clock.now += 0.1
        return step(*args)

    monkeypatch.setattr(trainer, "_step", step_of_100_ms)
    report = trainer.fit(x, y, epochs=1000)
    assert report.stopped_by == "budget" and report.steps > 20
    # The loop never starts a step it expects to overrun. Its estimate is a moving average that starts at the
    # probe's (a few ms here) and has learned the 100 ms long before the budget runs out, so past the budget
    # are only the clock's readings after the last step (1 ms each), never a step.
    assert report.seconds <= 3.0 + 0.005
    assert 0 < report.epochs < 1000 and not math.isnan(report.losses[-1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget_seconds": 0}, "budget_seconds must be > 0, got 0"),
        ({"max_batch_size": 8}, r"max_batch_size \(8\) must be >= base_batch_size \(16\)"),
        ({"memory_limit_bytes": -5}, "memory_limit_bytes must be > 0, got -5"),
        ({"adapt_every": 0}, "adapt_every must be >= 1, got 0"),
        ({"lr_rule": "log"}, "lr_rule must be one of linear, sqrt, got 'log'"),
    ],
)
def test_bad_trainer_arguments(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigurationError, match=message):
        _trainer(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_batch_size": "32"}, "base_batch_size must be a whole number, got '32'"),
        ({"budget_seconds": "30"}, "budget_seconds must be a number, got '30'"),
        ({"adapt_every": 2.5}, "adapt_every must be a whole number, got 2.5"),
    ],
)
def test_settings_of_the_wrong_type_are_named(kwargs: dict[str, Any], message: str) -> None:
    # A bare TypeError ('<' between str and int) before.
    with pytest.raises(ConfigurationError, match=message):
        _trainer(**kwargs)


def test_numpy_numbers_are_numbers() -> None:
    import numpy as np

    assert _trainer(base_batch_size=np.int64(16), budget_seconds=np.float64(30.0)).base_batch_size == 16


def test_the_optimizer_state_its_first_step_makes_is_counted_before_it() -> None:
    # Probed before any step, Adam's two moments were not there to count: 217,608 B measured before the
    # first step, 287,264 B after it; the batch chosen ran out of memory once training began.
    x, y = _data()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    trainer = AdaptiveBatchTrainer(
        model,
        optimizer,
        lambda out, t: torch.nn.functional.binary_cross_entropy_with_logits(out.squeeze(-1), t),
        base_batch_size=16,
        base_lr=0.01,
        budget_seconds=30.0,
    )
    before = trainer.step_bytes(x[:64], y[:64])
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x[:64]).squeeze(-1), y[:64])
    loss.backward()
    optimizer.step()  # the real state now exists
    optimizer.zero_grad(set_to_none=True)
    after = trainer.step_bytes(x[:64], y[:64])
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    assert after - 2 * parameters <= before <= after  # counted ahead (its step counters aside)
