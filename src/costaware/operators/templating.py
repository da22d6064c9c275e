"""Numbers back from Jinja: a templated trainer argument such as ``"{{ params.epochs }}"`` renders to text.

Without ``render_template_as_native_obj`` on the DAG, Airflow renders every template to a string, so
``trainer_params={"epochs": "{{ params.epochs }}"}`` reaches the trainer as ``{"epochs": "5"}``. The training
operators keep the value as written in the DAG and, after rendering, turn each value that was a template and
rendered to exactly a number or bool literal (``5``, ``-0.1``, ``1e-3``, ``True``, ``false``) back into an
``int``, ``float`` or ``bool``. Every other string, and every value that was not a template, stays as it is.
"""

from __future__ import annotations

import ast
import copy
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

#: What marks a string as a Jinja template (an expression or a statement).
JINJA_MARKERS = ("{{", "{%")
_BOOLS = {"true": True, "false": False, "True": True, "False": False}
#: The shape of a number literal (JSON's, or Python's with ``_``, ``0x``, ``.5``, ...); ``ast`` decides.
_NUMBER = re.compile(r"[+-]?[0-9.][0-9a-zA-Z_.+-]*")


def is_template(value: object) -> bool:
    """Whether ``value`` is a string Airflow renders as a Jinja template."""
    return isinstance(value, str) and any(marker in value for marker in JINJA_MARKERS)


def is_literal(value: object) -> bool:
    """Whether ``value`` was written out in the DAG and can be checked when the DAG is parsed.

    None, a bool, a number, a string that is no template, or a list, tuple or set of those. Anything else is
    resolved by Airflow only when the task runs (a template, an ``XComArg``, a ``dag.param(...)``): it is
    checked after rendering.
    """
    if value is None or isinstance(value, bool | int | float | Decimal):
        return True
    if isinstance(value, str):
        return not is_template(value)
    if isinstance(value, list | tuple | set | frozenset):
        return all(isinstance(item, str | int | float) and is_literal(item) for item in value)
    return False


def refuse_template(name: str, value: object, *, write: str) -> None:
    """Refuse a template in ``name``, an argument Airflow does not render: its text would be used as it is.

    ``write``: what to write instead, for the message.

    Raises:
        ConfigurationError: ``value`` is a template.
    """
    if is_template(value):
        from costaware.core.errors import ConfigurationError

        raise ConfigurationError(f"{name} {value!r} is a template, but {name} is not rendered: {write}")


def is_written_out(value: object) -> bool:
    """:func:`is_literal`, and also a mapping whose keys and values are all written out (a search space)."""
    if isinstance(value, Mapping):
        return all(is_literal(k) and is_written_out(v) for k, v in value.items())
    return is_literal(value)


def as_written(value: Any) -> Any:
    """A copy of an argument as the DAG wrote it, kept to tell later which values were templates."""
    return copy.deepcopy(value)


def native_literal(text: str) -> Any:
    """``text`` as an ``int``, ``float`` or ``bool`` when it is exactly such a JSON or Python literal.

    Anything else comes back as ``text``.

    Surrounding spaces, ``None``/``null``, NaN and infinity stay strings too.
    """
    if text in _BOOLS:
        return _BOOLS[text]
    if not _NUMBER.fullmatch(text):
        return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value):
        return value
    return text


def native_rendered(written: Any, rendered: Any) -> Any:
    """``rendered``, each string that was a template in ``written`` and is a number or bool literal converted.

    Mappings are matched by key and lists/tuples by position; where the shapes differ (a whole mapping from
    one template, say) the rendered value is left alone.

    Args:
        written: The argument as the DAG wrote it (see :func:`as_written`).
        rendered: The same argument after Airflow rendered its templates.
    """
    if isinstance(rendered, str):
        return native_literal(rendered) if is_template(written) else rendered
    if isinstance(rendered, Mapping) and isinstance(written, Mapping):
        return {key: native_rendered(written.get(key), value) for key, value in rendered.items()}
    sequences = isinstance(rendered, (list, tuple)) and isinstance(written, (list, tuple))
    if sequences and len(rendered) == len(written):
        return type(rendered)(native_rendered(w, r) for w, r in zip(written, rendered, strict=True))
    return rendered
