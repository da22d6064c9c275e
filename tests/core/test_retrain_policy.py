from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.retrain_policy import (
    AlwaysFullRetrainPolicy,
    AlwaysWarmRetrainPolicy,
    DataProfile,
    DriftReport,
    DriftRetrainPolicy,
    RetrainContext,
    RetrainMode,
    drift_report,
    profile_frame,
    psi,
    quality_drop,
)


@pytest.mark.parametrize(
    ("expected", "actual", "low", "high"),
    [
        ([0.5, 0.5], [0.5, 0.5], 0.0, 0.0),
        ([0.25, 0.25, 0.25, 0.25], [0.24, 0.26, 0.25, 0.25], 0.0, 0.01),
        ([0.5, 0.5], [0.9, 0.1], 0.5, 1.0),
        ([1.0, 0.0], [0.0, 1.0], 10.0, 20.0),  # empty bins: finite thanks to epsilon
    ],
)
def test_psi_table(expected: list[float], actual: list[float], low: float, high: float) -> None:
    value = psi(expected, actual)
    assert math.isfinite(value)
    assert low <= value <= high


def test_psi_rejects_different_bins() -> None:
    with pytest.raises(ConfigurationError, match="same bins, got 2 and 3"):
        psi([0.5, 0.5], [0.3, 0.3, 0.4])


def _frame(n: int, seed: int, shift: float = 0.0, rate: float = 0.3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x": rng.normal(shift, 1.0, n),
            "c": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2]),
            "y": (rng.random(n) < rate).astype(int),
        }
    )


def test_profile_round_trips_json_and_same_data_has_no_drift() -> None:
    reference = profile_frame(_frame(5000, 0), ["x", "c"], label="y")
    again = DataProfile.from_dict(reference.to_dict())
    assert again == reference
    current = profile_frame(_frame(5000, 1), ["x", "c"], label="y", reference=again)
    report = drift_report(again, current)
    assert set(report.psi) == {"x", "c"}
    assert max(report.psi.values()) < 0.02
    assert report.label_shift < 0.03


def test_shifted_feature_and_label_are_measured() -> None:
    reference = profile_frame(_frame(5000, 0), ["x", "c"], label="y")
    shifted = _frame(5000, 1, shift=1.5, rate=0.6)
    shifted.loc[:999, "c"] = "new-category"
    shifted.loc[1000:1099, "x"] = np.nan
    report = drift_report(reference, profile_frame(shifted, ["x", "c"], label="y", reference=reference))
    assert report.psi["x"] > 0.25
    assert report.psi["c"] > 0.1  # the unseen category lands in "other"
    assert report.label_shift == pytest.approx(0.3, abs=0.05)
    assert report.worst_feature()[0] == "x"


def test_profile_names_missing_columns() -> None:
    with pytest.raises(ConfigurationError, match=r"columns \['nope'\] are not in the data"):
        profile_frame(_frame(10, 0), ["x", "nope"])


def _drift(psi_x: float = 0.01, ref: float = 0.3, new: float = 0.31) -> DriftReport:
    return DriftReport(psi={"x": psi_x, "c": 0.0}, label_rate_reference=ref, label_rate_new=new)


POLICY = DriftRetrainPolicy(
    max_feature_psi=0.25, max_label_shift=0.1, max_warm_steps=5, max_quality_drop=0.02
)


@pytest.mark.parametrize(
    ("context", "mode", "reason"),
    [
        (RetrainContext(has_champion=False), RetrainMode.FULL, "no champion yet"),
        (
            RetrainContext(has_champion=True, drift=_drift(), incompatible="other trainer"),
            RetrainMode.FULL,
            "cannot be continued (other trainer)",
        ),
        (RetrainContext(has_champion=True, drift=_drift(), force_full=True), RetrainMode.FULL, "force_full"),
        (
            RetrainContext(has_champion=True, drift=_drift(), warm_steps_since_full=5),
            RetrainMode.FULL,
            "5 warm steps since the last full retrain",
        ),
        (
            RetrainContext(has_champion=True, drift=_drift(psi_x=0.4)),
            RetrainMode.FULL,
            "feature 'x' drifted: PSI 0.400 > 0.25",
        ),
        (
            RetrainContext(has_champion=True, drift=_drift(new=0.45)),
            RetrainMode.FULL,
            "label rate moved from 0.300 to 0.450",
        ),
        (
            RetrainContext(has_champion=True, drift=_drift(), recent_quality=(0.70, 0.71, 0.66)),
            RetrainMode.FULL,
            "dropped by 0.0450",
        ),
        (
            RetrainContext(
                has_champion=True, drift=_drift(), recent_quality=(0.70, 0.71, 0.70), warm_steps_since_full=4
            ),
            RetrainMode.WARM,
            "warm start: worst PSI 0.010 (x), label shift 0.010, 4 warm steps since full",
        ),
        (RetrainContext(has_champion=True), RetrainMode.WARM, "no drift measured"),
    ],
)
def test_drift_policy_decisions(context: RetrainContext, mode: RetrainMode, reason: str) -> None:
    decision = POLICY.decide(context)
    assert decision.mode is mode
    assert reason in decision.reason


def test_always_policies() -> None:
    warm_ctx = RetrainContext(has_champion=True, drift=_drift(psi_x=9.0), warm_steps_since_full=100)
    assert AlwaysWarmRetrainPolicy().decide(warm_ctx).warm
    assert not AlwaysWarmRetrainPolicy().decide(RetrainContext(has_champion=False)).warm
    assert AlwaysFullRetrainPolicy().decide(warm_ctx).mode is RetrainMode.FULL


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_feature_psi": -1}, "max_feature_psi must be a finite number >= 0, got -1"),
        ({"max_label_shift": float("nan")}, "max_label_shift must be a finite number >= 0, got nan"),
        ({"max_warm_steps": 2.5}, "max_warm_steps must be an integer >= 0, got 2.5"),
        ({"quality_window": 1}, "quality_window must be an integer >= 2, got 1"),
    ],
)
def test_drift_policy_rejects_bad_arguments(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        DriftRetrainPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "window", "expected"),
    [
        ((), 5, None),
        ((0.7,), 5, None),
        ((0.7, 0.6), 5, 0.1),
        ((0.1, 0.7, 0.7, 0.7), 3, 0.0),
        ((0.6, 0.8), 2, -0.2),
    ],
)
def test_quality_drop(values: tuple[float, ...], window: int, expected: float | None) -> None:
    result = quality_drop(values, window=window)
    assert result == (None if expected is None else pytest.approx(expected))


def test_policy_modules_do_not_import_airflow_or_pandas() -> None:
    code = (
        "import sys, costaware.core.retrain_policy, costaware.core.promotion; "
        "print(sorted(m for m in ('airflow', 'pandas', 'sklearn', 'boto3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
