"""The Cost page (``/costaware/``) and its JSON API (``/costaware/api/...``) inside the Airflow api-server.

Every route, the OpenAPI schema included, requires an authenticated Airflow user: a ``Bearer`` token or
the UI's session cookie. A browser without a session is sent to the auth manager's login page and back;
the JSON routes answer 401. The routes live in ``api.py`` and ``efficiency.py`` (JSON) and ``page.py``
(HTML); what they share (login, ledger, errors) in ``deps.py``.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from costaware.plugins.ui import api, efficiency, page
from costaware.plugins.ui.deps import require_login
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
    """FastAPI's 422, with inputs JSON cannot hold written as text.

    A JSON number too large for a float (``1e400``) arrives as ``inf``, which the default answer echoed and
    could not encode: the client got a 500.
    """

    def safe(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if isinstance(value, dict):
            return {k: safe(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [safe(v) for v in value]
        return value

    errors = jsonable_encoder([safe(error) for error in exc.errors()])
    return JSONResponse(status_code=422, content={"detail": errors})


@cost_app.get("/openapi.json", include_in_schema=False)
def openapi_schema() -> dict[str, Any]:
    """The OpenAPI schema of this API."""
    return cost_app.openapi()
