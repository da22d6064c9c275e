"""The ledger's database URL: a SQLite file's path as the URL names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from costaware import Ledger
from costaware.adapters.ledger.engine import missing_sqlite_file
from costaware.core.errors import ConfigurationError


def test_a_sqlite_ledger_in_an_unknown_users_home_is_named_not_a_runtime_error() -> None:
    # Path.expanduser raised a bare RuntimeError ('Could not determine home directory.') from every command
    # that opens the ledger.
    unknown = (
        r"^the ledger's SQLite file \(from --ledger-url, \$COSTAWARE_LEDGER_URL or the ledger's Airflow "
        r"connection\) '~nosuchuser/ledger.db' starts with the home folder of user 'nosuchuser', whom this "
        r"machine does not know: give an absolute path such as '/srv/ml/ledger.db'"
    )
    with pytest.raises(ConfigurationError, match=unknown):
        missing_sqlite_file("sqlite:///~nosuchuser/ledger.db")
    with pytest.raises(ConfigurationError, match=unknown):  # opened directly, as a library user does
        Ledger.from_url("sqlite:///~nosuchuser/ledger.db")


def test_a_sqlite_ledger_under_the_home_folder_is_opened_where_it_is_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 'sqlite:///~/ledger.db' was looked for (and its folder made) in the home folder, but SQLite opened
    # '~/ledger.db' as written, under the working folder: "unable to open database file".
    home, working = tmp_path / "home", tmp_path / "working"
    working.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(working)
    url = "sqlite:///~/costaware/ledger.db"
    assert missing_sqlite_file(url) == str(home / "costaware" / "ledger.db")
    Ledger.from_url(url).create_schema()
    assert missing_sqlite_file(url) is None
    assert (home / "costaware" / "ledger.db").is_file()
    assert list(working.iterdir()) == []
