"""The ``costaware`` parser, built from the declarations in :mod:`costaware.cli.config`, and the entry point.

The ledger URL comes from ``--ledger-url``, else the ``costaware_ledger`` connection (the environment's, else
Airflow's metadata database's), else ``COSTAWARE_LEDGER_URL``, else the SQLite file at
``$AIRFLOW_HOME/costaware/ledger.db`` (the same order the Airflow side uses).
"""

from __future__ import annotations

import argparse
import configparser
import contextvars
import itertools
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from costaware.cli.arguments import ARG_LEDGER_URL_GLOBAL, GIVEN_OPTIONS, ActionCommand, GroupCommand
from costaware.cli.config import COMMANDS, DESCRIPTION
from costaware.cli.log_output import route_logs_to_stderr, stop_routing
from costaware.core.errors import CostawareError
from costaware.settings import airflow_cfg_problem

#: The command line being parsed, for an error that names an option the user wrote abbreviated.
_GIVEN: contextvars.ContextVar[Sequence[str]] = contextvars.ContextVar("given", default=())


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose "expected one argument" asks for the value (and how to give one with -).

    Options are matched whole: argparse's prefix matching read ``prices list --gpu A100`` as ``--gpu-model``
    in silence, and an error then spoke of an option the user never typed (``--gpu-m``: "argument
    --gpu-model: expected one argument"). An abbreviation is an unknown option, with the one meant offered.
    The command's subparsers are made by this class, so they match whole too.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith("the following arguments are required"):
            # `budget set --per month`: the abbreviation is left aside, so its option is "required".
            options = [o for action in self._actions for o in action.option_strings]
            cut = [
                f"write {meant[0]} in full, not {name}"
                for token in _GIVEN.get()
                if token.startswith("--") and (name := token.split("=", 1)[0]) not in options and name != "--"
                if len(meant := [o for o in options if o.startswith(name)]) == 1
            ]
            message += f" ({'; '.join(cut)})" if cut else ""
        if message.endswith("expected one argument"):
            flag = message.removeprefix("argument ").split(":", 1)[0].split("/")[-1].strip()
            # Most often the value was left out (`--cap-usd` last, or `--cap-usd $UNSET --period month`).
            message += (
                f" (give {flag} its value; a value that starts with '-' goes after '=', as in {flag}=-VALUE: "
                "argparse reads it as an option otherwise)"
            )
        super().error(message)


def _add_action(subparsers: argparse._SubParsersAction[_Parser], cmd: ActionCommand) -> None:
    parser = subparsers.add_parser(cmd.name, help=cmd.help, description=cmd.description or cmd.help)
    for arg in cmd.args:
        arg.add_to(parser)
    parser.set_defaults(func=cmd.func, command_parser=parser)


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, where an unknown option is told by its own command, with the one meant.

    argparse leaves extras to the top parser, whose usage ("costaware [-h] ... COMMAND") says nothing of
    the command's options: ``prices show m5.large --regoin us-east-1`` read as if the command were wrong.
    """
    given = list(sys.argv[1:] if argv is None else argv)
    _GIVEN.set(given)
    _refuse_unknown_before_command(parser, given)
    args, extras = parser.parse_known_args(argv)
    vars(args).pop(GIVEN_OPTIONS, None)
    if extras:
        command: argparse.ArgumentParser = getattr(args, "command_parser", parser)
        options = [o for action in command._actions for o in action.option_strings]
        # `runs show --run-id X`, as `report --run-id X` is written: the command takes the run id by
        # position, and the closest option (--dag-id) was offered instead.
        positional = {a.dest: a.metavar or a.dest for a in command._actions if not a.option_strings}
        as_positional = [
            f"{e.split('=')[0]} is not an option here: write the {positional[name]} alone, without it"
            for e in extras
            if e.startswith("--") and (name := e.split("=")[0][2:].replace("-", "_")) in positional
        ]
        meant = [
            m
            for e in extras
            if e.startswith("-") and e.split("=")[0][2:].replace("-", "_") not in positional
            for m in _meant(e.split("=")[0], options)
        ]
        hint = f" ({'; '.join(as_positional)})" if as_positional else ""
        hint += f" (did you mean {', '.join(meant)}?)" if meant else ""
        if any(value.endswith(",") for value in _values_of("--types", argv)):
            # `--types m5.large, g5.*`: the shell split the list at the blank, and g5.* was "unrecognized".
            hint += (
                " (--types takes one value: write its names without blanks, quoted, e.g. "
                "--types 'm5.large,g5.*')"
            )
        command.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
    after = getattr(args, "ledger_url_after", None)
    if after is not None:
        before = getattr(args, "ledger_url", None)
        if before is not None and before != after:
            # The one after the command won in silence: a budget set written this way went to either.
            command = getattr(args, "command_parser", parser)
            command.error(
                f"--ledger-url is given twice, before the command ({before}) and after it ({after}): give one"
            )
        args.ledger_url = after
    return args


def _meant(given: str, options: Sequence[str]) -> list[str]:
    """The options ``given`` may stand for: those it abbreviates, else the closest spelling.

    ``--gpu``: ``--gpu-model`` (difflib alone offered ``--min-gpus``); ``--regoin``: ``--region``.
    """
    import difflib

    started = sorted(o for o in options if given.startswith("--") and o.startswith(given))
    return started or difflib.get_close_matches(given, options, n=1)


def _refuse_unknown_before_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Refuse an unknown option before the command by its name (``costaware --ledger URL report``).

    The top parser leaves it aside and takes its value for the command: "invalid choice: 'URL'" named
    neither the option nor the one meant (``--ledger-url``).
    """
    takes_value = {o: a.nargs != 0 for a in parser._actions for o in a.option_strings}
    tokens = iter(argv)
    for token in tokens:
        if not token.startswith("-") or token == "--":
            return  # the command: what follows is its parser's to judge
        name = token.split("=", 1)[0]
        if name not in takes_value:
            meant = _meant(name, list(takes_value))
            hint = f" (did you mean {', '.join(meant)}?)" if meant else ""
            parser.error(f"unrecognized arguments: {token}{hint}")
        if takes_value[name] and "=" not in token:
            next(tokens, None)


def _values_of(flag: str, argv: Sequence[str] | None) -> list[str]:
    """The values given to ``flag`` on the command line (``--flag VALUE`` and ``--flag=VALUE``)."""
    tokens = list(sys.argv[1:] if argv is None else argv)
    spaced = [value for given, value in itertools.pairwise(tokens) if given == flag]
    return spaced + [token.split("=", 1)[1] for token in tokens if token.startswith(f"{flag}=")]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``costaware`` command; imports no command module."""
    parser = _Parser(prog="costaware", description=DESCRIPTION)
    ARG_LEDGER_URL_GLOBAL.add_to(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS:
        if isinstance(cmd, GroupCommand):
            group = subparsers.add_parser(cmd.name, help=cmd.help, description=cmd.description or cmd.help)
            actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
            for sub in cmd.subcommands:
                _add_action(actions, sub)
        else:
            _add_action(subparsers, cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``costaware`` command; returns the exit code.

    A :class:`~costaware.core.errors.CostawareError` (bad input, an unknown price, an unreachable ledger)
    prints ``costaware: error: <message>`` on stderr and returns 2; argparse's own errors exit with 2.
    Ctrl-C prints ``costaware: interrupted`` and returns 130.
    """
    args = _parse(build_parser(), argv)
    route_logs_to_stderr()
    since, until = getattr(args, "since", None), getattr(args, "until", None)
    if since is not None and until is not None and since >= until:
        print(
            f"costaware: error: --since {since.isoformat()} is not before --until {until.isoformat()}: "
            + (
                "the range is empty: --until is exclusive, give a later one"
                if since == until
                else "swap them"
            ),
            file=sys.stderr,
        )
        return 2
    try:
        return int(args.func(args))
    except CostawareError as e:
        print(f"costaware: error: {e}", file=sys.stderr)
        return 2
    except configparser.Error as e:  # raised by Airflow's import, which reads airflow.cfg
        print(f"costaware: error: {airflow_cfg_problem(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C: a line, not a traceback through whatever module was running. 130 is what a shell gives a
        # command killed by SIGINT, so `costaware ... && next` stops as it would for any other command.
        print("costaware: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader stopped early (`costaware report | head`): what it read is what it wanted. Point stdout
        # at /dev/null so that Python's flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        stop_routing()  # a command that never imported Airflow leaves a calling program's imports alone
