"""A remote attempt's egress across regions: the ledger key it takes, and its write, direct or drained.

Keyed by the attempt's job name (``egress:<name>``), so that a retry following the job adds nothing; by name
and run where the row under the name's key is another run's (a cleared task's new try runs the job again
under its name). The direct bill (``AttemptBilling``) and the spool's drain (a killed try's bill kept while
the ledger was down, its egress with it) key and write it alike here, so each run is billed once whichever
writes first. Imports neither the spool nor the bill (both import it).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

log = logging.getLogger(__name__)

#: How far the backend's clock may run ahead of the workers' before an unmarked egress row written before a
#: run's start is taken as another run's (nearer: kept under the name's key, this run's drop warned of).
CLOCK_SKEW_MARGIN_SECONDS = 600.0

#: The run an egress entry's note marks (``attempt 3 moved from us-east-1 to us-west-2a, run 3f2a...: ...``).
_EGRESS_NOTE_RUN = re.compile(r"^attempt \d+ moved from \S+ to \S+, run ([\w-]+): ")


@dataclass(frozen=True, slots=True)
class EgressRun:
    """The run of a job's name whose egress is billed (JSON-able: kept with a spooled egress)."""

    job_name: str
    #: The backend's mark of the run (``Current.run_token``); "" where not known.
    run_token: str
    #: When the run began (epoch seconds: its end less its billed seconds per instance); None: not known.
    started_at: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EgressRun:
        started = data.get("started_at")
        return cls(
            job_name=str(data["job_name"]),
            run_token=str(data.get("run_token") or ""),
            started_at=None if started is None else float(started),
        )


def egress_uid(ledger: Any, run: EgressRun) -> str:
    """The key of ``run``'s egress: the name's, unless the row under it is another run's.

    The stop bill's rules (``stop_bill_keyed``, ``_started_before``): a row that marks another run is that
    run's; one that marks none (an older release's, or its run's token unread) is another run's only where
    it was written before this run began, as a run's egress is billed at or after its end. Any other
    unmarked row may be this run's and keeps the key, never billed beside it (:func:`record_egress` says
    so where it drops this run's). Rows already written keep their keys. Raises what the ledger's reads
    raise.
    """
    by_name = f"egress:{run.job_name}"[:64]
    if not run.run_token:
        return by_name
    by_run = _by_run_uid(run)
    held = ledger.entries_by_uid([by_name, by_run])
    if any(row["entry_uid"] == by_run for row in held):
        # Billed under the run's key already: by this release, or by an older release's drain of a spooled
        # egress, which writes the key the file names and knows nothing of the name's.
        return by_run
    if not held or not all(_of_another_run(run, row) for row in held):
        return by_name
    return by_run


def egress_keyed(ledger: Any, entry: Any, run: EgressRun) -> Any:
    """``entry`` (``run``'s egress) under :func:`egress_uid`'s key. Raises what the ledger's reads raise."""
    return replace(entry, entry_uid=egress_uid(ledger, run))


def spool_uid(run: EgressRun) -> str:
    """The key a spooled egress of ``run`` waits under: one per run (a drain keys it by :func:`egress_uid`).

    By name alone, a second run's spooled egress replaced the first's file, and the first went unbilled.
    """
    return _by_run_uid(run) if run.run_token else f"egress:{run.job_name}"[:64]


def record_egress(ledger: Any, entry: Any, run: EgressRun) -> bool:
    """Record ``entry``, ``run``'s egress keyed by :func:`egress_keyed`, alone (it pays from no hold).

    Returns whether it was written. Not written (the ledger has its key): said at INFO where the row there
    marks this run (a retry following it), else at WARNING with the row, this run and the amount not
    billed: the row may be another run's, whose egress then stands for this one's.
    """
    from costaware.core.money import format_usd_exact

    if ledger.record(entry):
        return True
    try:
        rows = ledger.entries_by_uid([entry.entry_uid])
    except Exception as e:  # what the write told is still true: not written
        rows = [{"entry_uid": entry.entry_uid, "usd": "?", "note": f"(its row could not be read: {e})"}]
    row = rows[0] if rows else {"entry_uid": entry.entry_uid, "usd": "?", "note": ""}
    if run.run_token and _run_marked(row) == run.run_token:
        log.info(
            "costaware: the egress of job %s, run %s, is in the ledger already as %s: not billed again",
            run.job_name,
            run.run_token,
            entry.entry_uid,
        )
        return False
    log.warning(
        "costaware: the egress of job %s, run %s (%s), is not billed: the ledger has %s already (%s, note "
        "%r), which may bill this run or another of the job's name. If another, this run's egress is "
        "unbilled: record %s of egress for it (Ledger.record, kind egress, cause zone_move, note %r)",
        run.job_name,
        run.run_token or "not known",
        format_usd_exact(entry.usd),
        row.get("entry_uid"),
        _usd(row.get("usd")),
        row.get("note"),
        format_usd_exact(entry.usd),
        entry.note,
    )
    return False


def _usd(amount: Any) -> str:
    """``amount`` as the ledger's other messages write dollars; as it is where it is no amount."""
    from costaware.core.money import format_usd_exact

    try:
        return format_usd_exact(amount)
    except Exception:
        return str(amount)


def _by_run_uid(run: EgressRun) -> str:
    from costaware.training.remote import attempt_uid

    return f"egress:{attempt_uid(f'{run.job_name}:run={run.run_token}')}"


def _run_marked(row: Mapping[str, Any]) -> str | None:
    """The run the egress ``row``'s note marks; None where it marks none."""
    found = _EGRESS_NOTE_RUN.match(str(row.get("note") or ""))
    return None if found is None else found.group(1)


def _of_another_run(run: EgressRun, row: Mapping[str, Any]) -> bool:
    """Whether the egress ``row`` bills a run of the job's name other than ``run``."""
    from costaware.training.remote import aware_utc

    marked = _run_marked(row)
    if marked is not None:
        return marked != run.run_token
    if run.started_at is None:
        return False
    # The row's time is the worker's clock, the run's start the backend's: a backend clock ahead made this
    # run's own unmarked row look older than the run (billed twice). Within the margin it may be this run's.
    written = aware_utc(row["incurred_at"])
    started = datetime.fromtimestamp(run.started_at, tz=timezone.utc)
    return written <= started - timedelta(seconds=CLOCK_SKEW_MARGIN_SECONDS)
