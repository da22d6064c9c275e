"""Naming what refused ``costaware carbon import`` a folder or a file, and the chmod that would let it in.

Split out of :mod:`.carbon_import`: where a write or a folder's creation was refused, the folder to fix
(the nearest this user can reach, or the one they cannot search) and which permission bits apply to them.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from costaware.core.errors import ConfigurationError, CostawareError

if TYPE_CHECKING:
    from pathlib import Path


#: What a folder answers where this user may not write it: only these call for chmod advice.
ACCESS_REFUSED = frozenset({errno.EACCES, errno.EPERM})


def cannot_write(target: Path, error: OSError) -> CostawareError:
    """The refusal of writing ``target``: write-access advice only where access was what refused it.

    A full disk (ENOSPC) or an I/O error (EIO) was told as a permissions problem, with chmod advice that
    fixes nothing.
    """
    if error.errno in ACCESS_REFUSED:
        return ConfigurationError(
            f"cannot write {target} ({error.strerror}): nothing was imported; an import needs write access "
            f"to {target.parent} (the file is replaced by a rename): for a group, chgrp it to the group and "
            "chmod g+ws it"
        )
    if error.errno == errno.EROFS:
        return ConfigurationError(
            f"cannot write {target}: {target.parent} is on a read-only file system; nothing was imported: "
            "import where the carbon folder can be written (or remount it read-write)"
        )
    return CostawareError(f"cannot write {target}: nothing was imported: {error.strerror or error}")


def cannot_make_folder(folder: Path, error: OSError) -> CostawareError:
    """The refusal of creating the carbon ``folder``: it may not exist yet, so name where it was refused."""
    if error.errno == errno.EROFS:
        return ConfigurationError(
            f"cannot create the carbon folder {folder}: it is on a read-only file system; nothing was "
            "imported: set AIRFLOW_HOME where it can be written (or remount it read-write)"
        )
    if error.errno not in ACCESS_REFUSED:
        return CostawareError(
            f"cannot create the carbon folder {folder}: nothing was imported: {error.strerror or error}"
        )
    existing, searchable = _nearest_reachable(folder)
    if not searchable:
        return ConfigurationError(
            f"cannot create the carbon folder {folder} ({error.strerror}): nothing was imported; {existing} "
            "cannot be searched by this user (it lacks x permission for them), so nothing under it can be "
            f"reached: {_search_grant(existing)}, or set AIRFLOW_HOME where they may write, then import again"
        )
    return ConfigurationError(
        f"cannot create the carbon folder {folder} ({error.strerror}): nothing was imported; {existing} is "
        f"not writable to this user: create {folder} there as a user who may (for a group, chgrp it to the "
        "group and chmod g+ws it), then import again"
    )


def _search_grant(folder: Path) -> str:
    """The chmod that lets this user search ``folder``: only the bits of its owner, group or others apply.

    "g+x (for their group) or o+x" was told to the folder's owner too, whom neither lets in.
    """
    try:
        st = folder.stat()
    except OSError:  # cannot tell whose it is: name both that may apply to another user
        return f"chmod g+x (for their group) or o+x {folder}"
    if st.st_uid == os.getuid():
        return f"chmod u+x {folder} (this user owns it)"
    if st.st_gid == os.getgid() or st.st_gid in os.getgroups():
        return f"chmod g+x {folder} (for its group, which this user is in)"
    return f"chmod o+x {folder} (this user neither owns it nor is in its group)"


def _nearest_reachable(folder: Path) -> tuple[Path, bool]:
    """The deepest existing folder on the way to ``folder`` and whether this user may search (enter) it.

    Walked from the root: a folder without search (x) permission hides what is under it, so the deepest one
    seen was named "not writable" though it lacked x, and Path.exists raised on the hidden ones below it.
    """
    path = folder.absolute()
    nearest = path.parents[-1]
    for step in (*reversed(path.parents[:-1]), path):
        if not os.access(nearest, os.X_OK):
            return nearest, False
        try:
            step.stat()
        except OSError:  # absent (or refused some other way): nothing to name past it
            break
        nearest = step
    return nearest, True
