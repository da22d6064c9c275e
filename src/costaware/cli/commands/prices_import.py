"""``costaware prices import``: fill the price cache from an AWS Price List offer file (JSON or CSV)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from costaware.cli.arguments import open_ledger
from costaware.cli.commands.prices_lookup import _check_region
from costaware.core.errors import ConfigurationError, InvalidPriceDataError


def import_prices(args: argparse.Namespace) -> int:
    """Load an AWS Price List offer file (JSON or CSV) into the price cache."""
    from costaware.adapters.object_store.location import named_or_expanded
    from costaware.adapters.price_source import PriceCache
    from costaware.core.errors import unreadable_file
    from costaware.core.ledger import utcnow
    from costaware.core.price_figures import OFFER_FILE
    from costaware.core.price_list import (
        matches_types,
        prices_from_offer_csv,
        prices_from_offer_json,
        type_patterns,
    )

    path = named_or_expanded(args.file, what="offer file", example="/data/index.json")
    if args.region:
        _check_region(args.region, any_aws_region=True)
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            head = handle.read(256).lstrip("\ufeff \t\r\n")
            handle.seek(0)
            today = utcnow().isoformat()  # a price change published ahead of its date is not today's
            # A .json file is read as JSON whatever it starts with: its error then says where the JSON
            # breaks (it was read as a CSV without the header, which named the wrong format).
            if head.startswith("{") or path.suffix.lower() == ".json":
                text = handle.read().lstrip("\ufeff")
                prices = prices_from_offer_json(text, region=args.region, types=args.types, as_of=today)
            else:  # streamed: a region's EC2 offer CSV is hundreds of MB
                prices = prices_from_offer_csv(handle, region=args.region, types=args.types, as_of=today)
    except FileNotFoundError as e:
        # The doc's `costaware prices import index.csv`, typed before the file was downloaded.
        raise ConfigurationError(
            f"{unreadable_file('offer file', path, e)}, or download the region's file first "
            "(https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/<region>/index.csv, "
            "AmazonSageMaker for SageMaker)"
        ) from e
    except OSError as e:  # a folder, a file not allowed: said as for every file, with what to do
        raise ConfigurationError(unreadable_file("offer file", path, e)) from e
    except UnicodeDecodeError as e:
        raise InvalidPriceDataError(f"{path}: not a UTF-8 text offer file ({e.reason})") from e
    except InvalidPriceDataError as e:
        raise InvalidPriceDataError(f"{path}: {e}") from e
    if not prices:
        raise InvalidPriceDataError(
            f"{path}: no Linux on-demand instance prices"
            + (f" matching {_with_hints(type_patterns(args.types))}" if args.types else "")
            + " (an AmazonEC2 or AmazonSageMaker offer file is expected); nothing was imported"
        )
    # One misspelt name of a list ('m5.large,c5.xlarg') imported the others and lost that one without a word.
    unmatched = [
        g
        for g in type_patterns(args.types or "")
        if not any(matches_types(p.instance_type, g) for p in prices)
    ]
    if unmatched:
        raise InvalidPriceDataError(
            f"{path}: --types {_with_hints(unmatched)} matched no Linux "
            "on-demand price of the file; nothing was imported: fix or drop it"
        )
    regions = sorted({p.region for p in prices})
    # A region typed into a file's row went into the cache, and from there `prices show` took it as known.
    for region in regions:
        try:
            _check_region(region, any_aws_region=True)
        except ConfigurationError as e:
            raise InvalidPriceDataError(
                f"{path}: {e} (a region code of the file's prices); nothing was imported: fix the code, or "
                "upgrade boto3 for a region launched since (its region list counts too)"
            ) from e
    _warn_of_unknown_types(path, [p.instance_type for p in prices if p.service == "ec2"])
    written = PriceCache(open_ledger(args, create_beside_others=args.create_ledger)).put(
        prices, origin=OFFER_FILE, fetched_at=utcnow()
    )
    services = sorted({p.service for p in prices})
    print(f"imported {written} {'/'.join(services)} price(s) for {', '.join(regions)} from {path.name}")
    return 0


def _with_hints(patterns: list[str]) -> str:
    """``'m5.larg' (did you mean m5.large?), 'c5*'``: each name or glob with the bundled names close to it."""
    return ", ".join(repr(pattern) + _types_hint(pattern) for pattern in patterns)


def _types_hint(types: str) -> str:
    """`` (did you mean m5.large?)`` for a ``--types`` name (no glob) close to a bundled type; else ""."""
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.prices import closest_names

    if any(mark in types for mark in "*?[,") or types.startswith("ml."):
        return ""
    known = bundled_catalog().instance_types
    if types.strip() in known:
        return " (a known type: the file has no price for it)"  # "did you mean m5.large?" for m5.large
    close = closest_names(types.strip(), known)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _warn_of_unknown_types(path: Path, instance_types: list[str]) -> None:
    """Warn of EC2 types the bundled catalog lacks, with the closest it has: a typo in a hand-edited file.

    A warning, not a refusal: an AWS file may carry types newer than the bundled snapshot. A misspelt type
    imported in silence priced nothing, and the tasks on the real type stayed unpriced.
    """
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.prices import closest_names

    known = bundled_catalog().instance_types
    unknown = sorted(set(instance_types) - set(known))
    if not unknown:
        return
    shown = [
        f"{name!r}"
        + (f" (did you mean {', '.join(close)}?)" if (close := closest_names(name, known)) else "")
        for name in unknown[:5]
    ]
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    print(
        f"costaware: warning: {path.name}: {len(unknown)} instance type(s) the bundled catalog does not "
        f"know: {', '.join(shown)}{more}; imported as written (a type newer than the catalog is fine): if "
        "one is misspelt, fix the file and import it again",
        file=sys.stderr,
    )
