"""``costaware cache``: list, show, evict and bill the feature cache (local folder or S3). Imports no Airflow.

S3 credentials come from boto3's default chain (environment, profile, instance role); ``--endpoint-url``
and ``--region`` point at MinIO or moto.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from costaware.cli.arguments import check_range, open_ledger
from costaware.cli.output import emit, emit_summary
from costaware.core.errors import ConfigurationError
from costaware.core.money import format_usd_exact
from costaware.settings import FEATURE_CACHE_ENV, feature_cache

if TYPE_CHECKING:
    from costaware.core.ledger import LedgerEntry


def _store_root(args: argparse.Namespace) -> tuple[str, str]:
    """The store's URI and where it came from: ``--store``, else the configured feature cache."""
    if args.store:
        return args.store, "--store"
    # Named by the variable it is read from: "[costaware] feature_cache" sent people to an option no
    # release has read.
    if os.environ.get(FEATURE_CACHE_ENV):
        return feature_cache(), f"the feature cache in ${FEATURE_CACHE_ENV}"
    return feature_cache(), "the default feature cache ($AIRFLOW_HOME/costaware/features)"


def _store(args: argparse.Namespace) -> Any:
    """The feature cache ``--store`` names (default: the configured one).

    A local folder given with ``--store`` must exist: a mistyped path read as an empty cache (or made by
    ``bill``) would hide the real one. The configured default may not exist yet: no run has cached features.
    """
    from costaware.adapters.feature_store import FeatureStore
    from costaware.adapters.object_store import S3Options
    from costaware.adapters.object_store.location import parse_uri, refuse_machine_root

    root, origin = _store_root(args)
    location = parse_uri(root, what=origin)  # a relative path or another scheme: named as the parser does
    if location.scheme == "local":
        # `bill` wrote /billing.json (the operator refuses a cache there before it writes anything); a
        # symbolic link to / as well.
        refuse_machine_root(
            origin,
            root,
            location.path,
            example="/srv/ml/features",
            writes="`bill` would write its billing.json directly under /, where no feature cache may be",
        )
        folder = Path(location.path)
        if folder.exists() and not folder.is_dir():
            raise ConfigurationError(f"{origin} {root} is a file, not a feature cache folder: give a folder")
        if args.store and not folder.exists():
            raise ConfigurationError(
                f"no feature cache at {root}: check --store (the folder CachedFeaturesOperator writes to; "
                f"without --store, the configured {feature_cache()})"
            )
    options = S3Options(region=args.region, endpoint_url=args.endpoint_url)
    return FeatureStore(root, s3=options)


def _store_errors(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``command`` with a store that cannot be read as an error naming the store and what to do.

    No AWS credentials, a bucket refused, a folder unreadable: not a traceback.
    """

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        root, origin = _store_root(args)
        try:
            return command(args)
        except BrokenPipeError:
            raise  # the reader stopped early (`cache list | head`): the CLI ends quietly, as for any command
        except OSError as e:
            raise ConfigurationError(f"feature cache {root}: {e}: check {origin} and its permissions") from e
        except Exception as e:
            if not type(e).__module__.startswith(("botocore", "boto3")):
                raise
            hint = (
                "give AWS credentials (environment, profile or instance role)"
                if "Credentials" in type(e).__name__
                else f"check {origin}, --region and --endpoint-url"
            )
            raise ConfigurationError(f"feature cache {root}: {type(e).__name__}: {e}; {hint}") from e

    return run


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
        # Said as typed (-1 read "got -1 day, 0:00:00"); inf, nan and 1e400 were tracebacks.
        check_range("--max-age-days", args.max_age_days, low=0, high=36_500, low_included=False)
        policies.append(MaxAgePolicy(timedelta(days=args.max_age_days)))
    if args.max_total_gb is not None:
        check_range("--max-total-gb", args.max_total_gb, low=0, high=10**9)
        policies.append(MaxTotalSizePolicy(_limit_bytes(args.max_total_gb)))
    if args.max_entries is not None:
        check_range("--max-entries", args.max_entries, low=0, high=10**12)
        policies.append(LeastRecentlyUsedPolicy(args.max_entries))
    if not policies and not args.key:
        raise ConfigurationError("say what to evict: --max-age-days, --max-total-gb, --max-entries or --key")
    if policies and args.key:
        # One or the other: with a policy the keys were ignored, and a key meant "exactly this one".
        raise ConfigurationError(
            "--key evicts exactly the keys given and cannot be combined with --max-age-days, --max-total-gb "
            "or --max-entries: run them as two commands"
        )
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
    if fmt == "table":
        print(title)
    headers = ["key", "rows", "MB", "created (UTC)", "last used", "cost", "producer"]
    table = [
        [
            r["key"],
            f"{r['rows']:,}" if fmt == "table" else r["rows"],  # "29,454" is text to a spreadsheet
            f"{r['bytes'] / 1e6:.2f}",
            r["created_at"][:16],
            r["last_used_at"][:16],
            format_usd_exact(Decimal(r["cost_usd"])),
            r["producer"],
        ]
        for r in rows
    ]
    emit(table, fmt, headers=headers, payload=rows)


@_store_errors
def list_entries(args: argparse.Namespace) -> int:
    """Print the cache's entries, most recently used first."""
    store = _store(args)
    entries = sorted(store.entries(), key=lambda e: e.last_used_at, reverse=True)
    total = sum(e.manifest.bytes for e in entries)
    _print_rows(
        [_row(e) for e in entries],
        args.format,
        f"{_entries(len(entries))}, {total / 1e6:,.2f} MB at {store.root_uri}",
    )
    return 0


@_store_errors
def show_entry(args: argparse.Namespace) -> int:
    """Print one entry's manifest: JSON, or one field a row as a table or CSV."""
    from dataclasses import asdict

    entry = _store(args).lookup(args.key)
    if entry is None:
        raise ConfigurationError(f"the cache has no entry {args.key}: see `costaware cache list`")
    manifest = {**asdict(entry.manifest), "uri": entry.uri, "last_used_at": entry.last_used_at.isoformat()}
    if args.format == "json":
        print(json.dumps(manifest, indent=2))
        return 0
    rows = [
        [name, json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value]
        for name, value in manifest.items()
    ]
    emit(rows, args.format, headers=["field", "value"])
    return 0


@_store_errors
def evict(args: argparse.Namespace) -> int:
    """Delete entries by age, total size, count or key, billing their storage up to now."""
    store = _store(args)
    policy = _policy(args)
    chosen = store.evict(policy, dry_run=True, only=args.key if policy is None else None)
    missing = sorted(set(args.key or ()) - {e.key for e in chosen}) if policy is None else []
    if missing:
        # Said before anything is evicted: a mistyped key among good ones evicts none of them.
        raise ConfigurationError(
            f"the cache has no entry {', '.join(missing)}: nothing was evicted; see `costaware cache list`"
        )
    price = _price(args)  # checked on a dry run too: it passed one and failed the real evict
    if args.dry_run:
        _print_rows([_row(e) for e in chosen], args.format, f"would evict {_entries(len(chosen))}")
        return 0
    # Counted only where a size limit asks (a second listing of the whole cache).
    in_cache = len(store.entries()) if chosen and args.max_total_gb is not None else 0
    _refuse_to_empty_unasked(args, chosen, in_cache=in_cache)
    charges = store.storage_charges_for(chosen, usd_per_gb_month=price) if chosen else []
    if charges:
        # An existing ledger only, checked before anything is evicted: the last charges of the evicted
        # entries went to a ledger made at a mistyped --ledger-url, and the entries were gone.
        ledger = open_ledger(args, reading=True)
        for charge in charges:
            ledger.record(charge)
    store.evict(policy, only=[e.key for e in chosen])
    _print_rows([_row(e) for e in chosen], args.format, f"evicted {_entries(len(chosen))}")
    return 0


def _limit_bytes(max_total_gb: float) -> int:
    """``--max-total-gb`` as the bytes the size policy keeps."""
    return int(max_total_gb * 10**9)


def _entries(count: int) -> str:
    return f"{count} entry" if count == 1 else f"{count} entries"


def _refuse_to_empty_unasked(args: argparse.Namespace, chosen: list[Any], *, in_cache: int) -> None:
    """Refuse a limit that keeps no entry without ``--force``: it emptied the whole cache, unasked.

    Other limits evict what they evict: a scheduled ``--max-age-days 30`` must not fail on a cache all old.
    """
    keep_nothing = []
    if args.max_entries == 0:
        keep_nothing.append("--max-entries 0")
    if args.max_total_gb is not None and chosen and len(chosen) >= in_cache:
        # A size limit the policy keeps no entry within (1e-9 GB is 1 byte; or one between a small old entry
        # and a large new one, the old evicted first) empties the cache as 0 does.
        limit = _limit_bytes(args.max_total_gb)
        under = "" if args.max_total_gb == 0 else f" ({limit} bytes)"
        keep_nothing.append(f"--max-total-gb {args.max_total_gb:g}{under}")
    if keep_nothing and chosen and not args.force:
        raise ConfigurationError(
            f"{' and '.join(keep_nothing)} {'keep' if len(keep_nothing) > 1 else 'keeps'} no entry: it would "
            f"evict all {_entries(len(chosen))} of the cache; "
            "nothing was evicted. To clear the cache, run it again with --force (--dry-run lists them); to "
            "keep some, give a limit above 0"
        )


@_store_errors
def bill(args: argparse.Namespace) -> int:
    """Record the storage cost of every entry in the ledger up to this hour."""
    from costaware.adapters.feature_billing import billed_until

    store = _store(args)
    # An existing ledger only: the cache keeps how far it was billed, so a bill into a ledger made at a
    # mistyped --ledger-url used up that span, and the real ledger never got it.
    price = _price(args)
    ledger = open_ledger(args, reading=True)
    new: list[LedgerEntry] = []

    def record(charge: LedgerEntry) -> None:
        # Only what the ledger did not hold: a bill finishing a killed one records its charges again.
        if ledger.record(charge):
            new.append(charge)

    store.bill_storage(record, usd_per_gb_month=price)
    charges = new
    total = sum((c.usd for c in charges), Decimal(0))
    until = billed_until(store.store)
    summary = {
        "entries": len(charges),
        "usd": str(total),
        "billed_until": until.isoformat() if until else None,
    }
    entries = f"{len(charges)} entr{'y' if len(charges) == 1 else 'ies'}"
    said = f"recorded storage of {entries}: {format_usd_exact(total)}"
    if until is not None:
        said += f"; the cache's storage is billed up to {until.isoformat()} (bills end at the hour's start)"
    emit_summary(summary, args.format, said)
    return 0


@_store_errors
def collect_garbage(args: argparse.Namespace) -> int:
    """Delete what killed writers left behind."""
    # A cutoff in the future would also take the staging folders of writers still running (0: none is).
    check_range("--older-than-minutes", args.older_than_minutes, low=0, high=10**7)
    removed = _store(args).collect_garbage(older_than=timedelta(minutes=args.older_than_minutes))
    emit_summary({"removed": removed}, args.format, f"removed {removed} leftovers")
    return 0
