"""What every answer of the Cost API shares: the base of its bodies, its error bodies, money as text."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def usd_field() -> Any:
    """A USD field: an exact decimal string, never a float."""
    return Field(description="USD as an exact decimal string, e.g. 3.000000.")


class Answer(BaseModel):
    """A response body; a key it does not declare is an error, not silently dropped from the answer."""

    model_config = ConfigDict(extra="forbid")


class Problem(BaseModel):
    """Why a request was refused: not logged in (401), not allowed (403), or the ledger unusable (503)."""

    detail: str


class BadQuery(BaseModel):
    """A bad query parameter (422): one line naming each bad parameter, its value and what to give."""

    detail: str = Field(
        description="e.g. \"days: '0' is not a whole number from 1 to 366: give one in that range, or leave "
        "days out for the default 30\"; several bad parameters are joined with '; '."
    )


class BadRequest(BaseModel):
    """A bad body (422): one line naming each bad field, its value and what to give, as :class:`BadQuery`."""

    detail: str = Field(
        description="e.g. \"period: unknown budget period 'weekly': use one of run, day, month, total\"; "
        "several bad fields are joined with '; '."
    )


#: The answer of a route with a body (``POST /budgets``) to a bad one, in place of :data:`ERRORS`' 422.
BAD_BODY: dict[int | str, dict[str, Any]] = {
    422: {
        "model": BadRequest,
        "description": "A body field that is not valid: which, its value, what to give.",
    },
}

#: The answers every route may give besides its own (documented in the OpenAPI page).
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "Not logged in to Airflow (no token, or an expired one)."},
    403: {"model": Problem, "description": "Logged in, but not allowed."},
    422: {"model": BadQuery, "description": "A bad query parameter: which, its value, what to give."},
    503: {"model": Problem, "description": "The ledger cannot be read now (the reason is logged)."},
}
