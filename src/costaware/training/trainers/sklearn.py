"""The scikit-learn trainers: logistic regression by SGD and histogram gradient boosting, saved by skops.

scikit-learn is imported where used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from costaware.adapters.model_formats import DEFAULT_TRUSTED_TYPES, dump_skops, load_skops
from costaware.training.trainers.base import (
    TrainingData,
    categorical_columns,
    check_count,
    check_positive,
    whole_seed,
)

#: What a missing value of a categorical column is encoded as.
MISSING = "__missing__"


class _SklearnTrainer:
    """Shared parts: a Pipeline of a ColumnTransformer ("prep") and a classifier ("clf"), saved by skops."""

    name = "sklearn"
    model_format = "skops"

    def __init__(self, *, categorical: Sequence[str] | None, seed: int, trusted_types: Sequence[str]) -> None:
        self.categorical = None if categorical is None else list(categorical)
        self.seed = whole_seed(seed)
        self.trusted_types = (*DEFAULT_TRUSTED_TYPES, *trusted_types)
        self._cache: tuple[int, int, Any] | None = None

    def _frame(self, features: Any, cats: Sequence[str]) -> Any:
        frame = features.copy()
        for c in frame.columns:
            if c in cats:
                frame[c] = frame[c].astype(object).where(frame[c].notna(), MISSING).astype(str).astype(object)
            else:
                frame[c] = frame[c].astype(float)
        return frame

    def _cats(self, model: Any) -> list[str]:
        return [c for name, _, cols in model.named_steps["prep"].transformers if name == "cat" for c in cols]

    def _transformed(self, model: Any, data: TrainingData) -> Any:
        """The prepared matrix, cached per data set and preprocessor (steps reuse it)."""
        prep = model.named_steps["prep"]
        key = (id(data.features), id(prep))
        if self._cache is None or self._cache[:2] != key:
            self._cache = (*key, prep.transform(self._frame(data.features, self._cats(model))))
        return self._cache[2]

    def save(self, model: Any) -> bytes:
        return dump_skops(model)

    def load(self, blob: bytes) -> Any:
        return load_skops(blob, trusted_types=self.trusted_types)

    def predict(self, model: Any, features: Any) -> Any:
        frame = self._frame(features, self._cats(model))
        return model.predict_proba(frame)[:, 1]


class SGDTrainer(_SklearnTrainer):
    """Logistic regression by SGD (``partial_fit``); one step is one shuffled pass (epoch) over the data.

    Full retrain: fits the preprocessing (one-hot for categorical columns, median fill and scaling for
    numeric ones) and trains ``epochs`` passes. Warm start: keeps the champion's preprocessing and
    continues its SGD state for ``warm_epochs`` passes over the new data.

    Args:
        epochs: Passes over the data in a full retrain.
        warm_epochs: Passes over the new data in a warm start.
        batch_size: Rows per ``partial_fit`` call.
        alpha: L2 regularization strength.
        categorical: Columns to one-hot encode (default: the non-numeric ones).
        seed: Seed of the shuffles (each step uses ``(seed, step)``).
        trusted_types: Extra types skops may load.
    """

    name = "sklearn-sgd"

    def __init__(
        self,
        *,
        epochs: int = 5,
        warm_epochs: int = 5,
        batch_size: int = 1000,
        alpha: float = 1e-4,
        categorical: Sequence[str] | None = None,
        seed: int = 0,
        trusted_types: Sequence[str] = (),
    ) -> None:
        super().__init__(categorical=categorical, seed=seed, trusted_types=trusted_types)
        check_count(epochs, "epochs")
        check_count(warm_epochs, "warm_epochs")
        check_count(batch_size, "batch_size")
        check_positive(alpha, "alpha")
        self.epochs, self.warm_epochs, self.batch_size, self.alpha = (
            epochs,
            warm_epochs,
            batch_size,
            float(alpha),
        )

    def init_model(self, data: TrainingData, *, champion: Any | None) -> Any:
        if champion is not None:
            return champion
        from sklearn.compose import ColumnTransformer
        from sklearn.impute import SimpleImputer
        from sklearn.linear_model import SGDClassifier
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import OneHotEncoder, StandardScaler

        cats = categorical_columns(data.features, self.categorical)
        nums = [c for c in data.features.columns if c not in cats]
        prep = ColumnTransformer(
            [
                ("cat", OneHotEncoder(handle_unknown="ignore"), cats),
                (
                    "num",
                    Pipeline([("fill", SimpleImputer(strategy="median")), ("scale", StandardScaler())]),
                    nums,
                ),
            ]
        )
        prep.fit(self._frame(data.features, cats))
        clf = SGDClassifier(loss="log_loss", alpha=self.alpha, random_state=self.seed)
        return Pipeline([("prep", prep), ("clf", clf)])

    def n_steps(self, data: TrainingData, *, warm: bool) -> int:
        return self.warm_epochs if warm else self.epochs

    def fit_step(self, model: Any, data: TrainingData, *, step: int) -> Any:
        import numpy as np

        matrix = self._transformed(model, data)
        labels = np.asarray(data.label)
        order = np.random.default_rng([self.seed, step]).permutation(len(labels))
        clf = model.named_steps["clf"]
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            clf.partial_fit(matrix[rows], labels[rows], classes=np.array([0, 1]))
        return model


class HistGradientBoostingTrainer(_SklearnTrainer):
    """Histogram gradient boosting with ``warm_start``; one step adds ``trees_per_step`` trees.

    Full retrain: ordinal-encodes categorical columns (native categorical splits) and grows ``max_iter``
    trees. Warm start: adds ``warm_iter`` trees fitted on the new data to the champion's ensemble, only when
    the new data holds every category the champion learned (``incompatibility``).

    Args:
        max_iter: Trees in a full retrain (rounded up to a multiple of ``trees_per_step``).
        warm_iter: Trees added by a warm start (rounded up likewise).
        trees_per_step: Trees per step (checkpoint granularity).
        learning_rate: Shrinkage.
        max_leaf_nodes: Leaves per tree.
        categorical: Columns treated as categorical (default: the non-numeric ones).
        seed: Random state.
        trusted_types: Extra types skops may load.
    """

    name = "sklearn-hgb"

    def __init__(
        self,
        *,
        max_iter: int = 100,
        warm_iter: int = 10,
        trees_per_step: int = 10,
        learning_rate: float = 0.1,
        max_leaf_nodes: int = 31,
        categorical: Sequence[str] | None = None,
        seed: int = 0,
        trusted_types: Sequence[str] = (),
    ) -> None:
        super().__init__(categorical=categorical, seed=seed, trusted_types=trusted_types)
        for value, name in (
            (max_iter, "max_iter"),
            (warm_iter, "warm_iter"),
            (trees_per_step, "trees_per_step"),
            (max_leaf_nodes, "max_leaf_nodes"),
        ):
            check_count(value, name)
        check_positive(learning_rate, "learning_rate")
        self.max_iter, self.warm_iter, self.trees_per_step = max_iter, warm_iter, trees_per_step
        self.learning_rate, self.max_leaf_nodes = float(learning_rate), max_leaf_nodes

    def init_model(self, data: TrainingData, *, champion: Any | None) -> Any:
        if champion is not None:
            return champion
        import numpy as np
        from sklearn.compose import ColumnTransformer
        from sklearn.ensemble import HistGradientBoostingClassifier
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import OrdinalEncoder

        cats = categorical_columns(data.features, self.categorical)
        nums = [c for c in data.features.columns if c not in cats]
        prep = ColumnTransformer(
            [
                ("cat", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=np.nan), cats),
                ("num", "passthrough", nums),
            ]
        )
        prep.fit(self._frame(data.features, cats))
        clf = HistGradientBoostingClassifier(
            max_iter=self.trees_per_step,
            learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes,
            categorical_features=[i < len(cats) for i in range(len(cats) + len(nums))] if cats else None,
            early_stopping=False,
            warm_start=True,
            random_state=self.seed,
        )
        return Pipeline([("prep", prep), ("clf", clf)])

    def n_steps(self, data: TrainingData, *, warm: bool) -> int:
        return math.ceil((self.warm_iter if warm else self.max_iter) / self.trees_per_step)

    def incompatibility(self, champion: Any, data: TrainingData) -> str:
        """Why ``champion`` cannot be continued on ``data``: categories it learned that ``data`` lacks.

        Each ``fit`` of scikit-learn's boosting takes a categorical column's categories from that call's
        data, and every tree, the champion's too, reads its splits through them: a category the batch lacks
        counts as missing, and the categories after it shift onto their neighbours' splits. Empty when
        ``data`` holds every category of the champion's encoder (those of its full retrain).
        """
        cats = self._cats(champion)
        if not cats:
            return ""
        encoder = champion.named_steps["prep"].named_transformers_["cat"]
        frame = self._frame(data.features[cats], cats)
        lacking = []
        for column, known in zip(cats, encoder.categories_, strict=True):
            seen = set(frame[column].unique())
            gone = ["(missing)" if v == MISSING else repr(v) for v in known if v not in seen]
            if gone:
                more = f" and {len(gone) - 5} more" if len(gone) > 5 else ""
                lacking.append(f"{column!r}: {', '.join(gone[:5])}{more}")
        if not lacking:
            return ""
        return (
            f"the new data lacks categories it learned ({'; '.join(lacking)}), and {self.name} would "
            "forget them in a warm start"
        )

    def fit_step(self, model: Any, data: TrainingData, *, step: int) -> Any:
        import numpy as np

        clf = model.named_steps["clf"]
        clf.warm_start = True
        clf.max_iter = getattr(clf, "n_iter_", 0) + self.trees_per_step
        clf.fit(self._transformed(model, data), np.asarray(data.label))
        return model
