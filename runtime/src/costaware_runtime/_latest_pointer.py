"""``LATEST.json``, the pointer to a checkpoint location's latest whole step: reading it and moving it.

Split from ``sync`` (whose module docstring tells the layout and why the pointer never goes back), which
re-exports :data:`POINTER_TRIES`; the messages keep ``sync``'s logger.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from costaware_runtime._marker import Marker, parse_marker
from costaware_runtime.contract import LATEST_NAME
from costaware_runtime.errors import ContractError, StoreError
from costaware_runtime.stores import Store, check_key

log = logging.getLogger("costaware_runtime.sync")

#: How often a push reads ``LATEST.json`` again when another writer replaced it between its read and write.
POINTER_TRIES = 5


class LatestPointer:
    """What :class:`~costaware_runtime.sync.CheckpointSync`, its one subclass, does with ``LATEST.json``."""

    store: Store
    #: The identity (step, saved_at) of the checkpoint the remote holds as latest, once known.
    synced: tuple[int, str] | None
    #: The step folders this sync saw ``LATEST.json`` name: whole, as the pointer is a folder's last write.
    named_seen: set[str]
    progressed: Callable[[], None]

    def remote_latest(self) -> tuple[Marker, str] | None:
        """The remote's latest complete checkpoint and its prefix, or None when it has none.

        Raises:
            StoreError: ``LATEST.json`` cannot be read or is not one this runtime wrote.
        """
        raw = self.store.read(LATEST_NAME)
        self.progressed()
        return None if raw is None else self._parse_latest(raw)

    def _parse_latest(self, raw: bytes) -> tuple[Marker, str]:
        where = self.store.url(LATEST_NAME)
        try:
            marker = parse_marker(raw, where)
            prefix = check_key(str(json.loads(raw)["prefix"]).rstrip("/"))
        except (ContractError, KeyError) as e:
            raise StoreError(
                f"{where} is damaged ({e}): restore it, or start over with "
                f"costaware_runtime.clear_checkpoints({self.store.location()!r}) (deleting {LATEST_NAME} "
                "alone resumes the newest whole step folder)"
            ) from e
        # Every read of the pointer comes here: a folder it names is whole, and the prune may take it.
        self.named_seen.add(prefix)
        return marker, prefix

    def _repoint(self, marker: Marker, prefix: str, latest: tuple[Marker, str] | None) -> tuple[Marker, str]:
        """Say why the complete folder ``prefix``, which ``LATEST.json`` does not name, is resumed from.

        Then point ``LATEST.json`` at it, as its writer would have: the provider reads the step from there,
        and a push of this same checkpoint would upload it again. A failure only warns: the next push does.
        Returns the checkpoint to resume from: this one, or a later one another writer pointed at meanwhile.
        """
        pointer = self.store.url(LATEST_NAME)
        if latest:
            # Its writer pushed the whole step and was stopped before it moved the pointer.
            why = (
                f"newer than step {latest[0].step} that {pointer} names: its writer pushed the whole step "
                f"and was stopped before it moved {LATEST_NAME} to it"
            )
        else:  # never written, or deleted (by hand, to start over: clear_checkpoints deletes the folders too)
            why = (
                f"{pointer} is missing; to start over instead, stop every writer and call "
                "costaware_runtime.clear_checkpoints on the location"
            )
        log.warning(
            "resuming from checkpoint step %s in %s, whole (its marker lists every file, each there), %s",
            marker.step,
            self.store.url(prefix),
            why,
        )
        try:
            ahead = self._point_latest(marker.step, latest_pointer_bytes(marker, prefix))
        except StoreError as e:
            log.warning("could not point %s at step %s (%s): the next push does", LATEST_NAME, marker.step, e)
            return marker, prefix
        if ahead is not None:  # another writer moved it past this step since it was read: that one
            self.synced = ahead[0].identity
            return ahead
        self.synced = marker.identity
        return marker, prefix

    def _point_latest(self, step: int, pointer: bytes) -> tuple[Marker, str] | None:
        """Write ``pointer`` as ``LATEST.json`` unless it names a step later than ``step`` (then returned).

        Read just before the write, and written only if unchanged since (see :meth:`Store.put_bytes_if`): a
        leftover writer pushing step 101 after the next attempt pushed step 300 made the resume repeat 199
        paid steps.
        """
        for _ in range(POINTER_TRIES):
            current = self.store.read_versioned(LATEST_NAME)
            self.progressed()
            if current is not None:
                named = self._parse_latest(current[0])
                if named[0].step > step:
                    return named
            written = self.store.put_bytes_if(LATEST_NAME, pointer, None if current is None else current[1])
            self.progressed()
            if written:
                return None
        raise StoreError(
            f"{self.store.url(LATEST_NAME)} was replaced by another writer {POINTER_TRIES} times while this "
            f"one pointed it at step {step}: two writers push to one location (a leftover attempt?); the "
            "push is tried again with the next commit"
        )


def latest_pointer_bytes(marker: Marker, prefix: str) -> bytes:
    """``LATEST.json`` naming ``marker``'s checkpoint in the step folder ``prefix``."""
    latest = marker.to_json() | {"prefix": prefix, "pushed_at": datetime.now(UTC).isoformat()}
    for entry in latest["files"]:
        del entry["mtime_ns"]  # local to the machine that saved it
    return json_bytes(latest)


def json_bytes(value: object) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()
