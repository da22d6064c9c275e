"""The cache key: one digest of a transform's inputs, code, parameters and library versions.

A key changes when an input changes, when the transform's code changes, when a parameter changes, or when
pandas/pyarrow change version; nothing else changes it.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterable, Mapping
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.fingerprint.canonical import canonical_params, digest
from costaware.core.fingerprint.code import CodeFingerprint
from costaware.core.fingerprint.inputs import InputFingerprint

#: Libraries whose version shapes a transform's output by default.
DEFAULT_LIBRARIES = ("pandas", "pyarrow")
#: Bumped when the way keys are derived changes, so old entries are never read with a new meaning.
KEY_SCHEME = "costaware-features-v1"


def library_versions(names: Iterable[str] = DEFAULT_LIBRARIES) -> dict[str, str]:
    """Installed versions of the libraries that shape a transform's output (``"absent"`` when missing)."""
    found: dict[str, str] = {}
    for name in sorted(set(names)):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


# -- the key --------------------------------------------------------------------------------------


def cache_key(
    inputs: Iterable[InputFingerprint],
    code: CodeFingerprint,
    params: Mapping[str, Any],
    libraries: Mapping[str, str],
) -> str:
    """The cache key: a 128-bit hex digest of inputs, code, parameters and library versions.

    Raises:
        ConfigurationError: two inputs share a name, or a parameter has no stable text form.
    """
    ordered = sorted(inputs, key=lambda i: i.name)
    names = [i.name for i in ordered]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"input names must be unique, got {names}")
    parts = [KEY_SCHEME, code.digest, canonical_params(params), json.dumps(dict(sorted(libraries.items())))]
    for item in ordered:
        parts += [item.name, item.digest]
    return digest(*parts)
