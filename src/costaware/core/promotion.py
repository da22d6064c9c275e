"""Whether a candidate model may replace the champion: pure rules over the two models' figures of one metric.

The metric is any name with a direction: costaware's built-in ones (``costaware.core.metrics``) know theirs,
a team's own metric (``ndcg_at_10``, ``wer``) needs ``higher_is_better`` spelled out.
"""

from __future__ import annotations

import ast
import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.given import not_given
from costaware.core.metrics import BINARY, BUILTIN_METRICS, builtin_metric

#: Metrics costaware knows, and whether higher is better.
METRICS: dict[str, bool] = {name: m.higher_is_better for name, m in BUILTIN_METRICS.items()}

#: The status of a model version whose training ran to the end; any other status is never promoted.
COMPLETE = "complete"

#: Where the two models' figures come from: the training jobs' own metrics, the team's scoring command, or
#: costaware scoring both models on a holdout.
JOB = "job"
COMMAND = "command"
HOLDOUT = "holdout"

#: Default limit on one run of a scoring command (it runs twice: for the candidate, then the champion).
DEFAULT_SCORING_TIMEOUT_SECONDS = 3600.0

#: Longest metric name: the ledger's run outcomes keep the name in a 32-character column.
MAX_METRIC_NAME = 32

#: How far past the margin, relative to the figures, a candidate may be and still count as within it.
_MARGIN_REL_TOL = 1e-9


def higher_is_better(metric: str) -> bool:
    """Whether a higher value of the known ``metric`` means a better model.

    Raises:
        ConfigurationError: ``metric`` is not a metric costaware knows.
    """
    try:
        return METRICS[metric]
    except KeyError:
        raise ConfigurationError(
            f"unknown metric {metric!r}: use one of {', '.join(METRICS)}, or say which way your own metric "
            "goes with higher_is_better=True or False"
        ) from None


def parse_direction(value: bool | str | None) -> bool | None:
    """``higher_is_better`` as given in a DAG or rendered from a template: True, False or None (not given).

    Not given is :func:`~costaware.core.given.not_given`'s: blank, ``None`` or ``null``, as every templated
    value. ``none`` or ``NULL`` (any case), which no template renders of None, was read as not given before
    the one rule: DAGs that loaded with it still do, with a DeprecationWarning, for this release.

    Raises:
        ConfigurationError: A value that is not a bool, ``"true"``/``"false"`` (any case) or not given.
    """
    if isinstance(value, bool):
        return value
    if not_given(value):
        return None
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    if text in ("none", "null"):
        warnings.warn(
            f"higher_is_better={value!r} is read as not given (the metric's own direction), but the next "
            "release refuses it: write None or leave higher_is_better out",
            DeprecationWarning,
            stacklevel=2,
        )
        return None
    raise ConfigurationError(
        f"higher_is_better must be True, False or None, got {value!r}: write True or False, or None (or "
        "leave it out) for the metric's own direction"
    )


def metric_direction(metric: str, higher: bool | str | None = None) -> bool:
    """Whether higher is better for ``metric``: ``higher`` when given, else the built-in metric's direction.

    Raises:
        ConfigurationError: The name is empty or too long, it is unknown and ``higher`` is not given, or
            ``higher`` contradicts a built-in metric's direction (``rmse`` with ``higher_is_better=True``).
    """
    if not isinstance(metric, str) or not metric.strip() or len(metric) > MAX_METRIC_NAME:
        raise ConfigurationError(
            f"metric must be a name of 1 to {MAX_METRIC_NAME} characters, got {metric!r}"
        )
    given = parse_direction(higher)
    if given is None:
        return higher_is_better(metric)
    known = METRICS.get(metric)
    if known is not None and known != given:
        way = "higher" if known else "lower"
        raise ConfigurationError(
            f"metric {metric!r} is better when {way}, but higher_is_better={given}: drop higher_is_better "
            "(the built-in direction is used) or name your own metric differently"
        )
    return given


def parse_metrics(value: Mapping[str, Any] | str, where: str) -> dict[str, Any]:
    """A job's metrics as a dict: given as one, or as its rendered text (JSON, or a Python dict's repr).

    Airflow renders ``"{{ ti.xcom_pull(task_ids='train')['metrics'] }}"`` to the dict's ``repr`` unless the
    DAG renders templates as native objects; both arrive here. A value that is the text of a number (a
    template per value, ``{"rmse": "{{ ... }}"}``) becomes that number; ``nan``, ``inf`` and ``-inf`` (how the
    repr writes those floats) are read as those floats.

    Raises:
        ConfigurationError: The value is not a mapping or the text of one, naming ``where``.
    """
    data: Any = value
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except ValueError:
            try:
                data = ast.literal_eval(_with_special_floats(ast.parse(value.strip(), mode="eval")))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                data = None
    if not isinstance(data, Mapping):
        raise ConfigurationError(
            f"{where} must be a dict of named numbers (or its text), got {_short(value)}: pass e.g. "
            "\"{{ ti.xcom_pull(task_ids='train')['metrics'] }}\""
        )
    return {str(k): _number_text(v) for k, v in data.items()}


class _SpecialFloats(ast.NodeTransformer):
    """The names ``nan`` and ``inf`` as the floats a repr spells so (``-inf`` is the minus of ``inf``)."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in ("nan", "inf"):
            return ast.copy_location(ast.Constant(float(node.id)), node)
        return node


def _with_special_floats(tree: ast.Expression) -> ast.AST:
    # A dict's repr writes a NaN metric as the bare name nan, which literal_eval refuses: the whole dict
    # was then refused even when the metric promoted on was a plain number.
    converted: ast.AST = _SpecialFloats().visit(tree)
    return converted


def _number_text(value: Any) -> Any:
    """``value``, or the float it spells when it is text: a dict of templates renders each value to text."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        return value


def metric_value(metrics: Mapping[str, Any], metric: str, where: str, *, fix: str = "") -> float:
    """``metrics[metric]`` as a float.

    Args:
        metrics: Named figures (other entries may be anything).
        metric: The name to look up.
        where: Whose metrics these are, for the error message.
        fix: What to do when the metric is missing, appended to the message.

    Raises:
        ConfigurationError: The metric is missing or not a number; the message names ``where`` and the
            metrics it has.
    """
    if metric not in metrics:
        has = ", ".join(sorted(map(str, metrics))) or "no metrics at all"
        raise ConfigurationError(
            f"{where} has no metric {metric!r} (it has: {has})" + (f": {fix}" if fix else "")
        )
    value = metrics[metric]
    # bool is an int subclass, and True as a metric value is a bug in whatever wrote it
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{where}: metric {metric!r} is {_short(value)}, not a number")
    return float(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:117]}..."


def metric_source(candidate_metrics: object, scoring_command: object) -> str:
    """Where the figures come from: ``job`` (``candidate_metrics`` given), ``command`` or ``holdout``.

    Raises:
        ConfigurationError: Both are given.
    """
    if candidate_metrics is not None and scoring_command is not None:
        raise ConfigurationError(
            "pass candidate_metrics (the job's own metrics) or scoring_command (score both models with your "
            "script), not both"
        )
    if candidate_metrics is not None:
        return JOB
    return COMMAND if scoring_command is not None else HOLDOUT


def check_source(
    source: str,
    *,
    metric: str,
    holdout_path: str | None,
    label_column: str | None,
    label_threshold: float | None,
) -> None:
    """Check that ``source`` has what it needs: a holdout for a command, and a built-in metric for costaware.

    Raises:
        ConfigurationError: A needed argument is missing, the metric is not built in (``holdout``), or
            ``label_threshold`` is set for a metric of regression or multiclass models.
    """
    # "None" or "null" (a param left unset, rendered) reads as left out, as every optional templated value.
    named = f" (holdout_path {holdout_path!r} names nothing)" if isinstance(holdout_path, str) else ""
    if source == COMMAND and not_given(holdout_path):
        raise ConfigurationError(
            "scoring_command scores both models on one holdout: pass holdout_path (the command reads it "
            f"from COSTAWARE_HOLDOUT_PATH){named}"
        )
    if source != HOLDOUT:
        return
    if not_given(holdout_path) or not label_column:
        named = named if not_given(holdout_path) else ""
        raise ConfigurationError(
            "scoring on a holdout needs holdout_path and label_column; or pass candidate_metrics (the job's "
            f"own metrics) or scoring_command (your scoring script){named}"
        )
    spec = builtin_metric(metric)
    if label_threshold is not None and BINARY not in spec.kinds:
        raise ConfigurationError(
            f"label_threshold={label_threshold!r} turns the label into 0/1, but {metric} scores "
            f"{' and '.join(spec.kinds)} models on the label itself: drop label_threshold"
        )


def parse_command(value: object) -> list[str]:
    """A scoring command as an argv list: given as a list of strings, or as the rendered text of one.

    Raises:
        ConfigurationError: Not a list of strings with a program first (a plain command line is refused: it
            would need a shell to split, and a shell would also expand what the values hold).
    """
    data = value
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except ValueError:
            try:
                data = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                data = value
    if (
        not isinstance(data, list | tuple)
        or not data
        or not data[0]
        or not all(isinstance(a, str) for a in data)
    ):
        raise ConfigurationError(
            f"scoring_command must be a non-empty list of strings, got {_short(value)}: write it as a list, "
            "e.g. ['python', 'score.py']"
        )
    return [str(a) for a in data]


def validate_timeout(seconds: object) -> float:
    """``scoring_timeout_seconds`` as a float; it must be a finite number > 0.

    Raises:
        ConfigurationError: It is not.
    """
    try:
        value = float(seconds)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(seconds, bool) or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"scoring_timeout_seconds must be a number > 0, got {seconds!r}")
    return value


def validate_margin(margin: float | str) -> float:
    """The margin as a float; it must be finite and zero or more."""
    try:
        value = float(margin)
    except (TypeError, ValueError):
        raise ConfigurationError(f"margin must be a number >= 0, got {margin!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"margin must be a finite number >= 0, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class PromotionDecision:
    """The outcome of comparing a candidate with the champion: the metric, its direction and both figures."""

    promote: bool
    reason: str
    metric: str
    candidate_metric: float | None
    champion_metric: float | None
    margin: float
    higher_is_better: bool = True

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
    higher_is_better: bool | None = None,
) -> PromotionDecision:
    """Promote the candidate only when its run completed and it is at least as good as the champion.

    "At least as good within the margin": when higher is better the candidate must score
    ``>= champion - margin``; when lower is better ``<= champion + margin``. Equal figures promote. With no
    champion the candidate is promoted; a candidate whose run did not complete, or whose figure is undefined
    (None or NaN), never is.

    Args:
        metric: Name of the metric.
        candidate_metric: The candidate's figure.
        champion_metric: The champion's figure on the same data (None when there is no champion).
        candidate_status: Status of the candidate's training run; only ``"complete"`` can be promoted.
        has_champion: Whether a champion exists.
        margin: How much worse than the champion the candidate may be and still be promoted.
        higher_is_better: The metric's direction; None: the built-in metric's (an unknown name raises).

    Raises:
        ConfigurationError: The metric is unknown and no direction is given, or the margin is negative.
    """
    better_high = metric_direction(metric, higher_is_better)
    margin = validate_margin(margin)

    def decision(promote: bool, reason: str) -> PromotionDecision:
        return PromotionDecision(
            promote, reason, metric, candidate_metric, champion_metric, margin, better_high
        )

    if candidate_status != COMPLETE:
        return decision(
            False,
            f"candidate comes from a run with status {candidate_status!r}, not {COMPLETE!r}: never promoted",
        )
    if candidate_metric is None or not math.isfinite(candidate_metric):
        return decision(False, f"candidate's {metric} is undefined ({candidate_metric}): not promoted")
    if not has_champion:
        return decision(True, f"no champion yet: candidate promoted with {metric} {candidate_metric:.4f}")
    if champion_metric is None or not math.isfinite(champion_metric):
        return decision(
            True,
            f"champion's {metric} is undefined ({champion_metric}): "
            f"candidate promoted with {candidate_metric:.4f}",
        )
    gain = candidate_metric - champion_metric if better_high else champion_metric - candidate_metric
    way = "higher" if better_high else "lower"
    text = f"candidate {metric} {candidate_metric:.4f} vs champion {champion_metric:.4f} ({way} is better)"
    if gain > 0:
        return decision(True, f"{text}: better, promoted")
    if gain == 0:
        return decision(True, f"{text}: equal, promoted")
    # 0.80 - 0.81 is -0.010000000000000009 in floats: a candidate exactly at the margin's boundary must
    # not be refused for the rounding, so the test allows one part in a billion of the figures.
    slack = _MARGIN_REL_TOL * max(abs(candidate_metric), abs(champion_metric), margin)
    if -gain <= margin + slack:
        return decision(True, f"{text}: worse by {-gain:.4f}, within margin {margin:g}, promoted")
    return decision(False, f"{text}: worse by {-gain:.4f} (margin {margin:g}), champion kept")
