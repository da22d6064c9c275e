"""The object store protocol: small atomic primitives over a root folder or ``s3://bucket/prefix``."""

from __future__ import annotations

from dataclasses import dataclass

from costaware.adapters.object_store.location import Location


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One stored file: path relative to the store root, size, modification time (epoch seconds)."""

    path: str
    size: int
    mtime: float


class ObjectStore:
    """Files under a root (an absolute local folder or ``s3://bucket/prefix``), with atomic primitives.

    Every path argument is relative to the root and checked with ``safe_relative_path``, so no caller
    can reach outside the root. Tokens returned by :meth:`read` identify one version of a file (the
    ETag on S3, a content digest locally) for the conditional :meth:`replace` and :meth:`delete`.

    Use :func:`open_store` to build one.
    """

    scheme = ""

    def __init__(self, root: Location) -> None:
        self.root = root

    def uri(self, rel: str = "") -> str:
        """The URI of ``rel`` under the root."""
        return self.root.child(rel).uri

    def read(self, rel: str) -> tuple[bytes, str] | None:
        """(bytes, version token) of a file, or ``None`` when it does not exist."""
        raise NotImplementedError

    def write(self, rel: str, data: bytes) -> None:
        """Write a whole file; readers see the old or the new bytes, never a mix."""
        raise NotImplementedError

    def create(self, rel: str, data: bytes) -> str | None:
        """Write a file only if none exists; returns its token, or ``None`` when another one was there."""
        raise NotImplementedError

    def replace(self, rel: str, data: bytes, token: str) -> str | None:
        """Overwrite a file only if it is still the version ``token``; returns the new token or ``None``."""
        raise NotImplementedError

    def delete(self, rel: str, token: str | None = None) -> bool:
        """Delete a file (only if it is still version ``token``, when given); returns whether it did."""
        raise NotImplementedError

    def stat(self, rel: str) -> ObjectInfo | None:
        """Size and modification time of a file, or ``None`` when it does not exist."""
        raise NotImplementedError

    def children(self, rel: str) -> list[str]:
        """Names of the immediate children (files and folders) of a folder."""
        raise NotImplementedError

    def files(self, rel: str) -> list[ObjectInfo]:
        """Every file under a folder, recursively, with paths relative to the store root."""
        raise NotImplementedError

    def delete_tree(self, rel: str) -> None:
        """Delete a folder and everything under it (missing is fine)."""
        raise NotImplementedError
