"""Path safety for the feature store: keys and relative paths that can never name a place outside its root.

Keys and prefixes come from users (the CLI, operator arguments) and end up in local paths and S3 keys; they
are checked here, before any adapter joins them to a root.
"""

from __future__ import annotations

import re

from costaware.core.errors import ConfigurationError

_KEY = re.compile(r"^[0-9a-f]{16,128}$")
_DRIVE = re.compile(r"^[A-Za-z]:")


def validate_key(key: str) -> str:
    """Check that ``key`` is a cache key (lower-case hex), so it can never name a path outside the store.

    Raises:
        ConfigurationError: anything else, e.g. ``../x`` or ``/etc``.
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ConfigurationError(
            f"cache key {key!r} is not a key: keys are 16-128 lower-case hex characters, "
            "as printed by `costaware cache list`"
        )
    return key


PLAIN_NAMES = "use a relative path of plain names such as 'team/features'"


def safe_relative_path(value: str, *, what: str = "path", advice: str = PLAIN_NAMES) -> str:
    r"""Normalise a relative path or prefix (``a/b/``) and reject anything that could leave its root.

    Rejected: empty segments (``a//b``), ``.`` or ``..`` segments, absolute paths (``/x``, ``C:\x``),
    backslashes and NUL bytes. A trailing ``/`` is dropped.

    ``advice``: what the message tells to do instead (a caller checking part of a URI says it its way).

    Raises:
        ConfigurationError: the value is unsafe; the message names it.
    """
    if not isinstance(value, str):
        raise ConfigurationError(f"{what} must be a string, got {type(value).__name__}")
    text = value[:-1] if value.endswith("/") else value
    problem = ""
    if value.startswith("/") or _DRIVE.match(value):
        problem = "is absolute"
    elif "\\" in value or "\x00" in value:
        problem = "contains a backslash or NUL byte"
    elif text and any(seg in ("", ".", "..") for seg in text.split("/")):
        problem = "has an empty, '.' or '..' segment"
    if problem:
        raise ConfigurationError(f"{what} {value!r} {problem}: {advice}")
    return text
