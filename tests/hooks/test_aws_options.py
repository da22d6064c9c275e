"""``s3_options``: an AWS connection as S3 options, and the default ``aws_default`` when nobody created it."""

from __future__ import annotations

import json

import pytest

from costaware.adapters.object_store import S3Options
from costaware.hooks.aws import s3_options


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)


def test_a_missing_default_connection_means_the_default_chain() -> None:
    # The operators default to aws_default; a deployment that never created it reads local files as before.
    assert s3_options("aws_default") == S3Options()
    assert s3_options(None) == S3Options()


def test_a_missing_connection_somebody_named_is_said(caplog: pytest.LogCaptureFixture) -> None:
    # "aws_defualt" silently used the worker's own role, perhaps in another account.
    assert s3_options("aws_defualt") == S3Options()
    assert "AWS connection 'aws_defualt' does not exist: the AWS SDK's default credentials" in caplog.text
    caplog.clear()
    s3_options("aws_default")
    assert "does not exist" not in caplog.text


def test_a_missing_ledger_connection_somebody_named_is_said(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.hooks.ledger import CostLedgerHook

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "sqlite:////tmp/elsewhere.db")
    assert CostLedgerHook("costaware_ledgr").get_url() == "sqlite:////tmp/elsewhere.db"
    assert "ledger connection 'costaware_ledgr' does not exist: costs go to sqlite:////tmp/elsewhere.db" in (
        caplog.text
    )


def test_a_ledger_connection_airflow_cannot_read_is_refused_not_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A missing "}" made Airflow skip the variable: every worker wrote to its own SQLite file, and no budget
    # held across them.
    from costaware.core.errors import ConfigurationError
    from costaware.hooks.ledger import CostLedgerHook

    monkeypatch.setenv("COSTAWARE_LEDGER_URL", "sqlite:////tmp/elsewhere.db")
    monkeypatch.setenv("AIRFLOW_CONN_COSTAWARE_LEDGER", '{"conn_type": "postgres", "host": "db"')
    with pytest.raises(
        ConfigurationError, match=r"AIRFLOW_CONN_COSTAWARE_LEDGER is set but Airflow cannot read"
    ):
        CostLedgerHook().get_url()
    monkeypatch.setenv(
        "AIRFLOW_CONN_COSTAWARE_LEDGER", json.dumps({"conn_type": "sqlite", "host": "/tmp/x.db"})
    )
    assert CostLedgerHook().get_url() == "sqlite:////tmp/x.db"


def test_a_connection_gives_its_keys_region_and_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    connection = {
        "conn_type": "aws",
        "login": "AKIATEST",
        "password": "secret",
        "extra": {"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:5000"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))
    options = s3_options("aws_default")
    assert (options.access_key, options.secret_key) == ("AKIATEST", "secret")
    assert options.region == "eu-west-1" and options.endpoint_url == "http://127.0.0.1:5000"


def test_a_connection_without_credentials_keeps_its_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    connection = {
        "conn_type": "aws",
        "extra": {"region_name": "us-east-1", "endpoint_url": "http://minio:9000"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))
    options = s3_options("aws_default")
    assert options.access_key is None and options.endpoint_url == "http://minio:9000"
