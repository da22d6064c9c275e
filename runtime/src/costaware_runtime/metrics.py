"""The job's metrics: a JSON object of named finite numbers at ``COSTAWARE_METRICS_PATH``."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, SupportsFloat

from costaware_runtime import _files
from costaware_runtime.contract import METRICS_PATH, local_path
from costaware_runtime.errors import ContractError, MetricsError

_HOW = "write it with costaware_runtime.write_metrics({'rmse': 3.2})"


def check_metrics(metrics: Mapping[Any, object], where: str) -> dict[str, float | int]:
    """``metrics`` as a plain dict, if every key is a non-empty string and every value a finite number.

    Raises:
        MetricsError: Naming ``where``, the key and the value at fault.
    """
    if not metrics:
        raise MetricsError(f"{where} holds no metrics: {_HOW}")
    checked: dict[str, float | int] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name.strip():
            raise MetricsError(f"{where}: metric name {name!r} is not a non-empty string")
        # bool is an int subclass, and True as a metric is almost always a bug in the job
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise MetricsError(
                f"{where}: metric {name!r} is {value!r} ({type(value).__name__}), not a number: {_HOW}"
            )
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an int past a float's range (10**400): said, not a traceback
            finite = False
        if not finite:
            shown = (
                f"{value!r}"
                if isinstance(value, float) or abs(value) < 10**30
                else f"an int of {len(str(value))} digits"
            )
            raise MetricsError(f"{where}: metric {name!r} is {shown}, not a finite number")
        checked[name] = value
    return checked


def write_metrics(metrics: Mapping[str, SupportsFloat], path: Path | str | None = None) -> Path:
    """Write ``metrics`` (replacing earlier ones) atomically to ``path`` or ``COSTAWARE_METRICS_PATH``.

    Values may be any real numbers (numpy and torch scalars too: they are converted with ``float``).

    Returns:
        The file written.

    Raises:
        MetricsError: A name or value is not allowed, or no path is given and the variable is unset or
            holds a URI.
    """
    target = path if path is not None else os.environ.get(METRICS_PATH, "").strip()
    if not target:
        raise MetricsError(f"{METRICS_PATH} is not set: run the job under costaware-run, or pass path=")
    if path is None:
        try:
            local_path(METRICS_PATH, str(target))
        except ContractError as e:  # s3://... wrote a local file under a folder named "s3:"
            raise MetricsError(str(e)) from None
    if not isinstance(metrics, Mapping):  # a list or a bare number: AttributeError 'items' before
        raise MetricsError(
            f"write_metrics takes a mapping of names to numbers, got {type(metrics).__name__} "
            f"{metrics!r:.80}: write e.g. write_metrics({{'rmse': 3.2}})"
        )
    plain = {name: _plain_number(value) for name, value in metrics.items()}
    checked = check_metrics(plain, str(target))
    _files.write_json(Path(target), checked)
    return Path(target)


def read_metrics(path: Path | str) -> dict[str, float | int]:
    """The metrics in ``path``.

    Raises:
        MetricsError: The file is missing, not JSON, not an object, or holds a non-finite or non-number.
    """
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MetricsError(f"the job wrote no metrics file {path}: {_HOW}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise MetricsError(f"cannot read metrics file {path}: {e}") from e
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise MetricsError(f"metrics file {path} is not JSON ({e}): {_HOW}") from e
    if not isinstance(data, dict):
        raise MetricsError(f"metrics file {path} holds a {type(data).__name__}, not a JSON object: {_HOW}")
    return check_metrics(data, f"metrics file {path}")


def _plain_number(value: object) -> object:
    # numpy and torch scalars are not int/float subclasses (np.float64 is, np.float32 is not)
    if isinstance(value, bool | int | float) or not hasattr(value, "__float__"):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):  # a tensor of many values: check_metrics names it
        return value
