"""Object store locations: the pyarrow filesystem's region, URIs a "#" would cut, relative folders."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from costaware.adapters.object_store.clients import S3Options, s3_client, s3_filesystem


def test_the_arrow_filesystem_takes_the_region_boto3_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    # "us-east-1" stood in for a missing region: a worker in eu-west-1 wrote large files and read inputs in
    # another region than its boto3 client did.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert s3_filesystem(S3Options()).region == "eu-west-1"
    assert s3_client(S3Options()).meta.region_name == "eu-west-1"
    assert s3_filesystem(S3Options(region="ap-south-1")).region == "ap-south-1"


@pytest.mark.parametrize(
    ("uri", "meant"),
    [
        ("s3://bucket/runs/2026#1/features", "s3://bucket/runs/2026"),
        ("s3://bucket/data?versionId=abc", "s3://bucket/data"),
        ("file:///data/run#3/x", "file:///data/run"),
    ],
)
def test_a_uri_that_a_hash_or_question_mark_would_cut_is_refused(uri: str, meant: str) -> None:
    # Read as the parent folder, shared with other runs: their caches, models and fingerprints mixed.
    from costaware.adapters.blob_dir import BlobDir
    from costaware.adapters.object_store.location import parse_uri
    from costaware.core.errors import ConfigurationError

    for opening in (parse_uri, BlobDir.from_uri):
        said = f"holds '[#?]', which ends a URI's path: it would name the same place as '{re.escape(meant)}'"
        with pytest.raises(ConfigurationError, match=said):
            opening(uri)
    assert parse_uri("/data/run#3/x").path == "/data/run#3/x"  # a plain folder may hold them


def test_a_relative_store_folder_is_refused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    # Resolved against the task's current folder, which changes between workers and tries.
    from costaware.adapters.blob_dir import BlobDir
    from costaware.core.errors import ConfigurationError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigurationError, match="store location 'models' is a relative path: give an absolute"
    ):
        BlobDir.from_uri("models")
    assert not (tmp_path / "models").exists()
    # Only where a store is written: a file read by hand may be relative (`--spec ./spec.json`).
    (tmp_path / "spec.json").write_text("{}")
    assert BlobDir.from_uri(".", create=False).read_bytes("spec.json") == b"{}"


def test_a_store_location_typed_in_haste_is_read_or_refused_for_what_is_wrong(
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    from costaware.adapters.object_store.location import parse_uri
    from costaware.core.errors import ConfigurationError

    # COSTAWARE_FEATURE_CACHE='~/features' (quoted in .env, so unexpanded) was refused as "a relative path",
    # though the stores (model_store=, BlobDir) read '~' as the worker's home.
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_uri("~/features", what="the feature cache").path == str(tmp_path / "features")
    # One slash was told only that bucket '' is no bucket name.
    one_slash = r"names bucket '', .*: write it as s3://<bucket>/<prefix>, with two slashes"
    with pytest.raises(ConfigurationError, match=one_slash):
        parse_uri("s3:/bucket/prefix", what="the feature cache")
    with pytest.raises(
        ConfigurationError, match=r"names bucket '', which is not a valid S3 bucket name \(3-63 .*'-'\)$"
    ):
        parse_uri("s3://", what="the feature cache")  # two slashes already: no advice about them


def test_a_home_folder_location_is_checked_as_typed_and_an_unknown_user_is_said(
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    from costaware.adapters.object_store.location import parse_uri
    from costaware.core.errors import ConfigurationError

    monkeypatch.setenv("HOME", str(tmp_path))
    # A bare RuntimeError ('Could not determine home directory.'), a traceback.
    unknown = r"'~nosuchuser/features' starts with the home folder of user 'nosuchuser', whom this machine"
    with pytest.raises(ConfigurationError, match=unknown):
        parse_uri("~nosuchuser/features", what="the feature cache")
    # '~/a//b/' was normalised to '<home>/a/b' where '/a//b/' is refused for its empty segment.
    with pytest.raises(ConfigurationError, match=r"'~/a//b/' has an empty, '.' or '..' segment"):
        parse_uri("~/a//b/", what="the feature cache")
    assert parse_uri("~/a/b/", what="the feature cache").path == str(tmp_path / "a" / "b")
    # Three slashes were told only that bucket '' is no bucket name, as one slash was.
    three = r"names bucket '', .*: write it as s3://<bucket>/<prefix>, with two slashes"
    with pytest.raises(ConfigurationError, match=three):
        parse_uri("s3:///bucket/x", what="the feature cache")


def test_a_home_folder_location_in_a_process_without_a_home_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    from costaware.adapters.object_store.location import parse_uri
    from costaware.core.errors import ConfigurationError

    # No HOME and a uid with no passwd entry (OpenShift): '~/features' was told of an unknown user ''.
    monkeypatch.delenv("HOME", raising=False)

    def no_entry(uid: int) -> None:
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with pytest.raises(ConfigurationError, match=r"'~/features' starts with '~', but this process has no"):
        parse_uri("~/features", what="the feature cache")


def test_every_spelling_of_the_machine_root_is_named_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The one test the four store refusals (operators, job checks, the cache CLI, BlobDir) share.
    from costaware.adapters.object_store.location import machine_root_reach

    (tmp_path / "to-root").symlink_to("/")
    (tmp_path / "real").mkdir()
    (tmp_path / "to-real").symlink_to(tmp_path / "real")
    for written in ("/", "//", "///", "/.", "/./", "/..", "/tmp/..", "/srv/ml/../.."):
        assert machine_root_reach(written) == "as written", written
        assert machine_root_reach(written, follow_links=False) == "as written", written
    for linked in (
        str(tmp_path / "to-root"),
        str(tmp_path / "to-root/"),
        str(tmp_path / "to-root/."),
        "/proc/self/root",
    ):
        assert machine_root_reach(linked) == "through a link", linked
        # Another machine's disk (a DAG parsed, run elsewhere) may lead elsewhere: not followed.
        assert machine_root_reach(linked, follow_links=False) is None, linked
    for elsewhere in (
        str(tmp_path),
        str(tmp_path / "to-real"),
        str(tmp_path / "missing/.."),
        "/srv/ml",
        ".",
        "",
    ):
        assert machine_root_reach(elsewhere) is None, elsewhere


def test_the_one_machine_root_refusal_names_the_value_and_what_to_give(tmp_path: Path) -> None:
    # Six callers built this text apart, and drifted; each still names its value, its example, the link.
    from costaware.adapters.object_store.location import refuse_machine_root
    from costaware.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as folder:
        refuse_machine_root("model_store", "file:///", "/")
    assert str(folder.value) == (
        "model_store 'file:///' is the root, /, of the whole machine: its files would be written in folders "
        "made directly under /; give a folder of its own such as '/srv/ml/models' or an s3:// URI"
    )
    with pytest.raises(ConfigurationError) as spec:
        refuse_machine_root("spec_uri", "/spec.json", "/", a_file=True, writes="it would be written in /")
    assert str(spec.value) == (
        "spec_uri '/spec.json' is a file in the root, /, of the whole machine: it would be written in /; "
        "give a file in a folder of its own such as '/srv/ml/jobs/spec.json' or an s3:// URI"
    )
    link = tmp_path / "to-root"
    link.symlink_to("/")
    with pytest.raises(ConfigurationError) as linked:
        refuse_machine_root("data_root", str(link), str(link), example="/data/flights", instead="")
    assert str(linked.value).endswith(
        f"({str(link)!r} is a symbolic link that leads there): its files would be written in folders made "
        "directly under /; give a folder of its own such as '/data/flights'"
    )
    # Not the root, or a link not followed (another machine's disk): nothing is refused.
    refuse_machine_root("model_store", str(tmp_path), str(tmp_path))
    refuse_machine_root("model_store", str(link), str(link), follow_links=False)


@pytest.mark.parametrize("opens", ["parse_uri", "BlobDir", "FeatureStore"])
def test_a_file_uri_naming_a_host_is_refused_not_read_as_a_folder_under_the_root(opens: str) -> None:
    # 'file://data/features' (two slashes) was read as the local folder /features: the cache, or a model
    # store opened directly, was written under the machine's root, where no one looked for it.
    from costaware.adapters.blob_dir import BlobDir
    from costaware.adapters.feature_store import FeatureStore
    from costaware.adapters.object_store.location import parse_uri
    from costaware.core.errors import ConfigurationError

    open_it = {
        "parse_uri": lambda uri: parse_uri(uri, what="store_uri"),
        # create=False: unfixed, it made /features before this test could fail.
        "BlobDir": lambda uri: BlobDir.from_uri(uri, what="store_uri", create=False),
        "FeatureStore": FeatureStore,
    }[opens]
    named = "store_uri" if opens != "FeatureStore" else "store"
    host = (
        f"^{named} 'file://data-nowhere/features' names the host 'data-nowhere': a file URI takes three "
        "slashes, file:///data-nowhere/features for an absolute path"
    )
    with pytest.raises(ConfigurationError, match=host):
        open_it("file://data-nowhere/features")
    assert not Path("/features").exists()
    # localhost is this machine: file://localhost/x is /x.
    assert parse_uri("file://localhost/srv/x", what="store_uri").path == "/srv/x"


def test_a_home_folder_location_with_home_set_empty_is_refused_not_put_under_the_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from costaware.adapters.object_store.location import expand_user, parse_uri
    from costaware.core.errors import ConfigurationError

    # HOME='' (an env entry left blank) made '~/features' the folder /features, directly under the root.
    monkeypatch.setenv("HOME", "")
    empty = r"^store_uri '~/features' starts with '~', but HOME is set and empty here: .* such as '/srv/x'"
    with pytest.raises(ConfigurationError, match=empty):
        expand_user("~/features", what="store_uri", uri="~/features", example="/srv/x")
    with pytest.raises(
        ConfigurationError, match=r"^the feature cache '~' starts with '~', but HOME is set and"
    ):
        parse_uri("~", what="the feature cache")
    assert expand_user("/srv/~x", what="store_uri", uri="/srv/~x") == "/srv/~x"
