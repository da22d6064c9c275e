from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException
from contexts import task_context

from costaware import Ledger
from costaware.adapters.price_files import bundled_catalog
from costaware.core.errors import ConfigurationError
from costaware.core.ledger import Kind, LedgerEntry
from costaware.operators.right_size import RightSizeOperator

TYPES = ["m5.large", "c5.xlarge", "m5.2xlarge"]


@pytest.fixture
def env_ledger(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    ledger = Ledger.from_url(ledger_url)
    for run, hours in (("r1", "0.9"), ("r2", "1.0"), ("r3", "1.2")):  # three recorded runs on m5.2xlarge
        ledger.record(
            LedgerEntry(
                dag_id="retrain",
                run_id=run,
                task_id="train",
                kind=Kind.COMPUTE,
                usd=Decimal("0.4"),
                instance_type="m5.2xlarge",
                quantity=Decimal(hours),
            )
        )
    return ledger


def _context() -> dict[str, Any]:
    return task_context("right_size", run_id="manual__9")


def _operator(**kwargs: Any) -> RightSizeOperator:
    args: dict[str, Any] = {
        "task_id": "right_size",
        "for_task_id": "train",
        "memory_gib": "6",
        "instance_types": TYPES,
        "markets": ["on_demand"],
        "throughput_exponent": 0.8,
    }
    args.update(kwargs)
    return RightSizeOperator(**args)


def _expected(instance_type: str) -> tuple[float, Decimal]:
    """Hours and USD of the job on a type: the median recorded run (1.0 h on 8 vCPUs) scaled by vCPUs^0.8."""
    offer = bundled_catalog().offer(instance_type, "us-east-1")
    hours = 1.0 * 8**0.8 / offer.vcpus**0.8
    return hours, (offer.usd_per_hour * Decimal(str(hours))).quantize(Decimal("0.000001"))


def test_picks_the_cheapest_expected_cost_from_recorded_runs(env_ledger: Ledger) -> None:
    result = _operator(deadline_hours="4").execute(_context())
    costs = {t: _expected(t)[1] for t in TYPES}
    cheapest = min(costs, key=costs.__getitem__)
    assert result["instance_type"] == cheapest and result["market"] == "on_demand"
    assert Decimal(result["expected_usd"]) == costs[cheapest]
    assert result["runtime_basis"].startswith("median of 3 recorded run(s) on m5.2xlarge")
    assert [r["instance_type"] for r in result["runners_up"]] == sorted(
        (t for t in TYPES if t != cheapest), key=costs.__getitem__
    )
    assert "finishes within the 4.00 h deadline" in result["reason"]


def test_the_discounts_setting_prices_on_demand_candidates(
    env_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    costs = {t: _expected(t)[1] for t in TYPES}
    assert min(costs, key=costs.__getitem__) != "c5.xlarge"  # at list prices
    # A 90 % plan on c5 makes c5.xlarge the cheapest expected cost, as the ledger will bill its tries.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__DISCOUNTS", "family:c5=90")
    result = _operator().execute(_context())
    assert result["instance_type"] == "c5.xlarge"
    assert Decimal(result["usd_per_hour"]) == Decimal("0.017000")  # $0.17/h less 90 %
    assert Decimal(result["expected_usd"]) == (
        Decimal("0.017") * Decimal(str(_expected("c5.xlarge")[0]))
    ).quantize(Decimal("0.000001"))


def test_deadline_and_memory_push_to_faster_or_bigger_types(env_ledger: Ledger) -> None:
    tight = _operator(deadline_hours="2").execute(_context())
    assert _expected(tight["instance_type"])[0] <= 2 < _expected("m5.large")[0]
    assert {
        "candidate": "m5.large on_demand",
        "why": f"needs {_expected('m5.large')[0]:.2f} h, misses the 2.00 h deadline",
    } in tight["rejected"]
    big = _operator(memory_gib="16", deadline_hours="4").execute(_context())
    assert big["instance_type"] == "m5.2xlarge" and big["runners_up"] == []
    assert {"candidate": "c5.xlarge", "why": "8 GiB < 16 GiB needed"} in big["rejected"]


def test_fallback_before_the_first_run(env_ledger: Ledger) -> None:
    result = _operator(for_task_id="never_ran", fallback_hours="0.5", reference_type="m5.large").execute(
        _context()
    )
    assert result["runtime_basis"] == "fallback_hours on m5.large, scaled by throughput (no recorded run)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"memory_gib": "lots"}, "memory_gib must be a number, got 'lots'"),
        ({"deadline_hours": "-1"}, "deadline_hours must be a positive number of hours from now, got -1.0"),
        ({"deadline_hours": "0.1"}, "no instance in us-east-1 with >= 6 GiB finishes within 0.10 h"),
        ({"for_task_id": "never_ran"}, "no recorded run on a type in the catalog and no fallback_hours"),
        ({"instance_types": ["m5.lrage"]}, "unknown instance type 'm5.lrage'; did you mean m5.large"),
        ({"markets": ["cheapest"]}, "unknown market 'cheapest'"),
        ({"min_vcpus": 2.5}, "min_vcpus must be a whole number of vCPUs >= 0, got 2.5"),  # was cut to 2
        ({"min_vcpus": "-3"}, "min_vcpus must be a whole number of vCPUs >= 0, got '-3'"),
        ({"min_vcpus": "four"}, "min_vcpus must be a number, got 'four'"),
        # The needs that rule every type out are named, not memory alone.
        ({"min_vcpus": 1000}, "with >= 6 GiB and >= 1000 vCPUs fits.*lower memory_gib, min_vcpus"),
        ({"min_gpus": 1, "gpu_model": "T5"}, "carries GPU model 'T5'; see `costaware prices list`"),
    ],
)
def test_bad_inputs_fail_without_writing(env_ledger: Ledger, kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    before = env_ledger.entries()
    with pytest.raises(AirflowFailException, match=message):
        _operator(**kwargs).execute(_context())
    assert env_ledger.entries() == before and env_ledger.open_reservations() == []


@pytest.mark.parametrize("rendered", [" ", "None ", "null"])
@pytest.mark.parametrize("name", ["deadline_hours", "min_vcpus"])
def test_a_number_rendered_from_an_unset_param_is_not_given(
    env_ledger: Ledger, name: str, rendered: str
) -> None:
    # What a template of an unset param renders ("null" through | tojson, with spaces) is read as the
    # argument left out: it failed as "min_vcpus must be a number, got 'null'".
    templated = _operator()
    setattr(templated, name, rendered)  # as Airflow renders it
    assert templated.execute(_context()) == _operator().execute(_context())


@pytest.mark.parametrize("rendered", [" ", "None ", "null"])
def test_a_fallback_rendered_from_an_unset_param_is_no_fallback(env_ledger: Ledger, rendered: str) -> None:
    first_run = _operator(for_task_id="never_ran")
    first_run.fallback_hours = rendered
    with pytest.raises(AirflowFailException, match="on a type in the catalog and no fallback_hours"):
        first_run.execute(_context())


def test_arch_keeps_graviton_types_of_the_full_snapshot(env_ledger: Ledger) -> None:
    # Every us-east-1 type is a candidate (no instance_types): the choice is arm64, e.g. m7g/c7g/r8g.
    result = _operator(
        instance_types=None, arch="arm64", memory_gib="64", fallback_hours="1", for_task_id="never_ran"
    ).execute(_context())
    offer = bundled_catalog().offer(result["instance_type"], "us-east-1")
    assert offer.arch == "arm64" and offer.memory_gib >= 64
    cheaper_x86 = bundled_catalog().instances(region="us-east-1", min_memory_gib=64, arch="x86_64")
    assert cheaper_x86 and all(o.arch == "x86_64" for o in cheaper_x86)
    with pytest.raises(AirflowFailException, match="unknown architecture 'risc-v'"):
        _operator(arch="risc-v").execute(_context())


def test_fresh_cached_prices_replace_the_snapshot(env_ledger: Ledger) -> None:
    from costaware.adapters.price_source import PriceCache
    from costaware.core.ledger import utcnow
    from costaware.core.price_list import ListPrice

    before = _operator(deadline_hours="4").execute(_context())
    assert before["instance_type"] != "c5.xlarge"
    # A refresh says c5.xlarge now costs a tenth of the snapshot's price: it wins.
    cheap = bundled_catalog().on_demand_usd_per_hour("c5.xlarge", "us-east-1") / 10
    PriceCache(env_ledger).put(
        [ListPrice("ec2", "c5.xlarge", "us-east-1", cheap)], origin="aws-price-list", fetched_at=utcnow()
    )
    after = _operator(deadline_hours="4").execute(_context())
    assert (after["instance_type"], Decimal(after["usd_per_hour"])) == ("c5.xlarge", cheap)


def test_an_arm64_choice_without_arch_is_warned_about(
    env_ledger: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    sized = {"instance_types": None, "memory_gib": "64", "fallback_hours": "1", "for_task_id": "never_ran"}
    result = _operator(**sized).execute(_context())
    assert (
        bundled_catalog().offer(result["instance_type"], "us-east-1").arch == "arm64"
    )  # Graviton is cheapest
    logged = "".join(capsys.readouterr())  # the task's logger writes to the console here
    assert f"{result['instance_type']} is arm64 (Graviton)" in logged and "pass arch='x86_64'" in logged
    _operator(**sized, arch="arm64").execute(_context())  # asked for: nothing to warn about
    assert "is arm64 (Graviton)" not in "".join(capsys.readouterr())


def test_a_misspelt_for_task_id_and_a_bad_min_measured_tries_are_named(env_ledger: Ledger) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from costaware.core.errors import ConfigurationError

    with DAG("retrain", schedule=None):
        sizer = _operator(for_task_id="trian", fallback_hours="1")
        EmptyOperator(task_id="train")
    # It found no runs of "trian" and sized on fallback_hours alone, without a word.
    with pytest.raises(
        AirflowFailException, match=r"for_task_id 'trian' is not a task of DAG 'retrain' \(did"
    ):
        sizer.execute(_context())
    with pytest.raises(
        ConfigurationError, match="min_measured_tries must be a whole number of 1 or more, got 0"
    ):
        _operator(min_measured_tries=0)


@pytest.mark.parametrize(
    ("reference_type", "said"),
    [("m5.2xlarg", "did you mean m5.2xlarge"), ("m5", "instance family, not a type")],
)
def test_an_unknown_reference_type_is_refused_when_the_dag_is_parsed(reference_type: str, said: str) -> None:
    # Recorded runs size the job without reading reference_type, so a typo went unnoticed at run time.
    with pytest.raises(ConfigurationError) as refused:
        _operator(fallback_hours="0.5", reference_type=reference_type)
    assert f"reference_type {reference_type!r}" in str(refused.value)
    assert said in str(refused.value)
