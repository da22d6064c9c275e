"""Price sources: recorded and live spot prices, hourly electricity prices, spot availability traces.

Recorded spot price history comes as EC2 ``DescribeSpotPriceHistory`` JSON or as a tidy CSV; live prices
come from EC2 through the Amazon provider's hook. Everything here reads or fetches; the checking and the
step-function reading live in ``costaware.core.series``. Only Linux/UNIX rows are kept unless other product
descriptions are asked for ("Linux/UNIX" also matches EC2-Classic's "Linux/UNIX (Amazon VPC)").
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costaware.adapters.price_files import read_recorded_file
from costaware.core.errors import (
    ConfigurationError,
    InvalidPriceDataError,
    PriceNotFoundError,
)
from costaware.core.series import AvailabilityTrace, PriceSeries

if TYPE_CHECKING:
    from _csv import Reader as CsvReader

LINUX = ("Linux/UNIX",)
SPOT_CSV_COLUMNS = ("timestamp", "availability_zone", "instance_type", "product_description", "usd_per_hour")
ELECTRICITY_COLUMNS = ("timestamp_utc", "usd_per_mwh")
_RECORD_KEYS = ("AvailabilityZone", "InstanceType", "ProductDescription", "SpotPrice", "Timestamp")


def region_of(availability_zone: str) -> str:
    """``us-east-1a`` -> ``us-east-1``; a local zone such as ``us-east-1-bos-1a`` -> ``us-east-1`` too."""
    from costaware.core.zone_choice import region_of as aws_region_of

    # Stripping the letter alone left a local zone's "us-east-1-bos-1", a region no price names.
    return aws_region_of(availability_zone, availability_zone.rstrip("abcdefghijklmnopqrstuvwxyz"))


def _wanted(product: str, products: Sequence[str]) -> bool:
    return any(product == p or product.startswith(f"{p} (") for p in products)


def _file_lines(lines: Sequence[int | None]) -> list[int] | None:
    """The file line of each record, where every record has one (a CSV's rows), else None."""
    known = [n for n in lines if n is not None]
    return known if len(known) == len(lines) else None


class SpotPriceHistory:
    """Spot price records, one step-function series per (instance type, availability zone).

    Build it with :meth:`from_records`, :func:`load_spot_history` or :meth:`LiveSpotPrices.history`.
    """

    def __init__(self, series: Mapping[tuple[str, str], PriceSeries], *, source: str) -> None:
        self._series = dict(series)
        self._combined: dict[tuple[str, str], PriceSeries] = {}
        self.source = source

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], *, source: str, products: Sequence[str] = LINUX
    ) -> SpotPriceHistory:
        """Group ``DescribeSpotPriceHistory`` records by type and zone, keeping ``products`` only.

        Raises:
            InvalidPriceDataError: a record lacks a key or has a bad time or price; no record is left.
        """
        grouped: dict[tuple[str, str], list[tuple[object, object]]] = {}
        # A CSV row's file line ("_line"): the series' own record count pointed nowhere in the file.
        lines: dict[tuple[str, str], list[int | None]] = {}
        seen_products: set[str] = set()
        for number, record in enumerate(records):
            missing = [k for k in _RECORD_KEYS if k not in record]
            if missing:
                raise InvalidPriceDataError(
                    f"{source}: record {number} lacks {', '.join(missing)}: {dict(record)!r}"
                )
            product = str(record["ProductDescription"])
            seen_products.add(product)
            if not _wanted(product, products):
                continue
            key = (str(record["InstanceType"]), str(record["AvailabilityZone"]))
            grouped.setdefault(key, []).append((record["Timestamp"], record["SpotPrice"]))
            lines.setdefault(key, []).append(record.get("_line"))
        if not grouped:
            raise InvalidPriceDataError(
                f"{source} has no {' / '.join(products)} records (products present: "
                f"{', '.join(sorted(seen_products)) or 'none'})"
            )
        series = {
            key: PriceSeries.from_points(
                points, name=f"spot {key[0]} {key[1]} ({source})", lines=_file_lines(lines[key])
            )
            for key, points in grouped.items()
        }
        return cls(series, source=source)

    @property
    def instance_types(self) -> list[str]:
        """Instance types with records."""
        return sorted({t for t, _ in self._series})

    def zones(self, instance_type: str, region: str) -> list[str]:
        """Availability zones of ``region`` with records for ``instance_type``."""
        return sorted(z for t, z in self._series if t == instance_type and region_of(z) == region)

    @property
    def notes(self) -> list[str]:
        """What was fixed while reading (sorting, duplicates), per series."""
        return [f"{s.name}: {note}" for s in self._series.values() for note in s.notes]

    @property
    def last_record(self) -> datetime:
        """The newest record of the file, of any type and zone: how recent the recording is.

        One zone's price may go weeks unchanged (a price is recorded only as it changes).
        """
        return max(series.last for series in self._series.values())

    def series(self, instance_type: str, region: str, availability_zone: str | None = None) -> PriceSeries:
        """The spot price of a type in one zone, or the cheapest zone of the region at each instant.

        Raises:
            PriceNotFoundError: unknown type, region or zone; the message says what is known.
        """
        if instance_type not in self.instance_types:
            from costaware.adapters.price_files import bundled_catalog

            if instance_type in bundled_catalog().instance_types:
                # A real type the file does not record: the file is the thing to change, not the type (it was
                # "unknown instance type 'g4dn.8xlarge' ... did you mean p3.16xlarge?").
                raise PriceNotFoundError(
                    f"{self.source} has no spot prices of {instance_type} (it records "
                    f"{', '.join(self.instance_types)}): give a price file that records {instance_type}"
                )
            close = difflib.get_close_matches(instance_type, self.instance_types, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise PriceNotFoundError(
                f"unknown instance type {instance_type!r}: {self.source} has spot prices for "
                f"{', '.join(self.instance_types)}{hint}"
            )
        zones = self.zones(instance_type, region)
        if not zones:
            regions = sorted({region_of(z) for t, z in self._series if t == instance_type})
            raise PriceNotFoundError(
                f"no spot prices for {instance_type} in region {region!r} in {self.source}; "
                f"it has {', '.join(regions)}"
            )
        if availability_zone is not None:
            if availability_zone not in zones:
                raise PriceNotFoundError(
                    f"no spot prices for {instance_type} in zone {availability_zone!r}; "
                    f"zones: {', '.join(zones)}"
                )
            return self._series[(instance_type, availability_zone)]
        key = (instance_type, region)
        if key not in self._combined:
            self._combined[key] = PriceSeries.pointwise_min(
                [self._series[(instance_type, z)] for z in zones],
                name=f"spot {instance_type} {region} (cheapest zone, {self.source})",
            )
        return self._combined[key]


# -- recorded files -----------------------------------------------------------------------------------------


def _json_documents(text: str, source: str) -> list[Any]:
    """All JSON documents in ``text`` (the AWS CLI's paged output can hold several back to back)."""
    decoder = json.JSONDecoder()
    documents: list[Any] = []
    index = 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            return documents
        try:
            document, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError as e:
            raise InvalidPriceDataError(f"{source} is not valid JSON at line {e.lineno}: {e.msg}") from e
        documents.append(document)


def spot_history_from_text(text: str, *, source: str, products: Sequence[str] = LINUX) -> SpotPriceHistory:
    """Parse recorded spot prices: ``DescribeSpotPriceHistory`` JSON or the tidy CSV (see module docs).

    Raises:
        InvalidPriceDataError: neither format, missing columns or keys, bad values, no matching rows.
    """
    # A byte-order mark first (Excel's "CSV UTF-8", PowerShell's utf8): a JSON file was read as a CSV.
    text = text.lstrip("\ufeff")
    stripped = text.lstrip()
    if not stripped:
        # It was "spot CSV lacks column(s) timestamp, ...; its header is []": a header no file has.
        raise InvalidPriceDataError(
            f"{source}: the file is empty; a spot price file is DescribeSpotPriceHistory JSON "
            f'({{"SpotPriceHistory": [...]}}) or a CSV with the header {",".join(SPOT_CSV_COLUMNS)}'
        )
    if stripped.startswith(("{", "[")):
        records: list[Mapping[str, Any]] = []
        for document in _json_documents(text, source):
            if isinstance(document, dict) and isinstance(document.get("SpotPriceHistory"), list):
                records.extend(document["SpotPriceHistory"])
            else:
                raise InvalidPriceDataError(
                    f'{source}: expected {{"SpotPriceHistory": [...]}} as DescribeSpotPriceHistory returns it'
                )
        return SpotPriceHistory.from_records(records, source=source, products=products)
    # By position, not csv.DictReader: it names every unnamed column '', so a header ending in two commas
    # kept one value of the fields under them (the last, often empty), and a split price read as $0.
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    missing = [c for c in SPOT_CSV_COLUMNS if c not in header]
    if missing:
        raise InvalidPriceDataError(
            f"{source}: spot CSV lacks column(s) {', '.join(missing)}; its header is {header!r}"
        )
    return SpotPriceHistory.from_records(
        _spot_csv_records(reader, header, source), source=source, products=products
    )


#: Columns whose value files a row: a space around one filed it under no zone, type or product asked for.
_SPOT_CSV_KEYS = ("availability_zone", "instance_type", "product_description")


def _spot_csv_records(reader: CsvReader, header: list[str], source: str) -> Iterator[dict[str, Any]]:
    """The CSV's rows as ``DescribeSpotPriceHistory`` records; a row that cannot be read right is named.

    A row with an extra field was read without it, a short one left its last columns None, and a row whose
    zone had a space around it ("us-east-1b ") was filed under no region: each passed in silence. What
    spreadsheets write and always loaded still does: a row of blank fields (a last line of spaces, ",,,,") is
    skipped, and an empty field past the header (a trailing comma), or a header column with no name that a
    row leaves out, holds nothing to lose.
    """
    from costaware.core.zone_choice import region_of as aws_region_of

    named = [index for index, column in enumerate(header) if column.strip()]
    # Every field past the header's last name is a spare one, under an unnamed column (a header ending in
    # commas) or past the header: "0,31" read as a price of 0, its 31 under an unnamed column. An unnamed
    # first column is pandas' index, its number no part of whether a row is blank.
    named_width = named[-1] + 1 if named else 0
    # The unnamed columns before the first name are pandas' index, one per level (a MultiIndex writes two or
    # more): the second level was refused as a value under an unnamed column.
    index_levels = named[0] if named else 0
    # An unnamed column between names is no index: a value under it was dropped (a row holding only
    # that was skipped as blank).
    unnamed_inside = [index for index in range(index_levels + 1, named_width) if not header[index].strip()]
    if index_levels:
        levels = "pandas' index" if index_levels == 1 else f"pandas' index of {index_levels} columns"
        header_width = f"{named_width} ({levels} and {len(named)} named)"
    else:
        header_width = f"{named_width}{' named' if len(header) > named_width else ''}"
    for fields in reader:
        line = reader.line_num  # the file's line, as an editor shows it (the header is line 1)
        for index in unnamed_inside:
            if index < len(fields) and fields[index].strip():
                raise InvalidPriceDataError(
                    f"{source} line {line}: column {index + 1} has no name in the header, but the row holds "
                    f"{fields[index]!r} there: name that column in the header, or remove the value (a value "
                    "holding a comma goes in double quotes; a price takes a decimal point, 0.31)"
                )
        extra = fields[named_width:]
        while extra and not extra[-1].strip():
            extra.pop()
        if not any(fields[index].strip() for index in named if index < len(fields)) and not extra:
            continue
        if extra:
            raise InvalidPriceDataError(
                f"{source} line {line} has {named_width + len(extra)} fields, its header {header_width}: "
                f"remove the extra {', '.join(map(repr, extra))} (a value holding a comma goes in double "
                "quotes; a price takes a decimal point, 0.31)"
            )
        lacking = [header[index] for index in named if index >= len(fields)]
        if lacking:
            raise InvalidPriceDataError(
                f"{source} line {line} has {len(fields)} fields, its header {len(header)}: "
                f"it lacks {', '.join(lacking)}; give every column of {','.join(header)}"
            )
        row = {header[index]: fields[index] for index in named}  # a name given twice: its last, as before
        for column in _SPOT_CSV_KEYS:
            value = row[column]
            if not value.strip():
                raise InvalidPriceDataError(
                    f"{source} line {line}: {column} is empty: give the row's {column.replace('_', ' ')}"
                )
            if value != value.strip():
                raise InvalidPriceDataError(
                    f"{source} line {line}: {column} {value!r} has a space around it: write it "
                    f"{value.strip()!r}"
                )
        # The optional region column: a row whose zone lies in another region was filed by its zone alone.
        # Only an AWS zone name tells its region (a zone ID, use1-az1, or another cloud's zone does not:
        # they load unchecked, as before the column was read), and AWS reads a region in any case.
        region, zone = row.get("region", "").strip(), row["availability_zone"]
        zone_region = aws_region_of(zone, "")
        if region and zone_region and region.lower() != zone_region:
            raise InvalidPriceDataError(
                f"{source} line {line}: region {region!r} is not the region of availability_zone {zone!r} "
                f"({zone_region!r}): fix the one that is wrong, or leave region empty (the zone files "
                "the price)"
            )
        yield {
            "AvailabilityZone": row["availability_zone"],
            "InstanceType": row["instance_type"],
            "ProductDescription": row["product_description"],
            "SpotPrice": row["usd_per_hour"],
            "Timestamp": row["timestamp"],
            "_line": line,
        }


def load_spot_history(path: str | Path, *, products: Sequence[str] = LINUX) -> SpotPriceHistory:
    """Read a recorded spot price file (JSON or CSV)."""
    return spot_history_from_text(
        read_recorded_file(path, "spot price file"), source=Path(path).name, products=products
    )


def is_electricity_csv(text: str) -> bool:
    """Whether ``text`` is, or is meant as, an hourly electricity price CSV (``timestamp_utc,usd_per_mwh``).

    Either column is enough: a file with ``timestamp_utc`` and a misnamed price column (``usd_per_kwh``) was
    read as a spot CSV and refused for lacking five spot columns, none of which it should have. A file with
    any spot-only column is a spot CSV: one whose only mistake is ``timestamp_utc`` for ``timestamp`` was told
    it lacks ``usd_per_mwh``. ``usd_per_mwh`` alone decides: an electricity file with a spare ``timestamp``
    column beside ``timestamp_utc`` is read as it always was.
    """
    header = text.lstrip("\ufeff").split("\n", 1)[0]
    columns = {column.strip().strip('"') for column in header.split(",")}
    if "usd_per_mwh" in columns:
        return True
    spot_only = set(SPOT_CSV_COLUMNS) - set(ELECTRICITY_COLUMNS)
    return any(column in columns for column in ELECTRICITY_COLUMNS) and not columns & spot_only


def electricity_from_text(text: str, *, source: str) -> PriceSeries:
    """Hourly electricity prices in USD/MWh as a series (gaps over one hour are rejected; may be negative).

    Raises:
        InvalidPriceDataError: missing columns, no rows, bad values, duplicate hours with two prices, gaps.
    """
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    missing = [c for c in ELECTRICITY_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InvalidPriceDataError(
            f"{source}: electricity CSV lacks column(s) {', '.join(missing)}; "
            f"its header is {reader.fieldnames!r}"
        )
    points, lines = [], []
    for row in reader:
        points.append((row["timestamp_utc"], row["usd_per_mwh"]))
        lines.append(reader.line_num)  # the file's line, as an editor shows it (the header is line 1)
    if not points:
        # The series' own message said "check the file and its filters": a CSV has no filters.
        raise InvalidPriceDataError(
            f"{source}: the file has a header but no rows; an electricity price CSV has a row per hour "
            f"under its header {','.join(ELECTRICITY_COLUMNS)} (e.g. 2023-01-01T00:00:00Z,42.5)"
        )
    return PriceSeries.from_points(
        points,
        name=f"electricity {source} (USD/MWh)",
        max_gap=timedelta(hours=1),
        allow_negative=True,
        lines=lines,
        unit="USD per MWh",
    )


def load_electricity(path: str | Path) -> PriceSeries:
    """Read an hourly electricity price CSV (``timestamp_utc,usd_per_mwh``)."""
    return electricity_from_text(read_recorded_file(path, "electricity price file"), source=Path(path).name)


def electricity_usd_per_hour(usd_per_mwh: PriceSeries, power_kw: Decimal) -> PriceSeries:
    """USD per hour of a job drawing ``power_kw``: USD/MWh x kW / 1000."""
    if power_kw <= 0:
        raise ConfigurationError(f"power_kw must be > 0, got {power_kw}")
    return usd_per_mwh.scaled(power_kw / 1000, name=f"{usd_per_mwh.name} x {power_kw} kW")


def availability_from_text(text: str, *, source: str, start: datetime) -> AvailabilityTrace:
    """Parse a spot availability trace: ``{"metadata": {"gap_seconds": 600}, "data": [0 or 1, ...]}``.

    Raises:
        InvalidPriceDataError: not that shape, an empty ``data`` list, a sample other than 0/1.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidPriceDataError(f"{source} is not valid JSON at line {e.lineno}: {e.msg}") from e
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise InvalidPriceDataError(
            f'{source}: expected {{"metadata": {{"gap_seconds": ...}}, "data": [0, 1, ...]}}'
        )
    gap = (document.get("metadata") or {}).get("gap_seconds")
    if not isinstance(gap, int | float) or isinstance(gap, bool):
        raise InvalidPriceDataError(f"{source}: metadata.gap_seconds must be a number, got {gap!r}")
    return AvailabilityTrace(document["data"], gap_seconds=gap, start=start, name=source)


def load_availability(path: str | Path, *, start: datetime) -> AvailabilityTrace:
    """Read a spot availability trace; ``start`` is the instant of its first sample."""
    return availability_from_text(
        read_recorded_file(path, "availability trace", save_as="UTF-8"), source=Path(path).name, start=start
    )


# -- live prices --------------------------------------------------------------------------------------------

_CACHE: dict[tuple[Any, ...], tuple[float, SpotPriceHistory]] = {}
_CACHE_LOCK = threading.Lock()


class LiveSpotPrices:
    """Spot prices from EC2 ``DescribeSpotPriceHistory`` through the Amazon provider's ``AwsBaseHook``.

    Responses are paginated (``NextToken``) and cached in the process for ``ttl_seconds``, so sensors and
    triggers that poll every minute ask AWS at most once per TTL per query.

    Args:
        aws_conn_id: Airflow AWS connection (its ``endpoint_url`` extra points it at moto in tests).
        region_name: Region to query; default the connection's.
        ttl_seconds: How long a response is reused.
        page_size: ``MaxResults`` per request (AWS allows up to 1000).
        clock: Monotonic seconds, replaceable in tests.
    """

    def __init__(
        self,
        *,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        ttl_seconds: float = 300.0,
        page_size: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_seconds < 0:
            raise ConfigurationError(f"ttl_seconds must be >= 0, got {ttl_seconds!r}")
        if not 5 <= page_size <= 1000:
            raise ConfigurationError(f"page_size must be between 5 and 1000 (AWS limits), got {page_size!r}")
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.ttl_seconds = ttl_seconds
        self.page_size = page_size
        self.clock = clock
        self.requests = 0  # pages fetched by this instance, for logs and tests

    def _client(self) -> Any:
        try:
            from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
        except ImportError as e:  # pragma: no cover - the provider is a dependency
            raise ConfigurationError(
                "live spot prices need the Amazon provider: pip install apache-airflow-providers-amazon"
            ) from e
        return AwsBaseHook(
            aws_conn_id=self.aws_conn_id, client_type="ec2", region_name=self.region_name
        ).get_conn()

    def fetch_records(
        self,
        instance_types: Sequence[str],
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        products: Sequence[str] = LINUX,
    ) -> list[dict[str, Any]]:
        """Every record of the query, following ``NextToken`` until the last page (not cached).

        Raises:
            ConfigurationError: AWS refused the request, or found no credentials (a retry cannot help).
            ComputeBackendError: throttling, a server error or the network (retried).
        """
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            NoCredentialsError,
            NoRegionError,
            PartialCredentialsError,
            ProfileNotFound,
        )

        from costaware.adapters.compute.aws_errors import aws_error

        try:
            return self._fetch(instance_types, start=start, end=end, products=products)
        except (NoCredentialsError, PartialCredentialsError, ProfileNotFound, NoRegionError) as e:
            # The client cannot be set up: no retry finds credentials, a profile or a region.
            raise ConfigurationError(
                f"cannot read EC2's spot price history for {', '.join(instance_types)} through the AWS "
                f"connection {self.aws_conn_id!r}: {e}. Give that connection credentials allowed "
                "ec2:DescribeSpotPriceHistory (and a region), or pass prices= the path of a recorded spot "
                "price file (JSON or CSV) instead of live prices"
            ) from e
        except (BotoCoreError, ClientError) as e:
            raise aws_error(
                e,
                f"cannot read EC2's spot price history for {', '.join(instance_types)} through the AWS "
                f"connection {self.aws_conn_id!r}",
                "check that connection's credentials and region, or pass prices= a recorded spot price file",
            ) from e

    def _fetch(
        self,
        instance_types: Sequence[str],
        *,
        start: datetime | None,
        end: datetime | None,
        products: Sequence[str],
    ) -> list[dict[str, Any]]:
        client = self._client()
        request: dict[str, Any] = {
            "InstanceTypes": list(instance_types),
            "ProductDescriptions": list(products),
            "MaxResults": self.page_size,
        }
        if start is not None:
            request["StartTime"] = start
        if end is not None:
            request["EndTime"] = end
        records: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = client.describe_spot_price_history(**request, **({"NextToken": token} if token else {}))
            self.requests += 1
            records.extend(page.get("SpotPriceHistory", []))
            token = page.get("NextToken") or None
            if not token:
                return records

    def history(
        self,
        instance_types: Sequence[str],
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        products: Sequence[str] = LINUX,
    ) -> SpotPriceHistory:
        """The records of ``instance_types`` between ``start`` and ``end`` (default: the current prices).

        Raises:
            ConfigurationError: naive ``start``/``end``; AWS refused the request or found no credentials.
            ComputeBackendError: throttling, a server error or the network (retried).
            InvalidPriceDataError: AWS returned no matching record.
        """
        for name, value in (("start", start), ("end", end)):
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise ConfigurationError(
                    f"{name} {value.isoformat()} has no time zone; pass an aware datetime"
                )
        key = (
            self.aws_conn_id,
            self.region_name,
            tuple(sorted(instance_types)),
            tuple(products),
            start.astimezone(timezone.utc).isoformat() if start else None,
            end.astimezone(timezone.utc).isoformat() if end else None,
        )
        now = self.clock()
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        # Without times, ask AWS for the price in force now (StartTime = EndTime = now); cached as "now".
        if start is None and end is None:
            start = end = datetime.now(timezone.utc)
        records = self.fetch_records(instance_types, start=start, end=end, products=products)
        source = f"EC2 {self.region_name or 'default region'} via {self.aws_conn_id}"
        history = SpotPriceHistory.from_records(records, source=source, products=products)
        with _CACHE_LOCK:
            # Expired entries go as new ones come: each TTL period's query is a key of its own, and the
            # long-lived triggerer kept every one of them.
            for stale in [k for k, (expires, _) in _CACHE.items() if expires <= now]:
                del _CACHE[stale]
            _CACHE[key] = (now + self.ttl_seconds, history)
        return history


def current_spot_price(
    history: SpotPriceHistory, instance_type: str, region: str, availability_zone: str | None, at: datetime
) -> Decimal:
    """The spot price in force at ``at`` (the last record at or before it)."""
    return history.series(instance_type, region, availability_zone).price_at(at)


def clear_cache() -> None:
    """Forget every cached live response."""
    with _CACHE_LOCK:
        _CACHE.clear()
