"""What every Cost route depends on: the logged-in user, the ledger, the DAGs the user may read, errors.

Airflow's security module and the ledger's adapters are imported when a request needs them, not when the
plugin loads: every task process loads plugins (for the listener) and should not pay for the api-server's
imports. No answer names the ledger's database: why it cannot be used goes to the api-server's log.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Query, Request, Response
from fastapi.routing import APIRoute

from costaware.core.errors import (
    LEDGER_UNREADABLE,
    ConfigurationError,
    CostawareError,
    LedgerUnavailableError,
)
from costaware.plugins.ui.filters import report_filters

if TYPE_CHECKING:
    from costaware.adapters.ledger.reports import Filters
    from costaware.adapters.ledger.store import Ledger

log = logging.getLogger(__name__)
T = TypeVar("T")

#: What a request learns when the ledger cannot be used; the reason (with the database's URL) is logged.
LEDGER_UNAVAILABLE = (
    "the cost ledger cannot be read right now: try again later; an administrator finds the reason in "
    "the api-server log"
)
_DATABASE_URL = re.compile(r"\b(sqlite|postgres(ql)?)(\+\w+)?://\S*", re.IGNORECASE)


async def require_login(request: Request) -> Any:
    """Airflow's own check (Bearer token, else the UI's session cookie); 401/403 when it fails.

    Returns the logged-in user (an auth manager ``BaseUser``).
    """
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPAuthorizationCredentials

    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    credentials = HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if token else None
    return await get_user(request, None, credentials)


User = Annotated[Any, Depends(require_login)]


def open_ledger() -> Ledger:
    """The ledger; a URL or schema it cannot be opened with is the server's problem, not the request's."""
    from costaware.hooks.ledger import CostLedgerHook

    try:
        return CostLedgerHook().get_conn()
    except CostawareError as e:
        raise LedgerUnavailableError(str(e)) from e


def guard(call: Callable[[], T]) -> T:
    """Run a ledger call; bad filters are 422, an unusable ledger 503 (its reason logged, not answered)."""
    try:
        return call()
    except LEDGER_UNREADABLE as e:
        # A missing database is the deployment's to fix (a ConfigurationError), not the request's: not 422.
        log.warning("costaware Cost API: %s", e)
        raise HTTPException(503, LEDGER_UNAVAILABLE) from e
    except ConfigurationError as e:
        raise HTTPException(422, public(str(e))) from e
    except CostawareError as e:
        raise HTTPException(400, public(str(e))) from e


def public(message: str) -> str:
    """``message`` without any database URL (messages about the request should hold none; be sure)."""
    return _DATABASE_URL.sub("<the ledger database>", message)


def readable_dags(user: User) -> frozenset[str]:
    """The DAGs in the ledger that the logged-in user may read (the auth manager decides).

    No DAG when the ledger cannot be read: the route's own read fails the same way, and says so its way (the
    Cost page in its red box above the form; raised here, it was a JSON answer in place of the page).
    Nothing is shown meanwhile: a read that succeeds after all is narrowed to no DAG.
    """
    from costaware.adapters.ledger.views import ledger_dag_ids
    from costaware.plugins.ui.access import readable_dag_ids

    try:
        return guard(lambda: readable_dag_ids(user, ledger_dag_ids(open_ledger())))
    except HTTPException as e:
        if e.status_code != 503:
            raise
        return frozenset()


#: The DAGs the user may read; None (a test's override) means every DAG.
Readable = Annotated[frozenset[str] | None, Depends(readable_dags)]


# FastAPI reads these annotations when the routes are declared, at plugin load: ``Any`` stands for a
# ``ledger.reports.Filters``, whose module is imported only when a request needs the ledger.
def visible_filters(filters: Annotated[Any, Depends(report_filters)], readable: Readable) -> Filters:
    """The report filters narrowed to the DAGs the user may read."""
    narrowed: Filters = replace(filters, dag_ids=readable)
    return narrowed


ReportFilters = Annotated[Any, Depends(visible_filters)]
Limit = Annotated[
    int | None,
    Query(ge=1, le=10000, description="Only the costliest groups; the rest are totalled under `other`."),
]


def declared_query_fields(route: Any) -> dict[str, Any]:
    """``route``'s query parameters, its dependencies' too, by the name a request gives them."""
    from fastapi.routing import APIRoute

    fields: dict[str, Any] = {}
    pending = [route.dependant] if isinstance(route, APIRoute) else []
    while pending:
        dependant = pending.pop()
        for field in dependant.query_params:
            fields.setdefault(field.alias, field)
        pending.extend(dependant.dependencies)
    return fields


def one_value_each(request: Request) -> None:
    """Refuse a query parameter given twice with different values, naming each (422).

    FastAPI reads the last alone: ``?days=7&days=90`` answered for 90 days, without a word, where a script
    had appended its own ``days`` to a link that carried one. Values are compared as the route reads them
    (``days=7&days=07``, ``group_by=dag&group_by=DAG`` are one value, read once); a parameter the route does
    not take is ignored, given twice or not, as FastAPI ignores it.

    Raises:
        HTTPException: 422, every parameter given twice with different values, in the API's one-line shape.
    """
    query = request.query_params
    given_twice = [name for name in dict.fromkeys(query.keys()) if len(query.getlist(name)) > 1]
    if not given_twice:  # every request passes here: FastAPI validates a value given once itself
        return
    fields = declared_query_fields(request.scope.get("route"))
    repeated = []
    for name in given_twice:
        if name not in fields:
            continue
        distinct: list[tuple[object, str]] = []  # (the value as read, the first text given for it)
        for text in query.getlist(name):
            read, errors = fields[name].validate(text, {}, loc=("query", name))
            # A value the route refuses is compared as typed: its own check names it once it is alone.
            value = ("as typed", text) if errors else read
            if all(value != seen for seen, _ in distinct):
                distinct.append((value, text))
        if len(distinct) > 1:
            given = ", then ".join(repr(text) for _, text in distinct)
            repeated.append(f"{name}: given {len(distinct)} times ({given}): give it once")
    if repeated:
        raise HTTPException(422, "; ".join(repeated))


def one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's ``pairs`` as a dict; a key given twice with different values is refused (422).

    ``json.loads`` keeps the last: ``{"cap_usd": "5", "cap_usd": "7"}`` set a cap of 7 without a word. The
    same value twice is read once, as a query parameter's is.

    Raises:
        HTTPException: 422 naming each such key and its values, in the API's one-line shape.
    """
    values: dict[str, list[Any]] = {}
    for key, value in pairs:
        seen = values.setdefault(key, [])
        # Compared as written: Python's == takes 1, 1.0 and true for one value.
        if all(json.dumps(value, sort_keys=True) != json.dumps(v, sort_keys=True) for v in seen):
            seen.append(value)
    repeated = [
        f"{key}: given {len(given)} times ({', then '.join(repr(v) for v in given)}): give it once"
        for key, given in values.items()
        if len(given) > 1
    ]
    if repeated:
        raise HTTPException(422, "; ".join(repeated))
    return {key: given[0] for key, given in values.items()}


class _OneValuePerKeyRequest(Request):
    """A request whose JSON body refuses a key given twice with different values (FastAPI parses with it)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), object_pairs_hook=one_value_per_key)
        return self._json


class OneValuePerKeyRoute(APIRoute):
    """A route whose JSON body is read by :class:`_OneValuePerKeyRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def read_body_strictly(request: Request) -> Response:
            return await handler(_OneValuePerKeyRequest(request.scope, request.receive))

        return read_body_strictly
