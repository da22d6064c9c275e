"""The price cache, the live Price List path (botocore Stubber, moto server) and the lookup order."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from costaware.adapters.aws_pricing import PriceListFetcher, pricing_client
from costaware.adapters.price_source import OnDemandPrices, PriceCache, list_price, on_demand_usd_per_hour
from costaware.core.errors import ConfigurationError, InvalidPriceDataError, PriceNotFoundError
from costaware.core.price_list import ListPrice, prices_from_products

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "price_list"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
TTL = timedelta(hours=24)


def fixture_items(name: str) -> list[str]:
    return [json.dumps(item) for item in json.loads((FIXTURES / name).read_text())]


def stubbed_client() -> tuple[object, Stubber]:
    client = boto3.client(
        "pricing", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    return client, Stubber(client)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class CountingFetcher:
    """A real PriceListFetcher over a stubbed client, counting calls."""

    def __init__(self, stubber: Stubber, fetcher: PriceListFetcher) -> None:
        self.stubber = stubber
        self.fetcher = fetcher
        self.calls = 0

    def fetch(
        self, service: str, region: str, *, instance_type: str | None = None, types: str | None = None
    ) -> list[ListPrice]:
        self.calls += 1
        return self.fetcher.fetch(service, region, instance_type=instance_type, types=types)


def test_fetcher_follows_pages_and_parses() -> None:
    client, stubber = stubbed_client()
    pages = fixture_items("ec2_get_products.json")
    base = {
        "ServiceCode": "AmazonEC2",
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
        "Filters": [
            {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
            {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
            {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
            {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
            {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
        ],
    }
    stubber.add_response(
        "get_products", {"PriceList": pages[:4], "NextToken": "page2", "FormatVersion": "aws_v1"}, base
    )
    stubber.add_response(
        "get_products", {"PriceList": pages[4:], "FormatVersion": "aws_v1"}, {**base, "NextToken": "page2"}
    )
    fetcher = PriceListFetcher(client)
    with stubber:
        prices = fetcher.fetch("ec2", "us-east-1", types="m5*")
    stubber.assert_no_pending_responses()
    assert fetcher.requests == 2
    assert {p.instance_type: p.usd_per_hour for p in prices} == {
        "m5.large": Decimal("0.0960000000"),
        "m5n.2xlarge": Decimal("0.4760000000"),
    }


def test_pricing_client_comes_from_the_airflow_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {"conn_type": "aws", "login": "k", "password": "s", "extra": {"region_name": "eu-west-1"}}
    monkeypatch.setenv("AIRFLOW_CONN_PRICES_TEST", json.dumps(conn))
    client = pricing_client("prices_test")
    # The connection's region is eu-west-1, but Price List answers in a few regions only: pinned.
    assert client.meta.service_model.service_name == "pricing"
    assert client.meta.region_name == "us-east-1"
    fetcher = PriceListFetcher.from_connection("prices_test")
    stubber = Stubber(fetcher.client)
    stubber.add_response("get_products", {"PriceList": fixture_items("sagemaker_get_products.json")})
    with stubber:
        prices = fetcher.fetch("sagemaker", "us-east-1", instance_type="ml.g5.xlarge")
    assert [(p.instance_type, p.usd_per_hour) for p in prices] == [
        ("ml.g5.xlarge", Decimal("1.4080000000")),
        ("ml.m5.large", Decimal("0.1150000000")),
    ]


def test_cache_round_trip_and_replace(ledger) -> None:  # type: ignore[no-untyped-def]
    cache = PriceCache(ledger)
    prices = prices_from_products(fixture_items("ec2_get_products.json"), service="ec2")
    assert cache.put(prices, origin="aws-price-list", fetched_at=T0) == 3
    row = cache.get("m5.large", "us-east-1")
    assert row is not None
    assert (row.price.usd_per_hour, row.origin, row.fetched_at) == (
        Decimal("0.0960000000"),
        "aws-price-list",
        T0,
    )
    newer = ListPrice("ec2", "m5.large", "us-east-1", Decimal("0.09"), "SKU2", "2026-11-01")
    cache.put([newer], origin="offer-file", fetched_at=T0 + timedelta(hours=1))
    row = cache.get("m5.large", "us-east-1")
    assert row is not None and (row.price.usd_per_hour, row.origin) == (Decimal("0.09"), "offer-file")
    assert len(cache.rows()) == 3 and cache.rows(service="sagemaker") == []


@pytest.mark.parametrize("price", ["0", "-0.5"])
def test_cache_refuses_zero_and_negative_prices(ledger, price: str) -> None:  # type: ignore[no-untyped-def]
    cache = PriceCache(ledger)
    good = ListPrice("ec2", "m5.large", "us-east-1", Decimal("0.096"))
    bad = ListPrice("ec2", "c5.large", "us-east-1", Decimal(price))
    with pytest.raises(
        InvalidPriceDataError, match=f"c5.large in us-east-1 must be > 0 USD/hour, got {price}"
    ):
        cache.put([good, bad], origin="offer-file", fetched_at=T0)
    assert cache.rows() == []  # nothing written, not even the good row


def test_lookup_order_cache_then_live_then_bundled(ledger) -> None:  # type: ignore[no-untyped-def]
    client, stubber = stubbed_client()
    fetcher = CountingFetcher(stubber, PriceListFetcher(client))
    clock = Clock(T0)
    prices = OnDemandPrices(ledger=ledger, fetcher=fetcher, ttl=TTL, now=clock)
    stubber.add_response("get_products", {"PriceList": fixture_items("ec2_get_products.json")[:1]})
    with stubber:
        live = prices.figure("m5.large", "us-east-1")
    assert (live.usd_per_hour, live.price_source, live.fetched_at) == (
        Decimal("0.0960000000"),
        "aws-price-list",
        T0,
    )
    # Within the TTL: the cache answers, AWS is not asked again.
    clock.now = T0 + TTL - timedelta(minutes=1)
    cached = prices.figure("m5.large", "us-east-1")
    assert (cached.price_source, cached.stale, fetcher.calls) == ("aws-price-list-cache", False, 1)
    # Past the TTL and AWS refuses: the bundled snapshot (never the stale figure as if fresh).
    clock.now = T0 + TTL + timedelta(minutes=1)
    stubber.add_client_error("get_products", "ThrottlingException", "Rate exceeded")
    with stubber:
        fallback = prices.figure("m5.large", "us-east-1")
    assert (fallback.price_source, fallback.usd_per_hour, fetcher.calls) == (
        "on-demand-list",
        Decimal("0.096"),
        2,
    )


def test_stale_cache_is_flagged_when_nothing_else_knows(ledger) -> None:  # type: ignore[no-untyped-def]
    cache = PriceCache(ledger)
    sm = prices_from_products(fixture_items("sagemaker_get_products.json"), service="sagemaker")
    cache.put(sm, origin="offer-file", fetched_at=T0)
    prices = OnDemandPrices(ledger=ledger, ttl=TTL, now=Clock(T0 + timedelta(days=3)))
    figure = prices.figure("ml.g5.xlarge", "us-east-1", service="sagemaker")
    assert (figure.usd_per_hour, figure.stale, figure.price_source) == (
        Decimal("1.4080000000"),
        True,
        "offer-file-cache-stale",
    )
    fresh = OnDemandPrices(ledger=ledger, ttl=TTL, now=Clock(T0 + timedelta(hours=1)))
    assert on_demand_usd_per_hour("ml.m5.large", "us-east-1", "sagemaker", prices=fresh) == Decimal("0.115")
    with pytest.raises(PriceNotFoundError, match=r"no sagemaker price for 'ml.p4d.24xlarge'.*prices refresh"):
        fresh.figure("ml.p4d.24xlarge", "us-east-1", service="sagemaker")


def test_a_type_only_the_cache_knows(ledger) -> None:  # type: ignore[no-untyped-def]
    # hpc7a.12xlarge has no price in the bundled snapshot; an imported figure prices it.
    prices = OnDemandPrices(ledger=ledger, ttl=TTL, now=Clock(T0))
    with pytest.raises(PriceNotFoundError, match="without an on-demand price: run `costaware prices refresh"):
        prices.figure("hpc7a.12xlarge", "us-east-1")
    PriceCache(ledger).put(
        [ListPrice("ec2", "hpc7a.12xlarge", "us-east-1", Decimal("7.2"))], origin="offer-file", fetched_at=T0
    )
    assert prices.figure("hpc7a.12xlarge", "us-east-1").price_source == "offer-file-cache"


def test_plans_and_gates_price_a_type_as_the_ledger_does(ledger) -> None:  # type: ignore[no-untyped-def]
    # The spend gate's type check, the spot window's and the remote plan's on-demand price read the snapshot
    # only: an imported price of a type it lacks was refused there, and a refreshed one ignored.
    with pytest.raises(PriceNotFoundError):
        list_price(ledger, "hpc7a.12xlarge", "us-east-1")
    now = datetime.now(timezone.utc)
    PriceCache(ledger).put(
        [
            ListPrice("ec2", "hpc7a.12xlarge", "us-east-1", Decimal("7.2")),
            ListPrice("ec2", "m5.large", "us-east-1", Decimal("0.1")),
            ListPrice("sagemaker", "ml.g5.xlarge", "us-east-1", Decimal("1.408")),
        ],
        origin="offer-file",
        fetched_at=now,
    )
    assert list_price(ledger, "hpc7a.12xlarge", "us-east-1") == Decimal("7.2")
    assert list_price(ledger, "m5.large", "us-east-1") == Decimal("0.1")  # not the snapshot's 0.096
    assert list_price(ledger, "ml.g5.xlarge", "us-east-1") == Decimal("1.408")


def test_no_cache_no_live_is_the_bundled_snapshot() -> None:
    prices = OnDemandPrices()
    figure = prices.figure("m5n.2xlarge", "us-east-1")
    assert (figure.usd_per_hour, figure.origin, figure.fetched_at) == (
        Decimal("0.476"),
        "bundled-snapshot",
        None,
    )
    with pytest.raises(ConfigurationError, match="TTL must be positive"):
        OnDemandPrices(ttl=timedelta(0))


def test_moto_server_without_pricing_falls_back(  # type: ignore[no-untyped-def]
    ledger, monkeypatch: pytest.MonkeyPatch, moto_endpoint: str
) -> None:
    conn = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"region_name": "us-east-1", "endpoint_url": moto_endpoint},
    }
    monkeypatch.setenv("AIRFLOW_CONN_MOTO_PRICES", json.dumps(conn))
    fetcher = PriceListFetcher.from_connection("moto_prices")
    # moto answers GetProducts with an error: the bundled snapshot prices the type, nothing is cached.
    prices = OnDemandPrices(ledger=ledger, fetcher=fetcher, ttl=TTL, now=Clock(T0))
    figure = prices.figure("c7g.xlarge", "us-east-1")
    assert (figure.price_source, figure.usd_per_hour) == ("on-demand-list", Decimal("0.145"))
    assert PriceCache(ledger).rows() == []


def test_settings(monkeypatch: pytest.MonkeyPatch, ledger) -> None:  # type: ignore[no-untyped-def]
    from costaware.adapters.price_source import configured_prices, ttl_from_settings

    assert ttl_from_settings() == timedelta(hours=168)
    monkeypatch.setenv("AIRFLOW__COSTAWARE__PRICE_TTL_HOURS", "12")
    assert ttl_from_settings() == timedelta(hours=12)
    monkeypatch.setenv("AIRFLOW__COSTAWARE__PRICE_TTL_HOURS", " ")  # a blank setting: the default
    assert ttl_from_settings() == timedelta(hours=168)
    for bad in ("0", "-3", "soon", "inf"):
        monkeypatch.setenv("AIRFLOW__COSTAWARE__PRICE_TTL_HOURS", bad)
        with pytest.raises(
            ConfigurationError, match=f"price_ttl_hours must be a positive number of hours, got '{bad}'"
        ):
            ttl_from_settings()
    monkeypatch.setenv("AIRFLOW__COSTAWARE__PRICE_TTL_HOURS", "12")
    assert configured_prices(ledger).fetcher is None  # no price_aws_conn_id: no live look-ups
    monkeypatch.setenv("AIRFLOW__COSTAWARE__PRICE_AWS_CONN_ID", "aws_default")
    configured = configured_prices(ledger)
    assert isinstance(configured.fetcher, PriceListFetcher) and configured.ttl == timedelta(hours=12)
    assert configured_prices(cache=False).cache is None


def test_cache_on_postgresql(postgres_url: str) -> None:
    from services import fresh_postgres_database

    from costaware import Ledger

    ledger = Ledger.from_url(fresh_postgres_database(postgres_url, "prices"))
    try:
        cache = PriceCache(ledger)
        sm = prices_from_products(fixture_items("sagemaker_get_products.json"), service="sagemaker")
        cache.put(sm, origin="aws-price-list", fetched_at=T0)
        cache.put(sm[:1], origin="offer-file", fetched_at=T0 + timedelta(hours=2))  # replaces one row
        rows = cache.rows(service="sagemaker")
        assert [(r.price.instance_type, r.origin, r.fetched_at) for r in rows] == [
            ("ml.g5.xlarge", "offer-file", T0 + timedelta(hours=2)),
            ("ml.m5.large", "aws-price-list", T0),
        ]
        figure = OnDemandPrices(ledger=ledger, ttl=TTL, now=Clock(T0 + timedelta(hours=3))).figure(
            "ml.m5.large", "us-east-1", "sagemaker"
        )
        assert (figure.usd_per_hour, figure.price_source) == (Decimal("0.1150000000"), "aws-price-list-cache")
    finally:
        ledger.dispose()
