"""Reading a batch and its label: each bad file or column is named, with what to do."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest

from costaware.core.errors import ConfigurationError
from costaware.training.data import read_parquet, training_data
from costaware.training.trainers import categorical_columns


def test_a_csv_or_an_empty_file_is_named_as_not_parquet(tmp_path: Path) -> None:
    csv = tmp_path / "2024-03-06.csv"
    pd.DataFrame({"x": [1, 2]}).to_csv(csv, index=False)
    with pytest.raises(
        ConfigurationError, match=rf"{csv} is not a Parquet file .*: the data must be Parquet"
    ):
        read_parquet(str(csv), None)
    empty = tmp_path / "2024-03-07.parquet"
    empty.touch()
    with pytest.raises(ConfigurationError, match=rf"{empty} is empty \(0 bytes\): the data must be Parquet"):
        read_parquet(str(empty), None)
    with pytest.raises(ConfigurationError, match=r"^data '.*/landng' does not exist: check the path"):
        read_parquet(str(tmp_path / "landng"), None)


def test_files_of_a_folder_that_are_not_parquet_are_said_to_be_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pd.DataFrame({"x": [1, 2]}).to_parquet(tmp_path / "2024-03-05.parquet")
    pd.DataFrame({"x": [3]}).to_csv(tmp_path / "2024-03-06.csv", index=False)
    (tmp_path / "_SUCCESS").touch()  # a marker, as Spark writes: not data, not warned about
    with caplog.at_level(logging.WARNING):
        frame, _ = read_parquet(str(tmp_path), None)
    assert len(frame) == 2
    assert "1 file(s) under" in caplog.text and "2024-03-06.csv; convert them to Parquet" in caplog.text
    assert "_SUCCESS" not in caplog.text


def test_a_label_of_text_or_an_empty_batch_says_so() -> None:
    frame = pd.DataFrame({"plan": ["pro", "basic"], "x": [1.0, 2.0]})
    with pytest.raises(
        ConfigurationError, match=r"label column 'plan' has values \['pro', 'basic'\], not 0/1"
    ):
        training_data(frame, ["x"], "plan", None)
    with pytest.raises(ConfigurationError, match="the data has no rows"):
        training_data(frame.iloc[:0], ["x"], "plan", None)
    numbers = pd.DataFrame({"y": [1.0, 2.0], "x": [1.0, 2.0]})
    with pytest.raises(ConfigurationError, match=r"has values \[1\.0, 2\.0\], not 0/1"):
        training_data(numbers, ["x"], "y", None)


def test_a_text_feature_left_out_of_categorical_is_named() -> None:
    features = pd.DataFrame({"plan": ["pro"], "region": ["north"], "charges": ["70.5"]})
    with pytest.raises(
        ConfigurationError, match=r"feature column 'region' holds values that are not numbers"
    ):
        categorical_columns(features, ["plan"])
    # Numbers written as text are still read as numbers; left to find itself, every text column is one.
    assert categorical_columns(features, ["plan", "region"]) == ["plan", "region"]
    assert categorical_columns(features, None) == ["plan", "region", "charges"]


@pytest.mark.parametrize("seed", [1.5, -1, 2**32, "1.5", "abc", "²", True, None])
def test_a_trainer_seed_that_is_no_whole_number_in_range_is_refused_by_name(seed: object) -> None:
    from costaware.training.trainers.sklearn import SGDTrainer

    with pytest.raises(ConfigurationError, match=r"seed must be a whole number .*got"):
        SGDTrainer(seed=seed)  # type: ignore[arg-type]


@pytest.mark.parametrize(("seed", "expected"), [(7, 7), (7.0, 7), ("42", 42), (0, 0)])
def test_a_trainer_seed_given_as_a_whole_number_is_kept(seed: object, expected: int) -> None:
    from costaware.training.trainers.sklearn import HistGradientBoostingTrainer

    assert HistGradientBoostingTrainer(seed=seed).seed == expected  # type: ignore[arg-type]
