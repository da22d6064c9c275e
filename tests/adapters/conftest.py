"""Fixtures the compute backend tests share."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, moto_endpoint: str) -> str:
    """An Airflow AWS connection ``moto_aws`` to moto's server on 127.0.0.1; returns the endpoint."""
    conn = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"region_name": "us-east-1", "endpoint_url": moto_endpoint},
    }
    monkeypatch.setenv("AIRFLOW_CONN_MOTO_AWS", json.dumps(conn))
    return moto_endpoint
