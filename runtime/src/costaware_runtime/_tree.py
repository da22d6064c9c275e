"""The job's whole process tree, found through ``/proc`` (Linux), whatever each one's group or session.

torchrun starts each rank in a session of its own, and a daemon leaves its parent's process group: a signal
to the job's process group missed them, and they trained on after the attempt, unwatched and unbilled.
Without ``/proc`` (macOS) nothing is found here and the launcher ends the job's process group only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_PR_GET_CHILD_SUBREAPER = 37
#: Whether this system has Linux's ``/proc`` to find processes in.
PROC = sys.platform.startswith("linux") and Path("/proc/self/stat").is_file()


def become_subreaper() -> Callable[[], None]:
    """Have the job's orphans reparented to this process (Linux); returns what puts the previous state back.

    torchrun killed outright (the OOM killer, a SIGKILL) left its ranks to init, where nothing tied them to
    the attempt any more: they now become this process's children, so they are found and ended with the job.
    Elsewhere, or where ``prctl`` is refused, nothing changes.
    """
    if not sys.platform.startswith("linux"):
        return lambda: None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: None
    before = ctypes.c_int(0)
    if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0) != 0:
        return lambda: None
    if before.value or prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return lambda: None
    # Put back: the launcher run in a process that lives on (a test) would otherwise adopt every orphan.
    return lambda: prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def children() -> set[int]:
    """The processes whose parent is this one (empty without ``/proc``)."""
    me = os.getpid()
    return {pid for pid, (parent, _) in _processes().items() if parent == me}


def _jobs_children(table: dict[int, tuple[int, int]], spared: Collection[int]) -> list[int]:
    """This process's children that came from the job: all but ``spared`` and this process's own.

    The job runs in a process group of its own, and whatever it starts in it or in groups and sessions of its
    own; a child this process starts itself (boto3's ``credential_process`` from the sync thread) stays in
    this process's group. Counted as the job's, such a child was reaped before boto3 waited on it (which then
    read a wrong exit status) and signalled with the job.
    """
    me, own_group = os.getpid(), os.getpgrp()
    return [
        pid
        for pid, (parent, pgid) in table.items()
        if parent == me and pid not in spared and pgid != own_group
    ]


def left_behind(group: int, spared: Collection[int]) -> list[int]:
    """The running processes of the job: ``group``'s, its orphans (:func:`_jobs_children`), all under them.

    Zombies are left out: they run no more. Parents come before their children.
    """
    table = _processes()
    me = os.getpid()
    roots = [pid for pid, (_, pgid) in table.items() if pid != me and pgid == group]
    roots += _jobs_children(table, spared)
    return [pid for pid in _under(roots, table) if _running(pid)]


def in_group(group: int) -> list[int]:
    """The processes of process group ``group``: those a ``killpg`` reaches (empty without ``/proc``)."""
    return [pid for pid, (_, pgid) in _processes().items() if pgid == group]


def identities(pids: Iterable[int]) -> frozenset[tuple[int, int]]:
    """Each of ``pids`` still running as ``(pid, start time)``: the same process, never one reusing its pid.

    Empty without ``/proc``.
    """
    found: set[tuple[int, int]] = set()
    for pid in pids:
        started = _start_time(pid)
        if started is not None:
            found.add((pid, started))
    return frozenset(found)


def still_running(known: Collection[tuple[int, int]]) -> set[int]:
    """The pids of the processes ``known`` (from :func:`identities`) that still run as themselves."""
    return {pid for pid, started in known if _start_time(pid) == started and _running(pid)}


def kill_tree(group: int, spared: Collection[int]) -> None:
    """SIGKILL the job's process group and everything :func:`left_behind` finds, with none escaping.

    Each process is stopped (SIGSTOP) before its children are looked for: a stopped process starts no new
    child and reaps none, so none is missed and no pid found is reused by another process before the SIGKILL.
    """
    stopped: list[int] = []
    tried: set[int] = set()  # one that may not be signalled (another user's) is tried once
    found = left_behind(group, spared)
    while found:
        tried.update(found)
        stopped += signal_each(found, signal.SIGSTOP)
        found = [pid for pid in _under(stopped, _processes()) if pid not in tried]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
    signal_each(stopped, signal.SIGKILL)


def reap(spared: Collection[int]) -> None:
    """Reap the job's orphans that have exited (:func:`_jobs_children`), never ``spared`` (the job's own)."""
    for pid in _jobs_children(_processes(), spared):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def signal_each(pids: Iterable[int], signum: int) -> list[int]:
    """Send ``signum`` to each of ``pids``; the ones it reached (not gone, not another user's)."""
    signalled = []
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            continue
        signalled.append(pid)
    return signalled


def _under(roots: Iterable[int], table: dict[int, tuple[int, int]]) -> list[int]:
    """``roots`` and every process under them in ``table``, parents first."""
    kids: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        kids.setdefault(parent, []).append(pid)
    found: list[int] = []
    seen: set[int] = set()
    frontier = list(roots)
    while frontier:
        frontier = [pid for pid in frontier if pid not in seen]
        seen.update(frontier)
        found += frontier
        frontier = [kid for pid in frontier for kid in kids.get(pid, ())]
    return found


def _processes() -> dict[int, tuple[int, int]]:
    """Every process as ``pid: (parent pid, process group)``, read from ``/proc`` (empty without it)."""
    table: dict[int, tuple[int, int]] = {}
    if not PROC:
        return table
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                # The name (in parentheses) may hold spaces and parentheses: the fields follow its last ")".
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            with contextlib.suppress(IndexError, ValueError):
                table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (ticks after boot: ``/proc/<pid>/stat``'s 22nd field); None once gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
