"""What the launcher does once the job has exited: the exit code, and the last checkpoint push.

Split out of ``launcher.py``: :class:`_AfterJob` is the part of :class:`~costaware_runtime.launcher.Launcher`
that reads the job's exit and checkpoint; the launcher's own upload of the outputs (``succeed``) stays there.
"""

from __future__ import annotations

import argparse
import logging
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from costaware_runtime import contract
from costaware_runtime._bounded import run_bounded
from costaware_runtime._job_process import _exit_words, _signal_name
from costaware_runtime._signals import Notices, Unheeding
from costaware_runtime._watcher import last_commit_in_store, unpushed
from costaware_runtime.checkpoints import Marker, latest_step, read_marker, retired_marker
from costaware_runtime.contract import JobEnvironment
from costaware_runtime.errors import ContractError, CostawareRuntimeError, StoreStalledError
from costaware_runtime.sync import CheckpointSync

log = logging.getLogger("costaware_runtime.launcher")  # the launcher's messages keep its logger


class _AfterJob:
    """The launcher once its job has exited: which code to exit with, and the last checkpoint's push."""

    env: JobEnvironment
    options: argparse.Namespace
    notices: Notices
    checkpoint_dir: Path
    scratch: list[Path]
    warnings: list[str]
    sync: CheckpointSync | None
    started_at: float | None
    started_from: Marker | None
    push_hung: str | None
    #: The launcher's own: check and upload the outputs, write the result (it returns the exit code).
    succeed: Callable[[int | None], int]

    def finish(self, returncode: int) -> int:
        """The launcher's exit code once the job has exited with ``returncode``."""
        try:
            step = latest_step(self.checkpoint_dir)
        except ContractError as e:
            log.error("%s", e)
            step = None
        if returncode == 0:
            self._warn_if_never_checkpointed(step)
            return self.succeed(step)
        # After a notice, exit 75 without a checkpoint is a preemption before the first one (77, retried):
        # the job did what it was told. Without a notice, it claims a checkpoint it never committed.
        if returncode == contract.EXIT_PREEMPTED and step is None and self.notices.notice_at is None:
            log.error(
                "the job exited %s, the code for 'preempted after a checkpoint', but no notice came and "
                "%s holds no committed checkpoint: commit one before exit_preempted() (a code error, not "
                "retried)",
                returncode,
                self.checkpoint_dir,
            )
            return contract.EXIT_PREEMPTED_WITHOUT_CHECKPOINT
        if returncode == contract.EXIT_PREEMPTED or self.notices.notice_at is not None:
            if returncode == -signal.SIGTERM and self.notices.unheeded:
                self._say_unheeded(self.notices.unheeded)
            if step is None:
                log.error(
                    "preempted (%s) before any checkpoint: the next attempt starts over",
                    _exit_words(returncode),
                )
                return contract.EXIT_PREEMPTED_BEFORE_CHECKPOINT
            if not self.final_push():
                return self._preempted_unpushed(returncode, step)
            log.warning("preempted (%s) after checkpoint step %s", _exit_words(returncode), step)
            if self.sync is None and self.checkpoint_dir in self.scratch:
                # Nothing keeps this checkpoint past the exit: say so, or a rerun by hand starts over unasked.
                log.warning(
                    "%s is not set and %s was made for this run only, so the checkpoint goes with it: a next "
                    "run starts over; set %s (or %s to a folder of your own) to resume",
                    contract.CHECKPOINT_URI,
                    self.checkpoint_dir,
                    contract.CHECKPOINT_URI,
                    contract.CHECKPOINT_DIR,
                )
            return contract.EXIT_PREEMPTED
        self.final_push()  # a failed job's checkpoint still helps whoever debugs or reruns it
        if returncode < 0:
            log.error("the job was killed by %s", _signal_name(-returncode))
            return 128 - returncode
        if returncode == contract.EXIT_SYNC_FAILED and self.options.no_outputs:
            # A job that stores its model itself (the built-in trainers) reads and writes its own stores: its
            # 74 is the contract's "a store failed", retried, not a code error that fails the task for good.
            log.error("the job exited %s: a store it reads or writes itself failed (retried)", returncode)
            return contract.EXIT_SYNC_FAILED
        if returncode in contract.RESERVED_EXIT_CODES:
            log.error("the job exited %s, a code the launcher reserves: reporting 1", returncode)
            return 1
        log.error("the job exited %s", returncode)
        return returncode

    def _say_unheeded(self, unheeded: tuple[Unheeding, ...]) -> None:
        """Say which process the notice ended at once, lacking a handler (in its first seconds, as a rule).

        "preempted (job killed by SIGTERM) before any checkpoint" alone read as a job that ignores the
        contract, where one that was still importing its libraries had simply not called it yet. Only what
        holds is said: the command may be a shell that died of the notice while the Python job under it saved.
        """
        job = self.notices.process
        command = next((ended for ended in unheeded if job is not None and ended.pid == job.pid), None)
        if command is None:
            return  # it had a handler, which ended it by SIGTERM itself (having saved, or not)
        if not command.is_python:
            self._say_command_ended(command)
        if not any(ended.is_python for ended in unheeded) or self._committed_since_notice():
            return
        notice_at, started_at = self.notices.notice_at, self.started_at
        when = (
            f"{notice_at - started_at:.1f} s after the job started"
            if notice_at is not None and started_at is not None and notice_at >= started_at
            else "before the job started"
        )
        log.warning(
            "the notice came %s, while the job had no handler for SIGTERM, which therefore ended it at once "
            "(nothing saved on the notice): to save a checkpoint and exit %s on a notice, call "
            "costaware_runtime.preemption_requested() first thing at the job's start, before slow imports",
            when,
            contract.EXIT_PREEMPTED,
        )

    def _say_command_ended(self, command: Unheeding) -> None:
        """The command's process, not a Python job (a shell), died of the notice: the rest of it never ran.

        What it started that handles SIGTERM had the rest of the grace period to save (``end_job``); without
        --signal-group it got the notice only once the shell was gone. ``exec`` is still the cure.
        """
        log.warning(
            "the notice ended %s (pid %s, the command's process) at once: it had no handler for SIGTERM, so "
            "the rest of its script did not run%s: exec the training process from it (sh -c 'exec python "
            "train.py'), so that it is the command's process",
            command.program,
            command.pid,
            "" if self.notices.signal_group else ", and what it started got the notice only once it was gone",
        )

    def _committed_since_notice(self) -> bool:
        """Whether the checkpoint folder holds a commit made after the notice (None of it unread: True).

        The marker's saved_at is the committing process's wall clock, on which the notice's time was taken.
        """
        notice = self.notices.notice_wall_at
        try:
            marker = read_marker(self.checkpoint_dir)
            return marker is not None and (
                notice is None or datetime.fromisoformat(marker.saved_at).timestamp() >= notice
            )
        except (ContractError, OSError, ValueError):
            return True  # not known: "nothing saved" is said only where it holds

    def _committed_and_retired(self) -> bool:
        """Whether the job committed a checkpoint of its own and then retired it (deleted once done)."""
        retired = retired_marker(self.checkpoint_dir)
        if retired is None:
            return False
        return self.started_from is None or retired.identity != self.started_from.identity

    def _warn_if_never_checkpointed(self, step: int | None) -> None:
        """Warn when a job asked to checkpoint ran two intervals without one: a preemption loses it all."""
        every, started = self.env.checkpoint_every_seconds, self.started_at
        # A job may delete its local checkpoints once done (the built-in trainers do): one pushed counts,
        # and so does one it retired before the watcher could push it.
        pushed = self.sync is not None and self.sync.pushed
        if step is not None or pushed or every is None or started is None:
            return
        if self._committed_and_retired():
            return
        ran = time.monotonic() - started
        if ran >= 2 * every:
            asks = f"{contract.CHECKPOINT_EVERY_SECONDS}={every:g}"
            said = (
                f"the job ran {ran:.0f} s without committing a checkpoint ({asks} asks for one every "
                f"{every:g} s): a preemption would have restarted it from the "
                "beginning; save with costaware_runtime (save_bytes, or checkpoint_folder() then commit(), "
                "when CheckpointTimer says it is due)"
            )
            log.warning("%s", said)
            self.warnings.append(said)

    def _preempted_unpushed(self, returncode: int, step: int) -> int:
        """Preempted, and the last checkpoint could not be pushed: what the store holds decides.

        Not 74: the machine is going away, and the provider takes two store failures in a row as fatal,
        while the next attempt can resume from an older checkpoint already in the store.
        """
        synced = self.sync.synced if self.sync is not None else None
        if synced is None:
            log.error(
                "preempted (%s): checkpoint step %s could not be pushed and the store holds none, so the "
                "next attempt starts over",
                _exit_words(returncode),
                step,
            )
            return contract.EXIT_PREEMPTED_BEFORE_CHECKPOINT
        log.warning(
            "preempted (%s): checkpoint step %s could not be pushed; the next attempt resumes from step %s, "
            "the newest in the store",
            _exit_words(returncode),
            step,
            synced[0],
        )
        return contract.EXIT_PREEMPTED

    def final_push(self) -> bool:
        if self.sync is None:
            return True
        sync = self.sync
        if self.push_hung is not None:  # its push holds the sync's lock: a push here waited on it for good
            if last_commit_in_store(sync):  # the watcher's push hung pruning, after LATEST.json named it
                self._say_prune_stalled(sync, self.push_hung)
                return True
            log.error(
                "could not push the last checkpoint: a push before it never ended (said above); %s",
                self._keep_unpushed(sync),
            )
            return False
        try:
            bound, what = self.env.store_stall_seconds, f"the last checkpoint push to {sync.store.uri}"
            run_bounded(sync.push_changed, sync, bound, what)
        except StoreStalledError as e:
            # It holds the sync's lock: no other push may follow (it would wait on this one).
            self.push_hung = str(e)
            if sync.pruning:  # the checkpoint is in and LATEST.json names it: only deleting old folders hung
                self._say_prune_stalled(sync, str(e))
                return True
            log.error("%s; %s: %s", e, unpushed(sync), self._keep_unpushed(sync))
            return False
        except CostawareRuntimeError as e:
            log.error("could not push the last checkpoint: %s", e)
            return False
        return True

    @staticmethod
    def _say_prune_stalled(sync: CheckpointSync, why: str) -> None:
        """The last checkpoint is in the store, and only the prune after it stalled: a warning, not a loss."""
        log.warning(
            "the last checkpoint is in %s (%s), but pruning the older step folders there stalled: %s; a "
            "later push prunes them",
            sync.store.uri,
            unpushed(sync),
            why,
        )

    def _keep_unpushed(self, sync: CheckpointSync) -> str:
        """Keep the checkpoint folder past the exit (even one made for this run), and say how to push it.

        A push that hung still reads it: removed with the scratch folders, the commit was lost.
        """
        if self.checkpoint_dir in self.scratch:
            self.scratch.remove(self.checkpoint_dir)
        return (
            f"it stays in {self.checkpoint_dir}; once {sync.store.uri} answers, push it with "
            f"costaware_runtime.push({str(self.checkpoint_dir)!r}, {sync.store.uri!r})"
        )
