from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costaware.cli import main
from costaware.core.errors import ConfigurationError, PriceNotFoundError
from costaware.core.series import AvailabilityTrace, PriceSeries
from costaware.core.simulate import Job, MarketData, TickPlan, simulate

T0 = datetime(2021, 3, 1, tzinfo=timezone.utc)
ROOT = Path(__file__).resolve().parents[2]
SHARED = next(
    (p / "shared" / "data" for p in (ROOT.parent, ROOT.parent.parent) if (p / "shared" / "data").exists()),
    ROOT.parent / "shared" / "data",
)


def job(name: str = "j", **kwargs: object) -> Job:
    fields: dict[str, object] = {
        "name": name,
        "instance_type": "p3.2xlarge",
        "region": "us-east-1",
        "submit_time": T0 + timedelta(days=8),
        "runtime_hours": Decimal(2),
        "deadline_hours": Decimal(8),
        "checkpoint_minutes": Decimal(30),
        "restart_overhead_minutes": Decimal(10),
    }
    fields.update(kwargs)
    return Job(**fields)  # type: ignore[arg-type]


def spot_series(pattern: list[str]) -> PriceSeries:
    points = [(T0 + timedelta(hours=h), pattern[h % len(pattern)]) for h in range(24 * 14)]
    return PriceSeries.from_points(points, name="spot")


def data(series: PriceSeries, availability: AvailabilityTrace | None = None) -> MarketData:
    def lookup(instance_type: str, region: str, zone: str | None) -> PriceSeries:
        if instance_type != "p3.2xlarge":
            raise PriceNotFoundError(f"unknown instance type {instance_type!r}")
        return series

    return MarketData(
        on_demand_usd_per_hour=lambda t, r: Decimal("3.06"), spot_series=lookup, availability=availability
    )


def test_report_has_every_figure_and_the_oracle_is_cheapest() -> None:
    prices = spot_series(["1.0"] * 20 + ["0.5"] * 4)
    trace = AvailabilityTrace([1, 1, 1, 0] * 2000, gap_seconds=600, start=T0 + timedelta(days=7), name="t")
    jobs = [job(f"j{i}", submit_time=T0 + timedelta(days=8 + i, hours=i)) for i in range(5)]
    report = simulate(jobs, data(prices, trace))
    names = list(report.summaries)
    assert names == ["on_demand_now", "spot_now", "cheapest_window", "deadline_aware", "oracle"]
    oracle = report.summaries["oracle"]
    assert oracle.vs_oracle == Decimal(1) and oracle.deadline_misses == 0
    for summary in report.summaries.values():
        assert summary.jobs == 5
        if summary.deadline_misses == 0:
            assert summary.usd >= oracle.usd
    assert report.summaries["on_demand_now"].vs_on_demand == Decimal(1)
    assert report.summaries["on_demand_now"].spot_share == 0
    assert report.summaries["deadline_aware"].preemptions > 0  # capacity drops every 40 minutes
    assert report.summaries["deadline_aware"].deadline_misses == 0
    payload = report.to_json()
    assert set(payload["policies"]["oracle"]) == {  # type: ignore[index]
        "usd",
        "vs_oracle",
        "vs_on_demand",
        "deadline_misses",
        "preemptions",
        "spot_share",
        "late",
        "restart_guard_fired",
    }


def test_preemption_loses_work_back_to_the_checkpoint() -> None:
    prices = spot_series(["1.0"])
    # Capacity for 50 minutes, then gone for an hour: 5 ticks of work, checkpoint every 2 ticks keeps 4.
    trace = AvailabilityTrace(
        ([1] * 5 + [0] * 6) + [1] * 200, gap_seconds=600, start=T0 + timedelta(days=8), name="t"
    )
    j = job(restart_overhead_minutes=Decimal(0), checkpoint_minutes=Decimal(20))
    report = simulate([j], data(prices, trace), ["spot_now"])
    outcome = report.outcomes[[o.policy for o in report.outcomes].index("spot_now")]
    assert outcome.preemptions == 1
    # 12 ticks of work; 5 run, 1 lost, then 8 more after capacity returns: 13 spot ticks paid.
    assert outcome.spot_hours == pytest.approx(13 / 6)
    assert outcome.finished_hours == pytest.approx((5 + 6 + 8) / 6)


def test_electricity_jobs_use_power_draw() -> None:
    power = PriceSeries.from_points(
        [(T0 + timedelta(hours=h), "100" if h % 24 < 20 else "20") for h in range(24 * 14)],
        name="power",
        max_gap=timedelta(hours=1),
    )
    market = MarketData(on_demand_usd_per_hour=lambda t, r: Decimal(0), electricity_usd_per_mwh=power)
    j = job(
        power_kw=Decimal(10),
        submit_time=T0 + timedelta(days=8, hours=12),
        deadline_hours=Decimal(16),
        runtime_hours=Decimal(3),
        restart_overhead_minutes=Decimal(0),
    )
    report = simulate([j], market)
    # Now: 3 h x 10 kW x 100 USD/MWh = 3 USD; in the cheap night hours: 3 h x 10 kW x 20 USD/MWh = 0.60 USD.
    assert report.summaries["on_demand_now"].usd == Decimal("3.000000")
    assert report.summaries["oracle"].usd == Decimal("0.600000")
    assert report.summaries["cheapest_window"].usd == Decimal("0.600000")
    # A job past the file's hours read its last hour for every hour, in silence.
    late = replace(j, name="late", submit_time=T0 + timedelta(days=20))
    with pytest.raises(PriceNotFoundError, match=r"job 'late' runs from .* outside power, which covers"):
        simulate([late], market)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"deadline_hours": "1"}, "deadline_hours 1 is shorter than runtime_hours 2"),
        ({"submit_time": "2021-03-09T00:00:00"}, "submit_time 2021-03-09T00:00:00 has no time zone"),
        ({"runtime_hours": "0"}, "runtime_hours must be a number > 0, got '0'"),
        (
            {"deadline_hours": "1e9"},
            r"deadline_hours must be at most 87600 \(ten years\), got '1e9'",
        ),  # overflowed
        ({"checkpoint_minutes": "abc"}, "checkpoint_minutes must be a number >= 0, got 'abc'"),
        ({"region": ""}, "lacks region"),
        ({"priority": "urgent"}, "job 'nightly': priority 'urgent' is unknown; choose one of critical"),
        # One zone twice was replayed as two zones on one trace (a fail-over to the zone just left).
        (
            {"zones": "us-east-1a|us-east-1b|us-east-1a"},
            r"job 'nightly' lists zone\(s\) us-east-1a more than once in zones "
            r"us-east-1a\|us-east-1b\|us-east-1a",
        ),
        # Watts typed as kW: the ledger refused it, the simulator ran on it (a thousand times the emissions).
        (
            {"power_kw": "6500"},
            r"job 'nightly': power_kw='6500' is not a machine's power in kW \(0 to 1000\)",
        ),
    ],
)
def test_bad_jobs_name_the_value(row: dict[str, str], message: str) -> None:
    base = {
        "name": "nightly",
        "instance_type": "p3.2xlarge",
        "region": "us-east-1",
        "submit_time": "2021-03-09T00:00:00Z",
        "runtime_hours": "2",
        "deadline_hours": "8",
        "checkpoint_minutes": "30",
        "restart_overhead_minutes": "10",
    }
    with pytest.raises(ConfigurationError, match=message):
        Job.from_mapping({**base, **row})


def test_best_effort_jobs_may_finish_after_their_soft_deadline() -> None:
    # Spot has capacity only from hour 3 on; the job needs 2 h, its deadline is 4 h after submit.
    prices = spot_series(["1.0"])
    start = T0 + timedelta(days=8)
    trace = AvailabilityTrace([0] * 18 + [1] * 2000, gap_seconds=600, start=start, name="late capacity")
    common = {
        "runtime_hours": Decimal(2),
        "deadline_hours": Decimal(4),
        "restart_overhead_minutes": Decimal(0),
    }
    jobs = [job("normal", **common), job("best", priority="best_effort", **common)]
    report = simulate(jobs, data(prices, trace), ["deadline_aware"])
    by_job = {o.job: o for o in report.outcomes if o.policy == "deadline_aware"}
    assert by_job["normal"].met_deadline and not by_job["normal"].late and by_job["normal"].spot_hours < 2
    # The best-effort job waits for spot past its soft deadline (hard: 4 h + 2 h), all on spot, not a miss.
    best = by_job["best"]
    assert best.met_deadline and best.late and best.spot_hours == pytest.approx(2)
    assert best.usd < by_job["normal"].usd
    assert report.summaries["deadline_aware"].late == 1
    # A job that misses its deadline is a miss, not also late (spot_now waits for capacity past it).
    missed = simulate([jobs[0]], data(prices, trace), ["spot_now"]).summaries["spot_now"]
    assert (missed.deadline_misses, missed.late) == (1, 0)
    assert (
        Job.from_mapping(
            {
                "name": "n",
                "instance_type": "p3.2xlarge",
                "region": "us-east-1",
                "submit_time": "2021-03-09T00:00:00Z",
                "runtime_hours": "2",
                "deadline_hours": "8",
                "checkpoint_minutes": "30",
                "restart_overhead_minutes": "10",
                "priority": "Best-Effort",
            }
        ).priority
        == "best_effort"
    )


def test_unknown_instance_type_and_duplicate_names() -> None:
    with pytest.raises(PriceNotFoundError, match=r"unknown instance type 'p9\.mega'"):
        simulate([job(instance_type="p9.mega")], data(spot_series(["1"])))
    with pytest.raises(ConfigurationError, match="repeated: j"):
        simulate([job(), job()], data(spot_series(["1"])))
    # It fits in exact minutes (117 + 6 = 123): the grid's rounding is what fails it, so the fix is the tick.
    with pytest.raises(ConfigurationError, match="needs 13 ticks but its deadline is 12 ticks away; take a"):
        TickPlan.of(
            job(
                runtime_hours=Decimal("1.95"),
                deadline_hours=Decimal("2.05"),
                restart_overhead_minutes=Decimal(6),
            ),
            timedelta(minutes=10),
        )


def test_core_imports_no_airflow() -> None:
    modules = "costaware.core.simulate, costaware.cli.commands.simulate"
    code = f"import sys, {modules}; print('airflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.skipif(
    not (SHARED / "aws_spot_price_history").exists(), reason="shared data folder not beside the repo"
)
def test_cli_on_recorded_prices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = [
        {
            "name": f"n{i}",
            "instance_type": "g4dn.8xlarge",
            "region": "us-east-1",
            "submit_time": f"2021-04-{i + 1:02d}T02:00:00Z",
            "runtime_hours": 3,
            "deadline_hours": 12,
            "checkpoint_minutes": 30,
            "restart_overhead_minutes": 10,
        }
        for i in range(5)
    ]
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    prices = str(SHARED / "aws_spot_price_history" / "g4dn.8xlarge.json")
    assert main(["simulate", "--prices", prices, "--jobs", str(jobs_file), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    policies = payload["policies"]
    assert policies["oracle"]["vs_oracle"] == 1.0
    assert policies["deadline_aware"]["deadline_misses"] == 0
    assert policies["deadline_aware"]["vs_on_demand"] < 0.4  # g4dn.8xlarge spot is ~70% below on-demand
    assert main(["simulate", "--prices", prices, "--jobs", str(jobs_file), "--policy", "oracle"]) == 0
    assert "oracle" in capsys.readouterr().out
    csv_jobs = tmp_path / "jobs.csv"
    csv_jobs.write_text(
        "name,instance_type,region,submit_time,runtime_hours,deadline_hours,checkpoint_minutes,"
        "restart_overhead_minutes\nx,p9.mega,us-east-1,2021-04-01T00:00:00Z,1,8,30,5\n"
    )
    assert main(["simulate", "--prices", prices, "--jobs", str(csv_jobs)]) == 2
    assert "unknown instance type 'p9.mega'" in capsys.readouterr().err


def test_cli_by_trace_with_priorities(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prices = tmp_path / "prices.csv"
    rows = ["timestamp,region,availability_zone,instance_type,product_description,usd_per_hour"]
    rows += [
        f"{(T0 + timedelta(hours=h)).isoformat()},us-east-1,us-east-1a,p3.2xlarge,Linux/UNIX,0.92"
        for h in range(24 * 14)
    ]
    prices.write_text("\n".join(rows) + "\n")
    steady = tmp_path / "steady.json"
    steady.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 2000}))
    scarce = tmp_path / "scarce.json"
    scarce.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": ([1] * 3 + [0] * 9) * 200}))
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "name,instance_type,region,submit_time,runtime_hours,deadline_hours,checkpoint_minutes,"
        "restart_overhead_minutes,priority\n"
        "a,p3.2xlarge,us-east-1,2021-03-09T00:00:00Z,2,6,30,10,critical\n"
        "b,p3.2xlarge,us-east-1,2021-03-09T06:00:00Z,2,6,30,10,best_effort\n"
        "c,p3.2xlarge,us-east-1,2021-03-09T12:00:00Z,2,6,30,10,\n"
    )
    base = ["simulate", "--prices", str(prices), "--jobs", str(jobs)]
    traces = ["--availability", str(steady), "--availability", str(scarce)]
    assert main([*base, *traces, "--by-trace", "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload["traces"]) == {"steady", "scarce"}
    steady_da = payload["traces"]["steady"]["policies"]["deadline_aware"]
    scarce_da = payload["traces"]["scarce"]["policies"]["deadline_aware"]
    assert steady_da["spot_share"] == 1.0 and scarce_da["spot_share"] < 1.0
    assert steady_da["deadline_misses"] == scarce_da["deadline_misses"] == 0
    assert main([*base, *traces, "--by-trace"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["trace", "policy", "usd"]
    assert sum(line.startswith("scarce") for line in table.splitlines()) == 5
    assert main([*base, *traces]) == 2
    assert "2 availability traces given; add --by-trace" in capsys.readouterr().err
    assert main([*base, "--by-trace"]) == 2
    assert "--by-trace needs at least one --availability" in capsys.readouterr().err
    # Two files of one name: a row each (the second replaced the first's); the same file twice is refused.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "trace.json").write_text(steady.read_text())
    (tmp_path / "b" / "trace.json").write_text(scarce.read_text())
    same_name = ["--availability", str(tmp_path / "a" / "trace.json"), "--availability",
                 str(tmp_path / "b" / "trace.json")]  # fmt: skip
    assert main([*base, *same_name, "--by-trace", "--format", "json"]) == 0
    named = json.loads(capsys.readouterr().out)["traces"]
    assert set(named) == {str(tmp_path / "a" / "trace.json"), str(tmp_path / "b" / "trace.json")}
    assert main([*base, "--availability", str(steady), "--availability", str(steady), "--by-trace"]) == 2
    assert f"--availability {steady} is given more than once" in capsys.readouterr().err


def test_cli_zones_fail_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prices = tmp_path / "prices.csv"
    rows = ["timestamp,region,availability_zone,instance_type,product_description,usd_per_hour"]
    for zone, price in (("us-east-1a", "0.80"), ("us-east-1b", "0.95")):
        rows += [
            f"{(T0 + timedelta(hours=h)).isoformat()},us-east-1,{zone},p3.2xlarge,Linux/UNIX,{price}"
            for h in range(24 * 14)
        ]
    prices.write_text("\n".join(rows) + "\n")
    # Zone a (cheaper) has capacity for 30 minutes of every 2 hours; zone b always.
    flaky, steady = ([1] * 3 + [0] * 9) * 200, [1] * 2400
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": ([1] * 3 + [0] * 9) * 200}))
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 2400}))
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "name,instance_type,region,submit_time,runtime_hours,deadline_hours,checkpoint_minutes,"
        "restart_overhead_minutes,zones\n"
        "both,p3.2xlarge,us-east-1,2021-03-09T00:00:00Z,3,6,30,10,us-east-1a|us-east-1b\n"
        "only-a,p3.2xlarge,us-east-1,2021-03-09T08:00:00Z,3,6,30,10,us-east-1a\n"
    )
    zones = ["--zones", f"us-east-1a={a},us-east-1b={b}"]
    base = ["simulate", "--prices", str(prices), "--jobs", str(jobs), "--format", "json"]
    assert main([*base, *zones, "--policy", "deadline_aware"]) == 0
    payload = json.loads(capsys.readouterr().out)["policies"]
    assert payload["deadline_aware"]["deadline_misses"] == 0
    assert payload["deadline_aware"]["vs_oracle"] >= 1.0  # the oracle plans as if moving zones were free
    # The same jobs replayed one by one: failing over to zone b keeps the first job on spot.
    report = simulate(
        [
            Job.from_mapping(
                {
                    "name": n,
                    "instance_type": "p3.2xlarge",
                    "region": "us-east-1",
                    "submit_time": "2021-03-09T00:00:00Z",
                    "runtime_hours": "3",
                    "deadline_hours": "6",
                    "checkpoint_minutes": "30",
                    "restart_overhead_minutes": "10",
                    "zones": z,
                }
            )
            for n, z in (("both", "us-east-1a|us-east-1b"), ("a", "us-east-1a"))
        ],
        MarketData(
            on_demand_usd_per_hour=lambda t, r: Decimal("3.06"),
            spot_series=lambda t, r, z: PriceSeries.from_points(
                [(T0 + timedelta(hours=h), "0.80" if z == "us-east-1a" else "0.95") for h in range(24 * 14)],
                name=str(z),
            ),
            zone_availability={
                "us-east-1a": AvailabilityTrace(flaky, gap_seconds=600, start=T0, name="a"),
                "us-east-1b": AvailabilityTrace(steady, gap_seconds=600, start=T0, name="b"),
            },
        ),
        ["deadline_aware"],
    )
    by_job = {o.job: o for o in report.outcomes if o.policy == "deadline_aware"}
    assert by_job["both"].spot_hours == pytest.approx(by_job["both"].run_hours)
    assert by_job["a"].spot_hours < by_job["a"].run_hours and by_job["both"].usd < by_job["a"].usd
    assert main([*base, "--zones", "us-east-1a"]) == 2
    assert "--zones item 'us-east-1a' must be ZONE=TRACE" in capsys.readouterr().err
    # The jobs' zones column with one --availability trace and no --zones: every zone counted as always
    # available, and a trace with no capacity at all reported the jobs all on spot.
    never = tmp_path / "never.json"
    never.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0] * 2400}))
    assert main([*base, "--availability", str(never), "--availability-start", T0.isoformat()]) == 2
    assert (
        "job 'both' runs in zones us-east-1a|us-east-1b but us-east-1a, us-east-1b have no availability trace"
        in capsys.readouterr().err
    )


#: A jobs file's row of an on-premises job (its own power, no instance type or region).
POWER_JOB = {
    "name": "n1",
    "power_kw": "6.5",
    "submit_time": "2023-06-14T22:00:00Z",
    "runtime_hours": "3",
    "deadline_hours": "12",
    "checkpoint_minutes": "30",
    "restart_overhead_minutes": "5",
}


def test_a_power_job_needs_no_instance_type_or_region() -> None:
    # docs/carbon.md's power jobs were refused: "job 'n1' lacks instance_type, region".
    row = dict(POWER_JOB)
    job = Job.from_mapping(row)
    assert (job.power_kw, job.instance_type, job.region) == (Decimal("6.5"), "", "")
    with pytest.raises(ConfigurationError, match=r"lacks instance_type, region; .*\(or power_kw instead of"):
        Job.from_mapping({**row, "power_kw": ""})


def test_an_unknown_column_is_named_with_the_one_meant() -> None:
    # "availabilty_zone" or "prio" dropped the setting in silence: the job replayed unpinned, as normal.
    row = {**POWER_JOB, "name": "a", "availabilty_zone": "us-east-1f"}
    with pytest.raises(
        ConfigurationError,
        match=r"job 'a' has unknown column\(s\) 'availabilty_zone' \(did you mean 'availability_zone'",
    ):
        Job.from_mapping(row)


def test_a_job_done_on_its_deadline_is_not_late() -> None:
    # 6 ticks of 3 minutes end at 0.30000000000000004 hours: read as past a 0.3 h deadline, so "late".
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    prices = PriceSeries.from_points([(t0 - timedelta(days=30), "1.00")], name="spot")
    trace = AvailabilityTrace([0, 0, 0, 0, 1, 1] + [1] * 50, gap_seconds=180, start=t0, name="tr")
    data = MarketData(
        on_demand_usd_per_hour=lambda t, r: Decimal(3), spot_series=lambda t, r, z: prices, availability=trace
    )
    job = Job(
        name="j",
        instance_type="x",
        region="r",
        submit_time=t0,
        runtime_hours=Decimal("0.1"),
        deadline_hours=Decimal("0.3"),
        checkpoint_minutes=Decimal(3),
    )
    report = simulate([job], data, ["spot_now"])
    (outcome,) = [o for o in report.outcomes if o.policy == "spot_now"]
    assert outcome.met_deadline and outcome.finished_hours == pytest.approx(0.3)
    assert not outcome.late


def test_a_policy_decides_on_the_price_at_the_ticks_start_and_pays_the_ticks_mean() -> None:
    # It saw the mean of the tick's 10 minutes, 1.4 here: minutes of a future it could not know.
    from costaware.core.policies import Action, Policy, Situation
    from costaware.core.simulate import market_for, run_job

    submit = T0 + timedelta(days=8)
    prices = PriceSeries.from_points([(T0, "1.00"), (submit + timedelta(minutes=9), "5.00")], name="spot")
    data = MarketData(on_demand_usd_per_hour=lambda t, r: Decimal(9), spot_series=lambda t, r, z: prices)
    one = job(runtime_hours=Decimal("0.5"), restart_overhead_minutes=Decimal(0))
    tick = timedelta(minutes=10)
    plan = TickPlan.of(one, tick)
    seen: list[float | None] = []

    class Recorder(Policy):
        name = "recorder"

        def decide(self, situation: Situation) -> Action:
            seen.append(situation.spot_usd_per_hour)
            return Action.SPOT

    outcome = run_job(Recorder(), market_for(one, data, plan, tick), plan)
    assert seen == [1.0, 5.0, 5.0]
    assert outcome.usd == Decimal("1.900000")  # 1.4 (9 minutes at $1, 1 at $5) + 5 + 5, for 10 minutes each


def test_ratios_against_a_reference_below_zero_are_left_out() -> None:
    # Power paid to be drawn: the cheaper policy read the higher ratio.
    from costaware.core.simulate.report import _ratio

    assert _ratio(Decimal(-3), Decimal(-2)) is None and _ratio(Decimal(1), Decimal(0)) is None
    assert _ratio(Decimal(3), Decimal(2)) == Decimal("1.5000")


def test_a_tick_coarser_than_the_trace_sees_the_outages_inside_it() -> None:
    # Read at each tick's start only, a 10-minute outage between two 30-minute tick starts was never seen.
    trace = AvailabilityTrace([1, 0, 1] * 4, gap_seconds=600, start=T0, name="t")
    assert trace.ticks(T0, timedelta(minutes=30), 4) == [False] * 4
    assert trace.ticks(T0, timedelta(minutes=10), 3) == [True, False, True]
    assert trace.ticks(T0, timedelta(minutes=5), 4) == [True, True, False, False]
    whole = AvailabilityTrace([1, 1, 1, 0], gap_seconds=600, start=T0, name="w")
    assert whole.ticks(T0, timedelta(minutes=20), 2) == [True, False]
    # The zones' traces set the default tick too.
    fine = AvailabilityTrace([1] * 2000, gap_seconds=300, start=T0, name="fine")
    prices = PriceSeries.from_points([(T0, "0.5")], name="p")
    data = MarketData(
        on_demand_usd_per_hour=lambda t, r: Decimal(3),
        spot_series=lambda t, r, z: prices,
        zone_availability={"us-east-1a": fine, "us-east-1b": fine},
    )
    zoned = job(zones=("us-east-1a", "us-east-1b"), submit_time=T0, restart_overhead_minutes=Decimal(5))
    report = simulate([zoned], data, ["deadline_aware"])
    (outcome,) = [o for o in report.outcomes if o.policy == "deadline_aware"]
    assert outcome.finished_hours == pytest.approx(2 + 5 / 60)  # on 10-minute ticks the restart took 10


def test_a_coarse_tick_tells_a_policy_the_capacity_at_its_start_not_a_drop_inside_it() -> None:
    from costaware.core.policies import Situation, SpotNowPolicy
    from costaware.core.policies.base import Action
    from costaware.core.simulate import market_for, run_job

    # 10-minute samples on 30-minute ticks: capacity at the first tick's start, gone 20 minutes in.
    submit = T0 + timedelta(days=8)
    trace = AvailabilityTrace([1, 1, 0] + [1] * 300, gap_seconds=600, start=submit, name="t")
    market_data = data(spot_series(["0.9"]), trace)
    j = job(submit_time=submit, restart_overhead_minutes=Decimal(0), checkpoint_minutes=Decimal(60))
    tick = timedelta(minutes=30)
    plan = TickPlan.of(j, tick)
    told: list[bool] = []

    class Watching(SpotNowPolicy):
        def decide(self, situation: Situation) -> Action:
            told.append(situation.spot_available)
            return super().decide(situation)

    outcome = run_job(Watching(), market_for(j, market_data, plan, tick), plan)
    # Told the capacity of the whole tick, it saw the drop 20 minutes ahead and waited for the next tick.
    assert told[0] is True
    # It started on spot, lost the capacity inside the tick (paid, the work back to the checkpoint), resumed.
    assert outcome.preemptions == 1 and outcome.spot_hours == pytest.approx(2.5)
    assert outcome.finished_hours == pytest.approx(2.5)
    # The oracle plans on the same rules (simulate checks its replay against its solver) and stays the least.
    report = simulate(
        [j], market_data, ["spot_now", "deadline_aware", "availability_aware", "oracle"], tick=tick
    )
    oracle = report.summaries["oracle"].usd
    assert all(s.usd >= oracle for s in report.summaries.values() if s.deadline_misses == 0)


def test_under_the_carbon_objective_spot_is_taken_on_its_price_as_live() -> None:
    # Both markets emit the same per hour: compared on kg CO2e, spot was never cheaper, and the replayed
    # policies ran on on-demand ($12) where the live rule takes spot ($4).
    from costaware.core.carbon import Objective

    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    spot = PriceSeries.from_points([(t0 - timedelta(days=30), "1.00")], name="spot")
    grid = PriceSeries.from_points(
        [(t0 - timedelta(days=30) + timedelta(hours=h), "300") for h in range(24 * 32)], name="grid"
    )
    one = Job(name="j", instance_type="x", region="r", submit_time=t0, runtime_hours=Decimal(4),
              deadline_hours=Decimal(12))  # fmt: skip
    data = MarketData(
        on_demand_usd_per_hour=lambda t, r: Decimal(3),
        spot_series=lambda t, r, z: spot,
        carbon_g_per_kwh=grid,
        objective=Objective.parse("carbon"),
        power_kw_of=lambda t, r: 1.0,
    )
    report = simulate([one], data, ["deadline_aware", "cheapest_window"])
    for name in ("deadline_aware", "cheapest_window"):
        (outcome,) = [o for o in report.outcomes if o.policy == name]
        assert outcome.spot_hours == pytest.approx(4.0) and outcome.usd == Decimal("4.000000"), name
