"""The job contract of a team's own training command, as the provider sees it (pure, no Airflow).

Every attempt of a user command runs as ``costaware-run [--no-sync] -- <command...>`` (the launcher of the
``costaware-runtime`` distribution, ``runtime/``) with the environment below. The names and exit codes are
the runtime's own (``costaware_runtime.contract``, a dependency of the provider; the runtime never imports
the provider); this module adds what only the provider needs: where an attempt's files go, and what an exit
code means for the task.

Locations of one run (the same for every attempt unless marked per attempt)::

    <checkpoint_store>/<run key>                           COSTAWARE_CHECKPOINT_URI (attempt 2 resumes here)
    <model_store>/_staging/<job base name>/attempt-<n>/output       COSTAWARE_OUTPUT_URI (per attempt)
    <model_store>/_staging/<job base name>/attempt-<n>/result.json  COSTAWARE_RESULT_URI (per attempt)

The backend adds the container's own folders: ``COSTAWARE_CHECKPOINT_DIR``, ``COSTAWARE_OUTPUT_DIR`` and
``COSTAWARE_METRICS_PATH``.

The built-in trainers run on the same contract: ``costaware-run --no-outputs [--no-sync] -- python -m
costaware.training.entrypoint --spec URI`` with the same variables but the output and result ones (the
training stores its model version itself and writes its summary to the spec's ``result_uri``).

It lives with the compute backends, which set it up for a job; the training side reads the same names. The
check of the launcher's result (``COSTAWARE_RESULT_URI``) is in ``job_result``, re-exported here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

# One spelling of the contract: the runtime's (a dependency of the provider, standard library only).
from costaware_runtime.contract import (
    ATTEMPT,
    CHECKPOINT_DIR,
    CHECKPOINT_EVERY_SECONDS,
    CHECKPOINT_URI,
    DEFAULT_GRACE_SECONDS,
    EXIT_CONTRACT_ERROR,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_PREEMPTED_BEFORE_CHECKPOINT,
    EXIT_PREEMPTED_WITHOUT_CHECKPOINT,
    EXIT_SYNC_FAILED,
    GRACE_SECONDS,
    MANIFEST_NAME,
    MARKET,
    METRICS_PATH,
    OUTPUT_DIR,
    OUTPUT_URI,
    RESULT_URI,
    S3_ENDPOINT_URL,
)

# The result file's check has its own module; callers and tests keep importing it from here.
from costaware.adapters.compute.job_result import JobResult, parse_result
from costaware.core.errors import ConfigurationError

__all__ = [
    "ATTEMPT",
    "CHECKPOINT_DIR",
    "CHECKPOINT_EVERY_SECONDS",
    "CHECKPOINT_FOLDER",
    "CHECKPOINT_URI",
    "DEFAULT_GRACE_SECONDS",
    "ENTRYPOINT",
    "EXIT_CONTRACT_ERROR",
    "EXIT_OK",
    "EXIT_PREEMPTED",
    "EXIT_PREEMPTED_BEFORE_CHECKPOINT",
    "EXIT_PREEMPTED_WITHOUT_CHECKPOINT",
    "EXIT_SYNC_FAILED",
    "GRACE_SECONDS",
    "LAUNCHER",
    "LAUNCHER_MARGIN_SECONDS",
    "MANIFEST_NAME",
    "MARKET",
    "METRICS_FILE",
    "METRICS_PATH",
    "MISSING_LAUNCHER_ADVICE",
    "OUTPUT_DIR",
    "OUTPUT_FOLDER",
    "OUTPUT_URI",
    "REGISTERED_FILE",
    "RESUBMIT_EXIT_CODES",
    "RESULT_FILE",
    "RESULT_URI",
    "S3_ENDPOINT_URL",
    "STAGING_FOLDER",
    "JobResult",
    "attempt_folder",
    "attempt_uris",
    "builtin_command",
    "check_command",
    "check_grace_seconds",
    "contract_environment",
    "exit_hint",
    "launcher_command",
    "launcher_grace_seconds",
    "launcher_not_found",
    "parse_result",
]

#: The launcher's console script (``costaware_runtime.launcher:main``; ``python -m costaware_runtime``).
LAUNCHER = "costaware-run"
#: What the launcher keeps after its grace period, before the platform's SIGKILL, to push the last checkpoint.
LAUNCHER_MARGIN_SECONDS = 10


def launcher_grace_seconds(kill_after_seconds: float) -> float:
    """The launcher's grace period where the platform kills it ``kill_after_seconds`` after SIGTERM.

    It ends :data:`LAUNCHER_MARGIN_SECONDS` before that kill (at least 1 s), so its last push comes first.
    """
    return max(1.0, kill_after_seconds - LAUNCHER_MARGIN_SECONDS)


#: The module of the built-in trainers' job (``python -m costaware.training.entrypoint --spec URI``).
ENTRYPOINT = "costaware.training.entrypoint"

#: Exit codes of an attempt that the capacity (or a store), not the code, ended: it is submitted again.
RESUBMIT_EXIT_CODES = (EXIT_PREEMPTED, EXIT_PREEMPTED_BEFORE_CHECKPOINT, EXIT_SYNC_FAILED)
#: Where the local folders of an attempt live inside the job's working folder (and its staging folder).
CHECKPOINT_FOLDER, OUTPUT_FOLDER, METRICS_FILE = "checkpoints", "output", "metrics.json"
#: The staging folder of the model store, and the names in an attempt's folder there.
STAGING_FOLDER, RESULT_FILE, REGISTERED_FILE = "_staging", "result.json", "registered.json"

_HINTS = {
    EXIT_CONTRACT_ERROR: (
        "exit 2: your command exited 2 itself (e.g. python: can't open file: check the script's path), or it "
        "broke the contract (exited 0 without a metrics file or with an empty output folder), a bucket it "
        "names does not exist, or "
        "costaware-run could not start; the job's last log lines (the launcher's begin with "
        "'costaware-run:') say which"
    ),
    EXIT_PREEMPTED_WITHOUT_CHECKPOINT: (
        "the job exited 75 (preempted) without a notice and without a committed checkpoint (exit 76): save "
        "and commit a checkpoint before exiting 75, or let SIGTERM end it"
    ),
    126: (
        "the command was found but could not run (exit 126): make it executable in the image (chmod +x), "
        "run it through its interpreter (python3 train.py), or give a script a first line such as "
        "#!/usr/bin/env python3; a folder is no program either. The job's last log lines (costaware-run's "
        "begin with 'costaware-run:') say which"
    ),
}


def check_command(value: Any, *, owner: str = "command", written: Sequence[Any] | None = None) -> list[str]:
    """The user's command as a list of non-empty strings.

    Args:
        value: The command, rendered where it was templated.
        owner: How messages name it (``RemoteTrainingOperator 'train' command``).
        written: The command as the DAG wrote it, before rendering: an element that rendered empty is
            named with its template (``'{{ params.script }}'``), as a param left empty is the usual cause.

    Raises:
        ConfigurationError: ``value`` is a string (it would be split wrongly), empty, or has a non-string or
            empty element; the message names the value and shows the list form, or each bad element by
            position with what to do for its kind.
    """
    if isinstance(value, str):
        raise ConfigurationError(
            f"{owner} must be a list of strings, got the string {value!r}: split it, e.g. "
            f"{value.split() or ['python', 'train.py']!r}"
        )
    if not isinstance(value, Sequence) or not value:
        raise ConfigurationError(
            f"{owner} must be a non-empty list of strings such as ['python', 'train.py'], got {value!r}"
        )
    templates = list(written) if written is not None and len(written) == len(value) else [None] * len(value)
    problems: list[str] = []
    hints: dict[str, None] = {}  # in the order first needed, each once
    for position, (item, template) in enumerate(zip(value, templates, strict=True)):
        if isinstance(item, str) and item.strip():
            continue
        if isinstance(template, str) and template != item:
            problems.append(f"[{position}] {item!r} rendered from {template!r}")
            hints["give what it reads a value, or drop the element"] = None
        elif isinstance(item, str):
            problems.append(f"[{position}] {item!r}")
            hints["drop empty elements"] = None
        elif isinstance(item, int | float) and not isinstance(item, bool):
            problems.append(f"[{position}] {item!r}")
            hints["quote numbers ('3', not 3)"] = None
        else:
            problems.append(f"[{position}] {item!r} ({type(item).__name__})")
            hints["give each element as a string"] = None
    if problems:
        raise ConfigurationError(
            f"{owner} {list(value)!r} has elements that are not non-empty strings: {'; '.join(problems)}: "
            + "; ".join(hints)
        )
    return list(value)


def seconds_above_zero(value: object) -> float | None:
    """``value`` as a finite number of seconds > 0, or None where it is none ("inf", "nan", text, 0)."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def check_grace_seconds(value: Any) -> float:
    """``preemption_grace_seconds`` as a number of seconds > 0.

    Raises:
        ConfigurationError: naming the value.
    """
    seconds = seconds_above_zero(value)
    if seconds is None:
        raise ConfigurationError(
            f"preemption_grace_seconds must be a number of seconds > 0, got {value!r}: AWS gives 120 s "
            f"between the spot notice and the stop, so keep it at most {DEFAULT_GRACE_SECONDS:g}"
        )
    return seconds


def launcher_command(command: Sequence[str], *, no_sync: bool = False, no_outputs: bool = False) -> list[str]:
    """``costaware-run [--no-sync] [--no-outputs] -- <command...>``.

    Args:
        command: The job's command.
        no_sync: The platform syncs the checkpoint folder itself (SageMaker).
        no_outputs: The job stores its model itself (the built-in trainers): no output folder.
    """
    options = [*(["--no-sync"] if no_sync else []), *(["--no-outputs"] if no_outputs else [])]
    return [LAUNCHER, *options, "--", *command]


def builtin_command(spec_uri: str, *, no_sync: bool = False, python: str = "python") -> list[str]:
    """The built-in trainers' job under the launcher: ``costaware-run --no-outputs -- python -m ... --spec``.

    Args:
        spec_uri: The training spec.
        no_sync: The platform syncs the checkpoint folder itself (SageMaker).
        python: The interpreter of the entrypoint (the local backend's own; ``python`` in an image).
    """
    return launcher_command([python, "-m", ENTRYPOINT, "--spec", spec_uri], no_sync=no_sync, no_outputs=True)


def attempt_folder(base_name: str, attempt: int) -> str:
    """The folder of the model store where attempt ``attempt`` of run ``base_name`` stages its outputs."""
    return f"{STAGING_FOLDER}/{base_name}/attempt-{int(attempt)}"


def attempt_uris(model_store: str, base_name: str, attempt: int) -> tuple[str, str]:
    """``(COSTAWARE_OUTPUT_URI, COSTAWARE_RESULT_URI)`` of one attempt: both under the model store."""
    folder = f"{str(model_store).rstrip('/')}/{attempt_folder(base_name, attempt)}"
    return f"{folder}/{OUTPUT_FOLDER}", f"{folder}/{RESULT_FILE}"


def contract_environment(
    *,
    checkpoint_uri: str,
    output_uri: str = "",
    result_uri: str = "",
    attempt: int,
    market: str,
    grace_seconds: float,
    work_dir: str,
    checkpoint_dir: str | None = None,
    checkpoint_every_seconds: float | None = None,
) -> dict[str, str]:
    """The contract's variables of one attempt; ``work_dir`` holds the job's local folders.

    Args:
        checkpoint_uri: The run's checkpoint location (the same for every attempt); empty: not set.
        output_uri: Where the launcher uploads the output folder on exit 0; empty: no output folder (a job
            run with ``--no-outputs``, which stores its model itself).
        result_uri: Where the launcher writes its result on exit 0; empty: not set.
        attempt: 1, 2, ...
        market: ``spot`` or ``on_demand``.
        grace_seconds: SIGTERM to SIGKILL.
        work_dir: A writable folder of the job's machine (or container).
        checkpoint_dir: The local checkpoint folder, when the platform fixes it (SageMaker's
            ``/opt/ml/checkpoints``); default ``<work_dir>/checkpoints``.
        checkpoint_every_seconds: How often the attempt should checkpoint
            (``costaware_runtime.CheckpointTimer`` reads it); None: not set.
    """
    work = work_dir.rstrip("/")
    variables = {
        CHECKPOINT_DIR: checkpoint_dir or f"{work}/{CHECKPOINT_FOLDER}",
        CHECKPOINT_URI: checkpoint_uri,
        OUTPUT_DIR: f"{work}/{OUTPUT_FOLDER}" if output_uri else "",
        OUTPUT_URI: output_uri,
        METRICS_PATH: f"{work}/{METRICS_FILE}",
        RESULT_URI: result_uri,
        ATTEMPT: str(int(attempt)),
        MARKET: market,
        GRACE_SECONDS: f"{float(grace_seconds):g}",
        CHECKPOINT_EVERY_SECONDS: "" if checkpoint_every_seconds is None else f"{checkpoint_every_seconds:g}",
    }
    return {name: value for name, value in variables.items() if value}


def exit_hint(exit_code: int | None, reason: str = "") -> str:
    """What an attempt's exit code means under the contract, for a failed task's message.

    Args:
        exit_code: The job's exit code (None: unknown).
        reason: Why the backend says it ended (the job's last log line on ``local``): for exit 127, it tells
            whether ``costaware-run`` itself or the command's first element was not found.
    """
    if exit_code is None:
        return ""
    if reason.startswith(_NEVER_STARTED_REASONS):
        # The runtime could not start the command (exit 128 is its own code): there is no code error and
        # no log line to read, only the runtime's message, which the reason quotes.
        return (
            f"the container never started (exit {exit_code}: the container runtime could not run its "
            "command), so it has no log lines: fix the image as the runtime's message says; not retried"
        )
    if exit_code == 127:
        return _not_found_hint(reason)
    if exit_code in _HINTS:
        return _HINTS[exit_code]
    if exit_code > 128:
        return f"the job was killed by signal {exit_code - 128} (exit {exit_code}); it is not retried"
    return f"the command exited {exit_code}: a code error, not retried (see its last log lines)"


#: A container runtime's reason for a container whose command it could not start (containerd, Docker), and
#: AWS Batch's (ECS's) for one it could not start or pull.
_NEVER_STARTED_REASONS = (
    "StartError",
    "ContainerCannotRun",
    "CannotStartContainerError",
    "CannotPullContainerError",
)

#: What a container runtime's start error naming a missing ``costaware-run`` asks for (every backend's words).
MISSING_LAUNCHER_ADVICE = (
    f"the image has no {LAUNCHER}: install costaware-runtime[s3] in it, as runtime/Dockerfile.train.example "
    "does"
)


def launcher_not_found(text: str) -> bool:
    """Whether ``text`` (a log line, a runtime's message) says ``costaware-run`` is not in the image."""
    return bool(_LAUNCHER_NOT_FOUND.search(text))


#: A shell's or a container runtime's words for a missing ``costaware-run``: ``sh: 1: costaware-run: not
#: found``, ``exec: "costaware-run": executable file not found in $PATH``, ``bash: costaware-run: command not
#: found`` (at the end: the launcher's own line goes on with the program it did not find).
_LAUNCHER_NOT_FOUND = re.compile(
    rf"{LAUNCHER}\W{{0,3}}(?:(?:executable file )?not found|no such file|command not found\s*$)",
    re.IGNORECASE,
)


def _not_found_hint(reason: str) -> str:
    """Exit 127: which program was not found, where the reason tells.

    It said to check the command's first element even where the image had no ``costaware-run`` and the
    command never started.
    """
    said = reason or ""
    if launcher_not_found(said):
        return (
            f"{LAUNCHER} itself was not found in the image (exit 127), so the command never started: install "
            "costaware-runtime in the image (pip install costaware-runtime), on the PATH of the image's user"
        )
    if f"{LAUNCHER}: " in said:  # the launcher's own line: it ran, and names the program it did not find
        return (
            f"{LAUNCHER} started, and a program the command needs was not found (exit 127): install it in "
            "the image, or fix the command's first element (its full path, or the image's PATH)"
        )
    return (
        f"a program was not found (exit 127): {LAUNCHER} itself (install costaware-runtime in the image) or "
        f"the command's first element (fix it, or the image's PATH); the job's last log lines say which: "
        f"{LAUNCHER}'s own begin with '{LAUNCHER}:', and there are none where it is missing"
    )
