"""Writing a file whole or not at all: the live carbon cache and ``costaware carbon import`` use it."""

from __future__ import annotations

import errno
import logging
import os
import tempfile
from pathlib import Path

# The name the module had before the split: logs filtered on it keep working.
log = logging.getLogger("costaware.adapters.carbon_source")


def write_atomically(
    path: Path, data: bytes, *, mode: int | None = None, owner: tuple[int, int] | None = None
) -> None:
    """Write ``path`` through a temporary file in its folder and a rename: readers see old or new.

    The file is synced to disk before the rename and the folder after it, so a crash leaves the old bytes or
    the new ones, never an empty or partial file under the name.

    Args:
        path: The file to write.
        data: Its whole new content.
        mode: Its permission bits (set before the rename, so no reader sees others); default the temporary
            file's 0600.
        owner: The user and group ids to give it (those of the file it replaces), each only where this
            process may: root gives both, another user the group where it is one of theirs, else neither.
            Default the writer's.
    """
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            if owner is not None:  # before the mode: a change of owner may clear mode bits
                _chown_where_allowed(out.fileno(), path, *owner)
            if mode is not None:
                os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            # Synced before the rename: a crash after it could otherwise leave the new name on empty bytes.
            os.fsync(out.fileno())
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    # The folder after it: the rename itself is an entry of the folder, lost in a crash until synced. Some
    # FUSE/CIFS mounts refuse a folder's fsync (EINVAL): the write is done by then, so that is no failure.
    try:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError as e:
        log.debug("could not sync folder %s after writing %s: %s", path.parent, path.name, e)


#: What fchown answers where an owner cannot be given, which leaves the writer's: not allowed (EPERM, EACCES),
#: an id this user namespace does not map (EINVAL, as root in ``unshare -U -r``), a filesystem without owners
#: (ENOTSUP/EOPNOTSUPP, which differ on some platforms).
_OWNER_REFUSED = frozenset({errno.EPERM, errno.EACCES, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def _chown_where_allowed(handle: int, path: Path, uid: int, gid: int) -> None:
    """Give the open file ``uid`` and ``gid``, else ``gid`` alone, else leave it: as far as allowed.

    ``path`` is the file it will replace, named in the log. Other errors than a refused owner are raised.
    """
    try:
        os.fchown(handle, uid, gid)
        return
    except OSError as e:
        if e.errno not in _OWNER_REFUSED:
            raise
        log.debug("could not give %s the owner %s:%s (%s): trying the group alone", path, uid, gid, e)
    try:
        os.fchown(handle, -1, gid)
    except OSError as e:
        if e.errno not in _OWNER_REFUSED:
            raise
        log.debug("could not give %s the group %s (%s): it keeps the writer's", path, gid, e)
