"""Fixtures the operator and sensor tests share: Airflow connections to the test ledger and to moto."""

from __future__ import annotations

import json

import pytest

from costaware import Ledger


@pytest.fixture
def ledger_conn(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """The connection ``test_ledger`` (SQLite) and the ledger it opens."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_TEST_LEDGER", json.dumps({"conn_type": "sqlite", "host": ledger_url[10:]})
    )
    return Ledger.from_url(ledger_url)


@pytest.fixture
def moto_aws_conn(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The AWS connection ``moto_aws``, pointed at the moto server; returns its id."""
    conn = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"region_name": "us-east-1", "endpoint_url": moto_endpoint},
    }
    monkeypatch.setenv("AIRFLOW_CONN_MOTO_AWS", json.dumps(conn))
    return "moto_aws"
