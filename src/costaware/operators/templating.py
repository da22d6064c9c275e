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
import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from costaware.core.given import not_given

# One test of what is a template, glue's: a Jinja comment ("{# ... #}") is one too, rendered away.
from costaware.glue import is_template as is_template

_BOOLS = {"true": True, "false": False, "True": True, "False": False}
#: The shape of a number literal (JSON's, or Python's with ``_``, ``0x``, ``.5``, ...); ``ast`` decides.
_NUMBER = re.compile(r"[+-]?[0-9.][0-9a-zA-Z_.+-]*")


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


def literal_text(text: str) -> Any:
    """A value written out as text: JSON, or the repr of a Python literal.

    That is what a template of a dict or a list renders to without ``render_template_as_native_obj``.

    Raises:
        ValueError: the text is neither.
    """
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text.strip())
    except (SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"{text[:80]!r} is neither JSON nor a Python literal") from e


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


def keyword_arguments(value: Any, name: str) -> Any:
    """A dict of keyword arguments (``trainer_params``, ``trainer_kwargs``) as an operator keeps it to render.

    A mapping is copied. A whole value that Airflow resolves only when the task runs is kept as written: a
    template (``"{{ params.trainer_params }}"``), an ``XComArg`` (``task.output``) or a ``dag.param``;
    :func:`rendered_keywords` reads what it rendered to. Plain text is read now (JSON or a Python dict).

    Raises:
        ConfigurationError: a number, a list, or text that is no dict; the message names ``name``.
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if is_template(value):
        return value
    if isinstance(value, str) or is_literal(value):
        return rendered_keywords(value, name)
    return value  # an XComArg or a dag.param: Airflow resolves it as the task runs


def rendered_keywords(value: Any, name: str) -> dict[str, Any]:
    """A rendered keyword-arguments argument as a dict.

    Without ``render_template_as_native_obj`` a template of a whole dict renders to its text (the dict's
    repr, or JSON with ``| tojson``): both are read. Empty, ``None`` or ``null`` (a param left blank) is no
    arguments.

    Raises:
        ConfigurationError: anything that is not a dict with string keys, naming ``name`` and what it got.
    """
    from costaware.training.plan import blank

    data: Any = value
    if blank(value.strip() if isinstance(value, str) else value) is None:
        return {}
    if isinstance(value, str):
        try:
            data = literal_text(value)
        except ValueError:
            data = None
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    if not isinstance(data, Mapping):
        from costaware.core.errors import ConfigurationError

        raise ConfigurationError(
            f"{name} must be a dict of keyword arguments, got {type(value).__name__} {shown}: give a dict, "
            "or a template or XCom that renders one (e.g. a dict param, or its JSON with '| tojson')"
        )
    if not all(isinstance(key, str) for key in data):
        from costaware.core.errors import ConfigurationError

        keys = sorted(repr(key) for key in data if not isinstance(key, str))
        raise ConfigurationError(
            f"{name} must name each argument with a string, got the keys {', '.join(keys)} in {shown}"
        )
    return dict(data)


def refuse_relative_store(owner: str, name: str, value: object, *, optional: bool = False) -> None:
    """Refuse a store written out in the DAG as a relative local path, when the DAG is parsed.

    The store would resolve against the folder each worker runs the task in (a retry could read another
    store than its first try wrote); it was refused only when the task ran. A template, an ``XComArg`` or a
    ``dag.param`` is checked once rendered, by the store itself.

    Args:
        owner: The operator and task, as a refusal names them.
        name: The argument's name.
        value: The argument as written in the DAG.
        optional: The argument may be left out (a holdout where the figures come from elsewhere): a value
            that is not given (:func:`~costaware.core.given.not_given`) reads as left out, not as a store.

    Raises:
        ConfigurationError: ``value`` is a literal relative path (``models/rel``, ``file:models/rel``), or,
            unless ``optional``, ``None`` / ``null`` (what a template of an unset param renders).
    """
    from pathlib import PurePosixPath
    from urllib.parse import urlparse

    if not isinstance(value, str) or not is_literal(value) or not value.strip():
        return
    if optional and not_given(value):
        return
    text = value.strip()
    from costaware.core.errors import ConfigurationError

    if not_given(text):  # "None" was let through, and failed only when the task ran, as a relative path
        raise ConfigurationError(
            f"{owner}: {name} is {value!r}, which names no location (it is what a template of an unset "
            "param renders): give an absolute folder, file:///... or an s3:// URI"
        )
    parsed = urlparse(text)
    if parsed.scheme not in ("", "file") or parsed.netloc:
        return
    path = parsed.path if parsed.scheme == "file" else text
    if path.startswith(("/", "~")):  # "~/models" is expanded to the worker's home, an absolute folder
        return
    raise ConfigurationError(
        f"{owner}: {name} {value!r} is a relative path: it would resolve against the folder each worker "
        f"runs the task in; give an absolute folder such as {str(PurePosixPath('/srv/ml') / path)!r} or an "
        "s3:// URI"
    )


def refuse_root_store(
    owner: str,
    name: str,
    value: object,
    *,
    example: str | None = None,
    on_this_machine: bool = True,
) -> None:
    """Refuse a local store that is the machine's root, ``/`` (``//``, ``/.``, ``file:///``), as given.

    ``checkpoint_store='/'`` (what ``"$UNSET/"`` renders) lost its trailing slash to ``""``: each job's
    checkpoints and spec went to ``/<dag>/<task>/...`` and ``/_jobs/...``, folders made in the root.
    ``~`` is checked as expanded: with ``HOME=/`` (OpenShift's random uids) it is the root too.
    A template or ``XComArg`` is checked once rendered.

    Args:
        owner: The operator and task, as a refusal names them.
        name: The argument's name.
        value: The argument, as written or as rendered.
        example: A folder of its own to give instead; by default the argument's own
            (:func:`~costaware.adapters.object_store.location.root_example`).
        on_this_machine: The task writes the store on this machine (its start on the worker); False when
            the DAG is parsed, where ``~`` is left to the worker: its home is not the DAG processor's.

    Raises:
        ConfigurationError: ``value`` is a local path or ``file:`` URI that names ``/``.
    """
    import posixpath
    from urllib.parse import urlparse

    from costaware.adapters.object_store.location import refuse_machine_root, root_example

    if not isinstance(value, str) or not is_literal(value):
        return
    text = value.strip()
    parsed = urlparse(text)
    if parsed.scheme not in ("", "file") or parsed.netloc not in ("", "localhost"):
        return
    path = parsed.path if parsed.scheme == "file" else text
    home = ""
    if path.startswith("~") and not on_this_machine:
        # A DAG processor with HOME=/ refused '~' that the worker's home takes; one with no home at all
        # failed the whole DAG file for '~/models'.
        return
    if path.startswith("~"):  # the stores expand it: "~" with HOME=/ wrote its folders in /
        expanded = posixpath.expanduser(path)
        tilde = path.split("/", 1)[0]
        home = f" (the home folder {tilde} is {posixpath.expanduser(tilde)!r} here)"
        path = expanded
    # A symbolic link to / wrote its folders there too; only this machine's disk says where one leads.
    refuse_machine_root(
        f"{owner}: {name}",
        value,
        path,
        follow_links=on_this_machine,
        example=example or root_example(name),
        home=home,
    )
