"""``costaware spool show|drain|drop``: the cost entries waiting on this machine for the ledger.

A task's cost that the ledger could not take waits in the spool until a drain writes it. The listener
drains after its next entry succeeds on the same machine; on a pod per task, an ephemeral worker, or a
scheduler whose killed tries are rare, that may be never. ``spool drain`` writes them now, with the
listener's claim protocol (:mod:`costaware.ledger_spool`), so it is safe beside running tasks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costaware.cli.output import emit, emit_summary

if TYPE_CHECKING:
    from costaware.core.ledger import Reservation


def _folder(args: argparse.Namespace) -> Path:
    """The spool ``--spool-dir`` names, else this machine's; a folder given that does not exist is refused.

    Raises:
        CostawareError: ``--spool-dir`` is not a folder.
    """
    from costaware.adapters.object_store.location import expand_user
    from costaware.core.errors import CostawareError
    from costaware.ledger_spool import spool_dir

    if args.spool_dir is None:
        return spool_dir()  # none yet: nothing was ever spooled here
    # Path.expanduser raised a bare RuntimeError for a home nobody has (~nosuchuser, HOME unset).
    given = str(args.spool_dir)
    # Absolute: pathlib drops a leading './', and './~/airflow/...' (a folder named '~') read as the home's.
    folder = Path(expand_user(given, what="--spool-dir", uri=given, example=str(spool_dir()))).absolute()
    if not folder.is_dir():
        raise CostawareError(
            f"--spool-dir {args.spool_dir!r} is not a folder: give the spool folder the workers write "
            "($AIRFLOW_HOME/costaware/spool on them, or where its volume is mounted here)"
        )
    return folder


def _folders(args: argparse.Namespace, folder: Path) -> list[Path]:
    """The spools to read: a folder given alone, else this machine's and an earlier release's.

    As the listener drains them and the count of what waits sees them.
    """
    from costaware.ledger_spool import spool_dirs_to_drain

    return [folder] if args.spool_dir is not None else spool_dirs_to_drain(folder)


def _also(folders: list[Path]) -> str:
    """The folders read beside the first, for a sentence naming it."""
    return "".join(f" (and {f}, an earlier release's)" for f in folders[1:])


def _command(args: argparse.Namespace, verb: str) -> str:
    """``costaware spool <verb>`` for a hint, with the ``--spool-dir`` given: without it, another folder."""
    import shlex

    where = f" --spool-dir {shlex.quote(str(args.spool_dir))}" if args.spool_dir is not None else ""
    return f"`costaware spool {verb}{where}`"


def show(args: argparse.Namespace) -> int:
    """List the spooled entries: waiting, claimed by a drain, refused, billed meanwhile, or kept (unsure)."""
    folder = _folder(args)
    folders = _folders(args, folder)
    files = [(each, spooled) for each in folders for spooled in _spooled_files(each)]
    if not files and args.format == "table":
        print(f"spool {folder}{_also(folders)}: empty, no cost entry waits for the ledger")
        return 0
    # An earlier release's entries by their whole path: a name alone reads as one of this spool.
    ledgers: dict[str, Any] = {}
    rows = [
        [*_row(spooled, named_by_path=each != folder), _hold_of(spooled, ledgers)] for each, spooled in files
    ]
    headers = ["file", "state", "ledger_conn_id", "dag_id", "run_id", "task_id", "try", "usd", "hold"]
    emit(rows, args.format, headers=headers)
    return 0


def _spooled_files(folder: Path) -> Any:
    from costaware.ledger_spool import spooled_files

    return spooled_files(folder)


def _row(spooled: Any, *, named_by_path: bool = False) -> list[Any]:
    from costaware.glue import DEFAULT_LEDGER_CONN_ID

    name = str(spooled.path) if named_by_path else spooled.path.name
    data = spooled.data
    if data is None:
        return [name, f"{spooled.state} (unreadable)", "", "", "", "", "", ""]
    entry = data.get("entry", data)
    entry = entry if isinstance(entry, dict) else {}
    return [
        name,
        spooled.state,
        data.get("ledger_conn_id", DEFAULT_LEDGER_CONN_ID),
        *(entry.get(name, "") for name in ("dag_id", "run_id", "task_id", "try_number", "usd")),
    ]


def _hold_of(spooled: Any, ledgers: dict[str, Any]) -> str:
    """A kept (unsure) bill's budget hold: ``held $X``, ``none``, or ``unknown (why)``; other states: blank.

    ``ledgers``: each connection's ledger, or the error opening it raised, opened once per ``show``.
    """
    from costaware.core.ledger import entry_from_json
    from costaware.core.money import format_usd_exact
    from costaware.glue import DEFAULT_LEDGER_CONN_ID
    from costaware.ledger_spool import UNSURE
    from costaware.spool_settle import unsure_holder

    if spooled.state != UNSURE or spooled.data is None:
        return ""
    conn_id = str(spooled.data.get("ledger_conn_id", DEFAULT_LEDGER_CONN_ID))
    try:
        if conn_id not in ledgers:
            try:
                ledgers[conn_id] = _open_ledger(conn_id)
            except Exception as e:  # said on each of its bills; the listing goes on
                ledgers[conn_id] = e
        ledger = ledgers[conn_id]
        if isinstance(ledger, Exception):
            raise ledger
        holds = ledger.open_holds_of(unsure_holder(entry_from_json(spooled.data["entry"])))
    except Exception as e:
        return f"unknown ({e})"
    return "held " + " + ".join(format_usd_exact(hold.usd) for hold in holds) if holds else "none"


def _open_ledger(conn_id: str) -> Any:
    """The ledger of ``conn_id`` as the workers open it (Airflow's metadata database first, as the drain).

    Raises:
        CostawareError: the connection or its ledger cannot be read on this machine.
    """
    from costaware.ledger_spool import workers_ledger

    url = _kept_in_airflow_database(conn_id)
    return _ledger_kept_in_airflow_database(conn_id, url) if url else workers_ledger(conn_id)


def _kept_in_airflow_database(conn_id: str, *, mid_drain: bool = False) -> str | None:
    """The ledger URL of ``conn_id`` where only Airflow's metadata database keeps it (the UI), else None.

    The hook outside a task does not read that database: the drain wrote the workers' entries to the SQLite
    file under ``$AIRFLOW_HOME``, a ledger no budget reads. ``mid_drain``: asked for an entry spooled after
    the drain began, when other entries may have been written already.

    Raises:
        CostawareError: the metadata database could not be read (the entries would go to the fallback
            ledger where that connection may name another).
    """
    import os

    from costaware.cli.arguments import ConnectionLookupError, ledger_url_in_airflow_database
    from costaware.core.errors import CostawareError

    if os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}", "").strip():
        return None  # the hook reads it, as a worker does
    try:
        url = ledger_url_in_airflow_database(conn_id)
    except ConnectionLookupError as e:
        if mid_drain:
            # Not "nothing drained": the entries asked about up front may be written by now.
            raise CostawareError(
                f"{e}; its entries would go to a ledger the workers may not use; fix it (`airflow db "
                "migrate`, the deployment's AIRFLOW_HOME, or the secrets backend) or give this machine the "
                f"workers' ledger connection as AIRFLOW_CONN_{conn_id.upper()}"
            ) from e
        raise CostawareError(
            f"{e}: nothing drained, as the entries of {conn_id!r} would go to a ledger the workers may not "
            "use; fix it (`airflow db migrate`, the deployment's AIRFLOW_HOME, or the secrets backend) or "
            f"give this machine the workers' ledger connection as AIRFLOW_CONN_{conn_id.upper()}, and drain "
            "again"
        ) from e
    return url


def _ledger_kept_in_airflow_database(conn_id: str, url: str) -> Any:
    """The ledger at ``url``, which connection ``conn_id`` in Airflow's metadata database names.

    Raises:
        CostawareError: a SQLite file that does not exist here (its entries wait).
    """
    from costaware.adapters.ledger.engine import missing_sqlite_file
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.errors import CostawareError

    missing = missing_sqlite_file(url)
    if missing is not None:
        raise CostawareError(
            f"no ledger at {missing}, which connection {conn_id!r} in Airflow's metadata database names: "
            "this machine does not see the workers' ledger file; run the drain where it is"
        )
    return Ledger.from_url(url)


def _waiting_conn_ids(folder: Path) -> set[str]:
    """The ledger connections of the entries waiting in ``folder`` (an unreadable file names none).

    Claimed entries count: one a killed drain claimed is put back and written by this drain. Left out, its
    connection was looked up only mid-drain, after other ledgers' entries were written.
    """
    from costaware.glue import DEFAULT_LEDGER_CONN_ID

    return {
        str(spooled.data.get("ledger_conn_id", DEFAULT_LEDGER_CONN_ID))
        for spooled in _spooled_files(folder)
        if spooled.state in ("waiting", "claimed") and spooled.data is not None
    }


def drain(args: argparse.Namespace) -> int:
    """Write every spooled entry to the ledger its task used; 1 when any waits, was refused or kept unsure.

    Raises:
        CostawareError: ``--ledger-url`` given (each entry names its own ledger), a bad ``--spool-dir``, or
            Airflow's metadata database, where a waiting entry's connection may be kept, cannot be read.
    """
    from costaware.core.errors import CostawareError
    from costaware.ledger_spool import (
        BILLED,
        REFUSED,
        UNSURE,
        workers_ledger,
    )
    from costaware.ledger_spool_drain import combined
    from costaware.ledger_spool_drain import drain as drain_spool

    if getattr(args, "ledger_url", None):
        # Written to another ledger than its task's, an entry counts against budgets that never held it.
        raise CostawareError(
            f"spool drain writes each entry to the ledger its task used (the connection `costaware spool "
            f"show` lists), not to --ledger-url {args.ledger_url}: leave --ledger-url out and give this "
            "machine the workers' ledger connection (AIRFLOW_CONN_<ID> or COSTAWARE_LEDGER_URL)"
        )
    folder = _folder(args)
    folders = _folders(args, folder)
    # Asked before anything is claimed: a metadata database that cannot be read refuses the whole drain.
    waiting_conn_ids = set().union(*(_waiting_conn_ids(f) for f in folders))
    kept = {conn_id: _kept_in_airflow_database(conn_id) for conn_id in sorted(waiting_conn_ids)}
    ledgers: dict[str, Any] = {}

    def ledger_for(conn_id: str) -> Any:
        if conn_id not in ledgers:
            # A connection not asked up front: an entry spooled since (its entries wait if this fails).
            url = kept[conn_id] if conn_id in kept else _kept_in_airflow_database(conn_id, mid_drain=True)
            ledgers[conn_id] = (
                _ledger_kept_in_airflow_database(conn_id, url) if url else workers_ledger(conn_id)
            )
        return ledgers[conn_id]

    drains = [drain_spool(each, ledger_for) for each in folders]
    result = combined(drains)
    # Where each drained folder moved bills: the earlier release's moves them to its own billed/ and unsure/.
    billed_in = [
        each / BILLED for each, drained in zip(folders, drains, strict=True) if drained.billed_already
    ]
    unsure_in = [each / UNSURE for each, drained in zip(folders, drains, strict=True) if drained.unsure]
    # Counted after the drain: what another process claimed (writing it now, or killed doing so) waits too.
    waiting = sum(len(list(f.glob("*.json"))) + len(list(f.glob("*.claimed"))) for f in folders)
    # This drain's, and older ones still there.
    refused = sum(len(list((f / REFUSED).glob("*.json"))) for f in folders)
    unavailable = result.unavailable or {}
    summary = {
        "spool": str(folder),
        "also_drained": [str(f) for f in folders[1:]],
        "written": result.written,
        "still_waiting": waiting,
        "refused": result.refused,
        "billed_already": result.billed_already,
        "unsure": result.unsure,
        "unavailable_ledgers": unavailable,
        # Last, as any later one: a script reads the CSV row's columns by position.
        "already_in_ledger": result.already_in_ledger,
    }
    sentence = (
        f"spool {folder}{_also(folders)}: {result.written} written, {waiting} still waiting, "
        f"{result.refused} refused"
    )
    if result.already_in_ledger:
        # Not billed now: the ledger had each one's entry_uid (the log names any at another figure).
        sentence += f", {result.already_in_ledger} already in the ledger: not written again"
    if result.billed_already:
        # Not written, not waiting, not refused: said, or a bill gone from the spool is unaccounted for.
        moved_to = " and ".join(str(f) for f in billed_in)
        sentence += f", {result.billed_already} already billed meanwhile: moved to {moved_to}"
    if result.unsure:
        # Not written: a person tells which run a row of the job's name bills (the log says how).
        sentence += (
            f", {result.unsure} kept for a person (a row of the job's name may bill the same run; the log "
            f"says what to do): moved to {' and '.join(str(f) for f in unsure_in)}"
        )
    emit_summary(summary, args.format, sentence)
    for conn_id, why in sorted(unavailable.items()):
        print(
            f"costaware: ledger {conn_id!r} could not be written ({why}): its entries wait; fix it and run "
            f"{_command(args, 'drain')} again",
            file=sys.stderr,
        )
    if waiting and not unavailable:
        print(
            "costaware: entries claimed by another drain are written by it; one killed while it drained "
            f"is put back 15 minutes after it claimed it: run {_command(args, 'drain')} again then",
            file=sys.stderr,
        )
    if refused:
        print(
            f"costaware: {refused} entr{'y' if refused == 1 else 'ies'} that could not be written "
            f"(unreadable, or refused by the ledger) {'is' if refused == 1 else 'are'} kept in "
            f"{folder / REFUSED} ({_command(args, 'show')} lists them; the reason is logged above): fix the "
            "file, move it back to the spool and drain again",
            file=sys.stderr,
        )
    return 1 if waiting or result.refused or result.unsure else 0


def _released_said(freed: list[Reservation]) -> str:
    """What a drop released of a kept bill's holds (``freed``), in a sentence's words."""
    from costaware.core.money import format_usd_exact

    if not freed:
        return "it had no open hold"
    return "released its hold " + ", ".join(f"{hold.id} ({format_usd_exact(hold.usd)})" for hold in freed)


def _release_holds_of(ledger: Any, holder: str, *, unless_back: Path | None = None) -> list[Reservation]:
    """Release the open holds of ``holder`` (a kept bill's); those released here, not by another meanwhile.

    ``unless_back``: the bill's file, looked for once the holds are read; there again, they are a new
    keep's (its keeper writes the file before its hold) and none is released.

    Raises:
        LedgerUnavailableError: the ledger stopped answering.
    """
    holds = ledger.open_holds_of(holder)
    if unless_back is not None and unless_back.exists():
        return []
    released = [ledger.release_hold(hold.id) for hold in holds]
    return [r.reservation for r in released if r.released_here]


def drop(args: argparse.Namespace) -> int:
    """Remove a bill kept in ``spool/unsure`` (a person found it bills the run already) and free its hold.

    The hold kept for it (:func:`costaware.spool_settle.hold_unsure`) is released first: where the ledger
    cannot be written, nothing is removed, or its money stayed held with no file left to say why. Its holds
    are read again once the file is gone: a hold kept for it as it was dropped is released too.

    Raises:
        CostawareError: no bill of that name is kept in ``unsure/`` (naming it and the command that lists
            them), its file cannot be read as a bill, its ledger cannot be opened or written (nothing
            dropped), the file cannot be removed once its hold is released, or the ledger stops answering
            once it is removed (each said so).
    """
    from costaware.core.errors import CostawareError, LedgerUnavailableError
    from costaware.core.ledger import entry_from_json
    from costaware.core.money import format_usd_exact
    from costaware.glue import DEFAULT_LEDGER_CONN_ID
    from costaware.ledger_spool import UNSURE
    from costaware.spool_settle import unsure_holder

    folder = _folder(args)
    uid = str(args.entry_uid).removesuffix(".json")
    # A name with a separator could reach a file outside unsure/: never one of its bills.
    candidates = [] if not uid or "/" in uid else [f / UNSURE / f"{uid}.json" for f in _folders(args, folder)]
    kept = next((path for path in candidates if path.is_file()), None)
    if kept is None:
        raise CostawareError(
            f"no bill {args.entry_uid!r} is kept in {folder / UNSURE}: {_command(args, 'show')} lists the "
            "kept bills (state unsure) by file name, <entry uid>.json"
        )
    try:
        data = json.loads(kept.read_text())
        entry = entry_from_json(data["entry"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CostawareError(
            f"{kept} cannot be read as a bill ({e}): nothing dropped; look at it, and delete it by hand "
            "where it bills a run already (release its hold, listed by `costaware budget holds`, too)"
        ) from e
    again = _command(args, f"drop {uid}")
    try:
        ledger = _open_ledger(str(data.get("ledger_conn_id", DEFAULT_LEDGER_CONN_ID)))
        freed = _release_holds_of(ledger, unsure_holder(entry))
    except LedgerUnavailableError as e:
        # The ledger's own words end with "nothing was recorded or reserved": not what a drop did.
        raise CostawareError(
            f"nothing dropped: {uid} is kept in {kept}; run {again} again once the ledger answers ({e})"
        ) from e
    try:
        kept.unlink()
    except OSError as e:
        # Its hold is released already: the file alone is left, which `spool show` still lists as kept.
        raise CostawareError(
            f"{uid}: {_released_said(freed)}, but {kept} could not be removed ({e.strerror or e}): the file "
            'stays; remove it by hand (or, where it bills another run, add "another_run": true, move it back '
            "into the spool and drain it)"
        ) from e
    # The keeper takes its hold, then looks for the file: where both fell between the read above and the
    # unlink, neither released that hold (held 30 days, no file). Each side acts first and reads the other
    # second: read again once the file is gone. A keeper writes its file before its hold, so a file back by
    # then is a new keep, its hold that keep's own: left held.
    try:
        late = _release_holds_of(ledger, unsure_holder(entry), unless_back=kept)
    except LedgerUnavailableError as e:
        raise CostawareError(
            f"{uid}: {_released_said(freed)} and removed {kept}, but the ledger stopped answering before a "
            f"hold taken for it as it was dropped could be looked for ({e}): `costaware budget holds` lists "
            "such a hold; release it once the ledger answers"
        ) from e
    freed += late
    held = _released_said(freed)
    summary = {
        "dropped": str(kept),
        "entry_uid": entry.entry_uid,
        "usd": str(entry.usd),
        "released_holds": [{"id": hold.id, "usd": str(hold.usd)} for hold in freed],
    }
    sentence = f"dropped {kept} (entry {entry.entry_uid}, {format_usd_exact(entry.usd)}, not written): {held}"
    emit_summary(summary, args.format, sentence)
    return 0
