"""Whether an argument was given: the one reading of "not given" that every check and every bill shares.

An Airflow template of a param left unset renders Python's None as the text ``None`` (``{{ params.rate }}``),
or ``null`` through ``| tojson``; a trigger form, or a template with a space around it, adds whitespace.
So a value is not given when it is None, or text that, stripped, is empty, ``None`` or ``null``. Only those
exact words: ``none`` or ``NULL`` is what no template renders of None, and fails the value's own check,
named (``higher_is_better``, which read them as not given before this rule, still does for one release,
with a DeprecationWarning). Where a check and the bill read a value by two rules, a rendered ``" "`` was
refused before training that the bill would have priced from the catalog.
"""

from __future__ import annotations

from typing import TypeVar

#: What a template of an unset param renders, once stripped.
UNSET_TEXTS = ("", "None", "null")

_Value = TypeVar("_Value")


def not_given(value: object) -> bool:
    """Whether ``value`` gives nothing: None, blank, or what a template of an unset param renders."""
    return value is None or (isinstance(value, str) and value.strip() in UNSET_TEXTS)


def blank(value: _Value | None) -> _Value | None:
    """``value`` as given (not stripped), or None where it is not given (see :func:`not_given`)."""
    return None if not_given(value) else value


def names_nothing(what: str, value: object) -> str:
    """The refusal of a location that is not given, one wording wherever a store or file is opened.

    A model store ``null`` read as a relative path offered ``/srv/ml/null`` as the fix.
    """
    return (
        f"{what} {value!r} names nothing (what a template renders of a param or XCom that is not set): give "
        "a location"
    )
