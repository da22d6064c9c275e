"""The pieces commands are declared with, and the arguments several commands share.

Modelled on Airflow's ``airflow/cli/cli_config.py``: an :class:`Arg` is an ``add_argument`` call kept as data,
an :class:`ActionCommand` names its function by import path (:func:`lazy_load_command`), so building the
parser imports no command module, and a :class:`GroupCommand` holds subcommands. This module imports only
light ``core`` modules: ``costaware --help`` must not pay for SQLAlchemy, pandas or Airflow.

The argument types live in :mod:`costaware.cli.argument_types`, opening the ledger in
:mod:`costaware.cli.ledger_access`, finding the workers' ledger in :mod:`costaware.cli.ledger_connection`:
their names are imported here too, as commands and tests import them from here.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from costaware.cli.argument_types import (
    check_range,
    fraction,
    group_by_name,
    lowercase,
    midnight_utc,
    number_type,
    refuse_blank,
    when,
)
from costaware.cli.ledger_access import (
    closest_dag,
    dag_hint,
    open_ledger,
    refuse_unknown_names,
    run_asked_for,
    runs_listed,
    why_empty,
)
from costaware.cli.ledger_connection import (
    METADATA_CONNECT_ARGS,
    METADATA_CONNECT_TIMEOUT_SECONDS,
    ConnectionLookupError,
    _airflow_cfg,
    _airflow_database_may_exist,
    default_ledger_url,
    ledger_url_in_airflow_database,
)
from costaware.cli.output import FORMATS
from costaware.core.budgets import Period
from costaware.core.ledger import GROUP_BYS

# Every public name this module had before its types, ledger opening and connection look-up moved out, and
# the private ones tests import from here.
__all__ = [
    "ARG_CREATE_LEDGER",
    "ARG_DAG_ID",
    "ARG_FORMAT",
    "ARG_GROUP_BY",
    "ARG_LEDGER_URL",
    "ARG_LEDGER_URL_GLOBAL",
    "ARG_NEW_SCOPE",
    "ARG_PERIOD",
    "ARG_SCOPE",
    "ARG_SERVICE",
    "ARG_SINCE",
    "ARG_TYPES",
    "ARG_UNTIL",
    "GIVEN_OPTIONS",
    "LEDGER_URL_HELP",
    "LEDGER_URL_IF_EMPTY",
    "METADATA_CONNECT_ARGS",
    "METADATA_CONNECT_TIMEOUT_SECONDS",
    "SCOPE_HELP",
    "SCOPE_IF_EMPTY",
    "ActionCommand",
    "Arg",
    "ConnectionLookupError",
    "GroupCommand",
    "LazyChoices",
    "LazyCommand",
    "StoreOnce",
    "_airflow_cfg",
    "_airflow_database_may_exist",
    "check_range",
    "closest_dag",
    "dag_hint",
    "default_ledger_url",
    "fraction",
    "group_by_name",
    "instance_type_list",
    "lazy_load_command",
    "ledger_url_in_airflow_database",
    "lowercase",
    "midnight_utc",
    "number_type",
    "open_ledger",
    "refuse_blank",
    "refuse_unknown_names",
    "run_asked_for",
    "runs_listed",
    "unquoted_scope",
    "when",
    "why_empty",
]


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


#: The package of the command modules: the declarations in ``costaware.cli.config*`` name paths under it.
COMMANDS_PACKAGE = "costaware.cli.commands"


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
