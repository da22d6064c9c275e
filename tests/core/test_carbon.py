"""Emissions and the one objective (core.carbon) on the bundled carbon data (adapters.carbon_data)."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from costaware.adapters.carbon_data import (
    bundled_carbon,
    bundled_zones,
    carbon_from_text,
    grid_zone,
    machine_of,
    power_model,
)
from costaware.adapters.price_files import bundled_catalog
from costaware.core.carbon import Machine, Objective, emissions
from costaware.core.errors import ConfigurationError, InvalidPriceDataError


def test_the_objectives_value_an_hour_in_their_own_unit() -> None:
    assert Objective.parse("cost").hourly_value(2.0, 0.5, None) == 2.0
    assert Objective.parse("carbon").hourly_value(2.0, 0.5, 400.0) == pytest.approx(0.2)  # kg/h
    both = Objective.parse("cost+carbon", "100")
    assert both.hourly_value(2.0, 0.5, 400.0) == pytest.approx(2.0 + 100 * 0.2 / 1000)
    assert both.unit == "USD" and Objective.parse("carbon").unit == "kg CO2e"
    # Read as every amount of money is ('$100' was refused where --cap-usd '$1,000' was taken).
    assert Objective.parse("cost+carbon", "$100") == both
    assert Objective.parse("cost+carbon", "1,000").carbon_usd_per_tonne == 1000.0


@pytest.mark.parametrize(
    ("name", "price", "message"),
    [
        ("greenest", None, "objective 'greenest' is not one of cost, carbon, cost\\+carbon"),
        (
            "Cost + Carbon",
            100,
            "objective 'Cost \\+ Carbon' is not one of .* \\(did you mean 'cost\\+carbon'\\?\\)",
        ),
        ("cost+carbon", None, "needs carbon_usd_per_tonne"),
        ("cost+carbon", "-5", "carbon_usd_per_tonne='-5' is not a price in USD per tonne CO2e from 0 to"),
        # Too large was "not a price >= 0" (it is above zero): the range is said.
        ("cost+carbon", "1e300", "carbon_usd_per_tonne='1e300' is not .* from 0 to 1,000,000"),
        ("cost+carbon", "lots", "carbon_usd_per_tonne='lots' is not a price"),
    ],
)
def test_bad_objectives_are_refused_by_name(name: str, price: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Objective.parse(name, price)


def test_an_unknown_intensity_is_an_error_for_carbon_and_unknown_in_an_estimate() -> None:
    with pytest.raises(ConfigurationError, match="carbon intensity of this hour, and it is unknown"):
        Objective.parse("carbon").hourly_value(1.0, 1.0, None)
    unknown = emissions(1.5, None, method="m", source="s")
    assert unknown.kg_co2e is None and unknown.kwh == Decimal("1.5") and "unknown" in unknown.reason
    assert emissions(1.5, 200.0, method="m", source="s").kg_co2e == Decimal("0.3")


def test_power_grows_with_utilization_and_counts_gpus_at_board_power() -> None:
    model = power_model()
    cpu = Machine(vcpus=8, memory_gib=32)
    idle, busy = model.power_kw(cpu, 0.0), model.power_kw(cpu, 1.0)
    assert idle == pytest.approx(1.135 * (8 * 0.74 + 32 * 0.392) / 1000)
    assert busy == pytest.approx(1.135 * (8 * 3.5 + 32 * 0.392) / 1000)
    p3 = machine_of(bundled_catalog().offer("p3.2xlarge", "us-east-1"))
    assert p3.gpu_model == "V100" and model.power_kw(p3, 0.0) > 0.3  # a V100 at 300 W dominates
    assert "1 x V100 at full power" in model.method(p3, gpu_measured=False)
    # g6f sells an eighth of an L4: it draws an eighth of the L4's power, not none (as a count of 0 did).
    g6f = machine_of(bundled_catalog().offer("g6f.large", "us-east-1"))
    without_gpu = model.power_kw(Machine(vcpus=g6f.vcpus, memory_gib=g6f.memory_gib), 1.0)
    assert model.power_kw(g6f, 1.0) - without_gpu == pytest.approx(1.135 * 0.125 * 72 / 1000)
    assert "0.125 x L4 at full power" in model.method(g6f, gpu_measured=False)
    g5g = machine_of(bundled_catalog().offer("g5g.xlarge", "us-east-1"))
    assert "1 x T4G at full power" in model.method(g5g, gpu_measured=False)  # not "as default" (300 W)
    with pytest.raises(ConfigurationError, match=r"utilization -0\.1"):
        model.power_kw(cpu, -0.1)


def test_bundled_intensity_and_grid_zones() -> None:
    assert bundled_zones() == ["AU-NSW", "DE-LU", "GB", "US-CAL-CISO"]
    gb = bundled_carbon("GB")
    assert float(gb.price_at(datetime(2023, 1, 1, 0, 30, tzinfo=timezone.utc))) == pytest.approx(91.44)
    assert grid_zone("eu-west-2") == "GB" and grid_zone("us-east-1") is None
    with pytest.raises(ConfigurationError, match="no bundled carbon intensity for grid zone 'FR'"):
        bundled_carbon("FR")


def test_a_recorded_file_missing_its_column_is_named() -> None:
    with pytest.raises(InvalidPriceDataError, match=r"x\.csv: carbon intensity CSV lacks column"):
        carbon_from_text("timestamp_utc,g\n2023-01-01T00:00:00Z,1\n", source="x.csv")
    with pytest.raises(ConfigurationError, match="carbon basis 'both'"):
        carbon_from_text("", source="x.csv", basis="both")


def test_an_intensity_no_grid_has_is_refused_with_its_hour() -> None:
    # 1e308 was imported, and every later sum over it raised decimal.InvalidOperation far from the file.
    text = "timestamp_utc,g_co2eq_per_kwh_lca\n2023-01-01T00:00:00Z,100\n2023-01-01T01:00:00Z,1e308\n"
    with pytest.raises(
        InvalidPriceDataError, match=r"x\.csv: g_co2eq_per_kwh_lca 1E\+308 at 2023-01-01 01:00"
    ):
        carbon_from_text(text, source="x.csv")
    for zone in ("GB", "DE-LU", "US-CAL-CISO", "AU-NSW"):  # the bundled years load, lca and direct
        assert bundled_carbon(zone, "lca") and bundled_carbon(zone, "direct")


@pytest.mark.parametrize("rendered", [None, "", " ", "None", "None ", "null", " null "])
def test_a_carbon_price_rendered_from_an_unset_param_is_not_given(rendered: object) -> None:
    # What a template of an unset param renders, as the remote training's plan reads it: "null" was
    # refused as "not a price" (and " " read as one by check_settings_used) before the plan ran.
    assert Objective.parse("cost", rendered) == Objective("cost", 0.0)
    Objective.parse("carbon", rendered).check_settings_used(rendered)
    with pytest.raises(ConfigurationError, match="objective 'cost\\+carbon' needs carbon_usd_per_tonne"):
        Objective.parse("cost+carbon", rendered)


@pytest.mark.parametrize("given", ["", " ", "null"])
def test_cost_carbon_without_a_carbon_price_names_what_was_given(given: str) -> None:
    with pytest.raises(ConfigurationError, match=f"e.g. 100\\), got '{given}' \\(not given\\)"):
        Objective.parse("cost+carbon", given)


@pytest.mark.parametrize("given", ["none", "NULL"])
def test_a_carbon_price_no_template_renders_of_an_unset_param_is_refused_naming_it(given: str) -> None:
    with pytest.raises(ConfigurationError, match=f"carbon_usd_per_tonne='{given}' is not a price"):
        Objective.parse("cost", given)


@pytest.mark.parametrize("rendered", [None, "", " ", "None", "None ", "null", " null "])
def test_an_objective_rendered_from_an_unset_param_is_cost(rendered: object) -> None:
    # As RemoteTrainingOperator's plan reads it (blank); its check after rendering refused "None" first.
    assert Objective.parse(rendered) == Objective("cost", 0.0)
    assert Objective.parse(rendered, "null") == Objective("cost", 0.0)


@pytest.mark.parametrize("given", ["none", "NULL"])
def test_an_objective_no_template_renders_of_an_unset_param_is_refused_naming_it(given: str) -> None:
    with pytest.raises(ConfigurationError, match=f"objective '{given}' is not one of"):
        Objective.parse(given)
