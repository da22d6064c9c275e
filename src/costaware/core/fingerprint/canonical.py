"""Stable text and digests of values: the two things every part of a cache key is made of.

Equal parameters must give equal text whatever their order or type spelling (a tuple and a list, a set in any
order), and a value with no stable text (an object, a DataFrame) is refused rather than keyed by its ``repr``,
which could change between runs without the value changing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from pathlib import PurePath
from typing import Any

from costaware.core.errors import ConfigurationError


def digest(*parts: str | bytes) -> str:
    """A 128-bit hex digest of ``parts``, each length-prefixed so that no two sequences of parts collide."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))  # length-prefixed, so ("ab", "c") != ("a", "bc")
        h.update(data)
    return h.hexdigest()


def _plain(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return {"__float__": repr(value)}
        return value
    if isinstance(value, Decimal):
        return {"__decimal__": str(value)}
    if isinstance(value, (datetime, date)):
        return {"__datetime__": value.isoformat()}
    if isinstance(value, timedelta):
        return {"__timedelta__": value.total_seconds()}
    if isinstance(value, Enum):
        return _plain(value.value, where)
    if isinstance(value, PurePath):
        return {"__path__": str(value)}
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigurationError(f"parameter {where} has a non-string key {key!r}: use string keys")
            out[key] = _plain(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        return {"__set__": sorted(json.dumps(_plain(v, where), sort_keys=True) for v in value)}
    raise ConfigurationError(
        f"parameter {where} is a {type(value).__name__} ({value!r:.60}), which has no stable fingerprint: "
        "pass JSON-like values (str, numbers, bool, None, lists, dicts, Decimal, dates)"
    )


def canonical_params(params: Mapping[str, Any]) -> str:
    """Parameters as canonical JSON (sorted keys, no spaces), so equal parameters give equal text.

    Raises:
        ConfigurationError: a value has no stable text form (an object, a DataFrame, ...).
    """
    return json.dumps(_plain(dict(params), "params"), sort_keys=True, separators=(",", ":"))


def canonical_value(value: Any, where: str) -> str:
    """Any JSON-like value as canonical JSON, like :func:`canonical_params`; ``where`` names it in errors."""
    return json.dumps(_plain(value, where), sort_keys=True, separators=(",", ":"))
