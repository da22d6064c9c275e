"""The emissions of a remote training attempt: its instance type at full load over its billed seconds."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from costaware.adapters.carbon_data import bundled_carbon, power_model
from costaware.core.carbon import Machine
from costaware.training.remote import attempt_entry

IDENTITY = {"dag_id": "d", "run_id": "r", "task_id": "train", "try_number": 1, "map_index": -1}
ENDED = datetime(2023, 3, 1, 14, 0, tzinfo=timezone.utc)


def entry_for(region: str, **job: Any) -> Any:
    job = {
        "job_id": "j1",
        "instance_type": "m5.large",
        "market": "spot",
        "state": "succeeded",
        "billable_seconds": 7200,
        **job,
    }
    return attempt_entry(
        identity=IDENTITY,
        attempt=1,
        job=job,
        usd_per_hour=Decimal("0.05"),
        on_demand_usd_per_hour=Decimal("0.096"),
        region=region,
        backend="local",
        tags={},
    )


def test_an_attempt_in_a_mapped_region_gets_its_billed_hours_at_full_load() -> None:
    entry = entry_for("eu-central-1", ended_at=ENDED.timestamp())
    kw = power_model().power_kw(Machine(vcpus=2, memory_gib=8.0), 1.0)
    g = float(bundled_carbon("DE-LU").mean_usd_per_hour(ENDED.replace(hour=12), ENDED))
    assert entry.kwh == Decimal(repr(round(kw * 2, 6)))
    assert entry.kg_co2e == Decimal(repr(round(kw * 2 * g / 1000, 6)))
    assert "at full load (CPU use not measured)" in entry.carbon_method
    assert entry.carbon_source.startswith("grid DE-LU: ")
    assert entry.usd == Decimal("0.1")  # the cost is as before


def test_an_attempt_without_an_end_time_is_estimated_up_to_now_on_the_typical_year() -> None:
    entry = entry_for("eu-central-1")  # now: outside the bundled 2023 series
    assert entry.kg_co2e is not None and entry.kwh is not None
    assert "typical year" in entry.carbon_source and "no recorded intensity for " in entry.carbon_source
    unmapped = entry_for("us-east-1")  # no grid zone for the region: unknown, never 0
    assert unmapped.kg_co2e is None and unmapped.carbon_method.startswith("unknown: ")


def test_an_attempt_on_an_unknown_instance_type_is_recorded_with_unknown_emissions() -> None:
    entry = entry_for("eu-central-1", instance_type="custom.gpu", ended_at=ENDED.timestamp())
    assert entry.kg_co2e is None and entry.kwh is None
    assert entry.carbon_method.startswith("unknown: estimate failed: PriceNotFoundError")
    assert entry.usd == Decimal("0.1")


def test_an_attempt_counts_its_gpu_hours_and_its_trial_tag() -> None:
    """A budget's GPU-hour cap and ``--group-by trial`` see remote attempts (a g5.xlarge has one GPU)."""
    from costaware.training.attempt_effects import instance_gpus

    assert instance_gpus("g5.xlarge", "us-east-1") == 1
    assert instance_gpus("ml.p3.8xlarge", "us-east-1") == 4  # a SageMaker type as its EC2 twin
    assert instance_gpus("m5.large", "us-east-1") == instance_gpus("custom.gpu", "us-east-1") == 0
    job = {"job_id": "j1", "instance_type": "g5.xlarge", "market": "spot", "state": "succeeded"}
    entry = attempt_entry(
        identity=IDENTITY,
        attempt=1,
        job={**job, "billable_seconds": 5400},
        usd_per_hour=Decimal("0.4"),
        on_demand_usd_per_hour=Decimal("1.006"),
        region="us-east-1",
        backend="local",
        tags={"trial": "7", "study": "s"},
        gpus=Decimal(1),
    )
    assert entry.gpu_hours == Decimal("1.5") and entry.trial == "7"
    assert entry_for("us-east-1").gpu_hours == 0 and entry_for("us-east-1").trial is None


def test_the_note_says_why_on_demand_and_a_long_one_ends_on_a_whole_word() -> None:
    from costaware.core.ledger import MAX_NOTE_CHARS, clipped_note

    job = {"job_id": "j1", "instance_type": "m5.large", "market": "on_demand", "state": "succeeded"}
    entry = attempt_entry(
        identity=IDENTITY,
        attempt=3,
        job={**job, "billable_seconds": 60, "reason": "exited 0"},
        usd_per_hour=Decimal("0.096"),
        on_demand_usd_per_hour=Decimal("0.096"),
        region="us-east-1",
        backend="local",
        tags={},
        market_reason="no spot capacity by the latest safe start 2026-11-28T13:00:00+00:00",
    )
    assert entry.note == (
        "attempt 3, job j1 on local, 60.0 s billed: exited 0; "
        "on-demand: no spot capacity by the latest safe start 2026-11-28T13:00:00+00:00"
    )
    # A backend's failure text can run long: the note keeps whole words, never the first digits of a figure.
    long = "restart thrash in " + ", ".join(f"us-west-2{c}" for c in "abcd") + ": interval 600 s " * 40
    note = clipped_note(long)
    assert len(note) <= MAX_NOTE_CHARS and note.endswith("…") and long.startswith(note[:-1])
    assert note[:-1].split()[-1] in ("600", "s", "interval")
    assert clipped_note("short") == "short"


def test_an_attempts_note_masks_a_password_its_jobs_reason_quotes() -> None:
    # The job's reason went to the note as it was: on the Cost page, to everyone who reads the DAG.
    entry = entry_for(
        "us-east-1",
        state="failed",
        reason="connect postgresql://etl:hunter2@db/x failed",
        ended_at=ENDED.timestamp(),
    )
    assert "hunter2" not in (entry.note or "") and "postgresql://etl:***@db/x" in (entry.note or "")


def test_a_local_attempt_is_counted_on_the_workers_grid_a_cloud_one_on_its_regions(
    monkeypatch: Any,
) -> None:
    # A local job runs on the worker: its emissions read the plan's region's grid (unknown for us-east-1)
    # while the worker's own try beside it was counted on [costaware] worker_grid_zone.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_GRID_ZONE", "US-CAL-CISO")
    local = entry_for("us-east-1", ended_at=ENDED.timestamp())
    assert local.kg_co2e is not None and local.carbon_source.startswith("grid US-CAL-CISO: ")
    job = {"job_id": "j1", "instance_type": "m5.large", "market": "spot", "state": "succeeded"}
    cloud = attempt_entry(
        identity=IDENTITY,
        attempt=1,
        job={**job, "billable_seconds": 7200, "ended_at": ENDED.timestamp()},
        usd_per_hour=Decimal("0.05"),
        on_demand_usd_per_hour=Decimal("0.096"),
        region="us-east-1",
        backend="sagemaker",
        tags={},
    )
    assert cloud.kg_co2e is None and "us-east-1" in cloud.carbon_method  # the region's grid, not the worker's


def test_a_local_attempt_on_a_mistyped_worker_grid_zone_names_the_setting(
    monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The warning named the task's grid_zone, which a local attempt never reads: the typo is in the setting.
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_GRID_ZONE", "us-cal-ciso")
    with caplog.at_level(logging.WARNING, logger="costaware.adapters.emissions"):
        local = entry_for("us-east-1", ended_at=ENDED.timestamp())
    assert local.kg_co2e is None
    (warning,) = [r.getMessage() for r in caplog.records if "emissions unknown" in r.getMessage()]
    assert (
        "'us-cal-ciso', set by [costaware] worker_grid_zone (AIRFLOW__COSTAWARE__WORKER_GRID_ZONE)" in warning
    )
    assert "did you mean 'US-CAL-CISO'?" in warning


def test_the_note_gives_the_jobs_end_which_the_spools_drain_reads_back() -> None:
    # The entry's writing is not its job's end (a new try may bill an ended job hours later): the note says
    # when the job ended, and a note without it (older rows, a job billed before its end) gives None.
    from costaware.training.remote import end_of_attempt_note, job_of_attempt_note

    entry = entry_for("us-east-1", ended_at=ENDED.timestamp() + 0.25, reason="exited 0")
    assert (
        entry.note
        == "attempt 1, job j1 on local, 7200.0 s billed, ended 2023-03-01T14:00:00.250+00:00: exited 0"
    )
    assert end_of_attempt_note(entry.note) == ENDED + timedelta(milliseconds=250)
    assert job_of_attempt_note(entry.note) == "j1"
    assert end_of_attempt_note(entry_for("us-east-1").note) is None  # not ended: no end given
    assert end_of_attempt_note("attempt 2, job j1 on local, 60.0 s billed: exited 0") is None
    assert end_of_attempt_note("attempt 2, job j1 on local, 60.0 s billed, ended yesterday: x") is None


def test_a_local_attempts_warning_names_the_setting_as_settings_spells_it(
    monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The setting's name was written out again here, so that a rename in settings left this warning stale.
    from costaware import settings

    monkeypatch.setattr(settings, "WORKER_GRID_ZONE_SETTING", "[costaware] renamed_zone")
    monkeypatch.setenv("AIRFLOW__COSTAWARE__WORKER_GRID_ZONE", "us-cal-ciso")
    with caplog.at_level(logging.WARNING, logger="costaware.adapters.emissions"):
        entry_for("us-east-1", ended_at=ENDED.timestamp())
    (warning,) = [r.getMessage() for r in caplog.records if "emissions unknown" in r.getMessage()]
    assert "'us-cal-ciso', set by [costaware] renamed_zone" in warning
