"""Feature-cache values: the manifest that commits an entry, the entry, and what a transform produced.

Pure values and their (de)serialisation; the store and its commit protocol live in
``costaware.adapters.feature_store``.
"""

from __future__ import annotations

import builtins
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from costaware.core.errors import CorruptEntryError

MANIFEST_FORMAT = 1


def _checksum(body: Mapping[str, Any]) -> str:
    text = json.dumps(
        {k: v for k, v in body.items() if k != "checksum"}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a committed entry holds and where it came from.

    Attributes:
        key: The cache key.
        data_path: The Parquet file, relative to the store root.
        data_hash: XXH3-128 of the Parquet bytes.
        schema: Column names and Arrow types.
        rows: Number of rows.
        bytes: Size of the Parquet file.
        created_at: When the entry was committed (ISO 8601, UTC).
        producer: ``dag_id``, ``run_id`` and ``task_id`` of the run that computed it.
        inputs: Input fingerprints (``InputFingerprint.to_dict()``).
        code_parts: What the code fingerprint covered.
        params: The parameters as canonical JSON.
        libraries: Library versions.
        compute_seconds: How long the transform ran.
        cost_usd: What computing it cost, USD as a string.
    """

    key: str
    data_path: str
    data_hash: str
    schema: list[dict[str, str]]
    rows: int
    bytes: int
    created_at: str
    producer: dict[str, str] = field(default_factory=dict)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    code_parts: list[str] = field(default_factory=list)
    params: str = "{}"
    libraries: dict[str, str] = field(default_factory=dict)
    compute_seconds: float = 0.0
    cost_usd: str = "0"
    format: int = MANIFEST_FORMAT

    def to_json(self) -> builtins.bytes:
        """The manifest as JSON bytes, with its checksum."""
        body = asdict(self)
        body["checksum"] = _checksum(body)
        return json.dumps(body, sort_keys=True, indent=1).encode()

    @classmethod
    def from_json(cls, data: builtins.bytes, key: str) -> Manifest:
        """Parse and verify a manifest.

        Raises:
            CorruptEntryError: not JSON, a field missing or of the wrong type, a checksum or key mismatch.
        """
        try:
            body = json.loads(data)
            if not isinstance(body, dict):
                raise TypeError("not an object")
            checksum = body.pop("checksum")
            manifest = cls(**body)
            ints_ok = all(isinstance(v, int) and v >= 0 for v in (manifest.rows, manifest.bytes))
            if (
                not ints_ok
                or not isinstance(manifest.data_path, str)
                or not isinstance(manifest.cost_usd, str)
            ):
                raise TypeError("rows, bytes, data_path or cost_usd has the wrong type")
            Decimal(manifest.cost_usd)
        except Exception as e:  # any malformation means the same thing: do not trust this entry
            raise CorruptEntryError(
                f"manifest of cache entry {key} is unreadable ({e}); it will be recomputed"
            ) from e
        if checksum != _checksum(asdict(manifest)):
            raise CorruptEntryError(
                f"manifest of cache entry {key} fails its checksum; it will be recomputed"
            )
        if manifest.key != key:
            raise CorruptEntryError(
                f"manifest under entries/{key} names key {manifest.key}; it will be recomputed"
            )
        return manifest

    @property
    def created(self) -> datetime:
        """When the entry was committed."""
        return datetime.fromisoformat(self.created_at)

    @property
    def producer_label(self) -> str:
        """``dag_id/run_id`` of the run that computed the entry."""
        return f"{self.producer.get('dag_id', '?')}/{self.producer.get('run_id', '?')}"


@dataclass(frozen=True, slots=True)
class Entry:
    """A committed, verified cache entry."""

    manifest: Manifest
    uri: str
    last_used_at: datetime

    @property
    def key(self) -> str:
        """The entry's cache key."""
        return self.manifest.key


@dataclass(frozen=True, slots=True)
class Computed:
    """What a transform produced, ready to store: Parquet bytes plus the facts for the manifest."""

    parquet: bytes
    schema: list[dict[str, str]]
    rows: int
    compute_seconds: float
    cost_usd: Decimal


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of :meth:`FeatureStore.get_or_compute`: the entry, and whether it was reused."""

    entry: Entry
    hit: bool
    recovered_corrupt: bool = False


def to_parquet(frame: Any) -> tuple[bytes, list[dict[str, str]], int]:
    """A pandas DataFrame or pyarrow Table as Parquet bytes (zstd), its schema and row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    schema = [{"name": f.name, "type": str(f.type)} for f in table.schema]
    return sink.getvalue().to_pybytes(), schema, table.num_rows
