"""The pieces commands are declared with, and the arguments several commands share.

Modelled on Airflow's ``airflow/cli/cli_config.py``: an :class:`Arg` is an ``add_argument`` call kept as data,
an :class:`ActionCommand` names its function by import path (:func:`lazy_load_command`), so building the
parser imports no command module, and a :class:`GroupCommand` holds subcommands. This module imports only
light ``core`` modules: ``costaware --help`` must not pay for SQLAlchemy, pandas or Airflow.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import importlib
import math
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from costaware.cli.output import FORMATS
from costaware.core.budgets import Period
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import GROUP_BYS
from costaware.core.ledger import group_by_name as grouping_of

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger


class Arg:
    """One command-line argument: the flags and keyword arguments of ``ArgumentParser.add_argument``.

    A text value that is blank is refused while the command line is parsed (see :func:`refuse_blank`):
    ``if_empty`` says what to give instead; ``allow_empty`` keeps blank text for a flag where it means
    something (``--thresholds ''``: the defaults).
    """

    def __init__(self, *flags: str, if_empty: str | None = None, allow_empty: bool = False, **kwargs: Any):
        self.flags = flags
        self.kwargs = kwargs
        self.if_empty = if_empty
        self.allow_empty = allow_empty

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add this argument to ``parser``."""
        kwargs = dict(self.kwargs)
        # Only plain text: a typed value (a number, a date) or a choice refuses '' on its own.
        stores_text = kwargs.get("action", "store") in ("store", "append")
        plain_text = stores_text and not {"type", "choices"} & set(kwargs)
        if plain_text and not self.allow_empty:
            optional = self.flags[0].startswith("-") and not kwargs.get("required")
            what = f" ({kwargs['help'].replace('%%', '%')})" if "help" in kwargs else ""
            generic = f"give a value{what}" + (", or leave the option out" if optional else "")
            kwargs["type"] = refuse_blank(self.if_empty or generic)
        if kwargs.get("type") in (float, int):
            # argparse said "invalid float value: 'x'", naming Python's type and not what to type.
            kwargs["type"] = number_type(kwargs["type"], kwargs.get("default"))
        if "choices" in kwargs and "type" not in kwargs:
            # A keyword is matched whatever its case (--format JSON, --service EC2), as --period Month was.
            kwargs["type"] = lowercase
        if kwargs.get("action", "store") == "store" and self.flags[0].startswith("-"):
            kwargs["action"] = StoreOnce
        parser.add_argument(*self.flags, **kwargs)


class StoreOnce(argparse.Action):
    """argparse's ``store``, refusing a single-valued option given twice with different values.

    argparse keeps the last in silence: ``--cap-usd 2 --cap-usd 3`` set a $3 cap where a script had appended
    its override to a default, or a pasted line repeated the flag.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = namespace.__dict__.setdefault(GIVEN_OPTIONS, {})
        if self.dest in given and given[self.dest] != values:
            first, then = (_as_typed(v) for v in (given[self.dest], values))
            raise argparse.ArgumentError(
                self, f"given twice ({first}, then {then}): give it once (the last alone would be read)"
            )
        given[self.dest] = values
        setattr(namespace, self.dest, values)


def _as_typed(value: Any) -> str:
    """An option's value as the user may have typed it: ``'2'``, ``2026-11-01T00:00:00+00:00``."""
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value) if isinstance(value, str) else str(value)


#: Where :class:`StoreOnce` keeps the values given; removed from the namespace after parsing.
GIVEN_OPTIONS = "_options_given"


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """A command function named by import path; its module is imported when the command runs."""

    path: str

    def load(self) -> Callable[[argparse.Namespace], int]:
        """The function itself (imports its module)."""
        module, _, name = self.path.rpartition(".")
        func: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), name)
        return func

    def __call__(self, args: argparse.Namespace) -> int:
        return self.load()(args)


def lazy_load_command(path: str) -> LazyCommand:
    """The command function at ``path`` (``package.module.function``), imported only when it runs."""
    return LazyCommand(path)


class ActionCommand(NamedTuple):
    """A command that runs: ``costaware report``, ``costaware budget set``."""

    name: str
    help: str
    func: LazyCommand
    args: Sequence[Arg] = ()
    description: str | None = None


class GroupCommand(NamedTuple):
    """A command with subcommands: ``costaware budget``."""

    name: str
    help: str
    subcommands: Sequence[ActionCommand]
    description: str | None = None


class LazyChoices(Sequence[str]):
    """Choices kept in a module that is too heavy to import while the parser is built.

    argparse reads them only to check a given value or to print that command's help; the argument must have
    a ``metavar`` (argparse would otherwise list the choices while it builds the parser).
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def _values(self) -> tuple[str, ...]:
        module, _, name = self.path.rpartition(".")
        return tuple(getattr(importlib.import_module(module), name))

    def __getitem__(self, index: Any) -> Any:
        return self._values()[index]

    def __len__(self) -> int:
        return len(self._values())

    def __iter__(self) -> Iterator[str]:
        return iter(self._values())

    def __contains__(self, value: object) -> bool:
        return value in self._values()


# -- argument types -------------------------------------------------------------------------------


def refuse_blank(hint: str) -> Callable[[str], str]:
    """An argument type that refuses blank text, told with ``hint``, and keeps any other text as it is.

    Blank text is most often a script's unset variable (``--store "$STORE"``): read as "not given", it
    listed or evicted the default store, or set a budget in the default time zone, without a word.
    """

    def text(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"empty: {hint}")
        return value

    return text


def number_type(kind: type[float] | type[int], default: object = None) -> Callable[[str], float | int]:
    """An argument type reading a ``float`` or ``int`` as Python does, refusing anything else in words.

    argparse names the option before the message: ``argument --max-age-days: 'x' is not a number: ...``.
    """
    whole = kind is int
    example = f"{default:g}" if isinstance(default, int | float) and default else ("20" if whole else "2.5")

    def read(text: str) -> float | int:
        try:
            return kind(text)
        except ValueError:
            what = "a whole number" if whole else "a number"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {what}: type it in digits, e.g. {example}"
                + (" (a '.' before the decimals, not ',')" if "," in text and not whole else "")
            ) from None

    read.__name__ = kind.__name__  # what argparse's own messages and `--help` call the type
    return read


def midnight_utc(text: str) -> datetime | None:
    """A date alone (``2026-11-01``) as its midnight UTC; None for text of another length (a time).

    Raises:
        ValueError: ten characters that are no ISO date.
    """
    if len(text) != 10:
        return None
    return datetime.combine(date.fromisoformat(text), datetime.min.time(), tzinfo=timezone.utc)


def when(text: str) -> datetime:
    """An ISO date (UTC midnight) or an ISO datetime with an offset."""
    try:
        value = midnight_utc(text) or datetime.fromisoformat(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO date (2026-11-01) or datetime") from e
    if value.tzinfo is None and len(text) == 8 and text.isdigit():
        # 20261201 parses as a datetime without a zone, and "add one" is no answer for a date.
        dashed = f"{text[:4]}-{text[4:6]}-{text[6:]}"
        raise argparse.ArgumentTypeError(f"{text!r} is a date without dashes: write {dashed} (midnight UTC)")
    if value.tzinfo is None:
        # Only a datetime gets the example: "20260201+00:00" is no date either.
        example = f"{text}+00:00" if "T" in text or " " in text else "2026-11-01T00:00+01:00"
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone: add one, e.g. {example}")
    return value


def check_range(
    flag: str, value: float, *, low: float, high: float | None = None, low_included: bool = True
) -> None:
    """Refuse ``value`` below ``low`` (or at it, unless ``low_included``), above ``high``, or not finite.

    Raises:
        ConfigurationError: named with the flag and the value as typed (a timedelta or a slice of it is not).
    """
    above_low = value >= low if low_included else value > low
    if not (math.isfinite(value) and above_low and (high is None or value <= high)):
        least = f"{low:g} or more" if low_included else f"more than {low:g}"
        most = "" if high is None else f" and at most {high:g}"
        # inf or nan is refused for not being a number, not for being under the lower bound.
        number = "" if math.isfinite(value) else "a finite number, "
        raise ConfigurationError(f"{flag} must be {number}{least}{most}, got {value:g}")


def fraction(text: str) -> float:
    """A share as a number (0.25); '25%' was refused as "invalid float value", naming no form to use."""
    try:
        return float(text)
    except ValueError:
        percent = text.strip().removesuffix("%")
        try:
            example = f"{float(percent) / 100:g} for {percent}%"
        except ValueError:
            example = "0.25 for 25%"
        raise argparse.ArgumentTypeError(
            f"{text!r} is no fraction: give one as a number, e.g. {example}"
        ) from None


def lowercase(text: str) -> str:
    """``Month`` -> ``month``: a choice is matched whatever its case."""
    return text.strip().lower()


def group_by_name(text: str) -> str:
    """``--group-by`` as :func:`costaware.core.ledger.group_by_name` reads it; empty is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give what one row of the report is, e.g. --group-by task")
    return grouping_of(text)


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
        from costaware.cli.pending import spooled_here

        folder, spooled = spooled_here()
        one = spooled == 1
        waiting = (
            f" ({spooled} cost entr{'y' if one else 'ies'} of this machine wait{'s' if one else ''} in the "
            f"spool {folder} for the ledger the tasks used: `costaware spool show` lists "
            f"{'it' if one else 'them'}, `costaware spool drain` writes {'it' if one else 'them'} there)"
            if spooled
            else ""
        )
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
    from costaware.cli.pending import what_waits
    from costaware.core.errors import CostawareError

    if dag_id and ledger.last_run_id(dag_id) is None:
        waiting = what_waits(ledger, dag_id, None)
        if not waiting:
            raise CostawareError(
                f"the ledger has no entries for DAG {dag_id!r}: check the name (a DAG that has not run yet "
                f"has none){dag_hint(ledger, dag_id)}"
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
            raise CostawareError(
                # `costaware runs list` lists retrain outcomes only: a spend gate's DAG had no run in it.
                f"the ledger has no entries for run {run_id!r}{of_dag}: check the run id "
                f"({runs_listed(dag_id)})"
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


def default_ledger_url(*, read_only: bool = False) -> str:
    """The ledger the workers use, read in ``CostLedgerHook``'s order.

    The ``costaware_ledger`` connection when the environment gives it (``AIRFLOW_CONN_COSTAWARE_LEDGER``, as
    the docker compose file does), else when Airflow's metadata database of ``AIRFLOW_HOME`` keeps it (the
    UI, ``airflow connections add``), else ``COSTAWARE_LEDGER_URL``, else the embedded SQLite file.

    Without the first two, a budget set from a compose container, or beside a connection added in the UI,
    went to a SQLite file no worker reads. Airflow is imported only then: the other commands stay quick.

    ``read_only``: a metadata database that cannot be read is said on stderr and the fallback ledger read;
    otherwise it is refused, as the workers may keep their ledger there.

    Raises:
        CostawareError: not ``read_only`` and Airflow's metadata database (or a secrets backend) failed.
    """
    import os

    from costaware.adapters.ledger.engine import safe_url
    from costaware.core.errors import CostawareError
    from costaware.settings import ledger_url

    if os.environ.get("AIRFLOW_CONN_COSTAWARE_LEDGER", "").strip():
        from costaware.hooks.ledger import CostLedgerHook

        with _logging_as_before_airflow():  # the hook imports Airflow, which turns its INFO lines on
            return CostLedgerHook().get_url()
    try:
        return ledger_url_in_airflow_database() or ledger_url()
    except ConnectionLookupError as e:
        if not read_only:
            # The fallback would take a budget (or prices) that no gate reads, where the workers' ledger is
            # the one that connection names.
            raise CostawareError(
                f"{e}: nothing written, as the workers may use the ledger that connection names; fix it "
                "(`airflow db migrate`, the deployment's AIRFLOW_HOME, or the secrets backend) or give "
                "--ledger-url with the workers' ledger"
            ) from e
        print(
            f"costaware: warning: {e}: reading {safe_url(ledger_url())}; give --ledger-url if the workers "
            "use another ledger",
            file=sys.stderr,
        )
        return ledger_url()


class ConnectionLookupError(Exception):
    """Airflow's metadata database (or a secrets backend) failed when asked for a connection.

    Not "no such connection": Airflow's own look-up logs that failure at debug level and answers "not
    defined", and the command then wrote to a ledger the workers do not use.
    """


def ledger_url_in_airflow_database(conn_id: str | None = None) -> str | None:
    """The URL of connection ``conn_id`` (default ``costaware_ledger``) kept in Airflow's metadata database.

    Asked in the order of ``airflow connections get``: the secrets backend of airflow.cfg, the environment,
    then the metadata database. Not asked where ``AIRFLOW_HOME`` has no such database (a SQLite file that is
    not there) and no secrets backend is set: importing Airflow costs about 2 s.

    Raises:
        ConnectionLookupError: Airflow's configuration, a secrets backend or the metadata database failed
            (not migrated, down): whether it keeps the connection is not known.
    """
    parser = _airflow_cfg()  # read once for both checks below
    if not _airflow_database_may_exist(parser):
        return None
    from costaware.adapters.ledger.engine import url_from_connection_fields
    from costaware.glue import DEFAULT_LEDGER_CONN_ID

    conn_id = conn_id or DEFAULT_LEDGER_CONN_ID
    with _logging_as_before_airflow(), _airflow_import_bounded(parser):
        conn = _connection_from_secrets_backends(conn_id)
    if conn is None:
        return None
    return url_from_connection_fields(
        conn.conn_id, conn.conn_type, conn.host, conn.login, conn.password, conn.port, conn.schema, conn.extra
    )


def _connection_from_secrets_backends(conn_id: str) -> Any:
    """Connection ``conn_id`` from Airflow's secrets backends, None where none keeps it.

    ``Connection.get_connection_from_secrets`` is not used: it takes a backend's failure for "not there".

    Raises:
        ConnectionLookupError: Airflow could not be set up, or a backend failed.
    """

    def said(e: BaseException) -> str:
        driver_error = getattr(e, "orig", None)  # SQLAlchemy's, without the long SELECT it adds
        return " ".join(str(driver_error or e).split())[:300] or type(e).__name__

    try:
        from airflow.configuration import ensure_secrets_loaded
        from airflow.secrets.metastore import MetastoreBackend

        backends = ensure_secrets_loaded()
    except Exception as e:
        raise ConnectionLookupError(
            f"cannot load Airflow's configuration or secrets backends to read connection {conn_id!r} "
            f"({said(e)})"
        ) from e
    for backend in backends:
        try:
            conn = backend.get_connection(conn_id=conn_id)
        except Exception as e:
            where = (
                f"Airflow's metadata database{_metadata_database_named()}"
                if isinstance(backend, MetastoreBackend)
                else f"Airflow's secrets backend {type(backend).__name__}"
            )
            raise ConnectionLookupError(f"cannot read connection {conn_id!r} from {where} ({said(e)})") from e
        if conn is not None:
            return conn
    return None


def _metadata_database_named() -> str:
    """`` at <URL>`` of Airflow's metadata database, its password masked ("" where it cannot be read)."""
    from airflow.configuration import conf

    from costaware.adapters.ledger.engine import safe_url

    try:
        return f" at {safe_url(conf.get('database', 'sql_alchemy_conn'))}"
    except Exception:  # a failing sql_alchemy_conn_cmd: the look-up's own error says what failed
        return ""


@contextlib.contextmanager
def _logging_as_before_airflow() -> Iterator[None]:
    """Keep the logging levels Airflow's import changes as they were: the command's stderr stays quiet.

    Airflow sets the root logger (and its own) to INFO when imported: the ledger's migration and a budget
    set then logged ``[info]`` lines that the same command without Airflow does not. A process that
    imported Airflow itself keeps its settings.
    """
    import logging

    if "airflow" in sys.modules:
        yield
        return
    root = logging.getLogger()
    level = root.level
    try:
        yield
    finally:
        root.setLevel(level)
        if "airflow" in logging.Logger.manager.loggerDict:
            logging.getLogger("airflow").setLevel(logging.NOTSET)  # as the root logger, as before


def _airflow_database_may_exist(parser: configparser.RawConfigParser | None) -> bool:
    """Whether Airflow may keep connections: False only for no SQLite metadata file and no secrets backend.

    A Vault's connection was ignored where ``AIRFLOW_HOME`` had no airflow.db. Read from the environment or
    airflow.cfg (``parser``, :func:`_airflow_cfg`'s) without importing Airflow.
    """
    import os
    from pathlib import Path

    if parser is None:
        return True  # Airflow says what is wrong with it
    if (
        os.environ.get("AIRFLOW__SECRETS__BACKEND", "").strip()
        or parser.get("secrets", "backend", fallback="").strip()
    ):
        return True
    url = _metadata_database_url(parser)
    if url is None or not url.startswith("sqlite"):
        return True
    path = url.partition(":///")[2].partition("?")[0]
    return not path or path == ":memory:" or Path(path).is_file()


def _airflow_cfg() -> configparser.RawConfigParser | None:
    """``$AIRFLOW_HOME/airflow.cfg`` read without Airflow (empty where there is none); None if unreadable."""
    from costaware.settings import airflow_home

    parser = configparser.RawConfigParser(strict=False)
    try:
        parser.read(airflow_home() / "airflow.cfg")
    except configparser.Error:
        return None
    return parser


def _metadata_database_url(parser: configparser.RawConfigParser) -> str | None:
    """Airflow's metadata database URL as the environment or ``parser`` give it.

    None where a command or a secret gives it: only Airflow can read those.
    """
    import os

    from costaware.settings import airflow_home

    url = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "").strip()
    if url:
        return url
    url = parser.get("database", "sql_alchemy_conn", fallback="").strip()
    if not url and (
        parser.has_option("database", "sql_alchemy_conn_cmd")
        or parser.has_option("database", "sql_alchemy_conn_secret")
        or any(os.environ.get(f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_{k}") for k in ("CMD", "SECRET"))
    ):
        return None
    return url or f"sqlite:///{airflow_home() / 'airflow.db'}"


#: How long the look-up waits for Airflow's metadata database to answer a connect: libpq (PostgreSQL) and
#: MySQL's drivers wait for the OS's TCP timeout otherwise, minutes on a firewalled host.
METADATA_CONNECT_TIMEOUT_SECONDS = 5
#: The ``[database] sql_alchemy_connect_args`` Airflow imports by path while the CLI imports it.
METADATA_CONNECT_ARGS = {"connect_timeout": METADATA_CONNECT_TIMEOUT_SECONDS}
_CONNECT_ARGS_OPTION = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"
_LOG_FOLDER_OPTION = "AIRFLOW__LOGGING__BASE_LOG_FOLDER"


def _connect_timeout_in_url(url: str | None) -> str | None:
    """The ``connect_timeout`` the metadata database URL sets in its query (None: not set, or unreadable)."""
    if not url:
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        query = make_url(url).query
    except (ArgumentError, ValueError):
        return None  # the look-up itself says what is wrong with the URL
    value = query.get("connect_timeout")
    if isinstance(value, tuple):  # given twice: the driver reads the last
        value = value[-1] if value else None
    return (str(value).strip() or None) if value is not None else None


@contextlib.contextmanager
def _airflow_import_bounded(parser: configparser.RawConfigParser | None) -> Iterator[None]:
    """Import Airflow for a connection look-up that waits a bounded time and leaves no trace when it fails.

    * A metadata database that does not answer (a firewalled PostgreSQL, a hung server) held the command for
      the driver's connect timeout, none by default for libpq: the look-up gets
      :data:`METADATA_CONNECT_ARGS`, unless airflow.cfg or the environment sets connect arguments or the
      URL its own ``connect_timeout``.
    * Importing Airflow makes its log folder (``$AIRFLOW_HOME/logs``): where the look-up then fails, an
      empty one made here is removed, as a command that reads a ledger writes no Airflow logs.

    A process that imported Airflow already keeps its engine and folders as they are.

    Raises:
        ConnectionLookupError: the look-up's, naming the unreachable database where the timeout ran out.
    """
    import os
    from pathlib import Path

    from costaware.settings import airflow_home

    if "airflow" in sys.modules or parser is None:
        yield
        return
    url = _metadata_database_url(parser)
    in_url = _connect_timeout_in_url(url)
    # SQLAlchemy's connect_args win over the URL's query: a URL's own connect_timeout (a slow Aurora
    # Serverless waking up) was cut to ours.
    own_connect_args = bool(
        os.environ.get(_CONNECT_ARGS_OPTION, "").strip()
        or parser.get("database", "sql_alchemy_connect_args", fallback="").strip()
    )
    bounded = url is not None and not url.startswith("sqlite") and in_url is None and not own_connect_args
    # Said in the message only where known: connect arguments of the deployment's own win over the URL's.
    timeout_used = METADATA_CONNECT_TIMEOUT_SECONDS if bounded else None if own_connect_args else in_url
    folder = os.environ.get(_LOG_FOLDER_OPTION) or parser.get("logging", "base_log_folder", fallback="") or ""
    logs = Path(folder.replace("{AIRFLOW_HOME}", str(airflow_home())) or airflow_home() / "logs")
    logs_existed = logs.exists()
    if bounded:
        os.environ[_CONNECT_ARGS_OPTION] = f"{__name__}.METADATA_CONNECT_ARGS"
    try:
        yield
    except ConnectionLookupError as e:
        if not logs_existed:
            # rmdir removes only an empty folder: one another process wrote into meanwhile is kept.
            with contextlib.suppress(OSError):
                logs.rmdir()
        if timeout_used is not None and "timeout expired" in str(e).lower():
            raise ConnectionLookupError(
                f"{e}: it did not answer within {timeout_used} s; check that it is up and reachable from here"
            ) from e
        raise
    finally:
        if bounded:
            os.environ.pop(_CONNECT_ARGS_OPTION, None)


# -- shared arguments -----------------------------------------------------------------------------

LEDGER_URL_HELP = (
    "SQLAlchemy URL of the ledger (default: the costaware_ledger connection in "
    "$AIRFLOW_CONN_COSTAWARE_LEDGER or Airflow's metadata database, else $COSTAWARE_LEDGER_URL, else "
    "$AIRFLOW_HOME/costaware/ledger.db)"
)
#: Before the command (``costaware --ledger-url URL report``); the same flag after it sets it only if given.
LEDGER_URL_IF_EMPTY = (
    "give the ledger's URL (e.g. postgresql://user:password@host/costaware), or leave the option out for the "
    "default ledger"
)
ARG_LEDGER_URL_GLOBAL = Arg("--ledger-url", help=LEDGER_URL_HELP, if_empty=LEDGER_URL_IF_EMPTY)
ARG_LEDGER_URL = Arg(
    "--ledger-url",
    dest="ledger_url_after",  # read beside the global one: both given and different is refused
    metavar="LEDGER_URL",
    default=argparse.SUPPRESS,
    help=LEDGER_URL_HELP,
    if_empty=LEDGER_URL_IF_EMPTY,
)
ARG_CREATE_LEDGER = Arg(
    "--create-ledger",
    action="store_true",
    help="make the ledger's tables in a database that holds other tables but none of costaware's (a "
    "ledger kept in Airflow's metadata database); without it such a database is refused as a mistyped one",
)
ARG_FORMAT = Arg("--format", choices=FORMATS, default="table", help="output format (default: table)")
ARG_PERIOD = Arg(
    "--period",
    required=True,
    type=lowercase,
    choices=[p.value for p in Period],
    help="the budget's period: how often its cap starts afresh",
)
ARG_GROUP_BY = Arg(
    "--group-by",
    default="task",
    type=group_by_name,
    metavar="{" + ",".join((*GROUP_BYS, "tag:<name>")) + "}",
    help="what one row of the report is (default: task)",
)
SCOPE_HELP = "tags the budget covers, e.g. project=churn,team=ml"
# Most likely an unset shell variable: read as '*', it would set or delete the budget over every run.
SCOPE_IF_EMPTY = "give the budget's tags, e.g. --scope project=churn, or '*' for the budget over every run"
ARG_SCOPE = Arg("--scope", required=True, help=SCOPE_HELP, if_empty=SCOPE_IF_EMPTY)


def unquoted_scope(text: str) -> str:
    """A new budget's ``--scope``, refusing blank text and a tag name or value in quotes.

    ``--scope 'project="churn"'`` made a budget over the tag value ``"churn"``, quotes included, which no
    task's tags have: it capped nothing. Tags are compared exactly, so the quotes are refused, not dropped.
    """
    from costaware.core.budgets import quoted_scope_refusal

    if not text.strip():
        raise argparse.ArgumentTypeError(f"empty: {SCOPE_IF_EMPTY}")
    refusal = quoted_scope_refusal(text, lambda bare: f"--scope {shlex.quote(bare)}")
    if refusal is not None:
        raise argparse.ArgumentTypeError(refusal)
    return text


ARG_NEW_SCOPE = Arg("--scope", required=True, type=unquoted_scope, help=SCOPE_HELP)
ARG_DAG_ID = Arg("--dag-id", help="only this DAG")
ARG_SINCE = Arg(
    "--since",
    type=when,
    help="ISO date (midnight UTC) or datetime with an offset (2026-11-01T00:00+01:00), inclusive",
)
ARG_UNTIL = Arg("--until", type=when, help="ISO date (midnight UTC) or datetime with an offset, exclusive")


def instance_type_list(text: str) -> str:
    """A ``--types`` value: names or globs separated by commas, each without blanks inside.

    ``','`` named no type and the import blamed the file; ``'m5.large c5.xlarge'`` was read as one name with
    a space in it, and the error suggested types close to that.
    """
    hint = "give a type or pattern such as 'g5.*' or 'm5*', or several separated by commas ('m5.large,c5.*')"
    if not text.strip():  # most often a script's unset variable, as for every text option
        raise argparse.ArgumentTypeError(f"empty: {hint}, or leave --types out for all")
    from costaware.core.price_list import type_patterns  # the reading the price filters apply

    named = type_patterns(text)
    if not named:
        raise argparse.ArgumentTypeError(f"{text!r} names no type: {hint}, or leave --types out for all")
    spaced = [pattern for pattern in named if len(pattern.split()) > 1]
    if spaced:
        separated = ",".join(name for pattern in named for name in pattern.split())
        raise argparse.ArgumentTypeError(
            f"{spaced[0]!r} is several names separated by blanks: separate them with commas "
            f"(--types '{separated}')"
        )
    return ",".join(named)


ARG_TYPES = Arg(
    "--types",
    type=instance_type_list,
    help="instance types to keep: a name or a glob such as 'm5*' or 'ml.g5.*', or several separated by "
    "commas ('m5.large,c5.*')",
)
ARG_SERVICE = Arg("--service", choices=("ec2", "sagemaker"), default=None, help="default: from the type")
