"""``CostLedgerHook``: finds the ledger from the ``costaware_ledger`` connection, else the environment."""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from costaware.adapters.ledger.engine import safe_url, url_from_connection_fields
from costaware.glue import DEFAULT_LEDGER_CONN_ID

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger

log = logging.getLogger(__name__)
_LEDGERS: dict[str, Ledger] = {}
_LOCK = threading.Lock()


class CostLedgerHook(BaseHook):
    """Opens the cost ledger.

    The URL comes from the Airflow connection ``ledger_conn_id`` (a ``costaware_ledger`` or ``postgres``
    connection with PostgreSQL fields, a ``sqlite`` one, or any connection with ``{"url": ...}`` in its
    extra); when that connection does not exist, from ``COSTAWARE_LEDGER_URL``; else a SQLite file at
    ``$AIRFLOW_HOME/costaware/ledger.db``. See docs/ledger.md.

    Args:
        ledger_conn_id: Airflow connection id of the ledger database.
    """

    conn_name_attr = "ledger_conn_id"
    default_conn_name = DEFAULT_LEDGER_CONN_ID
    conn_type = "costaware_ledger"
    hook_name = "Costaware ledger"

    def __init__(self, ledger_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ledger_conn_id = ledger_conn_id

    def get_url(self) -> str:
        from costaware.settings import ledger_url

        try:
            conn = self.get_connection(self.ledger_conn_id)
        except AirflowNotFoundException:
            variable = self.unreadable_variable()
            if variable is not None:
                # Airflow skips a variable it cannot parse as if it were unset: every worker then kept its
                # own SQLite ledger, and no budget held across them.
                from costaware.core.errors import ConfigurationError

                raise ConfigurationError(
                    f"{variable} is set but Airflow cannot read it as a connection: fix it (a URI such as "
                    "postgresql://user:password@host:5432/costaware, or a JSON object with conn_type, host, "
                    f"login, ...); costs would otherwise go to {safe_url(ledger_url())}"
                ) from None
            if self.ledger_conn_id != DEFAULT_LEDGER_CONN_ID:
                # A name somebody chose, most likely misspelt: the costs would go to another ledger than
                # the team's, unseen by its budgets.
                log.warning(
                    "ledger connection %r does not exist: costs go to %s (COSTAWARE_LEDGER_URL or the "
                    "embedded SQLite file); create it, or fix ledger_conn_id",
                    self.ledger_conn_id,
                    safe_url(ledger_url()),
                )
            return ledger_url()
        return url_from_connection_fields(
            conn.conn_id,
            conn.conn_type,
            conn.host,
            conn.login,
            conn.password,
            conn.port,
            conn.schema,
            conn.extra,
        )

    def unreadable_variable(self) -> str | None:
        """``AIRFLOW_CONN_<ID>`` of the connection where it is set, else None.

        Asked once Airflow found no such connection: a variable set then is one Airflow cannot read (it
        skips it as if it were unset), not a connection that does not exist.
        """
        variable = f"AIRFLOW_CONN_{self.ledger_conn_id.upper()}"
        return variable if os.environ.get(variable, "").strip() else None

    def get_conn(self) -> Ledger:
        """The ledger, opened once per process and URL (engines pool their connections)."""
        from costaware.adapters.ledger.store import Ledger
        from costaware.settings import LEDGER_URL_ENV

        url = self.get_url()
        with _LOCK:
            if url not in _LEDGERS:
                # Opened by a task, the scheduler or `costaware spool drain`: none has a --ledger-url to fix.
                where = f"the ledger connection (ledger_conn_id, e.g. AIRFLOW_CONN_<ID>) or {LEDGER_URL_ENV}"
                _LEDGERS[url] = Ledger.from_url(url, url_from=where)
            return _LEDGERS[url]

    @property
    def ledger(self) -> Ledger:
        return self.get_conn()
