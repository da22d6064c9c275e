"""A real SGD trainer that takes its time per step and logs each finished step (for preemption tests)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from costaware.training.trainers import SGDTrainer, TrainingData


class SlowSGDTrainer(SGDTrainer):
    def __init__(self, *, step_seconds: float = 0.0, progress_file: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_seconds = step_seconds
        self.progress_file = progress_file

    def fit_step(self, model: Any, data: TrainingData, *, step: int) -> Any:
        model = super().fit_step(model, data, step=step)
        time.sleep(self.step_seconds)
        if self.progress_file:
            with Path(self.progress_file).open("a") as f:
                f.write(f"{step + 1} {time.time():.3f}\n")
        return model
