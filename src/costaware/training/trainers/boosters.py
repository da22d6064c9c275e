"""The gradient boosting trainers on native boosters: XGBoost and LightGBM.

Each checks at construction that its SDK is installed (the ``boosting`` extra) and imports it where used.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from costaware.adapters.model_formats import dump_lightgbm, dump_xgboost, load_lightgbm, load_xgboost, require
from costaware.core.errors import ConfigurationError
from costaware.training.trainers.base import TrainingData, categorical_columns, check_count


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
            check_count(value, label)
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
