"""costaware-run against moto's S3 server on 127.0.0.1: checkpoints, outputs and the result in a bucket."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from costaware_runtime import (
    ContractError,
    StoreError,
    clear_checkpoints,
    download_outputs,
    push,
    read_manifest,
    restore,
    save_bytes,
)
from costaware_runtime import sync as sync_module
from costaware_runtime.errors import StoreStalledError
from costaware_runtime.outputs import upload_outputs
from costaware_runtime.stores import S3Store, Store
from costaware_runtime.sync import STALE_UPLOAD_SECONDS, CheckpointSync
from runtime_jobs import RESUMING_JOB, MakeJob


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    variables = {"COSTAWARE_S3_ENDPOINT_URL": moto_endpoint, "AWS_DEFAULT_REGION": "us-east-1"}
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    yield variables


@pytest.fixture
def bucket(s3_env: dict[str, str]) -> str:
    name = f"runtime-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_env["COSTAWARE_S3_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return name


def keys(bucket: str, prefix: str, endpoint: str) -> list[str]:
    listed = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def test_two_attempts_through_s3(
    make_job: MakeJob, bucket: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    job = make_job(RESUMING_JOB)
    base = f"s3://{bucket}/runs/7"
    uris = {
        "COSTAWARE_CHECKPOINT_URI": f"{base}/checkpoints",
        "COSTAWARE_OUTPUT_URI": f"{base}/model",
        "COSTAWARE_RESULT_URI": f"{base}/result.json",
        "COSTAWARE_RESULT_PATH": "",
        **s3_env,
    }
    endpoint = s3_env["COSTAWARE_S3_ENDPOINT_URL"]

    first = job.run(env=job.env(attempt=1, STOP_AT="2", **uris))
    assert first.returncode == 75, first.stderr
    assert "runs/7/checkpoints/LATEST.json" in keys(bucket, "runs/7/checkpoints/", endpoint)
    assert keys(bucket, "runs/7/model", endpoint) == []

    second = job.run(env=job.env(attempt=2, **uris))
    assert second.returncode == 0, second.stderr
    assert json.loads((job.root / "seen-2.json").read_text())["start"] == 2

    s3 = boto3.client("s3", endpoint_url=endpoint)
    result = json.loads(s3.get_object(Bucket=bucket, Key="runs/7/result.json")["Body"].read())
    assert (result["output_uri"], result["files"], result["checkpoint_step"]) == (f"{base}/model", 2, 5)
    folders = {key.split("/")[3] for key in keys(bucket, "runs/7/checkpoints/step-", endpoint)}
    assert 5 in {int(folder.split("-")[1]) for folder in folders} and len(folders) <= 2

    copy = tmp_path / "copy"
    manifest = download_outputs(f"{base}/model", copy)
    assert (copy / "model.bin").read_bytes() == b"model"
    assert manifest["metrics"] == {"rmse": 3.25, "rows": 100}


def test_push_and_restore_in_process(bucket: str, tmp_path: Path) -> None:
    uri = f"s3://{bucket}/ckpt"
    save_bytes(b"w" * 1000, step=3, directory=tmp_path / "a")
    assert push(tmp_path / "a", uri) == 3
    assert restore(uri, tmp_path / "b") == 3
    assert (tmp_path / "b" / "checkpoint-3" / "state.bin").read_bytes() == b"w" * 1000


def test_a_whole_step_its_writer_did_not_point_latest_at_is_resumed(
    bucket: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    # Killed between its folder's marker and LATEST.json: the resume went back to the step the pointer named.
    s3 = boto3.client("s3", endpoint_url=s3_env["COSTAWARE_S3_ENDPOINT_URL"])
    uri = f"s3://{bucket}/ckpt"
    save_bytes(b"step 100", step=100, directory=tmp_path / "first")
    push(tmp_path / "first", uri)
    pointer = s3.get_object(Bucket=bucket, Key="ckpt/LATEST.json")["Body"].read()
    save_bytes(b"step 200", step=200, directory=tmp_path / "second")
    push(tmp_path / "second", uri)
    s3.put_object(Bucket=bucket, Key="ckpt/LATEST.json", Body=pointer)
    assert restore(uri, tmp_path / "fresh") == 200
    assert json.loads(s3.get_object(Bucket=bucket, Key="ckpt/LATEST.json")["Body"].read())["step"] == 200


def test_clearing_a_location_deletes_its_checkpoints_and_aborts_its_open_uploads(
    bucket: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    s3 = boto3.client("s3", endpoint_url=s3_env["COSTAWARE_S3_ENDPOINT_URL"])
    save_bytes(b"step 100", step=100, directory=tmp_path / "first")
    push(tmp_path / "first", f"s3://{bucket}/ckpt")
    key = "ckpt/step-101-5eed/checkpoint-101/state.bin"  # a push killed mid-file, a second ago
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * 1024)
    assert len(clear_checkpoints(f"s3://{bucket}/ckpt")) == 1
    assert keys(bucket, "ckpt/", s3_env["COSTAWARE_S3_ENDPOINT_URL"]) == []
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert restore(f"s3://{bucket}/ckpt", tmp_path / "fresh") is None


def test_s3_writes_latest_only_if_unchanged_since_read(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # S3's conditional PutObject checks and writes at once: no check of this runtime's own in between.
    def checked_here(*args: object) -> bool:
        raise AssertionError("the store did not check the condition itself")

    monkeypatch.setattr(Store, "put_bytes_if", checked_here)
    store = S3Store(bucket, "ckpt")
    assert store.put_bytes_if("pointer.json", b"step 300", None)
    assert not store.put_bytes_if("pointer.json", b"step 101", None)  # written by another since
    read = store.read_versioned("pointer.json")
    assert read is not None and read[0] == b"step 300"
    store.put_bytes("pointer.json", b"step 301")
    assert not store.put_bytes_if("pointer.json", b"step 101", read[1])
    assert store.read("pointer.json") == b"step 301"
    # Pushes go through it: a leftover writer behind leaves the pointer at the later step.
    leftover = CheckpointSync(f"s3://{bucket}/ckpt", tmp_path / "leftover")
    save_bytes(b"leftover 101", step=101, directory=tmp_path / "leftover")
    save_bytes(b"attempt 300", step=300, directory=tmp_path / "attempt")
    assert push(tmp_path / "attempt", f"s3://{bucket}/ckpt") == 300
    assert leftover.push_changed() == 101
    assert restore(f"s3://{bucket}/ckpt", tmp_path / "resumed") == 300


def test_a_store_without_conditional_writes_checks_then_writes(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An S3-compatible store that answers conditional writes with 501: still no pointer written over a
    # newer one it read, only the window between the check and the write stays.
    from botocore.exceptions import ClientError

    store = S3Store(bucket, "ckpt")
    unconditional = store._client.put_object
    refused: list[dict[str, object]] = []

    def without_conditions(**kwargs: object) -> object:
        if "IfMatch" in kwargs or "IfNoneMatch" in kwargs:
            refused.append(kwargs)
            raise ClientError(
                {"Error": {"Code": "NotImplemented"}, "ResponseMetadata": {"HTTPStatusCode": 501}},
                "PutObject",
            )
        return unconditional(**kwargs)

    monkeypatch.setattr(store._client, "put_object", without_conditions)
    assert store.put_bytes_if("pointer.json", b"step 300", None)
    assert not store.put_bytes_if("pointer.json", b"step 101", None)
    read = store.read_versioned("pointer.json")
    assert read is not None and store.put_bytes_if("pointer.json", b"step 301", read[1])
    assert store.read("pointer.json") == b"step 301" and len(refused) == 1  # asked once, then not again


def unfinished_uploads(bucket: str, endpoint: str) -> dict[str, float]:
    listed = boto3.client("s3", endpoint_url=endpoint).list_multipart_uploads(Bucket=bucket, Prefix="ckpt/")
    return {upload["Key"]: upload["Initiated"].timestamp() for upload in listed.get("Uploads", [])}


def last_activity(s3: Any, bucket: str, key: str, uploads: dict[str, str]) -> float:
    """When the upload of ``key`` began or last received a part, as the store tells (epoch seconds)."""
    (upload,) = (u for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"] if u["Key"] == key)
    parts = s3.list_parts(Bucket=bucket, Key=key, UploadId=uploads[key]).get("Parts", [])
    return max([upload["Initiated"].timestamp(), *(part["LastModified"].timestamp() for part in parts)])


def test_a_live_upload_begun_long_ago_is_not_aborted(
    bucket: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    # A leftover writer still uploading a large file (over 15 minutes at its bandwidth): every other sync
    # aborted its upload for its age, so that writer never completed a push. Its parts keep coming.
    s3 = boto3.client("s3", endpoint_url=s3_env["COSTAWARE_S3_ENDPOINT_URL"])
    key = "ckpt/step-9-b16f11e/checkpoint-9/model.bin"
    begun = time.time()
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    time.sleep(2.0)  # the part comes after the start (S3 times parts to the second)
    s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * 1024)
    # The clock says the upload began over STALE_UPLOAD_SECONDS ago, its part came within that.
    now = begun + 1 + STALE_UPLOAD_SECONDS
    assert CheckpointSync(f"s3://{bucket}/ckpt", tmp_path / "other", clock=lambda: now).restore() is None
    assert [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])] == [key]
    # Once it received nothing for that long, it goes.
    later = last_activity(s3, bucket, key, {key: upload}) + STALE_UPLOAD_SECONDS + 1
    assert CheckpointSync(f"s3://{bucket}/ckpt", tmp_path / "later", clock=lambda: later).restore() is None
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_another_writers_folder_still_uploading_a_large_file_is_not_pruned(
    bucket: str, s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its small file done long ago, its large one uploading for longer than the folder rule: the folder
    # counted as unchanged, another writer deleted the small file, and the live writer then pointed
    # LATEST.json at a folder missing it (every resume failed).
    monkeypatch.setattr(sync_module, "STALE_FOLDER_SECONDS", 1.0)  # the rule, scaled to the test's seconds
    s3 = boto3.client("s3", endpoint_url=s3_env["COSTAWARE_S3_ENDPOINT_URL"])
    small, large = "ckpt/step-5-b16f11e/checkpoint-5/small.bin", "ckpt/step-5-b16f11e/checkpoint-5/large.bin"
    s3.put_object(Bucket=bucket, Key=small, Body=b"small")
    done = s3.head_object(Bucket=bucket, Key=small)["LastModified"].timestamp()
    upload = s3.create_multipart_upload(Bucket=bucket, Key=large)["UploadId"]
    time.sleep(2.0)  # S3 times objects and parts to the second
    s3.upload_part(Bucket=bucket, Key=large, UploadId=upload, PartNumber=1, Body=b"p" * 1024)
    now = last_activity(s3, bucket, large, {large: upload}) + 0.5
    assert now - done > sync_module.STALE_FOLDER_SECONDS  # by its finished files alone, the folder is stale
    save_bytes(b"pusher", step=9, directory=tmp_path / "pusher")
    CheckpointSync(f"s3://{bucket}/ckpt", tmp_path / "pusher", clock=lambda: now).push_changed()
    assert small in keys(bucket, "ckpt/step-5-", s3_env["COSTAWARE_S3_ENDPOINT_URL"])
    # Once nothing in it moved for that long, it goes.
    later = now + sync_module.STALE_FOLDER_SECONDS + STALE_UPLOAD_SECONDS
    save_bytes(b"pusher", step=10, directory=tmp_path / "pusher")
    CheckpointSync(f"s3://{bucket}/ckpt", tmp_path / "pusher", clock=lambda: later).push_changed()
    assert keys(bucket, "ckpt/step-5-", s3_env["COSTAWARE_S3_ENDPOINT_URL"]) == []


def test_unfinished_uploads_a_killed_push_left_are_aborted_at_the_next_start(
    bucket: str, s3_env: dict[str, str], tmp_path: Path
) -> None:
    # A SIGKILL in the middle of a multipart push left the upload open: its parts were billed for good.
    endpoint = s3_env["COSTAWARE_S3_ENDPOINT_URL"]
    s3 = boto3.client("s3", endpoint_url=endpoint)
    uploads: dict[str, str] = {}
    for key in ("ckpt/step-3-5eed/checkpoint-3/state.bin", "elsewhere/step-3/state.bin"):
        uploads[key] = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        s3.upload_part(Bucket=bucket, Key=key, UploadId=uploads[key], PartNumber=1, Body=b"p" * 1024)

    def unfinished() -> list[str]:
        return sorted(upload["Key"] for upload in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []))

    busy = last_activity(s3, bucket, "ckpt/step-3-5eed/checkpoint-3/state.bin", uploads)
    # A minute after its last part: maybe a live writer's (a leftover attempt still pushing), left alone.
    now = busy + 60
    assert CheckpointSync(f"s3://{bucket}/ckpt", tmp_path / "soon", clock=lambda: now).restore() is None
    assert unfinished() == ["ckpt/step-3-5eed/checkpoint-3/state.bin", "elsewhere/step-3/state.bin"]
    # Idle past STALE_UPLOAD_SECONDS: the next start aborts it; another prefix's upload is not its to touch.
    now = busy + STALE_UPLOAD_SECONDS + 1
    assert CheckpointSync(f"s3://{bucket}/ckpt", tmp_path / "later", clock=lambda: now).restore() is None
    assert unfinished() == ["elsewhere/step-3/state.bin"]


def test_a_missing_bucket_fails_the_attempt_unretried(make_job: MakeJob, s3_env: dict[str, str]) -> None:
    # A wrong URI: a retry would pay a start to fail the same way (it exited 74, retried, before).
    job = make_job(RESUMING_JOB)
    done = job.run(env=job.env(COSTAWARE_CHECKPOINT_URI="s3://no-such-bucket-here/ckpt", **s3_env))
    assert done.returncode == 2
    # Checked before the restore, as every store is: named as the bucket that does not exist.
    assert "bucket 'no-such-bucket-here' of s3://no-such-bucket-here/ckpt does not exist: fix the URI" in (
        done.stderr
    )
    assert not (job.root / "seen-1.json").exists()
    with pytest.raises(StoreError, match="check the bucket, the credentials and COSTAWARE_S3_ENDPOINT_URL"):
        restore("s3://no-such-bucket-here/ckpt", job.root / "x")


@pytest.mark.usefixtures("no_aws_credentials")
def test_no_credentials_at_all_fail_the_attempt_unretried(make_job: MakeJob, s3_env: dict[str, str]) -> None:
    # "Unable to locate credentials" exited 74, a passing store failure: two paid attempts, then the task
    # failed the way it was always going to.
    job = make_job(RESUMING_JOB)
    env = {k: v for k, v in job.env(COSTAWARE_CHECKPOINT_URI="s3://team-ck/x", **s3_env).items()
           if not k.startswith("AWS_") or k in ("AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE",
                                                "AWS_CONFIG_FILE", "AWS_EC2_METADATA_DISABLED")}  # fmt: skip
    done = job.run(env=env)
    assert done.returncode == 2, done.stderr
    assert "no AWS credentials to reach s3://team-ck/x: give the job a role" in done.stderr
    assert not (job.root / "seen-1.json").exists()


@pytest.mark.usefixtures("no_aws_credentials")
def test_credential_waits_set_on_the_stores_module_reach_the_s3_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # S3Store lives in a module of its own: a copy of the waits there would ignore the ones set here.
    from costaware_runtime import stores

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("COSTAWARE_S3_ENDPOINT_URL", "http://127.0.0.1:9")  # never asked: no credentials
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # not one an earlier test gave moto's credentials
    waits: list[float] = []
    monkeypatch.setattr(stores, "CREDENTIAL_RETRY_SECONDS", (0.25, 0.5, 0.75))
    monkeypatch.setattr(time, "sleep", waits.append)
    with pytest.raises(
        ContractError, match="no AWS credentials to reach s3://team-ck/x: give the job a role"
    ):
        S3Store("team-ck", "x").check()
    assert waits == [0.25, 0.5, 0.75]


def test_an_output_bucket_that_does_not_exist_fails_before_the_job_runs(
    make_job: MakeJob, bucket: str, s3_env: dict[str, str]
) -> None:
    # Found at the upload instead, the whole training was paid for, and then an attempt more.
    job = make_job(RESUMING_JOB)
    done = job.run(
        env=job.env(
            COSTAWARE_CHECKPOINT_URI=f"s3://{bucket}/ckpt",
            COSTAWARE_OUTPUT_URI="s3://no-such-bucket-here/models",
            **s3_env,
        )
    )
    assert done.returncode == 2, done.stderr
    assert "bucket 'no-such-bucket-here' of s3://no-such-bucket-here/models does not exist: fix the URI" in (
        done.stderr
    )
    assert not (job.root / "seen-1.json").exists()  # the job never started
    assert "Traceback" not in done.stderr


def test_a_download_that_runs_out_of_retries_is_a_store_error(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # boto3's transfer manager raises its own RetriesExceededError (neither botocore's nor a ClientError):
    # it escaped as a traceback and exit 1, a code error, where exit 74 (a sync failure, retried) was meant.
    from boto3.exceptions import RetriesExceededError
    from costaware_runtime.stores import open_store

    store = open_store(f"s3://{bucket}/ckpt")

    def fails(*args: object, **kwargs: object) -> None:
        raise RetriesExceededError(ConnectionResetError("reset by peer"))

    monkeypatch.setattr(store._client, "download_file", fails)  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match=r"could not download s3://.*/ckpt/x: Max Retries Exceeded"):
        store.download("x", tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("size", [1000, 9 << 20], ids=["one request", "multipart"])
def test_an_upload_and_a_download_say_their_bytes_as_they_move(
    bucket: str, tmp_path: Path, size: int
) -> None:
    # The checkpoint watcher tells a slow upload from a hung one by these: with none, a single file that took
    # longer than the bound was given up however steadily it went.
    from costaware_runtime.stores import open_store

    store = open_store(f"s3://{bucket}/ckpt")
    source = tmp_path / "model.pt"
    source.write_bytes(b"m" * size)
    sent: list[int] = []
    with open(source, "rb") as reading:
        store.put("model.pt", reading, progress=sent.append)
    received: list[int] = []
    store.download("model.pt", tmp_path / "back.pt", progress=received.append)
    assert sum(sent) == size and sum(received) == size
    assert (tmp_path / "back.pt").read_bytes() == source.read_bytes()


def deny(client: Any, operation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Have ``client`` answer ``operation`` as S3 does for credentials without its permission."""
    from botocore.exceptions import ClientError

    def denied(**kwargs: object) -> object:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, operation)

    monkeypatch.setattr(client, operation, denied)


def test_without_list_parts_a_killed_push_is_aborted_by_its_start(
    bucket: str, s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    # Credentials without s3:ListMultipartUploadParts (the permissions documented before parts counted):
    # the abort raised at the first upload and aborted nothing, its parts billed for good.
    s3 = boto3.client("s3", endpoint_url=s3_env["COSTAWARE_S3_ENDPOINT_URL"])
    key = "ckpt/step-3-5eed/checkpoint-3/state.bin"
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * 1024)
    begun = unfinished_uploads(bucket, s3_env["COSTAWARE_S3_ENDPOINT_URL"])[key]

    def restore_at(now: float, folder: str) -> None:
        sync = CheckpointSync(f"s3://{bucket}/ckpt", tmp_path / folder, clock=lambda: now)
        deny(sync.store._client, "list_parts", monkeypatch)  # type: ignore[attr-defined]
        assert sync.restore() is None

    # Its parts unseen, it may be a live writer's long upload: left alone within the folder rule's bound.
    restore_at(begun + STALE_UPLOAD_SECONDS + 60, "soon")
    assert list(unfinished_uploads(bucket, s3_env["COSTAWARE_S3_ENDPOINT_URL"])) == [key]
    restore_at(begun + sync_module.STALE_FOLDER_SECONDS + 1, "later")
    assert unfinished_uploads(bucket, s3_env["COSTAWARE_S3_ENDPOINT_URL"]) == {}
    assert "refused s3:ListMultipartUploadParts" in caplog.text


def test_without_list_uploads_another_writers_old_folder_is_still_pruned(
    bucket: str, s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    # Credentials without s3:ListBucketMultipartUploads: every earlier attempt's folder was kept for good
    # (its age unreadable) with a warning at each push. It is dated by its finished files, as before.
    endpoint = s3_env["COSTAWARE_S3_ENDPOINT_URL"]
    s3 = boto3.client("s3", endpoint_url=endpoint)
    old = "ckpt/step-10-b16f11e/checkpoint-10/state.bin"
    s3.put_object(Bucket=bucket, Key=old, Body=b"attempt 1")
    done = s3.head_object(Bucket=bucket, Key=old)["LastModified"].timestamp()

    def push_at(now: float, step: int) -> None:
        save_bytes(b"attempt 2", step=step, directory=tmp_path / "pusher")
        sync = CheckpointSync(f"s3://{bucket}/ckpt", tmp_path / "pusher", clock=lambda: now)
        deny(sync.store._client, "list_multipart_uploads", monkeypatch)  # type: ignore[attr-defined]
        sync.push_changed()

    push_at(done + 60, 20)  # a minute old: maybe a live writer's, kept
    assert old in keys(bucket, "ckpt/step-10-", endpoint)
    push_at(done + sync_module.STALE_FOLDER_SECONDS + 1, 30)
    assert keys(bucket, "ckpt/step-10-", endpoint) == []
    assert "not pruning" not in caplog.text
    assert "refused s3:ListBucketMultipartUploads" in caplog.text


def test_each_page_of_a_listing_and_each_deletion_is_said_as_it_is_answered(
    bucket: str, s3_env: dict[str, str]
) -> None:
    # Listings and deletions move no bytes: a large prefix (a page per 1,000 keys) listed for longer than
    # COSTAWARE_STORE_STALL_SECONDS was given up as a hung store though each page came back in time.
    from concurrent.futures import ThreadPoolExecutor

    client = boto3.client("s3", endpoint_url=s3_env["COSTAWARE_S3_ENDPOINT_URL"])
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda n: client.put_object(Bucket=bucket, Key=f"ckpt/step-1/{n}", Body=b""), range(1001)
            )
        )
    store = S3Store(bucket, "ckpt")
    answered: list[int] = []
    store.request_answered = answered.append
    assert len(store.sizes("step-1/")) == 1001
    assert answered == [0, 0]  # two pages
    answered.clear()
    store.delete_folder("step-1")
    assert answered == [0] * 4  # two pages listed, then two deletions of at most 1,000 keys
    assert store.sizes("step-1/") == {}


@contextlib.contextmanager
def stalling_proxy(endpoint: str, stall_on: bytes) -> Iterator[str]:
    """A TCP proxy to ``endpoint`` (moto's server) that swallows, unanswered, a request holding ``stall_on``.

    What a connection that stalled mid-request looks like to botocore: it waits for its read timeout (60 s),
    then sends the request again. Yields the proxy's URL.
    """
    upstream = urllib.parse.urlsplit(endpoint)
    listener = socket.create_server(("127.0.0.1", 0))
    opened: list[socket.socket] = []

    def pump(source: socket.socket, target: socket.socket, watch: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(1 << 16):
                if watch and stall_on in chunk:
                    while source.recv(1 << 16):
                        pass  # never forwarded, never answered
                    break
                target.sendall(chunk)
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # shut down: the test is over
            try:
                server = socket.create_connection((upstream.hostname, upstream.port))
            except OSError:  # the client sees its connection closed, as from a server gone
                client.close()
                continue
            opened.extend((client, server))
            threading.Thread(target=pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=pump, args=(server, client, False), daemon=True).start()

    serving = threading.Thread(target=serve, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        # close() alone leaves an accept() already waiting in serve() listening on the port: the given-up
        # transfer's retry was then taken in after the test and forwarded, on a connection nothing shut.
        # shutdown() ends that accept; once serve() has returned, every connection it opened is listed.
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        serving.join(10)
        listener.close()
        # A given-up transfer in this process then fails at once, not after botocore's read timeouts (its
        # boto3 threads, joined at exit, held pytest's end for minutes).
        for end in opened:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def test_the_stalling_proxy_stops_listening_when_its_block_ends() -> None:
    # Its port taking connections after the test let a given-up transfer of one test reach moto through it
    # while the next test ran.
    with stalling_proxy("http://127.0.0.1:9", b"never sent") as proxy:
        port = urllib.parse.urlsplit(proxy).port
        assert port is not None
    with socket.socket() as probe:
        probe.settimeout(5)
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # refused: nothing listens there any more


def test_a_stalled_output_upload_to_s3_neither_holds_the_exit_nor_goes_unsaid(
    make_job: MakeJob, bucket: str, s3_env: dict[str, str]
) -> None:
    # Given up after the bound, the upload's boto3 threads (not daemons) still waited on the connection:
    # the interpreter joins them at exit, and the launcher, and its machine, ran on for botocore's read
    # timeout at each of its retries (minutes) after saying it gave up.
    job = make_job(
        "Path(os.environ['COSTAWARE_OUTPUT_DIR'], 'model.bin').write_bytes(b'model')\n"
        "cr.write_metrics({'loss': 0.5})\n"
    )
    output_uri = f"s3://{bucket}/model"
    with stalling_proxy(s3_env["COSTAWARE_S3_ENDPOINT_URL"], f"PUT /{bucket}/model/".encode()) as proxy:
        env = job.env(
            COSTAWARE_OUTPUT_URI=output_uri,
            COSTAWARE_STORE_STALL_SECONDS="1.5",
            COSTAWARE_S3_ENDPOINT_URL=proxy,
        ) | {"AWS_DEFAULT_REGION": "us-east-1"}
        command = [sys.executable, "-m", "costaware_runtime", "--", sys.executable, str(job.script)]
        started = time.monotonic()
        launcher = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, stderr = launcher.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.communicate()
            pytest.fail("the launcher still runs 40 s on, after giving up its stalled upload")
    assert launcher.returncode == 74, stderr
    assert time.monotonic() - started < 30
    assert f"the output upload to {output_uri} has moved nothing for 1.5 s" in stderr
    assert "exit 74, retried" in stderr  # the last words were flushed before the exit
    assert not job.result.exists()


def within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()`` in a thread of its own: its value or error; the test fails if it runs ``seconds``."""
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as e:
            outcome.append((False, e))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        pytest.fail(f"still waiting on the stalled store {seconds:g} s on: no stall bound")
    done, value = outcome[0]
    if not done:
        raise value
    return value


def test_a_stalled_head_bucket_fails_the_check_within_the_bound(
    bucket: str, s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The launcher checks every store before the job starts: a HeadBucket left unanswered waited for
    # botocore's read timeout (60 s) at each of its retries, minutes of a machine billed for nothing.
    with stalling_proxy(s3_env["COSTAWARE_S3_ENDPOINT_URL"], f"HEAD /{bucket}".encode()) as proxy:
        monkeypatch.setenv("COSTAWARE_S3_ENDPOINT_URL", proxy)
        monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "1")
        with pytest.raises(StoreStalledError) as raised:
            within(30, S3Store(bucket, "model").check)
    said = str(raised.value)
    assert f"the check that bucket {bucket!r} of s3://{bucket}/model exists (HeadBucket) has moved" in said
    assert "nothing for 1 s (COSTAWARE_STORE_STALL_SECONDS sets how long)" in said
    assert "check that the store's endpoint answers (COSTAWARE_S3_ENDPOINT_URL or AWS_ENDPOINT_URL" in said


def test_a_stalled_head_bucket_is_exit_74_before_the_job_starts(
    make_job: MakeJob, bucket: str, s3_env: dict[str, str]
) -> None:
    job = make_job("READY.touch()\n")
    with stalling_proxy(s3_env["COSTAWARE_S3_ENDPOINT_URL"], f"HEAD /{bucket}".encode()) as proxy:
        env = job.env(
            COSTAWARE_OUTPUT_URI=f"s3://{bucket}/model",
            COSTAWARE_STORE_STALL_SECONDS="1",
            COSTAWARE_S3_ENDPOINT_URL=proxy,
        ) | {"AWS_DEFAULT_REGION": "us-east-1"}
        started = time.monotonic()
        done = subprocess.run(job.command(), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 74, done.stderr
    assert time.monotonic() - started < 30
    assert "(HeadBucket) has moved nothing for 1 s" in done.stderr
    assert not (job.root / "ready").exists()  # the job never started


@pytest.mark.parametrize("stalled", ["_costaware_manifest.json", "model.bin"])
def test_a_stalled_read_of_the_outputs_is_given_up_naming_the_object(
    stalled: str, bucket: str, s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # read_manifest and download_outputs had no bound: a reader (a deploy, an evaluation) hung for good.
    # The bound also covers what comes before the stalled request (the client's making, the manifest's read
    # in [model.bin]): at 1 s, a loaded machine gave up the manifest's answered read instead.
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    (outputs / "model.bin").write_bytes(b"model")
    uri = f"s3://{bucket}/model"
    upload_outputs(outputs, uri, {"metrics": {"loss": 0.5}})
    with stalling_proxy(s3_env["COSTAWARE_S3_ENDPOINT_URL"], f" /{bucket}/model/{stalled}".encode()) as proxy:
        monkeypatch.setenv("COSTAWARE_S3_ENDPOINT_URL", proxy)
        monkeypatch.setenv("COSTAWARE_STORE_STALL_SECONDS", "3")
        with pytest.raises(StoreStalledError) as raised:
            within(30, lambda: download_outputs(uri, tmp_path / "downloaded"))
        if stalled.startswith("_"):
            with pytest.raises(StoreStalledError, match=r"the read of s3://.*/_costaware_manifest.json has"):
                within(30, lambda: read_manifest(uri))
    monkeypatch.setenv("COSTAWARE_S3_ENDPOINT_URL", s3_env["COSTAWARE_S3_ENDPOINT_URL"])
    what = "read" if stalled.startswith("_") else "download"
    assert f"the {what} of s3://{bucket}/model/{stalled} has moved nothing for 3 s" in str(raised.value)
    assert "(COSTAWARE_STORE_STALL_SECONDS sets how long)" in str(raised.value)
    assert read_manifest(uri) is not None  # the store answers again: nothing was spoilt
