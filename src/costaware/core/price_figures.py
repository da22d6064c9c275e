"""On-demand price figures with their provenance: where each came from, when, and whether it is stale.

Parsing the AWS documents is :mod:`costaware.core.price_list`'s job, fetching and caching them the adapters'.
A figure is the price the adapters hand on, with the provenance a ledger entry records as its
``price_source``, so that every cost says which price it used and how fresh it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

#: Where a figure came from (``PriceFigure.origin``).
LIVE, OFFER_FILE, BUNDLED = "aws-price-list", "offer-file", "bundled-snapshot"
#: The ledger's ``price_source`` of a bundled on-demand figure (the name entries had before issue 12).
BUNDLED_PRICE_SOURCE = "on-demand-list"


@dataclass(frozen=True, slots=True)
class PriceFigure:
    """An on-demand price with where it came from and how old it is.

    Attributes:
        service: ``ec2`` or ``sagemaker``.
        instance_type: The type.
        region: The region code.
        usd_per_hour: The list price.
        origin: ``aws-price-list`` (Price List API), ``offer-file`` (imported) or ``bundled-snapshot``.
        fetched_at: When it was fetched or imported (None for the bundled snapshot).
        cached: Read from the ledger's price cache rather than fetched just now.
        stale: Older than the cache's TTL: used only because nothing fresher was available.
    """

    service: str
    instance_type: str
    region: str
    usd_per_hour: Decimal
    origin: str
    fetched_at: datetime | None = None
    cached: bool = False
    stale: bool = False

    @property
    def price_source(self) -> str:
        """The ledger's ``price_source``: e.g. ``aws-price-list``, ``offer-file-cache-stale``."""
        if self.origin == BUNDLED:
            return BUNDLED_PRICE_SOURCE
        return self.origin + ("-cache" if self.cached else "") + ("-stale" if self.stale else "")

    def age(self, now: datetime) -> timedelta | None:
        return None if self.fetched_at is None else now - self.fetched_at


def is_stale(fetched_at: datetime, ttl: timedelta, now: datetime) -> bool:
    """Whether a figure fetched at ``fetched_at`` is past its TTL at ``now``."""
    return now - fetched_at > ttl


def format_age(age: timedelta) -> str:
    """``3 d 4 h``, ``5 h 2 min``, ``12 min``: the age of a figure for people."""
    minutes = max(int(age.total_seconds() // 60), 0)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
