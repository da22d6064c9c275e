"""What every trainer shares: the :class:`Trainer` protocol, :class:`TrainingData` and argument checks.

The contract a trainer keeps is in :mod:`costaware.training.trainers`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from costaware.core.errors import ConfigurationError


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
        for c in features.columns:
            if c in explicit or pd.api.types.is_numeric_dtype(features[c]):
                continue
            try:
                features[c].astype(float)
            except (TypeError, ValueError) as e:
                raise ConfigurationError(
                    f"feature column {c!r} holds values that are not numbers ({e}) and is not in categorical "
                    f"{list(explicit)}: add it there, or leave categorical out to treat every column of text "
                    "as categorical"
                ) from e
        return list(explicit)
    return [
        c
        for c in features.columns
        if not pd.api.types.is_numeric_dtype(features[c]) or pd.api.types.is_bool_dtype(features[c])
    ]


def check_positive(value: float, name: str) -> None:
    """Refuse a trainer argument that is not a finite number > 0."""
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{name} must be a number > 0, got {value!r}")


def whole_seed(seed: Any) -> int:
    """A trainer's seed as an int: a whole number from 0 to 2**32 - 1, the range scikit-learn and NumPy take.

    A rendered template gives ``"42"`` (accepted); ``1.5`` was cut to 1, so two different seeds trained alike.
    """
    whole = (
        (isinstance(seed, numbers.Integral) and not isinstance(seed, bool))
        or (isinstance(seed, float) and seed.is_integer())
        or (isinstance(seed, str) and seed.strip().isascii() and seed.strip().isdigit())
    )
    value = int(seed) if whole else None
    if value is None or not 0 <= value < 2**32:
        raise ConfigurationError(
            f"seed must be a whole number from 0 to 4294967295, got {seed!r}: give an integer such as 42"
        )
    return value


def check_count(value: int, name: str) -> None:
    """Refuse a trainer argument that is not an integer >= 1."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be an integer >= 1, got {value!r}")
