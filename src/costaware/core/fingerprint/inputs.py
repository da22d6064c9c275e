"""Fingerprints of a transform's inputs, from what is known of their files without reading them.

The adapters list the files and hand over :class:`FileStat` values (``costaware.adapters.object_store``);
this module combines them. A fingerprint changes when an input's size, modification time, ETag, version id or
content changes, and not when the files are merely listed in another order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.fingerprint.canonical import digest


@dataclass(frozen=True, slots=True)
class FileStat:
    """What is known of one file or object of an input, without reading it.

    Attributes:
        path: Path relative to the input's root (``""`` when the input is a single file).
        size: Bytes.
        version: The metadata that changes when the bytes change: ``mtime_ns`` for local files, the ETag
            (plus version id) for S3 objects; or a content digest when the content was hashed.
    """

    path: str
    size: int
    version: str


@dataclass(frozen=True, slots=True)
class InputFingerprint:
    """The fingerprint of one named input of a transform.

    Attributes:
        name: The name the transform sees the input under.
        uri: Where the input lives (absolute local path, ``s3://bucket/key`` or an Asset URI).
        digest: Hex digest over every file's path, size and version.
        bytes: Total size in bytes.
        files: Number of files or objects.
        mode: ``metadata``, ``content`` or ``declared`` (an Asset without readable data).
    """

    name: str
    uri: str
    digest: str
    bytes: int
    files: int
    mode: str

    def to_dict(self) -> dict[str, Any]:
        """The fingerprint as a JSON-ready dict (for manifests)."""
        return dataclasses.asdict(self)


def fingerprint_input(name: str, uri: str, stats: Iterable[FileStat], *, mode: str) -> InputFingerprint:
    """Combine the file stats of one input into its fingerprint (order of ``stats`` does not matter).

    Raises:
        ConfigurationError: the input has no files, or the mode is unknown.
    """
    if mode not in ("metadata", "content", "declared"):
        raise ConfigurationError(f"fingerprint mode {mode!r} of input {name!r}: use 'metadata' or 'content'")
    ordered = sorted(stats, key=lambda s: s.path)
    if not ordered:
        raise ConfigurationError(
            f"input {name!r} at {uri} has no files: check the path or prefix, or that the upstream task "
            "wrote it"
        )
    parts: list[str] = []
    for stat in ordered:
        parts += [stat.path, str(stat.size), stat.version]
    return InputFingerprint(
        name=name,
        uri=uri,
        digest=digest(*parts),
        bytes=sum(s.size for s in ordered),
        files=len(ordered),
        mode=mode,
    )
