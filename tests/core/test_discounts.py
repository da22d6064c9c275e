"""Discounts per team or family, and pricing with a looked-up on-demand figure."""

from __future__ import annotations

from decimal import Decimal

import pytest

from costaware.adapters.price_files import bundled_catalog
from costaware.core.discounts import Discount, apply_discount, discount_for, instance_family, parse_discounts
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.pricing import price_compute


def test_parse_and_match() -> None:
    rules = parse_discounts(" team:ml=12, family:p4d=30%, family:ml.g5=8 ,")
    assert rules == (
        Discount("team", "ml", Decimal(12)),
        Discount("family", "p4d", Decimal(30)),
        Discount("family", "ml.g5", Decimal(8)),
    )
    assert parse_discounts("") == ()
    assert instance_family("p4d.24xlarge") == "p4d" and instance_family("ml.g5.xlarge") == "ml.g5"
    # The largest applicable rule wins; discounts do not stack.
    assert discount_for(rules, "p4d.24xlarge", {"team": "ml"}) == rules[1]
    assert discount_for(rules, "m5.large", {"team": "ml"}) == rules[0]
    assert discount_for(rules, "m5.large", {"team": "data"}) is None
    assert discount_for(rules, "ml.g5.xlarge", {}) == rules[2]
    assert discount_for(parse_discounts("family:g5=5"), "ml.g5.xlarge") == Discount(
        "family", "g5", Decimal(5)
    )
    assert apply_discount(Decimal("32.7726"), rules[1]) == Decimal("22.94082")
    assert apply_discount(Decimal("1"), None) == Decimal("1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("team=12", "cannot read 'team=12'"),
        ("team:ml", "cannot read 'team:ml'"),
        ("team:ml=lots", "cannot read 'team:ml=lots'"),
        ("region:us=5", "discount kind must be team or family, got 'region'"),
        ("team:ml=0", "above 0 and at most 99, got 0"),
        ("team:ml=99.9999999", "above 0 and at most 99, got 99.9999999"),  # priced every hour at $0
        ("family:p4d=100", "above 0 and at most 99, got 100"),
        ("team:ml=-5", "above 0 and at most 99, got -5"),
        ("team:ml=5, team:ml=6", "team:ml is given twice"),
        ("family:=5", "a family discount needs a name"),
        (
            "family:p4d.24xlarge=30",
            "names an instance size; a family rule names the family, e.g. family:p4d=30",
        ),
        ("family:ml.g5.xlarge=8", "e.g. family:ml.g5=8"),
    ],
)
def test_bad_discount_settings(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_discounts(text)


def test_a_family_in_capitals_matches_its_types() -> None:
    (rule,) = parse_discounts("family:P4D=30")  # matched nothing, silently
    assert discount_for([rule], "p4d.24xlarge") == rule


def test_on_demand_charge_with_discount_keeps_the_list_price_as_on_demand() -> None:
    charge = price_compute(
        bundled_catalog(),
        instance_type="m5n.2xlarge",
        region="us-east-1",
        market="on_demand",
        seconds=7200,
        discount=Discount("team", "ml", Decimal(25)),
    )
    assert charge.usd_per_hour == Decimal("0.357")
    assert (charge.usd, charge.on_demand_usd, charge.discount_usd) == (
        Decimal("0.714000"),
        Decimal("0.952000"),
        Decimal("0.238000"),
    )
    assert charge.price_source == "on-demand-list+discount:team:ml"


def test_spot_is_not_discounted_and_uses_the_given_figure() -> None:
    charge = price_compute(
        bundled_catalog(),
        instance_type="c5.xlarge",
        region="us-east-1",
        market="spot",
        seconds=3600,
        on_demand_usd_per_hour=Decimal("0.2"),
        on_demand_source="aws-price-list-cache",
        discount=Discount("team", "ml", Decimal(25)),
    )
    advice = bundled_catalog().spot_advice("c5.xlarge", "us-east-1")
    assert charge.usd_per_hour == (Decimal("0.2") * (100 - advice.savings_pct) / 100).quantize(
        Decimal("0.000001")
    )
    assert (charge.on_demand_usd, charge.discount_usd, charge.price_source) == (
        Decimal("0.200000"),
        Decimal(0),
        "spot-advisor-estimate",
    )


def test_a_type_only_the_price_sources_know() -> None:
    charge = price_compute(
        bundled_catalog(),
        instance_type="ml.g5.xlarge",
        region="us-east-1",
        market="on_demand",
        seconds=1800,
        on_demand_usd_per_hour=Decimal("1.408"),
        on_demand_source="aws-price-list-cache",
    )
    assert (charge.usd, charge.price_source, charge.gpu_hours) == (
        Decimal("0.704000"),
        "aws-price-list-cache",
        0,
    )
    with pytest.raises(PriceNotFoundError, match=r"no price for the SageMaker type 'ml\.g5\.xlarge'"):
        price_compute(
            bundled_catalog(), instance_type="ml.g5.xlarge", region="us-east-1", market="on_demand", seconds=1
        )
    with pytest.raises(ConfigurationError, match="on_demand_usd_per_hour must be a number >= 0, got -1"):
        price_compute(
            bundled_catalog(),
            instance_type="m5.large",
            region="us-east-1",
            market="on_demand",
            seconds=1,
            on_demand_usd_per_hour=Decimal(-1),
        )
