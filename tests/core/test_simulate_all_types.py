"""``costaware simulate`` knows every EC2 type of the complete us-east-1 snapshot (issue 12)."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costaware.adapters.price_files import bundled_catalog
from costaware.cli import main

DATA = Path(__file__).resolve().parents[2] / "src" / "costaware" / "data" / "aws_ondemand_prices.csv"
ROOT = Path(__file__).resolve().parents[2]
#: The project's shared data folder, beside the main checkout (or two levels up from a worktree).
SHARED = (
    next((p for p in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if p.exists()), ROOT / "shared")
    / "data"
    / "aws_ec2_us-east-1.csv"
)
T0 = datetime(2026, 7, 1, tzinfo=timezone.utc)


def east_rows() -> list[dict[str, str]]:
    with DATA.open(encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["region"] == "us-east-1"]


@pytest.mark.skipif(not SHARED.exists(), reason="shared data folder not beside the repo")
def test_bundled_us_east_1_is_the_shared_file() -> None:
    with SHARED.open(encoding="utf-8") as f:
        shared = {r["instance_type"]: r["usd_per_hour"] for r in csv.DictReader(f)}
    assert len(shared) == 1385
    assert {r["instance_type"]: r["usd_per_hour"] for r in east_rows()} == shared


def test_simulate_accepts_every_priced_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = east_rows()
    priced = sorted(r["instance_type"] for r in rows if r["usd_per_hour"])
    assert len(rows) == 1385 and len(priced) == 1367 and "m5n.2xlarge" in priced
    history = {
        "SpotPriceHistory": [
            {
                "AvailabilityZone": "us-east-1a",
                "InstanceType": name,
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": "0.010000",
                "Timestamp": (T0 + timedelta(hours=h)).isoformat(),
            }
            for name in priced
            for h in (0, 12)
        ]
    }
    prices = tmp_path / "spot.json"
    prices.write_text(json.dumps(history))
    jobs = [
        {
            "name": f"j{n}",
            "instance_type": name,
            "region": "us-east-1",
            "submit_time": (T0 + timedelta(hours=1)).isoformat(),
            "runtime_hours": 1,
            "deadline_hours": 4,
            "checkpoint_minutes": 30,
            "restart_overhead_minutes": 0,
        }
        for n, name in enumerate(priced)
    ]
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    argv = ["simulate", "--prices", str(prices), "--jobs", str(jobs_file), "--format", "json"]
    assert main([*argv, "--policy", "on_demand_now"]) == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    # One hour on-demand each, no restart overhead: the total is the sum of the snapshot's prices.
    catalog = bundled_catalog()
    expected = sum(catalog.on_demand_usd_per_hour(name, "us-east-1") for name in priced)
    # To the micro-dollar, as the ledger keeps money: it was rounded to cents (--format json is exact).
    assert report["policies"]["on_demand_now"]["usd"] == float(expected.quantize(Decimal("0.000001")))


def test_simulate_names_what_to_do_for_a_type_without_a_price(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = {
        "SpotPriceHistory": [
            {
                "AvailabilityZone": "us-east-1a",
                "InstanceType": "hpc7a.12xlarge",
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": "1.0",
                "Timestamp": T0.isoformat(),
            }
        ]
    }
    prices = tmp_path / "spot.json"
    prices.write_text(json.dumps(history))
    jobs = tmp_path / "jobs.json"
    jobs.write_text(
        json.dumps(
            [
                {
                    "name": "hpc",
                    "instance_type": "hpc7a.12xlarge",
                    "region": "us-east-1",
                    "submit_time": (T0 + timedelta(hours=1)).isoformat(),
                    "runtime_hours": 1,
                    "deadline_hours": 4,
                    "checkpoint_minutes": 30,
                    "restart_overhead_minutes": 5,
                }
            ]
        )
    )
    assert main(["simulate", "--prices", str(prices), "--jobs", str(jobs)]) == 2
    err = capsys.readouterr().err
    assert "lists hpc7a.12xlarge in us-east-1 without an on-demand price" in err
    assert "costaware prices import FILE" in err
