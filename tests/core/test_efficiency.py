from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from costaware.adapters.price_files import bundled_catalog
from costaware.core.discounts import parse_discounts
from costaware.core.efficiency import GIB, Measurement, advise, measured_requirements, sized_needs
from costaware.core.errors import ConfigurationError

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def tries(
    n: int = 3,
    *,
    instance_type: str = "c5.4xlarge",
    market: str = "on_demand",
    wall: float = 3600.0,
    cpu: float = 3600.0,
    peak_gib: float = 1.5,
    runs_per_month: float | None = 30.0,
    task_id: str = "retrain",
    **extra: Any,
) -> list[Measurement]:
    offer = bundled_catalog().offer(instance_type, "us-east-1")
    return [
        Measurement(
            dag_id="nightly",
            task_id=task_id,
            run_id=f"run{i}",
            try_number=1,
            instance_type=instance_type,
            region="us-east-1",
            market=market,
            usd=(offer.usd_per_hour * Decimal(str(wall / 3600))).quantize(Decimal("0.000001")),
            wall_seconds=wall,
            cpu_seconds=cpu,
            peak_memory_bytes=int(peak_gib * GIB),
            vcpus=offer.vcpus,
            memory_gib=offer.memory_gib,
            runs_per_month=runs_per_month,
            measured_at=T0 + timedelta(days=i),
            **extra,
        )
        for i in range(n)
    ]


def test_idle_cost_and_headroom_of_a_try() -> None:
    (m,) = tries(1, wall=3600, cpu=4 * 3600, peak_gib=8)  # 4 busy cores of 16, 8 of 32 GiB
    assert m.cpu_utilization == pytest.approx(0.25)
    assert m.usd == Decimal("0.68")
    assert m.idle_usd == Decimal("0.51")  # 0.68 x (1 - 0.25)
    assert m.memory_headroom_gib == pytest.approx(24.0)
    assert m.cores_used == pytest.approx(4.0)


def test_unknown_instance_size_has_no_utilization() -> None:
    m = Measurement("d", "t", "r", 1, None, None, None, Decimal("0"), 10.0, 5.0, 100)
    assert m.cpu_utilization is None and m.idle_usd is None and m.memory_headroom_gib is None


def test_deliberately_oversized_task_is_flagged() -> None:
    """One busy core and 1.5 GiB on a 16-vCPU, 32 GiB c5.4xlarge: a 2-vCPU type fits for far less."""
    advice = advise(bundled_catalog(), tries())
    assert advice is not None
    assert advice.current.instance_type == "c5.4xlarge"
    assert advice.suggested.instance_type == "c6a.large"  # 2 vCPUs, 4 GiB, x86_64 like c5: cheapest fit
    assert advice.requirements.vcpus == 2  # 1 busy core + 25 % -> 2 whole vCPUs
    assert advice.requirements.memory_gib == Decimal("1.875")
    assert advice.current_usd_per_run == Decimal("0.68")
    assert advice.suggested_usd_per_run == Decimal("0.0765")
    assert advice.monthly_saving_usd == Decimal("18.105")  # (0.68 - 0.0765) x 30 runs
    assert "c6a.large" in advice.reason() and "$18.10/month" in advice.reason()


def test_on_demand_types_are_compared_after_the_discounts_the_ledger_bills() -> None:
    # A savings plan on m5a halves m5a.large to $0.043/h, below c6a.large's list $0.0765/h: the efficiency
    # report once advised c6a.large from list prices, a dearer type for this team.
    plan = parse_discounts("family:m5a=50")
    advice = advise(bundled_catalog(), tries(), discounts=plan)
    assert advice is not None and advice.suggested.instance_type == "m5a.large"
    assert advice.suggested_usd_per_run == Decimal("0.043")
    # The team's own 60 % beats the family's 50 % on every type (discounts do not stack): c6a.large again.
    advice = advise(
        bundled_catalog(), tries(team="ml"), discounts=parse_discounts("family:m5a=50, team:ml=60")
    )
    assert advice is not None and advice.suggested.instance_type == "c6a.large"
    assert advice.current_usd_per_run == Decimal("0.272")  # c5.4xlarge's $0.68 less 60 %
    # Spot is priced by the advisor, never discounted, as the ledger prices a spot try.
    spot = advise(bundled_catalog(), tries(market="spot"), discounts=plan)
    assert spot == advise(bundled_catalog(), tries(market="spot"))


def test_right_sized_task_gets_no_advice() -> None:
    busy = tries(instance_type="c5.xlarge", cpu=3.5 * 3600, peak_gib=5.0)  # 4 vCPUs, 8 GiB, all used
    assert advise(bundled_catalog(), busy) is None


def test_too_few_tries_give_no_advice() -> None:
    assert advise(bundled_catalog(), tries(2)) is None
    assert advise(bundled_catalog(), tries(2), min_tries=2) is not None


def test_memory_margin_can_rule_out_the_cheapest_type() -> None:
    # 3.5 GiB x 1.25 = 4.375 GiB no longer fits c6a.large's 4 GiB; m5a.large (8 GiB) is next.
    advice = advise(bundled_catalog(), tries(peak_gib=3.5))
    assert advice is not None and advice.suggested.instance_type == "m5a.large"
    advice = advise(bundled_catalog(), tries(peak_gib=3.5), memory_margin=0.1)
    assert advice is not None and advice.suggested.instance_type == "c6a.large"


def test_spot_tries_are_compared_at_spot_prices() -> None:
    catalog = bundled_catalog()
    advice = advise(catalog, tries(market="spot"))
    assert advice is not None
    hours = Decimal(1)
    assert advice.current_usd_per_run == catalog.spot_estimate_usd_per_hour("c5.4xlarge", "us-east-1") * hours
    assert advice.market.value == "spot"


def test_local_market_is_not_sized() -> None:
    assert advise(bundled_catalog(), tries(market="local")) is None


def test_frequency_falls_back_to_runs_seen_over_at_least_a_month() -> None:
    advice = advise(bundled_catalog(), tries(runs_per_month=None))
    assert advice is not None
    assert advice.runs_per_month == pytest.approx(3.0)  # 3 runs over 2 days counts as 3 per month
    assert advice.frequency_basis.startswith("runs seen")
    given = advise(bundled_catalog(), tries(), runs_per_month=4)
    assert given is not None and given.monthly_saving_usd == Decimal("2.414")


def test_gpu_task_keeps_its_gpus() -> None:
    advice = advise(bundled_catalog(), tries(instance_type="g5.4xlarge", cpu=3600, peak_gib=2))
    assert advice is not None
    assert advice.suggested.instance_type == "g5.xlarge"  # one A10G like g5.4xlarge, 4 vCPUs, not a CPU type
    assert (advice.suggested.gpus, advice.suggested.gpu_model) == (1, "NVIDIA A10G")
    four_gpus = tries(instance_type="g5.12xlarge", cpu=3600, peak_gib=2)
    assert advise(bundled_catalog(), four_gpus) is None  # no cheaper type has 4 A10Gs


def test_requirements_use_the_worst_try() -> None:
    mixed = tries(1, cpu=3600, peak_gib=1) + tries(1, cpu=3 * 3600, peak_gib=2)
    req = measured_requirements(mixed, memory_margin=0, cpu_margin=0)
    assert (req.vcpus, req.memory_gib, req.tries) == (3, Decimal("2.000"), 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"memory_margin": -0.1}, "memory_margin must be between 0 and 10"),
        ({"memory_margin": float("nan")}, "memory_margin must be between 0 and 10"),
        ({"min_tries": 0}, "min_tries must be at least 1, got 0"),
        ({"runs_per_month": -1.0}, "runs_per_month must be a number >= 0, got -1.0"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        advise(bundled_catalog(), tries(), **kwargs)


def test_tries_of_several_tasks_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="takes the tries of one task"):
        advise(bundled_catalog(), tries(1) + tries(1, task_id="other"))


def test_no_measurement_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no measured tries"):
        measured_requirements([])


def test_negative_measurement_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="cpu_seconds of a measurement must be >= 0 seconds, got -1"):
        Measurement("d", "t", "r", 1, None, None, None, Decimal("0"), 1.0, -1.0, 0)


def test_xen_era_families_are_never_suggested() -> None:
    # A task with one light core once got c5.4xlarge -> m1.small: the cheapest fit on paper, a 2006 core.
    from costaware.core.prices import LEGACY

    advice = advise(bundled_catalog(), tries(cpu=600.0, peak_gib=0.5))
    assert advice is not None and advice.requirements.vcpus == 1
    assert not LEGACY.match(advice.suggested.instance_type), advice.suggested.instance_type
    legacy = [
        o
        for o in bundled_catalog().instances(region="us-east-1", min_vcpus=1)
        if LEGACY.match(o.instance_type)
    ]
    assert {o.instance_type.split(".")[0] for o in legacy} >= {"m1", "m3", "c3", "r3"}  # still in the catalog


def test_a_bad_margin_is_refused_before_there_are_enough_tries_to_use_it() -> None:
    # RightSizeOperator(sizing="measured", memory_margin=-0.1) sized from the declared needs for two runs
    # and failed the third, the first with min_tries measured tries.
    with pytest.raises(ConfigurationError, match="memory_margin must be between 0 and 10"):
        sized_needs(Decimal("16"), 2, tries(2), min_tries=3, memory_margin=-0.1)
    assert sized_needs(Decimal("16"), 2, tries(2), min_tries=3)[:2] == (Decimal("16"), 2)
