"""``costaware-run [options] -- <command...>``: run one attempt of a job under the job contract.

Before the command: restore the newest checkpoint. While it runs: push each committed checkpoint, and on
SIGTERM (the preemption notice) pass the notice on, then SIGKILL after the grace period. After it: check the
metrics and outputs, upload them, write the result, and exit with a code the provider can act on (see
``contract.py`` and ``runtime/README.md``).

Its command line is read by ``_command_line`` (:func:`main`, the console script, hands it the Launcher), the
job's folders are in ``_job_folders``, its process in words and its environment's torchrun setting in
``_job_process``, the checkpoint watcher in ``_watcher``, and the exit code and last push after the job in
``_after_job``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from costaware_runtime import __version__ as __version__
from costaware_runtime import _command_line, _tree, contract
from costaware_runtime._after_job import _AfterJob
from costaware_runtime._bounded import GIVEN_UP, Transfer, exit_now, run_bounded
from costaware_runtime._command_line import LAUNCHED as LAUNCHED
from costaware_runtime._command_line import build_parser as build_parser
from costaware_runtime._job_folders import _make_job_folder_within, _temp_dir
from costaware_runtime._job_process import TORCHRUN_SHUTDOWN as TORCHRUN_SHUTDOWN
from costaware_runtime._job_process import _job_stdin, _start_failure
from costaware_runtime._job_process import torchrun_shutdown_seconds as torchrun_shutdown_seconds
from costaware_runtime._signals import Notices, die_with_the_launcher, end_job
from costaware_runtime._watcher import _Watcher
from costaware_runtime.checkpoints import Marker, read_marker
from costaware_runtime.checkpoints import latest_step as latest_step
from costaware_runtime.checkpoints import retired_marker as retired_marker
from costaware_runtime.contract import JobEnvironment
from costaware_runtime.errors import CheckpointChangedError as CheckpointChangedError
from costaware_runtime.errors import ContractError, StoreError, StoreStalledError
from costaware_runtime.errors import CostawareRuntimeError as CostawareRuntimeError
from costaware_runtime.metrics import read_metrics
from costaware_runtime.outputs import OutputSummary, check_outputs, upload_outputs
from costaware_runtime.stores import check_writes as check_writes
from costaware_runtime.stores import open_object, open_store
from costaware_runtime.sync import CheckpointSync

# Names imported 'as' themselves were this module's own before it was split: a job's code may still import
# them from here. Setting one here does not reach the private module that uses it.

log = logging.getLogger("costaware_runtime.launcher")

#: The longest --poll-seconds: a checkpoint pushed an hour late is of little use after a preemption.
MAX_POLL_SECONDS = 3600.0
#: How often the job's orphans that have exited are reaped while it runs (each look reads /proc).
REAP_SECONDS = 5.0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``costaware-run`` (the console script); returns the exit code.

    Where a store transfer was given up and still runs, it exits here instead (see ``_bounded.exit_now``).
    """
    GIVEN_UP.clear()
    try:
        code = _command_line.run(argv, Launcher)
    except SystemExit as e:
        if GIVEN_UP.running():
            exit_now(e.code if isinstance(e.code, int) else 0 if e.code is None else 1)
        raise
    except BaseException:
        if not GIVEN_UP.running():
            raise
        # An error of the launcher's own after a give-up: raised on, the interpreter joined the given-up
        # transfer's threads at exit and held the machine for minutes with the traceback unprinted.
        log.exception("costaware-run failed after giving up a store transfer (exit 1)")
        exit_now(1)
    if GIVEN_UP.running():
        exit_now(code)
    return code


class Launcher(_AfterJob):
    """One attempt: the job's process, its signals and what happens after it exits."""

    def __init__(
        self, env: JobEnvironment, options: argparse.Namespace, notices: Notices | None = None
    ) -> None:
        self.env = env
        self.options = options
        given = options.grace_seconds
        self.grace_seconds = (
            env.grace_seconds
            if given is None
            else contract.parse_grace_seconds(given, flag="--grace-seconds")
        )
        # At most an hour: inf or 1e10 passed, and the watcher's wait died with OverflowError (no pushes).
        if not 0 < options.poll_seconds <= MAX_POLL_SECONDS:
            raise ContractError(
                f"--poll-seconds {options.poll_seconds!r} is not a number of seconds > 0 and at most "
                f"{MAX_POLL_SECONDS:g}: give how often to look for a new checkpoint, such as 1"
            )
        if options.no_outputs and env.output_uri:
            raise ContractError(
                f"--no-outputs (the job stores its model itself) and "
                f"{contract.OUTPUT_URI}={env.output_uri!r} disagree: drop one of them"
            )
        # Folders made here only for this attempt (no variable named one): the checkpoints and metrics in them
        # serve no later attempt, so they go at exit; a made output folder goes once its files are uploaded,
        # and stays if nothing took them (no output URI, or a failure) and the job left files in it.
        self.scratch: list[Path] = []
        #: Warnings the provider should see too: written into the result (its task log then says them),
        #: where the job's own log is seldom read while the task succeeds.
        self.warnings: list[str] = []
        self.checkpoint_dir = env.checkpoint_dir or self._scratch_dir("checkpoints", contract.CHECKPOINT_DIR)
        self.output_dir: Path | None = None
        if not options.no_outputs:
            self.output_dir = env.output_dir or _temp_dir("outputs", contract.OUTPUT_DIR)
        self.metrics_path = env.metrics_path or (
            self._scratch_dir("metrics", contract.METRICS_PATH) / "metrics.json"
        )
        uri = None if options.no_sync else env.checkpoint_uri
        if options.no_sync and env.checkpoint_uri:
            log.info("--no-sync: %s is left to the platform", contract.CHECKPOINT_URI)
        try:
            for variable, given, folder in (
                (contract.CHECKPOINT_DIR, self.checkpoint_dir, self.checkpoint_dir),
                (contract.OUTPUT_DIR, self.output_dir, self.output_dir),
                (contract.METRICS_PATH, self.metrics_path, self.metrics_path.parent),
            ):
                if folder is not None and given is not None:
                    leftover = _make_job_folder_within(env.store_stall_seconds, folder, variable, given)
                    if leftover:
                        log.warning("%s", leftover)
                        self.warnings.append(leftover)
            self.sync = CheckpointSync(uri, self.checkpoint_dir) if uri else None
            # Bad locations (or an image without boto3) fail now, not after hours of training.
            stores = [self.sync.store] if self.sync else []
            stores += [open_store(env.output_uri)] if env.output_uri else []
            stores += [open_object(env.result_uri)[0]] if env.result_uri else []
            for store in stores:
                store.check()
        except BaseException:
            self.remove_scratch()  # nothing ran: the folders made for it go, the empty output folder too
            raise
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None  # when the job started
        self.started_from: Marker | None = None  # the commit the job starts from (see _starting_marker)
        self.notices = notices or Notices()
        #: Why the last checkpoint is not pushed after the job: a push of the watcher's never ended.
        self.push_hung: str | None = None
        self.notices.grace_seconds, self.notices.signal_group = self.grace_seconds, options.signal_group

    def _scratch_dir(self, kind: str, variable: str) -> Path:
        folder = _temp_dir(kind, variable, note=" (removed at exit)")
        self.scratch.append(folder)
        return folder

    def remove_scratch(self) -> None:
        """Remove the folders made only for this attempt (``scratch``) and a made output folder left empty."""
        for folder in self.scratch:
            shutil.rmtree(folder, ignore_errors=True)
        if self.env.output_dir is None and self.output_dir is not None:
            with contextlib.suppress(OSError):  # not empty: it holds what the job wrote
                self.output_dir.rmdir()

    def child_environment(self) -> dict[str, str]:
        folders = {contract.OUTPUT_DIR: str(self.output_dir)} if self.output_dir is not None else {}
        # torchrun SIGKILLed its ranks 30 s after passing the notice on, whatever the grace period: rank 0's
        # save of a large model was cut and nothing committed. It now waits most of the grace period, and
        # still ends them before the launcher's SIGKILL, which misses them (each in a session of its own).
        torchrun = (
            {}
            if TORCHRUN_SHUTDOWN in os.environ
            else {TORCHRUN_SHUTDOWN: str(torchrun_shutdown_seconds(self.grace_seconds))}
        )
        return (
            os.environ
            | folders
            | torchrun
            | {
                contract.CHECKPOINT_DIR: str(self.checkpoint_dir),
                contract.METRICS_PATH: str(self.metrics_path),
                contract.ATTEMPT: str(self.env.attempt),
                contract.MARKET: self.env.market,
                contract.GRACE_SECONDS: f"{self.grace_seconds:g}",
                LAUNCHED: "1",
            }
        )

    def run(self, command: Sequence[str]) -> int:
        if signal.getsignal(signal.SIGTERM) != self.notices.on_signal:
            self.notices.install()  # main() installs them before the store checks; a Launcher made alone here
        if self.sync is not None:
            try:
                sync = self.sync
                step = run_bounded(
                    sync.restore, sync, self.env.store_stall_seconds, f"the restore from {sync.store.uri}"
                )
            except StoreStalledError as e:
                # No data is lost: the store keeps its checkpoint, and the local marker went before the files.
                log.error(
                    "could not restore the checkpoint: %s; the store keeps it, for the next attempt (exit "
                    "%s, retried): check that %s answers (a hung mount, a stalled connection)",
                    e,
                    contract.EXIT_SYNC_FAILED,
                    sync.store.uri,
                )
                return contract.EXIT_SYNC_FAILED
            except StoreError as e:
                log.error("could not restore the checkpoint: %s", e)
                return contract.EXIT_SYNC_FAILED
            except ContractError as e:
                log.error("%s", e)
                return contract.EXIT_CONTRACT_ERROR
            if step is None:
                log.info("no checkpoint at %s: starting fresh", self.sync.store.uri)
            else:
                log.info("starting from checkpoint step %s", step)
        self.started_from = self._starting_marker()
        if self.notices.notice_at is not None:
            log.warning("the notice came before the job started: not starting it")
            return self.finish(-signal.SIGTERM)
        try:
            self._remove_earlier_metrics()
        except ContractError as e:
            log.error("%s", e)
            return contract.EXIT_CONTRACT_ERROR
        # Children of the launcher's own from before the job (a test runs launchers in turn): not the job's.
        spared = _tree.children()
        put_back = _tree.become_subreaper()
        try:
            return self._run_job(command, frozenset(spared))
        finally:
            put_back()

    def _run_job(self, command: Sequence[str], spared: frozenset[int]) -> int:
        try:
            self.started_at = time.monotonic()
            self.process = subprocess.Popen(
                command,
                env=self.child_environment(),
                stdin=_job_stdin(),
                process_group=0,
                preexec_fn=die_with_the_launcher(),  # no thread runs yet: the watcher starts below
            )
        except OSError as e:
            code, said = _start_failure(command, e)
            log.error("%s", said)
            return code
        self.notices.process = self.process
        for signum in self.notices.pending:
            self.notices.forward(signum)
        watcher = _Watcher(self.sync, self.options.poll_seconds) if self.sync else None
        if watcher:
            watcher.start()
        try:
            returncode = self._wait(self.process, spared)
        finally:
            # Before the outputs are read and uploaded, and on the launcher's own failure: nothing of the job
            # (a torchrun rank in a session of its own either) outlives the attempt.
            end_job(self.process.pid, self.grace_seconds, spared, self.notices)
        if watcher:
            # Bounded: a store that hangs on a push held the exit for good, the outputs never uploaded.
            self.push_hung = watcher.stop(self.env.store_stall_seconds)
        return self.finish(returncode)

    def _remove_earlier_metrics(self) -> None:
        """Remove a metrics file an earlier run left: a job that exited 0 without metrics passed with them.

        Raises:
            ContractError: It cannot be removed (a folder in its place, a read-only folder).
        """
        try:
            self.metrics_path.unlink()
        except FileNotFoundError:
            return
        except OSError as e:
            raise ContractError(
                f"{contract.METRICS_PATH}={self.metrics_path} is already there and cannot be removed "
                f"({e.strerror or e}): give this attempt a metrics path of its own"
            ) from e
        log.info("removed the metrics an earlier run left in %s: this run writes its own", self.metrics_path)

    def _wait(self, process: subprocess.Popen[bytes], spared: frozenset[int]) -> int:
        killed = False
        reaped_at = time.monotonic()
        while True:
            try:
                return process.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
            notice_at, kill_now = self.notices.notice_at, self.notices.kill_now
            late = notice_at is not None and time.monotonic() - notice_at >= self.grace_seconds
            if (late or kill_now) and not killed:
                if not kill_now:
                    log.error("the job did not exit within %gs of the notice: SIGKILL", self.grace_seconds)
                # The whole tree: torchrun's ranks (in sessions of their own) outlived its group's SIGKILL.
                _tree.kill_tree(process.pid, spared)
                killed = True
            if time.monotonic() - reaped_at >= REAP_SECONDS:
                # The job's orphans are the launcher's children (it is their subreaper): those that exited
                # are reaped, not left as zombies until the end. Never the job: its Popen would read exit 0.
                _tree.reap(spared | {process.pid})
                reaped_at = time.monotonic()

    def _starting_marker(self) -> Marker | None:
        """The commit the job starts from (restored, or left by an earlier run), with no retired one left.

        A retired marker found after the job is then the job's own (:func:`costaware_runtime.retire`).
        """
        with contextlib.suppress(OSError):  # a read-only folder holds none this run could have left
            (self.checkpoint_dir / contract.RETIRED_MARKER).unlink(missing_ok=True)
        try:
            return read_marker(self.checkpoint_dir)
        except ContractError:
            return None

    def succeed(self, step: int | None) -> int:
        try:
            metrics = read_metrics(self.metrics_path)
            # --no-outputs: the job stored its model itself, there is nothing to check or upload.
            summary = (
                check_outputs(self.output_dir) if self.output_dir is not None else OutputSummary(None, 0, 0)
            )
        except ContractError as e:
            self.final_push()  # a checkpoint committed in the job's last second still helps a rerun
            made = self.output_dir if self.env.output_dir is None else None
            # A folder made here, holding what the job wrote: say where, or it is lost in the temp folder.
            kept = f" (the outputs stay in {made})" if made is not None and any(made.iterdir()) else ""
            log.error("%s; nothing was uploaded%s", e, kept)
            return contract.EXIT_CONTRACT_ERROR
        if not self.final_push():
            log.warning("the job succeeded, so the checkpoint is not needed: going on")
        try:
            if self.output_dir is not None and self.env.output_uri:
                metadata = {"metrics": metrics, "attempt": self.env.attempt, "checkpoint_step": step}
                summary = self._upload_outputs(self.output_dir, self.env.output_uri, metadata)
                if self.env.output_dir is None:  # a folder made here: the uploaded copy is the one to keep
                    self.scratch.append(self.output_dir)
            elif self.output_dir is not None:
                log.warning("%s is not set: the outputs stay in %s", contract.OUTPUT_URI, self.output_dir)
            result = {
                "metrics": metrics,
                "output_uri": summary.uri,
                "files": summary.files,
                "bytes": summary.bytes,
                "attempt": self.env.attempt,
                "checkpoint_step": step,
                "warnings": self.warnings,
            }
            if self.env.result_uri:
                self._write_result(self.env.result_uri, result)
        except StoreStalledError as e:
            log.error(
                "%s: check that the store answers (a hung mount, a stalled connection); exit %s, retried",
                e,
                contract.EXIT_SYNC_FAILED,
            )
            return contract.EXIT_SYNC_FAILED
        except StoreError as e:
            log.error("%s", e)
            return contract.EXIT_SYNC_FAILED
        except ContractError as e:  # a key or location the store refuses: it would fail every retry too
            log.error("%s", e)
            return contract.EXIT_CONTRACT_ERROR
        if self.output_dir is None:
            log.info("done (the job stored its model itself): metrics %s", metrics)
        else:
            log.info("done: %s files, %s bytes, metrics %s", summary.files, summary.bytes, metrics)
        return contract.EXIT_OK

    def _upload_outputs(self, directory: Path, uri: str, metadata: Mapping[str, object]) -> OutputSummary:
        """:func:`upload_outputs`, given up once it moves nothing for the stall bound (StoreStalledError)."""
        upload = Transfer()
        return run_bounded(
            lambda: upload_outputs(directory, uri, metadata, progress=upload.progressed),
            upload,
            self.env.store_stall_seconds,
            f"the output upload to {uri}",
        )

    def _write_result(self, uri: str, result: Mapping[str, object]) -> None:
        """Write ``result`` to ``uri``, given up as the outputs are: one request, answered or not."""
        store, key = open_object(uri)
        data = (json.dumps(result, indent=2, sort_keys=True) + "\n").encode()
        write = Transfer()
        store.request_answered = write.progressed
        run_bounded(
            lambda: store.put(key, io.BytesIO(data), write.progressed),
            write,
            self.env.store_stall_seconds,
            f"the result write to {uri}",
        )
