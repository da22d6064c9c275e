"""What ``CachedFeaturesOperator`` records and returns: a hit's avoided cost, a miss's note, its XCom."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

    from costaware.adapters.feature_manifest import Outcome


def ledger_entry(
    outcome: Outcome, who: dict[str, Any], compute: Mapping[str, Any], rate: Decimal | None, log: Logger
) -> Any:
    """The avoided-cost entry of a hit; for a miss, the entry whose note the listener's entry takes."""
    import hashlib

    from costaware.core.ledger import SECONDS_PER_HOUR, Kind, LedgerEntry
    from costaware.core.money import format_usd_exact

    manifest = outcome.entry.manifest
    hours = (Decimal(str(manifest.compute_seconds)) / SECONDS_PER_HOUR).quantize(Decimal("0.000001"))
    common = {
        "dag_id": who["dag_id"],
        "run_id": who["run_id"],
        "task_id": who["task_id"],
        "try_number": who["try_number"],
        "map_index": who["map_index"],
        "kind": Kind.COMPUTE,
        "usd": Decimal(manifest.cost_usd),
        "quantity": hours,
        "unit": "hour",
        # Where the try is billed (compute_of): a hit's avoided cost is a miss of this task's, priced so.
        "instance_type": compute["instance_type"],
        "region": compute["region"],
        "market": compute["market"],
        "tags": who["tags"],
    }
    if outcome.hit:
        log.info(
            "reused features computed by %s on %s (key %s, %d rows): avoided %s",
            manifest.producer_label,
            manifest.created.date().isoformat(),
            manifest.key,
            manifest.rows,
            format_usd_exact(Decimal(manifest.cost_usd)),
        )
        # One avoided cost per task instance and key: a retry (a storage bill that failed after the
        # hit, say) recorded the estimate again, and the savings report counted it twice.
        parts = (who["dag_id"], who["run_id"], who["task_id"], who["map_index"], manifest.key)
        key = "\x00".join(["cache_hit", *map(str, parts)]).encode()
        return LedgerEntry(
            **common,
            estimated=True,
            outcome="cache_hit",
            cause="feature_cache",
            note=f"avoided: reused features {manifest.key} computed by {manifest.producer_label} "
            f"on {manifest.created_at}",
            entry_uid="cache-hit-" + hashlib.sha256(key).hexdigest()[:40],
        )
    log.info(
        "computed features in %.1f s (%d rows, %d bytes) and stored them as %s",
        manifest.compute_seconds,
        manifest.rows,
        manifest.bytes,
        outcome.entry.uri,
    )
    return LedgerEntry(
        **common,
        unit_price_usd=rate if rate is not None else Decimal(0),
        estimated=False,
        outcome="cache_miss",
        cause="feature_cache",
        # The key, not the path: notes are on the Cost page, which names no path on the server (the
        # task log and `costaware cache show KEY` give where it is).
        note=f"computed features {manifest.key} (costaware cache show {manifest.key})",
    )


def report(outcome: Outcome) -> dict[str, Any]:
    """The XCom of a try: where the features are, their key, and what they cost or saved (money as text)."""
    manifest = outcome.entry.manifest
    return {
        "uri": outcome.entry.uri,
        "key": manifest.key,
        "hit": outcome.hit,
        "rows": manifest.rows,
        "bytes": manifest.bytes,
        "created_at": manifest.created_at,
        "producer": manifest.producer_label,
        "cost_usd": "0" if outcome.hit else manifest.cost_usd,
        "avoided_usd": manifest.cost_usd if outcome.hit else "0",
    }
