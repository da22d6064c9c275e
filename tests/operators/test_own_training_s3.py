"""The own-training example's arrays on S3 (moto's server on 127.0.0.1): the DAG writes them there, the
script reads them back. ``Path("s3://b/x")`` had made a local folder named ``s3:`` under the worker's current
one, which no remote job could read."""

from __future__ import annotations

import importlib.util
import uuid
from datetime import date
from pathlib import Path

import boto3
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "own_training" / "train_delay.py"
pytest.importorskip("torch")  # the script imports it; the dev group installs the CPU build


def test_arrays_on_s3_are_written_there_and_read_back_by_the_script(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from costaware.examples import flights

    monkeypatch.setenv("COSTAWARE_S3_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.chdir(tmp_path)
    bucket = f"arrays-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket=bucket)
    flights.land_days(tmp_path / "landing", date(2013, 1, 8))
    written = flights.write_delay_arrays(
        tmp_path / "landing", date(2013, 1, 7), f"s3://{bucket}/delay/run-1/"
    )
    assert written["folder"] == f"s3://{bucket}/delay/run-1"
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="delay/run-1/")["Contents"]
    assert sorted(o["Key"] for o in listed) == ["delay/run-1/holdout.npz", "delay/run-1/train.npz"]
    assert not (tmp_path / "s3:").exists()  # nothing under the current folder

    spec = importlib.util.spec_from_file_location("train_delay", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    local = script.local_data(written["folder"])
    with np.load(local / "train.npz") as data:
        assert len(data["y"]) == int(written["train_rows"])
    local_too = flights.write_delay_arrays(tmp_path / "landing", date(2013, 1, 7), tmp_path / "arrays")
    assert script.local_data(local_too["folder"]) == tmp_path / "arrays"


def test_a_data_folder_without_the_arrays_is_named_with_what_to_give(tmp_path: Path) -> None:
    # np.load's FileNotFoundError traceback named neither --data nor the folder the script wants.
    spec = importlib.util.spec_from_file_location("train_delay", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (tmp_path / "train.npz").write_bytes(b"")
    with pytest.raises(SystemExit, match=r"--data '.*' holds no holdout\.npz: give the folder \(or s3://"):
        script.local_data(str(tmp_path))
    with pytest.raises(SystemExit, match=r"holds no train\.npz or holdout\.npz"):
        script.local_data(str(tmp_path / "nodata"))
