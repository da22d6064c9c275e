"""The trainer protocol and the built-in trainers (scikit-learn SGD and HGB, XGBoost, LightGBM).

A trainer trains in steps so the runner can checkpoint between them and resume after a preemption:

* ``init_model(data, champion=...)`` — the model to train: a fresh one (full retrain, ``champion`` is
  None) or the champion made ready to continue (warm start);
* ``n_steps(data, warm=...)`` — how many steps this training takes;
* ``fit_step(model, data, step=...)`` — train one step (``step`` counts from 0) and return the model;
* ``save(model) -> bytes`` / ``load(bytes) -> model`` — the model in a format that loads without pickle.
  Checkpoints use them too: resuming is ``load`` of the checkpoint, then the remaining ``fit_step`` calls,
  so ``fit_step`` must depend only on its arguments (seed randomness from ``step``);
* ``predict(model, features) -> scores`` — probability of the positive class, for evaluation.

Any class with these members (and ``name``, ``model_format`` attributes) plugs in by its path,
``"pkg.mod:Class"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from costaware.adapters.model_store import (
    DEFAULT_TRUSTED_TYPES,
    dump_lightgbm,
    dump_skops,
    dump_xgboost,
    load_lightgbm,
    load_skops,
    load_xgboost,
    require,
)
from costaware.core.errors import ConfigurationError
from costaware.importing import import_object

MISSING = "__missing__"


@dataclass(frozen=True, slots=True)
class TrainingData:
    """Features (a pandas DataFrame, columns in model order) and a 0/1 label (a numpy array)."""

    features: Any
    label: Any

    @property
    def rows(self) -> int:
        return len(self.features)


@runtime_checkable
class Trainer(Protocol):
    """What a trainer provides; see the module docstring for the contract."""

    name: str
    model_format: str

    def init_model(self, data: TrainingData, *, champion: Any | None) -> Any: ...

    def n_steps(self, data: TrainingData, *, warm: bool) -> int: ...

    def fit_step(self, model: Any, data: TrainingData, *, step: int) -> Any: ...

    def save(self, model: Any) -> bytes: ...

    def load(self, blob: bytes) -> Any: ...

    def predict(self, model: Any, features: Any) -> Any: ...


def categorical_columns(features: Any, explicit: Sequence[str] | None) -> list[str]:
    """``explicit`` if given (each must be a column), else the columns that are not numeric."""
    import pandas as pd

    if explicit is not None:
        unknown = [c for c in explicit if c not in features.columns]
        if unknown:
            raise ConfigurationError(
                f"categorical columns {unknown} are not features ({list(features.columns)})"
            )
        return list(explicit)
    return [
        c
        for c in features.columns
        if not pd.api.types.is_numeric_dtype(features[c]) or pd.api.types.is_bool_dtype(features[c])
    ]


def _positive(value: float, name: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{name} must be a number > 0, got {value!r}")


def _count(value: int, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be an integer >= 1, got {value!r}")


# -- scikit-learn --------------------------------------------------------------------------------------------


class _SklearnTrainer:
    """Shared parts: a Pipeline of a ColumnTransformer ("prep") and a classifier ("clf"), saved by skops."""

    name = "sklearn"
    model_format = "skops"

    def __init__(self, *, categorical: Sequence[str] | None, seed: int, trusted_types: Sequence[str]) -> None:
        self.categorical = None if categorical is None else list(categorical)
        self.seed = int(seed)
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
        _count(epochs, "epochs")
        _count(warm_epochs, "warm_epochs")
        _count(batch_size, "batch_size")
        _positive(alpha, "alpha")
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
    trees. Warm start: adds ``warm_iter`` trees fitted on the new data to the champion's ensemble.

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
            _count(value, name)
        _positive(learning_rate, "learning_rate")
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

    def fit_step(self, model: Any, data: TrainingData, *, step: int) -> Any:
        import numpy as np

        clf = model.named_steps["clf"]
        clf.warm_start = True
        clf.max_iter = getattr(clf, "n_iter_", 0) + self.trees_per_step
        clf.fit(self._transformed(model, data), np.asarray(data.label))
        return model


# -- XGBoost and LightGBM -----------------------------------------------------------------------------------


@dataclass
class BoosterModel:
    """A native booster (None before the first step) and the category lists its codes refer to."""

    booster: Any
    columns: list[str]
    vocab: dict[str, list[str]]


def _vocab(features: Any, cats: Sequence[str]) -> dict[str, list[str]]:
    return {c: sorted({str(v) for v in features[c].dropna().unique()}) for c in cats}


def encode_frame(features: Any, columns: Sequence[str], vocab: Mapping[str, Sequence[str]]) -> Any:
    """Features in model order; categorical columns as pandas categoricals with the model's categories."""
    import pandas as pd

    missing = [c for c in columns if c not in features.columns]
    if missing:
        raise ConfigurationError(f"features {missing} that the model was trained on are not in the data")
    out = pd.DataFrame(index=features.index)
    for c in columns:
        if c in vocab:
            out[c] = pd.Categorical(
                features[c]
                .astype(object)
                .where(features[c].notna(), None)
                .map(lambda v: None if v is None else str(v)),
                categories=list(vocab[c]),
            )
        else:
            out[c] = features[c].astype(float)
    return out


class _BoosterTrainer:
    """Shared by the XGBoost and LightGBM trainers: rounds per step, categorical columns, parameters."""

    name = "booster"
    model_format = "native"
    sdk = ""  # the module the subclass needs, checked at construction
    default_params: Mapping[str, Any] = {}

    def __init__(
        self,
        *,
        num_boost_round: int = 100,
        warm_rounds: int = 10,
        rounds_per_step: int = 10,
        categorical: Sequence[str] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        require(self.sdk, self.sdk)
        for value, label in (
            (num_boost_round, "num_boost_round"),
            (warm_rounds, "warm_rounds"),
            (rounds_per_step, "rounds_per_step"),
        ):
            _count(value, label)
        self.rounds, self.warm_rounds, self.rounds_per_step = num_boost_round, warm_rounds, rounds_per_step
        self.categorical = None if categorical is None else list(categorical)
        self.params = {**self.default_params, **(params or {})}
        self._cache: tuple[int, Any] | None = None

    def init_model(self, data: TrainingData, *, champion: Any | None) -> Any:
        if champion is not None:
            return champion
        cats = categorical_columns(data.features, self.categorical)
        return BoosterModel(None, list(data.features.columns), _vocab(data.features, cats))

    def n_steps(self, data: TrainingData, *, warm: bool) -> int:
        return math.ceil((self.warm_rounds if warm else self.rounds) / self.rounds_per_step)


class XGBoostTrainer(_BoosterTrainer):
    """XGBoost (``xgb_model=``); one step adds ``rounds_per_step`` boosting rounds; saved as UBJSON.

    Args:
        num_boost_round: Rounds in a full retrain (rounded up to a multiple of ``rounds_per_step``).
        warm_rounds: Rounds a warm start adds on the new data.
        rounds_per_step: Rounds per step.
        categorical: Categorical columns (default: the non-numeric ones); their categories are stored in the
            model's attributes.
        params: XGBoost parameters (default: binary logistic, hist trees, eta 0.1, depth 6).
    """

    name = "xgboost"
    model_format = "xgboost-ubj"
    sdk = "xgboost"
    default_params: Mapping[str, Any] = {
        "objective": "binary:logistic",
        "tree_method": "hist",
        "eta": 0.1,
        "max_depth": 6,
        "seed": 0,
        "nthread": 1,
    }

    def fit_step(self, model: Any, data: TrainingData, *, step: int) -> Any:
        import xgboost as xgb

        if self._cache is None or self._cache[0] != id(data.features):
            frame = encode_frame(data.features, model.columns, model.vocab)
            self._cache = (id(data.features), xgb.DMatrix(frame, label=data.label, enable_categorical=True))
        model.booster = xgb.train(
            self.params, self._cache[1], num_boost_round=self.rounds_per_step, xgb_model=model.booster
        )
        model.booster.set_attr(
            costaware_columns=json.dumps(model.columns), costaware_vocab=json.dumps(model.vocab)
        )
        return model

    def save(self, model: Any) -> bytes:
        return dump_xgboost(model.booster)

    def load(self, blob: bytes) -> Any:
        booster = load_xgboost(blob)
        columns, vocab = booster.attr("costaware_columns"), booster.attr("costaware_vocab")
        if columns is None or vocab is None:
            raise ConfigurationError(
                "XGBoost model has no costaware_columns/costaware_vocab attributes: "
                "it was not saved by the xgboost trainer; retrain it in full"
            )
        return BoosterModel(booster, json.loads(columns), json.loads(vocab))

    def predict(self, model: Any, features: Any) -> Any:
        import xgboost as xgb

        frame = encode_frame(features, model.columns, model.vocab)
        return model.booster.predict(xgb.DMatrix(frame, enable_categorical=True))


class LightGBMTrainer(_BoosterTrainer):
    """LightGBM (``init_model=``); one step adds ``rounds_per_step`` rounds; saved in LightGBM's text format.

    Args:
        num_boost_round: Rounds in a full retrain (rounded up to a multiple of ``rounds_per_step``).
        warm_rounds: Rounds a warm start adds on the new data.
        rounds_per_step: Rounds per step.
        categorical: Categorical columns (default: the non-numeric ones); LightGBM stores their categories.
        params: LightGBM parameters (default: binary objective, learning rate 0.1, 31 leaves).
    """

    name = "lightgbm"
    model_format = "lightgbm-txt"
    sdk = "lightgbm"
    default_params: Mapping[str, Any] = {
        "objective": "binary",
        "learning_rate": 0.1,
        "num_leaves": 31,
        "seed": 0,
        "verbosity": -1,
        "num_threads": 1,
        "deterministic": True,
    }

    def fit_step(self, model: Any, data: TrainingData, *, step: int) -> Any:
        import lightgbm as lgb

        frame = encode_frame(data.features, model.columns, model.vocab)
        dataset = lgb.Dataset(frame, label=data.label, free_raw_data=False, params={"verbosity": -1})
        model.booster = lgb.train(
            self.params,
            dataset,
            num_boost_round=self.rounds_per_step,
            init_model=model.booster,
            keep_training_booster=True,
        )
        return model

    def save(self, model: Any) -> bytes:
        return dump_lightgbm(model.booster)

    def load(self, blob: bytes) -> Any:
        booster = load_lightgbm(blob)
        columns = list(booster.feature_name())
        cats = [c for c, t in zip(columns, _lgb_categorical_flags(booster), strict=True) if t]
        vocab = {
            c: [str(v) for v in values]
            for c, values in zip(cats, booster.pandas_categorical or [], strict=True)
        }
        return BoosterModel(booster, columns, vocab)

    def predict(self, model: Any, features: Any) -> Any:
        return model.booster.predict(encode_frame(features, model.columns, model.vocab))


def _lgb_categorical_flags(booster: Any) -> list[bool]:
    """Which features LightGBM treats as categorical (their feature info lists category values)."""
    infos = booster.dump_model(num_iteration=0).get("feature_infos", {})
    return [bool(infos.get(name, {}).get("values")) for name in booster.feature_name()]


# -- lookup --------------------------------------------------------------------------------------------------

BUILT_IN: dict[str, str] = {
    "sklearn-sgd": "costaware.training.trainers:SGDTrainer",
    "sklearn-hgb": "costaware.training.trainers:HistGradientBoostingTrainer",
    "xgboost": "costaware.training.trainers:XGBoostTrainer",
    "lightgbm": "costaware.training.trainers:LightGBMTrainer",
}


def resolve_trainer(trainer: str | Trainer, params: Mapping[str, Any] | None = None) -> Trainer:
    """A trainer from a built-in name, a ``"pkg.mod:Class"`` path (built with ``params``), or an instance."""
    if not isinstance(trainer, str):
        if params:
            raise ConfigurationError("trainer_params only apply when the trainer is given by name")
        if not isinstance(trainer, Trainer):
            raise ConfigurationError(f"trainer {trainer!r} lacks the Trainer protocol's members")
        return trainer
    path = BUILT_IN.get(trainer, trainer)
    if ":" not in path and "." not in path:
        raise ConfigurationError(
            f"unknown trainer {trainer!r}: use one of {', '.join(BUILT_IN)} "
            "or a path like 'pkg.mod:MyTrainer'"
        )
    cls = import_object(path, what="trainer")
    try:
        built = cls(**dict(params or {}))
    except TypeError as e:
        raise ConfigurationError(f"trainer {trainer!r} does not take these trainer_params: {e}") from e
    if not isinstance(built, Trainer):
        raise ConfigurationError(
            f"{path} lacks the Trainer protocol's members (name, model_format, init_model, n_steps, "
            f"fit_step, "
            f"save, load, predict)"
        )
    return built


def trainer_path(trainer: Trainer) -> str:
    """How the model store names a trainer: its built-in name, else ``module:Class``."""
    path = f"{type(trainer).__module__}:{type(trainer).__qualname__}"
    return next((name for name, p in BUILT_IN.items() if p == path), path)


def stored_trainer(name: str) -> str:
    """A trainer name read from the model store, as :func:`resolve_trainer` takes it.

    Versions stored before ``module:Class`` carry the dotted form; they resolve without a warning.
    """
    if name in BUILT_IN or ":" in name:
        return name
    module, _, attr = name.rpartition(".")
    return f"{module}:{attr}" if module else name


def same_trainer(a: str, b: str) -> bool:
    """Whether two stored trainer names name the same trainer (dotted and ``module:Class`` alike)."""
    return stored_trainer(a) == stored_trainer(b)
