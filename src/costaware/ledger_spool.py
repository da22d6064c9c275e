"""Internal: the spool of cost entries the ledger could not take, kept on disk until they are written.

When the ledger cannot be written, the listener keeps the entry in ``$AIRFLOW_HOME/costaware/spool`` as
``<entry_uid>.json`` (with the ledger connection it is for). It is written later by a drain: the listener's
after its next entry succeeds (into that entry's ledger), a scheduler's or an API server's as it starts,
or ``costaware spool drain`` (:mod:`costaware.cli.commands.spool`) at any time, from any machine that sees
the folder. The last two open each entry's ledger with :func:`workers_ledger`, which refuses one this
machine does not see: its entries wait. Drains run at once (task processes ending together, the command
beside them): each takes a file by renaming it (atomic) to ``<name>.<unix time>.<pid>.claimed``
before reading it, so each entry is written by one of them, and a file gone was taken by another. A claim
older than :data:`STALE_CLAIM_SECONDS` belonged to a drain that was killed: it goes back to the spool. An
entry the ledger refuses (not the ledger being down) moves to ``spool/refused``, kept and out of the way; a
remote attempt's bill that a try billed meanwhile under another key moves to ``spool/billed``, not written;
one the ledger cannot tell billed or not moves to ``spool/unsure``, for a person.

The listener and the CLI share this module, which imports no Airflow at import time.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from costaware.core.money import format_gpu_hours
from costaware.glue import DEFAULT_LEDGER_CONN_ID
from costaware.settings import costaware_home
from costaware.spool_settle import hold_unsure, record_unsure
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


@dataclass
class DrainResult:
    """What one drain did: entries written, set aside as refused, and left waiting for their ledger."""

    #: Entries new to the ledger (only these moved a budget).
    written: int = 0
    #: Entries whose ``entry_uid`` the ledger had already (it keeps its row): done with, not written again.
    #: Counted as written, a spool file copied back or a write whose answer was lost read as money billed.
    already_in_ledger: int = 0
    refused: int = 0
    waiting: int = 0
    #: Remote attempts' bills dropped: a try billed the same attempt meanwhile, under another key.
    billed_already: int = 0
    #: Remote attempts' bills kept for a person: a row of the job's name may bill the same run or a later one.
    unsure: int = 0
    #: Ledger connection id -> why it could not be opened or written (its entries wait).
    unavailable: dict[str, str] | None = None

    def __add__(self, other: DrainResult) -> DrainResult:
        """Both drains' counts, field by field; a ledger both found unavailable keeps ``other``'s why."""
        return DrainResult(
            written=self.written + other.written,
            already_in_ledger=self.already_in_ledger + other.already_in_ledger,
            refused=self.refused + other.refused,
            waiting=self.waiting + other.waiting,
            billed_already=self.billed_already + other.billed_already,
            unsure=self.unsure + other.unsure,
            unavailable={**(self.unavailable or {}), **(other.unavailable or {})},
        )


def combined(results: Iterable[DrainResult]) -> DrainResult:
    """What several drains (one a spool folder) did together; nothing drained: all zero, none unavailable."""
    total = DrainResult(unavailable={})
    for result in results:
        total += result
    return total


def drain(
    folder: Path,
    ledger_for: Callable[[str], Any],
    *,
    only_ledger_conn_id: str | None = None,
    record: Callable[..., bool] = record_and_settle,
) -> DrainResult:
    """Write the entries spooled in ``folder``; never raises for an entry (each is kept somewhere).

    Args:
        folder: the spool.
        ledger_for: the ledger of a connection id (raising: that ledger cannot be opened, its entries wait).
        only_ledger_conn_id: write only this ledger's entries (the others stay for a drain of their own),
            and stop at the first sign that it is down; None: every ledger's.
        record: writes one entry, returning whether it was new to the ledger (:func:`record_and_settle`).
    """
    from sqlalchemy.exc import DataError

    from costaware.core.errors import LEDGER_UNREADABLE
    from costaware.core.ledger import entry_from_json

    result = DrainResult(unavailable={})
    unavailable: dict[str, str] = result.unavailable  # type: ignore[assignment]
    if not folder.is_dir():
        return result
    _reclaim_stale(folder)
    for path in sorted(folder.glob("*.json")):
        claimed = _claim(path)
        if claimed is None:
            continue  # another process took it
        conn_id = DEFAULT_LEDGER_CONN_ID
        try:
            data = json.loads(claimed.read_text())
            # An older spool file is the entry alone, for the default ledger.
            conn_id = str(data.get("ledger_conn_id", DEFAULT_LEDGER_CONN_ID))
            if only_ledger_conn_id is not None and conn_id != only_ledger_conn_id:
                _put_back(claimed, path)  # drained by the next entry written to its own ledger
                continue
            if conn_id in unavailable:
                _put_back(claimed, path)
                result.waiting += 1
                continue
            entry = entry_from_json(data.get("entry", data))
            try:
                ledger = ledger_for(conn_id)
            except Exception as e:  # a connection that cannot be read: the entry is fine, it waits
                _put_back(claimed, path)
                unavailable[conn_id] = str(e)
                result.waiting += 1
                continue
            egress_run = data.get("egress_run")
            if isinstance(egress_run, dict):
                # A remote attempt's egress: keyed and written alone as its direct write is, once per run; a
                # duplicate is said by the write (at WARNING where it may be another run's).
                entry, written = _record_spooled_egress(ledger, entry, egress_run)
                claimed.unlink(missing_ok=True)
                if written:
                    result.written += 1
                    _say_if_past_cap(ledger, entry)
                    log.info("costaware: wrote spooled ledger entry %s", path.name)
                else:
                    result.already_in_ledger += 1
                continue
            stored = _billed_meanwhile(ledger, data)
            if stored is not None:
                _keep_billed(claimed, path.name, data, stored)
                result.billed_already += 1
                continue
            unknown = None if data.get("another_run") else _row_of_unknown_run(ledger, data)
            if unknown is not None:
                _keep_unsure(claimed, path.name, data, unknown, ledger, entry)
                result.unsure += 1
                continue
            as_kept, entry = entry, _keyed_for_its_run(ledger, entry, data)
            if data.get("another_run"):
                # A person's from spool/unsure: never the task's hold; its own hold is under its uid as kept.
                written = record_unsure(ledger, entry, kept_as=as_kept)
            else:
                written = record(ledger, entry, retrying=bool(data.get("retrying", False)))
            if written:
                _say_if_past_cap(ledger, entry)
        except LEDGER_UNREADABLE as e:
            # Down again, or its database not made (the deployment's to fix, not the entry's fault): the
            # rest of its entries wait with it.
            if not isinstance(e.__cause__, DataError):
                _put_back(claimed, path)
                log.warning("costaware: spooled entries wait for the ledger again (%s)", e)
                result.waiting += 1
                if only_ledger_conn_id is not None:
                    return result
                unavailable[conn_id] = str(e)
                continue
            _set_aside(claimed, path.name, e)  # PostgreSQL's "value too long": this entry, not the ledger
            result.refused += 1
            continue
        except Exception as e:
            _set_aside(claimed, path.name, e)
            result.refused += 1
            continue
        claimed.unlink(missing_ok=True)
        if written:
            result.written += 1
            log.info("costaware: wrote spooled ledger entry %s", path.name)
        else:
            result.already_in_ledger += 1
            _say_in_the_ledger_already(ledger, path.name, entry)
    return result


def _say_in_the_ledger_already(ledger: Any, spooled_as: str, entry: Any) -> None:
    """Say that the ledger had ``entry``'s ``entry_uid`` already and kept its own row, not ``entry``.

    Said "wrote", it read as this bill billed: a spooled entry the listener's own write had committed (its
    answer lost), or a spool file copied back. At INFO where the row is the same cost; at WARNING, naming
    both, where its amount or note differ: two costs keyed alike, or one priced twice, one left unbilled.
    """
    from costaware.core.money import format_usd_exact

    try:
        (stored,) = ledger.entries_by_uid([entry.entry_uid])
    except Exception as e:  # nothing to compare with: what the write told is still true
        log.info(
            "costaware: spooled entry %s is in the ledger already as %s: not written again (its row could "
            "not be read to compare: %s)",
            spooled_as,
            entry.entry_uid,
            e,
        )
        return
    if stored["usd"] == entry.usd and stored["note"] == entry.note:
        log.info(
            "costaware: spooled entry %s is in the ledger already as %s: not written again",
            spooled_as,
            entry.entry_uid,
        )
        return
    log.warning(
        "costaware: spooled entry %s (%s, note %r) is not written: the ledger has %s already at %s "
        "(note %r), which it keeps. Two costs keyed alike, or one priced twice: compare them, and record "
        "the difference by hand if both were spent",
        spooled_as,
        format_usd_exact(entry.usd),
        entry.note,
        entry.entry_uid,
        format_usd_exact(stored["usd"]),
        stored["note"],
    )


def _say_if_past_cap(ledger: Any, entry: Any) -> None:
    """Warn where ``entry``, just written by a drain, moved a budget it counts in from its cap to past it.

    A bill that waited here (a person's ``another_run``, a ledger down) was in no budget meanwhile, and
    other runs may have taken the room it needed: written in silence, a $2 budget read $3 spent. GPU-hour
    caps alike, each cap said on its own. Not said of
    a budget past its cap before the entry (this entry did not pass it), nor of an entry paid from its task's
    hold (the hold counted it all along, so the budget's spent and held together did not move).
    """
    from costaware.core.budgets import Scope
    from costaware.core.money import format_usd_exact

    try:
        (stored,) = ledger.entries_by_uid([entry.entry_uid])
        if stored.get("reservation_id"):
            return
        usages = ledger.usage(
            Scope.parse(dict(entry.tags)), at=entry.incurred_at, run_id=entry.run_id, dag_id=entry.dag_id
        )
    except Exception:  # no budget applies to its tags (or none can be read): no cap to pass
        return
    for usage in usages:
        if usage.spent_usd - entry.usd <= usage.cap_usd < usage.spent_usd:
            log.warning(
                "costaware: spooled entry %s ($%s) is written and took budget %s past its cap: spent %s "
                "of its cap %s. This money waited in the spool, counted by no budget, while other runs "
                "spent: raise the cap, or hold back the budget's next runs",
                entry.entry_uid,
                entry.usd,
                usage.name,
                format_usd_exact(usage.spent_usd),
                format_usd_exact(usage.cap_usd),
            )
        # A GPU-hour cap too: a gate refuses a run on it as on the dollars, so passed in silence it was not.
        gpu_cap = usage.cap_gpu_hours
        if gpu_cap is not None and usage.spent_gpu_hours - entry.gpu_hours <= gpu_cap < usage.spent_gpu_hours:
            log.warning(
                "costaware: spooled entry %s (%s GPU-hours) is written and took budget %s past its "
                "GPU-hour cap: spent %s GPU-hours of its %s. These GPU-hours waited in the spool, counted "
                "by no budget, while other runs spent: raise the cap (`costaware budget set "
                "--cap-gpu-hours`), or hold back the budget's next runs",
                entry.entry_uid,
                format_gpu_hours(entry.gpu_hours),
                usage.name,
                format_gpu_hours(usage.spent_gpu_hours),
                format_gpu_hours(gpu_cap),
            )


def _record_spooled_egress(ledger: Any, entry: Any, egress_run: dict[str, Any]) -> tuple[Any, bool]:
    """Record a spooled egress under its run's key (as written directly); the entry keyed, and if written.

    Never through the task's hold (a drain's ``record``): the direct write pays from none, and settled
    with it a task's hold closed on its egress. Raises what the ledger's reads and writes raise.
    """
    from costaware.ledger_spool_egress import EgressRun, egress_keyed, record_egress

    run = EgressRun.from_json(egress_run)
    keyed = egress_keyed(ledger, entry, run)
    return keyed, record_egress(ledger, keyed, run)


def _billed_meanwhile(ledger: Any, data: dict[str, Any]) -> Decimal | None:
    """What the ledger holds of the spooled remote attempt's bill in ``data`` (None: to be written).

    Billed meanwhile under another key, asked as the direct bill asks (the same quantity, a stop's entry of
    the same run, the entry of its end a cleared task's new try wrote): keyed by the job's name alone, a
    kill's bill that waited here for the ledger was written beside the new try's and the job counted twice.
    Raises what the ledger's reads raise.
    """
    check = data.get("duplicate_check")
    if not isinstance(check, dict):
        return None
    from costaware.training.attempt_duplicates import DuplicateCheck, billed_already

    return billed_already(ledger, DuplicateCheck.from_json(check))


def _keyed_for_its_run(ledger: Any, entry: Any, data: dict[str, Any]) -> Any:
    """``entry``, a stop's bill keyed by the job's name, keyed by its run where another run holds that key.

    Recorded under the name's key, the ledger kept the other run's row and dropped this one (the drain
    said it wrote it). As the direct bill (:func:`~costaware.training.attempt_duplicates.stop_bill_keyed`).
    """
    check = data.get("duplicate_check")
    if not isinstance(check, dict):
        return entry
    from costaware.training.attempt_duplicates import DuplicateCheck, stop_bill_keyed

    return stop_bill_keyed(ledger, entry, DuplicateCheck.from_json(check))[0]


def _row_of_unknown_run(ledger: Any, data: dict[str, Any]) -> dict[str, Any] | None:
    """A row that may bill the spooled remote attempt's run or a later one (None: none, or no such bill).

    Raises what the ledger's reads raise.
    """
    check = data.get("duplicate_check")
    if not isinstance(check, dict):
        return None
    from costaware.training.attempt_duplicates import DuplicateCheck, row_of_unknown_run

    row = row_of_unknown_run(ledger, DuplicateCheck.from_json(check))
    return None if row is None else dict(row)


def _moved_to(claimed: Path, name: str, why: str, kept_in: str) -> Path | None:
    """Move a claimed spool file to ``spool/<kept_in>``; the folder, or None where it could not be moved."""
    folder = claimed.parent / kept_in
    try:
        folder.mkdir(exist_ok=True)
        claimed.replace(folder / name)
    except OSError as e:  # kept under its claimed name: a later drain asks again once it is stale
        log.error("costaware: could not move spooled %s (%s) to %s: %s", name, why, folder, e)
        return None
    return folder


def _keep_unsure(
    claimed: Path, name: str, data: dict[str, Any], row: dict[str, Any], ledger: Any, entry: Any
) -> None:
    """Keep a spooled bill in ``spool/unsure`` for a person: the ledger cannot tell whether it is billed.

    Written, a run that a new try billed under an older note (no end) counted twice; dropped, a later run's
    bill stood for it. Not written, then, and logged whole: what the person looks at and does. Its money is
    held in its budgets meanwhile (:func:`~costaware.spool_settle.hold_unsure`).
    """
    unsure = _moved_to(claimed, name, "its run unsure", UNSURE)
    if unsure is None:
        return
    _say_kept_unsure(f"spooled {name}", data, row, unsure, claimed.parent)
    _hold_while_kept(ledger, entry, unsure / name)


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


def _keep_billed(claimed: Path, name: str, data: dict[str, Any], stored: Decimal) -> None:
    """Move a spooled bill billed meanwhile to ``spool/billed``: not written, and still there to be read.

    Deleted, a bill the check took wrongly for another try's was gone; kept, ``costaware spool show`` lists
    it and moving it back into the spool has it drained (the same check asked again).
    """
    billed = _moved_to(claimed, name, "billed meanwhile", BILLED)
    job_id = (data.get("duplicate_check") or {}).get("job_id")
    if billed is None:
        return
    log.warning(
        "costaware: spooled %s (job %s) was billed meanwhile, $%s (a new try of the task saw the job "
        "end): not written again; moved to %s",
        name,
        job_id,
        stored,
        billed,
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


def _claim(path: Path) -> Path | None:
    """Take the spooled ``path`` for this process (``<name>.<unix time>.<pid>.claimed``); None: taken."""
    claimed = path.with_name(f"{path.name}.{int(time.time())}.{os.getpid()}.claimed")
    try:
        path.rename(claimed)
    except FileNotFoundError:
        return None
    except OSError as e:  # a spool folder this process may not change: the entry stays for another
        log.error("costaware: could not take spooled %s: %s", path.name, e)
        return None
    return claimed


def _put_back(claimed: Path, path: Path) -> None:
    """Return a claimed entry to the spool, for the next drain."""
    try:
        claimed.replace(path)
    except OSError as e:  # kept under its claimed name: a later drain puts it back once it is stale
        log.error("costaware: could not return spooled %s to %s: %s", claimed.name, path.parent, e)


def _reclaim_stale(folder: Path) -> None:
    """Put back the entries claimed by processes that died before they wrote them."""
    for claimed in folder.glob("*.claimed"):
        try:
            name, stamp, _pid, _ = claimed.name.rsplit(".", 3)
            stale = time.time() - int(stamp) > STALE_CLAIM_SECONDS
        except ValueError:  # not a claim of ours
            continue
        if stale:
            log.warning("costaware: spooled %s was claimed by a process that did not finish: put back", name)
            _put_back(claimed, folder / name)


def _set_aside(claimed: Path, name: str, error: Exception) -> None:
    """Move a spooled entry the ledger refuses to ``spool/refused``: kept, and no longer in the way."""
    refused = claimed.parent / REFUSED
    try:
        refused.mkdir(exist_ok=True)
        claimed.replace(refused / name)
    except OSError as e:  # kept under its claimed name: a later drain tries it again once it is stale
        log.error("costaware: could not set aside spooled %s (%s): %s", name, error, e)
        return
    # A file that is no entry (cut short, edited by hand) never reached the ledger: said as what it is.
    why = (
        "is not a readable entry" if isinstance(error, json.JSONDecodeError) else "was refused by the ledger"
    )
    log.error("costaware: spooled %s %s (%s): moved to %s", name, why, error, refused)
