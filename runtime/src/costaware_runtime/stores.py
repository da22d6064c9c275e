"""Where checkpoints, outputs and results go: a local folder or S3, behind one small interface.

Keys are ``/``-separated paths relative to the store's root URI. boto3 is imported only when an ``s3://``
store is first used, so the runtime itself needs nothing beyond the standard library.

The interface is in ``_store``, the S3 store in ``_s3_store`` and the write check in ``_write_check``; each
public name is imported here too, where the jobs' own code imports it from.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import BinaryIO
from urllib.parse import urlparse, urlsplit

from costaware_runtime import _files
from costaware_runtime._bounded import Transfer, run_bounded, stall_seconds
from costaware_runtime._s3_store import S3_INSTALL_HINT as S3_INSTALL_HINT
from costaware_runtime._s3_store import S3Store as S3Store
from costaware_runtime._s3_store import log as log
from costaware_runtime._store import Progress
from costaware_runtime._store import Store as Store
from costaware_runtime._store import check_key as check_key
from costaware_runtime._write_check import WriteRefusal as WriteRefusal
from costaware_runtime._write_check import check_writes as check_writes
from costaware_runtime.contract import S3_ENDPOINT_URL as S3_ENDPOINT_URL
from costaware_runtime.contract import is_uri
from costaware_runtime.errors import ContractError, StoreError, StoreStalledError

# Names imported 'as' themselves were this module's own before it was split: a job's code may still import
# them from here. Setting one here does not reach the private module that uses it (check_writes and
# CREDENTIAL_RETRY_SECONDS excepted: they are read from here).

#: Waits before asking again for credentials that were not found (then "no credentials" is final). Read
#: from here by :meth:`S3Store.check`, so that setting it here still reaches it.
CREDENTIAL_RETRY_SECONDS = (1.0, 3.0)


class LocalStore(Store):
    """A folder on a local or mounted filesystem; every file is written to a temporary name, then renamed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = str(root)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def location(self) -> str:
        return str(self.root.resolve())  # "ckpts", "./ckpts" and file:///abs/ckpts are one folder

    def check(self) -> None:
        """Fail before the job runs where the folder cannot be written, nor made.

        A folder under a file, or one the job may not write, failed only at the first push or at the outputs'
        upload, after the training (and as a passing failure, retried: training again to fail again). Nothing
        is made here: a folder that does not exist yet is checked through the nearest one that does.

        Raises:
            ContractError: The folder, or the nearest folder above it that exists, is a file, not writable,
                or refuses to rename or delete a file.
            StoreError: The filesystem could not be asked (a mount that does not answer);
                ``StoreStalledError`` once it has not answered for ``COSTAWARE_STORE_STALL_SECONDS``.
        """
        # A hung NFS mount blocks each call in the kernel: unbounded, it held the launcher before the job
        # started, and the machine billed, for good (the S3 store's HeadBucket is bounded the same way).
        folder = self.root.absolute()
        what = f"the write check of {folder} (a file made, renamed and deleted there)"
        try:
            run_bounded(self._check_writes, Transfer(), stall_seconds(), what)
        except StoreStalledError as e:
            raise StoreStalledError(
                f"{e}; check that the filesystem holding {folder} answers (a hung NFS or other network "
                "mount): remount it, or give a folder on another filesystem"
            ) from e

    def _check_writes(self) -> None:
        """:meth:`check` itself, each step of which may block on the filesystem."""
        existing = self.root.absolute()
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            where = "is a file" if existing == self.root.absolute() else f"is under {existing}, a file"
            raise ContractError(f"{self.uri} {where}, not a folder: give a folder's path")
        made = "" if existing == self.root.absolute() else f" (where {self.uri} would be made)"
        refusal = check_writes(existing)
        if refusal is None:
            return
        error = refusal.error
        left = refusal.left_note("its")
        if not refusal.refused:
            raise StoreError(
                f"could not {refusal.step} a file in {existing} for {self.uri}: {error}{left}"
            ) from error
        if refusal.step == "create":
            raise ContractError(
                f"{self.uri} cannot be written: {existing}{made} refuses a new file ({refusal.reason}); "
                "give a folder the job may write, or make it writable"
            ) from error
        # An append-only folder, a Mountpoint for S3 without --allow-delete: "refuses a new file" said the
        # opposite of what happened. A store renames and deletes files (each is written to a temporary
        # name first; old steps and manifests are deleted), so it is still refused.
        mount = (
            " (a Mountpoint for S3 renames no file: give the bucket's s3:// URI instead)"
            if refusal.step == "rename" and refusal.unsupported
            else ""
        )
        raise ContractError(
            f"{self.uri} cannot be a store: {existing}{made} takes new files but refuses to "
            f"{refusal.step} them ({refusal.reason}), and a store renames and deletes files{left}; give a "
            f"folder that allows both{mount}"
        ) from error

    def put(self, key: str, source: BinaryIO, progress: Progress | None = None) -> None:
        with (
            _local_errors(self.url(key), "write"),
            _files.replacing(self._path(key)) as temp,
            open(temp, "wb") as target,
        ):
            _copy(source, target, progress)

    def read(self, key: str) -> bytes | None:
        with _local_errors(self.url(key), "read"):
            try:
                return self._path(key).read_bytes()
            except FileNotFoundError:
                return None

    def download(self, key: str, destination: Path, progress: Progress | None = None) -> None:
        source = self._path(key)
        if not source.is_file():
            raise StoreError(f"{self.url(key)} does not exist")
        with (
            _local_errors(self.url(key), "read"),
            _files.replacing(destination) as temp,
            open(source, "rb") as reader,
            open(temp, "wb") as target,
        ):
            _copy(reader, target, progress)

    def sizes(self, prefix: str = "") -> dict[str, int]:
        if not self.root.is_dir():
            return {}
        found = {}
        with _local_errors(self.uri, "list"):
            for folder, _, names in os.walk(self.root):
                for name in names:
                    if name.startswith(".") and name.endswith(".tmp"):
                        continue  # another writer's file, not yet renamed into place
                    path = Path(folder, name)
                    key = path.relative_to(self.root).as_posix()
                    if key.startswith(prefix):
                        with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                            found[key] = path.stat().st_size
        return found

    def folders(self, prefix: str = "") -> list[str]:
        # From the folder itself: one holding only a killed writer's temporary file lists no key.
        with _local_errors(self.uri, "list"):
            if not self.root.is_dir():
                return []
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and p.name.startswith(prefix))

    def delete_folder(self, folder: str) -> None:
        # Whole, temporary files too: a writer killed mid-copy left one that no key names and nothing
        # deleted (a checkpoint's size, per kill, for good).
        with _local_errors(self.url(folder), "delete"), contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self._path(folder))

    def modified(self, folder: str) -> float | None:
        # The folders and temporary files too: a writer busy copying a file into it counts as a change.
        root = self._path(folder)
        newest: float | None = None
        with _local_errors(self.url(folder), "list"):
            for path, _, names in os.walk(root):
                for entry in (Path(path), *(Path(path, name) for name in names)):
                    with contextlib.suppress(FileNotFoundError):  # renamed or deleted meanwhile
                        newest = max(newest or 0.0, entry.stat().st_mtime)
        return newest

    def put_bytes_if(self, key: str, data: bytes, tag: str | None) -> bool:
        # Check and rename under a lock on the store's folder, which every writer of it takes here: no
        # writer replaces the key between them. A filesystem without flock (some network mounts) leaves the
        # base class's small window between the check and the rename.
        with _local_errors(self.uri, "write"):
            self.root.mkdir(parents=True, exist_ok=True)
        with _folder_lock(self.root):
            return super().put_bytes_if(key, data, tag)

    def delete(self, keys: Iterable[str]) -> None:
        with _local_errors(self.uri, "delete"):
            for key in keys:
                path = self._path(key)
                path.unlink(missing_ok=True)
                # Drop the folders the key emptied, so a deleted step leaves no husk behind.
                for parent in path.parents:
                    if parent == self.root or not parent.is_relative_to(self.root):
                        break
                    try:
                        parent.rmdir()
                    except OSError:
                        break


def _copy(source: BinaryIO, target: BinaryIO, progress: Progress | None) -> None:
    """Copy ``source`` to its end into ``target`` a MiB at a time, saying each MiB to ``progress``."""
    if progress is None:
        shutil.copyfileobj(source, target, 1 << 20)
        return
    while chunk := source.read(1 << 20):
        target.write(chunk)
        progress(len(chunk))


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` where the platform and filesystem give one (else go unlocked)."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):  # not POSIX, or a folder it may write but not open: unlocked
        yield
        return
    try:
        with contextlib.suppress(OSError):  # no flock on this filesystem: unlocked, as documented
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def _local_errors(where: str, action: str) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        raise StoreError(f"could not {action} {where}: {e}") from e


def open_store(uri: str) -> Store:
    """The store at ``uri``: a local folder path, ``file:///path`` or ``s3://bucket/prefix``.

    Raises:
        ContractError: ``uri`` has another scheme, an ``s3://`` URI names no bucket, a ``file://`` URI
            names a host or no path, a ``file:`` URI is relative (``file:ckpt``), an ``s3://`` or ``file://``
            URI holds a ``#`` or ``?``, or the local folder is the root, ``/`` (``//``, ``/.``, ``file:///.``,
            or ``.`` in a job started in ``/``).
    """
    parsed = urlparse(uri)
    _refuse_cut_uri(uri, parsed.scheme)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ContractError(f"{uri!r} names no bucket: use s3://bucket/prefix")
        return S3Store(parsed.netloc, parsed.path)
    if parsed.scheme == "file":
        _refuse_file_host(uri, parsed.netloc, parsed.path)
        if names_no_file_path(uri):
            # file:// (what f"file://{unset}" gives) was read as Path(""): the current folder, whose
            # step-* folders a checkpoint push pruned and where the outputs were uploaded; file:/// (what
            # f"file://{unset}/" gives) the whole machine's root.
            root = " but the root, / (what file://$UNSET/ gives)" if parsed.path.strip() else ""
            raise ContractError(
                f"{uri!r} names no folder{root}: give an absolute path after three slashes "
                "(file:///data/ckpt), or the folder's path itself; leave the variable unset for no store"
            )
        if not parsed.path.startswith("/"):
            # file:ckpt was opened in whatever folder the job was started in; open_object refused its like.
            raise ContractError(
                f"{uri!r} is a relative file: URI: give an absolute path after three slashes "
                f"(file:///data/{PurePosixPath(parsed.path).name or 'ckpt'}), or the folder's path itself"
            )
        return _local_store(uri, parsed.path)
    if is_uri(uri):
        raise ContractError(f"{uri!r} is not a supported location: use a local folder, file:// or s3://")
    return _local_store(uri, uri)


#: What a store at the root would do there (the provider's refusal says it in the same words).
_ROOT_WRITES = "its files would be written in folders made directly under /"


def _root_reach(path: str) -> str | None:
    """How the local ``path`` names the machine's root: ``"as written"``, ``"through a link"``, or None.

    The provider's rule (``costaware.adapters.object_store.location.machine_root_reach``, which this slim
    distribution cannot import), plus a relative path, which the job reads against its current folder: the
    root is the one folder that is its own parent, ``//`` included, as written or once links are followed.
    """
    written = os.path.normpath(os.path.abspath(path))  # noqa: PTH100
    if written == os.path.dirname(written):  # noqa: PTH120
        return "as written"
    real = os.path.realpath(path)
    return "through a link" if real == os.path.dirname(real) else None  # noqa: PTH120


def _local_store(uri: str, path: str, file_name: str = "") -> LocalStore:
    """The store in the local folder ``path`` (from ``uri``), refused where that folder is the root.

    Only file:/// was refused: / (what "$UNSET/" gives), //, /. and file:///. opened the machine's root, where
    a checkpoint push wrote its step folders and pruned older ones, and a clear deleted them. ``file_name``:
    the one file ``uri`` names in that folder (the result), if it names one. Worded as the provider's
    refusal (``refuse_machine_root``): the root, how it was reached, what a store does there, what instead.
    """
    reach = _root_reach(path)
    if reach is None:
        return LocalStore(Path(path))
    # A relative link to / (ckpt -> /) is named as the link below, not told to be an absolute path.
    if reach == "as written" and not PurePosixPath(path).is_absolute():
        # A relative path where the job runs in / (a container's WORKDIR /) was blamed on an unset variable.
        example = f"/data/{file_name or 'ckpt'}"
        here = str(Path.cwd())
        if here != "/":  # '../..' climbed there: the current folder is not the root itself
            raise ContractError(
                f"{uri!r} is a relative path that leads from the current folder, {here}, up to the root, /, "
                f"of the whole machine: give an absolute path ({example})"
            )
        raise ContractError(
            f"{uri!r} is a relative path, read against the current folder, here the root, /, of the whole "
            f"machine: give an absolute path ({example})"
        )
    # Through a link, not an unset variable: "$UNSET/" named the wrong cause there.
    how = f" ({path!r} is a symbolic link that leads there)" if reach == "through a link" else ""
    if file_name:
        how = how or f' (what file://$UNSET/{file_name} or "$UNSET/{file_name}" gives)'
        raise ContractError(
            f"{uri!r} is a file in the root, /, of the whole machine{how}: {_ROOT_WRITES}; give a file in a "
            f"folder of its own such as '/data/{file_name}' or an s3:// URI, or leave the variable unset"
        )
    how = how or ' (what "$UNSET/" or file://$UNSET/ gives)'
    raise ContractError(
        f"{uri!r} is the root, /, of the whole machine{how}: {_ROOT_WRITES} (checkpoint step folders, "
        "outputs), and old ones deleted from it; give a folder of its own such as '/data/ckpt' or an s3:// "
        "URI, or leave the variable unset for no store"
    )


def open_object(uri: str) -> tuple[Store, str]:
    """The store holding the single object ``uri`` and the object's key in it.

    Raises:
        ContractError: ``uri`` names a folder, is a relative ``file:`` URI, or names a file in the root, ``/``
            (see :func:`open_store`).
    """
    parsed = urlparse(uri)
    _refuse_cut_uri(uri, parsed.scheme)
    path = PurePosixPath(parsed.path if parsed.scheme else uri)
    if not path.name or uri.endswith("/"):
        raise ContractError(f"{uri!r} names a folder, not a file: add a file name such as result.json")
    if parsed.scheme == "file":
        # From the parsed path: cutting the name off the text left file:///result.json's parent as "file:",
        # which opened the current folder.
        _refuse_file_host(uri, parsed.netloc, parsed.path)
        if not path.is_absolute():
            # file:result.json wrote into whatever folder the job was started in.
            raise ContractError(
                f"{uri!r} is a relative file: URI: give an absolute path after three slashes "
                f"(file:///data/{path.name}), or the file's path itself"
            )
        # As a store: file:///result.json (what file://$UNSET/result.json gives) wrote /result.json.
        return _local_store(uri, str(path.parent), path.name), path.name
    if not parsed.scheme:
        return _local_store(uri, str(path.parent), path.name), path.name
    return open_store(f"{parsed.scheme}://{parsed.netloc}{path.parent}"), path.name


def _refuse_file_host(uri: str, host: str, path: str) -> None:
    """Refuse a ``file://`` URI naming a host: file://ckpts/run1 would otherwise write to /run1."""
    if host not in ("", "localhost"):
        raise ContractError(
            f"{uri!r} names the host {host!r}: a file URI takes three slashes, file:///{host}{path} for an "
            "absolute path, or give the folder's path itself"
        )


def names_no_file_path(uri: str) -> bool:
    """Is ``uri`` a ``file:`` URI with no folder (``file://``, ``file:``, ``file://localhost``, ``file:///``)?"""
    parts = urlsplit(uri.strip())
    return parts.scheme.lower() == "file" and not parts.path.strip("/ ")


def _refuse_cut_uri(uri: str, scheme: str) -> None:
    """Refuse an ``s3://`` or ``file://`` URI holding ``#`` or ``?``, which a URI parser cuts off.

    s3://bkt/runs/job#1 and s3://bkt/runs/job?x=1 both named runs/job/: two runs shared one checkpoint
    prefix and pruned each other's steps.
    """
    if scheme in ("s3", "file"):
        for mark in ("#", "?"):
            if mark in uri:
                raise ContractError(
                    f"{uri!r} holds {mark!r}, which ends a URI's path: it would name the same place as "
                    f"{uri.split(mark)[0]!r}; leave '#' and '?' out of the location"
                )
