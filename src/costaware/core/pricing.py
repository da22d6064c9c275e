"""Price a stretch of compute: runtime x the unit price of the (instance type, region, market) it ran on."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from costaware.core.discounts import Discount, apply_discount
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.ledger import Market, compute_cost
from costaware.core.price_figures import BUNDLED_PRICE_SOURCE
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
    discount_usd: Decimal = Decimal(0)


def price_compute(
    catalog: PriceCatalog,
    *,
    instance_type: str,
    region: str,
    market: Market | str,
    seconds: float | Decimal,
    usd_per_hour: Decimal | None = None,
    on_demand_usd_per_hour: Decimal | None = None,
    on_demand_source: str = BUNDLED_PRICE_SOURCE,
    discount: Discount | None = None,
) -> ComputeCharge:
    """Charge ``seconds`` of compute.

    The unit price is ``usd_per_hour`` when the caller knows it (a live spot price, a local rate);
    otherwise the on-demand price (``on_demand_usd_per_hour`` when the caller looked it up, e.g. from the
    price cache, else the catalog's), less ``discount`` when one applies; for spot, the on-demand price less
    the Spot Instance Advisor's typical saving. ``on_demand_usd`` is always the undiscounted list figure, so
    a report's savings include the discount; ``discount_usd`` says how much of them it is. Local compute
    (the team's own machines) has no on-demand twin, so no savings.

    Raises:
        PriceNotFoundError: neither the caller nor the catalog knows the type or region, and no
            ``usd_per_hour`` is given.
        ConfigurationError: a price is negative, or local compute has no rate.
    """
    market = Market.parse(market)
    for name, value in (("usd_per_hour", usd_per_hour), ("on_demand_usd_per_hour", on_demand_usd_per_hour)):
        if value is not None and (not value.is_finite() or value < 0):
            raise ConfigurationError(f"{name} must be a number >= 0, got {value}")
    if market is Market.LOCAL:
        if usd_per_hour is None:
            raise ConfigurationError(
                f"local compute on {instance_type!r} needs a usd_per_hour rate "
                "(the team's own cost of the machine)"
            )
        hours, usd = compute_cost(seconds, usd_per_hour)
        return ComputeCharge(hours, usd, usd_per_hour, None, Decimal(0), "local-rate")
    try:
        offer = catalog.offer(instance_type, region)
        gpus = offer.gpus
        list_price = offer.usd_per_hour if on_demand_usd_per_hour is None else on_demand_usd_per_hour
    except PriceNotFoundError:
        if on_demand_usd_per_hour is None:
            if usd_per_hour is None:
                raise
            # A rate the task gives on a type no price source knows (a custom or brand-new type): the rate
            # is the charge; there is no on-demand twin to save against, and its GPUs are unknown.
            hours, usd = compute_cost(seconds, usd_per_hour)
            return ComputeCharge(hours, usd, usd_per_hour, None, Decimal(0), "given")
        gpus, list_price = Decimal(0), on_demand_usd_per_hour  # a type only the price cache knows
    if on_demand_usd_per_hour is None:
        on_demand_source = BUNDLED_PRICE_SOURCE
    discount_rate = Decimal(0)
    if usd_per_hour is not None:
        rate, source = usd_per_hour, "given"
    elif market is Market.SPOT:
        advice = catalog.spot_advice(instance_type, region)
        rate = (list_price * (100 - advice.savings_pct) / 100).quantize(Decimal("0.000001"))
        source = "spot-advisor-estimate"
    elif discount is not None:
        rate = apply_discount(list_price, discount)
        discount_rate = list_price - rate
        source = f"{on_demand_source}+discount:{discount.label}"[:64]
    else:
        rate, source = list_price, on_demand_source
    hours, usd = compute_cost(seconds, rate)
    _, on_demand = compute_cost(seconds, list_price)
    discount_usd = compute_cost(seconds, discount_rate)[1] if discount_rate else Decimal(0)
    return ComputeCharge(
        hours, usd, rate, on_demand, (hours * gpus).quantize(Decimal("0.000001")), source, discount_usd
    )
