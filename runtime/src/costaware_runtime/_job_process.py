"""The job's process in words (its stdin, why it did not start, how it exited) and torchrun's wait."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger("costaware_runtime.launcher")  # the launcher's messages keep its logger


def _job_stdin() -> int | None:
    """The job's standard input: the launcher's, unless that is a terminal.

    The job runs in a process group of its own (so that a notice can end it whole), which is a background
    group of the terminal: its first read of the terminal (``input()``, a ``breakpoint()``) would stop it
    for good and the launcher would wait forever. Given no input instead, such a read ends at once
    (``EOFError``), and the job fails with its own traceback.
    """
    try:
        at_terminal = os.isatty(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):  # no stdin, or one without a file descriptor
        return None
    if not at_terminal:
        return None
    log.info("the job reads no terminal input (it runs in a process group of its own): stdin is empty")
    return subprocess.DEVNULL


def _start_failure(command: Sequence[str], error: OSError) -> tuple[int, str]:
    """The exit code (127 not found, 126 cannot run) and the words for a command that did not start."""
    if isinstance(error, FileNotFoundError):
        found = command[0] if os.sep in command[0] else shutil.which(command[0])
        if found and Path(found).is_file():
            # The file is there: what is missing is the interpreter its #! line names.
            with contextlib.suppress(OSError), open(found, "rb") as script:
                line = script.readline(200).decode(errors="replace").rstrip("\n")
                first = line.strip()
                if first.startswith("#!") and line.endswith("\r"):
                    # Windows line endings: the kernel looks for an interpreter named "python3\r".
                    return 127, (
                        f"{command[0]} has Windows line endings (CRLF): its first line names the program "
                        f"{first[2:].strip()!r} followed by a carriage return; convert it (dos2unix)"
                    )
                if first.startswith("#!"):
                    return 127, (
                        f"the interpreter of {command[0]} was not found: its first line {first!r} names "
                        "a program this image does not have; install it, or fix that line"
                    )
            return 127, (
                f"{command[0]} could not be started: {error.strerror} (the file is there: a program it "
                "needs to start, such as its loader, is not)"
            )
        return 127, f"command not found: {command[0]}{_one_word_hint(command)}"
    if isinstance(error, PermissionError):
        found = command[0] if os.sep in command[0] else shutil.which(command[0])
        if found and Path(found).is_dir():
            return 126, f"command is a folder, not a program: {command[0]}; give the program's path"
        # The program its #! line or its suffix names: "python3 run.sh" was said of a shell script too.
        interpreter = _interpreter_of(Path(found)) if found else None
        # Neither: the command itself, through the two likely ones (an example pair named no file of theirs).
        run_it = f"{interpreter} {command[0]}" if interpreter else f"sh {command[0]} or python3 {command[0]}"
        return 126, (
            f"command is not executable: {command[0]}; make it executable in the image (chmod +x), or run "
            f"it through its interpreter ({run_it})"
        )
    # ENOEXEC (a script without a #! line) and the like: the file is there but cannot run.
    hint = (
        " (a script needs a first line such as #!/usr/bin/env python3)"
        if error.errno == errno.ENOEXEC
        else ""
    )
    return 126, f"cannot run {command[0]}: {error.strerror or error}{hint}"


def _one_word_hint(command: Sequence[str]) -> str:
    """What to do when the whole command line was given as one word (``-- "python train.py"``)."""
    if len(command) == 1 and " " in command[0].strip():
        return f" (the command is one word with spaces: give its words apart, -- {command[0].strip()})"
    return ""


#: The interpreter a script's suffix calls for, where its first line names none.
_INTERPRETER_BY_SUFFIX = {".py": "python3", ".sh": "sh", ".bash": "bash"}


def _interpreter_of(script: Path) -> str | None:
    """The program that runs ``script``: the one its ``#!`` line names, else its suffix's; None if neither."""
    with contextlib.suppress(OSError), open(script, "rb") as opened:
        line = opened.readline(200).decode(errors="replace").strip()
        if line.startswith("#!"):
            words = line[2:].split()
            if words and Path(words[0]).name == "env":  # #!/usr/bin/env -S python3 -u: the program after
                words = [word for word in words[1:] if not word.startswith("-") and "=" not in word]
            if words:
                return Path(words[0]).name
    return _INTERPRETER_BY_SUFFIX.get(script.suffix.lower())


def _exit_words(returncode: int) -> str:
    """``job exit 75``, or ``job killed by SIGTERM`` for a process ended by a signal (Python's -15)."""
    return f"job killed by {_signal_name(-returncode)}" if returncode < 0 else f"job exit {returncode}"


def _signal_name(signum: int) -> str:
    """``SIGTERM``, or ``signal 35`` for one Python has no name for (a real-time signal)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


#: How long torchrun gives its ranks after passing a notice on, before SIGKILL (recent PyTorch; 30 s before).
TORCHRUN_SHUTDOWN = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"


def torchrun_shutdown_seconds(grace_seconds: float) -> int:
    """How long torchrun waits for its ranks after the notice: 90 % of the grace period (at least 1 s).

    The rest is for torchrun to SIGKILL the ranks and exit before the launcher's own SIGKILL.
    """
    return max(1, int(grace_seconds * 0.9))
