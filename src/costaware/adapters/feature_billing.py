"""Storage billing of the feature cache: GB-months of each entry since the last bill, as ledger entries.

``billing.json`` at the cache's root says until when storage has been billed; bills run to the start of an
hour and each charge's ``entry_uid`` is derived from the cache, the entry and the span, so a bill made twice
is recorded once.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal

from costaware.adapters.feature_manifest import Entry
from costaware.adapters.object_store import ObjectStore
from costaware.core.cache_policy import S3_STANDARD_USD_PER_GB_MONTH, gb_months, storage_usd
from costaware.core.ledger import Kind, LedgerEntry

log = logging.getLogger(__name__)

#: The ledger's dag_id for storage charges of the cache (they belong to no single DAG run).
STORAGE_DAG_ID = "costaware_feature_cache"
BILLING_FILE = "billing.json"


def billed_until(store: ObjectStore) -> datetime | None:
    """Until when the storage of the cache in ``store`` has been billed; None: never (or unreadable)."""
    got = store.read(BILLING_FILE)
    if got is None:
        return None
    try:
        return datetime.fromisoformat(json.loads(got[0])["billed_until"])
    except (ValueError, KeyError, TypeError):
        log.warning(
            "billing.json of the cache at %s is unreadable; billing from each entry's creation",
            store.uri(),
        )
        return None


def mark_billed(store: ObjectStore, end: datetime) -> None:
    """Record that the storage of the cache in ``store`` is billed up to ``end``."""
    store.write(BILLING_FILE, json.dumps({"billed_until": end.isoformat()}).encode())


def storage_charge(
    root_uri: str,
    entry: Entry,
    start: datetime,
    end: datetime,
    usd_per_gb_month: Decimal,
    tags: Mapping[str, str],
    why: str,
) -> LedgerEntry | None:
    """The storage charge of ``entry`` from ``start`` (or its creation) to ``end``; None when that is empty.

    Args:
        root_uri: The cache's root, part of the charge's ``entry_uid``.
        entry: The cache entry.
        start: The start of the span (the last bill).
        end: The end of the span.
        usd_per_gb_month: The storage price.
        tags: Allocation tags for the charge.
        why: ``stored`` or ``evicted``, in the note and the ``entry_uid``.
    """
    start = max(start, entry.manifest.created)
    if end <= start:
        return None
    quantity = gb_months(entry.manifest.bytes, start, end)
    standard = usd_per_gb_month == S3_STANDARD_USD_PER_GB_MONTH
    source = "S3 Standard list price per GB-month" if standard else "configured price per GB-month"
    span = f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
    uid = hashlib.blake2b(f"{root_uri}|{entry.key}|{start.isoformat()}|{why}".encode(), digest_size=16)
    return LedgerEntry(
        dag_id=STORAGE_DAG_ID,
        run_id=f"storage:{end:%Y-%m-%dT%H}",
        task_id=entry.key,
        kind=Kind.STORAGE,
        usd=storage_usd(quantity, usd_per_gb_month),
        quantity=quantity,
        unit="gb_month",
        unit_price_usd=usd_per_gb_month,
        tags=dict(tags),
        incurred_at=end,
        price_source=source,
        note=f"{why}: {entry.manifest.bytes} bytes at {entry.uri}, {span}",
        entry_uid=uid.hexdigest(),
    )
