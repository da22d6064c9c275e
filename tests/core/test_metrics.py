from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sklearn import metrics as sk

from costaware.core.errors import ConfigurationError
from costaware.core.metrics import BUILTIN_METRICS, PROBABILITY_EPS, model_kind, score
from costaware.core.promotion import METRICS

RNG = np.random.default_rng(7)
N = 400
Y_BIN = RNG.integers(0, 2, N)
P_BIN = np.clip(0.35 * Y_BIN + RNG.uniform(0, 0.65, N), 0, 1)
P_SURE = [1e-9, 1e-8, 2e-8, 0.5]
P_TIES = np.round(P_BIN, 1)  # many equal scores: ties must count as half, as in scikit-learn
Y_REG = RNG.normal(20, 5, N)
P_REG = Y_REG + RNG.normal(0, 2, N)
Y_MC = RNG.integers(0, 4, N)
_raw = RNG.uniform(0, 1, (N, 4)) + 1.5 * np.eye(4)[Y_MC] * RNG.uniform(0, 1, (N, 1))
P_MC = _raw / _raw.sum(axis=1, keepdims=True)


def _clip(p: Any) -> Any:
    return np.clip(p, PROBABILITY_EPS, 1 - PROBABILITY_EPS)


SKLEARN: list[tuple[str, Any, Any, Callable[[], float]]] = [
    ("roc_auc", Y_BIN, P_BIN, lambda: sk.roc_auc_score(Y_BIN, P_BIN)),
    ("roc_auc", Y_BIN, P_TIES, lambda: sk.roc_auc_score(Y_BIN, P_TIES)),
    ("average_precision", Y_BIN, P_BIN, lambda: sk.average_precision_score(Y_BIN, P_BIN)),
    ("average_precision", Y_BIN, P_TIES, lambda: sk.average_precision_score(Y_BIN, P_TIES)),
    ("accuracy", Y_BIN, P_BIN, lambda: sk.accuracy_score(Y_BIN, P_BIN >= 0.5)),
    ("log_loss", Y_BIN, P_BIN, lambda: sk.log_loss(Y_BIN, _clip(P_BIN), labels=[0, 1])),
    ("brier", Y_BIN, P_BIN, lambda: sk.brier_score_loss(Y_BIN, P_BIN)),
    # very confident predictions keep their order: clipped to 1e-7 they once tied (roc_auc 0.75)
    ("roc_auc", [0, 0, 1, 1], P_SURE, lambda: sk.roc_auc_score([0, 0, 1, 1], P_SURE)),
    ("average_precision", [0, 1, 0, 1], P_SURE, lambda: sk.average_precision_score([0, 1, 0, 1], P_SURE)),
    ("brier", [0, 1], [0.0, 1.0], lambda: 0.0),
    ("macro_f1", Y_BIN, P_BIN, lambda: sk.f1_score(Y_BIN, P_BIN >= 0.5, average="macro")),
    ("rmse", Y_REG, P_REG, lambda: sk.root_mean_squared_error(Y_REG, P_REG)),
    ("mae", Y_REG, P_REG, lambda: sk.mean_absolute_error(Y_REG, P_REG)),
    ("r2", Y_REG, P_REG, lambda: sk.r2_score(Y_REG, P_REG)),
    ("rmse", Y_REG, P_REG.reshape(-1, 1), lambda: sk.root_mean_squared_error(Y_REG, P_REG)),
    ("accuracy", Y_MC, P_MC, lambda: sk.accuracy_score(Y_MC, P_MC.argmax(axis=1))),
    ("log_loss", Y_MC, P_MC, lambda: sk.log_loss(Y_MC, P_MC, labels=[0, 1, 2, 3])),
    ("macro_f1", Y_MC, P_MC, lambda: sk.f1_score(Y_MC, P_MC.argmax(axis=1), average="macro")),
    # a class never predicted and one never seen still count, as in scikit-learn
    ("macro_f1", [0, 0, 1, 2], [[0.9, 0.1, 0.0], [0.8, 0.2, 0], [0.7, 0.3, 0], [0.1, 0.1, 0.8]], lambda: 0.6),
    ("accuracy", [True, False, True], [0.9, 0.2, 0.4], lambda: 2 / 3),  # boolean labels
]


@pytest.mark.parametrize(("metric", "label", "predictions", "expected"), SKLEARN)
def test_builtin_metrics_match_scikit_learn(
    metric: str, label: Any, predictions: Any, expected: Callable[[], float]
) -> None:
    assert score(metric, label, predictions) == pytest.approx(expected(), rel=1e-12, abs=1e-12)


def test_every_builtin_metric_is_tested_and_has_a_direction() -> None:
    assert {case[0] for case in SKLEARN} == set(BUILTIN_METRICS)
    assert METRICS == {
        "roc_auc": True,
        "average_precision": True,
        "accuracy": True,
        "log_loss": False,
        "brier": False,
        "macro_f1": True,
        "rmse": False,
        "mae": False,
        "r2": True,
    }


@pytest.mark.parametrize(
    ("metric", "label", "predictions"),
    [
        ("roc_auc", [1, 1, 1], [0.2, 0.4, 0.9]),  # one class: no ranking to measure
        ("average_precision", [0, 0], [0.2, 0.4]),
        ("r2", [3.0, 3.0, 3.0], [2.0, 3.0, 4.0]),  # a constant target: no variance to explain
        ("rmse", [1.0, 2.0], [1.0, float("nan")]),  # a model that predicts NaN has no score
        ("log_loss", [0, 1], [0.5, float("inf")]),
    ],
)
def test_undefined_metrics_are_nan(metric: str, label: Any, predictions: Any) -> None:
    assert math.isnan(score(metric, label, predictions))


def test_confident_mistakes_cost_a_large_finite_log_loss() -> None:
    assert score("log_loss", [1, 0], [0.0, 1.0]) == pytest.approx(-math.log(PROBABILITY_EPS))
    assert score("log_loss", [0, 1], [[1.0, 0.0], [1.0, 0.0]]) == pytest.approx(
        -0.5 * math.log(PROBABILITY_EPS / (1 + PROBABILITY_EPS))
    )


@pytest.mark.parametrize(
    ("metric", "predictions", "kind"),
    [
        ("rmse", [1.0, 2.0], "regression"),
        ("rmse", [[1.0], [2.0]], "regression"),
        ("roc_auc", [0.1, 0.9], "binary"),
        ("log_loss", [0.1, 0.9], "binary"),
        ("log_loss", [[0.1, 0.9], [0.5, 0.5]], "multiclass"),
        ("macro_f1", [[0.2, 0.3, 0.5]], "multiclass"),
    ],
)
def test_model_kind_follows_the_predictions_shape(metric: str, predictions: Any, kind: str) -> None:
    assert model_kind(metric, predictions) == kind


@pytest.mark.parametrize(
    ("metric", "label", "predictions", "message"),
    [
        ("f1", [0, 1], [0.1, 0.9], "metric 'f1' is not one costaware computes from a holdout"),
        ("rmse", [1.0, 2.0], [[0.1, 0.9], [0.5, 0.5]], r"rmse needs one predicted value per row.*\(2, 2\)"),
        ("roc_auc", [0, 1], [[0.1, 0.9], [0.5, 0.5]], "roc_auc applies to binary models"),
        ("roc_auc", [0, 1, 2], [0.1, 0.9, 0.5], r"needs labels that are 0/1; label column 'y' holds \[2\]"),
        # label_threshold compares numbers: text labels are told to map, numbers may use the threshold.
        ("accuracy", ["a", "b"], [0.1, 0.9], r"label column 'y' holds \['a', 'b'\]: map the labels to 0/1"),
        ("accuracy", [0, 5], [0.1, 0.9], r"holds \[5\]: set label_threshold \(1 where the label is above"),
        ("accuracy", [0, 3], [[0.1, 0.9], [0.5, 0.5]], r"class index 0..1 \(the model predicts 2 classes\)"),
        ("rmse", ["a", "b"], [1.0, 2.0], r"rmse needs a numeric label, label column 'y' holds \['a', 'b'\]"),
        ("rmse", [1.0, float("nan")], [1.0, 2.0], "label column 'y' holds non-finite values"),
        ("mae", [1.0, 2.0, 3.0], [1.0, 2.0], "mae: 3 labels but 2 predictions"),
        ("mae", [], [], "mae: no rows to score"),
        (
            "roc_auc",
            [0, 1, 1],
            [-0.5, 2.5, 0.5],
            r"roc_auc on a binary model needs probabilities in \[0, 1\]; the model predicted -0.5, 2.5: "
            r"use a trainer whose predict returns positive-class probabilities",
        ),
        (
            "log_loss",
            [0, 1],
            [[1.2, -0.2], [0.5, 0.5]],
            r"needs probabilities in \[0, 1\].*-0.2, 1.2: .*class",
        ),
    ],
)
def test_bad_input_is_a_clear_error(metric: str, label: Any, predictions: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        score(metric, np.asarray(label), predictions, label_name="label column 'y'")


def test_a_regression_metric_on_a_0_1_label_and_probabilities_says_the_model_looks_like_a_classifier(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        value = score("rmse", [0, 1, 1, 0], [0.2, 0.7, 0.9, 0.4])
    assert value == pytest.approx(math.sqrt((0.04 + 0.09 + 0.01 + 0.16) / 4))  # the root of the Brier score
    assert "rmse scores the label, a 0/1 label, against probabilities" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        score("rmse", [3.0, 1.5], [2.5, 1.0])  # a regression: nothing to say
    assert caplog.text == ""
