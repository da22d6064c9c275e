"""DataLocalityCheckOperator.execute against moto's S3 (buckets in two regions) and a SQLite ledger."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from airflow.sdk.exceptions import AirflowFailException

from costaware.adapters.ledger.store import Ledger
from costaware.adapters.object_store import S3Options
from costaware.adapters.price_files import bundled_catalog
from costaware.core.errors import (
    BudgetExceededError,
    ConfigurationError,
    CrossRegionEgressError,
    PriceNotFoundError,
)
from costaware.operators.data_locality import DataLocalityCheckOperator

SIZE = 3 * 2**20  # 3 MiB in two objects


@pytest.fixture
def buckets(moto_endpoint: str, moto_aws_conn: str) -> dict[str, str]:
    client = boto3.client(
        "s3", **S3Options("testing", "testing", None, "us-east-1", moto_endpoint).boto3_kwargs()
    )
    names = {"eu": f"data-eu-{uuid.uuid4().hex[:8]}", "us": f"data-us-{uuid.uuid4().hex[:8]}"}
    client.create_bucket(Bucket=names["eu"], CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    client.create_bucket(Bucket=names["us"])
    for bucket in names.values():
        client.put_object(Bucket=bucket, Key="flights/a.parquet", Body=b"a" * (2 * 2**20))
        client.put_object(Bucket=bucket, Key="flights/b.parquet", Body=b"b" * 2**20)
    return names


CONTEXT = {
    "ti": SimpleNamespace(dag_id="retrain", task_id="locality", run_id="r1", try_number=1, map_index=-1),
    "run_id": "r1",
}


def check(inputs: Any, compute_region: str = "us-east-1", **kwargs: Any) -> DataLocalityCheckOperator:
    return DataLocalityCheckOperator(
        task_id="locality",
        inputs=inputs,
        compute_region=compute_region,
        aws_conn_id="moto_aws",
        ledger_conn_id="test_ledger",
        tags={"project": "flights"},
        **kwargs,
    )


def expected_usd(src: str, dst: str, size: int = SIZE) -> Decimal:
    price = bundled_catalog().transfer_usd_per_gb(src, dst)
    return (Decimal(size) / Decimal(2**30) * price).quantize(Decimal("0.000001"))


def test_cross_region_is_blocked_with_the_numbers(buckets: dict[str, str], ledger_conn: Ledger) -> None:
    usd = expected_usd("eu-west-1", "us-east-1")
    assert usd > 0
    with pytest.raises(AirflowFailException) as info:
        check({"flights": f"s3://{buckets['eu']}/flights"}).execute(CONTEXT)
    cause = info.value.__cause__
    assert isinstance(cause, CrossRegionEgressError)
    message = str(cause)
    for part in (f"bucket '{buckets['eu']}'", "eu-west-1", "us-east-1", f"{SIZE:,} bytes", f"${usd}"):
        assert part in message, part
    [entry] = ledger_conn.entries()
    assert (entry["kind"], entry["estimated"], entry["outcome"], entry["usd"]) == (
        "egress",
        True,
        "blocked",
        usd,
    )
    assert entry["unit"] == "gb" and entry["project"] == "flights"
    assert ledger_conn.spent() == 0  # avoided egress is not spend


def test_same_region_passes(buckets: dict[str, str], ledger_conn: Ledger) -> None:
    result = check({"flights": f"s3://{buckets['us']}/flights"}).execute(CONTEXT)
    assert result["egress_usd"] == "0.000000" and result["uris"] == {
        "flights": f"s3://{buckets['us']}/flights"
    }
    [row] = result["inputs"]
    assert (row["region"], row["bytes"], row["how"]) == ("us-east-1", SIZE, "head_bucket")
    [entry] = ledger_conn.entries()
    assert (entry["outcome"], entry["usd"], entry["estimated"]) == ("same_region", Decimal(0), True)
    # The listener's entry of this try (its worker time) carries the operator's tags too.
    from costaware.glue import pop_annotations

    assert pop_annotations(CONTEXT["ti"])["tags"] == {"project": "flights"}


def test_warn_records_the_egress_as_spend(buckets: dict[str, str], ledger_conn: Ledger, capsys: Any) -> None:
    result = check([f"s3://{buckets['eu']}/flights"], policy="warn").execute(CONTEXT)
    usd = expected_usd("eu-west-1", "us-east-1")
    assert (
        Decimal(result["egress_usd"]) == usd
        and "cross-region egress of an estimated" in capsys.readouterr().out
    )
    [entry] = ledger_conn.entries()
    assert (entry["outcome"], entry["estimated"], entry["usd"]) == ("warned", False, usd)


def _retry_context(try_number: int) -> dict[str, Any]:
    ti = SimpleNamespace(
        dag_id="retrain", task_id="locality", run_id="r1", try_number=try_number, map_index=-1
    )
    return {"ti": ti, "run_id": "r1"}


@pytest.mark.parametrize("policy", ["warn", "block"])
def test_a_retry_records_each_inputs_egress_once(
    buckets: dict[str, str], ledger_conn: Ledger, policy: str
) -> None:
    # A second try wrote a second "warned" entry (random uid): one transfer counted twice as spend.
    eu, us = f"s3://{buckets['eu']}/flights", f"s3://{buckets['us']}/flights"
    op = check([eu, eu, us], policy=policy)  # the same URI twice is two transfers
    for try_number in (1, 2):
        try:
            op.execute(_retry_context(try_number))
        except AirflowFailException:
            assert policy == "block"
    usd = expected_usd("eu-west-1", "us-east-1")
    moved = "warned" if policy == "warn" else "blocked"
    outcomes = sorted((e["outcome"], e["usd"]) for e in ledger_conn.entries())
    assert outcomes == sorted([(moved, usd), (moved, usd), ("same_region", Decimal(0))])
    assert ledger_conn.spent() == (2 * usd if policy == "warn" else 0)


def test_allow_within_budget_reserves_and_records(buckets: dict[str, str], ledger_conn: Ledger) -> None:
    ledger_conn.set_budget("project=flights", "month", "1.00")
    usd = expected_usd("eu-west-1", "us-east-1")
    result = check({"flights": f"s3://{buckets['eu']}/flights"}, policy="allow_within_budget").execute(
        CONTEXT
    )
    assert Decimal(result["egress_usd"]) == usd
    [entry] = ledger_conn.entries()
    assert (entry["outcome"], entry["estimated"], entry["usd"]) == ("allowed", False, usd)
    assert entry["reservation_id"] and ledger_conn.spent("project=flights") == usd
    [usage] = ledger_conn.usage("project=flights")
    assert usage.reserved_usd == 0 and usage.spent_usd == usd  # settled, not held twice


def test_a_retry_after_a_failed_settle_records_the_transfer_once(
    buckets: dict[str, str], ledger_conn: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry got the same open hold back and wrote a second "allowed" entry: $2 spent for one transfer.
    from costaware.core.errors import LedgerUnavailableError
    from costaware.core.ledger import read_holder

    ledger_conn.set_budget("project=flights", "month", "1.00")
    usd = expected_usd("eu-west-1", "us-east-1")
    real_settle = Ledger.settle

    def settle_fails_once(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(Ledger, "settle", real_settle)
        raise LedgerUnavailableError("server closed the connection unexpectedly")

    monkeypatch.setattr(Ledger, "settle", settle_fails_once)
    op = check({"flights": f"s3://{buckets['eu']}/flights"}, policy="allow_within_budget")
    with pytest.raises(Exception, match="server closed the connection"):
        op.execute(CONTEXT)
    [hold] = ledger_conn.open_reservations()  # the retry finds it by its holder: its task's, egress
    key = read_holder(hold.holder)
    assert key is not None and (key.task_id, key.suffix) == (op.task_id, "egress"), hold.holder
    op.execute(CONTEXT)  # the retry
    [entry] = ledger_conn.entries()
    assert (entry["outcome"], entry["usd"]) == ("allowed", usd)
    [usage] = ledger_conn.usage("project=flights")
    assert usage.reserved_usd == 0 and usage.spent_usd == usd


def test_allow_within_budget_fails_when_the_budget_cannot_cover_it(
    buckets: dict[str, str], ledger_conn: Ledger
) -> None:
    ledger_conn.set_budget("project=flights", "month", "0.00001")
    with pytest.raises(AirflowFailException, match="budget 'project=flights/") as info:
        check({"flights": f"s3://{buckets['eu']}/flights"}, policy="allow_within_budget").execute(CONTEXT)
    assert isinstance(info.value.__cause__, BudgetExceededError)
    [entry] = ledger_conn.entries()
    assert (entry["outcome"], entry["estimated"]) == ("blocked", True)
    assert ledger_conn.spent("project=flights") == 0


def test_same_region_replica_is_used(buckets: dict[str, str], ledger_conn: Ledger, capsys: Any) -> None:
    source, replica = f"s3://{buckets['eu']}/flights", f"s3://{buckets['us']}/flights"
    result = check({"flights": source}, replicas={source: {"us-east-1": replica}}).execute(CONTEXT)
    assert result["uris"] == {"flights": replica} and result["egress_usd"] == "0.000000"
    assert f"using the same-region replica {replica} instead of {source}" in capsys.readouterr().out
    [entry] = ledger_conn.entries()
    assert (entry["outcome"], entry["estimated"]) == ("avoided", True)
    assert entry["usd"] == expected_usd("eu-west-1", "us-east-1")


def test_replica_in_the_wrong_region_is_a_configuration_error(
    buckets: dict[str, str], ledger_conn: Ledger
) -> None:
    source = f"s3://{buckets['eu']}/flights"
    with pytest.raises(AirflowFailException, match="is configured for us-east-1 but lives in eu-west-1"):
        check({"flights": source}, replicas={source: {"us-east-1": source}}).execute(CONTEXT)
    assert ledger_conn.entries() == []


def test_local_inputs_use_the_worker_region(tmp_path: Path, ledger_conn: Ledger, monkeypatch: Any) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.parquet").write_bytes(b"x" * 4096)
    monkeypatch.setenv("COSTAWARE_WORKER_REGION", "eu-west-1")
    with pytest.raises(AirflowFailException, match=r"in eu-west-1 -> compute in us-east-1: 4,096 bytes"):
        check({"local": str(data)}).execute(CONTEXT)
    result = check({"local": str(data)}, compute_region="eu-west-1").execute(CONTEXT)
    assert result["egress_usd"] == "0.000000"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"compute_region": "mars-north-1"},
            PriceNotFoundError,
            "no transfer price from eu-west-1 to 'mars-north-1'",
        ),
        (  # a typo of the data's own region was offered every region but that one
            {"compute_region": "eu-west1"},
            PriceNotFoundError,
            "no transfer price from eu-west-1 to 'eu-west1'; did you mean eu-west-1",
        ),
        ({"inputs": ["s3://bucket/../x"]}, ConfigurationError, r"'\.\.' segment"),
        ({"inputs": ["bigquery://p/d/t"]}, ConfigurationError, "declare its region in declared_regions"),
    ],
)
def test_bad_inputs_fail_without_writing(
    buckets: dict[str, str], ledger_conn: Ledger, kwargs: dict[str, Any], error: type, message: str
) -> None:
    args = {"inputs": [f"s3://{buckets['eu']}/flights"], **kwargs}
    with pytest.raises(AirflowFailException, match=message) as info:
        check(**args).execute(CONTEXT)
    assert isinstance(info.value.__cause__, error)
    assert ledger_conn.entries() == []


def test_unknown_policy_is_rejected_at_parse_time() -> None:
    with pytest.raises(ConfigurationError, match="policy 'maybe' is unknown: use one of block, warn"):
        check(["s3://b/x"], policy="maybe")


def test_a_single_uri_or_a_rendered_list_is_read_as_inputs(
    tmp_path: Path, buckets: dict[str, str], ledger_conn: Ledger, monkeypatch: Any
) -> None:
    # A string was read letter by letter: "/" became an input and the check walked the whole disk.
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.parquet").write_bytes(b"x" * 4096)
    monkeypatch.setenv("COSTAWARE_WORKER_REGION", "us-east-1")
    result = check(str(data)).execute(CONTEXT)
    assert result["uris"] == {"0": str(data)}
    rendered = repr([f"s3://{buckets['us']}/flights", str(data)])  # what a template's list renders to
    assert check(rendered).execute(CONTEXT)["uris"] == {"0": f"s3://{buckets['us']}/flights", "1": str(data)}


def test_a_replica_matches_its_source_with_or_without_a_trailing_slash(
    buckets: dict[str, str], ledger_conn: Ledger
) -> None:
    source, replica = f"s3://{buckets['eu']}/flights", f"s3://{buckets['us']}/flights"
    result = check([source + "/"], replicas={source: {"us-east-1": replica}}).execute(CONTEXT)
    assert result["uris"] == {"0": replica}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"inputs": ""}, "inputs '' name no data"),
        ({"inputs": [" "]}, r"name no data \(empty: \['0'\]\)"),
        ({"inputs": "[s3://a/x]"}, "is text that is no list or dict of URIs"),
        ({"inputs": 42}, "inputs must be a list of URIs or {name: URI}, got int 42"),
        # S3 spelt another way was told to declare a region and size, so the input went unlisted.
        ({"inputs": ["S3://ml-data/flights"]}, "spelt another way: write it 's3://ml-data/flights'"),
        ({"inputs": ["s3a://ml-data/flights"]}, "spelt another way: write it 's3://ml-data/flights'"),
        ({"compute_region": None}, "compute_region is None: name the AWS region the compute runs in"),
    ],
)
def test_inputs_and_regions_that_name_nothing_are_refused_without_writing(
    ledger_conn: Ledger, kwargs: dict[str, Any], message: str
) -> None:
    args = {"inputs": ["s3://bucket/x"], **kwargs}
    with pytest.raises(AirflowFailException, match=message):
        check(**args).execute(CONTEXT)
    assert ledger_conn.entries() == []


def test_replicas_given_flat_are_refused_at_parse_time() -> None:
    with pytest.raises(ConfigurationError, match=r"replicas\['s3://a/x'\] is 's3://b/x': map each source"):
        check(["s3://a/x"], replicas={"s3://a/x": "s3://b/x"})


def test_declared_regions_and_sizes_match_with_or_without_a_trailing_slash(ledger_conn: Ledger) -> None:
    # Declared for "gs://x/flights/", the input "gs://x/flights" was told to declare what was declared.
    op = check(
        ["gs://x/flights"],
        declared_regions={"gs://x/flights/": "us-east-1"},
        declared_bytes={"gs://x/flights/": 4096},
    )
    assert op.execute(CONTEXT)["egress_usd"] == "0.000000"


def test_a_budget_scope_that_rendered_empty_is_refused_not_read_as_every_budget(
    buckets: dict[str, str], ledger_conn: Ledger
) -> None:
    ledger_conn.set_budget("*", "month", "100")
    op = check(
        [f"s3://{buckets['eu']}/flights"], policy="allow_within_budget", budget_scope="{{ params.scope }}"
    )
    op.budget_scope = ""  # what the template rendered to
    with pytest.raises(AirflowFailException, match="budget_scope is empty: give the tags it counts"):
        op.execute(CONTEXT)
    assert ledger_conn.open_reservations() == []
