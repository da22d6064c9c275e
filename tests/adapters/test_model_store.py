from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import threading
import uuid
import zipfile
from pathlib import Path

import boto3
import numpy as np
import pytest
from sklearn.linear_model import SGDClassifier

from costaware.adapters.blob_dir import BlobDir
from costaware.adapters.model_formats import dump_skops, load_skops
from costaware.adapters.model_store import ModelStore
from costaware.adapters.model_versions import (
    IncompleteVersionError,
    ModelVersion,
    UntrustedModelError,
    VersionNotFoundError,
    new_version_id,
)
from costaware.core.errors import ConfigurationError


def _model(seed: int = 0) -> SGDClassifier:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(200, 3))
    return SGDClassifier(loss="log_loss", random_state=seed).fit(x, (x[:, 0] > 0).astype(int))


def _meta(status: str = "complete", **kw: object) -> ModelVersion:
    values: dict[str, object] = {
        "version": new_version_id(),
        "trainer": "sklearn-sgd",
        "model_format": "skops",
        "mode": "full",
        "parent": None,
        "data_fingerprint": "f" * 64,
        "features": ("a", "b", "c"),
        "label": "y",
        "status": status,
        "params": {"alpha": 1e-4},
        "metrics": {"rows": 200},
        "cost_usd": "0.000100",
    }
    values.update(kw)
    return ModelVersion(**values)  # type: ignore[arg-type]


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ModelStore:
    if request.param == "local":
        return ModelStore.open(str(tmp_path / "models"))
    endpoint = request.getfixturevalue("moto_endpoint")
    bucket = f"models-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return ModelStore.open(
        f"s3://{bucket}/team/churn",
        endpoint_url=endpoint,
        region="us-east-1",
        access_key="testing",
        secret_key="testing",
    )


def test_versions_metadata_and_champion_switch(store: ModelStore) -> None:
    model = _model()
    first = store.save(_meta(), dump_skops(model))
    second = store.save(
        _meta(mode="warm", parent=first.version, warm_steps_since_full=1), dump_skops(_model(1))
    )
    assert store.champion() is None
    got = store.get(second.version)
    assert (got.mode, got.parent, got.warm_steps_since_full, got.cost_usd) == (
        "warm",
        first.version,
        1,
        "0.000100",
    )
    assert (
        got.features == ("a", "b", "c") and got.data_fingerprint == "f" * 64 and got.params == {"alpha": 1e-4}
    )
    assert [v.version for v in store.versions()] == [first.version, second.version]

    store.set_champion(first.version)
    pointer = store.set_champion(second.version)
    assert pointer.previous == first.version
    assert store.champion() == got
    loaded = load_skops(store.model_bytes(got))
    x = np.random.default_rng(2).normal(size=(5, 3))
    np.testing.assert_allclose(loaded.predict_proba(x), _model(1).predict_proba(x))

    store.record_decision({"promote": True, "candidate_metric": 0.7, "champion_metric": 0.6})
    store.record_decision({"promote": False, "candidate_metric": 0.5, "champion_metric": 0.65})
    assert store.recent_quality() == (0.7, 0.65)


def test_recent_quality_reads_an_error_metric_as_lower_is_better_and_one_metric_only(tmp_path: Path) -> None:
    """A rising RMSE is a quality drop for the drift policy; decisions on another metric are left out."""
    store = ModelStore.open(str(tmp_path / "models"))
    store.record_decision(
        {"promote": True, "metric": "roc_auc", "candidate_metric": 0.7, "champion_metric": None}
    )
    for promote, candidate, champion in ((True, 12.0, 13.0), (False, 14.0, 12.0), (True, 11.5, 12.0)):
        store.record_decision(
            {"promote": promote, "metric": "rmse", "higher_is_better": False,
             "candidate_metric": candidate, "champion_metric": champion}
        )  # fmt: skip
    assert store.recent_quality() == (-12.0, -12.0, -11.5)


def test_unknown_version_and_immutable_versions(store: ModelStore) -> None:
    blob = dump_skops(_model())
    meta = store.save(_meta(), blob)
    with pytest.raises(VersionNotFoundError, match="model version 'v-nope' is not in"):
        store.get("v-nope")
    with pytest.raises(ConfigurationError, match="already exists"):
        store.save(meta, b"other bytes")
    assert store.model_bytes(store.get(meta.version)) == blob


def _metadata_writes(monkeypatch: pytest.MonkeyPatch, *, land: bool) -> None:
    """A store whose metadata writes fail: after the write landed (its reply timed out) or before it."""
    write = BlobDir.write_bytes

    def timing_out(self: BlobDir, name: str, data: bytes) -> None:
        if name.endswith("metadata.json"):
            if land:
                write(self, name, data)
            raise OSError("Read timeout on endpoint URL")
        write(self, name, data)

    monkeypatch.setattr(BlobDir, "write_bytes", timing_out)


def test_a_metadata_write_that_landed_but_timed_out_saves_the_version_once(
    store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The save raised though its version was complete, and the retry that followed stored a second one.
    blob = dump_skops(_model())
    _metadata_writes(monkeypatch, land=True)
    saved = store.save(_meta(), blob)
    assert [v.version for v in store.versions()] == [saved.version]
    assert store.model_bytes(store.get(saved.version)) == blob


def test_a_metadata_write_that_did_not_land_still_fails_the_save(
    store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _metadata_writes(monkeypatch, land=False)
    with pytest.raises(OSError, match="Read timeout"):
        store.save(_meta(), dump_skops(_model()))
    assert store.versions() == []


def test_interrupted_or_half_written_versions_never_become_champion(store: ModelStore) -> None:
    good = store.save(_meta(), dump_skops(_model()))
    store.set_champion(good.version)
    interrupted = store.save(_meta(status="interrupted"), dump_skops(_model(1)))
    with pytest.raises(ConfigurationError, match="status 'interrupted': only complete versions"):
        store.set_champion(interrupted.version)
    half = new_version_id()
    store.blobs.write_bytes(f"versions/{half}/model.skops", dump_skops(_model(2)))  # metadata never written
    with pytest.raises(IncompleteVersionError, match="has no metadata"):
        store.set_champion(half)
    assert store.champion_pointer().version == good.version  # type: ignore[union-attr]
    assert half not in [v.version for v in store.versions()]


def test_changed_model_file_is_refused(store: ModelStore) -> None:
    meta = store.save(_meta(), dump_skops(_model()))
    store.blobs.write_bytes(f"versions/{meta.version}/model.skops", dump_skops(_model(5)))
    with pytest.raises(UntrustedModelError, match="changed after it was saved; it is not loaded"):
        store.model_bytes(store.get(meta.version))


def _tampered_skops() -> bytes:
    """A skops file whose estimator node was rewritten to build ``subprocess.Popen``."""
    original = dump_skops(_model())
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(original)) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "schema.json":
                schema = json.loads(data)
                schema["__module__"], schema["__class__"] = "subprocess", "Popen"
                data = json.dumps(schema).encode()
            dst.writestr(item, data)
    return out.getvalue()


def test_tampered_skops_file_is_refused_even_with_a_matching_checksum(store: ModelStore) -> None:
    tampered = _tampered_skops()
    with pytest.raises(UntrustedModelError, match=r"types nobody trusted: \['subprocess.Popen'\]"):
        load_skops(tampered)
    # An attacker who can write the bucket may also rewrite the checksum: skops' type check still refuses.
    meta = store.save(_meta(), tampered)
    with pytest.raises(UntrustedModelError, match=r"subprocess\.Popen"):
        load_skops(store.model_bytes(store.get(meta.version)), trusted_types=store.trusted_types)
    with pytest.raises(UntrustedModelError, match="not a valid skops file"):
        load_skops(b"not a zip file")


def test_champion_switch_is_atomic_for_concurrent_readers(tmp_path: Path) -> None:
    store = ModelStore.open(str(tmp_path / "models"))
    versions = [store.save(_meta(), dump_skops(_model(i))).version for i in range(3)]
    store.set_champion(versions[0])
    seen: set[str] = set()
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.add(store.champion_pointer().version)  # type: ignore[union-attr]
            except BaseException as e:  # a torn or missing pointer would surface here
                errors.append(e)
                return

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    for i in range(150):
        store.set_champion(versions[i % 3])
    stop.set()
    for t in readers:
        t.join()
    assert errors == []
    assert seen <= set(versions) and len(seen) >= 2
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [
        ".champion.lock",  # what switches lock (no data)
        "champion.json",
        "versions",
    ]  # no temp files


def test_bad_locations_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="store location is empty"):
        BlobDir.from_uri("  ")
    with pytest.raises(ConfigurationError, match="has no bucket"):
        BlobDir.from_uri("s3:///prefix")
    with pytest.raises(ConfigurationError, match=r"version id '\.\./x' is not a plain name"):
        ModelStore.open(str(tmp_path / "m")).save(_meta(version="../x"), b"x")
    assert not (tmp_path / "x").exists()
    # Read and promoted by id too: "../../outside/evil" read metadata from outside the store, and
    # set_champion wrote it into champion.json.
    store = ModelStore.open(str(tmp_path / "m"))
    for reading in (store.get, store.set_champion):
        with pytest.raises(ConfigurationError, match=r"version id '\.\./\.\./outside/evil' is not a plain"):
            reading("../../outside/evil")
    assert store.champion() is None


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        (" ", "{what} is empty: pass a local folder or an s3://bucket/prefix URI"),
        ("None", "{what} 'None' names nothing (what a template renders of a param or XCom that is not set)"),
        ("models", "{what} 'models' is a relative path: give an absolute folder such as "),
        ("s3:///prefix", "{what} 's3:///prefix' has no bucket: use s3://bucket/prefix"),
        ("s3://b/runs#1", "{what} 's3://b/runs#1' holds '#', which ends a URI's path"),
        ("gs:/x", "cannot open {what} 'gs:/x': "),
    ],
)
def test_a_store_refusal_names_the_argument_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uri: str, said: str
) -> None:
    # "store location 'None' names nothing" told no one which of a task's stores to fix.
    from costaware.adapters.checkpoint_store import CheckpointStore

    monkeypatch.chdir(tmp_path)
    for opening, what in ((ModelStore.open, "model_store"), (CheckpointStore.open, "checkpoint_store")):
        with pytest.raises(ConfigurationError) as caught:
            opening(uri)
        assert str(caught.value).startswith(said.format(what=what))
    with pytest.raises(ConfigurationError) as caught:
        BlobDir.from_uri(uri, what="results_path")
    assert str(caught.value).startswith(said.format(what="results_path"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("root", ["/", "//", "/.", "/tmp/..", "file:///"])
def test_a_store_at_the_machines_root_is_refused(root: str) -> None:
    # model_store='/' (what "$UNSET/" gives) wrote /versions/<v>/... and /champion.json.
    from costaware.adapters.checkpoint_store import CheckpointStore

    stores = (
        (ModelStore.open, "model_store", "/srv/ml/models"),
        (CheckpointStore.open, "checkpoint_store", "/srv/ml/checkpoints"),  # was told a models folder
    )
    for opening, what, example in stores:
        with pytest.raises(ConfigurationError) as caught:
            opening(root)
        assert str(caught.value) == (
            f"{what} {root!r} is the root, /, of the whole machine: a store there would make its folders "
            f"directly under /; give a folder of its own such as {example!r} or an s3:// URI"
        )
    assert BlobDir.from_uri("/", create=False).root == ""  # reading a file by its path is not a store


def test_a_store_in_a_home_this_machine_does_not_know_is_refused_not_a_traceback() -> None:
    # Path.expanduser raised a bare RuntimeError ("Could not determine home directory"), naming no store.
    with pytest.raises(ConfigurationError) as caught:
        ModelStore.open("~nosuchuser/models")
    assert str(caught.value).startswith(
        "model_store '~nosuchuser/models' starts with the home folder of user 'nosuchuser', whom this "
        "machine does not know: give an absolute path such as '/srv/ml/models'"
    )


@pytest.mark.parametrize("rendered", ["None", "null", " None "])
@pytest.mark.parametrize("create", [True, False])
def test_a_store_location_a_template_rendered_from_nothing_is_refused_as_naming_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rendered: str, create: bool
) -> None:
    # It was "a relative path: give an absolute folder such as /srv/ml/null", a fix that names nothing too.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as caught:
        BlobDir.from_uri(rendered, create=create)
    assert str(caught.value) == (
        f"store location {rendered!r} names nothing (what a template renders of a param or XCom that is not "
        "set): give a location"
    )
    assert list(tmp_path.iterdir()) == []  # no folder named None or null was made


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
def test_saving_a_model_does_not_import_pytorch_and_leaves_it_importable() -> None:
    # skops' estimator scan walks into sklearn's PyTorch shim: seconds of CPU per process for nothing.
    script = (
        "import sys\n"
        "from sklearn.linear_model import SGDClassifier\n"
        "from costaware.adapters.model_formats import dump_skops, load_skops\n"
        "model = SGDClassifier().fit([[0.0], [1.0]], [0, 1])\n"
        "assert type(load_skops(dump_skops(model))) is SGDClassifier\n"
        "assert 'torch' not in sys.modules, 'saving a model imported PyTorch'\n"
        "import torch\n"
        "assert torch.tensor([1]).item() == 1\n"
        # skops trusts the same estimators as it would have with the shim imported.
        "from sklearn.utils import all_estimators\n"
        "from skops.io._trusted_types import SKLEARN_ESTIMATOR_TYPE_NAMES as trusted\n"
        "from skops.io._utils import get_type_name\n"
        "names = {get_type_name(c) for _, c in all_estimators()}\n"
        "assert set(trusted) == {n for n in names if n.startswith('sklearn.')}, 'estimators went missing'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_decision_on_an_undefined_metric_is_strict_json(tmp_path: Path) -> None:
    # A bare NaN ("candidate_metric": NaN) is no JSON: strict readers (jq, browsers) refused the file.
    store = ModelStore.open(str(tmp_path / "models"))
    name = store.record_decision(
        {"metric": "roc_auc", "candidate_metric": float("nan"), "champion_metric": 0.7, "promote": False}
    )
    raw = (tmp_path / "models" / "decisions" / name).read_text()
    decision = json.loads(raw, parse_constant=lambda token: pytest.fail(f"not strict JSON: {token}"))
    assert decision["candidate_metric"] is None and decision["champion_metric"] == 0.7
    assert store.recent_quality() == (0.7,)


def test_a_version_asked_of_a_store_with_none_points_at_the_location(tmp_path: Path) -> None:
    # "pick one of []" read as if the version were wrong, where the store's path was mistyped.
    from costaware.adapters.model_versions import VersionNotFoundError

    store = ModelStore.open(str(tmp_path / "modles"))
    with pytest.raises(VersionNotFoundError, match="has no version at all: check the model_store location"):
        store.get("v20261130")
