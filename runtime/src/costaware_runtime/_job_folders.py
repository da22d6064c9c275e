"""The job's local folders: made (or a temporary one) and checked for writes before the job starts."""

from __future__ import annotations

import errno
import logging
import tempfile
from pathlib import Path

from costaware_runtime import contract
from costaware_runtime._bounded import Transfer, run_bounded
from costaware_runtime.errors import ContractError, StoreError, StoreStalledError
from costaware_runtime.stores import check_writes

log = logging.getLogger("costaware_runtime.launcher")  # the launcher's messages keep its logger


#: What the runtime itself writes in a job folder as a temporary file renamed over the real one: a folder that
#: takes new files but refuses renames (append-only) failed the job's first save there, after it trained.
_RENAMED_IN = {
    contract.CHECKPOINT_DIR: "the checkpoint marker (costaware_runtime.commit)",
    contract.METRICS_PATH: "the metrics file (costaware_runtime.write_metrics)",
}


#: What making a job folder answers, besides no permission, when the folder may not be made there (read-only,
#: a file in the way, a name too long, a symlink loop): every attempt would meet it again, so the contract
#: (exit 2), not the filesystem failing (exit 74).
_FOLDER_REFUSED = frozenset({errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP})


def _make_job_folder_within(bound: float, folder: Path, variable: str, given: Path) -> str | None:
    """:func:`_make_job_folder`, given up once its filesystem has not answered for ``bound`` seconds.

    A folder on a hung NFS mount blocked its ``mkdir`` or write check in the kernel: the launcher, and the
    machine, billed, waited for good before the job started.

    Raises:
        StoreStalledError: The filesystem did not answer for ``bound`` seconds (exit 74, retried).
    """
    what = f"the check of {variable}={str(given)!r} (its folder {str(folder)!r} made, a file written there)"
    try:
        return run_bounded(lambda: _make_job_folder(folder, variable, given), Transfer(), bound, what)
    except StoreStalledError as e:
        raise StoreStalledError(
            f"{e}; check that the filesystem holding {str(folder)!r} answers (a hung NFS or other network "
            "mount): remount it, or give a folder on another filesystem"
        ) from e


def _make_job_folder(folder: Path, variable: str, given: Path) -> str | None:
    """Make the local ``folder`` that ``variable`` (``given``) names and check the job may write it.

    A folder under a file, or under one the job may not write, escaped as a traceback and exit 1, which the
    provider reads as the team's own code failing; a folder that exists but refuses a file failed only at
    the job's first save, after it had trained (paid) that long. Exit 2 (the contract) names the variable.

    Returns:
        A warning where the folder takes new files but refuses to delete them (append-only, a Mountpoint for
        S3 without ``--allow-delete``) or its filesystem failed to (an I/O error): the probe file stays there
        (never uploaded as an output); else None.

    Raises:
        ContractError: The folder may not be made (no permission, read-only, a file in its path), refuses a
            new file, or (the checkpoint and metrics folders, see :data:`_RENAMED_IN`) refuses to rename one.
        StoreError: Its filesystem failed to make the folder, or to create or rename the write check (a full
            disk, an I/O error): exit 74.
    """
    advice = "give a folder the job may write, or leave the variable unset for a temporary one"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        existing = folder.absolute()
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        under_a_file = not existing.is_dir()
        if not (under_a_file or isinstance(e, PermissionError) or e.errno in _FOLDER_REFUSED):
            # A full disk, an I/O error, a stale NFS handle: exit 2 said the path cannot be used and was
            # not retried, though another attempt (another machine) may well make it.
            raise StoreError(
                f"{variable}={str(given)!r}: its folder {str(folder)!r} could not be made ({e}); check that "
                "filesystem (its free space, its mount)"
            ) from e
        why = f"{str(existing)!r} is a file, not a folder" if under_a_file else str(e)
        raise ContractError(
            f"{variable}={str(given)!r} cannot be used: its folder {str(folder)!r} cannot be made ({why}); "
            f"{advice}"
        ) from e
    refusal = check_writes(folder, rename=variable in _RENAMED_IN)
    if refusal is None:
        return None
    error = refusal.error
    if not refusal.refused and refusal.step != "delete":
        # A full disk, an I/O error, a stale NFS handle: the filesystem failed, which a retry on another
        # machine may not meet; exit 2 said the job may not write there and was not retried.
        left = refusal.left_note("the launcher's")
        raise StoreError(
            f"{variable}={str(given)!r}: could not {refusal.step} a file in its folder {str(folder)!r} "
            f"({error}){left}; check that filesystem (its free space, its mount)"
        ) from error
    if refusal.step == "create":
        raise ContractError(
            f"{variable}={str(given)!r} cannot be used: the job may not write its folder {str(folder)!r} "
            f"({error}); {advice}"
        ) from error
    if refusal.step == "rename":
        left = refusal.left_note("the launcher's")
        raise ContractError(
            f"{variable}={str(given)!r} cannot be used: its folder {str(folder)!r} takes new files but "
            f"refuses to rename them ({refusal.reason}), which writing {_RENAMED_IN[variable]} "
            f"whole needs (a temporary file renamed over it): the job would fail at its first save{left}; "
            f"{advice}"
        ) from error
    # The job may write there, which is all it needs: refusing it said the opposite of what happened.
    skipped = " (it is never uploaded as an output)" if variable == contract.OUTPUT_DIR else ""
    # An I/O error or a stale handle at the delete is the filesystem failing, not a folder refusing deletions.
    why = (
        f"refuses to delete them ({refusal.reason})"
        if refusal.refused
        else f"could not delete one (the filesystem failed: {refusal.reason})"
    )
    stays = refusal.stays("the launcher's")
    return (
        f"{variable}={str(given)!r}: its folder {str(folder)!r} takes new files but {why}, so {stays}; "
        f"delete it by hand where you can{skipped}"
    )


def _temp_dir(kind: str, variable: str, note: str = "") -> Path:
    folder = Path(tempfile.mkdtemp(prefix=f"costaware-{kind}-"))
    log.info("%s is not set: using %s%s", variable, folder, note)
    return folder
