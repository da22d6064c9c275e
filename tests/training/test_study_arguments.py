from __future__ import annotations

from typing import Any

import pytest

from costaware.adapters.price_files import bundled_catalog
from costaware.core.errors import ConfigurationError
from costaware.training.study_arguments import StudyArguments


def _arguments(**overrides: Any) -> StudyArguments:
    values: dict[str, Any] = {
        "study_name": "s1",
        "search_space": {"lr": {"type": "float", "low": 0.01, "high": 0.3}},
        "min_resource": 2,
        "max_resource": 16,
        "reduction_factor": 2,
        "max_rungs": None,
        "max_usd": "5",
        "max_trials": 6,
        "max_gpu_hours": None,
        "max_wall_seconds": None,
        "plateau_trials": None,
        "plateau_min_delta": 0.0,
        "direction": "maximize",
        "pruner": "successive_halving",
        "sampler": "random",
        "seed": 3,
        "scope": {},
        "instance_type": "m5.large",
        "region": "us-east-1",
        "market": "on_demand",
        "usd_per_hour": None,
        "fallback_trial_seconds": 5,
        "safety_factor": 1.5,
        "slack_seconds": 2.0,
    }
    values.update(overrides)
    return StudyArguments(**values)


@pytest.mark.parametrize("rendered", [None, "", " ", "None", "None ", "null", " null"])
@pytest.mark.parametrize("market", ["on_demand", "spot"])
def test_a_usd_per_hour_rendered_from_an_unset_param_is_the_catalog_price(rendered: Any, market: str) -> None:
    # What a template of an unset param renders ("None", "null" through | tojson, with spaces): the
    # catalog's price, as try_pricing reads it; " " and "null" failed the plan as "not a number of USD".
    catalog = bundled_catalog()
    expected = (
        catalog.spot_estimate_usd_per_hour("m5.large", "us-east-1")
        if market == "spot"
        else catalog.on_demand_usd_per_hour("m5.large", "us-east-1")
    )
    spec = _arguments(usd_per_hour=rendered, market=market).spec()
    assert spec.usd_per_hour == expected
    assert spec.market == market


def test_a_given_usd_per_hour_is_the_studys_price() -> None:
    assert str(_arguments(usd_per_hour=" 36 ").spec().usd_per_hour) == "36"


@pytest.mark.parametrize("rendered", ["none", "NULL", "abc"])
def test_a_usd_per_hour_no_template_renders_of_an_unset_param_is_refused_naming_it(rendered: str) -> None:
    with pytest.raises(ConfigurationError, match=f"usd_per_hour must be a number of USD .*got '{rendered}'"):
        _arguments(usd_per_hour=rendered).spec()


@pytest.mark.parametrize("rendered", ["", " ", "None", "None ", "null", " null"])
@pytest.mark.parametrize(
    ("name", "default"), [("market", "on_demand"), ("instance_type", "m5.large"), ("region", "us-east-1")]
)
def test_a_compute_rendered_from_an_unset_param_is_its_default(
    name: str, default: str, rendered: str
) -> None:
    # As usd_per_hour is the catalog's: market='None' failed the plan as "unknown market 'None'", while
    # usd_per_hour='None' beside it took the catalog's price.
    given = {"instance_type": "p3.2xlarge", "region": "eu-west-1", "market": "spot", name: rendered}
    spec = _arguments(**given).spec()
    expected = {"instance_type": "p3.2xlarge", "region": "eu-west-1", "market": "spot", name: default}
    assert (spec.instance_type, spec.region, spec.market) == (
        expected["instance_type"],
        expected["region"],
        expected["market"],
    )
    catalog = bundled_catalog()
    spot = expected["market"] == "spot"
    price = catalog.spot_estimate_usd_per_hour if spot else catalog.on_demand_usd_per_hour
    assert spec.usd_per_hour == price(expected["instance_type"], expected["region"])
    assert spec.gpus == catalog.offer(expected["instance_type"], expected["region"]).gpus
