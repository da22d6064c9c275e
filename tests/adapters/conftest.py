"""Fixtures the adapter tests share: the backends' AWS connection, a ledger on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from services import fresh_postgres_database

from costaware import Ledger


@pytest.fixture
def aws(moto_aws_conn: str, moto_endpoint: str) -> str:
    """The Airflow AWS connection ``moto_aws`` to moto's server on 127.0.0.1; returns the endpoint."""
    return moto_endpoint


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger(request: pytest.FixtureRequest, tmp_path) -> Iterator[Ledger]:  # type: ignore[no-untyped-def]
    """A ledger on SQLite, then on a fresh PostgreSQL database (a file needing another defines its own)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        url = fresh_postgres_database(request.getfixturevalue("postgres_url"))
    ledger = Ledger.from_url(url)
    yield ledger
    ledger.dispose()
