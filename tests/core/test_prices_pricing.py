from __future__ import annotations

from decimal import Decimal

import pytest

from costaware.adapters.price_files import bundled_catalog, catalog_from_files
from costaware.core.errors import ConfigurationError, InvalidPriceDataError, PriceNotFoundError
from costaware.core.ledger import compute_cost
from costaware.core.prices import PriceCatalog
from costaware.core.pricing import price_compute

HEADER = "provider,region,instance_type,vcpus,memory_gib,gpus,gpu_model,gpu_memory_gib,usd_per_hour\n"


def test_bundled_catalog_prices() -> None:
    catalog = bundled_catalog()
    assert catalog.on_demand_usd_per_hour("m5.large", "us-east-1") == Decimal("0.096")
    # The advisor says m5.large in us-east-1 saves 66%: 0.096 * 0.34.
    assert catalog.spot_estimate_usd_per_hour("m5.large", "us-east-1") == Decimal("0.032640")
    assert catalog.transfer_usd_per_gb("us-east-1", "eu-west-1") == Decimal("0.02")
    assert catalog.transfer_usd_per_gb("us-east-1", "internet") == Decimal("0.09")
    assert catalog.transfer_usd_per_gb("eu-west-1", "eu-west-1") == 0


def test_instances_filter_cheapest_first() -> None:
    offers = bundled_catalog().instances(region="us-east-1", min_memory_gib=64, min_gpus=1)
    assert offers and all(o.memory_gib >= 64 and o.gpus >= 1 and o.region == "us-east-1" for o in offers)
    prices = [o.usd_per_hour for o in offers]
    assert prices == sorted(prices)


@pytest.mark.parametrize(
    ("instance_type", "region", "message"),
    [
        ("m5.lrage", "us-east-1", "did you mean m5.large"),
        ("m5.large", "us-east-9", "did you mean us-east-"),
        ("p3.2xlarge", "us-east-1-atl-1", "it is priced in .*: choose one of those, or .* prices refresh"),
        # Not "did you mean m5.xlarge?": SageMaker refuses the EC2 name.
        ("ml.m5.xlarge", "us-east-1", "SageMaker type 'ml.m5.xlarge': .* give its prices"),
    ],
)
def test_unknown_names_suggest(instance_type: str, region: str, message: str) -> None:
    with pytest.raises(PriceNotFoundError, match=message):
        bundled_catalog().offer(instance_type, region)


def test_transfer_unknown_region() -> None:
    with pytest.raises(PriceNotFoundError, match="us-eats-1"):
        bundled_catalog().transfer_usd_per_gb("us-eats-1", "eu-west-1")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("aws,us-east-1,m5.large,2,8,0,,0,abc\n", "line 2: column 'usd_per_hour'"),
        (
            "aws,us-east-1,m5.large,2,8,0,,0,-1\n",
            "line 2: column 'usd_per_hour' must be a number > 0, got '-1'",
        ),
        ("aws,us-east-1,m5.large,2,8,0,,0,0.0000000000\n", "must be a number > 0, got '0.0000000000'"),
        ("aws,us-east-1,m5.large,2,8,0,,0,1\naws,us-east-1,m5.large,2,8,0,,0,2\n", "listed twice"),
        ("", "has no rows"),
    ],
)
def test_malformed_price_csv(body: str, message: str) -> None:
    with pytest.raises(InvalidPriceDataError, match=message):
        PriceCatalog.from_csv_text(HEADER + body)


def test_missing_column_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "prices.csv"
    bad.write_text("region,instance_type,usd\nus-east-1,m5.large,1\n")
    with pytest.raises(InvalidPriceDataError, match=r"prices.csv: .*lacks column\(s\) vcpus"):
        catalog_from_files(bad)
    with pytest.raises(InvalidPriceDataError, match="cannot read price file"):
        catalog_from_files(tmp_path / "missing.csv")


def test_compute_cost_exact() -> None:
    assert compute_cost(3600, Decimal("0.096")) == (Decimal("1.000000"), Decimal("0.096000"))
    assert compute_cost(1, Decimal("36")) == (Decimal("0.000278"), Decimal("0.010000"))


@pytest.mark.parametrize(
    ("market", "rate", "usd", "on_demand", "source"),
    [
        ("on_demand", None, Decimal("0.192000"), Decimal("0.192000"), "on-demand-list"),
        ("spot", None, Decimal("0.065280"), Decimal("0.192000"), "spot-advisor-estimate"),
        ("spot", Decimal("0.05"), Decimal("0.100000"), Decimal("0.192000"), "given"),
        ("local", Decimal("0.5"), Decimal("1.000000"), None, "local-rate"),
    ],
)
def test_price_compute(
    market: str, rate: Decimal | None, usd: Decimal, on_demand: Decimal | None, source: str
) -> None:
    charge = price_compute(
        bundled_catalog(),
        instance_type="m5.large",
        region="us-east-1",
        market=market,
        seconds=7200,
        usd_per_hour=rate,
    )
    assert (charge.usd, charge.on_demand_usd, charge.price_source) == (usd, on_demand, source)


def test_price_compute_gpu_hours_and_errors() -> None:
    charge = price_compute(
        bundled_catalog(), instance_type="p3.8xlarge", region="us-east-1", market="on_demand", seconds=1800
    )
    assert charge.gpu_hours == Decimal("2.000000")  # 4 GPUs for half an hour
    with pytest.raises(ConfigurationError, match="usd_per_hour rate"):
        price_compute(bundled_catalog(), instance_type="x", region="y", market="local", seconds=1)
    with pytest.raises(ConfigurationError, match="unknown market 'reserved'"):
        price_compute(
            bundled_catalog(), instance_type="m5.large", region="us-east-1", market="reserved", seconds=1
        )


def test_a_rate_given_for_a_type_no_catalog_knows_is_the_charge() -> None:
    # It was recorded at $0 "unpriced", and settled the task's reservation at $0.
    charge = price_compute(
        bundled_catalog(),
        instance_type="p5e.48xlarge-custom",
        region="us-east-1",
        market="on_demand",
        seconds=1800,
        usd_per_hour=Decimal("98.32"),
    )
    assert (charge.usd, charge.on_demand_usd, charge.price_source) == (Decimal("49.160000"), None, "given")
    with pytest.raises(PriceNotFoundError):  # no rate: still unknown
        price_compute(
            bundled_catalog(),
            instance_type="p5e.48xlarge-custom",
            region="us-east-1",
            market="spot",
            seconds=1,
        )


def test_gpus_asked_for_by_count_are_nvidia_ones_and_a_model_may_drop_its_maker() -> None:
    catalog = bundled_catalog()
    # The price list counts an Inferentia chip as a GPU: a GPU training cannot use it.
    cheapest = catalog.instances(region="us-east-1", min_gpus=1)
    assert all(o.gpu_model.startswith("NVIDIA ") for o in cheapest)
    # g5g's T4G is an NVIDIA GPU on Graviton: the cheapest GPU of all, and an x86 image cannot run there.
    assert (cheapest[0].instance_type, cheapest[0].arch) == ("g5g.xlarge", "arm64")
    assert catalog.instances(region="us-east-1", min_gpus=1, arch="x86_64")[0].instance_type == "g4dn.xlarge"
    # A model named without a count is one whole GPU; a share of one (g6f's eighth of an L4) is asked for.
    whole = catalog.instances(region="us-east-1", gpu_model="L4")
    assert whole[0].instance_type == "g6.xlarge" and all(o.gpus >= 1 for o in whole)
    shares = catalog.instances(region="us-east-1", gpu_model="L4", min_gpus=Decimal("0.125"))
    assert shares[0].instance_type == "g6f.large"
    # The previous generation has no architecture in the us-east-1 source: its family's, as in other regions.
    for region in ("us-east-1", "eu-west-1"):
        assert catalog.offer("p3.2xlarge", region).arch == "x86_64"
    assert {o.gpu_model for o in catalog.instances(region="us-east-1", min_gpus=1, gpu_model="T4")} == {
        "NVIDIA T4"
    }
    named = catalog.instances(region="us-east-1", min_gpus=1, gpu_model="AWS Inferentia")
    assert named and all(o.instance_type.startswith("inf1.") for o in named)


@pytest.mark.parametrize("region", ["us-east-1", "eu-central-1", "ap-northeast-1"])
def test_the_gpus_the_multi_region_table_misnamed_are_corrected_in_every_region(region: str) -> None:
    # It named g5g's GPU an "ARM Mali-G78MP12" of 4 GiB, and g6f's share of an L4 an L40's (twice the memory).
    catalog = bundled_catalog()
    names = ("g5g.xlarge", "g5g.16xlarge", "g6f.large", "g6f.4xlarge")
    offers = [catalog.offer(name, region) for name in names]
    specs = {o.instance_type: (o.gpus, o.gpu_model, o.gpu_memory_gib) for o in offers}
    assert specs == {
        "g5g.xlarge": (1, "NVIDIA T4G", 16),
        "g5g.16xlarge": (2, "NVIDIA T4G", 32),
        "g6f.large": (Decimal("0.125"), "NVIDIA L4", 3),
        "g6f.4xlarge": (Decimal("0.5"), "NVIDIA L4", 12),
    }


def test_a_family_given_for_a_type_is_named_with_its_smallest_sizes() -> None:
    with pytest.raises(
        PriceNotFoundError,
        match=r"'m5' is an instance family, not a type: give a size, e\.g\. m5\.large, m5\.xlarge, m5\.2x",
    ):
        bundled_catalog().offer("m5", "us-east-1")
