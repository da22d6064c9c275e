from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from costaware.adapters import spot_prices
from costaware.adapters.spot_prices import (
    LiveSpotPrices,
    electricity_from_text,
    is_electricity_csv,
    load_availability,
    load_electricity,
    load_spot_history,
    spot_history_from_text,
)
from costaware.core.errors import (
    ComputeBackendError,
    ConfigurationError,
    InvalidPriceDataError,
    PriceNotFoundError,
)

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
HISTORY = SHARED / "aws_spot_price_history"
needs_shared = pytest.mark.skipif(not HISTORY.exists(), reason="shared data folder not beside the repo")
T0 = datetime(2021, 3, 1, tzinfo=timezone.utc)


@needs_shared
def test_recorded_json_and_csv_agree_and_keep_only_linux() -> None:
    from_json = load_spot_history(HISTORY / "g4dn.8xlarge.json")
    from_csv = load_spot_history(HISTORY / "spot_prices_us-east-1_2021.csv")
    assert from_json.instance_types == ["g4dn.8xlarge"]
    assert set(from_csv.instance_types) == {
        "c5.4xlarge",
        "g3.8xlarge",
        "g4dn.8xlarge",
        "m5.4xlarge",
        "p3.16xlarge",
        "r5.2xlarge",
    }
    a = from_json.series("g4dn.8xlarge", "us-east-1", "us-east-1b")
    b = from_csv.series("g4dn.8xlarge", "us-east-1", "us-east-1b")
    assert a.points == b.points
    # SOURCES.md: 932 Linux/UNIX records for g4dn.8xlarge across zones.
    zones = from_json.zones("g4dn.8xlarge", "us-east-1")
    assert sum(len(from_json.series("g4dn.8xlarge", "us-east-1", z)) for z in zones) == 932
    windows = load_spot_history(HISTORY / "g4dn.8xlarge.json", products=["Windows"])
    assert windows.series("g4dn.8xlarge", "us-east-1").price_at(T0 + timedelta(days=30)) > Decimal("1")


@needs_shared
def test_electricity_prices_become_usd_per_hour() -> None:
    caiso = load_electricity(SHARED / "electricity_prices" / "US-CAL-CISO_2023.csv")
    assert len(caiso) == 8760
    per_hour = spot_prices.electricity_usd_per_hour(caiso, Decimal(8))  # an 8 kW GPU node
    t = datetime(2023, 6, 1, 12, tzinfo=timezone.utc)
    assert per_hour.price_at(t) == (caiso.price_at(t) * Decimal(8) / 1000).quantize(Decimal("0.000001"))
    de = load_electricity(SHARED / "electricity_prices" / "DE-LU_2023.csv")
    assert min(p for _, p in de.points) < 0  # negative wholesale prices are kept


def test_availability_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 0, 1]}))
    trace = load_availability(path, start=T0)
    assert trace.ticks(T0, timedelta(minutes=10), 3) == [True, False, True]
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": []}))
    with pytest.raises(InvalidPriceDataError, match=r"trace\.json' is empty"):
        load_availability(path, start=T0)
    path.write_text('{"data": [1]}')
    with pytest.raises(InvalidPriceDataError, match="gap_seconds must be a number, got None"):
        load_availability(path, start=T0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("timestamp,instance_type\n", "spot CSV lacks column"),
        ('{"Prices": []}', 'expected {"SpotPriceHistory"'),
        ('{"SpotPriceHistory": [{"InstanceType": "x"}]}', "record 0 lacks AvailabilityZone"),
        (
            '{"SpotPriceHistory": [{"AvailabilityZone": "us-east-1a", "InstanceType": "m5.large", '
            '"ProductDescription": "Windows", "SpotPrice": "0.1", "Timestamp": "2021-03-01T00:00:00Z"}]}',
            r"has no Linux/UNIX records \(products present: Windows\)",
        ),
        (
            '{"SpotPriceHistory": [{"AvailabilityZone": "us-east-1a", "InstanceType": "m5.large", '
            '"ProductDescription": "Linux/UNIX", "SpotPrice": "0.1", "Timestamp": "2021-03-01T00:00:00"}]}',
            "has no time zone",
        ),
        ("{not json", "is not valid JSON"),
    ],
)
def test_bad_spot_files(text: str, message: str) -> None:
    with pytest.raises(InvalidPriceDataError, match=message):
        spot_history_from_text(text, source="prices")


def test_a_csv_saved_by_excel_with_a_byte_order_mark_loads_as_without_one() -> None:
    # Excel's "CSV UTF-8" starts with U+FEFF: refused as lacking 'timestamp', its header '\ufefftimestamp'.
    text = (
        "timestamp,region,availability_zone,instance_type,product_description,usd_per_hour\r\n"
        "2021-03-01T00:00:00Z,us-east-1,us-east-1a,m5.large,Linux/UNIX,0.30\r\n"
    )
    for loaded in (spot_history_from_text(t, source="prices") for t in (text, "\ufeff" + text)):
        assert loaded.zones("m5.large", "us-east-1") == ["us-east-1a"]
        assert loaded.last_record == datetime(2021, 3, 1, tzinfo=timezone.utc)
    # DescribeSpotPriceHistory's JSON saved with one (PowerShell's utf8) was read as a CSV without columns.
    document = (
        '{"SpotPriceHistory": [{"AvailabilityZone": "us-east-1a", "InstanceType": "m5.large", '
        '"ProductDescription": "Linux/UNIX", "SpotPrice": "0.1", "Timestamp": "2021-03-01T00:00:00Z"}]}'
    )
    assert spot_history_from_text("\ufeff" + document, source="prices").zones("m5.large", "us-east-1") == [
        "us-east-1a"
    ]


def test_a_bad_csv_row_is_named_by_its_line_in_the_file() -> None:
    # It said "record 1", the row's place among its zone's rows: line 4 here, after another zone's row.
    text = (
        "timestamp,region,availability_zone,instance_type,product_description,usd_per_hour\n"
        "2021-03-01T00:00:00Z,us-east-1,us-east-1a,m5.large,Linux/UNIX,0.30\n"
        "2021-03-01T00:00:00Z,us-east-1,us-east-1b,m5.large,Linux/UNIX,0.31\n"
        "2021-03-01T01:00:00Z,us-east-1,us-east-1a,m5.large,Linux/UNIX,0.3O\n"
    )
    with pytest.raises(InvalidPriceDataError, match=r"\(prices\) line 4: price '0\.3O' is not a number"):
        spot_history_from_text(text, source="prices")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        # Read without its extra field: the price could be one column off.
        (
            "2021-03-01T01:00:00Z,us-east-1b,m5.large,Linux/UNIX,0,31",
            r"prices line 3 has 6 fields, its header 5: remove the extra '31' \(a value holding a comma goes",
        ),
        # Filed under zone "us-east-1b ", of no region: dropped.
        (
            "2021-03-01T01:00:00Z,us-east-1b ,m5.large,Linux/UNIX,0.31",
            "prices line 3: availability_zone 'us-east-1b ' has a space around it: write it 'us-east-1b'",
        ),
        (
            "2021-03-01T01:00:00Z,us-east-1b,m5.large,Linux/UNIX ,0.31",
            "prices line 3: product_description 'Linux/UNIX ' has a space around it",
        ),
        # Its product None, not Linux: dropped; or its price None: "price None is not a number".
        (
            "2021-03-01T01:00:00Z,us-east-1b,m5.large",
            "prices line 3 has 3 fields, its header 5: it lacks product_description, usd_per_hour; give ",
        ),
        (
            "2021-03-01T01:00:00Z,us-east-1b,m5.large,Linux/UNIX",
            "prices line 3 has 4 fields, its header 5: it lacks usd_per_hour",
        ),
        (
            "2021-03-01T01:00:00Z,,m5.large,Linux/UNIX,0.31",
            "prices line 3: availability_zone is empty: give the row's availability zone",
        ),
    ],
)
def test_a_csv_row_that_cannot_be_read_right_is_named_by_its_line(row: str, message: str) -> None:
    text = (
        "timestamp,availability_zone,instance_type,product_description,usd_per_hour\n"
        "2021-03-01T00:00:00Z,us-east-1a,m5.large,Linux/UNIX,0.30\n"
        f"{row}\n"
    )
    with pytest.raises(InvalidPriceDataError, match=message):
        spot_history_from_text(text, source="prices")


_CLEAN_CSV = (
    "timestamp,availability_zone,instance_type,product_description,usd_per_hour\n"
    "2021-03-01T00:00:00Z,us-east-1a,m5.large,Linux/UNIX,0.30\n"
    "2021-03-01T01:00:00Z,us-east-1b,m5.large,Linux/UNIX,0.31\n"
)


def _every_series(history: spot_prices.SpotPriceHistory) -> list[tuple[str, list[tuple[datetime, Decimal]]]]:
    return [
        (zone, history.series("m5.large", "us-east-1", zone).points)
        for zone in history.zones("m5.large", "us-east-1")
    ]


@pytest.mark.parametrize(
    "text",
    [
        # What spreadsheets write, loaded before the row checks came and holding nothing to lose.
        _CLEAN_CSV.replace("\n", ",\n"),  # a trailing comma on every line, the header's too
        _CLEAN_CSV.replace("0.30\n", "0.30,\n"),  # a trailing comma on one row
        _CLEAN_CSV.replace("0.30\n", "0.30, \n"),
        _CLEAN_CSV.replace("usd_per_hour\n", "usd_per_hour,\n"),  # on the header alone
        _CLEAN_CSV + " \n",  # a last line of spaces
        _CLEAN_CSV + ",,,,\n",
        _CLEAN_CSV.replace("\n2021-03-01T01", "\n  \n2021-03-01T01"),  # a blank line between rows
    ],
)
def test_a_csv_with_blank_rows_or_empty_trailing_fields_loads_as_the_clean_one(text: str) -> None:
    clean = spot_history_from_text(_CLEAN_CSV, source="prices")
    history = spot_history_from_text(text, source="prices")
    assert _every_series(history) == _every_series(clean)
    assert history.notes == clean.notes


def test_a_price_split_by_a_comma_under_a_header_ending_in_one_is_named() -> None:
    # The header's trailing comma gave the row's '31' an unnamed column: priced at $0 in silence.
    text = _CLEAN_CSV.replace("usd_per_hour\n", "usd_per_hour,\n").replace("0.31\n", "0,31\n")
    with pytest.raises(
        InvalidPriceDataError, match="prices line 3 has 6 fields, its header 5 named: remove the extra '31' "
    ):
        spot_history_from_text(text, source="prices")


@pytest.mark.parametrize(
    ("header_end", "row_end", "extra"),
    [
        # csv.DictReader named every unnamed column '': the last (empty) field won, the price read as $0.
        (",,", "0,31,", "'31'"),
        (",,,", "0,31,,", "'31'"),
        # ... or the last value was named twice, the '31' never.
        (",,", "0,31,7", "'31', '7'"),
    ],
)
def test_a_split_price_under_a_header_ending_in_several_commas_is_named(
    header_end: str, row_end: str, extra: str
) -> None:
    text = _CLEAN_CSV.replace("usd_per_hour\n", f"usd_per_hour{header_end}\n").replace(
        "0.31\n", f"{row_end}\n"
    )
    with pytest.raises(InvalidPriceDataError, match=f"prices line 3 has .* named: remove the extra {extra} "):
        spot_history_from_text(text, source="prices")


def test_an_unnamed_first_column_is_read_as_the_index_pandas_writes() -> None:
    indexed = "\n".join(
        f"{number - 1 if number else ''},{row}" for number, row in enumerate(_CLEAN_CSV.split())
    )
    history = spot_history_from_text(indexed + "\n", source="prices")
    assert _every_series(history) == _every_series(spot_history_from_text(_CLEAN_CSV, source="prices"))


def test_a_blank_row_of_a_pandas_file_is_skipped_beside_its_index() -> None:
    # Its index number alone is no data: '1,,,,,' was refused as 'availability_zone is empty'.
    indexed = "\n".join(
        f"{number - 1 if number else ''},{row}" for number, row in enumerate(_CLEAN_CSV.split())
    )
    history = spot_history_from_text(indexed + "\n2,,,,,\n", source="prices")
    assert _every_series(history) == _every_series(spot_history_from_text(_CLEAN_CSV, source="prices"))


def test_an_extra_field_holding_a_value_is_named_beside_an_empty_one() -> None:
    text = _CLEAN_CSV.replace("0.31\n", "0,,31\n")
    with pytest.raises(
        InvalidPriceDataError, match="prices line 3 has 7 fields, its header 5: remove the extra '', '31'"
    ):
        spot_history_from_text(text, source="prices")


def test_unsorted_and_duplicated_csv_rows_are_fixed_and_reported() -> None:
    rows = [
        "2021-03-01T02:00:00Z,us-east-1,us-east-1a,m5.large,Linux/UNIX,0.30",
        "2021-03-01T00:00:00Z,us-east-1,us-east-1a,m5.large,Linux/UNIX,0.10",
        "2021-03-01T00:00:00Z,us-east-1,us-east-1a,m5.large,Linux/UNIX,0.10",
    ]
    text = "timestamp,region,availability_zone,instance_type,product_description,usd_per_hour\n" + "\n".join(
        rows
    )
    history = spot_history_from_text(text, source="p.csv")
    assert [str(p) for _, p in history.series("m5.large", "us-east-1").points] == ["0.10", "0.30"]
    assert any("out of order" in n for n in history.notes) and any("duplicate" in n for n in history.notes)


def test_unknown_names_are_reported_with_what_is_known() -> None:
    text = "timestamp,region,availability_zone,instance_type,product_description,usd_per_hour\n"
    text += "2021-03-01T00:00:00Z,us-east-1,us-east-1a,m5.large,Linux/UNIX,0.1\n"
    history = spot_history_from_text(text, source="p.csv")
    with pytest.raises(PriceNotFoundError, match=r"unknown instance type 'm5\.larg'.*did you mean m5\.large"):
        history.series("m5.larg", "us-east-1")
    with pytest.raises(PriceNotFoundError, match=r"in region 'eu-west-1'.*it has us-east-1"):
        history.series("m5.large", "eu-west-1")
    with pytest.raises(PriceNotFoundError, match="zone 'us-east-1b'; zones: us-east-1a"):
        history.series("m5.large", "us-east-1", "us-east-1b")
    # A real type the file does not record: the file is what to change ("did you mean m5.large?" before).
    with pytest.raises(
        PriceNotFoundError, match=r"p\.csv has no spot prices of m5\.xlarge \(it records m5\.large\): give a"
    ):
        history.series("m5.xlarge", "us-east-1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time,price\n", "electricity CSV lacks column"),
        # Header only (blank lines after it too): "price series ... has no records; check the file and its
        # filters", of a file that has no filters.
        *[
            (
                text,
                "^power.csv: the file has a header but no rows; an electricity price CSV has a row per hour "
                r"under its header timestamp_utc,usd_per_mwh \(e.g. 2023-01-01T00:00:00Z,42.5\)$",
            )
            for text in ("timestamp_utc,usd_per_mwh\n", "timestamp_utc,usd_per_mwh\n\n\n")
        ],
        (
            "timestamp_utc,usd_per_mwh\n2023-01-01T00:00:00Z,10\n2023-01-01T03:00:00Z,10\n",
            r"no price from .* \(3 h; records must be at most 1:00:00 apart\)",
        ),
        # The file's line (the header is line 1), not the record's index from 0.
        (
            "timestamp_utc,usd_per_mwh\n2023-01-01T00:00:00Z,10\n2023-01-01T01:00:00Z,abc\n",
            "line 3: price 'abc' is not a number: write the USD per MWh",  # it said "USD per hour"
        ),
        ("timestamp_utc,usd_per_mwh\n2023-01-01T00:00:00Z,1\n2023-01-01T00:00:00Z,2\n", "two prices at"),
        (
            "timestamp_utc,usd_per_mwh\n2023-01-01T00:00:00Z,1\n2023-01-01T01:00:00Z,nan\n",
            r"line 3: price 'nan' must be a finite number \(USD per MWh\)",
        ),
    ],
)
def test_bad_electricity_files(text: str, message: str) -> None:
    with pytest.raises(InvalidPriceDataError, match=message):
        electricity_from_text(text, source="power.csv")


@pytest.mark.parametrize(
    ("header", "electricity"),
    [
        ("timestamp_utc,usd_per_mwh", True),
        # A misnamed price column was read as a spot CSV and refused for lacking five spot columns.
        ("timestamp_utc,usd_per_kwh", True),
        ('"timestamp_utc","price"', True),
        ("timestamp,region,availability_zone,instance_type,product_description,usd_per_hour", False),
        # A spot CSV whose only mistake is timestamp_utc for timestamp was told it lacks usd_per_mwh.
        ("timestamp_utc,availability_zone,instance_type,product_description,usd_per_hour", False),
        # An electricity file with a spare timestamp column, which the electricity reader reads.
        ("timestamp,timestamp_utc,usd_per_mwh", True),
    ],
)
def test_an_electricity_csv_is_told_by_either_of_its_columns(header: str, electricity: bool) -> None:
    assert is_electricity_csv(f"{header}\n2023-01-01T00:00:00Z,1\n") is electricity


@pytest.mark.parametrize(
    ("line_end", "bom"),
    [
        pytest.param("\r", "", id="cr"),
        pytest.param("\r\n", "", id="crlf"),
        pytest.param("\n", "\ufeff", id="lf-bom"),
        pytest.param("\r", "\ufeff", id="cr-bom"),
    ],
)
def test_price_files_read_alike_whatever_their_line_ends(tmp_path: Path, line_end: str, bom: str) -> None:
    # The carbon reader refused CR-only files (Excel for Mac's "CSV (Macintosh)") once it decoded bytes:
    # the spot and electricity readers read them as their LF twins, and name a bad row's line alike.
    spot = [
        "timestamp,availability_zone,instance_type,product_description,usd_per_hour",
        "2021-03-01T00:00:00Z,us-east-1a,m5.large,Linux/UNIX,0.30",
        "2021-03-01T01:00:00Z,us-east-1a,m5.large,Linux/UNIX,0.31",
    ]
    electricity = ["timestamp_utc,usd_per_mwh", "2023-01-01T00:00:00Z,42.5", "2023-01-01T01:00:00Z,-3"]

    def saved(name: str, lines: list[str]) -> Path:
        path = tmp_path / name
        path.write_bytes((bom + line_end.join(lines) + line_end).encode("utf-8"))
        return path

    history = load_spot_history(saved("spot.csv", spot))
    lf = spot_history_from_text("\n".join(spot) + "\n", source="spot.csv")
    series = history.series("m5.large", "us-east-1", "us-east-1a")
    assert series.points == lf.series("m5.large", "us-east-1", "us-east-1a").points and len(series) == 2
    prices = load_electricity(saved("power.csv", electricity))
    assert prices.points == electricity_from_text("\n".join(electricity) + "\n", source="power.csv").points
    with pytest.raises(InvalidPriceDataError, match="line 3: price 'abc' is not a number"):
        load_electricity(saved("power.csv", [*electricity[:2], "2023-01-01T01:00:00Z,abc"]))
    with pytest.raises(InvalidPriceDataError, match="line 3"):
        load_spot_history(
            saved("spot.csv", [*spot[:2], "2021-03-01T01:00:00Z,us-east-1a,m5.large,Linux/UNIX,x"])
        )


# -- live prices ----------------------------------------------------------------------------------------


def aws_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, endpoint: str) -> None:
    conn = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"region_name": "us-east-1", "endpoint_url": endpoint},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_live_prices_from_moto(monkeypatch: pytest.MonkeyPatch, moto_endpoint: str) -> None:
    aws_connection(monkeypatch, "moto_live", moto_endpoint)
    spot_prices.clear_cache()
    live = LiveSpotPrices(aws_conn_id="moto_live", region_name="us-east-1", ttl_seconds=60)
    history = live.history(["g4dn.8xlarge"])
    # moto describes every zone offering the type, as "Linux/UNIX (Amazon VPC)": kept by the Linux filter.
    assert history.zones("g4dn.8xlarge", "us-east-1") == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
        "us-east-1f",
    ]
    now = datetime.now(timezone.utc)
    assert history.series("g4dn.8xlarge", "us-east-1").price_at(now) == Decimal("0.00001")
    assert live.requests == 1
    assert live.history(["g4dn.8xlarge"]) is history and live.requests == 1  # cached


class RecordedEc2(BaseHTTPRequestHandler):
    """Answers EC2 DescribeSpotPriceHistory from recorded records, a few per page, like AWS does."""

    records: list[dict[str, Any]] = []
    page_size = 7
    requests = 0
    refuse: tuple[int, str] | None = None  # (HTTP status, EC2 error code) to answer with instead

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        type(self).requests += 1
        if self.refuse is not None:
            status, code = self.refuse
            body = (
                f"<Response><Errors><Error><Code>{code}</Code><Message>refused by the test</Message></Error>"
                "</Errors><RequestID>r</RequestID></Response>"
            ).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        assert form["Action"] == ["DescribeSpotPriceHistory"]
        wanted = {v[0] for k, v in form.items() if k.startswith("InstanceType.")}
        start = int(form.get("NextToken", ["0"])[0])
        matching = [r for r in self.records if r["InstanceType"] in wanted]
        page = matching[start : start + self.page_size]
        items = "".join(
            "<item><availabilityZone>{AvailabilityZone}</availabilityZone><instanceType>{InstanceType}"
            "</instanceType><productDescription>{ProductDescription}</productDescription><spotPrice>{SpotPrice}"
            "</spotPrice><timestamp>{Timestamp}</timestamp></item>".format(**r)
            for r in page
        )
        token = (
            f"<nextToken>{start + self.page_size}</nextToken>"
            if start + self.page_size < len(matching)
            else ""
        )
        body = (
            '<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            f"<requestId>r{start}</requestId><spotPriceHistorySet>{items}</spotPriceHistorySet>{token}"
            "</DescribeSpotPriceHistoryResponse>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def recorded_ec2() -> Iterator[str]:
    records = []
    for hour in range(20):
        for product, price in (("Linux/UNIX", 0.5 + hour / 100), ("Windows", 1.5), ("SUSE Linux", 0.9)):
            records.append(
                {
                    "AvailabilityZone": "us-east-1a",
                    "InstanceType": "m5.large",
                    "ProductDescription": product,
                    "SpotPrice": f"{price:.4f}",
                    "Timestamp": (T0 + timedelta(hours=hour)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                }
            )
    RecordedEc2.records = records
    RecordedEc2.requests = 0
    RecordedEc2.refuse = None
    server = ThreadingHTTPServer(("127.0.0.1", 0), RecordedEc2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_live_prices_follow_next_token_cache_and_keep_linux(
    monkeypatch: pytest.MonkeyPatch, recorded_ec2: str
) -> None:
    aws_connection(monkeypatch, "recorded_ec2", recorded_ec2)
    spot_prices.clear_cache()
    clock = [1000.0]
    live = LiveSpotPrices(
        aws_conn_id="recorded_ec2", region_name="us-east-1", ttl_seconds=300, clock=lambda: clock[0]
    )
    start, end = T0, T0 + timedelta(days=1)
    history = live.history(["m5.large"], start=start, end=end)
    assert live.requests == RecordedEc2.requests == 9  # 60 records, 7 per page
    series = history.series("m5.large", "us-east-1")
    assert len(series) == 20  # only the Linux/UNIX records, from every page
    assert series.price_at(T0 + timedelta(hours=19, minutes=30)) == Decimal("0.6900")
    clock[0] += 299
    assert live.history(["m5.large"], start=start, end=end) is history and RecordedEc2.requests == 9
    clock[0] += 2  # past the TTL
    assert live.history(["m5.large"], start=start, end=end) is not history and RecordedEc2.requests == 18
    # Expired entries go as new ones come: the triggerer kept every TTL period's query for ever.
    clock[0] += 301
    live.history(["m5.large"], start=start, end=end + timedelta(hours=1))
    assert len(spot_prices._CACHE) == 1


@pytest.mark.parametrize(
    ("zone", "region"),
    [("us-east-1a", "us-east-1"), ("us-east-1-bos-1a", "us-east-1"), ("us-west-2-lax-1b", "us-west-2"),
     ("us-gov-west-1a", "us-gov-west-1"), ("", "")],
)  # fmt: skip
def test_the_region_of_a_zone_local_zones_too(zone: str, region: str) -> None:
    # A local zone's region read "us-east-1-bos-1", which no price names: its records were unreachable.
    assert spot_prices.region_of(zone) == region


@pytest.mark.usefixtures("no_aws_credentials")
def test_live_prices_without_credentials_say_what_to_do(
    monkeypatch: pytest.MonkeyPatch, recorded_ec2: str
) -> None:
    # A hurried user's first DAG: no prices= and no AWS credentials anywhere (was a raw botocore traceback).
    conn = {"conn_type": "aws", "extra": {"region_name": "us-east-1", "endpoint_url": recorded_ec2}}
    monkeypatch.setenv("AIRFLOW_CONN_NO_KEYS", json.dumps(conn))
    spot_prices.clear_cache()
    with pytest.raises(ConfigurationError) as caught:
        LiveSpotPrices(aws_conn_id="no_keys", region_name="us-east-1").history(["g5.xlarge"])
    said = str(caught.value)
    assert "cannot read EC2's spot price history for g5.xlarge through the AWS connection 'no_keys'" in said
    assert "Unable to locate credentials" in said and "or pass prices= the path of a recorded" in said


@pytest.mark.parametrize(
    ("refusal", "error", "said"),
    [
        ((403, "UnauthorizedOperation"), ConfigurationError, "check that connection's credentials"),
        ((503, "Unavailable"), ComputeBackendError, "the task is retried"),
    ],
)
def test_live_prices_refused_by_aws_fail_or_retry(
    monkeypatch: pytest.MonkeyPatch,
    recorded_ec2: str,
    refusal: tuple[int, str],
    error: type[Exception],
    said: str,
) -> None:
    aws_connection(monkeypatch, "recorded_ec2", recorded_ec2)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries of a 503 would only slow the test
    spot_prices.clear_cache()
    RecordedEc2.refuse = refusal
    with pytest.raises(error) as caught:
        LiveSpotPrices(aws_conn_id="recorded_ec2", region_name="us-east-1").history(["m5.large"])
    assert "cannot read EC2's spot price history for m5.large through the AWS connection" in str(caught.value)
    assert f"{refusal[1]}: refused by the test" in str(caught.value) and said in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttl_seconds": -1}, "ttl_seconds must be >= 0"),
        ({"page_size": 2000}, "page_size must be between 5 and 1000"),
    ],
)
def test_live_argument_checks(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        LiveSpotPrices(**kwargs)


def test_live_rejects_naive_times() -> None:
    with pytest.raises(ConfigurationError, match="has no time zone"):
        LiveSpotPrices(aws_conn_id="unused").history(["m5.large"], start=datetime(2021, 1, 1))


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        # Its only value under the unnamed column: skipped as a blank row.
        (
            ",,0.31,,,",
            "prices line 3: column 3 has no name in the header, but the row holds '0.31' there: name",
        ),
        # Read without it.
        (
            "2021-03-01T01:00:00Z,us-east-1b,x,m5.large,Linux/UNIX,0.31",
            "prices line 3: column 3 has no name in the header, but the row holds 'x' there",
        ),
    ],
)
def test_a_value_under_an_unnamed_column_between_names_is_refused_naming_its_position(
    rows: str, message: str
) -> None:
    header = "timestamp,availability_zone,,instance_type,product_description,usd_per_hour\n"
    text = header + "2021-03-01T00:00:00Z,us-east-1a,,m5.large,Linux/UNIX,0.30\n" + rows + "\n"
    with pytest.raises(InvalidPriceDataError, match=re.escape(message)):
        spot_history_from_text(text, source="prices")
    loaded = spot_history_from_text(
        header + "2021-03-01T00:00:00Z,us-east-1a,,m5.large,Linux/UNIX,0.30\n", source="p"
    )
    assert loaded.zones("m5.large", "us-east-1") == ["us-east-1a"]  # nothing under it: nothing lost


def test_a_region_column_that_disagrees_with_the_zone_is_refused() -> None:
    # The region column was never read: a row of eu-west-1 filed under us-east-1a's zone in silence.
    header = "timestamp,region,availability_zone,instance_type,product_description,usd_per_hour\n"
    wrong = header + "2021-03-01T00:00:00Z,eu-west-1,us-east-1a,m5.large,Linux/UNIX,0.30\n"
    with pytest.raises(
        InvalidPriceDataError,
        match=re.escape(
            "prices line 2: region 'eu-west-1' is not the region of availability_zone 'us-east-1a' "
            "('us-east-1'): fix the one that is wrong, or leave region empty"
        ),
    ):
        spot_history_from_text(wrong, source="prices")
    agreeing = header + (
        "2021-03-01T00:00:00Z,us-east-1,us-east-1a,m5.large,Linux/UNIX,0.30\n"
        "2021-03-01T00:00:00Z,,us-east-1b,m5.large,Linux/UNIX,0.31\n"  # empty: the zone files it
    )
    assert spot_history_from_text(agreeing, source="prices").zones("m5.large", "us-east-1") == [
        "us-east-1a",
        "us-east-1b",
    ]


def test_the_extra_field_message_does_not_count_pandas_index_as_named() -> None:
    # It said "its header 6 named" where 5 columns are named and the first is pandas' index.
    indexed = "\n".join(
        f"{number - 1 if number else ''},{row}," for number, row in enumerate(_CLEAN_CSV.split())
    ).replace("0.31,", "0,31")
    with pytest.raises(
        InvalidPriceDataError,
        match=re.escape(
            "prices line 3 has 7 fields, its header 6 (pandas' index and 5 named): remove the extra"
        ),
    ):
        spot_history_from_text(indexed + "\n", source="prices")


@pytest.mark.parametrize(
    ("region", "zone"),
    [
        ("us-east-1", "use1-az1"),  # a zone ID: it names no region
        ("us-west-2", "usw2-lax1-az1"),  # a Local Zone's ID
        ("europe-west4", "europe-west4-a"),  # another cloud's zone
        ("US-EAST-1", "us-east-1a"),  # AWS reads a region in any case
        ("us-east-1", "us-east-1-bos-1a"),  # a Local Zone's name
    ],
)
def test_a_region_column_is_compared_only_with_an_aws_zone_name(region: str, zone: str) -> None:
    # These loaded before the region column was read, and were then refused: "region 'us-east-1' is not the
    # region of availability_zone 'use1-az1' ('use1-az1')".
    header = "timestamp,region,availability_zone,instance_type,product_description,usd_per_hour\n"
    text = header + f"2021-03-01T00:00:00Z,{region},{zone},m5.large,Linux/UNIX,0.30\n"
    history = spot_history_from_text(text, source="prices")
    assert history.zones("m5.large", spot_prices.region_of(zone)) == [zone]
    wrong = header + f"2021-03-01T00:00:00Z,EU-WEST-1,{zone},m5.large,Linux/UNIX,0.30\n"
    if zone.startswith("us-east-1"):  # an AWS zone name in another region than the one written
        with pytest.raises(InvalidPriceDataError, match="region 'EU-WEST-1' is not the region of"):
            spot_history_from_text(wrong, source="prices")


def test_a_two_level_pandas_index_is_read_as_the_index() -> None:
    # A MultiIndex writes one unnamed column per level (",,timestamp,..."): its second level was refused as
    # "column 2 has no name in the header, but the row holds '0' there".
    rows = _CLEAN_CSV.splitlines()
    text = "\n".join([f",,{rows[0]}", *(f"a,{n},{row}" for n, row in enumerate(rows[1:]))]) + "\n"
    history = spot_history_from_text(text, source="prices")
    assert history.zones("m5.large", "us-east-1") == ["us-east-1a", "us-east-1b"]
    with pytest.raises(
        InvalidPriceDataError,
        match=re.escape(
            "prices line 3 has 8 fields, its header 7 (pandas' index of 2 columns and 5 named): remove the "
            "extra '31'"
        ),
    ):
        spot_history_from_text(text.replace("0.31", "0,31"), source="prices")
