"""The files of a ``local`` job's folder that say how it ended, and how they are written and read.

The supervisor (:mod:`costaware.adapters.compute.local_supervisor`) writes them, a poll
(:class:`costaware.adapters.compute.local.LocalBackend`) reads them: ``exit.json``'s exit code gives the
end's state, the last line of ``stderr.log`` its reason, and ``capped`` or ``time_limit`` a stop at a limit.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from costaware.adapters.compute import job_contract
from costaware.adapters.compute.base import JobState
from costaware.core.ledger import clipped_note

#: Exit codes that mean the capacity went away (or a store failed), not that the code failed.
INTERRUPTED_CODES = (*job_contract.RESUBMIT_EXIT_CODES, -signal.SIGTERM, -signal.SIGKILL)
#: Written when the job was stopped at its ``stop_after_seconds`` (``max_usd``).
CAPPED_FILE = "capped"
#: Written when the job was stopped at its ``max_runtime_seconds`` (the attempt's time limit).
TIME_LIMIT_FILE = "time_limit"


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    _write_text(path, json.dumps(dict(data)))


def _write_text(path: Path, text: str) -> None:
    """Whole or not there: a poll reading a half-written ``started`` took it as epoch 0 (56 years billed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # the supervisor and a poll may both write
    tmp.write_text(text)
    tmp.replace(path)


#: The launcher's last line when it passes the job's own exit code on: the job's line before it says why.
_PASSED_ON = re.compile(r"costaware-run: the job (exited -?\d+|was killed by SIG\w+)")


def _end_state(exit_code: int) -> JobState:
    """How a local job that exited with ``exit_code`` ended."""
    if exit_code == 0:
        return JobState.SUCCEEDED
    return JobState.INTERRUPTED if exit_code in INTERRUPTED_CODES else JobState.FAILED


def _reason(path: Path) -> str:
    """The last line of the job's stderr that says why it ended (not the launcher's "the job exited N")."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return ""
    told = [line for line in lines if not _PASSED_ON.fullmatch(line)]
    return clipped_note((told or lines or [""])[-1])
