"""Input fingerprints from metadata and content, and reading inputs, on local folders and moto's S3 server."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import boto3
import pandas as pd
import pytest

from costaware.adapters.input_data import fingerprint_uri, read_frame, total_bytes
from costaware.adapters.object_store import S3Options
from costaware.core.errors import ConfigurationError

T0 = 1_700_000_000_123_456_789  # an mtime with sub-second digits, long past (no racy wait)


def options(endpoint: str) -> S3Options:
    return S3Options(access_key="testing", secret_key="testing", region="us-east-1", endpoint_url=endpoint)


def write(path: Path, data: bytes, mtime_ns: int = T0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "flights"
    write(root / "2013-01-01.parquet", b"a" * 100)
    write(root / "part" / "2013-01-02.parquet", b"b" * 50)
    write(root / "_SUCCESS", b"")  # markers and hidden files are not data (pyarrow.dataset skips them too)
    write(root / ".tmp.parquet", b"half")
    return root


def test_local_metadata_fingerprint(folder: Path) -> None:
    first = fingerprint_uri("flights", str(folder))
    assert (first.bytes, first.files, first.mode) == (150, 2, "metadata")
    assert fingerprint_uri("flights", f"file://{folder}").digest == first.digest
    write(folder / "_SUCCESS", b"again", T0 + 5)  # ignored files do not matter
    assert fingerprint_uri("flights", str(folder)).digest == first.digest
    os.utime(folder / "2013-01-01.parquet", ns=(T0 + 1000, T0 + 1000))  # touched: a miss
    assert fingerprint_uri("flights", str(folder)).digest != first.digest


def test_content_mode_sees_same_size_same_mtime_edits(folder: Path) -> None:
    before_meta = fingerprint_uri("f", str(folder), mode="metadata")
    before = fingerprint_uri("f", str(folder), mode="content")
    write(folder / "2013-01-01.parquet", b"c" * 100)  # same size, same mtime: only the bytes tell
    assert fingerprint_uri("f", str(folder), mode="metadata").digest == before_meta.digest
    after = fingerprint_uri("f", str(folder), mode="content")
    assert after.mode == "content" and after.digest != before.digest


def test_whole_second_mtimes_are_not_trusted(tmp_path: Path) -> None:
    coarse = 1_700_000_000 * 10**9  # what FAT/HFS+ or a tar archive leaves
    write(tmp_path / "d" / "x.csv", b"1,2\n", coarse)
    first = fingerprint_uri("d", str(tmp_path / "d"))
    assert first.mode == "content"
    write(tmp_path / "d" / "x.csv", b"3,4\n", coarse)
    assert fingerprint_uri("d", str(tmp_path / "d")).digest != first.digest


def test_fresh_files_wait_out_the_racy_window(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.adapters import input_data

    slept: list[float] = []
    monkeypatch.setattr(input_data.time, "sleep", slept.append)
    fingerprint_uri("old", str(folder))
    assert slept == []  # nothing was written a moment ago
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.parquet").write_bytes(b"x")
    fingerprint_uri("d", str(tmp_path / "d"))
    assert len(slept) == 1 and 0 < slept[0] <= input_data.RACY_SECONDS


@pytest.mark.parametrize(
    ("uri", "mode", "message"),
    [
        ("relative/path", "auto", "is a relative path"),
        ("/no/such/folder", "auto", "does not exist"),
        ("/tmp", "fast", "fingerprint mode 'fast' is unknown"),
        ("/data/../etc", "auto", r"'\.\.' segment"),
        ("s3://bucket/../x", "auto", r"'\.\.' segment"),
    ],
)
def test_bad_inputs(uri: str, mode: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        fingerprint_uri("x", uri, mode=mode)


def test_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="has no files"):
        fingerprint_uri("x", str(tmp_path))


def test_s3_fingerprint_uses_etags_without_download(moto_endpoint: str) -> None:
    opts = options(moto_endpoint)
    client = boto3.client("s3", **opts.boto3_kwargs())
    bucket = f"data-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="flights/a.parquet", Body=b"a" * 10)
    client.put_object(Bucket=bucket, Key="flights/b.parquet", Body=b"b" * 20)
    client.put_object(Bucket=bucket, Key="flights/_SUCCESS", Body=b"")
    prefix = fingerprint_uri("f", f"s3://{bucket}/flights", opts)
    assert (prefix.bytes, prefix.files, prefix.mode) == (30, 2, "metadata")
    single = fingerprint_uri("f", f"s3://{bucket}/flights/a.parquet", opts)
    assert (single.bytes, single.files) == (10, 1)
    assert total_bytes(f"s3://{bucket}/flights", opts) == (30, 2)
    # A mistyped prefix read as 0 bytes (a replica priced at $0); a checkpoint not yet made may be empty.
    with pytest.raises(ConfigurationError, match=f"input 's3://{bucket}/flihgts' holds no object: check"):
        total_bytes(f"s3://{bucket}/flihgts", opts)
    assert total_bytes(f"s3://{bucket}/ckpt", opts, missing_ok=True) == (0, 0)
    client.put_object(Bucket=bucket, Key="flights/a.parquet", Body=b"c" * 10)  # same size, new ETag
    assert fingerprint_uri("f", f"s3://{bucket}/flights", opts).digest != prefix.digest
    assert fingerprint_uri("f", f"s3://{bucket}/flights/a.parquet", opts).digest != single.digest
    content = fingerprint_uri("f", f"s3://{bucket}/flights", opts, mode="content")
    assert content.mode == "content" and content.bytes == 30
    with pytest.raises(ConfigurationError, match="has no files"):
        fingerprint_uri("f", f"s3://{bucket}/nothing-here", opts)


def test_read_frame_parquet_and_csv(tmp_path: Path, moto_endpoint: str) -> None:
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    (tmp_path / "pq").mkdir()
    frame.to_parquet(tmp_path / "pq" / "part-0.parquet", index=False)
    (tmp_path / "csv").mkdir()
    frame.to_csv(tmp_path / "csv" / "part-0.csv", index=False)
    assert read_frame(str(tmp_path / "pq")).equals(frame)
    assert read_frame(str(tmp_path / "csv"))["a"].tolist() == [1, 2, 3]
    opts = options(moto_endpoint)
    client = boto3.client("s3", **opts.boto3_kwargs())
    bucket = f"data-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    client.put_object(
        Bucket=bucket, Key="t/x.parquet", Body=(tmp_path / "pq" / "part-0.parquet").read_bytes()
    )
    assert read_frame(f"s3://{bucket}/t/x.parquet", opts)["b"].tolist() == ["x", "y", "z"]
    assert read_frame(f"s3://{bucket}/t", opts)["b"].tolist() == ["x", "y", "z"]


@pytest.mark.usefixtures("no_aws_credentials")
def test_s3_without_credentials_says_what_to_give(moto_endpoint: str) -> None:
    # The data-locality snippet on a machine without AWS credentials ended in a raw botocore traceback.
    options = S3Options(region="us-east-1", endpoint_url=moto_endpoint)
    with pytest.raises(
        ConfigurationError, match=r"cannot list s3://ml-data/flights: Unable to locate credentials\. Give"
    ):
        total_bytes("s3://ml-data/flights", options)


def test_s3_bucket_that_does_not_exist_is_named(moto_endpoint: str) -> None:
    # A mistyped bucket (the data-locality snippet's 's3://ml-data-eu/...' typed 'ml-data-ue') ended in
    # botocore's NoSuchBucket traceback, and Airflow retried the task for it.
    with pytest.raises(
        ConfigurationError,
        match=r"cannot list s3://ml-data-ue-\w+/flights: bucket 'ml-data-ue-\w+' does not exist: check",
    ):
        total_bytes(f"s3://ml-data-ue-{uuid.uuid4().hex[:8]}/flights/", options(moto_endpoint))
