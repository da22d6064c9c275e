"""Shared helpers for the benchmarks: the JSON last line, readable tables, real local servers."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the same real-server helpers the tests use


def scratch_dir(prefix: str) -> Path:
    """A new temporary folder, removed when the benchmark's process exits (a killed run leaves it)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def scratch_airflow_home(prefix: str) -> None:
    """Point ``AIRFLOW_HOME`` at a scratch folder (its task logs), unless the caller set one."""
    if "AIRFLOW_HOME" not in os.environ:
        os.environ["AIRFLOW_HOME"] = str(scratch_dir(prefix))


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
