"""``costaware simulate --carbon --objective``: the flags, the JSON keys per policy, and their errors."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from costaware.cli import main

T0 = datetime(2023, 3, 1, tzinfo=timezone.utc)
KEYS = {"usd", "kg_co2e", "objective_value", "deadline_misses", "vs_oracle", "vs_on_demand"}


def _files(tmp_path: Path) -> dict[str, str]:
    electricity = tmp_path / "power.csv"
    electricity.write_text(
        "timestamp_utc,usd_per_mwh\n"
        + "".join(
            f"{(T0 + timedelta(hours=h)).strftime('%Y-%m-%dT%H:%M:%SZ')},{20 if h % 24 < 6 else 100}\n"
            for h in range(24 * 14)
        )
    )
    carbon = tmp_path / "carbon.csv"
    carbon.write_text(
        "timestamp_utc,g_co2eq_per_kwh_direct,g_co2eq_per_kwh_lca\n"
        + "".join(
            f"{(T0 + timedelta(hours=h)).strftime('%Y-%m-%dT%H:%M:%SZ')},1,{_grams(h)}\n"
            for h in range(24 * 14)
        )
    )
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "name,instance_type,region,submit_time,runtime_hours,deadline_hours,checkpoint_minutes,"
        "restart_overhead_minutes,power_kw\n"
        "own,on-prem,on-prem,2023-03-09T00:00:00Z,3,20,30,0,10\n"
        "cloud,p3.2xlarge,us-east-1,2023-03-10T00:00:00Z,3,20,30,0,\n"
    )
    return {"prices": str(electricity), "carbon": str(carbon), "jobs": str(jobs)}


def _grams(hour: int) -> int:
    """Clean by day (hours 10-15), dirty otherwise."""
    return 100 if 10 <= hour % 24 < 16 else 600


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, dict[str, object]]:
    assert main(["simulate", *argv, "--format", "json"]) == 0
    out: dict[str, dict[str, object]] = json.loads(capsys.readouterr().out)
    return out


def test_carbon_objective_without_prices_reports_kg_and_the_carbon_oracle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _files(tmp_path)
    out = _run(capsys, ["--jobs", f["jobs"], "--carbon", f["carbon"], "--objective", "carbon"])
    assert out["objective"] == {"name": "carbon", "unit": "kg CO2e", "carbon_usd_per_tonne": 0.0}
    policies = out["policies"]
    for row in policies.values():
        assert set(row) >= KEYS  # type: ignore[arg-type]
    oracle, now = policies["oracle"], policies["on_demand_now"]
    assert oracle["vs_oracle"] == 1.0 and oracle["deadline_misses"] == 0  # type: ignore[index]
    assert oracle["kg_co2e"] < now["kg_co2e"]  # type: ignore[index, operator]
    assert oracle["objective_value"] == oracle["kg_co2e"]  # type: ignore[index]
    assert oracle["usd"] is None  # type: ignore[index]  # the own-power job has no electricity price


def test_cost_plus_carbon_with_prices_and_the_default_objective(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _files(tmp_path)
    own = tmp_path / "own.csv"
    own.write_text("\n".join(Path(f["jobs"]).read_text().splitlines()[:2]) + "\n")
    base = ["--jobs", str(own), "--prices", f["prices"], "--carbon", f["carbon"]]
    mixed = _run(capsys, [*base, "--objective", "cost+carbon", "--carbon-usd-per-tonne", "1000"])
    cost = _run(capsys, base)
    plain = _run(capsys, ["--jobs", str(own), "--prices", f["prices"]])
    oracle = mixed["policies"]["oracle"]
    assert oracle["objective_value"] == pytest.approx(oracle["usd"] + oracle["kg_co2e"])  # type: ignore[index, operator]
    assert cost["objective"]["name"] == "cost"  # type: ignore[index]
    assert "objective_value" not in cost["policies"]["oracle"]  # type: ignore[operator]
    assert cost["policies"]["oracle"]["kg_co2e"] > oracle["kg_co2e"]  # type: ignore[index, operator]
    for name, row in plain["policies"].items():  # --carbon with the default objective only adds kg_co2e
        with_kg = dict(cost["policies"][name])  # type: ignore[call-overload]
        del with_kg["kg_co2e"]
        assert with_kg == row
    assert "objective" not in plain


def test_carbon_takes_a_bundled_zone_as_the_operators_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "--carbon GB" was "cannot read carbon intensity file 'GB'"; the jobs run in March 2023.
    f = _files(tmp_path)
    import costaware

    by_zone = _run(capsys, ["--jobs", f["jobs"], "--carbon", "GB", "--objective", "carbon"])
    bundled = Path(costaware.__file__).parent / "data" / "carbon_intensity" / "GB_2023.csv"
    by_file = _run(capsys, ["--jobs", f["jobs"], "--carbon", str(bundled), "--objective", "carbon"])
    assert by_zone == by_file and by_zone["policies"]["oracle"]["kg_co2e"] is not None
    # A zone typed in lower case was "cannot read carbon intensity file 'gb'"; with '_' or a letter changed
    # (DE_LU, AU-NSV, GV) it was told the bundled zones alone; a real zone (GR) still is.
    for typed, meant in (("gb", "GB"), ("DE_LU", "DE-LU"), ("AU-NSV", "AU-NSW"), ("GV", "GB"), ("GR", None)):
        assert main(["simulate", "--jobs", f["jobs"], "--carbon", typed, "--objective", "carbon"]) == 2
        said = f"--carbon {typed!r} is neither a file nor a bundled grid zone: " + (
            f"did you mean {meant!r}? " if meant else "bundled are"
        )
        assert said in capsys.readouterr().err, typed


def test_the_table_shows_kg_co2e(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _files(tmp_path)
    assert main(["simulate", "--jobs", f["jobs"], "--carbon", f["carbon"], "--objective", "carbon"]) == 0
    out = capsys.readouterr().out
    assert "kg_co2e" in out and "unknown" in out and "the carbon objective (kg CO2e)" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--objective", "green", "--carbon", "C"],
            "objective 'green' is not one of cost, carbon, cost+carbon",
        ),
        (["--objective", "cost+carbon", "--carbon", "C", "--prices", "P"], "needs --carbon-usd-per-tonne"),
        (
            ["--objective", "cost+carbon", "--carbon", "C", "--prices", "P", "--carbon-usd-per-tonne", "-5"],
            "carbon_usd_per_tonne='-5' is not a price in USD per tonne CO2e from 0 to 1,000,000 (e.g. 100)",
        ),
        (["--objective", "carbon"], "--objective carbon needs --carbon (a bundled grid zone such as DE-LU"),
        (["--carbon", "C"], "--objective cost needs --prices"),
        (["--objective", "carbon", "--carbon", "SHORT"], "outside carbon short.csv"),
        # A command line is no template: these ran as --objective cost (docs/cli.md: never "not given").
        (
            ["--objective", "None", "--prices", "P"],
            "--objective 'None' is not one of cost, carbon, cost+carbon: write one of them, or leave "
            "--objective out for cost",
        ),
        (["--objective", " null", "--carbon", "C"], "--objective ' null' is not one of cost, carbon"),
        (
            [
                "--objective",
                "cost+carbon",
                "--carbon",
                "C",
                "--prices",
                "P",
                "--carbon-usd-per-tonne",
                " null",
            ],
            "--carbon-usd-per-tonne ' null' is not a price: give USD per tonne CO2e (e.g. 100), or leave it",
        ),
    ],
)
def test_bad_inputs_fail_naming_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    f = _files(tmp_path)
    short = tmp_path / "short.csv"
    short.write_text("\n".join(Path(f["carbon"]).read_text().splitlines()[: 24 * 5]) + "\n")
    paths = {"C": f["carbon"], "P": f["prices"], "SHORT": str(short)}
    argv = ["simulate", "--jobs", f["jobs"], *[paths.get(a, a) for a in extra]]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_missing_carbon_file_names_where_it_was_looked_for_and_what_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # "--carbon GB_2023.csv" typed outside the bundled data's folder said only "No such file or directory":
    # not which folder a relative path was read in, nor that the zone "GB" gives the same data.
    f = _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--jobs", f["jobs"], "--carbon", "GB_2023.csv", "--objective", "carbon"]) == 2
    err = capsys.readouterr().err
    assert f"'GB_2023.csv' (a relative path, read as {tmp_path / 'GB_2023.csv'})" in err
    advice = "check the name, or give the file's full path, or the bundled grid zone 'GB' for its 2023 data"
    assert advice in err
    missing = tmp_path / "data" / "PL_2024.csv"
    assert main(["simulate", "--jobs", f["jobs"], "--carbon", str(missing), "--objective", "carbon"]) == 2
    err = capsys.readouterr().err
    assert f"{str(missing)!r}: No such file or directory; check the path, or a bundled grid zone (" in err
    # The import takes a file only: no zone is offered in its place.
    assert main(["carbon", "import", "DE-LU_2025.csv", "--zone", "DE-LU"]) == 2
    err = capsys.readouterr().err
    assert f"(a relative path, read as {tmp_path / 'DE-LU_2025.csv'})" in err
    assert err.rstrip().endswith("check the name, or give the file's full path") and "bundled" not in err


@pytest.mark.parametrize(
    ("flag", "what"),
    [("--jobs", "jobs file"), ("--prices", "price file"), ("--availability", "availability trace")],
)
def test_a_missing_jobs_price_or_trace_file_names_where_it_was_looked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, flag: str, what: str
) -> None:
    # "cannot read price file 'p3.json': No such file or directory" named neither the folder nor a way out.
    f = _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    given = {"--jobs": f["jobs"], "--prices": f["prices"]}
    given[flag] = "typo.json"
    args = ["simulate", "--objective", "carbon", "--carbon", f["carbon"]]
    assert main(args + [arg for pair in given.items() for arg in pair]) == 2
    assert (
        f"cannot read {what} 'typo.json' (a relative path, read as {tmp_path / 'typo.json'}): No such file "
        "or directory; check the name, or give the file's full path"
    ) in capsys.readouterr().err


@pytest.mark.parametrize("text", ["timestamp_utc,usd_per_mwh\n", "\ufefftimestamp_utc,usd_per_mwh\n\n"])
def test_an_electricity_file_with_a_header_and_no_rows_is_told_as_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    # It was "price series 'electricity power.csv (USD/MWh)' has no records; check the file and its
    # filters": a CSV has no filters, and the series named was the file.
    f = _files(tmp_path)
    Path(f["prices"]).write_text(text, encoding="utf-8")
    assert main(["simulate", "--jobs", f["jobs"], "--prices", f["prices"]]) == 2
    err = capsys.readouterr().err
    assert (
        "power.csv: the file has a header but no rows; an electricity price CSV has a row per hour under its "
        "header timestamp_utc,usd_per_mwh (e.g. 2023-01-01T00:00:00Z,42.5)" in err
    ), err
    assert "filters" not in err


@pytest.mark.parametrize("text", ["", "\n\n", "\ufeff"])
def test_an_empty_price_file_is_told_as_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    # It was "power.csv: spot CSV lacks column(s) timestamp, ...; its header is []".
    f = _files(tmp_path)
    Path(f["prices"]).write_text(text, encoding="utf-8")
    assert main(["simulate", "--jobs", f["jobs"], "--prices", f["prices"]]) == 2
    err = capsys.readouterr().err
    assert (
        "power.csv: the file is empty; a spot price file is DescribeSpotPriceHistory JSON "
        '({"SpotPriceHistory": [...]}) or a CSV with the header '
        "timestamp,availability_zone,instance_type,product_description,usd_per_hour" in err
    ), err
    assert "[]" not in err


@pytest.mark.parametrize(
    ("encoding", "said"),
    [
        # Excel's "Unicode Text", PowerShell 5's "aws ... > prices.json": a UnicodeDecodeError traceback.
        pytest.param(
            "utf-16",
            "{name} is UTF-16 text, as Excel's 'Unicode Text' or PowerShell 5's '>' saves: {kind} is ",
            id="utf-16",
        ),
        pytest.param(
            "cp1252",
            "{name} is not UTF-8 text (byte 0xe9 on line {line}; Latin-1 or Windows-1252, perhaps): ",
            id="windows-1252",
        ),
    ],
)
@pytest.mark.parametrize(
    ("flag", "kind", "line"),
    [("--jobs", "a jobs file", 3), ("--prices", "a price file", 2)],
    ids=["jobs", "prices"],
)
def test_a_jobs_or_price_file_that_is_not_utf8_is_told_what_it_is_and_how_to_save_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    encoding: str,
    said: str,
    flag: str,
    kind: str,
    line: int,
) -> None:
    f = _files(tmp_path)
    given = {"--jobs": f["jobs"], "--prices": f["prices"]}
    hurried = Path(given[flag])
    lines = hurried.read_text(encoding="utf-8").splitlines(keepends=True)
    # A non-ASCII letter where a hurried user types one: in a job's name, after a price.
    lines[line - 1] = lines[line - 1].replace("cloud", "cl\u00e9ud").replace("\n", " \u00e9\n")
    hurried.write_bytes("".join(lines).encode(encoding))
    assert main(["simulate", *[arg for pair in given.items() for arg in pair]]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert said.format(name=hurried.name, kind=kind, line=line) in err, err
    assert f"{kind} is read as UTF-8; save it as UTF-8 (Excel: 'CSV UTF-8')" in err, err


def test_a_json_jobs_file_with_a_byte_order_mark_is_read_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # PowerShell 5's "Out-File -Encoding utf8" writes a byte-order mark: the file was read as a CSV and
    # refused as "no jobs to simulate; the jobs file has no rows".
    f = _files(tmp_path)
    job = {
        "name": "own",
        "instance_type": "on-prem",
        "region": "on-prem",
        "submit_time": "2023-03-09T00:00:00Z",
        "runtime_hours": 3,
        "deadline_hours": 20,
        "checkpoint_minutes": 30,
        "restart_overhead_minutes": 0,
        "power_kw": 10,
    }
    plain, marked = tmp_path / "plain.json", tmp_path / "marked.json"
    plain.write_text(json.dumps([job]), encoding="utf-8")
    marked.write_text(json.dumps([job]), encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    args = ["--carbon", f["carbon"], "--objective", "carbon"]
    assert _run(capsys, ["--jobs", str(marked), *args]) == _run(capsys, ["--jobs", str(plain), *args])
