"""Small trainers of other model kinds than binary, for the promotion tests: a linear regression and a
nearest-centroid multiclass model, both stored as JSON (so no pickle, and no framework to load them).

They follow the ``Trainer`` protocol, referred to by path: ``"promotion_models:LinearTrainer"``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np


class LinearTrainer:
    """Least squares in one step; ``predict`` is ``features @ weights + bias``, the predicted value."""

    name = "linear-json"
    model_format = "json"

    def init_model(self, data: Any, *, champion: Any | None) -> dict[str, Any]:
        return {}

    def n_steps(self, data: Any, *, warm: bool) -> int:
        return 1

    def fit_step(self, model: dict[str, Any], data: Any, *, step: int) -> dict[str, Any]:
        x = data.features.to_numpy(dtype=float)
        solution = np.linalg.lstsq(np.c_[x, np.ones(len(x))], np.asarray(data.label, dtype=float), rcond=None)
        return {"weights": solution[0][:-1].tolist(), "bias": float(solution[0][-1])}

    def save(self, model: dict[str, Any]) -> bytes:
        return json.dumps(model).encode()

    def load(self, blob: bytes) -> dict[str, Any]:
        return dict(json.loads(blob))

    def predict(self, model: dict[str, Any], features: Any) -> Any:
        return features.to_numpy(dtype=float) @ np.asarray(model["weights"]) + float(model["bias"])


class CentroidTrainer(LinearTrainer):
    """Class centroids; ``predict`` is an ``(n, classes)`` array, a softmax of minus the distances."""

    name = "centroid-json"

    def fit_step(self, model: dict[str, Any], data: Any, *, step: int) -> dict[str, Any]:
        x, y = data.features.to_numpy(dtype=float), np.asarray(data.label)
        return {
            "centroids": [x[y == c].mean(axis=0).tolist() for c in range(int(y.max()) + 1)],
            "sharpness": 2.0,
        }

    def predict(self, model: dict[str, Any], features: Any) -> Any:
        x = features.to_numpy(dtype=float)
        centroids = np.asarray(model["centroids"])
        logits = -np.linalg.norm(x[:, None, :] - centroids[None, :, :], axis=2) * float(model["sharpness"])
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        return exp / exp.sum(axis=1, keepdims=True)
