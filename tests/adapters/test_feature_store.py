"""The feature cache on a local folder and on moto's S3 server: commit, reuse, crashes, races, corruption."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pandas as pd
import pytest

from costaware.adapters.feature_manifest import Computed, Manifest, to_parquet
from costaware.adapters.feature_store import FeatureStore
from costaware.adapters.input_data import read_frame
from costaware.adapters.object_store import S3Options
from costaware.core.cache_policy import MaxTotalSizePolicy
from costaware.core.errors import ConfigurationError, CorruptEntryError

KEY = "0123456789abcdef0123456789abcdef"


def s3_options(endpoint: str) -> S3Options:
    return S3Options(access_key="testing", secret_key="testing", region="us-east-1", endpoint_url=endpoint)


def new_bucket(endpoint: str, region: str = "us-east-1") -> str:
    name = f"cache-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", **s3_options(endpoint).boto3_kwargs())
    extra = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    client.create_bucket(Bucket=name, **extra)
    return name


@pytest.fixture(params=["local", "s3"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, S3Options | None]:
    if request.param == "local":
        return str(tmp_path / "cache"), None
    endpoint = request.getfixturevalue("moto_endpoint")
    return f"s3://{new_bucket(endpoint)}/features/v1", s3_options(endpoint)


def template(key: str = KEY) -> Manifest:
    return Manifest(
        key=key,
        data_path="",
        data_hash="",
        schema=[],
        rows=0,
        bytes=0,
        created_at="",
        producer={"dag_id": "retrain", "run_id": "run-1", "task_id": "features"},
    )


def computer(calls: list[int], rows: int = 100, seconds: float = 0.0) -> Any:
    def compute() -> Computed:
        calls.append(1)
        time.sleep(seconds)
        frame = pd.DataFrame({"route": ["JFK-LAX"] * rows, "delay": range(rows)})
        parquet, schema, n = to_parquet(frame)
        return Computed(parquet, schema, n, 12.5, Decimal("0.010000"))

    return compute


def test_miss_then_hit(store_spec: tuple[str, S3Options | None]) -> None:
    root, options = store_spec
    store = FeatureStore(root, s3=options)
    calls: list[int] = []
    assert store.lookup(KEY) is None
    first = store.get_or_compute(KEY, computer(calls), template())
    second = FeatureStore(root, s3=options).get_or_compute(KEY, computer(calls), template())
    assert (first.hit, second.hit, len(calls)) == (False, True, 1)
    assert first.entry.uri == second.entry.uri
    assert first.entry.uri.startswith(root.rstrip("/") + f"/entries/{KEY}/")
    manifest = second.entry.manifest
    assert (manifest.rows, manifest.cost_usd, manifest.compute_seconds) == (100, "0.010000", 12.5)
    assert [c["name"] for c in manifest.schema] == ["route", "delay"]
    assert manifest.schema[1]["type"] == "int64"
    assert manifest.producer_label == "retrain/run-1"
    assert store.verify(KEY).manifest == manifest  # the data's content hash matches
    frame = read_frame(first.entry.uri, options)  # through pyarrow's filesystem
    assert len(frame) == 100 and list(frame.columns) == ["route", "delay"]
    assert [e.key for e in store.entries()] == [KEY]


# -- bad keys and roots ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["../" + KEY, "/" + KEY, KEY + "/../x", "..", KEY.upper()])
def test_bad_keys_write_nothing(store_spec: tuple[str, S3Options | None], key: str) -> None:
    root, options = store_spec
    store = FeatureStore(root, s3=options)
    calls: list[int] = []
    with pytest.raises(ConfigurationError, match="is not a key"):
        store.get_or_compute(key, computer(calls), template(key))
    with pytest.raises(ConfigurationError, match="is not a key"):
        store.lookup(key)
    assert calls == []
    assert store.store.files("") == []


@pytest.mark.parametrize(
    ("root", "message"),
    [
        ("s3://my-bucket/cache/../other", r"'\.\.' segment"),
        ("s3://my-bucket//abs", "is absolute"),
        ("relative/cache", "is a relative path"),
        # Told "use a relative path", which the line above refuses.
        (
            "/tmp/cache/../../etc",
            r"'\.\.' segment, .*: write the absolute path without them, e.g. '/data/flights'",
        ),
        ("s3://My_Bucket/x", "not a valid S3 bucket name"),
        ("gs://bucket/x", "has scheme 'gs'"),
    ],
)
def test_bad_roots_are_rejected(root: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        FeatureStore(root)


@pytest.mark.parametrize("spelling", ["/", "file:///", "link"])
def test_a_store_at_the_machines_root_is_refused_before_anything_is_written(
    spelling: str, tmp_path: Path
) -> None:
    # A library user calling FeatureStore with '/' (or a symbolic link to it) had each entry's folder,
    # its staging and its leases made directly under /; the operator and the CLI refused it, this did not.
    root = str(tmp_path / "cache") if spelling == "link" else spelling
    if spelling == "link":
        Path(root).symlink_to("/")
    link = f" ({root!r} is a symbolic link that leads there)" if spelling == "link" else ""
    before = sorted(Path("/").iterdir())
    with pytest.raises(ConfigurationError) as refused:
        # Refused when opened: a test that computed an entry here would write under / where it fails.
        FeatureStore(root)
    assert str(refused.value) == (
        f"feature cache {root!r} is the root, /, of the whole machine{link}: each entry's folder would be "
        "made directly under /; give a folder of its own such as '/srv/ml/features' or an s3:// URI"
    )
    assert sorted(Path("/").iterdir()) == before


def test_a_store_at_the_machines_root_is_refused_before_the_store_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store was opened first and checked after: whatever opening does (an S3 client, a folder made
    # by a store of another kind) happened for a root that is refused.
    import costaware.adapters.feature_store as feature_store
    from costaware.adapters.object_store import open_store

    opened: list[object] = []

    def recording_open_store(*args: object, **kwargs: object) -> object:
        opened.append(args[0])
        return open_store(*args, **kwargs)  # type: ignore[arg-type]  # the real store, opened

    monkeypatch.setattr(feature_store, "open_store", recording_open_store)
    with pytest.raises(ConfigurationError, match="is the root, /, of the whole machine"):
        FeatureStore("/")
    assert opened == []
    FeatureStore(str(tmp_path / "cache"))  # a folder of its own: opened
    assert len(opened) == 1


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process may not create files in.

    A mode of 0o555 stops any user but root; root is stopped by the kernel under /sys, where no process
    may make a folder.
    """
    if os.geteuid() == 0:
        return Path("/sys/costaware-feature-cache")
    folder = tmp_path / "read-only-cache"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def test_a_cache_folder_that_refuses_writes_names_it_and_the_setting(tmp_path: Path) -> None:
    # A read-only mount (or a folder of another user) failed the task with a bare "OSError: [Errno 30]
    # Read-only file system: '.../locks'", saying nothing of the feature cache or how to choose another.
    folder = unwritable_folder(tmp_path)
    calls: list[int] = []
    with pytest.raises(ConfigurationError) as raised:
        FeatureStore(str(folder)).get_or_compute(KEY, computer(calls), template())
    message = str(raised.value)
    assert f"feature cache {folder}: cannot write to the store folder {folder} (" in message
    assert f"make it writable for the user the tasks run as (uid {os.geteuid()})" in message
    assert "store_uri= or COSTAWARE_FEATURE_CACHE names the folder" in message
    assert calls == []  # refused before the transform spent anything


def test_relative_paths_cannot_leave_the_root(tmp_path: Path) -> None:
    store = FeatureStore(str(tmp_path / "cache"))
    for rel in ("../outside", "/etc/passwd", "entries/../../x"):
        with pytest.raises(ConfigurationError, match="relative path"):
            store.store.write(rel, b"x")
    assert not (tmp_path / "outside").exists() and list(tmp_path.iterdir()) == []


# -- corruption ------------------------------------------------------------------------------------


def _corrupt_manifest(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "rows_changed", "other_key", "data_missing", "escape_path"],
)
def test_corrupt_entry_is_detected_and_recomputed(
    store_spec: tuple[str, S3Options | None], damage: str
) -> None:
    root, options = store_spec
    store = FeatureStore(root, s3=options)
    calls: list[int] = []
    first = store.get_or_compute(KEY, computer(calls), template())
    rel = f"entries/{KEY}/manifest.json"
    raw = store.store.read(rel)
    assert raw is not None
    body = json.loads(raw[0])
    if damage == "garbage":
        bad = b"\x00not json"
    elif damage == "truncated":
        bad = raw[0][: len(raw[0]) // 2]
    elif damage == "rows_changed":
        bad = _corrupt_manifest({**body, "rows": 5})  # checksum no longer matches
    elif damage == "other_key":
        bad = _corrupt_manifest({**body, "key": "f" * 32})
    elif damage == "escape_path":
        bad = _corrupt_manifest({**body, "data_path": "../../etc/passwd"})
    else:
        bad = raw[0]
        store.store.delete(first.entry.manifest.data_path)
    store.store.write(rel, bad)
    with pytest.raises(CorruptEntryError, match=f"cache entry {KEY}"):
        store.lookup(KEY)
    assert [e.key for e in store.entries()] == []  # listings skip it
    again = store.get_or_compute(KEY, computer(calls), template())
    assert (again.hit, again.recovered_corrupt, len(calls)) == (False, True, 2)
    assert store.lookup(KEY) is not None and store.verify(KEY).manifest.rows == 100


def test_data_changed_behind_the_manifest_fails_verify(tmp_path: Path) -> None:
    store = FeatureStore(str(tmp_path / "cache"))
    entry = store.get_or_compute(KEY, computer([]), template()).entry
    path = Path(entry.uri)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # same size, other bytes
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEntryError, match="does not match its manifest's hash"):
        store.verify(KEY)


# -- a writer killed mid-write ----------------------------------------------------------------------

KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from datetime import timedelta
    from decimal import Decimal
    from pathlib import Path
    import pandas as pd
    from costaware.adapters.feature_manifest import Computed, Manifest, to_parquet
    from costaware.adapters.feature_store import FeatureStore
    from costaware.adapters.object_store import S3Options

    root, endpoint, ready, key = sys.argv[1:5]
    options = S3Options("testing", "testing", None, "us-east-1", endpoint) if endpoint != "-" else None
    store = FeatureStore(root, s3=options, lease=timedelta(minutes=30))
    backend = type(store.store)
    real_write = backend.write

    def write_half_then_hang(self, rel, data):
        if rel.endswith("data.parquet"):
            real_write(self, rel, data[: len(data) // 2])  # a torn file where the writer left it
            Path(ready).write_text("writing")
            time.sleep(600)
        return real_write(self, rel, data)

    backend.write = write_half_then_hang

    def compute():
        frame = pd.DataFrame({"x": range(50_000)})
        parquet, schema, rows = to_parquet(frame)
        return Computed(parquet, schema, rows, 1.0, Decimal("0.5"))

    manifest = Manifest(key=key, data_path="", data_hash="", schema=[], rows=0, bytes=0, created_at="")
    store.get_or_compute(key, compute, manifest)
    """
)


def test_writer_killed_mid_write_leaves_no_entry(
    store_spec: tuple[str, S3Options | None], tmp_path: Path
) -> None:
    root, options = store_spec
    ready = tmp_path / "ready"
    endpoint = options.endpoint_url if options else "-"
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, root, str(endpoint), str(ready), KEY])
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert child.poll() is None, "the writer died before it started writing"
        assert time.monotonic() < deadline, "the writer never started writing"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    store = FeatureStore(root, s3=options)
    assert store.lookup(KEY) is None
    assert store.entries() == []
    leftovers = [f.path for f in store.store.files("")]
    assert any(p.endswith("data.parquet") for p in leftovers)  # the torn file is there, but is no entry
    assert f"locks/{KEY}.json" in leftovers  # and its lease, held by a dead process
    calls: list[int] = []
    outcome = store.get_or_compute(KEY, computer(calls), template())  # the dead writer's lease is broken
    assert (outcome.hit, len(calls)) == (False, 1)
    assert store.verify(KEY).manifest.rows == 100
    assert store.collect_garbage(older_than=timedelta(0)) == 1  # the torn file
    assert [f.path for f in store.store.files("") if f.path.endswith("data.parquet")] == [
        outcome.entry.manifest.data_path
    ]


def test_expired_lease_of_another_host_is_broken(store_spec: tuple[str, S3Options | None]) -> None:
    root, options = store_spec
    store = FeatureStore(root, s3=options, poll_seconds=0.05)
    expired = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    lock = {"token": "x", "host": "another-host", "pid": 1, "expires_at": expired}
    store.store.write(f"locks/{KEY}.json", json.dumps(lock).encode())
    calls: list[int] = []
    assert store.get_or_compute(KEY, computer(calls), template()).hit is False
    assert store.store.stat(f"locks/{KEY}.json") is None  # released after the commit


def test_live_lease_of_another_host_makes_us_wait(store_spec: tuple[str, S3Options | None]) -> None:
    root, options = store_spec
    store = FeatureStore(root, s3=options, poll_seconds=0.05)
    live = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    store.store.write(
        f"locks/{KEY}.json", json.dumps({"token": "x", "host": "h", "pid": 1, "expires_at": live}).encode()
    )
    calls: list[int] = []
    with pytest.raises(TimeoutError, match=f"another writer has held cache key {KEY}"):
        store.get_or_compute(KEY, computer(calls), template(), wait_timeout=timedelta(seconds=0.3))
    assert calls == []


# -- two runs on one key at once ---------------------------------------------------------------------


def _race_worker(root: str, endpoint: str | None, counter: str, barrier: Any, queue: Any) -> None:
    options = s3_options(endpoint) if endpoint else None
    store = FeatureStore(root, s3=options, poll_seconds=0.1)

    def compute() -> Computed:
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.5)
        parquet, schema, rows = to_parquet(pd.DataFrame({"x": range(1000)}))
        return Computed(parquet, schema, rows, 1.5, Decimal("0.25"))

    barrier.wait()
    outcome = store.get_or_compute(KEY, compute, template())
    queue.put((outcome.hit, outcome.entry.uri))


def test_two_concurrent_runs_compute_once(store_spec: tuple[str, S3Options | None], tmp_path: Path) -> None:
    root, options = store_spec
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    counter = tmp_path / "computed.txt"
    endpoint = options.endpoint_url if options else None
    procs = [
        ctx.Process(target=_race_worker, args=(root, endpoint, str(counter), barrier, queue))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(counter.read_text().splitlines()) == 1  # one computed
    assert sorted(hit for hit, _ in results) == [False, True]  # the other reused
    assert results[0][1] == results[1][1]
    store = FeatureStore(root, s3=options)
    assert [e.key for e in store.entries()] == [KEY]
    data_files = [f.path for f in store.store.files("entries") if f.path.endswith("data.parquet")]
    assert len(data_files) == 1  # no double entry, no orphan


# -- eviction and storage billing ----------------------------------------------------------------------


def test_evict_and_bill_storage(store_spec: tuple[str, S3Options | None]) -> None:
    root, options = store_spec
    store = FeatureStore(root, s3=options)
    keys = [f"{i:032x}" for i in range(1, 4)]
    for i, key in enumerate(keys):
        store.get_or_compute(key, computer([], rows=1000 * (i + 1)), template(key))
        time.sleep(0.05)
    sizes = {e.key: e.manifest.bytes for e in store.entries()}
    store.get_or_compute(keys[0], computer([]), template(keys[0]))  # reuse: now the most recently used
    recorded: list[Any] = []
    later = datetime.now(timezone.utc) + timedelta(days=30)
    charges = store.bill_storage(recorded.append, until=later)
    assert [c.task_id for c in charges] == sorted(keys) and recorded == charges
    assert all(c.kind.value == "storage" and c.unit == "gb_month" and c.usd >= 0 for c in charges)
    assert all(c.unit_price_usd == Decimal("0.023") and c.quantity > 0 for c in charges)
    assert store.bill_storage(recorded.append, until=later) == []  # already billed up to then
    policy = MaxTotalSizePolicy(sizes[keys[0]] + sizes[keys[2]])
    assert [e.key for e in store.evict(policy, dry_run=True)] == [keys[1]]
    assert len(store.entries()) == 3
    evicted = store.evict(policy)
    assert [e.key for e in evicted] == [keys[1]]
    assert sorted(e.key for e in store.entries()) == [keys[0], keys[2]]
    assert store.lookup(keys[1]) is None
    assert [e.key for e in store.evict(policy, only=[keys[2]])] == [keys[2]]
    assert [e.key for e in store.entries()] == [keys[0]]


class _Killed(BaseException):
    """The bill's process was killed here."""


def _billed_spans(charges: Any) -> list[tuple[str, str]]:
    return sorted(tuple(re.search(r"(\S+ \S+) to (\S+ \S+) UTC", c.note).groups()) for c in charges)


def _contiguous(spans: list[tuple[str, str]], start: datetime, end: datetime) -> bool:
    hour = end.replace(minute=0, second=0, microsecond=0)
    ends = [spans[0][0], *(e for _, e in spans)]
    starts = [*(s for s, _ in spans), f"{hour:%Y-%m-%d %H:%M}"]
    return spans[0][0] == f"{start:%Y-%m-%d %H:%M}" and ends == starts


def test_a_bill_killed_before_its_watermark_is_finished_by_the_next(
    store_spec: tuple[str, S3Options | None],
) -> None:
    root, options = store_spec
    store = FeatureStore(root, s3=options)
    store.get_or_compute(KEY, computer([]), template())
    created = store.entries()[0].manifest.created
    ledger: dict[str, Any] = {}  # keeps one charge per entry_uid, as the ledger does

    def record_then_die(charge: Any) -> None:
        ledger.setdefault(charge.entry_uid, charge)
        raise _Killed

    with pytest.raises(_Killed):
        store.bill_storage(record_then_die, until=created + timedelta(hours=2))
    store.bill_storage(lambda c: ledger.setdefault(c.entry_uid, c), until=created + timedelta(hours=5))
    spans = _billed_spans(ledger.values())
    assert _contiguous(spans, created, created + timedelta(hours=5)), spans


def test_an_evict_after_a_killed_bill_bills_its_span_once(store_spec: tuple[str, S3Options | None]) -> None:
    # The evicted entry was charged from the watermark, over the span the killed bill had recorded too.
    root, options = store_spec
    store = FeatureStore(root, s3=options)
    store.get_or_compute(KEY, computer([]), template())
    created = store.entries()[0].manifest.created
    ledger: dict[str, Any] = {}

    def record_then_die(charge: Any) -> None:
        ledger.setdefault(charge.entry_uid, charge)
        raise _Killed

    with pytest.raises(_Killed):
        store.bill_storage(record_then_die, until=created + timedelta(hours=2))
    for charge in store.storage_charges_for(store.entries(), now=created + timedelta(hours=3)):
        ledger.setdefault(charge.entry_uid, charge)
    claimed = (created + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    minutes = "%Y-%m-%d %H:%M"
    assert _billed_spans(ledger.values()) == [
        (f"{created:{minutes}}", f"{claimed:{minutes}}"),
        (f"{claimed:{minutes}}", f"{created + timedelta(hours=3):{minutes}}"),
    ]


def test_two_bills_at_once_never_bill_a_span_twice(store_spec: tuple[str, S3Options | None]) -> None:
    root, options = store_spec
    store, other = FeatureStore(root, s3=options), FeatureStore(root, s3=options)
    store.get_or_compute(KEY, computer([]), template())
    created = store.entries()[0].manifest.created
    ledger: dict[str, Any] = {}

    def record(charge: Any) -> None:
        ledger.setdefault(charge.entry_uid, charge)

    def record_after_a_later_bill(charge: Any) -> None:
        if not ledger:  # a bill across the next hours runs from start to end meanwhile
            other.bill_storage(record, until=created + timedelta(hours=5))
        record(charge)

    store.bill_storage(record_after_a_later_bill, until=created + timedelta(hours=2))
    store.bill_storage(record, until=created + timedelta(hours=8))
    spans = _billed_spans(ledger.values())
    assert _contiguous(spans, created, created + timedelta(hours=8)), spans
