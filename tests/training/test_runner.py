"""``run_retrain``'s choice where the champion cannot be continued on this run's data or label."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from costaware.adapters.model_store import ModelStore
from costaware.adapters.model_versions import UNRECORDED, ModelVersion
from costaware.training.runner import run_retrain
from costaware.training.spec import RetrainJob

#: The chance of a positive label in each category, far apart so a forgotten category shows.
RATES = {"A": 0.1, "B": 0.5, "C": 0.85}


def _batch(path: Path, categories: str, *, seed: int, shares: list[float] | None = None) -> Path:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"x": rng.normal(size=2000), "c": rng.choice(list(categories), 2000, p=shares)})
    frame["y"] = (rng.random(2000) < frame.c.map(RATES)).astype(int)
    # A numeric label too: "delay" > 15 and "delay" > 90 are two different questions about the same rows.
    frame["delay"] = rng.gamma(2.0, 20.0, 2000)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)
    return path


def _job(tmp: Path, new_data: Path | None = None, **fields: Any) -> RetrainJob:
    values: dict[str, Any] = {
        "data_path": str(tmp / "landing"),
        "new_data_path": str(new_data) if new_data else None,
        "label_column": "y",
        "feature_columns": ["x", "c"],
        "model_store": str(tmp / "models"),
        "checkpoint_store": str(tmp / "ckpt"),
        "checkpoint_key": "dag/retrain/run",
        "trainer": "sklearn-hgb",
        "trainer_params": {"max_iter": 20, "warm_iter": 10, "trees_per_step": 10, "learning_rate": 0.3},
        "policy": "always-warm",
        "checkpoint_every_steps": 1,
        **fields,
    }
    return RetrainJob(**values)


def _champion(tmp: Path, job: RetrainJob) -> tuple[ModelStore, str]:
    store = ModelStore.open(job.model_store)
    version = run_retrain(job)["version"]
    store.set_champion(version)
    return store, version


# -- the label threshold ------------------------------------------------------------------------------------


def _threshold_job(tmp: Path, new_data: Path | None, threshold: float | None) -> RetrainJob:
    return _job(
        tmp,
        new_data,
        label_column="delay",
        label_threshold=threshold,
        trainer="sklearn-sgd",
        trainer_params={},
    )


def test_another_label_threshold_retrains_in_full_and_is_stored(tmp_path: Path) -> None:
    _batch(tmp_path / "landing" / "day-001.parquet", "ABC", seed=1)
    store, champion = _champion(tmp_path, _threshold_job(tmp_path, None, 15))
    first = store.get(champion)
    assert first.label_threshold == 15.0
    assert (
        json.loads((tmp_path / "models" / "versions" / champion / "metadata.json").read_text())[
            "label_threshold"
        ]
        == 15.0
    )

    day2 = _batch(tmp_path / "landing" / "day-002.parquet", "ABC", seed=2)
    same = run_retrain(_threshold_job(tmp_path, day2, 15.0))
    assert (same["mode"], same["parent"]) == ("warm", champion)

    result = run_retrain(_threshold_job(tmp_path, day2, 90))
    assert (result["mode"], result["parent"], result["drift"]) == ("full", None, None)
    assert result["reason"] == (
        "champion cannot be continued (its label 'delay' > 15 differs from this run's 'delay' > 90): "
        "full retrain"
    )
    stored = store.get(result["version"])
    assert stored.label_threshold == 90.0
    # The drift reference is this label's: far fewer delays pass 90 minutes than 15.
    assert stored.reference_profile is not None and first.reference_profile is not None
    assert stored.reference_profile["label_rate"] < first.reference_profile["label_rate"] - 0.5


def test_a_threshold_given_or_taken_away_is_another_label(tmp_path: Path) -> None:
    _batch(tmp_path / "landing" / "day-001.parquet", "ABC", seed=1)
    store, _ = _champion(
        tmp_path, _job(tmp_path, label_threshold=0.5, trainer="sklearn-sgd", trainer_params={})
    )
    result = run_retrain(_job(tmp_path, trainer="sklearn-sgd", trainer_params={}))
    assert result["mode"] == "full"
    assert "its label 'y' > 0.5 differs from this run's 'y' as 0/1" in result["reason"]
    assert store.get(result["version"]).label_threshold is None


def test_a_version_stored_without_its_threshold_is_not_continued(tmp_path: Path) -> None:
    _batch(tmp_path / "landing" / "day-001.parquet", "ABC", seed=1)
    store, champion = _champion(tmp_path, _threshold_job(tmp_path, None, 15))
    metadata = tmp_path / "models" / "versions" / champion / "metadata.json"
    older = json.loads(metadata.read_text())
    del older["label_threshold"]  # as an older costaware wrote it
    metadata.write_text(json.dumps(older))
    assert store.get(champion).label_threshold == UNRECORDED
    assert store.champion() is not None  # still readable, still the champion

    day2 = _batch(tmp_path / "landing" / "day-002.parquet", "ABC", seed=2)
    result = run_retrain(_threshold_job(tmp_path, day2, 15))
    assert result["mode"] == "full"
    assert result["reason"] == (
        "champion cannot be continued (it was stored without its label threshold (an older costaware), so "
        "its label may not be this run's 'delay' > 15): full retrain"
    )
    assert store.get(result["version"]).label_threshold == 15.0


@pytest.mark.parametrize("threshold", [None, 15.0])
def test_model_version_keeps_its_threshold_through_a_round_trip(threshold: float | None) -> None:
    meta = ModelVersion(
        version="v1",
        trainer="sklearn-sgd",
        model_format="skops",
        mode="full",
        parent=None,
        data_fingerprint="",
        features=("x",),
        label="delay",
        label_threshold=threshold,
    )
    assert ModelVersion.from_dict(json.loads(json.dumps(meta.to_dict()))) == meta
