"""Checkpoint sync between a local checkpoint folder and a remote prefix (a folder or ``s3://``).

Remote layout, written in this order so that a reader never restores half a step::

    <uri>/step-<n>-<random>/<committed files...>      1. every file the local marker lists
    <uri>/step-<n>-<random>/_costaware_checkpoint.json 2. that step's marker
    <uri>/LATEST.json                                  3. last: {"step", "saved_at", "prefix", "files",
                                                          "pushed_at"} (and "save_seconds" when timed)

A writer killed between its folder's marker and ``LATEST.json`` left a complete step that the pointer does not
name: a restore resumes from the newest complete folder of a later step than the pointer's (its marker there
and every file it lists, at its size), says so, and points ``LATEST.json`` at it.

Every push goes to a folder of its own, ``step-<n>-<random>``, so two writers (a leftover attempt, a
launcher per rank) never write into one folder. ``LATEST.json`` never goes back: a push of a lower step than
the one it names (a leftover attempt still running on a lost node, a job that did not resume from its
checkpoint) keeps its folder but leaves the pointer alone, else the next resume repeated the steps between.
The pointer is replaced only if nothing replaced it since it was read (S3's conditional writes, a lock on a
folder store's folder); a store without either leaves a window of one read and one write.

Then step folders are pruned, never those of a later step than the one pushed (a job that went back never
deletes the work ahead of it), nor the one ``LATEST.json`` named before this push (a restore may be reading
it), nor the one it names when read again just before pruning:

* a folder this sync pushed itself goes at once: it pointed ``LATEST.json`` elsewhere since, and no other
  writer ever points it at a folder it did not write; so does one that a sync of the same folder given up
  earlier in this process pushed, once that push has ended (one that ended behind ``LATEST.json`` deletes
  its own folder then, as no push may come after it);
* so does another writer's that this sync saw ``LATEST.json`` name (the earlier attempt's it resumed from, a
  leftover writer's that moved the pointer): pointing the pointer at a folder is the last write into it, so
  the folder is whole and no writer writes into it again; left to the rule below, the step an attempt
  resumed from stayed 6 h beside the two it keeps;
* another writer's that ``LATEST.json`` never named while this sync looked goes only once nothing in it
  changed for :data:`STALE_FOLDER_SECONDS`. That writer may be alive, between uploading its files and
  pointing ``LATEST.json`` at them: deleting its folder then left ``LATEST.json`` naming files that were
  gone, and the next attempt could not resume. A killed attempt's other folders (a push cut short, the step
  before its last) stay until then, or until the run's checkpoints are deleted with the run's end.

A push killed in the middle of a file left an S3 multipart upload open, its parts billed for good: the
unfinished uploads under ``step-`` that received nothing (no start, no part) for :data:`STALE_UPLOAD_SECONDS`
are aborted when a sync starts (its restore) and after each push. A live writer's upload of a large file,
however long ago it began, adds a part every few seconds and is left alone: aborting it when it began over 15
minutes before failed that writer's every push of a file that takes longer. What remains: a writer stalled
with no part sent for that long (not a live upload at 8 MiB a part) loses that push, retried with its next
commit (``LATEST.json`` never names a folder before its upload is complete). Credentials that may not list an
upload's parts have it aborted only once it began :data:`STALE_FOLDER_SECONDS` ago; ones that may not list
the uploads have a folder dated by its finished files alone.

:func:`clear` (re-exported here) and the search for the newest whole step folder are in ``_step_folders``;
what a sync keeps of a push given up (its late end, the folders it hands over) is in ``_given_up_pushes``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from costaware_runtime import _files
from costaware_runtime._given_up_pushes import GivenUpPushes
from costaware_runtime._latest_pointer import POINTER_TRIES as POINTER_TRIES
from costaware_runtime._latest_pointer import LatestPointer, json_bytes, latest_pointer_bytes
from costaware_runtime._marker import CommittedFile, Marker, read_marker, write_marker
from costaware_runtime._marker import parse_marker as parse_marker
from costaware_runtime._step_folders import _STEP_FOLDER, newest_unpointed
from costaware_runtime._step_folders import clear as clear
from costaware_runtime.contract import CHECKPOINT_MARKER, LATEST_NAME, ORIGIN_NAME
from costaware_runtime.errors import CheckpointChangedError, ContractError, StoreError
from costaware_runtime.stores import LocalStore as LocalStore
from costaware_runtime.stores import check_key as check_key
from costaware_runtime.stores import names_no_file_path as names_no_file_path
from costaware_runtime.stores import open_store

# Names imported 'as' themselves were used here before clear() and the step folders' reading moved to
# _step_folders, and LATEST.json's to _latest_pointer: a job's code may still import them from here.

log = logging.getLogger(__name__)

#: How long another writer's step folder, never seen named by ``LATEST.json``, must have been left unchanged
#: before a sync deletes it: longer than any one file's upload takes, so a live writer's folder is never taken
#: from under it.
STALE_FOLDER_SECONDS = 6 * 3600.0
#: How long an unfinished upload (an S3 multipart upload) under ``step-`` must have received no part (nor
#: begun) to be aborted.
STALE_UPLOAD_SECONDS = 15 * 60.0


class CheckpointSync(LatestPointer, GivenUpPushes):
    """Keeps the remote checkpoint at ``uri`` in step with the local folder ``directory``.

    Args:
        uri: A local folder, ``file://`` or ``s3://bucket/prefix``.
        directory: The local checkpoint folder (``COSTAWARE_CHECKPOINT_DIR``).
        clock: The wall clock in epoch seconds, which another writer's folder's age is read against.
        given_up_folders: Shared by this process's syncs of one folder and location (see :meth:`give_up`).
    """

    def __init__(
        self,
        uri: str,
        directory: Path,
        *,
        clock: Callable[[], float] = time.time,
        given_up_folders: set[str] | None = None,
    ) -> None:
        self.store = open_store(uri)
        self.directory = directory
        self.clock = clock
        #: The step folders this sync pushed, which it alone may point ``LATEST.json`` at.
        self._own: set[str] = set()
        #: The step folders this sync saw ``LATEST.json`` name, which it prunes as its own.
        self.named_seen: set[str] = set()
        self._abort_refused = False  # said once: credentials without s3:AbortMultipartUpload
        #: The identity (step, saved_at) of the checkpoint the remote holds as latest, once known.
        self.synced: tuple[int, str] | None = None
        #: Whether this sync pushed a checkpoint of its own (a restore alone does not).
        self.pushed = False
        #: The identity of the last checkpoint pushed without pointing ``LATEST.json`` at it (it was behind).
        self.pushed_behind: tuple[int, str] | None = None
        self._lock = threading.Lock()
        #: When a push or restore last moved bytes, or finished a file (monotonic seconds): one still moving
        #: bytes is slow, not hung, and is waited for (see ``_Watcher.stop`` and ``_bounded``).
        self.progressed_at = time.monotonic()
        # A listing or prune moves no bytes: each request the store answers is progress too.
        self.store.request_answered = self.progressed
        #: Whether a push is pruning old step folders: ``LATEST.json`` already names what it pushed.
        self.pruning = False
        GivenUpPushes.__init__(self, given_up_folders)

    def progressed(self, moved: int = 0) -> None:
        """Note that a transfer moved ``moved`` bytes (or a store request was answered) now; any thread."""
        self.progressed_at = time.monotonic()

    def restore(self) -> int | None:
        """Bring the remote's latest checkpoint into the local folder; returns the local step (or None).

        A local checkpoint of the same commit, or of a newer step, is kept: it is pushed on the next
        :meth:`push_changed`.
        """
        with self._lock:
            local = read_marker(self.directory)
            if local is not None:
                self._check_origin(local)
            latest = self.remote_latest()
            self._claim()
            self._abort_stale_uploads()  # what the attempt before left, killed mid-push
            self.synced = None if latest is None else latest[0].identity
            unpointed = newest_unpointed(self.store, None if latest is None else latest[0].step)
            if unpointed is not None:
                latest = self._repoint(*unpointed, latest)
            if latest is None:
                return None if local is None else local.step
            remote, prefix = latest
            if local is not None and (local.identity == remote.identity and self._complete(local)):
                return local.step
            if local is not None and local.step > remote.step:
                log.warning(
                    "keeping local checkpoint step %s, newer than step %s at %s",
                    local.step,
                    remote.step,
                    self.store.uri,
                )
                return local.step
            # A restore cut short must not leave a marker that vouches for half-replaced files.
            (self.directory / CHECKPOINT_MARKER).unlink(missing_ok=True)
            restored = []
            for file in remote.files:
                target = self.directory.joinpath(*file.path.split("/"))
                self.store.download(f"{prefix}/{file.path}", target, progress=self.progressed)
                self.progressed()
                stat = target.stat()
                if stat.st_size != file.bytes:
                    raise StoreError(
                        f"{self.store.url(prefix + '/' + file.path)} has {stat.st_size} bytes, "
                        f"{LATEST_NAME} says {file.bytes}: the remote checkpoint was changed by hand"
                    )
                restored.append(CommittedFile(file.path, stat.st_size, stat.st_mtime_ns))
            write_marker(
                self.directory,
                Marker(remote.step, remote.saved_at, tuple(restored), remote.save_seconds),
            )
            log.info("restored checkpoint step %s from %s", remote.step, self.store.url(prefix))
            return remote.step

    def push_changed(self) -> int | None:
        """Push the local committed checkpoint unless the remote already has it.

        Returns:
            The step of the local checkpoint, now in the remote (``LATEST.json`` names it, or a later step
            when this writer is behind: see :attr:`synced`), or None when the local folder has no checkpoint.

        Raises:
            CheckpointChangedError: A committed file changed or vanished after the commit (a newer save
                overwrote it): push again once the newer commit is there.
            StoreError: The store could not be read or written.
        """
        with self._lock, self._pushing_now():
            return self._push_locked()

    def _push_locked(self) -> int | None:
        self._behind_folder = None
        local = read_marker(self.directory)
        if local is None:
            return None
        if local.identity in (self.synced, self.pushed_behind):
            return local.step
        latest = self.remote_latest()
        if latest is not None and latest[0].identity == local.identity:
            self.synced = local.identity
            return local.step
        previous = None if latest is None else latest[1]
        # Never an existing folder's name: the same step saved again, or by another writer at once.
        prefix = f"step-{local.step}-{uuid.uuid4().hex[:8]}"
        self._claim()
        self._own.add(prefix)  # before the upload: a failed one leaves a folder of ours to prune
        ahead = self._upload(local, prefix)
        self.pushed = True
        # Before the prune: a prune that stalls must not be read as a checkpoint missing from the store.
        if ahead is None:
            self.synced, self.pushed_behind = local.identity, None
        else:
            self.synced, self.pushed_behind = ahead[0].identity, local.identity
            self._behind_folder = prefix
            # Said before the prune: said after it, a prune that stalled lost it.
            self._say_behind(local.step, ahead[0].step, prefix)
        self.pruning = True
        try:
            self._prune(keep={prefix, previous}, newer_than=local.step)
        finally:
            self.pruning = False
        if ahead is None:
            log.info("pushed checkpoint step %s to %s", local.step, self.store.url(prefix))
        return local.step

    def _say_behind(self, step: int, named: int, prefix: str) -> None:
        """Say that step ``step``, pushed into ``prefix``, is older than step ``named`` of ``LATEST.json``."""
        if self.given_up:
            # Dropped once given up, the step ahead is most likely this process's own later push: blaming a
            # leftover writer or a failed resume sent the reader after a cause that was not there.
            log.warning(
                "a push given up earlier in this process finished late: %s at %s names step %s, newer, and "
                "is left so; step %s in %s is deleted, as no push will name it",
                LATEST_NAME,
                self.store.uri,
                named,
                step,
                self.store.url(prefix),
            )
            return
        log.warning(
            "checkpoint step %s is older than step %s at %s, so %s still names step %s, which the next "
            "attempt resumes from: this writer is behind (a leftover attempt still running, or a job that "
            "did not resume from the latest checkpoint); step %s stays in %s until pruned",
            step,
            named,
            self.store.uri,
            LATEST_NAME,
            named,
            step,
            self.store.url(prefix),
        )

    def _check_origin(self, local: Marker) -> None:
        """Refuse a local checkpoint that another location's sync left: another job's or run's.

        A checkpoint folder shared by two jobs had the second resume from the first one's weights and push
        them into its own store as its own.
        """
        path = self.directory / ORIGIN_NAME
        try:
            origin = json.loads(path.read_bytes())["location"]
        except FileNotFoundError:
            return  # committed here and never synced: the job's own, kept and pushed
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ContractError(f"{path} is damaged ({e!r}): delete it, and the checkpoints with it") from e
        if origin != self.store.location():
            raise ContractError(
                f"{self.directory} holds checkpoint step {local.step} of {origin}, not of {self.store.uri}: "
                "another job's or run's; give this one an empty checkpoint folder, or empty this one"
            )

    def _claim(self) -> None:
        """Record in the local folder which location its checkpoints belong to (once)."""
        path = self.directory / ORIGIN_NAME
        location = self.store.location()
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            if json.loads(path.read_bytes())["location"] == location:
                return
        try:
            _files.write_json(path, {"location": location})
        except OSError as e:  # a read-only folder: the check above is lost, not the training
            log.warning("could not record in %s whose checkpoints it holds: %s", path, e)

    def _upload(self, marker: Marker, prefix: str) -> tuple[Marker, str] | None:
        """Upload ``marker``'s files into ``prefix``, then point ``LATEST.json`` at them.

        Returns the later checkpoint ``LATEST.json`` names instead (and its prefix), else None.
        """
        for file in marker.files:
            path = self.directory.joinpath(*file.path.split("/"))
            try:
                with open(path, "rb") as source:
                    self._check_unchanged(source.fileno(), file, path)
                    # boto3 closes the file it uploads; a second descriptor of the same file outlives it
                    kept = os.dup(source.fileno())
                    try:
                        self.store.put(f"{prefix}/{file.path}", source, progress=self.progressed)
                        self.progressed()
                        self._check_unchanged(kept, file, path)
                    finally:
                        os.close(kept)
            except FileNotFoundError:
                raise CheckpointChangedError(
                    f"{path} of checkpoint step {marker.step} is gone: a newer save replaced it"
                ) from None
        self.store.put_bytes(f"{prefix}/{CHECKPOINT_MARKER}", json_bytes(marker.to_json()))
        self.progressed()
        return self._point_latest(marker.step, latest_pointer_bytes(marker, prefix))

    @staticmethod
    def _check_unchanged(fd: int, file: CommittedFile, path: Path) -> None:
        stat = os.fstat(fd)
        if (stat.st_size, stat.st_mtime_ns) != (file.bytes, file.mtime_ns):
            raise CheckpointChangedError(
                f"{path} changed after it was committed ({stat.st_size} bytes now, {file.bytes} then): "
                "write each step into its own folder (costaware_runtime.checkpoint_folder)"
            )

    def _abort_stale_uploads(self) -> None:
        """Abort the unfinished uploads under ``step-`` idle for :data:`STALE_UPLOAD_SECONDS` or longer."""
        try:
            now = self.clock()
            # An upload whose parts may not be listed may be a live writer's however old: aborted only once
            # it began as long ago as any one file's upload may take.
            aborted = self.store.abort_uploads(
                "step-", now - STALE_UPLOAD_SECONDS, started_before=now - STALE_FOLDER_SECONDS
            )
            self.progressed()
        except StoreError as e:  # a role that may not list or abort them: the training goes on
            if not self._abort_refused:
                log.warning(
                    "could not abort unfinished uploads (their parts are billed until they are): %s; "
                    "allow s3:ListBucketMultipartUploads, s3:ListMultipartUploadParts and "
                    "s3:AbortMultipartUpload, or give the bucket a lifecycle rule that aborts incomplete "
                    "multipart uploads",
                    e,
                )
            self._abort_refused = True
            return
        if aborted:
            log.info("aborted %s unfinished uploads a killed push left: %s", len(aborted), ", ".join(aborted))

    def _prune(self, keep: set[str | None], newer_than: int) -> None:
        """Delete the step folders up to step ``newer_than`` but ``keep`` (see the module's docstring)."""
        self._abort_stale_uploads()
        try:
            latest = self.remote_latest()
        except StoreError as e:  # pruning nothing is safe; deleting without knowing what it names is not
            log.warning("not pruning %s: %s", self.store.uri, e)
            return
        named = None if latest is None else latest[1]
        # Before the listing: a hand-over meanwhile is kept.
        known = self._own | self.given_up_folders | self.named_seen
        folders = self.store.folders("step-")
        self.progressed()
        # A push that failed before its first file named a folder no listing shows, so no prune forgot it:
        # one name more for good at each such push (each give-up too, in the set the process keeps); so
        # did a folder LATEST.json named that was deleted since (by its writer's prune, or by hand).
        never_made = known.difference(folders)
        self._own.difference_update(never_made)
        self.given_up_folders.difference_update(never_made)
        self.named_seen.difference_update(never_made)
        for folder in folders:
            found = _STEP_FOLDER.fullmatch(folder)
            if not found or folder in keep or folder == named or int(found.group(1)) > newer_than:
                continue
            if (
                folder not in self._own
                and folder not in self.given_up_folders
                and folder not in self.named_seen
            ):
                try:
                    changed = self.store.modified(folder)
                    self.progressed()
                except StoreError as e:  # cannot tell whether its writer is alive: kept, as a live one's
                    log.warning("not pruning %s: %s", self.store.url(folder), e)
                    continue
                if changed is not None and self.clock() - changed < STALE_FOLDER_SECONDS:
                    continue
            self.store.delete_folder(folder)
            self.progressed()
            self._own.discard(folder)
            self.given_up_folders.discard(folder)
            self.named_seen.discard(folder)

    def _complete(self, marker: Marker) -> bool:
        for file in marker.files:
            path = self.directory.joinpath(*file.path.split("/"))
            if not path.is_file() or path.stat().st_size != file.bytes:
                return False
        return True
