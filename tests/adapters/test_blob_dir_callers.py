"""Each place that opens a location by hand names the argument it came from when the location is refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from costaware.core.errors import ConfigurationError
from costaware.operators.batch_quarantine import quarantine, quarantined_copy
from costaware.training.data import read_parquet
from costaware.training.entrypoint import read_result, read_spec, write_spec
from costaware.training.runner import run_retrain
from costaware.training.spec import RetrainJob

NO_BUCKET = "s3:///landing/day2.parquet"  # "s3://" with no bucket: refused before any request


def _retrain(tmp: Path, **paths: Any) -> None:
    run_retrain(
        RetrainJob(
            label_column="y",
            feature_columns=["x"],
            model_store=str(tmp / "models"),
            checkpoint_store=str(tmp / "ckpt"),
            checkpoint_key="dag/retrain/run",
            **paths,
        )
    )


CALLERS: list[tuple[str, Callable[[Path], object], str]] = [
    ("read_parquet", lambda tmp: read_parquet(NO_BUCKET, None), "data_path 's3:///landing/day2.parquet'"),
    (
        "read_parquet from a holdout",
        lambda tmp: read_parquet(NO_BUCKET, None, what="holdout_path"),
        "holdout_path 's3:///landing/day2.parquet'",
    ),
    (
        "the new batch of a retraining",
        lambda tmp: _retrain(tmp, data_path=str(tmp / "landing"), new_data_path=NO_BUCKET),
        "new_data_path 's3:///landing/day2.parquet'",
    ),
    (
        "quarantine's batch",
        lambda tmp: quarantine(NO_BUCKET, str(tmp / "refused"), "k", {}),
        "data_path 's3:///landing/day2.parquet'",
    ),
    (
        "quarantine's folder",
        lambda tmp: quarantine(str(tmp / "day2.parquet"), "s3:///refused", "k", {}),
        "quarantine_path 's3:///refused'",
    ),
    (
        "an earlier try's quarantined copy",
        lambda tmp: quarantined_copy(str(tmp / "day2.parquet"), "s3:///refused", "k", {}),
        "quarantine_path 's3:///refused'",
    ),
    ("read_spec", lambda tmp: read_spec("s3:///spec.json"), "training spec's folder 's3://'"),
    ("read_result", lambda tmp: read_result("s3:///result.json"), "result's folder 's3://'"),
    ("write_spec", lambda tmp: write_spec("s3:///spec.json", {}), "training spec's folder 's3://'"),
]


@pytest.mark.parametrize(("caller", "opening", "said"), CALLERS, ids=[c[0] for c in CALLERS])
def test_a_refused_location_names_its_argument_not_a_store_location(
    tmp_path: Path, caller: str, opening: Callable[[Path], object], said: str
) -> None:
    # "store location 's3:///...' has no bucket" did not say which of a task's paths to fix.
    with pytest.raises(ConfigurationError) as caught:
        opening(tmp_path)
    assert str(caught.value).startswith(f"{said} has no bucket: use s3://bucket/prefix")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # nothing written


def test_a_relative_folder_for_a_written_result_names_the_result() -> None:
    with pytest.raises(
        ConfigurationError, match=r"^result's folder 'jobs/1' is a relative path: give an absolute"
    ):
        write_spec("jobs/1/result.json", {}, what="result")
