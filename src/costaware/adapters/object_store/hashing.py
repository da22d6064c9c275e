"""Content hashes for change detection: XXH3-128 (fast, not cryptographic; xxhash is imported where used)."""

from __future__ import annotations

from typing import Any

from costaware.core.errors import ConfigurationError

#: How much of a file is read (and hashed) at a time.
CHUNK_BYTES = 8 << 20


def new_hasher() -> Any:
    """A fresh XXH3-128 hasher (fast, non-cryptographic: for change detection, not security)."""
    try:
        import xxhash
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ConfigurationError("content fingerprints need xxhash: pip install 'xxhash>=3.5'") from e
    return xxhash.xxh3_128()


def hash_bytes(data: bytes | memoryview) -> str:
    """XXH3-128 of bytes in memory."""
    h = new_hasher()
    h.update(data)
    return f"xxh3_128={h.hexdigest()}"
