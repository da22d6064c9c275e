"""Signals between ``costaware-run`` and its job: the notices the launcher takes, and how the job ends.

The handlers go in before the launcher checks its stores (seconds): a SIGTERM then was lost where the
launcher is PID 1 (a container's, whose default is to ignore it) and killed it with exit 143 elsewhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from costaware_runtime import _tree

log = logging.getLogger("costaware_runtime.launcher")

#: What the launcher takes as the preemption notice: SIGTERM, Ctrl-C, and a hang-up (its terminal or ssh
#: session gone), which left the job running on alone.
NOTICES = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Longest wait for what the job left in its process group to exit on SIGTERM, before SIGKILL.
GROUP_GRACE_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True, slots=True)
class Unheeding:
    """A process the notice reached while it had no handler for SIGTERM (nor ignored it): it ended at once."""

    pid: int
    #: The file it ran (``/proc/<pid>/exe``'s name, such as ``python3.12`` or ``dash``), else its ``comm``.
    program: str

    @property
    def is_python(self) -> bool:
        """Whether it is a Python process, which ``costaware_runtime.preemption_requested()`` can guard."""
        return self.program.startswith("python")


class Notices:
    """The launcher's signal handlers and what they have seen; they pass each notice on to the job."""

    def __init__(self) -> None:
        self.notice_at: float | None = None  # when the notice reached the launcher
        #: The same on the wall clock, which a commit marker's saved_at is read on (time.time()).
        self.notice_wall_at: float | None = None
        self.interrupted = False  # Ctrl-C came (taken as the notice)
        self.kill_now = False  # a second Ctrl-C: SIGKILL without waiting out the grace period
        self.pending: list[int] = []  # signals that came before the job started
        self.process: subprocess.Popen[bytes] | None = None  # the job, once started
        self.grace_seconds: float | None = None  # known once the options are read
        self.signal_group = False  # --signal-group
        #: The processes the first SIGTERM passed on reached with no handler for it (nor ignoring it), so
        #: that it ended them at once: the job's, and with --signal-group the rest of its group; None where
        #: not known (no ``/proc``, no notice passed on).
        self.unheeded: tuple[Unheeding, ...] | None = None
        #: Whether the first SIGTERM went to the job's whole process group (--signal-group), and the
        #: processes it reached, as ``(pid, start time)`` (none without ``/proc``): :func:`end_job` does not
        #: send them SIGTERM again (a handler that saves on each one started a second save).
        self.group_noticed = False
        self.noticed: frozenset[tuple[int, int]] = frozenset()
        self._passed_on = False  # a SIGTERM was passed on to the job
        self._repeat_said = False  # a notice after the first was logged (once)

    def install(self) -> None:
        for signum in NOTICES:
            signal.signal(signum, self.on_signal)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            # Ctrl-C by hand (the job runs in its own process group, so only the launcher gets it): stop as a
            # preemption would, the job saving on SIGTERM and the next run resuming, instead of a Python
            # traceback read as a code error. Ctrl-C again kills the job now.
            if self.interrupted:
                log.warning("interrupted again: SIGKILL now")
                self.kill_now = True
                return
            self.interrupted = True
            if self.notice_at is not None:
                log.warning("interrupted (Ctrl-C) after the notice: Ctrl-C again kills the job now")
                return
            log.warning("interrupted (Ctrl-C): taken as a preemption notice; Ctrl-C again kills the job now")
            signum = signal.SIGTERM
        elif self.notice_at is not None:
            # SIGTERM or SIGHUP once the job has the notice (or gets it as it starts): passed on again, a
            # handler that saves on each SIGTERM started a second save. The SIGKILL at the grace end stands.
            if not self._repeat_said:
                self._repeat_said = True
                log.warning(
                    "%s after the preemption notice: not passed on again, the job has the notice",
                    signal.Signals(signum).name,
                )
            return
        elif signum == signal.SIGHUP:
            log.warning("hang-up (SIGHUP): taken as a preemption notice")
            signum = signal.SIGTERM
        process = self.process
        if signum == signal.SIGTERM and self.notice_at is None:
            if process is not None and process.returncode is not None:
                # Not a notice the job acted on: its exit code stands (a code error read as a preemption
                # before any checkpoint was retried, paid again).
                log.warning("preemption notice after the job exited: finishing")
                return
            self.notice_at, self.notice_wall_at = time.monotonic(), time.time()
            if process is None:
                log.warning("preemption notice before the job started")
            else:
                log.warning("preemption notice: passing SIGTERM on, SIGKILL in %gs", self.grace_seconds)
        if process is None:
            self.pending.append(signum)
        elif process.returncode is None:  # once reaped, its PID may be another process's
            self.forward(signum)

    def forward(self, signum: int) -> None:
        assert self.process is not None
        pid = self.process.pid
        first_notice = signum == signal.SIGTERM and not self._passed_on
        if first_notice:
            self._passed_on = True
            # Read before the signal: a process forked meanwhile may get SIGTERM once more, never none.
            reached = (
                [pid, *(other for other in _tree.in_group(pid) if other != pid)]
                if self.signal_group
                else [pid]
            )
            self.noticed = _tree.identities(reached)
            self.unheeded = unheeding(pid, reached)
        try:
            if self.signal_group:
                os.killpg(pid, signum)
                self.group_noticed = self.group_noticed or signum == signal.SIGTERM
                if first_notice:
                    # One that left the group (setsid) between the read and the killpg was not reached: it is
                    # end_job's to signal. One that left it just after gets a second SIGTERM, never none.
                    still_in_group = set(_tree.in_group(pid))
                    self.noticed = frozenset(known for known in self.noticed if known[0] in still_in_group)
            else:
                os.kill(pid, signum)
        except ProcessLookupError:
            pass  # it has just exited


def unheeding(pid: int, reached: Sequence[int]) -> tuple[Unheeding, ...] | None:
    """The processes among ``reached`` (the job's ``pid`` first) a SIGTERM would end at once.

    None where ``/proc`` does not say of ``pid`` itself. With --signal-group the job's command may be a shell
    that has no handler while the Python job under it saves on the notice: only the whole group tells which.
    """
    handled = {other: handles_signal(other, signal.SIGTERM) for other in reached}
    if handled[pid] is None:
        return None
    return tuple(Unheeding(other, _program(other)) for other in reached if handled[other] is False)


def _program(pid: int) -> str:
    """The name of the file process ``pid`` runs (a script run through its #! line: the interpreter's)."""
    try:
        return Path(f"/proc/{pid}/exe").readlink().name
    except OSError:  # gone, or another user's
        try:
            return Path(f"/proc/{pid}/comm").read_text(errors="replace").strip()
        except OSError:
            return "?"


def handles_signal(pid: int, signum: int) -> bool | None:
    """Whether process ``pid`` catches or ignores ``signum`` now; None where ``/proc`` does not say (Linux).

    A job that has not yet installed its handler (the runtime's, or its framework's), still importing its
    libraries, is ended by the notice at once: the only way the launcher can tell that from a job that saved.
    """
    masks = _signal_masks(pid)
    return None if masks is None else any(mask >> (signum - 1) & 1 for mask in masks.values())


def catches_signal(pid: int, signum: int) -> bool | None:
    """Whether process ``pid`` has a handler for ``signum`` now (not ignoring it); None where not known."""
    masks = _signal_masks(pid)
    return None if masks is None else bool(masks["SigCgt"] >> (signum - 1) & 1)


def _signal_masks(pid: int) -> dict[str, int] | None:
    """``/proc/<pid>/status``'s SigCgt and SigIgn masks; None without ``/proc``, or once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as status:
            masks = {
                name: int(mask, 16)
                for name, mask in (
                    line.split(":", 1) for line in status if line.startswith(("SigCgt:", "SigIgn:"))
                )
            }
    except (OSError, ValueError):
        return None
    return masks if len(masks) == 2 else None


def die_with_the_launcher() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has Linux SIGKILL the job when the launcher dies; None elsewhere.

    A launcher killed outright (SIGKILL, the OOM killer) left its job training on, unwatched and unpushed.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    launcher = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != launcher:  # it died before the line above: nothing would tell us now
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def end_job(
    group: int, grace_seconds: float, spared: Collection[int] = (), notices: Notices | None = None
) -> None:
    """SIGTERM what the job left once its main process has exited; SIGKILL what is left after a while.

    What it left: its process group, and on Linux every process under it in a group or session of its own
    (torchrun's ranks, a daemon: found through ``/proc``, and reparented to the launcher, its subreaper, when
    their parent died). ``spared`` are children the launcher had before the job (a test's). SIGKILL after
    ``grace_seconds`` (at most :data:`GROUP_GRACE_SECONDS`): helpers the job left behind ran on past the
    attempt, perhaps still writing into its folders while they were uploaded.

    After a notice (``notices``) that ended the command's process, processes left that have a handler for
    SIGTERM (read in ``/proc``) are taken to be saving on it, as the command's process would: they get the
    rest of the grace period from the notice. A shell that died of the notice at once left its Python job
    5 s for a 7 s save, SIGKILLed with nothing saved (exit 77) under a 60 s grace period, with
    --signal-group or without. Ones that ignore SIGTERM or have no handler are not waited on longer: that
    would only take the final push's time; nor is anything left by a command that exited on its own. A
    second Ctrl-C (``notices.kill_now``) still SIGKILLs at once. Without ``/proc``, as before.

    With --signal-group, the processes the notice reached (``notices.noticed``) are not sent SIGTERM again,
    nor is the group. Without ``/proc`` nothing tells them from ones started since (an uploader the job
    started on the notice): the group gets SIGTERM again, a second one being the lesser harm.
    """
    # With --signal-group the notice reached the whole group already: a second SIGTERM had a handler that
    # saves on each one start a second save. Without /proc the group is signalled again all the same: spared,
    # what the job started after the notice heard no SIGTERM, only the SIGKILL at the grace end.
    group_noticed = notices is not None and notices.group_noticed
    noticed = _tree.still_running(notices.noticed) if notices is not None and group_noticed else set()
    _tree.signal_each([pid for pid in _tree.left_behind(group, spared) if pid not in noticed], signal.SIGTERM)
    if not group_noticed or not _tree.PROC:
        try:
            os.killpg(group, signal.SIGTERM)
        except ProcessLookupError:
            pass  # none left in the group
        except PermissionError:  # one it may not signal (another user's): left, not a launcher crash
            log.warning("processes the job left in its process group cannot be signalled: left running")
    deadline = time.monotonic() + min(grace_seconds, GROUP_GRACE_SECONDS)
    # Only where the command's process died of the notice (a shell with no handler): one that exited on its
    # own (75 after its save, 0) is done, and what it left with a handler is not saving (a forked worker that
    # inherited the runtime's flag-only handler): waited on, it held the final push until the grace end.
    command = notices.process if notices is not None else None
    # Killed by it, or a shell trapping it to exit 128 + 15 (`trap "exit 143" TERM`) while its job saves.
    died_of_notice = command is not None and command.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)
    notice_at = notices.notice_at if notices is not None and died_of_notice else None
    saving_until = deadline if notice_at is None else max(deadline, notice_at + grace_seconds)
    savers: set[int] = set()  # seen with a handler: waited on until they exit (Python resets it on exit)
    while _still_running(group, spared) and not (notices is not None and notices.kill_now):
        now = time.monotonic()
        if now >= saving_until:
            break
        if now >= deadline:
            left = _tree.left_behind(group, spared)
            said_saving = bool(savers)
            savers = (savers | {pid for pid in left if catches_signal(pid, signal.SIGTERM)}) & set(left)
            if not savers:
                break
            if not said_saving:
                log.warning(
                    "processes the job left handle SIGTERM, saving on the notice: waiting for them up to "
                    "%gs after it, the grace period",
                    grace_seconds,
                )
        time.sleep(0.02)
    if _still_running(group, spared):
        log.warning("processes the job left behind did not exit on SIGTERM: SIGKILL")
        _tree.kill_tree(group, spared)
        deadline = time.monotonic() + 1  # SIGKILL takes a moment: reap them, not leave zombies
        while _still_running(group, spared) and time.monotonic() < deadline:
            time.sleep(0.02)


def _still_running(group: int, spared: Collection[int]) -> bool:
    """Whether the job left a process running; reaps the ones that are this process's children."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-group, os.WNOHANG)[0]:
            pass
    _tree.reap(spared)
    if _tree.PROC:  # it tells a running process from a zombie its parent has yet to reap
        return bool(_tree.left_behind(group, spared))
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
