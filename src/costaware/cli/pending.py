"""What a DAG or run has outside the ledger's entries: costs spooled on this machine, and open holds.

A DAG whose first run met a ledger that was down has its cost only in the spool, and one whose first task is
running only a hold: neither is a mistyped name (:func:`costaware.cli.arguments.refuse_unknown_names`).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any


def kept_bill_of(holder: str) -> tuple[Any, str] | None:
    """The task key and entry uid of a kept bill's hold (:func:`costaware.spool_settle.unsure_holder`).

    ``<dag>/<run>/<task>/<map index>/unsure/<uid>``: no task holder form (the run's end leaves it open), so
    ``read_holder`` reads none from it; None for any other holder.
    """
    from costaware.core.ledger import read_holder

    if read_holder(holder) is not None:
        # A task's own holder first: task 'unsure' of run 'manual/2026/12' holds as
        # 'retrain/manual/2026/12/unsure/-1', not as a kept bill '-1' of run 'manual'.
        return None
    task, marker, uid = holder.rpartition("/unsure/")
    key = read_holder(task) if marker and uid and "/" not in uid else None
    return None if key is None or key.dag_id is None or key.suffix is not None else (key, uid)


def what_waits(ledger: Any, dag_id: str | None, run_id: str | None) -> str:
    """What of ``dag_id`` (and ``run_id``) waits outside the ledger's entries, in words; "" when nothing.

    Counted: the spooled entries of this machine that a drain will write or that wait on a person (not those
    set aside as refused, which count nowhere until fixed), and the open holds of the DAG (and run): those
    whose holder names it, those of another holder's form (a trial run outside Airflow) that a per-run
    budget holds in its run, and those of the bills kept for a person (on any machine), said apart.
    """
    from costaware.adapters.airflow_tasks import search_of
    from costaware.core.budgets import is_run_key, run_of_key
    from costaware.core.ledger import read_holder
    from costaware.core.money import format_usd_exact

    def named(dag: object, run: object) -> bool:
        return (dag_id is None or dag == dag_id) and (run_id is None or run == run_id)

    def of_it(hold: Any) -> bool:
        if search_of(hold.holder) is not None:  # a search's holder starts with its own id, not a DAG's
            return False
        key = read_holder(hold.holder)
        if key is not None:
            return named(key.dag_id, key.run_id)
        # Its holder names no run ('my-trainer-7'): refused as an unknown run, its cost was said nowhere.
        # A per-run budget's key names the run it was reserved for; 'run:<run>' names no DAG, and taken as
        # any DAG's it made every mistyped --dag-id a known one.
        runs = [run_of_key(k) for k in ledger.hold_periods(hold.id).values() if is_run_key(k)]
        return any(named(dag, run) for dag, run in runs)

    counts = spooled_here(dag_id, run_id)
    holds, kept = [], []
    # A kept bill's hold whose file this machine's spool holds is said with that file, not as a second bill.
    kept_here: dict[Path, list[Any]] = {}
    for hold in ledger.open_reservations():
        bill = kept_bill_of(hold.holder)
        if bill is not None and named(bill[0].dag_id, bill[0].run_id):
            folder = next((count.folder for count in counts if bill[1] in count.unsure_uids), None)
            if folder is None:
                kept.append((hold, bill[1]))
            else:
                kept_here.setdefault(folder, []).append(hold)
        elif bill is None and of_it(hold):
            holds.append(hold)
    held_here = {
        folder: (len(held), format_usd_exact(sum((hold.usd for hold in held), Decimal(0))))
        for folder, held in kept_here.items()
    }
    spooled = spooled_said(counts, "of it", kept_held=held_here)
    said = [spooled] if spooled else []
    if holds:
        held = format_usd_exact(sum((r.usd for r in holds), Decimal(0)))
        one = len(holds) == 1
        said.append(
            f"{len(holds)} open hold{'' if one else 's'} of it reserve{'s' if one else ''} {held} "
            f"(`costaware budget holds` lists {'it' if one else 'them'}; its task's cost settles it)"
        )
    if kept:
        said.append(_kept_bills_said(kept))
    return "; ".join(said)


def _kept_bills_said(kept: list[tuple[Any, str]]) -> str:
    """What the holds of bills kept for a person (each with its entry uid) hold, and what frees them.

    Only those whose file this machine's spool does not count: those it does are said with their folder.
    """
    from costaware.core.money import format_usd_exact

    held = format_usd_exact(sum((hold.usd for hold, _ in kept), Decimal(0)))
    one = len(kept) == 1
    it, uid = ("it", kept[0][1]) if one else ("them", "<uid>")
    # The file is on the machine whose drain kept it (or moved here since it was counted).
    return (
        f"the budget holds of {len(kept)} remote bill{'' if one else 's'} of it kept for a person (here or "
        f"on another machine) reserve {held} (`costaware spool show` lists {it} where "
        f"{'it was' if one else 'they were'} kept; `costaware spool drop {uid}` there frees "
        f"{'the hold' if one else 'a hold'} once the run is found billed already)"
    )


def runless_holds_note(ledger: Any) -> str:
    """``; <why>`` where open holds of holders outside Airflow name no run, so no run can claim them ("").

    Such a hold (holder ``my-trainer-7``) under budgets per month or day keeps no run id: the reservation
    stores its holder and budgets alone, and only a per-run budget's key names the run. ``report --run-id``
    of its run said only "no entries for run", as for a mistyped id.
    """
    from costaware.adapters.airflow_tasks import search_of
    from costaware.core.budgets import is_run_key
    from costaware.core.ledger import read_holder
    from costaware.core.money import format_usd_exact

    runless = [
        hold
        for hold in ledger.open_reservations()
        if search_of(hold.holder) is None
        and read_holder(hold.holder) is None
        and kept_bill_of(hold.holder) is None  # names its run: said by what_waits as a kept bill's
        and not any(is_run_key(key) for key in ledger.hold_periods(hold.id).values())
    ]
    if not runless:
        return ""
    # What they still hold: a hold part paid by its task's entries reserves only the rest.
    held = format_usd_exact(sum((ledger.unpaid(hold.id)[0] for hold in runless), Decimal(0)))
    holders = ", ".join(sorted({repr(hold.holder) for hold in runless})[:5])
    one = len(runless) == 1
    return (
        f"; if its cost is held outside Airflow: {len(runless)} open hold{'' if one else 's'} of {holders} "
        f"reserve{'s' if one else ''} {held} but name{'s' if one else ''} no run: a hold keeps a run id only "
        f"in a per-run budget (`costaware budget set --period run`), so one of this run cannot be told from "
        f"{'it' if one else 'them'} (`costaware budget holds` lists {'it' if one else 'them'})"
    )


@dataclass(frozen=True, slots=True)
class SpooledCount:
    """What one spool folder of this machine holds of a DAG (and run) outside the ledger."""

    folder: Path
    #: Entries a drain of it will write (waiting, or claimed by a drain).
    waiting: int
    #: Remote bills a drain kept in its ``unsure/`` for a person: written only once marked and moved back.
    unsure: int
    #: An earlier release's spool (:func:`costaware.ledger_spool.earlier_spool_dir`).
    earlier: bool
    #: The entry uids of those kept bills, which their holds' holders end with
    #: (:func:`costaware.spool_settle.unsure_holder`).
    unsure_uids: frozenset[str] = frozenset()


def spooled_here(dag_id: str | None = None, run_id: str | None = None) -> list[SpooledCount]:
    """Each spool folder of this machine that holds entries (of ``dag_id`` and ``run_id``) outside the ledger.

    Counted per folder a drain writes (an earlier release's too), each named: summed under the current
    one's name, the earlier folder's entries were said to wait where `spool show` found none. Not those set
    aside as refused, which count nowhere until fixed, nor those billed meanwhile.
    """
    from costaware.ledger_spool import UNSURE, spool_dirs_to_drain, spooled_files

    counts = []
    for index, folder in enumerate(spool_dirs_to_drain()):
        waiting = unsure = 0
        unsure_uids = set()
        for spooled_file in spooled_files(folder):
            if spooled_file.state not in ("waiting", "claimed", UNSURE) or spooled_file.data is None:
                continue
            entry = spooled_file.data.get("entry", spooled_file.data)
            if (
                isinstance(entry, dict)
                and (dag_id is None or entry.get("dag_id") == dag_id)
                and (run_id is None or entry.get("run_id") == run_id)
            ):
                if spooled_file.state == UNSURE:
                    unsure += 1
                    unsure_uids.add(str(entry.get("entry_uid")))
                else:
                    waiting += 1
        if waiting or unsure:
            counts.append(
                SpooledCount(folder, waiting, unsure, earlier=index > 0, unsure_uids=frozenset(unsure_uids))
            )
    return counts


def spooled_said(
    counts: list[SpooledCount],
    whose: str,
    why: str = " (the ledger could not be written then)",
    then: str = "`costaware spool drain` writes {them}",
    kept_held: dict[Path, tuple[int, str]] | None = None,
) -> str:
    """What ``counts`` hold, in words, each folder named ("" when nothing).

    ``whose`` says whose entries ("of it"), ``why`` why they wait (after the folder), ``then`` what writes
    them (``{them}``: "it" or "them"); ``kept_held``: per folder, how many of its kept bills have an open
    budget hold and what those reserve (formatted).
    """
    from costaware.ledger_spool import UNSURE

    said = []
    waiting = [count for count in counts if count.waiting]
    if waiting:
        total = sum(count.waiting for count in waiting)
        one = total == 1
        if len(waiting) == 1:
            # One folder: "the spools" read as several.
            which = "an earlier release's" if waiting[0].earlier else "the"
            where = f"{which} spool {waiting[0].folder}"
        else:
            earlier = "an earlier release's "
            where = "the spools " + " and ".join(
                f"{earlier if count.earlier else ''}{count.folder} ({count.waiting})" for count in waiting
            )
        said.append(
            f"{total} cost entr{'y' if one else 'ies'} {whose} wait{'s' if one else ''} in {where}{why}: "
            + then.format(them="it" if one else "them")
        )
    for count in counts:
        if count.unsure:
            one = count.unsure == 1
            holds = _holds_said(count.unsure, (kept_held or {}).get(count.folder))
            said.append(
                f"{count.unsure} remote bill{'' if one else 's'} {whose} {'is' if one else 'are'} kept for a "
                f"person in {count.folder / UNSURE}{holds}"
                f" (the ledger cannot tell whether a row of the job's name bills {'it' if one else 'them'}: "
                "the drain's log says what to do)"
            )
    return "; ".join(said)


def _holds_said(kept: int, held: tuple[int, str] | None) -> str:
    """``, its hold reserving $X``: the open holds of ``held[0]`` of a folder's ``kept`` bills ("": none)."""
    if held is None:
        return ""
    holding, usd = held
    if holding == kept:
        return f", {'its hold' if kept == 1 else 'their holds'} reserving {usd}"
    return f", the hold{'' if holding == 1 else 's'} of {holding} of them reserving {usd}"
