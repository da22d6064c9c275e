"""The remote training's pause watch on carbon values running on over the work left, as it values a resume."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from spot_history import now, write_history

from costaware.triggers.remote_price_watch import watch_event

pytestmark = pytest.mark.usefixtures("clock")


def watch(tmp_path: Path, carbon: Path, mode: str) -> dict[str, Any]:
    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00", cheap_hour_utc=(now().hour + 12) % 24)
    return {
        "objective": "carbon",
        "carbon": str(carbon),
        "mode": mode,
        "observe": {
            "availability_zones": None,
            "zone_availability": None,
            "availability_zone": None,
            "availability": None,
            "prices": str(prices),
            "instance_type": "p3.2xlarge",
            "region": "us-east-1",
            "aws_conn_id": None,
            "ttl_seconds": 300.0,
            "products": ["Linux/UNIX"],
            "availability_start": None,
        },
        "on_demand_usd_per_hour": "3.06",
        "history_days": 28,
        "latest_resume": (now() + timedelta(hours=10)).isoformat(),
        "remaining_hours": "3",
        "restart_overhead_minutes": 5.0,
        "priority": "best_effort",
    }


def test_a_clean_hour_before_dirty_ones_does_not_keep_a_job_running_through_them(tmp_path: Path) -> None:
    # Now 100 gCO2e/kWh, the next two hours 500, then 300: the 3 hours left, run on from now, average
    # 333-400 against 300 for a resume in 3 hours (and a 5-minute restart). Valued at the instant (100),
    # running on looked cleanest, and the job ran on through the dirty hours.
    carbon = tmp_path / "made-up.csv"
    hour = now().replace(minute=0, second=0)
    lines = ["timestamp_utc,g_co2eq_per_kwh_lca\n"]
    for h in range(-48, 49):
        value = {0: 100, 1: 500, 2: 500}.get(h, 300)
        lines.append(f"{(hour + timedelta(hours=h)).strftime('%Y-%m-%dT%H:%M:%SZ')},{value}\n")
    carbon.write_text("".join(lines))
    paused = watch_event(watch(tmp_path, carbon, "pause"), {"k": "v"}, now=now())
    assert paused is not None and "kg CO2e/hour now" in paused["pause"]
    # A paused job is not resumed into the dirty hours either: it waits for the start at 300.
    assert watch_event(watch(tmp_path, carbon, "resume"), {"k": "v"}, now=now()) is None


def running_job_watch(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    half_hourly: Callable[[int], int],
    *,
    deadline_hours: float,
    priority: str,
) -> tuple[Any, list[float]]:
    """A pause-watching trigger of a 3-hour carbon job on spot, and its run seconds (``ran[0]``) to set.

    ``half_hourly(k)``: the intensity of the half hour ``k`` half hours from now (5-minute restart,
    5-minute checkpoints, the spot price flat: carbon alone decides).
    """
    import costaware.adapters.compute.base as compute
    from costaware.adapters.compute.base import TRAINED_RUNS_SECONDS, JobState, JobStatus
    from costaware.training.attempts import AttemptState, Current
    from costaware.training.pauses import price_watch
    from costaware.training.plan import PriceWatch, RemotePlan
    from costaware.triggers.remote_training import RemoteTrainingJobTrigger

    carbon = tmp_path / "half-hourly.csv"
    lines = ["timestamp_utc,g_co2eq_per_kwh_lca\n"]
    for half_hour in range(-96, 97):
        at = now() + timedelta(minutes=30 * half_hour)
        lines.append(f"{at.strftime('%Y-%m-%dT%H:%M:%SZ')},{half_hourly(half_hour)}\n")
    carbon.write_text("".join(lines))
    prices = tmp_path / "prices.csv"
    write_history(prices, current="1.00", cheap_hour_utc=(now().hour + 12) % 24)
    plan = RemotePlan(
        backend="local",
        instance_type="p3.2xlarge",
        region="us-east-1",
        on_demand_usd_per_hour="3.06",
        first_market="spot",
        deadline=now() + timedelta(hours=deadline_hours),
        checkpoint_every_seconds=300.0,
        watch=PriceWatch(
            prices=str(prices),
            runtime_hours="3",
            priority=priority,
            restart_overhead_minutes=5.0,
            history_days=28,
            objective="carbon",
            carbon=str(carbon),
        ),
    )
    state = AttemptState(plan=plan, current=Current(attempt=1, job_id="train-a1", market="spot"))
    ran = [0.0]

    class Running:
        def poll(self, job_id: str) -> JobStatus:
            # As the local backend reports a running job: its run time is exact.
            metrics = {TRAINED_RUNS_SECONDS: [ran[0]]}
            return JobStatus(
                job_id, JobState.RUNNING, ran[0], "spot", "p3.2xlarge", "Training", metrics=metrics
            )

    monkeypatch.setattr(compute, "open_backend", lambda name, options: Running())
    trigger = RemoteTrainingJobTrigger(
        "local",
        {},
        "train-a1",
        state.to_json(),
        poll_interval=60,
        price_watch=price_watch(state, "pause", poll_interval=60),
    )
    return trigger, ran


def test_the_pause_watch_values_running_on_over_the_work_left_now_not_at_the_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 3-hour job 2.5 h in, with its last clean half hour (100 gCO2e/kWh) before two dirty hours (500),
    # 300 otherwise. Its work left is 3 - (2.5 h - 5 min restart - 5 min checkpoint) = 40 min: running on
    # meets 100 then 10 minutes of 500. Valued over the 3 hours left at its submit (400 g/kWh on average,
    # against 300 later), it was paused, losing a restart and up to a checkpoint interval.
    trigger, ran = running_job_watch(
        tmp_path,
        monkeypatch,
        lambda k: 100 if k == 0 else 500 if 1 <= k <= 4 else 300,
        deadline_hours=12,
        priority="best_effort",
    )
    # Just submitted, the 3 hours run through the dirty ones: paused, as before.
    paused = trigger.poll_once(now())
    assert paused is not None and "3.00 h left" in paused["pause"]
    # An hour in, the work left now is 3 - (1 h - 10 min) after a pause, 3 - (1 h - 5 min) running on:
    # still mostly dirty hours, paused on it.
    ran[0] = 3600.0
    paused = trigger.poll_once(now())
    assert paused is not None and "2.08 h left" in paused["pause"] and "for 2.17 h after" in paused["pause"]
    ran[0] = 2.5 * 3600
    assert trigger.poll_once(now()) is None


def test_a_job_late_in_its_run_may_pause_until_the_latest_resume_of_its_work_left_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Deadline in 3 h, a 3-hour job 2.5 h in (40 min left): its latest resume is 2 h 15 min from now, not the
    # 5 minutes ago of its submit's 3 hours of work (then it never paused, and ran on through an hour of
    # 500 g/kWh with 100 to come an hour later).
    trigger, ran = running_job_watch(
        tmp_path,
        monkeypatch,
        lambda k: 500 if 0 <= k <= 1 else 100 if k >= 2 else 300,
        deadline_hours=3,
        priority="normal",
    )
    ran[0] = 2.5 * 3600
    paused = trigger.poll_once(now())
    assert paused is not None and "0.58 h left" in paused["pause"] and "for 0.67 h after" in paused["pause"]


def test_a_job_minutes_from_its_end_is_valued_over_what_running_on_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 3 h in: 5 minutes left running on (the restart of its start aside), 10 after a pause (a checkpoint
    # interval lost) and a 5-minute restart. At 500 gCO2e/kWh now against 200 later, running on emits
    # 500 x 5 min, a pause 200 x 15 min: it runs on. Valued over the 10 minutes a pause leaves (500 x 10 min),
    # it paused, and the restart emitted more than the 5 minutes left.
    trigger, ran = running_job_watch(
        tmp_path, monkeypatch, lambda k: 500 if k == 0 else 200, deadline_hours=12, priority="best_effort"
    )
    ran[0] = 3 * 3600.0
    assert trigger.poll_once(now()) is None
    # Its first half hour, 2.5 h left either way give or take 5 minutes: paused for the cleaner hours.
    ran[0] = 1800.0
    paused = trigger.poll_once(now())
    assert paused is not None and "2.58 h left" in paused["pause"]


@pytest.mark.parametrize("zone", ["GB", "PL"])
@pytest.mark.parametrize("first_hour", [-2, 3, 15 * 24 + 3], ids=["covering", "starting-after", "on-day-15"])
@pytest.mark.parametrize("deadline_hours", [10, 16 * 24], ids=["hours-ahead", "past-two-weeks"])
def test_the_watch_follows_an_import_as_far_as_its_decision_reads_and_decides_as_on_a_years_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str, first_hour: int, deadline_hours: int
) -> None:
    # Each look of the watch read its zone's import followed a year (8,787 points, 0.04-0.20 s) to value
    # runs starting up to its latest resume. Followed as far as those runs read, it sees the same values
    # (a zone with no typical year too: an hour no file covers is read in clock hours however far it reads).
    import costaware.adapters.spot_market as spot_market
    import costaware.triggers.remote_price_watch as price_watch
    from costaware.cli import main

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    first = now().replace(minute=0, second=0) + timedelta(hours=first_hour)
    rows = [f"{first + timedelta(hours=i):%Y-%m-%dT%H:%M:%SZ},{100 + 37 * (i % 7)}\n" for i in range(48)]
    imported = tmp_path / f"{zone}.csv"
    imported.write_text("timestamp_utc,g_co2eq_per_kwh_lca\n" + "".join(rows))
    assert main(["carbon", "import", str(imported), "--zone", zone]) == 0
    real_intensity = spot_market.carbon_intensity
    real_event = price_watch.price_event
    read: list[Any] = []
    seen: list[dict[str, Any]] = []

    def reading(*args: Any, **kwargs: Any) -> Any:
        read.append(real_intensity(*args, **kwargs))
        return read[-1]

    def as_before(carbon: str | None, *, region: str | None, objective: Any, **_: Any) -> Any:
        # The watch's call before it said where its hours end: a year from the wall clock.
        read.append(real_intensity(carbon, region=region, objective=objective))
        return read[-1]

    def deciding(*args: Any, **kwargs: Any) -> Any:
        seen.append({k: kwargs[k] for k in ("forecast_starts", "g_co2e_per_kwh", "usd_per_hour")})
        return real_event(*args, **kwargs)

    monkeypatch.setattr(price_watch, "price_event", deciding)
    for mode in ("pause", "resume"):
        looked = {
            **watch(tmp_path, imported, mode),
            "carbon": zone,
            "latest_resume": (now() + timedelta(hours=deadline_hours)).isoformat(),
            "run_on_hours": "2.5",
        }
        at = now()
        monkeypatch.setattr(spot_market, "carbon_intensity", as_before)
        year_event = price_watch.watch_event(looked, {"k": "v"}, now=at)
        monkeypatch.setattr(spot_market, "carbon_intensity", reading)
        event = price_watch.watch_event(looked, {"k": "v"}, now=at)
        year_read, bounded_read = read[-2:]
        assert len(bounded_read.points) < len(year_read.points)
        assert seen[-1]["forecast_starts"] and seen[-1]["g_co2e_per_kwh"] is not None
        assert event == year_event
        assert seen[-1] == seen[-2]
