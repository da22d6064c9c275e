"""Whether the job may write a local folder: a real write, its step that failed, and why."""

from __future__ import annotations

import contextlib
import errno
from dataclasses import dataclass
from pathlib import Path

from costaware_runtime import _files


@dataclass(frozen=True, slots=True)
class WriteRefusal:
    """Where a folder's write check stopped.

    Attributes:
        step: What the folder refused: ``"create"`` a new file, ``"rename"`` it, or ``"delete"`` it.
        error: The filesystem's error.
        left: The probe file still there (it could not be deleted), else None.
    """

    step: str
    error: OSError
    left: Path | None

    @property
    def refused(self) -> bool:
        """Whether the filesystem refused (no permission, read-only, a step it never does), not failed."""
        return _refused(self.error) or self.unsupported

    @property
    def unsupported(self) -> bool:
        """Whether the filesystem does not do this step at all (Mountpoint for S3 renames nothing)."""
        return self.error.errno in _UNSUPPORTED

    @property
    def reason(self) -> str:
        """The filesystem's words for the error (``Permission denied``), else the whole error."""
        return str(self.error.strerror or self.error)

    def stays(self, whose: str) -> str:
        """``"<whose> write check '<probe>' stays there"``: one wording wherever a refusal names the probe."""
        return f"{whose} write check {str(self.left)!r} stays there"

    def left_note(self, whose: str) -> str:
        """``"; <whose> write check '<probe>' stays there"`` where the probe is still there, else ``""``."""
        return f"; {self.stays(whose)}" if self.left else ""


def check_writes(folder: Path, *, rename: bool = True) -> WriteRefusal | None:
    """Create a probe file in ``folder``, rename it (where ``rename``) and delete it; None where all passed.

    A real write, not ``os.access``: root passes that on a read-only mount or sysfs, and an ACL refuses
    where the mode bits allow. The launcher's check of its folders and a folder store's check share it.
    """
    probe = _files.write_check_probe(folder)
    try:
        probe.touch(exist_ok=False)
    except OSError as e:
        return WriteRefusal("create", e, None)
    if rename:
        moved = _files.write_check_probe(folder)
        try:
            probe.rename(moved)
        except OSError as e:
            with contextlib.suppress(OSError):
                probe.unlink()
            return WriteRefusal("rename", e, probe if probe.exists() else None)
        probe = moved
    try:
        probe.unlink()
    except OSError as e:
        return WriteRefusal("delete", e, probe)
    return None


#: A filesystem's answer for a step it never does, which a retry gets again: Mountpoint for S3 on a general
#: purpose bucket renames nothing (ENOSYS), some FUSE and network mounts answer EOPNOTSUPP, and EXDEV is a
#: rename within the folder that crossed mounts. Read as a failure to answer, such a store was retried
#: (exit 74, each retry a billed attempt) to fail the same way.
_UNSUPPORTED = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV})


def _refused(error: OSError) -> bool:
    """Whether ``error`` is the filesystem refusing (no permission, read-only), not failing to answer."""
    return isinstance(error, PermissionError) or error.errno == errno.EROFS
