"""The Cost page (``/costaware/``) and its JSON API (``/costaware/api/...``) inside the Airflow api-server.

Every route, the OpenAPI schema included, requires an authenticated Airflow user: a ``Bearer`` token or
the UI's session cookie. A browser without a session is sent to the auth manager's login page and back;
the JSON routes answer 401. The routes live in ``api.py`` and ``efficiency.py`` (JSON) and ``page.py``
(HTML); what they share (login, ledger, errors) in ``deps.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, get_args

from fastapi import Depends, FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from costaware.plugins.ui import api, efficiency, page
from costaware.plugins.ui.deps import declared_query_fields, require_login
from costaware.plugins.ui.filters import number_problem
from costaware.plugins.ui.page import cost_page

__all__ = ["cost_app"]


@asynccontextmanager
async def _at_start(app: FastAPI) -> AsyncIterator[None]:
    """Drain the API server's spool as it starts (it runs no Job: the listener's ``on_starting`` never does).

    Airflow's app enters the lifespan of each FastAPI app a plugin mounts. The drain runs in a thread of its
    own, so the server's start neither waits for a slow ledger nor fails on one.
    """
    from costaware.plugins.listener import drain_spool_at_start

    drain_spool_at_start(wait_seconds=0)
    yield


cost_app = FastAPI(
    title="costaware Cost API",
    version="1",
    description="Spend, budgets and savings from the costaware ledger. Every route needs an Airflow login.",
    openapi_url=None,  # served below, behind the same authentication as the data
    docs_url=None,
    redoc_url=None,
    dependencies=[Depends(require_login)],
    lifespan=_at_start,
)
cost_app.include_router(api.router)
cost_app.include_router(efficiency.router)
cost_app.include_router(page.router)


@cost_app.exception_handler(StarletteHTTPException)
async def login_or_error(request: Request, exc: StarletteHTTPException) -> Response:
    """Send a browser whose session is missing, expired or unreadable to the login page, then back here.

    Only the HTML page does this, and only for a request without an ``Authorization`` header (a browser
    with a cookie, not a script with a token): the JSON routes keep their 401/403, which scripts act on.
    """
    if (
        exc.status_code in (401, 403)
        and request.scope.get("endpoint") is cost_page
        and "authorization" not in request.headers
    ):
        from airflow.api_fastapi.app import get_auth_manager

        back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        # Every auth manager takes keyword arguments; the simple one and FAB honour ``next_url``.
        return RedirectResponse(get_auth_manager().get_url_login(next_url=back), status_code=303)
    return await http_exception_handler(request, exc)


@cost_app.exception_handler(RequestValidationError)
async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
    """FastAPI's 422 in one line of words: each bad query parameter or body field, its value, what to give.

    A bad body of ``POST /budgets`` answered FastAPI's list (``loc``, ``msg``, ``ctx``), where every GET
    answered one line: a client read two shapes of 422 from one API.
    """
    route = request.scope.get("route")
    problems = [
        query_problem(error, route) if error["loc"][:1] == ("query",) else body_problem(error)
        for error in exc.errors()
    ]
    return JSONResponse(status_code=422, content={"detail": "; ".join(problems)})


def body_problem(error: Mapping[str, Any]) -> str:
    """What pydantic's ``error`` about a request body means, naming the field (``body`` for the whole)."""
    field = ".".join(str(part) for part in error["loc"][1:]) or "body"
    if error["type"] == "json_invalid":
        # loc holds the character the decoder stopped at, not a field.
        return f"body: not valid JSON ({error.get('ctx', {}).get('error', error['msg'])}): send a JSON object"
    if error["type"] == "missing":
        return f"{field}: missing: give it"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "value_error":
        return f"{field}: {message}"  # our validators' own words, which name the value
    # repr, not the value: a JSON number too large for a float (1e400) arrives as inf, which JSON cannot hold.
    given = repr(error.get("input"))
    given = given if len(given) <= 80 else given[:77] + "..."
    return f"{field}: {given} is not valid: {message}"


#: pydantic's error types for a number that does not parse or is out of its parameter's bounds.
_NUMBER_ERRORS = frozenset(
    {
        "int_parsing",
        "int_from_float",
        "float_parsing",
        "finite_number",
        "greater_than",
        "greater_than_equal",
        "less_than",
        "less_than_equal",
    }
)


def query_problem(error: Mapping[str, Any], route: Any) -> str:
    """What pydantic's ``error`` about a query parameter of ``route`` means, said as for the other filters."""
    name = str(error["loc"][-1])
    if error["type"] == "value_error" and "error" in error.get("ctx", {}):
        # A problem found by filters.refused_by, already in the API's words (pydantic adds "Value error, ").
        return f"{name}: {error['ctx']['error']}"
    field = _query_field(route, name)
    if field is None or error["type"] not in _NUMBER_ERRORS:
        return f"{name}: {error.get('input')!r} is not valid: {error['msg']}"
    info = field.field_info
    annotation = info.annotation
    return number_problem(
        name,
        error.get("input"),
        whole=int in (annotation, *get_args(annotation)),
        # Query(ge=, le=) is kept as annotated_types' Ge and Le in the field's metadata.
        low=next((m.ge for m in info.metadata if hasattr(m, "ge")), None),
        high=next((m.le for m in info.metadata if hasattr(m, "le")), None),
        default=info.default,
    )


def _query_field(route: Any, name: str) -> Any:
    """The declaration of ``route``'s query parameter ``name``, in its dependencies too; None if none."""
    return declared_query_fields(route).get(name)


@cost_app.get("/openapi.json", include_in_schema=False)
def openapi_schema() -> dict[str, Any]:
    """The OpenAPI schema of this API."""
    return cost_app.openapi()
