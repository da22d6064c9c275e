"""Whether a candidate model may replace the champion: pure rules over two holdout metrics."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from costaware.core.errors import ConfigurationError

#: Metrics the promotion step knows, and whether higher is better.
METRICS: dict[str, bool] = {
    "roc_auc": True,
    "average_precision": True,
    "accuracy": True,
    "log_loss": False,
    "brier": False,
}

#: The status of a model version whose training ran to the end; any other status is never promoted.
COMPLETE = "complete"


def higher_is_better(metric: str) -> bool:
    """Whether a higher value of ``metric`` means a better model."""
    try:
        return METRICS[metric]
    except KeyError:
        raise ConfigurationError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}") from None


def validate_margin(margin: float) -> float:
    """The margin as a float; it must be finite and zero or more."""
    try:
        value = float(margin)
    except (TypeError, ValueError):
        raise ConfigurationError(f"margin must be a number >= 0, got {margin!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"margin must be a finite number >= 0, got {margin!r}")
    return value


@dataclass(frozen=True, slots=True)
class PromotionDecision:
    """The outcome of comparing a candidate with the champion, with both metrics."""

    promote: bool
    reason: str
    metric: str
    candidate_metric: float | None
    champion_metric: float | None
    margin: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide_promotion(
    *,
    metric: str,
    candidate_metric: float | None,
    champion_metric: float | None,
    candidate_status: str,
    has_champion: bool,
    margin: float = 0.0,
) -> PromotionDecision:
    """Promote the candidate only when its run completed and it is at least as good as the champion.

    "At least as good within the margin": for a higher-is-better metric the candidate must score
    ``>= champion - margin``; for a lower-is-better one ``<= champion + margin``. Equal metrics promote.

    Args:
        metric: Name of the metric (a key of ``METRICS``).
        candidate_metric: The candidate's value on the holdout.
        champion_metric: The champion's value on the same holdout (None when there is no champion).
        candidate_status: Status of the candidate's training run; only ``"complete"`` can be promoted.
        has_champion: Whether a champion exists.
        margin: How much worse than the champion the candidate may be and still be promoted.
    """
    better_high = higher_is_better(metric)
    margin = validate_margin(margin)

    def decision(promote: bool, reason: str) -> PromotionDecision:
        return PromotionDecision(promote, reason, metric, candidate_metric, champion_metric, margin)

    if candidate_status != COMPLETE:
        return decision(
            False,
            f"candidate comes from a run with status {candidate_status!r}, not {COMPLETE!r}: never promoted",
        )
    if candidate_metric is None or not math.isfinite(candidate_metric):
        return decision(
            False, f"candidate's {metric} on the holdout is undefined ({candidate_metric}): not promoted"
        )
    if not has_champion:
        return decision(True, f"no champion yet: candidate promoted with {metric} {candidate_metric:.4f}")
    if champion_metric is None or not math.isfinite(champion_metric):
        return decision(
            True,
            f"champion's {metric} on the holdout is undefined ({champion_metric}): "
            f"candidate promoted with {candidate_metric:.4f}",
        )
    gain = candidate_metric - champion_metric if better_high else champion_metric - candidate_metric
    text = f"candidate {metric} {candidate_metric:.4f} vs champion {champion_metric:.4f}"
    if gain > 0:
        return decision(True, f"{text}: better, promoted")
    if gain == 0:
        return decision(True, f"{text}: equal, promoted")
    if -gain <= margin:
        return decision(True, f"{text}: worse by {-gain:.4f}, within margin {margin:g}, promoted")
    return decision(False, f"{text}: worse by {-gain:.4f} (margin {margin:g}), champion kept")
