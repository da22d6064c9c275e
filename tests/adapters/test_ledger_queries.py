"""The SQL pieces the ledger's reads share: one group-by map for every name a report groups by."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from costaware import Ledger
from costaware.adapters.ledger import schema
from costaware.adapters.ledger.queries import GROUP_COLUMNS, group_column
from costaware.core.errors import ConfigurationError, LedgerUnavailableError
from costaware.core.ledger import GROUP_BYS, utcnow


def test_every_group_by_name_has_its_column_and_no_other() -> None:
    assert tuple(GROUP_COLUMNS) == GROUP_BYS


@pytest.mark.parametrize("bad", ["week", "tag:", "tag:1bad"])
def test_unknown_groupings_are_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        group_column(bad)


@pytest.fixture
def ledger(tmp_path) -> Iterator[Ledger]:  # type: ignore[no-untyped-def]
    opened = Ledger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield opened
    opened.dispose()


def test_transaction_commits_together_and_passes_a_broken_unique_key_on(ledger: Ledger) -> None:
    row = {"service": "ec2", "region": "r", "instance_type": "t", "usd_per_hour": "1", "source": "s"}
    row |= {"sku": "k", "effective_date": "", "fetched_at": utcnow()}
    with pytest.raises(IntegrityError), ledger.transaction() as conn:  # the caller's to handle (a claim lost)
        conn.execute(schema.price_cache.insert().values(**row))
        conn.execute(schema.price_cache.insert().values(**row))
    with ledger.reading() as conn:
        assert conn.execute(schema.price_cache.select()).all() == []  # neither row: one transaction


def test_an_unreachable_database_is_a_ledger_error_for_reads_and_writes() -> None:
    ledger = Ledger.from_url("postgresql://nobody:secret@127.0.0.1:1/ledger", create=False)
    with pytest.raises(LedgerUnavailableError, match="cannot reach the cost ledger"), ledger.transaction():
        pass
    with pytest.raises(LedgerUnavailableError, match="cannot read the cost ledger"), ledger.reading():
        pass
    ledger.dispose()


def test_a_ledger_reached_but_refusing_the_write_says_cannot_write(tmp_path: Path) -> None:
    ledger = Ledger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    with (
        pytest.raises(LedgerUnavailableError, match=r"cannot write the cost ledger.*no such table: gone"),
        ledger.transaction() as conn,
    ):
        conn.execute(text("DELETE FROM gone"))
    ledger.dispose()
