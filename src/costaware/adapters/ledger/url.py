"""Turn the fields of an Airflow connection into a SQLAlchemy URL for the ledger (pure, no Airflow import)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import URL

from costaware.core.errors import ConfigurationError


def url_from_connection_fields(
    conn_id: str,
    conn_type: str | None,
    host: str | None,
    login: str | None,
    password: str | None,
    port: int | None,
    schema: str | None,
    extra: str | dict[str, Any] | None,
) -> str:
    """A ledger URL from a connection: ``extra.url`` wins, else postgres/sqlite fields.

    Raises:
        ConfigurationError: the connection type is neither postgres nor sqlite and no ``extra.url`` is set.
    """
    extras = json.loads(extra) if isinstance(extra, str) and extra.strip() else (extra or {})
    if isinstance(extras, dict) and extras.get("url"):
        return str(extras["url"])
    kind = (conn_type or "").lower()
    if kind in ("postgres", "postgresql", "costaware_ledger"):  # costaware_ledger: our own type, same fields
        return URL.create(
            "postgresql+psycopg2",
            username=login or None,
            password=password or None,
            host=host or "localhost",
            port=port or None,
            database=schema or None,
        ).render_as_string(hide_password=False)
    if kind == "sqlite":
        return f"sqlite:///{host or schema}"
    raise ConfigurationError(
        f"connection {conn_id!r} has type {conn_type!r}: the ledger needs a 'costaware_ledger', "
        "'postgres' or 'sqlite' connection, "
        'or any connection whose extra holds {"url": "postgresql+psycopg2://..."}'
    )
