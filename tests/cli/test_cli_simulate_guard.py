"""``costaware simulate --restart-guard``: the guard replays when asked and reports how often it fired."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from costaware.cli import main

T0 = datetime(2021, 3, 1, tzinfo=timezone.utc)


def _files(tmp_path: Path) -> list[str]:
    prices = tmp_path / "prices.csv"
    rows = ["timestamp,region,availability_zone,instance_type,product_description,usd_per_hour"]
    rows += [
        f"{(T0 + timedelta(hours=h)).isoformat()},us-east-1,us-east-1a,p3.2xlarge,Linux/UNIX,0.90"
        for h in range(24 * 14)
    ]
    prices.write_text("\n".join(rows) + "\n")
    # Capacity for 20 minutes of every 30: each run ends before 10 min overhead + a 30-minute checkpoint.
    trace = tmp_path / "churn.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 1, 0] * 400}))
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "name,instance_type,region,submit_time,runtime_hours,deadline_hours,checkpoint_minutes,"
        "restart_overhead_minutes\n"
        "churn,p3.2xlarge,us-east-1,2021-03-09T00:00:00Z,2,10,30,10\n"
    )
    return ["simulate", "--prices", str(prices), "--availability", str(trace), "--jobs", str(jobs)]


def test_the_guard_is_off_by_default_and_the_flag_turns_it_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [*_files(tmp_path), "--policy", "spot_now", "--policy", "oracle", "--format", "json"]
    assert main([*base, "--restart-guard"]) == 0
    guarded = json.loads(capsys.readouterr().out)["policies"]
    assert main(base) == 0
    unguarded = json.loads(capsys.readouterr().out)["policies"]
    assert guarded["spot_now"]["restart_guard_fired"] == 1 and guarded["spot_now"]["preemptions"] == 2
    assert unguarded["spot_now"]["restart_guard_fired"] == 0 and unguarded["spot_now"]["preemptions"] > 2
    assert guarded["spot_now"]["usd"] < unguarded["spot_now"]["usd"]
    assert guarded["oracle"] == unguarded["oracle"]  # the oracle plans with hindsight: never guarded


def test_jobs_past_the_price_history_are_named_and_jobs_within_it_are_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*_files(tmp_path), "--policy", "spot_now"]
    assert main(argv) == 0
    assert "past the last spot price change" not in capsys.readouterr().err
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(jobs.read_text().replace("2021-03-09", "2023-03-09"))
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert (
        "note: 1 job(s) of p3.2xlarge in us-east-1 (churn first) have deadlines more than 30 days past the "
        "last spot price change recorded (2021-03-01): the replay holds that price for them" in err
    )


def test_a_jobs_file_with_a_header_alone_is_said_with_availability_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # With --availability it was "ValueError: min() arg is an empty sequence", a traceback.
    argv = _files(tmp_path)
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(jobs.read_text().splitlines()[0] + "\n")
    assert main(argv) == 2
    assert "no jobs to simulate; the jobs file has no rows" in capsys.readouterr().err


def test_csv_gives_the_spot_share_as_a_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # "66.7%" was text to a spreadsheet: CSV now gives the fraction of 1 that JSON gives.
    import csv
    import io

    base = [*_files(tmp_path), "--policy", "spot_now", "--policy", "on_demand_now"]
    assert main([*base, "--format", "json"]) == 0
    shares = {name: p["spot_share"] for name, p in json.loads(capsys.readouterr().out)["policies"].items()}
    assert main([*base, "--format", "csv"]) == 0
    rows = {r["policy"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert {name: float(r["spot_share"]) for name, r in rows.items()} == shares
    assert 0 < shares["spot_now"] <= 1 and shares["on_demand_now"] == 0
    assert main(base) == 0
    assert "%" in capsys.readouterr().out  # people still read a percentage
