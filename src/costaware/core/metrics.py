"""The metrics costaware computes itself on a holdout: binary, regression and multiclass.

Each function takes the true labels and a model's predictions as array-likes and returns a float, NaN when
the metric is undefined on that holdout (one class only, a constant target, a non-finite prediction). NaN is
not an error: the promotion rules never promote a candidate whose metric is undefined. Class probabilities
outside [0, 1] are an error (the model predicts scores or logits); they are clipped away from 0 and 1 only
for ``log_loss``, which would be infinite there.

What the predictions are depends on the model kind:

* binary: a 1-D array of positive-class probabilities, labels 0/1;
* multiclass: an ``(n, k)`` array of class probabilities, labels the class index ``0..k-1``;
* regression: a 1-D array of predicted values, labels the true values.

``accuracy``, ``log_loss`` and ``macro_f1`` serve binary and multiclass models alike: the shape of the
predictions tells which. Plain numpy (imported where used, so ``costaware.core`` stays light to import);
``tests/core/test_metrics.py`` checks every function against scikit-learn.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from costaware.core.errors import ConfigurationError

log = logging.getLogger(__name__)

BINARY = "binary"
MULTICLASS = "multiclass"
REGRESSION = "regression"

#: How far probabilities are kept from 0 and 1, so one confident mistake costs a large, finite log loss.
PROBABILITY_EPS = 1e-7


@dataclass(frozen=True, slots=True)
class BuiltinMetric:
    """A metric costaware computes from a model's predictions on a holdout.

    Attributes:
        name: The name DAGs use (``metric="rmse"``).
        higher_is_better: Whether a larger value means a better model.
        kinds: The model kinds it applies to (``binary``, ``multiclass``, ``regression``).
    """

    name: str
    higher_is_better: bool
    kinds: tuple[str, ...]


BUILTIN_METRICS: dict[str, BuiltinMetric] = {
    m.name: m
    for m in (
        BuiltinMetric("roc_auc", True, (BINARY,)),
        BuiltinMetric("average_precision", True, (BINARY,)),
        BuiltinMetric("accuracy", True, (BINARY, MULTICLASS)),
        BuiltinMetric("log_loss", False, (BINARY, MULTICLASS)),
        BuiltinMetric("brier", False, (BINARY,)),
        BuiltinMetric("macro_f1", True, (BINARY, MULTICLASS)),
        BuiltinMetric("rmse", False, (REGRESSION,)),
        BuiltinMetric("mae", False, (REGRESSION,)),
        BuiltinMetric("r2", True, (REGRESSION,)),
    )
}


def builtin_metric(name: str) -> BuiltinMetric:
    """The built-in metric called ``name``.

    Raises:
        ConfigurationError: ``name`` is not built in; the message lists those that are.
    """
    try:
        return BUILTIN_METRICS[name]
    except KeyError:
        raise ConfigurationError(
            f"metric {name!r} is not one costaware computes from a holdout (those are "
            f"{', '.join(BUILTIN_METRICS)}): pass candidate_metrics (the job's own metrics) or "
            "scoring_command (your scoring script) to promote on it"
        ) from None


def model_kind(metric: str, predictions: Any) -> str:
    """Which kind of model ``predictions`` come from, for ``metric``: regression, binary or multiclass.

    Raises:
        ConfigurationError: The predictions' shape does not fit the metric (class probabilities for RMSE).
    """
    import numpy as np

    spec = builtin_metric(metric)
    shape = np.shape(predictions)
    if spec.kinds == (REGRESSION,):
        if len(shape) == 1 or (len(shape) == 2 and shape[1] == 1):
            return REGRESSION
        raise ConfigurationError(
            f"{metric} needs one predicted value per row, the model predicted an array of shape {shape}: "
            "use a classification metric, or a trainer whose predict returns the predicted values"
        )
    if len(shape) == 1 or (len(shape) == 2 and shape[1] == 1):
        if BINARY in spec.kinds:
            return BINARY
    elif len(shape) == 2 and shape[1] >= 2 and MULTICLASS in spec.kinds:
        return MULTICLASS
    raise ConfigurationError(
        f"{metric} applies to {' and '.join(spec.kinds)} models; the model predicted an array of shape "
        f"{shape}: binary models predict one positive-class probability per row, multiclass models an "
        "(n, classes) array of probabilities"
    )


def score(metric: str, label: Any, predictions: Any, *, label_name: str = "the label") -> float:
    """The value of built-in ``metric`` for ``label`` and ``predictions`` (NaN when undefined).

    Args:
        metric: A key of ``BUILTIN_METRICS``.
        label: The true values (see the module docstring for each model kind).
        predictions: The model's predictions for the same rows.
        label_name: What to call the label in error messages (``"label column 'y'"``).

    Raises:
        ConfigurationError: The metric is not built in, the arrays differ in length or are empty, or the
            labels do not fit the model kind (not 0/1 for a binary model, not a class index for a
            multiclass one).
    """
    import numpy as np

    kind = model_kind(metric, predictions)
    y = np.asarray(label)
    pred = np.asarray(predictions, dtype=float)
    if kind != MULTICLASS:
        pred = pred.reshape(-1)
    if len(y) != len(pred):
        raise ConfigurationError(f"{metric}: {len(y)} labels but {len(pred)} predictions")
    if not len(y):
        raise ConfigurationError(f"{metric}: no rows to score: the holdout has no labelled rows")
    if not np.isfinite(pred).all():
        return math.nan  # a model that predicts NaN or inf has no meaningful score
    if kind == REGRESSION:
        numeric = _numeric(y, metric, label_name)
        if set(np.unique(numeric)) <= {0.0, 1.0} and ((pred >= 0) & (pred <= 1)).all():
            # Said, not refused: it is a score of the probabilities (RMSE is the root of the Brier score).
            log.warning(
                "%s scores %s, a 0/1 label, against probabilities: the model looks like a classifier; "
                "roc_auc, average_precision or log_loss are the metrics of one",
                metric,
                label_name,
            )
        return _REGRESSION[metric](numeric, pred)
    pred = _probabilities(pred, metric, kind)
    if kind == BINARY:
        return _BINARY[metric](_classes(y, 2, metric, kind, label_name), pred)
    return _MULTICLASS[metric](_classes(y, pred.shape[1], metric, kind, label_name), pred)


#: How far outside [0, 1] a probability may be and count as float noise (1.0000000000000002) rather than a
#: model that predicts scores or logits.
_PROBABILITY_NOISE = 1e-9


def _probabilities(pred: Any, metric: str, kind: str) -> Any:
    """``pred`` checked to be probabilities: a score or logit clipped to [0, 1] would score another model."""
    import numpy as np

    bad = (pred < -_PROBABILITY_NOISE) | (pred > 1 + _PROBABILITY_NOISE)
    if bad.any():
        seen = sorted(set(pred[bad].tolist()))
        more = f" and {len(seen) - 3} more" if len(seen) > 3 else ""
        shown = ", ".join(f"{v:g}" for v in seen[:3]) + more
        what = (
            "class probabilities"
            if kind == MULTICLASS
            else "positive-class probabilities (predict_proba[:, 1])"
        )
        raise ConfigurationError(
            f"{metric} on a {kind} model needs probabilities in [0, 1]; the model predicted {shown}: "
            f"use a trainer whose predict returns {what}, not scores or logits"
        )
    return np.clip(pred, 0.0, 1.0)


def _numeric(y: Any, metric: str, label_name: str) -> Any:
    import numpy as np

    try:
        values = y.astype(float)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"{metric} needs a numeric label, {label_name} holds {sorted(set(y.tolist()), key=str)[:5]!r}"
        ) from None
    if not np.isfinite(values).all():
        raise ConfigurationError(f"{metric}: {label_name} holds non-finite values: drop those rows")
    return values


def _classes(y: Any, k: int, metric: str, kind: str, label_name: str) -> Any:
    """The labels as class indices ``0..k-1``."""
    import numpy as np

    try:
        values = y.astype(float)
        bad = ~np.isin(values, np.arange(k))
    except (TypeError, ValueError):  # text labels
        values, bad = None, np.ones(len(y), dtype=bool)
    if values is None or bad.any():
        seen = sorted(set(y[bad].tolist()), key=str)[:5]
        what = "0/1" if kind == BINARY else f"a class index 0..{k - 1} (the model predicts {k} classes)"
        if kind != BINARY:
            fix = "map the classes to 0..k-1"
        elif values is None:  # label_threshold compares numbers: text needs mapping, not a threshold
            fix = "map the labels to 0/1 (e.g. 'yes' -> 1, 'no' -> 0) where the data is written"
        else:
            fix = "set label_threshold (1 where the label is above it) or map the label to 0/1"
        raise ConfigurationError(
            f"{metric} on a {kind} model needs labels that are {what}; {label_name} holds {seen!r}: {fix}"
        )
    return values.astype(int)


# -- binary: y in {0, 1}, p the positive-class probability ---------------------------------------------------


def roc_auc(y: Any, p: Any) -> float:
    """Area under the ROC curve: the chance a random positive scores above a random negative (ties: half)."""
    import numpy as np

    positives = int(y.sum())
    negatives = len(y) - positives
    if not positives or not negatives:
        return math.nan
    # Mann-Whitney U with average ranks for ties, which equals the trapezoidal area under the ROC curve
    _, inverse, counts = np.unique(p, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = ((ends - counts + 1 + ends) / 2.0)[inverse]
    return float((ranks[y == 1].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


def average_precision(y: Any, p: Any) -> float:
    """Precision at each distinct score threshold, weighted by the recall it adds (as scikit-learn)."""
    import numpy as np

    positives = int(y.sum())
    if not positives or positives == len(y):
        return math.nan
    order = np.argsort(-p, kind="mergesort")
    scores, hits = p[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]  # the last row at each threshold
    tp = np.cumsum(hits)[last]
    precision = tp / (last + 1)
    recall = tp / positives
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def _binary_accuracy(y: Any, p: Any) -> float:
    return float(((p >= 0.5).astype(int) == y).mean())


def _binary_log_loss(y: Any, p: Any) -> float:
    import numpy as np

    # Only here, where a probability of exactly 0 or 1 would make the loss infinite: clipping for the
    # ranking metrics would tie confident predictions (1e-9 and 1e-8 both become 1e-7).
    p = np.clip(p, PROBABILITY_EPS, 1 - PROBABILITY_EPS)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def brier(y: Any, p: Any) -> float:
    """Mean squared difference between the positive-class probability and the 0/1 label."""
    import numpy as np

    return float(np.mean((p - y) ** 2))


def _binary_macro_f1(y: Any, p: Any) -> float:
    return macro_f1_of_labels(y, (p >= 0.5).astype(int))


# -- multiclass: y a class index, p an (n, k) array of probabilities -----------------------------------------


def _multiclass_accuracy(y: Any, p: Any) -> float:
    return float((p.argmax(axis=1) == y).mean())


def _multiclass_log_loss(y: Any, p: Any) -> float:
    import numpy as np

    clipped = np.clip(p, PROBABILITY_EPS, 1.0)
    clipped = clipped / clipped.sum(axis=1, keepdims=True)  # rows that do not sum to 1 are rescaled
    return float(-np.mean(np.log(clipped[np.arange(len(y)), y])))


def _multiclass_macro_f1(y: Any, p: Any) -> float:
    return macro_f1_of_labels(y, p.argmax(axis=1))


def macro_f1_of_labels(y: Any, predicted: Any) -> float:
    """Unweighted mean F1 over the classes that occur in the labels or the predictions."""
    import numpy as np

    f1 = []
    for c in np.union1d(y, predicted):
        tp = np.sum((predicted == c) & (y == c))
        wrong = np.sum((predicted == c) != (y == c))  # false positives plus false negatives
        f1.append(2 * tp / (2 * tp + wrong))
    return float(np.mean(f1))


# -- regression: y and p real values ------------------------------------------------------------------------


def rmse(y: Any, p: Any) -> float:
    """Root mean squared error, in the label's unit."""
    import numpy as np

    return float(np.sqrt(np.mean((p - y) ** 2)))


def mae(y: Any, p: Any) -> float:
    """Mean absolute error, in the label's unit."""
    import numpy as np

    return float(np.mean(np.abs(p - y)))


def r2(y: Any, p: Any) -> float:
    """Coefficient of determination; NaN when the label is constant (there is no variance to explain)."""
    import numpy as np

    total = float(np.sum((y - y.mean()) ** 2))
    if total == 0:
        return math.nan
    return 1.0 - float(np.sum((y - p) ** 2)) / total


_Fn = Callable[[Any, Any], float]
_BINARY: dict[str, _Fn] = {
    "roc_auc": roc_auc,
    "average_precision": average_precision,
    "accuracy": _binary_accuracy,
    "log_loss": _binary_log_loss,
    "brier": brier,
    "macro_f1": _binary_macro_f1,
}
_MULTICLASS: dict[str, _Fn] = {
    "accuracy": _multiclass_accuracy,
    "log_loss": _multiclass_log_loss,
    "macro_f1": _multiclass_macro_f1,
}
_REGRESSION: dict[str, _Fn] = {"rmse": rmse, "mae": mae, "r2": r2}
