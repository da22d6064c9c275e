from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.api.datamodels._generated import DagRunType
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from spot_decisions import SENSOR_XCOM_KEYS  # tests/support/
from spot_history import append, now, write_history

from costaware.adapters import spot_prices
from costaware.adapters.ledger.store import Ledger
from costaware.core.errors import ConfigurationError
from costaware.sensors.spot_window import SpotWindowSensor
from costaware.triggers.spot_window import SpotWindowTrigger

ROOT = Path(__file__).resolve().parents[2]

# The window, the forecast and the fallback all depend on the hour: every test here runs under each of the
# suite's clocks (tests/conftest.py), so that none passes only at some hours of the day.
pytestmark = pytest.mark.usefixtures("clock")


@pytest.fixture
def ledger_env(monkeypatch: pytest.MonkeyPatch, ledger_url: str) -> Ledger:
    monkeypatch.setenv("COSTAWARE_LEDGER_URL", ledger_url)
    return Ledger.from_url(ledger_url)


def make_sensor(**kwargs: Any) -> SpotWindowSensor:
    with DAG("spot_window_test", schedule=None, start_date=datetime(2025, 1, 1, tzinfo=timezone.utc)):
        defaults: dict[str, Any] = {
            "task_id": "spot_window",
            "instance_type": "p3.2xlarge",
            "region": "us-east-1",
            "expected_runtime_hours": 1,
            "on_demand_usd_per_hour": "3.06",
            "restart_overhead_minutes": 0,
            "deferrable": True,
            "poke_interval": 0.2,
        }
        return SpotWindowSensor(**{**defaults, **kwargs})


def context(**extra: Any) -> dict[str, Any]:
    return {"run_id": "manual__test", **extra}


def run_trigger(trigger: SpotWindowTrigger, *, during: Any = None, timeout: float = 30) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(trigger.run().__anext__())
        if during is not None:
            await asyncio.sleep(0.5)
            assert not task.done(), "the trigger decided before the price changed"
            during()
        event = await asyncio.wait_for(task, timeout)
        return dict(event.payload)

    return asyncio.run(go())


def test_defers_then_starts_on_spot_when_the_price_drops(tmp_path: Path, ledger_env: Ledger) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00")
    sensor = make_sensor(prices=str(prices), deadline=(now() + timedelta(hours=30)).isoformat())
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, SpotWindowTrigger)
    assert deferred.value.method_name == "execute_complete"
    forecast_min = min(Decimal(v) for _, v in trigger.forecast_starts)
    assert forecast_min < Decimal("1.00")  # the nightly cheap hour is in the forecast
    event = run_trigger(trigger, during=lambda: append(prices, "0.40"))
    assert event["status"] == "success"
    assert event["decision"]["market"] == "spot"
    assert event["decision"]["usd_per_hour"] == "0.40"
    result = sensor.execute_complete(context(), event=event, **deferred.value.kwargs)
    assert result["market"] == "spot" and result["estimated_usd"] == "0.400000"
    assert "forecast minimum" in result["reason"]
    entries = ledger_env.entries(dag_id="spot_window_test")
    assert len(entries) == 1
    entry = entries[0]
    assert entry["estimated"] and entry["market"] == "spot" and entry["kind"] == "compute"
    assert Decimal(str(entry["usd"])) == Decimal("0.4")
    # Resuming twice (e.g. a retried execute_complete) records the decision once.
    sensor.execute_complete(context(), event=event, **deferred.value.kwargs)
    assert len(ledger_env.entries(dag_id="spot_window_test")) == 1


def test_a_resume_without_the_plan_repeats_no_warning_of_the_wait(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], clock: Any
) -> None:
    # `airflow dags test` resumes with the event alone, in a new process: the plan was rebuilt at the resume,
    # after the trigger's on-demand choice at the latest start, and warned that "no time is left to wait
    # for spot ... give a later deadline" of a run that had waited as it should.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")  # above the forecast: waits
    deadline = (now() + timedelta(hours=6)).isoformat()
    with pytest.raises(TaskDeferred) as deferred:
        make_sensor(prices=str(prices), deadline=deadline).execute(context())
    clock.shift(timedelta(hours=5, minutes=1))  # past the latest start (deadline - 1 hour)
    event = run_trigger(deferred.value.trigger)
    assert event["decision"]["market"] == "on_demand"
    capsys.readouterr()
    resumed = make_sensor(prices=str(prices), deadline=deadline).execute_complete(context(), event=event)
    assert resumed["market"] == "on_demand"
    assert "[warning" not in capsys.readouterr().out


def test_sensor_trigger_and_resume_watch_make_the_same_decision(
    tmp_path: Path, ledger_env: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from costaware.adapters.spot_market import observe_market
    from costaware.core.spot_window import SpotDecision, decide
    from costaware.triggers import remote_training
    from costaware.triggers import spot_window as trigger_module

    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.30")  # below the forecast minimum (0.50): spot now
    at = now()
    sensor = make_sensor(prices=str(prices), deadline=(at + timedelta(hours=12)).isoformat())
    plan = sensor._plan(context(), at)
    latest = datetime.fromisoformat(plan["latest_start"])
    on_demand = Decimal(plan["on_demand_usd_per_hour"])
    seen = observe_market(now=at, on_demand_usd_per_hour=on_demand, **sensor._observe_kwargs())
    expected = decide(
        now=at,
        observation=seen,
        on_demand_usd_per_hour=on_demand,
        forecast_starts=plan["forecast_starts"],
        target_usd_per_hour=None,
        latest_start=latest,
        not_before=None,
    )
    assert expected is not None and expected.market == "spot" and expected.usd_per_hour == Decimal("0.30")

    from_sensor = sensor._decide_now(plan, at)

    monkeypatch.setattr(trigger_module, "utcnow", lambda: at)
    trigger = sensor._trigger(plan)  # as the sensor defers with it
    from_trigger = SpotDecision.from_xcom(run_trigger(trigger)["decision"])

    watch = {"mode": "resume", "on_demand_usd_per_hour": plan["on_demand_usd_per_hour"]}
    resumed = remote_training.price_event(
        {**watch, "latest_resume": plan["latest_start"]},
        {},
        now=at,
        usd_per_hour=seen.usd_per_hour,
        available=seen.available,
        source=seen.source,
        forecast_starts=plan["forecast_starts"],
    )
    assert resumed is not None
    from_watch = SpotDecision.from_xcom(resumed["resume"])

    assert from_sensor == from_trigger == from_watch == expected

    result = sensor.execute(context())  # at once: the same price is still in force
    assert sorted(result) == sorted(SENSOR_XCOM_KEYS)
    assert result["market"] == "spot" and result["usd_per_hour"] == "0.30"
    assert result["estimated_usd"] == "0.300000" and result["availability_zone"] == ""


def test_falls_back_to_on_demand_before_the_deadline(tmp_path: Path, ledger_env: Ledger) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="5.00")  # above on-demand: no useful spot capacity
    # One hour of work, deadline in 1 h 3 s: the latest safe start is 3 s away, and spot never comes back.
    sensor = make_sensor(prices=str(prices), deadline=(now() + timedelta(hours=1, seconds=3)).isoformat())
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context())
    event = run_trigger(deferred.value.trigger)
    assert event["decision"]["market"] == "on_demand"
    assert "miss the deadline" in event["decision"]["reason"]
    result = sensor.execute_complete(context(), event=event, **deferred.value.kwargs)
    assert result["usd_per_hour"] == "3.06" and result["estimated_usd"] == "3.060000"
    assert ledger_env.entries(dag_id="spot_window_test")[0]["market"] == "on_demand"


def test_target_price_starts_at_once_without_deferring(tmp_path: Path, ledger_env: Ledger) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.90")
    sensor = make_sensor(
        prices=str(prices), deadline=(now() + timedelta(hours=12)).isoformat(), target_usd_per_hour="0.95"
    )
    result = sensor.execute(context())
    assert result["market"] == "spot" and "target" in result["reason"]


def test_poke_mode_returns_the_decision(tmp_path: Path, ledger_env: Ledger) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.30")
    sensor = make_sensor(
        prices=str(prices), deadline=(now() + timedelta(hours=12)).isoformat(), deferrable=False
    )
    poked = sensor.poke(context())
    assert not isinstance(poked, bool)
    assert poked.is_done and poked.xcom_value["market"] == "spot"


@pytest.mark.parametrize("unset", ["None", "null", ""])
def test_prices_a_template_of_an_unset_param_rendered_are_unset(
    tmp_path: Path, ledger_env: Ledger, unset: str
) -> None:
    # "{{ params.target }}" with the param left blank: the run failed ("target_usd_per_hour 'None' is not a
    # price"), where the deadline, earliest_start and zone rendered so meant "not given".
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.30")
    sensor = make_sensor(prices=str(prices), deadline="{{ params.deadline }}", deferrable=False)
    sensor.deadline = (now() + timedelta(hours=12)).isoformat()
    sensor.target_usd_per_hour = sensor.on_demand_usd_per_hour = unset  # as rendered
    sensor.earliest_start = sensor.availability_zone = unset
    poked = sensor.poke(context())
    assert not isinstance(poked, bool) and poked.is_done
    decision = poked.xcom_value
    assert decision["market"] == "spot" and "target" not in decision["reason"]
    from costaware.adapters.price_files import bundled_catalog

    listed = bundled_catalog().on_demand_usd_per_hour("p3.2xlarge", "us-east-1")
    assert Decimal(decision["on_demand_usd_per_hour"]) == listed  # the list price, as when not given


@pytest.mark.parametrize("unset", [" ", "None ", "null", " null "])
@pytest.mark.parametrize(
    "name", ["availability_zone", "earliest_start", "target_usd_per_hour", "on_demand_usd_per_hour"]
)
def test_each_value_rendered_from_an_unset_param_is_not_given(
    tmp_path: Path, ledger_env: Ledger, name: str, unset: str
) -> None:
    # As the bill and the remote training read it (core.given, stripped): " " was a zone, an instant or a
    # price to parse, and failed the run.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.30")
    deadline = (now() + timedelta(hours=12)).isoformat()
    sensor = make_sensor(prices=str(prices), deadline=deadline, deferrable=False)
    setattr(sensor, name, unset)  # as rendered
    poked = sensor.poke(context())
    assert not isinstance(poked, bool) and poked.is_done
    decision = poked.xcom_value
    assert decision["market"] == "spot" and "target" not in decision["reason"]
    if name == "on_demand_usd_per_hour":
        from costaware.adapters.price_files import bundled_catalog

        listed = bundled_catalog().on_demand_usd_per_hour("p3.2xlarge", "us-east-1")
        assert Decimal(decision["on_demand_usd_per_hour"]) == listed  # the list price, as when not given


@pytest.mark.parametrize("unset", [" ", "None ", "null", " null "])
def test_a_deadline_rendered_from_an_unset_param_is_the_end_of_the_runs_data_interval(
    tmp_path: Path, ledger_env: Ledger, unset: str
) -> None:
    # As the bill and the remote training read it (core.given): not given, not an instant to parse.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.30")
    sensor = make_sensor(prices=str(prices), deadline="{{ params.deadline }}", deferrable=False)
    sensor.deadline = unset  # as rendered
    end = (now() + timedelta(hours=12)).replace(microsecond=0)
    poked = sensor.poke(context(data_interval_start=end - timedelta(hours=24), data_interval_end=end))
    assert not isinstance(poked, bool) and poked.is_done
    assert poked.xcom_value["market"] == "spot"
    assert datetime.fromisoformat(poked.xcom_value["deadline"]) == end


def test_waits_for_the_window_to_open(tmp_path: Path, ledger_env: Ledger) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")  # cheap now, but the window has not opened
    sensor = make_sensor(
        prices=str(prices),
        earliest_start=(now() + timedelta(seconds=2)).isoformat(),
        deadline=(now() + timedelta(hours=8)).isoformat(),
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context())
    started = now()
    event = run_trigger(deferred.value.trigger)
    assert event["decision"]["market"] == "spot"
    assert datetime.fromisoformat(event["decision"]["decided_at"]) >= started


def test_live_prices_from_ec2_through_the_amazon_hook(moto_aws_conn: str, ledger_env: Ledger) -> None:
    spot_prices.clear_cache()
    sensor = make_sensor(
        instance_type="g4dn.8xlarge",  # moto offers it in us-east-1 (it has no p3.2xlarge there)
        prices="live",
        aws_conn_id="moto_aws",
        deadline=(now() + timedelta(hours=8)).isoformat(),
    )
    # moto returns one generated price (0.00001 USD/h) per zone: at the forecast minimum, so spot at once.
    result = sensor.execute(context())
    assert result["market"] == "spot" and Decimal(result["usd_per_hour"]) == Decimal("0.00001")
    (row,) = ledger_env.entries(dag_id="spot_window_test")
    assert row["price_source"] == "live-ec2" and "live EC2" in row["note"]


def test_live_history_is_fetched_once_per_cache_period_not_at_every_look(moto_aws_conn: str) -> None:
    from costaware.adapters.spot_market import spot_history

    spot_prices.clear_cache()
    period_start = datetime(2026, 11, 24, 0, 30, tzinfo=timezone.utc)

    def look(at: datetime) -> Any:
        return spot_history(
            prices="live",
            instance_type="g4dn.8xlarge",
            region="us-east-1",
            aws_conn_id="moto_aws",
            ttl_seconds=300,
            products=["Linux/UNIX"],
            now=at,
            history_days=14,
        )

    for seconds in (0, 30, 299):
        assert look(period_start + timedelta(seconds=seconds)).series("g4dn.8xlarge", "us-east-1", None)
    assert len(spot_prices._CACHE) == 1  # three looks in one 5-minute period: one query
    look(period_start + timedelta(seconds=300))
    assert len(spot_prices._CACHE) == 2  # the next period asks again


def test_trigger_round_trips_by_class_path_in_a_fresh_interpreter(tmp_path: Path) -> None:
    trigger = SpotWindowTrigger(
        instance_type="p3.2xlarge",
        region="us-east-1",
        availability_zone=None,
        prices="live",
        on_demand_usd_per_hour="3.06",
        forecast_starts=[["2025-01-01T00:00:00+00:00", "0.9"]],
        latest_start="2025-01-01T05:00:00+00:00",
        not_before=None,
        target_usd_per_hour="1.1",
        poll_interval=30,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "costaware.triggers.spot_window.SpotWindowTrigger"
    json.dumps(kwargs)  # JSON primitives only
    script = (
        "import json, sys\n"
        "assert not any(p.rstrip('/').endswith('dags') for p in sys.path), sys.path\n"
        "from airflow.sdk._shared.module_loading import import_string\n"
        f"cls = import_string({classpath!r})\n"
        f"kwargs = json.loads({json.dumps(json.dumps(kwargs))})\n"
        "print(json.dumps(cls(**kwargs).serialize()[1], sort_keys=True))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == json.loads(json.dumps(kwargs, sort_keys=True))


def test_trigger_reports_bad_input_as_an_error_event(tmp_path: Path) -> None:
    trigger = SpotWindowTrigger(
        instance_type="p9.mega",
        region="us-east-1",
        availability_zone=None,
        prices=str(tmp_path / "missing.csv"),
        on_demand_usd_per_hour="3.06",
        forecast_starts=[],
        latest_start=(now() + timedelta(hours=2)).isoformat(),
    )
    event = run_trigger(trigger)
    assert event["status"] == "error" and event["retry"] is False
    assert "missing.csv" in event["message"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"instance_type": "p9.mega"}, "unknown instance type 'p9.mega'"),
        ({"deadline": "2030-01-01T00:00:00"}, "has no time zone"),
        ({"expected_runtime_hours": "abc"}, "expected_runtime_hours must be a number > 0, got 'abc'"),
        ({"target_usd_per_hour": "-1"}, "target_usd_per_hour must be zero or more USD"),
        # A typo in the zone: refused even when the deadline leaves no time to look at its prices.
        ({"availability_zone": "us-east1a"}, "'us-east1a' is not an AWS zone name"),
        (
            {"availability_zone": "us-east-1", "deadline": (now() + timedelta(minutes=5)).isoformat()},
            "is a region",
        ),
        # Waiting for it would miss the deadline (1 hour of work, 8 hours away); it went on-demand before it.
        (
            {"earliest_start": (now() + timedelta(hours=7, minutes=30)).isoformat()},
            "earliest_start .* is after",
        ),
    ],
)
def test_bad_inputs_fail_without_retry_and_write_nothing(
    tmp_path: Path, ledger_env: Ledger, kwargs: dict[str, Any], message: str
) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00")
    sensor = make_sensor(prices=str(prices), deadline=(now() + timedelta(hours=8)).isoformat())
    for name, value in kwargs.items():  # as a template renders them (written out, the DAG fails to parse)
        setattr(sensor, name, value)
    with pytest.raises(AirflowFailException, match=message):
        sensor.execute(context())
    assert ledger_env.entries(dag_id="spot_window_test") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"deadline": "2030-01-01T00:00:00"}, "has no time zone"),
        ({"deadline": "tomorrow"}, "deadline 'tomorrow'"),
        (
            {"earliest_start": "2030-01-02T00:00:00+00:00", "deadline": "2030-01-01T06:00:00+00:00"},
            "earliest_start '2030-01-02T00:00:00\\+00:00' is not before the deadline",
        ),
        ({"earliest_start": "2030-01-01T00:00:00"}, "has no time zone"),
        ({"expected_runtime_hours": "2h"}, "expected_runtime_hours must be a number > 0, got '2h'"),
        ({"expected_runtime_hours": 0}, "expected_runtime_hours must be a number > 0"),
        ({"target_usd_per_hour": "-1"}, "target_usd_per_hour must be zero or more USD"),
        ({"target_usd_per_hour": "forty cents"}, "target_usd_per_hour must be a number of USD such as"),
        ({"on_demand_usd_per_hour": "0"}, "on_demand_usd_per_hour must be more than \\$0 an hour"),
        # A price target cannot be compared with kg CO2e: it was read as 0.10 kg/hour.
        (
            {"objective": "carbon", "target_usd_per_hour": "0.10"},
            "objective 'carbon' ranks starts by kg CO2e",
        ),
        ({"objective": "co2"}, "objective 'co2'"),
        ({"availability_zone": "us-east1a"}, "'us-east1a' is not an AWS zone name"),
        # The doc promised these at parse time; they failed the task once it ran.
        ({"region": "us-east-1a"}, "region 'us-east-1a' is a zone: region takes regions, e.g. 'us-east-1'"),
        (
            {"region": "eu-west-2", "availability_zone": "us-east-1a"},
            "'us-east-1a' is not in region 'eu-west-2'",
        ),
        (
            {"region": "us-east-1", "availability_zones": ["us-east-1a", "us-west-2b"]},
            "availability_zones 'us-west-2b' is not in region 'us-east-1'",
        ),
        # A naive datetime (not text) passed the parse and failed the run.
        ({"deadline": datetime(2026, 12, 1, 6)}, "deadline 2026-12-01T06:00:00 has no time zone"),
        ({"objective": "carbon", "carbon": "gb"}, "grid zone 'gb': did you mean 'GB'"),
        ({"objective": "carbon", "region": "us-east-1"}, "region 'us-east-1' has no known grid zone"),
        ({"carbon": "GB"}, "carbon='GB' is read only by objective 'carbon' or 'cost\\+carbon', not 'cost'"),
        ({"instance_type": ""}, "instance_type is '': give one"),
        (
            {"objective": "carbon", "carbon": "GB", "carbon_usd_per_tonne": 100},
            "carbon_usd_per_tonne=100 is read only by objective 'cost\\+carbon', not 'carbon'",
        ),
    ],
)
def test_bad_values_written_out_fail_when_the_dag_is_parsed(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make_sensor(**kwargs)
    templated = {name: "{{ params.x }}" for name in kwargs}
    assert make_sensor(**templated) is not None  # checked once rendered
    with DAG("resolved_later", schedule=None, params={"x": "2"}) as dag:  # and so is a dag.param(...)
        assert make_sensor(**{name: dag.param("x") for name in kwargs}) is not None


def test_a_price_written_with_a_dollar_sign_is_read_as_the_price() -> None:
    sensor = make_sensor(target_usd_per_hour="$0.40", on_demand_usd_per_hour="$0.68")
    assert sensor is not None


def test_constructor_rejects_bad_static_arguments() -> None:
    with pytest.raises(ValueError, match="history_days must be 7 or more"):
        make_sensor(history_days=2)
    # A unit in the text failed the parse with a bare TypeError that named no argument.
    with pytest.raises(
        ConfigurationError, match="restart_overhead_minutes must be a number of minutes >= 0, got '10m'"
    ):
        make_sensor(restart_overhead_minutes="10m")
    # Said with its unit, as a text that is no number is.
    with pytest.raises(
        ConfigurationError, match="restart_overhead_minutes must be a number of minutes >= 0, got -1"
    ):
        make_sensor(restart_overhead_minutes=-1)
    with pytest.raises(ConfigurationError, match="history_days must be a number of days, got '4w'"):
        make_sensor(history_days="4w")
    assert make_sensor(restart_overhead_minutes="5", history_days="14").restart_overhead_minutes == 5.0


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        # Finite as Decimals, infinite or past a timedelta as the run counts them: they passed the parse and
        # failed the run, naming inf (restart_overhead_minutes) or with a bare OverflowError (history_days).
        (
            {"restart_overhead_minutes": "1e400"},
            "restart_overhead_minutes must be a number of minutes from 0 to 5256000 (ten years), got '1e400'"
            ": write the minutes a restart takes, e.g. 10",
        ),
        (
            {"restart_overhead_minutes": 5_256_001},
            "restart_overhead_minutes must be a number of minutes from 0 to 5256000 (ten years), got 5256001"
            ": write the minutes a restart takes, e.g. 10",
        ),
        (
            {"history_days": "1e400"},
            "history_days must be 7 or more (one week of prices) and at most 3650 (ten years), a whole "
            "number of days, got '1e400'",
        ),
        (
            {"history_days": 3651},
            "history_days must be 7 or more (one week of prices) and at most 3650 (ten years), a whole "
            "number of days, got 3651",
        ),
        ({"history_days": "inf"}, "history_days must be a finite number of days, got 'inf'"),
    ],
)
def test_a_number_the_run_cannot_count_with_is_refused_when_the_dag_is_parsed(
    arguments: dict[str, Any], said: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        make_sensor(**arguments)
    assert str(raised.value) == said


def test_the_largest_numbers_allowed_are_taken() -> None:
    sensor = make_sensor(restart_overhead_minutes="5256000", history_days=3650)
    assert (sensor.restart_overhead_minutes, sensor.history_days) == (5_256_000.0, 3650)


@pytest.mark.parametrize(
    ("argument", "unit"), [("restart_overhead_minutes", "minutes >= 0"), ("history_days", "days")]
)
def test_a_template_in_an_argument_that_is_not_templated_says_so(argument: str, unit: str) -> None:
    # The error named the template as a bad number, as if it would be rendered: it never is.
    with pytest.raises(ConfigurationError) as raised:
        make_sensor(**{argument: "{{ params.m }}"})
    assert str(raised.value) == (
        f"{argument} must be a number of {unit}, got '{{{{ params.m }}}}' (it is not templated: it is read "
        "when the DAG is parsed; write the number)"
    )


def test_a_jinja_comment_makes_a_template_checked_once_rendered() -> None:
    # Airflow renders "{# ... #}normal" to "normal"; it was checked as written when the DAG was parsed, and
    # refused as an unknown priority.
    sensor = make_sensor(priority="{# from the trigger form #}normal")
    sensor.render_template_fields(context(params={}))
    assert sensor.priority == "normal"
    typo = make_sensor(priority="{# typo #}urgent")
    typo.render_template_fields(context(params={}))
    with pytest.raises(AirflowFailException, match="priority 'urgent' is unknown"):
        typo.execute(context())


@pytest.mark.parametrize("written", ["0", "$0.00", 0])
def test_an_on_demand_price_of_nothing_is_refused_saying_what_to_write(written: object) -> None:
    with pytest.raises(ConfigurationError) as refused:
        make_sensor(on_demand_usd_per_hour=written)
    said = str(refused.value)
    assert f"on_demand_usd_per_hour must be more than $0 an hour, got {written!r}" in said
    assert "write the instance's on-demand price an hour (e.g. 3.06), or leave it out" in said


def test_no_dags_folder_import_is_needed() -> None:
    assert SpotWindowSensor.__module__ == "costaware.sensors.spot_window"
    assert str(ROOT / "dags") not in [str(Path(p)) for p in sys.path if p]


def test_manual_run_without_data_interval_decides_at_once(tmp_path: Path, ledger_env: Ledger) -> None:
    # An API-triggered Airflow 3 run with no logical date has no data interval, and here no deadline: it
    # decides at once, on-demand, since no slack is left to absorb a spot interruption.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    result = make_sensor(prices=str(prices), target_usd_per_hour="1.50").execute(context())
    assert result["market"] == "on_demand" and "miss the deadline" in result["reason"]


@pytest.mark.parametrize("written", ["{{ params.deadline }}", None])
def test_a_deadline_template_that_renders_not_given_is_warned(
    tmp_path: Path, ledger_env: Ledger, written: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    # A manual run whose "{{ params.deadline }}" rendered " " went on-demand at once, said only at INFO.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    sensor = make_sensor(prices=str(prices), deadline=written)
    sensor.deadline = " " if written else None  # as rendered
    assert sensor.execute(context())["market"] == "on_demand"
    warned = [line for line in capsys.readouterr().out.splitlines() if "which is not given" in line]
    if written is None:  # no deadline asked for: nothing to warn of
        assert warned == []
    else:
        [line] = warned
        said = (
            "deadline '{{ params.deadline }}' rendered ' ', which is not given (blank, None or null): with "
            "no data interval either, the decision is taken now, with no slack for spot; give the param a "
            "value for a deadline of this run's own"
        )
        assert "warning" in line and said in line


@pytest.mark.parametrize(
    "warning",
    ["which is not given", "leaves no time to wait for the run's window to open"],
)
@pytest.mark.parametrize("mode", ["reschedule", "poke"])
def test_run_argument_warnings_are_said_once_a_try_not_at_every_poke(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], mode: str, warning: str
) -> None:
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowRescheduleException

    # Reschedule mode runs execute anew, with a freshly loaded task, at every poke: the not-given deadline
    # warning (and the one of a deadline before the window) was said at each poke; a night of them.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")  # above the forecast minimum: keeps waiting
    window_start, window_end = now() + timedelta(hours=3), now() + timedelta(hours=11)
    store = TaskStateStore()  # kept across reschedules, as Airflow keeps the task instance's

    def look(rescheduled: int, sensor: SpotWindowSensor | None = None) -> SpotWindowSensor:
        sensor = sensor or make_sensor(
            prices=str(prices),
            deadline="{{ params.deadline }}",
            earliest_start="{{ params.start }}",
            deferrable=False,
            mode="reschedule",
        )
        sensor.earliest_start = " "  # as rendered with the param unset
        # Not given; or given, two hours before the window opens.
        sensor.deadline = " " if warning == "which is not given" else (now() + timedelta(hours=2)).isoformat()
        ti = SimpleNamespace(try_number=1, get_first_reschedule_date=lambda _: now() if rescheduled else None)
        ctx = context(
            ti=ti,
            task_reschedule_count=rescheduled,
            task_state_store=store,
            data_interval_start=window_start,
            data_interval_end=window_end,
        )
        if mode == "reschedule":
            with pytest.raises(AirflowRescheduleException):
                sensor.execute(ctx)
        else:
            assert sensor.poke(ctx) is False
        return sensor

    first = look(0)
    if mode == "reschedule":  # each reschedule: a new process, a new task
        look(1), look(2)
    else:  # poke mode: one task, poked again in the same process
        look(0, first), look(0, first)
    out = capsys.readouterr().out
    assert out.count(warning) == 1


@pytest.mark.parametrize("mode", ["poke", "deferrable", "reschedule"])
def test_a_try_put_off_for_a_missing_dag_is_still_warned_of_its_arguments(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    from types import SimpleNamespace

    # A worker that could not load the DAG puts the try off ([workers] missing_dag_retries): its first look
    # has task_reschedule_count 1, read as a later poke, and the not-given deadline was never warned. In
    # reschedule mode too: each later poke, with a freshly loaded task, must not say it again.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")  # above the forecast minimum: keeps waiting
    store = TaskStateStore()
    for rescheduled in (1, 2, 3) if mode == "reschedule" else (1,):
        sensor = make_sensor(
            prices=str(prices),
            deadline="{{ params.deadline }}",
            deferrable=mode == "deferrable",
            mode="reschedule" if mode == "reschedule" else "poke",
        )
        sensor.deadline = " "  # as rendered with the param unset
        ti = SimpleNamespace(try_number=1, get_first_reschedule_date=lambda _: now() - timedelta(minutes=1))
        ctx = context(
            ti=ti,
            task_reschedule_count=rescheduled,
            task_state_store=store,
            data_interval_start=now() - timedelta(hours=1),
            data_interval_end=now() + timedelta(hours=11),
        )
        if mode == "deferrable":
            with pytest.raises(TaskDeferred):
                sensor.execute(ctx)
        else:
            assert sensor.poke(ctx) is False
    assert capsys.readouterr().out.count("which is not given") == 1


def test_deadline_from_the_run_s_pendulum_data_interval(tmp_path: Path, ledger_env: Ledger) -> None:
    import pendulum

    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00")
    end = pendulum.now("UTC").subtract(hours=1)  # a past window, as a replayed run has: on-demand at once
    result = make_sensor(prices=str(prices), deadline="").execute(
        context(data_interval_start=end.subtract(hours=8), data_interval_end=end)
    )
    assert result["market"] == "on_demand" and "miss the deadline" in result["reason"]


def add_zone(path: Path, zone: str, price: str, *, ago: timedelta = timedelta(minutes=1)) -> None:
    """A record for a zone of the same region and type, in force since ``ago``."""
    at = (now() - ago).isoformat()
    with path.open("a") as f:
        f.write(f"{at},us-east-1,{zone},p3.2xlarge,Linux/UNIX,{price}\n")


def trace_file(path: Path, samples: list[int]) -> str:
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": samples}))
    return str(path)


def test_several_zones_start_in_the_cheapest_one_with_capacity(tmp_path: Path, ledger_env: Ledger) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.90")
    add_zone(prices, "us-east-1b", "0.40")
    add_zone(prices, "us-east-1c", "0.20")
    deadline = (now() + timedelta(hours=12)).isoformat()
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    # A list, or the text a template renders (before, a string was split into its letters).
    for written in (zones, "us-east-1a, us-east-1b,us-east-1c", '["us-east-1a", "us-east-1b", "us-east-1c"]'):
        result = make_sensor(
            prices=str(prices), deadline=deadline, target_usd_per_hour="0.95", availability_zones=written
        ).execute(context())
        assert result["market"] == "spot" and result["availability_zone"] == "us-east-1c"
        assert result["usd_per_hour"] == "0.20" and "zone us-east-1c" in result["price_detail"]
    # The cheapest zone has no capacity in its trace: the next cheapest with capacity is taken.
    start = (now() - timedelta(minutes=1)).isoformat()
    traces = {
        "us-east-1a": trace_file(tmp_path / "a.json", [1] * 12),
        "us-east-1b": trace_file(tmp_path / "b.json", [1] * 12),
        "us-east-1c": trace_file(tmp_path / "c.json", [0] * 12),
    }
    result = make_sensor(
        task_id="spot_window_traced",
        prices=str(prices),
        deadline=deadline,
        target_usd_per_hour="0.95",
        availability_zones=zones,
        availability=traces,
        availability_start=start,
    ).execute(context())
    assert result["availability_zone"] == "us-east-1b" and result["usd_per_hour"] == "0.40"


def test_zones_defer_to_a_trigger_that_round_trips(tmp_path: Path, ledger_env: Ledger) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00")
    add_zone(prices, "us-east-1b", "0.95")
    sensor = make_sensor(
        prices=str(prices),
        deadline=(now() + timedelta(hours=30)).isoformat(),
        availability_zones=["us-east-1a", "us-east-1b"],
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context())
    trigger = deferred.value.trigger
    _, kwargs = trigger.serialize()
    assert kwargs["availability_zones"] == ["us-east-1a", "us-east-1b"]
    rebuilt = SpotWindowTrigger(**json.loads(json.dumps(kwargs)))
    event = run_trigger(rebuilt, during=lambda: add_zone(prices, "us-east-1b", "0.30", ago=timedelta(0)))
    assert event["status"] == "success", event
    assert event["decision"]["market"] == "spot" and event["decision"]["availability_zone"] == "us-east-1b"


@pytest.mark.parametrize(
    ("priority", "slack_minutes", "market"),
    [
        ("normal", 10, None),  # 10 minutes of slack: a normal job still waits for spot to come back
        ("critical", 10, "on_demand"),  # a critical job keeps room for a preemption: on-demand now
        ("normal", -10, "on_demand"),  # past the latest start
        ("best_effort", -10, None),  # a soft deadline: a best-effort job still waits for spot
    ],
)
def test_priority_moves_the_fallback(
    tmp_path: Path, ledger_env: Ledger, priority: str, slack_minutes: int, market: str | None
) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="5.00")  # above on-demand: no useful spot capacity now
    deadline = now() + timedelta(hours=1, minutes=slack_minutes)
    sensor = make_sensor(prices=str(prices), deadline=deadline.isoformat(), priority=priority)
    if market is None:
        with pytest.raises(TaskDeferred):
            sensor.execute(context())
    else:
        result = sensor.execute(context())
        assert result["market"] == market and result["priority"] == priority


# "{{ params.prices }}" / "{{ params.priority }}" with the param unset renders "None" (" " from a form,
# "null" through | tojson): the run failed ("prices 'None' is neither 'live' ... nor a file", "priority
# 'None' is unknown"), while RemoteTrainingOperator in the same DAG reads them as not given.
@pytest.mark.parametrize("unset", ["None", "null", " ", "None "])
def test_prices_and_priority_rendered_not_given_take_their_defaults(ledger_env: Ledger, unset: str) -> None:
    sensor = make_sensor(prices="{{ params.prices }}", priority="{{ params.priority }}")
    sensor.prices = sensor.priority = unset  # as rendered
    sensor.deadline = (now() + timedelta(hours=12)).isoformat()
    plan = sensor._plan(context(), now(), forecast=False)
    assert (sensor.prices, plan["priority"]) == ("live", "normal")
    # Written out, such a priority is not given either (was refused as unknown when the DAG was parsed).
    assert make_sensor(priority=unset).priority == unset


def test_priority_and_zone_traces_are_checked(tmp_path: Path, ledger_env: Ledger) -> None:
    with pytest.raises(ValueError, match="priority 'urgent' is unknown; choose one of critical, normal"):
        make_sensor(priority="urgent")
    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00")
    add_zone(prices, "us-east-1b", "0.90")
    sensor = make_sensor(
        prices=str(prices),
        deadline=(now() + timedelta(hours=8)).isoformat(),
        availability_zones=["us-east-1a", "us-east-1b"],
        availability=str(tmp_path / "one.json"),
    )
    with pytest.raises(AirflowFailException, match="is one trace but availability_zones lists 2 zones"):
        sensor.execute(context())
    assert ledger_env.entries(dag_id="spot_window_test") == []
    # One zone and one trace: that zone's (it was refused as "lists 1 zones").
    one = make_sensor(
        prices=str(prices), availability_zones=["us-east-1b"], availability=str(tmp_path / "b.json")
    )
    assert one._observe_kwargs()["zone_availability"] == {"us-east-1b": str(tmp_path / "b.json")}
    # A misspelt zone key was ignored, and the zone meant was judged by its price alone, in silence.
    typo = make_sensor(
        prices=str(prices),
        deadline=(now() + timedelta(hours=8)).isoformat(),
        availability_zones=["us-east-1a", "us-east-1b"],
        availability={"us-east-1a": str(tmp_path / "a.json"), "us-east-1x": str(tmp_path / "b.json")},
    )
    with pytest.raises(
        AirflowFailException,
        match=r"availability maps zone\(s\) 'us-east-1x' \(did you mean us-east-1[ab]\?\) that availability",
    ):
        typo.execute(context())
    assert ledger_env.entries(dag_id="spot_window_test") == []


def _ui_run_context(windows: str) -> dict[str, Any]:
    """What a run triggered from the form gets: the logical date is now, the interval is the timetable's."""
    import pendulum

    from costaware.core.ledger import utcnow
    from costaware.timetables import OffPeakTimetable

    interval = OffPeakTimetable(windows=[windows], timezone="UTC").infer_manual_data_interval(
        run_after=pendulum.instance(utcnow())
    )
    return context(data_interval_start=interval.start, data_interval_end=interval.end)


def _hours_from_now(hours: int) -> str:
    return f"{(now() + timedelta(hours=hours)).hour:02d}:00"


def test_ui_manual_run_inside_the_window_can_choose_spot(tmp_path: Path, ledger_env: Ledger) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")  # far below on-demand (3.06) and any forecast hour
    ctx = _ui_run_context(f"{_hours_from_now(-1)}-{_hours_from_now(7)}")
    result = make_sensor(prices=str(prices), deadline="").execute(ctx)
    assert result["market"] == "spot", result["reason"]
    assert datetime.fromisoformat(result["deadline"]) > now() + timedelta(hours=5)


def test_ui_manual_run_between_windows_waits_for_the_next_window(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    ctx = _ui_run_context(f"{_hours_from_now(3)}-{_hours_from_now(11)}")
    with pytest.raises(TaskDeferred) as deferred:  # not on-demand against a deadline in the past
        make_sensor(prices=str(prices), deadline="").execute(ctx)
    trigger = deferred.value.trigger
    assert datetime.fromisoformat(trigger.not_before) > now() + timedelta(hours=2)
    assert datetime.fromisoformat(trigger.latest_start) > datetime.fromisoformat(trigger.not_before)
    assert "already past" not in capsys.readouterr().out


def test_a_deadline_param_before_the_window_wins_over_the_window(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    ctx = _ui_run_context(f"{_hours_from_now(6)}-{_hours_from_now(14)}")
    deadline = (now() + timedelta(hours=3)).isoformat()
    result = make_sensor(prices=str(prices), deadline=deadline).execute(ctx)
    assert result["market"] == "spot" and result["deadline"] == datetime.fromisoformat(deadline).isoformat()
    assert "leaves no time to wait for the run's window to open" in capsys.readouterr().out


def test_a_deadline_in_the_past_is_said_out_loud(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    past = (now() - timedelta(hours=15)).isoformat()
    result = make_sensor(prices=str(prices), deadline=past).execute(context())
    assert result["market"] == "on_demand"
    out = capsys.readouterr().out
    assert "is already past" in out and "give a later deadline" in out and "the deadline argument" in out


def scheduled_run_context(
    timetable: Any, *, catchup: bool, run_type: DagRunType = DagRunType.SCHEDULED
) -> dict[str, Any]:
    """The context of the first run ``timetable`` schedules from three days ago, its dag_run as the SDK's.

    ``catchup=False``: the run due now, started on time; ``catchup=True``: the oldest of the past runs.
    """
    import pendulum
    from airflow.sdk.api.datamodels._generated import DagRun, DagRunState
    from airflow.timetables.base import TimeRestriction

    earliest = pendulum.instance(now() - timedelta(days=3))
    info = timetable.next_dagrun_info(
        last_automated_data_interval=None,
        restriction=TimeRestriction(earliest=earliest, latest=None, catchup=catchup),
    )
    interval = info.data_interval
    dag_run = DagRun(
        dag_id="spot_window_test",
        run_id=f"{run_type.value}__{info.run_after.isoformat()}",
        logical_date=info.logical_date,
        data_interval_start=interval.start,
        data_interval_end=interval.end,
        run_after=info.run_after,
        start_date=now(),
        end_date=None,
        run_type=run_type,
        state=DagRunState.RUNNING,
        consumed_asset_events=[],
        partition_key=None,
    )
    return context(dag_run=dag_run, data_interval_start=interval.start, data_interval_end=interval.end)


@pytest.mark.parametrize("run_type", [DagRunType.SCHEDULED, DagRunType.BACKFILL])
def test_a_catch_up_run_of_a_past_window_goes_on_demand_as_a_logged_decision_not_a_warning(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], run_type: DagRunType
) -> None:
    from costaware.timetables import OffPeakTimetable

    # catchup=True (or a backfill) runs every past window: its deadline, the window's end, is past as a rule.
    # It was warned as if the deadline were wrong, with a remedy for manual runs ("a logical date inside or
    # before its window") that a catch-up run cannot follow.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    ctx = scheduled_run_context(OffPeakTimetable(windows=["22:00-06:00"]), catchup=True, run_type=run_type)
    window_end = ctx["data_interval_end"]
    assert window_end < now()
    result = make_sensor(prices=str(prices)).execute(ctx)
    assert result["market"] == "on_demand" and result["deadline"] == window_end.isoformat()
    out = capsys.readouterr().out
    assert f"a catch-up run: its data interval ended at {window_end.isoformat()}" in out
    assert "already past" not in out and "WARNING" not in out


@pytest.mark.parametrize("run_type", [DagRunType.SCHEDULED, DagRunType.BACKFILL])
def test_a_run_started_in_its_window_whose_task_starts_after_it_is_a_late_start_not_a_catch_up(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], run_type: DagRunType
) -> None:
    from types import SimpleNamespace

    from costaware.timetables import OffPeakTimetable

    # The run started on time, when its window opened, and the sensor waited in Airflow's queue (or behind
    # slow upstream tasks) until the window was over: it was logged "a catch-up run" at INFO, with a remedy
    # (catchup=False) that changes nothing, and the night paid on-demand with no warning.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    ctx = scheduled_run_context(OffPeakTimetable(windows=["22:00-06:00"]), catchup=True, run_type=run_type)
    run_started = ctx["dag_run"].run_after + timedelta(minutes=1)
    ctx["dag_run"] = ctx["dag_run"].model_copy(update={"start_date": run_started})
    ctx["ti"] = SimpleNamespace(try_number=2, map_index=-1, dag_id="spot_window_test", run_id="r")
    window_end = ctx["data_interval_end"]
    result = make_sensor(prices=str(prices)).execute(ctx)
    assert result["market"] == "on_demand" and result["deadline"] == window_end.isoformat()
    out = capsys.readouterr().out
    assert "catch-up" not in out
    [line] = [line for line in out.splitlines() if "a late start" in line]
    assert "[warning" in line
    assert f"the run started at {run_started.isoformat()}, inside its window, but this task (try 2)" in line
    assert f"after the window ended at {window_end.isoformat()}" in line


@pytest.mark.parametrize("catchup", [False, True], ids=["on-time", "catch-up"])
@pytest.mark.parametrize("timetable", ["CronTriggerTimetable", "CronDataIntervalTimetable"])
def test_a_cron_scheduled_run_is_no_catch_up_and_is_told_to_give_a_deadline(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], timetable: str, catchup: bool
) -> None:
    from airflow.timetables.interval import CronDataIntervalTimetable
    from airflow.timetables.trigger import CronTriggerTimetable

    # A cron timetable starts each run when its data interval ends: every run, on time too, had that end
    # just past and was logged as "a catch-up run" (INFO), its remedy (catchup=False) of no use, and paid
    # on-demand every night with no warning. The deadline is what to give.
    cron: dict[str, Any] = {
        "CronTriggerTimetable": CronTriggerTimetable,
        "CronDataIntervalTimetable": CronDataIntervalTimetable,
    }
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    ctx = scheduled_run_context(cron[timetable]("*/5 * * * *", timezone="UTC"), catchup=catchup)
    assert ctx["dag_run"].run_after == ctx["data_interval_end"] <= now()
    result = make_sensor(prices=str(prices)).execute(ctx)
    assert result["market"] == "on_demand"
    out = capsys.readouterr().out
    assert "catch-up" not in out
    assert f"the deadline {result['deadline']} (the end of the run's data interval) is already past" in out
    assert "give the sensor a deadline after the run starts" in out and "OffPeakTimetable" in out
    assert "logical date" not in out  # a manual run's remedy: a scheduled run has no logical date to pick


def test_an_off_peak_run_whose_window_ends_too_soon_is_told_to_widen_it_not_to_use_off_peak(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk.api.datamodels._generated import DagRun, DagRunState

    # An OffPeakTimetable run (started inside its window) left less than the runtime of its window: told
    # that "the DAG's schedule ends each run's data interval when the run starts" and to "schedule the DAG
    # with OffPeakTimetable", which it is.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    opened, ends = now() - timedelta(minutes=10), now() + timedelta(minutes=30)
    dag_run = DagRun(
        dag_id="spot_window_test",
        run_id="scheduled__x",
        logical_date=opened,
        data_interval_start=opened,
        data_interval_end=ends,
        run_after=opened,
        start_date=opened,
        end_date=None,
        run_type=DagRunType.SCHEDULED,
        state=DagRunState.RUNNING,
        consumed_asset_events=[],
        partition_key=None,
    )
    ctx = context(dag_run=dag_run, data_interval_start=opened, data_interval_end=ends)
    assert make_sensor(prices=str(prices)).execute(ctx)["market"] == "on_demand"
    out = capsys.readouterr().out
    assert f"the deadline {ends.isoformat()} (the end of the run's data interval) is too near" in out
    assert "leave the run's window room for the expected runtime and restart overhead" in out
    assert "OffPeakTimetable" not in out


def test_a_catch_up_run_given_a_deadline_argument_already_past_is_warned(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    from costaware.timetables import OffPeakTimetable

    # The deadline argument was chosen for the run, and it is past: said as a warning, with what to change.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    ctx = scheduled_run_context(OffPeakTimetable(windows=["22:00-06:00"]), catchup=True)
    past = (now() - timedelta(hours=1)).isoformat()
    result = make_sensor(prices=str(prices), deadline=past).execute(ctx)
    assert result["market"] == "on_demand"
    out = capsys.readouterr().out
    assert f"the deadline {past} (the deadline argument) is already past" in out
    assert "give a later deadline" in out and "catch-up" not in out


def test_a_catch_up_run_given_a_deadline_within_runtime_and_overhead_is_warned_as_it_goes_on_demand(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    from costaware.timetables import OffPeakTimetable

    # A deadline later than now, but nearer than the runtime plus the restart overhead, leaves a latest start
    # already past: the run went on-demand with no warning, only the warning when within the runtime alone.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    ctx = scheduled_run_context(OffPeakTimetable(windows=["22:00-06:00"]), catchup=True)
    deadline = (now() + timedelta(hours=1, minutes=5)).isoformat()
    sensor = make_sensor(prices=str(prices), deadline=deadline, restart_overhead_minutes=10)
    result = sensor.execute(ctx)
    assert result["market"] == "on_demand"
    out = capsys.readouterr().out
    latest = (datetime.fromisoformat(deadline) - timedelta(hours=1, minutes=10)).isoformat()
    assert f"the deadline {deadline} (the deadline argument) is too near: the latest start it allows" in out
    assert f"10 minute(s) of restart overhead and priority 'normal' was {latest}" in out


def test_a_best_effort_run_whose_deadline_is_within_its_runtime_waits_and_is_not_told_on_demand(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # best_effort waits for spot until the deadline itself: it was warned "so on-demand starts now" and
    # then waited for spot.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")  # above the forecast: waits where a cheaper hour is left
    deadline = (now() + timedelta(minutes=30)).isoformat()
    sensor = make_sensor(prices=str(prices), deadline=deadline, priority="best_effort")
    try:
        assert sensor.execute(context())["market"] == "spot"  # no cheaper whole hour left before it
    except TaskDeferred as deferred:
        assert deferred.trigger.latest_start == datetime.fromisoformat(deadline).isoformat()
    assert "on-demand starts now" not in capsys.readouterr().out


class TaskStateStore(dict[str, Any]):
    """The task instance's ``task_state_store`` (``context["task_state_store"]``), kept across reschedules."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value


class Try:
    """One try of the sensor as Airflow runs it: poke mode pokes one task; reschedule mode loads it anew.

    A reschedule-mode look after the first has ``task_reschedule_count`` >= 1 and the try's first reschedule
    date; ``put_off_at`` is a start put off before the first look (the worker could not load the DAG).
    """

    def __init__(self, mode: str, put_off_at: datetime | None = None, **sensor_kwargs: Any) -> None:
        self.mode, self.sensor_kwargs = mode, {**sensor_kwargs, "deferrable": False, "mode": mode}
        self.sensor = make_sensor(**self.sensor_kwargs)
        self.rescheduled = 1 if put_off_at else 0
        self.first_rescheduled: datetime | None = put_off_at
        self.store = TaskStateStore()

    def look(self, **ctx: Any) -> Any:
        from types import SimpleNamespace

        if self.mode == "reschedule" and self.rescheduled:
            self.sensor = make_sensor(**self.sensor_kwargs)  # a new process, a freshly loaded task
        first = self.first_rescheduled
        ti = SimpleNamespace(
            try_number=1,
            map_index=-1,
            dag_id="spot_window_test",
            run_id="r",
            get_first_reschedule_date=lambda _: first,
        )
        looked = context(ti=ti, task_reschedule_count=self.rescheduled, task_state_store=self.store, **ctx)
        result = self.sensor.poke(looked)
        if self.mode == "reschedule" and result is False:
            self.first_rescheduled, self.rescheduled = self.first_rescheduled or now(), self.rescheduled + 1
        return result


def off_peak_run(opened: datetime, ends: datetime) -> dict[str, Any]:
    """The context of an OffPeakTimetable run of the window ``opened``-``ends``, started when it opened."""
    from airflow.sdk.api.datamodels._generated import DagRun, DagRunState

    dag_run = DagRun(
        dag_id="spot_window_test",
        run_id="scheduled__x",
        logical_date=opened,
        data_interval_start=opened,
        data_interval_end=ends,
        run_after=opened,
        start_date=opened,
        end_date=None,
        run_type=DagRunType.SCHEDULED,
        state=DagRunState.RUNNING,
        consumed_asset_events=[],
        partition_key=None,
    )
    return {"dag_run": dag_run, "data_interval_start": opened, "data_interval_end": ends}


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_a_run_that_waited_until_its_latest_start_is_not_told_its_deadline_is_too_near(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], clock: Any, mode: str
) -> None:
    # Poke and reschedule mode plan at every poke: the poke that reached the latest start of a run that had
    # waited for spot as it should was warned "the deadline ... is too near ... give a later deadline".
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")  # above the forecast: waits
    deadline = now() + timedelta(hours=6)
    latest = deadline - timedelta(hours=1, minutes=10)
    waiting = Try(mode, prices=str(prices), deadline=deadline.isoformat(), restart_overhead_minutes=10)
    assert waiting.look() is False
    clock.shift(timedelta(hours=4, minutes=51))  # the first poke past the latest start
    capsys.readouterr()
    assert waiting.look().xcom_value["market"] == "on_demand"
    out = capsys.readouterr().out
    assert "too near" not in out and "[warning" not in out
    assert f"reached the latest start {latest.isoformat()}: on-demand starts now, as planned" in out


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_a_try_whose_start_was_put_off_past_its_latest_start_is_still_told_its_deadline_is_too_near(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    # A worker that could not load the DAG puts the try off ([workers] missing_dag_retries): its first look
    # has task_reschedule_count 1, and the latest start was already past when the try began.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    deadline = (now() + timedelta(minutes=50)).isoformat()
    put_off = Try(mode, now() - timedelta(minutes=2), prices=str(prices), deadline=deadline)
    assert put_off.look().xcom_value["market"] == "on_demand"
    assert f"the deadline {deadline} (the deadline argument) is too near" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["poke", "reschedule", "deferrable"])
def test_a_try_put_off_before_its_latest_start_until_after_it_is_warned_not_logged_as_planned(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    from types import SimpleNamespace

    # Put off at its start 5 minutes ago (the worker could not load the DAG), before its latest start 2
    # minutes ago: its first reschedule was taken for a first look, and its first look was logged "the wait
    # for spot (since <the put-off>) reached the latest start ... as planned" though it never waited for spot.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    deadline = now() + timedelta(minutes=58)  # 1 hour of work, no restart overhead
    put_off_at = now() - timedelta(minutes=5)
    if mode == "deferrable":
        sensor = make_sensor(prices=str(prices), deadline=deadline.isoformat())
        ti = SimpleNamespace(
            try_number=1,
            map_index=-1,
            dag_id="spot_window_test",
            run_id="r",
            get_first_reschedule_date=lambda _: put_off_at,
        )
        ctx = context(ti=ti, task_reschedule_count=1, task_state_store=TaskStateStore())
        assert sensor.execute(ctx)["market"] == "on_demand"
    else:
        assert Try(mode, put_off_at, prices=str(prices), deadline=deadline.isoformat()).look().is_done
    out = capsys.readouterr().out
    assert "as planned" not in out and "too near" not in out
    [line] = [line for line in out.splitlines() if "[warning" in line]
    latest = deadline - timedelta(hours=1)
    assert (
        f"this try (try 1) started at {put_off_at.isoformat()}, before its latest start "
        f"{latest.isoformat()}, but the worker could not load the DAG and put its start off ([workers] "
        "missing_dag_retries)" in line
    )


def test_without_a_task_state_store_a_put_off_start_is_not_taken_for_a_look(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # A library call gives no task state store: the try's reschedules were taken for its own pokes, so a
    # start put off from before its latest start until after it was logged "as planned", as if it had waited.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    deadline = now() + timedelta(minutes=58)  # 1 hour of work, no restart overhead
    put_off_at = now() - timedelta(minutes=5)
    put_off = Try("reschedule", put_off_at, prices=str(prices), deadline=deadline.isoformat())
    put_off.store = None  # type: ignore[assignment]
    assert put_off.look().is_done
    out = capsys.readouterr().out
    assert "as planned" not in out
    [line] = [line for line in out.splitlines() if "[warning" in line]
    assert "but the worker could not load the DAG and put its start off" in line


@pytest.mark.parametrize(
    ("priority", "mode", "poke_interval"),
    [("best_effort", "poke", 60), ("best_effort", "reschedule", 60), ("normal", "reschedule", 4 * 3600)],
)
def test_a_run_that_waited_in_its_window_until_it_ended_is_no_late_start(
    tmp_path: Path,
    ledger_env: Ledger,
    capsys: pytest.CaptureFixture[str],
    clock: Any,
    priority: str,
    mode: str,
    poke_interval: int,
) -> None:
    # best_effort waits until the window's end (its deadline), and a poke_interval longer than the runtime
    # can first look again after it: the try, started hours before in the window, was warned "a late start:
    # ... this task (try 1) started at <that poke>, after the window ended".
    prices = tmp_path / "prices.csv"
    write_history(prices, current="4.00")  # spot above on-demand (3.06) all night: keeps waiting
    opened, ends = now() - timedelta(hours=5), now() + timedelta(hours=3)
    run = off_peak_run(opened, ends)
    waiting = Try(mode, prices=str(prices), priority=priority, poke_interval=poke_interval)
    assert waiting.look(**run) is False
    clock.shift(timedelta(hours=3, seconds=30))  # the first poke after the window's end
    capsys.readouterr()
    assert waiting.look(**run).xcom_value["market"] == "on_demand"
    out = capsys.readouterr().out
    assert "a late start" not in out and "too near" not in out
    if priority == "best_effort":  # its deadline is soft: it may finish after it
        assert "[warning" not in out and "on-demand starts now, as planned" in out
    else:  # poked first past the deadline itself: on-demand cannot finish in time, which is no plan
        [line] = [line for line in out.splitlines() if "[warning" in line]
        assert re.search(f"came at [^ ]+, too late .* by the deadline {re.escape(ends.isoformat())}", line)
        assert "or deferrable=True" in line


@pytest.mark.parametrize("after", [timedelta(hours=6, minutes=30), timedelta(hours=5, minutes=45)])
@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_a_poke_that_first_comes_after_the_deadline_is_warned_not_logged_as_planned(
    tmp_path: Path,
    ledger_env: Ledger,
    capsys: pytest.CaptureFixture[str],
    clock: Any,
    mode: str,
    after: timedelta,
) -> None:
    # A poke_interval (3 h) longer than the hour between the latest start and the deadline: the next poke came
    # after the deadline, started on-demand too late to finish, and said so at INFO "as planned".
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")  # above the forecast: waits
    deadline = now() + timedelta(hours=6)
    waiting = Try(mode, prices=str(prices), deadline=deadline.isoformat(), poke_interval=3 * 3600)
    assert waiting.look() is False
    # Past the deadline, or before it with less than the run's hour left (judged by the deadline alone, a
    # poke 15 minutes before it was "as planned").
    clock.shift(after)
    capsys.readouterr()
    assert waiting.look().xcom_value["market"] == "on_demand"
    out = capsys.readouterr().out
    assert "as planned" not in out
    [line] = [line for line in out.splitlines() if "[warning" in line]
    latest = deadline - timedelta(hours=1)
    said = (
        f"the first poke after the latest start {re.escape(latest.isoformat())} came at [^ ]+, too late for "
        f"1 hour\\(s\\) of on-demand work to finish by the deadline {re.escape(deadline.isoformat())}"
    )
    assert re.search(said, line)
    assert "poke_interval (now 10800 s) shorter than its restart_overhead_minutes" in line


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_a_late_start_names_when_the_try_started_not_its_first_look(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    # A try put off after the window ended (the worker could not load the DAG) was told it started at its
    # first look, minutes after it did.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    opened, ends = now() - timedelta(hours=8), now() - timedelta(minutes=10)
    started = now() - timedelta(minutes=3)
    late = Try(mode, started, prices=str(prices))
    assert late.look(**off_peak_run(opened, ends)).xcom_value["market"] == "on_demand"
    [line] = [line for line in capsys.readouterr().out.splitlines() if "a late start" in line]
    assert f"this task (try 1) started at {started.isoformat()}, after the window ended at" in line


@pytest.mark.parametrize("mode", ["poke", "reschedule"])
def test_a_try_started_in_its_window_after_its_latest_start_is_no_late_start(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    # Put off inside the window, past its latest start, it first looked after the window's end: it was
    # told that it started after the window ended; the window left it too little time.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    opened, ends = now() - timedelta(hours=8), now() - timedelta(minutes=10)
    put_off = Try(mode, ends - timedelta(minutes=20), prices=str(prices))
    assert put_off.look(**off_peak_run(opened, ends)).xcom_value["market"] == "on_demand"
    out = capsys.readouterr().out
    assert "a late start" not in out
    assert f"the deadline {ends.isoformat()} (the end of the run's data interval) is already past" in out
    assert "leave the run's window room" in out


def test_a_retry_in_the_same_process_is_judged_by_its_own_first_look(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], clock: Any
) -> None:
    from types import SimpleNamespace

    # `airflow dags test` runs the tries of one task object: try 2, begun past the latest start, had no wait.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")
    deadline = (now() + timedelta(hours=6)).isoformat()
    sensor = make_sensor(prices=str(prices), deadline=deadline, deferrable=False)
    assert sensor.poke(context(ti=SimpleNamespace(try_number=1), task_reschedule_count=0)) is False
    clock.shift(timedelta(hours=5, minutes=30))
    capsys.readouterr()
    assert sensor.poke(context(ti=SimpleNamespace(try_number=2), task_reschedule_count=0)).is_done
    assert f"the deadline {deadline} (the deadline argument) is too near" in capsys.readouterr().out


def test_a_second_run_of_the_same_task_object_is_judged_by_its_own_first_look(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], clock: Any
) -> None:
    from types import SimpleNamespace

    # dag.test() called twice in one process runs copies of the task that share its dicts: the second run's
    # try 1 took the first run's first look, a day earlier: its deadline too near went on-demand "as planned".
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")  # above the forecast: waits
    deadline = (now() + timedelta(hours=6)).isoformat()
    sensor = make_sensor(prices=str(prices), deadline=deadline, deferrable=False)
    first_run = SimpleNamespace(try_number=1, run_id="run1", map_index=-1)
    assert sensor.poke(context(run_id="run1", ti=first_run, task_reschedule_count=0)) is False
    clock.shift(timedelta(days=1))
    capsys.readouterr()
    deadline = (now() + timedelta(minutes=10)).isoformat()
    sensor.deadline = deadline  # as the second run renders it
    second_run = SimpleNamespace(try_number=1, run_id="run2", map_index=-1)
    assert sensor.poke(context(run_id="run2", ti=second_run, task_reschedule_count=0)).is_done
    out = capsys.readouterr().out
    assert f"the deadline {deadline} (the deadline argument) is too near" in out and "as planned" not in out


def test_a_retry_of_the_same_task_object_is_told_its_argument_warnings_again(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    # The warnings said were kept per task object: under dags test, try 2 was never told them.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")  # above the forecast minimum: keeps waiting
    sensor = make_sensor(prices=str(prices), deadline="{{ params.deadline }}", deferrable=False)
    sensor.deadline = " "  # as rendered with the param unset
    for tried in (1, 2):
        ctx = context(
            ti=SimpleNamespace(try_number=tried),
            task_reschedule_count=0,
            data_interval_start=now() - timedelta(hours=1),
            data_interval_end=now() + timedelta(hours=11),
        )
        assert sensor.poke(ctx) is False
        assert sensor.poke(ctx) is False  # a later poke of the try: not said again
    assert capsys.readouterr().out.count("which is not given") == 2


def test_a_manual_run_given_a_past_window_is_still_warned(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    # A manual run with a logical date in a past window more likely picked the wrong date: said out loud.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.10")
    window_end = now() - timedelta(days=2)
    ctx = context(
        dag_run=SimpleNamespace(run_type=DagRunType.MANUAL),
        data_interval_start=window_end - timedelta(hours=8),
        data_interval_end=window_end,
    )
    result = make_sensor(prices=str(prices)).execute(ctx)
    assert result["market"] == "on_demand"
    out = capsys.readouterr().out
    assert "is already past" in out and "catch-up" not in out


def test_a_price_file_that_is_not_there_fails_even_when_the_deadline_decides_at_once(
    tmp_path: Path, ledger_env: Ledger
) -> None:
    # A past deadline decides on-demand without reading the prices: a typo in their path must still fail,
    # not pass in silence and fail (or not) on the next run.
    missing = tmp_path / "nope" / "prices.json"
    sensor = make_sensor(prices=str(missing), deadline=(now() - timedelta(hours=1)).isoformat())
    with pytest.raises(AirflowFailException, match=rf"prices {re.escape(repr(str(missing)))} is neither"):
        sensor.execute(context())
    assert ledger_env.entries(dag_id="spot_window_test") == []


@pytest.mark.parametrize(
    ("zones", "message"),
    [
        ("us-east-1", "'us-east-1' is a region, not a zone: list its zones, e.g. us-east-1a, us-east-1b"),
        ("us-east-1a;us-east-1b", "'us-east-1a;us-east-1b' is not a zone name"),
        ("us-east-1a,", "has an empty name"),
        (["US-EAST-1A"], "AWS zone names are lower case, write 'us-east-1a'"),
        (
            "us-east-1a,us-eats-1b",
            "availability zone 'us-eats-1b' is in no AWS region ('us-eats-1' is not one); did you mean",
        ),
    ],
)
def test_zones_written_out_are_checked_when_the_dag_is_parsed(zones: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        make_sensor(availability_zones=zones)
    # A template is checked once rendered.
    assert make_sensor(availability_zones="{{ params.zones }}").availability_zones == "{{ params.zones }}"


@pytest.mark.parametrize("failures", [2, 5])
def test_a_price_poll_that_fails_is_polled_again_before_the_task_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: int
) -> None:
    # One EC2 throttle ended the wait: with no retry set, the run failed while spot was cheap.
    from costaware.triggers import MAX_POLL_ERRORS

    prices = tmp_path / "prices.csv"
    write_history(prices, current="0.30")  # spot now, once a poll reads it
    at = now()
    sensor = make_sensor(
        prices=str(prices), deadline=(at + timedelta(hours=12)).isoformat(), poke_interval=0.01
    )
    trigger = sensor._trigger(sensor._plan(context(), at))
    real_observe, calls = SpotWindowTrigger._observe, []

    def throttled(self: SpotWindowTrigger, *args: Any) -> Any:
        calls.append(args)
        if len(calls) <= failures:
            raise RuntimeError("RequestLimitExceeded")
        return real_observe(self, *args)

    monkeypatch.setattr(SpotWindowTrigger, "_observe", throttled)
    event = run_trigger(trigger)
    if failures < MAX_POLL_ERRORS:
        assert event["status"] == "success" and len(calls) == failures + 1
    else:
        assert event["status"] == "error" and event["retry"] is True and len(calls) == MAX_POLL_ERRORS
        assert "spot price poll failed: RequestLimitExceeded" in event["message"]


class CountingTaskStateStore(TaskStateStore):
    """A task state store that counts its reads: each one is a call to the API server."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        self.reads += 1
        return super().get(key, default)


def test_a_rescheduled_poke_reads_its_wait_record_once(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str], clock: Any
) -> None:
    from types import SimpleNamespace

    # The not-given deadline's warning and the wait's end each read the try's record of an earlier
    # rescheduled wait: one key read twice a poke (three times with the warning of a deadline before the
    # window), each read a call to the API server.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="2.00")  # above the forecast: waits
    window_end = now() + timedelta(hours=6)  # the deadline: 1 hour of work, 10 minutes' restart overhead
    store, first_poke = CountingTaskStateStore(), now()

    def poke(rescheduled: int) -> Any:
        sensor = make_sensor(
            prices=str(prices),
            deadline="{{ params.deadline }}",
            deferrable=False,
            restart_overhead_minutes=10,
        )
        sensor.mode, sensor.deadline = "reschedule", " "  # as rendered with the param unset
        ti = SimpleNamespace(try_number=1, get_first_reschedule_date=lambda _: first_poke)
        store.reads = 0
        return sensor.poke(
            context(
                ti=ti,
                task_reschedule_count=rescheduled,
                task_state_store=store,
                data_interval_start=first_poke - timedelta(hours=1),
                data_interval_end=window_end,
            )
        )

    assert poke(0) is False
    clock.shift(timedelta(hours=4, minutes=51))  # the first poke past the latest start
    assert poke(1).xcom_value["market"] == "on_demand"
    assert store.reads == 1
    out = capsys.readouterr().out
    assert "as planned" in out and out.count("which is not given") == 1


def test_an_instance_type_the_bundled_list_lacks_is_warned_of_when_the_dag_is_parsed_not_refused(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # A typo: warned of with the closest names (the run refuses it, once no price source has it).
    make_sensor(instance_type="p3.2xlarg", on_demand_usd_per_hour=None)
    said = capsys.readouterr().out
    assert "[warning" in said
    assert (
        "instance_type 'p3.2xlarg' is not in the bundled EC2 price list (unknown instance type 'p3.2xlarg'; "
        "did you mean p3.2xlarge"
    ) in said
    assert "price cache" in said and "the sensor prices it from" not in said
    # A type newer than the bundled list, priced by the DAG and recorded in the user's prices file: a
    # refusal at parse stopped such a DAG loading, though its run needs no list price. Warned of only for
    # its spot prices (read under its name, a typo's are none), never as needing the list price the DAG
    # gives, written out or templated; and it runs.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00")
    prices.write_text(prices.read_text().replace("p3.2xlarge", "p7.48xlarge"))
    deadline = (now() + timedelta(hours=30)).isoformat()
    sensor = make_sensor(
        prices=str(prices), instance_type="p7.48xlarge", on_demand_usd_per_hour="60", deadline=deadline
    )
    make_sensor(instance_type="p7.48xlarge", on_demand_usd_per_hour="{{ params.on_demand }}")
    said = capsys.readouterr().out
    assert said.count("its spot prices are read under that name") == 2
    assert "unless on_demand_usd_per_hour is given" not in said
    with pytest.raises(TaskDeferred):
        sensor.execute(context())
    # Without the price the list may be needed: still warned of.
    make_sensor(instance_type="p7.48xlarge", on_demand_usd_per_hour=" ")
    assert "'p7.48xlarge' is not in the bundled EC2 price list" in capsys.readouterr().out
    # Listed, or a template (read once rendered): nothing to say.
    for fine in ("p3.2xlarge", "{{ params.instance_type }}"):
        make_sensor(instance_type=fine)
    assert "bundled EC2 price list" not in capsys.readouterr().out


def test_a_misspelt_instance_type_is_warned_of_when_parsed_though_its_on_demand_price_is_given(
    ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # The given price stood in for the list's, so the typo went unsaid: its spot prices, read under the
    # misspelt name, were none, and the window silently never found spot.
    make_sensor(instance_type="m5.xlarg", on_demand_usd_per_hour="0.192")
    said = capsys.readouterr().out
    assert "[warning" in said
    assert (
        "instance_type 'm5.xlarg' is not in the bundled EC2 price list (unknown instance type 'm5.xlarg'; "
        "did you mean m5.xlarge, m5n.xlarge, m5d.xlarge?)"
    ) in said
    assert "on_demand_usd_per_hour stands in for its list price, but its spot prices are read under" in said
    make_sensor(instance_type="m5.xlarge", on_demand_usd_per_hour="0.192")  # listed: nothing to say
    assert "bundled EC2 price list" not in capsys.readouterr().out


@pytest.mark.parametrize("written", ["p3.2xlarge ", " p3.2xlarge", "p3.2xlarge\n"])
def test_an_instance_type_written_with_blanks_around_it_is_refused_when_parsed(
    written: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bundled list was read stripped, so "p3.2xlarge " passed unwarned; the run looked its prices up
    # under the name as written, and failed it as an unknown type (RemoteTrainingOperator refuses it).
    with pytest.raises(ConfigurationError) as refused:
        make_sensor(instance_type=written)
    assert str(refused.value) == (
        f"instance_type {written!r} has blanks around it, which no instance type has: write 'p3.2xlarge'"
    )
    assert "bundled EC2 price list" not in capsys.readouterr().out
    # In RemoteTrainingOperator's words, on any backend: the two said it differently.
    from costaware.operators.remote_instance_type import check_written_instance_type

    for backend in ("local", "batch", "kubernetes"):
        with pytest.raises(ConfigurationError) as operator_refused:
            check_written_instance_type(written, backend)
        assert str(operator_refused.value) == str(refused.value)


@pytest.mark.parametrize(
    ("rendered", "said"),
    [
        (
            "p3.2xlarge ",
            "instance_type 'p3.2xlarge ' (as rendered) has blanks around it, which no instance type has: "
            "make the template (and the param or XCom it reads) give 'p3.2xlarge'",
        ),
        (
            None,
            "instance_type rendered 'None', which gives no type (what a template renders of a param or XCom "
            "that is not set): give it a value",
        ),
    ],
)
@pytest.mark.parametrize("deferrable", [True, False])
def test_an_instance_type_rendered_with_blanks_or_not_given_is_refused_before_any_price(
    rendered: str | None, said: str, deferrable: bool, tmp_path: Path, ledger_env: Ledger
) -> None:
    # It failed as "unknown instance type 'p3.2xlarge '... did you mean p3.2xlarge?" (the list's or the
    # price file's), and an unset param as the type 'None'.
    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00")
    deadline = (now() + timedelta(hours=30)).isoformat()
    for on_demand in ("3.06", None):
        sensor = make_sensor(
            prices=str(prices),
            instance_type="{{ params.instance_type }}",
            on_demand_usd_per_hour=on_demand,
            deadline=deadline,
            deferrable=deferrable,
        )
        sensor.render_template_fields(context(params={"instance_type": rendered}))
        with pytest.raises(AirflowFailException) as refused:
            sensor.execute(context())
        assert str(refused.value) == said
    assert ledger_env.entries(dag_id="spot_window_test") == []
    # The name meant, rendered: it waits for spot.
    sensor = make_sensor(prices=str(prices), instance_type="{{ params.instance_type }}", deadline=deadline)
    sensor.render_template_fields(context(params={"instance_type": "p3.2xlarge"}))
    with pytest.raises(TaskDeferred):
        sensor.execute(context())


def test_a_prices_file_the_dag_processor_lacks_is_warned_of_when_parsed_not_refused(
    tmp_path: Path, ledger_env: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # The file may be on the workers alone: refused at parse, such a DAG would never load.
    on_workers = tmp_path / "workers-only" / "prices.csv"
    deadline = (now() + timedelta(hours=8)).isoformat()
    sensor = make_sensor(prices=str(on_workers), deadline=deadline, deferrable=False)
    said = capsys.readouterr().out
    assert f"prices {str(on_workers)!r} is neither 'live' nor a file on this machine" in said
    assert "[warning" in said
    make_sensor(prices="lvie")
    assert "nor a file on this machine (did you mean 'live'?)" in capsys.readouterr().out
    for fine in ("live", " ", "{{ params.prices }}"):  # live, not given, a template: nothing to say
        make_sensor(prices=fine)
    assert "on this machine" not in capsys.readouterr().out
    # There once the task runs on the worker: read, not refused (a wait for spot, or a start).
    on_workers.parent.mkdir()
    write_history(on_workers, current="1.00")
    poked = sensor.poke(context())
    assert poked is False or poked.xcom_value["market"] == "spot"
