"""The contract's parsing, metrics files, store locations and output manifests, in process."""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from costaware_runtime import (
    ContractError,
    JobEnvironment,
    MetricsError,
    StoreError,
    checkpoint_dir,
    download_outputs,
    output_dir,
    read_manifest,
    read_metrics,
    write_metrics,
)
from costaware_runtime.outputs import upload_outputs
from costaware_runtime.stores import LocalStore, S3Store, check_key, open_object, open_store


def test_from_env_reads_every_variable() -> None:
    env = JobEnvironment.from_env(
        {
            "COSTAWARE_CHECKPOINT_DIR": "/ckpt",
            "COSTAWARE_CHECKPOINT_URI": "s3://bucket/run/checkpoints",
            "COSTAWARE_OUTPUT_DIR": "/out",
            "COSTAWARE_OUTPUT_URI": "s3://bucket/run/model",
            "COSTAWARE_METRICS_PATH": "/metrics.json",
            "COSTAWARE_RESULT_URI": "s3://bucket/run/result.json",
            "COSTAWARE_ATTEMPT": "3",
            "COSTAWARE_MARKET": "on_demand",
            "COSTAWARE_GRACE_SECONDS": "50",
            "COSTAWARE_CHECKPOINT_EVERY_SECONDS": "657",
            "COSTAWARE_STORE_STALL_SECONDS": "900",
        }
    )
    assert env == JobEnvironment(
        checkpoint_dir=Path("/ckpt"),
        checkpoint_uri="s3://bucket/run/checkpoints",
        output_dir=Path("/out"),
        output_uri="s3://bucket/run/model",
        metrics_path=Path("/metrics.json"),
        result_uri="s3://bucket/run/result.json",
        attempt=3,
        market="on_demand",
        grace_seconds=50.0,
        checkpoint_every_seconds=657.0,
        store_stall_seconds=900.0,
    )


def test_from_env_defaults() -> None:
    env = JobEnvironment.from_env({})
    assert (env.attempt, env.market, env.grace_seconds) == (1, "local", 110.0)
    assert env.checkpoint_dir is None and env.result_uri is None and env.checkpoint_every_seconds is None
    assert env.store_stall_seconds == 300.0


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"COSTAWARE_ATTEMPT": "0"}, "COSTAWARE_ATTEMPT='0' is not an attempt number: use 1 for the first"),
        ({"COSTAWARE_MARKET": "Spot"}, "COSTAWARE_MARKET='Spot' is not a market: use one of spot, on_demand"),
        (
            {"COSTAWARE_GRACE_SECONDS": "nan"},
            "COSTAWARE_GRACE_SECONDS='nan' is not a grace period, a number of seconds > 0",
        ),
        # SIGKILL right after the notice, with no chance to save: preemption_grace_seconds refuses it too.
        ({"COSTAWARE_GRACE_SECONDS": "0"}, "COSTAWARE_GRACE_SECONDS='0' is not a grace period, a number of"),
        (
            {"COSTAWARE_CHECKPOINT_EVERY_SECONDS": "auto"},
            "COSTAWARE_CHECKPOINT_EVERY_SECONDS='auto' is not a checkpoint interval: give seconds > 0",
        ),
        ({"COSTAWARE_CHECKPOINT_EVERY_SECONDS": "0"}, "COSTAWARE_CHECKPOINT_EVERY_SECONDS='0' is not a"),
        # 0 gave up every push at once; "5m" is no number of seconds.
        (
            {"COSTAWARE_STORE_STALL_SECONDS": "0"},
            "COSTAWARE_STORE_STALL_SECONDS='0' is not a number of seconds > 0: give how long a checkpoint",
        ),
        ({"COSTAWARE_STORE_STALL_SECONDS": "5m"}, "COSTAWARE_STORE_STALL_SECONDS='5m' is not a number of"),
        ({"COSTAWARE_STORE_STALL_SECONDS": "inf"}, "COSTAWARE_STORE_STALL_SECONDS='inf' is not a number of"),
        # Taken, then every bounded transfer crashed on thread.join(bound) with OverflowError.
        (
            {"COSTAWARE_STORE_STALL_SECONDS": "1e10"},
            f"COSTAWARE_STORE_STALL_SECONDS='1e10' is more than the longest wait allowed, "
            f"{threading.TIMEOUT_MAX:.0f} s: give how long a checkpoint push or restore may move nothing",
        ),
        ({"COSTAWARE_STORE_STALL_SECONDS": "1e300"}, "COSTAWARE_STORE_STALL_SECONDS='1e300' is more than"),
        (
            {"COSTAWARE_RESULT_PATH": "/a.json", "COSTAWARE_RESULT_URI": "/b.json"},
            "COSTAWARE_RESULT_PATH='/a.json' and COSTAWARE_RESULT_URI='/b.json' disagree: set only one",
        ),
    ],
)
def test_from_env_names_the_bad_value(variables: dict[str, str], message: str) -> None:
    with pytest.raises(ContractError) as caught:
        JobEnvironment.from_env(variables)
    assert message in str(caught.value)


def test_the_longest_wait_allowed_is_a_stall_bound_taken() -> None:
    from costaware_runtime.contract import parse_store_stall_seconds

    assert parse_store_stall_seconds(repr(threading.TIMEOUT_MAX)) == threading.TIMEOUT_MAX


def test_metrics_round_trip_with_numpy_scalars(tmp_path: Path) -> None:
    path = write_metrics({"rmse": np.float32(0.5), "rows": np.int64(12), "auc": 0.75}, tmp_path / "m.json")
    assert read_metrics(path) == {"rmse": 0.5, "rows": 12.0, "auc": 0.75}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # no temporary file left behind


def test_metric_names_holding_commas_or_equals_signs_are_kept(tmp_path: Path) -> None:
    # COCO's 'AP@IoU=0.50': a job that trained and was paid for must not fail on a metric's name (the ledger
    # and the model's metadata keep metrics as JSON; the task log quotes such a name).
    path = write_metrics({"AP@IoU=0.50": 0.41, "prec@k=5,10": 0.7}, tmp_path / "m.json")
    assert read_metrics(path) == {"AP@IoU=0.50": 0.41, "prec@k=5,10": 0.7}


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"rmse": math.inf}, "metric 'rmse' is inf, not a finite number"),
        # math.isfinite raised OverflowError on it: a traceback, not the metric named.
        ({"rows": 10**400}, "metric 'rows' is an int of 401 digits, not a finite number"),
        ({"rmse": "3.2"}, "metric 'rmse' is '3.2' (str), not a number"),
        ({"": 1.0}, "metric name '' is not a non-empty string"),
        ({}, "holds no metrics"),
        ({"loss": np.array([1.0, 2.0])}, "metric 'loss' is array([1., 2.]) (ndarray), not a number"),
        # AttributeError: 'list' object has no attribute 'items', before.
        ([3.2], "write_metrics takes a mapping of names to numbers, got list [3.2]: write e.g."),
    ],
)
def test_write_metrics_refuses_bad_values_and_writes_nothing(
    tmp_path: Path, metrics: dict[str, object], message: str
) -> None:
    with pytest.raises(MetricsError) as caught:
        write_metrics(metrics, tmp_path / "m.json")  # type: ignore[arg-type]
    assert message in str(caught.value)
    assert not (tmp_path / "m.json").exists()


def test_write_metrics_needs_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COSTAWARE_METRICS_PATH", raising=False)
    with pytest.raises(MetricsError, match="COSTAWARE_METRICS_PATH is not set: run the job under"):
        write_metrics({"rmse": 1.0})


@pytest.mark.parametrize(
    ("variable", "use", "advice"),
    [
        (
            "COSTAWARE_CHECKPOINT_DIR",
            checkpoint_dir,
            "set COSTAWARE_CHECKPOINT_URI='s3://b/run' for the store",
        ),
        ("COSTAWARE_OUTPUT_DIR", output_dir, "set COSTAWARE_OUTPUT_URI='s3://b/run' for the store its files"),
        (
            "COSTAWARE_METRICS_PATH",
            lambda: write_metrics({"rmse": 1.0}),
            "the result it writes at COSTAWARE_RE",
        ),
    ],
)
def test_a_uri_in_a_local_path_variable_is_refused_in_the_job_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, use: Callable[[], object], advice: str
) -> None:
    # A job run without the launcher made a local folder named "s3:" and saved its model there.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, "s3://b/run")
    with pytest.raises(ContractError) as caught:
        use()
    assert f"{variable}='s3://b/run' is a URI, but {variable} is a local " in str(caught.value)
    assert advice in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("given", "advice"),
    [
        # The advice was to set COSTAWARE_CHECKPOINT_URI to the file:// value, replacing the s3:// store.
        (
            {"COSTAWARE_CHECKPOINT_DIR": "file:///data/ck", "COSTAWARE_CHECKPOINT_URI": "s3://b/ck"},
            "local folder on the job's machine: give the path itself, COSTAWARE_CHECKPOINT_DIR='/data/ck'",
        ),
        (
            {"COSTAWARE_OUTPUT_DIR": "file://localhost/data/out"},
            "give the path itself, COSTAWARE_OUTPUT_DIR='/data/out'",
        ),
        (
            {"COSTAWARE_CHECKPOINT_DIR": "s3://b/x", "COSTAWARE_CHECKPOINT_URI": "s3://b/ck"},
            "(COSTAWARE_CHECKPOINT_URI is already set to 's3://b/ck', the store its files go to): leave "
            "COSTAWARE_CHECKPOINT_DIR unset",
        ),
        (
            {"COSTAWARE_OUTPUT_DIR": "s3://b/x"},
            "local folder on the job's machine: set COSTAWARE_OUTPUT_URI='s3://b/x' for the store",
        ),
        # It named COSTAWARE_RESULT_URI, which this job does not set.
        (
            {"COSTAWARE_METRICS_PATH": "s3://b/m.json", "COSTAWARE_RESULT_PATH": "/data/result.json"},
            "the result it writes at COSTAWARE_RESULT_PATH='/data/result.json'): leave COSTAWARE_METRICS",
        ),
        (
            {"COSTAWARE_METRICS_PATH": "file:///data/m.json"},
            "give the path itself, COSTAWARE_METRICS_PATH='/data/m.json'",
        ),
        # '?x=1' was left out of the advice without a word.
        (
            {"COSTAWARE_CHECKPOINT_DIR": "file:///data/ck?x=1"},
            "give the path itself, COSTAWARE_CHECKPOINT_DIR='/data/ck' (a URI's path ends at '?', so "
            "'?x=1' is not part of it; where the folder's name holds it, "
            "COSTAWARE_CHECKPOINT_DIR='/data/ck?x=1')",
        ),
        # One slash, which the stores read as /data/ck, was a local folder named "file:".
        (
            {"COSTAWARE_CHECKPOINT_DIR": "file:/data/ck"},
            "give the path itself, COSTAWARE_CHECKPOINT_DIR='/data/ck'",
        ),
    ],
)
def test_a_uri_in_a_local_path_variable_is_told_what_the_job_meant(
    given: dict[str, str], advice: str
) -> None:
    with pytest.raises(ContractError) as caught:
        JobEnvironment.from_env(given)
    assert advice in str(caught.value)
    if "://" in given.get("COSTAWARE_CHECKPOINT_URI", ""):
        assert "set COSTAWARE_CHECKPOINT_URI" not in str(caught.value)


@pytest.mark.parametrize(
    ("uri", "kind", "root"),
    [
        ("/data/ckpt", LocalStore, "/data/ckpt"),
        ("file:///data/ckpt", LocalStore, "/data/ckpt"),
        ("file://localhost/data/ckpt", LocalStore, "/data/ckpt"),
        ("s3://bucket/runs/7/", S3Store, "s3://bucket/runs/7"),
        ("s3://bucket", S3Store, "s3://bucket"),
    ],
)
def test_open_store(uri: str, kind: type, root: str) -> None:
    store = open_store(uri)
    assert isinstance(store, kind) and store.uri == root


def test_a_local_path_holding_a_scheme_separator_is_a_path() -> None:
    # '://' anywhere made /data/a://b a URI: refused in a *_DIR variable and as a store location.
    found = JobEnvironment.from_env(
        {"COSTAWARE_CHECKPOINT_DIR": "/data/a://b", "COSTAWARE_OUTPUT_DIR": "o/a://x"}
    )
    assert (found.checkpoint_dir, found.output_dir) == (Path("/data/a://b"), Path("o/a://x"))
    assert open_store("/data/a://b").uri == "/data/a:/b"
    with pytest.raises(ContractError, match="'s3://b/x' is a URI"):
        JobEnvironment.from_env({"COSTAWARE_CHECKPOINT_DIR": "s3://b/x"})


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (
            "gs://bucket/x",
            "'gs://bucket/x' is not a supported location: use a local folder, file:// or s3://",
        ),
        ("s3:///x", "'s3:///x' names no bucket: use s3://bucket/prefix"),
        # urlparse cut these off: both named runs/job/, and two runs pruned each other's checkpoints.
        ("s3://bkt/runs/job#1", "'s3://bkt/runs/job#1' holds '#', which ends a URI's path: it would name"),
        ("s3://bkt/runs/job?x=1", "holds '?', which ends a URI's path: it would name the same place as 's3:"),
        ("file:///data/job#", "leave '#' and '?' out of the location"),
        (
            "file://ckpts/run1",  # not /run1
            "'file://ckpts/run1' names the host 'ckpts': a file URI takes three slashes, file:///ckpts/run1",
        ),
        # Read as Path(""), the current folder: checkpoints were pushed (and pruned) there.
        (
            "file://",
            "'file://' names no folder: give an absolute path after three slashes (file:///data/ckpt)",
        ),
        ("file:", "'file:' names no folder"),
        ("file://localhost", "'file://localhost' names no folder"),
        # Opened in whatever folder the job was started in, where open_object refused a relative file: URI.
        (
            "file:ckpt",
            "'file:ckpt' is a relative file: URI: give an absolute path after three slashes "
            "(file:///data/ckpt), or the folder's path itself",
        ),
        ("file:runs/ckpt", "'file:runs/ckpt' is a relative file: URI: give an absolute path"),
        ("file:.", "'file:.' is a relative file: URI: give an absolute path"),
        # What file://$UNSET/ gives: the machine's root was opened as the store.
        (
            "file:///",
            "'file:///' names no folder but the root, / (what file://$UNSET/ gives): give an absolute path",
        ),
        ("file://localhost/", "'file://localhost/' names no folder but the root, /"),
        ("file://ckpts/", "'file://ckpts/' names the host 'ckpts': a file URI takes three slashes"),
        # The root by other names: what "$UNSET/" gives was opened as the store, pushed to and pruned.
        (
            "/",
            "'/' is the root, /, of the whole machine (what \"$UNSET/\" or file://$UNSET/ gives): its files "
            "would be written in folders made directly under / (checkpoint step folders, outputs), and old "
            "ones deleted from it; give a folder of its own such as '/data/ckpt' or an s3:// URI, or leave",
        ),
        ("//", "'//' is the root, /, of the whole machine"),
        ("/.", "'/.' is the root, /, of the whole machine"),
        ("/tmp/..", "'/tmp/..' is the root, /, of the whole machine"),
        ("file:///.", "'file:///.' is the root, /, of the whole machine"),
        ("file:///tmp/..", "'file:///tmp/..' is the root, /, of the whole machine"),
    ],
)
def test_open_store_refuses(uri: str, message: str) -> None:
    with pytest.raises(ContractError) as caught:
        open_store(uri)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("opener", "location", "example"),
    [
        (open_store, ".", "/data/ckpt"),
        (open_store, "./", "/data/ckpt"),
        (open_object, "result.json", "/data/result.json"),
    ],
)
def test_a_relative_path_read_as_the_root_is_named_relative(
    opener: Callable[[str], object], location: str, example: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In a container whose WORKDIR is /, '.' and 'result.json' were blamed on an unset variable ($UNSET/).
    monkeypatch.chdir("/")
    with pytest.raises(ContractError) as caught:
        opener(location)
    assert str(caught.value) == (
        f"{location!r} is a relative path, read against the current folder, here the root, /, of the whole "
        f"machine: give an absolute path ({example})"
    )


def test_a_relative_path_that_climbs_to_the_root_names_the_folder_it_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From /tmp/x/a/b, '../../../..' was said to be read "against the current folder, here the root".
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    up = "/".join([".."] * len(here.parts))
    with pytest.raises(ContractError) as caught:
        open_store(up)
    assert str(caught.value) == (
        f"{up!r} is a relative path that leads from the current folder, {here}, up to the root, /, of the "
        "whole machine: give an absolute path (/data/ckpt)"
    )


def test_open_object_splits_a_file_uri() -> None:
    store, key = open_object("s3://bucket/runs/7/result.json")
    assert (store.uri, key) == ("s3://bucket/runs/7", "result.json")
    store, key = open_object("file:///runs/result.json")
    assert (store.uri, key) == ("/runs", "result.json")
    store, key = open_object("file://localhost/runs/result.json")
    assert (store.uri, key) == ("/runs", "result.json")
    with pytest.raises(ContractError, match=r"'file://runs/result\.json' names the host 'runs'"):
        open_object("file://runs/result.json")
    store, key = open_object("result.json")
    assert (store.uri, key) == (".", "result.json")
    with pytest.raises(ContractError, match=r"'s3://b/r\.json#2' holds '#', which ends a URI's path"):
        open_object("s3://b/r.json#2")
    with pytest.raises(ContractError, match="names a folder, not a file"):
        open_object("s3://bucket/runs/")


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        # Written into whatever folder the job was started in.
        (
            "file:result.json",
            "'file:result.json' is a relative file: URI: give an absolute path after three slashes "
            "(file:///data/result.json), or the file's path itself",
        ),
        ("file:./r.json", "'file:./r.json' is a relative file: URI: give an absolute path"),
        # What file://$UNSET/result.json gives: /result.json written, the root probed.
        (
            "file:///result.json",
            "'file:///result.json' is a file in the root, /, of the whole machine (what "
            'file://$UNSET/result.json or "$UNSET/result.json" gives): its files would be written in folders '
            "made directly under /; give a file in a folder of its own such as '/data/result.json' or an "
            "s3:// URI, or leave the variable unset",
        ),
        ("file://localhost/./result.json", "is a file in the root, /, of the whole machine"),
        ("/result.json", "'/result.json' is a file in the root, /, of the whole machine"),
        ("//r.json", "'//r.json' is a file in the root, /, of the whole machine"),
    ],
)
def test_open_object_refuses(uri: str, message: str) -> None:
    with pytest.raises(ContractError) as caught:
        open_object(uri)
    assert message in str(caught.value)


@pytest.mark.parametrize("file_name", ["", "result.json"], ids=["store", "result"])
def test_a_link_to_the_root_is_refused_in_the_providers_words(file_name: str, tmp_path: Path) -> None:
    # The runtime's refusal blamed an unset variable ("$UNSET/") for a link that leads to /, where the
    # provider's refuse_machine_root names the link; both now say the same after the value.
    from costaware.adapters.object_store.location import refuse_machine_root

    link = tmp_path / "ckpt"
    link.symlink_to("/")
    given = f"{link}/{file_name}" if file_name else str(link)
    with pytest.raises(ContractError) as caught:
        open_object(given) if file_name else open_store(given)
    with pytest.raises(Exception) as provider:
        refuse_machine_root("store", given, str(link), example="/data/ckpt", a_file=bool(file_name))
    ours, theirs = str(caught.value), str(provider.value).removeprefix("store ")
    assert "$UNSET" not in ours
    same = theirs.split("; give")[0]  # the value, the root, how it was reached, what a store would do there
    assert same.endswith(
        f"({str(link)!r} is a symbolic link that leads there): its files would be written in "
        "folders made directly under /"
    )
    assert ours.startswith(same), (ours, theirs)


@pytest.mark.parametrize("given", ["ckpt", "./ckpt", "ckpt/result.json"])
def test_a_relative_link_to_the_root_is_refused_naming_the_link(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Refused as "a relative path that leads ... up to the root: give an absolute path", not naming the link:
    # an absolute path to the same link would be refused too.
    (tmp_path / "ckpt").symlink_to("/")
    monkeypatch.chdir(tmp_path)
    file_name = given.endswith(".json")
    with pytest.raises(ContractError) as caught:
        open_object(given) if file_name else open_store(given)
    said = str(caught.value)
    link = given.removesuffix("/result.json")
    assert said.startswith(
        f"{given!r} is {'a file in ' if file_name else ''}the root, /, of the whole machine"
    )
    assert f"({link!r} is a symbolic link that leads there)" in said
    assert "relative path" not in said


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a", "a\\b"])
def test_check_key_refuses_paths_that_could_escape(key: str) -> None:
    with pytest.raises(ContractError, match="is not a relative file path"):
        check_key(key)


def test_outputs_upload_with_a_manifest_and_download_checked(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "model.bin").write_bytes(b"weights")
    (out / "sub" / "vocab.txt").write_text("a\nb\n")
    remote = tmp_path / "remote"
    assert read_manifest(str(remote)) is None

    summary = upload_outputs(out, str(remote), {"attempt": 2})
    assert (summary.files, summary.bytes) == (2, 11)
    manifest = read_manifest(str(remote))
    assert manifest is not None and manifest["attempt"] == 2
    assert [entry["path"] for entry in manifest["files"]] == ["model.bin", "sub/vocab.txt"]

    copy = tmp_path / "copy"
    download_outputs(str(remote), copy)
    assert (copy / "sub" / "vocab.txt").read_text() == "a\nb\n"

    (remote / "model.bin").write_bytes(b"tampered")
    with pytest.raises(StoreError, match=r"model\.bin has sha256 .*, the manifest says"):
        download_outputs(str(remote), tmp_path / "copy2")


def test_a_new_upload_removes_the_old_manifest_first(tmp_path: Path) -> None:
    out, remote = tmp_path / "out", tmp_path / "remote"
    out.mkdir()
    (out / "a.bin").write_bytes(b"1")
    upload_outputs(out, str(remote))
    (out / "b.bin").mkdir()  # a folder where the store needs a file: the second upload fails midway
    (out / "b.bin" / "c").write_bytes(b"2")
    (remote / "b.bin").write_bytes(b"a file in the way")
    with pytest.raises(StoreError):
        upload_outputs(out, str(remote))
    assert read_manifest(str(remote)) is None  # the old manifest cannot vouch for the half-new folder
    with pytest.raises(StoreError, match=r"_costaware_manifest\.json does not exist: the upload did not"):
        download_outputs(str(remote), tmp_path / "copy")


def test_the_manifest_name_is_reserved(tmp_path: Path) -> None:
    (tmp_path / "_costaware_manifest.json").write_text("{}")
    with pytest.raises(ContractError, match="is reserved for the launcher's manifest: rename it"):
        upload_outputs(tmp_path, str(tmp_path / "remote"))
    assert json.loads((tmp_path / "_costaware_manifest.json").read_text()) == {}


def test_a_write_refusal_words_its_probe_and_reason_one_way() -> None:
    # The launcher's and a folder store's refusals share these words (written out four times before).
    from costaware_runtime.stores import WriteRefusal

    denied = PermissionError(13, "Permission denied")
    left = WriteRefusal("delete", denied, Path("/data/.costaware-write-check"))
    assert left.left_note("its") == "; its write check '/data/.costaware-write-check' stays there"
    assert (
        left.stays("the launcher's")
        == "the launcher's write check '/data/.costaware-write-check' stays there"
    )
    assert left.reason == "Permission denied"
    gone = WriteRefusal("create", OSError("no words"), None)
    assert (gone.left_note("its"), gone.reason) == ("", "no words")


def test_a_write_check_set_on_the_stores_module_reaches_a_folder_stores_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The write check lives in a module of its own: a folder store reading that module's copy would ignore
    # the one set where the provider and the tests set it.
    from costaware_runtime import stores

    checked: list[Path] = []
    monkeypatch.setattr(stores, "check_writes", lambda folder: checked.append(folder))
    LocalStore(tmp_path / "ckpt").check()
    assert checked == [tmp_path]  # the nearest folder that exists


@pytest.mark.parametrize(
    "parser_of",
    [
        "costaware_runtime.launcher",
        "costaware.training.runner",
        "costaware.training.entrypoint",
        "costaware.adapters.compute.local",
    ],
)
def test_a_job_command_line_takes_no_abbreviated_option(parser_of: str) -> None:
    # costaware-run took '--grace 30' for --grace-seconds without a word, as the costaware CLI did.
    import argparse
    import importlib

    module = importlib.import_module(parser_of)
    built: list[argparse.ArgumentParser] = []
    real = argparse.ArgumentParser.__init__

    def record(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        built.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "__init__", record)
        with contextlib.suppress(SystemExit, Exception):
            module.main(["--help"])
    assert built and all(parser.allow_abbrev is False for parser in built)
