"""Shared helpers for the benchmarks: the JSON last line, readable tables, real local servers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the same real-server helpers the tests use


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def emit(result: dict[str, Any], as_json: bool) -> None:
    """Print the result; with --json its last line is one JSON object (what benchmarks/README.md quotes)."""
    if as_json:
        print(json.dumps(result, sort_keys=True, default=str))
