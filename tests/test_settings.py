"""The ``[costaware]`` section is checked when first read: a misspelt option or unpriced worker is named."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from costaware import Ledger, settings
from costaware.adapters.price_files import bundled_catalog


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
    # Found only from a task log line per try. On-demand, a price imported into the ledger's cache (or a
    # live one) prices it: a warning saying so, not an error claiming every try is recorded at $0.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE", "m5.larg")
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_REGION", "us-east1")
    assert settings.section_problems() == []
    instance_type, region = settings.unpriced_worker_compute()
    assert instance_type.startswith(
        "[costaware] worker_instance_type 'm5.larg' is not in the bundled price catalog (unknown instance "
        "type 'm5.larg'; did you mean m5.large"
    )
    assert (
        "priced on it only from the ledger's price cache (`costaware prices import`, `costaware prices "
        "refresh`) or live prices (price_aws_conn_id), else recorded at $0 (unpriced): price it there (then "
        "ignore this), or set it (AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE) to the workers' own, e.g. "
        "m5.large"
    ) in instance_type
    assert region.startswith(
        "[costaware] worker_region 'us-east1' is not in the bundled price catalog (unknown region; did you "
        "mean us-east-1"
    )
    assert "or set it (AIRFLOW__COSTAWARE__WORKER_REGION)" in region
    # On spot, a try's price is the catalog's on-demand one less its saving: no imported price helps.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_MARKET", "spot")
    assert settings.unpriced_worker_compute() == []
    instance_type, region = settings.section_problems()
    assert (
        "with worker_market spot, every try that names no compute of its own is recorded at $0 (unpriced), "
        "whatever prices were imported: set it (AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE)"
    ) in instance_type
    assert "recorded at $0 (unpriced), whatever prices were imported" in region


def test_an_on_demand_worker_type_a_price_import_can_price_is_warned_of_not_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from decimal import Decimal

    from costaware.adapters.price_source import PriceCache, configured_prices
    from costaware.core.price_list import ListPrice
    from costaware.core.pricing import price_compute

    # A deployment that priced its workers with `costaware prices import` had an error in every process's log
    # saying its tries were recorded at $0, which they were not.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_INSTANCE_TYPE", "zz9.large")
    ledger = Ledger.from_url(f"sqlite:///{tmp_path}/ledger.db")
    listed = ListPrice(
        service="ec2", instance_type="zz9.large", region="us-east-1", usd_per_hour=Decimal("0.5")
    )
    # Fresh or stale by the clock, a cached price is used: the date only has to be aware.
    PriceCache(ledger).put([listed], origin="import", fetched_at=datetime(2026, 11, 1, tzinfo=timezone.utc))
    figure = configured_prices(ledger, aws_conn_id="").figure("zz9.large", "us-east-1", "ec2")
    charge = price_compute(
        bundled_catalog(),
        instance_type="zz9.large",
        region="us-east-1",
        market="on_demand",
        seconds=3600,
        on_demand_usd_per_hour=figure.usd_per_hour,
        on_demand_source=figure.price_source,
    )
    assert charge.usd == Decimal("0.5")  # priced, as the try-cost listener prices it
    with caplog.at_level(logging.WARNING, logger="costaware.settings"):
        settings.log_section_problems()
    logged = [r.levelno for r in caplog.records if r.name == "costaware.settings"]
    assert logged == [logging.WARNING]
    assert "worker_instance_type 'zz9.large' is not in the bundled price catalog" in caplog.text


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


def test_default_worker_compute_is_in_the_bundled_catalog_so_the_check_does_not_parse_it() -> None:
    # Every process loads the plugin, which checks the section: with the defaults, parsing the catalog
    # (~50 ms) only found them there. The check skips them, right only while the catalog has them.
    instance_type = settings.OPTIONS["worker_instance_type"].default
    region = settings.OPTIONS["worker_region"].default
    assert bundled_catalog().offer(instance_type, region).usd_per_hour > 0
    bundled_catalog.cache_clear()
    settings.log_section_problems()
    assert bundled_catalog.cache_info().currsize == 0


def test_an_airflow_home_under_the_home_folder_is_where_airflow_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AIRFLOW_HOME='~/airflow' (quoted in a .env file) is Airflow's <home>/airflow, but the spool, the
    # ledger and the stores read it as a folder named '~' under whichever folder a process ran in: an
    # entry spooled by a task there was never found by `costaware spool drain` run elsewhere.
    from costaware.core.errors import ConfigurationError
    from costaware.ledger_spool import spool_dir
    from costaware.settings import airflow_home, default_store, ledger_url

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_HOME", "~/airflow")
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    assert airflow_home() == tmp_path / "airflow"
    assert spool_dir() == tmp_path / "airflow" / "costaware" / "spool"
    assert default_store("models") == str(tmp_path / "airflow" / "costaware" / "models")
    assert ledger_url() == f"sqlite:///{tmp_path}/airflow/costaware/ledger.db"
    # A home nobody has: a bare RuntimeError from Path.expanduser before, or Path.home() with HOME unset.
    monkeypatch.setenv("AIRFLOW_HOME", "~nosuchuser/airflow")
    unknown = r"^\$AIRFLOW_HOME '~nosuchuser/airflow' starts with the home folder of user 'nosuchuser', whom"
    with pytest.raises(ConfigurationError, match=unknown):
        airflow_home()


def test_an_airflow_home_naming_a_variable_is_where_airflow_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AIRFLOW_HOME='$DATA_ROOT/airflow' (a .env file takes it as written) is expanded by Airflow; costaware
    # read a folder named '$DATA_ROOT' under whichever folder a process ran in.
    from costaware.ledger_spool import spool_dir
    from costaware.settings import airflow_home

    monkeypatch.setenv("DATA_ROOT", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_HOME", "$DATA_ROOT/airflow")
    assert airflow_home() == tmp_path / "airflow"
    assert spool_dir() == tmp_path / "airflow" / "costaware" / "spool"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AIRFLOW_HOME", "${HOME}/airflow")
    assert airflow_home() == tmp_path / "home" / "airflow"


def test_an_airflow_home_is_expanded_until_it_settles_as_airflow_expands_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow repeats expandvars and expanduser until nothing changes: AIRFLOW_HOME='$A' with A='$B/airflow'
    # is <B>/airflow there, but costaware expanded once and read a relative '$B/airflow', a spool and a
    # ledger file under each working folder.
    from airflow.configuration import expand_env_var

    from costaware.ledger_spool import spool_dir
    from costaware.settings import airflow_home

    monkeypatch.setenv("B", str(tmp_path))
    monkeypatch.setenv("A", "$B/airflow")
    monkeypatch.setenv("AIRFLOW_HOME", "$A")
    assert airflow_home() == tmp_path / "airflow" == Path(expand_env_var("$A"))
    assert spool_dir() == tmp_path / "airflow" / "costaware" / "spool"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("A", "~/airflow")  # a '~' that a variable brings in
    assert airflow_home() == tmp_path / "home" / "airflow" == Path(expand_env_var("$A"))


def test_with_home_set_empty_the_airflow_home_is_airflow_s_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # HOME='' and AIRFLOW_HOME unset: Airflow's home is /airflow (expanduser takes the root for an empty
    # home). costaware refused it: a task's cost entry went neither to the ledger file nor to the spool.
    from airflow.configuration import get_airflow_home

    from costaware.ledger_spool import spool_dir
    from costaware.settings import airflow_home

    monkeypatch.setenv("HOME", "")
    monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    assert airflow_home() == Path("/airflow") == Path(get_airflow_home())
    assert spool_dir() == Path("/airflow/costaware/spool")


def test_an_airflow_home_refused_names_what_was_given_and_what_it_expanded_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from costaware.core.errors import ConfigurationError
    from costaware.settings import airflow_home

    monkeypatch.setenv("U", "~nosuchuser")
    monkeypatch.setenv("AIRFLOW_HOME", "$U/airflow")
    given = (
        r"^\$AIRFLOW_HOME '\$U/airflow' \(expanded to '~nosuchuser/airflow'\) starts with the home folder "
        r"of user 'nosuchuser', whom this machine does not know: .* absolute path such as '/opt/airflow'$"
    )
    with pytest.raises(ConfigurationError, match=given):
        airflow_home()
    # A variable naming itself grows each round: Airflow never returns; costaware says so.
    monkeypatch.setenv("A", "$A/x")
    monkeypatch.setenv("AIRFLOW_HOME", "$A")
    with pytest.raises(ConfigurationError, match=r"^\$AIRFLOW_HOME '\$A' never stops expanding"):
        airflow_home()


def test_an_airflow_home_with_no_home_folder_to_expand_into_says_so_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # HOME unset and a uid with no passwd entry (OpenShift's random uids): '~/airflow' stays as it is.
    import pwd

    from costaware.core.errors import ConfigurationError
    from costaware.settings import airflow_home

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(uid)

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    said = (
        r"^AIRFLOW_HOME \(unset: Airflow's default '~/airflow'\) starts with '~', but this process has no "
        r"home folder \(HOME is unset and its user has none\): .*set AIRFLOW_HOME to an absolute path "
        r"such as '/opt/airflow'$"
    )
    with pytest.raises(ConfigurationError, match=said):
        airflow_home()


@pytest.mark.timeout(20)
def test_an_airflow_home_that_doubles_each_round_is_refused_not_expanded_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A='$A$A' doubles each round: 100 rounds are 2**100 characters, so the round cap was never reached
    # and airflow_home() hung (with its memory growing).
    from costaware.core.errors import ConfigurationError
    from costaware.settings import airflow_home

    monkeypatch.setenv("A", "$A$A")
    monkeypatch.setenv("AIRFLOW_HOME", "$A")
    with pytest.raises(ConfigurationError, match=r"^\$AIRFLOW_HOME '\$A' never stops expanding"):
        airflow_home()


def test_an_empty_airflow_home_is_refused_saying_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Airflow keeps AIRFLOW_HOME='' (its airflow.cfg read from each working folder), but costaware used
    # ~/airflow: its ledger, spool and stores were not where docs/deployment.md said (Airflow's folder).
    from costaware.core.errors import ConfigurationError
    from costaware.ledger_spool import spool_dir
    from costaware.settings import airflow_home, ledger_url

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_HOME", "")
    monkeypatch.delenv("COSTAWARE_LEDGER_URL", raising=False)
    said = (
        r"^AIRFLOW_HOME is set but empty .*; unset it \(Airflow's default '~/airflow'\) or set it to an "
        r"absolute path such as '/opt/airflow'"
    )
    for read in (airflow_home, spool_dir, ledger_url):
        with pytest.raises(ConfigurationError, match=said):
            read()
    assert list(tmp_path.iterdir()) == []  # nothing made in ~/airflow


def test_stores_an_earlier_release_kept_under_the_working_folder_are_named_once_not_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Releases before '~' and $VARS were expanded kept the feature cache, model and checkpoint stores in
    # ./~/airflow/costaware/; after the upgrade they were silently not found: a cold cache, no champion.
    import shlex

    home, working = tmp_path / "home", tmp_path / "working"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AIRFLOW_HOME", "~/airflow")
    monkeypatch.delenv("COSTAWARE_FEATURE_CACHE", raising=False)
    old, new = working / "~" / "airflow" / "costaware", home / "airflow" / "costaware"
    (old / "features" / "entries").mkdir(parents=True)
    (old / "models").mkdir()
    (old / "ledger.db").write_bytes(b"")  # the ledger's own warning names it, with its own commands
    (new / "models").mkdir(parents=True)  # already there: merged by hand, not moved over
    monkeypatch.chdir(working)
    with caplog.at_level("WARNING", logger="costaware.settings_home"):
        assert settings.feature_cache() == str(new / "features")
        settings.default_store("models")
        settings.default_store("checkpoints")
    (said,) = [r.getMessage() for r in caplog.records if r.name == "costaware.settings_home"]
    assert (
        f"an earlier costaware kept its stores in {old} ($AIRFLOW_HOME '~/airflow' taken as a folder" in said
    )
    assert f"this release reads {new}" in said
    q = shlex.quote
    assert f"`mkdir -p {q(str(new))} && mv {q(str(old / 'features'))} {q(str(new / 'features'))}`" in said
    assert "merge by hand what is in both: models" in said
    assert "ledger.db" not in said
    # Nothing moved or made for it.
    assert (old / "features" / "entries").is_dir() and not (new / "features").exists()
    # A working folder without one: nothing said.
    caplog.clear()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with caplog.at_level("WARNING", logger="costaware.settings_home"):
        settings.default_store("models")
    assert [r for r in caplog.records if r.name == "costaware.settings_home"] == []


def _stores_under_old_and_new_homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """AIRFLOW_HOME '~/airflow': the working folder's './~/airflow' and the home's (neither made yet)."""
    home, working = tmp_path / "home", tmp_path / "working"
    working.mkdir()
    monkeypatch.chdir(working)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AIRFLOW_HOME", "~/airflow")
    monkeypatch.delenv("COSTAWARE_FEATURE_CACHE", raising=False)
    return working / "~" / "airflow", home / "airflow"


def test_stores_under_an_old_airflow_home_linked_to_the_new_one_are_not_said_to_be_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # './~/airflow' a link to '$HOME/airflow': one folder, yet compared as text it was named as left
    # behind, with "merge by hand what is in both" of every store.
    old_home, new_home = _stores_under_old_and_new_homes(tmp_path, monkeypatch)
    (new_home / "costaware" / "models").mkdir(parents=True)
    old_home.parent.mkdir()
    old_home.symlink_to(new_home, target_is_directory=True)
    with caplog.at_level("WARNING", logger="costaware.settings_home"):
        settings.default_store("models")
    assert [r.getMessage() for r in caplog.records if r.name == "costaware.settings_home"] == []


@pytest.mark.parametrize("method", ["is_dir", "iterdir", "exists"])
def test_an_earlier_stores_folder_that_cannot_be_looked_in_does_not_stop_the_stores_opening(
    method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A './~' folder of another user: the PermissionError of looking in it escaped from costaware_home()
    # and failed every store and ledger open. The check is given up (at debug), the store is named.
    old_home, new_home = _stores_under_old_and_new_homes(tmp_path, monkeypatch)
    (old_home / "costaware" / "models").mkdir(parents=True)
    (new_home / "costaware").mkdir(parents=True)
    looked = getattr(Path, method)

    def forbidden(path: Path) -> object:
        if path.is_relative_to(old_home) or method == "exists":
            raise PermissionError(13, "Permission denied", str(path))
        return looked(path)

    monkeypatch.setattr(Path, method, forbidden)
    with caplog.at_level("DEBUG", logger="costaware.settings_home"):
        assert settings.default_store("models") == str(new_home / "costaware" / "models")
    (said,) = [r.getMessage() for r in caplog.records if r.name == "costaware.settings_home"]
    assert said.startswith(f"costaware: could not look in {old_home / 'costaware'} for an earlier release")
    assert "Permission denied" in said


def test_a_working_folder_since_removed_has_no_earlier_folder_to_look_in_and_stops_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Path('~/airflow').absolute() asks for the working folder: removed under a long-lived worker, the
    # stores' warning gave up, but airflow_home_as_written raised FileNotFoundError into the spool's drain.
    from costaware.ledger_spool import earlier_spool_dir
    from costaware.settings import airflow_home_as_written

    old_home, new_home = _stores_under_old_and_new_homes(tmp_path, monkeypatch)
    assert airflow_home_as_written() == ("~/airflow", old_home, new_home)
    assert airflow_home_as_written(Path("/srv/airflow")) == ("~/airflow", old_home, Path("/srv/airflow"))
    old_home.mkdir(parents=True)  # the earlier spool is looked for under it, while it is there
    (old_home / "costaware" / "spool").mkdir(parents=True)
    assert earlier_spool_dir() == old_home / "costaware" / "spool"
    (old_home / "costaware" / "spool").rmdir()
    (old_home / "costaware").rmdir()
    old_home.rmdir()
    old_home.parent.rmdir()
    (tmp_path / "working").rmdir()
    assert airflow_home_as_written() is None
    assert earlier_spool_dir() is None
    with caplog.at_level("DEBUG", logger="costaware.settings_home"):
        assert settings.default_store("models") == str(new_home / "costaware" / "models")
    assert [r for r in caplog.records if r.name == "costaware.settings_home"] == []
