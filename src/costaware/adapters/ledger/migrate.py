"""Bring a ledger's schema to this release's: the Alembic revisions in ``migrations/``, run on opening.

The revision a ledger is at lives in its own table, ``costaware_alembic_version``, so a ledger that shares
Airflow's metadata database never touches Airflow's ``alembic_version``. A ledger written before the
migrations existed has no version table: the baseline revision adds the tables it lacks and stamps it. The
upgrade runs inside one write transaction under a lock (SQLite's write lock, a PostgreSQL advisory lock), so
many processes opening a ledger at once upgrade it once; opening a ledger at the head reads two rows.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, column, inspect, select, table
from sqlalchemy.exc import DBAPIError

from costaware.adapters.ledger import schema
from costaware.adapters.ledger.engine import LedgerDatabase, safe_url
from costaware.core.errors import ConfigurationError, LedgerNotPermittedError, LedgerUnavailableError

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

VERSION_TABLE = "costaware_alembic_version"
#: The newest revision in ``migrations/versions`` (a test checks it is Alembic's head).
HEAD = "0004"
MIGRATIONS = Path(__file__).with_name("migrations")
#: One upgrader at a time on PostgreSQL (SQLite's write lock already serialises them).
UPGRADE_LOCK = 74210031
#: PostgreSQL's SQLSTATE of "permission denied".
INSUFFICIENT_PRIVILEGE = "42501"
#: Alembic's ``alembic.context`` is one per process: two threads upgrading two ledgers would share it.
_ALEMBIC_CONTEXT = threading.Lock()


def upgrade(ledger: LedgerDatabase) -> None:
    """Create the ledger's tables, or upgrade them to this release's revision; safe from many processes.

    Raises:
        ConfigurationError: the ledger was written by a newer costaware (nothing is changed then).
        LedgerUnavailableError: the database cannot be reached, or refused a revision (nothing is changed
            then either).
    """
    with ledger.transaction() as conn:
        ledger.advisory_lock(conn, UPGRADE_LOCK)
        revision = _standing(ledger, conn)
        if revision != HEAD:
            url = safe_url(str(ledger.engine.url))
            try:
                _run_revisions(conn)
            except DBAPIError as e:
                # Said as what it is: the engine's message told a person to check the URL of a ledger it
                # had reached. The transaction rolls back, so the ledger stays as it was.
                reason = " ".join(str(e.orig or e).split()).rstrip(".")
                if getattr(e.orig, "pgcode", None) == INSUFFICIENT_PRIVILEGE:
                    # PostgreSQL 15 lets only the database's owner create tables in 'public': retried as an
                    # outage, and told to look for a table made by hand.
                    raise LedgerNotPermittedError(_not_permitted(ledger, url, revision, reason)) from e
                raise LedgerUnavailableError(
                    f"cannot upgrade the cost ledger at {url} from schema revision {revision or 'none'} to "
                    f"{HEAD}: the database refused it ({reason}). Nothing was changed: the ledger stays at "
                    f"revision {revision or 'none'} with every row; fix what the database refused (e.g. a "
                    "table or index of that name made by hand) and open it again"
                ) from e
            log.info("ledger at %s: schema revision %s -> %s", url, revision or "none", HEAD)
        _write_schema_version(conn)


def _not_permitted(ledger: LedgerDatabase, url: str, revision: str | None, reason: str) -> str:
    """What to do about a revision PostgreSQL refused for the user's privileges (SQLSTATE 42501)."""
    user = ledger.engine.url.username or "<user>"
    if "must be owner of" in reason:
        # A revision that changes a table (an index, a column) needs its owner: a GRANT on the schema, which
        # lets the user create tables, does not let it change another role's.
        return (
            f"cannot upgrade the cost ledger at {url} from schema revision {revision or 'none'} to {HEAD}: "
            f"the database refused it ({reason}). Its tables belong to another role: open the ledger once as "
            "that role, which upgrades it (e.g. any costaware command with --ledger-url naming the tables' "
            f"owner), or, as their owner, make {user} their owner (ALTER TABLE <table> OWNER TO {user}; for "
            "each costaware_ table); nothing was changed"
        )
    return (
        f"cannot create the cost ledger's tables at {url}: the database refused it ({reason}). Let the user "
        f"create tables there (as the database's owner: GRANT CREATE ON SCHEMA public TO {user};) or connect "
        "as the owner; nothing was changed"
    )


def holds_ledger(ledger: LedgerDatabase) -> bool:
    """Whether the database has a ledger's tables yet (its budgets table): read, nothing created.

    Read in the transaction opening the ledger takes, so that a database that cannot be reached, or was not
    created, is said as opening it says it.

    Raises:
        LedgerUnavailableError: the database cannot be reached or read.
        LedgerDatabaseMissingError: the PostgreSQL server has no database of the URL's name.
    """
    with ledger.transaction() as conn:
        return inspect(conn).has_table(schema.budgets.name)


# PostgreSQL's own schemas: every database has them, whatever it is for.
_SYSTEM_SCHEMAS = ("information_schema", "pg_catalog")


def holds_no_tables(ledger: LedgerDatabase) -> bool:
    """Whether the database has no tables at all, in any schema: one made for the ledger, empty yet.

    Every schema counts: an application's database whose tables are all in its own schema is no empty one.

    Raises:
        LedgerUnavailableError: the database cannot be reached or read.
    """
    with ledger.transaction() as conn:
        found = inspect(conn)
        schemas = [
            s for s in found.get_schema_names() if s not in _SYSTEM_SCHEMAS and not s.startswith("pg_")
        ]
        return not any(found.get_table_names(schema=schema) for schema in schemas)


def current_revision(conn: Connection) -> str | None:
    """The revision in the ledger's version table (None: no table, or it is empty)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    found = conn.execute(select(column("version_num")).select_from(table(VERSION_TABLE))).scalar()
    return None if found is None else str(found)


def _standing(ledger: LedgerDatabase, conn: Connection) -> str | None:
    """The ledger's revision, after refusing a ledger that a newer costaware wrote."""
    url = safe_url(str(ledger.engine.url))
    version = _schema_version(conn)
    if version > schema.SCHEMA_VERSION:
        raise ConfigurationError(
            f"the ledger at {url} has schema v{version}, newer than this costaware "
            f"(v{schema.SCHEMA_VERSION}): upgrade airflow-provider-costaware"
        )
    revision = current_revision(conn)
    if revision is not None and revision != HEAD and revision not in _known_revisions():
        raise ConfigurationError(
            f"the ledger at {url} has schema revision {revision!r}, newer than this costaware "
            f"(revision {HEAD!r}): upgrade airflow-provider-costaware"
        )
    return revision


def _schema_version(conn: Connection) -> int:
    """``schema_version`` of ``costaware_meta`` (0: none), what releases before the migrations check."""
    if not inspect(conn).has_table(schema.meta.name):
        return 0
    row = conn.execute(select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")).first()
    return int(row[0]) if row else 0


def _write_schema_version(conn: Connection) -> None:
    version = _schema_version(conn)
    if version == schema.SCHEMA_VERSION:
        return
    if version == 0:
        conn.execute(schema.meta.insert().values(key="schema_version", value=str(schema.SCHEMA_VERSION)))
    else:
        conn.execute(
            schema.meta.update()
            .where(schema.meta.c.key == "schema_version")
            .values(value=str(schema.SCHEMA_VERSION))
        )


def _config(conn: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if conn is not None:
        config.attributes["connection"] = conn
    return config


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    return {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}


def script_head() -> str | None:
    """The head revision of the scripts in ``migrations/versions`` (``HEAD`` must be it)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def _run_revisions(conn: Connection) -> None:
    from alembic import command

    with _ALEMBIC_CONTEXT:
        command.upgrade(_config(conn), "head")
