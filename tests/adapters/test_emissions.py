"""The emissions estimate of one entry: known, unknown region, outside the series' span, measured CPU."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costaware.adapters.carbon_data import bundled_carbon, power_model
from costaware.adapters.emissions import estimate, with_emissions
from costaware.core.carbon import Machine
from costaware.core.ledger import Kind, LedgerEntry, format_kg_co2e

START = datetime(2023, 6, 1, 12, tzinfo=timezone.utc)
END = START + timedelta(hours=2)
M5_LARGE = Machine(vcpus=2, memory_gib=8.0)


def expected_kg(kw: float, zone: str, start: datetime = START, end: datetime = END) -> Decimal:
    g = float(bundled_carbon(zone).mean_usd_per_hour(start, end))
    hours = (end - start).total_seconds() / 3600
    return Decimal(repr(round(kw * hours * g / 1000, 6)))


@pytest.mark.parametrize(
    ("cpu_seconds", "use", "said"),
    [
        (None, 1.0, "at full load (CPU use not measured)"),
        (3600.0, 0.25, "at measured CPU use 25%"),  # 1 CPU hour over 2 hours x 2 vCPUs
        (99_999.0, 1.0, "at measured CPU use 100%"),
    ],
)
def test_a_cloud_try_in_a_mapped_region_gets_kg(cpu_seconds: float | None, use: float, said: str) -> None:
    found = estimate(
        instance_type="m5.large", region="us-west-1", start=START, end=END, cpu_seconds=cpu_seconds
    )

    kw = power_model().power_kw(M5_LARGE, use)
    assert found["kg_co2e"] == expected_kg(kw, "US-CAL-CISO")
    assert found["kg_co2e"] > 0
    assert found["kwh"] == Decimal(repr(round(kw * 2, 6)))
    assert said in found["carbon_method"]
    assert (
        found["carbon_source"] == "grid US-CAL-CISO: carbon US-CAL-CISO_2023.csv (gCO2e/kWh, lca), recorded"
    )


def test_a_sagemaker_type_draws_the_power_of_its_ec2_type() -> None:
    # "no emissions estimate for ml.m5.large: no price for the SageMaker type", on every SageMaker attempt.
    sagemaker = estimate(instance_type="ml.m5.large", region="us-west-1", start=START, end=END)
    ec2 = estimate(instance_type="m5.large", region="us-west-1", start=START, end=END)
    assert sagemaker["kg_co2e"] is not None and sagemaker["kg_co2e"] == ec2["kg_co2e"]


def test_measured_cpu_gives_less_energy_than_full_load() -> None:
    idle = estimate(instance_type="m5.large", region="us-west-1", start=START, end=END, cpu_seconds=0)
    full = estimate(instance_type="m5.large", region="us-west-1", start=START, end=END)
    assert idle["kwh"] < full["kwh"]
    assert idle["kg_co2e"] < full["kg_co2e"]


def test_an_unmapped_region_is_unknown_with_a_reason_and_keeps_its_energy() -> None:
    found = estimate(instance_type="m5.large", region="us-east-1", start=START, end=END)
    assert found["kg_co2e"] is None
    assert found["kwh"] == Decimal(repr(round(power_model().power_kw(M5_LARGE, 1.0) * 2, 6)))
    assert found["carbon_method"].startswith(
        "unknown: region 'us-east-1' has no grid zone in data/region_grids.csv (give grid_zone)"
    )


@pytest.mark.parametrize(
    ("start", "end", "stands_in"),
    [
        (
            datetime(2026, 11, 24, 10, tzinfo=timezone.utc),
            datetime(2026, 11, 24, 11, tzinfo=timezone.utc),
            "11-24 10:00",
        ),
        (
            datetime(2024, 2, 29, 12, tzinfo=timezone.utc),
            datetime(2024, 2, 29, 13, tzinfo=timezone.utc),
            "02-28 12:00",
        ),
    ],
)
def test_a_try_no_recorded_file_covers_gets_the_typical_year_and_says_so(
    start: datetime, end: datetime, stands_in: str
) -> None:
    found = estimate(instance_type="m5.large", region="eu-central-1", start=start, end=end)
    same_hours = datetime(
        2023, start.month, 28 if start.day == 29 else start.day, start.hour, tzinfo=timezone.utc
    )
    series = bundled_carbon("DE-LU")
    g = float(series.mean_usd_per_hour(same_hours, same_hours + (end - start)))
    assert found["kg_co2e"] == Decimal(repr(round(float(found["kwh"]) * g / 1000, 6)))
    assert f"typical year, bundled 2023 at {stands_in} UTC" in found["carbon_source"]
    assert f"(no recorded intensity for {start:%Y-%m-%d %H:%M})" in found["carbon_source"]
    # The ledger keeps 128 characters: the series' name in it cut the date off for the longest zone.
    longest = estimate(instance_type="m5.large", region="us-west-1", start=start, end=end)
    assert len(longest["carbon_source"]) <= 128 and longest["carbon_source"].endswith(")")


def test_a_zone_without_bundled_data_outside_any_file_is_unknown(tmp_path: Path) -> None:
    from costaware.adapters.carbon_source import RecordedCarbon

    (tmp_path / "FR_2023.csv").write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n2023-01-01T00:00:00Z,50\n2023-01-01T01:00:00Z,60\n"
    )
    found = estimate(
        instance_type="m5.large",
        region="x",
        grid_zone="FR",
        start=datetime(2026, 1, 1, tzinfo=timezone.utc),
        end=datetime(2026, 1, 1, 1, tzinfo=timezone.utc),
        intensity_of=RecordedCarbon(tmp_path).intensity,
    )
    assert found["kg_co2e"] is None and found["kwh"] is not None
    assert found["carbon_method"].startswith("unknown: ")


def test_an_on_premises_task_gives_power_and_grid() -> None:
    found = estimate(
        instance_type=None, region="basement", start=START, end=END, power_kw="0.5", grid_zone="GB"
    )
    assert found["kg_co2e"] == expected_kg(0.5, "GB")
    assert found["kwh"] == Decimal("1.0")
    assert found["carbon_method"].startswith("operator power_kw 0.5 kW; grid mean ")
    assert found["carbon_source"].startswith("grid GB: ")


@pytest.mark.parametrize("zone", ["GB ", " GB", "GB\n"])
def test_a_grid_zone_with_spaces_around_it_is_the_zone(zone: str) -> None:
    # "GB " was unknown, with a message listing GB as recorded.
    found = estimate(
        instance_type=None, region="basement", start=START, end=END, power_kw="0.5", grid_zone=zone
    )
    assert found["kg_co2e"] == expected_kg(0.5, "GB")
    assert found["carbon_source"].startswith("grid GB: ")


def test_a_region_missing_from_the_price_snapshot_still_has_its_machine() -> None:
    found = estimate(instance_type="g5.xlarge", region="ap-southeast-2", start=START, end=END)
    assert found["kg_co2e"] is not None
    assert "1 x A10G at full power" in found["carbon_method"]


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"instance_type": "no.such", "region": "us-west-1"}, "unknown: estimate failed: PriceNotFoundError"),
        ({"instance_type": None, "region": "us-west-1"}, "unknown: estimate failed: ValueError: no instance"),
        ({"instance_type": None, "region": "x", "power_kw": "-1", "grid_zone": "GB"}, "power_kw='-1' is not"),
        # A unit in the text said only "could not convert string to float", naming no setting.
        (
            {"instance_type": None, "region": "x", "power_kw": "6.5kW", "grid_zone": "GB"},
            "power_kw='6.5kW' is not a",
        ),
        # Watts typed as kW: 1,000 times the emissions, recorded in silence.
        ({"instance_type": None, "region": "x", "power_kw": 6500, "grid_zone": "GB"}, "watts given as kW?"),
        (
            {"instance_type": "m5.large", "region": "x", "grid_zone": "XX"},
            "no recorded carbon intensity for grid zone 'XX'",
        ),
    ],
)
def test_an_estimate_that_fails_is_unknown_never_an_error(kwargs: dict[str, object], reason: str) -> None:
    found = estimate(start=START, end=END, **kwargs)  # type: ignore[arg-type]
    assert found["kg_co2e"] is None
    assert reason in found["carbon_method"]


def test_a_recorded_file_that_covers_the_try_gives_its_intensity(tmp_path: Path) -> None:
    from costaware.adapters.carbon_source import RecordedCarbon

    now = datetime(2026, 11, 24, 10, tzinfo=timezone.utc)
    rows = [f"{(now + timedelta(hours=h)).isoformat()},{100 + 100 * h},{50}" for h in range(3)]
    (tmp_path / "GB_2026.csv").write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca,g_co2eq_per_kwh_direct\n" + "\n".join(rows)
    )
    found = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="GB",
        start=now + timedelta(minutes=30),
        end=now + timedelta(minutes=90),
        intensity_of=RecordedCarbon(tmp_path, bundled=False).intensity,
    )
    assert found["kg_co2e"] == Decimal("0.15")  # 1 kW for 1 h at a mean of 150 g/kWh
    assert "grid mean 150.0 gCO2e/kWh" in found["carbon_method"]
    assert found["carbon_source"].startswith("grid GB: carbon GB_2026.csv")


def test_a_try_running_past_the_end_of_a_recorded_file_keeps_its_recorded_hours(tmp_path: Path) -> None:
    from costaware.adapters.carbon_source import RecordedCarbon

    # The file's last two hours are 2026-11-21 22:00 and 23:00 (166 and 167 g, lca): the whole try got the
    # typical year, and a source saying nothing was recorded for 22:00.
    recorded = Path(__file__).resolve().parents[1] / "fixtures" / "carbon" / "GB_2026-11.csv"
    start = datetime(2026, 11, 21, 22, 30, tzinfo=timezone.utc)
    end = start + timedelta(hours=3)  # 1.5 h recorded, then 1.5 h past the file's end
    found = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="GB",
        start=start,
        end=end,
        intensity_of=RecordedCarbon(recorded).intensity,
    )
    bundled = bundled_carbon("GB")
    typical = float(
        bundled.mean_usd_per_hour(
            datetime(2023, 11, 22, tzinfo=timezone.utc), datetime(2023, 11, 22, 1, 30, tzinfo=timezone.utc)
        )
    )
    g = (0.5 * 166 + 167 + 1.5 * typical) / 3
    assert found["kg_co2e"] == Decimal(repr(round(3 * g / 1000, 6)))
    assert found["carbon_source"] == (
        "grid GB: recorded 1.5 of 3 h, typical year 2023 for 1.5 h from 2026-11-22 00:00: GB_2026-11.csv"
    )
    longest = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="US-CAL-CISO",
        start=start,
        end=end,
        intensity_of=RecordedCarbon(_renamed(recorded, tmp_path / "US-CAL-CISO_2026-11.csv")).intensity,
    )
    assert len(longest["carbon_source"]) <= 128 and longest["carbon_source"].endswith("_2026-11.csv")


def test_the_recorded_part_of_an_hour_a_file_ends_inside_counts_as_recorded(tmp_path: Path) -> None:
    from costaware.adapters.carbon_source import RecordedCarbon

    # A half-hourly file ending 23:30: the 23:00 hour it ends inside was all typical year ("recorded 1 of
    # 2 h") though its first half hour was recorded.
    recorded = tmp_path / "GB_halves.csv"
    recorded.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n"
        "2026-11-21T22:00:00Z,160\n2026-11-21T22:30:00Z,170\n2026-11-21T23:00:00Z,180\n"
    )
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    found = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="GB",
        start=start,
        end=start + timedelta(hours=2),
        intensity_of=RecordedCarbon(recorded).intensity,
    )
    assert found["carbon_source"] == (
        "grid GB: recorded 1.5 of 2 h, typical year 2023 for 0.5 h from 2026-11-21 23:30: GB_halves.csv"
    )
    typical = float(
        bundled_carbon("GB").mean_usd_per_hour(
            datetime(2023, 11, 21, 23, 30, tzinfo=timezone.utc), datetime(2023, 11, 22, tzinfo=timezone.utc)
        )
    )
    g = (0.5 * 160 + 0.5 * 170 + 0.5 * 180 + 0.5 * typical) / 2
    assert found["kg_co2e"] == Decimal(repr(round(2 * g / 1000, 6)))


def test_an_imported_file_is_named_whole_in_the_source_with_hours_of_two_decimals(tmp_path: Path) -> None:
    from costaware.adapters.carbon_source import RecordedCarbon

    # `costaware carbon import` names the file <zone>_imported.csv: with hours of two decimals its name was
    # cut at the ledger's 128 characters ("US-CAL-CISO_imported.cs").
    imported = _renamed(
        Path(__file__).resolve().parents[1] / "fixtures" / "carbon" / "GB_2026-11.csv",
        tmp_path / "US-CAL-CISO_imported.csv",
    )
    start = datetime(2026, 11, 21, 22, 10, tzinfo=timezone.utc)
    found = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="US-CAL-CISO",
        start=start,
        end=start + timedelta(hours=3, minutes=5),
        intensity_of=RecordedCarbon(imported).intensity,
    )
    assert found["carbon_source"] == (
        "grid US-CAL-CISO: recorded 1.83 of 3.08 h, typical year 2023 for 1.25 h from 2026-11-22 00:00: "
        "US-CAL-CISO_imported.csv"
    )


def test_recorded_files_that_do_not_fit_the_source_are_counted_not_cut(tmp_path: Path) -> None:
    from costaware.adapters.carbon_source import RecordedCarbon

    # The file's last six hours, one file each, then the typical year: six names cannot all be told.
    rows = (
        (Path(__file__).resolve().parents[1] / "fixtures" / "carbon" / "GB_2026-11.csv").read_text().split()
    )
    for hour, row in enumerate(rows[-6:]):
        # The first with the record before it: a one-record file takes the step of the file it follows.
        earlier = f"{rows[-7]}\n" if hour == 0 else ""
        (tmp_path / f"US-CAL-CISO_h{hour}.csv").write_text(f"{rows[0]}\n{earlier}{row}\n")
    start = datetime(2026, 11, 21, 18, 10, tzinfo=timezone.utc)
    found = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="US-CAL-CISO",
        start=start,
        end=start + timedelta(hours=7, minutes=5),
        intensity_of=RecordedCarbon(tmp_path).intensity,
    )
    assert found["carbon_source"] == (
        "grid US-CAL-CISO: recorded 5.83 of 7.08 h, typical year 2023 for 1.25 h from 2026-11-22 00:00: "
        "US-CAL-CISO_h0.csv + 5 more"
    )


def _renamed(file: Path, to: Path) -> Path:
    to.write_text(file.read_text())
    return to


def test_with_emissions_sets_the_entry_fields() -> None:
    entry = LedgerEntry("d", "r", "t", Kind.COMPUTE, Decimal("1"))
    out = with_emissions(entry, instance_type="m5.large", region="us-west-1", start=START, end=END)
    assert out.kg_co2e is not None and out.kwh is not None
    assert out.carbon_source.startswith("grid US-CAL-CISO")
    assert (out.entry_uid, out.usd) == (entry.entry_uid, entry.usd)


@pytest.mark.parametrize(
    ("kg", "unknown", "shown"),
    [
        (Decimal("12.3456"), 0, "12.346"),
        (Decimal("12.3"), 2, "12.300+?"),
        (Decimal("0.004512"), 0, "0.004512"),
        (None, 3, "unknown"),
        (None, 0, "-"),
    ],
)
def test_format_kg_co2e(kg: Decimal | None, unknown: int, shown: str) -> None:
    assert format_kg_co2e(kg, unknown) == shown


def test_a_one_record_file_nothing_places_leaves_the_imports_emissions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A feed's latest hour beside the import, 4 days after its end: every GB try's kg_co2e was lost.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    folder = tmp_path / "costaware" / "carbon"
    folder.mkdir(parents=True)
    recorded = Path(__file__).resolve().parents[1] / "fixtures" / "carbon" / "GB_2026-11.csv"
    (folder / "GB_imported.csv").write_text(recorded.read_text())
    (folder / "GB_latest.csv").write_text("timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-26T10:00:00Z,130\n")
    start = datetime(2026, 11, 20, 1, tzinfo=timezone.utc)
    found = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="GB",
        start=start,
        end=start + timedelta(hours=2),
    )
    assert found["kg_co2e"] == Decimal("0.243")  # 1 kW for 2 h at 121 and 122 g/kWh
    assert found["carbon_source"].startswith("grid GB: carbon GB_imported.csv")


def test_the_recorded_part_of_an_hour_a_file_starts_inside_counts_as_recorded(tmp_path: Path) -> None:
    from costaware.adapters.carbon_source import RecordedCarbon

    # A half-hourly file starting 22:30: the 22:00 hour it starts inside was all typical year ("recorded 1
    # of 2 h") though its second half hour was recorded.
    recorded = tmp_path / "GB_halves.csv"
    recorded.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n"
        "2026-11-21T22:30:00Z,160\n2026-11-21T23:00:00Z,170\n2026-11-21T23:30:00Z,180\n"
    )
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    found = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="GB",
        start=start,
        end=start + timedelta(hours=2),
        intensity_of=RecordedCarbon(recorded).intensity,
    )
    assert found["carbon_source"] == (
        "grid GB: recorded 1.5 of 2 h, typical year 2023 for 0.5 h from 2026-11-21 22:00: GB_halves.csv"
    )
    typical = float(
        bundled_carbon("GB").mean_usd_per_hour(
            datetime(2023, 11, 21, 22, tzinfo=timezone.utc),
            datetime(2023, 11, 21, 22, 30, tzinfo=timezone.utc),
        )
    )
    g = (0.5 * typical + 0.5 * 160 + 0.5 * 170 + 0.5 * 180) / 2
    assert found["kg_co2e"] == Decimal(repr(round(2 * g / 1000, 6)))


def test_two_recorded_stretches_in_one_hour_count_as_recorded_with_the_typical_year_between(
    tmp_path: Path,
) -> None:
    from costaware.adapters.carbon_source import RecordedCarbon

    # GB_a.csv ends 22:15, GB_b.csv starts 22:30 (quarter-hourly): both stretches of the 22:00 hour are
    # recorded, the quarter hour between them is the typical year.
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    (tmp_path / "GB_a.csv").write_text(header + "2026-11-21T21:45:00Z,90\n2026-11-21T22:00:00Z,100\n")
    (tmp_path / "GB_b.csv").write_text(header + "2026-11-21T22:30:00Z,230\n2026-11-21T22:45:00Z,245\n")
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    found = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="GB",
        start=start,
        end=start + timedelta(hours=1),
        intensity_of=RecordedCarbon(tmp_path).intensity,
    )
    assert found["carbon_source"] == (
        "grid GB: recorded 0.75 of 1 h, typical year 2023 for 0.25 h from 2026-11-21 22:15: "
        "GB_a.csv + GB_b.csv"
    )
    typical = float(
        bundled_carbon("GB").mean_usd_per_hour(
            datetime(2023, 11, 21, 22, 15, tzinfo=timezone.utc),
            datetime(2023, 11, 21, 22, 30, tzinfo=timezone.utc),
        )
    )
    g = (100 + typical + 230 + 245) / 4
    assert found["kg_co2e"] == Decimal(repr(round(g / 1000, 6)))


@pytest.mark.parametrize(
    ("first", "last", "hour"),
    [("22:30", "2026-11-21T23:30", "2026-11-20T22:00"), ("00:00", "2026-11-20T23:00", "2026-11-20T23:00")],
    ids=["the-hour-a-file-starts-inside", "the-hour-a-file-ends-inside"],
)
def test_an_hour_a_zone_without_a_typical_year_records_in_part_is_read_as_carbon_show_reads_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    first: str,
    last: str,
    hour: str,
) -> None:
    import json

    from costaware.adapters.carbon_source import RecordedCarbon
    from costaware.cli import main

    # A half-hourly PL file from 22:30 (or to 23:30): the hour it starts (ends) inside had no intensity,
    # PL having no typical year for its unrecorded half, and the whole try's emissions were unknown, where
    # `carbon show` reads that hour as its recorded half and the file's profile for the rest.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    rows, at = ["timestamp_utc,g_co2eq_per_kwh_lca"], datetime.fromisoformat(f"2026-11-20T{first}+00:00")
    while at <= datetime.fromisoformat(f"{last}+00:00"):
        rows.append(f"{at:%Y-%m-%dT%H:%M:%SZ},{100 + 3 * at.hour + at.minute // 30 + 10 * (at.day - 20)}")
        at += timedelta(minutes=30)
    halves = tmp_path / "PL_halves.csv"
    halves.write_text("\n".join(rows) + "\n")
    start = datetime.fromisoformat(f"{hour}+00:00")
    found = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="PL",
        start=start,
        end=start + timedelta(hours=1),
        intensity_of=RecordedCarbon(halves).intensity,
    )
    assert found["kg_co2e"] is not None, found["carbon_method"]
    unrecorded = start if first == "22:30" else start + timedelta(minutes=30)
    assert found["carbon_source"] == (
        f"grid PL: recorded 0.5 of 1 h, the files' profile for 0.5 h from {unrecorded:%Y-%m-%d %H:%M}: "
        "PL_halves.csv"
    )
    argv = ["carbon", "show", "--zone", "PL", "--source", str(halves), "--start", start.isoformat()]
    assert main([*argv, "--hours", "1", "--format", "json"]) == 0
    shown = Decimal(json.loads(capsys.readouterr().out)["hours"][0]["g_co2e_per_kwh"])
    assert abs(found["kg_co2e"] * 1000 - shown) <= Decimal("0.005")  # show's two decimals
    # An hour the file records none of still has no value: a try running through it stays unknown.
    through = start - timedelta(hours=1) if first == "22:30" else start
    unknown = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="PL",
        start=through,
        end=through + timedelta(hours=2),
        intensity_of=RecordedCarbon(halves).intensity,
    )
    assert unknown["kg_co2e"] is None and unknown["carbon_method"].startswith("unknown: ")
    # A try wholly inside the hour's unrecorded half: the same profile, not unknown (it was, though the
    # same half hour inside a longer try had a value).
    recorded_half = Decimal(100 + 3 * 22 + 1) if first == "22:30" else Decimal(100 + 3 * 23)
    inside = estimate(
        instance_type=None,
        region="on-prem",
        power_kw=1,
        grid_zone="PL",
        start=unrecorded,
        end=unrecorded + timedelta(minutes=30),
        intensity_of=RecordedCarbon(halves).intensity,
    )
    assert inside["kg_co2e"] is not None, inside["carbon_method"]
    assert inside["carbon_source"] == (
        f"grid PL: the files' profile for 0.5 h from {unrecorded:%Y-%m-%d %H:%M}: PL_halves.csv"
    )
    profile_half = 2 * shown - recorded_half  # the hour shown is the mean of its two halves
    assert abs(inside["kg_co2e"] * 2000 - profile_half) <= Decimal("0.01")
