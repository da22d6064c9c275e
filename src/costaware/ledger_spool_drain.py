"""Internal: the drain of the spool (:mod:`costaware.ledger_spool`), which writes what waits to its ledger.

Split out of :mod:`costaware.ledger_spool`, which keeps the spool's folders, its files and the bills kept in
``spool/unsure``. A drain takes each file by renaming it (atomic) to ``<name>.<unix time>.<pid>.claimed``
before reading it, so each entry is written by one drain; a claim older than
:data:`~costaware.ledger_spool.STALE_CLAIM_SECONDS` goes back to the spool. No Airflow at import time.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from costaware.core.money import format_gpu_hours
from costaware.glue import DEFAULT_LEDGER_CONN_ID
from costaware.ledger_spool import (
    BILLED,
    REFUSED,
    STALE_CLAIM_SECONDS,
    UNSURE,
    _hold_while_kept,
    _say_kept_unsure,
)
from costaware.spool_settle import record_and_settle, record_unsure

#: The logger these lines were always said under: log configurations and alerts filter by its name.
log = logging.getLogger("costaware.ledger_spool")


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
