"""Alembic's entry point for the ledger: runs the revisions on the connection ``migrate.upgrade`` passes.

From the ``alembic`` command line (writing a new revision: ``alembic -c <this folder>/alembic.ini revision
--autogenerate -m "..."``) it connects to ``sqlalchemy.url`` of that file, else to the configured ledger.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from costaware.adapters.ledger.migrate import VERSION_TABLE
from costaware.adapters.ledger.schema import metadata


def run(connection: Connection) -> None:
    """Run the revisions from the ledger's revision to the head, in the transaction of ``connection``."""
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,  # SQLite alters a table by copying it
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


given = context.config.attributes.get("connection")
if given is not None:
    run(given)
else:
    from costaware.adapters.ledger.engine import ledger_engine
    from costaware.settings import ledger_url

    engine = ledger_engine(context.config.get_main_option("sqlalchemy.url") or ledger_url())
    with engine.begin() as opened:
        run(opened)
    engine.dispose()
