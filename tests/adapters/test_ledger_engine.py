"""The ledger's database URL: a SQLite file's path as the URL names it."""

from __future__ import annotations

import re
import shlex
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


def test_a_ledger_left_at_a_literal_tilde_folder_is_named_not_replaced_by_an_empty_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before '~' was expanded, 'sqlite:///~/costaware/ledger.db' opened './~/costaware/ledger.db' under the
    # working folder. After the upgrade a new, empty ledger was made in the home folder: spend to date read
    # $0, and a budget could be spent again.
    home, working = tmp_path / "home", tmp_path / "working"
    monkeypatch.setenv("HOME", str(home))
    working.mkdir()
    monkeypatch.chdir(working)
    old = working / "~" / "costaware" / "ledger.db"
    old.parent.mkdir(parents=True)
    before = Ledger.from_url(f"sqlite:///{old}")
    before.create_schema()
    before.dispose()  # the last connection closed: SQLite folds its -wal file back in
    url = "sqlite:///~/costaware/ledger.db"
    new = home / "costaware" / "ledger.db"
    said = (
        rf"^the ledger's SQLite file .* '~/costaware/ledger.db' is opened at '{new}', which does not exist, "
        rf"but the ledger an earlier costaware made for it is at '{old}' \(the '~' taken as a folder"
    )
    with pytest.raises(ConfigurationError, match=said):
        missing_sqlite_file(url)
    with pytest.raises(ConfigurationError, match=said):
        Ledger.from_url(url)
    assert not new.parent.exists()  # nothing made beside it
    # Moved as the error says, it is the ledger opened.
    new.parent.mkdir(parents=True)
    old.rename(new)
    assert missing_sqlite_file(url) is None
    Ledger.from_url(url).create_schema()


@pytest.mark.parametrize("given", ["~/airflow", "$DATA_ROOT/airflow"])
def test_the_default_ledger_left_under_an_airflow_home_read_as_written_is_named(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before AIRFLOW_HOME was expanded, its default ledger was './~/airflow/costaware/ledger.db' (or
    # './$DATA_ROOT/airflow/...') under the working folder; after the upgrade a new, empty one was made in
    # the expanded home: spend to date $0.
    from costaware.settings import ledger_url

    home, working = tmp_path / "home", tmp_path / "working"
    working.mkdir()
    monkeypatch.chdir(working)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DATA_ROOT", str(home))
    monkeypatch.setenv("AIRFLOW_HOME", given)
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    old = working / given / "costaware" / "ledger.db"
    old.parent.mkdir(parents=True)
    before = Ledger.from_url(f"sqlite:///{old}")
    before.create_schema()
    before.dispose()
    new = home / "airflow" / "costaware" / "ledger.db"
    assert ledger_url() == f"sqlite:///{new}"
    # Said of the default ledger, which no URL names: each path once, and the variable that keeps it.
    said = (
        rf"^the default ledger under \$AIRFLOW_HOME '{re.escape(given)}' is now '{new}', which does not "
        rf"exist, but the one an earlier costaware made \(\$AIRFLOW_HOME '{re.escape(given)}' taken as a "
        rf"folder under the working one\) is at '{re.escape(str(old))}': move it there, with any -wal and "
        rf"-shm files beside it, or keep it where it is with "
        rf"COSTAWARE_LEDGER_URL=sqlite:///{re.escape(str(old))}; to start an empty ledger instead, rename "
        r"or remove it$"
    )
    with pytest.raises(ConfigurationError, match=said) as refused:
        Ledger.from_url(ledger_url())
    assert "--ledger-url" not in str(refused.value)
    assert str(refused.value).count(str(new)) == 1
    # The variable it offers opens the old ledger as it is.
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", f"sqlite:///{old}")
    Ledger.from_url(ledger_url()).dispose()
    monkeypatch.delenv("COSTAWARE_LEDGER_URL")
    assert not new.parent.exists()
    new.parent.mkdir(parents=True)
    old.rename(new)
    Ledger.from_url(ledger_url()).create_schema()
    # Once there, the old folder's ledger (a second copy) is not looked at.
    assert missing_sqlite_file(ledger_url()) is None


@pytest.mark.parametrize("given", ["~/airflow", "$DATA_ROOT/airflow"])
def test_a_new_default_ledger_under_an_airflow_home_with_a_tilde_says_where_the_old_one_may_be(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The old ledger is under whichever folder the earlier release ran in: one `budget set` from another
    # folder made the new, empty ledger without a word, and after that the old one was never named again.
    from costaware.settings import ledger_url

    home, working, elsewhere = tmp_path / "home", tmp_path / "working", tmp_path / "elsewhere"
    working.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DATA_ROOT", str(home))
    monkeypatch.setenv("AIRFLOW_HOME", given)
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    old = working / given / "costaware" / "ledger.db"
    old.parent.mkdir(parents=True)
    Ledger.from_url(f"sqlite:///{old}").dispose()
    new = home / "airflow" / "costaware" / "ledger.db"
    monkeypatch.chdir(elsewhere)  # the old ledger is not under this folder: a new one is made, and said so
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.before_expansion"):
        Ledger.from_url(ledger_url()).dispose()
    assert new.is_file()
    (made,) = _said(caplog)
    assert made.startswith(
        f"costaware: the default ledger under $AIRFLOW_HOME {given!r}: creating a new, empty ledger at {new}."
    )
    assert f"'<working folder>/{given}/costaware/ledger.db' under whichever folder they ran in" in made
    assert f"(not under this one: {elsewhere / given / 'costaware' / 'ledger.db'} does not exist)" in made
    # Opened again from the folder holding the old one: both are named, once per process (each open of
    # each task said it again), with the commands that end it.
    caplog.clear()
    monkeypatch.chdir(working)
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.before_expansion"):
        Ledger.from_url(ledger_url()).dispose()
        Ledger.from_url(ledger_url()).dispose()
    (both,) = _said(caplog)
    assert f"opens {new}, but the ledger an earlier costaware kept for it" in both
    assert f"is still at {old}: its spend and budgets are not read" in both
    quoted_old, quoted_new = shlex.quote(str(old)), shlex.quote(str(new))  # '~' and '$' are the shell's
    assert f"`rm -f {quoted_old} {quoted_old}-wal {quoted_old}-shm`" in both
    aside = shlex.quote(f"{new}.made-after-upgrade")
    assert f'[ ! -e {quoted_new}"$s" ] || mv {quoted_new}"$s" {aside}"$s" || exit; done) && ' in both
    assert f'[ ! -e {quoted_old}"$s" ] || mv {quoted_old}"$s" {quoted_new}"$s" || exit; done)`' in both
    # Once the old one is gone, nothing is said.
    old.unlink()
    caplog.clear()
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.before_expansion"):
        Ledger.from_url(ledger_url()).dispose()
    assert _said(caplog) == []


def test_a_brand_new_install_gets_its_ledger_and_a_plain_home_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from costaware.settings import ledger_url

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", "~/airflow")
    Ledger.from_url(ledger_url()).dispose()
    assert (tmp_path / "home" / "airflow" / "costaware" / "ledger.db").is_file()
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "plain"))  # no '~' or '$': nothing to say
    caplog.clear()
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.before_expansion"):
        Ledger.from_url(ledger_url()).dispose()
    assert (tmp_path / "plain" / "costaware" / "ledger.db").is_file()
    assert _said(caplog) == []


def test_a_new_ledger_at_a_tilde_url_says_where_the_old_one_may_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    home, working = tmp_path / "home", tmp_path / "working"
    working.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(working)
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.before_expansion"):
        Ledger.from_url("sqlite:///~/costaware/ledger.db").dispose()
    (made,) = _said(caplog)
    assert "'~/costaware/ledger.db': creating a new, empty ledger at " in made
    assert "'<working folder>/~/costaware/ledger.db' under whichever folder they ran in" in made


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was said of an earlier release's ledger (the migrations log too)."""
    return [r.getMessage() for r in caplog.records if r.name.endswith("before_expansion")]


def test_a_new_default_ledger_under_an_absolute_airflow_home_with_a_variable_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # AIRFLOW_HOME='/srv/$STAGE/airflow' read as written is one literal folder, not under the working one:
    # saying where it was kept raised ValueError (relative_to) and no ledger could be made.
    from costaware.settings import ledger_url

    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("STAGE", "prod")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "srv" / "$STAGE" / "airflow"))
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.before_expansion"):
        Ledger.from_url(ledger_url()).dispose()
    assert (tmp_path / "srv" / "prod" / "airflow" / "costaware" / "ledger.db").is_file()
    (made,) = _said(caplog)
    assert f"kept it at {tmp_path}/srv/$STAGE/airflow/costaware/ledger.db (which does not exist)" in made


def test_a_ledger_under_an_airflow_home_with_a_tilde_opens_from_a_removed_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Looking for an earlier release's ledger under the working folder on every open raised
    # FileNotFoundError (os.getcwd) where that folder had been removed: no ledger could be opened there.
    from costaware.settings import ledger_url

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW_HOME", "~/airflow")
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    (tmp_path / "gone").mkdir()
    monkeypatch.chdir(tmp_path / "gone")
    (tmp_path / "gone").rmdir()
    Ledger.from_url(ledger_url()).dispose()  # made
    Ledger.from_url(ledger_url()).dispose()  # opened again
    assert (tmp_path / "home" / "airflow" / "costaware" / "ledger.db").is_file()


def test_an_absolute_airflow_home_read_as_written_is_not_said_to_be_under_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AIRFLOW_HOME='/srv/$STAGE/airflow' read as written was the literal folder '/srv/$STAGE/airflow', the
    # same from every working folder: the refusal said it was 'taken as a folder under the working one'.
    from costaware.settings import ledger_url

    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("STAGE", "prod")
    given = str(tmp_path / "srv" / "$STAGE" / "airflow")
    monkeypatch.setenv("AIRFLOW_HOME", given)
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    old = Path(given) / "costaware" / "ledger.db"
    old.parent.mkdir(parents=True)
    Ledger.from_url(f"sqlite:///{old}").dispose()
    with pytest.raises(ConfigurationError) as refused:
        Ledger.from_url(ledger_url())
    assert f"($AIRFLOW_HOME {given!r} taken as written, '$' and all) is at '{old}'" in str(refused.value)
    assert "under the working one" not in str(refused.value)


def test_opening_a_sqlite_ledger_looks_for_an_earlier_releases_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sqlite_engine asked earlier_ledger (each time expanding AIRFLOW_HOME again) twice for a file not yet
    # made: once to refuse, once to warn.
    from costaware.adapters.ledger import before_expansion
    from costaware.adapters.ledger.engine import sqlite_engine

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW_HOME", "~/airflow")
    monkeypatch.chdir(tmp_path)
    looked: list[str] = []
    earlier_ledger = before_expansion.earlier_ledger

    def counted(database: str, opened: Path) -> before_expansion.EarlierLedger | None:
        looked.append(database)
        return earlier_ledger(database, opened)

    monkeypatch.setattr(before_expansion, "earlier_ledger", counted)
    for _ in ("made", "opened again"):
        looked.clear()
        sqlite_engine(str(tmp_path / "home" / "airflow" / "costaware" / "ledger.db")).dispose()
        assert len(looked) == 1
        Ledger.from_url(f"sqlite:///{tmp_path}/home/airflow/costaware/ledger.db").dispose()  # the file made


def _old_and_new_ledger_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """AIRFLOW_HOME '~/airflow', the working folder's './~/airflow' and the home's, neither made yet."""
    home, working = tmp_path / "home", tmp_path / "working"
    working.mkdir()
    monkeypatch.chdir(working)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AIRFLOW_HOME", "~/airflow")
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    return working / "~" / "airflow", home / "airflow"


def test_an_old_airflow_home_linked_to_the_new_one_is_one_ledger_not_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # './~/airflow' a link to '$HOME/airflow': one file, yet compared as text both warnings fired, and the
    # one of both files offered `rm -f` of the live ledger.
    from costaware.settings import ledger_url

    old_home, new_home = _old_and_new_ledger_files(tmp_path, monkeypatch)
    (new_home / "costaware").mkdir(parents=True)
    old_home.parent.mkdir()
    old_home.symlink_to(new_home, target_is_directory=True)
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.before_expansion"):
        Ledger.from_url(ledger_url()).create_schema()  # made: not "a new, empty ledger"
        Ledger.from_url(ledger_url()).dispose()  # both there: not "still at"
    assert (new_home / "costaware" / "ledger.db").is_file()
    assert _said(caplog) == []


def test_the_commands_to_put_the_old_ledger_in_place_move_each_file_with_its_wal_and_shm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # `mv NEW NEW.made-after-upgrade && mv OLD NEW` left NEW-wal and NEW-shm behind: SQLite replayed the
    # new ledger's WAL onto the old one moved in its place, and the spend it held was lost.
    import subprocess

    from costaware.adapters.ledger.before_expansion import EarlierLedger, warn_on_open

    old_home, new_home = _old_and_new_ledger_files(tmp_path, monkeypatch)
    old, new = old_home / "ledger.db", new_home / "ledger.db"
    old.parent.mkdir(parents=True)
    new.parent.mkdir(parents=True)
    files = {old: "old", Path(f"{old}-wal"): "old wal", new: "new", Path(f"{new}-wal"): "new wal"}
    files[Path(f"{new}-shm")] = "new shm"  # the old one has no -shm: nothing is moved over the new one's
    for path, text in files.items():
        path.write_text(text)
    with caplog.at_level("WARNING", logger="costaware.adapters.ledger.before_expansion"):
        warn_on_open("the ledger", "~/airflow/ledger.db", EarlierLedger(new, old, "~/airflow", True, False))
    (both,) = _said(caplog)
    command = both.split("put it in its place with its -wal and -shm files: `")[1].split("`")[0]
    subprocess.run(["sh", "-c", command], check=True)
    aside = f"{new}.made-after-upgrade"
    placed = {p.name: p.read_text() for p in new.parent.iterdir()}
    assert placed == {
        "ledger.db": "old",
        "ledger.db-wal": "old wal",
        f"{Path(aside).name}": "new",
        f"{Path(aside).name}-wal": "new wal",
        f"{Path(aside).name}-shm": "new shm",
    }
    assert list(old.parent.iterdir()) == []


def test_an_earlier_ledger_that_cannot_be_looked_at_does_not_stop_the_ledger_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A './~' folder of another user: looking for the old ledger there raised PermissionError out of every
    # open. A warning's check is given up (logged at debug), the ledger opens.
    from costaware.settings import ledger_url

    old_home, new_home = _old_and_new_ledger_files(tmp_path, monkeypatch)
    (new_home / "costaware").mkdir(parents=True)
    Ledger.from_url(ledger_url()).create_schema()
    exists = Path.exists

    def forbidden_under_old(path: Path) -> bool:
        if path.is_relative_to(old_home):
            raise PermissionError(13, "Permission denied", str(path))
        return exists(path)

    monkeypatch.setattr(Path, "exists", forbidden_under_old)
    caplog.clear()  # the first open's "new, empty ledger"
    with caplog.at_level("DEBUG", logger="costaware.adapters.ledger.before_expansion"):
        Ledger.from_url(ledger_url()).dispose()
    (said,) = _said(caplog)
    assert said.startswith(
        f"costaware: could not look for an earlier ledger at {old_home / 'costaware' / 'ledger.db'}"
    )
    assert "Permission denied" in said


def test_a_first_open_beside_an_earlier_ledger_that_cannot_be_looked_at_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ledger file not made yet: the refusal's own look at the old './~' ledger (a folder of another user)
    # raised PermissionError out of the very first open. It counts as not there; the new ledger is made.
    from costaware.settings import ledger_url

    old_home, new_home = _old_and_new_ledger_files(tmp_path, monkeypatch)
    (new_home / "costaware").mkdir(parents=True)
    exists = Path.exists

    def forbidden_under_old(path: Path) -> bool:
        if path.is_relative_to(old_home):
            raise PermissionError(13, "Permission denied", str(path))
        return exists(path)

    monkeypatch.setattr(Path, "exists", forbidden_under_old)
    ledger = Ledger.from_url(ledger_url())
    ledger.create_schema()
    ledger.dispose()
    assert (new_home / "costaware" / "ledger.db").is_file()
