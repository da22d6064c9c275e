"""``costaware carbon show|import`` over recorded files, with the costaware home in a temporary folder."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import time_machine

from costaware.adapters.carbon_source import RecordedCarbon
from costaware.cli import main

if TYPE_CHECKING:
    from collections.abc import Iterator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "carbon"
RECORDED = FIXTURES / "GB_2026-11.csv"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``$AIRFLOW_HOME``: imports land in ``<home>/costaware/carbon``."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    return tmp_path / "airflow" / "costaware" / "carbon"


def test_show_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["carbon", "show", "--zone", "GB", "--source", str(RECORDED), "--start", "2026-11-20T01:00+00:00"]
    assert main([*argv, "--hours", "3"]) == 0
    out = capsys.readouterr().out
    assert "2026-11-20 01:00          121" in out and "2026-11-20 03:00          123" in out
    assert "mean          122" in out and "min           121" in out and "max           123" in out
    assert "GB: 3 hour(s), recorded, from carbon GB_2026-11.csv (gCO2e/kWh, lca)\n" in out  # "recorded" once
    assert main([*argv, "--hours", "3", "--format", "csv"]) == 0
    shown = capsys.readouterr()  # what the rows are goes to stderr: an estimate is not to pass for records
    assert shown.out.startswith("hour (UTC),gCO2e/kWh") and "GB: 3 hour(s), recorded, from" in shown.err
    assert main([*argv, "--hours", "999999999"]) == 2  # a traceback (OverflowError) before
    assert "--hours must be 1 to 8784 (a year), got 999999999" in capsys.readouterr().err


def test_a_source_file_that_does_not_cover_the_hours_says_the_bundled_year_is_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A file's hours are shown as they are; past them (or for another zone) the bundled 2023 data answer,
    # which the table's source line named but nothing pointed out.
    argv = ["carbon", "show", "--source", str(RECORDED), "--start", "2023-06-14T00:00Z", "--hours", "2"]
    assert main([*argv, "--zone", "GB"]) == 0
    captured = capsys.readouterr()
    assert "from carbon GB_2023.csv" in captured.out
    assert (
        f"note: {RECORDED} does not cover GB over 2 of these 2 hour(s) (GB_2026-11.csv): they are the bundled"
        in (captured.err)
    )
    assert main([*argv, "--zone", "DE-LU", "--format", "json"]) == 0
    assert "(no DE-LU_*.csv file)" in json.loads(capsys.readouterr().out)["note"]
    covered = ["carbon", "show", "--zone", "GB", "--source", str(RECORDED), "--start", "2026-11-20T01:00Z"]
    assert main([*covered, "--format", "json"]) == 0
    assert "note" not in json.loads(capsys.readouterr().out)


def test_hours_a_file_covers_keep_its_values_where_the_window_runs_past_its_end(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The file ends at 2026-11-22 00:00: the whole window was shown as the bundled year, its two recorded
    # hours (166, 167) too, and labelled "nothing recorded from 2026-11-21 22:00".
    argv = ["carbon", "show", "--zone", "GB", "--source", str(RECORDED), "--start", "2026-11-21T22:00Z"]
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        assert main([*argv, "--hours", "4", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    values = [h["g_co2e_per_kwh"] for h in shown["hours"]]
    assert values[:2] == ["166", "167"] and "166" not in values[2:] and "167" not in values[2:]
    assert shown["kind"] == "recorded, and a typical-year estimate for the other hours"
    assert shown["series"].startswith("recorded (GB_2026-11.csv) for 2 of 4 hour(s), else typical year: ")
    assert "over 2 of these 4 hour(s)" in shown["note"]


def test_show_json_of_the_bundled_files(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "carbon",
        "show",
        "--zone",
        "DE-LU",
        "--source",
        "bundled",
        "--start",
        "2023-03-01",
        "--hours",
        "2",
    ]
    assert main([*argv, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["kind"] == "recorded" and shown["unit"] == "gCO2e/kWh"
    assert [h["hour"] for h in shown["hours"]] == ["2023-03-01T00:00:00+00:00", "2023-03-01T01:00:00+00:00"]
    values = [float(h["g_co2e_per_kwh"]) for h in shown["hours"]]
    assert float(shown["min"]) == min(values) and float(shown["max"]) == max(values)
    assert float(shown["mean"]) == pytest.approx(sum(values) / 2, abs=0.01)


def test_show_without_start_is_the_forecast(capsys: pytest.CaptureFixture[str]) -> None:
    with time_machine.travel("2026-11-20T05:20:00Z", tick=False):
        argv = [
            "carbon",
            "show",
            "--zone",
            "GB",
            "--source",
            str(RECORDED),
            "--hours",
            "2",
            "--format",
            "json",
        ]
        assert main(argv) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["kind"] == "recorded (as a perfect forecast)"
    assert [(h["hour"][:16], h["g_co2e_per_kwh"]) for h in shown["hours"]] == [
        ("2026-11-20T05:00", "125"),
        ("2026-11-20T06:00", "126"),
    ]


def test_show_from_now_without_recorded_hours_is_the_typical_year(capsys: pytest.CaptureFixture[str]) -> None:
    # `carbon show --zone GB`, a new user's first command, failed: the recorded data are 2023's. It now shows
    # what the ledger's emissions and the carbon-aware waits use for those hours, and says so.
    with time_machine.travel("2026-11-20T05:20:00Z", tick=False):
        assert main(["carbon", "show", "--zone", "GB", "--hours", "2", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["kind"] == "typical-year estimate" and "GB_2023.csv" in shown["series"]
    assert [(h["hour"][:16], h["g_co2e_per_kwh"]) for h in shown["hours"]] == [
        ("2026-11-20T05:00", "132.55"),
        ("2026-11-20T06:00", "190.19"),
    ]


def test_show_of_past_hours_without_recorded_ones_is_the_typical_year(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `--start 2025-06-01` failed ("no recorded carbon intensity") where no --start gave the typical year,
    # though the ledger's emissions price such past hours at that typical year. It is now shown, and said.
    from costaware.adapters.emissions import _typical_year

    with time_machine.travel("2026-11-20T05:20:00Z", tick=False):
        argv = ["carbon", "show", "--zone", "GB", "--start", "2025-06-01T00:00Z", "--hours", "2"]
        assert main([*argv, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["kind"] == "typical-year estimate" and "GB_2023.csv" in shown["series"]
    start = datetime(2025, 6, 1, tzinfo=timezone.utc)
    ledger = [_typical_year("GB", start + timedelta(hours=h), start + timedelta(hours=h + 1)) for h in (0, 1)]
    assert [float(h["g_co2e_per_kwh"]) for h in shown["hours"]] == [
        pytest.approx(found[0], abs=0.01) for found in ledger if found is not None
    ]
    with time_machine.travel("2026-11-20T05:20:00Z", tick=False):
        assert main(argv) == 0
    assert "typical-year estimate" in capsys.readouterr().out


def test_show_across_the_bundled_years_end_counts_its_recorded_hours(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # From 2023-12-31 20:00 over 8 hours: "typical-year estimate ... (nothing recorded from 2023-12-31 20:00
    # UTC)", though the bundled 2023 file records the first four.
    with time_machine.travel("2026-11-20T05:20:00Z", tick=False):
        argv = ["carbon", "show", "--zone", "GB", "--start", "2023-12-31T20:00Z", "--hours", "8"]
        assert main([*argv, "--format", "json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert main([*argv[:-1], "4", "--format", "json"]) == 0  # the four 2023 hours alone: recorded
        alone = json.loads(capsys.readouterr().out)
    assert shown["kind"] == "recorded, and a typical-year estimate for the other hours"
    assert shown["series"].startswith("recorded (carbon GB_2023.csv (gCO2e/kWh, lca)) for 4 of 8 hour(s)")
    assert alone["kind"] == "recorded" and shown["hours"][:4] == alone["hours"]


def test_show_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["carbon", "show", "--zone", "FR", "--source", "live", "--hours", "2"]) == 2
    assert "covers zone GB only, not 'FR'" in capsys.readouterr().err
    assert main(["carbon", "show", "--zone", "GB", "--source", "nowhere"]) == 2
    assert "'nowhere' is not 'recorded', 'bundled', 'live'" in capsys.readouterr().err


def test_an_unknown_zone_is_not_told_to_move_its_start(capsys: pytest.CaptureFixture[str]) -> None:
    # "or pass --start within the recorded hours" ended the error of a zone no file records at any hour.
    for zone, said in (("gb", "did you mean 'GB'?"), ("US-EAST", "import a file with")):
        assert main(["carbon", "show", "--zone", zone, "--source", "bundled"]) == 2
        err = capsys.readouterr().err
        assert said in err and "--start" not in err, err


@pytest.mark.parametrize(
    ("zone", "meant"),
    [
        ("DE_LU", "DE-LU"),
        ("AU_NSW", "AU-NSW"),
        ("au_nsw", "AU-NSW"),
        ("US-CAL-CAISO", "US-CAL-CISO"),
        ("DE-LUX", "DE-LU"),
        ("AU-NSWW", "AU-NSW"),
        (" GB", "GB"),
        # One letter changed or two swapped, in an id no zone has: no hint at all before (difflib scores
        # AU-NSV 0.83, under the cutoff real zones need; two letters were asked about only for spaces).
        ("AU-NSV", "AU-NSW"),
        ("AU-NWS", "AU-NSW"),
        ("GV", "GB"),
        ("gv", "GB"),
    ],
)
def test_a_zone_typo_is_told_the_zone_meant(
    capsys: pytest.CaptureFixture[str], zone: str, meant: str
) -> None:
    # A two-letter typo got "did you mean", a longer one (an underscore for the hyphen, a letter too many)
    # only the list of zones and "import a file with --zone DE_LU", which the import refuses.
    assert main(["carbon", "show", "--zone", zone, "--source", "bundled", "--start", "2023-06-14"]) == 2
    err = capsys.readouterr().err
    assert f"no recorded carbon intensity for grid zone {zone!r}: did you mean {meant!r}?" in err, err
    # Written alike but for '_', spaces or case, it is the zone meant: no other zone is typed so, and the
    # import of one under the id as typed (--zone DE_LU) was advised, which the import refuses.
    spelled_alike = zone.strip().replace("_", "-").upper() == meant
    assert ("If not, " in err) is not spelled_alike and ("carbon import" in err) is not spelled_alike, err


@pytest.mark.parametrize(
    ("source", "zone", "advised"),
    [
        ("bundled", "XX_YY", "XX-YY"),
        ("bundled", "xx yy", "xx-yy"),
        ("bundled", ".XX", "XX"),
        ("bundled", "._XX", "XX"),  # was --zone -XX, which argparse takes for an option and refuses
        ("bundled", "AU/TAS", "AU-TAS"),
        ("bundled", "gr", "GR"),  # a real zone in its case: imported as gr, carbon show --zone GR missed it
        ("live", "DE_LU", "DE-LU"),
        ("live", "de lu", "DE-LU"),
        ("live", "PL", "PL"),
    ],
)
def test_the_import_an_unknown_zone_is_advised_is_one_the_import_takes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, source: str, zone: str, advised: str
) -> None:
    # "import a file with `costaware carbon import FILE --zone DE_LU`", which the import refuses ("not a grid
    # zone name (... no '_', '/', space or leading '.')").
    assert main(["carbon", "show", "--zone", zone, "--source", source, "--start", "2023-06-14"]) == 2
    err = capsys.readouterr().err
    assert f"`costaware carbon import FILE --zone {advised}`" in err, err
    assert main(["carbon", "import", str(RECORDED), "--zone", advised]) == 0, capsys.readouterr().err
    argv = ["carbon", "show", "--zone", advised, "--start", "2026-11-20T01:00Z", "--hours", "1"]
    assert main(argv) == 0, capsys.readouterr().err  # the import is read under the zone's id


@pytest.mark.parametrize("zone", ["_", "._", " - "])
def test_a_zone_with_no_letters_is_advised_to_give_an_id_not_an_empty_one(
    capsys: pytest.CaptureFixture[str], zone: str
) -> None:
    # "import a file with `costaware carbon import FILE --zone `": nothing after --zone, no line to run.
    assert main(["carbon", "show", "--zone", zone, "--source", "bundled", "--start", "2023-06-14"]) == 2
    err = capsys.readouterr().err
    advice = "`costaware carbon import FILE --zone ZONE (an Electricity Maps id such as GB or DE-LU)`"
    assert advice in err, err


#: Real grid zones (Electricity Maps ids) near a known one: GR is Greece, not a typo of GB; PK Pakistan.
REAL_ZONES_NEAR_KNOWN = (
    "GR",
    "GN",
    "PK",
    "BG",  # Bulgaria, GB's letters swapped
    "GE",
    # ISO 3166-1 countries Electricity Maps has no zone file of (Grenada, Chile: it has CL-SEN): GD was GB's.
    "GD",
    "CL",
    "US-MIDW-MISO",
    "US-MIDA-PJM",  # after US-MIDW-MISO: the import test's earlier import, which it was taken for
    "US-CAL-LDWP",
    "US-CAL-IID",
    "AU-TAS",
    "AU-SA",
    "AU-WA",
    "AU-NSW-LHI",
)


@pytest.mark.parametrize("zone", REAL_ZONES_NEAR_KNOWN)
def test_a_real_zone_near_a_known_one_is_not_asked_whether_that_one_was_meant(
    capsys: pytest.CaptureFixture[str], zone: str
) -> None:
    # "did you mean 'GB'?" for GR, 'US-CAL-CISO' for US-MIDW-MISO, 'AU-NSW' for AU-TAS: a difflib cutoff
    # of 0.6 (these real zones score 0.61-0.76), and any other letter of a two-letter id.
    assert main(["carbon", "show", "--zone", zone, "--source", "bundled", "--start", "2023-06-14"]) == 2
    err = capsys.readouterr().err
    assert f"no recorded carbon intensity for grid zone {zone!r}: recorded zones are " in err, err
    assert "did you mean" not in err, err


@pytest.mark.parametrize("zone", ["CL", "BL", "PN"])
def test_a_country_one_letter_from_an_imported_zone_is_not_taken_for_its_typo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], zone: str
) -> None:
    # With PL imported, Chile, Saint Barthelemy and the Pitcairn Islands were asked "did you mean 'PL'?",
    # and the import of one warned to delete it: real ISO 3166 codes that no Electricity Maps zone is named.
    hourly = tmp_path / "hourly.csv"
    hourly.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,150\n2026-11-20T01:00:00Z,160\n"
    )
    assert main(["carbon", "import", str(hourly), "--zone", "PL"]) == 0
    capsys.readouterr()
    assert main(["carbon", "show", "--zone", zone, "--start", "2023-06-14"]) == 2
    err = capsys.readouterr().err
    assert f"no recorded carbon intensity for grid zone {zone!r}: recorded zones are " in err, err
    assert "did you mean" not in err, err
    assert main(["carbon", "import", str(hourly), "--zone", zone]) == 0
    assert "warning" not in capsys.readouterr().err


def test_an_import_under_a_zone_typo_warns_of_the_zone_meant(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "--zone US-CAL-CAISO" imported in silence into a zone no task reads; the zone meant stayed without it.
    hourly = tmp_path / "hourly.csv"
    hourly.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,150\n2026-11-20T01:00:00Z,160\n"
    )
    assert main(["carbon", "import", str(hourly), "--zone", "DK-DK1"]) == 0
    for zone, meant in (
        ("US-CAL-CAISO", "US-CAL-CISO"),
        ("DE-LUX", "DE-LU"),
        ("DK-DKK1", "DK-DK1"),
        ("AU-NSV", "AU-NSW"),
        ("GV", "GB"),
    ):  # DK-DKK1: an earlier import's
        assert main(["carbon", "import", str(hourly), "--zone", zone]) == 0
        captured = capsys.readouterr()
        target = home / f"{zone}_imported.csv"
        assert captured.err.replace("\n", " ").startswith(
            f"costaware: warning: zone {zone!r} is new to costaware (no bundled year, region or earlier "
            f"import has it): did you mean {meant!r}? It is imported as {zone!r}, as --zone says, and only "
            f"carbon={zone!r} reads it; if it was a typo, delete {target} and import the file again with "
            f"--zone {meant}"
        ), captured.err
        assert target.is_file() and "imported 2 hour(s)" in captured.out
    # No warning for a zone known, imported before, new and near none, a real zone near a known or imported
    # one (it warned "did you mean 'GB'?" for GR, 'DK-DK1' for DK-DK2), or refused anyway.
    for zone in ("GB", "DK-DKK1", "FR", "DK-DK2", *REAL_ZONES_NEAR_KNOWN):
        assert main(["carbon", "import", str(hourly), "--zone", zone]) == 0
        assert "warning" not in capsys.readouterr().err
    one = tmp_path / "one.csv"
    one.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,150\n")
    assert main(["carbon", "import", str(one), "--zone", "GN"]) == 2
    assert "warning" not in capsys.readouterr().err


def test_a_source_file_named_for_no_zone_is_told_why_it_was_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "--source carbon.csv" showed the bundled year with "(no GB_*.csv file)": the file given was left out
    # for its name, which the note did not say (the error of a zone with no bundled year did).
    given = tmp_path / "carbon.csv"
    given.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,150\n2026-11-20T01:00:00Z,160\n"
    )
    argv = ["carbon", "show", "--zone", "GB", "--source", str(given), "--start", "2026-11-20", "--hours", "1"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.rstrip().endswith(
        "the fallback of a recorded source. Not read for GB: carbon.csv (zone 'carbon'); a file's zone is "
        "the start of its name, <ZONE>_<anything>.csv: name it GB_<anything>.csv"
    ), err
    assert main([*argv, "--format", "json"]) == 0
    assert "Not read for GB: carbon.csv" in json.loads(capsys.readouterr().out)["note"]
    (tmp_path / "GB_carbon.csv").write_bytes(given.read_bytes())
    assert main([*argv[:5], str(tmp_path / "GB_carbon.csv"), *argv[6:]]) == 0
    assert "Not read" not in capsys.readouterr().err


def test_an_imported_zone_without_a_bundled_year_is_told_its_recorded_hours(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["carbon", "import", str(RECORDED), "--zone", "PL"]) == 0
    capsys.readouterr()
    assert main(["carbon", "show", "--zone", "PL", "--start", "2023-06-01", "--hours", "1"]) == 2
    err = capsys.readouterr().err
    assert "or pass --start within the recorded hours" in err, err


def test_a_window_partly_past_the_import_of_a_zone_without_a_typical_year_shows_its_recorded_hours(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # PL has no bundled year: a window running past its file's end (2026-11-22 00:00) showed no hour at all.
    assert main(["carbon", "import", str(RECORDED), "--zone", "PL"]) == 0
    capsys.readouterr()
    argv = [
        "carbon",
        "show",
        "--zone",
        "PL",
        "--start",
        "2026-11-21T22:00Z",
        "--hours",
        "4",
        "--format",
        "json",
    ]
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        assert main(argv) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(h["hour"], h["g_co2e_per_kwh"]) for h in shown["hours"]] == [
        ("2026-11-21T22:00:00+00:00", "166"),
        ("2026-11-21T23:00:00+00:00", "167"),
    ]
    assert shown["kind"] == "recorded" and shown["mean"] == "166.5"
    assert shown["note"].startswith(
        "PL has no value for 2 of these 4 hour(s), from 2026-11-22 00:00 UTC: no file records them and PL "
        "has no bundled typical year; they are left out; import a file that covers them"
    )


def test_import_then_show_finds_it(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["carbon", "import", str(RECORDED), "--zone", "GB"]) == 0
    out = capsys.readouterr().out
    assert "imported 48 hour(s) of GB carbon intensity from GB_2026-11.csv" in out
    assert "replacing" not in out
    assert sorted(p.name for p in home.iterdir()) == [".GB_imported.csv.lock", "GB_imported.csv"]
    assert (
        main(["carbon", "show", "--zone", "GB", "--start", "2026-11-20", "--hours", "1", "--format", "json"])
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown["hours"][0]["g_co2e_per_kwh"] == "120" and "GB_imported.csv" in shown["series"]


def test_a_bad_file_writes_nothing(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["carbon", "import", str(FIXTURES / "GB_bad.csv"), "--zone", "GB"]) == 2
    err = capsys.readouterr().err
    # The file's own line, as an editor shows it (the header is line 1): it said "record 1".
    assert (
        "GB_bad.csv (gCO2e/kWh, lca) line 3: intensity 'not-a-number' is not a number: write the gCO2e per "
        "kWh as digits with a decimal point, without a unit or currency sign; nothing was imported" in err
    )
    gap = tmp_path / "GB_gap.csv"
    gap.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,120\n2026-11-20T03:00:00Z,99\n")
    assert main(["carbon", "import", str(gap), "--zone", "GB"]) == 2
    # It said "no price" and "pass a larger max_gap", which no command takes.
    err = capsys.readouterr().err
    assert "no intensity from 2026-11-20T00:00:00+00:00 to 2026-11-20T03:00:00+00:00" in err
    assert "(3 h; records must be at most 1:00:00 apart): fill the gap in the source" in err
    # kg per kWh (0.09) was taken as grams: every estimate a ten-thousandth of the truth, in silence.
    kg = tmp_path / "GB_kg.csv"
    kg.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,0.09\n2026-11-20T01:00:00Z,0.12\n")
    assert main(["carbon", "import", str(kg), "--zone", "GB"]) == 2
    assert "is at most 0.12 over the whole file" in capsys.readouterr().err and not home.exists()
    # Zones are looked up exactly: "gb" would never be read for GB.
    assert main(["carbon", "import", str(RECORDED), "--zone", "gb"]) == 2
    assert "zone 'gb': grid zone names are written 'GB'" in capsys.readouterr().err
    assert main(["carbon", "import", str(tmp_path / "missing.csv"), "--zone", "GB"]) == 2
    assert "cannot read carbon intensity file" in capsys.readouterr().err
    assert main(["carbon", "import", str(RECORDED), "--zone", "../GB"]) == 2
    assert "is not a grid zone name" in capsys.readouterr().err
    # An underscore or a space typed for the hyphen of a zone id: the zone meant is named.
    assert main(["carbon", "import", str(RECORDED), "--zone", "DE_LU"]) == 2
    assert "zone 'DE_LU' is not a grid zone name" in (err := capsys.readouterr().err)
    assert err.rstrip().endswith("leading '.'): did you mean 'DE-LU'?")
    assert main(["carbon", "import", str(RECORDED), "--zone", "GB_"]) == 2
    assert capsys.readouterr().err.rstrip().endswith("did you mean 'GB'?")
    # A carbon file's errors speak of intensity, not of prices in USD/hour, nor of a header "None".
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    bad_files = {
        "twice.csv": header + "2026-11-20T00:00:00Z,120\n2026-11-20T00:00:00Z,999\n",
        "header.csv": header,
        "empty.csv": "",
    }
    for name, text in bad_files.items():
        (tmp_path / name).write_text(text)
        assert main(["carbon", "import", str(tmp_path / name), "--zone", "GB"]) == 2
        err = capsys.readouterr().err
        assert "price" not in err and "USD" not in err and "None" not in err, err
    assert not home.exists()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # A spreadsheet's time, told as "time 2026-11-20T00:00:00 has no time zone": text the file lacks.
        pytest.param(
            "timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20 00:00,150\n2026-11-20 01:00,160\n",
            "line 2: time '2026-11-20 00:00' has no time zone; write it with one, e.g. "
            "'2026-11-20T00:00:00Z' for UTC; nothing was imported",
            id="time-without-zone-as-written",
        ),
        # Blank lines alone were "lacks column(s) timestamp_utc, g_co2eq_per_kwh_lca; its header is []".
        pytest.param(
            "\n\n",
            "GB_hurried.csv: the file is empty; a carbon intensity CSV starts with the header "
            "timestamp_utc,g_co2eq_per_kwh_lca and has a row per hour; nothing was imported",
            id="blank-lines-only",
        ),
        pytest.param(
            "\ntimestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,150\n",
            "GB_hurried.csv: line 1 is blank; a carbon intensity CSV starts with its header "
            "timestamp_utc,g_co2eq_per_kwh_lca on line 1: delete the blank line(s) above it; nothing was "
            "imported",
            id="blank-line-before-the-header",
        ),
        # A decimal-comma spreadsheet's ';' was told only as a header of one odd column.
        pytest.param(
            "timestamp_utc;g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z;150\n",
            "(expected timestamp_utc,g_co2eq_per_kwh_lca): its columns are separated by ';'; save it with "
            "commas between them; nothing was imported",
            id="semicolons",
        ),
        pytest.param(
            "\ufefftimestamp_utc\tg_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z\t150\n",
            "its columns are separated by '\\t'; save it with commas between them",
            id="tabs-after-a-bom",
        ),
        # Excel's "Unicode Text": "is not UTF-8 text", with no way to save it; `carbon show --source` raised
        # a UnicodeDecodeError traceback.
        pytest.param(
            "timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,150\n".encode("utf-16"),
            "GB_hurried.csv is UTF-16 text, as Excel's 'Unicode Text' saves: a carbon intensity CSV is read "
            "as UTF-8; save it as 'CSV UTF-8' (comma-separated)",
            id="utf-16",
        ),
        pytest.param(
            "timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,150 \u00b5\n".encode("cp1252"),
            "GB_hurried.csv is not UTF-8 text (byte 0xb5 on line 2; Latin-1 or Windows-1252, perhaps): a "
            "carbon intensity CSV is read as UTF-8; save it as 'CSV UTF-8' (comma-separated)",
            id="windows-1252",
        ),
        # Lines ended by CR alone (Excel for Mac's "CSV (Macintosh)"): the byte was said to be on line 1.
        pytest.param(
            "timestamp_utc,g_co2eq_per_kwh_lca\r2026-11-20T00:00:00Z,150 \u00b5\r".encode("cp1252"),
            "GB_hurried.csv is not UTF-8 text (byte 0xb5 on line 2; Latin-1 or Windows-1252, perhaps)",
            id="windows-1252-cr-line-ends",
        ),
    ],
)
def test_a_hurried_users_file_is_told_with_its_bad_value_and_what_to_do(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes, said: str
) -> None:
    hurried = tmp_path / "GB_hurried.csv"
    hurried.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    assert main(["carbon", "import", str(hurried), "--zone", "GB"]) == 2
    err = capsys.readouterr().err
    assert said in err and "nothing was imported" in err, err
    assert not home.exists()
    # Read where it is, the file is told alike (the import's "nothing was imported" aside).
    assert main(["carbon", "show", "--zone", "GB", "--source", str(hurried), "--start", "2026-11-20"]) == 2
    err = capsys.readouterr().err
    assert said.removesuffix("; nothing was imported") in err, err


@pytest.mark.parametrize(
    "line_end",
    [pytest.param("\r", id="cr"), pytest.param("\r\n", id="crlf"), pytest.param("\n", id="lf")],
)
@pytest.mark.parametrize("bom", [pytest.param("", id="no-bom"), pytest.param("\ufeff", id="bom")])
def test_a_file_is_read_and_imported_alike_whatever_its_line_ends(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], line_end: str, bom: str
) -> None:
    # Read as bytes and decoded, a CR-only file (Excel for Mac's "CSV (Macintosh)") kept its '\r' and csv
    # refused it: "new-line character seen in unquoted field", in show --source, the import and its merge.
    lines = RECORDED.read_text(encoding="utf-8").splitlines()
    first, second = tmp_path / "GB_first.csv", tmp_path / "GB_second.csv"
    first.write_bytes((bom + line_end.join(lines[:25]) + line_end).encode("utf-8"))
    second.write_bytes((bom + line_end.join(lines[:1] + lines[25:]) + line_end).encode("utf-8"))
    show = ["carbon", "show", "--zone", "GB", "--start", "2026-11-20T22:00Z", "--format", "json", "--hours"]
    assert main([*show, "2", "--source", str(first)]) == 0, capsys.readouterr()
    shown = json.loads(capsys.readouterr().out)
    assert [h["g_co2e_per_kwh"] for h in shown["hours"]] == ["142", "143"]
    assert main(["carbon", "import", str(first), "--zone", "GB"]) == 0, capsys.readouterr().err
    assert "imported 24 hour(s) of GB carbon intensity from GB_first.csv" in capsys.readouterr().out
    assert main(["carbon", "import", str(second), "--zone", "GB"]) == 0, capsys.readouterr().err
    assert "24 record(s) added, 0 replaced, 24 kept from the earlier import" in capsys.readouterr().out
    assert main([*show, "4", "--source", "recorded"]) == 0, capsys.readouterr()
    shown = json.loads(capsys.readouterr().out)
    assert [h["g_co2e_per_kwh"] for h in shown["hours"]] == ["142", "143", "144", "145"]
    assert shown["series"].startswith("carbon GB_imported.csv"), shown["series"]


def test_a_file_with_a_header_and_no_rows_is_told_as_a_file(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was "intensity series 'carbon GB_rows.csv (gCO2e/kWh, lca)' has no records; check the file and its
    # filters": a CSV has no filters, and the series named was the file.
    said = (
        "GB_rows.csv: the file has a header but no rows; a carbon intensity CSV has a row per hour under its "
        "header timestamp_utc,g_co2eq_per_kwh_lca"
    )
    empty = tmp_path / "GB_rows.csv"
    for text in ("timestamp_utc,g_co2eq_per_kwh_lca\n", "timestamp_utc,g_co2eq_per_kwh_lca\n\n\n"):
        empty.write_text(text)
        assert main(["carbon", "import", str(empty), "--zone", "GB"]) == 2
        err = capsys.readouterr().err
        assert f"{said}; nothing was imported" in err and "filters" not in err, err
        assert main(["carbon", "show", "--zone", "GB", "--source", str(empty), "--start", "2026-11-20"]) == 2
        assert said in (err := capsys.readouterr().err) and "filters" not in err, err
    assert not home.exists()


def test_every_intensity_column_the_file_has_is_checked(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only g_co2eq_per_kwh_lca was checked: a direct column of kilograms (or text) was imported, and
    # RecordedCarbon(basis="direct") failed on it later, far from the file.
    header = "timestamp_utc,g_co2eq_per_kwh_direct,g_co2eq_per_kwh_lca,estimated\n"
    bad_direct = {
        "kg.csv": header + "2026-11-20T00:00:00Z,0.09,120,false\n2026-11-20T01:00:00Z,0.1,121,false\n",
        "text.csv": header + "2026-11-20T00:00:00Z,100,120,false\n2026-11-20T01:00:00Z,n/a,121,false\n",
    }
    said = {"kg.csv": "g_co2eq_per_kwh_direct is at most 0.1 over the whole file", "text.csv": "line 3"}
    for name, text in bad_direct.items():
        (tmp_path / name).write_text(text)
        assert main(["carbon", "import", str(tmp_path / name), "--zone", "GB"]) == 2
        err = capsys.readouterr().err
        assert said[name] in err and "direct" in err and "nothing was imported" in err, err
    assert not home.exists()
    # A file without a direct column is still taken (lca is the one every source needs).
    lca_only = tmp_path / "lca.csv"
    lca_only.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T00:00:00Z,120\n2026-11-20T01:00:00Z,121\n"
    )
    assert main(["carbon", "import", str(lca_only), "--zone", "GB"]) == 0
    assert main(["carbon", "import", str(RECORDED), "--zone", "GB"]) == 0  # both columns good


def test_a_second_import_merges_with_the_first(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A second import replaced the first: imported month by month, the earlier months were lost.
    header = "timestamp_utc,g_co2eq_per_kwh_direct,g_co2eq_per_kwh_lca\n"
    first = tmp_path / "gb-first.csv"
    first.write_text(header + "".join(f"2026-11-19T{h:02d}:00:00Z,1,{200 + h}\n" for h in range(20, 24)))
    assert main(["carbon", "import", str(first), "--zone", "GB"]) == 0
    assert main(["carbon", "import", str(FIXTURES / "GB_2026-11.csv"), "--zone", "GB"]) == 0
    out = capsys.readouterr().out
    assert "48 record(s) added, 0 replaced, 4 kept from the earlier import" in out, out
    # The next file overlaps the end of the earlier ones: its values win on the hours both hold.
    newer = tmp_path / "gb-newer.csv"
    newer.write_text(
        "timestamp_utc,g_co2eq_per_kwh_direct,g_co2eq_per_kwh_lca,estimated\n"
        "2026-11-21T23:00:00Z,10,99,false\n2026-11-22T00:00:00+00:00,11,98,false\n"
    )
    assert main(["carbon", "import", str(newer), "--zone", "GB"]) == 0
    assert "1 record(s) added, 1 replaced, 51 kept from the earlier import" in capsys.readouterr().out
    assert sorted(p.name for p in home.iterdir()) == [
        ".GB_imported.csv.lock",
        "GB_imported.csv",
    ]  # no temporary file left behind
    source = RecordedCarbon(home, bundled=False)
    start = datetime(2026, 11, 19, 20, tzinfo=timezone.utc)
    hours = source.covered_hours("GB", start, 53)
    assert len(hours) == 53  # every hour of the three files, once
    assert hours[start] == 220 and hours[start + timedelta(hours=4)] == 120  # the earlier imports, kept
    assert hours[start + timedelta(hours=51)] == 99 and hours[start + timedelta(hours=52)] == 98  # the newest
    assert RecordedCarbon(home, bundled=False, basis="direct").covered_hours("GB", start, 53)[
        start + timedelta(hours=51)
    ] == Decimal(10)


def test_an_import_that_cannot_merge_keeps_the_earlier_one_whole(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["carbon", "import", str(RECORDED), "--zone", "GB"]) == 0
    before = (home / "GB_imported.csv").read_text()
    capsys.readouterr()
    # A bad row: the new file is checked whole before the earlier import is touched.
    assert main(["carbon", "import", str(FIXTURES / "GB_bad.csv"), "--zone", "GB"]) == 2
    assert "nothing was imported" in capsys.readouterr().err
    # Months apart: one file cannot hold the gap between them.
    later = tmp_path / "gb-later.csv"
    later.write_text(
        "timestamp_utc,g_co2eq_per_kwh_direct,g_co2eq_per_kwh_lca\n2027-01-01T00:00:00Z,1,90\n"
        "2027-01-01T01:00:00Z,1,91\n"
    )
    assert main(["carbon", "import", str(later), "--zone", "GB"]) == 2
    err = capsys.readouterr().err
    assert "no intensity from 2026-11-21T23:00:00+00:00 to 2027-01-01T00:00:00+00:00" in err, err
    assert "import the hours between first" in err and f"delete {home / 'GB_imported.csv'}" in err
    # An intensity column only one of them has would be blank for the other's hours.
    lca_only = tmp_path / "gb-lca.csv"
    lca_only.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-22T00:00:00Z,90\n2026-11-22T01:00:00Z,91\n"
    )
    assert main(["carbon", "import", str(lca_only), "--zone", "GB"]) == 2
    assert "only one of them has g_co2eq_per_kwh_direct" in capsys.readouterr().err
    assert (home / "GB_imported.csv").read_text() == before
    assert sorted(p.name for p in home.iterdir()) == [".GB_imported.csv.lock", "GB_imported.csv"]
    # A file covering every earlier hour is taken whole, the earlier columns with it gone.
    whole = tmp_path / "gb-whole.csv"
    whole.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n"
        + "".join(
            f"{datetime(2026, 11, 20, tzinfo=timezone.utc) + timedelta(hours=h):%Y-%m-%dT%H:%M:%SZ},"
            f"{50 + h}\n"
            for h in range(48)
        )
    )
    assert main(["carbon", "import", str(whole), "--zone", "GB"]) == 0
    assert "0 record(s) added, 48 replaced, 0 kept from the earlier import" in capsys.readouterr().out
    assert (home / "GB_imported.csv").read_text() == whole.read_text()


def test_half_hourly_records_are_counted_as_hours_and_an_empty_zone_is_refused(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    half = tmp_path / "GB_half.csv"
    rows = [f"2026-11-20T{h:02d}:{m:02d}:00Z,{100 + h}" for h in range(24) for m in (0, 30)]
    half.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "\n".join(rows) + "\n")
    assert main(["carbon", "import", str(half), "--zone", "GB"]) == 0
    assert (
        "imported 24 hour(s) in 48 records of GB carbon intensity" in capsys.readouterr().out
    )  # "48 hour(s)"
    with pytest.raises(SystemExit, match="2"):
        main(["carbon", "show", "--zone", "", "--start", "2026-11-20T00:00:00Z"])
    assert "--zone: empty: give a value (grid zone" in capsys.readouterr().err


def test_a_merge_counts_records_not_hours(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Counted by hour, appending 22:30 to a half-hourly import ending at 22:00 said "0 hour(s) added, 1
    # replaced": its hour held the 22:00 record, which was kept, and nothing was replaced.
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    halves = tmp_path / "gb-halves.csv"
    halves.write_text(
        header + "2026-11-20T21:00:00Z,100\n2026-11-20T21:30:00Z,110\n2026-11-20T22:00:00Z,120\n"
    )
    assert main(["carbon", "import", str(halves), "--zone", "GB"]) == 0
    latest = tmp_path / "gb-latest.csv"
    latest.write_text(header + "2026-11-20T22:30:00Z,130\n")
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 0, capsys.readouterr().err
    assert "1 record(s) added, 0 replaced, 3 kept from the earlier import" in capsys.readouterr().out
    # Hourly over half-hourly: 23:00 replaced, and 23:30, inside its span with no record of its own, dropped.
    hourly = tmp_path / "gb-hourly.csv"
    hourly.write_text(header + "2026-11-20T22:00:00Z,500\n2026-11-20T23:00:00Z,501\n")
    assert main(["carbon", "import", str(hourly), "--zone", "GB"]) == 0, capsys.readouterr().err
    assert (
        "1 record(s) added, 1 replaced, 1 dropped inside the span it replaced (2026-11-20 22:00 to "
        "2026-11-21 00:00 UTC), 2 kept from the earlier import" in capsys.readouterr().out
    )
    assert (home / "GB_imported.csv").read_text().splitlines()[1:] == [
        "2026-11-20T21:00:00Z,100",
        "2026-11-20T21:30:00Z,110",
        "2026-11-20T22:00:00Z,500",
        "2026-11-20T23:00:00Z,501",
    ]


def test_a_region_or_a_grids_everyday_name_is_steered_to_the_zone_id(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "--zone CAISO" was told to import a file as CAISO: a zone of its own that no us-west-1 task reads.
    assert main(["carbon", "show", "--zone", "CAISO", "--start", "2023-06-01", "--hours", "1"]) == 2
    assert "did you mean 'US-CAL-CISO'" in capsys.readouterr().err
    assert main(["carbon", "show", "--zone", "us-west-1", "--start", "2023-06-01", "--hours", "1"]) == 2
    assert "'us-west-1' is a region, whose grid zone is 'US-CAL-CISO'" in capsys.readouterr().err
    for zone, said in (("NSW", "did you mean 'AU-NSW'"), ("DE LU", "no '_', '/', space")):
        assert main(["carbon", "import", str(RECORDED), "--zone", zone]) == 2
        assert said in capsys.readouterr().err
    assert not home.exists() or list(home.iterdir()) == []
    # A file named for one zone imported as another: done as asked, and said.
    assert main(["carbon", "import", str(RECORDED), "--zone", "DE-LU"]) == 0
    assert capsys.readouterr().err.startswith(  # prefixed as every other warning of the command
        "costaware: warning: GB_2026-11.csv is named for zone 'GB'; it is imported as 'DE-LU'"
    )


def test_a_merge_replaces_the_earlier_records_from_the_new_files_first_instant_not_its_first_hour(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Merged hour by hour, a half-hourly file starting 23:30 dropped the earlier import's 23:00 record
    # ("1 replaced", the hour's mean now the new value alone), and after an hourly import it was refused for
    # the gap from 22:00 to 23:30 the merge itself made.
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    half = tmp_path / "GB_half.csv"
    half.write_text(
        header + "".join(f"2026-11-01T{h:02d}:{m:02d}:00Z,{100 + h}\n" for h in (22, 23) for m in (0, 30))
    )
    newer = tmp_path / "GB_newer.csv"
    newer.write_text(header + "2026-11-01T23:30:00Z,500\n2026-11-02T00:00:00Z,501\n")
    assert main(["carbon", "import", str(half), "--zone", "GB"]) == 0
    assert main(["carbon", "import", str(newer), "--zone", "GB"]) == 0
    assert "1 record(s) added, 1 replaced, 3 kept from the earlier import" in capsys.readouterr().out
    eleven = datetime(2026, 11, 1, 23, tzinfo=timezone.utc)
    assert RecordedCarbon(home, bundled=False).covered_hours("GB", eleven, 1) == {eleven: Decimal("311.5")}
    (home / "GB_imported.csv").unlink()
    hourly = tmp_path / "GB_hourly.csv"
    hourly.write_text(header + "".join(f"2026-11-01T{h:02d}:00:00Z,{100 + h}\n" for h in range(24)))
    assert main(["carbon", "import", str(hourly), "--zone", "GB"]) == 0
    assert main(["carbon", "import", str(newer), "--zone", "GB"]) == 0, capsys.readouterr().err
    assert "2 record(s) added, 0 replaced, 24 kept from the earlier import" in capsys.readouterr().out
    merged = (home / "GB_imported.csv").read_text().splitlines()
    assert merged[-3:] == ["2026-11-01T23:00:00Z,123", "2026-11-01T23:30:00Z,500", "2026-11-02T00:00:00Z,501"]


def test_an_import_merged_from_half_hourly_then_hourly_records_ends_an_hour_after_its_last(
    home: Path, tmp_path: Path
) -> None:
    # Ended at its shortest step, the merged file lost the last hour of its hourly tail (03:30, not 04:00).
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    half = tmp_path / "GB_half.csv"
    half.write_text(
        header + "".join(f"2026-11-01T{h:02d}:{m:02d}:00Z,{100 + h}\n" for h in range(3) for m in (0, 30))
    )
    hourly = tmp_path / "GB_hourly.csv"
    hourly.write_text(header + "2026-11-01T02:00:00Z,900\n2026-11-01T03:00:00Z,901\n")
    assert main(["carbon", "import", str(half), "--zone", "GB"]) == 0
    assert main(["carbon", "import", str(hourly), "--zone", "GB"]) == 0
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    source = RecordedCarbon(home, bundled=False)
    assert source.files_cover("GB", start, start + timedelta(hours=4))
    assert not source.files_cover("GB", start, start + timedelta(hours=4, minutes=30))


def test_two_imports_of_one_zone_at_once_keep_both(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without a lock both imports found no earlier file (or the same one), and the later write lost the other.
    import threading
    import time

    from costaware.adapters import carbon_source

    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    files = []
    for day in (19, 20):
        file = tmp_path / f"gb-{day}.csv"
        file.write_text(header + "".join(f"2026-11-{day}T{h:02d}:00:00Z,{100 + h}\n" for h in range(24)))
        files.append(file)
    write = carbon_source.write_atomically

    def slow_write(path: Path, data: bytes, **kwargs: Any) -> None:
        time.sleep(0.5)  # both imports have read the folder before either writes
        write(path, data, **kwargs)

    monkeypatch.setattr(carbon_source, "write_atomically", slow_write)
    codes: list[int] = []
    threads = [
        threading.Thread(
            target=lambda f=file: codes.append(main(["carbon", "import", str(f), "--zone", "GB"]))
        )
        for file in files
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert codes == [0, 0]
    assert "24 record(s) added, 0 replaced, 24 kept from the earlier import" in capsys.readouterr().out
    start = datetime(2026, 11, 19, tzinfo=timezone.utc)
    assert len(RecordedCarbon(home, bundled=False).covered_hours("GB", start, 48)) == 48


def test_a_file_given_under_a_quoted_home_is_imported(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # '~/GB_2026-11.csv' (quoted, so no shell expanded it) was looked for in a folder named '~'.
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "GB_2026-11.csv").write_bytes(RECORDED.read_bytes())
    assert main(["carbon", "import", "~/GB_2026-11.csv", "--zone", "GB"]) == 0
    assert "imported 48 hour(s) of GB carbon intensity from GB_2026-11.csv" in capsys.readouterr().out


def test_a_file_here_whose_name_starts_with_a_tilde_is_imported(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # '~GB_2026.csv' in the working folder was read as the home of a user 'GB_2026.csv', and refused.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "~GB_2026.csv").write_bytes(RECORDED.read_bytes())
    assert main(["carbon", "import", "~GB_2026.csv", "--zone", "GB"]) == 0
    assert "imported 48 hour(s) of GB carbon intensity from ~GB_2026.csv" in capsys.readouterr().out


def test_a_single_record_that_follows_the_earlier_import_takes_its_step(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A feed appending the latest hour, one record at a time, was refused once one-record files were.
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    earlier = tmp_path / "gb-hours.csv"
    earlier.write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T01:00:00Z,110\n")
    assert main(["carbon", "import", str(earlier), "--zone", "GB"]) == 0
    latest = tmp_path / "gb-latest.csv"
    latest.write_text(header + "2026-11-20T02:00:00Z,120\n")
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 0, capsys.readouterr().err
    assert "1 record(s) added, 0 replaced, 2 kept from the earlier import" in capsys.readouterr().out
    assert (home / "GB_imported.csv").read_text().splitlines()[1:] == [
        "2026-11-20T00:00:00Z,100",
        "2026-11-20T01:00:00Z,110",
        "2026-11-20T02:00:00Z,120",
    ]
    # Half-hourly: the record after 00:30 ends at 01:30, the earlier import's step, not an hour on.
    (home / "GB_imported.csv").unlink()
    earlier.write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T00:30:00Z,110\n")
    assert main(["carbon", "import", str(earlier), "--zone", "GB"]) == 0
    latest.write_text(header + "2026-11-20T01:00:00Z,120\n")
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 0
    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    # 01:00-01:30 alone is recorded: the 01:00 hour is not covered whole.
    assert list(RecordedCarbon(home, bundled=False).covered_hours("GB", start, 2)) == [start]
    # One that does not start where the earlier import ends still has no step to take: refused.
    before = (home / "GB_imported.csv").read_bytes()
    latest.write_text(header + "2026-11-20T03:00:00Z,130\n")
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 2
    assert "gb-latest.csv holds one record (2026-11-20 03:00 UTC)" in capsys.readouterr().err
    assert (home / "GB_imported.csv").read_bytes() == before


def test_a_single_record_file_is_refused_for_its_unknown_step(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One record was taken to hold an hour: merged into a half-hourly import at 23:30, it replaced 00:00 too.
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    earlier = tmp_path / "gb-halves.csv"
    earlier.write_text(
        header + "2026-11-19T23:00:00Z,100\n2026-11-19T23:30:00Z,110\n2026-11-20T00:00:00Z,120\n"
        "2026-11-20T00:30:00Z,130\n"
    )
    assert main(["carbon", "import", str(earlier), "--zone", "GB"]) == 0
    before = (home / "GB_imported.csv").read_bytes()
    single = tmp_path / "gb-one.csv"
    single.write_text(header + "2026-11-19T23:30:00Z,999\n")
    assert main(["carbon", "import", str(single), "--zone", "GB"]) == 2
    assert (
        "gb-one.csv holds one record (2026-11-19 23:30 UTC): the format declares no step, and one record "
        "cannot tell an hour from half an hour, so where it ends is unknown; nothing was imported: add the "
        "record after it (the next hour or half hour)" in capsys.readouterr().err
    )
    assert (home / "GB_imported.csv").read_bytes() == before


def test_a_file_that_cannot_be_looked_at_is_told_not_a_traceback(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Whether a file was there as named was asked of every path with a bare exists(), which raises
    # PermissionError (Python 3.11) for one in a folder this user may not enter: a traceback, not the
    # command's "cannot read ... Permission denied". Only a name starting with '~' is looked at now, and a
    # look that fails counts as not there.
    import os

    denied = tmp_path / "deny" / "GB.csv"
    stat = os.stat

    def eacces(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith(str(tmp_path / "deny")) or str(path).startswith("~"):
            raise PermissionError(13, "Permission denied", str(path))
        return stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", eacces)
    assert main(["carbon", "import", str(denied), "--zone", "GB"]) == 2
    assert "cannot read carbon intensity file" in capsys.readouterr().err
    assert main(["carbon", "import", "~/GB.csv", "--zone", "GB"]) == 2
    assert "costaware: error:" in capsys.readouterr().err


def test_an_import_keeps_the_earlier_files_mode_and_a_new_one_gets_the_umask_default(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The import was written through a temporary file made 0600: a scheduler or worker running as another
    # user of the group could no longer read the zone's recorded intensity once it was imported or merged.
    import os
    import stat

    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    first = tmp_path / "gb-first.csv"
    first.write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T01:00:00Z,110\n")
    mask = os.umask(0o022)
    try:
        assert main(["carbon", "import", str(first), "--zone", "GB"]) == 0
        target = home / "GB_imported.csv"
        assert stat.S_IMODE(target.stat().st_mode) == 0o644  # 0666 less the umask, as any new file
        target.chmod(0o640)
        latest = tmp_path / "gb-latest.csv"
        latest.write_text(header + "2026-11-20T02:00:00Z,120\n2026-11-20T03:00:00Z,130\n")
        assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 0, capsys.readouterr().err
    finally:
        os.umask(mask)
    assert "2 record(s) added" in capsys.readouterr().out
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the mode its owner gave it, kept by the merge


def test_a_merge_by_another_user_keeps_the_earlier_files_owner_where_it_may(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A merge wrote the file through a temporary file of the user merging: owned by that user and group
    # after it, a 0640 import owned by the scheduler's group became unreadable to that group.
    import os
    import stat

    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    first = tmp_path / "gb-first.csv"
    first.write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T01:00:00Z,110\n")
    assert main(["carbon", "import", str(first), "--zone", "GB"]) == 0
    target = home / "GB_imported.csv"
    target.chmod(0o640)
    # Another owner: only root may give a file away; a user may give it a group of theirs.
    others = [g for g in os.getgroups() if g != os.getegid()]
    owner = (4242, 4343) if os.geteuid() == 0 else (os.geteuid(), others[0]) if others else None
    if owner is None:
        pytest.skip("needs root, or a second group of this user, to own the import apart")
    os.chown(target, *owner)
    latest = tmp_path / "gb-latest.csv"
    latest.write_text(header + "2026-11-20T02:00:00Z,120\n2026-11-20T03:00:00Z,130\n")
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 0, capsys.readouterr().err
    assert "2 record(s) added" in capsys.readouterr().out
    merged = target.stat()
    assert (merged.st_uid, merged.st_gid, stat.S_IMODE(merged.st_mode)) == (*owner, 0o640)


@pytest.mark.parametrize("refusal", ["EINVAL", "EOPNOTSUPP"])  # ENOTSUP is EOPNOTSUPP on Linux
def test_a_merge_where_the_earlier_owner_cannot_be_given_keeps_the_writers(
    refusal: str,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Keeping the earlier owner caught only PermissionError: root in a user namespace where the owner is
    # unmapped gets EINVAL, some mounts EOPNOTSUPP, and the import failed with a traceback, nothing merged.
    import errno
    import logging
    import os
    import stat

    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    first = tmp_path / "gb-first.csv"
    first.write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T01:00:00Z,110\n")
    assert main(["carbon", "import", str(first), "--zone", "GB"]) == 0
    target = home / "GB_imported.csv"
    target.chmod(0o640)
    tried: list[tuple[int, int]] = []

    def refuse(fd: int, uid: int, gid: int) -> None:
        tried.append((uid, gid))
        raise OSError(getattr(errno, refusal), os.strerror(getattr(errno, refusal)))

    monkeypatch.setattr(os, "fchown", refuse)
    latest = tmp_path / "gb-latest.csv"
    latest.write_text(header + "2026-11-20T02:00:00Z,120\n2026-11-20T03:00:00Z,130\n")
    with caplog.at_level(logging.DEBUG, logger="costaware.adapters.carbon_source"):
        assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 0, capsys.readouterr().err
    assert "2 record(s) added" in capsys.readouterr().out
    owner = target.stat()
    assert tried == [(owner.st_uid, owner.st_gid), (-1, owner.st_gid)]  # the owner, then the group alone
    assert (owner.st_uid, owner.st_gid, stat.S_IMODE(owner.st_mode)) == (os.geteuid(), os.getegid(), 0o640)
    assert target.read_text().count("\n") == 5  # the header and four hours
    said = caplog.text
    assert f"could not give {target} the group {owner.st_gid}" in said
    assert os.strerror(getattr(errno, refusal)) in said
    assert [p.name for p in home.iterdir() if p.name.endswith(".tmp")] == []


def test_a_merge_by_root_in_a_user_namespace_where_the_owner_is_unmapped_succeeds(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The real case of the test above: the earlier import owned by 4242:4343, merged by root in a user
    # namespace (unshare -U -r) where neither id is mapped, so fchown answers EINVAL.
    import os
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to own the import apart and merge it in a user namespace")
    if subprocess.run(["unshare", "-U", "-r", "true"], capture_output=True).returncode != 0:
        pytest.skip("this machine does not allow user namespaces")
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    first = tmp_path / "gb-first.csv"
    first.write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T01:00:00Z,110\n")
    assert main(["carbon", "import", str(first), "--zone", "GB"]) == 0
    target = home / "GB_imported.csv"
    os.chown(target, 4242, 4343)
    latest = tmp_path / "gb-latest.csv"
    latest.write_text(header + "2026-11-20T02:00:00Z,120\n2026-11-20T03:00:00Z,130\n")
    merge = "import sys; from costaware.cli import main; sys.exit(main(sys.argv[1:]))"
    command = ["unshare", "-U", "-r", sys.executable, "-c", merge, "carbon", "import", str(latest)]
    done = subprocess.run([*command, "--zone", "GB"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "2 record(s) added" in done.stdout
    assert target.read_text().count("\n") == 5  # the header and four hours
    assert (target.stat().st_uid, target.stat().st_gid) == (0, 0)  # the merging root's, as far as it could


def test_a_single_record_is_checked_against_the_earlier_import_as_the_lock_finds_it(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The one-record check read the earlier import before taking the lock and the merge read it again in
    # it: an import of the zone finishing in between (here to 03:00) left the record checked against an
    # end (02:00) the merge no longer had, and it replaced the 02:00 record with its guessed hour.
    from costaware.adapters.carbon_data import carbon_from_text
    from costaware.cli.commands import carbon_import

    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    earlier = tmp_path / "gb-hours.csv"
    earlier.write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T01:00:00Z,110\n")
    assert main(["carbon", "import", str(earlier), "--zone", "GB"]) == 0
    target = home / "GB_imported.csv"
    locked = carbon_import._locked

    @contextlib.contextmanager
    def another_import_first(path: Path) -> Iterator[None]:
        target.write_text(header + "".join(f"2026-11-20T0{h}:00:00Z,{100 + 10 * h}\n" for h in range(4)))
        with locked(path):
            yield

    monkeypatch.setattr(carbon_import, "_locked", another_import_first)
    parsed: list[str] = []
    parse = carbon_from_text
    monkeypatch.setattr(
        "costaware.adapters.carbon_data.carbon_from_text",
        lambda text, *, source, basis="lca": parsed.append(source) or parse(text, source=source, basis=basis),
    )
    latest = tmp_path / "gb-latest.csv"
    latest.write_text(header + "2026-11-20T02:00:00Z,999\n")
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 2
    assert "gb-latest.csv holds one record (2026-11-20 02:00 UTC)" in capsys.readouterr().err
    assert "2026-11-20T02:00:00Z,120" in target.read_text()
    assert parsed.count("GB_imported.csv") == 1  # the earlier import parsed once, under the lock


def test_show_and_the_waits_read_the_hour_a_half_hourly_import_ends_inside_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The import ends 23:30. `carbon show` gave 23:00 the typical year whole; the waits held the import to
    # 23:30 and then typical-year hours from 23:30 (23:30-00:30, ...), off the clock by half an hour.
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    halves = tmp_path / "gb-halves.csv"
    halves.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n"
        "2026-11-21T22:00:00Z,160\n2026-11-21T22:30:00Z,170\n2026-11-21T23:00:00Z,180\n"
    )
    assert main(["carbon", "import", str(halves), "--zone", "GB"]) == 0
    capsys.readouterr()
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        argv = ["carbon", "show", "--zone", "GB", "--start", start.isoformat(), "--hours", "4"]
        assert main([*argv, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    weighed = carbon_intensity("GB", region=None, objective=Objective("carbon"), at=start)
    assert weighed is not None
    waits = hourly_series(weighed, start, 4)
    assert [h["g_co2e_per_kwh"] for h in shown["hours"]] == [_plain(Decimal(repr(v))) for v in waits]
    typical = RecordedCarbon([], bundled=True).intensity(
        "GB", datetime(2023, 11, 21, 23, tzinfo=timezone.utc), datetime(2023, 11, 22, tzinfo=timezone.utc)
    )
    assert shown["hours"][1]["g_co2e_per_kwh"] == _plain((180 + typical.points[0][1]) / 2)
    assert shown["series"].startswith("recorded (GB_imported.csv) for 1.5 of 4 hour(s), else typical year")


def _plain(value: Decimal) -> str:
    return format(value.quantize(Decimal("0.01")).normalize(), "f")


def test_a_single_record_where_the_bundled_year_ends_is_imported_as_reading_places_it(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `carbon show --source GB_one.csv` and the file in the carbon folder read it (the bundled year's step),
    # while `carbon import` refused it: one record cannot tell an hour from half an hour.
    one = tmp_path / "GB_one.csv"
    one.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n2024-01-01T00:00:00Z,150\n")
    assert main(["carbon", "import", "--zone", "GB", str(one)]) == 0, capsys.readouterr().err
    assert "imported 1 record of GB carbon intensity from GB_one.csv" in capsys.readouterr().out
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    for source in (RecordedCarbon(home), RecordedCarbon(one)):
        assert source.intensity("GB", start, start + timedelta(hours=1)).points == [(start, Decimal(150))]
    # Again, over an earlier import it does not follow: merged where the bundled year's step ends it.
    later = tmp_path / "gb-later.csv"
    later.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n2024-01-01T01:00:00Z,160\n2024-01-01T02:00:00Z,170\n"
    )
    (home / "GB_imported.csv").unlink()
    assert main(["carbon", "import", "--zone", "GB", str(later)]) == 0
    assert main(["carbon", "import", "--zone", "GB", str(one)]) == 0, capsys.readouterr().err
    assert (home / "GB_imported.csv").read_text().splitlines()[1:] == [
        "2024-01-01T00:00:00Z,150",
        "2024-01-01T01:00:00Z,160",
        "2024-01-01T02:00:00Z,170",
    ]


def test_an_import_summary_spans_to_the_end_of_its_last_record(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One record said "(2024-01-01 00:00 to 2024-01-01 00:00 UTC)", a span of nothing, and a file's span
    # stopped at its last record's start: two hourly records were "22:00 to 23:00" for 2 hour(s).
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    cases = [
        # The bundled year's step places a lone record after it: the hour it covers.
        (
            "GB",
            "GB_one.csv",
            "2024-01-01T00:00:00Z,150\n",
            "1 record",
            "2024-01-01 00:00 to 2024-01-01 01:00",
        ),
        (
            "PL",
            "pl-hours.csv",
            "2026-11-20T22:00:00Z,150\n2026-11-20T23:00:00Z,160\n",
            "2 hour(s)",
            "2026-11-20 22:00 to 2026-11-21 00:00",
        ),
        # Appended to an import, as the merged file reads it: an hour after hourly records...
        (
            "PL",
            "pl-next.csv",
            "2026-11-21T00:00:00Z,170\n",
            "1 record",
            "2026-11-21 00:00 to 2026-11-21 01:00",
        ),
        (
            "IT",
            "it-halves.csv",
            "2026-11-20T22:00:00Z,150\n2026-11-20T22:30:00Z,160\n",
            "1 hour(s) in 2 records",
            "2026-11-20 22:00 to 2026-11-20 23:00",
        ),
        # ...and half an hour after half-hourly ones, not the hour a lone record is given.
        (
            "IT",
            "it-next.csv",
            "2026-11-20T23:00:00Z,170\n",
            "1 record",
            "2026-11-20 23:00 to 2026-11-20 23:30",
        ),
    ]
    for zone, name, rows, what, span in cases:
        (tmp_path / name).write_text(header + rows)
        assert main(["carbon", "import", str(tmp_path / name), "--zone", zone]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        target = home / f"{zone}_imported.csv"
        assert out.startswith(
            f"imported {what} of {zone} carbon intensity from {name} ({span} UTC) into {target}"
        ), out
    from costaware.adapters.carbon_data import carbon_from_text
    from costaware.adapters.carbon_source import recorded_end

    merged = carbon_from_text((home / "IT_imported.csv").read_text(), source="IT_imported.csv")
    assert recorded_end(merged) == datetime(2026, 11, 20, 23, 30, tzinfo=timezone.utc)  # as the summary said


def test_a_single_record_just_before_another_file_is_refused_with_the_way_to_keep_it(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Beside a file beginning within the hour after it, reading places it; the import cannot, and only said
    # to add the next record.
    single = tmp_path / "gb-one.csv"
    single.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T03:00:00Z,130\n")
    assert main(["carbon", "import", str(single), "--zone", "GB"]) == 2
    assert (
        "nothing was imported: add the record after it (the next hour or half hour), or, where another GB "
        f"file begins within the hour after it, copy it into {home} as GB_<name>.csv beside that file: read "
        "there, it stands until that file begins" in capsys.readouterr().err.replace("\n", " ")
    )
    assert not (home / "GB_imported.csv").exists()


def test_a_single_record_between_a_half_hourly_file_and_one_an_hour_later_reads_alike_however_kept(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The rule order chosen (docs/carbon.md): the next file's start before the file before's step. The same
    # records 00:00, 00:30, 01:00, 02:00, 03:00 read alike as four files in a folder, as one file (a record
    # stands until the next, gaps up to an hour) and as three imports merged: 01:00-02:00 is the 01:00 value.
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    halves = header + "2026-11-20T00:00:00Z,100\n2026-11-20T00:30:00Z,110\n"
    single = header + "2026-11-20T01:00:00Z,120\n"
    after = header + "2026-11-20T02:00:00Z,130\n2026-11-20T03:00:00Z,140\n"
    files = tmp_path / "files"
    files.mkdir()
    for name, text in (("PL_halves", halves), ("PL_latest", single), ("PL_then", after)):
        (files / f"{name}.csv").write_text(text)
    whole = tmp_path / "whole" / "PL_all.csv"
    whole.parent.mkdir()
    whole.write_text(halves + single.removeprefix(header) + after.removeprefix(header))
    for name, text in (("pl-halves", halves), ("pl-latest", single), ("pl-then", after)):
        (tmp_path / f"{name}.csv").write_text(text)
        assert main(["carbon", "import", str(tmp_path / f"{name}.csv"), "--zone", "PL"]) == 0, (
            capsys.readouterr().err
        )
    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    read = [
        RecordedCarbon(where, bundled=False).intensity("PL", start, start + timedelta(hours=4)).points
        for where in (files, whole, home)
    ]
    assert read[0] == read[1] == read[2]
    one_am = start + timedelta(hours=1)
    assert (one_am, Decimal(120)) in read[0] and start + timedelta(minutes=90) not in dict(read[0])


def test_show_reads_the_recorded_part_of_the_hour_an_import_starts_inside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The import starts 22:30: `carbon show` gave 22:00 the typical year whole, its recorded half hour too.
    halves = tmp_path / "gb-halves.csv"
    halves.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n"
        "2026-11-21T22:30:00Z,160\n2026-11-21T23:00:00Z,170\n2026-11-21T23:30:00Z,180\n"
    )
    assert main(["carbon", "import", str(halves), "--zone", "GB"]) == 0
    capsys.readouterr()
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        argv = ["carbon", "show", "--zone", "GB", "--start", start.isoformat(), "--hours", "3"]
        assert main([*argv, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    typical = RecordedCarbon([], bundled=True).intensity(
        "GB", datetime(2023, 11, 21, 22, tzinfo=timezone.utc), datetime(2023, 11, 21, 23, tzinfo=timezone.utc)
    )
    assert [h["g_co2e_per_kwh"] for h in shown["hours"]][:2] == [
        _plain((typical.points[0][1] + 160) / 2),
        "175",
    ]
    assert shown["series"].startswith("recorded (GB_imported.csv) for 1.5 of 3 hour(s), else typical year")


def test_show_and_the_waits_read_the_hour_an_import_of_a_zone_without_a_typical_year_ends_inside_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # PL has no bundled year. Its half-hourly import ends 23:30: `carbon show` left 23:00 out while the
    # waits fitted the profile there (and over the recorded 22:00 too, the window running past the file).
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    rows, at = ["timestamp_utc,g_co2eq_per_kwh_lca"], datetime(2026, 11, 20, tzinfo=timezone.utc)
    while at <= datetime(2026, 11, 21, 23, tzinfo=timezone.utc):
        rows.append(f"{at:%Y-%m-%dT%H:%M:%SZ},{100 + 3 * at.hour + at.minute // 30}")
        at += timedelta(minutes=30)
    halves = tmp_path / "pl-halves.csv"
    halves.write_text("\n".join(rows) + "\n")
    assert main(["carbon", "import", str(halves), "--zone", "PL"]) == 0
    capsys.readouterr()
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        argv = ["carbon", "show", "--zone", "PL", "--start", start.isoformat(), "--hours", "4"]
        assert main([*argv, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    weighed = carbon_intensity("PL", region=None, objective=Objective("carbon"), at=start)
    assert weighed is not None
    waits = hourly_series(weighed, start, 4)
    assert [h["g_co2e_per_kwh"] for h in shown["hours"]] == [_plain(Decimal(repr(v))) for v in waits[:2]]
    assert waits[0] == 166.5  # 22:00 and 22:30 recorded, not the profile
    assert shown["series"].startswith("PL_imported.csv for 1.5 of 4 hour(s), recorded")
    assert shown["note"].startswith("PL has no value for 2 of these 4 hour(s), from 2026-11-22 00:00 UTC")


def _import_as(uid: int, gid: int, argv: list[str]) -> tuple[int | str, str]:
    """``main(argv)`` in a child process run as ``uid``/``gid``: its exit code (or what it raised) and stderr.

    The modules it needs are imported already (the parent imported as root first), so the child reads only
    the files the import itself reads.
    """
    import io
    import os

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child, which reports through the pipe
        os.close(read)
        result: dict[str, Any] = {}
        try:
            os.setgroups([gid])
            os.setgid(gid)
            os.setuid(uid)
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                result["code"] = main(argv)
            result["err"] = err.getvalue()
        except BaseException as e:  # what it raised is the finding: the test shows it
            result = {"code": f"raised {e!r}", "err": ""}
        finally:
            os.write(write, json.dumps(result).encode())
            os._exit(0)
    os.close(write)
    # A child forked from a threaded worker can in principle hang on a lock another thread held at the fork:
    # bound the wait so such a hang fails this test instead of the whole run.
    import select
    import signal
    import time

    deadline = time.monotonic() + 60
    chunks = []
    try:
        while chunk := _read_within(read, deadline, select):
            chunks.append(chunk)
    except TimeoutError:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        pytest.fail(f"the import run as uid {uid} did not end within 60 s")
    finally:
        os.close(read)
    reported = json.loads(b"".join(chunks) or b'{"code": "no report", "err": ""}')
    os.waitpid(child, 0)
    return reported["code"], reported["err"]


def _read_within(fd: int, deadline: float, select: Any) -> bytes:
    """The next bytes of ``fd``, b"" at its end; TimeoutError if none come before ``deadline`` (monotonic)."""
    import os
    import time

    ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    if not ready:
        raise TimeoutError
    return os.read(fd, 65536)


@pytest.fixture
def shared_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An ``$AIRFLOW_HOME`` every user may enter (pytest's own folders are root's alone), removed after."""
    import os
    import shutil
    import tempfile

    if not hasattr(os, "fork") or os.geteuid() != 0:
        pytest.skip("needs root, to run an import as another user")
    shared = Path(tempfile.mkdtemp(prefix="costaware-carbon-"))
    shared.chmod(0o755)
    monkeypatch.setenv("AIRFLOW_HOME", str(shared / "airflow"))
    try:
        yield shared
    finally:
        shutil.rmtree(shared)


def _group_shared_import(shared: Path, group: int) -> tuple[Path, Path, Path]:
    """A root-owned GB import, lock file and set-group-ID folder, all of ``group``; the next file to merge."""
    import os

    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    first = shared / "gb-first.csv"
    first.write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T01:00:00Z,110\n")
    assert main(["carbon", "import", str(first), "--zone", "GB"]) == 0
    folder = shared / "airflow" / "costaware" / "carbon"
    for parent in (shared / "airflow", shared / "airflow" / "costaware"):
        parent.chmod(0o755)
    os.chown(folder, 0, group)
    folder.chmod(0o2775)  # group-shared: its members may add and replace files
    target, lock = folder / "GB_imported.csv", folder / ".GB_imported.csv.lock"
    for path in (target, lock):
        os.chown(path, 0, group)
        path.chmod(0o644)  # as root's umask 022 made them
    latest = shared / "gb-latest.csv"
    latest.write_text(header + "2026-11-20T02:00:00Z,120\n2026-11-20T03:00:00Z,130\n")
    latest.chmod(0o644)
    return target, lock, latest


def test_a_group_member_merges_into_an_import_whose_lock_file_another_user_made_0644(
    shared_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The lock file was opened for append: made 0644 by root's import, it refused a member of the folder's
    # group the merge, with a PermissionError traceback. flock needs no write access: it is opened read-only.
    target, lock, latest = _group_shared_import(shared_home, group=4343)
    code, err = _import_as(4242, 4343, ["carbon", "import", str(latest), "--zone", "GB"])
    assert code == 0, err
    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    assert len(RecordedCarbon(target.parent, bundled=False).covered_hours("GB", start, 4)) == 4
    assert target.stat().st_gid == 4343 and lock.stat().st_uid == 0  # the lock file was left as it was


def test_a_lock_file_the_user_cannot_open_is_named_with_what_to_do(
    shared_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Unreadable to them (0600), or missing in a folder they may not write: a traceback, not what to do.
    import os

    target, lock, latest = _group_shared_import(shared_home, group=4343)
    before = target.read_bytes()
    lock.chmod(0o600)
    code, err = _import_as(4242, 4343, ["carbon", "import", str(latest), "--zone", "GB"])
    assert code == 2, err
    assert f"cannot open the lock file {lock} (Permission denied): nothing was imported" in err
    assert f"chmod g+r {lock}" in err
    lock.unlink()
    target.parent.chmod(0o755)  # the group may no longer create files in it
    os.chown(target.parent, 0, 0)
    code, err = _import_as(4242, 4343, ["carbon", "import", str(latest), "--zone", "GB"])
    assert code == 2, err
    assert f"cannot open the lock file {lock} (Permission denied)" in err
    assert f"write access to {target.parent}" in err
    assert target.read_bytes() == before and not lock.exists()


def test_a_folder_the_user_cannot_write_is_named_with_what_to_do(shared_home: Path) -> None:
    # The lock file readable, the folder not theirs to write: the merge's temporary file raised a
    # PermissionError traceback, where the lock file's refusal says what to do.
    import os
    import shutil

    target, lock, latest = _group_shared_import(shared_home, group=4343)
    before = target.read_bytes()
    os.chown(target.parent, 0, 0)
    target.parent.chmod(0o755)
    code, err = _import_as(4242, 4343, ["carbon", "import", str(latest), "--zone", "GB"])
    assert code == 2, err
    assert f"cannot write {target} (Permission denied): nothing was imported" in err
    assert f"write access to {target.parent}" in err
    assert target.read_bytes() == before and sorted(p.name for p in target.parent.iterdir()) == [
        lock.name,
        target.name,
    ]
    shutil.rmtree(target.parent)  # and where it would make the carbon folder, in one it may not write
    code, err = _import_as(4242, 4343, ["carbon", "import", str(latest), "--zone", "GB"])
    assert code == 2, err
    # The folder it named was the carbon folder, which did not exist: the one refused is its parent.
    assert f"cannot create the carbon folder {target.parent} (Permission denied): nothing was imported" in err
    assert f"{target.parent.parent} is not writable to this user: create {target.parent} there" in err
    assert not target.parent.exists()


def _earlier_gb_import(home: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A GB import in ``home`` and the next file to merge into it."""
    header = "timestamp_utc,g_co2eq_per_kwh_lca\n"
    first = tmp_path / "gb-first.csv"
    first.write_text(header + "2026-11-20T00:00:00Z,100\n2026-11-20T01:00:00Z,110\n")
    assert main(["carbon", "import", str(first), "--zone", "GB"]) == 0
    latest = tmp_path / "gb-latest.csv"
    latest.write_text(header + "2026-11-20T02:00:00Z,120\n2026-11-20T03:00:00Z,130\n")
    return home / "GB_imported.csv", latest


@pytest.mark.parametrize(
    ("call", "refusal", "said", "advice"),
    [
        pytest.param("fsync", "ENOSPC", "nothing was imported: No space left on device", "", id="disk-full"),
        pytest.param("fchown", "EIO", "nothing was imported: Input/output error", "", id="io-error"),
        pytest.param("fsync", "EACCES", "(Permission denied): nothing was", "chmod g+ws", id="access"),
        pytest.param("fsync", "EROFS", "is on a read-only file system", "", id="read-only"),
    ],
)
def test_a_write_that_fails_says_why_and_gives_write_access_advice_only_where_access_refused_it(
    call: str,
    refusal: str,
    said: str,
    advice: str,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Every OSError of the write was told as a permissions problem: a full disk said "needs write access
    # ... chmod g+ws it", which fixes nothing.
    import errno
    import os

    target, latest = _earlier_gb_import(home, tmp_path)
    before = target.read_bytes()
    capsys.readouterr()
    code = getattr(errno, refusal)

    def refuse(*args: Any) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, call, refuse)
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {target}" in err and said in err
    assert ("chmod" in err) == bool(advice) and advice in err
    assert target.read_bytes() == before
    assert [p.name for p in home.iterdir() if p.name.endswith(".tmp")] == []


def test_a_carbon_folder_that_cannot_be_made_names_the_folder_refused(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The carbon folder did not exist yet: "needs write access to <carbon folder>" named a folder that was
    # not there to chmod, where the refusal was its nearest existing parent's.
    import errno
    import os

    def refuse(self: Path, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    nearest = next(p for p in home.parents if p.exists())
    assert main(["carbon", "import", str(RECORDED), "--zone", "GB"]) == 2
    err = capsys.readouterr().err
    assert f"cannot create the carbon folder {home} (Permission denied): nothing was imported" in err
    assert f"{nearest} is not writable to this user: create {home} there" in err
    assert not home.exists()


def test_the_lock_file_is_opened_for_writing_and_read_only_only_where_that_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Opened read-only, its exclusive flock failed with EBADF on NFS, where Linux emulates it as an fcntl
    # lock; a 0644 lock file of another user still opens read-only, as a local disk can lock it so.
    import errno
    import os

    target, latest = _earlier_gb_import(home, tmp_path)
    real_open = os.open
    opened: list[int] = []

    def lock_not_writable(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".lock"):
            opened.append(flags & os.O_ACCMODE)
            if flags & os.O_ACCMODE != os.O_RDONLY:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", lock_not_writable)
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 0, capsys.readouterr().err
    assert opened == [os.O_RDWR, os.O_RDONLY]
    assert target.read_text().count("\n") == 5  # the header and four hours


@pytest.mark.parametrize(
    ("refusal", "said"), [("EROFS", "is on a read-only file system"), ("EIO", "nothing was imported: ")]
)
def test_a_lock_file_that_cannot_be_opened_but_for_access_gets_no_chmod_advice(
    refusal: str,
    said: str,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The lock file opened for writing first: a read-only file system (or an I/O error) was told to
    # chmod g+r the lock file, which fixes nothing; only a refused access gets that advice.
    import errno
    import os

    target, latest = _earlier_gb_import(home, tmp_path)
    before = target.read_bytes()
    capsys.readouterr()
    real_open = os.open
    code = getattr(errno, refusal)

    def lock_refused(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".lock"):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", lock_refused)
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 2
    err = capsys.readouterr().err
    assert said in err and ".GB_imported.csv.lock" in err
    assert "chmod" not in err
    assert target.read_bytes() == before


@pytest.mark.parametrize("refusal", ["EBADF", "ENOLCK"])
def test_a_lock_file_that_cannot_be_locked_is_named_with_what_to_do(
    refusal: str,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # flock's OSError was raised outside the try: a traceback, not the lock file and what to do.
    import errno
    import fcntl
    import os

    target, latest = _earlier_gb_import(home, tmp_path)
    before = target.read_bytes()
    capsys.readouterr()
    code = getattr(errno, refusal)

    def refuse(*args: Any) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", refuse)
    assert main(["carbon", "import", str(latest), "--zone", "GB"]) == 2
    lock = home / ".GB_imported.csv.lock"
    err = capsys.readouterr().err
    assert f"cannot lock {lock} ({os.strerror(code)}): nothing was imported" in err
    assert f"this file system cannot lock a read-only file: make {lock} group-writable" in err
    assert target.read_bytes() == before


def test_a_carbon_folder_under_one_the_user_cannot_search_names_that_one(shared_home: Path) -> None:
    # airflow/ readable but not searchable (0744): making airflow/costaware/carbon is refused there, and the
    # refusal named the nearest folder it could see as "not writable" (or raised, looking for it).
    import shutil

    target, _, latest = _group_shared_import(shared_home, group=4343)
    shutil.rmtree(target.parent)
    airflow = shared_home / "airflow"
    (airflow / "costaware").chmod(0o777)
    airflow.chmod(0o744)
    try:
        code, err = _import_as(4242, 4343, ["carbon", "import", str(latest), "--zone", "GB"])
    finally:
        airflow.chmod(0o755)
    assert code == 2, err
    assert f"cannot create the carbon folder {target.parent} (Permission denied): nothing was imported" in err
    assert f"{airflow} cannot be searched by this user (it lacks x permission for them)" in err
    assert "is not writable" not in err
    assert not target.parent.exists()


@pytest.mark.parametrize(
    ("owner", "group", "mode", "grant"),
    [(4242, 0, 0o677, "u+x"), (0, 4343, 0o767, "g+x"), (0, 0, 0o776, "o+x")],
    ids=["the-user-owns-it", "the-user-is-in-its-group", "neither"],
)
def test_a_folder_the_user_cannot_search_is_told_the_permission_bit_that_applies_to_them(
    shared_home: Path, owner: int, group: int, mode: int, grant: str
) -> None:
    # "chmod g+x (for their group) or o+x" was told to the folder's owner too, whose x is the owner's (u+x):
    # neither would let them in. Only one class of bits applies to a user: the owner's, else the group's.
    import os
    import shutil

    target, _, latest = _group_shared_import(shared_home, group=4343)
    shutil.rmtree(target.parent)
    airflow = shared_home / "airflow"
    (airflow / "costaware").chmod(0o777)
    os.chown(airflow, owner, group)
    airflow.chmod(mode)
    try:
        code, err = _import_as(4242, 4343, ["carbon", "import", str(latest), "--zone", "GB"])
    finally:
        airflow.chmod(0o755)
    assert code == 2, err
    assert f"{airflow} cannot be searched by this user (it lacks x permission for them)" in err
    assert f"chmod {grant} {airflow}" in err
    assert [g for g in ("u+x", "g+x", "o+x") if g in err] == [grant]
    assert not target.parent.exists()


def _quarter_hours(start: datetime, end: datetime, value: Any) -> str:
    """Records every 15 minutes from ``start`` to ``end`` (included), each ``value(at)``."""
    rows, at = ["timestamp_utc,g_co2eq_per_kwh_lca"], start
    while at <= end:
        rows.append(f"{at:%Y-%m-%dT%H:%M:%SZ},{value(at)}")
        at += timedelta(minutes=15)
    return "\n".join(rows) + "\n"


def test_show_counts_the_hour_an_import_of_a_zone_without_a_typical_year_starts_inside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # PL's import starts 22:30: `carbon show` left 22:00 out (no value, in the note) where GB's counts the
    # recorded half hour; the part before the file is its profile, as the part after its end is.
    from costaware.core.spot_forecast import hourly_series

    rows, at = ["timestamp_utc,g_co2eq_per_kwh_lca"], datetime(2026, 11, 20, 22, 30, tzinfo=timezone.utc)
    while at <= datetime(2026, 11, 21, 23, 30, tzinfo=timezone.utc):
        rows.append(f"{at:%Y-%m-%dT%H:%M:%SZ},{100 + 3 * at.hour + at.minute // 30 + 10 * (at.day - 20)}")
        at += timedelta(minutes=30)
    halves = tmp_path / "pl-halves.csv"
    halves.write_text("\n".join(rows) + "\n")
    assert main(["carbon", "import", str(halves), "--zone", "PL"]) == 0
    capsys.readouterr()
    start = datetime(2026, 11, 20, 22, tzinfo=timezone.utc)
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        argv = ["carbon", "show", "--zone", "PL", "--start", start.isoformat(), "--hours", "2"]
        assert main([*argv, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    imported = RecordedCarbon(bundled=False).zone_files("PL")[0]
    profile = Decimal(repr(hourly_series(imported, start, 1)[0]))
    assert profile != 167  # the recorded half hour, which the hour is not whole
    assert [h["g_co2e_per_kwh"] for h in shown["hours"]] == [_plain((profile + 167) / 2), "169.5"]
    assert shown["series"].startswith("PL_imported.csv for 1.5 of 2 hour(s), recorded")
    assert "note" not in shown
    # And as the waits deciding at 22:00 read it (the import ahead of them, its profile before it).
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective

    weighed = carbon_intensity("PL", region=None, objective=Objective("carbon"), at=start)
    assert weighed is not None
    waits = hourly_series(weighed, start, 2)
    assert [h["g_co2e_per_kwh"] for h in shown["hours"]] == [_plain(Decimal(repr(v))) for v in waits]


def test_show_reads_two_recorded_stretches_in_one_hour_with_the_typical_year_between(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One file ends 22:15, the next starts 22:30: 22:00 is both stretches, the typical year between them.
    files = tmp_path / "files"
    files.mkdir()
    (files / "GB_a.csv").write_text(
        _quarter_hours(
            datetime(2026, 11, 21, 21, tzinfo=timezone.utc),
            datetime(2026, 11, 21, 22, tzinfo=timezone.utc),
            lambda at: 100,
        )
    )
    (files / "GB_b.csv").write_text(
        _quarter_hours(
            datetime(2026, 11, 21, 22, 30, tzinfo=timezone.utc),
            datetime(2026, 11, 21, 22, 45, tzinfo=timezone.utc),
            lambda at: 200 + at.minute,
        )
    )
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    parts = RecordedCarbon(files).recorded_parts("GB", start, start + timedelta(hours=1))
    assert [(p.start, reached) for p, reached in parts] == [
        (start, start + timedelta(minutes=15)),
        (start + timedelta(minutes=30), start + timedelta(hours=1)),
    ]
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        argv = ["carbon", "show", "--zone", "GB", "--source", str(files), "--start", start.isoformat()]
        assert main([*argv, "--hours", "2", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    typical = RecordedCarbon([], bundled=True).intensity(
        "GB", datetime(2023, 11, 21, 22, tzinfo=timezone.utc), datetime(2023, 11, 21, 23, tzinfo=timezone.utc)
    )
    assert shown["hours"][0]["g_co2e_per_kwh"] == _plain((100 + typical.points[0][1] + 230 + 245) / 4)
    assert shown["series"].startswith(
        "recorded (GB_a.csv, GB_b.csv) for 0.75 of 2 hour(s), else typical year"
    )


def test_show_reads_two_recorded_stretches_in_one_hour_of_a_zone_without_a_typical_year(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As for GB, with the first file's profile between the stretches (what follows its end); the second
    # stretch was left out, the hour read as the first file then its profile.
    from costaware.adapters.carbon_source import then_profile

    files = tmp_path / "files"
    files.mkdir()
    first = datetime(2026, 11, 20, tzinfo=timezone.utc)
    (files / "PL_a.csv").write_text(
        _quarter_hours(
            first,
            datetime(2026, 11, 21, 22, tzinfo=timezone.utc),
            lambda at: 100 + at.minute,
        )
    )
    (files / "PL_b.csv").write_text(
        _quarter_hours(
            datetime(2026, 11, 21, 22, 30, tzinfo=timezone.utc),
            datetime(2026, 11, 21, 22, 45, tzinfo=timezone.utc),
            lambda at: 200 + at.minute,
        )
    )
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        argv = ["carbon", "show", "--zone", "PL", "--source", str(files), "--start", start.isoformat()]
        assert main([*argv, "--hours", "1", "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    a = RecordedCarbon(files / "PL_a.csv", bundled=False).zone_files("PL")[0]
    between = then_profile(a, until=start + timedelta(minutes=30)).mean_usd_per_hour(
        start + timedelta(minutes=15), start + timedelta(minutes=30)
    )
    assert shown["hours"][0]["g_co2e_per_kwh"] == _plain((100 + between + 230 + 245) / 4)
    assert shown["series"].startswith("PL_a.csv, PL_b.csv for 0.75 of 1 hour(s), recorded")


def test_the_waits_read_an_import_that_starts_after_the_decision_hour_as_carbon_show_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A GB forecast imported for three hours from 01:00, decided on at 22:00: the waits read the typical
    # year for every hour until 01:00 came, where `carbon show` gave the imported hours.
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    ahead = tmp_path / "gb-ahead.csv"
    ahead.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n"
        "2026-11-22T01:00:00Z,10\n2026-11-22T02:00:00Z,11\n2026-11-22T03:00:00Z,12\n"
    )
    assert main(["carbon", "import", str(ahead), "--zone", "GB"]) == 0
    capsys.readouterr()
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    weighed = carbon_intensity("GB", region=None, objective=Objective("carbon"), at=start)
    assert weighed is not None
    waits = hourly_series(weighed, start, 8)
    assert waits[3:6] == [10, 11, 12]
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        argv = ["carbon", "show", "--zone", "GB", "--start", start.isoformat(), "--hours", "8"]
        assert main([*argv, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [h["g_co2e_per_kwh"] for h in shown["hours"]] == [_plain(Decimal(repr(v))) for v in waits]


def test_the_waits_read_an_import_of_a_zone_without_a_typical_year_from_its_start_after_the_decision_hour(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # PL's import starts 00:30, decided on at 22:00: the waits fitted its profile over every hour, the
    # recorded ones too; now its profile before it, its records, then its profile after it.
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    first = datetime(2026, 11, 22, 0, 30, tzinfo=timezone.utc)
    rows, at = ["timestamp_utc,g_co2eq_per_kwh_lca"], first
    while at <= datetime(2026, 11, 23, 23, 30, tzinfo=timezone.utc):
        rows.append(f"{at:%Y-%m-%dT%H:%M:%SZ},{100 + 3 * at.hour + at.minute // 30 + 10 * (at.day - 22)}")
        at += timedelta(minutes=30)
    halves = tmp_path / "pl-halves.csv"
    halves.write_text("\n".join(rows) + "\n")
    assert main(["carbon", "import", str(halves), "--zone", "PL"]) == 0
    capsys.readouterr()
    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    imported = RecordedCarbon(bundled=False).zone_files("PL")[0]
    profile = [Decimal(repr(v)) for v in hourly_series(imported, start, 4)]
    weighed = carbon_intensity("PL", region=None, objective=Objective("carbon"), at=start)
    assert weighed is not None
    waits = [Decimal(repr(v)) for v in hourly_series(weighed, start, 4)]
    assert waits == [profile[0], profile[1], (profile[2] + 101) / 2, Decimal("103.5")]
    assert waits[3] != profile[3]


@pytest.mark.parametrize("first_hour", [-1, 3], ids=["covering-the-decision-hour", "starting-after-it"])
def test_a_decision_reading_past_two_weeks_keeps_the_import_then_the_typical_year(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first_hour: int
) -> None:
    # The weighed series stopped two weeks after the decision's hour: read for 15 days, every hour got the
    # profile of those two weeks, the imported ones too, where the typical year follows the import.
    from costaware.adapters.carbon_data import bundled_carbon
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    first = start + timedelta(hours=first_hour)
    imported = tmp_path / "gb.csv"
    imported.write_text(
        "timestamp_utc,g_co2eq_per_kwh_lca\n"
        + "".join(f"{first + timedelta(hours=i):%Y-%m-%dT%H:%M:%SZ},{10 + i}\n" for i in range(4))
    )
    assert main(["carbon", "import", str(imported), "--zone", "GB"]) == 0
    capsys.readouterr()
    weighed = carbon_intensity("GB", region=None, objective=Objective("carbon"), at=start)
    assert weighed is not None
    hours = 15 * 24
    expected = hourly_series(bundled_carbon("GB"), start, hours)
    for i in range(4):
        if first_hour + i >= 0:
            expected[first_hour + i] = 10 + i
    waits = hourly_series(weighed, start, hours)
    assert waits == expected
    assert waits[:48] == hourly_series(weighed, start, 48)


@pytest.mark.parametrize("first_hour", [-1, 3], ids=["covering-the-decision-hour", "starting-after-it"])
def test_a_decision_reading_past_two_weeks_keeps_the_import_of_a_zone_without_a_typical_year(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first_hour: int
) -> None:
    # As for a zone with a typical year: read for 15 days, the imported hours were the profile fitted over
    # the two weeks read, and so were the hours before and after them that a shorter read gave.
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    first = start + timedelta(hours=first_hour)
    rows = [f"{first + timedelta(hours=i):%Y-%m-%dT%H:%M:%SZ},{100 + 7 * (i % 5)}\n" for i in range(30)]
    imported = tmp_path / "pl.csv"
    imported.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "".join(rows))
    assert main(["carbon", "import", str(imported), "--zone", "PL"]) == 0
    capsys.readouterr()
    weighed = carbon_intensity("PL", region=None, objective=Objective("carbon"), at=start)
    assert weighed is not None
    waits = hourly_series(weighed, start, 15 * 24)
    recorded = range(max(0, first_hour), first_hour + 30)
    assert [waits[i] for i in recorded] == [100 + 7 * ((i - first_hour) % 5) for i in recorded]
    assert waits[:48] == hourly_series(weighed, start, 48)


@pytest.mark.parametrize("zone", ["GB", "PL"])
@pytest.mark.parametrize("first_hour", [-1, 3, 15 * 24 + 3], ids=["covering", "starting-after", "on-day-15"])
@pytest.mark.parametrize("days", [1, 16, 40])
def test_a_decision_saying_where_its_hours_end_reads_them_as_a_years_fill_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, zone: str, first_hour: int, days: int
) -> None:
    # The import was followed a year whatever the decision read (8,800 points for a 24-hour window): each
    # of the scheduler's timetable decisions and each poke paid 0.06-0.18 s for it.
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    start = datetime(2026, 11, 21, 22, tzinfo=timezone.utc)
    first = start + timedelta(hours=first_hour)
    rows = [f"{first + timedelta(hours=i):%Y-%m-%dT%H:%M:%SZ},{100 + 7 * (i % 5)}\n" for i in range(30)]
    imported = tmp_path / f"{zone}.csv"
    imported.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "".join(rows))
    assert main(["carbon", "import", str(imported), "--zone", zone]) == 0
    capsys.readouterr()
    until = start + timedelta(days=days)
    year = carbon_intensity(zone, region=None, objective=Objective("carbon"), at=start)
    read = carbon_intensity(zone, region=None, objective=Objective("carbon"), at=start, until=until)
    assert year is not None and read is not None
    assert hourly_series(read, start, days * 24) == hourly_series(year, start, days * 24)
    if first_hour < 24:  # followed as far as the decision reads, two weeks at least, not a year
        assert len(read.points) < len(year.points)
        assert read.last < max(until, start + timedelta(days=14))


def test_a_decision_reading_a_day_reads_a_zones_import_a_month_ahead_as_a_years_fill_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Followed a year, an import of a zone with no typical year starting 14-366 days ahead is read as the
    # lead before it: its profile in clock hours, so a decision at 03:30 reads 96.5 (half of 03:00's 97, half
    # of 04:00's 96). Reading a day, none of its hours, it read the newest import's profile at each hour's
    # start (97.0); one rule now, the clock hours (test_..._as_the_clock_hours_it_spans).
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    at = datetime(2026, 11, 21, 3, 30, tzinfo=timezone.utc)
    first = datetime(2026, 12, 21, tzinfo=timezone.utc)
    rows = [f"{first + timedelta(hours=i):%Y-%m-%dT%H:%M:%SZ},{100 - i % 24}\n" for i in range(48)]
    imported = tmp_path / "pl.csv"
    imported.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "".join(rows))
    assert main(["carbon", "import", str(imported), "--zone", "PL"]) == 0
    capsys.readouterr()
    read = carbon_intensity(
        "PL", region=None, objective=Objective("carbon"), at=at, until=at + timedelta(days=1)
    )
    assert read is not None
    waits = hourly_series(read, at, 24)
    assert waits[:2] == [96.5, 95.5]
    # Passing no end, a year is read: the lead as 7a169814 left it; reaching the file, its hours.
    year = carbon_intensity("PL", region=None, objective=Objective("carbon"), at=at)
    assert year is not None
    assert hourly_series(year, at, 24) == waits
    month = carbon_intensity(
        "PL", region=None, objective=Objective("carbon"), at=at, until=first + timedelta(days=1)
    )
    assert month is not None
    assert hourly_series(month, first, 3) == [100.0, 99.0, 98.0]


@pytest.mark.parametrize("first_day", [-2, 30], ids=["a-file-before", "a-file-ahead"])
@pytest.mark.parametrize("read_days", [None, 1], ids=["reading-a-year", "reading-a-day"])
def test_a_zone_without_a_typical_year_reads_an_hour_no_file_covers_as_the_clock_hours_it_spans(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, first_day: int, read_days: int | None
) -> None:
    # Decided on at 03:30 with no PL file covering it, the waits read the file's profile two ways: in clock
    # hours (03:30-04:30 half of 03:00's value, half of 04:00's) where a file starts within the hours read,
    # else the profile at each hour's start (03:00's value for all of it).
    from costaware.adapters.spot_market import carbon_intensity
    from costaware.core.carbon import Objective
    from costaware.core.spot_forecast import hourly_series

    at = datetime(2026, 11, 21, 3, 30, tzinfo=timezone.utc)
    first = datetime(2026, 11, 21, tzinfo=timezone.utc) + timedelta(days=first_day)
    rows = [f"{first + timedelta(hours=i):%Y-%m-%dT%H:%M:%SZ},{100 - i % 24}\n" for i in range(30)]
    imported = tmp_path / "pl.csv"
    imported.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "".join(rows))
    assert main(["carbon", "import", str(imported), "--zone", "PL"]) == 0
    capsys.readouterr()
    until = None if read_days is None else at + timedelta(days=read_days)
    read = carbon_intensity("PL", region=None, objective=Objective("carbon"), at=at, until=until)
    assert read is not None
    file = RecordedCarbon(bundled=False).zone_files("PL")[0]
    clock = [Decimal(repr(v)) for v in hourly_series(file, at.replace(minute=0), 4)]
    assert clock[0] != clock[1]  # else the hour's start and the clock hours' mean would agree
    waits = hourly_series(read, at, 3)
    assert waits == [pytest.approx(float((clock[i] + clock[i + 1]) / 2), rel=1e-12) for i in range(3)]


def test_show_of_a_zone_whose_only_file_is_one_record_nothing_places_points_to_no_start(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `carbon import` refuses one record nothing places and says to copy it into the carbon folder beside
    # the file it runs up to; copied there alone, `carbon show` said why it is not read, then "or pass
    # --start within the recorded hours", though PL has none.
    home.mkdir(parents=True)
    (home / "PL_one.csv").write_text("timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T22:30:00Z,150\n")
    argv = ["carbon", "show", "--zone", "PL", "--start", "2026-11-20T22:00Z", "--hours", "2"]
    with time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no PL file is read" in err and "PL_one.csv holds one record (2026-11-20 22:30 UTC)" in err
    assert "--start" not in err


def test_why_a_lone_one_record_file_is_left_out_is_said_once(
    home: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Said twice: in the warning that it is left out, then again in full inside the error that followed it.
    home.mkdir(parents=True)
    (home / "PL_lone.csv").write_text("timestamp_utc,g_co2eq_per_kwh_lca\n2026-11-20T22:30:00Z,150\n")
    argv = ["carbon", "show", "--zone", "PL", "--start", "2026-11-20T22:00Z", "--hours", "2"]
    warned = caplog.at_level("WARNING", logger="costaware.adapters.carbon_source")
    with warned, time_machine.travel("2026-11-30T00:00:00Z", tick=False):
        assert main(argv) == 2
    error = capsys.readouterr().err
    why = "one record cannot tell an hour from half an hour"
    assert caplog.text.count(why) == 1 and why not in error, error
    assert "PL_lone.csv holds one record (2026-11-20 22:30 UTC) and no other PL file ends" in caplog.text
    assert error.rstrip().endswith(
        "no PL file is read; import a file that covers it. PL_lone.csv holds one record (2026-11-20 22:30 "
        "UTC) and is not read: where it ends is unknown; add the record after it to the file"
    ), error


def test_a_source_not_covering_a_zone_without_a_typical_year_says_how_its_hour_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A half-hourly PL file from 22:30: show gives 22:00 as its recorded half and the file's profile, but the
    # note said the hour was 'the bundled 2023 data', which PL has none of.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    halves = tmp_path / "PL_halves.csv"
    first = datetime(2026, 11, 20, 22, 30, tzinfo=timezone.utc)
    rows = [f"{first + timedelta(minutes=30 * i):%Y-%m-%dT%H:%M:%SZ},{150 + i}" for i in range(6)]
    halves.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "\n".join(rows) + "\n")
    argv = ["carbon", "show", "--zone", "PL", "--source", str(halves), "--start", "2026-11-20T22:00:00Z"]
    assert main([*argv, "--hours", "1"]) == 0
    err = capsys.readouterr().err
    assert "does not cover PL over 1 of these 1 hour(s) (PL_halves.csv): they are their recorded part" in err
    assert "bundled 2023" not in err
