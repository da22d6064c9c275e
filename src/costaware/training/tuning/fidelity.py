"""What a trial trains: the :class:`FidelityModel` protocol and a ready-made gradient-boosting model."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from costaware.core.errors import ConfigurationError


class FidelityModel(Protocol):
    """A model a trial trains in steps: ``advance(r)`` trains up to resource ``r`` and returns its score."""

    def advance(self, resource: int) -> float: ...


TrainerFactory = Callable[..., FidelityModel]


class BoostingFidelityModel:
    """scikit-learn ``HistGradientBoostingClassifier`` trained round by round; scored by validation ROC AUC.

    ``advance(n)`` continues boosting (warm start) up to ``n`` rounds in total, so a promoted trial pays only
    for the rounds it adds. Columns of pandas ``category`` dtype are treated as categorical.

    Args:
        params: ``HistGradientBoostingClassifier`` parameters (``learning_rate``, ``max_leaf_nodes``, ...).
        train: Training frame with the features and the label.
        valid: Validation frame (same columns).
        label: Name of the 0/1 label column.
        random_state: Seed of the booster.
    """

    def __init__(
        self, params: Mapping[str, Any], train: Any, valid: Any, label: str, random_state: int = 0
    ) -> None:
        from sklearn.ensemble import HistGradientBoostingClassifier

        features = [c for c in train.columns if c != label]
        self._x, self._y = train[features], train[label]
        self._vx, self._vy = valid[features], valid[label]
        self.model = HistGradientBoostingClassifier(
            **dict(params), early_stopping=False, warm_start=True, random_state=random_state
        )

    def advance(self, resource: int) -> float:
        from sklearn.metrics import roc_auc_score

        if resource < 1:
            raise ConfigurationError(f"boosting rounds must be >= 1, got {resource}")
        self.model.set_params(max_iter=int(resource))
        self.model.fit(self._x, self._y)
        return float(roc_auc_score(self._vy, self.model.predict_proba(self._vx)[:, 1]))


def boosting_trainer(
    params: Mapping[str, Any], *, train_path: str, valid_path: str, label: str, random_state: int = 0
) -> BoostingFidelityModel:
    """A :class:`BoostingFidelityModel` over two Parquet files; string columns become categorical."""
    import pandas as pd

    train, valid = pd.read_parquet(train_path), pd.read_parquet(valid_path)
    for column in train.columns:
        if column != label and not pd.api.types.is_numeric_dtype(train[column]):
            categories = sorted(set(train[column].dropna()) | set(valid[column].dropna()))
            train[column] = pd.Categorical(train[column], categories=categories)
            valid[column] = pd.Categorical(valid[column], categories=categories)
    return BoostingFidelityModel(params, train, valid, label, random_state)


def is_finite(value: float | None) -> bool:
    """Whether a trial value is a real number (not None, NaN or infinite)."""
    return value is not None and math.isfinite(value)
