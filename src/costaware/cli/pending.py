"""What a DAG or run has outside the ledger's entries: costs spooled on this machine, and open holds.

A DAG whose first run met a ledger that was down has its cost only in the spool, and one whose first task is
running only a hold: neither is a mistyped name (:func:`costaware.cli.arguments.refuse_unknown_names`).
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any


def what_waits(ledger: Any, dag_id: str | None, run_id: str | None) -> str:
    """What of ``dag_id`` (and ``run_id``) waits outside the ledger's entries, in words; "" when nothing.

    Counted: the spooled entries of this machine that a drain will write (not those set aside as refused,
    which count nowhere until fixed), and the open holds of the DAG (and run): those whose holder names it,
    and those of another holder's form (a trial run outside Airflow) that a per-run budget holds in its run.
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

    folder, spooled = spooled_here(dag_id, run_id)
    holds = [r for r in ledger.open_reservations() if of_it(r)]
    said = []
    if spooled:
        one = spooled == 1
        said.append(
            f"{spooled} cost entr{'y' if one else 'ies'} of it wait{'s' if one else ''} in the spool "
            f"{folder} (the ledger could not be written then): `costaware spool drain` writes "
            f"{'it' if one else 'them'}"
        )
    if holds:
        held = format_usd_exact(sum((r.usd for r in holds), Decimal(0)))
        one = len(holds) == 1
        said.append(
            f"{len(holds)} open hold{'' if one else 's'} of it reserve{'s' if one else ''} {held} "
            f"(`costaware budget holds` lists {'it' if one else 'them'}; its task's cost settles it)"
        )
    return "; ".join(said)


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
        and not any(is_run_key(key) for key in ledger.hold_periods(hold.id).values())
    ]
    if not runless:
        return ""
    held = format_usd_exact(sum((hold.usd for hold in runless), Decimal(0)))
    holders = ", ".join(sorted({repr(hold.holder) for hold in runless})[:5])
    one = len(runless) == 1
    return (
        f"; {len(runless)} open hold{'' if one else 's'} of {holders} (outside Airflow) "
        f"reserve{'s' if one else ''} {held} but name{'s' if one else ''} no run: a hold keeps a run id only "
        f"in a per-run budget (`costaware budget set --period run`), so one of this run cannot be told from "
        f"{'it' if one else 'them'} (`costaware budget holds` lists {'it' if one else 'them'})"
    )


def spooled_here(dag_id: str | None = None, run_id: str | None = None) -> tuple[Path, int]:
    """This machine's spool and how many entries (of ``dag_id`` and ``run_id``) a drain of it will write.

    Counted in every folder a drain writes (an earlier release's too). Not those set aside as refused,
    which count nowhere until fixed, nor those billed meanwhile.
    """
    from costaware.ledger_spool import BILLED, REFUSED, spool_dirs_to_drain, spooled_files

    folders = spool_dirs_to_drain()
    spooled = 0
    for spooled_file in (found for folder in folders for found in spooled_files(folder)):
        if spooled_file.state in (REFUSED, BILLED) or spooled_file.data is None:
            continue
        entry = spooled_file.data.get("entry", spooled_file.data)
        if (
            isinstance(entry, dict)
            and (dag_id is None or entry.get("dag_id") == dag_id)
            and (run_id is None or entry.get("run_id") == run_id)
        ):
            spooled += 1
    return folders[0], spooled
