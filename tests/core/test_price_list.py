"""Parsing AWS Price List documents: GetProducts items, bulk offer files in JSON and CSV."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costaware.core.errors import ConfigurationError, InvalidPriceDataError
from costaware.core.price_figures import PriceFigure, format_age, is_stale
from costaware.core.price_list import (
    prices_from_offer_csv,
    prices_from_offer_file,
    prices_from_offer_json,
    prices_from_products,
    product_filters,
    service_name,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "price_list"


def items(name: str) -> list[str]:
    """The fixture's items as the API returns them: one JSON string each."""
    return [json.dumps(item) for item in json.loads((FIXTURES / name).read_text())]


def as_table(prices: list) -> dict[str, Decimal]:  # type: ignore[type-arg]
    return {p.instance_type: p.usd_per_hour for p in prices}


def test_get_products_keeps_linux_shared_on_demand_only() -> None:
    prices = prices_from_products(items("ec2_get_products.json"), service="ec2")
    # m5.large: Windows, RHEL, dedicated, SQL and reservation-capacity rows and the Reserved term are
    # all cheaper or dearer than 0.096; only the Linux shared on-demand figure may survive.
    # c7g.xlarge: two OnDemand terms, the newer (2026-07-01) wins over the older, dearer one.
    # p5e.48xlarge: priced 0.0000000000 (not sold): no figure.
    assert as_table(prices) == {
        "c7g.xlarge": Decimal("0.1450000000"),
        "m5.large": Decimal("0.0960000000"),
        "m5n.2xlarge": Decimal("0.4760000000"),
    }
    m5 = next(p for p in prices if p.instance_type == "m5.large")
    assert (m5.service, m5.region, m5.sku, m5.effective_date) == (
        "ec2",
        "us-east-1",
        "AAAM5LARGE0001",
        "2026-07-01T00:00:00Z",
    )


def test_get_products_accepts_parsed_items_and_filters() -> None:
    parsed = json.loads((FIXTURES / "ec2_get_products.json").read_text())
    prices = prices_from_products(parsed, service="AmazonEC2", types="m5*", regions=["us-east-1"])
    assert list(as_table(prices)) == ["m5.large", "m5n.2xlarge"]
    assert prices_from_products(parsed, service="ec2", regions=["eu-west-1"]) == []


def test_sagemaker_training_component_only() -> None:
    prices = prices_from_products(items("sagemaker_get_products.json"), service="sagemaker")
    assert as_table(prices) == {
        "ml.g5.xlarge": Decimal("1.4080000000"),
        "ml.m5.large": Decimal("0.1150000000"),
    }
    assert {p.service for p in prices} == {"sagemaker"}


@pytest.mark.parametrize(
    ("load", "suffix"),
    [
        (prices_from_offer_json, "json"),
        (prices_from_offer_csv, "csv"),
        (prices_from_offer_file, "json"),
        (prices_from_offer_file, "csv"),
    ],
)
def test_bulk_offer_files(load, suffix: str) -> None:  # type: ignore[no-untyped-def]
    prices = load((FIXTURES / f"ec2_offer_us-east-1.{suffix}").read_text())
    # r7i.large Linux (not the Windows/RHEL rows, not the Reserved term); g6.xlarge; trn2.48xlarge is 0
    # (unavailable) and gp3 storage is not per hour: neither appears.
    assert as_table(prices) == {"g6.xlarge": Decimal("0.8048000000"), "r7i.large": Decimal("0.1323000000")}
    assert all(p.region == "us-east-1" and p.service == "ec2" for p in prices)


def test_offer_json_type_glob() -> None:
    text = (FIXTURES / "ec2_offer_us-east-1.json").read_text()
    assert list(as_table(prices_from_offer_json(text, types="g6.*"))) == ["g6.xlarge"]


def test_offer_without_region_code_uses_the_given_region() -> None:
    document = json.loads((FIXTURES / "ec2_offer_us-east-1.json").read_text())
    for product in document["products"].values():
        product["attributes"].pop("regionCode")
    text = json.dumps(document)
    with pytest.raises(InvalidPriceDataError, match="names no regionCode: give the file's region"):
        prices_from_offer_json(text)
    assert {p.region for p in prices_from_offer_json(text, region="us-east-1")} == {"us-east-1"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"offerCode": "AmazonEC2",\n "products": {\n  "A": 1,,\n}}', "not valid JSON at line 3"),
        ('{"offerCode": "AmazonEC2"}', "has no 'products' object"),
        (
            '{"offerCode": "AmazonS3", "products": {}}',
            "offer file's offerCode is 'AmazonS3': costaware reads",
        ),
        (
            '{"products": {}}',
            "offer file's offerCode is '': costaware reads the AmazonEC2 and AmazonSageMaker",
        ),
        ('"FormatVersion","v1.0"\n"SKU","Unit"\n', "no header row with SKU and TermType"),
    ],
)
def test_malformed_offer_file(text: str, message: str) -> None:
    with pytest.raises((InvalidPriceDataError, ConfigurationError), match=message):
        prices_from_offer_file(text)


def test_malformed_csv_names_the_line() -> None:
    lines = (FIXTURES / "ec2_offer_us-east-1.csv").read_text().splitlines()
    short = [*lines[:7], '"BBBX","JRTCKXETXF","OnDemand"', *lines[7:]]
    with pytest.raises(InvalidPriceDataError, match="offer CSV line 8: 3 fields where the header has 25"):
        prices_from_offer_csv("\n".join(short))
    bad = [*lines[:6], lines[6].replace('"0.1323000000"', '"0.13x"')]
    with pytest.raises(InvalidPriceDataError, match=r"offer CSV line 7: price '0.13x' is not a number"):
        prices_from_offer_csv("\n".join(bad))


@pytest.mark.parametrize("column", ["Instance Type", "Operating System", "Unit", "PricePerUnit"])
def test_a_csv_without_a_column_the_prices_need_names_it(column: str) -> None:
    lines = (FIXTURES / "ec2_offer_us-east-1.csv").read_text().splitlines()
    lines[5] = lines[5].replace(f'"{column}"', '"Something Else"')
    with pytest.raises(InvalidPriceDataError, match=f"offer CSV's header has no '{column}' column"):
        prices_from_offer_csv("\n".join(lines))


def test_a_price_in_exponent_notation_is_refused() -> None:
    lines = (FIXTURES / "ec2_offer_us-east-1.csv").read_text().splitlines()
    lines[6] = lines[6].replace('"0.1323000000"', '"1e3"')
    with pytest.raises(InvalidPriceDataError, match=r"line 7: price '1e3' is written with an exponent"):
        prices_from_offer_csv("\n".join(lines))


def test_a_price_change_published_ahead_of_its_date_is_not_todays_price() -> None:
    # AWS lists a future term beside today's: it won as "the newest", and 0.05 replaced 0.1323.
    lines = (FIXTURES / "ec2_offer_us-east-1.csv").read_text().splitlines()
    later = (
        lines[6]
        .replace("BBBR7ILARGE001", "BBBR7ILARGEN01")
        .replace('"2026-07-01"', '"2027-01-01"')
        .replace('"0.1323000000"', '"0.0500000000"')
    )
    text = "\n".join([*lines, later])
    assert as_table(prices_from_offer_csv(text, as_of="2026-11-29T12:00:00+00:00"))["r7i.large"] == Decimal(
        "0.1323"
    )
    assert as_table(prices_from_offer_csv(text, as_of="2027-01-02T00:00:00+00:00"))["r7i.large"] == Decimal(
        "0.05"
    )


def test_a_capacity_block_row_of_the_csv_is_no_on_demand_price() -> None:
    # AWS's index.csv names the column "MarketOption"; read as "Market Option" only, a later-dated capacity
    # block price replaced r7i.large's on-demand one.
    lines = (FIXTURES / "ec2_offer_us-east-1.csv").read_text().splitlines()
    block = (
        lines[6]
        .replace("BBBR7ILARGE001", "BBBR7ILARGECB1")
        .replace('"2026-07-01"', '"2026-07-15"')
        .replace('"0.1323000000"', '"0.0500000000"')
    )
    assert block.endswith('"OnDemand"')
    block = block[: -len('"OnDemand"')] + '"CapacityBlock"'
    table = as_table(prices_from_offer_csv("\n".join([*lines, block])))
    assert table["r7i.large"] == Decimal("0.1323")


@pytest.mark.parametrize("price", ["-0.0960000000", "-1"])
def test_negative_price_is_rejected(price: str) -> None:
    document = json.loads((FIXTURES / "ec2_get_products.json").read_text())[0]
    dimension = next(iter(document["terms"]["OnDemand"].values()))["priceDimensions"]
    next(iter(dimension.values()))["pricePerUnit"]["USD"] = price
    with pytest.raises(InvalidPriceDataError, match=f"SKU AAAM5LARGE0001.*price {price} is negative"):
        prices_from_products([json.dumps(document)], service="ec2")


def test_a_price_no_instance_costs_and_a_name_that_is_no_type_are_refused() -> None:
    # Both were stored: `prices show "foo bar"` then priced it, and $99,999,999,999,999 an hour was taken.
    document = json.loads((FIXTURES / "ec2_get_products.json").read_text())[0]
    dimension = next(iter(document["terms"]["OnDemand"].values()))["priceDimensions"]
    next(iter(dimension.values()))["pricePerUnit"]["USD"] = "99999999999999"
    with pytest.raises(InvalidPriceDataError, match="more than any instance costs"):
        prices_from_products([json.dumps(document)], service="ec2")
    document = json.loads((FIXTURES / "ec2_get_products.json").read_text())[0]
    document["product"]["attributes"]["instanceType"] = "foo bar"
    with pytest.raises(InvalidPriceDataError, match="instance type 'foo bar' is not an instance type name"):
        prices_from_products([json.dumps(document)], service="ec2")


def test_malformed_item() -> None:
    with pytest.raises(InvalidPriceDataError, match="PriceList item 2 is not valid JSON"):
        prices_from_products(['{"product": {}}', "{oops"], service="ec2")
    with pytest.raises(InvalidPriceDataError, match="PriceList item 1 has no 'product' object"):
        prices_from_products(["[]"], service="ec2")


def test_filters_and_services() -> None:
    ec2 = product_filters("ec2", region="eu-west-1", instance_type="m5.large")
    assert {f["Field"]: f["Value"] for f in ec2} == {
        "regionCode": "eu-west-1",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "instanceType": "m5.large",
    }
    assert all(f["Type"] == "TERM_MATCH" for f in ec2)
    sm = product_filters("sagemaker", region="us-east-1")
    assert {f["Field"]: f["Value"] for f in sm} == {"regionCode": "us-east-1", "component": "Training"}
    assert service_name("AmazonSageMaker") == "sagemaker"
    with pytest.raises(ConfigurationError, match="unknown price service 'rds': use ec2 or sagemaker"):
        service_name("rds")


def test_figure_source_and_age() -> None:
    fetched = datetime(2026, 11, 1, tzinfo=timezone.utc)
    now = fetched + timedelta(days=8, hours=3)
    fresh = PriceFigure(
        "ec2", "m5.large", "us-east-1", Decimal("0.096"), "aws-price-list", fetched, cached=True
    )
    assert fresh.price_source == "aws-price-list-cache"
    assert format_age(fresh.age(now)) == "8 d 3 h"  # type: ignore[arg-type]
    assert is_stale(fetched, timedelta(days=7), now)
    assert not is_stale(fetched, timedelta(days=9), now)
    stale = PriceFigure(
        "ec2", "m5.large", "us-east-1", Decimal(1), "offer-file", fetched, cached=True, stale=True
    )
    assert stale.price_source == "offer-file-cache-stale"
    bundled = PriceFigure("ec2", "m5.large", "us-east-1", Decimal(1), "bundled-snapshot")
    assert bundled.price_source == "on-demand-list" and bundled.age(now) is None
    assert format_age(timedelta(minutes=75)) == "1 h 15 min"
    assert format_age(timedelta(seconds=30)) == "0 min"
