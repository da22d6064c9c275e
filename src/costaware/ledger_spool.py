"""Internal: the spool of cost entries the ledger could not take, kept on disk until they are written.

When the ledger cannot be written, the listener keeps the entry in ``$AIRFLOW_HOME/costaware/spool`` as
``<entry_uid>.json`` (with the ledger connection it is for). It is written later by a drain: the listener's
after its next entry succeeds (into that entry's ledger), a scheduler's or an API server's as it starts, or
``costaware spool drain`` (:mod:`costaware.cli.commands.spool`) at any time, from any machine that sees the
folder (:func:`costaware.ledger_spool_drain.drain`, split out of this module). The last two open each entry's
ledger with :func:`workers_ledger`, which refuses one this machine does not see: its entries wait. Drains run
at once (task processes ending together, the command beside them): each takes a file by renaming it (atomic)
to ``<name>.<unix time>.<pid>.claimed`` before reading it, so each entry is written by one of them, and a file
gone was taken by another. A claim older than :data:`STALE_CLAIM_SECONDS` belonged to a drain that was killed:
it goes back to the spool. An entry the ledger refuses (not the ledger being down) moves to ``spool/refused``,
kept and out of the way; a remote attempt's bill that a try billed meanwhile under another key moves to
``spool/billed``, not written; one the ledger cannot tell billed or not moves to ``spool/unsure``, for a
person.

The listener and the CLI share this module, which imports no Airflow at import time.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from costaware.glue import DEFAULT_LEDGER_CONN_ID
from costaware.settings import costaware_home
from costaware.spool_settle import hold_unsure
from costaware.spool_settle import record_and_settle as record_and_settle  # imported from here by callers

log = logging.getLogger(__name__)

#: A claim older than this was made by a process killed while it drained (Airflow stops a listener past
#: ``[core] task_success_overtime``): its entry goes back to the spool. A write takes a second or so.
STALE_CLAIM_SECONDS = 15 * 60

REFUSED = "refused"
#: Where a drain moves the remote attempts' bills it found billed meanwhile (not written, kept).
BILLED = "billed"
#: Where a drain keeps the remote attempts' bills it cannot tell billed or not, for a person (not written).
#: Not ``billed``: there `spool show` called them billed and no count of what waits saw them.
UNSURE = "unsure"


def spool_dir() -> Path:
    """Where entries wait when the ledger cannot be written: ``$AIRFLOW_HOME/costaware/spool``."""
    return costaware_home("spool")


def earlier_spool_dir() -> Path | None:
    """The spool an earlier release kept for this ``$AIRFLOW_HOME`` read as written, where it is there.

    Before ``~`` and ``$VARS`` in it were expanded, ``AIRFLOW_HOME='~/airflow'`` spooled under the working
    folder, ``./~/airflow/costaware/spool``: entries left there after an upgrade were never drained.
    """
    from costaware.settings import airflow_home_as_written

    homes = airflow_home_as_written()
    folder = None if homes is None else homes[1].joinpath("costaware", "spool")
    if folder is None:
        return None
    try:
        return folder if folder.is_dir() else None
    except OSError as e:
        # Python 3.11 raises PermissionError on EACCES (a '~' folder another user made under the working
        # one): raised, the caller skipped the real spool's drain with it.
        log.warning("costaware: could not look in %s for an earlier release's spool (%s): skipped", folder, e)
        return None


def spool_dirs_to_drain(spool: Path | None = None) -> list[Path]:
    """The spool folders a drain of this machine writes: ``spool`` (else :func:`spool_dir`), then more.

    The one an earlier release kept (:func:`earlier_spool_dir`) follows where it is there. One list for
    every drain (the listener's, ``costaware spool drain``) and the CLI's count of what waits: the earlier
    folder was the listener's alone, and the command neither drained nor counted it.
    """
    earlier = earlier_spool_dir()
    return [spool_dir() if spool is None else spool, *([earlier] if earlier is not None else [])]


def spool_record(
    entry: Any,
    ledger_conn_id: str,
    *,
    retrying: bool,
    duplicate_check: dict[str, Any] | None = None,
    egress_run: dict[str, Any] | None = None,
) -> str:
    """A spool file's JSON for ``entry``: saved as ``<entry_uid>.json`` in a spool, it is drained.

    ``duplicate_check``: a remote attempt's bill (a ``DuplicateCheck``'s JSON): the drain drops it where a
    try billed the attempt meanwhile under another key, which the ledger's own key check cannot see.
    ``egress_run``: a remote attempt's egress (an ``EgressRun``'s JSON): the drain keys it as the direct
    write does (:mod:`costaware.ledger_spool_egress`) and records it alone, from no hold.
    """
    return json.dumps(
        _spool_data(
            entry, ledger_conn_id, retrying=retrying, duplicate_check=duplicate_check, egress_run=egress_run
        )
    )


def _spool_data(
    entry: Any,
    ledger_conn_id: str,
    *,
    retrying: bool,
    duplicate_check: dict[str, Any] | None,
    egress_run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What :func:`spool_record` writes, as a dict (JSON primitives only)."""
    from costaware.core.ledger import entry_to_json

    # The ledger it is for: drained into another, it was counted against that one's budgets.
    spooled: dict[str, Any] = {
        "ledger_conn_id": ledger_conn_id,
        "entry": entry_to_json(entry),
        "retrying": retrying,
    }
    if duplicate_check is not None:
        spooled["duplicate_check"] = duplicate_check
    if egress_run is not None:
        spooled["egress_run"] = egress_run
    return spooled


def spool_entry(
    folder: Path,
    entry: Any,
    ledger_conn_id: str,
    *,
    retrying: bool,
    duplicate_check: dict[str, Any] | None = None,
    egress_run: dict[str, Any] | None = None,
) -> Path:
    """Keep ``entry`` in ``folder`` for a later drain; returns its file (written whole, then renamed)."""
    record = spool_record(
        entry, ledger_conn_id, retrying=retrying, duplicate_check=duplicate_check, egress_run=egress_run
    )
    return _write_spool_file(folder, entry.entry_uid, record)


def _write_spool_file(folder: Path, entry_uid: str, record: str) -> Path:
    """Save ``record`` (a :func:`spool_record`) as ``folder/<entry_uid>.json``, written whole then renamed."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{entry_uid}.json"
    temp = target.with_suffix(".tmp")
    temp.write_text(record)
    temp.replace(target)
    return target


def workers_ledger(conn_id: str) -> Any:
    """The ledger of ``conn_id`` as a worker opens it, unless this machine plainly does not see it.

    The hook falls back to ``COSTAWARE_LEDGER_URL`` or a SQLite file under ``$AIRFLOW_HOME`` where the
    connection is missing: a drain on a machine without the workers' settings (``costaware spool drain``,
    a scheduler starting) emptied the spool into a ledger no budget reads. A SQLite file that does not exist
    yet, or a connection other than the default one that does not exist here, is refused instead (a drain
    leaves its entries waiting).

    Raises:
        CostawareError: naming the connection and what to set.
    """
    from airflow.sdk.exceptions import AirflowNotFoundException

    from costaware.adapters.ledger.engine import missing_sqlite_file
    from costaware.core.errors import CostawareError
    from costaware.hooks.ledger import CostLedgerHook

    hook = CostLedgerHook(conn_id)
    if conn_id != DEFAULT_LEDGER_CONN_ID:
        try:
            hook.get_connection(conn_id)
        except AirflowNotFoundException:
            raise CostawareError(
                f"the connection {conn_id!r} does not exist on this machine: set AIRFLOW_CONN_"
                f"{conn_id.upper()} as the workers have it (where they lack it too, to the ledger their "
                "costs went to instead)"
            ) from None
    missing = missing_sqlite_file(hook.get_url())
    if missing is not None:
        raise CostawareError(
            f"no ledger at {missing}: this machine does not see the workers' ledger; set "
            f"AIRFLOW_CONN_{conn_id.upper()} or COSTAWARE_LEDGER_URL as they have it"
        )
    return hook.get_conn()


def _hold_while_kept(ledger: Any, entry: Any, kept: Path) -> Any | None:
    """Hold ``entry``'s bill kept as ``kept`` (:func:`~costaware.spool_settle.hold_unsure`); the hold or None.

    The ERROR that names `costaware spool drop` is said before the hold is taken: a drop in between found
    no hold, removed the file, and the hold taken after it stayed to its 30-day ttl with no file to say why.
    So the file is looked for once the hold is held, and the hold released where it is gone.
    """
    hold = hold_unsure(ledger, entry)
    if hold is None or kept.exists():
        return hold
    try:
        ledger.release_hold(hold.id)
    except Exception as e:
        log.warning(
            "costaware: the bill %s was dropped from %s as its budget hold %s was taken, and that hold could "
            "not be released (%s): release it (`costaware budget holds` lists it)",
            entry.entry_uid,
            kept.parent,
            hold.id,
            e,
        )
        return hold
    return None


#: Why a bill beside ``row`` is not written (:func:`_row_args` gives its arguments).
_UNKNOWN_ROW = (
    "the ledger has entry %s of the same job ($%s, written %s, try %s), whose note gives no job end (written "
    "before notes gave it, or cut), so whether it bills this run or a later one under the same name cannot "
    "be told"
)


def _row_args(row: dict[str, Any]) -> tuple[Any, ...]:
    return row.get("entry_uid"), row.get("usd"), row.get("incurred_at"), row.get("try_number")


class Kept(enum.Enum):
    """What :func:`keep_unsure` did with a bill."""

    #: Written to ``spool/unsure`` now.
    NOW = "now"
    #: An earlier try kept the same bill (the same figure): the file stands for this one.
    EARLIER = "earlier"
    #: An earlier try kept the bill at another figure: this one is not kept, only logged.
    EARLIER_AT_ANOTHER_FIGURE = "earlier at another figure"
    #: Not kept: the file could not be written, or one an earlier try kept cannot be read; only logged.
    NOT_KEPT = "not kept"


@dataclass(frozen=True, slots=True)
class UnsureBill:
    """Where :func:`keep_unsure` left a bill, as its callers say it (no file read again)."""

    kept: Kept
    #: The bill's file in ``spool/unsure``; None where none could be made.
    path: Path | None
    #: The dollars the file holds, as written there (None: it holds none that can be read).
    file_usd: str | None = None
    #: The budget hold taken for the kept bill (:func:`~costaware.spool_settle.hold_unsure`); None: none.
    hold: Any = None


def keep_unsure(
    entry: Any,
    ledger_conn_id: str,
    duplicate_check: dict[str, Any],
    row: dict[str, Any],
    *,
    ledger: Any = None,
) -> UnsureBill:
    """Keep a remote attempt's bill, not written, in ``spool/unsure`` for a person (the direct bill's path).

    As the drain keeps one (:func:`_keep_unsure`): the ledger has a row of the job's name whose note gives
    no end, so whether that row bills this run cannot be told. Said at ERROR, with what to do; returns what
    was decided, which is all the caller says afterwards: where the bill is not kept (no file could be
    written, or an earlier try's cannot be read or holds another figure), the whole bill is in the log.
    ``ledger``: where the kept file's figure is held in its budgets until a person drains or drops it
    (:func:`~costaware.spool_settle.hold_unsure`; an earlier try's file at the same figure keeps its hold).
    """
    spool = spool_dir()
    unsure = spool / UNSURE
    # Built once: the file's text, what the messages read from it, and the JSON a log line ends with.
    data = _spool_data(entry, ledger_conn_id, retrying=True, duplicate_check=duplicate_check)
    record = json.dumps(data)
    kept = unsure / f"{entry.entry_uid}.json"
    if kept.exists():
        # The same bill kept by an earlier try (its uid is the attempt's): rewritten, a person's
        # "another_run" not yet moved back was lost, and the ledger takes one entry of a uid anyway.
        on_file = _read_kept(kept)
        if on_file is None:
            # Cut short or edited by hand: what it keeps cannot be told, so the log holds this bill whole.
            log.error(
                "costaware: the bill of job %s (entry %s, $%s) was not written: " + _UNKNOWN_ROW + ". Nor "
                "kept: %s, kept for it by an earlier try, cannot be read as a bill (cut short or edited by "
                "hand) and is left as it is. Replace that file with the JSON that ends this line, then: if "
                'that entry bills another run, add "another_run": true to it, move it back into %s and run '
                "`costaware spool drain`; if it bills this run, run `costaware spool drop %s` (removes the "
                "file and releases the budget hold an earlier try kept for it; deleted by hand, that hold "
                "stays held): %s",
                duplicate_check.get("job_id"),
                entry.entry_uid,
                data["entry"]["usd"],
                *_row_args(row),
                kept,
                spool,
                entry.entry_uid,
                record,
            )
            return UnsureBill(Kept.NOT_KEPT, kept)
        _say_kept_unsure(
            f"the bill {kept.name} (kept there already: left as it is)", on_file, row, unsure, spool
        )
        kept_usd = (on_file.get("entry") or {}).get("usd")
        if usd_differs(kept_usd, data["entry"]["usd"]):
            # Not in the file: the log is the only place this bill is.
            log.error(
                "costaware: job %s was billed again at $%s under entry %s, where %s says $%s: this bill is "
                'not kept (the file is left as it is). If $%s is the right figure, put the "entry" of the '
                "JSON that ends this line in that file: %s",
                duplicate_check.get("job_id"),
                data["entry"]["usd"],
                entry.entry_uid,
                kept,
                kept_usd,
                data["entry"]["usd"],
                record,
            )
            return UnsureBill(Kept.EARLIER_AT_ANOTHER_FIGURE, kept, str(kept_usd))
        hold = None if ledger is None else _hold_while_kept(ledger, entry, kept)
        return UnsureBill(Kept.EARLIER, kept, str(kept_usd), hold)
    try:
        path = _write_spool_file(unsure, entry.entry_uid, record)
    except Exception as e:
        # Nothing else holds the bill now: the row and what to do with the JSON, as the kept file's ERROR.
        log.error(
            "costaware: the bill of job %s (entry %s, $%s) was not written: " + _UNKNOWN_ROW + ". It could "
            "not be kept in %s either (%s): if that entry bills another run, save the JSON that ends this "
            'line as %s with "another_run": true added and run `costaware spool drain`; if it bills this '
            "run, drop it: %s",
            duplicate_check.get("job_id"),
            entry.entry_uid,
            data["entry"]["usd"],
            *_row_args(row),
            unsure,
            e,
            spool / f"{entry.entry_uid}.json",
            record,
        )
        return UnsureBill(Kept.NOT_KEPT, None)
    _say_kept_unsure(f"the bill {path.name}", data, row, unsure, spool)
    hold = None if ledger is None else _hold_while_kept(ledger, entry, path)
    return UnsureBill(Kept.NOW, path, data["entry"]["usd"], hold)


def _read_kept(path: Path) -> dict[str, Any] | None:
    """The JSON of the kept bill ``path``, or None where it cannot be read as one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    # A file with no figure keeps no bill that can be told: read as one, it was "kept at $None".
    entry = data.get("entry") if isinstance(data, dict) else None
    if not isinstance(entry, dict) or entry.get("usd") is None:
        return None
    # Its job is read with .get(): a string or a list there raised AttributeError out of keep_unsure.
    check = data.get("duplicate_check")
    return data if check is None or isinstance(check, dict) else None


def usd_differs(kept_usd: Any, new_usd: Any) -> bool:
    """Whether two dollar figures of a bill differ (``1.25`` and ``1.250000`` do not)."""
    try:
        return Decimal(str(kept_usd)) != Decimal(str(new_usd))
    except ArithmeticError:
        return str(kept_usd) != str(new_usd)


def _say_kept_unsure(what: str, data: dict[str, Any], row: dict[str, Any], unsure: Path, spool: Path) -> None:
    """Say at ERROR that the bill ``what`` (``data``: its spool file's JSON) is kept in ``unsure``."""
    check = data.get("duplicate_check") or {}
    entry = data.get("entry") or {}
    log.error(
        "costaware: %s (job %s, $%s) was not written: " + _UNKNOWN_ROW + ". Kept in %s: if that entry bills "
        'another run, add "another_run": true to the file, move it back into %s and run '
        "`costaware spool drain`; if it bills this run, run `costaware spool drop %s` (removes the file "
        "and releases the budget hold kept for it)",
        what,
        check.get("job_id"),
        entry.get("usd"),
        *_row_args(row),
        unsure,
        spool,
        entry.get("entry_uid"),
    )


@dataclass(frozen=True, slots=True)
class SpooledFile:
    """One file of the spool as ``costaware spool show`` lists it."""

    path: Path
    #: ``waiting`` (for the next drain), ``claimed`` (a drain is writing it, or died doing so), ``refused``,
    #: ``billed`` (a try billed it meanwhile: not written) or ``unsure`` (kept for a person: not written).
    state: str
    #: The parsed file; None when it cannot be read as JSON.
    data: dict[str, Any] | None


def spooled_files(folder: Path) -> Iterator[SpooledFile]:
    """The spool's entries, waiting and claimed first, then refused, billed and unsure; reads no ledger."""
    for pattern, state in (
        ("*.json", "waiting"),
        ("*.claimed", "claimed"),
        (f"{REFUSED}/*.json", REFUSED),
        (f"{BILLED}/*.json", BILLED),
        (f"{UNSURE}/*.json", UNSURE),
    ):
        for path in sorted(folder.glob(pattern)):
            try:
                data = json.loads(path.read_text())
            except FileNotFoundError:
                continue  # written or moved by a drain since the listing
            except (OSError, ValueError):
                data = None
            yield SpooledFile(path, state, data if isinstance(data, dict) else None)
