"""``costaware cache list|show|evict|bill|gc`` on a local cache, with a real SQLite ledger."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from costaware.adapters.feature_manifest import Computed, Manifest, to_parquet
from costaware.adapters.feature_store import FeatureStore
from costaware.adapters.ledger.store import Ledger
from costaware.cli import main

KEYS = [f"{i:032x}" for i in (1, 2)]


def cache(*argv: str, ledger_url: str | None = None) -> int:
    """``costaware [--ledger-url URL] cache ARGV...``; the exit code."""
    return main([*(["--ledger-url", ledger_url] if ledger_url else []), "cache", *argv])


@pytest.fixture
def store(tmp_path: Path) -> FeatureStore:
    cache = FeatureStore(str(tmp_path / "cache"))
    for n, key in enumerate(KEYS, start=1):
        parquet, schema, rows = to_parquet(pd.DataFrame({"x": range(1000 * n)}))
        manifest = Manifest(key, "", "", [], 0, 0, "", producer={"dag_id": "d", "run_id": f"r{n}"})
        cache.get_or_compute(
            key, lambda p=parquet, s=schema, r=rows: Computed(p, s, r, 60.0, Decimal("0.05")), manifest
        )
    return cache


def test_list_and_show(store: FeatureStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert cache("list", "--store", store.root_uri, "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["key"] for r in rows) == KEYS and {r["producer"] for r in rows} == {"d/r1", "d/r2"}
    assert cache("list", "--store", store.root_uri) == 0
    table = capsys.readouterr().out
    assert "2 entries" in table and KEYS[0] in table and "$0.05" in table
    assert cache("show", KEYS[1], "--store", store.root_uri) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["key"] == KEYS[1] and shown["rows"] == 2000 and shown["cost_usd"] == "0.05"


def test_show_honours_format(store: FeatureStore, capsys: pytest.CaptureFixture[str]) -> None:
    import csv
    import io

    # `cache show --format csv` printed JSON all the same.
    assert cache("show", KEYS[1], "--store", store.root_uri, "--format", "csv") == 0
    rows = {r["field"]: r["value"] for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert rows["key"] == KEYS[1] and rows["rows"] == "2000" and rows["cost_usd"] == "0.05"
    assert json.loads(rows["producer"]) == {"dag_id": "d", "run_id": "r2"}
    assert cache("show", KEYS[1], "--store", store.root_uri, "--format", "table") == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["field", "value"] and f"key {KEYS[1]}" in " ".join(table.split())
    assert cache("show", KEYS[1], "--store", store.root_uri, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["key"] == KEYS[1]


def test_list_as_csv_gives_plain_numbers(store: FeatureStore, capsys: pytest.CaptureFixture[str]) -> None:
    import csv
    import io

    assert cache("list", "--store", store.root_uri, "--format", "csv") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    # The 2000-row entry was "2,000": a spreadsheet read it as text, and its sum left it out.
    assert sorted(int(r["rows"]) for r in rows) == [1000, 2000]
    assert sorted(Decimal(r["cost"]) for r in rows) == [Decimal("0.05")] * 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "../../etc/passwd"], "is not a key"),
        (["show", "f" * 32], "has no entry"),
        (["evict"], "say what to evict"),
        (["evict", "--max-entries", "0", "--key", KEYS[0]], "cannot be combined with --max-age-days"),
        (["evict", "--key", KEYS[0], "--key", "e" * 32], f"has no entry {'e' * 32}: nothing was evicted"),
        (["evict", "--max-entries", "-1"], "--max-entries must be 0 or more and at most 1e+12, got -1"),
        (["bill", "--usd-per-gb-month", "cheap"], "--usd-per-gb-month must be a number of USD"),
    ],
)
def test_bad_input(
    argv: list[str], message: str, store: FeatureStore, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cache(*argv, "--store", store.root_uri, ledger_url=ledger_url) == 2
    assert message in capsys.readouterr().err
    assert len(store.entries()) == 2
    assert Ledger.from_url(ledger_url).entries() == []


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        (["--max-entries", "0"], "--max-entries 0 keeps no entry: it would evict all 2 entries of the cache"),
        (["--max-total-gb", "0"], "--max-total-gb 0 keeps no entry: it would evict all 2 entries"),
        (["--max-entries", "0", "--max-total-gb", "0"], "--max-entries 0 and --max-total-gb 0 keep no entry"),
        # 1e-10 GB is 0 bytes to the policy: it emptied the cache without --force.
        (
            ["--max-total-gb", "1e-10"],
            "--max-total-gb 1e-10 (0 bytes) keeps no entry: it would evict all",
        ),
        # 1 byte keeps no entry either: only a limit of exactly 0 bytes was refused.
        (
            ["--max-total-gb", "1e-9"],
            "--max-total-gb 1e-09 (1 bytes) keeps no entry: it would evict all",
        ),
        # Between the old small entry (4,275 bytes) and the new large one (6,878): least recently used
        # first, the small one goes, then the large one does not fit either: nothing kept, unasked.
        (
            ["--max-total-gb", "5e-6"],
            "--max-total-gb 5e-06 (5000 bytes) keeps no entry: it would evict all",
        ),
    ],
)
def test_a_limit_of_zero_empties_the_cache_only_with_force(
    store: FeatureStore, ledger_url: str, capsys: pytest.CaptureFixture[str], limits: list[str], said: str
) -> None:
    # `--max-entries 0` evicted every entry without a word of warning.
    assert cache("evict", *limits, "--store", store.root_uri, ledger_url=ledger_url) == 2
    err = capsys.readouterr().err
    assert said in err and "nothing was evicted. To clear the cache, run it again with --force" in err
    assert len(store.entries()) == 2 and Ledger.from_url(ledger_url).entries() == []
    assert cache("evict", *limits, "--dry-run", "--store", store.root_uri) == 0  # lists, asks nothing
    assert "would evict 2 entries" in capsys.readouterr().out and len(store.entries()) == 2
    assert cache("evict", *limits, "--force", "--store", store.root_uri, ledger_url=ledger_url) == 0
    assert "evicted 2 entries" in capsys.readouterr().out and store.entries() == []
    # An empty cache has nothing to lose: no refusal.
    assert cache("evict", *limits, "--store", store.root_uri, ledger_url=ledger_url) == 0


def test_a_size_limit_that_keeps_some_entries_evicts_without_force(
    store: FeatureStore, ledger: Any, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 10 kB holds one of the two entries (4-7 kB each): a limit that keeps something is no request to empty.
    assert cache("evict", "--max-total-gb", "1e-5", "--store", store.root_uri, ledger_url=ledger_url) == 0
    assert "evicted 1 entry" in capsys.readouterr().out and len(store.entries()) == 1


@pytest.mark.parametrize("command", ["list", "bill", "gc", "evict --max-entries 0"])
def test_a_store_that_is_missing_or_a_file_is_named_not_read_as_empty_or_made(
    command: str, tmp_path: Path, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "cahce"
    assert cache(*command.split(), "--store", str(typo), ledger_url=ledger_url) == 2
    assert f"no feature cache at {typo}: check --store" in capsys.readouterr().err
    assert not typo.exists()  # `bill` made the folder and recorded $0 for it
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    assert cache(*command.split(), "--store", str(a_file), ledger_url=ledger_url) == 2
    assert f"--store {a_file} is a file, not a feature cache folder" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["list", "bill", "gc", "evict --max-entries 0"])
@pytest.mark.parametrize("configured", [True, False])
def test_a_store_at_the_machines_root_is_refused_before_it_is_opened(
    command: str,
    configured: bool,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `bill` wrote /billing.json: COSTAWARE_FEATURE_CACHE=/ (or ~ where the home is /), or --store /.
    def opened(self: Any, root_uri: str, **kwargs: Any) -> None:
        raise AssertionError(f"the cache at {root_uri!r} was opened")  # and would be written: never under /

    monkeypatch.setattr(FeatureStore, "__init__", opened)
    monkeypatch.setenv("HOME", "/")
    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", "~")
    store = [] if configured else ["--store", "file:///"]
    assert cache(*command.split(), *store, ledger_url=ledger_url) == 2
    origin = "the feature cache in $COSTAWARE_FEATURE_CACHE '~'" if configured else "--store 'file:///'"
    assert (
        f"{origin} is the root, /, of the whole machine: `bill` would write its billing.json directly "
        "under /, where no feature cache may be; give a folder of its own such as '/srv/ml/features' or an "
        "s3:// URI" in capsys.readouterr().err
    )


@pytest.mark.parametrize("configured", [True, False])
def test_a_store_that_is_a_symbolic_link_to_the_root_is_refused_before_it_is_opened(
    configured: bool,
    tmp_path: Path,
    ledger_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Only the path as written was compared with "/": `bill` wrote billing.json through the link into /.
    def opened(self: Any, root_uri: str, **kwargs: Any) -> None:
        raise AssertionError(f"the cache at {root_uri!r} was opened")  # and would be written: never under /

    monkeypatch.setattr(FeatureStore, "__init__", opened)
    link = tmp_path / "cache"
    link.symlink_to("/")
    if configured:
        monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", str(link))
    store = [] if configured else ["--store", str(link)]
    assert cache("bill", *store, ledger_url=ledger_url) == 2
    origin = "the feature cache in $COSTAWARE_FEATURE_CACHE" if configured else "--store"
    assert (
        f"{origin} {str(link)!r} is the root, /, of the whole machine ({str(link)!r} is a symbolic link that "
        "leads there): `bill` would write its billing.json directly under /, where no feature cache may be"
        in capsys.readouterr().err
    )


def test_a_bad_configured_cache_is_named_by_the_variable_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A relative COSTAWARE_FEATURE_CACHE was blamed on "[costaware] feature_cache", an option nothing reads.
    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", "features")
    assert cache("list") == 2
    err = capsys.readouterr().err
    assert "the feature cache in $COSTAWARE_FEATURE_CACHE 'features' is a relative path" in err
    assert "[costaware] feature_cache" not in err
    monkeypatch.delenv("COSTAWARE_FEATURE_CACHE")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "costaware").mkdir(parents=True)
    (tmp_path / "home" / "costaware" / "features").write_text("x")
    assert cache("list") == 2
    assert "the default feature cache ($AIRFLOW_HOME/costaware/features) " in capsys.readouterr().err


def test_a_file_uri_store_is_read_and_a_closed_pipe_is_no_store_error(
    store: FeatureStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from costaware.cli.commands import cache as commands

    assert cache("list", "--store", f"file://{store.root_uri}") == 0  # docs/remote-training.md's form
    assert "2 entries" in capsys.readouterr().out

    def reader_gone(*args: object, **kwargs: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    # `cache list | head`: the CLI ends quietly on a closed pipe; it was reported as the store's fault.
    monkeypatch.setattr(commands, "_print_rows", reader_gone)
    args = argparse.Namespace(store=store.root_uri, region=None, endpoint_url=None, format="table")
    with pytest.raises(BrokenPipeError):
        commands.list_entries(args)


@pytest.mark.usefixtures("no_aws_credentials")
def test_an_s3_store_without_credentials_says_so_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cache("list", "--store", "s3://team-features/cache", "--region", "us-east-1") == 2
    err = capsys.readouterr().err
    assert "feature cache s3://team-features/cache: NoCredentialsError" in err
    assert "give AWS credentials" in err
    assert "Traceback" not in err


def test_evict_records_storage_and_deletes(
    store: FeatureStore, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cache("evict", "--max-entries", "1", "--dry-run", "--store", store.root_uri) == 0
    assert "would evict 1 entry\n" in capsys.readouterr().out and len(store.entries()) == 2
    later = datetime.now(timezone.utc) + timedelta(days=3650)
    evicted_key = store.evict(None, dry_run=True, only=[KEYS[0]])[0].key
    charges = store.storage_charges_for(store.evict(None, dry_run=True, only=[KEYS[0]]), now=later)
    assert charges[0].quantity > 0 and charges[0].task_id == evicted_key
    argv = ["evict", "--key", KEYS[0], "--store", store.root_uri]
    Ledger.from_url(ledger_url).dispose()  # the ledger the workers made
    assert cache(*argv, ledger_url=ledger_url) == 0
    assert [e.key for e in store.entries()] == [KEYS[1]]
    recorded = Ledger.from_url(ledger_url).entries()
    assert [(e["kind"], e["unit"], e["task_id"]) for e in recorded] == [("storage", "gb_month", KEYS[0])]
    assert cache("bill", "--store", store.root_uri, "--format", "json", ledger_url=ledger_url) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["entries"] in (
        0,
        1,
    )  # 0 within the hour it was made


def test_bill_and_evict_into_a_ledger_that_does_not_exist_take_nothing(
    store: FeatureStore, tmp_path: Path, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The cache keeps how far it was billed: a bill into a ledger made at a typo used up that span, and
    # the real ledger never got it; an evict recorded its last charges there and deleted the entries.
    typo = f"sqlite:///{tmp_path / 'ledgr.db'}"
    assert cache("bill", "--store", store.root_uri, ledger_url=typo) == 2
    assert cache("evict", "--key", KEYS[0], "--store", store.root_uri, ledger_url=typo) == 2
    assert "no ledger at" in capsys.readouterr().err and not (tmp_path / "ledgr.db").exists()
    assert len(store.entries()) == 2
    Ledger.from_url(ledger_url).dispose()
    month_later = (datetime.now(timezone.utc) + timedelta(days=31)).isoformat()
    assert cache("bill", "--store", store.root_uri, "--format", "json", ledger_url=ledger_url) == 0
    billed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert billed["billed_until"] is not None and billed["billed_until"] < month_later
    # A dry run checks the price the real evict would refuse.
    assert cache("evict", "--max-entries", "1", "--dry-run", "--usd-per-gb-month", "-1", "--store",
                 store.root_uri) == 2  # fmt: skip
    assert "--usd-per-gb-month must be zero or more USD, got '-1'" in capsys.readouterr().err


def test_gc_and_no_airflow_import(store: FeatureStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert cache("gc", "--store", store.root_uri, "--older-than-minutes", "0") == 0
    assert "removed 0 leftovers" in capsys.readouterr().out
    code = "import sys, costaware.cli.commands.cache; assert 'airflow' not in sys.modules, 'airflow imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bill_counts_only_what_the_ledger_did_not_hold(
    store: FeatureStore, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bill finishing one killed half-way records that span's charges again (the ledger keeps them once):
    # they were counted as recorded.
    ledger = Ledger.from_url(ledger_url)

    class Killed(Exception):
        pass

    def record_then_die(charge: Any) -> None:
        ledger.record(charge)
        raise Killed

    with pytest.raises(Killed):
        store.bill_storage(record_then_die, until=datetime.now(timezone.utc) + timedelta(hours=2))
    assert len(ledger.entries()) == 1
    assert cache("bill", "--store", store.root_uri, "--format", "json", ledger_url=ledger_url) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["entries"] == 1
    assert len(ledger.entries()) == 2


def test_one_entry_is_said_as_one_entry(
    store: FeatureStore, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `cache list` and the refusal of a limit of 0 said "1 entries".
    Ledger.from_url(ledger_url)  # the evict bills the evicted entry's storage into an existing ledger
    assert cache("evict", "--max-entries", "1", "--store", store.root_uri, ledger_url=ledger_url) == 0
    capsys.readouterr()
    assert cache("list", "--store", store.root_uri) == 0
    out = capsys.readouterr().out
    assert f"1 entry, 0.01 MB at {store.root_uri}" in out and "entries" not in out
    assert cache("evict", "--max-entries", "0", "--store", store.root_uri, ledger_url=ledger_url) == 2
    err = capsys.readouterr().err
    assert "it would evict all 1 entry of the cache" in err and "1 entries" not in err
