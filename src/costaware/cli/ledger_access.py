"""Opening the ledger a command names, and refusing a DAG or run id it has no entry of.

One rule for every command that reads the ledger (``report``, ``runs``, ``budget show``, ...): a mistyped
location or name is an error that says what the ledger has, never an empty answer read as "it cost nothing".
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from costaware.cli.ledger_connection import default_ledger_url

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger


def open_ledger(
    args: argparse.Namespace,
    *,
    reading: bool = False,
    read_only: bool = False,
    before_creating: Callable[[], object] | None = None,
    create_beside_others: bool = False,
) -> Ledger:
    """The ledger that ``--ledger-url`` names, else :func:`default_ledger_url`.

    ``reading``: the command needs an existing ledger, so a SQLite file that does not exist is a mistyped
    location (or nothing was recorded yet), not a ledger to create: opening it would make an empty one there
    and report "nothing" as if it were the real ledger.

    ``read_only``: the command writes nothing, so Airflow's metadata database that cannot be read (where the
    workers' ledger connection may be kept) is a warning, not a refusal.

    ``before_creating``: called where the SQLite file does not exist yet, or the database has no ledger's
    tables, before they are made; it raises where the command cannot succeed on an empty ledger, so that a
    refused command creates nothing. Without it, a command that writes makes a ledger only where the SQLite
    file does not exist yet or the database has no tables at all (made for the ledger: said on stderr), never
    in a database that holds other tables but no ledger's (a mistyped database name, Airflow's own) unless
    ``create_beside_others`` (`--create-ledger`: a ledger kept in Airflow's metadata database).

    Raises:
        CostawareError: ``reading`` and the SQLite file does not exist; the database exists without a
            ledger's tables and ``reading`` or no ``before_creating``; not ``read_only`` and the metadata
            database could not be read; what ``before_creating`` raises.
    """
    from costaware.adapters.ledger.engine import missing_sqlite_file
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.errors import CostawareError

    # A blank --ledger-url (a script's unset variable) is refused by the parser: not the default ledger.
    url = getattr(args, "ledger_url", None) or default_ledger_url(read_only=read_only)
    missing = missing_sqlite_file(url)
    refuse = reading  # where no ledger is there
    if missing is None:
        # A database that exists (PostgreSQL's, made by hand, or a SQLite file) is not made by opening it,
        # but a ledger's tables are: a refused command left them there, a command that reads made them and
        # reported "nothing" from a database that was no ledger (a mistyped database name), and `prices
        # refresh` filled a cache there that no task reads. Only a command that may make a ledger
        # (``before_creating``: `budget set`) makes its tables in it.
        from costaware.adapters.ledger.engine import safe_url
        from costaware.adapters.ledger.migrate import holds_ledger, holds_no_tables

        unopened = Ledger.from_url(url, create=False)
        if holds_ledger(unopened):
            unopened.create_schema()
            return unopened
        # An empty database was made for the ledger (the compose file's `costaware` database): `prices
        # import` may be the first command an offline deployment runs there.
        empty = holds_no_tables(unopened)
        unopened.dispose()
        # Said as a missing SQLite file is: a mistyped database name got a ledger's tables without a word.
        missing = f"{safe_url(url)} (the database has no costaware tables)"
        refuse = reading or (before_creating is None and not empty and not create_beside_others)
        if refuse and not reading and not empty:
            # Airflow's metadata database is a documented home of the ledger (docs/ledger.md): say why it
            # was refused and how to make one there without a budget.
            missing = (
                f"{safe_url(url)} (the database holds other tables but no costaware tables; if the ledger is "
                "to be kept there, as in Airflow's metadata database, add --create-ledger)"
            )
    if missing is not None and not refuse and before_creating is not None:
        before_creating()
    if missing is not None and not refuse:
        # Said, so that a mistyped path (sqlite:///tmp/x.db under the current folder, for sqlite:////tmp/x.db)
        # is seen before anything is written to a ledger no worker reads.
        print(f"costaware: no ledger at {missing} yet: creating one there", file=sys.stderr)
    if missing is not None and refuse:
        from costaware.cli.pending import spooled_here, spooled_said

        spooled = spooled_said(
            spooled_here(),
            "of this machine",
            why=" for the ledger the tasks used",
            then="`costaware spool show` lists {them}, `costaware spool drain` writes {them} there",
        )
        waiting = f" ({spooled})" if spooled else ""
        raise CostawareError(
            f"no ledger at {missing}{waiting}: check --ledger-url, AIRFLOW_CONN_COSTAWARE_LEDGER or "
            "COSTAWARE_LEDGER_URL (or run with the AIRFLOW_HOME of the deployment whose metadata database "
            "keeps the costaware_ledger connection); a ledger is made by the first DAG run that records a "
            "cost or by `costaware budget set`"
        )
    return Ledger.from_url(url)


def run_asked_for(args: argparse.Namespace, ledger: Any) -> str | None:
    """The run ``--run-id`` or ``--last-run`` names (None: every run).

    Raises:
        CostawareError: ``--last-run`` without ``--dag-id``, with ``--run-id``, or a DAG or run the ledger
            has no entries of (:func:`refuse_unknown_names`).
    """
    from costaware.core.errors import CostawareError

    if not args.last_run:
        refuse_unknown_names(ledger, args.dag_id, args.run_id)
        return args.run_id  # type: ignore[no-any-return]
    if not args.dag_id:
        raise CostawareError("--last-run needs --dag-id")
    if args.run_id:
        # One of them was silently ignored before.
        raise CostawareError(f"--last-run and --run-id {args.run_id!r} both name a run: give one of them")
    run_id = ledger.last_run_id(args.dag_id)
    if run_id is None:
        from costaware.cli.pending import what_waits

        waiting = what_waits(ledger, args.dag_id, None)
        if waiting:
            # As `--dag-id` alone answers it: an empty report with a note, not an unknown name (exit 2).
            print(
                f"costaware: note: the ledger has no entries for DAG {args.dag_id!r} yet, so no last run; "
                f"{waiting}",
                file=sys.stderr,
            )
            return None
        hint = dag_hint(ledger, args.dag_id)
        raise CostawareError(f"the ledger has no entries for DAG {args.dag_id!r} yet{hint}")
    return run_id  # type: ignore[no-any-return]


def refuse_unknown_names(ledger: Any, dag_id: str | None, run_id: str | None) -> None:
    """Refuse a ``--dag-id`` or run the ledger has no entry of: a typo read as "it cost nothing".

    One rule for every command: a DAG or run id the ledger has never seen is an error (exit 2), as
    ``runs show --last`` and ``report --last-run`` always made it; a known one that a window or a scope
    selects nothing of is an empty answer (exit 0). So is one whose costs only wait (spooled on this
    machine, or held by an open hold): a note on stderr says what waits.

    Raises:
        CostawareError: naming the id, with the DAGs the ledger has (and the closest one).
    """
    from costaware.cli.pending import runless_holds_note, what_waits
    from costaware.core.errors import CostawareError

    if dag_id and ledger.last_run_id(dag_id) is None:
        waiting = what_waits(ledger, dag_id, None)
        if not waiting:
            raise CostawareError(
                f"the ledger has no entries for DAG {dag_id!r}: check the name (a DAG that has not run yet "
                f"has none){dag_hint(ledger, dag_id)}{runless_holds_note(ledger) if run_id else ''}"
            )
        if not run_id:  # its costs are on their way (spooled, or held): a known name, answered as empty
            print(
                f"costaware: note: the ledger has no entries for DAG {dag_id!r} yet; {waiting}",
                file=sys.stderr,
            )
            return
    if run_id and not ledger.entries(dag_id=dag_id, run_id=run_id, limit=1):
        of_dag = f" of DAG {dag_id!r}" if dag_id else ""
        waiting = what_waits(ledger, dag_id, run_id)
        if not waiting:
            # Said as a possibility: a trainer outside Airflow may bill under a DAG id the ledger knows, and
            # a hold naming no run cannot be told from a mistyped run id.
            runless = runless_holds_note(ledger)
            raise CostawareError(
                # `costaware runs list` lists retrain outcomes only: a spend gate's DAG had no run in it.
                f"the ledger has no entries for run {run_id!r}{of_dag}: check the run id "
                f"({runs_listed(dag_id)}){runless}"
            )
        print(
            f"costaware: note: the ledger has no entries for run {run_id!r}{of_dag} yet; {waiting}",
            file=sys.stderr,
        )


def runs_listed(dag_id: str | None) -> str:
    """The ``costaware report`` that lists the runs with costs (of ``dag_id``, a DAG the ledger knows).

    Not ``--dag-id DAG`` for no DAG: copied as shown, that placeholder is refused as an unknown DAG (exit 2).
    """
    of_dag = f"--dag-id {shlex.quote(dag_id)} " if dag_id else ""
    return f"`costaware report {of_dag}--group-by run` lists the runs with costs"


def why_empty(ledger: Any, args: argparse.Namespace) -> str:
    """``: <why>`` where a report's scope is one the ledger has no entry of; else "".

    For ``costaware report`` (and ``--efficiency``) that selected nothing; an unknown DAG or run was refused
    before (:func:`refuse_unknown_names`).
    """
    from costaware.adapters.ledger.views import scope_hint

    hint = scope_hint(ledger, args.scope)
    return f": {hint}" if hint else ""


def dag_hint(ledger: Any, dag_id: str) -> str:
    """``; did you mean 'x'? DAGs in the ledger: ...`` for a DAG id the ledger has no entry of ("" if none).

    A typo read as "nothing recorded yet", like a DAG that never ran.
    """
    known = sorted({row.group for row in ledger.report(group_by="dag")} - {dag_id})
    if not known:
        return ""
    meant, listed = closest_dag(dag_id, known)
    return f"{meant} (DAGs in the ledger: {listed})"


def closest_dag(dag_id: str, known: list[str]) -> tuple[str, str]:
    """``; did you mean 'x'?`` for the DAG id of ``known`` closest to ``dag_id``, and ``known`` listed.

    The first is "" where none is close; the listing has the first 10, then ``...`` ("" if none is known).
    """
    import difflib

    meant = difflib.get_close_matches(dag_id, known, n=1)
    listed = ", ".join(known[:10]) + (" ..." if len(known) > 10 else "")
    return (f"; did you mean {meant[0]!r}?" if meant else ""), listed
