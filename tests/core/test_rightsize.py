from __future__ import annotations

import math
from dataclasses import replace
from decimal import Decimal

import pytest

from costaware.core.discounts import parse_discounts
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.ledger import Market
from costaware.core.prices import PriceCatalog
from costaware.core.rightsize import (
    RightSizeJob,
    RuntimeObservation,
    ThroughputProfile,
    interruptions_per_hour,
    observations_from_entries,
    predict_hours,
    right_size,
    spot_expected_hours,
)

ONDEMAND = """region,instance_type,vcpus,memory_gib,gpus,usd_per_hour
us-east-1,type-a,16,64,0,4.00
us-east-1,type-b,8,32,0,1.40
us-east-1,type-c,4,8,0,0.50
eu-west-1,type-a,16,64,0,4.40
"""
ADVISOR = """region,instance_type,savings_pct,interruption_range
us-east-1,type-a,60,>20%
us-east-1,type-b,60,<5%
"""
#: Type A runs the job 2.2 times as fast as type B: A takes 1 h where B takes 2.2 h.
PROFILE = ThroughputProfile(speeds={"type-a": 2.2, "type-b": 1.0, "type-c": 0.5})
A_RUN = [RuntimeObservation("type-a", 1.0)]
ON_DEMAND = (Market.ON_DEMAND,)


@pytest.fixture
def catalog() -> PriceCatalog:
    return PriceCatalog.from_csv_text(ONDEMAND, ADVISOR)


def _choose(catalog: PriceCatalog, **job: object) -> tuple[str, str, Decimal]:
    values: dict[str, object] = {"memory_gib": Decimal(16), "markets": ON_DEMAND}
    values.update(job)
    decision = right_size(
        catalog,
        RightSizeJob(**values),
        region="us-east-1",
        observations=A_RUN,
        profile=PROFILE,  # type: ignore[arg-type]
    )
    return decision.choice.instance_type, decision.choice.market.value, decision.choice.expected_usd


def test_worked_example_b_wins_when_it_meets_the_deadline_and_fits(catalog: PriceCatalog) -> None:
    decision = right_size(
        catalog,
        RightSizeJob(memory_gib=Decimal(16), deadline_hours=3.0, markets=ON_DEMAND),
        region="us-east-1",
        observations=A_RUN,
        profile=PROFILE,
    )
    assert decision.choice.instance_type == "type-b"
    assert decision.choice.expected_usd == Decimal("3.080000")  # $1.40/h x 2.2 h
    assert decision.choice.predicted_hours == pytest.approx(2.2)
    assert [(c.instance_type, c.expected_usd) for c in decision.runners_up] == [
        ("type-a", Decimal("4.000000"))
    ]
    assert (
        "type-b on_demand: expected $3.080000" in decision.reason
        and "next cheapest type-a" in decision.reason
    )
    assert ("type-c", "8 GiB < 16 GiB needed") in decision.rejected
    assert "scaled by throughput" in decision.choice.runtime_basis
    assert decision.to_json()["runners_up"][0]["expected_usd"] == "4.000000"


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        ({"deadline_hours": 3.0}, ("type-b", "on_demand", Decimal("3.080000"))),
        ({"deadline_hours": 2.0}, ("type-a", "on_demand", Decimal("4.000000"))),  # B misses the deadline
        ({"memory_gib": Decimal(48), "deadline_hours": 3.0}, ("type-a", "on_demand", Decimal("4.000000"))),
        ({}, ("type-b", "on_demand", Decimal("3.080000"))),  # no deadline
    ],
)
def test_worked_example_a_otherwise(catalog: PriceCatalog, job: dict, expected: tuple) -> None:  # type: ignore[type-arg]
    assert _choose(catalog, **job) == expected


def test_on_demand_candidates_are_priced_after_the_discounts_the_ledger_bills(catalog: PriceCatalog) -> None:
    job = RightSizeJob(memory_gib=Decimal(16), markets=ON_DEMAND)

    def choose(rules: str, team: str | None = None) -> tuple[str, Decimal]:
        decision = right_size(
            catalog,
            job,
            region="us-east-1",
            observations=A_RUN,
            profile=PROFILE,
            discounts=parse_discounts(rules),
            team=team,
        )
        return decision.choice.instance_type, decision.choice.expected_usd

    assert choose("") == ("type-b", Decimal("3.080000"))  # list prices: $1.40/h x 2.2 h
    # A savings plan of 40 % on type-a's family: $2.40 x 1 h, below type-b's $3.08 (as the ledger will bill).
    assert choose("family:type-a=40") == ("type-a", Decimal("2.400000"))
    # The team's 50 % applies to every type and beats the family's 40 % (no stacking): type-b at $0.70/h.
    assert choose("family:type-a=40, team:ml=50", team="ml") == ("type-b", Decimal("1.540000"))
    assert choose("family:type-a=40, team:ml=50", team="other") == ("type-a", Decimal("2.400000"))


def test_spot_is_priced_with_its_expected_interruption_rework(catalog: PriceCatalog) -> None:
    decision = right_size(
        catalog,
        RightSizeJob(memory_gib=Decimal(16), deadline_hours=3.0, checkpoint_minutes=30),
        region="us-east-1",
        observations=A_RUN,
        profile=PROFILE,
    )
    # A on spot: $1.20/h (70 % off), 1 h plus rework at the >20 % rate over its 1 h run (0.29 interruptions,
    # each losing 15 min and a 5 min restart: ~$1.32); B on spot: $0.56/h x ~2.2 h (~$1.24).
    assert (decision.choice.instance_type, decision.choice.market) == ("type-b", Market.SPOT)
    rate = interruptions_per_hour("<5%", 2.2)
    expected = 2.2 + rate * 2.2 * (0.25 + 5 / 60)
    assert decision.choice.expected_hours == pytest.approx(expected)
    assert decision.choice.expected_usd == (Decimal("0.56") * Decimal(str(expected))).quantize(
        Decimal("0.000001")
    )
    assert ("type-c spot", "no spot advice for this type and region") not in decision.rejected  # memory first


def test_spot_overhead_model() -> None:
    job = RightSizeJob(memory_gib=Decimal(1))
    rate = interruptions_per_hour(">20%", 10)
    # A quarter of the instances interrupted (the mid-point) over the 10 h this one runs.
    assert rate == pytest.approx(-math.log(0.75) / 10)
    assert interruptions_per_hour(">20%") == pytest.approx(-math.log(0.75) / 730)  # no runtime: the month
    assert interruptions_per_hour(">20%", 10_000) == interruptions_per_hour(">20%")
    assert spot_expected_hours(10, rate, job) == pytest.approx(
        10 + rate * 10 * (5 + 5 / 60)
    )  # no checkpoints
    checkpointed = RightSizeJob(memory_gib=Decimal(1), checkpoint_minutes=20, restart_minutes=0)
    assert spot_expected_hours(10, rate, checkpointed) == pytest.approx(10 + rate * 10 * (10 / 60))
    with pytest.raises(ConfigurationError, match="unknown interruption range '30%'"):
        interruptions_per_hour("30%")
    with pytest.raises(ConfigurationError, match="hours must be > 0 to weigh its interruptions, got 0"):
        interruptions_per_hour("<5%", 0)


def test_runtime_prediction_sources(catalog: PriceCatalog) -> None:
    b = catalog.offer("type-b", "us-east-1")
    job = RightSizeJob(memory_gib=Decimal(1), fallback_hours=3.0, reference_type="type-c")
    same = [
        RuntimeObservation("type-b", 2.0),
        RuntimeObservation("type-b", 4.0),
        RuntimeObservation("type-b", 3.5),
    ]
    assert predict_hours(b, same, catalog, PROFILE, job) == (3.5, "median of 3 recorded run(s) on type-b")
    hours, basis = predict_hours(b, A_RUN, catalog, PROFILE, job)  # type: ignore[misc]
    assert hours == pytest.approx(2.2) and basis.startswith("median of 1 recorded run(s) on type-a")
    hours, basis = predict_hours(b, [], catalog, PROFILE, job)  # type: ignore[misc]
    assert hours == pytest.approx(3.0 * 0.5 / 1.0) and basis.startswith("fallback_hours on type-c")
    plain = RightSizeJob(memory_gib=Decimal(1), fallback_hours=3.0)
    assert predict_hours(b, [], catalog, PROFILE, plain) == (
        3.0,
        "fallback_hours (no recorded run; same on every type)",
    )
    by_vcpus = ThroughputProfile(exponent=1.0)  # 16 vCPUs vs 8: twice as fast
    assert predict_hours(b, A_RUN, catalog, by_vcpus, job)[0] == pytest.approx(2.0)  # type: ignore[index]
    gpu_job = ThroughputProfile(basis="gpus")
    assert predict_hours(b, A_RUN, catalog, gpu_job, job) is None  # no GPU: cannot run there
    with pytest.raises(
        ConfigurationError,
        match="no recorded run on a type in the catalog that throughput lists and no fallback_hours",
    ):
        predict_hours(
            b,
            [RuntimeObservation("unknown-type", 1.0)],
            catalog,
            PROFILE,
            RightSizeJob(memory_gib=Decimal(1)),
        )


def test_given_speeds_leave_out_the_types_they_do_not_list(catalog: PriceCatalog) -> None:
    """A measured speed and a vCPU count's are not on one scale: mixed, type-b (8 vCPUs) was 8 ** 0.8 = 5.3
    times type-c (given 1.0), a 4 h run there predicted at 0.76 h, and a 2 h deadline falsely "met"."""
    profile = ThroughputProfile(speeds={"type-c": 1.0})
    job = RightSizeJob(memory_gib=Decimal(1), deadline_hours=2.0, markets=ON_DEMAND)
    c_run = [RuntimeObservation("type-c", 4.0)]
    with pytest.raises(ConfigurationError) as error:
        right_size(catalog, job, region="us-east-1", observations=c_run, profile=profile)
    assert "give more types' speeds in throughput" in str(error.value)
    decision = right_size(
        catalog, replace(job, deadline_hours=None), region="us-east-1", observations=c_run, profile=profile
    )
    assert decision.choice.instance_type == "type-c" and decision.choice.predicted_hours == 4.0
    why = "not in throughput: give its relative speed to consider it"
    assert {("type-a", why), ("type-b", why)} <= set(decision.rejected)
    b = catalog.offer("type-b", "us-east-1")
    with pytest.raises(
        ConfigurationError, match=r"instance type 'type-b' is not in throughput \(which lists"
    ):
        predict_hours(b, c_run, catalog, profile, job)
    fallback = RightSizeJob(memory_gib=Decimal(1), fallback_hours=3.0, reference_type="type-b")
    with pytest.raises(ConfigurationError, match=r"'type-b' is not in throughput .*give its relative speed"):
        predict_hours(catalog.offer("type-c", "us-east-1"), [], catalog, profile, fallback)
    # a run on a type left out is not scaled: only the fallback (or a run on a listed type) predicts
    with pytest.raises(
        ConfigurationError, match="no recorded run on a type in the catalog that throughput lists and no"
    ):
        predict_hours(catalog.offer("type-c", "us-east-1"), A_RUN, catalog, profile, RightSizeJob(Decimal(1)))


def test_no_feasible_instance_says_what_came_closest(catalog: PriceCatalog) -> None:
    with pytest.raises(ConfigurationError) as error:
        _choose(catalog, deadline_hours=0.5)
    message = str(error.value)
    assert "no instance in us-east-1 with >= 16 GiB finishes within 0.50 h" in message
    assert "the fastest candidate, type-a on_demand, needs 1.00 h" in message


@pytest.mark.parametrize(
    ("job", "error", "message"),
    [
        ({"memory_gib": Decimal(-1)}, ConfigurationError, "memory_gib must be a number >= 0, got -1"),
        (
            {"memory_gib": Decimal(1), "deadline_hours": 0.0},
            ConfigurationError,
            "deadline_hours must be a positive",
        ),
        (
            {"memory_gib": Decimal(1), "fallback_hours": -2.0},
            ConfigurationError,
            "fallback_hours must be > 0",
        ),
        ({"memory_gib": Decimal(1), "markets": ("cheap",)}, ConfigurationError, "unknown market 'cheap'"),
        (
            {"memory_gib": Decimal(1), "markets": ("local",)},
            ConfigurationError,
            "use markets on_demand and/or spot",
        ),
        ({"memory_gib": Decimal(1), "markets": ()}, ConfigurationError, "markets must name at least one"),
        (
            {"memory_gib": Decimal(1), "checkpoint_minutes": 0},
            ConfigurationError,
            "checkpoint_minutes must be a number of minutes > 0, got 0",
        ),
        # A bare TypeError before ('<=' between str and int).
        (
            {"memory_gib": Decimal(1), "checkpoint_minutes": "thirty"},
            ConfigurationError,
            "checkpoint_minutes must be a number of minutes > 0, got 'thirty'",
        ),
        (
            {"memory_gib": Decimal(1), "restart_minutes": -1},
            ConfigurationError,
            "restart_minutes must be a number of minutes >= 0, got -1",
        ),
    ],
)
def test_bad_jobs_name_the_value(job: dict, error: type[Exception], message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(error, match=message):
        RightSizeJob(**job)


def test_unknown_names_and_profiles_are_refused(catalog: PriceCatalog) -> None:
    job = RightSizeJob(memory_gib=Decimal(1), fallback_hours=1.0)
    with pytest.raises(PriceNotFoundError, match="unknown instance type 'type-z'"):
        right_size(catalog, job, region="us-east-1", instance_types=["type-z"])
    with pytest.raises(PriceNotFoundError, match="unknown region 'mars-1'"):
        right_size(catalog, job, region="mars-1")
    with pytest.raises(ConfigurationError, match="throughput basis must be 'vcpus' or 'gpus', got 'ram'"):
        ThroughputProfile(basis="ram")
    with pytest.raises(ConfigurationError, match="throughput speeds must be positive numbers"):
        ThroughputProfile(speeds={"type-a": 0})


def test_recorded_runs_come_from_successful_compute_entries() -> None:
    base = {"task_id": "train", "kind": "compute", "outcome": "success", "estimated": False, "unit": "hour"}
    rows = [
        {**base, "instance_type": "m5.large", "quantity": Decimal("0.5")},
        {**base, "instance_type": "m5.large", "quantity": Decimal("0.7"), "outcome": "failed"},
        {**base, "instance_type": "m5.large", "quantity": Decimal("0.7"), "task_id": "other"},
        {**base, "instance_type": "m5.large", "quantity": Decimal("0.7"), "estimated": True},
        {**base, "instance_type": None, "quantity": Decimal("0.7")},
        {**base, "instance_type": "c5.xlarge", "quantity": Decimal("0")},
        {**base, "instance_type": "c5.xlarge", "quantity": Decimal("0.25")},
    ]
    assert observations_from_entries(rows, "train") == [
        RuntimeObservation("m5.large", 0.5),
        RuntimeObservation("c5.xlarge", 0.25),
    ]


def test_arch_filter_and_types_without_specs() -> None:
    table = (
        "region,instance_type,vcpus,memory_gib,gpus,arch,usd_per_hour\n"
        "us-east-1,x-big,16,64,0,x86_64,2.0\n"
        "us-east-1,g-big,16,64,0,arm64,1.6\n"
        "us-east-1,mystery,,,0,,0.1\n"
        "us-east-1,unpriced,8,32,0,arm64,\n"
    )
    catalog = PriceCatalog.from_csv_text(table)
    job = {"memory_gib": Decimal(0), "fallback_hours": 1.0, "markets": ON_DEMAND}
    x86 = right_size(catalog, RightSizeJob(**job, arch="amd64"), region="us-east-1")  # type: ignore[arg-type]
    assert x86.choice.instance_type == "x-big"
    anyarch = right_size(catalog, RightSizeJob(**job), region="us-east-1")  # type: ignore[arg-type]
    # mystery is cheapest but has no vCPU or memory figures: never chosen, and the reason says so.
    assert anyarch.choice.instance_type == "g-big"
    assert ("mystery", "the price snapshot has no vCPU and memory figures for it") in anyarch.rejected
    with pytest.raises(PriceNotFoundError, match="lists unpriced in us-east-1 without an on-demand price"):
        catalog.offer("unpriced", "us-east-1")
    with pytest.raises(ConfigurationError, match="unknown architecture 'ppc64'"):
        RightSizeJob(memory_gib=Decimal(1), arch="ppc64")


def test_with_on_demand_overlays_prices(catalog: PriceCatalog) -> None:
    updated = catalog.with_on_demand(
        {
            ("type-a", "us-east-1"): Decimal("0.1"),
            ("type-b", "eu-west-1"): Decimal("2"),
            ("new", "us-east-1"): Decimal(1),
        }
    )
    assert updated.on_demand_usd_per_hour("type-a", "us-east-1") == Decimal("0.1")
    assert catalog.on_demand_usd_per_hour("type-a", "us-east-1") == Decimal(
        "4.00"
    )  # the original is unchanged
    moved = updated.offer("type-b", "eu-west-1")  # specs borrowed from us-east-1
    assert (moved.vcpus, moved.memory_gib, moved.usd_per_hour) == (8, Decimal(32), Decimal(2))
    assert updated.offer("new", "us-east-1").specs_known is False
    assert updated.spot_advice("type-a", "us-east-1") == catalog.spot_advice("type-a", "us-east-1")


@pytest.mark.parametrize(
    ("rows", "chosen", "left_out", "why"),
    [
        # A 2-hour retrain on t4g ran out of CPU credits; the efficiency advice already left the t family out.
        (
            ["c6i.xlarge,4,8,0,x86_64,0.17", "t3.xlarge,4,16,0,x86_64,0.1664"],
            "c6i.xlarge",
            "t3.xlarge",
            "burstable CPU (t family): throttled once its credits run out",
        ),
        # The cheapest fit on paper was m1.small, a 2006 core whose runtime nothing measured.
        (
            [
                "c6a.large,2,4,0,x86_64,0.0765",
                "m1.small,1,1.7,0,x86_64,0.044",
                "m3.medium,1,3.75,0,x86_64,0.067",
            ],
            "c6a.large",
            "m1.small",
            "a Xen-era family (2006-2015): runtimes do not carry over",
        ),
    ],
)
def test_burstable_and_xen_era_types_are_left_out_unless_named(
    rows: list[str], chosen: str, left_out: str, why: str
) -> None:
    header = "region,instance_type,vcpus,memory_gib,gpus,arch,usd_per_hour\n"
    catalog = PriceCatalog.from_csv_text(header + "".join(f"us-east-1,{row}\n" for row in rows))
    job = RightSizeJob(memory_gib=Decimal(1), fallback_hours=2.0, markets=ON_DEMAND)
    decision = right_size(catalog, job, region="us-east-1")
    assert decision.choice.instance_type == chosen
    assert (left_out, why) in decision.rejected
    named = right_size(catalog, job, region="us-east-1", instance_types=[left_out, chosen])
    assert named.choice.instance_type == left_out  # asked for by name: the user's call


def test_minutes_given_as_text_are_read_as_numbers() -> None:
    job = RightSizeJob(memory_gib=Decimal(1), checkpoint_minutes="30", restart_minutes="0")  # type: ignore[arg-type]
    assert (job.checkpoint_minutes, job.restart_minutes) == (30.0, 0.0)
