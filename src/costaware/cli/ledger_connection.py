"""Which ledger a command opens when ``--ledger-url`` is not given: the workers' own, read as they read it.

The ``costaware_ledger`` connection is looked up in Airflow (its secrets backends, then its metadata
database) only where Airflow may keep it, with the metadata database's connect bounded in time and no trace
left when the look-up fails. Airflow is imported inside functions only: ``costaware --help`` stays quick.
"""

from __future__ import annotations

import configparser
import contextlib
import sys
from collections.abc import Iterator
from typing import Any


def default_ledger_url(*, read_only: bool = False) -> str:
    """The ledger the workers use, read in ``CostLedgerHook``'s order.

    The ``costaware_ledger`` connection when the environment gives it (``AIRFLOW_CONN_COSTAWARE_LEDGER``, as
    the docker compose file does), else when Airflow's metadata database of ``AIRFLOW_HOME`` keeps it (the
    UI, ``airflow connections add``), else ``COSTAWARE_LEDGER_URL``, else the embedded SQLite file.

    Without the first two, a budget set from a compose container, or beside a connection added in the UI,
    went to a SQLite file no worker reads. Airflow is imported only then: the other commands stay quick.

    ``read_only``: a metadata database that cannot be read is said on stderr and the fallback ledger read;
    otherwise it is refused, as the workers may keep their ledger there.

    Raises:
        CostawareError: not ``read_only`` and Airflow's metadata database (or a secrets backend) failed.
    """
    import os

    from costaware.adapters.ledger.engine import safe_url
    from costaware.core.errors import CostawareError
    from costaware.settings import ledger_url

    if os.environ.get("AIRFLOW_CONN_COSTAWARE_LEDGER", "").strip():
        from costaware.hooks.ledger import CostLedgerHook

        with _logging_as_before_airflow():  # the hook imports Airflow, which turns its INFO lines on
            return CostLedgerHook().get_url()
    try:
        return ledger_url_in_airflow_database() or ledger_url()
    except ConnectionLookupError as e:
        if not read_only:
            # The fallback would take a budget (or prices) that no gate reads, where the workers' ledger is
            # the one that connection names.
            raise CostawareError(
                f"{e}: nothing written, as the workers may use the ledger that connection names; fix it "
                "(`airflow db migrate`, the deployment's AIRFLOW_HOME, or the secrets backend) or give "
                "--ledger-url with the workers' ledger"
            ) from e
        print(
            f"costaware: warning: {e}: reading {safe_url(ledger_url())}; give --ledger-url if the workers "
            "use another ledger",
            file=sys.stderr,
        )
        return ledger_url()


class ConnectionLookupError(Exception):
    """Airflow's metadata database (or a secrets backend) failed when asked for a connection.

    Not "no such connection": Airflow's own look-up logs that failure at debug level and answers "not
    defined", and the command then wrote to a ledger the workers do not use.
    """


def ledger_url_in_airflow_database(conn_id: str | None = None) -> str | None:
    """The URL of connection ``conn_id`` (default ``costaware_ledger``) kept in Airflow's metadata database.

    Asked in the order of ``airflow connections get``: the secrets backend of airflow.cfg, the environment,
    then the metadata database. Not asked where ``AIRFLOW_HOME`` has no such database (a SQLite file that is
    not there) and no secrets backend is set: importing Airflow costs about 2 s.

    Raises:
        ConnectionLookupError: Airflow's configuration, a secrets backend or the metadata database failed
            (not migrated, down): whether it keeps the connection is not known.
    """
    parser = _airflow_cfg()  # read once for both checks below
    if not _airflow_database_may_exist(parser):
        return None
    from costaware.adapters.ledger.engine import url_from_connection_fields
    from costaware.glue import DEFAULT_LEDGER_CONN_ID

    conn_id = conn_id or DEFAULT_LEDGER_CONN_ID
    with _logging_as_before_airflow(), _airflow_import_bounded(parser):
        conn = _connection_from_secrets_backends(conn_id)
    if conn is None:
        return None
    return url_from_connection_fields(
        conn.conn_id, conn.conn_type, conn.host, conn.login, conn.password, conn.port, conn.schema, conn.extra
    )


def _connection_from_secrets_backends(conn_id: str) -> Any:
    """Connection ``conn_id`` from Airflow's secrets backends, None where none keeps it.

    ``Connection.get_connection_from_secrets`` is not used: it takes a backend's failure for "not there".

    Raises:
        ConnectionLookupError: Airflow could not be set up, or a backend failed.
    """

    def said(e: BaseException) -> str:
        driver_error = getattr(e, "orig", None)  # SQLAlchemy's, without the long SELECT it adds
        return " ".join(str(driver_error or e).split())[:300] or type(e).__name__

    try:
        from airflow.configuration import ensure_secrets_loaded
        from airflow.secrets.metastore import MetastoreBackend

        backends = ensure_secrets_loaded()
    except Exception as e:
        raise ConnectionLookupError(
            f"cannot load Airflow's configuration or secrets backends to read connection {conn_id!r} "
            f"({said(e)})"
        ) from e
    for backend in backends:
        try:
            conn = backend.get_connection(conn_id=conn_id)
        except Exception as e:
            where = (
                f"Airflow's metadata database{_metadata_database_named()}"
                if isinstance(backend, MetastoreBackend)
                else f"Airflow's secrets backend {type(backend).__name__}"
            )
            raise ConnectionLookupError(f"cannot read connection {conn_id!r} from {where} ({said(e)})") from e
        if conn is not None:
            return conn
    return None


def _metadata_database_named() -> str:
    """`` at <URL>`` of Airflow's metadata database, its password masked ("" where it cannot be read)."""
    from airflow.configuration import conf

    from costaware.adapters.ledger.engine import safe_url

    try:
        return f" at {safe_url(conf.get('database', 'sql_alchemy_conn'))}"
    except Exception:  # a failing sql_alchemy_conn_cmd: the look-up's own error says what failed
        return ""


@contextlib.contextmanager
def _logging_as_before_airflow() -> Iterator[None]:
    """Keep the logging levels Airflow's import changes as they were: the command's stderr stays quiet.

    Airflow sets the root logger (and its own) to INFO when imported: the ledger's migration and a budget
    set then logged ``[info]`` lines that the same command without Airflow does not. A process that
    imported Airflow itself keeps its settings.
    """
    import logging

    if "airflow" in sys.modules:
        yield
        return
    root = logging.getLogger()
    level = root.level
    try:
        yield
    finally:
        root.setLevel(level)
        if "airflow" in logging.Logger.manager.loggerDict:
            logging.getLogger("airflow").setLevel(logging.NOTSET)  # as the root logger, as before


def _airflow_database_may_exist(parser: configparser.RawConfigParser | None) -> bool:
    """Whether Airflow may keep connections: False only for no SQLite metadata file and no secrets backend.

    A Vault's connection was ignored where ``AIRFLOW_HOME`` had no airflow.db. Read from the environment or
    airflow.cfg (``parser``, :func:`_airflow_cfg`'s) without importing Airflow.
    """
    import os
    from pathlib import Path

    if parser is None:
        return True  # Airflow says what is wrong with it
    if (
        os.environ.get("AIRFLOW__SECRETS__BACKEND", "").strip()
        or parser.get("secrets", "backend", fallback="").strip()
    ):
        return True
    url = _metadata_database_url(parser)
    if url is None or not url.startswith("sqlite"):
        return True
    path = url.partition(":///")[2].partition("?")[0]
    return not path or path == ":memory:" or Path(path).is_file()


def _airflow_cfg() -> configparser.RawConfigParser | None:
    """``$AIRFLOW_HOME/airflow.cfg`` read without Airflow (empty where there is none); None if unreadable."""
    from costaware.settings import airflow_home

    parser = configparser.RawConfigParser(strict=False)
    try:
        parser.read(airflow_home() / "airflow.cfg")
    except configparser.Error:
        return None
    return parser


def _metadata_database_url(parser: configparser.RawConfigParser) -> str | None:
    """Airflow's metadata database URL as the environment or ``parser`` give it.

    None where a command or a secret gives it: only Airflow can read those.
    """
    import os

    from costaware.settings import airflow_home

    url = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "").strip()
    if url:
        return url
    url = parser.get("database", "sql_alchemy_conn", fallback="").strip()
    if not url and (
        parser.has_option("database", "sql_alchemy_conn_cmd")
        or parser.has_option("database", "sql_alchemy_conn_secret")
        or any(os.environ.get(f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_{k}") for k in ("CMD", "SECRET"))
    ):
        return None
    return url or f"sqlite:///{airflow_home() / 'airflow.db'}"


#: How long the look-up waits for Airflow's metadata database to answer a connect: libpq (PostgreSQL) and
#: MySQL's drivers wait for the OS's TCP timeout otherwise, minutes on a firewalled host.
METADATA_CONNECT_TIMEOUT_SECONDS = 5
#: The ``[database] sql_alchemy_connect_args`` Airflow imports by path while the CLI imports it.
METADATA_CONNECT_ARGS = {"connect_timeout": METADATA_CONNECT_TIMEOUT_SECONDS}
_CONNECT_ARGS_OPTION = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"
_LOG_FOLDER_OPTION = "AIRFLOW__LOGGING__BASE_LOG_FOLDER"


def _connect_timeout_in_url(url: str | None) -> str | None:
    """The ``connect_timeout`` the metadata database URL sets in its query (None: not set, or unreadable)."""
    if not url:
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        query = make_url(url).query
    except (ArgumentError, ValueError):
        return None  # the look-up itself says what is wrong with the URL
    value = query.get("connect_timeout")
    if isinstance(value, tuple):  # given twice: the driver reads the last
        value = value[-1] if value else None
    return (str(value).strip() or None) if value is not None else None


@contextlib.contextmanager
def _airflow_import_bounded(parser: configparser.RawConfigParser | None) -> Iterator[None]:
    """Import Airflow for a connection look-up that waits a bounded time and leaves no trace when it fails.

    * A metadata database that does not answer (a firewalled PostgreSQL, a hung server) held the command for
      the driver's connect timeout, none by default for libpq: the look-up gets
      :data:`METADATA_CONNECT_ARGS`, unless airflow.cfg or the environment sets connect arguments or the
      URL its own ``connect_timeout``.
    * Importing Airflow makes its log folder (``$AIRFLOW_HOME/logs``): where the look-up then fails, an
      empty one made here is removed, as a command that reads a ledger writes no Airflow logs.

    A process that imported Airflow already keeps its engine and folders as they are.

    Raises:
        ConnectionLookupError: the look-up's, naming the unreachable database where the timeout ran out.
    """
    import os
    from pathlib import Path

    from costaware.settings import airflow_home

    if "airflow" in sys.modules or parser is None:
        yield
        return
    url = _metadata_database_url(parser)
    in_url = _connect_timeout_in_url(url)
    # SQLAlchemy's connect_args win over the URL's query: a URL's own connect_timeout (a slow Aurora
    # Serverless waking up) was cut to ours.
    own_connect_args = bool(
        os.environ.get(_CONNECT_ARGS_OPTION, "").strip()
        or parser.get("database", "sql_alchemy_connect_args", fallback="").strip()
    )
    bounded = url is not None and not url.startswith("sqlite") and in_url is None and not own_connect_args
    # Said in the message only where known: connect arguments of the deployment's own win over the URL's.
    timeout_used = METADATA_CONNECT_TIMEOUT_SECONDS if bounded else None if own_connect_args else in_url
    folder = os.environ.get(_LOG_FOLDER_OPTION) or parser.get("logging", "base_log_folder", fallback="") or ""
    logs = Path(folder.replace("{AIRFLOW_HOME}", str(airflow_home())) or airflow_home() / "logs")
    logs_existed = logs.exists()
    if bounded:
        os.environ[_CONNECT_ARGS_OPTION] = f"{__name__}.METADATA_CONNECT_ARGS"
    try:
        yield
    except ConnectionLookupError as e:
        if not logs_existed:
            # rmdir removes only an empty folder: one another process wrote into meanwhile is kept.
            with contextlib.suppress(OSError):
                logs.rmdir()
        if timeout_used is not None and "timeout expired" in str(e).lower():
            raise ConnectionLookupError(
                f"{e}: it did not answer within {timeout_used} s; check that it is up and reachable from here"
            ) from e
        raise
    finally:
        if bounded:
            os.environ.pop(_CONNECT_ARGS_OPTION, None)
