"""What the ``prices`` commands share: the price source, the region check, where a figure came from."""

from __future__ import annotations

import argparse
import contextlib
from datetime import datetime
from typing import TYPE_CHECKING, Any

from costaware.cli.arguments import open_ledger
from costaware.core.errors import ConfigurationError, CostawareError

if TYPE_CHECKING:
    from costaware.adapters.price_source import OnDemandPrices
    from costaware.core.price_figures import PriceFigure

ORIGINS = {
    "aws-price-list": "the AWS Price List API",
    "offer-file": "an imported offer file",
    "bundled-snapshot": "the bundled snapshot",
}


def _prices(args: argparse.Namespace) -> OnDemandPrices:
    import sys

    from costaware.adapters.price_source import configured_prices
    from costaware.core.errors import LedgerUnavailableError

    try:
        # A look-up makes no ledger: one at a mistyped --ledger-url was made empty and its cache read as such.
        ledger = open_ledger(args, reading=True, read_only=True)
    except LedgerUnavailableError as e:  # the snapshot still answers
        print(f"costaware: warning: price cache unavailable ({e})", file=sys.stderr)
        return configured_prices(aws_conn_id=args.aws_conn_id, cache=False)
    except CostawareError as e:  # no ledger there: no refreshed or imported price to read
        print(f"costaware: warning: price cache not read ({e})", file=sys.stderr)
        return configured_prices(aws_conn_id=args.aws_conn_id, cache=False)
    return configured_prices(ledger, aws_conn_id=args.aws_conn_id)


def _check_region(region: str, *, cached: Any = None, any_aws_region: bool = False) -> None:
    """Refuse a region no source knows, with the closest names.

    A region the snapshot lacks (one launched since, e.g. ``mx-central-1``) is known once the price cache
    holds it (``cached``: an :class:`OnDemandPrices`' cache); ``any_aws_region`` (``refresh``, ``import``):
    also any region the installed AWS SDK lists, the way to get prices for one.
    """
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.prices import _suggest

    known = set(bundled_catalog().regions)
    if any_aws_region:
        known |= _sdk_regions()
    if region in known:
        return
    if cached is not None:
        # An unreachable cache: the snapshot's regions still answer.
        with contextlib.suppress(Exception):
            known |= {row.price.region for row in cached.rows()}
        if region in known:
            return
    raise ConfigurationError(f"unknown region {region!r}{_suggest(region, sorted(known), region=True)}")


def _sdk_regions() -> set[str]:
    """The regions the installed botocore knows (its endpoint data), in every partition."""
    try:
        import boto3

        session = boto3.session.Session()
        return {
            region
            for partition in session.get_available_partitions()
            for region in session.get_available_regions("ec2", partition_name=partition)
        }
    except Exception:  # no SDK data: the snapshot's regions only
        return set()


def describe(figure: PriceFigure, now: datetime, ttl_hours: float) -> str:
    """Where a figure came from and how old it is, e.g. ``from the AWS Price List API, fetched ... ago``."""
    from costaware.core.price_figures import format_age

    text = f"from {ORIGINS.get(figure.origin, figure.origin)}"
    age = figure.age(now)
    if figure.fetched_at is not None and age is not None:
        text += f", fetched {figure.fetched_at:%Y-%m-%d %H:%M} UTC ({format_age(age)} ago)"
    if figure.stale:
        from costaware.core.price_figures import OFFER_FILE

        # An imported figure is for machines without AWS access: a refresh is no advice there.
        again = (
            "import a newer offer file (`costaware prices import FILE`)"
            if figure.origin == OFFER_FILE
            else "run `costaware prices refresh`"
        )
        text += f"; STALE: older than the {ttl_hours:g} h TTL, {again}"
    return text
