"""Fixtures the compute backend tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def aws(moto_aws_conn: str, moto_endpoint: str) -> str:
    """The Airflow AWS connection ``moto_aws`` to moto's server on 127.0.0.1; returns the endpoint."""
    return moto_endpoint
