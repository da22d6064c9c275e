"""Attempts of a remote training: stable job names, the market of the next attempt, one ledger entry each.

Pure helpers the ``RemoteTrainingOperator`` calls between polls; no Airflow here.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from costaware.adapters.emissions import with_emissions
from costaware.adapters.redaction import redacted
from costaware.core.ledger import MAX_NOTE_CHARS, Kind, LedgerEntry, clipped_note, compute_cost, utcnow

_SLUG = re.compile(r"[^a-z0-9]+")
#: Ledger ``cause`` of an attempt, by how its job ended.
CAUSES = {"succeeded": "success", "interrupted": "preemption", "failed": "code_error"}
OUTCOMES = {"succeeded": "success", "interrupted": "interrupted", "failed": "failed"}
#: What the backends say of a job stopped at its runtime limit: SageMaker, Batch, Kubernetes, local.
RUNTIME_LIMIT_REASONS = ("MaxRuntimeExceeded", "attempt duration exceeded", "DeadlineExceeded", "max_usd")
#: The backends whose job id is the job's name, taken again by a cleared task's new try once the backend
#: no longer has the earlier run (a deleted pod, a ``local`` job folder gone): a run token tells the runs
#: apart (``Current.run_token``). Batch's id is its own ``jobId`` and SageMaker never takes a name twice.
NAME_REUSING_BACKENDS = ("local", "kubernetes")


def job_base_name(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """A name stem unique to one task instance and stable across its retries (<= 43 characters)."""
    digest = hashlib.sha256(f"{dag_id}\0{run_id}\0{task_id}\0{map_index}".encode()).hexdigest()[:10]
    slug = _SLUG.sub("-", task_id.lower()).strip("-")[:32] or "train"
    return f"{slug}-{digest}"


def job_name(base: str, attempt: int) -> str:
    """The job name of attempt ``attempt`` (1, 2, ...): the same on every Airflow retry."""
    return f"{base}-a{attempt}"


def next_market(*, previous: str, now: datetime, latest_start: datetime | None) -> str:
    """Market of the attempt after an interruption: spot while slack is left, on-demand after.

    An on-demand attempt stays on-demand; a spot attempt goes back to spot until ``latest_start`` (the latest
    start that still meets the deadline), then on-demand.
    """
    if previous != "spot":
        return "on_demand"
    if latest_start is not None and now >= latest_start:
        return "on_demand"
    return "spot"


def attempt_cause(job: Mapping[str, Any]) -> str | None:
    """The ledger cause of an attempt when its state alone does not say it (None: by its state).

    A user command whose launcher could not reach a store (exit 74) is submitted again like a preemption,
    but it was not one.
    """
    from costaware.adapters.compute.job_contract import EXIT_SYNC_FAILED

    if job.get("state") == "interrupted" and job.get("exit_code") == EXIT_SYNC_FAILED:
        return "store_error"
    return None


def attempt_key(
    identity: Mapping[str, Any],
    job_id: str,
    ended_at: Any = None,
    *,
    legacy: bool = False,
    run_token: str = "",
) -> str:
    """What an attempt's ``entry_uid`` derives from: the job's name and its end (``none`` where unknown).

    The name alone made a job submitted again under a name a lost job had (a deleted pod, a ``local`` job
    folder on another machine) look recorded already, and its cost was dropped; the end time tells the two
    runs apart, and the same run seen again (an Airflow retry following it) keeps its key. ``legacy``: the
    name alone, as costaware keyed attempts before (to find those entries), and as a stop keys the bill of
    a job still stopping. With ``run_token`` (``legacy`` only): the name and the run, the key of such a
    stop bill where another run of the name holds the name's key.
    """
    key = f"remote-attempt:{identity['dag_id']}:{identity['run_id']}:{identity['task_id']}:{job_id}"
    if legacy:
        return f"{key}:run={run_token}" if run_token else key
    return f"{key}:ended=" + ("none" if ended_at is None else f"{float(ended_at):.3f}")


def attempt_uid(key: str) -> str:
    """The ``entry_uid`` of :func:`attempt_key`'s key."""
    return uuid.uuid5(uuid.NAMESPACE_URL, key).hex


#: How an attempt entry's note begins (:func:`attempt_entry` writes it): its attempt and its job's name.
_ATTEMPT_NOTE = re.compile(r"^attempt (\d+), job (\S+) on ")


def attempt_of_note(note: str) -> int | None:
    """The attempt an attempt entry's note names (``attempt 2, job <name> on local, ...``: 2), or None."""
    found = _ATTEMPT_NOTE.match(note)
    return int(found.group(1)) if found else None


def job_of_attempt_note(note: str) -> str | None:
    """The job an attempt entry's note names (``attempt 2, job <name> on local, ...``), or None."""
    found = _ATTEMPT_NOTE.match(note)
    return found.group(2) if found else None


#: The job's end an attempt entry's note gives (``..., 60.0 s billed, ended 2026-12-01T10:00:00.000+00:00:``),
#: with the run's token after it where the note gives one.
_NOTE_ENDED = re.compile(r"^attempt \d+, job \S+ on \S+, [\d.]+ s billed, ended (\S+?)(?:, run [\w-]+)?:? ")
#: The run an attempt entry's note marks (``..., 60.0 s billed[, ended ...], run 3f2a...:``).
_NOTE_RUN = re.compile(r"^attempt \d+, job \S+ on \S+, [\d.]+ s billed(?:, ended \S+?)?, run ([\w-]+):? ")


def run_of_attempt_note(note: str) -> str:
    """The run token an attempt entry's note gives (see ``Current.run_token``); "" where it gives none."""
    found = _NOTE_RUN.match(note)
    return found.group(1) if found else ""


def other_run(run_token: str, note: str) -> bool:
    """Whether the entry of ``note`` bills another run of the job's name than the run ``run_token`` marks.

    Known only where both carry a token (a backend that reuses names, bills of this release): the same
    token is the same run, whoever billed it (the kill, a retry following the job, a spooled bill).
    """
    theirs = run_of_attempt_note(note)
    return bool(run_token and theirs and theirs != run_token)


def same_run(run_token: str, note: str) -> bool:
    """Whether the entry of ``note`` bills the run ``run_token`` marks, as both tokens say."""
    return bool(run_token) and run_of_attempt_note(note) == run_token


def end_of_attempt_note(note: str) -> datetime | None:
    """When the job an attempt entry bills ended, as its note gives it; None where it gives none.

    Entries written before the note gave it (and a job billed before its end) give none; neither does a
    note that cannot be read, so the caller keeps its estimate.
    """
    found = _NOTE_ENDED.match(note)
    if found is None:
        return None
    try:
        ended = datetime.fromisoformat(found.group(1))
    except ValueError:
        return None
    return aware_utc(ended)


def aware_utc(moment: datetime) -> datetime:
    """``moment`` with UTC where it has no zone (SQLite gives datetimes without one)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def attempt_entry(
    *,
    identity: Mapping[str, Any],
    attempt: int,
    job: Mapping[str, Any],
    usd_per_hour: Decimal,
    on_demand_usd_per_hour: Decimal | None,
    region: str,
    backend: str,
    tags: Mapping[str, str],
    cause: str | None = None,
    gpus: Decimal = Decimal(0),
    market_reason: str = "",
    run_token: str = "",
) -> LedgerEntry:
    """The ledger entry of one finished attempt: billed seconds x the price of its market, and its emissions.

    Its GPU-hours are the billed hours x ``gpus`` (the instance type's GPUs), so a budget's GPU-hour cap
    counts remote attempts; a ``trial`` tag also fills the entry's trial column (``--group-by trial``).

    Its ``entry_uid`` derives from the job name, so recording it again (an Airflow retry) adds nothing. The
    emissions count the instance type at full load (a remote job's CPU use is not measured here) over the
    billed seconds up to the job's ``ended_at`` (now when the backend gives none), on the grid of
    ``region`` (the attempt's own, which may differ per zone); unknown, with why, where they cannot be known.

    Its note says how the job ended and, given ``market_reason``, why it ran on on-demand; given
    ``run_token`` (see ``Current.run_token``), which run of the job's name it bills.
    """
    seconds = Decimal(str(round(float(job["billable_seconds"]), 3)))
    hours, usd = compute_cost(seconds, usd_per_hour)
    # SageMaker managed spot: billable seconds at on-demand, the saving in their fewness. The machines ran
    # the whole training time: what on-demand would have billed (the saving read $0 against the billable
    # seconds), and the GPU-hours and the energy used.
    ran = (job.get("metrics") or {}).get("on_demand_seconds")
    ran_seconds = Decimal(str(round(float(ran), 3))) if ran is not None else seconds
    on_demand = compute_cost(ran_seconds, on_demand_usd_per_hour)[1] if on_demand_usd_per_hour else None
    ended = job.get("ended_at")
    end = datetime.fromtimestamp(float(ended), timezone.utc) if ended is not None else utcnow()
    key = attempt_key(identity, str(job["job_id"]), ended)
    reason = str(job.get("reason") or job["state"])  # a job may end without a word (a capacity wait)
    # The job's end, which the entry's writing (``incurred_at``) is not: a cleared task's new try may bill an
    # ended run hours later, and the spool's drain tells this run from a later one under its name by it.
    billed = f"{seconds} s billed"
    ended_note = "" if ended is None else f", ended {end.isoformat(timespec='milliseconds')}"
    run_note = f", run {run_token}" if run_token else ""
    if market_reason:
        reason = f"{reason}; on-demand: {market_reason}"
    entry = LedgerEntry(
        dag_id=str(identity["dag_id"]),
        run_id=str(identity["run_id"]),
        task_id=str(identity["task_id"]),
        try_number=int(identity.get("try_number", 1)),
        map_index=int(identity.get("map_index", -1)),
        kind=Kind.COMPUTE,
        usd=usd,
        instance_type=str(job["instance_type"])[:64] or None,
        region=region or None,
        market=str(job["market"]),  # type: ignore[arg-type]  # LedgerEntry parses the text
        quantity=hours,
        unit="hour",
        unit_price_usd=usd_per_hour,
        on_demand_usd=on_demand,
        tags=dict(tags),
        trial=str(tags["trial"])[:250] if tags.get("trial") else None,
        gpu_hours=(ran_seconds / 3600 * gpus).quantize(Decimal("0.000001")),
        outcome=OUTCOMES.get(str(job["state"]), "failed"),
        cause=cause or CAUSES.get(str(job["state"]), "code_error"),
        price_source=f"remote:{backend}",
        # The job's reason may quote its command line or environment: a secret there is masked.
        note=_attempt_note(
            f"attempt {attempt}, job {job['job_id']} on {backend}, {billed}{ended_note}{run_note}: ", reason
        ),
        entry_uid=attempt_uid(key),
    )
    from costaware import settings

    return with_emissions(
        entry,
        instance_type=entry.instance_type,
        region=entry.region,
        start=end - timedelta(seconds=float(ran_seconds)),
        end=end,
        cpu_seconds=None,
        grid_zone=_local_grid_zone() if backend == "local" else None,
        grid_zone_from=settings.WORKER_GRID_ZONE_SETTING,  # one spelling, that the Cost page shows too
    )


def _attempt_note(head: str, reason: str) -> str:
    """An attempt entry's note: ``head`` (its job and the job's end) whole, then ``reason`` cut to fit.

    Cut as a whole, a long job name and a reason of one long token lost the end (cut at the last space, just
    after it), which the drain reads to tell this run from a later one under the same name. A head that
    leaves no room (a name near the limit) is cut with the rest: nothing else fits.
    """
    head = redacted(head)
    room = MAX_NOTE_CHARS - len(head)
    if room < _MIN_REASON_CHARS:
        return clipped_note(head + redacted(reason))
    return head + clipped_note(redacted(reason), room)


#: The least of a reason an attempt's note keeps after its head: a word or two.
_MIN_REASON_CHARS = 20


def _local_grid_zone() -> str | None:
    """The grid a ``local`` job draws from: the worker's (``[costaware] worker_grid_zone``), as its tries do.

    A local job runs on the worker, not in the plan's region: without it, its emissions read that region's
    grid (unknown for most), while the worker's own try beside it was counted on the worker's grid.
    """
    from costaware.settings import worker_grid_zone

    try:
        return worker_grid_zone()
    except Exception:  # a setting that cannot be read: the region's grid, as before
        return None
