"""The ``step-<n>-<random>`` folders of a checkpoint location: the newest whole one, and deleting them all.

Split from ``sync`` (whose module docstring tells the layout), which re-exports :func:`clear`; the messages
keep ``sync``'s logger.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path

from costaware_runtime._marker import Marker, parse_marker
from costaware_runtime.contract import CHECKPOINT_MARKER, LATEST_NAME
from costaware_runtime.errors import ContractError, StoreError
from costaware_runtime.stores import LocalStore, Store, names_no_file_path, open_store

log = logging.getLogger("costaware_runtime.sync")

_STEP_FOLDER = re.compile(r"step-(\d+)(-[0-9a-f]+)?")


def newest_unpointed(store: Store, above: int | None) -> tuple[Marker, str] | None:
    """The newest complete step folder of a later step than ``above`` (None: any), and its marker.

    A writer killed between its folder's marker and ``LATEST.json`` left a whole checkpoint that the
    pointer does not name: resuming from the pointer repeated (and paid for) the steps between. Complete
    means what a push writes last, the folder's marker, is there and every file it lists is there at its
    size; a folder without it is an unfinished push (or a live writer's, still uploading), never used.
    Each request the store answers is said to it (``Store.request_answered``): many folders to look into
    move no bytes.
    """
    candidates = sorted(
        (
            (int(found.group(1)), folder)
            for folder in store.folders("step-")
            if (found := _STEP_FOLDER.fullmatch(folder)) and (above is None or int(found.group(1)) > above)
        ),
        reverse=True,
    )
    store._answered()
    for step, folder in candidates:
        where = store.url(f"{folder}/{CHECKPOINT_MARKER}")
        raw = store.read(f"{folder}/{CHECKPOINT_MARKER}")
        store._answered()
        if raw is None:
            log.info("not resuming from %s: it has no marker (an unfinished push)", store.url(folder))
            continue
        try:
            marker = parse_marker(raw, where)
        except ContractError as e:
            log.warning("not resuming from %s: %s", store.url(folder), e)
            continue
        held = store.sizes(f"{folder}/")
        store._answered()
        short = [f.path for f in marker.files if held.get(f"{folder}/{f.path}") != f.bytes]
        if marker.step != step or short:
            log.warning(
                "not resuming from %s: its marker says step %s, and %s of the files it lists are missing "
                "or of another size (deleted in part?)",
                store.url(folder),
                marker.step,
                len(short),
            )
            continue
        return marker, folder
    return None


def clear(uri: str) -> list[str]:
    """Delete every checkpoint at ``uri``, so that the next attempt starts over from step 0.

    ``LATEST.json`` goes first, then every ``step-*`` folder, then the unfinished uploads under them are
    aborted (best effort: credentials that may not list or abort them get a warning). A clear cut short
    leaves at worst whole steps, which a restore would resume from (and say so): run it again. Stop every
    writer first, else its next push puts a checkpoint back. Returns the step folders deleted.

    An S3 prefix that holds no checkpoint returns ``[]``: it cannot be told from one never written.

    Raises:
        ContractError: ``uri`` is empty, None or a ``file:`` URI with no path, not a location a store can use
            (see :func:`open_store`), or a local folder (a relative one read against the current folder, as
            ``costaware-run`` reads it) that does not exist or is a file.
        StoreError: The store could not be listed or written.
    """
    if not isinstance(uri, str) or not uri.strip() or names_no_file_path(uri):
        # Read as the current folder, whose step folders it deleted; costaware-run takes an empty
        # COSTAWARE_CHECKPOINT_URI for no location at all. 'file://' is what f"file://{unset}" gives.
        raise ContractError(
            f"{uri!r} names no location: give the job's COSTAWARE_CHECKPOINT_URI as it was set"
        )
    store = open_store(uri)
    if isinstance(store, LocalStore) and not store.root.is_dir():
        # A misspelt folder deleted nothing and returned [] in silence.
        raise ContractError(_not_a_checkpoint_folder(uri, store.root))
    store.check()
    store.delete([LATEST_NAME])
    folders = [folder for folder in store.folders("step-") if _STEP_FOLDER.fullmatch(folder)]
    for folder in folders:
        store.delete_folder(folder)
    try:
        store.abort_uploads(
            "step-", math.inf, started_before=math.inf
        )  # all of them: nothing writes here now
    except StoreError as e:
        log.warning("deleted the checkpoints at %s, but their unfinished uploads may stay open: %s", uri, e)
    log.info("deleted %s and %s step folders at %s", LATEST_NAME, len(folders), store.uri)
    return folders


#: A relative path that reads as an S3 bucket and a prefix: ``s3://`` left out, most likely.
_BUCKET_AND_PREFIX = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^/].*")


def _not_a_checkpoint_folder(uri: str, root: Path) -> str:
    """Why the local location ``uri`` (the folder ``root``) has no checkpoints to clear, and what to give."""
    what = "a file" if root.exists() else "does not exist"
    if not root.is_absolute():
        # Read against the current folder, as costaware-run reads a relative COSTAWARE_CHECKPOINT_URI.
        what += (
            f"; a relative path, read against the current folder as costaware-run reads it: {root.absolute()}"
        )
    hint = ""
    if not root.exists() and _BUCKET_AND_PREFIX.fullmatch(uri):
        hint = f" (did you mean 's3://{uri}'?)"
    elif uri.startswith("~"):
        hint = " ('~' is not expanded: give the folder's full path)"
    return (
        f"{uri!r} is not a folder ({what}): no checkpoints to clear there; check the location against the "
        f"job's COSTAWARE_CHECKPOINT_URI{hint}"
    )
