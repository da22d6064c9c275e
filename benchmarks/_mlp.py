"""A PyTorch MLP classifier trained epoch by epoch: the fidelity model of the tuning benchmark.

Tabular frames (numeric and pandas ``category`` columns, a 0/1 label) become one float matrix: numeric
columns standardized on the training rows (a missing value becomes 0 plus a 0/1 "missing" column),
categorical columns one-hot. ``advance(epochs)`` trains up to that many epochs in total and returns the
validation ROC AUC, so a promoted trial pays only for the epochs it adds. Training is exact and repeatable on
the CPU: the weights and every epoch's batch order come from the model's seed.

Its cost spans well over 10x across the search space: width and depth set the work per row, the batch size
the number of optimizer steps per epoch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

#: The search space: six hyperparameters, continuous and log-scaled where their effect is multiplicative.
SPACE: dict[str, tuple[str, float, float]] = {
    "lr": ("log", 1e-4, 3e-2),
    "weight_decay": ("log", 1e-6, 1e-1),
    "hidden": ("int-log", 16, 256),
    "layers": ("int", 1, 3),
    "dropout": ("float", 0.0, 0.5),
    "batch_size": ("int-log", 32, 1024),
}


def optuna_space() -> dict[str, Any]:
    """:data:`SPACE` as Optuna distributions."""
    import optuna

    out: dict[str, Any] = {}
    for name, (kind, low, high) in SPACE.items():
        if kind == "log":
            out[name] = optuna.distributions.FloatDistribution(low, high, log=True)
        elif kind == "float":
            out[name] = optuna.distributions.FloatDistribution(low, high)
        elif kind == "int-log":
            out[name] = optuna.distributions.IntDistribution(int(low), int(high), log=True)
        else:
            out[name] = optuna.distributions.IntDistribution(int(low), int(high))
    return out


def suggest_config(trial: Any) -> dict[str, Any]:
    """One configuration of :data:`SPACE` asked of an Optuna trial."""
    config: dict[str, Any] = {}
    for name, (kind, low, high) in SPACE.items():
        if kind in ("log", "float"):
            config[name] = trial.suggest_float(name, low, high, log=kind == "log")
        else:
            config[name] = trial.suggest_int(name, int(low), int(high), log=kind == "int-log")
    return config


def sample_config(rng: np.random.Generator) -> dict[str, Any]:
    """One configuration drawn uniformly (log-uniformly where the space says so), as random search does."""
    config: dict[str, Any] = {}
    for name, (kind, low, high) in SPACE.items():
        if kind == "log":
            config[name] = float(math.exp(rng.uniform(math.log(low), math.log(high))))
        elif kind == "float":
            config[name] = float(rng.uniform(low, high))
        elif kind == "int-log":
            config[name] = round(math.exp(rng.uniform(math.log(low - 0.5), math.log(high + 0.5))))
            config[name] = min(max(config[name], int(low)), int(high))
        else:
            config[name] = int(rng.integers(int(low), int(high) + 1))
    return config


def matrices(train: Any, *others: Any, label: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(x, y)`` float32 arrays of each frame, scaled and encoded on the training frame."""
    import pandas as pd

    features = [c for c in train.columns if c != label]
    numeric = [c for c in features if not isinstance(train[c].dtype, pd.CategoricalDtype)]
    categorical = [c for c in features if c not in numeric]
    mean = train[numeric].mean()
    std = train[numeric].std().replace(0, 1).fillna(1)
    with_missing = [c for c in numeric if train[c].isna().any()]

    def encode(frame: Any) -> tuple[np.ndarray, np.ndarray]:
        parts = [((frame[numeric] - mean) / std).fillna(0.0).to_numpy(np.float32)]
        parts.append(frame[with_missing].isna().to_numpy(np.float32))
        for column in categorical:
            parts.append(pd.get_dummies(frame[column], dtype=np.float32).to_numpy(np.float32))
        return np.concatenate(parts, axis=1), frame[label].to_numpy(np.float32)

    return [encode(frame) for frame in (train, *others)]


class MLPFidelityModel:
    """One configuration of :data:`SPACE`, trained epoch by epoch with AdamW; scored by validation ROC AUC."""

    def __init__(
        self,
        params: Mapping[str, Any],
        train: tuple[np.ndarray, np.ndarray],
        valid: tuple[np.ndarray, np.ndarray],
        seed: int = 0,
    ) -> None:
        import torch
        from torch import nn

        self.params = dict(params)
        self.seed = seed
        self._x, self._y = torch.from_numpy(train[0]), torch.from_numpy(train[1])
        self._vx, self._vy = torch.from_numpy(valid[0]), valid[1]
        torch.manual_seed(seed)
        width, layers = int(params["hidden"]), int(params["layers"])
        blocks: list[nn.Module] = []
        inputs = self._x.shape[1]
        for _ in range(layers):
            blocks += [nn.Linear(inputs, width), nn.ReLU(), nn.Dropout(float(params["dropout"]))]
            inputs = width
        self.model = nn.Sequential(*blocks, nn.Linear(inputs, 1))
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=float(params["lr"]), weight_decay=float(params["weight_decay"])
        )
        self.epochs = 0

    def advance(self, epochs: int) -> float:
        """Train up to ``epochs`` epochs in total; the validation ROC AUC after the last one."""
        import torch
        from torch import nn

        batch = int(self.params["batch_size"])
        self.model.train()
        while self.epochs < epochs:
            order = torch.from_numpy(
                np.random.default_rng([self.seed, self.epochs]).permutation(len(self._x))
            )
            for start in range(0, len(order), batch):
                rows = order[start : start + batch]
                loss = nn.functional.binary_cross_entropy_with_logits(
                    self.model(self._x[rows]).squeeze(1), self._y[rows]
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
            self.epochs += 1
        return self.score(self._vx, self._vy)

    def score(self, x: Any, y: np.ndarray) -> float:
        """ROC AUC of the current weights on ``(x, y)``; 0.5 when the network diverged (NaN outputs)."""
        import torch
        from sklearn.metrics import roc_auc_score

        self.model.eval()
        with torch.no_grad():
            logits = self.model(torch.as_tensor(x)).squeeze(1).numpy()
        if not np.all(np.isfinite(logits)):
            return 0.5
        return float(roc_auc_score(y, logits))
