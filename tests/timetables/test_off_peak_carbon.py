"""OffPeakTimetable with an objective: the start inside each window, ranked on cost, carbon or both."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pendulum
import pytest
from airflow.timetables.base import TimeRestriction

from costaware.core.errors import ConfigurationError
from costaware.timetables import OffPeakTimetable

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
ELECTRICITY = str(SHARED / "electricity_prices" / "US-CAL-CISO_2023.csv")
DAY = "2023-06-14T00:00:00Z"


def first_run(**kwargs: object) -> tuple[pendulum.DateTime, pendulum.DateTime]:
    tt = OffPeakTimetable(["00:00-24:00"], timezone="UTC", run_hours=3, power_kw=100, **kwargs)  # type: ignore[arg-type]
    restriction = TimeRestriction(earliest=pendulum.parse(DAY), latest=None, catchup=True)  # type: ignore[arg-type]
    info = tt.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
    assert info is not None and info.data_interval is not None
    return info.run_after, info.data_interval.start


needs_shared = pytest.mark.skipif(not Path(ELECTRICITY).exists(), reason="shared electricity prices absent")


@needs_shared
def test_carbon_chooses_a_different_hour_than_cost_on_the_californian_grid() -> None:
    cost_start, window = first_run(electricity=ELECTRICITY)
    carbon_start, carbon_window = first_run(electricity=ELECTRICITY, objective="carbon", carbon="US-CAL-CISO")
    # Power is cheapest at night (02:00 UTC), the grid cleanest with the midday sun (19:00 UTC = 12:00 PDT).
    assert window == carbon_window == pendulum.parse(DAY)
    assert cost_start == pendulum.parse("2023-06-14T02:00:00Z")
    assert carbon_start == pendulum.parse("2023-06-14T19:00:00Z")


@needs_shared
def test_cost_plus_carbon_at_price_zero_is_cost_and_a_high_price_moves_towards_carbon() -> None:
    cost_start, _ = first_run(electricity=ELECTRICITY)
    zero, _ = first_run(
        electricity=ELECTRICITY, objective="cost+carbon", carbon_usd_per_tonne="0", carbon="US-CAL-CISO"
    )
    assert zero == cost_start
    # The default intensity is the grid zone of the region (us-west-1 draws from US-CAL-CISO).
    priced, _ = first_run(
        electricity=ELECTRICITY, objective="cost+carbon", carbon_usd_per_tonne=200, region="us-west-1"
    )
    assert priced != cost_start


def test_default_cost_starts_when_the_window_opens_and_reads_nothing() -> None:
    start, window = first_run()
    assert start == window
    # A DAG serialized before carbon= with cost was refused still schedules, reading no file.
    old = OffPeakTimetable.deserialize(
        {"windows": ["00:00-24:00"], "days": "*", "timezone": "UTC", "carbon": "/nonexistent.csv"}
    )
    restriction = TimeRestriction(earliest=pendulum.parse(DAY), latest=None, catchup=True)  # type: ignore[arg-type]
    info = old.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
    assert info is not None and info.run_after == pendulum.parse(DAY)


def test_carbon_without_electricity_ranks_on_bundled_gb_intensity() -> None:
    start, window = first_run(objective="carbon", carbon="GB")
    assert window <= start < window.add(hours=22)
    assert start != window  # the cleanest 3 hours of that GB day are not the first


def test_serialize_round_trips_the_objective_and_keeps_todays_form() -> None:
    plain = OffPeakTimetable(["22:00-06:00"])
    assert plain.serialize() == {"windows": ["22:00-06:00"], "days": "daily", "timezone": "UTC"}
    tt = OffPeakTimetable(
        ["22:00-06:00"], objective="cost+carbon", carbon_usd_per_tonne="85", carbon="GB", run_hours=2
    )
    data = tt.serialize()
    assert data["objective"] == "cost+carbon" and data["carbon_usd_per_tonne"] == 85.0
    assert OffPeakTimetable.deserialize(data) == tt
    assert OffPeakTimetable.deserialize(plain.serialize()) == plain


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"objective": "greenest"}, "objective 'greenest' is not one of"),
        ({"objective": "cost+carbon", "run_hours": 2}, "needs carbon_usd_per_tonne"),
        ({"objective": "cost+carbon", "carbon_usd_per_tonne": "lots", "run_hours": 2}, "'lots'"),
        ({"objective": "carbon"}, "needs run_hours"),
        ({"objective": "carbon", "run_hours": 2, "power_kw": 0}, "power_kw=0"),
        ({"objective": "carbon", "run_hours": 2, "power_kw": 6500}, "power_kw=6500 .* watts given as kW"),
        # A forgotten objective= left carbon unused: no carbon awareness, and no word of it.
        (
            {"carbon": "GB", "run_hours": 2},
            "carbon='GB' is read only by objective 'carbon' or 'cost\\+carbon'",
        ),
        (
            {"objective": "carbon", "carbon_usd_per_tonne": 100, "run_hours": 2},
            "carbon_usd_per_tonne=100 is read only by objective 'cost\\+carbon', not 'carbon'",
        ),
    ],
)
def test_bad_objective_arguments_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        OffPeakTimetable(["22:00-06:00"], **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("written", ["None", "null", " None ", " "])
def test_an_objective_written_as_none_is_refused_not_read_as_cost(written: str) -> None:
    # A timetable's arguments are never templates: objective='None' was read as cost since the not-given
    # rule for rendered values reached Objective.parse (it was refused before).
    message = (
        f"OffPeakTimetable objective={written!r} names no objective: write one of cost, carbon, cost+carbon, "
        "or leave objective out for cost"
    )
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        OffPeakTimetable(["22:00-06:00"], objective=written)
    assert OffPeakTimetable(["22:00-06:00"], objective="").objective == "cost"  # as it loaded before


@pytest.mark.parametrize("written", ["None", "null", " None "])
@pytest.mark.parametrize("objective", ["cost", "carbon"])
def test_a_carbon_written_as_none_is_refused_not_read_as_not_given(written: str, objective: str) -> None:
    # Beside 'cost' it loaded without a word once check_settings_used read it as a rendered param's.
    message = (
        f"OffPeakTimetable carbon={written!r} names no grid zone or file: give one (e.g. 'GB'), or leave "
        "carbon out for the region's grid"
    )
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        OffPeakTimetable(["22:00-06:00"], objective=objective, carbon=written, run_hours=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"objective": "carbon", "region": "us-east-1"}, "region 'us-east-1' has no known grid zone: pass"),
        # A misspelt region read "has no known grid zone", as if it were a real one with no data.
        (
            {"objective": "carbon", "region": "us-est-1"},
            r"region 'us-est-1' is not an AWS region; did you mean .*us-east-1",
        ),
        ({"objective": "carbon", "region": "us-west-1a"}, "region 'us-west-1a' is a zone"),
        # It read "region None has no known grid zone".
        (
            {"objective": "carbon"},
            r"neither carbon= nor a region= whose grid is known \(e\.g\. 'us-west-1'\) was given",
        ),
        ({"objective": "carbon", "carbon": "XX"}, "no bundled carbon intensity for grid zone 'XX': bundled"),
        ({"objective": "carbon", "carbon": "gb"}, "grid zone 'gb': did you mean 'GB'\\?"),
        # Only the bundled zones were listed for these, where carbon show asks about the zone meant.
        (
            {"objective": "carbon", "carbon": "DE_LU"},
            "grid zone 'DE_LU': did you mean 'DE-LU'\\? Zone ids are written with '-'",
        ),
        (
            {"objective": "carbon", "carbon": "AU-NSV"},
            "grid zone 'AU-NSV': did you mean 'AU-NSW'\\? If not, .* `costaware carbon import FILE "
            "--zone AU-NSV`",
        ),
        ({"objective": "carbon", "carbon": "GV"}, "grid zone 'GV': did you mean 'GB'\\? If not"),
        (
            {"objective": "carbon", "carbon": "GR"},
            "no bundled carbon intensity for grid zone 'GR': bundled are",
        ),
        ({"objective": "carbon", "carbon": "/no/such/GB.csv"}, "carbon='/no/such/GB.csv' is not a file"),
        ({"electricity": "caiso.csv"}, "electricity='caiso.csv' is not a file"),
        # Passed at parse, then every run failed "No such file": the readers read local files only.
        (
            {"objective": "carbon", "carbon": "s3://grids/GB_2024.csv"},
            "carbon='s3://grids/GB_2024.csv' is a URI, and it is read as a local file: copy it",
        ),
        ({"electricity": "s3://m/caiso.csv"}, "electricity='s3://m/caiso.csv' is a URI"),
    ],
)
def test_a_carbon_source_the_scheduler_could_not_read_fails_when_the_dag_is_parsed(
    kwargs: dict[str, object], message: str
) -> None:
    # Found by the scheduler instead, the error stopped the DAG's schedule with nothing in the UI to say why.
    with pytest.raises(ConfigurationError, match=message):
        OffPeakTimetable(["22:00-06:00"], run_hours=2, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argument", "text", "message"),
    [
        # An electricity CSV passed as the carbon file: the scheduler's next_dagrun_info raised on it.
        (
            "carbon",
            "timestamp_utc,usd_per_mwh\n",
            r"lacks column\(s\) g_co2eq_per_kwh_lca or g_co2eq_per_kwh_direct",
        ),
        ("carbon", "", r"lacks column\(s\) timestamp_utc, .* \(the file is empty\)"),
        ("electricity", "timestamp_utc,g_co2eq_per_kwh_lca\n", r"lacks column\(s\) usd_per_mwh"),
        ("electricity", '"timestamp_utc","usd_per_mwh"\n2023-01-01T00:00:00Z,42.5\n', None),  # quoted
        # A header alone passed, and the scheduler's reader refused it, said in its log only: each run then
        # started when its window opened.
        (
            "electricity",
            "timestamp_utc,usd_per_mwh\n",
            r"electricity='.*wrong\.csv' has a header but no rows: add a row per hour under its header "
            r"\(timestamp_utc,usd_per_mwh\), or pass a recorded hourly electricity price CSV",
        ),
        ("electricity", "\ufefftimestamp_utc,usd_per_mwh\n\n \n", "has a header but no rows"),
        ("carbon", "timestamp_utc,g_co2eq_per_kwh_lca\n", r"carbon='.*wrong\.csv' has a header but no rows"),
    ],
)
def test_a_file_of_another_format_fails_when_the_dag_is_parsed(
    tmp_path: Path, argument: str, text: str, message: str | None
) -> None:
    wrong = tmp_path / "wrong.csv"
    wrong.write_text(text)
    kwargs = (
        {"objective": "carbon", "carbon": str(wrong)} if argument == "carbon" else {"electricity": str(wrong)}
    )
    if message is None:
        assert OffPeakTimetable(["22:00-06:00"], run_hours=2, **kwargs) is not None  # type: ignore[arg-type]
        return
    with pytest.raises(ConfigurationError, match=message):
        OffPeakTimetable(["22:00-06:00"], run_hours=2, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("argument", ["electricity", "carbon"])
@pytest.mark.parametrize(
    ("encoding", "said"),
    [
        ("utf-16", "power.csv is UTF-16 text, as Excel's 'Unicode Text' or PowerShell 5's '>' saves"),
        ("cp1252", "power.csv is not UTF-8 text (byte 0xe9 on line 2; Latin-1 or Windows-1252, perhaps)"),
    ],
    ids=["utf-16", "windows-1252"],
)
def test_a_file_that_is_not_utf8_is_told_what_it_is_when_the_dag_is_parsed(
    tmp_path: Path, argument: str, encoding: str, said: str
) -> None:
    # It was "cannot be read ('utf-8' codec can't decode byte 0xff in position 0: invalid start byte)".
    csv = tmp_path / "power.csv"
    header = "timestamp_utc,usd_per_mwh" if argument == "electricity" else "timestamp_utc,g_co2eq_per_kwh_lca"
    csv.write_bytes(f"{header}\n2023-01-01T00:00:00Z,42.5 \u00e9\n".encode(encoding))
    kwargs = (
        {"electricity": str(csv)}
        if argument == "electricity"
        else {"objective": "carbon", "carbon": str(csv)}
    )
    with pytest.raises(ConfigurationError) as caught:
        OffPeakTimetable(["22:00-06:00"], run_hours=2, **kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"{argument}={str(csv)!r}: {said}: the {argument} file is read as UTF-8; save it as UTF-8 (Excel: "
        "'CSV UTF-8')"
    )


@pytest.mark.parametrize(
    ("after_blank_lines", "said"),
    [
        ("2023-01-01T00:00:00Z,42.5\n\u00e9\n", "byte 0xe9 on line 70003"),
        # Alone at the file's end, a lead byte is found bad only when the decoder is told the file is over.
        ("\u00e9", "byte 0xe9 on line 70002"),
    ],
    ids=["after-a-row", "at-the-end"],
)
def test_a_byte_not_utf8_past_the_first_64_kib_is_named_with_its_line(
    tmp_path: Path, after_blank_lines: str, said: str
) -> None:
    # Past the first 64 KiB the decoder's position counts from its chunk: "byte 0x0a on line 4492" was said
    # of a file whose bad byte is 0xe9 on line 70003.
    csv = tmp_path / "power.csv"
    text = "timestamp_utc,usd_per_mwh\n" + "\n" * 70_000 + after_blank_lines
    csv.write_bytes(text.encode("cp1252"))
    with pytest.raises(ConfigurationError) as caught:
        OffPeakTimetable(["22:00-06:00"], run_hours=2, electricity=str(csv))
    assert f"power.csv is not UTF-8 text ({said}; Latin-1 or Windows-1252, perhaps)" in str(caught.value)


@pytest.mark.parametrize(("name", "value"), [("run_hours", "2h"), ("power_kw", "6.5kW")])
def test_a_length_or_power_with_a_unit_is_named(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"{name}='{value}' is not a number of"):
        OffPeakTimetable(["22:00-06:00"], objective="carbon", carbon="GB", **{"run_hours": 2, name: value})


def test_a_run_longer_than_its_window_fails_when_the_dag_is_parsed() -> None:
    with pytest.raises(
        ConfigurationError, match=r"run_hours=12 is longer than the longest window \(8 hours\)"
    ):
        OffPeakTimetable(["22:00-06:00"], objective="carbon", carbon="GB", run_hours=12)
    assert OffPeakTimetable(["22:00-06:00", "12:00-13:00"], objective="carbon", carbon="GB", run_hours=8)


def test_the_parse_checks_are_for_ranked_runs_and_not_for_a_rebuilt_timetable(tmp_path: Path) -> None:
    # run_hours means nothing without an objective: a DAG that set it anyway still parses.
    assert OffPeakTimetable(["22:00-06:00"], run_hours=12).run_hours == 12
    # The scheduler and API server rebuild it from its serialized form: the DAG processor's files need not
    # be there too (the scheduler reads them only when it asks for the next run).
    csv = tmp_path / "GB.csv"
    csv.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n2023-01-01T00:00:00Z,200\n")
    tt = OffPeakTimetable(["22:00-06:00"], objective="carbon", carbon=str(csv), run_hours=2)
    csv.unlink()
    assert OffPeakTimetable.deserialize(tt.serialize()) == tt


def test_a_date_past_the_bundled_year_starts_at_that_date_and_hour_of_the_year() -> None:
    # A typical year, as the ledger's emissions read it: December's hour-of-day profile chose 23:00 UTC for
    # every night of every later season.
    tt = OffPeakTimetable(["22:00-06:00"], timezone="UTC", objective="carbon", carbon="GB", run_hours=2)

    def start(day: str) -> tuple[int, int]:
        restriction = TimeRestriction(
            earliest=pendulum.parse(f"{day}T12:00:00+00:00"), latest=None, catchup=True
        )  # type: ignore[arg-type]
        info = tt.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
        assert info is not None
        return info.run_after.hour, info.run_after.minute

    for day in ("06-14", "09-10", "01-20"):
        assert start(f"2026-{day}") == start(f"2023-{day}")
    assert len({start(f"2026-{day}") for day in ("06-14", "09-10", "01-20", "03-25")}) > 1


def test_an_imported_carbon_file_comes_before_the_bundled_year(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `costaware carbon import` reached `carbon show` and the ledger, but every scheduling decision read the
    # bundled 2023 year alone, and a zone only imported ("PL") was refused as the DAG was parsed.
    from costaware.cli import main

    fixture = tmp_path / "GB_2026-11-20.csv"  # cleanest at 13:00, where the bundled year's is at night
    rows = [f"2026-11-20T{h:02d}:00:00Z,{50 if h == 13 else 300}" for h in range(24)]
    fixture.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "\n".join(rows) + "\n")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))

    def start(zone: str) -> pendulum.DateTime:
        tt = OffPeakTimetable(["00:00-24:00"], timezone="UTC", run_hours=1, objective="carbon", carbon=zone)
        earliest = pendulum.parse("2026-11-20T00:00:00Z")
        restriction = TimeRestriction(earliest=earliest, latest=None, catchup=True)  # type: ignore[arg-type]
        info = tt.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
        assert info is not None
        return info.run_after

    typical = start("GB")  # the bundled year's cleanest hour of 20 November
    assert main(["carbon", "import", str(fixture), "--zone", "GB"]) == 0
    assert typical != pendulum.parse("2026-11-20T13:00:00Z")
    assert start("GB") == pendulum.parse("2026-11-20T13:00:00Z")
    with pytest.raises(ConfigurationError, match="no bundled carbon intensity for grid zone 'PL'"):
        start("PL")
    assert main(["carbon", "import", str(fixture), "--zone", "PL"]) == 0
    assert start("PL") == pendulum.parse("2026-11-20T13:00:00Z")


def test_a_short_import_is_followed_by_the_typical_year_not_its_own_flat_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four imported hours were all the decisions saw: every later hour got their flat profile, and no
    # decision told a clean hour from a dirty one.
    from datetime import datetime, timezone

    from costaware.adapters.carbon_data import bundled_carbon
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.cli import main
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    fixture = tmp_path / "GB_short.csv"
    rows = [f"2026-11-20T{h:02d}:00:00Z,100" for h in range(4)]
    fixture.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "\n".join(rows) + "\n")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    assert main(["carbon", "import", str(fixture), "--zone", "GB"]) == 0
    at = datetime(2026, 11, 20, 1, tzinfo=timezone.utc)
    series = carbon_intensity("GB", region=None, objective=Objective.parse("carbon"), at=at)
    assert series is not None
    hourly = hourly_series(series, at, 24)
    assert hourly[:3] == [100.0, 100.0, 100.0]  # the import where it has hours
    typical = bundled_carbon("GB")
    later = datetime(2023, 11, 20, 10, tzinfo=timezone.utc)
    assert hourly[9] == float(typical.mean_usd_per_hour(later, later.replace(hour=11)))  # then the year's
    assert len(set(hourly[3:])) > 3  # a day's shape, not one flat value


def test_a_file_the_scheduler_cannot_read_starts_the_run_when_its_window_opens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Raised, the scheduler dropped the DAG's next run ("Failed to fetch run info"): it never ran again.
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    csv = tmp_path / "power.csv"
    cheap = {3, 4}  # the window's cheapest two hours start at 03:00
    csv.write_text(
        "timestamp_utc,usd_per_mwh\n"
        + "".join(f"2025-06-11T{h:02d}:00:00Z,{10 if h in cheap else 90}\n" for h in range(24))
    )
    timetable = OffPeakTimetable(["00:00-06:00"], timezone="UTC", run_hours=2, electricity=str(csv))
    start = pendulum.datetime(2025, 6, 11, tz="UTC")
    with DAG("ranked", schedule=timetable, start_date=start, catchup=True) as dag:
        EmptyOperator(task_id="t")
    scheduled = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    ranked = scheduled.next_dagrun_info(last_automated_run_info=None)
    assert ranked is not None and ranked.run_after == pendulum.datetime(2025, 6, 11, 3, tz="UTC")

    csv.unlink()  # moved since the DAG was parsed, or not on the scheduler's machine
    rebuilt = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    info = rebuilt.next_dagrun_info(last_automated_run_info=None)
    assert info is not None and info.data_interval is not None
    assert info.run_after == info.data_interval.start == pendulum.datetime(2025, 6, 11, tz="UTC")
    assert "cannot rank the hours of the window" in caplog.text and str(csv) in caplog.text


def test_a_file_saved_as_windows_1252_past_its_first_lines_starts_the_run_and_says_what_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The parse check reads the header and first row; a Windows-1252 byte further on passed it, and the
    # scheduler's reader raised a UnicodeDecodeError, which the timetable's fallback (CostawareError, OSError)
    # let through: the scheduler's next_dagrun_info failed.
    csv = tmp_path / "power.csv"
    rows = [
        f"2025-06-{d:02d}T{h:02d}:00:00Z,{10 if h in (3, 4) else 90}\n"
        for d in range(1, 30)
        for h in range(24)
    ]
    rows[-1] = rows[-1].replace("\n", " \u20ac\n")  # a euro sign, typed after the last price
    csv.write_bytes(("timestamp_utc,usd_per_mwh\n" + "".join(rows)).encode("cp1252"))
    timetable = OffPeakTimetable(["00:00-06:00"], timezone="UTC", run_hours=2, electricity=str(csv))
    window = TimeRestriction(earliest=pendulum.datetime(2025, 6, 11, tz="UTC"), latest=None, catchup=True)
    info = timetable.next_dagrun_info(last_automated_data_interval=None, restriction=window)
    assert info is not None and info.run_after == pendulum.datetime(2025, 6, 11, tz="UTC")
    assert (
        "power.csv is not UTF-8 text (byte 0x80 on line 697; Latin-1 or Windows-1252, perhaps)" in caplog.text
    )


def test_the_timetable_follows_an_import_as_far_as_its_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scheduler asks the timetable for each next run: each decision read a year of the import (8,800
    # points, 0.06-0.18 s) to rank a window's hours. Followed as far as the window, the same hour is chosen.
    from datetime import datetime, timezone

    import costaware.adapters.spot_market as market
    from costaware.cli import main

    fixture = tmp_path / "GB_2026-11-20.csv"  # cleanest at 13:00, where the bundled year's is at night
    rows = [f"2026-11-20T{h:02d}:00:00Z,{50 if h == 13 else 300}" for h in range(24)]
    fixture.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "\n".join(rows) + "\n")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    assert main(["carbon", "import", str(fixture), "--zone", "GB"]) == 0
    read = market.carbon_intensity
    reads: list[tuple[datetime | None, bool]] = []

    def reading(*args: Any, **kwargs: Any) -> Any:
        series = read(*args, **kwargs)
        reads.append((kwargs.get("until"), len(series.points) < 15 * 24))  # the window, two weeks at least
        return series

    def start() -> pendulum.DateTime:
        tt = OffPeakTimetable(["06:00-18:00"], timezone="UTC", run_hours=1, objective="carbon", carbon="GB")
        earliest = pendulum.parse("2026-11-20T00:00:00Z")
        restriction = TimeRestriction(earliest=earliest, latest=None, catchup=True)  # type: ignore[arg-type]
        info = tt.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)
        assert info is not None
        return info.run_after

    year = start()
    monkeypatch.setattr(market, "carbon_intensity", reading)
    assert start() == year == pendulum.parse("2026-11-20T13:00:00Z")
    assert reads == [(datetime(2026, 11, 20, 18, tzinfo=timezone.utc), True)]
