"""CachedFeaturesOperator.execute on a local folder and on moto's S3, with a real SQLite ledger."""

from __future__ import annotations

import importlib
import os
import re
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pandas as pd
import pytest
from airflow.sdk.exceptions import AirflowFailException
from contexts import task_context

from costaware.adapters.input_data import read_frame
from costaware.adapters.ledger.store import Ledger
from costaware.adapters.object_store import S3Options
from costaware.core.errors import ConfigurationError
from costaware.operators.cached_features import CachedFeaturesOperator

T0 = 1_700_000_000_123_456_789

TRANSFORM_MODULE = """
import pandas as pd

def route_delays(inputs, *, min_flights=1):
    flights = inputs["flights"]
    grouped = flights.groupby("route", as_index=False).agg(
        flights=("delay", "size"), mean_delay=("delay", "mean")
    )
    return grouped[grouped.flights >= min_flights].reset_index(drop=True){suffix}
"""


@pytest.fixture
def transform_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A transform in its own .py file; write(suffix) edits the file and re-imports it."""
    name = f"cf_transform_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "code"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))

    def write(suffix: str = "") -> Any:
        (folder / f"{name}.py").write_text(TRANSFORM_MODULE.format(suffix=suffix))
        sys.modules.pop(name, None)
        importlib.invalidate_caches()
        return importlib.import_module(name).route_delays

    yield write
    sys.modules.pop(name, None)


@pytest.fixture
def flights_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "flights"
    folder.mkdir()
    frame = pd.DataFrame({"route": ["JFK-LAX", "JFK-LAX", "LGA-ORD"], "delay": [10.0, 20.0, 5.0]})
    frame.to_parquet(folder / "2013-01-01.parquet", index=False)
    os.utime(folder / "2013-01-01.parquet", ns=(T0, T0))
    return folder


def context(run_id: str = "manual__1") -> dict[str, Any]:
    return task_context("features", run_id=run_id)


def run_with_listener(op: CachedFeaturesOperator, ctx: dict[str, Any]) -> dict[str, Any]:
    """execute() between the cost listener's hooks, as the task runner calls them."""
    from costaware.plugins.listener import CostListener

    ti = ctx["ti"]
    ti.task, ti.start_date, ti.end_date = op, None, None
    ti.get_template_context = lambda: {"params": {}}
    CostListener().on_task_instance_running(None, ti)
    result = op.execute(ctx)
    CostListener().on_task_instance_success(None, ti)
    return result


def operator(
    transform: Any, inputs: dict[str, Any], store: str | None, **kwargs: Any
) -> CachedFeaturesOperator:
    args = {"ledger_conn_id": "test_ledger", "usd_per_hour": "3.60", "tags": {"project": "flights"}, **kwargs}
    return CachedFeaturesOperator(
        task_id="features", transform=transform, inputs=inputs, store_uri=store, **args
    )


def test_miss_then_hit_locally(
    transform_module: Any,
    flights_dir: Path,
    tmp_path: Path,
    ledger_conn: Ledger,
    capsys: pytest.CaptureFixture[str],
) -> None:
    transform = transform_module()
    store = str(tmp_path / "cache")
    first = run_with_listener(operator(transform, {"flights": str(flights_dir)}, store), context("run_1"))
    assert first["hit"] is False and first["rows"] == 2 and Decimal(first["cost_usd"]) >= 0
    assert read_frame(first["uri"])["mean_delay"].tolist() == [15.0, 5.0]
    second = run_with_listener(operator(transform, {"flights": str(flights_dir)}, store), context("run_2"))
    assert second["hit"] is True and second["uri"] == first["uri"] and second["key"] == first["key"]
    assert second["avoided_usd"] == first["cost_usd"] and second["cost_usd"] == "0"
    assert "reused features computed by retrain/run_1 on " in capsys.readouterr().out
    # The miss is one compute entry, written by the listener (no double count); the hit adds an estimate
    # of the avoided cost beside its own (short) runtime.
    (miss,) = ledger_conn.entries(run_id="run_1")
    assert (miss["kind"], miss["estimated"], miss["outcome"]) == ("compute", False, "success")
    assert miss["note"].startswith("computed features ") and miss["project"] == "flights"
    assert str(tmp_path) not in miss["note"]  # the Cost page shows notes: no path on the server
    assert miss["unit_price_usd"] == Decimal("3.60")
    second_run = {e["outcome"]: e for e in ledger_conn.entries(run_id="run_2")}
    hit = second_run["cache_hit"]
    assert (hit["kind"], hit["estimated"]) == ("compute", True)
    assert hit["usd"] == Decimal(first["cost_usd"])
    assert "computed by retrain/run_1" in hit["note"]
    assert second_run["success"]["estimated"] is False


def test_a_retry_of_a_hit_records_its_avoided_cost_once(
    transform_module: Any, flights_dir: Path, tmp_path: Path, ledger_conn: Ledger
) -> None:
    # A second try (its storage bill failed, say) wrote a second avoided-cost estimate: savings counted twice.
    store, inputs = str(tmp_path / "cache"), {"flights": str(flights_dir)}
    first = operator(transform_module(), inputs, store).execute(context("run_1"))
    for try_number in (1, 2):
        retry = task_context("features", run_id="run_2", try_number=try_number)
        assert operator(transform_module(), inputs, store).execute(retry)["hit"] is True
    hits = [e for e in ledger_conn.entries(run_id="run_2") if e["outcome"] == "cache_hit"]
    assert len(hits) == 1 and hits[0]["usd"] == Decimal(first["cost_usd"])
    # Another run's hit is its own avoided cost.
    operator(transform_module(), inputs, store).execute(context("run_3"))
    assert [e["outcome"] for e in ledger_conn.entries(run_id="run_3")] == ["cache_hit"]


def test_what_invalidates_and_what_does_not(
    transform_module: Any, flights_dir: Path, tmp_path: Path, ledger_conn: Ledger
) -> None:
    store = str(tmp_path / "cache")
    inputs = {"flights": str(flights_dir)}
    base = operator(transform_module(), inputs, store).execute(context())
    # Same code re-imported, same data, same params: a hit.
    assert operator(transform_module(), inputs, store).execute(context())["key"] == base["key"]
    # Editing the transform: a miss.
    edited = operator(transform_module(".head(1)"), inputs, store).execute(context())
    assert edited["hit"] is False and edited["key"] != base["key"] and edited["rows"] == 1
    # Other parameters: a miss.
    other = operator(transform_module(), inputs, store, transform_params={"min_flights": 2}).execute(
        context()
    )
    assert other["hit"] is False and other["rows"] == 1
    # An explicit version keys by the version, not the source.
    v1 = operator(transform_module(), inputs, store, version="v1").execute(context())
    v1_edited = operator(transform_module(".copy()"), inputs, store, version="v1").execute(context())
    assert v1_edited["hit"] is True and v1_edited["key"] == v1["key"]
    # Touching the data: a miss.
    os.utime(flights_dir / "2013-01-01.parquet", ns=(T0 + 10**6, T0 + 10**6))
    touched = operator(transform_module(), inputs, store).execute(context())
    assert touched["hit"] is False and touched["key"] != base["key"]


@pytest.mark.parametrize("rendered", ["None", "null", ""])
def test_a_version_rendered_blank_keys_the_code_by_its_source(
    rendered: str, transform_module: Any, flights_dir: Path, tmp_path: Path, ledger_conn: Ledger
) -> None:
    # "{{ params.code_version }}" with the param left blank renders "None": kept as the version, every later
    # edit of the transform had the same key, and the stale features were reused.
    store, inputs = str(tmp_path / "cache"), {"flights": str(flights_dir)}
    runs = []
    for suffix in ("", ".head(1)"):
        op = operator(transform_module(suffix), inputs, store, version="{{ params.code_version }}")
        op.version = rendered  # what it rendered to
        runs.append(op.execute(context()))
    assert runs[1]["hit"] is False and runs[1]["key"] != runs[0]["key"] and runs[1]["rows"] == 1


def test_pass_paths_and_bad_transform_output(flights_dir: Path, tmp_path: Path, ledger_conn: Ledger) -> None:
    store = str(tmp_path / "cache")
    got = operator(_paths_transform, {"flights": str(flights_dir)}, store, pass_paths=True).execute(context())
    assert read_frame(got["uri"])["path"].tolist() == [str(flights_dir)]
    with pytest.raises(AirflowFailException, match=r"returned dict: it must return a pandas\.DataFrame"):
        operator(_bad_transform, {"flights": str(flights_dir)}, store).execute(context())
    assert ledger_conn.entries(run_id="manual__2") == []


def _paths_transform(inputs: dict[str, str], model: Any = None) -> pd.DataFrame:
    return pd.DataFrame({"path": [inputs["flights"]]})


def _bad_transform(inputs: dict[str, pd.DataFrame]) -> dict[str, int]:
    return {"rows": len(inputs["flights"])}


def test_a_hit_on_a_worker_type_nobody_can_price_reuses_the_features_and_says_so(
    transform_module: Any,
    flights_dir: Path,
    tmp_path: Path,
    ledger_conn: Ledger,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The price was asked before the cache was looked at: one misspelt worker type failed every task that
    # would only have reused its features (a hit pays nothing here: its avoided cost is the entry's).
    transform = transform_module()
    store = str(tmp_path / "cache")
    first = run_with_listener(operator(transform, {"flights": str(flights_dir)}, store), context("run_1"))
    unpriced = {"instance_type": "m5.huge", "region": "us-east-1", "usd_per_hour": None}
    second = operator(transform, {"flights": str(flights_dir)}, store, **unpriced).execute(context("run_2"))
    assert second["hit"] is True and second["avoided_usd"] == first["cost_usd"]
    assert "this task's own compute is unpriced" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"transform_params": {"model": object()}}, "has no stable fingerprint"),
        ({"inputs": {"t": "bigquery://proj/ds/t"}}, "no event of it in inlet_events"),
        # S3 spelt another way was told to add an Asset to the task's inlets.
        ({"inputs": {"t": "S3://ml-data/flights"}}, "spelt another way: write it 's3://ml-data/flights'"),
        ({"inputs": {"t": "s3a://ml-data/flights"}}, "spelt another way: write it 's3://ml-data/flights'"),
        (
            {"instance_type": "m5.huge", "region": "us-east-1", "usd_per_hour": None},
            r"task 'features' on 'm5.huge' in 'us-east-1' \(on_demand; from its instance_type, region, "
            r"usd_per_hour, its costaware_compute param, else the \[costaware\] worker_\* settings\) "
            r"cannot be priced, so neither its bill nor the cache's cost would be right: "
            r".*unknown instance type 'm5.huge'",
        ),
        (
            {"instance_type": "m5.2xlarge", "region": "eu-wset-1", "usd_per_hour": None},
            "unknown region 'eu-wset-1'",
        ),
        # A misspelt package keyed nothing: upgrading the real one returned stale features.
        ({"libraries": ["pandas", "pandsa"]}, r"libraries \['pandsa'\] are not installed on this worker"),
    ],
)
def test_bad_arguments_fail_without_writing(
    kwargs: dict[str, Any], message: str, flights_dir: Path, tmp_path: Path, ledger_conn: Ledger
) -> None:
    args = {"inputs": {"flights": str(flights_dir)}, "store_uri": str(tmp_path / "cache"), **kwargs}
    op = operator(_paths_transform, args.pop("inputs"), args.pop("store_uri"), **args)
    with pytest.raises(AirflowFailException, match=message) as info:
        op.execute(context())
    assert isinstance(info.value.__cause__, ConfigurationError)
    assert not (tmp_path / "cache").exists()
    assert ledger_conn.entries() == []


# "None": what "{{ params.rate }}" renders with the param left blank; it failed the run ("not an amount"), as
# " " did, which the cost listener reads as not given too.
@pytest.mark.parametrize(
    "usd_per_hour",
    [None, "None", "null", " ", "None "],
    ids=["not-given", "None", "null", "space", "None-space"],
)
def test_miss_is_priced_from_the_catalog(
    flights_dir: Path, tmp_path: Path, ledger_conn: Ledger, usd_per_hour: str | None
) -> None:
    from costaware.adapters.price_files import bundled_catalog

    op = operator(
        _paths_transform,
        {"flights": str(flights_dir)},
        str(tmp_path / "cache"),
        instance_type="m5.2xlarge",
        region="us-east-1",
        usd_per_hour=usd_per_hour,
        pass_paths=True,
    )
    first = run_with_listener(op, context())
    listed = bundled_catalog().on_demand_usd_per_hour("m5.2xlarge", "us-east-1")
    [entry] = ledger_conn.entries()
    assert entry["unit_price_usd"] == listed
    assert (entry["instance_type"], entry["market"]) == ("m5.2xlarge", "on_demand")
    # The hit's avoided-cost estimate is on-demand at that price too, not "local".
    run_with_listener(op, context("run_2"))
    (avoided,) = [e for e in ledger_conn.entries(run_id="run_2") if e["outcome"] == "cache_hit"]
    assert avoided["usd"] == Decimal(first["cost_usd"]) and avoided["market"] == "on_demand"


@pytest.fixture
def transform_takes_6_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's clock moves 360 s between its readings: a transform run is 0.1 h, worth cents."""
    import itertools

    from costaware.operators import cached_features

    readings = itertools.count(0.0, 360.0)
    monkeypatch.setattr(cached_features, "time", SimpleNamespace(monotonic=lambda: next(readings)))


def bill_and_avoided(ledger_conn: Ledger) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cost listener's entry of the miss (run_1) and the avoided cost of the hit (run_2)."""
    (bill,) = ledger_conn.entries(run_id="run_1")
    (avoided,) = [e for e in ledger_conn.entries(run_id="run_2") if e["outcome"] == "cache_hit"]
    return bill, avoided


# Not given (None, or "{{ params.instance_type }}" with the param unset: "None", or " " from a form): the miss
# was recorded at $0, market "local", while the cost listener billed the try on the worker's m5.large: the
# cache's cost and the hit's avoided cost said $0 of a try that was paid for.
@pytest.mark.parametrize(
    "instance_type",
    [None, "None", "null", " ", "None "],
    ids=["not-set", "None", "null", "space", "None-space"],
)
@pytest.mark.usefixtures("transform_takes_6_minutes")
def test_a_miss_with_no_instance_type_is_priced_as_the_worker_it_is_billed_on(
    instance_type: str | None,
    flights_dir: Path,
    tmp_path: Path,
    ledger_conn: Ledger,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.ledger import compute_cost

    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE", "c5.xlarge")
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_REGION", "eu-west-1")
    op = operator(
        _paths_transform,
        {"flights": str(flights_dir)},
        str(tmp_path / "cache"),
        instance_type="{{ params.instance_type }}",
        usd_per_hour=None,
        pass_paths=True,
    )
    op.instance_type = instance_type  # what it rendered to
    first = run_with_listener(op, context("run_1"))
    run_with_listener(op, context("run_2"))
    bill, avoided = bill_and_avoided(ledger_conn)
    listed = bundled_catalog().on_demand_usd_per_hour("c5.xlarge", "eu-west-1")
    assert (bill["instance_type"], bill["region"], bill["market"]) == ("c5.xlarge", "eu-west-1", "on_demand")
    assert bill["unit_price_usd"] == listed > 0
    assert Decimal(first["cost_usd"]) == compute_cost(360, listed)[1] > 0
    assert (avoided["usd"], avoided["instance_type"], avoided["region"], avoided["market"]) == (
        Decimal(first["cost_usd"]),
        "c5.xlarge",
        "eu-west-1",
        "on_demand",
    )


# With no region, the miss failed ("needs region= to look up its price") though the bill priced the try in
# the worker's region.
@pytest.mark.parametrize("region", [None, "None", "null", " "], ids=["not-set", "None", "null", "space"])
@pytest.mark.usefixtures("transform_takes_6_minutes")
def test_a_miss_with_no_region_is_priced_in_the_region_it_is_billed_in(
    region: str | None,
    flights_dir: Path,
    tmp_path: Path,
    ledger_conn: Ledger,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.ledger import compute_cost

    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_REGION", "eu-west-1")
    op = operator(
        _paths_transform,
        {"flights": str(flights_dir)},
        str(tmp_path / "cache"),
        instance_type="m5.2xlarge",
        region="{{ params.region }}",
        usd_per_hour=None,
        pass_paths=True,
    )
    op.region = region
    first = run_with_listener(op, context("run_1"))
    run_with_listener(op, context("run_2"))
    bill, avoided = bill_and_avoided(ledger_conn)
    listed = bundled_catalog().on_demand_usd_per_hour("m5.2xlarge", "eu-west-1")
    assert (bill["instance_type"], bill["region"], bill["unit_price_usd"]) == (
        "m5.2xlarge",
        "eu-west-1",
        listed,
    )
    assert Decimal(first["cost_usd"]) == compute_cost(360, listed)[1] > 0
    assert avoided["region"] == "eu-west-1" and avoided["usd"] == Decimal(first["cost_usd"])


@pytest.mark.usefixtures("transform_takes_6_minutes")
def test_a_miss_is_priced_on_the_tasks_costaware_compute_param_as_billed(
    flights_dir: Path, tmp_path: Path, ledger_conn: Ledger
) -> None:
    from costaware.core.ledger import compute_cost

    # A spot try named only in the param is billed at the catalog's typical spot saving: the miss too.
    op = operator(
        _paths_transform,
        {"flights": str(flights_dir)},
        str(tmp_path / "cache"),
        usd_per_hour=None,
        pass_paths=True,
        params={
            "costaware_compute": {"instance_type": "m5.2xlarge", "region": "us-west-2", "market": "spot"}
        },
    )
    first = run_with_listener(op, context("run_1"))
    run_with_listener(op, context("run_2"))
    bill, avoided = bill_and_avoided(ledger_conn)
    assert (bill["instance_type"], bill["region"], bill["market"]) == ("m5.2xlarge", "us-west-2", "spot")
    assert Decimal(first["cost_usd"]) == compute_cost(360, bill["unit_price_usd"])[1] > 0
    assert (avoided["market"], avoided["usd"]) == ("spot", Decimal(first["cost_usd"]))


# The team's own hardware: a name of theirs is no catalog type. With a rate, the miss costs that rate, as
# billed; with none, the bill records the try at $0 (unpriced) and so does the cache, saying why.
@pytest.mark.parametrize(("usd_per_hour", "rate"), [("2.00", Decimal("2.00")), (None, Decimal(0))])
@pytest.mark.usefixtures("transform_takes_6_minutes")
def test_a_miss_on_local_workers_is_priced_at_their_rate_as_billed(
    usd_per_hour: str | None,
    rate: Decimal,
    flights_dir: Path,
    tmp_path: Path,
    ledger_conn: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_MARKET", "local")
    op = operator(
        _paths_transform,
        {"flights": str(flights_dir)},
        str(tmp_path / "cache"),
        instance_type="dgx-box-1",
        usd_per_hour=usd_per_hour,
        pass_paths=True,
    )
    first = run_with_listener(op, context("run_1"))
    run_with_listener(op, context("run_2"))
    bill, avoided = bill_and_avoided(ledger_conn)
    assert (bill["instance_type"], bill["market"], bill["unit_price_usd"]) == ("dgx-box-1", "local", rate)
    assert Decimal(first["cost_usd"]) == rate / 10
    assert (avoided["market"], avoided["usd"]) == ("local", rate / 10)
    if rate == 0:
        said = "misses are recorded at $0, as the try is billed: local compute on 'dgx-box-1' needs a usd_per"
        assert said in capsys.readouterr().out


def test_asset_inputs_by_uri_and_by_event(flights_dir: Path, tmp_path: Path, ledger_conn: Ledger) -> None:
    from airflow.sdk import Asset

    store = str(tmp_path / "cache")
    on_disk = Asset(name="flights", uri=f"file://{flights_dir}")
    got = operator(_paths_transform, {"flights": on_disk}, store, pass_paths=True).execute(context())
    assert got["hit"] is False
    table = Asset(name="warehouse", uri="bigquery://proj/ds/flights")
    events = {table: [SimpleNamespace(id=7, timestamp="2026-11-22T00:00:00+00:00", extra={})]}
    first = operator(_paths_transform, {"flights": table}, store, pass_paths=True).execute(
        {**context(), "inlet_events": events}
    )
    again = operator(_paths_transform, {"flights": table}, store, pass_paths=True).execute(
        {**context(), "inlet_events": events}
    )
    newer = {table: [*events[table], SimpleNamespace(id=8, timestamp="2026-11-23T00:00:00+00:00", extra={})]}
    changed = operator(_paths_transform, {"flights": table}, store, pass_paths=True).execute(
        {**context(), "inlet_events": newer}
    )
    assert (first["hit"], again["hit"], changed["hit"]) == (False, True, False)


def test_s3_inputs_and_s3_store_through_an_airflow_connection(
    moto_endpoint: str,
    moto_aws_conn: str,
    transform_module: Any,
    tmp_path: Path,
    ledger_conn: Ledger,
) -> None:
    client = boto3.client(
        "s3", **S3Options("testing", "testing", None, "us-east-1", moto_endpoint).boto3_kwargs()
    )
    bucket = f"ml-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    local = tmp_path / "f.parquet"
    pd.DataFrame({"route": ["A-B", "A-B", "C-D"], "delay": [1.0, 3.0, 2.0]}).to_parquet(local, index=False)
    client.put_object(Bucket=bucket, Key="raw/flights/part-0.parquet", Body=local.read_bytes())
    store = f"s3://{bucket}/feature-cache"
    inputs = {"flights": f"s3://{bucket}/raw/flights"}
    transform = transform_module()
    first = operator(transform, inputs, store, aws_conn_id="moto_aws").execute(context("s3_1"))
    second = operator(transform, inputs, store, aws_conn_id="moto_aws").execute(context("s3_2"))
    assert (first["hit"], second["hit"]) == (False, True)
    assert first["uri"].startswith(f"{store}/entries/{first['key']}/")
    options = S3Options("testing", "testing", None, "us-east-1", moto_endpoint)
    assert read_frame(first["uri"], options)["mean_delay"].tolist() == [2.0, 2.0]
    client.put_object(
        Bucket=bucket, Key="raw/flights/part-0.parquet", Body=local.read_bytes() + b""
    )  # same bytes
    client.put_object(Bucket=bucket, Key="raw/flights/part-1.parquet", Body=local.read_bytes())  # new data
    third = operator(transform, inputs, store, aws_conn_id="moto_aws").execute(context("s3_3"))
    assert third["hit"] is False and third["key"] != first["key"]


def test_a_store_in_a_bucket_that_does_not_exist_is_named_and_not_retried(
    moto_endpoint: str, moto_aws_conn: str, flights_dir: Path, ledger_conn: Ledger
) -> None:
    # It failed on botocore's "The specified bucket does not exist" (retried), naming no bucket or store.
    missing = f"ml-cahce-{uuid.uuid4().hex[:10]}"
    op = operator(
        _paths_transform, {"flights": str(flights_dir)}, f"s3://{missing}/features", aws_conn_id="moto_aws"
    )
    with pytest.raises(
        AirflowFailException, match=f"store s3://{missing}/features: bucket '{missing}' does not"
    ):
        op.execute(context())
    assert ledger_conn.entries() == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"inputs": ["s3://bucket/flights"]}, r"inputs must be a non-empty \{name: URI or Asset\}"),
        ({"inputs": {}}, "inputs must be a non-empty"),
        ({"inputs": "s3://bucket/flights"}, "inputs must be a non-empty"),
        ({"libraries": "pandas"}, "libraries must be a list of package names, e.g. .* got 'pandas'"),
        # These failed when the task ran, some only after the transform had run and its entry was stored.
        ({"store_uri": "s3://bucket/../elsewhere"}, r"'\.\.' segment"),
        ({"store_uri": "cache/relative"}, "store_uri 'cache/relative' is a relative path"),
        (
            {"inputs": {"flights": "relative/flights"}},
            "input 'flights' 'relative/flights' is a relative path",
        ),
        ({"inputs": {"flights": "/data/../../etc"}}, r"'\.\.' segment"),
        (
            {"fingerprint_mode": "contents"},
            "fingerprint_mode='contents' is unknown \\(did you mean 'content'",
        ),
        ({"storage_usd_per_gb_month": "-1"}, "storage_usd_per_gb_month"),
        # "2h" failed the run with a bare TypeError; a negative wait gave up on another writer at once.
        ({"wait_timeout_seconds": "2h"}, "wait_timeout_seconds must be a number of seconds > 0, got '2h'"),
        ({"wait_timeout_seconds": -5}, "wait_timeout_seconds must be a number of seconds > 0, got -5"),
        ({"usd_per_hour": "-0.19"}, "usd_per_hour"),
        (
            {"transform_params": {"window_day": 3}},
            "transform_params 'window_day' is not an option of transform '_paths_transform'; it takes model",
        ),
    ],
)
def test_inputs_and_libraries_of_the_wrong_shape_are_refused_at_parse_time(
    kwargs: dict[str, Any], message: str, tmp_path: Path
) -> None:
    args = {"inputs": {"flights": "s3://bucket/flights"}, "store_uri": str(tmp_path / "cache"), **kwargs}
    with pytest.raises(ConfigurationError, match=message):
        operator(_paths_transform, args.pop("inputs"), args.pop("store_uri"), **args)


def test_a_transform_that_is_not_a_function_is_refused_at_parse_time(tmp_path: Path) -> None:
    # A dotted path failed only as the task ran: "'str' object is not callable".
    refused = r"transform must be a function .* got str 'features\.build'"
    with pytest.raises(ConfigurationError, match=refused):
        operator("features.build", {"flights": "s3://bucket/flights"}, str(tmp_path / "cache"))


@pytest.mark.parametrize("rendered", ["None", "null", "", " None "])
def test_a_store_uri_that_names_nothing_is_refused_as_a_model_store_is(
    rendered: str, flights_dir: Path, tmp_path: Path, ledger_conn: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "{{ params.cache }}" with the param left blank renders "None": the entry went to the worker's default
    # cache, where no other worker finds it, while model_store and checkpoint_store rendered so are refused.
    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", str(tmp_path / "default-cache"))
    message = (
        f"store_uri {rendered!r} names nothing (what a template renders of a param or XCom that is not set): "
        "give a location, or leave store_uri out for the default cache ($COSTAWARE_FEATURE_CACHE or "
    )
    with pytest.raises(ConfigurationError, match=re.escape(message)):  # written out: when parsed
        operator(_paths_transform, {"flights": str(flights_dir)}, rendered, pass_paths=True)
    op = operator(_paths_transform, {"flights": str(flights_dir)}, "{{ params.cache }}", pass_paths=True)
    op.store_uri = rendered  # what it rendered to
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        op.execute(context())
    assert not (tmp_path / "default-cache").exists() and ledger_conn.entries() == []


def test_a_store_uri_template_rendered_to_none_is_refused_not_taken_as_left_out(
    flights_dir: Path, tmp_path: Path, ledger_conn: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With render_template_as_native_obj a param left unset renders None, not "None": the entries went to
    # the worker's default cache, where no other worker finds them.
    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", str(tmp_path / "default-cache"))
    op = operator(_paths_transform, {"flights": str(flights_dir)}, "{{ params.cache }}", pass_paths=True)
    op.store_uri = None  # what it rendered to
    message = (
        "store_uri None names nothing (what a template renders of a param or XCom that is not set): give a "
        "location, or leave store_uri out for the default cache"
    )
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        op.execute(context())
    assert not (tmp_path / "default-cache").exists() and ledger_conn.entries() == []


def test_a_mapped_store_uri_element_that_is_none_is_refused_not_taken_as_left_out(
    flights_dir: Path, tmp_path: Path, ledger_conn: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow builds each copy of .expand(store_uri=<XCom list>) through __init__ with its element: a None
    # (a lookup left unset for one element) read as store_uri left out, the worker's default cache.
    import pendulum
    from airflow.sdk import DAG, BaseOperator

    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", str(tmp_path / "default-cache"))
    args = {"ledger_conn_id": "test_ledger", "usd_per_hour": "3.60", "pass_paths": True}
    with DAG("mapped_stores", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        inputs = {"flights": str(flights_dir)}
        mapped = CachedFeaturesOperator.partial(
            task_id="features", transform=_paths_transform, inputs=inputs, **args
        ).expand(store_uri=BaseOperator(task_id="stores").output)  # known as the copies run
        left_out = CachedFeaturesOperator.partial(  # store_uri in neither: the default cache
            task_id="features_default", transform=_paths_transform, inputs=inputs, **args
        ).expand(version=["v1"])
    op = mapped.unmap({"store_uri": None})
    message = (
        "store_uri None names nothing (what a template renders of a param or XCom that is not set): give a "
        "location, or leave store_uri out for the default cache"
    )
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        op.execute(context())
    assert not (tmp_path / "default-cache").exists() and ledger_conn.entries() == []
    got = left_out.unmap({"version": "v1"}).execute(context())
    assert got["uri"].startswith(str(tmp_path / "default-cache"))


def test_store_uri_none_written_out_in_partial_is_refused_when_the_dag_is_parsed(
    flights_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each mapped copy was built with the None and refused it only as it ran, one failed task per element.
    import pendulum
    from airflow.sdk import DAG

    from costaware.core.errors import ConfigurationError

    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", str(tmp_path / "default-cache"))
    args = {"ledger_conn_id": "test_ledger", "usd_per_hour": "3.60", "pass_paths": True}
    with DAG("partial_store", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        inputs = {"flights": str(flights_dir)}
        message = (
            "task 'features': store_uri=None in CachedFeaturesOperator.partial(...) names no store: leave "
            "store_uri out of .partial() for the default cache"
        )
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            CachedFeaturesOperator.partial(
                task_id="features", transform=_paths_transform, inputs=inputs, store_uri=None, **args
            )
        # Written out in a task of its own, None still reads as left out: the default cache.
        plain = CachedFeaturesOperator(
            task_id="plain", transform=_paths_transform, inputs=inputs, store_uri=None, **args
        )
    assert plain.execute(context())["uri"].startswith(str(tmp_path / "default-cache"))


def test_a_none_in_a_store_uri_list_written_out_is_refused_when_the_dag_is_parsed(
    flights_dir: Path, tmp_path: Path
) -> None:
    # Airflow built each copy at parse and the None's copy was refused only as it ran, after the others.
    import pendulum
    from airflow.sdk import DAG

    from costaware.core.errors import ConfigurationError

    args = {"ledger_conn_id": "test_ledger", "usd_per_hour": "3.60", "pass_paths": True}
    with DAG("listed_stores", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
        partial = CachedFeaturesOperator.partial(
            task_id="features", transform=_paths_transform, inputs={"flights": str(flights_dir)}, **args
        )
        message = (
            "task 'features': store_uri[1] is None in CachedFeaturesOperator.partial(...).expand(store_uri="
            "[...]), which names no store for that copy: give each element a location, or leave store_uri "
            "out of .expand() for the default cache"
        )
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            partial.expand(store_uri=[str(tmp_path / "a"), None])
        assert "features" not in dag.task_dict  # nothing was added to the DAG
        listed = CachedFeaturesOperator.partial(
            task_id="listed", transform=_paths_transform, inputs={"flights": str(flights_dir)}, **args
        ).expand(store_uri=[str(tmp_path / "a"), str(tmp_path / "b")])
    assert listed.unmap({"store_uri": str(tmp_path / "b")}).store_uri == str(tmp_path / "b")


def test_partial_on_a_task_is_refused_as_airflow_refuses_it(flights_dir: Path) -> None:
    # The classmethod that refuses store_uri=None in .partial() replaced Airflow's guard: task.partial(...)
    # mapped the task's class instead of saying that partial is the class's.
    from airflow.sdk import BaseOperator

    with pytest.raises(TypeError) as airflows:
        BaseOperator(task_id="airflow_task").partial(task_id="copy")
    task = operator(_paths_transform, {"flights": str(flights_dir)}, "/srv/features", pass_paths=True)
    with pytest.raises(TypeError) as ours:
        task.partial(task_id="copy")
    assert str(ours.value) == str(airflows.value)
    assert "only be called on Operator classes" in str(ours.value)
    # On the class (a subclass's too), partial is still the one refusing store_uri=None.
    subclass = type("SubclassedFeatures", (CachedFeaturesOperator,), {})
    for cls in (CachedFeaturesOperator, subclass):
        with pytest.raises(ConfigurationError, match=re.escape(f"store_uri=None in {cls.__name__}.partial")):
            cls.partial(task_id="features", transform=_paths_transform, inputs={}, store_uri=None)
    mapped = subclass.partial(task_id="features", transform=_paths_transform, inputs={"a": "/data"})
    assert mapped.expand(version=["v1"]).operator_class is subclass


@pytest.mark.parametrize("given_by", ["dag", "task_group"])
def test_store_uri_none_in_default_args_reads_as_left_out_in_mapped_copies_as_in_plain_tasks(
    given_by: str, flights_dir: Path, tmp_path: Path, ledger_conn: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow builds each mapped copy with the default_args too: a task of its own read their None as left
    # out (the default cache) while each mapped copy beside it was refused as it ran.
    import pendulum
    from airflow.sdk import DAG, BaseOperator, TaskGroup

    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", str(tmp_path / "default-cache"))
    args = {"ledger_conn_id": "test_ledger", "usd_per_hour": "3.60", "pass_paths": True}
    dag_defaults = {"store_uri": None} if given_by == "dag" else {}
    inputs = {"flights": str(flights_dir)}
    with (
        DAG("defaults", schedule=None, start_date=pendulum.datetime(2026, 1, 1), default_args=dag_defaults),
        TaskGroup("group", default_args={"store_uri": None} if given_by == "task_group" else {}),
    ):
        plain = CachedFeaturesOperator(task_id="plain", transform=_paths_transform, inputs=inputs, **args)
        versions = CachedFeaturesOperator.partial(
            task_id="versions", transform=_paths_transform, inputs=inputs, **args
        ).expand(version=["v1"])
        per_element = CachedFeaturesOperator.partial(
            task_id="per_element", transform=_paths_transform, inputs=inputs, **args
        ).expand_kwargs([{"version": "v2"}])
        stores = CachedFeaturesOperator.partial(
            task_id="stores", transform=_paths_transform, inputs=inputs, **args
        ).expand(store_uri=BaseOperator(task_id="lookup").output)
    default_cache = str(tmp_path / "default-cache")
    assert plain.execute(context())["uri"].startswith(default_cache)
    assert versions.unmap({"version": "v1"}).execute(context())["uri"].startswith(default_cache)
    assert per_element.unmap({"version": "v2"}).execute(context())["uri"].startswith(default_cache)
    # A None the task maps is still an element's: refused.
    with pytest.raises(AirflowFailException, match=re.escape("store_uri None names nothing")):
        stores.unmap({"store_uri": None}).execute(context())


@pytest.mark.parametrize("root", ["/", "file:///", "file://localhost/"])
def test_a_store_uri_at_the_machines_root_is_refused(
    root: str, flights_dir: Path, tmp_path: Path, ledger_conn: Ledger
) -> None:
    # Each entry's folder was made directly under /.
    message = f"task 'features': store_uri {root!r} is the root, /, of the whole machine: its files"
    with pytest.raises(ConfigurationError, match=re.escape(message)):  # written out: when parsed
        operator(_paths_transform, {"flights": str(flights_dir)}, root, pass_paths=True)
    op = operator(_paths_transform, {"flights": str(flights_dir)}, "{{ params.cache }}", pass_paths=True)
    op.store_uri = root  # what it rendered to
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        op.execute(context())
    assert ledger_conn.entries() == []


@pytest.mark.parametrize("home", ["~", "~/", "file:~/"])
def test_a_store_uri_at_a_home_that_is_the_root_is_refused_on_the_worker(
    home: str, flights_dir: Path, ledger_conn: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With HOME=/ (OpenShift's random uids) "~" is /: only values starting with "/" were looked at. It is
    # the worker's home that counts: a DAG processor's HOME=/ refused a '~' the worker would take.
    monkeypatch.setenv("HOME", "/")
    op = operator(_paths_transform, {"flights": str(flights_dir)}, home, pass_paths=True)  # parses
    message = (
        f"task 'features': store_uri {home!r} is the root, /, of the whole machine (the home folder ~ is '/'"
    )
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        op.execute(context())
    assert ledger_conn.entries() == []


@pytest.mark.parametrize("left_out", [False, True])
def test_a_store_uri_that_is_a_symbolic_link_to_the_root_is_refused_on_the_worker(
    left_out: bool, flights_dir: Path, tmp_path: Path, ledger_conn: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the path as written was looked at: each entry's folder was made directly under / through the link.
    def opened(self: Any, root_uri: str, **kwargs: Any) -> None:
        raise AssertionError(f"the cache at {root_uri!r} was opened")  # and would be written: never under /

    monkeypatch.setattr("costaware.adapters.feature_store.FeatureStore.__init__", opened)
    link = tmp_path / "features"
    link.symlink_to("/")
    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", str(link))
    store = None if left_out else str(link)
    op = operator(_paths_transform, {"flights": str(flights_dir)}, store, pass_paths=True)  # parses
    name = (
        "store_uri is left out, so the default cache, $COSTAWARE_FEATURE_CACHE," if left_out else "store_uri"
    )
    message = (
        f"task 'features': {name} {str(link)!r} is the root, /, of the whole machine ({str(link)!r} is a "
        "symbolic link that leads there)"
    )
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        op.execute(context())
    assert ledger_conn.entries() == []


def test_a_store_uri_in_a_home_parses_where_the_dag_processor_has_no_home(
    flights_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # HOME unset and a uid with no passwd entry (OpenShift): '~/features' failed the whole DAG file, though
    # the worker that runs the task has a home.
    import pwd

    monkeypatch.delenv("HOME", raising=False)

    def no_entry(uid: int) -> None:
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    op = operator(_paths_transform, {"flights": "~/flights"}, "~/features", pass_paths=True)
    message = "store_uri '~/features' starts with '~', but this process has no home folder"
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        op.execute(context())  # a worker without a home says so


def test_a_store_uri_left_out_is_the_default_cache(
    flights_dir: Path, tmp_path: Path, ledger_conn: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", str(tmp_path / "default-cache"))
    op = operator(_paths_transform, {"flights": str(flights_dir)}, None, pass_paths=True)
    result = op.execute(context())
    assert result["hit"] is False and result["uri"].startswith(str(tmp_path / "default-cache"))


@pytest.mark.parametrize("default", ["/", "file:///", "~"])
def test_a_default_cache_at_the_machines_root_is_refused_before_anything_is_read(
    default: str,
    flights_dir: Path,
    ledger_conn: Ledger,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default was never checked: COSTAWARE_FEATURE_CACHE=/ made each entry's folder directly under /.
    monkeypatch.setenv("COSTAWARE_FEATURE_CACHE", default)
    monkeypatch.setenv("HOME", "/")

    def opened(self: Any, root_uri: str, **kwargs: Any) -> None:
        raise AssertionError(f"the cache at {root_uri!r} was opened")  # and would be written: never under /

    monkeypatch.setattr("costaware.adapters.feature_store.FeatureStore.__init__", opened)
    op = operator(_paths_transform, {"flights": str(flights_dir)}, None, pass_paths=True)  # fine when parsed
    message = (
        "task 'features': store_uri is left out, so the default cache, $COSTAWARE_FEATURE_CACHE, "
        f"{default!r} is the root, /, of the whole machine"
    )
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        op.execute(context())
    assert ledger_conn.entries() == []


def test_templated_settings_are_checked_once_rendered_before_the_transform_runs(
    flights_dir: Path, tmp_path: Path, ledger_conn: Ledger
) -> None:
    ran: list[int] = []

    def transform(inputs: dict[str, Any]) -> pd.DataFrame:
        ran.append(1)
        return pd.DataFrame({"x": [1]})

    op = operator(
        transform, {"flights": str(flights_dir)}, "{{ params.store }}", usd_per_hour="{{ params.rate }}"
    )
    op.store_uri, op.usd_per_hour = str(tmp_path / "cache"), "-0.19"  # what they rendered to
    with pytest.raises(AirflowFailException, match="usd_per_hour"):
        op.execute(context())
    assert ran == [] and not (tmp_path / "cache").exists() and ledger_conn.entries() == []


def test_inputs_a_template_rendered_to_text_fail_without_writing(tmp_path: Path, ledger_conn: Ledger) -> None:
    op = operator(_paths_transform, "{{ ti.xcom_pull(task_ids='land') }}", str(tmp_path / "cache"))  # type: ignore[arg-type]
    op.inputs = "s3://bucket/flights"  # type: ignore[assignment]  # what it rendered to
    with pytest.raises(AirflowFailException, match=r"inputs must be a non-empty \{name: URI or Asset\}"):
        op.execute(context())
    assert not (tmp_path / "cache").exists() and ledger_conn.entries() == []


def test_an_input_that_is_not_parquet_fails_without_retry_or_cache_entry(
    transform_module: Any, tmp_path: Path, ledger_conn: Ledger
) -> None:
    folder = tmp_path / "flights"
    folder.mkdir()
    (folder / "2013-01-01.parquet").write_bytes(b"route,delay\nJFK-LAX,10\n")  # a CSV named .parquet
    op = operator(transform_module(), {"flights": str(folder)}, str(tmp_path / "cache"))
    with pytest.raises(
        AirflowFailException, match=r"input '.*/flights' is not readable as parquet"
    ) as failed:
        op.execute(context())
    # The file, and what to do with a stray or broken one (it only said to wait for a writer).
    assert "2013-01-01.parquet" in str(failed.value)
    assert "fix the file it names or move it out of the input" in str(failed.value)
    assert ledger_conn.entries() == []
    assert not list((tmp_path / "cache").rglob("*.parquet"))


def test_an_argument_given_only_in_the_default_args_of_partial_is_warned_of_as_airflow_drops_it(
    flights_dir: Path,
) -> None:
    # Airflow's partial keeps BaseOperator's arguments alone of a task's default_args: version was dropped
    # in silence, and every copy keyed by the transform's source.
    import warnings

    import pendulum
    from airflow.sdk import DAG

    given = {"transform": _paths_transform, "inputs": {"flights": str(flights_dir)}, "pass_paths": True}
    with DAG("partial_defaults", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
        message = (
            "task 'features': CachedFeaturesOperator.partial(default_args=...) gives version, which Airflow "
            "drops from a mapped task's own default_args (it keeps BaseOperator's arguments alone): pass "
            "version to .partial() itself, or in the DAG's default_args"
        )
        with pytest.warns(UserWarning, match=re.escape(message)):
            mapped = CachedFeaturesOperator.partial(
                task_id="features", default_args={"version": "v9", "retries": 3}, **given
            ).expand(store_uri=["/srv/features"])
        assert mapped.unmap({"store_uri": "/srv/features"}).version is None  # what the warning is about
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Airflow's own arguments, and ours given to partial: nothing
            CachedFeaturesOperator.partial(
                task_id="kept", default_args={"retries": 3, "version": "v8"}, version="v9", **given
            ).expand(store_uri=["/srv/features"])


def test_a_none_store_uri_in_an_expand_kwargs_list_written_out_is_refused_when_the_dag_is_parsed(
    flights_dir: Path, tmp_path: Path
) -> None:
    # .expand(store_uri=[..., None]) was refused at parse, .expand_kwargs([..., {"store_uri": None}]) only as
    # that copy ran, after the others.
    import pendulum
    from airflow.sdk import DAG, BaseOperator

    args = {"ledger_conn_id": "test_ledger", "usd_per_hour": "3.60", "pass_paths": True}
    inputs = {"flights": str(flights_dir)}
    with DAG("listed_kwargs", schedule=None, start_date=pendulum.datetime(2026, 1, 1)) as dag:
        partial = CachedFeaturesOperator.partial(
            task_id="features", transform=_paths_transform, inputs=inputs, **args
        )
        message = (
            "task 'features': store_uri is None in element 1 of CachedFeaturesOperator.partial(...)"
            ".expand_kwargs([...]), which names no store for that copy: give each element a location, or "
            "leave store_uri out of that element for the default cache"
        )
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            partial.expand_kwargs([{"store_uri": str(tmp_path / "a")}, {"store_uri": None, "version": "v2"}])
        assert "features" not in dag.task_dict  # nothing was added to the DAG
        # An XComArg (the list, or one element) is known only as the copies run: left to them.
        lookup = BaseOperator(task_id="lookup")
        from_xcom = CachedFeaturesOperator.partial(
            task_id="from_xcom", transform=_paths_transform, inputs=inputs, **args
        ).expand_kwargs(lookup.output)
        CachedFeaturesOperator.partial(
            task_id="element_from_xcom", transform=_paths_transform, inputs=inputs, **args
        ).expand_kwargs([{"store_uri": str(tmp_path / "a")}, lookup.output])
        listed = CachedFeaturesOperator.partial(
            task_id="listed", transform=_paths_transform, inputs=inputs, **args
        ).expand_kwargs([{"store_uri": str(tmp_path / "a")}, {"version": "v2"}])
    assert {"from_xcom", "element_from_xcom", "listed"} <= set(dag.task_dict)
    assert listed.unmap({"store_uri": str(tmp_path / "a")}).store_uri == str(tmp_path / "a")
    with pytest.raises(AirflowFailException, match=re.escape("store_uri None names nothing")):
        from_xcom.unmap({"store_uri": None}).execute(context())
