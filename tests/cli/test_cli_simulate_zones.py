"""`costaware simulate --zones`: one price file for all zones, traces by position, --availability-start."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from costaware.cli import main

T0 = datetime(2021, 3, 1, tzinfo=timezone.utc)
PRICES = {"us-east-1a": "0.80", "us-east-1b": "0.95"}
HEADER = (
    "name,instance_type,region,submit_time,runtime_hours,deadline_hours,checkpoint_minutes,"
    "restart_overhead_minutes"
)


def price_file(folder: Path, fmt: str, zones: dict[str, str] = PRICES, name: str = "prices") -> Path:
    """Two weeks of hourly spot prices of p3.2xlarge, every zone of ``zones`` in the one file."""
    stamps = [(T0 + timedelta(hours=h)).isoformat() for h in range(24 * 14)]
    if fmt == "json":
        records = [
            {
                "AvailabilityZone": zone,
                "InstanceType": "p3.2xlarge",
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": price,
                "Timestamp": stamp,
            }
            for zone, price in zones.items()
            for stamp in stamps
        ]
        path = folder / f"{name}.json"
        path.write_text(json.dumps({"SpotPriceHistory": records}))
        return path
    rows = ["timestamp,region,availability_zone,instance_type,product_description,usd_per_hour"]
    rows += [
        f"{stamp},us-east-1,{zone},p3.2xlarge,Linux/UNIX,{price}"
        for zone, price in zones.items()
        for stamp in stamps
    ]
    path = folder / f"{name}.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def trace(folder: Path, name: str, data: list[int]) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Zone a (cheaper) has no capacity for the first day of its trace and capacity after; zone b always."""
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(f"{HEADER}\nnightly,p3.2xlarge,us-east-1,2021-03-09T00:00:00Z,3,6,30,10\n")
    return {
        "jobs": jobs,
        "a": trace(tmp_path, "a", [0] * 144 + [1] * 1000),
        "b": trace(tmp_path, "b", [1] * 1200),
    }


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, dict[str, float]]:
    assert main(["simulate", "--format", "json", "--policy", "deadline_aware", *argv]) == 0
    policies: dict[str, dict[str, float]] = json.loads(capsys.readouterr().out)["policies"]
    return policies


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_one_price_file_feeds_every_zone_and_traces_pair_by_position(
    tmp_path: Path, files: dict[str, Path], fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--prices", str(price_file(tmp_path, fmt)), "--jobs", str(files["jobs"])]
    named = run(capsys, *base, "--zones", f"us-east-1a={files['a']},us-east-1b={files['b']}")
    by_position = run(
        capsys,
        *base,
        "--zones",
        "us-east-1a,us-east-1b",
        "--availability",
        str(files["a"]),
        "--availability",
        str(files["b"]),
    )
    assert by_position == named
    # Without --availability-start the traces start at the submit time: zone a has no capacity in the job's
    # window, so the job runs on spot in zone b, at its price.
    assert named["deadline_aware"]["deadline_misses"] == 0 and named["deadline_aware"]["spot_share"] == 1.0
    assert named["deadline_aware"]["usd"] == pytest.approx(
        19 / 6 * 0.95, abs=0.005
    )  # 3 h and a 10-minute restart


def test_zones_come_from_their_own_price_files(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    one = price_file(tmp_path, "csv")
    a = price_file(tmp_path, "csv", {"us-east-1a": "0.80"}, name="a_prices")
    b = price_file(tmp_path, "json", {"us-east-1b": "0.95"}, name="b_prices")
    zones = ["--zones", f"us-east-1a={files['a']},us-east-1b={files['b']}"]
    start = ["--availability-start", "2021-03-08T00:00:00Z"]
    together = run(capsys, "--prices", str(one), "--jobs", str(files["jobs"]), *zones, *start)
    apart = run(capsys, "--prices", str(a), "--prices", str(b), "--jobs", str(files["jobs"]), *zones, *start)
    assert apart == together


def test_availability_start_places_the_zone_traces_as_it_places_one_trace(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    prices = price_file(tmp_path, "csv")
    base = ["--prices", str(prices), "--jobs", str(files["jobs"])]
    start = ["--availability-start", "2021-03-08T00:00:00Z"]
    # The traces begin a day before the submit time: by then zone a has capacity, and the job runs there.
    zoned = run(capsys, *base, "--zones", f"us-east-1a={files['a']},us-east-1b={files['b']}", *start)
    assert zoned["deadline_aware"]["usd"] == pytest.approx(19 / 6 * 0.80, abs=0.005)
    # A date alone is its midnight UTC, as report --since reads one (it was refused for having no zone).
    dated = ["--availability-start", "2021-03-08"]
    assert run(capsys, *base, "--zones", f"us-east-1a={files['a']},us-east-1b={files['b']}", *dated) == zoned
    # The same meaning as for one zone: a zone-a-only job replays like a job pinned to zone a with one trace.
    alone = run(capsys, *base, "--zones", f"us-east-1a={files['a']}", *start)
    pinned = tmp_path / "pinned.csv"
    pinned.write_text(
        f"{HEADER},availability_zone\nnightly,p3.2xlarge,us-east-1,2021-03-09T00:00:00Z,3,6,30,10,us-east-1a\n"
    )
    one_trace = run(
        capsys, "--prices", str(prices), "--jobs", str(pinned), "--availability", str(files["a"]), *start
    )
    assert alone == one_trace
    late = run(
        capsys, *base, "--zones", f"us-east-1a={files['a']}"
    )  # trace from the submit time: no capacity
    assert late["deadline_aware"]["usd"] > alone["deadline_aware"]["usd"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--zones", "us-east-1a=A,us-east-1c=B"],
            "zone 'us-east-1c' has no p3.2xlarge spot prices in prices.csv (zones of us-east-1 there: "
            "us-east-1a, us-east-1b); add a --prices file with that zone's records",
        ),
        (
            ["--zones", "us-east-1a=A,us-east-1b=B", "--availability-start", "yesterday"],
            "--availability-start 'yesterday' is not an ISO time; write e.g. 2022-10-26T00:00:00Z",
        ),
        (
            ["--zones", "us-east-1a=A", "--availability-start", "2021-03-08T00:00:00"],
            "--availability-start '2021-03-08T00:00:00' has no time zone; add one, e.g. 2021-03-08T00:00:00Z",
        ),
        (
            [
                "--zones",
                "us-east-1a,us-east-1b",
                "--availability",
                "A",
                "--availability",
                "B",
                "--availability",
                "B",
            ],
            "--zones names 2 zones (us-east-1a, us-east-1b) but 3 --availability traces were given; give one "
            "trace per zone",
        ),
        (
            ["--zones", "us-east-1a,", "--availability", "A"],
            "--zones 'us-east-1a,' has an empty zone name; write e.g. us-west-2a,us-west-2b",
        ),
        (
            ["--zones", "us-east-1a,us-east-1b", "--availability", "A"],
            "--zones names 2 zones (us-east-1a, us-east-1b) but 1 --availability traces were given",
        ),
        (
            ["--zones", "us-east-1a,us-east-1b", "--availability", "A", "--availability", "B", "--by-trace"],
            "--by-trace compares --availability traces, but with --zones naming zones only",
        ),
        (
            ["--availability-start", "2021-03-08T00:00:00Z"],
            "--availability-start needs --availability or --zones",
        ),
        (
            ["--zones", "us-east-1a=A", "--availability", "B"],
            "--availability with --zones ZONE=TRACE: every job runs in the zones, each with its trace",
        ),
        (["--zones", "us-east-1=A"], "availability zone 'us-east-1' is a region, not a zone: list its zones"),
        (["--zones", "US-EAST-1A=A"], "AWS zone names are lower case, write 'us-east-1a'"),
    ],
)
def test_bad_zone_inputs_name_the_value(
    tmp_path: Path,
    files: dict[str, Path],
    extra: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prices = price_file(tmp_path, "csv")
    argv = [v.replace("=A", f"={files['a']}").replace("=B", f"={files['b']}") for v in extra]
    argv = [str(files["a"]) if v == "A" else str(files["b"]) if v == "B" else v for v in argv]
    code = main(["simulate", "--prices", str(prices), "--jobs", str(files["jobs"]), *argv])
    out, err = capsys.readouterr()
    assert code == 2
    assert message in err
    assert out == ""  # nothing printed but the error


def test_a_job_past_each_zones_price_history_is_named_per_zone(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["jobs"].write_text(files["jobs"].read_text().replace("2021-03-09", "2021-06-09"))
    zones = ["--zones", f"us-east-1a={files['a']},us-east-1b={files['b']}"]
    prices = ["--prices", str(price_file(tmp_path, "csv"))]
    jobs = ["--jobs", str(files["jobs"])]
    assert main(["simulate", "--policy", "deadline_aware", *prices, *jobs, *zones]) == 0
    err = capsys.readouterr().err
    for zone in ("us-east-1a", "us-east-1b"):
        assert f"note: 1 job(s) of p3.2xlarge in {zone} (nightly first) have deadlines more than 30" in err


def test_a_jobs_file_with_zones_unquoted_is_refused_and_quoted_commas_list_zones(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    prices = price_file(tmp_path, "csv")
    zoned = [f"--availability-start={datetime(2021, 3, 8, tzinfo=timezone.utc).isoformat()}"]
    row = "nightly,p3.2xlarge,us-east-1,2021-03-09T00:00:00Z,3,6,30,10"
    unquoted = tmp_path / "unquoted.csv"
    unquoted.write_text(f"{HEADER},zones\n{row},us-east-1a,us-east-1b\n")
    code = main(["simulate", "--prices", str(prices), "--jobs", str(unquoted)])
    assert code == 2
    err = capsys.readouterr().err
    assert "line 2 has 1 more field(s) than the header ('us-east-1b'): quote a value" in err

    # Quoted, "a,b" lists the zones as "a|b" does (the operator's availability_zones takes "a,b" too).
    costs = {}
    for name, cell in (("bar", "us-east-1a|us-east-1b"), ("comma", '"us-east-1a, us-east-1b"')):
        jobs = tmp_path / f"{name}.csv"
        jobs.write_text(f"{HEADER},zones\n{row},{cell}\n")
        costs[name] = run(
            capsys,
            "--prices", str(prices), "--jobs", str(jobs),
            "--zones", f"us-east-1a={files['a']},us-east-1b={files['b']}",
            *zoned,
        )  # fmt: skip
    assert costs["bar"] == costs["comma"]


def test_a_job_pinned_to_one_zone_reads_availability_beside_zones(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # Only when every job runs in the --zones is --availability beside ZONE=TRACE left unread (refused then).
    prices = price_file(tmp_path, "csv")
    jobs = tmp_path / "mixed.csv"
    row = "2021-03-09T00:00:00Z,3,6,30,10"
    jobs.write_text(
        f"{HEADER},availability_zone\n"
        f"pinned,p3.2xlarge,us-east-1,{row},us-east-1a\n"
        f"zoned,p3.2xlarge,us-east-1,{row},\n"
    )
    argv = ["--prices", str(prices), "--jobs", str(jobs), "--zones", f"us-east-1b={files['b']}"]
    assert run(capsys, *argv, "--availability", str(files["a"]))  # the pinned job reads trace a


ROOT = Path(__file__).resolve().parents[2]
SHARED = next(
    (p / "shared" for p in (ROOT.parent, ROOT.parent.parent) if (p / "shared" / "data").exists()),
    ROOT.parent / "shared",
)


@pytest.mark.skipif(
    not (SHARED / "data" / "spot_availability").exists(), reason="shared data not beside the repo"
)
def test_the_zones_example_of_the_docs_runs_as_written(tmp_path: Path) -> None:
    # docs/spot-windows.md's `--zones us-west-2a=a.json,...` failed on the shared data: its prices are
    # us-east-1's, its traces us-west-2's ("zone 'us-west-2a' has no p3.16xlarge spot prices").
    import re
    import shlex
    import subprocess
    import sys

    page = (ROOT / "docs" / "spot-windows.md").read_text()
    blocks = re.findall(r"```(\w*)\n(.*?)```", page, flags=re.S)
    (command,) = [text for lang, text in blocks if lang == "bash" and "--zones" in text]
    (jobs,) = [text for lang, text in blocks if lang == "csv" and text.startswith("name,instance_type")]
    repo = tmp_path / "repo"  # the repository root, with the shared data beside it as the page says
    repo.mkdir()
    (tmp_path / "shared").symlink_to(SHARED)
    (repo / "jobs.csv").write_text(jobs)
    script = command.replace(".venv/bin/costaware", f"{shlex.quote(sys.executable)} -m costaware.cli")
    done = subprocess.run(
        ["bash", "-euc", script], cwd=repo, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.strip()}
    assert {"oracle", "deadline_aware", "on_demand_now"} <= set(rows)
    assert rows["oracle"][2] == "1.000"
