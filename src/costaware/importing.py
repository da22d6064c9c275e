"""One syntax for naming a Python object in a DAG argument: ``"package.module:attr"``.

Trainers, tuning objectives and policies given by name are imported with :func:`import_object`. The older
dotted form ``"package.module.attr"`` still works and warns (``DeprecationWarning``) with the new spelling.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from typing import Any

from costaware.core.errors import ConfigurationError


def split_path(path: str, *, what: str) -> tuple[str, str]:
    """``(module, attr)`` of ``"module:attr"``; the dotted ``"module.attr"`` with a ``DeprecationWarning``.

    Raises:
        ConfigurationError: neither form (no ``:`` and no ``.``, an empty part, or a part that is no Python
            name: a space, a ``/``, a second ``:``).
    """
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
        if module and attr:
            warnings.warn(
                f"{what} {path!r} uses the dotted form, which will stop working: write '{module}:{attr}'",
                DeprecationWarning,
                stacklevel=3,
            )
    names = [*module.split("."), attr]
    if not module or not attr or not all(name.isidentifier() for name in names):
        # "pkg.mod:fn " or "pkg/mod.py:fn" passed here and failed only where the trial ran.
        raise ConfigurationError(f"{what} must be 'package.module:name', got {path!r}")
    return module, attr


def import_object(path: str, *, what: str) -> Any:
    """The object ``path`` names (``"package.module:attr"``).

    Args:
        path: ``"package.module:attr"`` (``"package.module.attr"`` is deprecated).
        what: What the object is, for messages: ``"trainer"``, ``"objective"``.

    Raises:
        ConfigurationError: the path is malformed, or the module or attribute does not import.
    """
    module, attr = split_path(path, what=what)
    try:
        imported = importlib.import_module(module)
    except (ImportError, AttributeError) as e:
        # AttributeError: the module's own import failed (np.float, removed in NumPy 1.24), a code error that
        # no retry fixes; the closest-name hint below is only for the name looked up in it.
        raise ConfigurationError(f"cannot import {what} {path!r}: {e}") from e
    try:
        return getattr(imported, attr)
    except AttributeError as e:
        # The module is there: a misspelt name (boosting_trainr), which failed every trial by its name alone.
        close = closest_public_name(imported, attr)
        hint = f": did you mean '{module}:{close}'?" if close else ""
        raise ConfigurationError(f"cannot import {what} {path!r}: {e}{hint}") from e


def closest_public_name(module: object, name: str) -> str | None:
    """The public name in ``module`` closest to a misspelt ``name``, or None: what a "did you mean" names."""
    close = difflib.get_close_matches(name, [n for n in dir(module) if not n.startswith("_")], n=1)
    return close[0] if close else None
