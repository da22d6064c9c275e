"""What a trial trains: the :class:`FidelityModel` protocol and a ready-made gradient-boosting model."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from costaware.core.errors import ConfigurationError


class FidelityModel(Protocol):
    """A model a trial trains in steps: ``advance(r)`` trains up to resource ``r`` and returns its score."""

    def advance(self, resource: int) -> float: ...


#: ``trainer(params, **trainer_kwargs)``. It may carry ``check_inputs(**trainer_kwargs)``: a trial slot calls
#: it before it reserves money, and what it raises (a ``ConfigurationError`` naming a bad input) fails the
#: slot; the trainer itself is called only once the slot has reserved and asked for parameters.
TrainerFactory = Callable[..., FidelityModel]


class BoostingFidelityModel:
    """scikit-learn ``HistGradientBoostingClassifier`` trained round by round; scored by validation ROC AUC.

    ``advance(n)`` continues boosting (warm start) up to ``n`` rounds in total, so a promoted trial pays only
    for the rounds it adds. Columns of pandas ``category`` dtype are treated as categorical, and so are
    other non-numeric feature columns (strings such as a carrier code), with the categories of both frames.

    Args:
        params: ``HistGradientBoostingClassifier`` parameters (``learning_rate``, ``max_leaf_nodes``, ...).
        train: Training frame with the features and the label.
        valid: Validation frame (same columns).
        label: Name of the 0/1 label column.
        random_state: Seed of the booster.

    Raises:
        ConfigurationError: ``label`` is not a column of both frames with two classes in each
            (:func:`check_binary_label`).
    """

    def __init__(
        self, params: Mapping[str, Any], train: Any, valid: Any, label: str, random_state: int = 0
    ) -> None:
        from sklearn.ensemble import HistGradientBoostingClassifier

        check_binary_label(train, label, "training")
        check_binary_label(valid, label, "validation")
        train, valid = _strings_as_categories(train, valid, label)
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
    """A :class:`BoostingFidelityModel` over two Parquet files; string columns become categorical.

    A trial slot checks the files' labels first (:func:`check_boosting_inputs`), before it reserves money.
    """
    import pandas as pd

    train, valid = pd.read_parquet(train_path), pd.read_parquet(valid_path)
    return BoostingFidelityModel(params, train, valid, label, random_state)


def _strings_as_categories(train: Any, valid: Any, label: str) -> tuple[Any, Any]:
    """Copies of the frames whose non-numeric feature columns are categoricals over both frames' values.

    Given frames with a string column, the booster failed its first rung with numpy's "could not convert
    string to float: 'UA'", after that rung was paid.
    """
    import pandas as pd

    strings = [
        column
        for column in train.columns
        if column != label
        and not pd.api.types.is_numeric_dtype(train[column])
        and not isinstance(train[column].dtype, pd.CategoricalDtype)
    ]
    if not strings:
        return train, valid
    train, valid = train.copy(), valid.copy()
    for column in strings:
        values = set(train[column].dropna()) | (set(valid[column].dropna()) if column in valid else set())
        categories = sorted(values, key=str)
        train[column] = pd.Categorical(train[column], categories=categories)
        if column in valid:
            valid[column] = pd.Categorical(valid[column], categories=categories)
    return train, valid


def check_boosting_inputs(*, train_path: str, valid_path: str, label: str, random_state: int = 0) -> None:
    """Refuse the files of :func:`boosting_trainer` whose ``label`` does not hold two classes in each.

    Takes the trainer's keyword arguments (``random_state`` needs no check) and reads the label column only.
    Raises ``ConfigurationError`` as :func:`check_binary_label` does.
    """
    files = ((train_path, "training", "train_path"), (valid_path, "validation", "valid_path"))
    for path, what, argument in files:
        check_binary_label(_label_column(path, label, argument), label, what, path=path)


boosting_trainer.check_inputs = check_boosting_inputs  # type: ignore[attr-defined]


def _label_column(path: str, label: str, argument: str) -> Any:
    """The ``label`` column of the Parquet file at ``path``, or the whole file when it has no such column.

    Raises:
        ConfigurationError: ``path`` is no readable Parquet file, naming the trainer argument ``argument``
            (a bare ``FileNotFoundError`` failed every slot, and Airflow retried each for a typo).
    """
    import pandas as pd

    try:
        return pd.read_parquet(path, columns=[label])
    except Exception:  # pyarrow's words for a missing column are its own: the check names the columns
        pass
    try:
        return pd.read_parquet(path)
    except Exception as e:
        reason = "no such file" if isinstance(e, FileNotFoundError) else f"{type(e).__name__}: {e}"
        raise ConfigurationError(
            f"trainer_kwargs {argument}={path!r} cannot be read as a Parquet file ({reason}): give the path "
            "of an existing Parquet file"
        ) from e


def check_binary_label(frame: Any, label: str, what: str, *, path: str = "") -> None:
    """Refuse ``frame`` unless its column ``label`` holds exactly two classes (missing values aside).

    ROC AUC ranks a 0/1 label and needs rows of both classes: with one in the validation set every trial
    failed ("its metric is nan") after its slot had reserved money and trained a rung, and with one in the
    training set every model predicted a constant and every trial scored 0.5.

    Args:
        frame: A pandas frame.
        label: The label column.
        what: ``training`` or ``validation``, for the message.
        path: Where ``frame`` was read from, for the message.

    Raises:
        ConfigurationError: no column ``label``, or one with other than two classes, naming what it holds.
    """
    where = f" ({path})" if path else ""
    if label not in frame.columns:
        columns = ", ".join(repr(str(c)) for c in list(frame.columns)[:12])
        more = ", ..." if len(frame.columns) > 12 else ""
        raise ConfigurationError(
            f"the {what} set{where} has no label column {label!r} (its columns: {columns}{more}): give "
            "label=<the name of its 0/1 column>"
        )
    classes = sorted(frame[label].dropna().unique().tolist(), key=repr)
    if len(classes) == 2:
        return
    if not classes:
        found = "no class (no row with a label)"
    elif len(classes) == 1:
        found = f"one class only, {classes[0]!r}"
    else:
        shown = ", ".join(repr(c) for c in classes[:5]) + (", ..." if len(classes) > 5 else "")
        found = f"{len(classes)} classes ({shown})"
    raise ConfigurationError(
        f"the {what} set's label column {label!r}{where} holds {found}: the boosting model is scored by ROC "
        f"AUC of a 0/1 label, which needs rows of both classes; give a {what} set with both (a longer "
        "period, or a split stratified by the label)"
    )


def is_finite(value: float | None) -> bool:
    """Whether a trial value is a real number (not None, NaN or infinite)."""
    return value is not None and math.isfinite(value)
