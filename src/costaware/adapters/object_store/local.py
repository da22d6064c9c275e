"""An object store in a local (or network-mounted) folder: atomic renames and hard links."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from costaware.adapters.object_store.base import ObjectInfo, ObjectStore
from costaware.adapters.object_store.hashing import hash_bytes
from costaware.core.errors import StoreNotWritableError
from costaware.core.fingerprint import safe_relative_path

#: The lock file of conditional writes, at the store's root.
LOCK_FILE = ".object-store.lock"

#: What a folder the tasks may not write answers: a read-only mount, or no permission for their user.
_NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


class LocalObjectStore(ObjectStore):
    """An :class:`ObjectStore` in a local (or network-mounted) folder."""

    scheme = "local"

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn a folder that refuses writes into an error naming it and the fix, not a bare OSError."""
        try:
            yield
        except OSError as e:
            if e.errno not in _NOT_WRITABLE:
                raise
            raise StoreNotWritableError(
                f"cannot write to the store folder {self.root.path} ({e.strerror}: {e.filename}): make it "
                f"writable for the user the tasks run as (uid {os.geteuid()}), or use another folder"
            ) from e

    @contextmanager
    def _conditional(self) -> Iterator[None]:
        """One conditional replace or delete at a time across processes, like S3's If-Match.

        Without it two callers holding the same token both read a match and both overwrite.
        """
        try:
            import fcntl
        except ImportError:  # Windows: no flock; the check and the write are a moment apart
            yield
            return
        root = Path(self.root.path)
        with self._writing():
            root.mkdir(parents=True, exist_ok=True)
            # Opened for writing: an NFS mount emulates flock with POSIX locks, which need that.
            lock = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)  # closing the descriptor releases the lock

    def path(self, rel: str) -> Path:
        """The absolute local path of ``rel``."""
        return Path(self.root.child(rel).path)

    def read(self, rel: str) -> tuple[bytes, str] | None:
        """See :meth:`ObjectStore.read`."""
        try:
            data = self.path(rel).read_bytes()
        except FileNotFoundError:
            return None
        return data, hash_bytes(data)

    def _staged(self, rel: str, data: bytes) -> Path:
        target = self.path(rel)
        staged = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        with self._writing():
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(staged, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        return staged

    def write(self, rel: str, data: bytes) -> None:
        """See :meth:`ObjectStore.write`."""
        staged = self._staged(rel, data)
        staged.replace(self.path(rel))

    def create(self, rel: str, data: bytes) -> str | None:
        """See :meth:`ObjectStore.create`."""
        staged = self._staged(rel, data)
        try:
            os.link(staged, self.path(rel))  # atomic, fails if the name exists, and the content is complete
        except FileExistsError:
            return None
        finally:
            staged.unlink(missing_ok=True)
        return hash_bytes(data)

    def replace(self, rel: str, data: bytes, token: str) -> str | None:
        """See :meth:`ObjectStore.replace`."""
        staged = self._staged(rel, data)
        try:
            with self._conditional():
                current = self.read(rel)
                if current is None or current[1] != token:
                    return None
                staged.replace(self.path(rel))
        finally:
            staged.unlink(missing_ok=True)
        return hash_bytes(data)

    def delete(self, rel: str, token: str | None = None) -> bool:
        """See :meth:`ObjectStore.delete`."""
        target = self.path(rel)
        if token is not None:
            with self._conditional():
                current = self.read(rel)
                if current is None or current[1] != token:
                    return False
                # Move it aside first, then check it is still the version we meant to delete (a plain
                # write takes no lock).
                aside = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.del")
                try:
                    target.rename(aside)
                except FileNotFoundError:
                    return False
                if hash_bytes(aside.read_bytes()) != token:
                    aside.rename(target)
                    return False
                aside.unlink()
                return True
        try:
            target.unlink()
        except FileNotFoundError:
            return False
        return True

    def stat(self, rel: str) -> ObjectInfo | None:
        """Size and modification time of a file, or ``None`` when it does not exist."""
        try:
            st = self.path(rel).stat()
        except FileNotFoundError:
            return None
        return ObjectInfo(safe_relative_path(rel), st.st_size, st.st_mtime)

    def children(self, rel: str) -> list[str]:
        """See :meth:`ObjectStore.children`."""
        try:
            return sorted(p.name for p in self.path(rel).iterdir())
        except FileNotFoundError:
            return []

    def files(self, rel: str) -> list[ObjectInfo]:
        """See :meth:`ObjectStore.files`."""
        base = self.path(rel)
        if not base.is_dir():
            return []
        root = Path(self.root.path)
        return [
            ObjectInfo(p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime)
            for p in sorted(base.rglob("*"))
            if p.is_file()
        ]

    def delete_tree(self, rel: str) -> None:
        """See :meth:`ObjectStore.delete_tree`."""
        import shutil

        shutil.rmtree(self.path(rel), ignore_errors=True)
