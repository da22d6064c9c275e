from __future__ import annotations

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.promotion import decide_promotion


@pytest.mark.parametrize(
    ("metric", "candidate", "champion", "status", "has_champion", "margin", "promote", "reason"),
    [
        ("roc_auc", 0.70, 0.72, "complete", True, 0.0, False, "worse by 0.0200 (margin 0), champion kept"),
        ("roc_auc", 0.72, 0.72, "complete", True, 0.0, True, "equal, promoted"),
        ("roc_auc", 0.73, 0.72, "complete", True, 0.0, True, "better, promoted"),
        ("roc_auc", 0.715, 0.72, "complete", True, 0.01, True, "within margin 0.01, promoted"),
        ("roc_auc", 0.99, 0.72, "failed", True, 0.0, False, "status 'failed'"),
        ("roc_auc", 0.99, None, "interrupted", False, 0.0, False, "status 'interrupted'"),
        ("roc_auc", 0.99, 0.72, "incomplete", True, 0.0, False, "never promoted"),
        ("roc_auc", float("nan"), 0.72, "complete", True, 0.0, False, "undefined"),
        ("roc_auc", None, None, "complete", False, 0.0, False, "undefined"),
        ("roc_auc", 0.60, None, "complete", False, 0.0, True, "no champion yet"),
        (
            "roc_auc",
            0.60,
            float("nan"),
            "complete",
            True,
            0.0,
            True,
            "champion's roc_auc on the holdout is undefined",
        ),
        ("log_loss", 0.50, 0.55, "complete", True, 0.0, True, "better, promoted"),
        ("log_loss", 0.60, 0.55, "complete", True, 0.0, False, "worse by 0.0500"),
    ],
)
def test_promotion_rules(
    metric: str,
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
    )
    assert decision.promote is promote
    assert reason in decision.reason
    record = decision.to_dict()
    assert record["candidate_metric"] == candidate or candidate != candidate  # both metrics kept (NaN != NaN)
    assert record["champion_metric"] == champion or champion != champion


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metric": "f2"}, "unknown metric 'f2': use one of roc_auc"),
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
    with pytest.raises(ConfigurationError, match=message):
        decide_promotion(**args)  # type: ignore[arg-type]
