"""A slot's hold on its time outside Airflow (``run_trial(settle_as=...)``): held, kept and recorded."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

import optuna
import pytest
from test_tuning_slot_hold import slot_holds
from test_tuning_trial import FakeClock, InstantTrainer, SteppedMeter, study_spec

from costaware import Ledger
from costaware.core.tuning import StudySpec, TuningCaps
from costaware.training.tuning import EntryOwner, create_study, run_trial
from costaware.training.tuning.study import STOP_ATTR


def _study(tmp_path: Any, spec: StudySpec) -> tuple[str, Ledger]:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ledger = Ledger.from_url(url)
    create_study(url, ledger, spec)
    return url, ledger


def _slot(url: str, ledger: Ledger, spec: StudySpec, number: int, meter: Any, **kwargs: Any) -> Any:
    return run_trial(
        storage_url=url, ledger=ledger, study_name=spec.study_name, trainer=InstantTrainer,
        holder=f"slot-{number}", slot=number, meter=meter,
        settle_as=EntryOwner(dag_id=spec.study_name, run_id="r1", map_index=number), **kwargs,
    )  # fmt: skip


def _gpu_study(name: str, max_gpu_hours: str) -> StudySpec:
    """Free compute (a price of 0) on one GPU: max_gpu_hours is what binds."""
    caps = TuningCaps.create(max_usd=Decimal(1), max_trials=3, max_gpu_hours=max_gpu_hours)
    spec = study_spec(name, max_usd="1", max_trials=3, fallback_trial_seconds=36.0)
    return replace(spec, usd_per_hour=Decimal(0), gpus=Decimal(1), caps=caps)


def test_a_load_longer_than_the_slots_hold_holds_it_again_and_the_trial_runs(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The study's trials took 700 s to load, past the hold's 600 s: the hold expired, was not grown, and the
    # slot said "a budget set since it was made holds nothing of it" and stopped the $10 study for good.
    import costaware.training.tuning.trial as trial_module

    clock = FakeClock(monkeypatch)
    spec = replace(
        study_spec("slowstore", max_usd="10.00", max_trials=5, fallback_trial_seconds=2.0),
        usd_per_hour=Decimal("0.36"),
    )
    url, ledger = _study(tmp_path, spec)
    load_study = trial_module.load_study

    def slow_load(*args: Any, **kwargs: Any) -> Any:
        clock.seconds += 700.0  # a far study store
        return load_study(*args, **kwargs)

    monkeypatch.setattr(trial_module, "load_study", slow_load)
    with caplog.at_level("WARNING"):
        result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=0.05)

    assert result.ran, result.reason
    assert STOP_ATTR not in optuna.load_study(study_name=spec.study_name, storage=url).user_attrs
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "expired at 2026-12-01T00:10:00+00:00, while the study loaded" in said
    assert "a budget set since" not in said
    # The expired hold was replaced by one for the 700 s so far, which the trial's reservation replaced.
    assert [h["status"] for h in slot_holds(url, "slot-1")] == ["replaced", "replaced", "settled"]
    (study,) = ledger.usage(spec.budget_scope)
    assert study.spent_usd == Decimal("0.07") and study.reserved_usd == 0


def test_a_slot_whose_load_raises_records_its_time_against_its_hold_and_holds_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The study store went away mid-load: the $0.55 held before the load stayed open 600 s, blocking
    # $0.55 of a $1 study, and the 0.35 s the slot ran were recorded nowhere.
    import costaware.training.tuning.trial as trial_module

    spec = study_spec("flaky", max_usd="1.00", max_trials=5, fallback_trial_seconds=2.0)
    url, ledger = _study(tmp_path, spec)
    meter = SteppedMeter()
    read = trial_module.stopped_before_load

    def slow_read(*args: Any, **kwargs: Any) -> Any:
        meter.now += 0.05
        return read(*args, **kwargs)

    def broken_load(*args: Any, **kwargs: Any) -> Any:
        meter.now += 0.3
        raise ConnectionError("study store went away mid-load")

    monkeypatch.setattr(trial_module, "stopped_before_load", slow_read)
    monkeypatch.setattr(trial_module, "load_study", broken_load)
    with pytest.raises(ConnectionError, match="went away"):
        _slot(url, ledger, spec, 1, meter)

    assert ledger.open_reservations() == []
    (entry,) = ledger.entries()
    (hold,) = slot_holds(url, "slot-1")
    assert (entry["trial"], entry["outcome"], entry["usd"]) == ("open", "failed", Decimal("0.35"))
    assert entry["reservation_id"] == hold["id"] and hold["status"] == "settled"
    assert "ConnectionError: study store went away mid-load" in entry["note"]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit], ids=["ctrl-c", "exit"])
def test_a_slot_interrupted_while_it_waits_for_money_records_its_time_against_its_hold(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, stop: type[BaseException]
) -> None:
    # Only an Exception was recorded: Ctrl-C (or a driver's sys.exit) during the wait left the slot's hold
    # open until it expired, keeping the study's money from other slots, and its time recorded nowhere.
    from types import SimpleNamespace

    import costaware.training.tuning.reservations as reservations_module

    spec = study_spec("interrupted", max_usd="30.00", max_trials=5, fallback_trial_seconds=20.0)
    url, ledger = _study(tmp_path, spec)
    # Another trial holds $20: the slot's $20.50 does not fit until it settles, so the slot waits.
    other = ledger.reserve(spec.budget_scope, Decimal("20.00"), holder="other-trial")
    meter = SteppedMeter()

    def interrupted_sleep(seconds: float) -> None:
        meter.now += 0.25
        raise stop("interrupted while waiting for money")

    clock = SimpleNamespace(sleep=interrupted_sleep, monotonic=reservations_module.time.monotonic)
    monkeypatch.setattr(reservations_module, "time", clock)
    with pytest.raises(stop):
        _slot(url, ledger, spec, 1, meter, wait_poll_seconds=0.05)

    assert [r.id for r in ledger.open_reservations()] == [other.id]
    (entry,) = ledger.entries()
    assert (entry["trial"], entry["outcome"], entry["usd"]) == ("open", "failed", Decimal("0.25"))
    assert entry["reservation_id"] in {h["id"] for h in slot_holds(url, "slot-1") if h["status"] == "settled"}
    assert f"{stop.__name__}: interrupted while waiting for money" in entry["note"]


@pytest.mark.parametrize("money_left", [True, False], ids=["money-left", "money-spent"])
def test_a_slot_that_finds_the_study_stopped_reads_it_once_and_holds_and_loads_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, money_left: bool
) -> None:
    # The stop was read after the slot's hold (settings read, hold made, settings read again for the stop):
    # the skipped entry cost several times the one read; where the study's money was spent the hold was
    # refused and the whole study was loaded on each call, just to find its recorded stop.
    import costaware.training.tuning.study as study_module
    import costaware.training.tuning.trial as trial_module

    spec = study_spec("full", max_usd="100.00", max_trials=1, fallback_trial_seconds=1.0)
    url, ledger = _study(tmp_path, spec)
    _slot(url, ledger, spec, 0, SteppedMeter())  # its one trial
    assert not _slot(url, ledger, spec, 9, SteppedMeter()).ran  # records the stop (max_trials)
    if not money_left:
        (usage,) = ledger.usage(spec.budget_scope)
        ledger.reserve(spec.budget_scope, usage.left_usd, holder="other")
    reads: list[str] = []
    loads: list[str] = []
    study_attrs, load_study = study_module._study_attrs, trial_module.load_study
    monkeypatch.setattr(study_module, "_study_attrs", lambda *a: reads.append("attrs") or study_attrs(*a))
    monkeypatch.setattr(
        trial_module, "load_study", lambda *a, **k: loads.append("load") or load_study(*a, **k)
    )
    reservations_before = len(slot_holds(url, "slot-1"))

    result = _slot(url, ledger, spec, 1, SteppedMeter())

    assert not result.ran and not result.goes_on and "max_trials" in result.reason
    assert reads == ["attrs"] and loads == []
    assert len(slot_holds(url, "slot-1")) == reservations_before == 0
    (skipped,) = [e for e in ledger.entries() if e["map_index"] == 1]
    assert skipped["outcome"] == "skipped" and skipped["reservation_id"] is None


def test_a_waiting_slot_refused_gpu_hours_is_told_to_raise_max_gpu_hours(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another trial holds 0.49 of 0.5 GPU-hours: the slot waits until its time passes the 0.01 left. Refused
    # GPU-hours, it was told to raise max_usd, which binds nothing on free compute.
    clock = FakeClock(monkeypatch)
    spec = _gpu_study("owned", max_gpu_hours="0.5")
    url, ledger = _study(tmp_path, spec)
    ledger.reserve(
        spec.budget_scope, Decimal(0), gpu_hours=Decimal("0.49"), holder="other", ttl=timedelta(seconds=600)
    )

    result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=1.0)

    assert not result.ran and result.goes_on and clock.seconds == 35
    assert "needs 0.010139 GPU-hours: raise the study's max_gpu_hours (0.5" in result.reason
    assert "max_usd" not in result.reason


def test_a_waiting_slot_on_gpus_is_held_again_rarely_not_at_each_poll(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ledger grows a hold's dollars only: each 1 s poll of a slot waiting on a GPU study held it again
    # for a little more GPU time, closing the old hold as replaced: 35 rows for a 35 s wait, thousands an
    # hour. It holds 600 s more GPU time with them now, as far as the budget has room (here 0.01 GPU-hours).
    clock = FakeClock(monkeypatch)
    spec = _gpu_study("owned", max_gpu_hours="0.5")
    url, ledger = _study(tmp_path, spec)
    ledger.reserve(
        spec.budget_scope, Decimal(0), gpu_hours=Decimal("0.49"), holder="other", ttl=timedelta(seconds=600)
    )

    result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=1.0)

    assert not result.ran and result.goes_on and clock.seconds == 35  # the same wait as before
    # Held again as its headroom ran out, each time with half the room past its need (all of it starved
    # another slot's own hold): a few times in 35 polls, at most once per halving of the 36 s of room.
    statuses = [h["status"] for h in slot_holds(url, "slot-1")]
    assert statuses[-1] == "settled" and set(statuses[:-1]) == {"replaced"} and len(statuses) <= 8
    (study,) = ledger.usage(spec.budget_scope)
    assert study.cap_gpu_hours is not None
    assert study.spent_gpu_hours + study.reserved_gpu_hours <= study.cap_gpu_hours


def test_a_slot_refused_its_hold_before_the_load_says_what_it_held_with_units(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Refused before the load it said "its time so far (0.0 s loading the study)": nothing had loaded, and
    # the ten-read estimate it asked for was not said; on GPUs the amount it needed had no unit.
    import costaware.training.tuning.trial as trial_module

    spec = _gpu_study("gpu", max_gpu_hours="0.5")
    url, ledger = _study(tmp_path, spec)
    ledger.reserve(
        spec.budget_scope, Decimal(0), gpu_hours=Decimal("0.5"), holder="other", ttl=timedelta(seconds=60)
    )
    meter = SteppedMeter()
    read = trial_module.stopped_before_load

    def slow_read(*args: Any, **kwargs: Any) -> Any:
        meter.now += 0.002
        return read(*args, **kwargs)

    monkeypatch.setattr(trial_module, "stopped_before_load", slow_read)
    result = _slot(url, ledger, spec, 1, meter)

    assert not result.ran
    assert (
        "slot 1 runs no trial: its time so far (0.002 s, up to reading the study's settings) and loading the "
        "study's trials (estimated at 0.02 s, 10 times that read), 0.022 s at the study's $0/h: $0.00 and "
        "0.000007 GPU-hours on its 1 GPU, cannot be held"
    ) in result.reason
    assert "needs 0.000007 GPU-hours: raise the study's max_gpu_hours (0.5" in result.reason
    assert "loading the study)" not in result.reason


def test_a_waiting_slots_gpu_hour_headroom_leaves_room_for_another_slots_own_hold(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slot 0 waits beside a trial holding 0.45 of 0.5 GPU-hours; held again for its wait, its hold took 600 s
    # of GPU-hours of headroom as far as the budget had room: all of the 0.05 left. Slot 1, started then, was
    # refused the hold of its own time so far (1 s: 0.000278 GPU-hours) and went on at once, neither waiting
    # nor arbitrating, the study's GPU-hours not spent. The headroom takes at most half the room past its
    # need now: slot 1 holds its time, and the room left pays its trial, within the cap.
    import optuna

    from costaware.training.tuning.arbitration import WaitingSlots
    from costaware.training.tuning.reservations import (
        SLOT_HOLD_SECONDS,
        cover_gpu_hours,
        gpu_hours_for,
        hold_slot_time,
    )

    clock = FakeClock(monkeypatch)
    spec = _gpu_study("owned", max_gpu_hours="0.5")
    url, ledger = _study(tmp_path, spec)
    ledger.reserve(
        spec.budget_scope, Decimal(0), gpu_hours=Decimal("0.45"), holder="other", ttl=timedelta(seconds=600)
    )
    waiting = hold_slot_time(
        ledger, spec.budget_scope.as_dict(), Decimal(0), holder="slot-0", run_id="r1", dag_id="owned",
        seconds=1.0, purpose="slot 0", gpu_hours=gpu_hours_for(1.0, spec.gpus),
    )  # fmt: skip
    assert waiting is not None
    WaitingSlots(optuna.load_study(study_name="owned", storage=url), "slot-0").mark(waiting.id)
    need = gpu_hours_for(31.0, spec.gpus)
    kept = cover_gpu_hours(
        ledger, waiting.id, need, 0, "r1", headroom=gpu_hours_for(SLOT_HOLD_SECONDS, spec.gpus)
    )
    (held,) = [h for h in slot_holds(url, "slot-0") if h["id"] == kept]
    assert need < held["gpu_hours"] < Decimal("0.05")  # some headroom, not all the room

    result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=1.0, seconds_already_used=1.0)

    assert result.ran, result.reason
    assert result.trial is not None and result.trial.reservation_id is not None
    assert slot_holds(url, "slot-1")  # its own time was held, replaced by its trial's reservation
    (study,) = ledger.usage(spec.budget_scope)
    assert study.cap_gpu_hours is not None
    assert study.spent_gpu_hours + study.reserved_gpu_hours <= study.cap_gpu_hours


def _waiting_slot_0_with_headroom(url: str, ledger: Ledger, spec: StudySpec, clock: Any) -> str:
    """Slot 0 waiting for money on a GPU study, its hold held again for 31 s with 600 s of headroom."""
    import optuna

    from costaware.training.tuning.arbitration import WaitingSlots
    from costaware.training.tuning.reservations import (
        SLOT_HOLD_SECONDS,
        cover_gpu_hours,
        gpu_hours_for,
        hold_slot_time,
    )

    waiting = hold_slot_time(
        ledger, spec.budget_scope.as_dict(), Decimal(0), holder="slot-0", run_id="r1", dag_id=spec.study_name,
        seconds=1.0, purpose="slot 0", gpu_hours=gpu_hours_for(1.0, spec.gpus),
    )  # fmt: skip
    assert waiting is not None
    kept = cover_gpu_hours(
        ledger, waiting.id, gpu_hours_for(31.0, spec.gpus), 0, "r1",
        headroom=gpu_hours_for(SLOT_HOLD_SECONDS, spec.gpus),
    )  # fmt: skip
    WaitingSlots(optuna.load_study(study_name=spec.study_name, storage=url), "slot-0").mark(kept)
    clock.seconds += 5.0  # slot 0's hold made first: slot 1 is the one to give way
    return kept


def test_a_slot_giving_way_for_gpu_hours_says_gpu_hours_not_dollars(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Refused GPU-hours at $0/h beside a waiting slot's hold, slot 1 gave way saying "$1.00 of room (cap
    # $1.00, spent $0.00, held for others $0.00, ...) for the $0.00 its trial needs": room it had. GPU-hours
    # are written as the house's other texts write them (format_gpu_hours): "cap 0.5", not "cap 0.500000".
    clock = FakeClock(monkeypatch)
    spec = replace(_gpu_study("owned", max_gpu_hours="0.5"), fallback_trial_seconds=1438.0)
    url, ledger = _study(tmp_path, spec)
    _waiting_slot_0_with_headroom(url, ledger, spec, clock)

    result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=1.0, seconds_already_used=1.0)

    assert not result.ran and result.goes_on
    assert (
        "slot 1 runs no trial and gives way: budget 'project=owned,study=owned/total' has 0.324721 GPU-hours "
        "of room (cap 0.5, spent 0, held for others 0.175279, 0.175279 of it by other slots "
        "waiting for money, no trial's) for the 0.399862 GPU-hours its trial needs; the slot that waited "
        "first (slot-0) goes on waiting"
    ) in result.reason
    assert "$" not in result.reason


def test_a_slot_whose_expired_hold_cannot_be_held_again_after_the_load_says_it_expired(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The study took 700 s to load, past the hold's 600 s, and another holder took $9.99 of the $10 meanwhile:
    # the hold could not be held again, and the skipped entry was settled against it with a warning that
    # "the budgets it is in had no room for the rest", though it had expired and held nothing.
    import costaware.training.tuning.trial as trial_module

    clock = FakeClock(monkeypatch)
    spec = replace(
        study_spec("slowstore", max_usd="10.00", max_trials=5, fallback_trial_seconds=2.0),
        usd_per_hour=Decimal("0.36"),
    )
    url, ledger = _study(tmp_path, spec)
    load_study = trial_module.load_study

    def slow_load(*args: Any, **kwargs: Any) -> Any:
        clock.seconds += 700.0  # a far study store, while another holder reserves nearly all the money
        ledger.reserve(spec.budget_scope, Decimal("9.99"), holder="other", ttl=timedelta(seconds=3600))
        return load_study(*args, **kwargs)

    monkeypatch.setattr(trial_module, "load_study", slow_load)
    with caplog.at_level("WARNING"):
        result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=0.05)

    assert not result.ran and result.goes_on, result.reason
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "had no room for the rest" not in said
    (hold,) = slot_holds(url, "slot-1")
    assert (
        f"slot's skipped entry of $0.07 (700.0 s at the study's $0.36/h) is settled against its hold "
        f"{hold['id']}, which expired at 2026-12-01T00:10:00+00:00 and could not be held again: it held none "
        "of it; the time was spent and is recorded"
    ) in said


def test_a_slot_that_finds_its_study_stopped_after_a_long_load_says_its_hold_expired_not_refused(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The study took 700 s to load, past the hold's 600 s, and was stopped meanwhile: the slot skipped without
    # trying to hold its time again, yet the warning said the hold "could not be held again".
    import costaware.training.tuning.trial as trial_module

    clock = FakeClock(monkeypatch)
    spec = replace(
        study_spec("slowstop", max_usd="10.00", max_trials=5, fallback_trial_seconds=2.0),
        usd_per_hour=Decimal("0.36"),
    )
    url, ledger = _study(tmp_path, spec)
    load_study = trial_module.load_study

    def slow_load(*args: Any, **kwargs: Any) -> Any:
        clock.seconds += 700.0  # a far study store, while the study is stopped
        stop = {"reason": "budget", "message": "study stopped: its budget is spent"}
        optuna.load_study(study_name=spec.study_name, storage=url).set_user_attr(STOP_ATTR, stop)
        return load_study(*args, **kwargs)

    monkeypatch.setattr(trial_module, "load_study", slow_load)
    with caplog.at_level("WARNING"):
        result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=0.05)

    assert not result.ran, result.reason
    said = " ".join(r.getMessage() for r in caplog.records)
    (hold,) = slot_holds(url, "slot-1")
    assert (
        f"slot's skipped entry of $0.07 (700.0 s at the study's $0.36/h) is settled against its hold "
        f"{hold['id']}, which expired at 2026-12-01T00:10:00+00:00 before the entry was recorded: it held "
        "none of it; the time was spent and is recorded"
    ) in said
    assert "could not be held again" not in said


def test_a_trials_reservation_holds_its_gpu_hours_rounded_up_as_a_slots_hold_does(tmp_path: Any) -> None:
    # The trial's reservation rounded its GPU-hours to the nearest micro-GPU-hour (4 s on 1 GPU: 0.001111,
    # short of 0.0011111...), where the slot's hold beside it rounds up (gpu_hours_for): both round up now.
    from costaware.training.tuning.reservations import gpu_hours_for, reserve_trial_cost

    spec = _gpu_study("owned", max_gpu_hours="0.5")
    _, ledger = _study(tmp_path, spec)

    held = reserve_trial_cost(ledger, spec, lambda: 4.0, "slot-1", "r1", 1, poll_seconds=1.0)

    assert held.gpu_hours == gpu_hours_for(4.0, spec.gpus) == Decimal("0.001112")


def test_a_slot_whose_hold_expired_in_its_ask_and_cannot_be_held_again_says_it_tried(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The trial's ask outran the slot's hold (700 s, past its 600 s) while another holder took $9.99 of the
    # $10: the wait found the hold expired and tried to hold its time again, refused. The skipped entry's
    # warning said the hold expired "before the entry was recorded", as if nothing had been tried.
    import costaware.training.tuning.trial as trial_module

    clock = FakeClock(monkeypatch)
    spec = replace(
        study_spec("slowask", max_usd="10.00", max_trials=5, fallback_trial_seconds=2.0),
        usd_per_hour=Decimal("0.36"),
    )
    url, ledger = _study(tmp_path, spec)
    reserve_trial_cost = trial_module.reserve_trial_cost

    def slow_ask(*args: Any, **kwargs: Any) -> Any:
        clock.seconds += 700.0  # the ask waited that long (a locked store), while another holder reserved
        ledger.reserve(spec.budget_scope, Decimal("9.99"), holder="other", ttl=timedelta(seconds=3600))
        return reserve_trial_cost(*args, **kwargs)

    monkeypatch.setattr(trial_module, "reserve_trial_cost", slow_ask)
    with caplog.at_level("WARNING"):
        result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=0.05)

    assert not result.ran and result.goes_on, result.reason
    said = " ".join(r.getMessage() for r in caplog.records)
    (hold,) = slot_holds(url, "slot-1")
    assert (
        f"is settled against its hold {hold['id']}, which expired at 2026-12-01T00:10:00+00:00 and could "
        "not be held again: it held none of it; the time was spent and is recorded"
    ) in said
    assert "before the entry was recorded" not in said


def test_a_slot_whose_hold_could_not_be_held_again_and_whose_entry_raised_settles_that_hold_once_asked_again(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # As above, and the skipped entry's first write raised: the error path asked reservation_to_settle for
    # the slot's hold again, which no longer finds an expired one, so the entry was recorded against no
    # hold, the expired hold was left open, and nothing said it could not be held again.
    import costaware.training.tuning.trial as trial_module

    clock = FakeClock(monkeypatch)
    spec = replace(
        study_spec("slowask", max_usd="10.00", max_trials=5, fallback_trial_seconds=2.0),
        usd_per_hour=Decimal("0.36"),
    )
    url, ledger = _study(tmp_path, spec)
    reserve_trial_cost = trial_module.reserve_trial_cost
    record_skipped_slot = trial_module.record_skipped_slot
    writes: list[str] = []

    def slow_ask(*args: Any, **kwargs: Any) -> Any:
        clock.seconds += 700.0  # the ask waited that long (a locked store), while another holder reserved
        ledger.reserve(spec.budget_scope, Decimal("9.99"), holder="other", ttl=timedelta(seconds=3600))
        return reserve_trial_cost(*args, **kwargs)

    def write_fails_once(*args: Any, **kwargs: Any) -> Any:
        writes.append("asked")
        if len(writes) == 1:
            raise OSError("ledger disk full")
        return record_skipped_slot(*args, **kwargs)

    monkeypatch.setattr(trial_module, "reserve_trial_cost", slow_ask)
    monkeypatch.setattr(trial_module, "record_skipped_slot", write_fails_once)
    with caplog.at_level("WARNING"), pytest.raises(OSError, match="disk full"):
        _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=0.05)

    (hold,) = slot_holds(url, "slot-1")
    (entry,) = ledger.entries()
    assert (entry["trial"], entry["outcome"]) == ("open", "failed")
    assert entry["reservation_id"] == hold["id"] and hold["status"] != "open"
    assert [r.holder for r in ledger.open_reservations()] == ["other"]
    assert (
        f"is settled against its hold {hold['id']}, which expired at 2026-12-01T00:10:00+00:00 and could "
        "not be held again: it held none of it; the time was spent and is recorded"
    ) in caplog.text


@pytest.mark.parametrize("slot_0_poll_seconds", [0.0, 1.0])
def test_a_second_waiting_slot_whose_trial_fits_beside_the_first_slots_need_waits_for_its_spare(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, slot_0_poll_seconds: float
) -> None:
    # Slot 0 waits first, its hold 31 s of GPU time plus 600 s of headroom (0.175279 of a 0.5 GPU-hour cap).
    # Slot 1's 0.486250 GPU-hour trial fits beside slot 0's need (0.008612) and margin (10 polls of slot 0's
    # pause), not beside its headroom: slot 1 gave way at once, the study's GPU-hours unspent. Slot 0's record
    # says its spare now: slot 1 waits, slot 0 gives the spare up at its next poll (others wait), and slot 1's
    # trial runs, within the cap. The margin was once counted as a spare: slot 0 never gave it up, and with
    # slot 0 polling each second, slot 1 waited, its need grew, and it gave way anyway.
    import optuna

    from costaware.training.tuning import reservations
    from costaware.training.tuning.arbitration import WaitingSlots
    from costaware.training.tuning.reservations import gpu_hours_for, hold_wait_gpu_hours

    clock = FakeClock(monkeypatch)
    spec = replace(_gpu_study("owned", max_gpu_hours="0.5"), fallback_trial_seconds=1740.0)
    url, ledger = _study(tmp_path, spec)
    kept = _waiting_slot_0_with_headroom(url, ledger, spec, clock)
    need = gpu_hours_for(31.0, spec.gpus)
    margin = gpu_hours_for(10 * slot_0_poll_seconds, spec.gpus)
    first = WaitingSlots(optuna.load_study(study_name=spec.study_name, storage=url), "slot-0")
    spare = ledger.unpaid(kept)[1] - need - margin
    first.mark(kept, spare)
    polled = []
    sleep = reservations.time.sleep

    def slot_0_polls_as_slot_1_sleeps(seconds: float) -> None:
        nonlocal kept
        # slot 0's next polls, with slot 1's record among the waiting slots'
        kept, left = hold_wait_gpu_hours(
            ledger, kept, need, 0, "r1", spec.gpus, others_wait=True, poll_seconds=slot_0_poll_seconds
        )
        first.mark(kept, left)
        polled.append(left)
        assert len(polled) < 20, "slot 1 still waits for a spare slot 0 does not give up"
        sleep(seconds)

    monkeypatch.setattr(reservations.time, "sleep", slot_0_polls_as_slot_1_sleeps)
    result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=1.0, seconds_already_used=1.0)

    assert spare > 0 and polled == [Decimal(0)]  # slot 0 gave up its spare, and slot 1 ran at once after
    assert result.ran, result.reason
    (held,) = [h for h in slot_holds(url, "slot-0") if h["id"] == kept]
    assert held["status"] == "open" and held["gpu_hours"] == need + margin
    (study,) = ledger.usage(spec.budget_scope)
    assert study.cap_gpu_hours is not None
    assert study.spent_gpu_hours + study.reserved_gpu_hours <= study.cap_gpu_hours


def test_a_waiting_slots_margin_beside_other_waiting_slots_is_a_holds_ttl_at_most(tmp_path: Any) -> None:
    # 10 polls of a 120 s pause on 8 GPUs held 2.67 GPU-hours past the need, more than the 600 s of
    # headroom a slot holds alone (1.33): the margin is capped at that headroom, and it is no spare.
    from costaware.training.tuning.reservations import SLOT_HOLD_SECONDS, gpu_hours_for, hold_wait_gpu_hours

    spec = replace(_gpu_study("owned", max_gpu_hours="100"), gpus=Decimal(8))
    _, ledger = _study(tmp_path, spec)
    hold = ledger.reserve(
        spec.budget_scope, Decimal(0), gpu_hours=Decimal("0.01"), holder="slot-0", ttl=timedelta(seconds=600)
    )
    need = gpu_hours_for(31.0, spec.gpus)

    kept, spare = hold_wait_gpu_hours(
        ledger, hold.id, need, 0, None, spec.gpus, others_wait=True, poll_seconds=120.0
    )

    assert ledger.unpaid(kept)[1] == need + gpu_hours_for(SLOT_HOLD_SECONDS, spec.gpus)
    assert spare == 0


def test_a_waiting_slot_holds_no_gpu_hour_headroom_while_another_slot_waits(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from itertools import pairwise

    # Alone, a waiting slot holds 600 s of GPU-hours past its need so that it is held again rarely. Kept while
    # another slot waited beside it, that spare made the other slot give way though its trial fit beside this
    # slot's need: slot 1 waits beside a trial and slot 0's record, and its holds hold its need alone.
    import optuna

    from costaware.training.tuning.arbitration import WaitingSlots
    from costaware.training.tuning.reservations import gpu_hours_for, hold_slot_time

    clock = FakeClock(monkeypatch)
    spec = replace(_gpu_study("owned", max_gpu_hours="0.5"), fallback_trial_seconds=900.0)
    url, ledger = _study(tmp_path, spec)
    ledger.reserve(
        spec.budget_scope, Decimal(0), gpu_hours=Decimal("0.45"), holder="other", ttl=timedelta(seconds=600)
    )
    other = hold_slot_time(
        ledger, spec.budget_scope.as_dict(), Decimal(0), holder="slot-0", run_id="r1", dag_id="owned",
        seconds=1.0, purpose="slot 0", gpu_hours=gpu_hours_for(1.0, spec.gpus),
    )  # fmt: skip
    assert other is not None
    WaitingSlots(optuna.load_study(study_name="owned", storage=url), "slot-0").mark(other.id)

    result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=30.0)

    assert not result.ran
    held = [h["gpu_hours"] for h in slot_holds(url, "slot-1")]
    # Held for its first wait: that wait (30 s) and the 0.5 s of slack and at most 10 polls more, not the
    # 600 s it holds alone; and each hold after it holds at most that margin more.
    margin = gpu_hours_for(10 * 30.0, spec.gpus)
    assert gpu_hours_for(30.5, spec.gpus) <= held[1] <= gpu_hours_for(30.5, spec.gpus) + margin, held
    assert all(later - earlier <= margin for earlier, later in pairwise(held[1:])), held


def test_a_waiting_slot_whose_room_another_run_takes_before_its_ask_holds_its_need_alone(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Beside another waiting slot, slot 1 asks its need and its margin from a room it read before the ask.
    # A trial elsewhere took all of that room but its need (and 10 micro-GPU-hours) in between: the refusal
    # stopped the slot, saying its 0.008473 GPU-hours were refused with 0.008483 left. It holds its need.
    import optuna

    from costaware.training.tuning import gpu_hour_holds
    from costaware.training.tuning.arbitration import WaitingSlots
    from costaware.training.tuning.reservations import gpu_hours_for, hold_slot_time

    clock = FakeClock(monkeypatch)
    spec = replace(_gpu_study("owned", max_gpu_hours="0.5"), fallback_trial_seconds=900.0)
    url, ledger = _study(tmp_path, spec)
    ledger.reserve(
        spec.budget_scope, Decimal(0), gpu_hours=Decimal("0.45"), holder="other", ttl=timedelta(seconds=600)
    )
    other = hold_slot_time(
        ledger, spec.budget_scope.as_dict(), Decimal(0), holder="slot-0", run_id="r1", dag_id="owned",
        seconds=1.0, purpose="slot 0", gpu_hours=gpu_hours_for(1.0, spec.gpus),
    )  # fmt: skip
    assert other is not None
    WaitingSlots(optuna.load_study(study_name="owned", storage=url), "slot-0").mark(other.id)
    cover_gpu_hours, gpu_hour_room = gpu_hour_holds.cover_gpu_hours, gpu_hour_holds._gpu_hour_room
    needs: list[Decimal] = []
    taken: list[Decimal] = []

    def cover(ledger_: Any, hold_id: str, gpu_hours: Decimal, *args: Any, **kwargs: Any) -> str:
        needs.append(gpu_hours)
        return cover_gpu_hours(ledger_, hold_id, gpu_hours, *args, **kwargs)

    def room_then_a_trial_elsewhere_takes_it(ledger_: Any, held: Any, run_id: Any) -> Decimal | None:
        room = gpu_hour_room(ledger_, held, run_id)
        if not taken and room is not None:
            taken.append(room - needs[-1] - Decimal("0.000010"))
            ledger_.reserve(
                spec.budget_scope, Decimal(0), gpu_hours=taken[-1], holder="trial-elsewhere",
                ttl=timedelta(seconds=600),
            )  # fmt: skip
        return room

    monkeypatch.setattr(gpu_hour_holds, "cover_gpu_hours", cover)
    monkeypatch.setattr(gpu_hour_holds, "_gpu_hour_room", room_then_a_trial_elsewhere_takes_it)
    result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=30.0)

    assert taken and taken[0] > 0
    # Held, the need went on: refused later, it is for a need past the room left (no trial room now).
    assert f"uses {needs[0]} GPU-hours" not in result.reason, result.reason
    assert len(needs) > 1 and needs[1] > needs[0]
    held = [h["gpu_hours"] for h in slot_holds(url, "slot-1")]
    assert needs[0] in held, (needs, held)  # the race's hold: its need alone


def test_a_slot_waiting_beside_another_is_held_again_once_in_several_polls_not_at_each(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Holding its need alone while another slot waited, its need outgrew the hold at every poll: each poll
    # closed the hold as replaced and reserved a new one (178 polls, 179 rows). It holds 10 polls more now.
    import optuna

    from costaware.training.tuning.arbitration import WaitingSlots
    from costaware.training.tuning.reservations import gpu_hours_for, hold_slot_time

    clock = FakeClock(monkeypatch)
    spec = replace(_gpu_study("owned", max_gpu_hours="0.5"), fallback_trial_seconds=900.0)
    url, ledger = _study(tmp_path, spec)
    ledger.reserve(
        spec.budget_scope, Decimal(0), gpu_hours=Decimal("0.45"), holder="other", ttl=timedelta(seconds=600)
    )
    other = hold_slot_time(
        ledger, spec.budget_scope.as_dict(), Decimal(0), holder="slot-0", run_id="r1", dag_id="owned",
        seconds=1.0, purpose="slot 0", gpu_hours=gpu_hours_for(1.0, spec.gpus),
    )  # fmt: skip
    assert other is not None
    WaitingSlots(optuna.load_study(study_name="owned", storage=url), "slot-0").mark(other.id)

    result = _slot(url, ledger, spec, 1, clock.monotonic, wait_poll_seconds=1.0)

    assert not result.ran and clock.seconds >= 100, clock.seconds  # a hundred polls or more
    rows = slot_holds(url, "slot-1")
    # Its first hold, one in each 10 polls (1 s each) and the last: 20 rows for 178 polls, not 179.
    assert len(rows) <= clock.seconds / 10 + 3, (len(rows), clock.seconds)
    (study,) = ledger.usage(spec.budget_scope)
    assert study.cap_gpu_hours is not None
    assert study.spent_gpu_hours + study.reserved_gpu_hours <= study.cap_gpu_hours
