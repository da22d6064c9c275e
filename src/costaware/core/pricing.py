"""Price a stretch of compute: runtime x the unit price of the (instance type, region, market) it ran on."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from costaware.core.errors import ConfigurationError
from costaware.core.ledger import Market, compute_cost
from costaware.core.prices import PriceCatalog


@dataclass(frozen=True, slots=True)
class ComputeCharge:
    """What a stretch of compute cost, and what it would have cost on-demand."""

    hours: Decimal
    usd: Decimal
    usd_per_hour: Decimal
    on_demand_usd: Decimal | None
    gpu_hours: Decimal
    price_source: str


def price_compute(
    catalog: PriceCatalog,
    *,
    instance_type: str,
    region: str,
    market: Market | str,
    seconds: float | Decimal,
    usd_per_hour: Decimal | None = None,
) -> ComputeCharge:
    """Charge ``seconds`` of compute.

    The unit price is ``usd_per_hour`` when the caller knows it (a live spot price, a local rate);
    otherwise the catalog's on-demand price, or for spot the on-demand price less the Spot Instance
    Advisor's typical saving. Local compute (the team's own machines) has no on-demand twin, so no savings.

    Raises:
        PriceNotFoundError: the catalog does not know the type or region.
        ConfigurationError: ``usd_per_hour`` is negative, or local compute has no rate.
    """
    market = Market.parse(market)
    if usd_per_hour is not None and (not usd_per_hour.is_finite() or usd_per_hour < 0):
        raise ConfigurationError(f"usd_per_hour must be a number >= 0, got {usd_per_hour}")
    if market is Market.LOCAL:
        if usd_per_hour is None:
            raise ConfigurationError(
                f"local compute on {instance_type!r} needs a usd_per_hour rate "
                "(the team's own cost of the machine)"
            )
        hours, usd = compute_cost(seconds, usd_per_hour)
        return ComputeCharge(hours, usd, usd_per_hour, None, Decimal(0), "local-rate")
    offer = catalog.offer(instance_type, region)
    if usd_per_hour is not None:
        rate, source = usd_per_hour, "given"
    elif market is Market.SPOT:
        rate, source = catalog.spot_estimate_usd_per_hour(instance_type, region), "spot-advisor-estimate"
    else:
        rate, source = offer.usd_per_hour, "on-demand-list"
    hours, usd = compute_cost(seconds, rate)
    _, on_demand = compute_cost(seconds, offer.usd_per_hour)
    return ComputeCharge(
        hours, usd, rate, on_demand, (hours * offer.gpus).quantize(Decimal("0.000001")), source
    )
