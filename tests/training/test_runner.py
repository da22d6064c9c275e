"""``run_retrain``'s choice where the champion cannot be continued on this run's data or label."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from costaware.adapters.model_store import ModelStore
from costaware.adapters.model_versions import UNRECORDED, ModelVersion
from costaware.training.runner import run_retrain
from costaware.training.spec import RetrainJob
from costaware.training.trainers import HistGradientBoostingTrainer, TrainingData

#: The chance of a positive label in each category, far apart so a forgotten category shows.
RATES = {"A": 0.1, "B": 0.5, "C": 0.85}
#: 300 rows of each category, ``x`` as in the data: a model's mean score per category is its rate.
PROBE = pd.DataFrame({"x": np.random.default_rng(99).normal(size=900), "c": np.repeat(list("ABC"), 300)})


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


def _rates(trainer: HistGradientBoostingTrainer, model: Any) -> np.ndarray:
    scores = np.asarray(trainer.predict(model, PROBE))
    return np.array([scores[PROBE.c == c].mean() for c in "ABC"])


def _model(store: ModelStore, version: str) -> tuple[HistGradientBoostingTrainer, Any]:
    trainer = HistGradientBoostingTrainer(trees_per_step=10)  # a warm step: the 10 trees of warm_iter
    return trainer, trainer.load(store.model_bytes(store.get(version)))


# -- sklearn-hgb: the categories a warm batch lacks ---------------------------------------------------------


def _hgb_fitted(categories: str) -> tuple[HistGradientBoostingTrainer, Any]:
    trainer = HistGradientBoostingTrainer(max_iter=10, trees_per_step=10)
    rng = np.random.default_rng(0)
    features = pd.DataFrame({"x": rng.normal(size=500), "c": rng.choice(list(categories), 500)})
    data = TrainingData(features, rng.integers(0, 2, 500))
    return trainer, trainer.fit_step(trainer.init_model(data, champion=None), data, step=0)


@pytest.fixture(scope="module")
def abc_model() -> tuple[HistGradientBoostingTrainer, Any]:
    return _hgb_fitted("ABC")


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (["A", "B", "C"], ""),
        (["C", "B", "A", "A", "D"], ""),  # order, repeats and a new category change nothing
        (["A", "B"], "'c': 'C'"),
        (["B", "C"], "'c': 'A'"),  # a gap before the last would shift B onto A's splits, C onto B's
        (["A", "B", None], "'c': 'C'"),
    ],
)
def test_hgb_names_the_categories_a_batch_lacks(
    abc_model: tuple[HistGradientBoostingTrainer, Any], batch: list[str | None], expected: str
) -> None:
    trainer, model = abc_model
    data = TrainingData(pd.DataFrame({"x": np.zeros(len(batch)), "c": batch}), np.zeros(len(batch), int))
    said = trainer.incompatibility(model, data)
    if not expected:
        assert said == ""
    else:
        assert said == (
            f"the new data lacks categories it learned ({expected}), and sklearn-hgb would forget them in a "
            "warm start"
        )


def test_hgb_counts_a_missing_value_it_learned_as_a_category_and_lists_five_at_most() -> None:
    trainer, model = _hgb_fitted("ABCDEFGH")
    data = TrainingData(pd.DataFrame({"x": [0.0], "c": ["A"]}), np.zeros(1, int))
    assert "('c': 'B', 'C', 'D', 'E', 'F' and 2 more)" in trainer.incompatibility(model, data)
    learned = TrainingData(
        pd.DataFrame({"x": np.zeros(4), "c": ["A", "B", None, None]}), np.array([0, 1, 0, 1])
    )
    model = trainer.fit_step(trainer.init_model(learned, champion=None), learned, step=0)
    batch = TrainingData(pd.DataFrame({"x": [0.0, 0.0], "c": ["A", "B"]}), np.zeros(2, int))
    assert "('c': (missing))" in trainer.incompatibility(model, batch)


@pytest.mark.parametrize(
    ("lacking", "shares"),
    [
        ("C", [0.45, 0.45, 0.1]),  # the last category: counted as missing, so C scored as B (0.52 measured)
        ("A", None),  # one before the last: B read through A's splits and C through B's (A scored 0.96)
    ],
)
def test_hgb_batch_without_a_category_retrains_in_full_and_keeps_what_the_champion_knew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, lacking: str, shares: list[float] | None
) -> None:
    _batch(tmp_path / "landing" / "day-001.parquet", "ABC", seed=1, shares=shares)
    store, champion = _champion(tmp_path, _job(tmp_path))
    before = _rates(*_model(store, champion))
    assert np.abs(before - list(RATES.values())).max() < 0.05  # the champion learned each category's rate

    day2 = _batch(tmp_path / "landing" / "day-002.parquet", "ABC".replace(lacking, ""), seed=2)
    # What a warm start would do to the champion: forget the category the batch lacks.
    trainer, model = _model(store, champion)
    data = pd.read_parquet(day2)
    warm = trainer.fit_step(model, TrainingData(data[["x", "c"]], data.y.to_numpy()), step=0)
    assert np.abs(_rates(trainer, warm) - before).max() > 0.25

    with caplog.at_level(logging.INFO, logger="costaware.training.runner"):
        result = run_retrain(_job(tmp_path, day2))
    assert result["mode"] == "full" and result["parent"] is None
    assert result["reason"] == (
        f"champion cannot be continued (the new data lacks categories it learned ('c': '{lacking}'), and "
        "sklearn-hgb would forget them in a warm start): full retrain"
    )
    assert f"retrain mode: full; reason: {result['reason']}" in caplog.text
    # The full retrain read day one again: every category keeps the champion's rate.
    assert np.abs(_rates(*_model(store, result["version"])) - before).max() < 0.05
    assert store.get(result["version"]).metrics["rows"] == 4000


def test_hgb_batch_with_every_category_still_warm_starts(tmp_path: Path) -> None:
    _batch(tmp_path / "landing" / "day-001.parquet", "ABC", seed=1)
    _, champion = _champion(tmp_path, _job(tmp_path))
    day2 = _batch(tmp_path / "landing" / "day-002.parquet", "ABC", seed=2)
    result = run_retrain(_job(tmp_path, day2))
    assert (result["mode"], result["parent"], result["rows"]) == ("warm", champion, 2000)
    assert result["reason"] == "policy always warm-starts when it can"


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


# -- a save that failed after (or before) its version was complete ------------------------------------------


def _failing_metadata(monkeypatch: pytest.MonkeyPatch, *, land: bool) -> None:
    """Metadata writes fail (after landing: a reply that timed out; or before), and so do its reads."""
    from costaware.adapters.blob_dir import BlobDir

    write, read = BlobDir.write_bytes, BlobDir.read_bytes

    def timing_out(self: BlobDir, name: str, data: bytes) -> None:
        if name.endswith("metadata.json"):
            if land:
                write(self, name, data)
            raise OSError("Read timeout on endpoint URL")
        write(self, name, data)

    def unreadable(self: BlobDir, name: str) -> bytes:
        if name.endswith("metadata.json"):
            raise OSError("Read timeout on endpoint URL")
        return read(self, name)

    monkeypatch.setattr(BlobDir, "write_bytes", timing_out)
    monkeypatch.setattr(BlobDir, "read_bytes", unreadable)


def test_the_next_attempt_finds_the_version_a_failed_save_left_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its metadata landed, the write and its read-back failed: the next attempt trained the last steps
    # again and stored the model a second time.
    from costaware.core.errors import StoreUnavailableError

    _batch(tmp_path / "landing" / "day-001.parquet", "ABC", seed=1)
    job = _job(tmp_path)
    with monkeypatch.context() as failing:
        _failing_metadata(failing, land=True)
        with pytest.raises(StoreUnavailableError, match="Read timeout"):
            run_retrain(job)
    store = ModelStore.open(job.model_store)
    (landed,) = store.versions()
    result = run_retrain(job)
    assert result["version"] == landed.version and result["mode"] == landed.mode
    assert result["steps"] == landed.metrics["steps"] and result["cost_usd"] == landed.cost_usd
    assert [v.version for v in store.versions()] == [landed.version]
    assert not list((tmp_path / "models" / "attempts").iterdir())  # the note goes with the training
    assert not [p for p in (tmp_path / "ckpt").rglob("*") if p.is_file()]  # its checkpoints too
    # A later run of other data trains and stores its own.
    day2 = _batch(tmp_path / "landing" / "day-002.parquet", "ABC", seed=2)
    other = run_retrain(_job(tmp_path, day2))
    assert [v.version for v in store.versions()] == [landed.version, other["version"]]


def test_a_version_whose_save_stopped_before_its_metadata_is_never_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.core.errors import StoreUnavailableError

    _batch(tmp_path / "landing" / "day-001.parquet", "ABC", seed=1)
    job = _job(tmp_path)
    with monkeypatch.context() as failing:
        _failing_metadata(failing, land=False)
        with pytest.raises(StoreUnavailableError, match="Read timeout"):
            run_retrain(job)
    store = ModelStore.open(job.model_store)
    (half_written,) = store.version_ids()
    result = run_retrain(job)
    assert result["version"] != half_written
    assert [v.version for v in store.versions()] == [result["version"]]
