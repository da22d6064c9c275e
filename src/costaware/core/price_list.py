"""On-demand prices out of AWS Price List documents: pure functions over text and parsed JSON.

Three shapes are read, all documented by AWS:

* a ``GetProducts`` item (Price List Query API): ``{"product": {...}, "serviceCode": ..., "terms":
  {"OnDemand": {"<sku>.<term>": {"priceDimensions": {...}}}}}``, given as a JSON string;
* a bulk offer file in JSON: ``{"offerCode": ..., "products": {"<sku>": {...}}, "terms": {"OnDemand":
  {"<sku>": {"<sku>.<term>": {...}}}}}`` (one level deeper than a ``GetProducts`` item);
* a bulk offer file in CSV: five metadata rows, a header of display names (``SKU``, ``TermType``,
  ``PricePerUnit``, ``Instance Type``, ``Operating System``, ...), one row per price dimension.

Only what costaware charges for is kept: Linux, shared tenancy, no pre-installed software, capacity
status ``Used``, ``OnDemand`` terms priced per hour. ``Reserved`` terms are ignored, and a price of exactly 0
(AWS publishes ``0.0000000000`` for SKUs that are not sold) is skipped. Fetching the documents lives in
``costaware.adapters.aws_pricing``.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from costaware.core.errors import ConfigurationError, InvalidPriceDataError

# Figures with their provenance have their own module; callers import them from here too.

__all__ = [
    "CSV_COLUMNS",
    "EC2_ATTRIBUTES",
    "SAGEMAKER_COMPONENT",
    "SERVICE_CODES",
    "ListPrice",
    "prices_from_offer_csv",
    "prices_from_offer_file",
    "prices_from_offer_json",
    "prices_from_products",
    "product_filters",
    "service_name",
]

#: costaware's service names -> AWS Price List service codes.
SERVICE_CODES = {"ec2": "AmazonEC2", "sagemaker": "AmazonSageMaker"}
#: What an EC2 product must say to be the plain Linux on-demand instance costaware prices.
EC2_ATTRIBUTES = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA"}
#: SageMaker prices the same ``ml.*`` type per component; training is what costaware runs there.
SAGEMAKER_COMPONENT = "Training"
#: CSV offer files name attributes for people; the JSON names for machines.
CSV_COLUMNS = {
    "SKU": "sku",
    "TermType": "termType",
    "Unit": "unit",
    "PricePerUnit": "price",
    "Currency": "currency",
    "EffectiveDate": "effectiveDate",
    "StartingRange": "beginRange",
    "Product Family": "productFamily",
    "serviceCode": "serviceCode",
    "Instance Type": "instanceType",
    "Instance Name": "instanceName",
    "Operating System": "operatingSystem",
    "Tenancy": "tenancy",
    "Pre Installed S/W": "preInstalledSw",
    "CapacityStatus": "capacitystatus",
    "MarketOption": "marketoption",  # as AWS writes it in index.csv
    "Market Option": "marketoption",
    "Region Code": "regionCode",
    "Component": "component",
}


@dataclass(frozen=True, slots=True)
class ListPrice:
    """The on-demand USD/hour AWS lists for one instance type in one region.

    Attributes:
        service: ``ec2`` or ``sagemaker``.
        instance_type: e.g. ``m5.large`` or ``ml.m5.large``.
        region: Region code, e.g. ``us-east-1``.
        usd_per_hour: The price, > 0.
        sku: The Price List SKU it came from.
        effective_date: The term's ``effectiveDate`` as AWS wrote it ("" when absent).
    """

    service: str
    instance_type: str
    region: str
    usd_per_hour: Decimal
    sku: str = ""
    effective_date: str = ""


def service_name(service: str) -> str:
    """``ec2`` or ``sagemaker`` for a costaware name or an AWS service code.

    Raises:
        ConfigurationError: any other service.
    """
    lowered = service.strip().lower()
    for name, code in SERVICE_CODES.items():
        if lowered in (name, code.lower()):
            return name
    raise ConfigurationError(f"unknown price service {service!r}: use ec2 or sagemaker")


#: An EC2 instance type as AWS names them (``m5.large``, ``u-12tb1.112xlarge``, ``mac2-m2pro.metal``); a
#: SageMaker one is ``ml.`` and such a name.
_TYPE_NAME = re.compile(r"(ml\.)?[a-z][a-z0-9-]*\.[a-z0-9-]+")
#: No instance costs near this an hour (the dearest are a few hundred USD): a larger price is a mangled file.
MAX_USD_PER_HOUR = Decimal(10_000)


def _wanted(service: str, attributes: Mapping[str, Any]) -> str | None:
    """The instance type a product prices, or None when costaware does not charge for the product.

    Raises:
        InvalidPriceDataError: the product names an instance type that is no type name (``foo bar``).
    """
    name = _product_type(service, attributes)
    if name is not None and not _TYPE_NAME.fullmatch(name):
        raise InvalidPriceDataError(
            f"instance type {name!r} is not an instance type name (family.size, e.g. m5.large): is the file "
            "an AWS Price List offer file?"
        )
    return name


def _product_type(service: str, attributes: Mapping[str, Any]) -> str | None:
    if service == "ec2":
        if any(attributes.get(k) != v for k, v in EC2_ATTRIBUTES.items()):
            return None
        if attributes.get("capacitystatus", "Used") != "Used":
            return None  # reservation-capacity SKUs, billed differently
        if attributes.get("marketoption", "OnDemand") != "OnDemand":
            return None  # capacity blocks
        name = str(attributes.get("instanceType") or "")
        return name or None
    component = str(attributes.get("component") or "")
    if component.lower() != SAGEMAKER_COMPONENT.lower():
        return None
    name = str(attributes.get("instanceName") or attributes.get("instanceType") or "")
    return name if name.startswith("ml.") else None


def _price(raw: object, where: str) -> Decimal | None:
    """A price per unit, None when it is 0 (not sold); raises on a malformed or negative one."""
    try:
        value = Decimal(str(raw).strip())
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite():
        raise InvalidPriceDataError(f"{where}: price {raw!r} is not a number")
    if "e" in str(raw).lower():
        # An exponent ("1e3": $1,000 an hour) is no price AWS writes: a file edited by hand, or mangled.
        raise InvalidPriceDataError(
            f"{where}: price {raw!r} is written with an exponent, which AWS never writes: check the file"
        )
    if value < 0:
        raise InvalidPriceDataError(f"{where}: price {raw} is negative")
    if value > MAX_USD_PER_HOUR:
        raise InvalidPriceDataError(
            f"{where}: price {raw} USD an hour is more than any instance costs (at most "
            f"{MAX_USD_PER_HOUR} is taken): check the file"
        )
    return value if value > 0 else None


def _hourly(dimensions: Mapping[str, Any], where: str) -> Decimal | None:
    """The hourly USD price among a term's price dimensions (the first tier when tiered)."""
    found: list[tuple[str, Decimal]] = []
    for key, dimension in dimensions.items():
        if not isinstance(dimension, Mapping):
            raise InvalidPriceDataError(f"{where}: price dimension {key!r} is not an object")
        if str(dimension.get("unit", "")).lower() not in ("hrs", "hours", "hour"):
            continue
        usd = (dimension.get("pricePerUnit") or {}).get("USD")
        if usd is None:
            continue
        price = _price(usd, f"{where}, dimension {key}")
        if price is not None:
            found.append((str(dimension.get("beginRange", "0")), price))
    if not found:
        return None
    found.sort(key=lambda item: item[0] != "0")
    return found[0][1]


def _in_force(effective: str, as_of: str | None) -> tuple[bool, str]:
    """How a term ranks: in force by ``as_of`` (an ISO instant) before one that starts later, then newest.

    AWS publishes a price change ahead of its date: a term effective next year is not today's price.
    """
    return (as_of is None or effective[:10] <= as_of[:10], effective)


def _on_demand(terms: Mapping[str, Any], where: str, as_of: str | None = None) -> tuple[Decimal, str] | None:
    """(price, effective date) of the newest OnDemand term in force with a non-zero hourly price."""
    best: tuple[str, Decimal] | None = None
    for code, term in terms.items():
        if not isinstance(term, Mapping):
            raise InvalidPriceDataError(f"{where}: term {code!r} is not an object")
        price = _hourly(term.get("priceDimensions") or {}, f"{where}, term {code}")
        if price is None:
            continue
        effective = str(term.get("effectiveDate", ""))
        if best is None or _in_force(effective, as_of) > _in_force(best[0], as_of):
            best = (effective, price)
    return None if best is None else (best[1], best[0])


def _keep(found: dict[tuple[str, str], ListPrice], price: ListPrice, as_of: str | None = None) -> None:
    key = (price.instance_type, price.region)
    held = found.get(key)
    # Two SKUs for one type: keep the newer term in force; at the same date, the higher (never under-charge).
    if held is None or (_in_force(price.effective_date, as_of), price.usd_per_hour) > (
        _in_force(held.effective_date, as_of),
        held.usd_per_hour,
    ):
        found[key] = price


def type_patterns(types: str) -> list[str]:
    """The names or globs of a ``--types`` value: one, or several separated by commas (``m5.large,c5.*``)."""
    return [pattern.strip() for pattern in types.split(",") if pattern.strip()]


def matches_types(instance_type: str, types: str | None) -> bool:
    """Does ``instance_type`` match one of the names or globs of ``types`` (``None``: every type)?"""
    return types is None or any(fnmatch.fnmatchcase(instance_type, g) for g in type_patterns(types))


def _selected(
    prices: Iterable[ListPrice], types: str | None, regions: Iterable[str] | None
) -> list[ListPrice]:
    wanted_regions = set(regions) if regions is not None else None
    chosen = [
        p
        for p in prices
        if matches_types(p.instance_type, types) and (wanted_regions is None or p.region in wanted_regions)
    ]
    return sorted(chosen, key=lambda p: (p.service, p.region, p.instance_type))


def prices_from_products(
    items: Iterable[str | Mapping[str, Any]],
    *,
    service: str,
    types: str | None = None,
    regions: Iterable[str] | None = None,
    as_of: str | None = None,
) -> list[ListPrice]:
    """On-demand prices in ``GetProducts`` ``PriceList`` items (JSON strings or parsed).

    Args:
        items: The ``PriceList`` entries of every page.
        service: ``ec2`` or ``sagemaker`` (or the AWS service code).
        types: Keep the instance types matching this name or glob (``m5*``, ``ml.g5.*``), or one of several
            separated by commas.
        regions: Keep these region codes.
        as_of: Today, as an ISO instant: a term that starts later (a published price change) loses to the
            one in force. None: the newest term.

    Raises:
        InvalidPriceDataError: an item is not JSON or not in the documented shape, or a price is negative.
    """
    name = service_name(service)
    found: dict[tuple[str, str], ListPrice] = {}
    for number, item in enumerate(items, start=1):
        where = f"PriceList item {number}"
        if isinstance(item, str):
            try:
                item = json.loads(item)
            except json.JSONDecodeError as e:
                raise InvalidPriceDataError(f"{where} is not valid JSON: {e.msg}") from e
        if not isinstance(item, Mapping) or not isinstance(item.get("product"), Mapping):
            raise InvalidPriceDataError(f"{where} has no 'product' object")
        product = item["product"]
        attributes = product.get("attributes") or {}
        instance_type = _wanted(name, attributes)
        region = str(attributes.get("regionCode") or "")
        if instance_type is None or not region:
            continue
        terms = (item.get("terms") or {}).get("OnDemand") or {}
        sku = str(product.get("sku", ""))
        priced = _on_demand(terms, f"{where} (SKU {sku})", as_of)
        if priced is not None:
            _keep(found, ListPrice(name, instance_type, region, priced[0], sku, priced[1]), as_of)
    return _selected(found.values(), types, regions)


def prices_from_offer_json(
    text: str,
    *,
    region: str | None = None,
    types: str | None = None,
    regions: Iterable[str] | None = None,
    as_of: str | None = None,
) -> list[ListPrice]:
    """On-demand prices in a bulk offer file (``.../offers/v1.0/aws/<service>/current/<region>/index.json``).

    Args:
        text: The file's text.
        region: Region of the file, for products that name only a ``location`` (older files).
        types: Keep the instance types matching this glob.
        regions: Keep these region codes.
        as_of: As :func:`prices_from_products`.

    Raises:
        InvalidPriceDataError: not JSON (the message names the line), not an offer file, or a bad price.
    """
    try:
        document = json.loads(text.lstrip("\ufeff"))
    except json.JSONDecodeError as e:
        raise InvalidPriceDataError(f"offer file is not valid JSON at line {e.lineno}: {e.msg}") from e
    if not isinstance(document, Mapping) or not isinstance(document.get("products"), Mapping):
        raise InvalidPriceDataError("offer file has no 'products' object: is it a Price List offer file?")
    name = _offer_service(str(document.get("offerCode", "")), "offer file's offerCode")
    on_demand = (document.get("terms") or {}).get("OnDemand") or {}
    found: dict[tuple[str, str], ListPrice] = {}
    for sku, product in document["products"].items():
        if not isinstance(product, Mapping):
            raise InvalidPriceDataError(f"offer file: product {sku!r} is not an object")
        attributes = product.get("attributes") or {}
        instance_type = _wanted(name, attributes)
        where = str(attributes.get("regionCode") or region or "")
        if instance_type is None:
            continue
        if not where:
            raise InvalidPriceDataError(
                f"offer file: product {sku} names no regionCode: give the file's region (--region)"
            )
        priced = _on_demand(on_demand.get(sku) or {}, f"offer file, SKU {sku}", as_of)
        if priced is not None:
            _keep(found, ListPrice(name, instance_type, where, priced[0], str(sku), priced[1]), as_of)
    return _selected(found.values(), types, regions)


def _csv_rows(source: str | Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each record; the number is the record's last line, as ``csv`` counts."""
    lines = io.StringIO(source) if isinstance(source, str) else iter(source)
    reader = csv.reader(line.lstrip("\ufeff") if n == 0 else line for n, line in enumerate(lines))
    try:
        for row in reader:
            yield reader.line_num, row
    except csv.Error as e:
        raise InvalidPriceDataError(f"offer CSV line {reader.line_num}: {e}") from e


def prices_from_offer_csv(
    text: str | Iterable[str],
    *,
    region: str | None = None,
    types: str | None = None,
    regions: Iterable[str] | None = None,
    as_of: str | None = None,
) -> list[ListPrice]:
    """On-demand prices in a bulk offer file in CSV (``.../current/<region>/index.csv``).

    ``text`` is the file's text or its lines (an open file: read as a stream). Other arguments as
    :func:`prices_from_offer_json`.

    Raises:
        InvalidPriceDataError: no ``OfferCode`` or header row, a row shorter than the header, or a bad
            price; the message names the line.
    """
    rows = _csv_rows(text)
    offer_code, header = "", None
    for number, row in rows:
        if row and row[0] == "OfferCode" and len(row) > 1:
            offer_code = row[1]
        if "SKU" in row and "TermType" in row:
            header = [CSV_COLUMNS.get(c, c) for c in row]
            break
        if number >= 10:
            break
    if header is None:
        raise InvalidPriceDataError(
            "offer CSV has no header row with SKU and TermType in its first 10 lines: "
            "is it a Price List offer file (index.csv)?"
        )
    name = _offer_service(offer_code or "AmazonEC2", "offer CSV's OfferCode")
    needed = ["termType", "price", "unit", *(["instanceType", *EC2_ATTRIBUTES] if name == "ec2" else [])]
    columns = {v: k for k, v in CSV_COLUMNS.items()}
    missing = [columns.get(c, c) for c in needed if c not in header]
    if missing:
        # Without them every row was passed over, and the file "had no Linux on-demand prices".
        raise InvalidPriceDataError(
            f"offer CSV's header has no {', '.join(repr(c) for c in missing)} column: is it a whole "
            "Price List offer file (index.csv)?"
        )
    found: dict[tuple[str, str], ListPrice] = {}
    for number, row in rows:
        if not row:
            continue
        if len(row) != len(header):
            raise InvalidPriceDataError(
                f"offer CSV line {number}: {len(row)} fields where the header has {len(header)}"
            )
        record = dict(zip(header, row, strict=True))
        if record.get("termType") != "OnDemand" or record.get("currency", "USD") != "USD":
            continue
        if record.get("unit", "").lower() not in ("hrs", "hours", "hour"):
            continue
        instance_type = _wanted(name, record)
        if instance_type is None:
            continue
        where = record.get("regionCode") or region or ""
        if not where:
            raise InvalidPriceDataError(
                f"offer CSV line {number}: no Region Code column: give the file's region (--region)"
            )
        price = _price(record.get("price", ""), f"offer CSV line {number}")
        if price is not None:
            sku, effective = record.get("sku", ""), record.get("effectiveDate", "")
            _keep(found, ListPrice(name, instance_type, where, price, sku, effective), as_of)
    return _selected(found.values(), types, regions)


def _offer_service(code: str, where: str) -> str:
    """The service of an offer file's code, refused by name when costaware does not read it."""
    try:
        return service_name(code)
    except ConfigurationError as e:
        raise InvalidPriceDataError(
            f"{where} is {code!r}: costaware reads the AmazonEC2 and AmazonSageMaker offer files"
        ) from e


def prices_from_offer_file(
    text: str,
    *,
    region: str | None = None,
    types: str | None = None,
    regions: Iterable[str] | None = None,
    as_of: str | None = None,
) -> list[ListPrice]:
    """JSON or CSV offer file, told apart by its first character."""
    if text.lstrip("\ufeff \t\r\n").startswith("{"):
        return prices_from_offer_json(text, region=region, types=types, regions=regions, as_of=as_of)
    return prices_from_offer_csv(text, region=region, types=types, regions=regions, as_of=as_of)


def product_filters(service: str, *, region: str, instance_type: str | None = None) -> list[dict[str, str]]:
    """``GetProducts`` filters for the prices costaware keeps (the parser checks them again)."""
    name = service_name(service)

    def term(field: str, value: str) -> dict[str, str]:
        return {"Type": "TERM_MATCH", "Field": field, "Value": value}

    filters = [term("regionCode", region)]
    if name == "ec2":
        filters += [term(k, v) for k, v in EC2_ATTRIBUTES.items()]
        filters.append(term("capacitystatus", "Used"))
        if instance_type:
            filters.append(term("instanceType", instance_type))
    else:
        filters.append(term("component", SAGEMAKER_COMPONENT))
        if instance_type:
            filters.append(term("instanceName", instance_type))
    return filters
