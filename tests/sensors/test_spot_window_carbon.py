"""SpotWindowSensor with an objective: the start weighed on cost, carbon or both (bundled GB intensity)."""

from __future__ import annotations

import asyncio
import contextlib
import io
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from spot_history import now, write_history

from costaware.adapters.carbon_data import bundled_carbon
from costaware.adapters.spot_market import instance_power_kw
from costaware.core.errors import ConfigurationError
from costaware.sensors.spot_window import SpotWindowSensor
from costaware.triggers.spot_window import SpotWindowTrigger

# GB, 2023-03-09 15:00 UTC: 233 gCO2e/kWh, a run later that evening ~122 (the bundled data).
GB_FROM = datetime(2023, 3, 9, 15, tzinfo=timezone.utc)


def gb_restamped(path: Path, *, flat: bool = False) -> float:
    """The bundled GB intensity from ``GB_FROM`` restamped to start at this hour; the intensity now."""
    series = bundled_carbon("GB")
    hour = now().replace(minute=0, second=0)
    lines = ["timestamp_utc,g_co2eq_per_kwh_lca\n"]
    for h in range(-48, 49):
        value = series.price_at(GB_FROM if flat else GB_FROM + timedelta(hours=h))
        lines.append(f"{(hour + timedelta(hours=h)).strftime('%Y-%m-%dT%H:%M:%SZ')},{value}\n")
    path.write_text("".join(lines))
    return float(series.price_at(GB_FROM))


def clean_hour_then_dirty(path: Path) -> Path:
    """A made-up grid: this hour 100 gCO2e/kWh, the next two 500, every other hour 300."""
    hour = now().replace(minute=0, second=0)
    lines = ["timestamp_utc,g_co2eq_per_kwh_lca\n"]
    for h in range(-48, 49):
        value = {0: 100, 1: 500, 2: 500}.get(h, 300)
        lines.append(f"{(hour + timedelta(hours=h)).strftime('%Y-%m-%dT%H:%M:%SZ')},{value}\n")
    path.write_text("".join(lines))
    return path


def make_sensor(tmp_path: Path, **kwargs: Any) -> SpotWindowSensor:
    prices = tmp_path / "prices.csv"
    # The spot price now (0.50) is the lowest of its history: on price alone the sensor starts at once.
    write_history(prices, current="0.50")
    with DAG("spot_carbon_test", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=timezone.utc)):
        defaults: dict[str, Any] = {
            "task_id": "spot_window",
            "instance_type": "p3.2xlarge",
            "region": "us-east-1",
            "expected_runtime_hours": 1,
            "on_demand_usd_per_hour": "3.06",
            "restart_overhead_minutes": 0,
            "deferrable": True,
            "record_decision": False,
            "prices": str(prices),
            "deadline": (now() + timedelta(hours=10)).isoformat(),
        }
        return SpotWindowSensor(**{**defaults, **kwargs})


def test_carbon_waits_for_a_cleaner_hour_where_cost_starts_now(tmp_path: Path) -> None:
    carbon = tmp_path / "gb.csv"
    gb_restamped(carbon)
    cost = make_sensor(tmp_path).execute({"run_id": "manual__cost"})
    assert cost["market"] == "spot" and cost["usd_per_hour"] == "0.50"
    assert "objective" not in cost and "kg_co2e" not in cost  # the default changes nothing

    sensor = make_sensor(tmp_path, objective="carbon", carbon=str(carbon))
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"run_id": "manual__carbon"})
    trigger = deferred.value.trigger
    assert isinstance(trigger, SpotWindowTrigger)
    assert trigger.objective == "carbon" and trigger.carbon == str(carbon)
    power = instance_power_kw("p3.2xlarge", "us-east-1")
    # The forecast is in kg CO2e/hour of the instance at full power: cleaner hours lie ahead.
    later = min(Decimal(v) for _, v in trigger.forecast_starts)
    assert later < Decimal(repr(power * 233.33 / 1000)) * Decimal("0.7")
    # The trigger round-trips with its objective.
    classpath, kwargs = trigger.serialize()
    assert kwargs["objective"] == "carbon" and kwargs["power_kw"] == pytest.approx(power)
    assert SpotWindowTrigger(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.usefixtures("clock")
def test_cost_plus_carbon_at_price_zero_decides_as_cost_and_records_the_emissions(tmp_path: Path) -> None:
    carbon = tmp_path / "gb.csv"
    gb_restamped(carbon)
    at = now()
    cost = make_sensor(tmp_path).execute({"run_id": "manual__cost"})
    zero = make_sensor(
        tmp_path, objective="cost+carbon", carbon_usd_per_tonne="0", carbon=str(carbon)
    ).execute({"run_id": "manual__zero"})
    assert (zero["market"], zero["usd_per_hour"]) == (cost["market"], cost["usd_per_hour"])
    power = instance_power_kw("p3.2xlarge", "us-east-1")
    assert zero["objective"] == "cost+carbon"
    # The 1-hour run from now: the rest of this hour, and as much of the next.
    series, share_left = bundled_carbon("GB"), 1 - at.minute / 60 - at.second / 3600
    this_hour, next_hour = (float(series.price_at(GB_FROM + timedelta(hours=h))) for h in (0, 1))
    g_run = this_hour * share_left + next_hour * (1 - share_left)
    assert float(zero["kg_co2e"]) == pytest.approx(power * 1 * g_run / 1000, abs=0.002)


@pytest.mark.usefixtures("clock")  # one clock at HH:05, one at HH:30: the half hour to come, and gone by
def test_the_intensity_of_a_run_now_takes_the_half_hours_as_they_fall_not_clock_hour_means(
    tmp_path: Path,
) -> None:
    # A half-hourly file (the GB API's, imported): clock-hour means took in, at HH:40, the half hour gone
    # by, and at HH:05 weighed the half hour to come as much as the one in force.
    carbon = tmp_path / "half-hourly.csv"
    at = now()
    in_force = at.replace(minute=30 if at.minute >= 30 else 0, second=0, microsecond=0)
    lines = ["timestamp_utc,g_co2eq_per_kwh_lca\n"]
    for step in range(-8, 9):
        stamp = in_force + timedelta(minutes=30 * step)
        lines.append(f"{stamp.strftime('%Y-%m-%dT%H:%M:%SZ')},{100 if step == 0 else 400}\n")
    carbon.write_text("".join(lines))
    decision = make_sensor(
        tmp_path, objective="cost+carbon", carbon_usd_per_tonne="0", carbon=str(carbon)
    ).execute({"run_id": "manual__half_hours"})
    power = instance_power_kw("p3.2xlarge", "us-east-1")
    # The 1-hour run from now: the rest of the half hour in force at 100, the rest of the hour at 400.
    in_force_left = (in_force + timedelta(minutes=30) - at) / timedelta(hours=1)
    g_run = 100 * in_force_left + 400 * (1 - in_force_left)
    assert float(decision["kg_co2e"]) == pytest.approx(power * 1 * g_run / 1000, abs=0.002)


@pytest.mark.usefixtures("clock")
def test_a_clean_hour_before_dirty_ones_does_not_start_a_run_that_covers_them(tmp_path: Path) -> None:
    # Now 100 gCO2e/kWh, the next two hours 500, then 300: a 3-hour run now averages 333-400, a run from
    # 3 hours on 300. Valued at the instant (100), now beat every later start and the run started at once.
    carbon = clean_hour_then_dirty(tmp_path / "made-up.csv")
    sensor = make_sensor(tmp_path, objective="carbon", carbon=str(carbon), expected_runtime_hours=3)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"run_id": "manual__clean_hour"})
    trigger = deferred.value.trigger
    assert isinstance(trigger, SpotWindowTrigger)
    power = instance_power_kw("p3.2xlarge", "us-east-1")
    later = min(Decimal(v) for _, v in trigger.forecast_starts)
    assert later == Decimal(repr(power * 300 / 1000)).quantize(Decimal("0.000001"))


def test_carbon_starts_at_once_when_now_is_the_cleanest_hour(tmp_path: Path) -> None:
    carbon = tmp_path / "flat.csv"
    gb_restamped(carbon, flat=True)
    decision = make_sensor(tmp_path, objective="carbon", carbon=str(carbon)).execute({"run_id": "manual__c"})
    assert decision["market"] == "spot" and decision["usd_per_hour"] == "0.50"
    assert decision["objective"] == "carbon" and decision["reason"].startswith("carbon (kg CO2e/hour)")


def test_the_trigger_decides_on_the_objective(tmp_path: Path) -> None:
    carbon = tmp_path / "flat.csv"
    gb_restamped(carbon, flat=True)
    sensor = make_sensor(tmp_path, objective="carbon", carbon=str(carbon))
    plan = sensor._plan({"run_id": "manual__t"}, now())
    trigger = SpotWindowTrigger(
        on_demand_usd_per_hour=plan["on_demand_usd_per_hour"],
        forecast_starts=plan["forecast_starts"],
        latest_start=plan["latest_start"],
        not_before=None,
        poll_interval=0.1,
        **sensor._observe_kwargs(),
        **{k: plan[k] for k in ("objective", "carbon_usd_per_tonne", "carbon", "power_kw", "runtime_hours")},
    )

    async def first() -> dict[str, Any]:
        event = await asyncio.wait_for(trigger.run().__anext__(), 30)
        return dict(event.payload)

    event = asyncio.run(first())
    assert event["status"] == "success"
    assert event["decision"]["objective"] == "carbon" and event["decision"]["market"] == "spot"


@pytest.mark.usefixtures("clock")
def test_the_trigger_values_a_start_now_over_the_run(tmp_path: Path) -> None:
    # At its latest start the trigger starts now, and records the run's kg CO2e: of the 3 hours it covers
    # (333-400 gCO2e/kWh on average), not of the clean instant it starts in (100).
    carbon = clean_hour_then_dirty(tmp_path / "made-up.csv")
    sensor = make_sensor(tmp_path, objective="carbon", carbon=str(carbon), expected_runtime_hours=3)
    at = now()
    plan = sensor._plan({"run_id": "manual__t"}, at)
    trigger = SpotWindowTrigger(
        on_demand_usd_per_hour=plan["on_demand_usd_per_hour"],
        forecast_starts=plan["forecast_starts"],
        latest_start=at.isoformat(),
        not_before=None,
        poll_interval=0.1,
        **sensor._observe_kwargs(),
        **{k: plan[k] for k in ("objective", "carbon_usd_per_tonne", "carbon", "power_kw", "runtime_hours")},
    )

    async def first() -> dict[str, Any]:
        event = await asyncio.wait_for(trigger.run().__anext__(), 30)
        return dict(event.payload)

    decision = asyncio.run(first())["decision"]
    share = at.minute / 60 + at.second / 3600  # of this hour gone by: the run ends as far into the third
    g_run = (100 * (1 - share) + 500 + 500 + 300 * share) / 3
    power = instance_power_kw("p3.2xlarge", "us-east-1")
    assert float(decision["kg_co2e"]) == pytest.approx(power * 3 * g_run / 1000, abs=0.002)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"objective": "greenest"}, "objective 'greenest' is not one of"),
        ({"objective": "cost+carbon", "carbon": "GB"}, "needs carbon_usd_per_tonne"),
        ({"objective": "cost+carbon", "carbon_usd_per_tonne": "-5", "carbon": "GB"}, "'-5'"),
        ({"objective": "carbon"}, "region 'us-east-1' has no known grid zone: pass carbon="),
        ({"objective": "carbon", "carbon": "XX"}, "no bundled carbon intensity for grid zone 'XX'"),
    ],
)
def test_bad_objective_arguments_fail_the_task_naming_the_value(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    sensor = make_sensor(tmp_path)
    for name, value in kwargs.items():  # as rendered: written out, a bad objective fails the DAG's parse
        setattr(sensor, name, value)
    with pytest.raises(AirflowFailException, match=message):
        sensor.execute({"run_id": "manual__bad"})


def test_an_imported_zone_written_in_another_case_is_named_when_parsed_and_when_rendered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "pl" for an imported "PL" was refused as not bundled, naming only the bundled zones.
    from costaware.cli import main

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    recorded = tmp_path / "PL_2026.csv"
    gb_restamped(recorded)
    assert main(["carbon", "import", str(recorded), "--zone", "PL"]) == 0
    hint = "grid zone 'pl': did you mean 'PL', imported with `costaware carbon import`"
    with pytest.raises(ConfigurationError, match=hint):
        make_sensor(tmp_path, objective="carbon", carbon="pl")
    sensor = make_sensor(tmp_path, objective="carbon", carbon="{{ params.zone }}")
    sensor.carbon = "pl"  # as rendered
    with pytest.raises(AirflowFailException, match=hint):
        sensor.execute({"run_id": "manual__pl"})
    assert make_sensor(tmp_path, objective="carbon", carbon="PL").carbon == "PL"


@pytest.mark.parametrize("rendered", ["None", "null", " None "])
def test_a_grid_zone_rendered_from_an_unset_param_is_the_regions(tmp_path: Path, rendered: str) -> None:
    # As the remote training's plan reads it: "None" was looked up as a grid zone of that name.
    sensor = make_sensor(tmp_path, objective="carbon", carbon="{{ params.zone }}")
    sensor.carbon = rendered  # as Airflow renders it
    with pytest.raises(AirflowFailException, match="region 'us-east-1' has no known grid zone: pass carbon="):
        sensor.execute({"run_id": "manual__unset_zone"})


@pytest.mark.parametrize("written", ["None", "null", " null "])
def test_a_grid_zone_written_out_as_not_given_is_read_at_parse_as_the_run_reads_it(
    tmp_path: Path, written: str
) -> None:
    # The parse looked it up as a zone named 'None' (or refused it beside 'cost') where the run reads the
    # region's zone.
    assert make_sensor(tmp_path, objective="cost", carbon=written).carbon == written
    assert make_sensor(tmp_path, objective="carbon", carbon=written, region="us-west-1").carbon == written
    with pytest.raises(ConfigurationError, match="region 'us-east-1' has no known grid zone: pass carbon="):
        make_sensor(tmp_path, objective="carbon", carbon=written)


@pytest.mark.parametrize("deadline_hours", [10, 16 * 24], ids=["hours-ahead", "past-two-weeks"])
def test_the_sensor_follows_an_import_as_far_as_its_decision_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deadline_hours: int
) -> None:
    # Each plan and each poke read a year of the import (8,800 points, 0.06-0.18 s) to value the starts up
    # to a deadline hours away. Followed as far as the starts and the run read, they are valued alike.
    import costaware.adapters.spot_market as market  # the sensor reads through window_carbon_intensity
    from costaware.adapters.spot_market import intensity_of_run
    from costaware.cli import main

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    at = now()
    hour = at.replace(minute=0, second=0)
    imported = tmp_path / "gb.csv"
    rows = [f"{hour + timedelta(hours=h):%Y-%m-%dT%H:%M:%SZ},{100 + 50 * (h % 7)}\n" for h in range(-24, 48)]
    imported.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "".join(rows))
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["carbon", "import", str(imported), "--zone", "GB"]) == 0
    sensor = make_sensor(
        tmp_path,
        objective="carbon",
        carbon="GB",
        expected_runtime_hours=3,
        deadline=(at + timedelta(hours=deadline_hours)).isoformat(),
    )
    read = market.carbon_intensity
    reads: list[tuple[datetime | None, Any]] = []

    def reading(*args: Any, **kwargs: Any) -> Any:
        reads.append((kwargs.get("until"), read(*args, **kwargs)))
        return reads[-1][1]

    def a_year_of_it(*args: Any, until: datetime | None = None, **kwargs: Any) -> Any:
        return reading(*args, **kwargs)

    monkeypatch.setattr(market, "carbon_intensity", reading)
    plan = sensor._plan({"run_id": "manual__horizon"}, at)
    decision = sensor._decide_now(plan, at)
    assert len(plan["forecast_starts"]) > deadline_hours - 10
    assert [until is not None and len(series.points) < 24 * 300 for until, series in reads] == [True, True]
    monkeypatch.setattr(market, "carbon_intensity", a_year_of_it)
    assert sensor._plan({"run_id": "manual__horizon"}, at) == plan
    assert sensor._decide_now(plan, at) == decision
    assert [len(series.points) > 24 * 365 for _, series in reads[2:]] == [True, True]
    now_read, now_year = (intensity_of_run(reads[i][1], at, 3) for i in (1, 3))
    assert now_read is not None and now_read == now_year


@pytest.mark.parametrize(
    ("days_ahead", "deadline_hours"),
    [(30, 10), (200, 10), (15, 16 * 24)],
    ids=["import-a-month-ahead", "import-200-days-ahead", "import-inside-a-16-day-window"],
)
def test_the_trigger_reads_a_run_now_as_the_sensors_poke_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, days_ahead: int, deadline_hours: int
) -> None:
    # PL has no typical year: an import starting 14-366 days ahead is read as the lead before it. The poke
    # followed it as far as its run reads (two weeks), the trigger a year: off the hour (03:30) the poke read
    # 96.5 gCO2e/kWh for a run now and the trigger 96.0, and on the same plan one waited, the other started.
    # Both read it as far as the plan does (its latest start and the run), also past two weeks.
    import time_machine

    import costaware.sensors.spot_window_market as market
    import costaware.triggers.spot_window as trigger_module
    from costaware.cli import main

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    at = datetime(2026, 11, 21, 3, 30, tzinfo=timezone.utc)
    first = (at + timedelta(days=days_ahead)).replace(hour=0, minute=0)
    imported = tmp_path / "pl.csv"
    rows = [f"{first + timedelta(hours=h):%Y-%m-%dT%H:%M:%SZ},{100 - h % 24}\n" for h in range(48)]
    imported.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "".join(rows))
    seen: dict[str, list[tuple[float | None, Any]]] = {"sensor": [], "trigger": []}

    class Polled(Exception):
        """The trigger's first decision was taken."""

    def spying(side: str, decide: Any) -> Any:
        def deciding(**kwargs: Any) -> Any:
            seen[side].append((kwargs["g_co2e_per_kwh"], decide(**kwargs)))
            if side == "trigger":
                raise Polled  # one poll is enough: a decision to wait would poll again
            return seen[side][-1][1]

        return deciding

    monkeypatch.setattr(market, "decide_on_objective", spying("sensor", market.decide_on_objective))
    monkeypatch.setattr(
        trigger_module, "decide_on_objective", spying("trigger", trigger_module.decide_on_objective)
    )
    # The clock stands still: the trigger polls at the instant the sensor decided at.
    with time_machine.travel(at, tick=False):
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["carbon", "import", str(imported), "--zone", "PL"]) == 0
        sensor = make_sensor(
            tmp_path,
            objective="carbon",
            carbon="PL",
            expected_runtime_hours=2,
            deadline=(at + timedelta(hours=deadline_hours)).isoformat(),
        )
        plan = sensor._plan({"run_id": "manual__pl_ahead"}, at)
        sensor._decide_now(plan, at)  # the poke's run-now intensity, to place the forecast minimum by
        g_sensor = seen["sensor"][-1][0]
        assert g_sensor is not None
        # A start at 04:00 forecast just under a run now as the poke reads it: the poke waits for it.
        power = float(plan["power_kw"])
        plan["forecast_starts"] = [
            [(at + timedelta(minutes=30)).isoformat(), f"{power * (g_sensor - 0.25) / 1000:.6f}"]
        ]
        poke = sensor._decide_now(plan, at)
        trigger = SpotWindowTrigger(
            on_demand_usd_per_hour=plan["on_demand_usd_per_hour"],
            forecast_starts=plan["forecast_starts"],
            latest_start=plan["latest_start"],
            not_before=None,
            poll_interval=0.1,
            **sensor._observe_kwargs(),
            **{
                k: plan[k]
                for k in ("objective", "carbon_usd_per_tonne", "carbon", "power_kw", "runtime_hours")
            },
        )
        with pytest.raises(Polled):
            asyncio.run(asyncio.wait_for(trigger.run().__anext__(), 30))
    assert poke is None
    g_trigger, polled = seen["trigger"][0]
    assert (g_trigger, polled) == (g_sensor, poke)
