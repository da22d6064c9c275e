"""The command line of ``costaware-run``: its options, a launcher's own command taken into another's, run.

``launcher.main`` (the console script) calls :func:`run` with its ``Launcher``: given, not imported, so that
this module and ``launcher`` do not import each other.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeAlias

from costaware_runtime import __version__, contract
from costaware_runtime._job_process import _start_failure
from costaware_runtime._signals import Notices
from costaware_runtime.contract import JobEnvironment
from costaware_runtime.errors import ContractError, StoreError

log = logging.getLogger("costaware_runtime.launcher")  # the launcher's messages keep its logger

#: Set for the job by the launcher: a ``costaware-run`` inside a job (an image whose ``ENTRYPOINT`` is
#: ``costaware-run --``, started by a backend that adds its own) runs its command directly instead of
#: launching it a second time (two restores, two uploads, two signal relays).
LAUNCHED = "COSTAWARE_LAUNCHED"


def _seconds(text: str) -> float:
    """A number of seconds as Python reads a float, refused in words (as the costaware CLI does)."""
    try:
        return float(text)
    except ValueError:
        # argparse said only "invalid float value: 'x'"; it names the option before this.
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number: type it in digits, e.g. 1"
            + (" (a '.' before the decimals, not ',')" if "," in text else "")
        ) from None


_seconds.__name__ = "float"  # what argparse's own messages and --help call the type


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``costaware-run``."""
    parser = argparse.ArgumentParser(
        prog="costaware-run",
        description="Run one attempt of a training job under the costaware job contract.",
        allow_abbrev=False,  # '--grace 30' was taken for --grace-seconds without a word
        epilog="Exit codes: the job's own, or 2 (contract broken), 74 (store failed: retry), 75 (preempted "
        "after a checkpoint), 76 (job exited 75 with no checkpoint), 77 (preempted before any checkpoint).",
    )
    parser.add_argument(
        "--grace-seconds",
        default=None,  # text, checked by the contract's parser: a bad value is named as typed
        help="seconds between passing on SIGTERM and SIGKILL "
        f"(default: ${contract.GRACE_SECONDS} or {contract.DEFAULT_GRACE_SECONDS:g})",
    )
    parser.add_argument(
        "--poll-seconds",
        type=_seconds,
        default=None,
        help="how often to look for a new checkpoint (default: 1)",
    )
    parser.add_argument(
        "--no-sync",
        action="store_true",
        help="set the checkpoint folder but never restore or push it (SageMaker syncs /opt/ml/checkpoints)",
    )
    parser.add_argument(
        "--no-outputs",
        action="store_true",
        help="the job stores its model itself (the provider's built-in trainers): no output folder is set, "
        "checked or uploaded; the metrics are still required, and the job's own exit 74 (a store it reads or "
        "writes failed) is passed on as 74, retried",
    )
    parser.add_argument(
        "--signal-group",
        action="store_true",
        help="pass SIGTERM to the job's whole process group, not only to the command (for commands that "
        "do not pass it on; it kills PyTorch DataLoader workers before the job can save)",
    )
    parser.add_argument("--quiet", action="store_true", help="report only warnings and errors")
    parser.add_argument("--version", action="version", version=f"costaware-runtime {__version__}")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the job's command")
    return parser


#: The options whose values a launcher may not give two ways (outside and inside), and the flags it ORs.
_VALUED_OPTIONS = {"grace_seconds": "--grace-seconds", "poll_seconds": "--poll-seconds"}
_FLAGS = ("no_sync", "no_outputs", "signal_group", "quiet")  # quiet last: it changes only the logging


def _is_launcher(command: Sequence[str]) -> bool:
    """Whether ``command`` is ``costaware-run ...`` or ``python -m costaware_runtime ...``."""
    return Path(command[0]).name == "costaware-run" or list(command[1:3]) == ["-m", "costaware_runtime"]


def _adopt(parser: argparse.ArgumentParser, options: argparse.Namespace, command: Sequence[str]) -> list[str]:
    """Take a launcher's own ``costaware-run [options] -- ...`` command into this one: its inner command.

    An image whose ENTRYPOINT is ``costaware-run --`` given ``costaware-run --no-outputs -- ...`` by a
    backend launched the inner one under the outer, which ran its command directly and dropped its
    options: a built-in training that succeeded then failed with "left no files in COSTAWARE_OUTPUT_DIR".
    """
    inner = parser.parse_args(command[3 if command[1:3] == ["-m", "costaware_runtime"] else 1 :])
    for name, flag in _VALUED_OPTIONS.items():
        mine, theirs = getattr(options, name), getattr(inner, name)
        if mine is not None and theirs is not None and not _same_number(mine, theirs):
            parser.error(
                f"{flag} {mine} here and {flag} {theirs} in the command's own costaware-run disagree: "
                "give it once (the command's own launcher is run as part of this one)"
            )
        setattr(options, name, theirs if mine is None else mine)
    for name in _FLAGS:
        setattr(options, name, getattr(options, name) or getattr(inner, name))
    rest: list[str] = inner.command
    return rest[1:] if rest[:1] == ["--"] else rest


def _same_number(a: object, b: object) -> bool:
    try:
        return float(str(a)) == float(str(b))
    except ValueError:
        return a == b


def _given(options: argparse.Namespace) -> list[str]:
    """The options given on the command line that change what a launcher does, as typed."""
    valued = [
        f"{flag} {getattr(options, name)}"
        for name, flag in _VALUED_OPTIONS.items()
        if getattr(options, name) is not None
    ]
    return valued + ["--" + name.replace("_", "-") for name in _FLAGS[:-1] if getattr(options, name)]


class _Attempt(Protocol):
    """What :func:`run` needs of a ``launcher.Launcher``."""

    def run(self, command: Sequence[str]) -> int: ...

    def remove_scratch(self) -> None: ...


_MakeAttempt: TypeAlias = Callable[[JobEnvironment, argparse.Namespace, Notices], _Attempt]


def run(argv: Sequence[str] | None, make_attempt: _MakeAttempt) -> int:
    """Run ``costaware-run`` with ``argv``, the attempt made by ``make_attempt``; returns the exit code."""
    parser = build_parser()
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    while command and _is_launcher(command):
        command = _adopt(parser, options, command)
    if not command:
        parser.error("no command: use costaware-run [options] -- <command...>")
    if os.environ.get(LAUNCHED) == "1" and _given(options):
        # Inside a job (a shell script's costaware-run): the outer launcher's options are the ones in force.
        print(
            f"costaware-run: already under a launcher, which runs this command with its own options: "
            f"{' '.join(_given(options))} here is ignored; give it to the outer costaware-run",
            file=sys.stderr,
        )
    if options.poll_seconds is None:
        options.poll_seconds = 1.0
    if os.environ.get(LAUNCHED) == "1":
        try:
            os.execvp(command[0], command)  # already under a launcher: become the command
        except OSError as e:
            code, said = _start_failure(command, e)
            print(f"costaware-run: {said}", file=sys.stderr)
            return code
    notices = Notices()
    notices.install()  # before the store checks: a notice then is kept, not lost or fatal
    _log_to_stderr(quiet=options.quiet)
    for name, meant in _misspelt_variables(os.environ):
        # COSTAWARE_CHECKPOINTS_URI was ignored in silence: no checkpoint was pushed, nothing resumed.
        log.warning("%s is not a variable costaware-run reads: did you mean %s?", name, meant)
    try:
        launcher = make_attempt(JobEnvironment.from_env(), options, notices)
    except ContractError as e:
        log.error("%s", e)
        return contract.EXIT_CONTRACT_ERROR
    except StoreError as e:  # a store that cannot be reached now (its endpoint): before any training
        log.error("%s", e)
        return contract.EXIT_SYNC_FAILED
    try:
        return launcher.run(command)
    finally:
        launcher.remove_scratch()


def _log_to_stderr(*, quiet: bool) -> None:
    """Write the runtime's messages to stderr as ``costaware-run: ...`` (``quiet``: warnings and errors)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("costaware-run: %(message)s"))
    root = logging.getLogger("costaware_runtime")
    root.addHandler(handler)
    root.setLevel(logging.WARNING if quiet else logging.INFO)


def _misspelt_variables(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """``COSTAWARE_*`` variables close to one of the contract's but not one: ``(given, meant)``.

    Only close ones: the provider's own settings (``COSTAWARE_LEDGER_URL``) may be in a job's environment.
    """
    import difflib

    known = [value for name, value in vars(contract).items() if name.isupper() and str(value).startswith(
        "COSTAWARE_")] + [LAUNCHED]  # fmt: skip
    found = []
    for name in sorted(environ):
        if name.startswith("COSTAWARE_") and name not in known:
            meant = difflib.get_close_matches(name, known, n=1, cutoff=0.9)
            if meant:
                found.append((name, meant[0]))
    return found
