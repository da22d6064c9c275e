"""The launcher's result of a successful attempt, as the operator checks it (pure, no Airflow).

``costaware-run`` writes it at ``COSTAWARE_RESULT_URI`` on exit 0 (the job's metrics, where its outputs went,
how many files and bytes, the attempt, the newest checkpoint step); :func:`parse_result` checks it before the
operator stores anything. ``costaware.adapters.compute.job_contract`` re-exports both names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from costaware.core.errors import ConfigurationError

__all__ = ["JobResult", "parse_result"]


@dataclass(frozen=True, slots=True)
class JobResult:
    """What the launcher reported for a successful attempt, checked.

    Attributes:
        metrics: The job's metrics by name (finite numbers).
        output_uri: Where the outputs were uploaded.
        files: How many files.
        bytes: How many bytes in all.
        attempt: The attempt that wrote it.
        checkpoint_step: The newest committed checkpoint step (None: the job never committed one).
    """

    metrics: Mapping[str, float | int]
    output_uri: str
    files: int
    bytes: int
    attempt: int
    checkpoint_step: int | None
    #: What the launcher warned of (a job that never checkpointed): the task log says it too.
    warnings: tuple[str, ...] = ()


def _same_location(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def _finite(value: float | int) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past a float's range (JSON holds 10**400): refused, not a traceback
        return False


def _shown(value: Any) -> str:
    """``value`` for a message; an int of hundreds of digits by its size (as costaware-run shows it)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an int of {len(str(abs(value)))} digits"
    return repr(value)


def parse_result(data: Any, *, job: str, where: str, attempt: int, output_uri: str) -> JobResult:
    """Check the result the launcher wrote for ``job``'s attempt ``attempt`` (pure).

    Raises:
        ConfigurationError: a field is missing or holds what the launcher never writes; the message names
            the job, the result's location, the field and its value, and that nothing was registered (the
            operator checks before it stores anything).
    """

    def bad(what: str) -> ConfigurationError:
        return ConfigurationError(
            f"result {where!r} of training job {job!r} {what}: it is written by costaware-run on exit 0, "
            "so run the command under costaware-run (the same costaware-runtime version as the provider's "
            "docs) and do not write that file yourself; nothing was registered"
        )

    if not isinstance(data, Mapping):
        raise bad(f"holds a {type(data).__name__}, not a JSON object")
    metrics = data.get("metrics")
    if not isinstance(metrics, Mapping) or not metrics:
        raise bad(f"has no metrics (got {metrics!r})")
    for name, value in metrics.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not isinstance(name, str) or not name.strip() or not number or not _finite(value):
            raise bad(f"has metric {name!r} = {_shown(value)}, not a named finite number")
    uri = data.get("output_uri")
    if not isinstance(uri, str) or not _same_location(uri, output_uri):
        raise bad(f"names output_uri {uri!r}, not this attempt's {output_uri!r}")
    counts: dict[str, int] = {}
    for key in ("files", "bytes", "attempt"):
        value = data.get(key)
        if type(value) is not int or value < 0:
            raise bad(f"has {key} = {value!r}, not a whole number")
        counts[key] = value
    if counts["files"] == 0:
        raise bad("lists no output files")
    if counts["attempt"] != attempt:
        raise bad(f"was written by attempt {counts['attempt']}, not by attempt {attempt}")
    step = data.get("checkpoint_step")
    if step is not None and (type(step) is not int or step < 0):
        raise bad(f"has checkpoint_step = {step!r}, not a step number or null")
    warnings = data.get("warnings") or []  # absent from an older launcher's result
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise bad(f"has warnings = {warnings!r}, not a list of texts")
    return JobResult(
        metrics=dict(metrics),
        output_uri=uri,
        files=counts["files"],
        bytes=counts["bytes"],
        attempt=counts["attempt"],
        checkpoint_step=step,
        warnings=tuple(warnings),
    )
