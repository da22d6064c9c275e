"""The ``[costaware]`` section is checked when first read: a misspelt option or unpriced worker is named."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from costaware import settings


@pytest.fixture(autouse=True)
def unchecked(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in [v for v in os.environ if v.startswith("AIRFLOW__COSTAWARE__")]:
        monkeypatch.delenv(variable)
    monkeypatch.setattr(settings, "_section_checked", False, raising=False)
    yield


def test_the_defaults_have_no_problem() -> None:
    assert settings.section_problems() == []


def test_a_misspelt_option_variable_is_named_with_the_option_it_meant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # AIRFLOW__COSTAWARE__WORKER_INSTANCETYPE=c5.xlarge was ignored: every try was priced as an m5.large.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_INSTANCETYPE", "c5.xlarge")
    monkeypatch.setenv("AIRFLOW__COSTAWARE__NOTHING_LIKE_ANY_CMD", "echo x")
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_REGION", "eu-west-1")  # known: no problem
    assert settings.section_problems() == [
        "AIRFLOW__COSTAWARE__NOTHING_LIKE_ANY_CMD is no [costaware] option, so it is ignored: the options "
        f"are {', '.join(settings.OPTIONS)}; rename or delete it",
        "AIRFLOW__COSTAWARE__WORKER_INSTANCETYPE is no [costaware] option, so it is ignored: did you mean "
        "'worker_instance_type' (AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE)? Rename it",
    ]


def test_a_misspelt_option_in_airflow_cfg_is_named_too() -> None:
    from airflow.sdk import conf

    conf.set("costaware", "worker_markte", "spot")
    try:
        problems = settings.section_problems()
    finally:
        conf.remove_option("costaware", "worker_markte")
    assert problems == [
        "[costaware] worker_markte in airflow.cfg is no [costaware] option, so it is ignored: did you mean "
        "'worker_market' (AIRFLOW__COSTAWARE__WORKER_MARKET)? Rename it"
    ]


def test_a_worker_instance_type_or_region_with_no_price_is_named_with_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found only from a task log line per try, each recorded at $0 as unpriced.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE", "m5.larg")
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_REGION", "us-east1")
    instance_type, region = settings.section_problems()
    assert instance_type.startswith(
        "[costaware] worker_instance_type 'm5.larg' is not in the bundled price catalog (unknown instance "
        "type 'm5.larg'; did you mean m5.large"
    )
    assert (
        "Set it (AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE) to the workers' own, e.g. m5.large"
        in instance_type
    )
    assert "recorded at $0 (unpriced)" in instance_type
    assert region.startswith(
        "[costaware] worker_region 'us-east1' is not in the bundled price catalog (unknown region; did you "
        "mean us-east-1"
    )
    assert "Set it (AIRFLOW__COSTAWARE__WORKER_REGION)" in region


def test_the_first_option_read_logs_each_problem_once_and_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_INSTANCETYPE", "c5.xlarge")
    with caplog.at_level(logging.ERROR, logger="costaware.settings"):
        assert settings.option("worker_instance_type") == "m5.large"  # Airflow's value: not stopped
        settings.option("worker_region")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "WORKER_INSTANCETYPE is no [costaware] option" in errors[0], errors


def test_loading_the_plugin_logs_a_misspelt_option() -> None:
    # The scheduler and api-server load the plugin at start: the typo is in their logs before any try runs.
    env = {**os.environ, "AIRFLOW__COSTAWARE__WORKER_INSTANCETYPE": "c5.xlarge"}
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    done = subprocess.run(
        [sys.executable, "-c", "import costaware.plugins.plugin"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "did you mean 'worker_instance_type' (AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE)" in (
        done.stdout + done.stderr
    )


def test_a_worker_market_that_is_no_market_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # 'spto' was said once per try, each priced on-demand; nothing at start.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_MARKET", "spto")
    assert settings.section_problems() == [
        "[costaware] worker_market: unknown market 'spto': use one of spot, on_demand, local. Set it "
        "(AIRFLOW__COSTAWARE__WORKER_MARKET) to the market the workers run on: until then a try that names "
        "none of its own is priced on-demand"
    ]
