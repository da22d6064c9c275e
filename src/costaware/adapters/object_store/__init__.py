"""Object stores through pyarrow's filesystems and boto3: local folders and ``s3://bucket/prefix``.

S3 access takes an :class:`S3Options` (credentials, region, endpoint); the Airflow layer builds it from an
AWS connection (``costaware.hooks.aws``), so this module never imports airflow. pyarrow, boto3 and
xxhash are imported where they are used. Input fingerprints live in ``costaware.adapters.input_data``.

One module per concept, all re-exported here: where data lives (``location``), how to reach it (``clients``),
content hashes (``hashing``), the store protocol (``base``) and its two implementations (``local``, ``s3``).
"""

from __future__ import annotations

from costaware.adapters.object_store.base import ObjectInfo, ObjectStore
from costaware.adapters.object_store.clients import S3Options, filesystem, s3_client, s3_filesystem
from costaware.adapters.object_store.hashing import CHUNK_BYTES, hash_bytes, new_hasher
from costaware.adapters.object_store.local import LocalObjectStore
from costaware.adapters.object_store.location import Location, parse_uri
from costaware.adapters.object_store.s3 import S3ObjectStore

__all__ = [
    "CHUNK_BYTES",
    "LocalObjectStore",
    "Location",
    "ObjectInfo",
    "ObjectStore",
    "S3ObjectStore",
    "S3Options",
    "filesystem",
    "hash_bytes",
    "new_hasher",
    "open_store",
    "parse_uri",
    "s3_client",
    "s3_filesystem",
]


def open_store(uri: str | Location, options: S3Options | None = None) -> ObjectStore:
    """An :class:`ObjectStore` for an absolute local folder or ``s3://bucket/prefix``.

    ``uri`` may be one parsed already (:func:`parse_uri`), by a caller that checks it before opening.

    Raises:
        ConfigurationError: the URI is relative, has ``..`` segments, or another scheme.
    """
    location = uri if isinstance(uri, Location) else parse_uri(uri, what="store")
    if location.scheme == "s3":
        return S3ObjectStore(location, options)
    return LocalObjectStore(location)
