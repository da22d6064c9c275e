from __future__ import annotations

import math
import re
from typing import Any

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.promotion import (
    COMMAND,
    HOLDOUT,
    JOB,
    check_source,
    decide_promotion,
    metric_direction,
    metric_source,
    metric_value,
    parse_command,
    parse_direction,
    parse_metrics,
    validate_timeout,
)

NAN = float("nan")


@pytest.mark.parametrize(
    ("metric", "higher", "candidate", "champion", "status", "has_champion", "margin", "promote", "reason"),
    [
        # higher is better (built-in direction)
        (
            "roc_auc",
            None,
            0.70,
            0.72,
            "complete",
            True,
            0.0,
            False,
            "worse by 0.0200 (margin 0), champion kept",
        ),
        ("roc_auc", None, 0.72, 0.72, "complete", True, 0.0, True, "equal, promoted"),
        ("roc_auc", None, 0.73, 0.72, "complete", True, 0.0, True, "better, promoted"),
        ("roc_auc", None, 0.715, 0.72, "complete", True, 0.01, True, "within margin 0.01, promoted"),
        ("r2", None, 0.60, 0.65, "complete", True, 0.01, False, "worse by 0.0500 (margin 0.01)"),
        # exactly at the boundary, which float subtraction puts a hair past it (0.80 - 0.81 = -0.01000...09)
        ("roc_auc", None, 0.80, 0.81, "complete", True, 0.01, True, "worse by 0.0100, within margin 0.01"),
        ("roc_auc", None, 0.7, 0.8, "complete", True, 0.1, True, "worse by 0.1000, within margin 0.1"),
        ("rmse", None, 0.81, 0.80, "complete", True, 0.01, True, "worse by 0.0100, within margin 0.01"),
        ("roc_auc", None, 0.7999, 0.81, "complete", True, 0.01, False, "worse by 0.0101 (margin 0.01)"),
        # lower is better (built-in direction)
        ("log_loss", None, 0.50, 0.55, "complete", True, 0.0, True, "(lower is better): better, promoted"),
        ("log_loss", None, 0.60, 0.55, "complete", True, 0.0, False, "worse by 0.0500"),
        ("rmse", None, 3.10, 3.40, "complete", True, 0.0, True, "better, promoted"),
        ("rmse", None, 3.40, 3.10, "complete", True, 0.0, False, "worse by 0.3000 (margin 0), champion kept"),
        ("rmse", None, 3.40, 3.10, "complete", True, 0.5, True, "within margin 0.5, promoted"),
        ("mae", None, 2.0, 2.0, "complete", True, 0.0, True, "equal, promoted"),
        # a team's own metric, its direction given
        ("ndcg_at_10", True, 0.41, 0.40, "complete", True, 0.0, True, "(higher is better): better"),
        ("ndcg_at_10", True, 0.39, 0.40, "complete", True, 0.0, False, "champion kept"),
        ("wer", False, 0.12, 0.10, "complete", True, 0.0, False, "(lower is better): worse by 0.0200"),
        ("wer", "false", 0.08, 0.10, "complete", True, 0.0, True, "better, promoted"),
        # no champion, undefined figures, runs that did not complete
        ("rmse", None, 3.0, None, "complete", False, 0.0, True, "no champion yet"),
        ("roc_auc", None, 0.60, None, "complete", False, 0.0, True, "no champion yet"),
        ("roc_auc", None, 0.60, NAN, "complete", True, 0.0, True, "champion's roc_auc is undefined"),
        ("rmse", None, NAN, 3.0, "complete", True, 0.0, False, "candidate's rmse is undefined"),
        ("roc_auc", None, None, None, "complete", False, 0.0, False, "undefined"),
        ("roc_auc", None, 0.99, 0.72, "failed", True, 0.0, False, "status 'failed'"),
        ("rmse", None, 0.01, None, "interrupted", False, 0.0, False, "status 'interrupted'"),
        ("wer", False, 0.01, 0.10, "incomplete", True, 0.0, False, "never promoted"),
    ],
)
def test_promotion_rules(
    metric: str,
    higher: bool | str | None,
    candidate: float | None,
    champion: float | None,
    status: str,
    has_champion: bool,
    margin: float,
    promote: bool,
    reason: str,
) -> None:
    decision = decide_promotion(
        metric=metric,
        candidate_metric=candidate,
        champion_metric=champion,
        candidate_status=status,
        has_champion=has_champion,
        margin=margin,
        higher_is_better=higher,  # type: ignore[arg-type]
    )
    assert decision.promote is promote
    assert reason in decision.reason
    record = decision.to_dict()
    assert record["candidate_metric"] == candidate or candidate != candidate  # both kept (NaN != NaN)
    assert record["champion_metric"] == champion or champion != champion
    assert record["higher_is_better"] is metric_direction(metric, higher)
    assert record["metric"] == metric and record["margin"] == margin


UNKNOWN_F2 = (
    "unknown metric 'f2': use one of roc_auc, average_precision, accuracy, log_loss, brier, macro_f1, rmse, "
    "mae, r2, or say which way your own metric goes with higher_is_better=True or False"
)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metric": "f2"}, UNKNOWN_F2),
        (
            {"metric": "rmse", "higher_is_better": True},
            "metric 'rmse' is better when lower, but higher_is_better",
        ),
        ({"metric": "r2", "higher_is_better": "false"}, "metric 'r2' is better when higher"),
        (
            {"metric": "wer", "higher_is_better": "lower"},
            "higher_is_better must be True, False or None, got 'lower'",
        ),
        ({"metric": ""}, "metric must be a name of 1 to 32 characters, got ''"),
        ({"metric": "x" * 33, "higher_is_better": True}, "metric must be a name of 1 to 32 characters"),
        ({"margin": -0.1}, "margin must be a finite number >= 0, got -0.1"),
        ({"margin": float("inf")}, "margin must be a finite number >= 0, got inf"),
        ({"margin": "lots"}, "margin must be a number >= 0, got 'lots'"),
    ],
)
def test_promotion_rejects_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "metric": "roc_auc",
        "candidate_metric": 0.7,
        "champion_metric": 0.6,
        "candidate_status": "complete",
        "has_champion": True,
        "margin": 0.0,
        **kwargs,
    }
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        decide_promotion(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        (None, None),
        ("True", True),
        (" false ", False),
        ("", None),
        ("None", None),
        (" None ", None),
        ("null", None),
    ],
)
def test_parse_direction(value: Any, expected: bool | None) -> None:
    assert parse_direction(value) is expected


@pytest.mark.parametrize("value", ["none", "NULL", "Null", " NONE "])
def test_a_direction_no_template_renders_of_none_is_not_given_with_a_deprecation_warning(value: str) -> None:
    # DAGs written with higher_is_better='none' loaded before the one not-given rule; refusing it at once
    # made them import errors. They load for one more release, told what to write.
    with pytest.warns(DeprecationWarning, match=f"higher_is_better={value!r} is read as not given") as caught:
        assert parse_direction(value) is None
    assert "write None or leave higher_is_better out" in str(caught[0].message)


@pytest.mark.parametrize("value", ["yes", "1", "nil"])
def test_a_direction_that_is_no_bool_is_refused_naming_it_and_what_to_write(value: str) -> None:
    message = (
        f"higher_is_better must be True, False or None, got '{value}': write True or False, or None (or "
        "leave it out) for the metric's own direction"
    )
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        parse_direction(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"rmse": 3.2, "rows": 10}, {"rmse": 3.2, "rows": 10}),
        ("{'rmse': 3.2, 'mae': 1}", {"rmse": 3.2, "mae": 1}),  # a dict rendered by Jinja: its repr
        ('{"rmse": 3.2, "ok": true}', {"rmse": 3.2, "ok": True}),  # JSON text
        ({"rmse": "3.2", "name": "sgd"}, {"rmse": 3.2, "name": "sgd"}),  # one template per value
        ("{'loss': nan_x}", None),
        ("{'loss': __import__}", None),
        ("[1, 2]", None),
        ("rmse=3.2", None),
        (7, None),
    ],
)
def test_parse_metrics(value: Any, expected: dict[str, Any] | None) -> None:
    if expected is None:
        with pytest.raises(ConfigurationError, match="candidate_metrics must be a dict of named numbers"):
            parse_metrics(value, "candidate_metrics")
    else:
        assert parse_metrics(value, "candidate_metrics") == expected


def test_parse_metrics_reads_a_repr_s_nan_and_inf() -> None:
    """A dict's repr writes them as bare names: the dict was refused though the metric used was a number."""
    text = repr({"rmse": 3.2, "loss": float("nan"), "gap": float("inf"), "low": -float("inf")})
    metrics = parse_metrics(text, "candidate_metrics")
    assert metrics["rmse"] == 3.2 and math.isnan(metrics["loss"])
    assert (metrics["gap"], metrics["low"]) == (math.inf, -math.inf)
    assert metric_value(metrics, "rmse", "candidate") == 3.2


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"mae": 1.0, "rows": 5}, "champion 'v1' has no metric 'rmse' (it has: mae, rows): score both"),
        ({}, "champion 'v1' has no metric 'rmse' (it has: no metrics at all)"),
        ({"rmse": "3.2"}, "champion 'v1': metric 'rmse' is '3.2', not a number"),
        ({"rmse": True}, "champion 'v1': metric 'rmse' is True, not a number"),
    ],
)
def test_metric_value_names_the_metric_the_version_and_what_it_has(
    metrics: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        metric_value(metrics, "rmse", "champion 'v1'", fix="score both")


def test_metric_value_reads_numbers() -> None:
    assert metric_value({"rmse": 3}, "rmse", "x") == 3.0
    assert math.isnan(metric_value({"rmse": NAN}, "rmse", "x"))


@pytest.mark.parametrize(
    ("candidate_metrics", "scoring_command", "source"),
    [(None, None, HOLDOUT), ({"a": 1}, None, JOB), ("{{ x }}", None, JOB), (None, ["s"], COMMAND)],
)
def test_metric_source(candidate_metrics: Any, scoring_command: Any, source: str) -> None:
    assert metric_source(candidate_metrics, scoring_command) == source


def test_metric_source_refuses_both() -> None:
    with pytest.raises(
        ConfigurationError, match=r"pass candidate_metrics .* or scoring_command .*, not both"
    ):
        metric_source({"rmse": 1.0}, ["python", "score.py"])


@pytest.mark.parametrize(
    ("source", "kwargs", "message"),
    [
        (HOLDOUT, {"holdout_path": None}, "scoring on a holdout needs holdout_path and label_column"),
        (HOLDOUT, {"label_column": None}, "scoring on a holdout needs holdout_path and label_column"),
        (HOLDOUT, {"metric": "ndcg"}, "metric 'ndcg' is not one costaware computes from a holdout"),
        (
            HOLDOUT,
            {"metric": "rmse", "label_threshold": 15.0},
            "label_threshold=15.0 turns the label into 0/1",
        ),
        (COMMAND, {"holdout_path": None}, "scoring_command scores both models on one holdout"),
    ],
)
def test_check_source_refuses(source: str, kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "metric": "roc_auc",
        "holdout_path": "/h",
        "label_column": "y",
        "label_threshold": None,
        **kwargs,
    }
    with pytest.raises(ConfigurationError, match=message):
        check_source(source, **args)


@pytest.mark.parametrize(
    ("source", "kwargs"),
    [
        (HOLDOUT, {"metric": "roc_auc", "label_threshold": 15.0}),
        (HOLDOUT, {"metric": "rmse"}),
        (JOB, {"metric": "ndcg", "holdout_path": None, "label_column": None}),
        (COMMAND, {"metric": "ndcg", "label_column": None}),
    ],
)
def test_check_source_accepts(source: str, kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"holdout_path": "/h", "label_column": "y", "label_threshold": None, **kwargs}
    check_source(source, **args)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["python", "score.py"], ["python", "score.py"]),
        (("python", "score.py"), ["python", "score.py"]),
        ("['python', 'score.py']", ["python", "score.py"]),  # a rendered list
        ('["python", "score.py"]', ["python", "score.py"]),
        ("python score.py", None),
        ([], None),
        (["python", ""], ["python", ""]),
        (["", "score.py"], None),
        (["python", 3], None),
    ],
)
def test_parse_command(value: Any, expected: list[str] | None) -> None:
    if expected is None:
        with pytest.raises(ConfigurationError, match="scoring_command must be a non-empty list of strings"):
            parse_command(value)
    else:
        assert parse_command(value) == expected


@pytest.mark.parametrize("value", [0, -1, "soon", float("nan"), True, None])
def test_validate_timeout_refuses(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="scoring_timeout_seconds must be a number > 0"):
        validate_timeout(value)
