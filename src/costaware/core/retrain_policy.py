"""Warm start or full retrain: data profiles, drift, and the policies that choose.

A policy looks at what changed since the champion was fully trained (drift of each feature and of the
label rate), how many warm steps the champion has taken since its last full retrain, and how the champion
did on its recent holdouts. It returns a mode and a reason that the operator logs.

Profiles and drift are pure helpers: the profile of the data a model was fully trained on is stored with the
model (JSON), and a new batch is binned with the same edges so the two can be compared by PSI.
"""

from __future__ import annotations

import abc
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from costaware.core.errors import ConfigurationError, check_keywords, did_you_mean

log = logging.getLogger(__name__)

#: Share used in place of an empty bin, so PSI stays finite when a bin is empty on one side.
PSI_EPSILON = 1e-4


class RetrainMode(str, Enum):
    """How a retrain starts: from the champion (warm) or from nothing (full)."""

    WARM = "warm"
    FULL = "full"


@dataclass(frozen=True, slots=True)
class ColumnProfile:
    """Distribution of one column.

    Numeric columns have inner cut points ``edges`` (from the reference data's quantiles) and
    ``len(edges) + 2`` shares: one per bin, the last one for missing values. Categorical columns have the
    reference's most frequent ``categories`` and ``len(categories) + 2`` shares: one per category, then
    "any other value", then missing.
    """

    kind: str
    shares: tuple[float, ...]
    edges: tuple[float, ...] = ()
    categories: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "shares": list(self.shares),
            "edges": list(self.edges),
            "categories": list(self.categories),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ColumnProfile:
        return cls(
            kind=str(data["kind"]),
            shares=tuple(float(x) for x in data["shares"]),
            edges=tuple(float(x) for x in data.get("edges", ())),
            categories=tuple(str(x) for x in data.get("categories", ())),
        )


@dataclass(frozen=True, slots=True)
class DataProfile:
    """Distributions of a data set's feature columns and its label rate (share of positive labels)."""

    columns: Mapping[str, ColumnProfile]
    rows: int
    label_rate: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "label_rate": self.label_rate,
            "columns": {name: col.to_dict() for name, col in self.columns.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DataProfile:
        rate = data.get("label_rate")
        return cls(
            columns={str(k): ColumnProfile.from_dict(v) for k, v in data["columns"].items()},
            rows=int(data["rows"]),
            label_rate=None if rate is None else float(rate),
        )


@dataclass(frozen=True, slots=True)
class DriftReport:
    """PSI of each compared column and the label rates of the reference and the new batch."""

    psi: Mapping[str, float]
    label_rate_reference: float | None = None
    label_rate_new: float | None = None

    @property
    def label_shift(self) -> float:
        """Absolute change of the positive-label rate (0 when either side has no label)."""
        if self.label_rate_reference is None or self.label_rate_new is None:
            return 0.0
        return abs(self.label_rate_new - self.label_rate_reference)

    def worst_feature(self) -> tuple[str, float] | None:
        """The column with the highest PSI, or None when no column was compared."""
        if not self.psi:
            return None
        name = max(self.psi, key=lambda k: self.psi[k])
        return name, self.psi[name]

    def to_dict(self) -> dict[str, Any]:
        return {
            "psi": dict(self.psi),
            "label_rate_reference": self.label_rate_reference,
            "label_rate_new": self.label_rate_new,
            "label_shift": self.label_shift,
        }


def psi(expected: Sequence[float], actual: Sequence[float], *, epsilon: float = PSI_EPSILON) -> float:
    """Population stability index between two share vectors over the same bins.

    Rule of thumb: below 0.1 no real change, 0.1 to 0.25 moderate, above 0.25 a significant shift.
    """
    if len(expected) != len(actual):
        raise ConfigurationError(
            f"PSI needs shares over the same bins, got {len(expected)} and {len(actual)} bins"
        )
    total = 0.0
    for e, a in zip(expected, actual, strict=True):
        e, a = max(float(e), epsilon), max(float(a), epsilon)
        total += (a - e) * math.log(a / e)
    return total


def _shares(counts: Sequence[int], rows: int) -> tuple[float, ...]:
    return tuple(c / rows for c in counts) if rows else tuple(0.0 for _ in counts)


def profile_column(
    values: Any, *, reference: ColumnProfile | None = None, bins: int = 10, max_categories: int = 50
) -> ColumnProfile:
    """Profile a pandas Series; with ``reference``, bin it the reference's way so the two compare."""
    import numpy as np
    import pandas as pd

    series = pd.Series(values)
    rows = len(series)
    missing = series.isna()
    kind = (
        reference.kind
        if reference
        else (
            "numeric"
            if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
            else "categorical"
        )
    )
    present = series[~missing]
    if kind == "numeric":
        numbers = pd.to_numeric(present, errors="coerce").to_numpy(dtype=float)
        if reference is None:
            qs = np.quantile(numbers, np.linspace(0, 1, bins + 1)[1:-1]) if len(numbers) else np.array([])
            edges = tuple(float(x) for x in np.unique(qs))
        else:
            edges = reference.edges
        counts = np.bincount(
            np.searchsorted(np.asarray(edges), numbers, side="right"), minlength=len(edges) + 1
        )
        return ColumnProfile(
            kind="numeric", edges=edges, shares=_shares([*counts.tolist(), int(missing.sum())], rows)
        )
    labels = present.astype(str)
    if reference is None:
        categories = tuple(str(c) for c in labels.value_counts().index[:max_categories])
    else:
        categories = reference.categories
    freq = labels.value_counts()
    category_counts = [int(freq.get(c, 0)) for c in categories]
    other = len(labels) - sum(category_counts)
    return ColumnProfile(
        kind="categorical",
        categories=categories,
        shares=_shares([*category_counts, other, int(missing.sum())], rows),
    )


def profile_frame(
    frame: Any,
    columns: Sequence[str],
    *,
    label: str | None = None,
    reference: DataProfile | None = None,
    bins: int = 10,
) -> DataProfile:
    """Profile ``columns`` of a pandas DataFrame (and the positive rate of a 0/1 ``label``).

    Args:
        frame: The data.
        columns: Feature columns to profile; each must be in ``frame``.
        label: A 0/1 (or boolean) label column; its mean is the label rate.
        reference: Bin each column the way this profile did (columns it lacks are profiled afresh).
        bins: Quantile bins per numeric column when there is no reference.
    """
    missing = [c for c in [*columns, *([label] if label else [])] if c not in frame.columns]
    if missing:
        raise ConfigurationError(
            f"columns {missing} are not in the data (it has {list(frame.columns)}): fix the column names"
        )
    profiles = {
        name: profile_column(
            frame[name], reference=reference.columns.get(name) if reference else None, bins=bins
        )
        for name in columns
    }
    rate = None
    if label is not None and len(frame):
        rate = float(frame[label].astype(float).mean())
    return DataProfile(columns=profiles, rows=len(frame), label_rate=rate)


def drift_report(
    reference: DataProfile, current: DataProfile, *, columns: Sequence[str] | None = None
) -> DriftReport:
    """PSI per column present in both profiles (or only ``columns``), and the two label rates.

    ``current`` must have been profiled with ``reference`` as its reference, so the bins line up.
    """
    names = [
        c
        for c in (columns if columns is not None else reference.columns)
        if c in reference.columns and c in current.columns
    ]
    return DriftReport(
        psi={name: psi(reference.columns[name].shares, current.columns[name].shares) for name in names},
        label_rate_reference=reference.label_rate,
        label_rate_new=current.label_rate,
    )


@dataclass(frozen=True, slots=True)
class RetrainContext:
    """What a policy knows when it chooses.

    Attributes:
        has_champion: Whether a champion model exists to continue from.
        drift: Drift between the champion's full-retrain data and the new batch (None: not measured).
        warm_steps_since_full: Warm retrains in the champion's lineage since its last full retrain.
        recent_quality: The production model's holdout metric on recent days, oldest first, higher is better.
        force_full: A person asked for a full retrain (e.g. a DAG run param).
        incompatible: Non-empty when the champion cannot be continued, saying why (another trainer, other
            features, another label or label threshold, a batch its trainer cannot continue it on).
    """

    has_champion: bool
    drift: DriftReport | None = None
    warm_steps_since_full: int = 0
    recent_quality: tuple[float, ...] = field(default_factory=tuple)
    force_full: bool = False
    incompatible: str = ""


@dataclass(frozen=True, slots=True)
class RetrainDecision:
    """A policy's choice and the reason it gives."""

    mode: RetrainMode
    reason: str

    @property
    def warm(self) -> bool:
        return self.mode is RetrainMode.WARM


def _full(reason: str) -> RetrainDecision:
    return RetrainDecision(RetrainMode.FULL, reason)


class RetrainPolicy(abc.ABC):
    """Chooses between a warm start from the champion and a full retrain."""

    @abc.abstractmethod
    def decide(self, context: RetrainContext) -> RetrainDecision:
        """Return the mode for this retrain and the reason, given ``context``."""
        raise NotImplementedError


def required_full_retrain(context: RetrainContext) -> RetrainDecision | None:
    """The full retrain every policy must do (no champion, forced, incompatible champion), else None."""
    if not context.has_champion:
        return _full("no champion yet: full retrain")
    if context.incompatible:
        return _full(f"champion cannot be continued ({context.incompatible}): full retrain")
    if context.force_full:
        return _full("full retrain requested (force_full)")
    return None


class AlwaysFullRetrainPolicy(RetrainPolicy):
    """Retrains from scratch every time: the baseline that warm starts are measured against."""

    def decide(self, context: RetrainContext) -> RetrainDecision:
        return required_full_retrain(context) or _full("policy always retrains in full")


class AlwaysWarmRetrainPolicy(RetrainPolicy):
    """Warm-starts whenever a compatible champion exists, whatever the drift."""

    def decide(self, context: RetrainContext) -> RetrainDecision:
        return required_full_retrain(context) or RetrainDecision(
            RetrainMode.WARM, "policy always warm-starts when it can"
        )


class DriftRetrainPolicy(RetrainPolicy):
    """Warm-starts unless the data drifted, the lineage is long, or the champion's quality dropped.

    Args:
        max_feature_psi: Full retrain when any compared feature's PSI exceeds this (0.25: significant shift).
        max_label_shift: Full retrain when the positive-label rate moved by more than this (absolute).
        max_warm_steps: Full retrain after this many warm retrains in a row.
        max_quality_drop: Full retrain when the latest holdout metric is lower than the mean of the earlier
            ones in the window by more than this.
        quality_window: How many recent holdout metrics to look at (at least 2).
    """

    def __init__(
        self,
        *,
        max_feature_psi: float = 0.25,
        max_label_shift: float = 0.10,
        max_warm_steps: int = 14,
        max_quality_drop: float = 0.02,
        quality_window: int = 5,
    ) -> None:
        for name, value in (
            ("max_feature_psi", max_feature_psi),
            ("max_label_shift", max_label_shift),
            ("max_quality_drop", max_quality_drop),
        ):
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigurationError(f"{name} must be a finite number >= 0, got {value!r}")
        if not isinstance(max_warm_steps, int) or max_warm_steps < 0:
            raise ConfigurationError(f"max_warm_steps must be an integer >= 0, got {max_warm_steps!r}")
        if not isinstance(quality_window, int) or quality_window < 2:
            raise ConfigurationError(f"quality_window must be an integer >= 2, got {quality_window!r}")
        self.max_feature_psi = float(max_feature_psi)
        self.max_label_shift = float(max_label_shift)
        self.max_warm_steps = max_warm_steps
        self.max_quality_drop = float(max_quality_drop)
        self.quality_window = quality_window

    def decide(self, context: RetrainContext) -> RetrainDecision:
        required = required_full_retrain(context)
        if required:
            return required
        if context.warm_steps_since_full >= self.max_warm_steps:
            return _full(
                f"{context.warm_steps_since_full} warm steps since the last full retrain "
                f"(max_warm_steps={self.max_warm_steps}): full retrain"
            )
        drift = context.drift
        worst = drift.worst_feature() if drift else None
        if worst and worst[1] > self.max_feature_psi:
            return _full(
                f"feature {worst[0]!r} drifted: PSI {worst[1]:.3f} > {self.max_feature_psi:g}: full retrain"
            )
        if drift and drift.label_shift > self.max_label_shift:
            return _full(
                f"label rate moved from {drift.label_rate_reference:.3f} to {drift.label_rate_new:.3f} "
                f"(shift {drift.label_shift:.3f} > {self.max_label_shift:g}): full retrain"
            )
        drop = quality_drop(context.recent_quality, window=self.quality_window)
        if drop is not None and drop > self.max_quality_drop:
            return _full(
                f"champion's holdout metric dropped by {drop:.4f} (> {self.max_quality_drop:g}) "
                f"against its recent mean: full retrain"
            )
        worst_text = f"worst PSI {worst[1]:.3f} ({worst[0]})" if worst else "no drift measured"
        shift_text = f", label shift {drift.label_shift:.3f}" if drift else ""
        return RetrainDecision(
            RetrainMode.WARM,
            f"warm start: {worst_text}{shift_text}, {context.warm_steps_since_full} warm steps since full",
        )


def quality_drop(recent: Sequence[float], *, window: int) -> float | None:
    """How far the latest metric is below the mean of the earlier ones in the last ``window`` (or None)."""
    values = [float(v) for v in recent[-window:] if v is not None and math.isfinite(float(v))]
    if len(values) < 2:
        return None
    earlier = values[:-1]
    return sum(earlier) / len(earlier) - values[-1]


#: The retrain policies by the name an operator's ``policy=`` takes.
POLICIES: dict[str, type[RetrainPolicy]] = {
    "drift": DriftRetrainPolicy,
    "always-full": AlwaysFullRetrainPolicy,
    "always-warm": AlwaysWarmRetrainPolicy,
}


def make_policy(policy: str | RetrainPolicy | None, params: Mapping[str, Any] | None = None) -> RetrainPolicy:
    """A policy instance from a name (``drift``, ``always-full``, ``always-warm``) and parameters.

    Raises:
        ConfigurationError: an unknown name or parameter (each with the closest known one), or a bad value.
    """
    if isinstance(policy, RetrainPolicy):
        if params:
            raise ConfigurationError("policy_params only apply when the policy is given by name")
        return policy
    name = policy or "drift"
    if name not in POLICIES:
        raise ConfigurationError(
            f"unknown retrain policy {name!r}{did_you_mean(name, POLICIES)}: use one of {', '.join(POLICIES)}"
        )
    given = dict(params or {})
    check_keywords(POLICIES[name], given, field="policy_params", of=f"retrain policy {name!r}")
    return POLICIES[name](**given)
