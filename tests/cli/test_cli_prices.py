"""``costaware prices list|show|refresh|import`` against a real SQLite ledger."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from costaware import Ledger
from costaware.adapters import aws_pricing
from costaware.adapters.price_source import PriceCache
from costaware.cli import main
from costaware.core.ledger import utcnow
from costaware.core.price_list import ListPrice

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "price_list"


def run(ledger_url: str, *argv: str) -> int:
    return main(["--ledger-url", ledger_url, *argv])


def test_show_names_the_bundled_snapshot(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(ledger_url, "prices", "show", "m5n.2xlarge", "--region", "us-east-1") == 0
    out = capsys.readouterr().out
    assert "m5n.2xlarge in us-east-1: 8 vCPUs, 32 GiB, x86_64" in out
    assert "on-demand: 0.476 USD/h from the bundled snapshot" in out


def test_show_at_a_ledger_url_with_no_ledger_makes_none_and_says_the_cache_was_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A mistyped --ledger-url: the look-up made an empty ledger there and read its empty cache unsaid.
    typo = tmp_path / "ledgr.db"
    assert run(f"sqlite:///{typo}", "prices", "show", "m5.large", "--format", "json") == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["origin"] == "bundled-snapshot"
    assert f"warning: price cache not read (no ledger at {typo}: check --ledger-url" in err
    assert not typo.exists()


def test_show_speaks_json_and_csv_too(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # --format was ignored for a named type: the text came out, exit 0.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__DISCOUNTS", "team:ml=20")
    argv = ["prices", "show", "m5n.2xlarge", "--region", "us-east-1", "--team", "ML-ops", "--format", "json"]
    assert run(ledger_url, *argv) == 0
    captured = capsys.readouterr()
    shown = json.loads(captured.out)  # the unknown team's note goes to stderr, not into the JSON
    # The digits as the source held them (0.476000, 1.5000000000) or "1E-7" (no number for jq) before.
    assert (shown["on_demand_usd_per_hour"], shown["origin"], shown["vcpus"]) == (
        "0.476",
        "bundled-snapshot",
        8,
    )
    assert "no discount is configured for team 'ML-ops'" in captured.err
    assert run(ledger_url, *argv[:-4], "--format", "csv") == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.startswith("instance_type,region,service,on_demand_usd_per_hour") and "0.476" in row


def test_show_with_a_team_applies_its_discount_and_names_an_unknown_team(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__COSTAWARE__DISCOUNTS", "team:ml=20")
    assert run(ledger_url, "prices", "show", "m5n.2xlarge", "--region", "us-east-1", "--team", "ml") == 0
    out = capsys.readouterr().out
    assert "after the team:ml discount (20%): 0.3808 USD/h" in out and "no discount" not in out
    assert run(ledger_url, "prices", "show", "m5n.2xlarge", "--region", "us-east-1", "--team", "ML-ops") == 0
    out = capsys.readouterr().out
    assert "no discount is configured for team 'ML-ops' (teams with one: ml;" in out
    assert "after the" not in out


@pytest.mark.parametrize("name", ["ec2_offer_us-east-1.json", "ec2_offer_us-east-1.csv"])
def test_import_then_show_source_and_age(
    ledger_url: str, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert run(ledger_url, "prices", "import", str(FIXTURES / name)) == 0
    assert f"imported 2 ec2 price(s) for us-east-1 from {name}" in capsys.readouterr().out
    assert run(ledger_url, "prices", "show", "r7i.large") == 0
    out = capsys.readouterr().out
    assert "on-demand: 0.1323 USD/h from an imported offer file, fetched " in out
    assert "(0 min ago)" in out and "STALE" not in out
    assert run(ledger_url, "prices", "show", "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["instance_type"], r["usd_per_hour"], r["source"], r["stale"]) for r in rows] == [
        ("g6.xlarge", "0.8048", "offer-file", False),
        ("r7i.large", "0.1323", "offer-file", False),
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["prices", "import", str(FIXTURES / "ec2_offer_us-east-1.csv")],
        ["prices", "refresh", "--service", "sagemaker", "--types", "ml.g5.*"],
    ],
    ids=["import", "refresh"],
)
def test_a_database_without_a_ledger_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    # A mistyped database name: its ledger tables were made without a word and the cache filled there,
    # where no task reads it, while the commands that read refuse such a database.
    stubber, _ = stubbed_pricing(monkeypatch)
    items = [json.dumps(i) for i in json.loads((FIXTURES / "sagemaker_get_products.json").read_text())]
    stubber.add_response("get_products", {"PriceList": items})
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    with stubber:
        assert run(f"sqlite:///{other}", *argv) == 2
    err = capsys.readouterr().err
    assert f"no ledger at sqlite:///{other} (the database holds other tables but no costaware tables" in err
    assert "add --create-ledger): check --ledger-url" in err
    assert "a ledger is made by the first DAG run that records a cost or by `costaware budget set`" in err
    with sqlite3.connect(other) as db:
        assert db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall() == [("notes",)]


def test_an_empty_database_made_for_the_ledger_gets_one_from_prices_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The compose file's `costaware` database starts empty: an offline deployment imports prices first.
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert empty.exists()
    assert run(f"sqlite:///{empty}", "prices", "import", str(FIXTURES / "ec2_offer_us-east-1.csv")) == 0
    captured = capsys.readouterr()
    assert "imported 2 ec2 price(s) for us-east-1" in captured.out
    assert f"no ledger at sqlite:///{empty} (the database has no costaware tables) yet: creating one" in (
        captured.err
    )
    assert run(f"sqlite:///{empty}", "prices", "show", "r7i.large") == 0


def test_a_database_with_other_tables_gets_a_ledger_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A ledger kept in Airflow's metadata database (docs/ledger.md): refused as a mistyped database was,
    # with only `budget set` (a real budget) as the way out.
    shared = tmp_path / "airflow.db"
    with sqlite3.connect(shared) as db:
        db.execute("CREATE TABLE dag (dag_id TEXT)")
    offer = str(FIXTURES / "ec2_offer_us-east-1.csv")
    assert run(f"sqlite:///{shared}", "prices", "import", offer) == 2
    err = capsys.readouterr().err
    assert "holds other tables but no costaware tables" in err and "add --create-ledger" in err
    assert run(f"sqlite:///{shared}", "prices", "import", offer, "--create-ledger") == 0
    assert "creating one there" in capsys.readouterr().err
    with sqlite3.connect(shared) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "dag" in tables and "costaware_price_cache" in tables


def test_a_postgres_database_whose_tables_are_in_another_schema_is_not_empty(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only the default schema was looked at: an application's database was made a ledger without a word.
    from services import fresh_postgres_database
    from sqlalchemy import create_engine, inspect, text

    url = fresh_postgres_database(postgres_url, "app")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE SCHEMA app"))
        conn.execute(text("CREATE TABLE app.orders (id int)"))
    assert run(url, "prices", "import", str(FIXTURES / "ec2_offer_us-east-1.csv")) == 2
    assert "holds other tables but no costaware tables" in capsys.readouterr().err
    with engine.connect() as conn:
        assert inspect(conn).get_table_names() == []
    engine.dispose()


def test_an_imported_type_the_bundled_catalog_lacks_is_warned_of_with_the_closest(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A misspelt type in a hand-edited file was imported in silence: it priced nothing, and the tasks on
    # the real type stayed unpriced. It is imported (AWS files carry types newer than the catalog), and said.
    typo = tmp_path / "typo.csv"
    typo.write_text((FIXTURES / "ec2_offer_us-east-1.csv").read_text().replace('"r7i.large"', '"r7i.lrage"'))
    assert run(ledger_url, "prices", "import", str(typo)) == 0
    captured = capsys.readouterr()
    assert "imported 2 ec2 price(s) for us-east-1 from typo.csv" in captured.out
    assert (
        "warning: typo.csv: 1 instance type(s) the bundled catalog does not know: 'r7i.lrage' (did you mean "
        "r7i.large" in captured.err
    )
    assert "imported as written" in captured.err
    assert run(ledger_url, "prices", "import", str(FIXTURES / "ec2_offer_us-east-1.csv")) == 0
    assert "warning" not in capsys.readouterr().err  # known types: nothing to say
    # A misspelt --types matched nothing, and the error did not say what was meant.
    assert (
        run(ledger_url, "prices", "import", str(FIXTURES / "ec2_offer_us-east-1.csv"), "--types", "r7i.lrage")
        == 2
    )
    assert "matching 'r7i.lrage' (did you mean r7i.large" in capsys.readouterr().err


def test_types_takes_a_list_and_a_misspelt_name_in_it_imports_nothing(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    offer = str(FIXTURES / "ec2_offer_us-east-1.csv")
    # One misspelt name of a list: 'g6.xlarge,r7i.lrage' matched nothing at all (no type has a comma), and
    # the error hinted at neither name.
    assert run(ledger_url, "prices", "import", offer, "--types", "g6.xlarge,r7i.lrage") == 2
    err = capsys.readouterr().err
    assert "--types 'r7i.lrage' (did you mean r7i.large" in err and "nothing was imported" in err
    assert PriceCache(Ledger.from_url(ledger_url)).rows() == []
    # A known type the file does not price is not "did you mean" itself.
    assert run(ledger_url, "prices", "import", offer, "--types", "m5.large") == 2
    assert "'m5.large' (a known type: the file has no price for it)" in capsys.readouterr().err
    assert run(ledger_url, "prices", "import", offer, "--types", "g6.xlarge, r7i.*") == 0
    assert "imported 2 ec2 price(s) for us-east-1" in capsys.readouterr().out
    imported = {r.price.instance_type for r in PriceCache(Ledger.from_url(ledger_url)).rows()}
    assert imported == {"g6.xlarge", "r7i.large"}


def test_a_region_newer_than_the_snapshot_is_known_once_its_prices_are_imported(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # mx-central-1 is not in the bundled table: an imported price of it was refused ("did you mean
    # me-central-1?"), and the spot line blamed the region the on-demand line had just priced.
    offer = json.loads((FIXTURES / "ec2_offer_us-east-1.json").read_text())
    moved = tmp_path / "mx.json"
    moved.write_text(
        json.dumps(offer).replace("us-east-1", "mx-central-1").replace("US East (N. Virginia)", "Mexico")
    )
    assert run(ledger_url, "prices", "import", str(moved)) == 0
    assert "for mx-central-1" in capsys.readouterr().out
    assert run(ledger_url, "prices", "show", "r7i.large", "--region", "mx-central-1") == 0
    out = capsys.readouterr().out
    assert "on-demand: 0.1323 USD/h from an imported offer file" in out
    assert (
        "spot: no estimate (the bundled Spot Instance Advisor data has no r7i.large in mx-central-1)" in out
    )
    assert run(ledger_url, "prices", "show", "r7i.large", "--region", "mx-centrl-1") == 2
    assert "did you mean mx-central-1" in capsys.readouterr().err


def test_stale_figures_are_flagged(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    old = utcnow() - timedelta(days=8)
    PriceCache(Ledger.from_url(ledger_url)).put(
        [ListPrice("sagemaker", "ml.g5.xlarge", "us-east-1", Decimal("1.408"))],
        origin="aws-price-list",
        fetched_at=old,
    )
    assert run(ledger_url, "prices", "show") == 0
    out = capsys.readouterr().out
    assert "ml.g5.xlarge" in out and "8 d 0 h" in out and "STALE" in out
    assert "1 figure(s) older than the 168 h TTL" in out
    assert run(ledger_url, "prices", "show", "ml.g5.xlarge") == 0
    out = capsys.readouterr().out
    assert "on-demand: 1.408 USD/h from the AWS Price List API" in out
    assert "STALE: older than the 168 h TTL, run `costaware prices refresh`" in out
    # Imported from an offer file (a machine without AWS access): the advice is a newer file.
    PriceCache(Ledger.from_url(ledger_url)).put(
        [ListPrice("ec2", "c7i.large", "eu-west-1", Decimal("0.1"))], origin="offer-file", fetched_at=old
    )
    assert run(ledger_url, "prices", "show", "c7i.large", "--region", "eu-west-1") == 0
    assert "STALE: older than the 168 h TTL, import a newer offer file" in capsys.readouterr().out


def stubbed_pricing(monkeypatch: pytest.MonkeyPatch) -> tuple[Stubber, list[str | None]]:
    """A Price List client whose answers the test sets, given to every connection; the ids asked for."""
    client = boto3.client(
        "pricing", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    seen: list[str | None] = []

    def client_for(aws_conn_id: str | None, **_: object) -> object:
        seen.append(aws_conn_id)
        return client

    monkeypatch.setattr(aws_pricing, "pricing_client", client_for)
    return Stubber(client), seen


def test_refresh_through_the_connection(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stubber, seen = stubbed_pricing(monkeypatch)
    items = [json.dumps(i) for i in json.loads((FIXTURES / "sagemaker_get_products.json").read_text())]
    stubber.add_response("get_products", {"PriceList": items})
    with stubber:
        code = run(
            ledger_url,
            "prices",
            "refresh",
            "--service",
            "sagemaker",
            "--types",
            "ml.g5.*",
            "--aws-conn-id",
            "prices_conn",
        )
    assert code == 0 and seen == ["prices_conn"]
    assert "us-east-1: 1 sagemaker price(s) cached matching ml.g5.*" in capsys.readouterr().out
    rows = PriceCache(Ledger.from_url(ledger_url)).rows()
    assert [(r.price.instance_type, r.origin) for r in rows] == [("ml.g5.xlarge", "aws-price-list")]


def test_a_refresh_of_a_list_with_a_misspelt_name_caches_nothing(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stubber, _ = stubbed_pricing(monkeypatch)
    items = [json.dumps(i) for i in json.loads((FIXTURES / "sagemaker_get_products.json").read_text())]
    stubber.add_response("get_products", {"PriceList": items})
    # ml.g5.xlarge was cached and the misspelt one dropped, exit 0, without a word.
    with stubber:
        code = run(
            ledger_url, "prices", "refresh", "--service", "sagemaker", "--types", "ml.g5.xlarge,ml.g5.xlarg"
        )
    assert code == 2
    err = capsys.readouterr().err
    assert "--types 'ml.g5.xlarg' matched no sagemaker price in us-east-1; nothing was cached" in err
    assert PriceCache(Ledger.from_url(ledger_url)).rows() == []


def test_refresh_refused_by_aws_is_a_clear_error(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, moto_endpoint: str
) -> None:
    conn = {"conn_type": "aws", "login": "t", "password": "t", "extra": {"endpoint_url": moto_endpoint}}
    monkeypatch.setenv("AIRFLOW_CONN_MOTO_PRICING", json.dumps(conn))
    # moto's server has no Price List API: it answers with an error, as an AWS outage would.
    assert run(ledger_url, "prices", "refresh", "--aws-conn-id", "moto_pricing") == 2
    err = capsys.readouterr().err
    assert "the AWS Price List API refused the request for us-east-1 through connection 'moto_pricing'" in err
    # A 500 is the endpoint's failure, not the credentials'; its HTML page is cut to its first line.
    assert "the endpoint failed: try again later, or check the connection's endpoint_url" in err
    assert "<html" not in err.lower() or err.lower().count("\n") <= 3
    assert PriceCache(Ledger.from_url(ledger_url)).rows() == []


def test_a_refresh_of_several_regions_that_fails_in_one_writes_none(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first region was cached before the second failed, though the error said nothing was written.
    stubber, _ = stubbed_pricing(monkeypatch)
    items = [json.dumps(i) for i in json.loads((FIXTURES / "sagemaker_get_products.json").read_text())]
    stubber.add_response("get_products", {"PriceList": items})
    stubber.add_client_error("get_products", "AccessDeniedException", "not allowed in ap-south-1")
    argv = ["prices", "refresh", "--service", "sagemaker", "--region", "us-east-1", "--region", "ap-south-1"]
    with stubber:
        assert run(ledger_url, *argv) == 2
    assert "refused the request for ap-south-1" in capsys.readouterr().err
    assert PriceCache(Ledger.from_url(ledger_url)).rows() == []


def test_refresh_through_a_connection_that_does_not_exist_says_so(
    ledger_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # It fell back to the default credentials, and the error read as if the connection's were wrong.
    stubber, _ = stubbed_pricing(monkeypatch)
    stubber.add_client_error("get_products", "UnrecognizedClientException", "no credentials")
    with stubber:
        assert run(ledger_url, "prices", "refresh", "--aws-conn-id", "prices_aws") == 2
    err = capsys.readouterr().err
    assert "connection 'prices_aws' does not exist, so the SDKs' default credentials were tried" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["prices", "refresh", "--region", "us-east-9"],  # neither the snapshot nor the AWS SDK knows it
            "unknown region 'us-east-9'; did you mean us-east-2, us-east-1",
        ),
        (["prices", "show", "m5.large", "--region", "eu-wset-1"], "unknown region 'eu-wset-1'"),
        # Without a type it read "the price cache is empty", exit 0; an empty one was us-east-1, unsaid.
        (["prices", "show", "--region", "us-east-9"], "unknown region 'us-east-9'"),
        (
            ["prices", "import", "missing.json"],
            "cannot read offer file 'missing.json' (a relative path, read as ",
        ),
        (
            ["prices", "import", "missing.json"],
            "missing.json): No such file or directory; check the name, or give the file's full path, or "
            "download the region's file first (https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/",
        ),
        (["prices", "list", "--arch", "sparc"], "unknown architecture 'sparc'"),
        # Each paged through every product of the service for a name it never has, then "no prices found".
        (
            ["prices", "refresh", "--types", "ml.g5.*", "--aws-conn-id", "no_such_conn"],
            "--types 'ml.g5.*' names a SageMaker type (ml.*), and --service is ec2: add --service sagemaker",
        ),
        (
            ["prices", "refresh", "--service", "sagemaker", "--types", "g5.xlarge", "--aws-conn-id", "none"],
            "--types 'g5.xlarge' is no SageMaker name: SageMaker's instance types are named with 'ml.', e.g. "
            "'ml.g5.xlarge'",
        ),
        # An empty table (exit 0) read as "nothing fits" where the model was mistyped.
        (["prices", "list", "--gpu-model", "H1000"], "carries GPU model 'H1000'; did you mean H100"),
        (["prices", "list", "--limit", "-5"], "--limit must be 1 or more, got -5"),  # sliced rows off before
        (["prices", "list", "--min-vcpus", "-1"], "--min-vcpus must be 0 or more, got -1"),
    ],
)
def test_bad_input(
    ledger_url: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert run(ledger_url, *argv) == 2
    assert message in capsys.readouterr().err
    assert PriceCache(Ledger.from_url(ledger_url)).rows() == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '{"offerCode": "AmazonEC2",\n"products": {\n"x": [1,]}}',
            "bad.json: offer file is not valid JSON at line 3",
        ),
        (
            (FIXTURES / "ec2_offer_us-east-1.csv").read_text().replace('"0.8048000000"', '"-0.8"'),
            "bad.csv: offer CSV line 11: price -0.8 is negative",
        ),
        # A .json file that is no JSON: told where the JSON breaks, not that a CSV header is missing.
        ("not json\n", "bad.json: offer file is not valid JSON at line 1"),
        (
            (FIXTURES / "ec2_offer_us-east-1.json").read_text().replace("0.8048000000", "-0.8"),
            "SKU BBBG6XLARGE001, term BBBG6XLARGE001.JRTCKXETXF, dimension",
        ),
        ('{"offerCode": "AmazonEC2", "products": {}}', "no Linux on-demand instance prices"),
    ],
)
def test_malformed_offer_file_writes_nothing(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, message: str
) -> None:
    bad = tmp_path / ("bad.csv" if body.startswith('"') or "SKU" in body[:2000] else "bad.json")
    bad.write_text(body)
    assert run(ledger_url, "prices", "import", str(bad)) == 2
    assert message in capsys.readouterr().err
    assert PriceCache(Ledger.from_url(ledger_url)).rows() == []


def test_list_filters_by_architecture(ledger_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = (
        "prices",
        "list",
        "--region",
        "us-east-1",
        "--arch",
        "aarch64",
        "--min-vcpus",
        "4",
        "--format",
        "json",
    )
    assert run(ledger_url, *argv, "--limit", "500") == 0
    rows = json.loads(capsys.readouterr().out)
    names = {r["instance_type"] for r in rows}
    assert {"c7g.xlarge", "m6g.xlarge", "r8g.2xlarge"} <= names and "m5.xlarge" not in names
    assert len(rows) > 300 and {r["arch"] for r in rows} == {"arm64"}
    assert all(int(r["vcpus"]) >= 4 for r in rows)
    # The JSON of `prices show`: counts as numbers, exact figures as text, null for no GPU (it was "-").
    m6g = next(r for r in rows if r["instance_type"] == "m6g.xlarge")
    assert m6g == {
        "instance_type": "m6g.xlarge",
        "region": "us-east-1",
        "vcpus": 4,
        "memory_gib": "16",
        "gpus": "0",
        "gpu_model": None,
        "arch": "arm64",
        "usd_per_hour": "0.154",
    }


def test_import_a_file_saved_with_a_byte_order_mark(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bom = tmp_path / "index.json"
    bom.write_text("\ufeff" + (FIXTURES / "ec2_offer_us-east-1.json").read_text(), encoding="utf-8")
    assert run(ledger_url, "prices", "import", str(bom), "--types", "g6*") == 0
    assert "imported 1 ec2 price(s) for us-east-1 from index.json" in capsys.readouterr().out


def test_an_offer_file_with_a_misspelt_region_writes_nothing(
    ledger_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A row's 'us-eats-1' was imported, and from the cache `prices show --region us-eats-1` took it as known.
    lines = (FIXTURES / "ec2_offer_us-east-1.csv").read_text().splitlines(keepends=True)
    misspelt = [line.replace('"us-east-1","OnDemand"', '"us-eats-1","OnDemand"') for line in lines]
    bad = tmp_path / "index.csv"
    bad.write_text("".join(misspelt))
    assert run(ledger_url, "prices", "import", str(bad)) == 2
    assert (
        f"{bad}: unknown region 'us-eats-1'; did you mean us-east-1, us-west-1, us-east-2? (a region code "
        "of the file's prices); nothing was imported: fix the code"
    ) in capsys.readouterr().err
    assert PriceCache(Ledger.from_url(ledger_url)).rows() == []
    assert run(ledger_url, "prices", "show", "r7i.large", "--region", "us-eats-1") == 2
    assert "unknown region 'us-eats-1'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("types", "said"),
    [
        # Read as one name with a space in it, it was "did you mean r7i.16xlarge, ...".
        ("r7i.large g6.xlarge", "separate them with commas (--types 'r7i.large,g6.xlarge')"),
        # Named no type, and the import blamed the file with an empty list of names.
        (",", "',' names no type: give a type or pattern"),
    ],
)
def test_types_that_name_no_type_or_use_blanks_are_refused_before_reading_the_file(
    ledger_url: str, capsys: pytest.CaptureFixture[str], types: str, said: str
) -> None:
    offer = str(FIXTURES / "ec2_offer_us-east-1.csv")
    with pytest.raises(SystemExit) as exited:
        run(ledger_url, "prices", "import", offer, "--types", types)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --types" in err and said in err
    assert PriceCache(Ledger.from_url(ledger_url)).rows() == []


def test_a_discount_for_a_family_no_type_belongs_to_is_warned_of_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from costaware.adapters.price_source import discounts_from_settings

    # family:p4 (for p4d) applied to nothing, silently: every p4d hour was billed at the list price.
    monkeypatch.setenv(
        "AIRFLOW__COSTAWARE__DISCOUNTS", "family:p4=30, family:ml.g5=8, family:c5=4, team:ml=5"
    )
    with caplog.at_level("WARNING", logger="costaware.adapters.price_source"):
        rules = discounts_from_settings()
        discounts_from_settings()
    assert [r.label for r in rules] == ["family:p4", "family:ml.g5", "family:c5", "team:ml"]
    warned = [r.getMessage() for r in caplog.records if "discounts" in r.getMessage()]
    assert len(warned) == 1
    assert (
        "family:p4 matches no instance family of the bundled price list (did you mean p4d, p4de" in warned[0]
    )


def test_list_that_nothing_fits_says_so_and_where_something_does(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # An empty table, exit 0 and no word: --region eu-west-1 --gpu-model L4 read as "no L4 anywhere".
    assert run(ledger_url, "prices", "list", "--region", "eu-west-1", "--gpu-model", "L4") == 0
    captured = capsys.readouterr()
    assert "g6" not in captured.out
    assert "no instance type of the bundled list in eu-west-1 fits these filters; some do in us-east-1, " in (
        captured.err
    )
    assert run(ledger_url, "prices", "list", "--region", "us-east-1", "--min-vcpus", "100000") == 0
    assert "fits these filters: loosen one (--min-vcpus" in capsys.readouterr().err
    assert run(ledger_url, "prices", "list", "--region", "us-east-1", "--gpu-model", "L4") == 0
    assert "note" not in capsys.readouterr().err


@pytest.mark.parametrize("given", [["--types", "r7i.large,"], ["--types=r7i.large,"]])
def test_a_types_list_split_by_the_shell_says_to_quote_it(
    ledger_url: str, capsys: pytest.CaptureFixture[str], given: list[str]
) -> None:
    # `--types r7i.large, g6.*` (a blank after the comma) said only "unrecognized arguments: g6.*".
    offer = str(FIXTURES / "ec2_offer_us-east-1.csv")
    with pytest.raises(SystemExit):
        run(ledger_url, "prices", "import", offer, *given, "g6.*")
    err = capsys.readouterr().err
    assert (
        "unrecognized arguments: g6.* (--types takes one value: write its names without blanks, quoted" in err
    )
    assert PriceCache(Ledger.from_url(ledger_url)).rows() == []


def test_an_offer_file_that_is_a_folder_is_worded_as_every_unreadable_file(
    ledger_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It read "cannot read offer file '...': Is a directory", without saying what to do.
    assert run(ledger_url, "prices", "import", str(tmp_path)) == 2
    assert (
        f"cannot read offer file {str(tmp_path)!r}: Is a directory; that is a folder: give the path of a "
        "file in it" in capsys.readouterr().err
    )


def test_an_offer_file_here_whose_name_starts_with_a_tilde_is_read(
    ledger_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # '~index.json' in the working folder was read as the home of a user 'index.json', and refused.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "~index.json").write_bytes((FIXTURES / "ec2_offer_us-east-1.json").read_bytes())
    assert run(ledger_url, "prices", "import", "~index.json") == 0
    assert "imported 2 ec2 price(s) for us-east-1 from ~index.json" in capsys.readouterr().out


def test_an_offer_file_given_under_a_quoted_home_is_read_there(
    ledger_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # --file '~/index.json' (quoted, so no shell expanded it) was looked for in a folder named '~'.
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "index.json").write_bytes((FIXTURES / "ec2_offer_us-east-1.json").read_bytes())
    assert run(ledger_url, "prices", "import", "~/index.json") == 0
    assert "imported 2 ec2 price(s) for us-east-1 from index.json" in capsys.readouterr().out
