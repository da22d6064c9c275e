"""The ledger's database: its URL, SQLite's pragmas and write lock, and its two kinds of transaction.

The URL comes from the settings or from an Airflow connection's fields (``url_from_connection_fields``, pure).
Reservations are atomic across processes and machines: SQLite takes the database write lock
(``BEGIN IMMEDIATE``) for every write transaction, PostgreSQL locks the budget rows (``SELECT ... FOR
UPDATE``), and the check "spent + held + this <= cap" happens inside that lock. Every module of the ledger
reads and writes through :meth:`LedgerDatabase.reading` and :meth:`LedgerDatabase.transaction`, so an
unreachable database is always the same ``LedgerUnavailableError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError, StatementError

from costaware.core.errors import (
    ConfigurationError,
    CostawareError,
    LedgerDatabaseMissingError,
    LedgerUnavailableError,
)
from costaware.settings import LEDGER_URL_ENV

if TYPE_CHECKING:
    from costaware.adapters.ledger.before_expansion import EarlierLedger


def missing_sqlite_file(url: str) -> str | None:
    """The path of ``url``'s SQLite file when it does not exist; else None (also for another database)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        return None  # Ledger.from_url names what is wrong with it
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = sqlite_file(str(parsed.database)).absolute()
    return None if path.exists() else str(path)


def sqlite_file(database: str) -> Path:
    """The SQLite file a ledger URL's ``database`` names, ``~`` expanded.

    Raises:
        ConfigurationError: ``~`` names a home nobody has (``~nosuchuser``, HOME unset with no passwd entry):
            ``Path.expanduser`` raised a bare RuntimeError from every command that opens the ledger. Or the
            file does not exist but the one an earlier release opened for it, under this working folder,
            does (see :mod:`costaware.adapters.ledger.before_expansion`).
    """
    return _sqlite_file_and_earlier(database, always=False)[0]


def _sqlite_file_and_earlier(database: str, *, always: bool) -> tuple[Path, EarlierLedger | None]:
    """:func:`sqlite_file` and the file an earlier release opened for it, looked for once.

    ``always``: look where the file exists too (an open warns of both); else only where it is missing
    (the one case refused). Looking expands AIRFLOW_HOME again: an open asked twice.
    """
    from costaware.adapters.ledger import before_expansion

    expanded = _expanded(database)
    missing = not expanded.exists()
    earlier = before_expansion.earlier_ledger(database, expanded) if always or missing else None
    if missing and earlier is not None and before_expansion.written_there(earlier):
        raise ConfigurationError(before_expansion.refusal(_SQLITE_FILE, database, earlier))
    return expanded, earlier


_SQLITE_FILE = (
    f"the ledger's SQLite file (from --ledger-url, ${LEDGER_URL_ENV} or the ledger's Airflow connection)"
)


def _expanded(database: str) -> Path:
    from costaware.adapters.object_store.location import expand_user

    return Path(expand_user(database, what=_SQLITE_FILE, uri=database, example="/srv/ml/ledger.db"))


def safe_url(url: str) -> str:
    """The URL with its password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparsable URL>"


def _masked(url: str) -> str:
    """``url`` as written with its password masked: for a URL too malformed to parse."""
    import re

    return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", url)


def _reason(error: DBAPIError) -> str:
    """The driver's message on one line, without its closing punctuation (the caller's sentence goes on)."""
    return " ".join(str(error.orig or error).split()).rstrip(".?")


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
    # postgresql+psycopg2: the SQLAlchemy URL of AIRFLOW__DATABASE__SQL_ALCHEMY_CONN, pasted as the
    # connection's URI; Airflow keeps the whole scheme as its type, and the fields are PostgreSQL's.
    postgres_types = ("postgres", "postgresql", "postgresql+psycopg2", "postgres+psycopg2")
    if kind in (*postgres_types, "costaware_ledger"):  # costaware_ledger: our own type, same fields
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
    hint = ""
    # A URL like costaware_ledger://... has no scheme to Airflow ('_' is none), nor has a bare path.
    if not conn_type:
        hint = (
            " (as a URL, write the type costaware-ledger:// or postgres://, or sqlite:////PATH: a URL without"
            " a scheme, or with costaware_ledger:// ('_' is no URL scheme), has none)"
        )
    elif kind == "generic":  # what Airflow stores for a --conn-type whose provider is not installed
        hint = (
            " (`airflow connections add --conn-type postgres` or `sqlite` stores the type 'generic' when"
            " that provider is not installed: give --conn-type costaware_ledger (PostgreSQL's fields),"
            " or --conn-uri 'postgres://USER:PASSWORD@HOST/DB' or 'sqlite:////PATH')"
        )
    elif "+" in conn_type:  # a SQLAlchemy URL with a driver costaware does not ship (psycopg2 only)
        hint = f" (as a URL, write postgres://... instead of {conn_type}://...)"
    raise ConfigurationError(
        f"connection {conn_id!r} has type {conn_type!r}: the ledger needs a 'costaware_ledger', "
        "'postgres' or 'sqlite' connection, "
        'or any connection whose extra holds {"url": "postgresql+psycopg2://..."}' + hint
    )


def ledger_engine(url: str) -> Engine:
    """An engine for the ledger at ``url`` (SQLite or PostgreSQL); connects lazily.

    Raises:
        ConfigurationError: the URL is malformed or names a database costaware does not support.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as e:
        raise ConfigurationError(
            f"ledger URL {_masked(url)!r} is not a database URL such as 'sqlite:///ledger.db'"
        ) from e
    except ValueError as e:  # SQLAlchemy's int() of the port
        raise ConfigurationError(
            f"ledger URL {_masked(url)!r} has a port that is not a number ({e}): write it as "
            "'postgresql://user:password@host:5432/db'"
        ) from e
    if parsed.drivername in ("postgres", "postgresql"):
        # The bare name means psycopg 3 in SQLAlchemy 2.1; costaware ships psycopg2.
        parsed = parsed.set(drivername="postgresql+psycopg2")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigurationError(
            f"ledger URL {safe_url(url)} uses {parsed.get_backend_name()!r}: use sqlite:/// or postgresql://"
        )
    if parsed.get_backend_name() == "sqlite":
        return sqlite_engine(parsed.database)
    # libpq also takes the database from ?dbname= or a ?service= (pg_service.conf) entry.
    if not (parsed.database or parsed.query.get("dbname") or parsed.query.get("service")):
        # PostgreSQL would open the user's own database: 'airflow' is Airflow's metadata, where the ledger's
        # tables were made without a word.
        suggested = parsed.difference_update_query(["dbname", "service"]).set(database="costaware")
        raise ConfigurationError(
            f"ledger URL {safe_url(url)} names no database: add one, e.g. "
            f"{safe_url(suggested.render_as_string(hide_password=False))} "
            "(CREATE DATABASE costaware; first), so the ledger does not land in the user's default database"
        )
    try:
        return create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": 10})
    except ModuleNotFoundError as e:  # postgresql+psycopg (3), +asyncpg: a driver costaware does not ship
        raise ConfigurationError(
            f"ledger URL {safe_url(url)} needs the Python module {e.name!r}, which costaware does not "
            "install: use postgresql:// (psycopg2)"
        ) from e


def _sqlite_hint(engine: Engine, error: Exception) -> str:
    """Why SQLite cannot open a ledger file that is there: its folder is read-only (WAL writes beside it)."""
    if engine.url.get_backend_name() != "sqlite" or "unable to open database file" not in str(error):
        return ""
    return (
        "; SQLite needs write access to the ledger's folder too (it keeps -wal and -shm files beside "
        "the ledger), and the folder must exist"
    )


def _missing_database_hint(engine: Engine, error: Exception) -> str:
    """What to run when the PostgreSQL server answers but the ledger's database is not there.

    costaware makes its tables on first use, never the database.
    """
    name = engine.url.database
    if engine.url.get_backend_name() != "postgresql" or f'database "{name}" does not exist' not in str(error):
        return ""
    return (
        f", or create the database first (CREATE DATABASE {name};): costaware creates its tables, "
        "not the database"
    )


def sqlite_engine(database: str | None) -> Engine:
    """A SQLite engine whose write transactions take the database lock at once (``BEGIN IMMEDIATE``)."""
    if database and database != ":memory:":
        # SQLite opens '~/ledger.db' as written, under the working folder: it was looked for, and its
        # folder made, in the home folder, and then failed with "unable to open database file".
        from costaware.adapters.ledger.before_expansion import warn_on_open

        given = database
        opened, earlier = _sqlite_file_and_earlier(given, always=True)
        if earlier is not None:
            warn_on_open(_SQLITE_FILE, given, earlier)
        database = str(opened)
        opened.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{database or ':memory:'}", connect_args={"timeout": 60})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy's BEGIN below drive transactions
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock at once, so check-then-insert cannot interleave between processes.
        conn.exec_driver_sql(
            "BEGIN" if conn.get_execution_options().get("costaware_read") else "BEGIN IMMEDIATE"
        )

    return engine


class LedgerDatabase:
    """The ledger's engine and its transactions; ``Ledger`` adds the budget and report methods.

    Args:
        engine: A SQLite or PostgreSQL engine (see :func:`ledger_engine`).
        url_from: Where its URL was set, for "Check the URL (...)" when it cannot be reached; None: the
            CLI's ``--ledger-url``, the ``costaware_ledger`` connection or ``COSTAWARE_LEDGER_URL``.
    """

    def __init__(self, engine: Engine, *, url_from: str | None = None) -> None:
        self.engine = engine
        self.is_sqlite = engine.dialect.name == "sqlite"
        # Said as where the caller read it: a worker, or `costaware spool drain`, has no --ledger-url to fix.
        self.url_from = url_from or f"--ledger-url, the 'costaware_ledger' connection or {LEDGER_URL_ENV}"

    def dispose(self) -> None:
        self.engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction; on SQLite it holds the database write lock from its first statement.

        Raises:
            LedgerUnavailableError: the database cannot be reached or refused the write (not a broken
                unique key: that ``IntegrityError`` is the caller's to handle).
            LedgerDatabaseMissingError: the PostgreSQL server has no database of the URL's name.
        """
        # Connecting apart from writing, so that a ledger that cannot be reached says so (every command opens
        # the ledger through a write: the schema check), not "cannot write" to someone who only reads.
        conn = self._connect(writing=True)
        try:
            with conn, conn.begin():
                yield conn
        except (OperationalError, DBAPIError) as e:
            if isinstance(e, IntegrityError):
                raise
            raise LedgerUnavailableError(
                f"cannot write the cost ledger at {safe_url(str(self.engine.url))}: {_reason(e)}. Check the "
                f"URL ({self.url_from})"
                f"{_sqlite_hint(self.engine, e)}; nothing was recorded or reserved"
            ) from e
        except StatementError as e:
            _raise_costaware_error_unwrapped(e)
            raise

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read-only transaction (on SQLite it does not take the write lock).

        Raises:
            LedgerUnavailableError: the database cannot be reached or read.
            LedgerDatabaseMissingError: the PostgreSQL server has no database of the URL's name (as a write
                says: a configuration error, which no retry ends).
        """
        connected = self._connect(writing=False)
        try:
            with connected.execution_options(costaware_read=True) as conn, conn.begin():
                yield conn
        except (OperationalError, DBAPIError) as e:
            raise LedgerUnavailableError(
                f"cannot read the cost ledger at {safe_url(str(self.engine.url))}: {_reason(e)}"
            ) from e
        except StatementError as e:
            _raise_costaware_error_unwrapped(e)
            raise

    def _connect(self, *, writing: bool) -> Connection:
        """A connection; one that cannot be made raises as :meth:`transaction` and :meth:`reading` say.

        A database not created is no outage (retried as one, a task waited out its retries to fail): it is
        a :class:`LedgerDatabaseMissingError` for both. A write also says nothing was recorded.
        """
        try:
            return self.engine.connect()
        except (OperationalError, DBAPIError) as e:
            missing = _missing_database_hint(self.engine, e)
            where = f"the cost ledger at {safe_url(str(self.engine.url))}: {_reason(e)}"
            if missing:
                raise LedgerDatabaseMissingError(
                    f"cannot reach {where}. Check the URL ({self.url_from}){missing}"
                    + (f"{_sqlite_hint(self.engine, e)}; nothing was recorded or reserved" if writing else "")
                ) from e
            if writing:
                raise LedgerUnavailableError(
                    f"cannot reach {where}. Check the URL ({self.url_from}){_sqlite_hint(self.engine, e)}; "
                    "nothing was recorded or reserved"
                ) from e
            raise LedgerUnavailableError(f"cannot read {where}") from e

    def advisory_lock(self, conn: Connection, key: int) -> None:
        """On PostgreSQL, serialise transactions that take the same ``key`` (SQLite's lock already does)."""
        if not self.is_sqlite:
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({int(key)})")


def _raise_costaware_error_unwrapped(error: StatementError) -> None:
    """SQLAlchemy wraps what a column type refuses (a naive time, one outside UTC's range): raise it as is.

    Else Airflow's error translation sees a database error, not the bad value, and retries the task.
    """
    if isinstance(error.orig, CostawareError):
        raise error.orig from error
