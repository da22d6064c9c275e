"""Storage billing of the feature cache: GB-months of each entry since the last bill, as ledger entries.

``billing.json`` at the cache's root says until when storage has been billed; bills run to the start of an
hour and each charge's ``entry_uid`` is derived from the cache, the entry and the span (start and end), so a
bill made twice is recorded once.

A bill first writes the span it is about to record (``billing_until``), then records it, then moves
``billed_until`` to its end, each step a compare-and-replace of ``billing.json``. A bill killed in between
leaves the span to the next bill, which records it again with the same ``entry_uid`` values (the ledger keeps
each once) before billing on; a bill that loses a race reads the file again, so the watermark only moves
forward and no two bills record overlapping spans.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from decimal import Decimal

from costaware.adapters.feature_manifest import Entry
from costaware.adapters.object_store import ObjectStore
from costaware.core.cache_policy import S3_STANDARD_USD_PER_GB_MONTH, gb_months, storage_usd
from costaware.core.ledger import Kind, LedgerEntry

log = logging.getLogger(__name__)

#: The ledger's dag_id for storage charges of the cache (they belong to no single DAG run).
STORAGE_DAG_ID = "costaware_feature_cache"
BILLING_FILE = "billing.json"


#: Reads of billing.json one bill makes before leaving the rest to the next bill (each lost race is one).
_ATTEMPTS = 10


def read_state(store: ObjectStore) -> tuple[datetime | None, datetime | None, str | None]:
    """(billed until, end of a bill in progress, version token) of billing.json; no file: no token."""
    got = store.read(BILLING_FILE)
    if got is None:
        return None, None, None
    try:
        body = json.loads(got[0])
        until, pending = (body.get(k) for k in ("billed_until", "billing_until"))
        return (
            datetime.fromisoformat(until) if until else None,
            datetime.fromisoformat(pending) if pending else None,
            got[1],
        )
    except (ValueError, TypeError, AttributeError):
        log.warning(
            "billing.json of the cache at %s is unreadable; billing from each entry's creation",
            store.uri(),
        )
        return None, None, got[1]


def billed_until(store: ObjectStore) -> datetime | None:
    """Until when the storage of the cache in ``store`` has been billed; None: never (or unreadable)."""
    return read_state(store)[0]


def _swap(store: ObjectStore, token: str | None, until: datetime | None, pending: datetime | None) -> bool:
    """Write billing.json only if it is still the version ``token`` (None: only if there is none)."""
    body = {"billed_until": until.isoformat() if until else None}
    if pending is not None:
        body["billing_until"] = pending.isoformat()
    data = json.dumps(body).encode()
    written = store.create(BILLING_FILE, data) if token is None else store.replace(BILLING_FILE, data, token)
    return written is not None


def bill_spans(
    store: ObjectStore,
    end: datetime,
    charges: Callable[[datetime, datetime], list[LedgerEntry]],
    record: Callable[[LedgerEntry], object],
) -> list[LedgerEntry]:
    """Record the charges of every span not yet billed up to ``end``; returns what this call recorded.

    Args:
        store: The cache's store, holding billing.json.
        end: Bill up to here.
        charges: The charges of a span ``(start, end)``.
        record: Where the charges go, e.g. ``ledger.record``.
    """
    recorded: list[LedgerEntry] = []
    for _ in range(_ATTEMPTS):
        until, pending, token = read_state(store)
        start = until or datetime.min.replace(tzinfo=timezone.utc)
        if pending is not None and pending > start:
            # Claimed by a bill that may have died half-way: the same span gives the same entry_uids.
            span = charges(start, pending)
            for charge in span:
                record(charge)
            recorded += span
            _swap(store, token, pending, None)  # lost the race: whoever won moved it on; read again
            continue
        if end <= start:
            return recorded  # billed up to here already: one read, no listing
        _swap(store, token, until, end)
    log.warning(
        "billing.json of the cache at %s kept changing under this bill (%d reads): another bill is running, "
        "the next bill carries on from where it is",
        store.uri(),
        _ATTEMPTS,
    )
    return recorded


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
    # The end too: [08:30, 10:00] and [08:30, 12:00] are different charges.
    uid = hashlib.blake2b(
        f"{root_uri}|{entry.key}|{start.isoformat()}|{end.isoformat()}|{why}".encode(), digest_size=16
    )
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
