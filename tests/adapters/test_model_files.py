"""Model versions whose model is a folder of files: stored from a staging folder, metadata last."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from remote_support import aws_client

from costaware.adapters.model_store import ModelStore
from costaware.adapters.model_versions import (
    IncompleteVersionError,
    ModelVersion,
    UntrustedModelError,
    new_version_id,
)
from costaware.core.errors import ConfigurationError

STAGING = "_staging/train-0123456789/attempt-1/output"
FILES = {"model.pt": b"weights" * 100, "tokenizer/vocab.txt": b"a\nb\n"}


def stage(store: ModelStore, files: dict[str, bytes] = FILES, *, manifest: bool = True, **lie: Any) -> None:
    """Files as costaware-run uploads them: every file, then the manifest listing them."""
    staged = store.blobs.child(STAGING)
    entries = []
    for path, data in files.items():
        staged.write_bytes(path, data)
        entries.append({"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), **lie})
    if manifest:
        body = {"files": entries, "bytes": sum(len(d) for d in files.values()), "metrics": {"rmse": 3.2}}
        staged.write_bytes("_costaware_manifest.json", json.dumps(body).encode())


def meta() -> ModelVersion:
    return ModelVersion(
        version=new_version_id(),
        trainer="command",
        model_format="files",
        mode="full",
        parent=None,
        data_fingerprint="",
        features=(),
        label="",
        metrics={"rmse": 3.2},
    )


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore.open(str(tmp_path / "models"))


def test_a_staged_folder_becomes_a_complete_files_version(store: ModelStore, tmp_path: Path) -> None:
    stage(store)
    stored = store.save_files(meta(), STAGING)
    got = store.get(stored.version)
    assert got.status == "complete" and got.model_format == "files" and got.metrics == {"rmse": 3.2}
    assert [v.version for v in store.versions()] == [stored.version]
    listing = store.version_files(got)
    assert [(f["path"], f["bytes"]) for f in listing] == [("model.pt", 700), ("tokenizer/vocab.txt", 4)]
    out = store.download_files(got, tmp_path / "out")
    assert {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()} == FILES
    # the listing is the version's model file, checked against the metadata like any model
    assert hashlib.sha256(store.model_bytes(got)).hexdigest() == got.model_sha256


def test_a_files_version_whose_metadata_write_landed_but_timed_out_is_stored_once(
    store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The save raised though the version was complete: the task's retry stored the outputs a second time.
    from costaware.adapters.blob_dir import BlobDir

    stage(store)
    write = BlobDir.write_bytes

    def timing_out(self: BlobDir, name: str, data: bytes) -> None:
        write(self, name, data)
        if name.endswith("metadata.json"):
            raise OSError("Read timeout on endpoint URL")

    monkeypatch.setattr(BlobDir, "write_bytes", timing_out)
    stored = store.save_files(meta(), STAGING)
    assert [v.version for v in store.versions()] == [stored.version]


def test_an_unfinished_upload_is_refused_and_nothing_is_stored(store: ModelStore) -> None:
    stage(store, manifest=False)
    with pytest.raises(
        ConfigurationError, match=r"have no _costaware_manifest\.json: their upload did not finish"
    ):
        store.save_files(meta(), STAGING)
    assert store.version_ids() == []


def test_a_copy_that_does_not_match_the_manifest_leaves_an_incomplete_version(store: ModelStore) -> None:
    stage(store, bytes=3)
    version = meta()
    with pytest.raises(ConfigurationError, match="the job's manifest says 3: the staging folder changed"):
        store.save_files(version, STAGING)
    assert store.versions() == []  # never seen as complete
    with pytest.raises(IncompleteVersionError):
        store.get(version.version)


def test_a_file_changed_after_it_was_stored_is_not_used(store: ModelStore, tmp_path: Path) -> None:
    stage(store)
    stored = store.save_files(meta(), STAGING)
    store.blobs.write_bytes(f"versions/{stored.version}/files/model.pt", b"tampered")
    with pytest.raises(
        UntrustedModelError, match=r"file 'model\.pt' of version .* changed after it was stored"
    ):
        store.download_files(stored, tmp_path / "out")


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "a/../../b"])
def test_a_manifest_cannot_name_files_outside_the_folder(store: ModelStore, path: str) -> None:
    staged = store.blobs.child(STAGING)
    entry = {"path": path, "bytes": 1, "sha256": "0" * 64}
    staged.write_bytes("_costaware_manifest.json", json.dumps({"files": [entry]}).encode())
    with pytest.raises(ConfigurationError, match="which is not a relative path inside it"):
        store.save_files(meta(), STAGING)
    assert store.version_ids() == []


def test_files_versions_on_s3(moto_endpoint: str, tmp_path: Path) -> None:
    bucket = f"files-{uuid.uuid4().hex[:12]}"
    aws_client("s3", moto_endpoint).create_bucket(Bucket=bucket)
    store = ModelStore.open(
        f"s3://{bucket}/models", endpoint_url=moto_endpoint, access_key="testing", secret_key="testing"
    )
    stage(store)
    stored = store.save_files(meta(), STAGING)
    assert store.get(stored.version).status == "complete"
    out = store.download_files(stored, tmp_path / "out")
    assert (out / "tokenizer" / "vocab.txt").read_bytes() == FILES["tokenizer/vocab.txt"]
