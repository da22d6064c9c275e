"""The feature cache: Parquet entries with manifests, committed atomically, one writer per key.

Layout under the store root (a local folder or ``s3://bucket/prefix``)::

    entries/<key>/manifest.json          the commit point; an entry exists iff this is valid
    entries/<key>/<token>/data.parquet   the features
    locks/<key>.json                     the lease of the process computing <key>
    used/<key>                           last reuse (for least-recently-used eviction)
    staging/<key>.<token>/               local only: an entry being written
    billing.json                         until when storage has been billed to the ledger

Commit. Locally the entry is written into ``staging/`` and renamed to ``entries/<key>`` in one
``os.rename``, which fails when another writer committed first. On S3 the data is written under a fresh
token, then the manifest with ``If-None-Match: *``, which only one writer can win. Readers trust only a
manifest whose checksum, key and data size check out, so a writer killed at any point leaves no entry.

Lease. Before computing, a writer creates ``locks/<key>.json`` (create-if-absent) holding its token and an
expiry that a heartbeat thread renews. Others wait and reuse its entry; they break the lease when it
expires, or at once when it belongs to a dead process on the same host (``costaware.adapters.feature_lease``).

Storage is billed to the ledger per GB-month (``costaware.adapters.feature_billing``); the manifest and the
entry are values of ``costaware.adapters.feature_manifest``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from costaware.adapters.feature_billing import bill_spans, read_state, storage_charge
from costaware.adapters.feature_lease import DEFAULT_LEASE, hold_lease
from costaware.adapters.feature_manifest import Computed, Entry, Manifest, Outcome
from costaware.adapters.object_store import S3Options, hash_bytes, open_store, parse_uri
from costaware.adapters.object_store.location import refuse_machine_root
from costaware.core.cache_policy import (
    S3_STANDARD_USD_PER_GB_MONTH,
    EntryStats,
    EvictionPolicy,
)
from costaware.core.errors import (
    ConfigurationError,
    CorruptEntryError,
    CostawareError,
    StoreNotWritableError,
)
from costaware.core.fingerprint import safe_relative_path, validate_key
from costaware.core.ledger import LedgerEntry, utcnow

__all__ = ["FeatureStore"]

log = logging.getLogger(__name__)


class FeatureStore:
    """Feature-cache entries in a local folder or under ``s3://bucket/prefix``.

    Args:
        root_uri: Absolute local folder or ``s3://bucket/prefix``.
        s3: How to reach S3 (credentials, region, endpoint).
        lease: How long a writer's lock lives without renewal (renewed every third of it).
        poll_seconds: How often a waiting reader checks for the entry.
    """

    def __init__(
        self,
        root_uri: str,
        *,
        s3: S3Options | None = None,
        lease: timedelta = DEFAULT_LEASE,
        poll_seconds: float = 0.5,
    ) -> None:
        location = parse_uri(root_uri, what="store")
        # The operator and the CLI refuse it too; a library user calling this directly had each entry's
        # folder, its staging and its leases made directly under /, a symbolic link to it as well. Checked
        # before the store is opened: nothing is done for a root that is refused.
        if location.scheme == "local":
            refuse_machine_root(
                "feature cache",
                root_uri,
                location.path,
                example="/srv/ml/features",
                writes="each entry's folder would be made directly under /",
            )
        self.store = open_store(location, s3)
        self.root_uri = self.store.uri()
        self.lease = lease
        self.poll_seconds = poll_seconds

    # -- reading ----------------------------------------------------------------------------------

    def _last_used(self, key: str, manifest: Manifest) -> datetime:
        # The time is in the marker's body: S3's LastModified has whole seconds, too coarse for LRU.
        got = self.store.read(f"used/{key}")
        try:
            return datetime.fromisoformat(got[0].decode()) if got else manifest.created
        except ValueError:
            return manifest.created

    def lookup(self, key: str) -> Entry | None:
        """The committed entry of ``key``, or ``None``.

        Raises:
            CorruptEntryError: a manifest exists but is corrupt, or its data is missing or of another size.
        """
        validate_key(key)
        got = self.store.read(f"entries/{key}/manifest.json")
        if got is None:
            return None
        manifest = Manifest.from_json(got[0], key)
        try:
            safe = safe_relative_path(manifest.data_path, what="data_path") == manifest.data_path
        except ConfigurationError:
            safe = False
        if not safe or not manifest.data_path.startswith(f"entries/{key}/"):
            raise CorruptEntryError(
                f"manifest of cache entry {key} points outside its entry: {manifest.data_path!r}"
            )
        info = self.store.stat(manifest.data_path)
        if info is None or info.size != manifest.bytes:
            found = "missing" if info is None else f"{info.size} bytes"
            raise CorruptEntryError(
                f"data of cache entry {key} is {found}, its manifest says {manifest.bytes} bytes; "
                "it will be recomputed"
            )
        return Entry(manifest, self.store.uri(manifest.data_path), self._last_used(key, manifest))

    def keys(self) -> list[str]:
        """Keys that have an entry folder (committed or not)."""
        found = []
        for name in self.store.children("entries"):
            try:
                found.append(validate_key(name))
            except CostawareError:
                continue
        return found

    def entries(self) -> list[Entry]:
        """Every valid committed entry; corrupt ones are logged and left out."""
        out = []
        for key in self.keys():
            try:
                entry = self.lookup(key)
            except CorruptEntryError as e:
                log.warning("%s", e)
                continue
            if entry is not None:
                out.append(entry)
        return out

    def verify(self, key: str) -> Entry:
        """Look up ``key`` and check its data against the manifest's content hash (reads the data).

        Raises:
            CorruptEntryError: no entry, or the data's hash differs.
        """
        entry = self.lookup(key)
        if entry is None:
            raise CorruptEntryError(f"the cache at {self.root_uri} has no entry {key}")
        got = self.store.read(entry.manifest.data_path)
        if got is None or hash_bytes(got[0]) != entry.manifest.data_hash:
            raise CorruptEntryError(f"data of cache entry {key} does not match its manifest's hash")
        return entry

    # -- writing ----------------------------------------------------------------------------------

    def _commit(self, key: str, computed: Computed, manifest: Manifest) -> bool:
        token = uuid.uuid4().hex
        data_rel = f"entries/{key}/{token}/data.parquet"
        final = replace(manifest, data_path=data_rel, data_hash=hash_bytes(computed.parquet))
        if self.store.scheme == "local":
            staging = f"staging/{key}.{token}"
            self.store.write(f"{staging}/{token}/data.parquet", computed.parquet)
            self.store.write(f"{staging}/manifest.json", final.to_json())
            source, target = self.store.root.child(staging).path, self.store.root.child(f"entries/{key}").path
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            try:
                Path(source).rename(target)  # atomic; fails when entries/<key> exists and is not empty
            except OSError:
                self.store.delete_tree(staging)
                return False
            return True
        self.store.write(data_rel, computed.parquet)
        if self.store.create(f"entries/{key}/manifest.json", final.to_json()) is None:
            self.store.delete_tree(f"entries/{key}/{token}")
            return False
        return True

    def _discard_corrupt(self, key: str) -> None:
        """Remove a corrupt entry so a fresh one can be committed (only the corrupt version is removed)."""
        rel = f"entries/{key}"
        if self.store.scheme == "local":
            aside = f"staging/{key}.{uuid.uuid4().hex}.corrupt"
            Path(self.store.root.child("staging").path).mkdir(parents=True, exist_ok=True)
            try:
                Path(self.store.root.child(rel).path).rename(self.store.root.child(aside).path)
            except FileNotFoundError:
                return
            self.store.delete_tree(aside)
            return
        got = self.store.read(f"{rel}/manifest.json")
        if got is not None and self.store.delete(f"{rel}/manifest.json", got[1]):
            self.store.delete_tree(rel)

    def get_or_compute(
        self,
        key: str,
        compute: Callable[[], Computed],
        manifest: Manifest,
        *,
        wait_timeout: timedelta = timedelta(hours=2),
    ) -> Outcome:
        """Reuse the entry of ``key``, or compute and commit it; one process computes, others wait.

        Args:
            key: The cache key.
            compute: Runs the transform; called at most once, and only by the lease holder.
            manifest: The manifest to commit (``data_path``, ``data_hash``, ``rows``, ``bytes``, ``schema``,
                ``created_at``, ``compute_seconds`` and ``cost_usd`` are filled in here).
            wait_timeout: How long to wait for another writer before giving up.

        Raises:
            TimeoutError: another writer held the key longer than ``wait_timeout`` (transient: retry).
            StoreNotWritableError: the cache's folder refuses writes (read-only, no permission).
        """
        validate_key(key)
        try:
            return self._get_or_compute(key, compute, manifest, wait_timeout)
        except StoreNotWritableError as e:
            raise StoreNotWritableError(
                f"feature cache {self.root_uri}: {e}. Every run writes there, a cache hit too (its lease and "
                "last-used time); store_uri= or COSTAWARE_FEATURE_CACHE names the folder"
            ) from e

    def _get_or_compute(
        self, key: str, compute: Callable[[], Computed], manifest: Manifest, wait_timeout: timedelta
    ) -> Outcome:
        deadline = time.monotonic() + wait_timeout.total_seconds()
        recovered = False
        while True:
            try:
                entry = self.lookup(key)
            except CorruptEntryError as e:
                log.warning("%s", e)
                entry, recovered = None, True
            if entry is not None:
                self.store.write(f"used/{key}", utcnow().isoformat().encode())
                return Outcome(entry, hit=True, recovered_corrupt=recovered)
            with hold_lease(self.store, key, self.lease) as lease:
                if lease is not None:
                    outcome = self._compute_locked(key, compute, manifest, recovered)
                    if lease.lost.is_set():
                        log.warning(
                            "the lease of cache key %s was lost while computing it: another run may have "
                            "computed it too",
                            key,
                        )
                    return outcome
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"another writer has held cache key {key} at {self.root_uri} for over {wait_timeout}; "
                    "the task will retry (raise wait_timeout for slower transforms)"
                )
            time.sleep(self.poll_seconds)

    def _compute_locked(
        self, key: str, compute: Callable[[], Computed], manifest: Manifest, recovered: bool
    ) -> Outcome:
        try:
            entry = self.lookup(key)  # committed while we were taking the lease
        except CorruptEntryError:
            entry = None
            self._discard_corrupt(key)
            recovered = True
        if entry is not None:
            return Outcome(entry, hit=True, recovered_corrupt=recovered)
        computed = compute()
        full = replace(
            manifest,
            key=key,
            schema=computed.schema,
            rows=computed.rows,
            bytes=len(computed.parquet),
            created_at=utcnow().isoformat(),
            compute_seconds=round(computed.compute_seconds, 3),
            cost_usd=str(computed.cost_usd),
        )
        if not self._commit(key, computed, full):
            log.info("cache key %s was committed by another writer first; using theirs", key)
        entry = self.lookup(key)
        if entry is None:  # pragma: no cover - the commit or the other writer's commit is visible
            raise CorruptEntryError(f"cache entry {key} vanished right after it was committed")
        self.store.write(f"used/{key}", utcnow().isoformat().encode())
        return Outcome(entry, hit=False, recovered_corrupt=recovered)

    # -- eviction and storage billing -------------------------------------------------------------

    def bill_storage(
        self,
        record: Callable[[LedgerEntry], object],
        *,
        until: datetime | None = None,
        usd_per_gb_month: Decimal = S3_STANDARD_USD_PER_GB_MONTH,
        tags: Mapping[str, str] | None = None,
    ) -> list[LedgerEntry]:
        """Record storage charges (kind ``storage``, unit ``gb_month``) of every entry since the last bill.

        Bills run to the start of the current hour, so a second bill in the same hour records nothing; a
        bill killed half-way is finished by the next one with the same ``entry_uid`` values, which the
        ledger keeps once (see :mod:`costaware.adapters.feature_billing`).

        Args:
            record: Where the charges go, e.g. ``ledger.record``.
            until: Bill up to this instant (default: now, truncated to the hour).
            usd_per_gb_month: The storage price (default S3 Standard).
            tags: Allocation tags for the charges.
        """
        end = (until or utcnow()).replace(minute=0, second=0, microsecond=0)

        def charges(start: datetime, stop: datetime) -> list[LedgerEntry]:
            found = (
                storage_charge(self.root_uri, e, start, stop, usd_per_gb_month, tags or {}, "stored")
                for e in self.entries()
            )
            return [charge for charge in found if charge is not None]

        return bill_spans(self.store, end, charges, record)

    def evict(
        self,
        policy: EvictionPolicy | None,
        *,
        now: datetime | None = None,
        dry_run: bool = False,
        only: list[str] | None = None,
    ) -> list[Entry]:
        """Delete the entries ``policy`` selects (or exactly ``only``); returns what was (would be) evicted.

        Args:
            policy: The eviction policy.
            now: The current time.
            dry_run: Only say what would be evicted.
            only: Evict exactly these keys instead of asking the policy.
        """
        now = now or utcnow()
        live = self.entries()
        if only is not None:
            wanted = {validate_key(k) for k in only}
            chosen = [e for e in live if e.key in wanted]
        elif policy is None:
            raise ConfigurationError("evict needs an eviction policy or the keys to evict, got neither")
        else:
            stats = [EntryStats(e.key, e.manifest.bytes, e.manifest.created, e.last_used_at) for e in live]
            picked = policy.select(stats, now)
            by_key = {e.key: e for e in live}
            chosen = [by_key[k] for k in picked]
        if dry_run:
            return chosen
        for entry in chosen:
            self._delete_entry(entry.key)
        return chosen

    def storage_charges_for(
        self,
        evicted: list[Entry],
        *,
        now: datetime | None = None,
        usd_per_gb_month: Decimal = S3_STANDARD_USD_PER_GB_MONTH,
    ) -> list[LedgerEntry]:
        """Storage charges of evicted entries from the last bill until their eviction.

        A span a bill claimed but may not have finished (killed half-way) is charged as that bill charges
        it, the same ``entry_uid`` (the ledger keeps it once): charged from the watermark as "evicted",
        that span was billed twice.
        """
        end = now or utcnow()
        until, pending, _ = read_state(self.store)
        start = until or datetime.min.replace(tzinfo=timezone.utc)
        claimed = pending if pending is not None and pending > start else start
        found = []
        for e in evicted:
            found.append(storage_charge(self.root_uri, e, start, claimed, usd_per_gb_month, {}, "stored"))
            found.append(storage_charge(self.root_uri, e, claimed, end, usd_per_gb_month, {}, "evicted"))
        return [charge for charge in found if charge is not None]

    def _delete_entry(self, key: str) -> None:
        rel = f"entries/{key}"
        if self.store.scheme == "local":
            self._discard_corrupt(key)  # rename aside, then delete: readers never see half an entry
        else:
            self.store.delete(f"{rel}/manifest.json")  # uncommit first
            self.store.delete_tree(rel)
        self.store.delete(f"used/{key}")

    def collect_garbage(self, *, older_than: timedelta | None = None) -> int:
        """Delete what killed writers left (staging folders, unreferenced data) older than ``older_than``.

        Args:
            older_than: Leave younger leftovers alone, they may belong to a live writer (default: the lease).

        Returns:
            How many staging folders and data files were deleted.
        """
        cutoff = (utcnow() - (self.lease if older_than is None else older_than)).timestamp()
        referenced = {e.manifest.data_path for e in self.entries()}
        removed = 0
        for name in self.store.children("staging"):
            newest = max((f.mtime for f in self.store.files(f"staging/{name}")), default=0.0)
            if newest < cutoff:
                self.store.delete_tree(f"staging/{name}")
                removed += 1
        for info in self.store.files("entries"):
            if info.path.endswith("/data.parquet") and info.path not in referenced and info.mtime < cutoff:
                self.store.delete(info.path)
                removed += 1
        return removed
