"""On-demand prices in the order costaware trusts them: cache, then live, then the bundled snapshot.

* the **price cache**, a table of the ledger database filled by ``costaware prices refresh`` (AWS Price
  List API) or ``costaware prices import`` (an offer file), used while younger than its TTL;
* **live**: the Price List API, when an AWS connection is configured; what it returns is cached;
* the **bundled snapshot** (``costaware/data``; EC2 only);
* last, a **stale** cached figure, flagged as such (``price_source`` ends in ``-stale``).

Settings (``[costaware]`` in airflow.cfg, or ``AIRFLOW__COSTAWARE__...``): ``price_aws_conn_id`` (the
connection for live prices; empty: none), ``price_ttl_hours`` (default 168).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import select

from costaware.adapters.ledger import schema
from costaware.core.errors import ConfigurationError, InvalidPriceDataError, PriceNotFoundError
from costaware.core.ledger import utcnow
from costaware.core.price_figures import BUNDLED, LIVE, PriceFigure, is_stale
from costaware.core.price_list import ListPrice, service_name
from costaware.settings import OPTIONS, ledger_url, option

if TYPE_CHECKING:
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.discounts import Discount
    from costaware.core.prices import PriceCatalog

log = logging.getLogger(__name__)

DEFAULT_TTL = timedelta(hours=168)


class PriceFetcher(Protocol):
    """Anything that fetches live prices (``costaware.adapters.aws_pricing.PriceListFetcher``)."""

    def fetch(
        self, service: str, region: str, *, instance_type: str | None = None, types: str | None = None
    ) -> list[ListPrice]: ...


@dataclass(frozen=True, slots=True)
class CachedPrice:
    """One row of the price cache."""

    price: ListPrice
    origin: str
    fetched_at: datetime


class PriceCache:
    """The ``costaware_price_cache`` table of the ledger database.

    Args:
        ledger: The ledger whose database holds the cache.
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def put(self, prices: Iterable[ListPrice], *, origin: str, fetched_at: datetime) -> int:
        """Store (replace) prices; returns how many were written.

        Raises:
            InvalidPriceDataError: a price is zero or negative (nothing is written then).
            ConfigurationError: ``fetched_at`` is naive.
        """
        rows = list(prices)
        if fetched_at.tzinfo is None:
            raise ConfigurationError(f"fetched_at {fetched_at.isoformat()} has no time zone")
        for p in rows:
            if not p.usd_per_hour.is_finite() or p.usd_per_hour <= 0:
                raise InvalidPriceDataError(
                    f"price of {p.instance_type} in {p.region} must be > 0 USD/hour, got {p.usd_per_hour}: "
                    "nothing was cached"
                )
        from sqlalchemy.dialects import postgresql, sqlite

        table = schema.price_cache
        with self.ledger.transaction() as conn:
            # One upsert, not a delete then an insert: on PostgreSQL two workers refreshing the same stale
            # figure both deleted nothing, and the second insert failed on the key (and the look-up with it).
            insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)
            updated = ("usd_per_hour", "source", "sku", "effective_date", "fetched_at")
            upsert = insert.on_conflict_do_update(
                index_elements=[table.c.service, table.c.region, table.c.instance_type],
                set_={name: insert.excluded[name] for name in updated},
            )
            if rows:
                conn.execute(
                    upsert,
                    [
                        {
                            "service": p.service,
                            "region": p.region,
                            "instance_type": p.instance_type,
                            "usd_per_hour": str(p.usd_per_hour),
                            "source": origin,
                            "sku": p.sku[:64],
                            "effective_date": p.effective_date[:40],
                            "fetched_at": fetched_at,
                        }
                        for p in rows
                    ],
                )
        return len(rows)

    def get(self, instance_type: str, region: str, service: str = "ec2") -> CachedPrice | None:
        """The cached row of one type, or None."""
        found = self.rows(service=service, region=region, instance_type=instance_type)
        return found[0] if found else None

    def rows(
        self, *, service: str | None = None, region: str | None = None, instance_type: str | None = None
    ) -> list[CachedPrice]:
        """Cached rows, optionally of one service, region or type, sorted by service, region, type."""
        table = schema.price_cache
        query = select(table).order_by(table.c.service, table.c.region, table.c.instance_type)
        if service is not None:
            query = query.where(table.c.service == service_name(service))
        if region is not None:
            query = query.where(table.c.region == region)
        if instance_type is not None:
            query = query.where(table.c.instance_type == instance_type)
        with self.ledger.reading() as conn:
            return [
                CachedPrice(
                    ListPrice(
                        r.service,
                        r.instance_type,
                        r.region,
                        Decimal(r.usd_per_hour),
                        r.sku,
                        r.effective_date,
                    ),
                    r.source,
                    r.fetched_at,
                )
                for r in conn.execute(query)
            ]


class OnDemandPrices:
    """On-demand figures: fresh cache -> live (when a fetcher is given) -> bundled snapshot -> stale cache.

    Args:
        ledger: Ledger whose database holds the price cache (None: no cache).
        fetcher: Live price source (None: no live look-ups).
        catalog: The bundled snapshot (default: ``costaware.adapters.price_files.bundled_catalog()``).
        ttl: How long a cached figure counts as fresh.
        now: The clock (default ``costaware.core.ledger.utcnow``).
    """

    def __init__(
        self,
        *,
        ledger: Ledger | None = None,
        fetcher: PriceFetcher | None = None,
        catalog: PriceCatalog | None = None,
        ttl: timedelta = DEFAULT_TTL,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        if ttl <= timedelta(0):
            raise ConfigurationError(f"the price TTL must be positive, got {ttl}")
        self.cache = PriceCache(ledger) if ledger is not None else None
        self.fetcher = fetcher
        self._catalog = catalog
        self.ttl = ttl
        self.now = now

    @property
    def catalog(self) -> PriceCatalog:
        if self._catalog is None:
            from costaware.adapters.price_files import bundled_catalog

            self._catalog = bundled_catalog()
        return self._catalog

    def figure(self, instance_type: str, region: str, service: str = "ec2") -> PriceFigure:
        """The on-demand figure of a type in a region, from the most trusted source that has it.

        Raises:
            PriceNotFoundError: no source knows the type in that region (the message says what to run).
            ConfigurationError: unknown service.
        """
        service = service_name(service)
        now = self.now()
        cached = self.cache.get(instance_type, region, service) if self.cache is not None else None
        if cached is not None and not is_stale(cached.fetched_at, self.ttl, now):
            return _figure(cached, stale=False)
        if self.fetcher is not None:
            live = self._live(instance_type, region, service, now)
            if live is not None:
                return live
        bundled_error: PriceNotFoundError | None = None
        if service == "ec2":
            try:
                offer = self.catalog.offer(instance_type, region)
                return PriceFigure(service, instance_type, region, offer.usd_per_hour, BUNDLED)
            except PriceNotFoundError as e:
                bundled_error = e
        if cached is not None:
            log.warning(
                "costaware: using a stale price for %s in %s (fetched %s, TTL %s): run `costaware prices "
                "refresh`",
                instance_type,
                region,
                cached.fetched_at.isoformat(),
                self.ttl,
            )
            return _figure(cached, stale=True)
        if bundled_error is not None:
            raise bundled_error
        if service == "sagemaker" and not instance_type.startswith("ml."):
            raise PriceNotFoundError(
                f"no sagemaker price for {instance_type!r}: SageMaker's instance types are named with 'ml.', "
                f"e.g. 'ml.{instance_type}'"
            )
        raise PriceNotFoundError(
            f"no {service} price for {instance_type!r} in {region!r}: the bundled snapshot covers EC2 only; "
            "run "
            f"`costaware prices refresh --service {service} --region {region}` (AWS access) or "
            "`costaware prices import FILE` (an offline AmazonSageMaker offer file)"
        )

    def usd_per_hour(self, instance_type: str, region: str, service: str = "ec2") -> Decimal:
        return self.figure(instance_type, region, service).usd_per_hour

    def _live(self, instance_type: str, region: str, service: str, now: datetime) -> PriceFigure | None:
        assert self.fetcher is not None  # checked by the caller
        try:
            prices = self.fetcher.fetch(service, region, instance_type=instance_type)
        except (InvalidPriceDataError, ConfigurationError):
            raise
        except Exception as e:  # network, credentials, throttling: the next source answers instead
            log.warning(
                "costaware: live price of %s in %s unavailable (%s: %s); falling back",
                instance_type,
                region,
                type(e).__name__,
                e,
            )
            return None
        if self.cache is not None and prices:
            self.cache.put(prices, origin=LIVE, fetched_at=now)
        for p in prices:
            if p.instance_type == instance_type and p.region == region:
                return PriceFigure(service, instance_type, region, p.usd_per_hour, LIVE, fetched_at=now)
        return None


def current_catalog(
    ledger: Ledger | None, *, ttl: timedelta | None = None, now: datetime | None = None
) -> PriceCatalog:
    """The bundled catalog with the price cache's fresh EC2 figures in place of the snapshot's.

    For whole-catalog questions (right-sizing compares every type): live look-ups per type would be too
    many, so only the cache (filled by ``costaware prices refresh``) updates the snapshot here.
    """
    from costaware.adapters.price_files import bundled_catalog

    catalog = bundled_catalog()
    if ledger is None:
        return catalog
    ttl = ttl if ttl is not None else ttl_from_settings()
    now = now or utcnow()
    fresh = {
        (r.price.instance_type, r.price.region): r.price.usd_per_hour
        for r in PriceCache(ledger).rows(service="ec2")
        if not is_stale(r.fetched_at, ttl, now)
    }
    return catalog.with_on_demand(fresh) if fresh else catalog


def _figure(cached: CachedPrice, *, stale: bool) -> PriceFigure:
    p = cached.price
    return PriceFigure(
        p.service,
        p.instance_type,
        p.region,
        p.usd_per_hour,
        cached.origin,
        fetched_at=cached.fetched_at,
        cached=True,
        stale=stale,
    )


def ttl_from_settings() -> timedelta:
    """``[costaware] price_ttl_hours`` (default 168).

    Raises:
        ConfigurationError: not a positive number.
    """
    raw = option("price_ttl_hours")
    if not raw.strip():  # AIRFLOW__COSTAWARE__PRICE_TTL_HOURS="" (a blank line in a .env): the default
        raw = OPTIONS["price_ttl_hours"].default
    try:
        hours = float(raw)
    except ValueError:
        hours = float("nan")
    if not hours > 0 or hours == float("inf"):
        raise ConfigurationError(
            f"[costaware] price_ttl_hours must be a positive number of hours, got {raw!r}"
        )
    return timedelta(hours=hours)


def configured_prices(
    ledger: Ledger | None = None, *, aws_conn_id: str | None = None, cache: bool = True
) -> OnDemandPrices:
    """An :class:`OnDemandPrices` from the ``[costaware]`` settings.

    Args:
        ledger: The ledger holding the cache (default: the one at ``COSTAWARE_LEDGER_URL`` or
            ``$AIRFLOW_HOME/costaware/ledger.db``).
        aws_conn_id: Connection for live prices (default: ``[costaware] price_aws_conn_id``; empty: no live
            look-ups).
        cache: Read and fill the price cache.
    """
    if ledger is None and cache:
        ledger = _default_ledger()
    conn_id = aws_conn_id if aws_conn_id is not None else option("price_aws_conn_id")
    fetcher = None
    if conn_id:
        from costaware.adapters.aws_pricing import PriceListFetcher

        fetcher = PriceListFetcher.from_connection(conn_id)
    return OnDemandPrices(ledger=ledger if cache else None, fetcher=fetcher, ttl=ttl_from_settings())


_LEDGERS: dict[str, Ledger] = {}


def _default_ledger() -> Ledger | None:
    """The ledger at the default URL, opened once per process (its engine pools connections)."""
    from costaware.adapters.ledger.store import Ledger
    from costaware.core.errors import LEDGER_UNREADABLE

    url = ledger_url()
    if url not in _LEDGERS:
        try:
            _LEDGERS[url] = Ledger.from_url(url)
        except LEDGER_UNREADABLE as e:
            log.warning("costaware: price cache unavailable (%s); using live and bundled prices", e)
            return None
    return _LEDGERS[url]


def list_price(ledger: Ledger | None, instance_type: str, region: str) -> Decimal:
    """The on-demand USD/hour a plan or a decision prices a type at, as the ledger prices a try.

    The price cache (refreshed or imported figures), live, then the snapshot; ``ml.*`` types from
    SageMaker's list.

    Raises:
        PriceNotFoundError: no source has the price (the message says how to fetch or import it).
    """
    service = "sagemaker" if instance_type.startswith("ml.") else "ec2"
    return configured_prices(ledger).usd_per_hour(instance_type, region, service)


def on_demand_usd_per_hour(
    instance_type: str,
    region: str,
    service: str = "ec2",
    *,
    prices: OnDemandPrices | None = None,
) -> Decimal:
    """The on-demand USD/hour of an EC2 type or a SageMaker ``ml.*`` type, from the configured sources.

    ``on_demand_usd_per_hour("ml.g5.xlarge", "us-east-1", service="sagemaker")``. Use
    :meth:`OnDemandPrices.figure` for the source and age as well.

    Raises:
        PriceNotFoundError: no source has the price (the message says how to fetch or import it).
    """
    return (prices or configured_prices()).usd_per_hour(instance_type, region, service)


def discounts_from_settings() -> tuple[Discount, ...]:
    """The ``[costaware] discounts`` rules (see :mod:`costaware.core.discounts`).

    Raises:
        ConfigurationError: the setting is malformed.
    """
    from costaware.core.discounts import parse_discounts

    text = option("discounts")
    rules = parse_discounts(text)
    _warn_of_unknown_families(text, rules)
    return rules


#: The discount settings already checked for unknown families: each is warned of once a process.
_FAMILIES_CHECKED: set[str] = set()


def _warn_of_unknown_families(text: str, rules: Iterable[Discount]) -> None:
    """Warn of a family rule no bundled instance type belongs to (``family:p4`` for ``p4d``).

    It applied to nothing, silently: every hour of the family it meant was billed at the list price.
    Warned, not refused: a family launched since the snapshot is right.
    """
    if text in _FAMILIES_CHECKED:
        return
    _FAMILIES_CHECKED.add(text)
    from costaware.adapters.price_files import bundled_catalog
    from costaware.core.discounts import instance_family
    from costaware.core.prices import closest_names

    known = {instance_family(t) for t in bundled_catalog().instance_types}
    for rule in rules:
        family = rule.name.removeprefix("ml.")  # SageMaker's ml.g5 is EC2's g5
        if rule.kind != "family" or family in known:
            continue
        close = closest_names(family, known)
        log.warning(
            "[costaware] discounts: %s matches no instance family of the bundled price list%s; it applies "
            "only to types of a family named exactly %r (fix the name, or ignore this for a family newer "
            "than the list)",
            rule.label,
            f" (did you mean {', '.join(close)}?)" if close else "",
            rule.name,
        )
