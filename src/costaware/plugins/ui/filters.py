"""The Cost page's and API's filters: parsed and checked once, for the JSON routes and the HTML form alike.

The JSON routes answer 422 for a bad filter; the page reads its form leniently (an empty field means "all")
and turns each bad field into a readable message. Both apply the same checks, in :func:`check_filters`.
The choices come from the core's constants: what a report groups by (``GROUP_BYS``, and a tag, the indexed
ones offered in the form) and the budget periods (``Period``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlencode

from fastapi import Depends, HTTPException, Query
from pydantic import AfterValidator, BeforeValidator

from costaware.core.budgets import TAG_NAME_PATTERN, Period, Scope
from costaware.core.errors import InvalidBudgetError
from costaware.core.ledger import GROUP_BYS, INDEXED_TAGS, group_by_name

if TYPE_CHECKING:
    from costaware.adapters.ledger.reports import Filters

#: A tag's name, as ``costaware.core.budgets.tag_problem`` allows it (a test holds the two to the same rule).
TAG_NAME = TAG_NAME_PATTERN
GROUP_BY_PATTERN = rf"^({'|'.join(GROUP_BYS)}|tag:{TAG_NAME})$"


def any_case(word: str) -> str:
    """``word`` as a regex matching it in any case, spelled for JSON Schema's ECMA 262 regex (no ``(?i)``)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


#: What the ``group_by`` query parameter accepts, as its OpenAPI schema publishes it: ``group_by_name`` reads
#: a keyword and ``tag:`` in any case, with spaces around, before :data:`GROUP_BY_PATTERN` checks the result.
#: The lowercase pattern published before told clients that ``TASK``, which the API takes, was invalid.
GROUP_BY_QUERY_PATTERN = (
    rf"^\s*({'|'.join(any_case(grouping) for grouping in GROUP_BYS)}|{any_case('tag')}:{TAG_NAME})\s*$"
)
PERIOD_PATTERN = rf"^({'|'.join(p.value for p in Period)})$"
DAG_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,250}$"
#: A value as ``tag_problem`` allows it: no control characters (a NUL failed the query on PostgreSQL).
_TAG_VALUE = r"[^,=\x00-\x1f\x7f]{1,128}"
SCOPE_PATTERN = rf"^(\*|{TAG_NAME}={_TAG_VALUE}(,{TAG_NAME}={_TAG_VALUE})*)$"
#: Tags one scope filter may name. Each is one more condition in every query: thousands of them exceed
#: what a database accepts in one statement (SQLite: "Expression tree is too large"), and no real
#: allocation has more than a handful.
MAX_SCOPE_TAGS = 50
#: The form's grouping choices: every grouping of a report, and the tags with their own column.
GROUP_BY_CHOICES = (*GROUP_BYS, *(f"tag:{tag}" for tag in INDEXED_TAGS))
#: The form's fields, in the order the page's links carry them.
FORM_FIELDS = ("days", "since", "until", "dag_id", "scope", "group_by")


def refused_by(problem_of: Callable[[str], str | None]) -> AfterValidator:
    """A query parameter's check by ``problem_of``, as a validator: pydantic collects every parameter's error.

    Checked in a route's dependency, the first bad parameter raised its 422 alone: ``since=yesterday&days=0``
    named only days, ``group_by=x&limit=0`` only group_by. ``invalid_request`` (app.py) words the problem.
    """

    def check(value: str) -> str:
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def instant_of(text: str | None) -> datetime | None:
    """A ``since`` or ``until`` query parameter as the time it names (None when blank or not given).

    Read here once, as pydantic validates the parameter: its check and the route's filter read the same value.

    Raises:
        ValueError: what is wrong with it, which ``invalid_request`` (app.py) names the parameter with.
    """
    value, problem = iso_time(text or "")
    if problem:
        raise ValueError(problem)
    return value


Days = Annotated[int, Query(ge=1, le=366, description="How many days back from now (default 30).")]
# Text, read here: pydantic's own 422 ("input is too short") named no format for `since=yesterday`.
Since = Annotated[
    datetime | None,
    Query(description="ISO datetime with a zone (2026-11-01T00:00+00:00); overrides `days`."),
    BeforeValidator(instant_of),
]
Until = Annotated[
    datetime | None,
    Query(description="ISO datetime with a zone (2026-11-01T00:00+00:00), exclusive."),
    BeforeValidator(instant_of),
]


def tidy_scope(text: str) -> str:
    """``text`` without the spaces typed around ``,`` and ``=`` (``project=a, team=b``), as the CLI reads it.

    Nothing else changes: what is left is checked against :data:`SCOPE_PATTERN`.
    """
    parts = []
    for part in text.split(","):
        key, found, value = part.partition("=")
        parts.append(f"{key.strip()}={value.strip()}" if found else part.strip())
    return ",".join(parts) if text.strip() else ""


def dag_id_problem(dag_id: str) -> str | None:
    """What is wrong with ``dag_id`` as a filter, in words, or None when nothing is."""
    if re.fullmatch(DAG_ID_PATTERN, dag_id):
        return None
    return (
        f"{dag_id!r} is not a DAG id: use letters, digits, '_', '.' and '-' (at most 250 characters), or "
        "leave it out for every DAG"
    )


def group_by_problem(group_by: str) -> str | None:
    """What is wrong with ``group_by`` as a grouping, in words, or None when nothing is."""
    if re.fullmatch(GROUP_BY_PATTERN, group_by):
        return None
    return (
        f"{group_by!r} is not a grouping: use one of {', '.join(GROUP_BYS)}, or tag:<name> for a tag (its "
        "name starts with a letter)"
    )


def number_problem(
    name: str, value: object, *, whole: bool, low: object, high: object, default: object
) -> str:
    """What is wrong with ``value`` for the numeric query parameter ``name``, in the API's words.

    pydantic's own 422 (``Input should be greater than or equal to 1``) came as a list beside this API's one
    line for the other filters, and named neither the range nor what to give.
    """
    kind = "a whole number" if whole else "a number"
    bounds = f" from {low} to {high}" if low is not None and high is not None else ""
    leave = f"leave {name} out for the default {default}" if default is not None else f"leave {name} out"
    give = "give one in that range" if bounds else "give one"
    return f"{name}: {value!r} is not {kind}{bounds}: {give}, or {leave}"


def checked_dag_id(
    # Checked by dag_id_problem, whose 422 names the value: the pattern's own error showed only the regex.
    dag_id: Annotated[
        str | None,
        Query(json_schema_extra={"pattern": DAG_ID_PATTERN}, description="Only this DAG."),
        refused_by(dag_id_problem),
    ] = None,
) -> str | None:
    """The ``dag_id`` filter of the JSON routes; 422 naming the value when it is no DAG id."""
    return dag_id


def checked_group_by(
    group_by: Annotated[
        str,
        Query(
            json_schema_extra={"pattern": GROUP_BY_QUERY_PATTERN},
            description=f"{', '.join(GROUP_BYS)} or tag:<name>; keywords in any case (TASK is task), "
            "tag names exactly.",
        ),
        refused_by(lambda text: group_by_problem(group_by_name(text))),
        # Read as the route reads it, so that group_by=dag&group_by=DAG is one value (deps.one_value_each).
        AfterValidator(group_by_name),
    ] = "dag",
) -> str:
    """The ``group_by`` of the JSON routes, read in any case as the CLI reads it; 422 naming a bad one."""
    return group_by_name(group_by)


DagId = Annotated[str | None, Depends(checked_dag_id)]
ScopeQ = Annotated[
    str,
    Query(
        # Checked by scope_problem, whose 422 names the value: the pattern's own error showed only the regex.
        json_schema_extra={"pattern": SCOPE_PATTERN},
        description=f"Tag filter such as project=churn,team=ml (at most {MAX_SCOPE_TAGS} tags).",
    ),
    refused_by(lambda text: scope_problem(text)),  # defined below
]
GroupBy = Annotated[str, Depends(checked_group_by)]


def iso_time(text: str) -> tuple[datetime | None, str | None]:
    """``text`` (stripped) as an ISO time with a zone, or None and what is wrong; None, None when blank."""
    text = text.strip()
    if not text:
        return None, None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None, f"{text!r} is not an ISO time such as 2026-11-01T00:00+00:00"
    if value.tzinfo is None:
        # Named as typed, with the fixed value to copy: '2026-11-01' was told that 2026-11-01T00:00:00, a
        # time the user never wrote, lacked a zone, and to add '+00:00' (which a date alone does not take).
        precision = "auto" if value.second or value.microsecond else "minutes"
        fixed = value.replace(tzinfo=timezone.utc).isoformat(timespec=precision)
        return None, f"{text!r} has no time zone: add one, e.g. {fixed}"
    return value, None


def utc_instant(value: datetime) -> tuple[datetime | None, str | None]:
    """``value`` in UTC, or None and what is wrong with it (no zone, or outside UTC's range).

    ``0001-01-01T00:00+14:00`` and ``9999-12-31T23:59-14:00`` are valid ISO times whose UTC instant
    lies outside what Python (and so the ledger) can represent.
    """
    if value.tzinfo is None:
        return None, f"{value.isoformat()} has no time zone: add one, e.g. +00:00"
    try:
        return value.astimezone(timezone.utc), None
    except OverflowError:
        return None, (
            f"{value.isoformat()} is outside the range of times in UTC: "
            "use a time from 0001-01-02 to 9999-12-30"
        )


def scope_problem(scope: str) -> str | None:
    """What is wrong with ``scope`` as a filter (too many tags, not tags), or None when nothing is."""
    tags = 0 if scope.strip() in ("", "*") else scope.count(",") + 1
    if tags > MAX_SCOPE_TAGS:
        return (
            f"{tags:,} tags given, at most {MAX_SCOPE_TAGS} are allowed: "
            "filter on the few tags that matter, e.g. project=churn,team=ml"
        )
    if not re.fullmatch(SCOPE_PATTERN, scope):
        return (
            f"{scope!r} is not a tag filter such as project=churn or project=churn,team=ml (a tag name "
            "starts with a letter, no spaces around ',' and '=', no ',' or '=' in a value), "
            "or * for all spend"
        )
    try:
        # Well-formed yet unreadable (one tag twice): refused here, by field, as the other bad filters;
        # the read refused it later with no field named on the page.
        Scope.parse(scope)
    except InvalidBudgetError as e:
        return str(e).removeprefix("scope ")  # after "Scope: " as the other fields' messages are
    return None


def check_filters(
    days: int,
    since: datetime | None,
    until: datetime | None,
    dag_id: str | None,
    scope: str,
    until_name: str = "until",
) -> tuple[Filters | None, list[tuple[str, str]]]:
    """The ``ledger.reports.Filters`` of well-formed values, or None and (field, what is wrong) pairs.

    ``until_name`` is Until as the caller's reader knows it: the query parameter ``until`` for the API
    (whose ``detail`` names every parameter as spelled in the query), the field **Until** for the page.
    """
    from costaware.adapters.ledger.reports import Filters

    problems: list[tuple[str, str]] = []
    instants: dict[str, datetime | None] = {}
    for name, value in (("since", since), ("until", until)):
        instants[name], problem = (None, None) if value is None else utc_instant(value)
        if problem:
            problems.append((name, problem))
    start, end = instants["since"], instants["until"]
    if start is not None and end is not None and start >= end:
        # What to do, as the CLI's --since/--until says it: the two were named and left to guess.
        remedy = (
            f"the range is empty: {until_name} is exclusive, give a later one"
            if start == end
            else "swap them"
        )
        problems.append(
            ("since", f"{start.isoformat()} is not before {until_name} {end.isoformat()}: {remedy}")
        )
    problem = scope_problem(scope)
    if problem:
        problems.append(("scope", problem))
    if problems:
        return None, problems
    # Days back from Until where only Until is given (from now, an Until older than Days made a backwards
    # range: $0, and no word).
    if start is None:
        try:
            start = (end or datetime.now(timezone.utc)) - timedelta(days=days)
        except OverflowError:  # an Until in the first days of year 1: no day before it to count from
            return None, [("until", f"{end.isoformat() if end else ''} leaves no {days} days before it")]
    return Filters(since=start, until=end, dag_id=dag_id, scope=scope), []


def report_filters(
    days: Days = 30, since: Since = None, until: Until = None, dag_id: DagId = None, scope: ScopeQ = "*"
) -> Filters:
    """The filters every JSON report route takes, validated (422 when not).

    Each parameter alone was checked as it was read (``refused_by``, ``instant_of``); what is left are the
    checks of them together (Since before Until) and of an instant outside UTC's range.
    """
    filters, problems = check_filters(days, since, until, dag_id, scope)
    if filters is None:
        raise HTTPException(422, "; ".join(f"{field}: {problem}" for field, problem in problems))
    return filters


@dataclass(frozen=True, slots=True)
class PageForm:
    """The page's form as sent: the filters it asks for, or what is wrong with it.

    Attributes:
        filters: The report's filters; None when a field is bad.
        group_by: The grouping (as typed when it is bad).
        typed: Each field as typed, to refill the form and to build links that keep the filters.
        errors: One readable message per bad field.
    """

    filters: Filters | None
    group_by: str
    typed: dict[str, str]
    errors: list[str]


def page_filters(
    days: Annotated[str | None, Query()] = None,
    since: Annotated[str | None, Query()] = None,
    until: Annotated[str | None, Query()] = None,
    dag_id: Annotated[str | None, Query()] = None,
    scope: Annotated[str | None, Query()] = None,
    group_by: Annotated[str | None, Query()] = None,
) -> PageForm:
    """The page's form, read leniently: empty fields mean "all" (or the default); bad ones become messages.

    The JSON API answers 422 for the same values.
    """
    raw = {
        "days": days,
        "since": since,
        "until": until,
        "dag_id": dag_id,
        "scope": scope,
        "group_by": group_by,
    }
    typed = {name: (value or "").strip() for name, value in raw.items()}
    errors: list[str] = []
    span = 30
    if typed["days"]:
        try:
            span = int(typed["days"])
        except ValueError:
            span = 0
        if not 1 <= span <= 366:
            errors.append(f"Days: {typed['days']!r} is not a whole number from 1 to 366.")
            span = 30
    instants: dict[str, datetime | None] = {"since": None, "until": None}
    for name in instants:
        instants[name], problem = iso_time(typed[name])
        if problem:
            errors.append(f"{name.title()}: {problem}.")
    if typed["dag_id"] and dag_id_problem(typed["dag_id"]):
        errors.append(
            f"DAG: {typed['dag_id']!r} is not a DAG id (letters, digits, '_', '.', '-'); "
            "leave it empty for all."
        )
    scope_text = tidy_scope(typed["scope"]) or "*"
    if not re.fullmatch(SCOPE_PATTERN, scope_text):
        errors.append(
            f"Scope: {typed['scope']!r} is not a tag filter such as project=churn or project=churn,team=ml; "
            "leave it empty (or *) for all."
        )
        scope_text = "*"
    grouping = group_by_name(typed["group_by"]) if typed["group_by"] else "dag"
    if group_by_problem(grouping):
        errors.append(f"Group by: {grouping!r} is not one of {', '.join(GROUP_BY_CHOICES)} or tag:<name>.")
    filters, problems = check_filters(
        span, instants["since"], instants["until"], typed["dag_id"] or None, scope_text, until_name="Until"
    )
    errors += [f"{field.title()}: {problem}." for field, problem in problems]
    if errors:
        return PageForm(None, grouping, typed, errors)
    return PageForm(filters, grouping, typed, [])


def query_string(typed: dict[str, str], **changes: str) -> str:
    """The form's non-empty fields as a URL query (for links that keep the page's filters)."""
    values = {**{k: typed.get(k, "") for k in FORM_FIELDS}, **changes}
    return urlencode([(k, v) for k, v in values.items() if v])
