"""``costaware cache``: list, show, evict and bill the feature cache (local folder or S3). Imports no Airflow.

Wired into ``costaware.cli`` with :func:`add_parser` and :func:`run`.

S3 credentials come from boto3's default chain (environment, profile, instance role); ``--endpoint-url``
and ``--region`` point at MinIO or moto.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from decimal import Decimal
from typing import Any

from costaware.core.errors import ConfigurationError, CostawareError
from costaware.core.money import format_usd_exact
from costaware.settings import FEATURE_CACHE_ENV, feature_cache


def add_parser(subparsers: Any) -> None:
    """Register ``cache list|show|evict|bill|gc`` on an ``argparse`` subparsers object."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=None,
        help=f"cache root: absolute folder or s3://bucket/prefix (default: ${FEATURE_CACHE_ENV}, "
        "else $AIRFLOW_HOME/costaware/features)",
    )
    common.add_argument("--endpoint-url", default=None, help="S3 endpoint, e.g. http://127.0.0.1:9000")
    common.add_argument("--region", default=None, help="S3 client region")
    common.add_argument("--format", choices=("table", "json"), default="table")
    price = argparse.ArgumentParser(add_help=False)
    price.add_argument(
        "--usd-per-gb-month",
        default="0.023",
        help="storage price (default: S3 Standard, 0.023 USD per GB-month)",
    )

    cache = subparsers.add_parser("cache", help="list, show, evict and bill the feature cache")
    cache.set_defaults(func=run)
    actions = cache.add_subparsers(dest="cache_action", required=True)
    actions.add_parser("list", parents=[common], help="entries, most recently used first")
    show = actions.add_parser("show", parents=[common], help="the manifest of one entry")
    show.add_argument("key")
    evict = actions.add_parser(
        "evict", parents=[common, price], help="delete entries by age, total size, count, or key"
    )
    evict.add_argument("--max-age-days", type=float, default=None, help="evict entries created longer ago")
    evict.add_argument(
        "--max-total-gb", type=float, default=None, help="evict least recently used beyond this"
    )
    evict.add_argument("--max-entries", type=int, default=None, help="keep this many most recently used")
    evict.add_argument("--key", action="append", default=None, help="evict exactly this key (repeatable)")
    evict.add_argument("--dry-run", action="store_true", help="only say what would be evicted")
    actions.add_parser(
        "bill",
        parents=[common, price],
        help="record storage cost (kind storage) in the ledger up to this hour",
    )
    gc = actions.add_parser("gc", parents=[common], help="delete what killed writers left behind")
    gc.add_argument("--older-than-minutes", type=float, default=60.0)


def _store(args: argparse.Namespace) -> Any:
    from costaware.adapters.feature_store import FeatureStore
    from costaware.adapters.object_store import S3Options

    options = S3Options(region=args.region, endpoint_url=args.endpoint_url)
    return FeatureStore(args.store or feature_cache(), s3=options)


def _ledger(args: argparse.Namespace) -> Any:
    from costaware.adapters.ledger_store import Ledger

    return Ledger.from_url(getattr(args, "ledger_url", None))


def _price(args: argparse.Namespace) -> Decimal:
    from costaware.core.money import parse_usd

    return parse_usd(args.usd_per_gb_month, name="--usd-per-gb-month")


def _policy(args: argparse.Namespace) -> Any:
    from costaware.core.cache_policy import (
        CombinedPolicy,
        LeastRecentlyUsedPolicy,
        MaxAgePolicy,
        MaxTotalSizePolicy,
    )

    policies: list[Any] = []
    if args.max_age_days is not None:
        policies.append(MaxAgePolicy(timedelta(days=args.max_age_days)))
    if args.max_total_gb is not None:
        policies.append(MaxTotalSizePolicy(int(args.max_total_gb * 10**9)))
    if args.max_entries is not None:
        policies.append(LeastRecentlyUsedPolicy(args.max_entries))
    if not policies and not args.key:
        raise ConfigurationError("say what to evict: --max-age-days, --max-total-gb, --max-entries or --key")
    return CombinedPolicy(policies) if policies else None


def _row(entry: Any) -> dict[str, Any]:
    m = entry.manifest
    return {
        "key": m.key,
        "rows": m.rows,
        "bytes": m.bytes,
        "created_at": m.created_at,
        "last_used_at": entry.last_used_at.isoformat(),
        "producer": m.producer_label,
        "cost_usd": m.cost_usd,
        "uri": entry.uri,
    }


def _print_rows(rows: list[dict[str, Any]], fmt: str, title: str) -> None:
    if fmt == "json":
        print(json.dumps(rows))
        return
    header = (
        f"{'key':<32}  {'rows':>10}  {'MB':>9}  {'created (UTC)':<16}  {'last used':<16}  {'cost':>10}  "
        "producer"
    )
    print(title)
    print(header)
    for r in rows:
        print(
            f"{r['key']:<32}  {r['rows']:>10,}  {r['bytes'] / 1e6:>9.2f}  {r['created_at'][:16]:<16}  "
            f"{r['last_used_at'][:16]:<16}  {format_usd_exact(Decimal(r['cost_usd'])):>10}  {r['producer']}"
        )


def _list(args: argparse.Namespace) -> int:
    store = _store(args)
    entries = sorted(store.entries(), key=lambda e: e.last_used_at, reverse=True)
    total = sum(e.manifest.bytes for e in entries)
    _print_rows(
        [_row(e) for e in entries],
        args.format,
        f"{len(entries)} entries, {total / 1e6:,.2f} MB at {store.root_uri}",
    )
    return 0


def _show(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    entry = _store(args).lookup(args.key)
    if entry is None:
        raise ConfigurationError(f"the cache has no entry {args.key}: see `costaware cache list`")
    print(
        json.dumps(
            {**asdict(entry.manifest), "uri": entry.uri, "last_used_at": entry.last_used_at.isoformat()},
            indent=2,
        )
    )
    return 0


def _evict(args: argparse.Namespace) -> int:
    store = _store(args)
    policy = _policy(args)
    chosen = store.evict(policy, dry_run=True, only=args.key if policy is None else None)
    if args.dry_run:
        _print_rows([_row(e) for e in chosen], args.format, f"would evict {len(chosen)} entries")
        return 0
    charges = store.storage_charges_for(chosen, usd_per_gb_month=_price(args)) if chosen else []
    if charges:
        ledger = _ledger(args)
        for charge in charges:
            ledger.record(charge)
    store.evict(policy, only=[e.key for e in chosen])
    _print_rows([_row(e) for e in chosen], args.format, f"evicted {len(chosen)} entries")
    return 0


def _bill(args: argparse.Namespace) -> int:
    store = _store(args)
    charges = store.bill_storage(_ledger(args).record, usd_per_gb_month=_price(args))
    total = sum((c.usd for c in charges), Decimal(0))
    if args.format == "json":
        print(json.dumps({"entries": len(charges), "usd": str(total)}))
    else:
        print(f"recorded storage of {len(charges)} entries: {format_usd_exact(total)}")
    return 0


def _gc(args: argparse.Namespace) -> int:
    removed = _store(args).collect_garbage(older_than=timedelta(minutes=args.older_than_minutes))
    print(json.dumps({"removed": removed}) if args.format == "json" else f"removed {removed} leftovers")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``costaware cache <action>``; 0 on success, 2 on bad input (the message goes to stderr)."""
    actions = {"list": _list, "show": _show, "evict": _evict, "bill": _bill, "gc": _gc}
    try:
        return actions[args.cache_action](args)
    except CostawareError as e:
        print(f"costaware cache: error: {e}", file=sys.stderr)
        return 2
